//! Rate feedback: what the path drains, said to the application (a `lowtide-rate` element
//! message) and, when asked for, to the encoder (its bit-rate property).
//!
//! The sink samples, every `interval`, the bytes lowtide wrote to the kernel, the bytes its
//! queue holds, the units dropped by deadline, and the kernel's TCP state. The law is ours
//! (no paper gives one for this signal); it is an AIMD on lowtide's own queue, the signal
//! lowtide exists to keep small:
//!
//! - **written rate** `W`: bytes written to the kernel per second over the last interval.
//!   With a latency controller (MinBuf) lowtide writes no faster than the path takes, so
//!   `W` is what the path drained while a queue was waiting.
//! - **path delay** `D = srtt − min_rtt` (the kernel's): the queue the stream's own packets
//!   wait in on the path. With a latency controller lowtide's queue stays small while a
//!   loss-based congestion control fills the bottleneck's queue, so `D` is where a bit rate
//!   above the path's shows first.
//! - **congested** when lowtide's queue would take more than a quarter of the latency
//!   budget to drain at `W`, or `D` is over a quarter of the budget, or a unit expired in
//!   lowtide's queue or was dropped as queue-full in the interval: the encoder makes more
//!   than the path carries. A unit already past its deadline when it reached the sink (an
//!   encoder slower than real time) does not count: a lower bit rate would not bring it in
//!   time. The target goes to `min(target, max(0.85·W, target / 2))`: at most halved per
//!   interval, because in the interval a path narrows the kernel's queue drains slowly and
//!   `W` falls far below what the path still carries (measured on the live-video scenario's
//!   6 → 1.5 Mbit/s step: with `0.85·W` alone the target fell to the 0.1 Mbit/s floor and
//!   took 15 s to climb back; with the kernel's delivery rate in place of `W` it stayed above
//!   the path for 3 s and frames waited 2 s).
//! - **clear** when the queue is under an eighth of the budget, `D` under an eighth of it
//!   and nothing expired: the target grows by 10 % per interval (from 1.5 to 4 Mbit/s in
//!   about 5 s at 0.5 s), never above the encoder's bit rate when feedback started (the
//!   user's choice is the ceiling).
//! - in between the target holds.
//!
//! The **estimate** posted on the bus is `W` while congested (what the path gives) and
//! otherwise the larger of `W` and the kernel's delivery rate (`tcpi_delivery_rate`, a
//! lower bound while the sender is application-limited). A new target is reported only
//! when it differs from the last by 3 % or more, so the encoder is not reconfigured for
//! noise.
//!
//! Where this is weaker than a bandwidth estimator (GCC, BBR's model): it learns the
//! capacity only when a queue forms, and probes upward blindly; the latency controller keeps
//! that queue in lowtide, where units can still be dropped, so a probe too high costs
//! dropped frames (and keyframe requests), not latency.

use std::time::{Duration, Instant};

use lowtide::TcpState;

/// The law's constants.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateConfig {
    /// The stream's latency budget (the sink's `latency-ms`).
    pub budget: Duration,
    /// The target on a congested interval: this fraction of the written rate.
    pub decrease_to: f64,
    /// The target on a clear interval: this multiple of the last target.
    pub increase_by: f64,
    /// Least relative change reported as a new target.
    pub min_change: f64,
    /// Lowest target, bit/s.
    pub floor_bps: u64,
}

impl Default for RateConfig {
    fn default() -> Self {
        Self {
            budget: Duration::from_millis(200),
            decrease_to: 0.85,
            increase_by: 1.10,
            min_change: 0.03,
            floor_bps: 100_000,
        }
    }
}

/// One sample of the sink's counters (cumulative ones since the stream started).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateSample {
    pub now: Instant,
    /// Bytes lowtide wrote to the kernel so far.
    pub bytes_written: u64,
    /// Bytes lowtide's queue holds now.
    pub queued_bytes: u64,
    /// Units dropped so far because they expired in lowtide's queue or the queue was full
    /// (not those already past their deadline when they reached the sink: an encoder slower
    /// than real time is not the path's doing).
    pub deadline_drops: u64,
    pub tcp: TcpState,
}

/// What one interval showed (the fields of the `lowtide-rate` message).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateReport {
    /// The rate estimate, bit/s (see the module doc).
    pub estimate_bps: u64,
    /// Bytes written to the kernel per second over the interval, as bit/s.
    pub written_bps: u64,
    /// The kernel's delivery rate, bit/s (0 before a sample).
    pub delivery_rate_bps: u64,
    /// Lowtide's queue, bytes.
    pub queued_bytes: u64,
    /// The queue's drain time at the written rate.
    pub queue_delay: Duration,
    /// Smoothed RTT from the kernel.
    pub rtt: Duration,
    pub congested: bool,
    /// The encoder's new bit rate, bit/s, if it should change.
    pub target_bps: Option<u64>,
}

