#!/usr/bin/env python3
"""Why an RDC run's bottleneck queue exceeded a bound: each dequeue sample above it is traced
back to the burst that built the queue and given one cause (docs/rdc.md, "Exact RDC's queue
p99"). Reads a lab run folder: queue.csv, releases.csv, late-deliveries.csv.

A sample at time t whose packet waited s arrived at t_a = t - s. A sender answers ACKs at once,
so the data arriving at t_a left the receiver as ACKs at about t_a - reverse one-way delay.
Causes, first that applies:
  emulator stall   the emulator delivered a packet on either link > 1 ms late in
                   [t_a - 3 ms, t_a + 0.5 ms]: the stall bunched the arrivals itself;
  agent late       an ACK released in [t_a - rev - 3 ms, t_a - rev + 0.5 ms] left > 1 ms
                   after its due time (the agent's wake-up or loop);
  stretch ACK      one of those ACKs acknowledged more than twice its flow's usual amount
                   (median ACK advance): the receiver's TCP sent one ACK for many segments,
                   and the sender answers it with as many at once;
  replayed stall   those ACKs left on time, but were generated while the emulator was late
                   on the forward link (data bunched at the receiver, the bunch kept by the
                   hold): a late forward delivery within 3 ms before one of their hold starts;
  on-time bunch    those ACKs left on time and the ACKs of one flow left closer together than
                   they were generated (the order rule: the delay fell) ...
  other            ... or none of these: the ACK clock's own bursts (two segments per ACK,
                   flows colliding).
Then the same samples by the time from the last stall (an emulator delivery or an agent's
release > 1 ms late) to the packet's arrival, in round trips (--round-trip-ms: base RTT plus the
router's delay), against the share of all samples in each bin: how much of the queue's top is
the stalls and their replays (docs/rdc.md, "Exact RDC's queue p99: the machine's stalls").
Usage: rdc-queue-causes.py RUN_DIR [--variant NAME] [--bound 5] [--reverse-ms 21] [--round-trip-ms 108]
"""
import argparse
import bisect
import csv
import os
from collections import Counter, defaultdict


def load(path, variant):
    rows = []
    if not os.path.exists(path):
        return rows
    with open(path) as f:
        for r in csv.DictReader(f):
            if r["variant"] == variant:
                rows.append(r)
    return rows


