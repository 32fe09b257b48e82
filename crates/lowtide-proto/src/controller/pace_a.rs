//! PaceA: Paceline's purely user-level controller (Erbad and Krasic, "Sender-side Buffers and the
//! Case for Multimedia Adaptation", "Latency Controller"): no kernel information; estimate `cwnd' =
//! latency × bandwidth` from application-level acknowledgements (P-ACKs) and keep `cwnd' + b·MSS`
//! bytes unacknowledged.
//!
//! The paper defers PaceA's details to another publication, so the estimators are ours:
//! - bandwidth: bytes acknowledged between two P-ACKs at least one latency estimate (and
//!   [`RATE_INTERVAL`]) apart on the *receiver's* clock, divided by the longer of the
//!   receiver's interval and the sender's interval between writing those bytes (as BBR's
//!   delivery rate: a burst the receiver reads at once after a stall was written over a longer
//!   time, and must not look like a fast path); max over the last [`RATE_SAMPLES`] samples
//!   (like BBR's bottleneck-bandwidth filter). With the receiver's interval alone, bursts after
//!   head-of-line stalls inflated the estimate, the window grew, the stalls grew: a feedback
//!   loop that the lab saw as multi-second latency;
//! - latency: sender time from writing a message's last byte to the P-ACK that covers it, min
//!   over [`LATENCY_WINDOW`] (round trip through both kernels, without the sender-side queue
//!   the controller itself builds, as BBR's min-RTT filter);
//! - before the first estimate, [`INITIAL_WINDOW`] bytes may be unacknowledged.
//!
//! When blocked the controller waits for the next P-ACK ([`Wake::PAck`]).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::{AppProgress, Decision, LatencyController, TcpState, Wake};

/// Unacknowledged bytes allowed before any estimate.
pub const INITIAL_WINDOW: u64 = 64 << 10;
/// Minimum receiver-clock interval for one bandwidth sample.
pub const RATE_INTERVAL: Duration = Duration::from_millis(2);
/// Bandwidth samples kept for the max filter.
pub const RATE_SAMPLES: usize = 10;
/// Window of the latency min filter.
pub const LATENCY_WINDOW: Duration = Duration::from_secs(10);

/// What the connection learned from one P-ACK.
///
/// ```
/// use lowtide_proto::controller::{LatencyController, PAckSample, PaceA};
/// use std::time::{Duration, Instant};
/// let t0 = Instant::now();
/// let mut c = PaceA::new(3);
/// // The byte at offset 10 000 was written at t0 and P-ACKed 20 ms later.
/// c.on_pack(&PAckSample {
///     now: t0 + Duration::from_millis(20),
///     bytes: 10_000,
///     recv_time_us: 10_000,
///     covered_write_time: Some(t0),
/// });
/// assert_eq!(c.latency(), Some(Duration::from_millis(20)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PAckSample {
    /// Sender clock when the P-ACK was processed.
    pub now: Instant,
    /// Cumulative bytes the receiver consumed.
    pub bytes: u64,
    /// Receiver clock, µs since its epoch.
    pub recv_time_us: u64,
    /// Sender clock when the newest byte this P-ACK covers was written, if known.
    pub covered_write_time: Option<Instant>,
}

/// The PaceA controller.
///
/// ```
/// use lowtide_proto::controller::PaceA;
/// let c = PaceA::new(3);
/// // No P-ACK yet: no estimates (see [`PAckSample`] for feeding one).
/// assert_eq!((c.bandwidth(), c.latency(), c.cwnd_estimate()), (None, None, None));
/// ```
#[derive(Debug, Clone)]
pub struct PaceA {
    b: u32,
    /// Bytes, receiver time (µs) and sender write time of the last rate sample's end.
    anchor: Option<(u64, u64, Option<Instant>)>,
    rates: VecDeque<f64>,
    min_latency: Option<(Duration, Instant)>,
}

impl PaceA {
    /// PaceA keeping `cwnd' + b·MSS` bytes unacknowledged.
    ///
    /// ```
    /// use lowtide_proto::controller::{AppProgress, LatencyController, PaceA, TcpState};
    /// # let now = std::time::Instant::now();
    /// let mut c = PaceA::new(3);
    /// // Before any P-ACK: 64 KB may be unacknowledged.
    /// let d = c.decide(&TcpState::default(), &AppProgress::default(), now);
    /// assert_eq!(d.limit, 64 << 10);
    /// ```
    pub fn new(b: u32) -> Self {
        Self {
            b,
            anchor: None,
            rates: VecDeque::new(),
            min_latency: None,
        }
    }

