#!/usr/bin/env python3
"""Why an RDC run's bottleneck FIFO overflowed (docs/rdc.md, "The FIFO overflow while the
delays rise"). Reads a lab run folder: drops.csv (the forward bottleneck's drops), queue.csv,
releases.csv (every held ACK's release; `flushed` = released early, ahead of a SACK or
duplicate ACK that had to pass at once), agent-delays.csv, tcpinfo.csv, layers.csv (video)
and scenario-as-run.toml (the window cap).

Episodes are `queue_full` drops less than --gap seconds apart. For each: when the FIFO last
rose past half its peak, the agents' delay (median, max over flows) and the streams' layers
(total; their rate against the link's) before it, the flows that were window-limited
(unacknowledged segments at min(cwnd, the window cap), from TCP_INFO on the sample grid),
and per 100 ms the drops, the held ACKs flushed, and the flows that dropped. Then, per
dropped flow, how many of its held ACKs were flushed within 200 ms of its first drop: each
flushed ACK lets the sender send again at once, so a drop that flushes many ACKs sends a
burst into the FIFO that just overflowed.
Usage: rdc-overflow.py RUN_DIR --variant NAME [--gap 1.0]
"""
import argparse
import bisect
import csv
import os
import re
from collections import Counter, defaultdict


def load(path, variant):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [r for r in csv.DictReader(f) if r["variant"] == variant]


def window_cap(run):
    path = os.path.join(run, "scenario-as-run.toml")
    if not os.path.exists(path):
        return None
    m = re.search(r"^window_packets\s*=\s*(\d+)", open(path).read(), re.M)
    return int(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("--variant", required=True)
    ap.add_argument("--gap", type=float, default=1.0)
    a = ap.parse_args()
    path = lambda name: os.path.join(a.run, name)
    drops = sorted(
        (int(r["t_us"]) / 1e6, int(r["src_port"]))
        for r in load(path("drops.csv"), a.variant)
        if r["reason"] == "queue_full"
    )
    if not drops:
        print(f"{a.variant}: no queue_full drop")
        return
    episodes = []
    for d in drops:
        if episodes and d[0] - episodes[-1][-1][0] < a.gap:
            episodes[-1].append(d)
        else:
            episodes.append([d])
    queue = [(int(r["t_us"]) / 1e6, int(r["packets"])) for r in load(path("queue.csv"), a.variant)]
    q_t = [q[0] for q in queue]
    flushed = defaultdict(list)  # sender port -> times its held ACKs were flushed
    all_flushed, released = [], 0
    for r in load(path("releases.csv"), a.variant):
        released += 1
        if r["flushed"] == "1":
            t = int(r["left_us"]) / 1e6
            flushed[int(r["remote_port"])].append(t)
            all_flushed.append(t)
    all_flushed.sort()
    delays = defaultdict(list)
    for r in load(path("agent-delays.csv"), a.variant):
        delays[float(r["t_s"])].append(float(r["delay_ms"]))
    delay_t = sorted(delays)
    layers = defaultdict(list)  # stream -> [(t, layers)]
    for r in load(path("layers.csv"), a.variant):
        layers[int(r["stream"])].append((float(r["t_s"]), int(r["layers"])))
    for v in layers.values():
        v.sort()
    tcpinfo = defaultdict(list)  # t -> [(cwnd, unacked)]
    for r in load(path("tcpinfo.csv"), a.variant):
        # Each flow's samples sit on the grid with its own offset: a 100 ms bin holds one each.
        tcpinfo[round(float(r["t_s"]), 1)].append((int(r["cwnd"]), int(r["unacked"])))
    info_t = sorted(tcpinfo)
    cap = window_cap(a.run)

    def delay_at(t):
        i = bisect.bisect_right(delay_t, t) - 1
        if i < 0:
            return "no data"
        v = sorted(delays[delay_t[i]])
        return f"{v[len(v) // 2]:.0f} / {v[-1]:.0f} ms"

    def layers_at(t):
        total = 0
        for v in layers.values():
            i = bisect.bisect_right(v, (t, 1 << 30)) - 1
            total += v[i][1] if i >= 0 else 0
        return total

    def window_limited_at(t):
        i = bisect.bisect_right(info_t, t) - 1
        if i < 0:
            return "no data"
        s = tcpinfo[info_t[i]]
        n = sum(1 for cwnd, unacked in s if unacked >= min(cwnd, cap or cwnd))
        return f"{n} of {len(s)}"

    print(
        f"{a.variant}: {len(drops)} queue_full drops in {len(episodes)} episode(s); "
        f"{len(all_flushed)} of {released} held ACKs flushed"
    )
    for ep in episodes:
        t0, t1 = ep[0][0], ep[-1][0]
        # The queue series is capped (netem keeps the first 1,000,000 samples).
        i = min(bisect.bisect_left(q_t, t0), len(queue) - 1)
        peak = max((q[1] for q in queue[max(0, i - 20000) : i + 1]), default=0)
        j = i
        while j > 0 and queue[j][1] >= peak / 2:
            j -= 1
        rise = queue[j][0] if queue and q_t[-1] >= t0 else t0
        print(
            f"\nepisode {t0:.2f}-{t1:.2f} s: {len(ep)} drops of {len(set(p for _, p in ep))} "
            f"flows; the FIFO above {peak // 2} packets from {rise:.2f} s"
        )
        for lag in (5, 2, 1, 0):
            t = rise - lag
            line = f"  {rise:.2f} s - {lag} s: agents' delay median / max {delay_at(t)}"
            if layers:
                line += f", layers {layers_at(t)}"
            line += f", window-limited flows {window_limited_at(t)}"
            print(line)
        by_bin = Counter(int(t * 10) for t, _ in ep)
        flush_bin = Counter(int(t * 10) for t in all_flushed if t0 - 0.5 <= t <= t1 + 0.5)
        flows_bin = defaultdict(set)
        for t, p in ep:
            flows_bin[int(t * 10)].add(p)
        print("  per 100 ms: drops, held ACKs flushed, flows dropped")
        for k in range(int(t0 * 10) - 2, int(t1 * 10) + 3):
            print(f"    {k / 10:.1f} s  {by_bin[k]:4d} {flush_bin[k]:5d} {len(flows_bin[k]):4d}")
        first = {}
        for t, p in ep:
            first.setdefault(p, t)
        per_flow = sorted(
            sum(1 for u in flushed.get(p, []) if t <= u <= t + 0.2) for p, t in first.items()
        )
        print(
            f"  held ACKs flushed within 200 ms of a flow's first drop: median "
            f"{per_flow[len(per_flow) // 2]}, max {per_flow[-1]} ({len(per_flow)} flows)"
        )


if __name__ == "__main__":
    main()
