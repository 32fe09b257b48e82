"""A lab run's packets, for the split scripts (conference-split.py, stream-split.py): the pcap
of the bottleneck's exit (`lowtide lab run ... --pcap`), each TCP connection's byte stream
rebuilt from the packets that left the bottleneck, lowtide's frames decoded from it
(docs/wire.md), and the floor probe's one-way latency at a moment."""

import bisect
import struct
import sys
from collections import defaultdict

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
    """Per TCP connection (src, sport, dst, dport) its segments (time, seq, flags, payload);
    the UDP floor probes' exit times. Times are seconds since the trial's start."""
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


def ack_numbers(path, start_wall):
    """Per TCP connection (src, sport, dst, dport) of a pcap: (time, acknowledged sequence
    number) of every packet with the ACK flag. Times are seconds since the trial's start."""
    out = defaultdict(list)
    for ts, eth in read_pcap(path):
        if len(eth) < 34 or eth[12:14] != b"\x08\x00":
            continue
        ip = eth[14:]
        ihl = (ip[0] & 15) * 4
        if ip[9] != 6:
            continue
        l4 = ip[ihl:]
        sport, dport, _, ack = struct.unpack("!HHII", l4[:12])
        if l4[13] & 0x10:
            out[(ip[12:16], sport, ip[16:20], dport)].append((ts - start_wall, ack))
    return out


def lowtide_connections(tcp):
    """The connections of `packets` whose first data is lowtide's hello ("LWTD")."""
    return {k: s for k, s in tcp.items() if any(p[3][:4] == b"LWTD" for p in s[:4])}


class Stream:
    """One direction of a TCP connection rebuilt from the packets that left the bottleneck:
    its bytes, and per byte the exit of the first copy to leave (a dropped copy never leaves
    it). A piece that fills a hole below the highest byte seen is a retransmission."""

    def __init__(self, segs):
        syn = [s for s in segs if s[2] & 0x02]
        isn = (syn[0][1] + 1) if syn else min(s[1] for s in segs if s[3])
        self.pieces = []  # (start, end, time, repair, the packet's payload length)
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
                self.pieces.append((lo, e, t, False, len(pl)))
                buf.extend(b"\0" * (e - len(buf)))
                buf[lo:e] = pl[lo - s:]
                top = e
            for h in holes:
                a, b = max(h[0], s), min(h[1], e)
                if a < b:
                    self.pieces.append((a, b, t, True, len(pl)))
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

    def piece(self, off):
        return self.pieces[bisect.bisect_right(self.starts, off) - 1]

    def exit(self, off):
        return self.piece(off)[2]

    def in_order(self, off):
        return self.avail[bisect.bisect_right(self.starts, off) - 1]

    def first_copy_before(self, off):
        """The exit of the last byte before `off` that left in its first transmission, or
        None (a retransmitted byte left late: its lost copy went out before its neighbours)."""
        i = bisect.bisect_right(self.starts, off - 1) - 1
        while i >= 0 and self.pieces[i][3]:
            i -= 1
        return self.pieces[i][2] if i >= 0 else None

    def first_copy_after(self, off):
        """The exit of the first byte after `off` that left in its first transmission, or
        None. A lost byte's copy left before it, so this bounds that departure from above."""
        i = bisect.bisect_right(self.starts, off)
        while i < len(self.pieces) and self.pieces[i][3]:
            i += 1
        return self.pieces[i][2] if i < len(self.pieces) else None

    def departures(self, s0, e0, written, floor_at):
        """For a message in bytes [s0, e0) whose last byte was written at `written`: the
        departure of the byte before it (its first copy; `written` for the stream's first
        message), of its own last byte's first copy (for a retransmitted last byte at the
        latest the next first copy's: a lower bound on the repair), and of the copy that left
        the bottleneck. Departure = exit - the floor probe's latency then."""
        dep_of = lambda x: x - floor_at(x)
        xp = self.first_copy_before(s0) if s0 > 0 else None
        prev = dep_of(xp) if xp is not None else written
        dep = dep_of(self.exit(e0 - 1))
        first = dep
        if self.piece(e0 - 1)[3]:
            xa = self.first_copy_after(e0 - 1)
            if xa is not None:
                first = min(dep, dep_of(xa))
        return prev, first, dep

    def pieces_of(self, s0, e0):
        """The pieces holding bytes [s0, e0): one per packet that first carried some."""
        i = bisect.bisect_right(self.starts, s0) - 1
        out = []
        while i < len(self.pieces) and self.pieces[i][0] < e0:
            out.append(self.pieces[i])
            i += 1
        return out


