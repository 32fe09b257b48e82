//! Failover to backup TCP connections: Paceline's connection manager, sans IO.
//!
//! Source: Erbad and Krasic, "Sender-side Buffers and the Case for Multimedia Adaptation"
//! (Paceline), section "Connection Manager: Which TCP Socket to Use?". The rule: a channel
//! keeps a number of backup TCP sockets to the same peer and, transparently to the
//! application, switches to a new one when the current one stalls. The threshold is "an
//! equation that resembles TCP's RTO", with "a safety margin added to the failover factor to
//! reduce the number of false positives caused by noise in measurements outside the kernel".
//!
//! Ours, per part:
//! - [`stall`]: the stall rule. The oldest byte written and not yet P-ACKed is older than
//!   `max(floor, factor × (srtt + 4·rttvar))`, srtt and rttvar estimated from P-ACKs as
//!   RFC 6298 does from ACKs. SRT's main/backup bonding uses the same shape,
//!   clamp(2·SRTT + 4·RTTVar, 60 ms, latency); `factor` is Paceline's safety margin. The
//!   verdict waits while the kernel still receives ACKs (its own loss recovery at work;
//!   [`AckClock`], sampled by the driver from `TCP_INFO`).
//! - [`delivered`]: exactly-once delivery per (stream, seq) at the receiver, bounded memory;
//!   with failover on, a resent copy must have the first copy's bytes.
//! - [`old_path`]: the false-positive estimate: P-ACKs that still arrive on the abandoned
//!   connection and cover bytes past the stall point (the old path was delivering after all).
//! - [`duplicate`]: the duplicate lane: messages at or above an importance also go, whole, on
//!   a warm backup connection; the receiver keeps the first copy (SRT's broadcast mode).
//! - the switch itself is [`Connection::begin_path`](crate::Connection::begin_path): every
//!   message not yet P-ACKed and not expired is queued again with its sequence number, the
//!   expired ones are cancelled on the new path, partial reassemblies are dropped.
//!
//! Wire: hello keys 4 (channel token) and 5 (path ordinal of a backup), frame SWITCH (0x08);
//! `docs/wire.md`.
//!
//! Where we differ:
//! - Only the connecting side detects stalls and opens backups (it is the side that can open
//!   TCP connections); the accepting side follows the switch and resends its own messages.
//! - Stall detection counts bytes, not messages: the oldest unacknowledged write, which also
//!   covers a message only partly written when the kernel stopped taking bytes.
//! - RTT samples are P-ACK round trips (write to P-ACK), so they include the receiver's
//!   P-ACK delay (`pack_interval_us`, or the byte rule's gap, at most `pack_max_gap_us`) and
//!   both kernels' queues.
//! - Latency controllers keep their estimators across a switch (the new connection starts in
//!   slow start under the same controller).
//! - Frames staged for the old connection but not written are dropped with it: data is
//!   resent, streams are announced again, a staged CANCEL or P-ACK is lost (the receiver's
//!   window forgets the gap in bounded memory).
//!
//! In simulated time ([`sim::Pair`](crate::sim::Pair)): both directions of the connection
//! go dark after 100 messages; the client fails over, and every message arrives once.
//!
//! ```
//! use lowtide_proto::failover::FailoverConfig;
//! use lowtide_proto::sim::{LinkParams, Pair};
//! use lowtide_proto::{Config, Event, Message, StreamConfig};
//! use std::time::Duration;
//!
//! let cfg = Config {
//!     failover: Some(FailoverConfig { floor_ms: 60, ..FailoverConfig::default() }),
//!     ..Config::default()
//! };
//! let mut pair = Pair::new(cfg.clone(), cfg, LinkParams::default());
//! pair.auto_failover = true;
//! let s = pair.client.conn.open_stream(StreamConfig::default())?;
//! for i in 0..200u32 {
//!     if i == 100 {
//!         pair.c2s.blackholed = true;
//!         pair.s2c.blackholed = true;
//!     }
//!     pair.client.conn.send(pair.now, s, Message::new(i.to_be_bytes().to_vec()))?;
//!     let until = pair.now + Duration::from_millis(2);
//!     pair.drive_until(until, 1_000_000);
//! }
//! pair.drive_bounded(1_000_000);
//!
//! assert!(pair.client.events.iter().any(|e| matches!(e, Event::Failover(r) if r.path == 1)));
//! let mut seqs: Vec<u64> = pair.server.received.iter().map(|m| m.seq).collect();
//! seqs.sort();
//! assert_eq!(seqs, (0..200).collect::<Vec<u64>>()); // none lost, none twice
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod delivered;
pub mod duplicate;
pub mod network_path;
pub mod old_path;
pub mod stall;

