//! Stall detection from P-ACKs, held back while the kernel's ACK clock still runs.
//!
//! Rule (Paceline, "Connection Manager"): fail over when the oldest byte written to the
//! kernel and not yet acknowledged by a P-ACK is older than
//! `max(floor, factor × (srtt + 4·rttvar))`. srtt and rttvar follow RFC 6298's estimator
//! (α = 1/8, β = 1/4; the first sample sets srtt = r, rttvar = r/2), fed with P-ACK round
//! trips: from the write that carried the newest byte a P-ACK covers to that P-ACK's arrival.
//! Before the first sample the threshold is the floor.
//!
//! The verdict also asks the kernel ([`AckClock`], from `TCP_INFO`): while the connection's
//! TCP still received an ACK within the last threshold and its retransmission timer has not
//! fired, the connection is not stalled; the verdict waits until a threshold after that ACK.
//! P-ACKs alone cannot tell a dead path from TCP's own fast-retransmit recovery: either way
//! the receiver's application sees nothing new (head-of-line blocking), but during a recovery
//! ACKs (duplicate and SACK ones) keep arriving. The case that needed it: at start-up, a
//! slow-start overshoot fills the bottleneck queue within a few round trips and loses
//! segments; the round trip more than doubles while srtt still holds the empty path's, and
//! the P-ACK rule alone switched 6 times in the first 1.2 s of a quick Fig. 6 run
//! (`docs/failover.md`, "Start-up"), each switch a new slow start into the same full queue. A real failure (blackhole, link down)
//! stops the ACKs: the verdict then comes at most one threshold after the last ACK, or as
//! soon as the kernel's retransmission timer fires. A driver that never samples the ACK
//! clock gets the P-ACK rule alone.
//!
//! Back-off: a switch away from a connection that never brought a P-ACK sample doubles the
//! threshold until the next sample (at most ×16), as TCP backs off its retransmission
//! timer. Without it, a switch into a path slower than the estimate cascades: the new
//! connection's first P-ACK cannot come within the old threshold, and its kernel's last ACK
//! is the handshake's (a full Fig. 6 run switched to a backup, then away from it 100 ms later).
//!
//! Where we differ: Paceline does not publish its factor or margin; ours is one `factor`
//! (default 2, as SRT's 2·SRTT) and the floor (SRT's lower clamp is 60 ms; our default is
//! 200 ms, TCP's minimum RTO). There is no upper clamp: a sender whose threshold would exceed
//! its messages' deadlines gains nothing from failover anyway. Paceline's rule is the P-ACK
//! one; the ACK clock is ours.
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

/// What the kernel's TCP sender says about its ACKs (`TCP_INFO`), sampled by the driver when
/// the P-ACK rule is due ([`Connection::wants_ack_clock`](crate::Connection::wants_ack_clock)).
///
/// ```
/// use lowtide_proto::failover::AckClock;
/// use std::time::Duration;
/// // tcpi_last_ack_recv = 12 ms, tcpi_ca_state = TCP_CA_Recovery (fast retransmit), no back-off
/// let k = AckClock { since_last_ack: Duration::from_millis(12), timeout_recovery: false };
/// assert!(!k.timeout_recovery);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckClock {
    /// Time since the kernel last received an ACK for this connection, duplicate and SACK
    /// ones included (`tcpi_last_ack_recv`).
    pub since_last_ack: Duration,
    /// The kernel's retransmission timer fired and the recovery from it is not over
    /// (`tcpi_ca_state` is `TCP_CA_Loss`, or `tcpi_backoff` > 0): ACKs no longer hold the
    /// verdict back.
    pub timeout_recovery: bool,
}

/// Most doublings of the threshold for consecutive switches without a P-ACK (×16).
const MAX_BACKOFF: u32 = 4;

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
    /// When the kernel last received an ACK on the connection in use, as last sampled.
    last_ack: Option<Instant>,
    timeout_recovery: bool,
    /// Verdicts the ACK clock held back: one per oldest write (channel offset of its end).
    held: u64,
    held_write: Option<u64>,
    /// Doublings of the threshold: switches in a row with no P-ACK sample in between.
    backoff: u32,
    /// A P-ACK sample arrived since the connection in use began.
    sampled_on_path: bool,
}

