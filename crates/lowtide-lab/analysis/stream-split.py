#!/usr/bin/env python3
"""Where a latency stream's messages spend their time, per message, from the packets (Goel et
al.'s Fig. 3 in the lab; docs/failover.md, "Verdict evidence"). Reads a lab run folder made
with `lowtide lab run ... --pcap`: messages.csv (each message's send, its last byte's write
into the kernel `written_ms`, its latency; the floor probe) and pcap/trial-N/ (every packet
leaving the forward bottleneck, the trial's start on the pcap's clock, its variants).

Side by side, every variant's stream is a lowtide connection of its own in the same pcap. A
connection is matched to its variant by the messages' stamps (send time and number, the
payload's first 16 bytes): stamp - the row's sent_s is one constant for the right variant.
Of a message carried by several connections (a switch's resend, the duplicate lane) the copy
that left the bottleneck first counts. Each delivered message's latency is split into parts
that add up exactly (as conference-split.py):

  lowtide's queue    send to its last byte's write into the kernel (written_ms)
  unsent ahead       the write to the departure of the last stream byte before the message
                     (its first copy)
  own bytes          then to its own last byte's departure (the window's room for its own
                     segments)
  own repair         a retransmitted last byte: its departure after the first copy's (at
                     most the next byte's first copy's departure: a lower bound)
  network            departure to leaving the bottleneck: the floor probe's one-way latency
  in-order wait      leaving the bottleneck to every earlier byte having left it (a repair)
  receiver           then to the application's receipt

Sender-side latency is the lab's: the latency minus the floor probe's at the send. A message
is behind a repair (from the packets) when one of its own bytes first left in a
retransmission (it filled a hole) or it waited over 1 ms for an earlier byte's. For all
messages and for those behind no repair, the split at the sender-side p50, p90 and p99: the
mean parts of the messages ranked within +-0.5% of the quantile (at least 5 messages).

It also prints a lower bound from the path's parts alone (own repair, in-order wait and the
network's time above the floor at the send; every other part is >= 0) and how many messages it puts
over `--over` ms (the goal's 1 RTT): more than 1% there and the sender-side p99 exceeds it
whatever the sender's own parts.

Usage: stream-split.py RUN_DIR [--variant NAME] [--from-s 5] [--to-s 75] [--over 100]
       [--worst 0]
"""
import argparse
import csv
import glob
import struct
import sys
from collections import Counter, defaultdict

from lowtide_pcap import FLOOR, MSS, Floor, Stream, lowtide_connections, messages, packets
from tail_common import quantile

PARTS = ["lowtide's queue", "unsent ahead", "own bytes", "own repair", "network", "in-order wait",
         "receiver"]
REPAIR_WAIT_S = 0.001


def matching_variant(msgs, sent_by_variant):
    """The variant whose sent_s rows the stamps of `msgs` match (stamp - sent_s constant to
    20 us over the first 200 messages), or None."""
    stamps = []
    for (_, seq), m in sorted(msgs.items(), key=lambda kv: kv[0][1])[:200]:
        head = m[3]
        if head and len(head) == 16 and struct.unpack("!Q", head[8:16])[0] == seq:
            stamps.append((seq, struct.unpack("!Q", head[:8])[0] / 1e9))
    for v, sent in sent_by_variant.items():
        d = [t - sent[k] for k, t in stamps if k < len(sent)]
        if len(d) >= min(len(stamps), 20) > 0 and max(d) - min(d) < 20e-6:
            return v
    return None


def split_message(st, floor, m, row):
    """The parts (s) of one message's latency, and facts about its packets."""
    s0, e0 = m[0], m[1]
    c = float(row["sent_s"])
    w = c + (float(row["written_ms"]) / 1e3 if row.get("written_ms") else 0.0)
    arr = c + float(row["latency_ms"]) / 1e3
    x = st.exit(e0 - 1)
    fl = floor.at_exit(x)
    prev, first, dep = st.departures(s0, e0, w, floor.at_exit)
    got = st.in_order(e0 - 1)
    parts = [w - c, max(prev - w, 0.0), first - max(w, prev), dep - first, fl, got - x,
             arr - got]
    own = st.pieces_of(s0, e0)
    x0 = st.exit(s0)
    facts = {
        "repair": any(p[3] for p in own) or got - x > REPAIR_WAIT_S,
        "packets": len(own),
        "wire_bytes": e0 - s0,
        "frames": m[4],
        # its last byte's departure after its first byte's
        "head_to_tail": (dep - (x0 - floor.at_exit(x0))),
        "last_packet_bytes": st.piece(e0 - 1)[4],
        "sent_s": c,
        "arrive_s": arr,
    }
    return parts, facts


