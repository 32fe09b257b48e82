//! Pacing a flow's held ACKs (not in the paper; docs/rdc.md, "Exact RDC's queue p99").
//!
//! Exact RDC holds each ACK by the router's delay, so the ACKs leave with the spacing they
//! were generated with. When that spacing is lost on the way (the data arrived bunched, or
//! the agent woke late and released several due ACKs at once), the sender answers a bunch of
//! ACKs with a burst of twice as many segments, and the burst queues at the bottleneck: the
//! router's delay does not spread it, since the bucket and the FIFO rise together. The pacer
//! spreads the bunch again: a flow's held ACKs leave no closer together than its mean
//! generation gap divided by `factor`. The mean is a moving average of the gaps between the
//! flow's held ACKs (a bunch keeps the average: its first gap is long by what the others
//! lost), so with `factor` a little above 1 (1.1 fits ρ = 0.9: the flows together may then
//! send at the link's rate while they catch up) the released rate follows the flow's rate
//! and a bunch leaves at that rate, a little later, instead of at once.
//!
//! A virtual clock with a burst allowance of [`BURST`] ACKs: an ACK may leave at `slot`;
//! after it, `slot = max(slot, now − BURST · gap) + gap`.

use std::time::{Duration, Instant};

/// After a pause, 1 + BURST ACKs may leave back to back before the spacing applies.
pub const BURST: u32 = 1;
/// Weight of a new gap in the moving average.
const GAIN: f64 = 1.0 / 16.0;
/// Gaps longer than this, or than [`MAX_GAP_RATIO`] times the mean, are counted as that:
/// a pause of the flow is not its rate (counted whole, one pause would slow the releases
/// for the next hundred ACKs).
const MAX_GAP: Duration = Duration::from_millis(20);
const MAX_GAP_RATIO: f64 = 4.0;

/// One flow's pacer.
#[derive(Debug, Clone, Default)]
pub struct Pacer {
    last_held: Option<Instant>,
    /// Moving average of the gaps between held ACKs, seconds (None: fewer than two seen).
    mean_gap: Option<f64>,
    slot: Option<Instant>,
}

impl Pacer {
    /// A held ACK was generated at `now`.
    pub fn on_held(&mut self, now: Instant) {
        if let Some(last) = self.last_held {
            let gap = now
                .saturating_duration_since(last)
                .min(MAX_GAP)
                .as_secs_f64();
            self.mean_gap = Some(match self.mean_gap {
                Some(m) => m + GAIN * (gap.min(MAX_GAP_RATIO * m) - m),
                None => gap,
            });
        }
        self.last_held = Some(now);
    }

    /// The spacing of released ACKs with `factor`; zero before the flow has a mean gap.
    pub fn spacing(&self, factor: f64) -> Duration {
        self.mean_gap
            .map_or(Duration::ZERO, |m| Duration::from_secs_f64(m / factor))
    }

    /// The earliest time the next ACK may leave (None: at once).
    pub fn slot(&self) -> Option<Instant> {
        self.slot
    }

    /// An ACK left at `now`.
    pub fn on_released(&mut self, now: Instant, factor: f64) {
        let gap = self.spacing(factor);
        let floor = now.checked_sub(gap * BURST).unwrap_or(now);
        self.slot = Some(self.slot.map_or(floor, |s| s.max(floor)) + gap);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_mean_gap_survives_a_bunch() {
        let mut p = Pacer::default();
        let t0 = Instant::now();
        for i in 0..100 {
            p.on_held(t0 + MS * i);
        }
        assert_eq!(p.spacing(1.0), MS);
        // 4 ACKs generated at once after a 4 ms gap: the average stays near 1 ms.
        let t = t0 + MS * 103;
        for _ in 0..4 {
            p.on_held(t);
        }
        let s = p.spacing(1.0).as_secs_f64() * 1000.0;
        assert!((0.9..1.1).contains(&s), "{s} ms");
    }

    #[test]
    fn releases_are_spaced_after_a_burst_allowance() {
        let mut p = Pacer::default();
        let t0 = Instant::now();
        for i in 0..50 {
            p.on_held(t0 + MS * i);
        }
        // A bunch due at once at t: 1 + BURST leave at once, then one per gap / factor.
        let t = t0 + MS * 100;
        let mut leave = vec![];
        let mut now = t;
        for _ in 0..6 {
            if let Some(s) = p.slot() {
                now = now.max(s);
            }
            leave.push(now);
            p.on_released(now, 1.25);
        }
        let gaps: Vec<u128> = leave
            .windows(2)
            .map(|w| (w[1] - w[0]).as_micros())
            .collect();
        assert_eq!(gaps, vec![0, 800, 800, 800, 800], "{gaps:?}");
    }

    #[test]
    fn a_pause_is_not_the_rate() {
        let mut p = Pacer::default();
        let t0 = Instant::now();
        p.on_held(t0);
        p.on_held(t0 + Duration::from_secs(5));
        assert_eq!(p.spacing(1.0), MAX_GAP);
        for i in 1..=100 {
            p.on_held(t0 + Duration::from_secs(5) + MS * i);
        }
        // A 1 s pause counts as 4 mean gaps: the spacing grows by 3/16 of a gap, not 62 ms.
        p.on_held(t0 + Duration::from_secs(6) + MS * 100);
        let s = p.spacing(1.0).as_secs_f64() * 1000.0;
        assert!((1.1..1.3).contains(&s), "{s} ms");
    }
}
