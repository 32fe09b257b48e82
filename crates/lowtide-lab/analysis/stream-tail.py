#!/usr/bin/env python3
"""Where a latency stream's sender-side tail comes from (Goel et al.'s Fig. 3 in the lab;
docs/failover.md, "Fig. 3 with failover: where the sender-side p99 comes from"). Reads a lab
run folder: messages.csv (the stream and the floor probe) and tcpinfo.csv (the sender's
TCP_INFO every 10 ms).

The lab's latency stream writes a message only when the channel is writable (nothing of
lowtide's queued, the controller allows a write), so lowtide's own queue is empty by
construction and a message's sender-side latency (its latency minus the floor probe's at its
send time) is the kernel's: the unsent bytes ahead of it, the congestion window's wait, and
any loss repair. A message is put behind a repair when it arrived while the connection was
in Recovery or Loss (`tcpi_ca_state` >= 3) or within one floor one-way latency (+15 ms)
after such an episode began (TCP delivers in order). For the others, the kernel's queue
alone: the unsent bytes at the send (`notsent`) drain at about cwnd segments per srtt.
Prints per variant the sender-side p50/p99, the share over `--over` ms and how many of those
rode a repair, the p99 of the messages behind no repair, and the TCP_INFO of the worst.
Usage: stream-tail.py RUN_DIR [--variant NAME] [--over 100] [--top 8] [--from-s 5]
       [--to-s 75]
"""
import argparse
import bisect
import csv

from tail_common import loss_episodes, quantile

FLOOR = "network floor (UDP)"
MSS = 1448
MAX_FLOOR_AGE_S = 0.05  # as the lab: an older probe does not stand for the network


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("--variant")
    ap.add_argument("--over", type=float, default=100.0)
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--from-s", type=float, default=5.0)
    ap.add_argument("--to-s", type=float, default=75.0)
    a = ap.parse_args()
    with open(f"{a.run}/messages.csv") as f:
        msgs = [r for r in csv.DictReader(f) if r["censored"] == "0"]
    with open(f"{a.run}/tcpinfo.csv") as f:
        tcp_all = list(csv.DictReader(f))
    floor = sorted((float(r["sent_s"]), float(r["latency_ms"])) for r in msgs if r["series"] == FLOOR)
    floor_t = [t for t, _ in floor]
    variants = [a.variant] if a.variant else sorted({r["series"] for r in msgs} - {FLOOR})

    def floor_at(t):
        i = bisect.bisect_right(floor_t, t) - 1
        if i < 0 or t - floor_t[i] > MAX_FLOOR_AGE_S:
            return None
        return floor[i][1]

    for v in variants:
        tcp = [r for r in tcp_all if r["series"] == v]
        tcp_t = [float(r["t_s"]) for r in tcp]
        starts = [s for s, _ in loss_episodes(tcp)]
        if not tcp:
            print(f"{v}: no TCP_INFO")
            continue

        def sample(t):
            return tcp[max(bisect.bisect_right(tcp_t, t) - 1, 0)]

        def repaired(arrive_s):
            i = bisect.bisect_right(starts, arrive_s) - 1
            if i < 0:
                return False
            s, e = episodes_of[i]
            fl = floor_at(s) or 0.0
            return arrive_s <= e + 0.01 or arrive_s - s <= (fl + 15.0) / 1e3

        episodes_of = loss_episodes(tcp)
        rows = []
        for r in msgs:
            if r["series"] != v:
                continue
            t, lat = float(r["sent_s"]), float(r["latency_ms"])
            if not (a.from_s <= t < a.to_s):
                continue
            fl = floor_at(t)
            if fl is None:
                continue
            arrive = t + lat / 1e3
            x = sample(t)
            cwnd, srtt, notsent = int(x["cwnd"]), float(x["srtt_ms"]), int(x["notsent"])
            # The unsent bytes ahead drain at about cwnd segments per srtt.
            queue_est = notsent / MSS / max(cwnd, 1) * srtt
            rows.append((lat - fl, t, repaired(arrive), cwnd, srtt, notsent, queue_est, x["ca_state"]))
        if not rows:
            print(f"{v}: no message with a floor")
            continue
        ss = [r[0] for r in rows]
        over = [r for r in rows if r[0] > a.over]
        clean = [r[0] for r in rows if not r[2]]
        est = [r[6] for r in rows]
        print(
            f"{v}: {len(rows)} messages; sender-side p50 {quantile(ss, 0.5):.1f} p99 {quantile(ss, 0.99):.1f} ms; "
            f"over {a.over:.0f} ms: {len(over)} ({100 * len(over) / len(rows):.1f}%), "
            f"{sum(1 for r in over if r[2])} behind a repair; "
            f"behind a repair in all: {sum(1 for r in rows if r[2])} ({100 * sum(1 for r in rows if r[2]) / len(rows):.1f}%); "
            f"p99 of the others (no repair): {quantile(clean, 0.99):.1f} ms; "
            f"kernel queue estimate at the send p50 {quantile(est, 0.5):.1f} p99 {quantile(est, 0.99):.1f} ms; "
            f"cwnd at the send p50 {quantile([r[3] for r in rows], 0.5):.0f} p1 {quantile([r[3] for r in rows], 0.01):.0f}; "
            f"srtt p50 {quantile([r[4] for r in rows], 0.5):.0f} ms"
        )
        print("  worst: sent s, sender-side ms, behind a repair, cwnd, srtt ms, notsent B, kernel queue estimate ms, ca_state")
        for r in sorted(rows, reverse=True)[: a.top]:
            print(f"  {r[1]:.3f} {r[0]:.1f} {'repair' if r[2] else '-'} {r[3]} {r[4]:.0f} {r[5]} {r[6]:.0f} {r[7]}")


if __name__ == "__main__":
    main()