    /// Current bandwidth estimate, bytes per second.
    ///
    /// ```
    /// use lowtide_proto::controller::{LatencyController, PAckSample, PaceA};
    /// use std::time::{Duration, Instant};
    /// let (t0, ms) = (Instant::now(), Duration::from_millis);
    /// let mut c = PaceA::new(3);
    /// c.on_pack(&PAckSample { now: t0 + ms(20), bytes: 10_000, recv_time_us: 10_000, covered_write_time: Some(t0) });
    /// assert_eq!(c.bandwidth(), None); // one P-ACK is no rate
    /// c.on_pack(&PAckSample { now: t0 + ms(40), bytes: 30_000, recv_time_us: 30_000, covered_write_time: Some(t0 + ms(20)) });
    /// let bw = c.bandwidth().expect("a rate sample");
    /// assert!((bw - 1e6).abs() < 1.0); // 20 000 bytes in 20 ms of receiver time
    /// ```
    pub fn bandwidth(&self) -> Option<f64> {
        self.rates.iter().copied().reduce(f64::max)
    }

    /// Current latency estimate.
    ///
    /// ```
    /// use lowtide_proto::controller::{LatencyController, PAckSample, PaceA};
    /// use std::time::{Duration, Instant};
    /// let (t0, ms) = (Instant::now(), Duration::from_millis);
    /// let mut c = PaceA::new(3);
    /// c.on_pack(&PAckSample { now: t0 + ms(30), bytes: 1000, recv_time_us: 0, covered_write_time: Some(t0) });
    /// c.on_pack(&PAckSample { now: t0 + ms(60), bytes: 2000, recv_time_us: 0, covered_write_time: Some(t0 + ms(35)) });
    /// assert_eq!(c.latency(), Some(ms(25))); // the minimum of 30 and 25 ms
    /// ```
    pub fn latency(&self) -> Option<Duration> {
        self.min_latency.map(|(d, _)| d)
    }

    /// `cwnd'` in bytes, if both estimates exist.
    ///
    /// ```
    /// use lowtide_proto::controller::{LatencyController, PAckSample, PaceA};
    /// use std::time::{Duration, Instant};
    /// let (t0, ms) = (Instant::now(), Duration::from_millis);
    /// let mut c = PaceA::new(3);
    /// assert_eq!(c.cwnd_estimate(), None);
    /// c.on_pack(&PAckSample { now: t0 + ms(20), bytes: 10_000, recv_time_us: 10_000, covered_write_time: Some(t0) });
    /// c.on_pack(&PAckSample { now: t0 + ms(40), bytes: 30_000, recv_time_us: 30_000, covered_write_time: Some(t0 + ms(20)) });
    /// // bandwidth × latency: 1 MB/s × 20 ms.
    /// assert!((19_999..=20_000).contains(&c.cwnd_estimate().expect("both estimates")));
    /// ```
    pub fn cwnd_estimate(&self) -> Option<u64> {
        Some((self.bandwidth()? * self.latency()?.as_secs_f64()) as u64)
    }
}

