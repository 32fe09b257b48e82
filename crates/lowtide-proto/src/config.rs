//! Typed, validated configuration. Every limit is checked when a [`Connection`] is built
//! ([`Config::validate`]), and the error names the field and its allowed range.
//!
//! ```
//! use lowtide_proto::{Config, ControllerConfig, Fairness};
//! // From a configuration file (TOML here); unknown fields are refused.
//! let cfg: Config = toml::from_str(
//!     "fairness = \"quality\"\ncontroller = { min_buf = { a = 1, b = 3 } }",
//! ).unwrap();
//! assert_eq!(cfg.fairness, Fairness::Quality);
//! assert_eq!(cfg.controller, ControllerConfig::MinBuf { a: 1, b: 3 });
//! cfg.validate().unwrap();
//! ```
//!
//! [`Connection`]: crate::Connection

use serde::{Deserialize, Serialize};

use crate::controller::ControllerConfig;

/// How a stream's virtual time grows when it sends (Paceline, "Stream Fairness").
///
/// ```
/// use lowtide_proto::{Config, Fairness, Message};
/// // Quality fairness: each stream's share is counted in the costs its messages carry.
/// let cfg = Config { fairness: Fairness::Quality, ..Config::default() };
/// let frame = Message::new(vec![0u8; 4000]).cost(1.0); // one frame, whatever its size
/// # let _ = (cfg, frame);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fairness {
    /// Virtual time grows with bytes sent (resource fairness).
    #[default]
    Resource,
    /// Virtual time grows with the message's cost, spread over its bytes (quality fairness).
    Quality,
}

/// Channel configuration (both directions).
///
/// ```
/// use lowtide_proto::{Config, ControllerConfig};
/// let cfg = Config {
///     controller: ControllerConfig::MinBuf { a: 1, b: 3 },
///     max_message_size: 1 << 20,
///     ..Config::default()
/// };
/// cfg.validate()?;
/// # Ok::<(), lowtide_proto::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Largest message accepted, in either direction (bytes).
    pub max_message_size: u64,
    /// Most concurrent streams accepted from the peer (and opened locally).
    pub max_streams: u32,
    /// Receive memory per channel: partial reassemblies plus complete messages not yet read.
    pub max_reassembly_bytes: u64,
    /// Reads whose buffers messages smaller than a quarter of their read's buffer may pin
    /// (delivered as slices of the read, without a copy), all such messages of the channel
    /// together, whether queued or taken and kept by the application; beyond it they are
    /// copied. A message of at least a quarter of the buffer its read lies in is always a
    /// slice (it pins at most four times its size). 0: every smaller message is copied.
    pub max_pinning_reads: u64,
    /// Chunk payload as a fraction of the MSS.
    pub chunk_fraction: f64,
    /// Largest chunk payload accepted from the peer; also caps our own chunks.
    pub max_chunk_len: u64,
    /// Most bytes handed to one write (one `writev`).
    pub max_batch: u64,
    /// Most bytes queued in all send queues; `send` fails beyond it.
    pub max_queued_bytes: u64,
    /// Resource or quality fairness between streams.
    pub fairness: Fairness,
    /// The receiver sends a P-ACK once this many new bytes arrived ...
    pub pack_every_bytes: u64,
    /// ... or this long (µs) after unacknowledged bytes arrived.
    pub pack_interval_us: u64,
    /// Least time (µs) between two P-ACKs sent because of `pack_every_bytes`: a bulk receiver
    /// would otherwise send one per read, and each wakes the sender (0: no limit). Above the
    /// rate at which the byte rule reaches this gap (`pack_every_bytes / pack_min_gap_us`,
    /// 33 MB/s by default) the gap grows in proportion to the rate, up to `pack_max_gap_us`.
    pub pack_min_gap_us: u64,
    /// Most time (µs) the rate-grown gap may reach: how late, at most, a P-ACK can come
    /// during a fast transfer (its `Acked` events and RTT sample). Equal to
    /// `pack_min_gap_us`: a fixed gap.
    pub pack_max_gap_us: u64,
    /// Report `Written` events per message (a sender of millions of small messages a second
    /// that does not need them saves the work).
    pub written_events: bool,
    /// Report `Acked` events per message.
    pub ack_events: bool,
    /// Latency controller.
    pub controller: ControllerConfig,
    /// Send one packet-pair probe at session start, once the peer announced that it answers
    /// probes (`Event::Probed` carries the result; `docs/dbat.md`).
    pub probe_at_start: bool,
    /// Failover to backup connections (Paceline's connection manager; `None`: off).
    pub failover: Option<crate::failover::FailoverConfig>,
    /// Segments of the controller's kernel-queue limit kept for important messages
    /// (`crate::reserve`; `None`: every message may use the whole limit).
    pub importance_reserve: Option<crate::reserve::ImportanceReserve>,
    /// Duplicate lane: messages at or above an importance also sent on a warm backup
    /// connection (`crate::failover::duplicate`; needs `failover`; `None`: off).
    pub duplicate: Option<crate::failover::duplicate::DuplicateConfig>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            max_message_size: 16 << 20,
            max_streams: 256,
            max_reassembly_bytes: 64 << 20,
            max_pinning_reads: 8,
            chunk_fraction: 0.5,
            max_chunk_len: 64 << 10,
            max_batch: 256 << 10,
            max_queued_bytes: 256 << 20,
            fairness: Fairness::Resource,
            pack_every_bytes: 16 << 10,
            pack_interval_us: 1000,
            pack_min_gap_us: 500,
            pack_max_gap_us: 4000,
            written_events: true,
            ack_events: true,
            controller: ControllerConfig::default(),
            probe_at_start: false,
            failover: None,
            importance_reserve: None,
            duplicate: None,
        }
    }
}

