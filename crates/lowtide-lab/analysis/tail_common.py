"""Helpers shared by the lab's tail scripts (conference-tail.py, stream-tail.py)."""

import math


def quantile(xs, q):
    """The q-quantile of xs by linear interpolation; NaN for no samples."""
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def loss_episodes(tcp):
    """Intervals [start, end] of TCP_INFO samples (tcpinfo.csv rows) in Recovery or Loss."""
    out, start, last = [], None, None
    for r in tcp:
        t, lossy = float(r["t_s"]), int(r["ca_state"]) >= 3
        if lossy and start is None:
            start = t
        if not lossy and start is not None:
            out.append((start, last))
            start = None
        last = t
    if start is not None:
        out.append((start, last))
    return out
