//! TFRC's small-packet variant, TFRC-SP: Floyd, Kohler, "TCP Friendly Rate Control (TFRC):
//! The Small-Packet (SP) Variant", RFC 4828, Section 3.
//!
//! Standard TFRC (RFC 5348) gives a flow TCP's *packet* rate: a flow of 400-byte packets gets
//! about a third of the bytes per second of a TCP flow of full-sized segments at the same loss
//! event rate. TFRC-SP aims at the same *bit* rate as a TCP flow of 1500-byte packets:
//!
//! 1. The equation uses the nominal segment size `s = 1460` bytes ([`NOMINAL_SEGMENT`]), not
//!    the flow's packet size.
//! 2. The rate is reduced by the header penalty `s_true / (s_true + H)`, `s_true` the mean size
//!    of the flow's data packets and `H = 40` bytes ([`HEADER`]): small packets spend more of the
//!    bottleneck on headers.
//! 3. Data packets leave at least 10 ms apart ([`MIN_INTERVAL`]): at most 100 packets a second.
//! 4. A loss interval shorter than two round-trip times counts the packets lost in the loss
//!    event that starts it: its length is the interval's packets divided by those losses
//!    ([`interval_length`]). A small-packet flow at a queue that drops many packets at once
//!    then sees the loss *rate*, not one event per RTT.
//! 5. The open interval `I_0` counts in the average (§5.4's `max(I_tot0, I_tot1)`) only once
//!    the most recent loss event began at least two round-trip times ago ([`open_counts`]).
//!
//! Where we differ:
//! - `s_true` is the sender's mean packet size (an EWMA over about 64 packets, as in
//!   `crate::sender`), and the receiver's mean received size when it seeds the first loss
//!   interval (RFC 5348 §6.3.1 through this variant's equation).
//! - The header penalty applies to the equation's rate `X_Bps`; the receive limit
//!   (`2·X_recv`) already counts the bytes this flow delivered and is not reduced again.
//! - A short interval's length is the exact quotient, not rounded to a whole packet.
//! - Both ends must be configured alike (`TfrcConfig::small_packets`): DCCP negotiates
//!   CCID 4 in its handshake (RFC 5622), our datagrams carry no variant. With a standard
//!   receiver only rules 4-5 are lost; the sender's rules 1-3 still hold.

use std::time::Duration;

use crate::equation;

/// The nominal segment size of the equation, bytes (RFC 4828 §3, rule 1).
pub const NOMINAL_SEGMENT: f64 = 1460.0;
/// `H`: the header size of the penalty, bytes (RFC 4828 §3, rule 2).
pub const HEADER: f64 = 40.0;
/// The shortest interval between data packets (RFC 4828 §3, rule 3).
pub const MIN_INTERVAL: Duration = Duration::from_millis(10);

/// The rate TFRC-SP allows, bytes per second, for data packets of mean size `s_true` bytes,
/// round-trip time `rtt` and loss event rate `p`: the equation with `s = 1460` times
/// `s_true / (s_true + H)`.
pub fn allowed_rate(s_true: f64, rtt: Duration, p: f64) -> f64 {
    equation::throughput(NOMINAL_SEGMENT, rtt, p) * penalty(s_true)
}

/// The loss event rate at which [`allowed_rate`] is `rate` (the inverse, for the first loss
/// interval's seed, RFC 5348 §6.3.1).
pub fn loss_rate_for(s_true: f64, rtt: Duration, rate: f64) -> f64 {
    equation::loss_rate_for(NOMINAL_SEGMENT, rtt, rate / penalty(s_true))
}

/// `s_true / (s_true + H)`.
fn penalty(s_true: f64) -> f64 {
    let s = s_true.max(1.0);
    s / (s + HEADER)
}

/// The length of a closed loss interval of `packets` packets that lasted `duration` and
/// began with a loss event of `lost` lost packets: `packets / lost` when it lasted less than
/// two round-trip times, else `packets` (rule 4).
pub fn interval_length(packets: u64, lost: u64, duration: Duration, rtt: Duration) -> f64 {
    if duration < rtt * 2 && lost > 1 {
        packets as f64 / lost as f64
    } else {
        packets as f64
    }
}

/// Whether the open interval counts in the average: the most recent loss event began
/// `since_event` ago (rule 5).
pub fn open_counts(since_event: Duration, rtt: Duration) -> bool {
    since_event >= rtt * 2
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference values from `bc -l` at 40 digits, as printed:
    /// `echo "scale=40; s=1460; t=…; h=40; r=…; p=…; s / (r*sqrt(2*p/3) + 4*r*(3*sqrt(3*p/8))*p*(1+32*p^2)) * t/(t+h)" | bc -l`
    /// (`t` = `s_true`).
    const REFERENCE: [(f64, f64, f64, &str); 3] = [
        (
            400.0,
            0.9,
            0.01,
            "16566.1678959565424774803026239170382128909879",
        ),
        (
            1200.0,
            0.1,
            0.001,
            "542333.9049979661157723616750983687144478940997",
        ),
        (
            100.0,
            0.4,
            0.1,
            "4614.9089885273803966127966535667793743656090",
        ),
    ];

    #[test]
    fn the_rate_is_the_nominal_equation_times_the_header_penalty_to_1e_6() {
        for (s_true, r, p, want) in REFERENCE {
            let want: f64 = want.parse().expect("a decimal number");
            let got = allowed_rate(s_true, Duration::from_secs_f64(r), p);
            let rel = ((got - want) / want).abs();
            assert!(rel < 1e-6, "s_true={s_true} R={r} p={p}: {got} vs {want}");
            assert!((got - want).abs() < 1e-6, "{got} vs {want}");
            // the inverse: the seed's p gives the rate back
            let back = loss_rate_for(s_true, Duration::from_secs_f64(r), got);
            assert!(((back - p) / p).abs() < 1e-6, "p={p} back={back}");
        }
    }

    #[test]
    fn short_intervals_count_every_lost_packet_and_young_open_intervals_do_not_count() {
        let rtt = Duration::from_millis(100);
        // 60 packets in 150 ms (< 2 RTT), the event lost 3: 20
        assert_eq!(
            interval_length(60, 3, Duration::from_millis(150), rtt),
            20.0
        );
        // exact quotient
        assert_eq!(
            interval_length(50, 4, Duration::from_millis(199), rtt),
            12.5
        );
        // two RTTs or longer, or one loss: the packets
        assert_eq!(
            interval_length(60, 3, Duration::from_millis(200), rtt),
            60.0
        );
        assert_eq!(interval_length(60, 1, Duration::from_millis(50), rtt), 60.0);
        assert!(!open_counts(Duration::from_millis(199), rtt));
        assert!(open_counts(Duration::from_millis(200), rtt));
    }
}