/// A configuration value outside its allowed range.
///
/// ```
/// use lowtide_proto::Config;
/// let e = Config { max_streams: 0, ..Config::default() }.validate().unwrap_err();
/// assert_eq!(e.field, "max_streams");
/// assert_eq!(e.to_string(), "config field `max_streams` = 0 is outside the allowed range 1..=65536");
/// ```
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("config field `{field}` = {value} is outside the allowed range {allowed}")]
#[non_exhaustive]
pub struct ConfigError {
    /// Field path, e.g. `controller.min_buf.a`.
    pub field: &'static str,
    /// The value given, rendered.
    pub value: String,
    /// The allowed range, rendered.
    pub allowed: &'static str,
}

impl ConfigError {
    /// An error for `field` holding `value`, allowed `allowed`.
    ///
    /// ```
    /// use lowtide_proto::ConfigError;
    /// let e = ConfigError::new("bench.rate", 0, "1..=1000");
    /// assert_eq!(e.to_string(), "config field `bench.rate` = 0 is outside the allowed range 1..=1000");
    /// ```
    pub fn new(field: &'static str, value: impl ToString, allowed: &'static str) -> Self {
        Self {
            field,
            value: value.to_string(),
            allowed,
        }
    }
}

pub(crate) fn check_range<T: PartialOrd + ToString + Copy>(
    field: &'static str,
    v: T,
    lo: T,
    hi: T,
    allowed: &'static str,
) -> Result<(), ConfigError> {
    if v >= lo && v <= hi {
        Ok(())
    } else {
        Err(ConfigError::new(field, v, allowed))
    }
}

