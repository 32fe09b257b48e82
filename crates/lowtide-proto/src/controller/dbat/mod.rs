//! DBAT: Dynamic Buffer Active Tuning. A send buffer sized for slow start, then held near the
//! bandwidth-delay product, and a smoothed queue signal that tells the application when
//! congestion starts and when it clears.
//!
//! Source: Hasan, Huang, Werstein, "Dynamic Send Buffer Active Tuning for Low Latency Streaming
//! Media", Section 4 (the algorithm) and Section 3 (why a fixed send buffer hurts: 64 KB is
//! 1.6 s of a 320 kbit/s stream). The rule:
//! - At session start the server probes the path with packet pairs; the probe gives the
//!   bottleneck bandwidth (used to pick the first bit rate) and an RTT.
//! - **Slow start.** The transport doubles its rate every RTT from its initial window, so it
//!   needs `n = ⌈log2(bit_rate / (initial_window / RTT))⌉` RTTs to reach the stream's bit rate;
//!   the buffer during slow start is that time × the stream's rate.
//! - **Afterwards** the queue threshold is the probed bandwidth × the weighted RTT (the
//!   bandwidth-delay product).
//! - A weighted average of the send-queue size filters transients; the application gets
//!   feedback only when the average crosses the threshold, and switches bit rate early.
//!
//! The same state machine serves TCP (as a [`LatencyController`] of the lowtide channel: the
//! queue is the kernel's send queue plus lowtide's own queues) and TFRC (the `lowtide-tfrc`
//! crate sizes its send buffer with [`Dbat::buffer_limit`] and feeds [`Dbat::on_queue`]).
//!
//! Where we differ:
//! - The paper does not say how slow start ends for DBAT. We leave the slow-start phase when,
//!   after one RTT of sending, the transport's rate estimate has reached the stream's rate (or
//!   the probed bandwidth, if lower) and the queue has fallen to the threshold (the transport
//!   caught up), when the transport itself leaves slow start (its first loss event: TFRC's
//!   `p > 0`, TCP's `tcpi_snd_ssthresh` set; [`Dbat::transport_left_slow_start`]), or after the computed slow-start time plus
//!   two RTTs, whichever is first. The
//!   average then restarts from an empty queue: slow start's backlog is not congestion, so a
//!   backlog that drains within about `smoothing_rtts` RTTs does not signal and one that
//!   persists does. Except when the transport's own exit (a loss) ends it with the rate
//!   still below the stream's and more than the threshold queued: that backlog cannot drain
//!   at this bit rate, so the onset comes at once, with the queue as the average. (TFRC ramps up more slowly than TCP: one packet per second until its first
//!   feedback, then at most twice the receive rate, which lags an RTT.)
//! - The average is weighted by time, not per packet: `avg += (1 − e^(−Δt/τ))·(q − avg)` with
//!   `τ = smoothing_rtts × RTT`, so irregular sampling (one sample per write opportunity) does
//!   not change the filter. The paper does not give its weight.
//! - The signal has hysteresis: it clears when the average falls below `clear_fraction` ×
//!   threshold, so a queue hovering at the threshold does not flap.
//! - The probe measures the bottleneck, not the stream's share of it: beside a bulk flow (the
//!   paper's own set-up) a threshold of the whole link's BDP let the queue reach seconds of
//!   the stream before the signal (16 s over TFRC in our lab). After slow start the
//!   bandwidth is therefore at most `SHARE_BOUND` × the transport's achieved rate.
//! - After the stream's rate goes up (an up-switch), the queue's growth is watched for
//!   `rise_watch_rtts` RTTs: from one RTT after the switch (the transport's rate needs about
//!   an RTT to follow), a least-squares slope of the unsent queue over the last RTT of at least
//!   `rise_growth` × the new rate is the onset at once, with the queue as the average. A rung the
//!   path cannot carry grows the queue at the difference; the average would cross the
//!   threshold only seconds later (8 s in the lab, latency 0.6 → 2.9 s). Such an onset clears
//!   when the average has fallen below `clear_fraction` × the queue at the onset (if that is
//!   lower than the threshold's clearing level). The paper signals only on the average's
//!   crossing; it gives no rule for going up.
//! - While the transport repairs a loss ([`Dbat::on_transport_repair`]; TCP's Recovery or
//!   Loss state), the watch takes no samples and starts again, its one-RTT grace included,
//!   when the repair is over: the window was cut for the repair, so the unsent queue grows
//!   whatever the path carries. In the lab a single fast retransmit 1.5 s after 80 → 120
//!   kbit/s grew it by about 2 kB in 0.3 s, and the watch took a rung the path carried back
//!   down (twice in one run: a second down-switch). A rung the path cannot carry still grows
//!   the queue after the repair, and the average's crossing still applies throughout.
//! - While congested, the onset repeats each time the average doubles (`ESCALATION`): the
//!   application's first answer did not drain the queue, so it must step down again. The
//!   paper signals each crossing only once.
//! - The buffer after slow start is `buffer_headroom` × threshold, not the threshold itself: a
//!   buffer equal to the threshold could never hold a queue above it, so the signal could not
//!   fire before the buffer drops data. Over TCP, data beyond the buffer stays in lowtide's
//!   queues (where deadlines and cancellation still work) instead of being dropped.
//! - Over TCP the kernel may always hold one congestion window plus one MSS: a probe that
//!   underestimates the bandwidth must not make TCP application-limited (the paper's 16 KB row
//!   shows what that costs).
//! - Before a probe result arrives, the bandwidth is the transport's own rate estimate and the
//!   RTT the transport's smoothed RTT (or `fallback_rtt_ms` before either exists).
//!
//! The parts: [`DbatConfig`] (`config.rs`), the packet-pair [`ProbeResult`] (`probe.rs`),
//! the buffer and threshold DBAT plans with (`threshold.rs`), the queue samples and the
//! up-switch watch that raise the signals (`queue.rs`), and [`DbatController`], DBAT as the
//! channel's latency controller (`controller.rs`).

