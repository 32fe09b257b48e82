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

With a duplicate lane (a connection whose first frame is DATA_FIRST) every connection's
stream is decoded and each ADU split along the copy the receiver delivered: the first to be
whole and in order. A lane copy's write is not recorded, so its parts start at the capture
(its wait in lowtide's lane queue lands in "unsent ahead" or "own bytes"). For the base it
then prints which copy won, each copy's parts, by its largest part why the lane's copy came
later when the primary's won, how many lane copies waited for an ACK of the lane (its
window), the share the lane won per 5 s, and the lane's window as its packets show it (the
flight at departures an ACK released, the ACKs the receiver delayed, the repairs).

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

from lowtide_pcap import (FLOOR, MSS, Floor, Stream, ack_numbers, first_frame,
                          lowtide_connections, messages, packets)
from tail_common import quantile


def split_copy(cst, s0, e0, c, w, arr, floor_at):
    """One copy's parts (s): capture c, its write w, the application's receipt arr (for a
    copy not delivered: its own in-order time, so the receiver part is 0); and its last
    byte's departure."""
    x = cst.exit(e0 - 1)
    prev, first, dep = cst.departures(s0, e0, w, floor_at)
    got = cst.in_order(e0 - 1)
    arr = got if arr is None else arr
    return [w - c, max(prev - w, 0.0), first - max(w, prev), dep - first, floor_at(x),
            got - x, arr - got, dep - w], dep


def lane_view(c, lat_ms, cps, on_lane, stream_of, lane_keys, acks_of, w_primary, floor_at):
    """A base ADU of a run with a duplicate lane, as each connection carried it: per kind
    (lane, primary) the earliest copy's time to be whole in order at the receiver (ms after
    capture) and its parts (ms; the lane's write is not recorded, so its written = capture);
    for the lane copy also the gap from the lane ACK before its last byte's departure to
    that departure (ms; small when the lane's window released it)."""
    out = {"c": c, "lat": lat_ms, "on_lane": on_lane, "lane": None, "primary": None}
    for kind in ("lane", "primary"):
        mine = [cp for cp in cps if (cp[0] in lane_keys) == (kind == "lane")]
        if not mine:
            continue
        k, s0, e0 = min(mine, key=lambda cp: stream_of[cp[0]].in_order(cp[2] - 1))
        cst = stream_of[k]
        w = c if kind == "lane" else w_primary
        vals, dep = split_copy(cst, s0, e0, c, w, None, floor_at)
        view = {"ready": (cst.in_order(e0 - 1) - c) * 1e3, "parts": [v * 1e3 for v in vals]}
        if kind == "lane":
            acks = acks_of[k]
            i = bisect.bisect_right(acks, dep) - 1
            view["after_ack"] = (dep - acks[i]) * 1e3 if i >= 0 and acks[i] > c else None
        out[kind] = view
    return out


def lane_window(segs, acks, floor_at):
    """The lane's congestion window as its packets show it: its flight (bytes departed, not
    yet acknowledged at the sender, in segments) at each departure within 1.5 ms of an ACK's
    arrival (the window released it: the flight is then the window); the ACKs that came late
    after the packets they newly cover (over 25 ms beyond the fastest: the receiver's delayed
    ACK), and how many covered a lone packet; the lane's retransmissions."""
    syn = [x for x in segs if x[2] & 0x02]
    if not syn:
        return "  the lane's window: no SYN in the pcap"
    isn = syn[0][1] + 1
    ak = sorted((t, (a - isn) % 2**32) for t, a in acks)
    at, acked, m = [], [], 0
    for t, a in ak:
        if a < 2**31:
            m = max(m, a)
        at.append(t)
        acked.append(m)
    data = sorted((t - floor_at(t), (seq - isn) % 2**32 + len(pl), t)
                  for t, seq, _, pl in segs if pl)
    top, clocked = 0, []
    for dep, end, _ in data:
        top = max(top, end)
        j = bisect.bisect_right(at, dep) - 1
        if j >= 0 and dep - at[j] <= 0.0015:
            clocked.append((top - acked[j]) / MSS)
    exit_of = {}
    for _, end, x in data:
        exit_of.setdefault(end, x)
    ends = sorted(exit_of)
    delays, prev = [], 0
    for t, a in zip(at, acked):
        if a <= prev:
            continue
        cov = ends[bisect.bisect_right(ends, prev):bisect.bisect_right(ends, a)]
        if cov:
            delays.append(((t - exit_of[cov[-1]]) * 1e3, len(cov)))
        prev = a
    fast = quantile([d for d, _ in delays], 0.05)
    late = [(d, n) for d, n in delays if d > fast + 25]
    # a lost packet never leaves the bottleneck: its repair fills a hole in the stream
    repairs = sum(1 for p in Stream(segs).pieces if p[3])
    return ("  the lane's window: flight at departures an ACK released (segments) p10 %.1f, p50 "
            "%.1f, p90 %.1f (%d); ACKs %d, late by the receiver's delay (> 25 ms beyond the "
            "fastest) %d, %d of them for a lone packet; repairs %d" % (
                quantile(clocked, 0.1), quantile(clocked, 0.5), quantile(clocked, 0.9),
                len(clocked), len(delays), len(late), sum(n == 1 for _, n in late), repairs))


