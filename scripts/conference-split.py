#!/usr/bin/env python3
"""Where a conference ADU's latency goes, per ADU, from the packets (docs/failover.md, "The
base layer's median above the floor, split from the packets"). Reads a lab run folder made
with `lowtide lab run ... --pcap`: adus.csv, messages.csv (the floor probe) and
pcap/trial-N/{forward.pcap,start.txt,variants.txt} (every packet leaving the forward
bottleneck, on the wall clock, and the trial's start on that clock).

The conference's TCP connection is found in the pcap by its hello ("LWTD"; with failover the
connection that carried the most bytes), its byte stream rebuilt from the packets that left
the bottleneck (a dropped packet never leaves it, so the first copy of a byte to leave is
the one delivered) and decoded into lowtide frames, which gives each ADU's bytes in the
stream. For each ADU captured in the measured window and delivered:

  lowtide's queue    capture to its last byte's write into the kernel (adus.csv written_ms)
  unsent ahead       the write to the departure of the last stream byte before the ADU's first
                     (its first copy: a retransmitted byte left late; bytes already in the
                     kernel, unsent: MIN_BUF's extra segments, or in flight ahead waiting
                     for the window)
  own bytes          then to its own last byte's departure (the window's room for its own
                     segments)
  own repair         a retransmitted last byte: its departure after the first copy's (at
                     most the next byte's first copy's departure: a lower bound)
  network            departure to leaving the bottleneck: the floor probe's one-way latency
                     at that moment (propagation, the shared queue)
  in-order wait      leaving the bottleneck to the moment every earlier byte had left it too
                     (a loss repair)
  receiver           then to the application's receipt (the receiver's TCP and lowtide)

A byte's departure from the sender is its bottleneck exit minus the floor probe's latency
then (the probe crosses the same FIFO queue; its own serialization is 0.03 ms against 1 ms
for a full segment at 12 Mbit/s, which lands in "own bytes"). The parts add up to the
latency: the means add up exactly, the medians need not.

With --worst N it also lists the N latest ADUs with their parts (the p99.9 of a bucket is
among them), and whether their own bytes first left in a retransmission.

Usage: conference-split.py RUN_DIR [--variant NAME] [--from-s 10] [--to-s 55] [--worst N]
(The pcap reading, the stream's rebuilding and lowtide's frames: lowtide_pcap.py.)
"""
import argparse
import bisect
import csv
import glob
import os
import struct
import sys
from collections import defaultdict

