//! RED: Floyd and Jacobson, "Random Early Detection Gateways for Congestion Avoidance",
//! IEEE/ACM ToN 1993, Section 4 (the algorithm of Fig. 2), with the "gentle" variant (Floyd,
//! 2000) and ECN marking as in RFC 3168 Section 7.
//!
//! Differences from the paper and from Linux `sch_red.c`:
//! - thresholds are in packets of [`crate::config::MTU`] bytes of the byte-counted queue, so a
//!   queue of small packets is not over-counted;
//! - the idle-time correction uses the link's time to send one MTU packet (the paper's `s`);
//! - above max_th (or above 2*max_th when gentle) packets are dropped even when ECN-capable,
//!   as RFC 3168 asks; below that, ECN-capable packets are marked instead of dropped;
//! - optionally, as ns-2's RED (`mark_p_`, `use_mark_p_`, both on by default there): an
//!   ECN-capable packet chosen while p_b is at least `mark_p` is dropped, not marked. With
//!   ns-2's `mark_p_ = max_p = 0.1` that is the whole gentle region; Linux and RFC 3168 mark
//!   there.

use std::time::Instant;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{mark_or_drop, Aqm, Arrival, QueueState, Reason, Verdict};
use crate::config::MTU;

pub struct Red {
    min_th: f64,
    max_th: f64,
    max_p: f64,
    weight: f64,
    gentle: bool,
    ecn: bool,
    /// ns-2's `mark_p_`: at or above this p_b a chosen ECN-capable packet is dropped.
    mark_p: Option<f64>,
    /// Seconds to send one MTU packet at the link rate.
    packet_time: f64,
    avg: f64,
    /// Packets since the last mark or drop; -1 when the average is below min_th.
    count: i64,
    idle_since: Option<Instant>,
    rng: StdRng,
}

impl Red {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        min_th: f64,
        max_th: f64,
        max_p: f64,
        weight: f64,
        gentle: bool,
        ecn: bool,
        rate_bps: f64,
        seed: u64,
    ) -> Self {
        Self {
            min_th,
            max_th,
            max_p,
            weight,
            gentle,
            ecn,
            mark_p: None,
            packet_time: MTU as f64 * 8.0 / rate_bps.max(1.0),
            avg: 0.0,
            count: -1,
            idle_since: None,
            rng: StdRng::seed_from_u64(seed),
        }
    }

    /// Marks only while p_b is under `mark_p`, drops above it (ns-2's `mark_p_`).
    pub fn with_mark_p(mut self, mark_p: Option<f64>) -> Self {
        self.mark_p = mark_p;
        self
    }

    /// The averaged queue, in packets.
    pub fn average(&self) -> f64 {
        self.avg
    }

    fn update_average(&mut self, queue: QueueState, now: Instant) {
        let q = queue.bytes as f64 / MTU as f64;
        if queue.packets > 0 {
            self.idle_since = None;
            self.avg += self.weight * (q - self.avg);
        } else {
            // The queue was idle: decay as if m small packets had arrived to an empty queue.
            let since = *self.idle_since.get_or_insert(now);
            let m = now.saturating_duration_since(since).as_secs_f64() / self.packet_time;
            self.avg *= (1.0 - self.weight).powf(m.max(1.0));
            self.idle_since = Some(now);
        }
    }

    /// The paper's p_b for the current average; None below min_th, Some(1.0) when forced.
    fn base_probability(&self) -> Option<f64> {
        let avg = self.avg;
        if avg < self.min_th {
            None
        } else if avg < self.max_th {
            Some(self.max_p * (avg - self.min_th) / (self.max_th - self.min_th))
        } else if self.gentle && avg < 2.0 * self.max_th {
            Some(self.max_p + (1.0 - self.max_p) * (avg - self.max_th) / self.max_th)
        } else {
            Some(1.0)
        }
    }
}

impl Aqm for Red {
    fn on_arrival(&mut self, queue: QueueState, packet: Arrival, now: Instant) -> Verdict {
        self.update_average(queue, now);
        let Some(pb) = self.base_probability() else {
            self.count = -1;
            return Verdict::Pass;
        };
        if pb >= 1.0 {
            self.count = 0;
            return Verdict::Drop(Reason::RedForced);
        }
        self.count += 1;
        // Spreading marks evenly: p_a = p_b / (1 - count * p_b).
        let denom = 1.0 - self.count as f64 * pb;
        let pa = if denom <= 0.0 { 1.0 } else { pb / denom };
        if self.rng.gen::<f64>() < pa {
            self.count = 0;
            let may_mark = self.ecn && self.mark_p.is_none_or(|mark_p| pb < mark_p);
            mark_or_drop(may_mark, packet.ecn_capable, Reason::RedEarly)
        } else {
            Verdict::Pass
        }
    }

    fn name(&self) -> &'static str {
        "red"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn q(packets: usize) -> QueueState {
        QueueState::of_packets(packets)
    }

    fn red(gentle: bool, ecn: bool) -> Red {
        // 10 Mbit/s: 1.2 ms per packet.
        Red::new(20.0, 60.0, 0.1, 0.2, gentle, ecn, 10e6, 7)
    }

