//! DRD, derivative random drop, the AQM of nistnet that Goel, Krasic and Walpole used for
//! their ECN experiment ("Low-Latency Adaptive Streaming over TCP", Section 4.1, Fig. 5):
//! "DRD marks 10-percent packets with the ECN bit when the queue length exceeds drdmin,
//! progressively increasing the percentage until packets are dropped when the queue length
//! exceeds drdcongest. Unlike RED, DRD does not average queue lengths." The paper sets
//! drdmin, drdmax, drdcongest to 1, 2 and 2 bandwidth-delay products.
//!
//! Where the paper is silent we chose: the probability rises linearly from 10% at drdmin to
//! 100% at drdmax and stays there up to drdcongest; the queue length is the instantaneous
//! byte count in MTU packets; packets that are not ECN-capable (or with ECN off) are dropped
//! with the same probability instead of being marked.

use std::time::Instant;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{mark_or_drop, Aqm, Arrival, QueueState, Reason, Verdict};
use crate::config::MTU;

/// The marking probability just above drdmin.
const FLOOR: f64 = 0.10;

pub struct Drd {
    min: f64,
    max: f64,
    congest: f64,
    ecn: bool,
    rng: StdRng,
}

impl Drd {
    /// Thresholds in packets of MTU size.
    pub fn new(min: f64, max: f64, congest: f64, ecn: bool, seed: u64) -> Self {
        Self {
            min,
            max,
            congest,
            ecn,
            rng: StdRng::seed_from_u64(seed),
        }
    }

    /// The mark (or drop) probability for a queue of `q` packets; 1.0 above drdcongest.
    pub fn probability(&self, q: f64) -> f64 {
        if q < self.min {
            0.0
        } else if q >= self.congest {
            1.0
        } else {
            let ramp = ((q - self.min) / (self.max - self.min)).min(1.0);
            FLOOR + (1.0 - FLOOR) * ramp
        }
    }
}

impl Aqm for Drd {
    fn on_arrival(&mut self, queue: QueueState, packet: Arrival, _now: Instant) -> Verdict {
        let q = queue.bytes as f64 / MTU as f64;
        if q >= self.congest {
            return Verdict::Drop(Reason::DrdCongest);
        }
        let p = self.probability(q);
        if p > 0.0 && self.rng.gen::<f64>() < p {
            mark_or_drop(self.ecn, packet.ecn_capable, Reason::DrdEarly)
        } else {
            Verdict::Pass
        }
    }

    fn name(&self) -> &'static str {
        "drd"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(packets: usize) -> QueueState {
        QueueState::of_packets(packets)
    }

    fn share(drd: &mut Drd, packets: usize, ect: bool, want: Verdict) -> f64 {
        let now = Instant::now();
        let n = 20_000;
        let hits = (0..n)
            .filter(|_| drd.on_arrival(q(packets), Arrival::mtu(ect), now) == want)
            .count();
        hits as f64 / n as f64
    }

    #[test]
    fn no_averaging_and_a_ten_percent_floor() {
        let mut d = Drd::new(100.0, 200.0, 200.0, true, 1);
        assert_eq!(share(&mut d, 99, true, Verdict::Pass), 1.0);
        // Instantly at drdmin: about 10% marked, no history needed.
        let s = share(&mut d, 100, true, Verdict::Mark(Reason::DrdEarly));
        assert!((0.08..0.12).contains(&s), "{s}");
    }

    #[test]
    fn the_share_rises_with_the_queue_and_marks_become_drops_at_drdcongest() {
        let mut d = Drd::new(100.0, 200.0, 200.0, true, 2);
        let mid = share(&mut d, 150, true, Verdict::Mark(Reason::DrdEarly));
        assert!((0.50..0.60).contains(&mid), "{mid}");
        assert_eq!(
            share(&mut d, 200, true, Verdict::Drop(Reason::DrdCongest)),
            1.0
        );
    }

    #[test]
    fn without_ecn_the_same_share_is_dropped() {
        let mut d = Drd::new(100.0, 200.0, 200.0, true, 3);
        let s = share(&mut d, 150, false, Verdict::Drop(Reason::DrdEarly));
        assert!((0.50..0.60).contains(&s), "{s}");
        let mut d = Drd::new(100.0, 200.0, 300.0, false, 4);
        let s = share(&mut d, 250, true, Verdict::Drop(Reason::DrdEarly));
        assert_eq!(
            s, 1.0,
            "between drdmax and drdcongest the probability stays at 1"
        );
    }
}