def split_at(rows, q):
    """The mean parts of the rows ranked within +-0.5% of the sender-side q-quantile."""
    rows = sorted(rows, key=lambda r: r[0])
    n = len(rows)
    k = round((n - 1) * q)
    half = max(2, round(0.005 * n))
    near = rows[max(0, k - half):k + half + 1]
    return [sum(r[1][i] for r in near) / len(near) for i in range(len(PARTS))], near


def report(v, rows, worst, a_over):
    """Prints one variant's split. rows: (sender-side ms, parts ms, facts, floor at send ms,
    latency ms)."""
    ss = [r[0] for r in rows]
    clean = [r for r in rows if not r[2]["repair"]]
    fr = Counter(r[2]["frames"] for r in rows)
    pk = Counter(min(r[2]["packets"], 3) for r in rows)
    n = len(rows)
    print(f"  {n} messages; sender-side p50 {quantile(ss, 0.5):.1f}, p90 {quantile(ss, 0.9):.1f}, "
          f"p99 {quantile(ss, 0.99):.1f} ms; behind a repair (packets): {n - len(clean)} "
          f"({100 * (n - len(clean)) / n:.1f}%)")
    print(f"  wire bytes per message p50 {quantile([r[2]['wire_bytes'] for r in rows], 0.5):.0f} "
          f"(payload and lowtide's frame headers; one segment holds {MSS}); frames per message: "
          + ", ".join(f"{k}: {100 * c / n:.1f}%" for k, c in sorted(fr.items()))
          + "; packets carrying its bytes: "
          + ", ".join(f"{'3+' if k == 3 else k}: {100 * c / n:.1f}%" for k, c in sorted(pk.items())))
    # The path's parts alone: the wait for a repair after leaving the bottleneck, plus the
    # network's time above the floor at the send (negative when the queue fell meanwhile).
    # Every other part is >= 0, so this bounds the sender-side latency from below.
    wait = [r[1][5] for r in rows]
    bound = [r[1][3] + r[1][4] + r[1][5] - r[3] for r in rows]
    over = sum(x > a_over for x in bound)
    own_rx = sum(r[1][3] > 0 for r in rows)
    print(f"  in-order wait (a repair after leaving the bottleneck) p90 {quantile(wait, 0.9):.1f},"
          f" p99 {quantile(wait, 0.99):.1f} ms; own last byte retransmitted: {own_rx}; the path's "
          f"parts alone (own repair + network + in-order wait - floor at the send) over "
          f"{a_over:.0f} ms: {over} ({100 * over / n:.1f}%), their p99 {quantile(bound, 0.99):.1f}"
          f" ms")
    ht = [r[2]["head_to_tail"] * 1e3 for r in rows]
    print(f"  its last byte's departure after its first byte's: p50 {quantile(ht, 0.5):.1f}, "
          f"p90 {quantile(ht, 0.9):.1f}, p99 {quantile(ht, 0.99):.1f} ms; last byte in a packet "
          f"of under 100 bytes: {100 * sum(r[2]['last_packet_bytes'] < 100 for r in rows) / n:.1f}%")
    print("  %-22s %7s %7s %7s %7s %7s %7s %7s %8s %7s %7s %7s" % (
        "at the sender-side", "queue", "ahead", "own", "own-rx", "network", "in-ord", "recv",
        "latency", "fl.send", "packets", "hd-tl"))
    for name, group in (("all", rows), ("no repair", clean)):
        if not group:
            print(f"  {name}: none")
            continue
        for q in (0.5, 0.9, 0.99):
            parts, near = split_at(group, q)
            lat = sum(r[4] for r in near) / len(near)
            fls = sum(r[3] for r in near) / len(near)
            pks = sum(r[2]["packets"] for r in near) / len(near)
            hd = sum(r[2]["head_to_tail"] for r in near) / len(near) * 1e3
            print("  %-22s %7.1f %7.1f %7.1f %7.1f %7.1f %7.1f %7.1f %8.1f %7.1f %7.2f %7.1f" % (
                f"{name} p{round(q * 100)} ({len(near)})", *parts, lat, fls, pks, hd))
    if worst:
        print("  worst behind no repair: sent s, sender-side ms, parts ms, packets, head-to-tail ms")
        for r in sorted(clean, key=lambda r: -r[0])[:worst]:
            print(f"  {r[2]['sent_s']:.3f} {r[0]:.1f} "
                  + " ".join(f"{p:.1f}" for p in r[1])
                  + f" {r[2]['packets']} {r[2]['head_to_tail'] * 1e3:.1f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("--variant")
    ap.add_argument("--from-s", type=float, default=5.0)
    ap.add_argument("--to-s", type=float, default=75.0)
    ap.add_argument("--worst", type=int, default=0)
    ap.add_argument("--over", type=float, default=100.0)
    a = ap.parse_args()
    try:
        with open(f"{a.run}/messages.csv") as f:
            all_rows = list(csv.DictReader(f))
    except OSError as e:
        sys.exit(f"{a.run}/messages.csv: {e}")
    if all_rows and "written_ms" not in all_rows[0]:
        print("messages.csv has no written_ms (a run before it was recorded): lowtide's queue "
              "counts as 0 and its time lands in the later parts")
    trials = sorted(glob.glob(f"{a.run}/pcap/trial-*"), key=lambda p: int(p.rsplit("-", 1)[1]))
    if not trials:
        sys.exit(f"{a.run}/pcap: no trial folders (run the lab with --pcap)")
    for trial in trials:
        k = int(trial.rsplit("-", 1)[1]) - 1  # messages.csv counts trials from 0
        with open(f"{trial}/variants.txt") as f:
            names = [n.strip() for n in f if n.strip()]
        with open(f"{trial}/start.txt") as f:
            start_wall = float(f.read())
        floor = Floor(all_rows, k)
        if not floor:
            print(f"{trial}: no floor probe delivered: no split")
            continue
        by_variant = defaultdict(list)
        for r in all_rows:
            if r["trial"] == str(k) and r["series"] != FLOOR and r["series"] in names:
                by_variant[r["series"]].append(r)
        for rs in by_variant.values():
            rs.sort(key=lambda r: float(r["sent_s"]))  # message k is the k-th sent
        sent = {v: [float(r["sent_s"]) for r in rs] for v, rs in by_variant.items()}
        tcp, probe_exits = packets(f"{trial}/forward.pcap", start_wall)
        cal = floor.receipt_minus_exit(probe_exits)
        print(f"== {trial}: {len(names)} variants; probe receipt - exit p50 "
              f"{quantile(cal, 0.5):.2f} ms, p99 {quantile(cal, 0.99):.2f} ms ({len(cal)} probes)")
        # variant -> seq -> (its copy's last byte exit, stream, decoded message)
        copies = defaultdict(dict)
        conns = Counter()
        for key, segs in lowtide_connections(tcp).items():
            st = Stream(segs)
            msgs = messages(st.bytes, st.complete)
            v = matching_variant(msgs, sent)
            if v is None:
                continue
            conns[v] += 1
            for (_, seq), m in msgs.items():
                if m[1] > st.complete or m[3] is None:
                    continue
                x = st.exit(m[1] - 1)
                if seq not in copies[v] or x < copies[v][seq][0]:
                    copies[v][seq] = (x, st, m)
        for v in names:
            if a.variant and v != a.variant:
                continue
            if v not in copies:
                print(f"{v}: no lowtide connection in the pcap matches its messages")
                continue
            rows, missing = [], 0
            for seq, r in enumerate(by_variant[v]):
                t = float(r["sent_s"])
                if r["censored"] != "0" or not a.from_s <= t < a.to_s:
                    continue
                fls = floor.at_send(t)
                if fls is None:
                    continue
                if seq not in copies[v]:
                    missing += 1
                    continue
                _, st, m = copies[v][seq]
                parts, facts = split_message(st, floor, m, r)
                lat = float(r["latency_ms"])
                rows.append((lat - fls, [p * 1e3 for p in parts], facts, fls, lat))
            print(f"{v}: {conns[v]} connection(s) with its messages; {missing} delivered "
                  f"messages not found whole in the pcap")
            if rows:
                report(v, rows, a.worst, a.over)


if __name__ == "__main__":
    main()
