//! Stall detection from P-ACKs.
//!
//! Rule (Paceline, "Connection Manager"): fail over when the oldest byte written to the
//! kernel and not yet acknowledged by a P-ACK is older than
//! `max(floor, factor × (srtt + 4·rttvar))`. srtt and rttvar follow RFC 6298's estimator
//! (α = 1/8, β = 1/4; the first sample sets srtt = r, rttvar = r/2), fed with P-ACK round
//! trips: from the write that carried the newest byte a P-ACK covers to that P-ACK's arrival.
//! Before the first sample the threshold is the floor.
//!
//! Where we differ: Paceline does not publish its factor or margin; ours is one `factor`
//! (default 2, as SRT's 2·SRTT) and the floor (SRT's lower clamp is 60 ms; our default is
//! 200 ms, TCP's minimum RTO). There is no upper clamp: a sender whose threshold would exceed
//! its messages' deadlines gains nothing from failover anyway.
//!
//! ```
//! use lowtide_proto::failover::{FailoverConfig, StallDetector};
//! use std::time::{Duration, Instant};
//! let t0 = Instant::now();
//! let d = StallDetector::new(&FailoverConfig::default());
//! // No sample yet: the threshold is the floor (200 ms by default).
//! assert_eq!(d.threshold(), Duration::from_millis(200));
//! assert_eq!((d.samples(), d.stall_at(), d.is_stalled(t0)), (0, None, false));
//! ```

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::FailoverConfig;

/// Write times kept; beyond this a write extends the newest entry (its bytes then count as
/// written at that entry's earlier time).
const MAX_WRITES_TRACKED: usize = 1 << 16;

/// The stall clock of the connection in use.
///
/// ```
/// use lowtide_proto::failover::{FailoverConfig, StallDetector};
/// use std::time::{Duration, Instant};
/// let ms = Duration::from_millis;
/// let t0 = Instant::now();
/// let mut d = StallDetector::new(&FailoverConfig { floor_ms: 60, factor: 2.0, ..Default::default() });
/// d.on_written(1000, t0);
/// d.on_acked(1000, t0 + ms(40)); // first sample: srtt 40 ms, rttvar 20 ms
/// assert_eq!(d.srtt(), Some(ms(40)));
/// assert_eq!(d.threshold(), ms(240)); // 2 × (40 + 4·20) ms
/// d.on_written(2000, t0 + ms(50));
/// assert_eq!(d.stall_at(), Some(t0 + ms(290)));
/// assert!(!d.is_stalled(t0 + ms(289)));
/// assert!(d.is_stalled(t0 + ms(290)));
/// ```
#[derive(Debug, Clone)]
pub struct StallDetector {
    factor: f64,
    floor: Duration,
    srtt: Option<Duration>,
    rttvar: Duration,
    /// (channel offset of a write's end, when the kernel took it), oldest first, unacked only.
    writes: VecDeque<(u64, Instant)>,
    samples: u64,
}

impl StallDetector {
    /// A detector with no RTT estimate yet.
    ///
    /// ```
    /// use lowtide_proto::failover::{FailoverConfig, StallDetector};
    /// use std::time::Duration;
    /// let d = StallDetector::new(&FailoverConfig { floor_ms: 60, ..Default::default() });
    /// // No RTT sample yet: the threshold is the floor, and nothing is outstanding.
    /// assert_eq!((d.srtt(), d.threshold(), d.stall_at()), (None, Duration::from_millis(60), None));
    /// ```
    pub fn new(cfg: &FailoverConfig) -> Self {
        Self {
            factor: cfg.factor,
            floor: Duration::from_millis(cfg.floor_ms),
            srtt: None,
            rttvar: Duration::ZERO,
            writes: VecDeque::new(),
            samples: 0,
        }
    }

    /// The kernel took bytes up to channel offset `end` at `at`.
    ///
    /// ```
    /// use lowtide_proto::failover::{FailoverConfig, StallDetector};
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let mut d = StallDetector::new(&FailoverConfig { floor_ms: 100, ..Default::default() });
    /// d.on_written(1000, t0);
    /// d.on_written(2000, t0 + Duration::from_millis(5));
    /// // The clock runs from the oldest unacknowledged write.
    /// assert_eq!(d.stall_at(), Some(t0 + Duration::from_millis(100)));
    /// ```
    pub fn on_written(&mut self, end: u64, at: Instant) {
        if self.writes.len() >= MAX_WRITES_TRACKED {
            if let Some(back) = self.writes.back_mut() {
                back.0 = end;
            }
        } else {
            self.writes.push_back((end, at));
        }
    }

