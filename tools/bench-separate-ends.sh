#!/usr/bin/env bash
# Runs `lowtide bench --placement two-cpus` so that each end of every transfer pays for its
# own kernel receive work: the sender on the first CPU, the receiver on the second, in a
# network namespace of its own whose loopback steers each incoming segment to the CPU of the
# thread that reads its socket (receive flow steering, RFS). Without it, loopback processes a
# segment in softirq on the CPU that sent it, so the sender pays for the receiver's TCP work
# and the receiver for the sender's ACK processing; with it, the busy time of each end's CPU
# (the bench's `sender_side_s_per_gb` / `receiver_side_s_per_gb`) is what that end costs, as
# when the two run on different hosts (docs/transport.md, "Which CPU per GB").
#
# Usage (root; on a shared machine under tools/lt-timing):
#   tools/bench-separate-ends.sh [lowtide bench options...]
# LOWTIDE=path/to/lowtide selects the binary (default ./target/release/lowtide).
# Changes nothing outside its namespace except net.core.rps_sock_flow_entries (RFS's global
# table size, 0 by default: RFS then acts nowhere else), which it restores on exit.
set -euo pipefail
bin=${LOWTIDE:-./target/release/lowtide}
[ -x "$bin" ] || { echo "no lowtide binary at $bin (set LOWTIDE)" >&2; exit 2; }
ns=lt-bench-ends-$$
entries=/proc/sys/net/core/rps_sock_flow_entries
old_entries=$(cat "$entries")
cleanup() {
    ip netns del "$ns" 2>/dev/null || true
    echo "$old_entries" > "$entries"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
ip netns add "$ns"
mask=$(printf '%x' $(( (1 << $(nproc)) - 1 )))
rmem=$(cat /proc/sys/net/ipv4/tcp_rmem)
wmem=$(cat /proc/sys/net/ipv4/tcp_wmem)
ip netns exec "$ns" sh -c "
    ip link set lo up
    echo '$rmem' > /proc/sys/net/ipv4/tcp_rmem
    echo '$wmem' > /proc/sys/net/ipv4/tcp_wmem
    echo $mask > /sys/class/net/lo/queues/rx-0/rps_cpus
    echo 32768 > /sys/class/net/lo/queues/rx-0/rps_flow_cnt
"
[ "$old_entries" -ge 32768 ] || echo 32768 > "$entries"
ip netns exec "$ns" "$bin" bench --placement two-cpus "$@"
