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

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{AppProgress, Decision, LatencyController, TcpState};
use crate::config::{check_range, ConfigError};

/// DBAT's parameters, as found in configuration files (`controller = { dbat = { ... } }`).
///
/// ```
/// use lowtide_proto::controller::DbatConfig;
/// use lowtide_proto::{Config, ControllerConfig};
/// let cfg: Config = toml::from_str("controller = { dbat = { bit_rate_kbps = 640 } }").unwrap();
/// let ControllerConfig::Dbat(d) = cfg.controller else { panic!("not DBAT") };
/// assert_eq!((d.bit_rate_kbps, d.initial_window), (640, DbatConfig::default().initial_window));
/// let e = DbatConfig { bit_rate_kbps: 0, ..d }.validate().unwrap_err();
/// assert_eq!(e.field, "controller.dbat.bit_rate_kbps");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DbatConfig {
    /// The stream's bit rate until the application sets one, kbit/s.
    pub bit_rate_kbps: u32,
    /// The transport's initial window, segments (Linux TCP: 10; TFRC, RFC 3390: 3-4).
    pub initial_window: u32,
    /// Time constant of the queue average, in RTTs.
    pub smoothing_rtts: f64,
    /// The signal clears when the average falls below this fraction of the threshold.
    pub clear_fraction: f64,
    /// Send buffer after slow start, as a multiple of the threshold.
    pub buffer_headroom: f64,
    /// RTT assumed before any probe or transport sample, ms.
    pub fallback_rtt_ms: u32,
    /// After the stream's rate goes up, an onset when the send queue grows faster than this
    /// fraction of the new rate (the path carries less than `1 − rise_growth` of it).
    pub rise_growth: f64,
    /// How long after the stream's rate goes up its queue's growth is watched, RTTs.
    pub rise_watch_rtts: f64,
}

impl Default for DbatConfig {
    fn default() -> Self {
        Self {
            bit_rate_kbps: 320,
            initial_window: 10,
            smoothing_rtts: 2.0,
            clear_fraction: 0.5,
            buffer_headroom: 2.0,
            fallback_rtt_ms: 100,
            rise_growth: 0.1,
            rise_watch_rtts: 8.0,
        }
    }
}

impl DbatConfig {
    /// The rate the transport's slow start begins at, bytes per second: the initial window
    /// per RTT. Slow start doubles it once per RTT (Section 4 of the paper).
    ///
    /// ```
    /// use lowtide_proto::controller::DbatConfig;
    /// use std::time::Duration;
    /// let tcp = DbatConfig::default(); // 10 segments
    /// assert_eq!(tcp.ramp_start_rate(1448, Duration::from_millis(800)), 18_100.0);
    /// ```
    pub fn ramp_start_rate(&self, mss: u32, rtt: Duration) -> f64 {
        f64::from(self.initial_window) * f64::from(mss) / rtt.as_secs_f64().max(1e-6)
    }

    /// Checks every field; errors name the field, the value and the allowed range.
    ///
    /// ```
    /// use lowtide_proto::controller::DbatConfig;
    /// assert!(DbatConfig::default().validate().is_ok());
    /// let e = DbatConfig { clear_fraction: 1.5, ..DbatConfig::default() }.validate().unwrap_err();
    /// assert_eq!((e.field, e.allowed), ("controller.dbat.clear_fraction", "0..=1"));
    /// ```
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_range(
            "controller.dbat.bit_rate_kbps",
            self.bit_rate_kbps,
            1,
            10_000_000,
            "1..=10000000",
        )?;
        check_range(
            "controller.dbat.initial_window",
            self.initial_window,
            1,
            1000,
            "1..=1000",
        )?;
        check_range(
            "controller.dbat.smoothing_rtts",
            self.smoothing_rtts,
            0.1,
            100.0,
            "0.1..=100",
        )?;
        check_range(
            "controller.dbat.clear_fraction",
            self.clear_fraction,
            0.0,
            1.0,
            "0..=1",
        )?;
        check_range(
            "controller.dbat.buffer_headroom",
            self.buffer_headroom,
            1.0,
            100.0,
            "1..=100",
        )?;
        check_range(
            "controller.dbat.fallback_rtt_ms",
            self.fallback_rtt_ms,
            1,
            60_000,
            "1..=60000",
        )?;
        check_range(
            "controller.dbat.rise_growth",
            self.rise_growth,
            0.01,
            1.0,
            "0.01..=1",
        )?;
        check_range(
            "controller.dbat.rise_watch_rtts",
            self.rise_watch_rtts,
            2.0,
            100.0,
            "2..=100",
        )
    }
}

/// What a packet-pair probe measured (see `docs/dbat.md`).
///
/// ```
/// use lowtide_proto::controller::ProbeResult;
/// use std::time::Duration;
/// let ms = Duration::from_millis;
/// // The second 1000-byte packet arrived 16 ms after the first: a 62.5 kB/s bottleneck.
/// let p = ProbeResult::from_dispersion(ms(210), ms(16), 1000, Duration::from_micros(50));
/// assert_eq!(p.bandwidth, Some(62_500));
/// // Both packets in one read: too close to tell.
/// let p = ProbeResult::from_dispersion(ms(210), Duration::ZERO, 1000, Duration::from_micros(50));
/// assert_eq!(p.bandwidth, None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ProbeResult {
    /// Round-trip time: report arrival − pair sent − dispersion.
    pub rtt: Duration,
    /// Time between the arrivals of the two packets at the receiver.
    pub dispersion: Duration,
    /// Bytes of the second packet (what crossed the bottleneck during the dispersion).
    pub second_len: u32,
    /// Bottleneck estimate, bytes per second; `None` when the dispersion was below what the
    /// receiver can resolve (both packets arrived in one read).
    pub bandwidth: Option<u64>,
}

impl ProbeResult {
    /// Builds the result from a dispersion; a dispersion under `resolution` gives no estimate.
    ///
    /// ```
    /// use lowtide_proto::controller::ProbeResult;
    /// use std::time::Duration;
    /// // 1448 bytes crossed the bottleneck in 1 ms: 1.448 MB/s.
    /// let p = ProbeResult::from_dispersion(Duration::from_millis(50), Duration::from_millis(1), 1448, Duration::from_micros(50));
    /// assert_eq!(p.bandwidth, Some(1_448_000));
    /// assert_eq!((p.rtt, p.second_len), (Duration::from_millis(50), 1448));
    /// ```
    pub fn from_dispersion(
        rtt: Duration,
        dispersion: Duration,
        second_len: u32,
        resolution: Duration,
    ) -> Self {
        let bandwidth = (dispersion >= resolution && !dispersion.is_zero())
            .then(|| (f64::from(second_len) / dispersion.as_secs_f64()) as u64);
        Self {
            rtt,
            dispersion,
            second_len,
            bandwidth,
        }
    }
}

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