    /// A P-ACK covering channel offset `acked` arrived at `now`.
    ///
    /// ```
    /// use lowtide_proto::failover::{FailoverConfig, StallDetector};
    /// use std::time::{Duration, Instant};
    /// let (t0, ms) = (Instant::now(), Duration::from_millis);
    /// let mut d = StallDetector::new(&FailoverConfig::default());
    /// d.on_written(1000, t0);
    /// d.on_written(2000, t0 + ms(10));
    /// d.on_acked(1500, t0 + ms(30)); // covers the first write only: one sample of 30 ms
    /// assert_eq!((d.samples(), d.srtt()), (1, Some(ms(30))));
    /// assert_eq!(d.oldest_age(t0 + ms(30)), Some(ms(20))); // the second is still out
    /// ```
    pub fn on_acked(&mut self, acked: u64, now: Instant) {
        let mut newest = None;
        while let Some(&(end, at)) = self.writes.front() {
            if end > acked {
                break;
            }
            newest = Some(at);
            self.writes.pop_front();
        }
        if let Some(at) = newest {
            self.sample(now.saturating_duration_since(at));
        }
    }

    fn sample(&mut self, r: Duration) {
        self.samples += 1;
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(s) => {
                let diff = s.abs_diff(r);
                self.rttvar = (self.rttvar * 3 + diff) / 4;
                self.srtt = Some((s * 7 + r) / 8);
            }
        }
    }

    /// Smoothed P-ACK round trip, if sampled.
    ///
    /// ```
    /// use lowtide_proto::failover::{FailoverConfig, StallDetector};
    /// use std::time::{Duration, Instant};
    /// let (t0, ms) = (Instant::now(), Duration::from_millis);
    /// let mut d = StallDetector::new(&FailoverConfig::default());
    /// assert_eq!(d.srtt(), None);
    /// d.on_written(1, t0);
    /// d.on_acked(1, t0 + ms(80));
    /// d.on_written(2, t0 + ms(100));
    /// d.on_acked(2, t0 + ms(100)); // a 0 ms sample moves srtt by 1/8
    /// assert_eq!(d.srtt(), Some(ms(70)));
    /// ```
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// RTT samples taken.
    ///
    /// ```
    /// use lowtide_proto::failover::{FailoverConfig, StallDetector};
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let mut d = StallDetector::new(&FailoverConfig::default());
    /// d.on_written(1000, t0);
    /// d.on_acked(500, t0); // covers no whole write: no sample
    /// assert_eq!(d.samples(), 0);
    /// d.on_acked(1000, t0 + Duration::from_millis(20));
    /// assert_eq!(d.samples(), 1);
    /// ```
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// `max(floor, factor × (srtt + 4·rttvar))`.
    ///
    /// ```
    /// use lowtide_proto::failover::{FailoverConfig, StallDetector};
    /// use std::time::{Duration, Instant};
    /// let (t0, ms) = (Instant::now(), Duration::from_millis);
    /// let mut d = StallDetector::new(&FailoverConfig { floor_ms: 200, factor: 2.0, ..Default::default() });
    /// d.on_written(1, t0);
    /// d.on_acked(1, t0 + ms(10)); // 2 × (10 + 4·5) = 60 ms, below the floor
    /// assert_eq!(d.threshold(), ms(200));
    /// ```
    pub fn threshold(&self) -> Duration {
        match self.srtt {
            None => self.floor,
            Some(s) => (s + self.rttvar * 4).mul_f64(self.factor).max(self.floor),
        }
    }

    /// When the connection counts as stalled if no P-ACK arrives before (`None`: nothing
    /// unacknowledged).
    ///
    /// ```
    /// use lowtide_proto::failover::{FailoverConfig, StallDetector};
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let mut d = StallDetector::new(&FailoverConfig { floor_ms: 100, ..Default::default() });
    /// assert_eq!(d.stall_at(), None); // nothing outstanding
    /// d.on_written(1000, t0);
    /// assert_eq!(d.stall_at(), Some(t0 + Duration::from_millis(100)));
    /// d.on_acked(1000, t0 + Duration::from_millis(1));
    /// assert_eq!(d.stall_at(), None);
    /// ```
    pub fn stall_at(&self) -> Option<Instant> {
        self.writes.front().map(|&(_, at)| at + self.threshold())
    }

    /// Age of the oldest unacknowledged write.
    ///
    /// ```
    /// use lowtide_proto::failover::{FailoverConfig, StallDetector};
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let mut d = StallDetector::new(&FailoverConfig::default());
    /// assert_eq!(d.oldest_age(t0), None);
    /// d.on_written(1000, t0);
    /// assert_eq!(d.oldest_age(t0 + Duration::from_millis(40)), Some(Duration::from_millis(40)));
    /// ```
    pub fn oldest_age(&self, now: Instant) -> Option<Duration> {
        self.writes
            .front()
            .map(|&(_, at)| now.saturating_duration_since(at))
    }

    /// Whether the oldest unacknowledged write is past the threshold.
    ///
    /// ```
    /// use lowtide_proto::failover::{FailoverConfig, StallDetector};
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let mut d = StallDetector::new(&FailoverConfig { floor_ms: 100, ..Default::default() });
    /// d.on_written(1000, t0);
    /// assert!(!d.is_stalled(t0 + Duration::from_millis(99)));
    /// assert!(d.is_stalled(t0 + Duration::from_millis(100)));
    /// ```
    pub fn is_stalled(&self, now: Instant) -> bool {
        self.stall_at().is_some_and(|t| now >= t)
    }

    /// A new connection is in use: nothing is outstanding on it yet; the RTT estimate stays.
    ///
    /// ```
    /// use lowtide_proto::failover::{FailoverConfig, StallDetector};
    /// use std::time::{Duration, Instant};
    /// let (t0, ms) = (Instant::now(), Duration::from_millis);
    /// let mut d = StallDetector::new(&FailoverConfig::default());
    /// d.on_written(1, t0);
    /// d.on_acked(1, t0 + ms(30));
    /// d.on_written(2, t0 + ms(40)); // lost with the old path
    /// d.new_path();
    /// assert_eq!(d.stall_at(), None); // nothing outstanding on the new connection
    /// assert_eq!(d.srtt(), Some(ms(30))); // the estimate stays
    /// ```
    pub fn new_path(&mut self) {
        self.writes.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn det(floor_ms: u64) -> StallDetector {
        StallDetector::new(&FailoverConfig {
            floor_ms,
            ..Default::default()
        })
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn threshold_is_the_floor_until_sampled_then_the_rto_equation() {
        let t0 = Instant::now();
        let mut d = det(60);
        assert_eq!(d.threshold(), 60 * MS);
        d.on_written(1000, t0);
        d.on_acked(1000, t0 + 100 * MS);
        // first sample: srtt 100, rttvar 50 -> 2 × (100 + 200) = 600 ms
        assert_eq!(d.srtt(), Some(100 * MS));
        assert_eq!(d.threshold(), 600 * MS);
        // steady 100 ms samples shrink rttvar by 3/4 each time
        for i in 1..=40u32 {
            d.on_written(1000 + u64::from(i), t0 + i * 200 * MS);
            d.on_acked(1000 + u64::from(i), t0 + i * 200 * MS + 100 * MS);
        }
        let t = d.threshold();
        assert!(t >= 200 * MS && t < 201 * MS, "{t:?}");
        // a small RTT is held up by the floor
        let mut d = det(200);
        d.on_written(10, t0);
        d.on_acked(10, t0 + MS);
        assert_eq!(d.threshold(), 200 * MS);
    }

    #[test]
    fn the_oldest_unacked_write_decides() {
        let t0 = Instant::now();
        let mut d = det(100);
        assert!(
            !d.is_stalled(t0 + 10_000 * MS),
            "nothing outstanding is no stall"
        );
        d.on_written(100, t0);
        d.on_written(200, t0 + 50 * MS);
        assert_eq!(d.stall_at(), Some(t0 + 100 * MS));
        assert!(!d.is_stalled(t0 + 99 * MS));
        assert!(d.is_stalled(t0 + 100 * MS));
        // a P-ACK for the first write moves the clock to the second (and samples 120 ms)
        d.on_acked(150, t0 + 120 * MS);
        assert_eq!(d.writes.len(), 1, "a partly acked write stays");
        assert_eq!(d.srtt(), Some(120 * MS));
        let th = d.threshold();
        assert_eq!(th, (120 * MS + 240 * MS) * 2);
        assert_eq!(d.stall_at(), Some(t0 + 50 * MS + th));
        d.on_acked(200, t0 + 130 * MS);
        assert_eq!(d.stall_at(), None);
        d.on_written(300, t0 + 200 * MS);
        d.new_path();
        assert_eq!(
            d.stall_at(),
            None,
            "a new path starts with nothing outstanding"
        );
        assert!(d.srtt().is_some());
    }

    #[test]
    fn write_log_is_bounded() {
        let t0 = Instant::now();
        let mut d = det(100);
        for i in 0..(MAX_WRITES_TRACKED as u64 + 10) {
            d.on_written(i + 1, t0 + Duration::from_micros(i));
        }
        assert_eq!(d.writes.len(), MAX_WRITES_TRACKED);
        assert_eq!(d.writes.back().unwrap().0, MAX_WRITES_TRACKED as u64 + 10);
        assert_eq!(d.stall_at(), Some(t0 + 100 * MS));
    }
}
