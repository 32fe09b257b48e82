//! DBAT's parameters and their checks.

use std::time::Duration;

use serde::{Deserialize, Serialize};

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