from lowtide_pcap import FLOOR, MSS, Floor, Stream, lowtide_connections, messages, packets
from tail_common import quantile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("--variant")
    ap.add_argument("--from-s", type=float, default=10.0)
    ap.add_argument("--to-s", type=float, default=55.0)
    ap.add_argument("--worst", type=int, default=0)
    a = ap.parse_args()
    for need in ("adus.csv", "messages.csv"):
        if not os.path.exists(f"{a.run}/{need}"):
            sys.exit(f"{a.run}/{need} is missing: not a conference run folder")
    with open(f"{a.run}/adus.csv") as f:
        all_adus = list(csv.DictReader(f))
    with open(f"{a.run}/messages.csv") as f:
        floor_rows = [r for r in csv.DictReader(f) if r["series"] == FLOOR]
    trials = sorted(glob.glob(f"{a.run}/pcap/trial-*"), key=lambda p: int(p.rsplit("-", 1)[1]))
    if not trials:
        sys.exit(f"{a.run}/pcap: no trial folders (run the lab with --pcap)")
    for trial in trials:
        with open(f"{trial}/variants.txt") as f:
            names = [n.strip() for n in f if n.strip()]
        if a.variant and a.variant not in names:
            continue
        if len(names) != 1:
            print(f"{trial}: {len(names)} variants side by side; the split takes one a trial")
            continue
        v = names[0]
        with open(f"{trial}/start.txt") as f:
            start_wall = float(f.read())
        tcp, probe_exits = packets(f"{trial}/forward.pcap", start_wall)
        # The floor probes of this trial (messages.csv counts trials from 0, the folders from 1).
        n = trial.rsplit("-", 1)[1]
        floor_probes = Floor(floor_rows, int(n) - 1)
        floor = floor_probes.probes
        if not floor:
            print(f"{trial} ({v}): no floor probe delivered in this trial: no split")
            continue
        floor_at = floor_probes.at_exit
        # Calibration: a probe's receipt minus its exit from the bottleneck (the receiver's
        # UDP socket and thread); large or negative means the clocks do not line up.
        cal = floor_probes.receipt_minus_exit(probe_exits)
        conns = list(lowtide_connections(tcp).items())
        if not conns:
            print(f"{trial} ({v}): no lowtide connection in the pcap")
            continue
        key, segs = max(conns, key=lambda c: sum(len(p[3]) for p in c[1]))
        st = Stream(segs)
        # The ACKs of that connection as they reached the sender (the reverse link's exit).
        back, _ = packets(f"{trial}/reverse.pcap", start_wall)
        src, sport, dst, dport = key
        acks = sorted(t for t, _, _, _ in back.get((dst, dport, src, sport), []))
        msgs = messages(st.bytes, st.complete)
        adus = {}
        for (_, seq), (s0, e0, imp, hdr, _) in msgs.items():
            if hdr and len(hdr) >= 10 and hdr[0] == 1:
                frame, layer = struct.unpack("!I", hdr[5:9])[0], hdr[9]
                adus[(frame, layer)] = (s0, e0, imp)
        rows = [r for r in all_adus if r["series"] == v and r.get("video", "0") == "0"
                and a.from_s <= float(r["capture_s"]) < a.to_s and r["latency_ms"]
                and r["written_ms"]]
        print(f"== {v} ({trial}): {len(conns)} lowtide connection(s), {len(st.bytes)} bytes in "
              f"the one used, {len(msgs)} messages decoded; probe receipt - exit p50 "
              f"{quantile(cal, 0.5):.2f} ms, p99 {quantile(cal, 0.99):.2f} ms ({len(cal)} probes)")
        parts = ["lowtide's queue", "unsent ahead", "own bytes", "own repair", "network",
                 "in-order wait", "receiver", "(kernel: both)"]
        every = []  # (latency ms, capture s, layer, parts ms, own bytes retransmitted)
        for name, which in (("base", lambda l: l == 0), ("enhancement", lambda l: l > 0)):
            split, lat, ahead, missing, gaps = defaultdict(list), [], [], 0, []
            by_adu = []
            for r in rows:
                layer = int(r["layer"])
                if not which(layer):
                    continue
                m = adus.get((int(r["frame"]), layer))
                if not m or m[1] > st.complete:
                    missing += 1
                    continue
                s0, e0, _ = m
                c = float(r["capture_s"])
                w = c + float(r["written_ms"]) / 1e3
                arr = c + float(r["latency_ms"]) / 1e3
                x = st.exit(e0 - 1)
                fl = floor_at(x)
                prev, first, dep = st.departures(s0, e0, w, floor_at)
                got = st.in_order(e0 - 1)
                vals = [w - c, max(prev - w, 0.0), first - max(w, prev), dep - first, fl,
                        got - x, arr - got, dep - w]
                for p, val in zip(parts, vals):
                    split[p].append(val * 1e3)
                lat.append((arr - c) * 1e3)
                by_adu.append(((arr - c) * 1e3, [v * 1e3 for v in vals]))
                every.append(((arr - c) * 1e3, c, layer, [v * 1e3 for v in vals],
                              any(p[3] for p in st.pieces_of(s0, e0))))
                # Bytes of the stream before this ADU that had not left the sender at its
                # write: departures grow with the offset but for repairs, so search by offset.
                lo, hi = 0, s0
                while lo < hi:
                    mid = (lo + hi) // 2
                    xm = st.exit(mid)
                    if xm - floor_at(xm) <= w:
                        lo = mid + 1
                    else:
                        hi = mid
                ahead.append((s0 - lo) / MSS)
                # A check of the departure estimate: the kernel sends a segment at its write
                # or when an ACK frees the window, so a right estimate lies just after one of
                # the two (an estimate off by X ms lies anywhere in the ACK interval).
                i = bisect.bisect_right(acks, dep + 0.0005) - 1
                last = max(w, acks[i]) if i >= 0 else w
                if last <= dep + 0.0005:
                    gaps.append((dep - last) * 1e3)
            if not lat:
                continue
            fp = quantile([l for _, l in floor], 0.5)
            print(f"{name}: {len(lat)} ADUs ({missing} not found in the pcap); latency p50 "
                  f"{quantile(lat, 0.5):.1f} ms, the trial's floor p50 {fp:.1f} ms, above it "
                  f"{quantile(lat, 0.5) - fp:.1f} ms")
            # The median's own split: the mean parts of the ADUs whose latency lies within
            # 2.5 ms of the median (these add up to their mean latency).
            mid = quantile(lat, 0.5)
            near = [v for l, v in by_adu if abs(l - mid) <= 2.5]
            print("  %-16s %7s %7s %7s %7s %12s" % ("part", "mean", "p50", "p90", "p99",
                                                   "at the p50"))
            for k, p in enumerate(parts):
                xs = split[p]
                print("  %-16s %7.1f %7.1f %7.1f %7.1f %12.1f" % (
                    p, sum(xs) / len(xs), quantile(xs, 0.5), quantile(xs, 0.9),
                    quantile(xs, 0.99), sum(v[k] for v in near) / max(len(near), 1)))
            print(f"  (at the p50: the mean of the {len(near)} ADUs within 2.5 ms of the median)")
            if gaps:
                print("  its last byte's estimated departure after the write or ACK that sent it:"
                      " p50 %.2f, p90 %.2f ms (ACKs %.1f ms apart at the median)" % (
                          quantile(gaps, 0.5), quantile(gaps, 0.9),
                          quantile([b - a for a, b in zip(acks, acks[1:])], 0.5) * 1e3))
            print("  segments of the stream ahead of it unsent at its write: p50 %.1f, p90 %.1f,"
                  " none for %d%%" % (quantile(ahead, 0.5), quantile(ahead, 0.9),
                                      100 * sum(x < 0.05 for x in ahead) / len(ahead)))
        if every:
            # Per importance bucket (layer), the p99.9 of the latency and of the path's parts
            # alone (own repair + network + in-order wait: every other part is >= 0, so a
            # lower bound).
            print("  per layer: ADUs, latency p99.9, the path's parts alone (own repair + network"
                  " + in-order wait) p99.9, ms")
            for layer in sorted({e[2] for e in every}):
                es = [e for e in every if e[2] == layer]
                print(f"  layer {layer}: {len(es)}, {quantile([e[0] for e in es], 0.999):.1f}, "
                      f"{quantile([e[3][3] + e[3][4] + e[3][5] for e in es], 0.999):.1f}")
        if a.worst and every:
            print(f"  the {a.worst} latest ADUs: capture s, layer, latency, then the parts (ms) "
                  "queue, unsent ahead, own bytes, own repair, network, in-order wait, receiver;"
                  " own bytes retransmitted")
            for lat_ms, c, layer, vals, rx in sorted(every, key=lambda e: -e[0])[:a.worst]:
                print(f"  {c:.3f} {layer} {lat_ms:.1f} "
                      + " ".join(f"{x:.1f}" for x in vals[:7]) + (" yes" if rx else " no"))


if __name__ == "__main__":
    main()
