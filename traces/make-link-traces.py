#!/usr/bin/env python3
"""Makes the cellular-like capacity traces in traces/links/ (mahimahi format) and their README.

Deterministic: a fixed seed per trace and only random.Random.random(), so the same Python 3
writes the same files. Run from anywhere: python3 traces/make-link-traces.py

The model, per millisecond (one LTE transmission time interval):
- a base rate that the trace's story sets (steady, a collapse, an outage, a slow ramp);
- fading: the base times exp(sigma * X - sigma^2 / 2), X an AR(1) Gaussian process with a
  300 ms time constant (slow fading as a phone moves), so the mean stays the base;
- scheduling: the base station serves this phone in a given millisecond with probability
  0.6; capacity earned meanwhile is delivered at once when it is served (bursts of repeated
  timestamps), at most 50 ms of it (the scheduler does not owe more);
- scheduling stalls: with probability 0.003 per ms, nothing is served for 20 to 80 ms
  (retransmissions, other users), capacity earned meanwhile capped as above.
Each 1500 bytes of delivered capacity is one line (one delivery opportunity). The last line
is the period, 180000 ms, so every trace loops after 3 minutes.

The step traces (STEPS) are a wired link's capacity changing in one step, with no fading and
no scheduling: a packet whenever 1500 bytes of capacity have accrued.
"""

import math
import os
import random

PERIOD_MS = 180_000
PACKET_BITS = 1500 * 8
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "links")


def steady(t_ms):
    return 10.0


def collapse(t_ms):
    """10 Mbit/s; at 20 s (and 80 s, 140 s) a fall to 0.8 Mbit/s within 300 ms (into a
    crowded cell, or indoors), 15 s there, back to 10 over 5 s."""
    s = (t_ms % 60_000) / 1000.0
    if s < 20.0:
        return 10.0
    if s < 20.3:
        return 10.0 - (10.0 - 0.8) * (s - 20.0) / 0.3
    if s < 35.0:
        return 0.8
    if s < 40.0:
        return 0.8 + (10.0 - 0.8) * (s - 35.0) / 5.0
    return 10.0


def outage(t_ms):
    """10 Mbit/s; at 20 s (and 80 s, 140 s) nothing at all for 1 s (a handover or a radio
    link failure)."""
    s = (t_ms % 60_000) / 1000.0
    return 0.0 if 20.0 <= s < 21.0 else 10.0


def ramp(t_ms):
    """From 1 up to 20 Mbit/s over 90 s and back down over 90 s (walking toward a cell
    tower and away): slow enough for TCP to follow."""
    s = t_ms / 1000.0
    x = s / 90.0 if s < 90.0 else (180.0 - s) / 90.0
    return 1.0 + 19.0 * x


TRACES = [
    ("cellular-steady", steady, 0.25, 1,
     "About 10 Mbit/s with cellular fading, bursts and scheduling gaps, and no event: the reference for the others."),
    ("cellular-collapse", collapse, 0.25, 2,
     "About 10 Mbit/s, collapsing to 0.8 Mbit/s within 300 ms at 20 s, 80 s and 140 s for 15 s, recovering over 5 s: a deep queue built at 10 Mbit/s drains 12 times slower."),
    ("cellular-outage", outage, 0.25, 3,
     "About 10 Mbit/s with a complete outage of 1 s (no delivery opportunity at all) at 20 s, 80 s and 140 s."),
    ("cellular-ramp", ramp, 0.25, 4,
     "A slow ramp from 1 to 20 Mbit/s over 90 s and back down over 90 s, with the same fading."),
]


def step_6_to_1_5(t_ms):
    """6 Mbit/s, 1.5 Mbit/s from 20 s to 40 s (the live-video scenario's drop)."""
    return 1.5 if 20_000 <= t_ms % 60_000 < 40_000 else 6.0


def step_short(t_ms):
    """The same step in half the time: 1.5 Mbit/s from 10 s to 20 s (the demo's live video)."""
    return 1.5 if 10_000 <= t_ms % 30_000 < 20_000 else 6.0


STEPS = [
    ("step-6-1.5-6", step_6_to_1_5, 60_000,
     "A wired link at 6 Mbit/s that falls to 1.5 Mbit/s at 20 s and returns at 40 s, exact (no fading, no scheduling); loops every 60 s."),
    ("step-6-1.5-6-short", step_short, 30_000,
     "The same step in half the time: 1.5 Mbit/s from 10 s to 20 s; loops every 30 s."),
]