    /// Feeds `n` arrivals to a queue held at `packets`, one packet time apart.
    fn feed(red: &mut Red, packets: usize, n: usize, ect: bool) -> Vec<Verdict> {
        let start = Instant::now();
        (0..n)
            .map(|i| {
                red.on_arrival(
                    q(packets),
                    Arrival::mtu(ect),
                    start + Duration::from_micros(1200 * i as u64),
                )
            })
            .collect()
    }

    #[test]
    fn below_min_threshold_nothing_is_touched() {
        let mut r = red(true, true);
        assert!(feed(&mut r, 15, 5000, true)
            .iter()
            .all(|v| *v == Verdict::Pass));
        assert!((r.average() - 15.0).abs() < 0.5);
    }

    #[test]
    fn between_thresholds_marks_at_the_spread_rate() {
        // avg = 40: p_b = 0.1 * 20/40 = 0.05; marks 1 to 19 packets apart, uniformly: 0.1.
        let mut r = red(false, true);
        let v = feed(&mut r, 40, 40_000, true);
        let marks = v
            .iter()
            .filter(|v| **v == Verdict::Mark(Reason::RedEarly))
            .count();
        let share = marks as f64 / v.len() as f64;
        assert!((0.08..0.11).contains(&share), "mark share {share}");
        assert!(!v.iter().any(|v| matches!(v, Verdict::Drop(_))));
    }

    #[test]
    fn packets_that_are_not_ecn_capable_are_dropped_instead() {
        let mut r = red(false, true);
        let v = feed(&mut r, 40, 10_000, false);
        assert!(v.contains(&Verdict::Drop(Reason::RedEarly)));
        assert!(!v.iter().any(|v| matches!(v, Verdict::Mark(_))));
    }

    #[test]
    fn above_max_threshold_drops_even_ecn_packets() {
        let mut r = red(false, true);
        let v = feed(&mut r, 70, 2_000, true);
        // Once the average has climbed past max_th every packet is a forced drop.
        assert!(v[1000..]
            .iter()
            .all(|v| *v == Verdict::Drop(Reason::RedForced)));
    }

    #[test]
    fn gentle_mode_ramps_between_max_and_twice_max() {
        // avg = 70: p_b = 0.1 + 0.9 * 10/60 = 0.25; the count spreads marks 1 to 1/p_b - 1
        // packets apart, uniformly: one mark per 2 packets on average.
        let mut r = red(true, true);
        let v = feed(&mut r, 70, 10_000, true);
        let marked = v[1000..]
            .iter()
            .filter(|v| matches!(v, Verdict::Mark(_)))
            .count();
        assert!(marked > 4_000 && marked < 5_000, "{marked}");
        // Without gentle the same average is a forced drop.
        let mut r = red(false, true);
        let v = feed(&mut r, 70, 3_000, true);
        assert!(v[1000..]
            .iter()
            .all(|v| *v == Verdict::Drop(Reason::RedForced)));
        // Above 2 * max_th even gentle RED drops everything.
        let mut r = red(true, true);
        let v = feed(&mut r, 130, 3_000, true);
        assert!(v[1000..]
            .iter()
            .all(|v| *v == Verdict::Drop(Reason::RedForced)));
    }

    #[test]
    fn with_ns2_mark_p_the_gentle_region_drops_what_it_would_mark() {
        // avg = 70 (p_b = 0.25) with mark_p = 0.1: every packet chosen is dropped.
        let mut r = red(true, true).with_mark_p(Some(0.1));
        let v = feed(&mut r, 70, 10_000, true);
        let dropped = v[1000..]
            .iter()
            .filter(|v| **v == Verdict::Drop(Reason::RedEarly))
            .count();
        assert!(dropped > 4_000 && dropped < 5_000, "{dropped}");
        // (The first packets, while the average climbs past max_th, may still be marked.)
        assert!(!v[1000..].iter().any(|v| matches!(v, Verdict::Mark(_))));
        // Between the thresholds p_b (0.05) is under mark_p: marks as before.
        let mut r = red(false, true).with_mark_p(Some(0.1));
        let v = feed(&mut r, 40, 10_000, true);
        assert!(v.contains(&Verdict::Mark(Reason::RedEarly)));
        assert!(!v.iter().any(|v| matches!(v, Verdict::Drop(_))));
    }

    #[test]
    fn the_average_decays_while_the_queue_is_idle() {
        let mut r = red(true, true);
        feed(&mut r, 50, 2000, true);
        let before = r.average();
        let t = Instant::now() + Duration::from_secs(10);
        r.on_arrival(q(0), Arrival::mtu(true), t);
        // 100 ms idle at 1.2 ms per packet is ~83 packet times: (1-0.2)^83 ~ 1e-8.
        r.on_arrival(q(0), Arrival::mtu(true), t + Duration::from_millis(100));
        assert!(
            before > 40.0 && r.average() < 1.0,
            "{before} -> {}",
            r.average()
        );
    }
}