impl Config {
    /// Checks every field; the first violation is returned.
    ///
    /// ```
    /// use lowtide_proto::Config;
    /// assert!(Config::default().validate().is_ok());
    /// let e = Config { chunk_fraction: 0.0, ..Config::default() }.validate().unwrap_err();
    /// assert_eq!(e.field, "chunk_fraction");
    /// ```
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_range(
            "max_message_size",
            self.max_message_size,
            1,
            1 << 32,
            "1..=4294967296",
        )?;
        check_range("max_streams", self.max_streams, 1, 1 << 16, "1..=65536")?;
        check_range(
            "max_chunk_len",
            self.max_chunk_len,
            64,
            1 << 20,
            "64..=1048576",
        )?;
        check_range(
            "max_reassembly_bytes",
            self.max_reassembly_bytes,
            self.max_chunk_len,
            1 << 40,
            "max_chunk_len..=2^40",
        )?;
        if !(self.chunk_fraction > 0.0 && self.chunk_fraction <= 16.0) {
            return Err(ConfigError::new(
                "chunk_fraction",
                self.chunk_fraction,
                "(0, 16]",
            ));
        }
        check_range("max_batch", self.max_batch, 64, 64 << 20, "64..=67108864")?;
        check_range(
            "max_queued_bytes",
            self.max_queued_bytes,
            1,
            1 << 40,
            "1..=2^40",
        )?;
        check_range("max_pinning_reads", self.max_pinning_reads, 0, 64, "0..=64")?;
        check_range(
            "pack_every_bytes",
            self.pack_every_bytes,
            1,
            1 << 30,
            "1..=2^30",
        )?;
        check_range(
            "pack_interval_us",
            self.pack_interval_us,
            1,
            10_000_000,
            "1..=10000000",
        )?;
        check_range(
            "pack_min_gap_us",
            self.pack_min_gap_us,
            0,
            self.pack_interval_us,
            "0..=pack_interval_us",
        )?;
        // at most the least stall floor of failover (10 ms)
        check_range(
            "pack_max_gap_us",
            self.pack_max_gap_us,
            self.pack_min_gap_us,
            10_000,
            "pack_min_gap_us..=10000",
        )?;
        if let Some(f) = &self.failover {
            f.validate()?;
        }
        if let Some(r) = &self.importance_reserve {
            r.validate(&self.controller)?;
        }
        if let Some(d) = &self.duplicate {
            if self.failover.is_none() {
                return Err(ConfigError::new(
                    "duplicate",
                    "without failover",
                    "with failover = { ... } (the lane is a backup connection)",
                ));
            }
            d.validate()?;
        }
        self.controller.validate()
    }

    /// Chunk payload for a given MSS.
    pub(crate) fn chunk_len(&self, mss: u32) -> usize {
        let c = (f64::from(mss.max(64)) * self.chunk_fraction) as u64;
        c.clamp(64, self.max_chunk_len) as usize
    }
}

/// Per-stream settings.
///
/// ```
/// use lowtide_proto::{Config, Connection, Side, StreamConfig};
/// # let now = std::time::Instant::now();
/// let mut conn = Connection::new(Config::default(), Side::Client, now)?;
/// // Under contention, video gets three times the bytes of audio.
/// let video = conn.open_stream(StreamConfig { weight: 3.0 })?;
/// let audio = conn.open_stream(StreamConfig::default())?;
/// assert_ne!(video, audio);
/// assert!(StreamConfig { weight: 0.0 }.validate().is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StreamConfig {
    /// Share of the channel relative to other streams (weighted fair queuing).
    pub weight: f64,
}

impl Default for StreamConfig {
    fn default() -> Self {
        Self { weight: 1.0 }
    }
}

impl StreamConfig {
    /// Checks the weight.
    ///
    /// ```
    /// use lowtide_proto::StreamConfig;
    /// assert!(StreamConfig { weight: 3.0 }.validate().is_ok());
    /// let e = StreamConfig { weight: 0.0 }.validate().unwrap_err();
    /// assert_eq!((e.field, e.value.as_str(), e.allowed), ("stream.weight", "0", "0.001..=1000000"));
    /// ```
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.weight >= 0.001 && self.weight <= 1e6) {
            return Err(ConfigError::new(
                "stream.weight",
                self.weight,
                "0.001..=1000000",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_errors_name_the_field() {
        Config::default().validate().unwrap();
        let bad = Config {
            max_streams: 0,
            ..Config::default()
        };
        let e = bad.validate().unwrap_err();
        assert_eq!(e.field, "max_streams");
        assert!(e.to_string().contains("1..=65536"), "{e}");
        let bad = Config {
            chunk_fraction: f64::NAN,
            ..Config::default()
        };
        assert_eq!(bad.validate().unwrap_err().field, "chunk_fraction");
        let bad = Config {
            max_pinning_reads: 65,
            ..Config::default()
        };
        let e = bad.validate().unwrap_err();
        assert_eq!(e.field, "max_pinning_reads");
        assert!(e.to_string().contains("0..=64"), "{e}");
        assert_eq!(
            StreamConfig { weight: 0.0 }.validate().unwrap_err().field,
            "stream.weight"
        );
    }
}
