//! CoDel: Nichols, Jacobson et al., RFC 8289 (Section 5, the pseudocode's `dodequeue` and
//! `dequeue`), applied per dequeued packet.
//!
//! Differences from the RFC: the RFC drops several packets in one dequeue call while
//! `now >= drop_next`; here the queue calls [`Codel::on_departure`] again for the next head
//! after each drop, which gives the same sequence. With `ecn`, ECN-capable packets are marked
//! instead of dropped (RFC 8289 Section 5.3). We carry our own instead of rattan's CoDel queue
//! so that its drops are counted by reason with every other drop.

use std::time::{Duration, Instant};

use super::{mark_or_drop, Aqm, Arrival, QueueState, Reason, Verdict};
use crate::config::MTU;

pub struct Codel {
    target: Duration,
    interval: Duration,
    ecn: bool,
    first_above_time: Option<Instant>,
    drop_next: Option<Instant>,
    count: u32,
    last_count: u32,
    dropping: bool,
}

impl Codel {
    pub fn new(target: Duration, interval: Duration, ecn: bool) -> Self {
        Self {
            target,
            interval,
            ecn,
            first_above_time: None,
            drop_next: None,
            count: 0,
            last_count: 0,
            dropping: false,
        }
    }

    fn control_law(&self, t: Instant) -> Instant {
        t + self.interval.div_f64((self.count.max(1) as f64).sqrt())
    }

    /// RFC 8289 `dodequeue`: is the sojourn persistently above target?
    fn ok_to_drop(&mut self, sojourn: Duration, queue: QueueState, now: Instant) -> bool {
        if sojourn < self.target || queue.bytes <= MTU {
            self.first_above_time = None;
            return false;
        }
        match self.first_above_time {
            None => {
                self.first_above_time = Some(now + self.interval);
                false
            }
            Some(t) => now >= t,
        }
    }
}

impl Aqm for Codel {
    fn on_arrival(&mut self, _: QueueState, _: Arrival, _: Instant) -> Verdict {
        Verdict::Pass
    }

    fn on_departure(
        &mut self,
        sojourn: Duration,
        queue: QueueState,
        ecn_capable: bool,
        now: Instant,
    ) -> Verdict {
        let ok = self.ok_to_drop(sojourn, queue, now);
        if self.dropping {
            if !ok {
                self.dropping = false;
                return Verdict::Pass;
            }
            match self.drop_next {
                Some(next) if now >= next => {
                    self.count += 1;
                    self.drop_next = Some(self.control_law(next));
                    mark_or_drop(self.ecn, ecn_capable, Reason::Codel)
                }
                _ => Verdict::Pass,
            }
        } else if ok {
            self.dropping = true;
            // Resume near the previous drop rate if we were dropping recently.
            let delta = self.count.saturating_sub(self.last_count);
            let recent = self
                .drop_next
                .is_some_and(|next| now.saturating_duration_since(next) < 16 * self.interval);
            self.count = if delta > 1 && recent { delta } else { 1 };
            self.last_count = self.count;
            self.drop_next = Some(self.control_law(now));
            mark_or_drop(self.ecn, ecn_capable, Reason::Codel)
        } else {
            Verdict::Pass
        }
    }

    fn name(&self) -> &'static str {
        "codel"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BIG: QueueState = QueueState {
        packets: 50,
        bytes: 50 * MTU,
    };

    fn codel(ecn: bool) -> Codel {
        Codel::new(Duration::from_millis(5), Duration::from_millis(100), ecn)
    }

    /// Departures every `gap` with a constant `sojourn`; returns the times of drops.
    fn run(c: &mut Codel, sojourn_ms: u64, gap_ms: u64, total_ms: u64, ect: bool) -> Vec<u64> {
        let start = Instant::now();
        (0..total_ms / gap_ms)
            .map(|i| i * gap_ms)
            .filter(|t| {
                let v = c.on_departure(
                    Duration::from_millis(sojourn_ms),
                    BIG,
                    ect,
                    start + Duration::from_millis(*t),
                );
                v != Verdict::Pass
            })
            .collect()
    }

    #[test]
    fn short_sojourns_are_never_dropped() {
        assert!(run(&mut codel(false), 4, 1, 5_000, false).is_empty());
    }

    #[test]
    fn first_drop_one_interval_after_the_standing_queue_appears() {
        let drops = run(&mut codel(false), 20, 1, 1_000, false);
        assert_eq!(drops[0], 100);
        // Then at interval/sqrt(count): 100 + 100/sqrt(1) = 200, + 100/sqrt(2) ~ 271, ...
        assert_eq!(drops[1], 200);
        assert!((270..=272).contains(&drops[2]), "{drops:?}");
        let gaps: Vec<u64> = drops.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(
            gaps.windows(2).all(|g| g[1] <= g[0]),
            "gaps shrink: {gaps:?}"
        );
    }

    #[test]
    fn the_drop_state_ends_when_the_queue_drains() {
        let mut c = codel(false);
        run(&mut c, 20, 1, 500, false);
        assert!(c.dropping);
        let v = c.on_departure(Duration::from_millis(1), BIG, false, Instant::now());
        assert_eq!(v, Verdict::Pass);
        assert!(!c.dropping);
    }

    #[test]
    fn with_ecn_capable_packets_it_marks() {
        let mut c = codel(true);
        let start = Instant::now();
        let mut verdicts = vec![];
        for t in 0..400u64 {
            let now = start + Duration::from_millis(t);
            verdicts.push(c.on_departure(Duration::from_millis(20), BIG, true, now));
        }
        assert!(verdicts.contains(&Verdict::Mark(Reason::Codel)));
        assert!(!verdicts.iter().any(|v| matches!(v, Verdict::Drop(_))));
    }
}
