//! 1-bit RDC's receiver law: Hsiao, Kung and Tan, "Streaming Video over TCP with
//! Receiver-based Delay Control", Section 2.3.
//!
//! The receiver keeps a delay `D` imposed on every ACK, starting at `D_0 = 0`, and watches the
//! share of received packets with CE set over an observation period of one round-trip time
//! *including* the imposed delay:
//! - share ≥ a (0.9): `D_{n+1} = RTT` when `D_n = 0` (which doubles the round trip), else
//!   `D_{n+1} = 2·D_n`;
//! - share ≤ b (0.1): Eq. (3), `D_{n+1} = cwnd / (cwnd + 1) · D_n`;
//! - otherwise `D` is kept.
//!
//! The next period lasts `RTT + D_{n+1}`. Increasing `D` multiplicatively and decreasing it
//! by a `1/(cwnd+1)` share keeps TCP's AIMD shape: the rate `cwnd / (RTT + D)` falls by half
//! on congestion and rises by about one packet per round trip otherwise.
//!
//! Where we differ:
//! - cwnd is estimated from the data bytes received in the period (one round trip) divided
//!   by the largest segment seen; the paper's simulation used the sender's maximum window,
//!   which it notes makes the law less aggressive.
//! - RTT is the path's own round trip, measured from TCP timestamps (`crate::rtt`); the
//!   paper's simulation used the gap between the first two data packets.
//! - A delay decreased below `zero_below` (1 ms) becomes 0, so a later increase starts again
//!   from one RTT: Eq. (3) alone only approaches zero, and doubling a microsecond would take
//!   many periods to matter.
//! - A delay is capped at `max_delay` (4 s by default); the cap is counted.
//! - A period in which no data arrived decides nothing.
//! - Optionally (`max_step`, off by default) one increase adds at most a fixed step to the
//!   delay instead of doubling it, so the delay cannot run away to seconds (which the
//!   decrease, needing a period of ≤ b marks, is slow to undo). Built to test whether
//!   doublings past Linux's RTO margin made 1-bit RDC's timeouts: they did not (docs/rdc.md).
//! - Only data-carrying packets count toward the share (a sender's pure ACKs are rarely ECN
//!   capable and say nothing about this flow's data path).

use std::time::{Duration, Instant};

use serde::Serialize;

/// What one observation period saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Observation {
    pub packets: u32,
    pub marked: u32,
    pub bytes: u64,
}

/// The observation period in progress.
#[derive(Debug, Clone, Copy)]
pub struct Period {
    pub start: Instant,
    pub len: Duration,
    pub seen: Observation,
}

impl Period {
    pub fn new(start: Instant, len: Duration) -> Self {
        Self {
            start,
            len,
            seen: Observation::default(),
        }
    }

    pub fn is_over(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.start) >= self.len
    }

    pub fn record(&mut self, bytes: u32, marked: bool) {
        self.seen.packets += 1;
        self.seen.marked += u32::from(marked);
        self.seen.bytes += u64::from(bytes);
    }

    /// Packets per round trip: the bytes seen, scaled to one period length, in segments.
    pub fn cwnd_estimate(&self, now: Instant, mss: u32) -> f64 {
        let elapsed = now.saturating_duration_since(self.start).max(self.len);
        let per_period =
            self.seen.bytes as f64 * self.len.as_secs_f64() / elapsed.as_secs_f64().max(1e-9);
        (per_period / f64::from(mss.max(1))).max(1.0)
    }
}

/// What a period's decision did to the delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    Increased,
    /// Increased, but held at `max_delay`.
    Capped,
    Decreased,
    Kept,
    /// No data arrived in the period.
    NoData,
}

/// The law's parameters (checked in [`crate::AgentConfig::validate`]).
#[derive(Debug, Clone, Copy)]
pub struct OneBitLaw {
    pub increase_above: f64,
    pub decrease_below: f64,
    pub zero_below: Duration,
    pub max_delay: Duration,
    /// The most one increase may add (None: the paper's doubling, whatever its size).
    pub max_step: Option<Duration>,
}