def make_exact(base, period_ms):
    credit = 0.0
    times = []
    for t in range(period_ms):
        credit += base(t) * 1000.0
        while credit >= PACKET_BITS:
            credit -= PACKET_BITS
            times.append(t)
    times.append(period_ms)
    return times


def gaussian(rng):
    # Box-Muller from random() alone, so the stream is the same in every Python 3.
    u1 = max(rng.random(), 1e-12)
    u2 = rng.random()
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


def make(base, sigma, seed):
    rng = random.Random(seed)
    a = math.exp(-1.0 / 300.0)
    x = 0.0
    credit = 0.0
    stall = 0
    times = []
    for t in range(PERIOD_MS):
        x = a * x + math.sqrt(1.0 - a * a) * gaussian(rng)
        rate = base(t) * math.exp(sigma * x - sigma * sigma / 2.0)  # Mbit/s
        credit += rate * 1000.0  # bits in this millisecond
        cap = rate * 1000.0 * 50.0
        if base(t) == 0.0:
            credit = 0.0  # an outage carries nothing, and owes nothing afterwards
        if stall > 0:
            stall -= 1
        elif rng.random() < 0.003:
            stall = 20 + int(rng.random() * 61)
        credit = min(credit, max(cap, PACKET_BITS))
        if stall == 0 and rng.random() < 0.6:
            n = int(credit // PACKET_BITS)
            credit -= n * PACKET_BITS
            times.extend([t] * n)
    times.append(PERIOD_MS)
    return times


def stats(times, period_ms=PERIOD_MS):
    per_s = [0] * (period_ms // 1000)
    for t in times:
        per_s[min(t // 1000, len(per_s) - 1)] += 1
    mbps = [n * PACKET_BITS / 1e6 for n in per_s]
    gaps = [b - a for a, b in zip(times, times[1:])]
    return {
        "lines": len(times),
        "mean": len(times) * PACKET_BITS / (period_ms / 1000.0) / 1e6,
        "min_s": min(mbps),
        "max_s": max(mbps),
        "gap": max(gaps),
        "same_ms": sum(1 for g in gaps if g == 0) / max(1, len(gaps)),
    }


def main():
    os.makedirs(OUT, exist_ok=True)
    rows = []
    for name, base, sigma, seed, what in TRACES:
        times = make(base, sigma, seed)
        with open(os.path.join(OUT, name + ".mahi"), "w") as f:
            f.write("".join(f"{t}\n" for t in times))
        s = stats(times)
        rows.append((name, what, s))
        print(f"wrote traces/links/{name}.mahi: {s['lines']} lines, {s['mean']:.2f} Mbit/s mean")
    for name, base, period_ms, what in STEPS:
        times = make_exact(base, period_ms)
        with open(os.path.join(OUT, name + ".mahi"), "w") as f:
            f.write("".join(f"{t}\n" for t in times))
        s = stats(times, period_ms)
        rows.append((name, what, s))
        print(f"wrote traces/links/{name}.mahi: {s['lines']} lines, {s['mean']:.2f} Mbit/s mean")
    with open(os.path.join(OUT, "README.md"), "w") as f:
        f.write("# Capacity traces (mahimahi format)\n\n")
        f.write("Made by `traces/make-link-traces.py` (deterministic, seeded; its docstring has the model).\n")
        f.write("Each line is a millisecond at which one 1500-byte packet may leave; repeated lines are\n")
        f.write("several packets in that millisecond; a trace loops, its last line is the period (3 minutes\n")
        f.write("for the cellular ones, 60 s and 30 s for the steps). Use one as a link's `trace = \"...\"` (see\n")
        f.write("`docs/netem.md`); `scenarios/cellular.toml` runs the collapse, `scenarios/live-video.toml` and the demo the steps.\n\n")
        f.write("| trace | what it models | mean | slowest / fastest second | longest gap | lines in the same ms |\n")
        f.write("| --- | --- | --- | --- | --- | --- |\n")
        for name, what, s in rows:
            f.write(f"| `{name}.mahi` | {what} | {s['mean']:.2f} Mbit/s | {s['min_s']:.2f} / {s['max_s']:.2f} Mbit/s | {s['gap']} ms | {100 * s['same_ms']:.0f}% |\n")
    print("wrote traces/links/README.md")


if __name__ == "__main__":
    main()