/// The law's state (see the module doc).
#[derive(Debug, Clone)]
pub struct RateFeedback {
    cfg: RateConfig,
    last: Option<RateSample>,
    /// The current target and the ceiling, once the encoder's rate is known.
    target: Option<(u64, u64)>,
}

impl RateFeedback {
    pub fn new(cfg: RateConfig) -> Self {
        Self {
            cfg,
            last: None,
            target: None,
        }
    }

    /// The encoder's bit rate when feedback started: the first target and the ceiling.
    pub fn set_encoder_rate(&mut self, bps: u64) {
        let bps = bps.max(self.cfg.floor_bps);
        self.target = Some((bps, bps));
    }

    /// The current target, bit/s.
    pub fn target(&self) -> Option<u64> {
        self.target.map(|t| t.0)
    }

    /// Takes a sample; from the second one on, reports the interval since the last.
    pub fn on_sample(&mut self, s: RateSample) -> Option<RateReport> {
        let last = self.last.replace(s)?;
        let dt = s.now.saturating_duration_since(last.now).as_secs_f64();
        if dt <= 0.0 {
            return None;
        }
        let written = s.bytes_written.saturating_sub(last.bytes_written);
        let written_bps = (written as f64 * 8.0 / dt) as u64;
        let delivery_rate_bps = s.tcp.delivery_rate.saturating_mul(8);
        let queue_delay = if s.queued_bytes == 0 {
            Duration::ZERO
        } else if written_bps == 0 {
            Duration::MAX
        } else {
            Duration::from_secs_f64(s.queued_bytes as f64 * 8.0 / written_bps as f64)
        };
        let dropped = s.deadline_drops > last.deadline_drops;
        let path_delay = s.tcp.rtt.saturating_sub(s.tcp.min_rtt);
        let congested =
            dropped || queue_delay > self.cfg.budget / 4 || path_delay > self.cfg.budget / 4;
        let clear =
            !dropped && queue_delay < self.cfg.budget / 8 && path_delay < self.cfg.budget / 8;
        let estimate_bps = if congested {
            written_bps
        } else {
            written_bps.max(delivery_rate_bps)
        };
        let mut target_bps = None;
        if let Some((current, ceiling)) = self.target {
            let next = if congested {
                let cut = (written_bps as f64 * self.cfg.decrease_to) as u64;
                current.min(cut.max(current / 2))
            } else if clear {
                ceiling.min((current as f64 * self.cfg.increase_by) as u64)
            } else {
                current
            };
            let next = next.max(self.cfg.floor_bps);
            let change = (next as f64 - current as f64).abs() / current.max(1) as f64;
            if change >= self.cfg.min_change || (next != current && next == ceiling) {
                self.target = Some((next, ceiling));
                target_bps = Some(next);
            }
        }
        Some(RateReport {
            estimate_bps,
            written_bps,
            delivery_rate_bps,
            queued_bytes: s.queued_bytes,
            queue_delay,
            rtt: s.tcp.rtt,
            congested,
            target_bps,
        })
    }
}

/// How an encoder's bit-rate property counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateUnit {
    KbitPerSec,
    BitPerSec,
}

/// The encoders whose bit rate the sink sets (`rate-feedback=true`): factory name, property,
/// unit (as `gst-inspect-1.0` documents them for GStreamer 1.22).
pub const ENCODERS: &[(&str, &str, RateUnit)] = &[
    ("x264enc", "bitrate", RateUnit::KbitPerSec),
    ("x265enc", "bitrate", RateUnit::KbitPerSec),
    ("openh264enc", "bitrate", RateUnit::BitPerSec),
    ("vp8enc", "target-bitrate", RateUnit::BitPerSec),
    ("vp9enc", "target-bitrate", RateUnit::BitPerSec),
    ("av1enc", "target-bitrate", RateUnit::KbitPerSec),
];

/// The property and unit of encoder factory `name`, if the sink knows it.
pub fn encoder_property(name: &str) -> Option<(&'static str, RateUnit)> {
    ENCODERS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|&(_, p, u)| (p, u))
}

impl RateUnit {
    /// `bps` in this unit.
    pub fn from_bps(self, bps: u64) -> u64 {
        match self {
            RateUnit::KbitPerSec => bps / 1000,
            RateUnit::BitPerSec => bps,
        }
    }

