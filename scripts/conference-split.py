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
                     (bytes already in the kernel, unsent: MIN_BUF's extra segments, or in
                     flight ahead waiting for the window)
  own bytes          then to its own last byte's departure (the window's room for its own
                     segments)
  network            departure to leaving the bottleneck: the floor probe's one-way latency
                     at that moment (propagation, the shared queue)
  in-order wait      leaving the bottleneck to the moment every earlier byte had left it too
                     (a loss repair)
  receiver           then to the application's receipt (the receiver's TCP and lowtide)

A byte's departure from the sender is its bottleneck exit minus the floor probe's latency
then (the probe crosses the same FIFO queue; its own serialization is 0.03 ms against 1 ms
for a full segment at 12 Mbit/s, which lands in "own bytes"). The parts add up to the
latency: the means add up exactly, the medians need not.

Usage: conference-split.py RUN_DIR [--variant NAME] [--from-s 10] [--to-s 55]
"""
import argparse
import bisect
import csv
import glob
import os
import struct
import sys
from collections import defaultdict

from tail_common import quantile

FLOOR = "network floor (UDP)"
MSS = 1448


def read_pcap(path):
    """(wall-clock seconds, Ethernet frame) for every packet of a pcap file."""
    with open(path, "rb") as f:
        data = f.read()
    scale, endian = None, None
    for e in "<>":
        magic = struct.unpack(e + "I", data[:4])[0]
        if magic in (0xA1B2C3D4, 0xA1B23C4D):
            scale, endian = (1e-6 if magic == 0xA1B2C3D4 else 1e-9), e
    if endian is None:
        sys.exit(f"{path}: not a pcap file")
    out, pos = [], 24
    while pos + 16 <= len(data):
        sec, frac, incl, _ = struct.unpack(endian + "IIII", data[pos:pos + 16])
        pos += 16
        out.append((sec + frac * scale, data[pos:pos + incl]))
        pos += incl
    return out


def packets(path, start_wall):
    """Per TCP connection its segments (time, seq, flags, payload); the UDP floor probes'
    exit times. Times are seconds since the trial's start."""
    tcp, probes = defaultdict(list), []
    for ts, eth in read_pcap(path):
        if len(eth) < 34 or eth[12:14] != b"\x08\x00":
            continue
        ip = eth[14:]
        ihl = (ip[0] & 15) * 4
        total = struct.unpack("!H", ip[2:4])[0]
        proto, src, dst = ip[9], ip[12:16], ip[16:20]
        l4 = ip[ihl:total]
        t = ts - start_wall
        if proto == 17 and len(l4) == 16:
            probes.append(t)
        elif proto == 6:
            sport, dport, seq = struct.unpack("!HHI", l4[:8])
            off = (l4[12] >> 4) * 4
            tcp[(src, sport, dst, dport)].append((t, seq, l4[13], l4[off:]))
    return tcp, probes


class Stream:
    """One direction of a TCP connection rebuilt from the packets that left the bottleneck:
    its bytes, and per byte the exit of the first copy to leave."""

    def __init__(self, segs):
        syn = [s for s in segs if s[2] & 0x02]
        isn = (syn[0][1] + 1) if syn else min(s[1] for s in segs if s[3])
        self.pieces = []  # (start, end, time): newly covered bytes
        holes, top = [], 0
        buf = bytearray()
        for t, seq, _, pl in segs:
            if not pl:
                continue
            s = (seq - isn) % 2**32
            e = s + len(pl)
            if e > top:
                if s > top:
                    holes.append([top, s])
                lo = max(s, top)
                self.pieces.append((lo, e, t))
                buf.extend(b"\0" * (e - len(buf)))
                buf[lo:e] = pl[lo - s:]
                top = e
            for h in holes:
                a, b = max(h[0], s), min(h[1], e)
                if a < b:
                    self.pieces.append((a, b, t))
                    buf[a:b] = pl[a - s:b - s]
                    if a == h[0]:
                        h[0] = b
                    elif b == h[1]:
                        h[1] = a
                    else:
                        holes.append([b, h[1]])
                        h[1] = a
            holes = [h for h in holes if h[0] < h[1]]
        self.pieces.sort()
        self.starts = [p[0] for p in self.pieces]
        self.bytes = bytes(buf)
        # Delivered in order: a byte is usable once every byte before it has left too.
        self.avail, m = [], float("-inf")
        for p in self.pieces:
            m = max(m, p[2])
            self.avail.append(m)
        self.complete = min((h[0] for h in holes), default=len(buf))

    def exit(self, off):
        return self.pieces[bisect.bisect_right(self.starts, off) - 1][2]

    def in_order(self, off):
        return self.avail[bisect.bisect_right(self.starts, off) - 1]