mod config;
mod controller;
mod probe;
mod queue;
#[cfg(test)]
mod tests;
mod threshold;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::config::ConfigError;

pub use config::DbatConfig;
pub use controller::DbatController;
pub use probe::ProbeResult;
use queue::RiseWatch;

/// DBAT's feedback to the application.
///
/// ```
/// use lowtide_proto::controller::CongestionSignal;
/// /// The application's answer: step the bit rate down on onset, back up once it clears.
/// fn next_rate(kbps: u32, s: &CongestionSignal) -> u32 {
///     if s.onset { kbps / 2 } else { kbps * 3 / 2 }
/// }
/// let s = CongestionSignal { onset: true, queue: 40_000, threshold: 31_250, rate_estimate: 50_000 };
/// assert_eq!(next_rate(640, &s), 320);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CongestionSignal {
    /// `true`: the average queue crossed the threshold, or doubled since the last onset while
    /// still congested; `false`: it cleared.
    pub onset: bool,
    /// Average send-queue size, bytes.
    pub queue: u64,
    /// The threshold, bytes.
    pub threshold: u64,
    /// The transport's achieved-rate estimate, bytes per second.
    pub rate_estimate: u64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// Nothing queued yet.
    Idle,
    /// Slow start began at this time.
    SlowStart(Instant),
    Steady,
}

/// Signals kept for the application before the oldest are dropped (and counted).
const MAX_SIGNALS: usize = 64;

/// The DBAT state machine (sans-IO: every call takes `now`).
///
/// ```
/// use lowtide_proto::controller::{Dbat, DbatConfig};
/// use std::time::Duration;
/// let mut d = Dbat::new(DbatConfig::default())?;
/// // 640 kbit/s; an initial window of 10·1000 B per 400 ms RTT is 25 kB/s: doubling twice
/// // reaches 80 kB/s, so slow start takes 2 RTTs and needs 0.8 s × 80 kB/s of buffer.
/// d.set_stream_rate(80_000);
/// let rtt = Duration::from_millis(400);
/// assert_eq!(d.slow_start_time(1000, rtt), Duration::from_millis(800));
/// assert_eq!(d.slow_start_allowance(1000, rtt), 64_000);
/// assert!(d.in_slow_start());
/// # Ok::<(), lowtide_proto::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Dbat {
    cfg: DbatConfig,
    /// The stream's bit rate, bytes per second.
    rate: u64,
    probe: Option<ProbeResult>,
    phase: Phase,
    avg: Option<(f64, Instant)>,
    congested: bool,
    /// The average at the last onset, bytes.
    onset_queue: f64,
    /// The last onset came from an up-switch's queue growth: it clears when the average has
    /// halved (`clear_fraction`) from this, if that is below the threshold's clearing level.
    rise_onset_queue: Option<f64>,
    /// The stream's rate went up since the last sample: watch the queue from the next one.
    rise_pending: bool,
    rise: Option<RiseWatch>,
    /// Onsets from an up-switch's queue growth (counted among the signals as well).
    pub rise_onsets: u64,
    /// The transport was repairing a loss at the last sample.
    repairing: bool,
    /// Watches restarted because the transport repaired a loss during them.
    pub rise_restarts_after_repair: u64,
    signals: VecDeque<CongestionSignal>,
    /// Signals dropped because the application did not collect them.
    pub signals_dropped: u64,
    /// The last threshold computed, bytes.
    last_threshold: u64,
    /// The last sample: queue, RTT, rate estimate, MSS (for the end of slow start).
    last_sample: (u64, Option<Duration>, u64, u32),
}