    /// A value in this unit, in bit/s.
    pub fn to_bps(self, v: u64) -> u64 {
        match self {
            RateUnit::KbitPerSec => v.saturating_mul(1000),
            RateUnit::BitPerSec => v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn sample(t0: Instant, ms: u64, written: u64, queued: u64, drops: u64) -> RateSample {
        RateSample {
            now: t0 + MS * ms as u32,
            bytes_written: written,
            queued_bytes: queued,
            deadline_drops: drops,
            tcp: TcpState::default(),
        }
    }

    #[test]
    fn a_queue_cuts_the_target_to_the_drained_rate_then_it_climbs_back() {
        let t0 = Instant::now();
        let mut f = RateFeedback::new(RateConfig::default());
        f.set_encoder_rate(4_000_000);
        assert!(f.on_sample(sample(t0, 0, 0, 0, 0)).is_none());
        // 500 ms, 93 750 bytes written: 1.5 Mbit/s, and 100 kB queued (533 ms to drain).
        let r = f.on_sample(sample(t0, 500, 93_750, 100_000, 0)).unwrap();
        assert_eq!(r.written_bps, 1_500_000);
        assert!(r.congested);
        assert_eq!(r.estimate_bps, 1_500_000);
        assert_eq!(
            r.target_bps,
            Some(2_000_000),
            "at most halved in one interval"
        );
        // Still draining: down to 0.85 W.
        let r = f.on_sample(sample(t0, 1000, 187_500, 60_000, 0)).unwrap();
        assert_eq!(r.target_bps, Some(1_275_000));
        // Draining still: the target holds (already under 0.85 W).
        let r = f.on_sample(sample(t0, 1500, 281_250, 60_000, 0)).unwrap();
        assert_eq!(r.target_bps, None);
        // Clear: up 10 % per interval, never above the ceiling.
        let mut t = 1500;
        let mut last = 1_275_000;
        for _ in 0..20 {
            t += 500;
            if let Some(x) = f
                .on_sample(sample(t0, t, 187_500, 0, 0))
                .unwrap()
                .target_bps
            {
                assert!(x > last && x <= 4_000_000);
                last = x;
            }
        }
        assert_eq!(f.target(), Some(4_000_000));
    }

    #[test]
    fn an_expired_unit_is_congestion_and_the_floor_holds() {
        let t0 = Instant::now();
        let mut f = RateFeedback::new(RateConfig::default());
        f.set_encoder_rate(1_000_000);
        f.on_sample(sample(t0, 0, 0, 0, 0));
        let mut t = 0;
        for want in [500_000, 250_000, 125_000, 100_000] {
            t += 500;
            let r = f.on_sample(sample(t0, t, t, 0, t)).unwrap();
            assert!(r.congested);
            assert_eq!(
                r.target_bps,
                Some(want),
                "16 kbit/s written: halved, then floored"
            );
        }
        // Without an encoder rate, the law only reports.
        let mut g = RateFeedback::new(RateConfig::default());
        g.on_sample(sample(t0, 0, 0, 0, 0));
        assert_eq!(
            g.on_sample(sample(t0, 500, 1_000, 0, 1))
                .unwrap()
                .target_bps,
            None
        );
    }

    #[test]
    fn a_queue_on_the_path_is_congestion() {
        let t0 = Instant::now();
        let mut f = RateFeedback::new(RateConfig::default());
        f.set_encoder_rate(4_000_000);
        f.on_sample(sample(t0, 0, 0, 0, 0));
        let path = |mut s: RateSample, queue_ms: u64| {
            s.tcp.min_rtt = Duration::from_millis(100);
            s.tcp.rtt = Duration::from_millis(100 + queue_ms);
            s
        };
        // lowtide's queue is empty, 3.8 Mbit/s went into the kernel, but srtt is 120 ms over
        // min_rtt: the bottleneck's queue grows.
        let r = f
            .on_sample(path(sample(t0, 500, 237_500, 0, 0), 120))
            .unwrap();
        assert!(r.congested, "{r:?}");
        assert_eq!(r.target_bps, Some(3_230_000), "0.85 of the written rate");
        // The path narrowed: only 0.3 Mbit/s went into the kernel.
        let r = f
            .on_sample(path(sample(t0, 1000, 256_250, 0, 0), 120))
            .unwrap();
        assert_eq!(
            r.target_bps,
            Some(1_615_000),
            "halved, not cut to 0.85 × 0.3 Mbit/s"
        );
        // A path delay between an eighth and a quarter of the budget holds the target.
        let r = f
            .on_sample(path(sample(t0, 1500, 350_000, 0, 0), 35))
            .unwrap();
        assert!(!r.congested);
        assert_eq!(r.target_bps, None);
    }

    #[test]
    fn encoder_units() {
        let (p, u) = encoder_property("x264enc").unwrap();
        assert_eq!((p, u.from_bps(2_500_000)), ("bitrate", 2500));
        let (p, u) = encoder_property("vp8enc").unwrap();
        assert_eq!((p, u.from_bps(2_500_000)), ("target-bitrate", 2_500_000));
        assert_eq!(RateUnit::KbitPerSec.to_bps(2048), 2_048_000);
        assert!(encoder_property("h264parse").is_none());
    }
}
