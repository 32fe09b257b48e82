#!/usr/bin/env python3
"""Where an RDC run's retransmission timeouts come from (docs/rdc.md, "Each remaining
timeout's cause"). Reads a lab run folder: tcpinfo.csv (each sender's TCP_INFO on the
scenario's sample grid, with its port), drops.csv (the segments the forward bottleneck
dropped), releases.csv (every held ACK's release) and agent-delays.csv (the agents' delay per
flow, about twice a second), queue.csv.

A timeout is a rise of tcpi_total_rto between two samples of a flow, at some time in
(t_prev, t]. Its cause, first that applies:
  lost retransmission  a data segment of the flow was dropped at the bottleneck twice within
                       the 10 s before t (its retransmission was lost too);
  loss                 a data segment of the flow was dropped within RTO + 1 s before t, none
                       twice: the sender did not repair it by fast retransmit (a tail loss, or
                       too few segments after it for three duplicate ACKs);
  no drop              nothing of the flow was dropped: the ACKs came too late, not never.
                       Spurious when the ACK silence (the largest gap between the flow's held
                       ACKs released around the timeout) reaches the RTO in force, e.g. after
                       the agent's delay jumped.
Usage: rdc-timeouts.py RUN_DIR [--variant NAME]
"""
import argparse
import bisect
import csv
import os
from collections import Counter, defaultdict


def load(path, variant):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [r for r in csv.DictReader(f) if r["variant"] == variant]


def num(x, cast=float):
    return cast(x) if x not in ("", None) else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("--variant", default="1-bit RDC spares ECN flows")
    a = ap.parse_args()
    path = lambda name: os.path.join(a.run, name)
    samples = defaultdict(list)
    for r in load(path("tcpinfo.csv"), a.variant):
        samples[int(r["flow"])].append(r)
    drops = defaultdict(list)  # sender port -> [(t_s, seq)] of data segments
    for r in load(path("drops.csv"), a.variant):
        if int(r["payload"]) > 0:
            drops[int(r["src_port"])].append((int(r["t_us"]) / 1e6, int(r["seq"])))
    releases = defaultdict(list)  # sender port -> release times, s
    for r in load(path("releases.csv"), a.variant):
        releases[int(r["remote_port"])].append(int(r["left_us"]) / 1e6)
    for v in releases.values():
        v.sort()
    delays = defaultdict(list)  # sender port -> [(t_s, delay_ms)]
    for r in load(path("agent-delays.csv"), a.variant):
        delays[int(r["remote_port"])].append((float(r["t_s"]), float(r["delay_ms"])))
    queue = [(int(r["t_us"]) / 1e6, int(r["packets"])) for r in load(path("queue.csv"), a.variant)]
    queue_t = [q[0] for q in queue]

    def delay_at(port, t):
        d = [x for x in delays.get(port, []) if x[0] <= t]
        return d[-1][1] if d else None

    def queue_max(lo, hi):
        i, j = bisect.bisect_left(queue_t, lo), bisect.bisect_right(queue_t, hi)
        return max((q[1] for q in queue[i:j]), default=None)

    causes = Counter()
    events = 0
    print(f"{'flow':>4} {'port':>5} {'t_s':>14} {'n':>2} {'srtt':>6} {'rttvar':>6} {'rto':>6} "
          f"{'ca':>2} {'D_before':>8} {'D_after':>8} {'ack_gap':>8} {'queue_max':>9}  cause")
    for flow, rows in sorted(samples.items()):
        rows.sort(key=lambda r: float(r["t_s"]))
        port = num(rows[0]["port"], int)
        for prev, cur in zip(rows, rows[1:]):
            a_rto, b_rto = num(prev["total_rto"], int), num(cur["total_rto"], int)
            if a_rto is None or b_rto is None or b_rto <= a_rto:
                continue
            n = b_rto - a_rto
            events += n
            t0, t1 = float(prev["t_s"]), float(cur["t_s"])
            rto_ms = num(prev["rto_ms"]) or 0.0
            mine = drops.get(port, [])
            seqs = Counter(s for (t, s) in mine if t1 - 10.0 <= t <= t1)
            recent = [(t, s) for (t, s) in mine if t1 - rto_ms / 1e3 - 1.0 <= t <= t1]
            rel = releases.get(port, [])
            lo = bisect.bisect_left(rel, t0 - rto_ms / 1e3 - 0.5)
            hi = bisect.bisect_right(rel, t1 + 2.0)
            gap = max((y - x for x, y in zip(rel[lo:hi], rel[lo + 1:hi])), default=None)
            if any(c >= 2 for c in seqs.values()):
                cause = "lost retransmission"
                detail = sorted(s for s, c in seqs.items() if c >= 2)[:3]
            elif recent:
                cause = "loss"
                detail = [f"{t:.2f}s seq {s}" for t, s in recent[-3:]]
            elif gap is not None and gap * 1e3 >= rto_ms:
                cause = "no drop: spurious (ACK gap >= RTO)"
                detail = []
            else:
                cause = "no drop"
                detail = []
            causes[cause] += n
            fmt = lambda x, f="{:.0f}": "-" if x is None else f.format(x)
            print(f"{flow:>4} {fmt(port, '{}'):>5} {t0:6.2f}-{t1:6.2f} {n:>2} {fmt(num(prev['srtt_ms'])):>6} "
                  f"{fmt(num(prev['rttvar_ms'])):>6} {rto_ms:6.0f} {prev['ca_state']:>2} "
                  f"{fmt(delay_at(port, t0)):>8} {fmt(delay_at(port, t1 + 0.6)):>8} "
                  f"{fmt(None if gap is None else gap * 1e3):>8} {fmt(queue_max(t0 - 1.0, t1)):>9}  "
                  f"{cause} {detail if detail else ''}")
    print(f"\n{events} timeouts in {len(samples)} flows: " + ", ".join(f"{c} {k}" for k, c in causes.most_common()))


if __name__ == "__main__":
    main()