impl OneBitLaw {
    /// The delay for the next period, given the current one, what the period saw, the path's
    /// round-trip time and the estimated cwnd (segments).
    pub fn next(
        &self,
        delay: Duration,
        seen: Observation,
        rtt: Duration,
        cwnd: f64,
    ) -> (Duration, Change) {
        if seen.packets == 0 {
            return (delay, Change::NoData);
        }
        let share = f64::from(seen.marked) / f64::from(seen.packets);
        if share >= self.increase_above {
            let doubled = if delay.is_zero() { rtt } else { delay * 2 };
            let wanted = self
                .max_step
                .map_or(doubled, |step| doubled.min(delay + step));
            if wanted > self.max_delay {
                (self.max_delay, Change::Capped)
            } else {
                (wanted, Change::Increased)
            }
        } else if share <= self.decrease_below && !delay.is_zero() {
            let cwnd = cwnd.max(1.0);
            let next = delay.mul_f64(cwnd / (cwnd + 1.0));
            let next = if next < self.zero_below {
                Duration::ZERO
            } else {
                next
            };
            (next, Change::Decreased)
        } else {
            (delay, Change::Kept)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAW: OneBitLaw = OneBitLaw {
        increase_above: 0.9,
        decrease_below: 0.1,
        zero_below: Duration::from_millis(1),
        max_delay: Duration::from_secs(4),
        max_step: None,
    };
    const RTT: Duration = Duration::from_millis(40);

    fn seen(packets: u32, marked: u32) -> Observation {
        Observation {
            packets,
            marked,
            bytes: u64::from(packets) * 1000,
        }
    }

    #[test]
    fn marks_above_a_set_one_rtt_then_double() {
        let (d, c) = LAW.next(Duration::ZERO, seen(10, 9), RTT, 20.0);
        assert_eq!((d, c), (RTT, Change::Increased));
        let (d, _) = LAW.next(d, seen(10, 10), RTT, 20.0);
        assert_eq!(d, 2 * RTT);
        let (d, _) = LAW.next(d, seen(10, 10), RTT, 20.0);
        assert_eq!(d, 4 * RTT);
    }

    #[test]
    fn marks_below_b_shrink_by_cwnd_over_cwnd_plus_one() {
        let (d, c) = LAW.next(Duration::from_millis(100), seen(20, 2), RTT, 4.0);
        assert_eq!(c, Change::Decreased);
        assert_eq!(d, Duration::from_millis(80));
        // Between b and a nothing changes; a quiet period changes nothing either.
        assert_eq!(LAW.next(d, seen(10, 5), RTT, 4.0), (d, Change::Kept));
        assert_eq!(LAW.next(d, seen(0, 0), RTT, 4.0), (d, Change::NoData));
        // A zero delay with no marks stays zero.
        assert_eq!(
            LAW.next(Duration::ZERO, seen(10, 0), RTT, 4.0),
            (Duration::ZERO, Change::Kept)
        );
    }

    #[test]
    fn a_step_limit_caps_each_increase_but_not_a_small_doubling() {
        let law = OneBitLaw {
            max_step: Some(Duration::from_millis(100)),
            ..LAW
        };
        // From zero: one RTT when it is below the step, else the step.
        assert_eq!(law.next(Duration::ZERO, seen(10, 10), RTT, 20.0).0, RTT);
        let long_rtt = Duration::from_millis(220);
        let (d, c) = law.next(Duration::ZERO, seen(10, 10), long_rtt, 20.0);
        assert_eq!((d, c), (Duration::from_millis(100), Change::Increased));
        // 60 ms doubles to 120 ms; 400 ms rises to 500 ms, not 800 ms.
        let (d, _) = law.next(Duration::from_millis(60), seen(10, 10), RTT, 20.0);
        assert_eq!(d, Duration::from_millis(120));
        let (d, _) = law.next(Duration::from_millis(400), seen(10, 10), RTT, 20.0);
        assert_eq!(d, Duration::from_millis(500));
        // The cap on the delay still holds, and decreases are the paper's.
        let (d, c) = law.next(Duration::from_millis(3950), seen(10, 10), RTT, 20.0);
        assert_eq!((d, c), (Duration::from_secs(4), Change::Capped));
        let (d, _) = law.next(Duration::from_millis(100), seen(20, 0), RTT, 4.0);
        assert_eq!(d, Duration::from_millis(80));
    }

    #[test]
    fn small_delays_become_zero_and_large_ones_are_capped() {
        let (d, _) = LAW.next(Duration::from_micros(1100), seen(10, 0), RTT, 1.0);
        assert_eq!(d, Duration::ZERO, "1.1 ms halves below 1 ms");
        let (d, c) = LAW.next(Duration::from_secs(3), seen(10, 10), RTT, 1.0);
        assert_eq!((d, c), (Duration::from_secs(4), Change::Capped));
    }

    #[test]
    fn aimd_in_simulated_time() {
        // A flow whose path allows 100 packets per RTT+D keeps marking while its rate is too
        // high: the delay climbs multiplicatively, then decays additively in rate terms.
        let mut d = Duration::ZERO;
        let mut changes = vec![];
        for n in 0..8 {
            let congested = n < 3;
            let (next, c) = LAW.next(d, seen(100, if congested { 95 } else { 0 }), RTT, 50.0);
            changes.push(c);
            d = next;
        }
        assert_eq!(d, (4 * RTT).mul_f64((50.0f64 / 51.0).powi(5)));
        assert_eq!(&changes[..3], &[Change::Increased; 3]);
        assert!(changes[3..].iter().all(|c| *c == Change::Decreased));
    }

    #[test]
    fn cwnd_is_bytes_per_period_in_segments() {
        let t0 = Instant::now();
        let mut p = Period::new(t0, Duration::from_millis(100));
        for _ in 0..30 {
            p.record(1000, false);
        }
        assert!(!p.is_over(t0 + Duration::from_millis(99)));
        assert!(p.is_over(t0 + Duration::from_millis(100)));
        assert_eq!(p.cwnd_estimate(t0 + Duration::from_millis(100), 1000), 30.0);
        // Decided late (200 ms): the same bytes are half a window per period.
        assert_eq!(p.cwnd_estimate(t0 + Duration::from_millis(200), 1000), 15.0);
    }
}