impl LatencyController for PaceA {
    fn name(&self) -> &'static str {
        "pace_a"
    }
    fn needs_tcp_state(&self) -> bool {
        false
    }
    fn watches_idle(&self) -> bool {
        false
    }
    fn decide(&mut self, tcp: &TcpState, app: &AppProgress, _now: Instant) -> Decision {
        let mss = u64::from(tcp.mss_or_default());
        let limit = match self.cwnd_estimate() {
            Some(c) => c.max(2 * mss) + u64::from(self.b) * mss,
            None => INITIAL_WINDOW,
        };
        let outstanding = (app.written + app.staged).saturating_sub(app.acked);
        let allowance = limit.saturating_sub(outstanding);
        let min_write = mss.min(limit);
        let wake = if allowance >= min_write {
            Wake::Writable
        } else {
            Wake::PAck
        };
        Decision {
            allowance,
            limit,
            min_write,
            wake,
            fixed_lowat: None,
        }
    }

    fn on_pack(&mut self, s: &PAckSample) {
        if let Some(w) = s.covered_write_time {
            let lat = s.now.saturating_duration_since(w);
            let replace = match self.min_latency {
                None => true,
                Some((m, at)) => lat <= m || s.now.saturating_duration_since(at) > LATENCY_WINDOW,
            };
            if replace {
                self.min_latency = Some((lat, s.now));
            }
        }
        let anchor = (s.bytes, s.recv_time_us, s.covered_write_time);
        match self.anchor {
            None => self.anchor = Some(anchor),
            Some((b0, t0, w0)) => {
                let recv_dt = Duration::from_micros(s.recv_time_us.saturating_sub(t0));
                let min_dt = self.latency().unwrap_or_default().max(RATE_INTERVAL);
                if recv_dt >= min_dt {
                    let send_dt = match (w0, s.covered_write_time) {
                        (Some(a), Some(b)) => b.saturating_duration_since(a),
                        _ => Duration::ZERO,
                    };
                    let dt = recv_dt.max(send_dt).as_secs_f64();
                    let rate = s.bytes.saturating_sub(b0) as f64 / dt;
                    if self.rates.len() == RATE_SAMPLES {
                        self.rates.pop_front();
                    }
                    self.rates.push_back(rate);
                    self.anchor = Some(anchor);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_cwnd_as_latency_times_bandwidth() {
        let mut p = PaceA::new(3);
        let t0 = Instant::now();
        let app = AppProgress::default();
        let tcp = TcpState {
            mss: 1000,
            ..Default::default()
        };
        assert_eq!(p.decide(&tcp, &app, t0).limit, INITIAL_WINDOW);
        // 1 MB/s on the receiver's clock (1000 bytes per ms); 20 ms from write to P-ACK.
        for i in 0..60u64 {
            let now = t0 + Duration::from_millis(20 + i);
            p.on_pack(&PAckSample {
                now,
                bytes: i * 1000,
                recv_time_us: 5_000_000 + i * 1000,
                covered_write_time: Some(now - Duration::from_millis(20)),
            });
        }
        assert_eq!(p.latency(), Some(Duration::from_millis(20)));
        let bw = p.bandwidth().unwrap();
        assert!((bw - 1e6).abs() < 1.0, "{bw}");
        let d = p.decide(
            &tcp,
            &AppProgress {
                written: 30_000,
                acked: 10_000,
                staged: 0,
                queued: 0,
            },
            t0,
        );
        assert_eq!(d.limit, 20_000 + 3_000);
        assert_eq!(d.allowance, 3_000);
        let d = p.decide(
            &tcp,
            &AppProgress {
                written: 40_000,
                acked: 10_000,
                staged: 0,
                queued: 0,
            },
            t0,
        );
        assert!(d.blocked());
        assert_eq!(d.wake, Wake::PAck);
    }

    #[test]
    fn a_burst_after_a_stall_does_not_inflate_the_bandwidth() {
        // 1 MB/s for 100 ms, a 200 ms stall, then 200 KB read at once (they had been written
        // over the stall at the path's rate), then the steady rate again.
        let mut p = PaceA::new(3);
        let t0 = Instant::now();
        let mut bytes = 0;
        let mut recv_us = 1_000_000;
        let mut pack = |p: &mut PaceA, add: u64, recv_step_us: u64, write_at: Instant| {
            bytes += add;
            recv_us += recv_step_us;
            p.on_pack(&PAckSample {
                now: write_at + Duration::from_millis(20),
                bytes,
                recv_time_us: recv_us,
                covered_write_time: Some(write_at),
            });
        };
        for i in 0..100u64 {
            pack(&mut p, 1000, 1000, t0 + Duration::from_millis(i));
        }
        // The stalled bytes arrive within 2 ms.
        for k in 1..=200u64 {
            pack(&mut p, 1000, 10, t0 + Duration::from_millis(100 + k));
        }
        for i in 0..100u64 {
            pack(&mut p, 1000, 1000, t0 + Duration::from_millis(300 + i));
        }
        let bw = p.bandwidth().unwrap();
        assert!(bw < 1.3e6, "estimate {bw} B/s for a 1 MB/s path");
    }
}