impl Dbat {
    /// A checked DBAT.
    ///
    /// ```
    /// use lowtide_proto::controller::{Dbat, DbatConfig};
    /// let d = Dbat::new(DbatConfig { bit_rate_kbps: 800, ..DbatConfig::default() })?;
    /// assert_eq!(d.stream_rate(), 100_000); // bytes per second
    /// assert!(Dbat::new(DbatConfig { initial_window: 0, ..DbatConfig::default() }).is_err());
    /// # Ok::<(), lowtide_proto::ConfigError>(())
    /// ```
    pub fn new(cfg: DbatConfig) -> Result<Self, ConfigError> {
        cfg.validate()?;
        Ok(Self {
            cfg,
            rate: u64::from(cfg.bit_rate_kbps) * 1000 / 8,
            probe: None,
            phase: Phase::Idle,
            avg: None,
            congested: false,
            onset_queue: 0.0,
            rise_onset_queue: None,
            rise_pending: false,
            rise: None,
            rise_onsets: 0,
            repairing: false,
            rise_restarts_after_repair: 0,
            signals: VecDeque::new(),
            signals_dropped: 0,
            last_threshold: 0,
            last_sample: (0, None, 0, 0),
        })
    }

    /// The stream's bit rate changed (bytes per second). A new rate while idle or in slow
    /// start changes the slow-start allowance; afterwards only the queue it produces matters.
    ///
    /// ```
    /// use lowtide_proto::controller::{Dbat, DbatConfig};
    /// use std::time::Duration;
    /// let mut d = Dbat::new(DbatConfig::default())?;
    /// let rtt = Duration::from_millis(100);
    /// assert_eq!(d.slow_start_time(1000, rtt), Duration::ZERO); // 40 kB/s: within the initial window
    /// d.set_stream_rate(400_000); // 3.2 Mbit/s: two doublings of 100 kB/s
    /// assert_eq!(d.slow_start_time(1000, rtt), Duration::from_millis(200));
    /// # Ok::<(), lowtide_proto::ConfigError>(())
    /// ```
    pub fn set_stream_rate(&mut self, bytes_per_sec: u64) {
        let rate = bytes_per_sec.max(1);
        if rate > self.rate {
            // an up-switch: after slow start, the queue's growth is watched from the next sample
            self.rise_pending = self.phase == Phase::Steady;
        } else if rate < self.rate {
            self.rise_pending = false;
            self.rise = None;
        }
        self.rate = rate;
    }

    /// The stream's bit rate, bytes per second.
    ///
    /// ```
    /// use lowtide_proto::controller::{Dbat, DbatConfig};
    /// let mut d = Dbat::new(DbatConfig::default())?;
    /// assert_eq!(d.stream_rate(), 40_000); // 320 kbit/s
    /// d.set_stream_rate(0);
    /// assert_eq!(d.stream_rate(), 1); // never zero
    /// # Ok::<(), lowtide_proto::ConfigError>(())
    /// ```
    pub fn stream_rate(&self) -> u64 {
        self.rate
    }

    /// A probe result arrived.
    ///
    /// ```
    /// use lowtide_proto::controller::{Dbat, DbatConfig, ProbeResult};
    /// use std::time::Duration;
    /// let mut d = Dbat::new(DbatConfig::default())?;
    /// let rtt = Some(Duration::from_millis(100));
    /// assert_eq!(d.threshold(rtt, 0, 1000), 4000); // the stream's 40 kB/s × 100 ms
    /// let p = ProbeResult::from_dispersion(Duration::from_millis(100), Duration::from_millis(16), 1000, Duration::from_micros(50));
    /// d.on_probe(p); // a 62.5 kB/s bottleneck
    /// assert_eq!(d.threshold(rtt, 0, 1000), 6250);
    /// # Ok::<(), lowtide_proto::ConfigError>(())
    /// ```
    pub fn on_probe(&mut self, probe: ProbeResult) {
        self.probe = Some(probe);
    }