def varint(b, i):
    v = shift = 0
    while True:
        x = b[i]
        i += 1
        v |= (x & 0x7F) << shift
        shift += 7
        if not x & 0x80:
            return v, i


def messages(b, end):
    """(stream, seq) -> [its first frame's first byte, its last byte + 1, importance, media
    header] of every message in a lowtide byte stream (docs/wire.md), up to `end`."""
    if b[:4] != b"LWTD":
        return {}
    i = 5
    n, i = varint(b, i)
    for _ in range(2 * n):
        _, i = varint(b, i)
    out = {}
    try:
        while i < end:
            frame_start = i
            kind, i = varint(b, i)
            if kind == 3 or kind == 4:
                stream, i = varint(b, i)
                seq, i = varint(b, i)
                if kind == 3:
                    imp, i = varint(b, i)
                    _, i = varint(b, i)
                    _, i = varint(b, i)
                else:
                    _, i = varint(b, i)
                n, i = varint(b, i)
                m = out.setdefault((stream, seq), [i, i + n, None, None])
                if kind == 3:
                    m[0], m[2], m[3] = frame_start, imp, b[i:i + 10]
                m[1] = i + n
                i += n
            elif kind in (1, 6):
                i = varint(b, varint(b, i)[1])[1]
            elif kind in (2, 8):
                i = varint(b, i)[1]
            elif kind in (5, 13):
                for _ in range(3):
                    i = varint(b, i)[1]
            elif kind == 7:
                i = varint(b, i)[1]
                n, i = varint(b, i)
                i += n
            elif kind == 12:
                for _ in range(2):
                    i = varint(b, i)[1]
                n, i = varint(b, i)
                i += n
            else:
                break
    except IndexError:
        pass
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("--variant")
    ap.add_argument("--from-s", type=float, default=10.0)
    ap.add_argument("--to-s", type=float, default=55.0)
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
        floor = sorted(
            (float(r["sent_s"]) + float(r["latency_ms"]) / 1e3, float(r["latency_ms"]))
            for r in floor_rows if r["censored"] == "0" and r["trial"] == str(int(n) - 1)
        )
        floor_t = [t for t, _ in floor]
        if not floor:
            print(f"{trial} ({v}): no floor probe delivered in this trial: no split")
            continue

        def floor_at(t):
            """The probes' one-way latency, s, at a bottleneck exit at `t`: interpolated
            between the probes that left just before and just after."""
            i = bisect.bisect_left(floor_t, t)
            if i == 0 or i == len(floor):
                return floor[min(i, len(floor) - 1)][1] / 1e3
            (t0, l0), (t1, l1) = floor[i - 1], floor[i]
            return (l0 + (l1 - l0) * (t - t0) / (t1 - t0)) / 1e3 if t1 > t0 else l0 / 1e3

        # Calibration: a probe's receipt minus its exit from the bottleneck (the receiver's
        # UDP socket and thread); large or negative means the clocks do not line up.
        cal = []
        for x in probe_exits:
            i = bisect.bisect_left(floor_t, x - 0.002)
            if i < len(floor_t) and floor_t[i] - x < 0.005:
                cal.append((floor_t[i] - x) * 1e3)
        conns = [(k2, s) for k2, s in tcp.items()
                 if any(p[3][:4] == b"LWTD" for p in s[:4])]
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
        for (_, seq), (s0, e0, imp, hdr) in msgs.items():
            if hdr and len(hdr) == 10 and hdr[0] == 1:
                frame, layer = struct.unpack("!I", hdr[5:9])[0], hdr[9]
                adus[(frame, layer)] = (s0, e0, imp)
        rows = [r for r in all_adus if r["series"] == v and r.get("video", "0") == "0"
                and a.from_s <= float(r["capture_s"]) < a.to_s and r["latency_ms"]
                and r["written_ms"]]
        print(f"== {v} ({trial}): {len(conns)} lowtide connection(s), {len(st.bytes)} bytes in "
              f"the one used, {len(msgs)} messages decoded; probe receipt - exit p50 "
              f"{quantile(cal, 0.5):.2f} ms, p99 {quantile(cal, 0.99):.2f} ms ({len(cal)} probes)")
        parts = ["lowtide's queue", "unsent ahead", "own bytes", "network", "in-order wait",
                 "receiver", "(kernel: both)"]
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
                dep = x - fl
                prev = st.exit(s0 - 1) - floor_at(st.exit(s0 - 1)) if s0 > 0 else w
                got = st.in_order(e0 - 1)
                own_from = max(w, prev)
                vals = [w - c, max(prev - w, 0.0), dep - own_from, fl, got - x, arr - got,
                        dep - w]
                for p, val in zip(parts, vals):
                    split[p].append(val * 1e3)
                lat.append((arr - c) * 1e3)
                by_adu.append(((arr - c) * 1e3, [v * 1e3 for v in vals]))
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


if __name__ == "__main__":
    main()