def varint(b, i):
    v = shift = 0
    while True:
        x = b[i]
        i += 1
        v |= (x & 0x7F) << shift
        shift += 7
        if not x & 0x80:
            return v, i


def first_frame(b):
    """The type of the first frame after the hello of a lowtide byte stream, or None: a
    duplicate lane begins with DATA_FIRST (3), a backup taken over with SWITCH (8), a primary
    with STREAM_OPEN (1)."""
    if b[:4] != b"LWTD":
        return None
    try:
        i = 5
        n, i = varint(b, i)
        for _ in range(2 * n):
            _, i = varint(b, i)
        return varint(b, i)[0] if i < len(b) else None
    except IndexError:
        return None


def messages(b, end):
    """(stream, seq) -> [its first frame's first byte, its last byte + 1, importance, its
    first 16 payload bytes, the frames it took] of every message in a lowtide byte stream (docs/wire.md), up to
    `end`."""
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
                m = out.setdefault((stream, seq), [i, i + n, None, None, 0])
                m[4] += 1
                if kind == 3:
                    m[0], m[2], m[3] = frame_start, imp, b[i:i + 16]
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


class Floor:
    """The floor probe's one-way latency over a trial, from messages.csv rows of the probe
    (its receipt stands for its exit from the bottleneck: the receiver adds ~0.05 ms)."""

    def __init__(self, rows, trial):
        self.probes = sorted(
            (float(r["sent_s"]) + float(r["latency_ms"]) / 1e3, float(r["latency_ms"]))
            for r in rows
            if r["series"] == FLOOR and r["censored"] == "0" and r["trial"] == str(trial)
        )
        self.t = [t for t, _ in self.probes]
        self.by_send = sorted((t - lat / 1e3, lat) for t, lat in self.probes)
        self.sent = [s for s, _ in self.by_send]

    def __bool__(self):
        return bool(self.probes)

    def at_exit(self, t):
        """The probes' one-way latency, s, at a bottleneck exit at `t`: interpolated between
        the probes that left just before and just after."""
        fl, i = self.probes, bisect.bisect_left(self.t, t)
        if i == 0 or i == len(fl):
            return fl[min(i, len(fl) - 1)][1] / 1e3
        (t0, l0), (t1, l1) = fl[i - 1], fl[i]
        return (l0 + (l1 - l0) * (t - t0) / (t1 - t0)) / 1e3 if t1 > t0 else l0 / 1e3

    def at_send(self, t, max_age_s=0.05):
        """The latency, ms, of the last probe sent at or before `t`, as the lab's
        sender-side latency takes it (None when that probe is older than `max_age_s`)."""
        i = bisect.bisect_right(self.sent, t) - 1
        if i < 0 or t - self.sent[i] > max_age_s:
            return None
        return self.by_send[i][1]

    def receipt_minus_exit(self, probe_exits):
        """Per probe seen in the pcap, its receipt minus its exit, ms (a check that the
        clocks line up: large or negative means they do not)."""
        cal = []
        for x in probe_exits:
            i = bisect.bisect_left(self.t, x - 0.002)
            if i < len(self.t) and self.t[i] - x < 0.005:
                cal.append((self.t[i] - x) * 1e3)
        return cal