def any_in(sorted_times, lo, hi):
    i = bisect.bisect_left(sorted_times, lo)
    return i < len(sorted_times) and sorted_times[i] <= hi


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("--variant", default="exact RDC")
    ap.add_argument("--bound", type=int, default=5)
    ap.add_argument("--reverse-ms", type=float, default=21.0)
    ap.add_argument("--round-trip-ms", type=float, default=108.0)
    ap.add_argument("--from-s", type=float, default=None, help="ignore samples before (default: all in queue.csv)")
    a = ap.parse_args()
    q = [(int(r["t_us"]), int(r["packets"]), int(r["sojourn_us"])) for r in load(os.path.join(a.run, "queue.csv"), a.variant)]
    if a.from_s is not None:
        q = [x for x in q if x[0] >= a.from_s * 1e6]
    late = load(os.path.join(a.run, "late-deliveries.csv"), a.variant)
    late_any = sorted(int(r["t_us"]) for r in late)
    late_fwd = sorted(int(r["t_us"]) for r in late if r["link"] == "forward")
    rows = load(os.path.join(a.run, "releases.csv"), a.variant)
    rows.sort(key=lambda r: int(r["left_us"]))
    # Each ACK's advance over the previous ACK of its flow, bytes.
    advance, last = [], {}
    for r in rows:
        flow, ack = r["receiver"] + ":" + r["remote_port"], int(r["ack"])
        advance.append((ack - last[flow]) % 2**32 if flow in last else 0)
        last[flow] = ack
    usual = sorted(x for x in advance if x > 0)
    usual = usual[len(usual) // 2] if usual else 0
    stretch = {i for i, x in enumerate(advance) if usual and x > 2 * usual}
    rel = [
        (int(r["left_us"]), int(r["due_us"]), int(r["held_us"]), r["receiver"] + ":" + r["remote_port"], r["flushed"] == "1")
        for r in rows
    ]
    rel_left = [x[0] for x in rel]
    # Per flow: was each release closer to the previous one than their holds began (by > 0.3 ms)?
    compressed = set()
    prev = {}
    for i, (left, due, held, flow, _) in enumerate(rel):
        if flow in prev:
            pl, ph = prev[flow]
            if (left - pl) + 300 < (held - ph):
                compressed.add(i)
        prev[flow] = (left, held)
    rev = int(a.reverse_ms * 1000)
    n = len(q)
    over = [x for x in q if x[1] > a.bound]
    causes = Counter()
    for t, packets, soj in over:
        ta = t - soj
        if any_in(late_any, ta - 3000, ta + 500):
            causes["emulator stall"] += 1
            continue
        lo = bisect.bisect_left(rel_left, ta - rev - 3000)
        hi = bisect.bisect_right(rel_left, ta - rev + 500)
        window = rel[lo:hi]
        if any(left - due > 1000 for left, due, *_ in window):
            causes["agent late"] += 1
        elif any(i in stretch for i in range(lo, hi)):
            causes["stretch ACK"] += 1
        elif any(any_in(late_fwd, held - 3000, held) for _, _, held, _, _ in window):
            causes["replayed stall"] += 1
        elif any(i in compressed for i in range(lo, hi)):
            causes["on-time bunch"] += 1
        else:
            causes["other"] += 1
    qs = sorted(x[1] for x in q)
    p = lambda f: qs[min(len(qs) - 1, round((len(qs) - 1) * f))] if qs else None
    print(f"{a.run} [{a.variant}]: {n} samples, queue p50 {p(0.5)} p99 {p(0.99)} max {p(1.0)}; "
          f"{len(over)} above {a.bound} ({100.0 * len(over) / max(n, 1):.2f}%, p99 <= {a.bound} needs <= 1%)")
    for c in ["emulator stall", "agent late", "stretch ACK", "replayed stall", "on-time bunch", "other"]:
        k = causes[c]
        print(f"  {c:15s} {k:7d}  {100.0 * k / max(len(over), 1):5.1f}% of those, {100.0 * k / max(n, 1):.2f}% of all")
    if rel:
        late_rel = sum(1 for left, due, *_ in rel if left - due > 1000)
        print(f"  agent: {len(rel)} held ACKs released, {late_rel} > 1 ms late, {len(compressed)} compressed by the order rule, "
              f"{len(stretch)} stretch ACKs (> {2 * usual} bytes; usual {usual})")
    fl = Counter(r["link"] for r in late)
    print(f"  emulator: deliveries > 1 ms late: forward {fl['forward']}, reverse {fl['reverse']}")
    since_stall(q, sorted(late_any + [left for left, due, *_ in rel if left - due > 1000]), a.bound, a.round_trip_ms)


def since_stall(q, stalls, bound, rtt_ms):
    """Samples above the bound by time from the last stall to their packet's arrival."""
    edges = [0.5, 1.0, 1.5, 2.0, 3.0, 5.0]
    names = ["< 0.5 RTT", "0.5-1 RTT", "1-1.5 RTT", "1.5-2 RTT", "2-3 RTT", "3-5 RTT", "> 5 RTT or none"]
    every, over = Counter(), Counter()
    for t, packets, soj in q:
        ta = t - soj
        i = bisect.bisect_right(stalls, ta) - 1
        rtts = (ta - stalls[i]) / (rtt_ms * 1000) if i >= 0 else float("inf")
        k = bisect.bisect_right(edges, rtts)
        every[k] += 1
        over[k] += packets > bound
    n, m = max(len(q), 1), max(sum(over.values()), 1)
    print(f"  by time since the last stall ({len(stalls)} late events; round trip {rtt_ms:.0f} ms):")
    for k, name in enumerate(names):
        print(f"    {name:16s} {100.0 * every[k] / n:5.1f}% of samples, {100.0 * over[k] / m:5.1f}% of those above {bound}"
              f" ({100.0 * over[k] / max(every[k], 1):.2f}% of the bin)")
    outside = sorted(p for t, p, s in q if not (lambda i: i >= 0 and (t - s) - stalls[i] <= 2 * rtt_ms * 1000)(bisect.bisect_right(stalls, t - s) - 1))
    if outside:
        p99 = outside[min(len(outside) - 1, round((len(outside) - 1) * 0.99))]
        print(f"    queue p99 more than 2 round trips after any stall: {p99} ({len(outside)} samples, {100.0 * len(outside) / n:.1f}%)")


if __name__ == "__main__":
    main()