    /// The probe result in use.
    ///
    /// ```
    /// use lowtide_proto::controller::{Dbat, DbatConfig, ProbeResult};
    /// use std::time::Duration;
    /// let mut d = Dbat::new(DbatConfig::default())?;
    /// assert_eq!(d.probe(), None);
    /// let p = ProbeResult::from_dispersion(Duration::from_millis(80), Duration::from_millis(2), 1000, Duration::from_micros(50));
    /// d.on_probe(p);
    /// assert_eq!(d.probe().and_then(|p| p.bandwidth), Some(500_000));
    /// # Ok::<(), lowtide_proto::ConfigError>(())
    /// ```
    pub fn probe(&self) -> Option<ProbeResult> {
        self.probe
    }

    /// The transport left its own slow start (TFRC: its first loss event). DBAT's slow-start
    /// allowance is for the transport's ramp to the stream's rate: a ramp cut short by loss
    /// will not reach it, and the allowance would only hold seconds of the stream. Ends the
    /// slow-start phase as if it had caught up (a no-op in any other phase).
    ///
    /// ```
    /// use lowtide_proto::controller::{Dbat, DbatConfig};
    /// use std::time::{Duration, Instant};
    /// let (t0, ms) = (Instant::now(), Duration::from_millis);
    /// let mut d = Dbat::new(DbatConfig::default())?;
    /// d.on_queue(t0, 30_000, Some(ms(800)), 5_000, 1200); // slow start: far behind the stream
    /// assert!(d.in_slow_start());
    /// d.transport_left_slow_start(t0 + ms(900));
    /// assert!(!d.in_slow_start());
    /// assert_eq!(d.queue_average(), Some(0)); // the ramp's backlog is not congestion
    /// # Ok::<(), lowtide_proto::ConfigError>(())
    /// ```
    pub fn transport_left_slow_start(&mut self, now: Instant) {
        if matches!(self.phase, Phase::SlowStart(_)) {
            self.end_slow_start(now, true);
        }
    }

    /// Leaves slow start; `by_loss`: the transport left its own slow start (a loss), so its
    /// rate will not grow further.
    fn end_slow_start(&mut self, now: Instant, by_loss: bool) {
        self.phase = Phase::Steady;
        let (queue, srtt, rate, mss) = self.last_sample;
        let threshold = self.threshold(srtt, rate, mss);
        if by_loss && rate < self.rate && queue > threshold {
            // A loss ended slow start below the stream's rate with more than the threshold
            // queued: at this rate the backlog only grows, so the application hears it now,
            // not after the average has climbed again. (DBAT's own time limit is no such
            // evidence: the transport may still be ramping.)
            self.avg = Some((queue as f64, now));
            self.signal(true, queue as f64, threshold, rate);
        } else {
            // Slow start's backlog is not congestion: restart the average from empty.
            self.avg = Some((0.0, now));
        }
    }

    fn signal(&mut self, onset: bool, avg: f64, threshold: u64, rate_estimate: u64) {
        self.congested = onset;
        self.rise = None;
        self.rise_onset_queue = None;
        if onset {
            self.onset_queue = avg;
        }
        if self.signals.len() == MAX_SIGNALS {
            self.signals.pop_front();
            self.signals_dropped += 1;
        }
        self.signals.push_back(CongestionSignal {
            onset,
            queue: avg as u64,
            threshold,
            rate_estimate,
        });
    }

    /// Whether the slow-start phase is over.
    ///
    /// ```
    /// use lowtide_proto::controller::{Dbat, DbatConfig};
    /// use std::time::{Duration, Instant};
    /// let (t0, ms) = (Instant::now(), Duration::from_millis);
    /// let mut d = Dbat::new(DbatConfig::default())?; // 40 kB/s
    /// let rtt = Some(ms(100));
    /// d.on_queue(t0, 1000, rtt, 40_000, 1000); // data queued: slow start begins
    /// assert!(d.in_slow_start());
    /// d.on_queue(t0 + ms(200), 1000, rtt, 40_000, 1000); // TCP reached the stream's rate
    /// assert!(!d.in_slow_start());
    /// # Ok::<(), lowtide_proto::ConfigError>(())
    /// ```
    pub fn in_slow_start(&self) -> bool {
        self.phase != Phase::Steady
    }

