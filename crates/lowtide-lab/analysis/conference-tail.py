#!/usr/bin/env python3
"""Where a conference run's latency tail comes from, per ADU (docs/failover.md, "What sets the
worst bucket's p99.9"). Reads a lab run folder: adus.csv, messages.csv (the floor probe),
tcpinfo.csv (the sender's TCP_INFO every 10 ms; after a failover, the backup's: runs before
the sampler followed the switch have the first connection only).

For each ADU captured in the measured window and delivered:
  lowtide's queue   capture to its last byte's write into the kernel (`written_ms`);
  after the write   the rest: the kernel's queue, the network (the floor probe's one-way
                    latency at the write, propagation and the shared queue) and loss repair.
A delivered ADU is put behind a loss repair when it arrived while the connection was in
Recovery or Loss (`tcpi_ca_state` >= 3) or within one floor one-way latency (+15 ms) after
such an episode began: TCP delivers in order, so every byte sent after a lost segment waits
for its retransmission. Prints per importance bucket the count, p50 and p99.9 (as the lab:
linear interpolation), how many ADUs are over the threshold and how many of those rode a
repair; lowtide's queue of the base and of the enhancement ADUs (p50, p99, max); then the
worst ADUs with their parts and the TCP_INFO at capture and at arrival.
Usage: conference-tail.py RUN_DIR [--variant NAME] [--over 200] [--top 12]
       [--from-s 10] [--to-s 55]
"""
import argparse
import bisect
import csv
import math
from collections import defaultdict

from tail_common import loss_episodes, quantile

FLOOR = "network floor (UDP)"


def rows(path, series):
    with open(path) as f:
        return [r for r in csv.DictReader(f) if r["series"] == series]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("--variant")
    ap.add_argument("--over", type=float, default=200.0)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--from-s", type=float, default=10.0)
    ap.add_argument("--to-s", type=float, default=55.0)
    a = ap.parse_args()
    with open(f"{a.run}/adus.csv") as f:
        all_adus = list(csv.DictReader(f))
    variants = [a.variant] if a.variant else sorted({r["series"] for r in all_adus})
    floor = sorted(
        (float(r["sent_s"]), float(r["latency_ms"]))
        for r in rows(f"{a.run}/messages.csv", FLOOR)
        if r["censored"] == "0"
    )
    floor_t = [t for t, _ in floor]

    def floor_at(t):
        if not floor:
            return float("nan")
        return floor[max(bisect.bisect_right(floor_t, t) - 1, 0)][1]

    for v in variants:
        tcp = rows(f"{a.run}/tcpinfo.csv", v)
        tcp_t = [float(r["t_s"]) for r in tcp]
        eps = loss_episodes(tcp)
        ep_starts = [s for s, _ in eps]

        # In runs recorded before the sampler followed a failover, it stopped with the first
        # connection (its file descriptor closed at the switch): no TCP_INFO is no data, not
        # "no repair".
        sampled_to = max(
            (float(r["t_s"]) for i, r in enumerate(tcp)
             if i and any(r[k] != tcp[i - 1][k] for k in ("srtt_ms", "unacked", "notsent"))),
            default=0.0,
        )

        def info(t):
            if not tcp or t > sampled_to:
                return "no TCP_INFO"
            r = tcp[max(bisect.bisect_right(tcp_t, t) - 1, 0)]
            return "cwnd %s srtt %.0f ca %s retrans %s notsent %s" % (
                r["cwnd"], float(r["srtt_ms"]), r["ca_state"], r["total_retrans"], r["notsent"])

        def repair(arrival):
            """The loss episode an ADU arriving then waited for, as (start, end), None, or
            "no data" after the sampler stopped."""
            if arrival > sampled_to:
                return "no data"
            i = bisect.bisect_right(ep_starts, arrival) - 1
            if i < 0:
                return None
            s, e = eps[i]
            return (s, e) if arrival <= e + (floor_at(s) + 15.0) / 1e3 else None

        adus = [
            r for r in all_adus
            if r["series"] == v and a.from_s <= float(r["capture_s"]) < a.to_s
        ]
        print(f"== {v}: {len(adus)} ADUs captured {a.from_s}-{a.to_s} s, "
              f"{len(eps)} Recovery/Loss episodes in the run")
        print("importance  sent  arrived  p50 ms  p99.9 ms  over %.0f ms  of those behind a loss repair"
              % a.over)
        late = []
        by_imp = defaultdict(list)
        for r in adus:
            by_imp[7 - int(r["layer"])].append(r)
        for imp in sorted(by_imp, reverse=True):
            got = [r for r in by_imp[imp] if r["latency_ms"]]
            lat = [float(r["latency_ms"]) for r in got]
            over = [r for r in got if float(r["latency_ms"]) > a.over]
            fates = [repair(float(r["capture_s"]) + float(r["latency_ms"]) / 1e3) for r in over]
            rode = [f for f in fates if isinstance(f, tuple)]
            unknown = sum(f == "no data" for f in fates)
            late += over
            print("%10d  %4d  %7d  %6.1f  %8.1f  %11d  %d%s" % (
                imp, len(by_imp[imp]), len(got), quantile(lat, 0.5), quantile(lat, 0.999),
                len(over), len(rode), " (%d: no TCP_INFO)" % unknown if unknown else ""))
        for name, layers in (("base", lambda l: l == 0), ("enhancement", lambda l: l > 0)):
            w = [float(r["written_ms"]) for r in adus
                 if r["latency_ms"] and r["written_ms"] and layers(int(r["layer"]))]
            if w:
                print("lowtide's queue (capture to the last byte's write) of the arrived %s ADUs:"
                      " p50 %.1f, p99 %.1f, max %.1f ms" % (
                          name, quantile(w, 0.5), quantile(w, 0.99), max(w)))
        late.sort(key=lambda r: -float(r["latency_ms"]))
        print("worst ADUs: capture s, importance, latency = lowtide's queue + floor at the write"
              " + the rest (kernel, loss repair); the repair episode (start, arrival after it)")
        for r in late[: a.top]:
            c, lat = float(r["capture_s"]), float(r["latency_ms"])
            w = float(r["written_ms"]) if r["written_ms"] else float("nan")
            fl = floor_at(c + w / 1e3) if not math.isnan(w) else float("nan")
            ep = repair(c + lat / 1e3)
            if ep == "no data":
                where = "no TCP_INFO (the sampler stopped at %.1f s)" % sampled_to
            elif ep:
                where = ("repair from %.3f s, arrived %.0f ms after its start"
                         % (ep[0], (c + lat / 1e3 - ep[0]) * 1e3))
            else:
                where = "no repair"
            print("  %.3f  %d  %6.1f = %5.1f + %4.1f + %5.1f  %s" % (
                c, 7 - int(r["layer"]), lat, w, fl, lat - w - fl, where))
            print("        at capture: %s; at arrival: %s" % (info(c), info(c + lat / 1e3)))


if __name__ == "__main__":
    main()