use serde::{Deserialize, Serialize};

use crate::config::{check_range, ConfigError};

pub use delivered::{Delivered, Verdict};
pub use old_path::OldPath;
pub use stall::{AckClock, StallDetector, StallVerdict};

/// Failover settings (`failover = { backups = N, ... }`), checked by [`FailoverConfig::validate`].
///
/// ```
/// use lowtide_proto::{Config, FailoverConfig};
/// let cfg: Config = toml::from_str("failover = { backups = 2, floor_ms = 100 }").unwrap();
/// let f = cfg.failover.expect("failover on");
/// assert_eq!((f.backups, f.floor_ms, f.factor), (2, 100, 2.0));
/// let e = FailoverConfig { backups: 0, ..f }.validate().unwrap_err();
/// assert_eq!((e.field, e.allowed), ("failover.backups", "1..=8"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FailoverConfig {
    /// Pre-established backup connections kept (the connecting side); the most idle backups
    /// accepted per channel (the accepting side).
    pub backups: u32,
    /// Multiplier on `srtt + 4·rttvar` (Paceline's failover factor with its safety margin).
    pub factor: f64,
    /// Lower bound of the stall threshold, ms (SRT's 60 ms).
    pub floor_ms: u64,
    /// Delivered sequence numbers remembered per stream beyond the contiguous floor (and the
    /// hashes of the most recent ones, for comparing resent copies).
    pub dedup_window: u32,
}

impl Default for FailoverConfig {
    fn default() -> Self {
        Self {
            backups: 1,
            factor: 2.0,
            floor_ms: 200,
            dedup_window: 4096,
        }
    }
}

impl FailoverConfig {
    /// Checks every field; errors name the field, the value and the allowed range.
    ///
    /// ```
    /// use lowtide_proto::FailoverConfig;
    /// assert!(FailoverConfig::default().validate().is_ok());
    /// let e = FailoverConfig { factor: 0.5, ..Default::default() }.validate().unwrap_err();
    /// assert_eq!((e.field, e.allowed), ("failover.factor", "1.0..=20.0"));
    /// ```
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_range("failover.backups", self.backups, 1, 8, "1..=8")?;
        if !(self.factor >= 1.0 && self.factor <= 20.0) {
            return Err(ConfigError::new(
                "failover.factor",
                self.factor,
                "1.0..=20.0",
            ));
        }
        check_range("failover.floor_ms", self.floor_ms, 10, 60_000, "10..=60000")?;
        check_range(
            "failover.dedup_window",
            self.dedup_window,
            64,
            1 << 20,
            "64..=1048576",
        )
    }
}

/// What a switch did, reported as [`Event::Failover`](crate::Event::Failover).
///
/// A driver logs it; the module example above shows one arriving:
///
/// ```
/// use lowtide_proto::{Event, FailoverReport};
/// fn log(e: &Event) {
///     if let Event::Failover(FailoverReport { path, resent, expired, threshold }) = e {
///         println!("moved to backup {path} after {threshold:?}: {resent} resent, {expired} expired");
///     }
/// }
/// # log(&Event::StreamClosed { stream: 0 });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailoverReport {
    /// Ordinal of the connection now in use (the primary is 0).
    pub path: u64,
    /// Messages queued again (not yet P-ACKed, not expired).
    pub resent: u64,
    /// Messages not P-ACKed whose deadline had passed: cancelled on the new path instead.
    pub expired: u64,
    /// The stall threshold when the stall was detected (zero on the following side).
    pub threshold: std::time::Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_errors_name_field_value_and_range() {
        FailoverConfig::default().validate().unwrap();
        let e = FailoverConfig {
            backups: 0,
            ..Default::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(
            (e.field, e.value.as_str(), e.allowed),
            ("failover.backups", "0", "1..=8")
        );
        let e = FailoverConfig {
            factor: f64::NAN,
            ..Default::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.field, "failover.factor");
        let e = FailoverConfig {
            floor_ms: 5,
            ..Default::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.field, "failover.floor_ms");
        let e = FailoverConfig {
            dedup_window: 1,
            ..Default::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.field, "failover.dedup_window");
        let c: FailoverConfig = toml::from_str("backups = 2\nfloor_ms = 100").unwrap();
        assert_eq!((c.backups, c.floor_ms, c.factor), (2, 100, 2.0));
        assert!(toml::from_str::<FailoverConfig>("bogus = 1").is_err());
    }
}