    /// Whether the last signal was an onset.
    ///
    /// ```
    /// use lowtide_proto::controller::{Dbat, DbatConfig};
    /// use std::time::{Duration, Instant};
    /// let (t0, ms) = (Instant::now(), Duration::from_millis);
    /// let mut d = Dbat::new(DbatConfig::default())?; // 40 kB/s, threshold 4000 bytes at 100 ms
    /// let rtt = Some(ms(100));
    /// d.on_queue(t0, 1000, rtt, 40_000, 1000);
    /// d.on_queue(t0 + ms(200), 1000, rtt, 40_000, 1000); // steady
    /// assert!(!d.congested());
    /// d.on_queue(t0 + ms(1200), 100_000, rtt, 40_000, 1000);
    /// assert!(d.congested());
    /// d.on_queue(t0 + ms(3000), 0, rtt, 40_000, 1000); // the average falls below 2000 bytes
    /// assert!(!d.congested());
    /// # Ok::<(), lowtide_proto::ConfigError>(())
    /// ```
    pub fn congested(&self) -> bool {
        self.congested
    }

    /// The weighted queue average, bytes.
    ///
    /// ```
    /// use lowtide_proto::controller::{Dbat, DbatConfig};
    /// use std::time::{Duration, Instant};
    /// let (t0, ms) = (Instant::now(), Duration::from_millis);
    /// let mut d = Dbat::new(DbatConfig::default())?;
    /// assert_eq!(d.queue_average(), None);
    /// d.on_queue(t0, 8000, Some(ms(100)), 0, 1000);
    /// assert_eq!(d.queue_average(), Some(8000)); // the first sample
    /// // 150 ms later, with a time constant of 2 RTTs (200 ms): 8000 · e^(−0.75).
    /// d.on_queue(t0 + ms(150), 0, Some(ms(100)), 0, 1000);
    /// let avg = d.queue_average().unwrap();
    /// assert!((3775..=3785).contains(&avg), "{avg}");
    /// # Ok::<(), lowtide_proto::ConfigError>(())
    /// ```
    pub fn queue_average(&self) -> Option<u64> {
        self.avg.map(|(a, _)| a as u64)
    }

    /// The threshold at the last queue sample, bytes (0 before any).
    ///
    /// ```
    /// use lowtide_proto::controller::{Dbat, DbatConfig};
    /// use std::time::{Duration, Instant};
    /// let mut d = Dbat::new(DbatConfig::default())?; // 40 kB/s
    /// assert_eq!(d.last_threshold(), 0);
    /// d.on_queue(Instant::now(), 0, Some(Duration::from_millis(100)), 0, 1000);
    /// assert_eq!(d.last_threshold(), 4000);
    /// # Ok::<(), lowtide_proto::ConfigError>(())
    /// ```
    pub fn last_threshold(&self) -> u64 {
        self.last_threshold
    }

    /// The next signal for the application.
    ///
    /// ```
    /// use lowtide_proto::controller::{Dbat, DbatConfig};
    /// use std::time::{Duration, Instant};
    /// let (t0, ms) = (Instant::now(), Duration::from_millis);
    /// let mut d = Dbat::new(DbatConfig::default())?;
    /// let rtt = Some(ms(100));
    /// d.on_queue(t0, 1000, rtt, 40_000, 1000);
    /// d.on_queue(t0 + ms(200), 1000, rtt, 40_000, 1000); // steady
    /// d.on_queue(t0 + ms(1200), 100_000, rtt, 40_000, 1000); // onset
    /// d.on_queue(t0 + ms(3000), 0, rtt, 40_000, 1000); // cleared
    /// let onsets: Vec<bool> = std::iter::from_fn(|| d.poll_signal()).map(|s| s.onset).collect();
    /// assert_eq!(onsets, [true, false]);
    /// # Ok::<(), lowtide_proto::ConfigError>(())
    /// ```
    pub fn poll_signal(&mut self) -> Option<CongestionSignal> {
        self.signals.pop_front()
    }
}