/// After slow start, the bandwidth in the threshold is at most this multiple of the
/// transport's achieved rate. Twice, not once: over TCP the queue DBAT watches includes the
/// bytes in flight, one achieved rate × RTT on a healthy path.
const SHARE_BOUND: f64 = 2.0;

/// While congested, a new onset when the average reaches this multiple of the average at the
/// last onset: the application's answer to it did not drain the queue.
const ESCALATION: f64 = 2.0;

/// Queue samples kept per growth window of an up-switch's watch, at most (one per
/// 1/`RISE_SAMPLES` of the window): bounded memory however often the transport samples.
const RISE_SAMPLES: u32 = 64;

/// An up-switch being watched: whether the path carries the new rate shows in the queue's
/// growth (the stream's rate minus what the path carries), long before the average crosses
/// the threshold.
#[derive(Debug, Clone)]
struct RiseWatch {
    since: Instant,
    /// (time, queue) over the last window, at least 1/`RISE_SAMPLES` of it apart.
    samples: VecDeque<(Instant, u64)>,
}

impl RiseWatch {
    /// Adds a sample, forgets those older than `window`; the queue's growth over the window
    /// (least squares), bytes per second, once `since` is `grace + window` old.
    fn growth(
        &mut self,
        now: Instant,
        queue: u64,
        grace: Duration,
        window: Duration,
    ) -> Option<f64> {
        if self
            .samples
            .back()
            .is_none_or(|&(t, _)| now.saturating_duration_since(t) >= window / RISE_SAMPLES)
        {
            self.samples.push_back((now, queue));
        }
        while self
            .samples
            .front()
            .is_some_and(|&(t, _)| now.saturating_duration_since(t) > window)
        {
            self.samples.pop_front();
        }
        if now.saturating_duration_since(self.since) < grace + window || self.samples.len() < 3 {
            return None;
        }
        let t0 = self.samples[0].0;
        let xs = self
            .samples
            .iter()
            .map(|&(t, q)| (t.saturating_duration_since(t0).as_secs_f64(), q as f64));
        let n = self.samples.len() as f64;
        let (sx, sy) = xs.clone().fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
        let (mx, my) = (sx / n, sy / n);
        let (sxy, sxx) = xs.fold((0.0, 0.0), |(a, b), (x, y)| {
            (a + (x - mx) * (y - my), b + (x - mx) * (x - mx))
        });
        (sxx > 0.0).then(|| sxy / sxx)
    }
}

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

    /// The RTT to plan with: the transport's weighted RTT, else the probe's, else the fallback.
    fn rtt(&self, srtt: Option<Duration>) -> Duration {
        srtt.filter(|r| !r.is_zero())
            .or(self.probe.map(|p| p.rtt).filter(|r| !r.is_zero()))
            .unwrap_or(Duration::from_millis(u64::from(self.cfg.fallback_rtt_ms)))
    }

    /// Time slow start needs to reach the stream's rate from `initial_window` segments per
    /// RTT: `⌈log2(rate / (iw·mss / rtt))⌉` RTTs.
    ///
    /// ```
    /// use lowtide_proto::controller::{Dbat, DbatConfig};
    /// use std::time::Duration;
    /// let mut d = Dbat::new(DbatConfig::default())?;
    /// d.set_stream_rate(40_000);
    /// // 10 × 1000 B per 400 ms is 25 kB/s: one doubling reaches 40 kB/s.
    /// assert_eq!(d.slow_start_time(1000, Duration::from_millis(400)), Duration::from_millis(400));
    /// // At 100 ms the initial window already carries 100 kB/s: no slow start.
    /// assert_eq!(d.slow_start_time(1000, Duration::from_millis(100)), Duration::ZERO);
    /// # Ok::<(), lowtide_proto::ConfigError>(())
    /// ```
    pub fn slow_start_time(&self, mss: u32, rtt: Duration) -> Duration {
        let ratio = self.rate as f64 / self.cfg.ramp_start_rate(mss, rtt);
        let rtts = if ratio <= 1.0 {
            0.0
        } else {
            ratio.log2().ceil()
        };
        rtt.mul_f64(rtts)
    }

    /// The buffer slow start needs: slow-start time × the stream's rate, at least the initial
    /// window.
    ///
    /// ```
    /// use lowtide_proto::controller::{Dbat, DbatConfig};
    /// use std::time::Duration;
    /// let d = Dbat::new(DbatConfig::default())?; // 40 kB/s
    /// // One 400 ms RTT of slow start at 40 kB/s: 16 000 bytes.
    /// assert_eq!(d.slow_start_allowance(1000, Duration::from_millis(400)), 16_000);
    /// // No slow start needed: still the initial window, 10 × 1000 bytes.
    /// assert_eq!(d.slow_start_allowance(1000, Duration::from_millis(100)), 10_000);
    /// # Ok::<(), lowtide_proto::ConfigError>(())
    /// ```
    pub fn slow_start_allowance(&self, mss: u32, rtt: Duration) -> u64 {
        let t = self.slow_start_time(mss, rtt);
        let bytes = (t.as_secs_f64() * self.rate as f64) as u64;
        bytes.max(u64::from(self.cfg.initial_window) * u64::from(mss))
    }

    /// The queue threshold: probed bandwidth (else `rate_estimate`) × weighted RTT, bytes;
    /// at least one MSS. After slow start the probed bandwidth is bounded by `SHARE_BOUND` ×
    /// `rate_estimate`: the probe measures the bottleneck, not this stream's share of it. A
    /// probe below the rate the transport carries of the stream (its rate estimate, at most
    /// the stream's rate) is disproved, and `SHARE_BOUND` × that rate takes its place: a
    /// packet pair with cross traffic between its packets measures far less than the path
    /// (12 kbit/s against an 80 kbit/s stream carried whole in the lab), and a threshold of
    /// one MSS then holds every frame beyond one window in lowtide's queue, where the
    /// application's next frame is dropped.
    ///
    /// ```
    /// use lowtide_proto::controller::{Dbat, DbatConfig};
    /// use std::time::Duration;
    /// let d = Dbat::new(DbatConfig::default())?; // 40 kB/s
    /// let rtt = Some(Duration::from_millis(100));
    /// assert_eq!(d.threshold(rtt, 100_000, 1000), 10_000); // TCP's faster estimate × RTT
    /// assert_eq!(d.threshold(None, 0, 1000), 4000); // the 100 ms fallback RTT
    /// assert_eq!(d.threshold(Some(Duration::from_millis(1)), 0, 1000), 1000); // at least one MSS
    /// # Ok::<(), lowtide_proto::ConfigError>(())
    /// ```
    pub fn threshold(&self, srtt: Option<Duration>, rate_estimate: u64, mss: u32) -> u64 {
        let bw = match self.probe.and_then(|p| p.bandwidth) {
            Some(bw) if self.phase == Phase::Steady && rate_estimate > 0 => {
                let carried = rate_estimate.min(self.rate);
                if bw < carried {
                    (carried as f64 * SHARE_BOUND) as u64
                } else {
                    bw.min((rate_estimate as f64 * SHARE_BOUND) as u64)
                }
            }
            Some(bw) => bw,
            None => rate_estimate.max(self.rate),
        };
        let bdp = (bw as f64 * self.rtt(srtt).as_secs_f64()) as u64;
        bdp.max(u64::from(mss))
    }

    /// The send buffer DBAT allows now, bytes: the slow-start allowance (or the threshold,
    /// if larger) during slow start, `buffer_headroom` × threshold afterwards.
    ///
    /// ```
    /// use lowtide_proto::controller::{Dbat, DbatConfig};
    /// use std::time::{Duration, Instant};
    /// let (t0, ms) = (Instant::now(), Duration::from_millis);
    /// let mut d = Dbat::new(DbatConfig::default())?; // 40 kB/s
    /// let rtt = Some(ms(100));
    /// // Slow start: the initial window (10 000) beats 2 × the 4000-byte threshold.
    /// assert_eq!(d.buffer_limit(rtt, 40_000, 1000), 10_000);
    /// d.on_queue(t0, 1000, rtt, 40_000, 1000);
    /// d.on_queue(t0 + ms(200), 1000, rtt, 40_000, 1000); // steady
    /// assert_eq!(d.buffer_limit(rtt, 40_000, 1000), 8000);
    /// # Ok::<(), lowtide_proto::ConfigError>(())
    /// ```
    pub fn buffer_limit(&self, srtt: Option<Duration>, rate_estimate: u64, mss: u32) -> u64 {
        let threshold = self.threshold(srtt, rate_estimate, mss);
        let steady = (threshold as f64 * self.cfg.buffer_headroom) as u64;
        if self.in_slow_start() {
            self.slow_start_allowance(mss, self.rtt(srtt)).max(steady)
        } else {
            steady
        }
    }

    /// A sample of the send queue (bytes waiting or unacknowledged at the sender) at `now`.
    /// Updates the average and the phase; a crossing queues a [`CongestionSignal`].
    ///
    /// ```
    /// use lowtide_proto::controller::{Dbat, DbatConfig};
    /// use std::time::{Duration, Instant};
    /// let (t0, ms) = (Instant::now(), Duration::from_millis);
    /// let mut d = Dbat::new(DbatConfig::default())?; // 40 kB/s
    /// let rtt = Some(ms(100));
    /// d.on_queue(t0, 0, rtt, 0, 1000);
    /// assert_eq!(d.queue_average(), Some(0)); // idle: nothing queued, nothing to do
    /// d.on_queue(t0 + ms(10), 5000, rtt, 40_000, 1000);
    /// d.on_queue(t0 + ms(210), 3000, rtt, 40_000, 1000); // caught up with the stream's rate
    /// assert!(!d.in_slow_start());
    /// assert_eq!(d.queue_average(), Some(0)); // slow start's backlog is forgotten
    /// # Ok::<(), lowtide_proto::ConfigError>(())
    /// ```
    pub fn on_queue(
        &mut self,
        now: Instant,
        queue: u64,
        srtt: Option<Duration>,
        rate_estimate: u64,
        mss: u32,
    ) {
        self.on_queue_parts(now, queue, queue, srtt, rate_estimate, mss);
    }

    /// [`Self::on_queue`] for a transport whose queue holds bytes in flight (TCP's send
    /// queue): `unsent` is the part not yet sent, on which an up-switch's growth is watched,
    /// since the bytes in flight grow with the stream's rate by design (about the rate's step
    /// × RTT, over as many RTTs as the window needs to grow).
    ///
    /// ```
    /// use lowtide_proto::controller::{Dbat, DbatConfig};
    /// use std::time::{Duration, Instant};
    /// let (t0, ms) = (Instant::now(), Duration::from_millis);
    /// let mut d = Dbat::new(DbatConfig::default())?;
    /// d.on_queue_parts(t0, 9000, 1000, Some(ms(100)), 40_000, 1000);
    /// assert_eq!(d.queue_average(), Some(9000)); // the average is of the whole queue
    /// # Ok::<(), lowtide_proto::ConfigError>(())
    /// ```
    pub fn on_queue_parts(
        &mut self,
        now: Instant,
        queue: u64,
        unsent: u64,
        srtt: Option<Duration>,
        rate_estimate: u64,
        mss: u32,
    ) {
        let rtt = self.rtt(srtt);
        let threshold = self.threshold(srtt, rate_estimate, mss);
        self.last_threshold = threshold;
        self.last_sample = (queue, srtt, rate_estimate, mss);
        let avg = match self.avg {
            None => queue as f64,
            Some((a, at)) => {
                let dt = now.saturating_duration_since(at).as_secs_f64();
                let tau = rtt.as_secs_f64() * self.cfg.smoothing_rtts;
                a + (1.0 - (-dt / tau).exp()) * (queue as f64 - a)
            }
        };
        self.avg = Some((avg, now));
        match self.phase {
            Phase::Idle if queue > 0 => self.phase = Phase::SlowStart(now),
            Phase::Idle => {}
            Phase::SlowStart(start) => {
                let elapsed = now.saturating_duration_since(start);
                let limit = self.slow_start_time(mss, rtt) + rtt * 2;
                let target = self
                    .probe
                    .and_then(|p| p.bandwidth)
                    .map_or(self.rate, |bw| bw.min(self.rate));
                let caught_up = rate_estimate >= target && queue <= threshold;
                if (elapsed >= rtt && caught_up) || elapsed >= limit {
                    self.end_slow_start(now, false);
                }
            }
            Phase::Steady => {
                if std::mem::take(&mut self.rise_pending) && !self.congested {
                    self.rise = Some(RiseWatch {
                        since: now,
                        samples: VecDeque::new(),
                    });
                }
                if self.rise_failed(now, unsent, rtt) {
                    // The path does not carry the new rate: the application hears it now, with
                    // the queue as the average, not when the average crosses the threshold
                    // seconds later.
                    let avg = avg.max(queue as f64);
                    self.avg = Some((avg, now));
                    self.rise_onsets += 1;
                    self.signal(true, avg, threshold, rate_estimate);
                    self.rise_onset_queue = Some(avg);
                    return;
                }
                let clear_level = self
                    .rise_onset_queue
                    .map_or(threshold as f64, |q| q.min(threshold as f64))
                    * self.cfg.clear_fraction;
                let onset = !self.congested && avg > threshold as f64;
                let worse = self.congested && avg >= self.onset_queue * ESCALATION;
                let clear = self.congested && avg < clear_level;
                if onset || worse || clear {
                    self.signal(!clear, avg, threshold, rate_estimate);
                }
            }
        }
    }

    /// Whether the transport is repairing a loss now (TCP: `tcpi_ca_state` Recovery or Loss),
    /// given before each queue sample. While it is, an up-switch's watch takes no samples; it
    /// starts again, grace included, from the first sample after the repair.
    ///
    /// ```
    /// use lowtide_proto::controller::{Dbat, DbatConfig};
    /// use std::time::Instant;
    /// let mut d = Dbat::new(DbatConfig::default())?;
    /// d.on_transport_repair(Instant::now(), true); // no watch running: nothing to restart
    /// assert_eq!(d.rise_restarts_after_repair, 0);
    /// # Ok::<(), lowtide_proto::ConfigError>(())
    /// ```
    pub fn on_transport_repair(&mut self, now: Instant, repairing: bool) {
        let began = repairing && !self.repairing;
        self.repairing = repairing;
        if let Some(w) = self.rise.as_mut().filter(|_| repairing) {
            w.since = now;
            w.samples.clear();
            if began {
                self.rise_restarts_after_repair += 1;
            }
        }
    }

    /// Whether the last up-switch's watch finds the unsent queue growing faster than `rise_growth` ×
    /// the stream's rate over the last RTT, from one RTT after the switch (the transport's
    /// rate needs about an RTT to follow: TFRC's `X_recv`, TCP's window) until
    /// `rise_watch_rtts` RTTs after it.
    fn rise_failed(&mut self, now: Instant, queue: u64, rtt: Duration) -> bool {
        let Some(w) = self.rise.as_mut().filter(|_| !self.repairing) else {
            return false;
        };
        if now.saturating_duration_since(w.since) > rtt.mul_f64(self.cfg.rise_watch_rtts) {
            self.rise = None;
            return false;
        }
        w.growth(now, queue, rtt, rtt)
            .is_some_and(|g| g >= self.cfg.rise_growth * self.rate as f64)
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

/// DBAT as the lowtide channel's latency controller over TCP.
///
/// ```
/// use lowtide_proto::controller::DbatConfig;
/// use lowtide_proto::sim::{LinkParams, Pair};
/// use lowtide_proto::{Config, ControllerConfig, Event};
/// use std::time::Duration;
/// // A 500 kbit/s bottleneck, 100 ms one way; the sender probes it at session start.
/// let link = LinkParams { rate: 62_500, delay: Duration::from_millis(100), cwnd: 40, mss: 1000, sndbuf: 1 << 20 };
/// let client = Config {
///     controller: ControllerConfig::Dbat(DbatConfig::default()),
///     probe_at_start: true,
///     ..Config::default()
/// };
/// let mut pair = Pair::new(client, Config::default(), link);
/// let t0 = pair.now;
/// pair.drive_until(t0 + Duration::from_secs(2), 100_000);
/// let probe = pair.client.events.iter().find_map(|e| match e {
///     Event::Probed(p) => Some(*p),
///     _ => None,
/// });
/// assert_eq!(probe.expect("probed").bandwidth, Some(62_500));
/// ```
#[derive(Debug, Clone)]
pub struct DbatController {
    dbat: Dbat,
}

impl DbatController {
    /// A checked controller.
    ///
    /// ```
    /// use lowtide_proto::controller::{DbatConfig, DbatController, LatencyController};
    /// let c = DbatController::new(DbatConfig::default())?;
    /// assert_eq!(c.name(), "dbat");
    /// assert!(DbatController::new(DbatConfig { smoothing_rtts: 0.0, ..DbatConfig::default() }).is_err());
    /// # Ok::<(), lowtide_proto::ConfigError>(())
    /// ```
    pub fn new(cfg: DbatConfig) -> Result<Self, ConfigError> {
        Ok(Self {
            dbat: Dbat::new(cfg)?,
        })
    }

    /// The state machine.
    ///
    /// ```
    /// use lowtide_proto::controller::{AppProgress, DbatConfig, DbatController, LatencyController, TcpState};
    /// # let now = std::time::Instant::now();
    /// let mut c = DbatController::new(DbatConfig::default())?;
    /// assert!(c.dbat().queue_average().is_none());
    /// let tcp = TcpState { cwnd: 10, mss: 1000, outq: 3000, ..TcpState::default() };
    /// c.decide(&tcp, &AppProgress { queued: 2000, ..AppProgress::default() }, now);
    /// // DBAT's queue is everything not yet acknowledged: kernel queue + lowtide's queues.
    /// assert_eq!(c.dbat().queue_average(), Some(5000));
    /// # Ok::<(), lowtide_proto::ConfigError>(())
    /// ```
    pub fn dbat(&self) -> &Dbat {
        &self.dbat
    }

    /// TCP's achieved rate: the kernel's delivery rate, else cwnd·mss / srtt.
    fn rate_estimate(tcp: &TcpState) -> u64 {
        if tcp.delivery_rate > 0 {
            tcp.delivery_rate
        } else if !tcp.rtt.is_zero() {
            (f64::from(tcp.cwnd) * f64::from(tcp.mss_or_default()) / tcp.rtt.as_secs_f64()) as u64
        } else {
            0
        }
    }
}

impl LatencyController for DbatController {
    fn name(&self) -> &'static str {
        "dbat"
    }
    fn needs_tcp_state(&self) -> bool {
        true
    }
    fn decide(&mut self, tcp: &TcpState, app: &AppProgress, now: Instant) -> Decision {
        let mss = tcp.mss_or_default();
        let srtt = (!tcp.rtt.is_zero()).then_some(tcp.rtt);
        let rate = Self::rate_estimate(tcp);
        // The paper's send buffer holds everything not yet acknowledged: the kernel's queue,
        // bytes staged for it and lowtide's own queues.
        let queue = u64::from(tcp.outq) + app.staged + app.queued;
        let unsent = u64::from(tcp.notsent) + app.staged + app.queued;
        self.dbat.on_transport_repair(now, tcp.repairing_loss());
        self.dbat
            .on_queue_parts(now, queue, unsent, srtt, rate, mss);
        if tcp.left_slow_start() {
            self.dbat.transport_left_slow_start(now);
        }
        // After slow start the limit is `buffer_headroom` × the threshold, as over TFRC: a
        // limit equal to the threshold would cap the queue at it, so its average could never
        // cross it and the onset never come (the application, writing only when writable,
        // drops frames at the server instead).
        let window = (u64::from(tcp.cwnd.max(1)) + 1) * u64::from(mss);
        let limit = self.dbat.buffer_limit(srtt, rate, mss).max(window);
        super::min_buf::decide_for_limit(limit, tcp, app, now)
    }
    fn on_probe(&mut self, probe: &ProbeResult) {
        self.dbat.on_probe(*probe);
    }
    fn set_stream_rate(&mut self, bytes_per_sec: u64) {
        self.dbat.set_stream_rate(bytes_per_sec);
    }
    fn poll_signal(&mut self) -> Option<CongestionSignal> {
        self.dbat.poll_signal()
    }
    fn queue_level(&self) -> Option<(u64, u64)> {
        let avg = self.dbat.queue_average()?;
        Some((avg, self.dbat.last_threshold()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::CA_RECOVERY;

    fn probe(rtt_ms: u64, bw: u64) -> ProbeResult {
        ProbeResult {
            rtt: Duration::from_millis(rtt_ms),
            dispersion: Duration::from_micros(1),
            second_len: 1448,
            bandwidth: Some(bw),
        }
    }

    #[test]
    fn slow_start_allowance_follows_the_doubling_rule() {
        let mut d = Dbat::new(DbatConfig::default()).unwrap();
        // 640 kbit/s = 80_000 B/s; iw 10·1000 B per 400 ms = 25_000 B/s; ratio 3.2 → 2 RTTs.
        d.set_stream_rate(80_000);
        let rtt = Duration::from_millis(400);
        assert_eq!(d.slow_start_time(1000, rtt), Duration::from_millis(800));
        assert_eq!(d.slow_start_allowance(1000, rtt), 64_000);
        // A rate below the initial window's: no doubling needed, the window itself.
        d.set_stream_rate(10_000);
        assert_eq!(d.slow_start_allowance(1000, rtt), 10_000);
    }

    #[test]
    fn threshold_is_probed_bandwidth_times_weighted_rtt() {
        let mut d = Dbat::new(DbatConfig::default()).unwrap();
        d.on_probe(probe(400, 62_500));
        let srtt = Some(Duration::from_millis(500));
        assert_eq!(d.threshold(srtt, 1, 1448), 31_250);
        // Without a transport RTT the probe's RTT is used.
        assert_eq!(d.threshold(None, 1, 1448), 25_000);
    }

    /// Simulated time: a stream at 40 kB/s into a path that carries 62.5 kB/s, then 25 kB/s.
    #[test]
    fn signal_fires_when_the_smoothed_queue_crosses_and_clears_below() {
        let mut d = Dbat::new(DbatConfig::default()).unwrap();
        d.set_stream_rate(40_000);
        d.on_probe(probe(400, 62_500));
        let t0 = Instant::now();
        let rtt = Some(Duration::from_millis(400));
        let mut queue = 0.0f64;
        let mut signals = Vec::new();
        let step = Duration::from_millis(10);
        for i in 1..=3000u32 {
            let now = t0 + step * i;
            let secs = f64::from(i) * 0.01;
            // slow start for 1 s, then 62.5 kB/s until 10 s, 25 kB/s until 20 s, then 62.5.
            let drain = match secs {
                s if s < 1.0 => 20_000.0,
                s if s < 10.0 => 62_500.0,
                s if s < 20.0 => 25_000.0,
                _ => 62_500.0,
            };
            // 400 B per 10 ms in; what the path drains out, down to what is in flight.
            queue = (queue + 400.0 - drain * 0.01).max(8_000.0f64.min(queue + 400.0));
            d.on_queue(now, queue as u64, rtt, 40_000, 1448);
            while let Some(s) = d.poll_signal() {
                signals.push((secs, s));
            }
        }
        assert!(!d.in_slow_start());
        let (&(t_off, off), onsets) = signals.split_last().unwrap();
        let (t_on, on) = onsets[0];
        assert!(on.onset && on.threshold == 25_000);
        // the queue grows 15 kB/s from 8 kB past 10 s and crosses 25 kB near 11.1 s; the
        // average lags a ramp by τ = 2 RTTs = 0.8 s.
        assert!((11.1..12.5).contains(&t_on), "onset at {t_on}");
        // no answer from the application: the onset repeats as the average doubles
        assert!(
            onsets.iter().all(|(t, s)| s.onset && *t < 20.0),
            "{signals:?}"
        );
        for w in onsets.windows(2) {
            assert!(w[1].1.queue >= 2 * w[0].1.queue, "{signals:?}");
        }
        assert!(!off.onset && off.queue < 12_500);
        assert!(t_off > 20.0, "cleared at {t_off}");
    }

    #[test]
    fn after_slow_start_the_threshold_follows_the_streams_share_not_the_bottleneck() {
        let mut d = Dbat::new(DbatConfig::default()).unwrap();
        d.set_stream_rate(40_000);
        d.on_probe(probe(400, 62_500));
        let t0 = Instant::now();
        let rtt = Some(Duration::from_millis(400));
        // during slow start the probe's bottleneck bandwidth counts, whatever the rate
        assert_eq!(d.threshold(rtt, 6_000, 1448), 25_000);
        d.on_queue(t0, 1000, rtt, 40_000, 1448);
        d.on_queue(t0 + Duration::from_millis(500), 1000, rtt, 40_000, 1448);
        assert!(!d.in_slow_start());
        // a bulk flow holds the stream to 6 kB/s: twice that × 400 ms, not the link's 25 kB
        assert_eq!(d.threshold(rtt, 6_000, 1448), 4_800);
        // a share above half the bottleneck leaves the probe's bound
        assert_eq!(d.threshold(rtt, 40_000, 1448), 25_000);
        // a transport faster than the stream: the probe, within twice each rate
        assert_eq!(d.threshold(rtt, 50_000, 1448), 25_000);
        d.set_stream_rate(10_000);
        assert_eq!(d.threshold(rtt, 50_000, 1448), 25_000);
        // no rate estimate yet: the probe
        assert_eq!(d.threshold(rtt, 0, 1448), 25_000);
    }

    #[test]
    fn a_probe_below_what_the_transport_carries_does_not_pin_the_threshold_at_one_mss() {
        // The lab's DBAT TCP row: the packet pair said 1532 B/s (bulk-flow packets between
        // its two), the stream is 10 kB/s (80 kbit/s) and TCP delivers it whole.
        let mut d = Dbat::new(DbatConfig::default()).unwrap();
        d.set_stream_rate(10_000);
        d.on_probe(probe(800, 1_532));
        let t0 = Instant::now();
        let rtt = Some(Duration::from_millis(800));
        let ms = Duration::from_millis;
        d.on_queue(t0, 1_000, rtt, 37_500, 1448);
        d.on_queue(t0 + ms(900), 1_000, rtt, 37_500, 1448);
        assert!(!d.in_slow_start());
        // twice the stream's bytes in flight (10 kB/s × 0.8 s), not one MSS
        assert_eq!(d.threshold(rtt, 37_500, 1448), 16_000);
        assert_eq!(d.buffer_limit(rtt, 37_500, 1448), 32_000);
        // the queue the lab's run held (in flight plus a frame or two, 4-9 kB) is no onset
        for i in 2..100u32 {
            let q = if i % 2 == 0 { 4_000 } else { 9_000 };
            d.on_queue(t0 + ms(900) + ms(100) * i, q, rtt, 37_500, 1448);
        }
        assert_eq!(d.poll_signal(), None);
        // a transport that carries less than the stream: twice what it carries
        assert_eq!(d.threshold(rtt, 6_000, 1448), 9_600);
    }

    #[test]
    fn onset_repeats_while_the_queue_keeps_doubling_and_clears_once() {
        let mut d = Dbat::new(DbatConfig::default()).unwrap();
        d.set_stream_rate(40_000);
        d.on_probe(probe(400, 62_500));
        let t0 = Instant::now();
        let rtt = Some(Duration::from_millis(400));
        let at = |i: u32| t0 + Duration::from_millis(100) * i;
        d.on_queue(at(0), 1000, rtt, 40_000, 1448);
        d.on_queue(at(5), 1000, rtt, 40_000, 1448);
        assert!(!d.in_slow_start());
        // the queue grows 2 kB per 100 ms for 20 s: over 25 kB, then doubling past each onset
        let mut onsets = vec![];
        for i in 6..206u32 {
            d.on_queue(at(i), u64::from(i) * 2000, rtt, 40_000, 1448);
            while let Some(s) = d.poll_signal() {
                assert!(s.onset, "{s:?}");
                onsets.push(s.queue);
            }
        }
        assert!(onsets.len() >= 3, "{onsets:?}");
        assert!(onsets[0] > 25_000 && onsets[0] < 2 * 25_000, "{onsets:?}");
        for w in onsets.windows(2) {
            assert!(w[1] >= 2 * w[0], "{onsets:?}");
        }
        // a queue that stays high after the last onset does not repeat it
        let high = onsets.last().copied().unwrap();
        for i in 206..300u32 {
            d.on_queue(at(i), high, rtt, 40_000, 1448);
        }
        assert_eq!(d.poll_signal(), None);
        // drained: one clear
        for i in 300..400u32 {
            d.on_queue(at(i), 0, rtt, 40_000, 1448);
        }
        assert_eq!(d.poll_signal().map(|s| s.onset), Some(false));
        assert_eq!(d.poll_signal(), None);
    }

    #[test]
    fn slow_start_backlog_is_not_congestion() {
        let mut d = Dbat::new(DbatConfig::default()).unwrap();
        d.set_stream_rate(40_000);
        d.on_probe(probe(400, 62_500));
        let t0 = Instant::now();
        let rtt = Some(Duration::from_millis(400));
        // a 60 kB backlog during the first second, then it drains to 10 kB
        for i in 1..=100u32 {
            let q = if i < 50 { 60_000 } else { 10_000 };
            d.on_queue(t0 + Duration::from_millis(20) * i, q, rtt, 40_000, 1448);
        }
        assert!(!d.in_slow_start());
        assert_eq!(d.poll_signal(), None);
    }

    #[test]
    fn controller_limits_the_kernel_to_the_phase_limit_but_never_below_a_window() {
        let mut c = DbatController::new(DbatConfig::default()).unwrap();
        c.on_probe(&probe(400, 62_500));
        let tcp = TcpState {
            cwnd: 4,
            mss: 1000,
            rtt: Duration::from_millis(400),
            ..Default::default()
        };
        let now = Instant::now();
        let d = c.decide(&tcp, &AppProgress::default(), now);
        // slow start: max(allowance, 2 × 25 kB threshold) = 50 kB
        assert_eq!(d.limit, 50_000);
        // steady with a tiny probe and a transport that delivers almost nothing: the window
        // floor (cwnd + 1 segments)
        let tcp = TcpState {
            delivery_rate: 100,
            ..tcp
        };
        let mut c = DbatController::new(DbatConfig::default()).unwrap();
        c.on_probe(&probe(400, 100));
        let queued = AppProgress {
            queued: 1,
            ..Default::default()
        };
        c.decide(&tcp, &queued, now);
        let d = c.decide(&tcp, &AppProgress::default(), now + Duration::from_secs(5));
        assert!(!c.dbat().in_slow_start());
        assert_eq!(d.limit, 5_000);
    }

    #[test]
    fn tcp_leaving_slow_start_ends_dbats_slow_start() {
        let mut c = DbatController::new(DbatConfig::default()).unwrap();
        c.on_probe(&probe(400, 62_500));
        let mut tcp = TcpState {
            cwnd: 4,
            mss: 1000,
            rtt: Duration::from_millis(400),
            delivery_rate: 5_000,
            ssthresh: super::super::INITIAL_SSTHRESH,
            ..Default::default()
        };
        let queued = AppProgress {
            queued: 30_000,
            ..Default::default()
        };
        let t0 = Instant::now();
        c.decide(&tcp, &queued, t0);
        c.decide(&tcp, &queued, t0 + Duration::from_millis(500));
        assert!(
            c.dbat().in_slow_start(),
            "far behind the stream, still ramping"
        );
        tcp.ssthresh = 3; // a loss
        c.decide(&tcp, &queued, t0 + Duration::from_millis(600));
        assert!(!c.dbat().in_slow_start());
        // at 5 kB/s, far below the stream's 40 kB/s, with 30 kB queued (threshold: twice the
        // achieved rate × 400 ms = 4 kB): the onset at once, not after the average climbs
        let s = c.poll_signal().expect("an onset as slow start ends");
        assert_eq!((s.onset, s.queue, s.threshold), (true, 30_000, 4_000));
        assert_eq!(c.poll_signal(), None);
    }

    /// Leaving slow start having caught up, behind with less than the threshold queued, or by
    /// DBAT's time limit, is no onset.
    #[test]
    fn leaving_slow_start_without_a_standing_backlog_is_no_onset() {
        let t0 = Instant::now();
        let rtt = Some(Duration::from_millis(400));
        for (queue, rate) in [(30_000, 40_000), (3_000, 5_000)] {
            let mut d = Dbat::new(DbatConfig::default()).unwrap();
            d.on_probe(probe(400, 62_500));
            d.on_queue(t0, queue, rtt, rate, 1000);
            d.transport_left_slow_start(t0 + Duration::from_millis(100));
            assert!(!d.in_slow_start());
            assert_eq!(d.poll_signal(), None, "{queue} B at {rate} B/s");
            assert_eq!(d.queue_average(), Some(0));
        }
        // DBAT's own time limit (1 doubling + 2 RTTs = 1.2 s) while far behind: the transport
        // may still be ramping, so no onset either
        let mut d = Dbat::new(DbatConfig::default()).unwrap();
        d.on_probe(probe(400, 62_500));
        d.on_queue(t0, 30_000, rtt, 5_000, 1000);
        d.on_queue(t0 + Duration::from_millis(1300), 30_000, rtt, 5_000, 1000);
        assert!(!d.in_slow_start());
        assert_eq!(d.poll_signal(), None);
    }

    #[test]
    fn config_is_checked_with_field_names() {
        let e = Dbat::new(DbatConfig {
            smoothing_rtts: 0.0,
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(e.field, "controller.dbat.smoothing_rtts");
        let e = Dbat::new(DbatConfig {
            buffer_headroom: 0.5,
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(e.field, "controller.dbat.buffer_headroom");
        for (cfg, field) in [
            (
                DbatConfig {
                    rise_growth: 0.0,
                    ..Default::default()
                },
                "controller.dbat.rise_growth",
            ),
            (
                DbatConfig {
                    rise_watch_rtts: f64::NAN,
                    ..Default::default()
                },
                "controller.dbat.rise_watch_rtts",
            ),
        ] {
            assert_eq!(Dbat::new(cfg).unwrap_err().field, field);
        }
    }

    /// The lab's path in simulated time (0.9 s RTT, a 61 kB/s packet pair): a stream of
    /// 1200-byte frames every 40 ms at 15 kB/s (120 kbit/s) that the path carries, steady, then
    /// an up-switch at 20 s to 30 kB/s (240 kbit/s) over a path that carries `carried` B/s
    /// from then on; the application goes back to 15 kB/s on an onset. Returns the signals
    /// (seconds after the switch, signal) and the DBAT state.
    fn rise(carried: f64) -> (Vec<(f64, CongestionSignal)>, Dbat) {
        let mut d = Dbat::new(DbatConfig::default()).unwrap();
        d.set_stream_rate(15_000);
        d.on_probe(probe(900, 61_000));
        let t0 = Instant::now();
        let rtt = Some(Duration::from_millis(900));
        let (mut queue, mut rate, mut signals) = (0.0f64, 15_000.0f64, vec![]);
        for i in 0..6000u32 {
            let (now, secs) = (t0 + Duration::from_millis(10) * i, f64::from(i) * 0.01);
            if i == 2000 {
                rate = 30_000.0;
                d.set_stream_rate(30_000);
            }
            if i % 4 == 0 {
                queue += rate * 0.04; // one frame
            }
            let path = if i < 2000 { 25_000.0 } else { carried };
            let sent = queue.min(path * 0.01);
            queue -= sent;
            d.on_queue(now, queue as u64, rtt, (path.min(rate)) as u64, 1200);
            while let Some(s) = d.poll_signal() {
                if s.onset {
                    rate = 15_000.0;
                    d.set_stream_rate(15_000);
                }
                signals.push((secs - 20.0, s));
            }
        }
        (signals, d)
    }

    /// A rung the path cannot carry (25 of 30 kB/s): the queue grows 5 kB/s and the onset
    /// comes two RTTs after the switch (one to let the transport follow, one to measure),
    /// with about 9 kB queued, where the average would cross the 45 kB threshold only after
    /// nine seconds; back at 15 kB/s the backlog drains and the signal clears.
    #[test]
    fn an_up_switch_the_path_cannot_carry_is_signalled_within_two_rtts() {
        let (signals, d) = rise(25_000.0);
        assert!(!d.in_slow_start());
        let [(t_on, on), (t_off, off)] = signals[..] else {
            panic!("{signals:?}")
        };
        assert!(on.onset && !off.onset, "{signals:?}");
        assert!(
            (1.8..2.0).contains(&t_on),
            "onset {t_on} s after the switch"
        );
        assert!((7_000..11_000).contains(&on.queue), "{on:?}");
        assert_eq!(on.threshold, 45_000);
        assert!(
            (2.5..6.0).contains(&t_off),
            "cleared {t_off} s after the switch"
        );
        assert_eq!(d.rise_onsets, 1);
    }

    /// A rung the path carries (40 kB/s), or carries all but 5 % of (28.5 kB/s, under the 10 %
    /// tolerance): no onset from the watch; the frames' sawtooth is not growth.
    #[test]
    fn an_up_switch_the_path_carries_is_no_onset() {
        let (signals, d) = rise(40_000.0);
        assert_eq!((signals.len(), d.rise_onsets), (0, 0), "{signals:?}");
        let (signals, d) = rise(28_500.0);
        // 1.5 kB/s of growth: only the average's crossing of the 51 kB threshold, 35 s later
        assert_eq!(d.rise_onsets, 0);
        assert!(
            signals.iter().all(|(t, s)| *t > 30.0 && s.queue > 51_000),
            "{signals:?}"
        );
    }

    /// Over TCP the queue holds the bytes in flight, which grow with the rate: after 10 → 15
    /// kB/s at a 0.7 s RTT they climb 3.5 kB over two seconds as the window grows (1.75 kB/s,
    /// above 10 % of the new rate) while nothing waits unsent. The watch reads the unsent part:
    /// no onset. Fed the whole queue, it would have fired.
    #[test]
    fn bytes_in_flight_growing_with_an_up_switch_are_no_onset() {
        let run = |whole: bool| {
            let mut d = Dbat::new(DbatConfig::default()).unwrap();
            d.set_stream_rate(10_000);
            d.on_probe(probe(700, 60_000));
            let t0 = Instant::now();
            let rtt = Some(Duration::from_millis(700));
            for i in 0..1000u32 {
                let now = t0 + Duration::from_millis(10) * i;
                if i == 500 {
                    d.set_stream_rate(15_000);
                }
                let ramp = (f64::from(i.saturating_sub(500)) / 200.0).min(1.0);
                let in_flight = (7_000.0 + 3_500.0 * ramp) as u64;
                let unsent = if whole { in_flight } else { 0 };
                d.on_queue_parts(now, in_flight, unsent, rtt, 15_000, 1448);
            }
            d.rise_onsets
        };
        assert_eq!(run(false), 0);
        assert_eq!(run(true), 1);
    }

    /// The lab's DBAT TCP row (`tcpinfo.csv` of a full run): 0.78 s RTT, 80 → 120 kbit/s
    /// (10 → 15 kB/s) at 20 s, and 1.5 s later a segment lost at the bulk flow's full queue:
    /// 0.8 s of fast-retransmit recovery in which the cut window carries 8 kB/s, so the unsent
    /// queue grows 7 kB/s. After it the path carries `carried` B/s. `tell`: the transport's
    /// repair is reported (`on_transport_repair`). Returns the onsets (seconds after the
    /// switch) and the DBAT state.
    fn rise_with_repair(carried: f64, tell: bool) -> (Vec<f64>, Dbat) {
        let mut d = Dbat::new(DbatConfig::default()).unwrap();
        d.set_stream_rate(10_000);
        d.on_probe(probe(780, 61_000));
        let t0 = Instant::now();
        let rtt = Some(Duration::from_millis(780));
        let (mut unsent, mut rate, mut onsets) = (0.0f64, 10_000.0f64, vec![]);
        for i in 0..4000u32 {
            let (now, secs) = (t0 + Duration::from_millis(10) * i, f64::from(i) * 0.01);
            if i == 2000 {
                rate = 15_000.0;
                d.set_stream_rate(15_000);
            }
            if i % 4 == 0 {
                unsent += rate * 0.04; // one frame
            }
            let repairing = (2150..2230).contains(&i);
            let path = match i {
                _ if repairing => 8_000.0,
                0..2000 => 30_000.0,
                _ => carried,
            };
            unsent -= unsent.min(path * 0.01);
            let in_flight = rate.min(path) * 0.78;
            d.on_transport_repair(now, tell && repairing);
            let q = (in_flight + unsent) as u64;
            d.on_queue_parts(now, q, unsent as u64, rtt, rate.min(path) as u64, 1448);
            while let Some(s) = d.poll_signal() {
                if s.onset {
                    onsets.push(secs - 20.0);
                    rate = 10_000.0;
                    d.set_stream_rate(10_000);
                }
            }
        }
        (onsets, d)
    }

    /// A loss repaired 1.5 s after an up-switch the path carries is no onset once the repair
    /// is reported (unreported, the watch takes the rung back down: the lab's second
    /// down-switch); a rung the path cannot carry (12 of 15 kB/s) is still signalled, two RTTs
    /// after the repair ended.
    #[test]
    fn a_loss_repair_after_an_up_switch_is_not_the_path_failing_the_rate() {
        let (onsets, d) = rise_with_repair(30_000.0, false);
        assert_eq!((d.rise_onsets, onsets.len()), (1, 1), "{onsets:?}");
        assert!((1.5..2.4).contains(&onsets[0]), "{onsets:?}");
        let (onsets, d) = rise_with_repair(30_000.0, true);
        assert_eq!((d.rise_onsets, onsets.len()), (0, 0), "{onsets:?}");
        assert_eq!(d.rise_restarts_after_repair, 1);
        let (onsets, d) = rise_with_repair(12_000.0, true);
        assert_eq!((d.rise_onsets, d.rise_restarts_after_repair), (1, 1));
        // the repair's last sample is 2.29 s after the switch; grace and window are an RTT each
        assert!((3.8..4.3).contains(&onsets[0]), "{onsets:?}");
    }

    /// The controller reads the repair from `tcpi_ca_state`: Recovery holds the watch.
    #[test]
    fn the_controller_reports_tcps_loss_repair_to_dbat() {
        let mut c = DbatController::new(DbatConfig::default()).unwrap();
        c.dbat.set_stream_rate(10_000);
        let t0 = Instant::now();
        let tcp = TcpState {
            cwnd: 20,
            mss: 1448,
            rtt: Duration::from_millis(780),
            delivery_rate: 10_000,
            ..TcpState::default()
        };
        // leave slow start (its time limit), go up, then a repair starts
        c.decide(&TcpState { outq: 100, ..tcp }, &AppProgress::default(), t0);
        c.decide(&tcp, &AppProgress::default(), t0 + Duration::from_secs(10));
        assert!(!c.dbat.in_slow_start());
        c.set_stream_rate(15_000);
        c.decide(&tcp, &AppProgress::default(), t0 + Duration::from_secs(11));
        let repair = TcpState {
            ca_state: CA_RECOVERY,
            ..tcp
        };
        c.decide(
            &repair,
            &AppProgress::default(),
            t0 + Duration::from_secs(12),
        );
        c.decide(
            &repair,
            &AppProgress::default(),
            t0 + Duration::from_secs(13),
        );
        assert_eq!(c.dbat.rise_restarts_after_repair, 1);
    }
}