def print_lane(lanes, floor_p50):
    """Why a base ADU's latency with a duplicate lane is what it is: which copy won, each
    copy's parts, what delayed the lane's copy when the primary's won."""
    n = len(lanes)
    won = [x for x in lanes if x["on_lane"]]
    lost = [x for x in lanes if not x["on_lane"] and x["lane"]]
    absent = [x for x in lanes if not x["lane"]]
    print(f"  duplicate lane, base ADUs: {n}; delivered by the lane's copy {len(won)} "
          f"({100 * len(won) / n:.0f}%), by the primary's {n - len(won)} (lane copy later "
          f"{len(lost)}, no lane copy {len(absent)})")
    for kind in ("lane", "primary"):
        r = [x[kind]["ready"] - floor_p50 for x in lanes if x[kind]]
        print(f"  {kind} copy alone, whole in order above the floor's p50: p50 "
              f"{quantile(r, 0.5):.1f}, p60 {quantile(r, 0.6):.1f}, p75 {quantile(r, 0.75):.1f},"
              f" p90 {quantile(r, 0.9):.1f} ms ({len(r)} copies)")
    names = ["queue/written", "unsent ahead", "own bytes", "own repair", "network",
             "in-order wait"]
    for label, xs, kind in (("lane copies that won", won, "lane"),
                            ("lane copies that lost", lost, "lane"),
                            ("primary copies that won", [x for x in lanes if not x["on_lane"]],
                             "primary")):
        if not xs:
            continue
        print(f"  {label} ({len(xs)}), parts p50 / p90 / mean ms:")
        for j, nm in enumerate(names):
            v = [x[kind]["parts"][j] for x in xs]
            print("    %-14s %7.1f %7.1f %7.1f" % (nm, quantile(v, 0.5), quantile(v, 0.9),
                                                   sum(v) / len(v)))
    # What made a lane copy later than the primary's, by its largest part beyond the network.
    why = defaultdict(int)
    for x in lost:
        p = x["lane"]["parts"]
        parts = {"lane: own repair (its copy lost)": p[3],
                 "lane: in-order wait (behind a lane repair)": p[5],
                 "lane: earlier copies unsent ahead": p[1],
                 "lane: own bytes (the lane's window)": p[2],
                 "lane: network above the primary's": p[4] - x["primary"]["parts"][4]}
        big = max(parts, key=parts.get)
        why[big if parts[big] > 2.0 else "lane no later by its parts (< 2 ms; the primary fast)"] += 1
    if lost:
        print("  lane copies later than the primary's, by their largest part:")
        for k, m in sorted(why.items(), key=lambda kv: -kv[1]):
            print(f"    {m:5d}  {k}")
    # A copy whose last byte left more than 5 ms after the capture (serialization of its two
    # packets and the departure estimate take about 2): released by a lane ACK that arrived
    # after the capture (the window), or not (behind earlier copies the window held).
    waited = [x["lane"] for x in lanes if x["lane"] and sum(x["lane"]["parts"][1:3]) > 5.0]
    if waited:
        by_ack = [w for w in waited if w["after_ack"] is not None and w["after_ack"] <= 1.5]
        print(f"  lane copies leaving > 5 ms after capture: {len(waited)} of "
              f"{sum(1 for x in lanes if x['lane'])}; {len(by_ack)} of them left within 1.5 ms "
              f"of a lane ACK that arrived after the capture (the lane's window released them); "
              f"their wait p50 {quantile([sum(w['parts'][1:3]) for w in waited], 0.5):.1f} ms")
    # The share the lane wins and the base's median, per 5 s of capture: episodes.
    print("  per 5 s of capture: lane copies first %, base p50 above the floor (ms)")
    t0 = min(x["c"] for x in lanes)
    by = defaultdict(list)
    for x in lanes:
        by[int((x["c"] - t0) // 5)].append(x)
    print("   " + "  ".join(f"{t0 + 5 * b:.0f}s {100 * sum(x['on_lane'] for x in xs) / len(xs):.0f}%"
                            f" {quantile([x['lat'] for x in xs], 0.5) - floor_p50:.1f}"
                            for b, xs in sorted(by.items())))


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
        conns = [(k, Stream(s)) for k, s in lowtide_connections(tcp).items()
                 if any(p[3] for p in s)]
        if not conns:
            print(f"{trial} ({v}): no lowtide connection in the pcap")
            continue
        # A duplicate lane's stream begins with DATA_FIRST; the primary (and, after a
        # failover, the backups taken over) carry everything else.
        lane_keys = {k for k, st in conns if first_frame(st.bytes) == 3}
        # The ACKs of each connection as they reached the sender (the reverse link's exit).
        back, _ = packets(f"{trial}/reverse.pcap", start_wall)
        acknos = ack_numbers(f"{trial}/reverse.pcap", start_wall)
        acks_of = {k: sorted(t for t, _, _, _ in back.get((k[2], k[3], k[0], k[1]), []))
                   for k, _ in conns}
        # Every copy of every ADU found in the streams: (frame, layer) -> [(conn, s0, e0)].
        copies = defaultdict(list)
        n_msgs = 0
        for k, cst in conns:
            msgs = messages(cst.bytes, cst.complete)
            n_msgs += len(msgs)
            for (_, seq), (s0, e0, imp, hdr, _) in msgs.items():
                if hdr and len(hdr) >= 10 and hdr[0] == 1 and e0 <= cst.complete:
                    frame, layer = struct.unpack("!I", hdr[5:9])[0], hdr[9]
                    copies[(frame, layer)].append((k, s0, e0))
        stream_of = dict(conns)
        key, st = max((c for c in conns if c[0] not in lane_keys),
                      key=lambda c: len(c[1].bytes), default=conns[0])
        acks = acks_of[key]
        rows = [r for r in all_adus if r["series"] == v and r.get("video", "0") == "0"
                and a.from_s <= float(r["capture_s"]) < a.to_s and r["latency_ms"]
                and r["written_ms"]]
        print(f"== {v} ({trial}): {len(conns)} lowtide connection(s) with data"
              f"{f' ({len(lane_keys)} duplicate lane)' if lane_keys else ''}, {len(st.bytes)} "
              f"bytes in the primary, {n_msgs} messages decoded; probe receipt - exit p50 "
              f"{quantile(cal, 0.5):.2f} ms, p99 {quantile(cal, 0.99):.2f} ms ({len(cal)} probes)")
        parts = ["lowtide's queue", "unsent ahead", "own bytes", "own repair", "network",
                 "in-order wait", "receiver", "(kernel: both)"]
        # (latency ms, capture s, layer, parts ms, own bytes retransmitted, delivered by a lane)
        every = []
        for name, which in (("base", lambda l: l == 0), ("enhancement", lambda l: l > 0)):
            split, lat, ahead, missing, gaps = defaultdict(list), [], [], 0, []
            lanes = []  # base ADUs with a lane: both copies' views
            by_adu = []
            for r in rows:
                layer = int(r["layer"])
                if not which(layer):
                    continue
                cps = copies.get((int(r["frame"]), layer), [])
                if not cps:
                    missing += 1
                    continue
                c = float(r["capture_s"])
                w_primary = c + float(r["written_ms"]) / 1e3
                arr = c + float(r["latency_ms"]) / 1e3
                # The copy delivered: the first to be whole and in order at the receiver.
                k, s0, e0 = min(cps, key=lambda cp: stream_of[cp[0]].in_order(cp[2] - 1))
                on_lane = k in lane_keys
                cst = stream_of[k]
                # A lane copy's write is not recorded: its wait in lowtide's lane queue
                # lands in "unsent ahead" / "own bytes" (written = capture).
                w = c if on_lane else w_primary
                vals, dep = split_copy(cst, s0, e0, c, w, arr, floor_at)
                for p, val in zip(parts, vals):
                    split[p].append(val * 1e3)
                if name == "base" and lane_keys:
                    lanes.append(lane_view(c, (arr - c) * 1e3, cps, on_lane, stream_of,
                                           lane_keys, acks_of, w_primary, floor_at))
                lat.append((arr - c) * 1e3)
                by_adu.append(((arr - c) * 1e3, [v * 1e3 for v in vals]))
                every.append(((arr - c) * 1e3, c, layer, [v * 1e3 for v in vals],
                              any(p[3] for p in cst.pieces_of(s0, e0)), on_lane))
                # Bytes of the stream before this ADU that had not left the sender at its
                # write: departures grow with the offset but for repairs, so search by offset.
                lo, hi = 0, s0
                while lo < hi:
                    mid = (lo + hi) // 2
                    xm = cst.exit(mid)
                    if xm - floor_at(xm) <= w:
                        lo = mid + 1
                    else:
                        hi = mid
                ahead.append((s0 - lo) / MSS)
                # A check of the departure estimate: the kernel sends a segment at its write
                # or when an ACK frees the window, so a right estimate lies just after one of
                # the two (an estimate off by X ms lies anywhere in the ACK interval).
                ka = acks_of[k]
                i = bisect.bisect_right(ka, dep + 0.0005) - 1
                last = max(w, ka[i]) if i >= 0 else w
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
            if lanes:
                print_lane(lanes, fp)
                for lk in lane_keys:
                    print(lane_window(tcp[lk], acknos.get((lk[2], lk[3], lk[0], lk[1]), []),
                                      floor_at))
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
            for lat_ms, c, layer, vals, rx, on_lane in sorted(every, key=lambda e: -e[0])[:a.worst]:
                print(f"  {c:.3f} {layer} {lat_ms:.1f} "
                      + " ".join(f"{x:.1f}" for x in vals[:7]) + (" yes" if rx else " no")
                      + (" (the lane's copy)" if on_lane else ""))


if __name__ == "__main__":
    main()