/// What [`StallDetector::verdict`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StallVerdict {
    /// Nothing outstanding is past the threshold.
    Clear,
    /// The P-ACK rule is due, but the kernel received an ACK within the last threshold (and
    /// its retransmission timer has not fired): not a stall yet. `first`: the first time for
    /// this oldest write.
    HeldByAcks {
        /// First hold for this oldest write (count it once).
        first: bool,
    },
    /// Stalled: switch.
    Stalled,
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
            last_ack: None,
            timeout_recovery: false,
            held: 0,
            held_write: None,
            backoff: 0,
            sampled_on_path: false,
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
        self.sampled_on_path = true;
        self.backoff = 0;
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
        let t = match self.srtt {
            None => self.floor,
            Some(s) => (s + self.rttvar * 4).mul_f64(self.factor).max(self.floor),
        };
        t * (1 << self.backoff)
    }

    /// When the connection counts as stalled if neither a P-ACK nor (in the kernel) an ACK
    /// arrives before (`None`: nothing unacknowledged): the P-ACK rule's time, or a threshold
    /// after the kernel's last ACK if that is later and no retransmission timeout is under way.
    ///
    /// ```
    /// use lowtide_proto::failover::{AckClock, FailoverConfig, StallDetector};
    /// use std::time::{Duration, Instant};
    /// let (t0, ms) = (Instant::now(), Duration::from_millis);
    /// let mut d = StallDetector::new(&FailoverConfig { floor_ms: 100, ..Default::default() });
    /// assert_eq!(d.stall_at(), None); // nothing outstanding
    /// d.on_written(1000, t0);
    /// assert_eq!(d.stall_at(), Some(t0 + ms(100)));
    /// // At 100 ms the kernel says its last ACK came 10 ms ago (a SACK: TCP is repairing a loss).
    /// d.on_ack_clock(t0 + ms(100), AckClock { since_last_ack: ms(10), timeout_recovery: false });
    /// assert_eq!(d.stall_at(), Some(t0 + ms(190)));
    /// d.on_acked(1000, t0 + ms(150));
    /// assert_eq!(d.stall_at(), None);
    /// ```
    pub fn stall_at(&self) -> Option<Instant> {
        let by_packs = self.pack_stall_at()?;
        Some(match self.last_ack {
            Some(a) if !self.timeout_recovery => by_packs.max(a + self.threshold()),
            _ => by_packs,
        })
    }

    /// When the P-ACK rule alone is due: the oldest unacknowledged write plus the threshold.
    ///
    /// ```
    /// use lowtide_proto::failover::{FailoverConfig, StallDetector};
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let mut d = StallDetector::new(&FailoverConfig { floor_ms: 100, ..Default::default() });
    /// d.on_written(1000, t0);
    /// assert_eq!(d.pack_stall_at(), Some(t0 + Duration::from_millis(100)));
    /// ```
    pub fn pack_stall_at(&self) -> Option<Instant> {
        self.writes.front().map(|&(_, at)| at + self.threshold())
    }

    /// Whether the verdict at `now` needs a fresh [`AckClock`]: the P-ACK rule is due.
    ///
    /// ```
    /// use lowtide_proto::failover::{FailoverConfig, StallDetector};
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let mut d = StallDetector::new(&FailoverConfig { floor_ms: 100, ..Default::default() });
    /// d.on_written(1000, t0);
    /// assert!(!d.wants_ack_clock(t0 + Duration::from_millis(99)));
    /// assert!(d.wants_ack_clock(t0 + Duration::from_millis(100)));
    /// ```
    pub fn wants_ack_clock(&self, now: Instant) -> bool {
        self.pack_stall_at().is_some_and(|t| now >= t)
    }

    /// The kernel's ACK clock, sampled at `sampled_at`. The last ACK's time only moves
    /// forward (the kernel counts in jiffies).
    ///
    /// ```
    /// use lowtide_proto::failover::{AckClock, FailoverConfig, StallDetector};
    /// use std::time::{Duration, Instant};
    /// let (t0, ms) = (Instant::now(), Duration::from_millis);
    /// let mut d = StallDetector::new(&FailoverConfig { floor_ms: 100, ..Default::default() });
    /// d.on_written(1000, t0);
    /// // The retransmission timer fired: ACKs no longer hold the verdict back.
    /// d.on_ack_clock(t0 + ms(100), AckClock { since_last_ack: ms(5), timeout_recovery: true });
    /// assert!(d.is_stalled(t0 + ms(100)));
    /// ```
    pub fn on_ack_clock(&mut self, sampled_at: Instant, k: AckClock) {
        if let Some(at) = sampled_at.checked_sub(k.since_last_ack) {
            self.last_ack = Some(self.last_ack.map_or(at, |a| a.max(at)));
        }
        self.timeout_recovery = k.timeout_recovery;
    }

    /// The verdict at `now` (counts a hold once per oldest write).
    ///
    /// ```
    /// use lowtide_proto::failover::{AckClock, FailoverConfig, StallDetector, StallVerdict};
    /// use std::time::{Duration, Instant};
    /// let (t0, ms) = (Instant::now(), Duration::from_millis);
    /// let mut d = StallDetector::new(&FailoverConfig { floor_ms: 100, ..Default::default() });
    /// d.on_written(1000, t0);
    /// assert_eq!(d.verdict(t0 + ms(50)), StallVerdict::Clear);
    /// d.on_ack_clock(t0 + ms(100), AckClock { since_last_ack: ms(2), timeout_recovery: false });
    /// assert_eq!(d.verdict(t0 + ms(100)), StallVerdict::HeldByAcks { first: true });
    /// assert_eq!(d.verdict(t0 + ms(150)), StallVerdict::HeldByAcks { first: false });
    /// assert_eq!(d.verdict(t0 + ms(198)), StallVerdict::Stalled); // no ACK since 98 ms
    /// assert_eq!(d.held(), 1);
    /// ```
    pub fn verdict(&mut self, now: Instant) -> StallVerdict {
        if self.stall_at().is_some_and(|t| now >= t) {
            return StallVerdict::Stalled;
        }
        if !self.wants_ack_clock(now) {
            return StallVerdict::Clear;
        }
        let oldest = self.writes.front().map(|w| w.0);
        let first = self.held_write != oldest;
        if first {
            self.held_write = oldest;
            self.held += 1;
        }
        StallVerdict::HeldByAcks { first }
    }

    /// Verdicts the ACK clock held back (once per oldest write).
    pub fn held(&self) -> u64 {
        self.held
    }

    /// The kernel's last ACK on the connection in use, as last sampled.
    pub fn last_ack(&self) -> Option<Instant> {
        self.last_ack
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

    /// A new connection is in use: nothing is outstanding on it yet and its kernel has not
    /// been sampled; the RTT estimate stays. A switch away from a connection that never
    /// brought a P-ACK sample doubles the threshold until the next sample (at most
    /// ×16), as TCP backs off its retransmission timer (RFC 6298, section 5.5): the estimate
    /// is then no longer known to fit the path.
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
        if !self.sampled_on_path {
            self.backoff = (self.backoff + 1).min(MAX_BACKOFF);
        }
        self.sampled_on_path = false;
        self.writes.clear();
        self.last_ack = None;
        self.timeout_recovery = false;
        self.held_write = None;
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
    fn switches_without_a_sample_back_off_until_the_next_one() {
        let t0 = Instant::now();
        let mut d = det(200);
        d.on_written(1, t0);
        d.on_acked(1, t0 + 20 * MS); // 2 × (20 + 4·10) ms is below the floor
        assert_eq!(d.threshold(), 200 * MS);
        d.new_path(); // the primary had samples: no back-off
        assert_eq!(d.threshold(), 200 * MS);
        d.new_path(); // this one brought none
        assert_eq!(d.threshold(), 400 * MS);
        for _ in 0..10 {
            d.new_path();
        }
        assert_eq!(d.threshold(), 3200 * MS, "at most 16 times");
        d.on_written(2, t0 + 30 * MS);
        d.on_acked(2, t0 + 50 * MS);
        assert_eq!(d.threshold(), 200 * MS, "a sample ends the back-off");
    }

    #[test]
    fn the_ack_clock_holds_the_verdict_only_while_acks_arrive() {
        let t0 = Instant::now();
        let mut d = det(100);
        d.on_written(1000, t0);
        assert_eq!(
            d.verdict(t0 + 100 * MS),
            StallVerdict::Stalled,
            "no ACK clock"
        );
        let live = |ago: Duration| AckClock {
            since_last_ack: ago,
            timeout_recovery: false,
        };
        d.on_ack_clock(t0 + 100 * MS, live(10 * MS));
        assert_eq!(d.stall_at(), Some(t0 + 190 * MS));
        assert_eq!(
            d.verdict(t0 + 100 * MS),
            StallVerdict::HeldByAcks { first: true }
        );
        // a later sample naming an older ACK (jiffies) does not move the hold back
        d.on_ack_clock(t0 + 120 * MS, live(40 * MS));
        assert_eq!(d.stall_at(), Some(t0 + 190 * MS));
        // ACKs keep coming: held while they do, once counted
        d.on_ack_clock(t0 + 180 * MS, live(MS));
        assert_eq!(
            d.verdict(t0 + 278 * MS),
            StallVerdict::HeldByAcks { first: false }
        );
        assert_eq!(d.verdict(t0 + 279 * MS), StallVerdict::Stalled);
        assert_eq!(d.held(), 1);
        // a retransmission timeout: ACKs hold nothing back
        d.on_ack_clock(
            t0 + 200 * MS,
            AckClock {
                since_last_ack: Duration::ZERO,
                timeout_recovery: true,
            },
        );
        assert_eq!(d.stall_at(), Some(t0 + 100 * MS));
        // a new connection forgets the old one's kernel
        d.on_ack_clock(t0 + 200 * MS, live(Duration::ZERO));
        d.new_path();
        assert_eq!(d.last_ack(), None);
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
