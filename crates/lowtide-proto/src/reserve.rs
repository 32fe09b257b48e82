//! Importance reserve: the last segments of the kernel-queue limit are kept for important data.
//!
//! Rule. A limit-based latency controller (MIN_BUF(a, b), DBAT) lets the kernel hold `limit`
//! bytes: about a congestion window in flight plus `b` segments not yet sent. Goel, Krasic and
//! Walpole, "Low-Latency Adaptive Streaming over TCP" (section 5), give those `b` segments the
//! job of keeping the window full between the application's writes. Whatever sits unsent in the
//! kernel cannot be reordered, and while the window is full a new segment leaves only when an
//! ACK frees room. So a message of the highest importance that arrives behind less important
//! unsent bytes waits for them, and then for ACKs for its own segments: on Fig. 6's path
//! (Erbad and Krasic, "Sender-side Buffers and the Case for Multimedia Adaptation") one
//! segment of the conference leaves about every 8 ms, and the base layer's median was 33 ms
//! above the network floor. With the reserve, data below `min_importance` may fill the kernel
//! only up to `limit − segments·mss`; data at or above it may use the whole limit.
//!
//! - `segments < b` (MIN_BUF): an important message finds at most `b − segments` unsent
//!   segments ahead of it; the less important data keeps the window full as before.
//! - `segments > b`: the less important data stays `segments − b` segments below cwnd, so an
//!   important message of up to that size finds room in the window itself and waits for no
//!   ACK. The price is that much of the window for the less important data.
//! - `segments = b`: MIN_BUF(a, 0) for the less important data, MIN_BUF(a, b) for the
//!   important: the less important data does not wait unsent in the kernel, so an important
//!   message finds no unsent bytes ahead of it, only the window's own wait. On Fig. 6's
//!   congested link (with age cancellation, at full scale) this did not lower the base
//!   layer's median and cost a tenth of the enhancement layers: cubic's window changes and
//!   losses still leave a segment unsent ahead half the time (`docs/failover.md`).
//!
//! With `segments >= b` the less important data is blocked by bytes in flight alone, and its
//! writer wakes by timer (a quarter RTT, at most 10 ms, as MIN_BUF when only in-flight bytes
//! block it), since no kernel event says "an ACK freed room". (A poll at a quarter of one
//! segment's ACK time instead was tried for `segments = b` and changed nothing measurable,
//! in the simulation or in a quick lab run, so it is not kept: `docs/failover.md`.)
//!
//! Paceline orders the data it has not written by importance; this carries that order into
//! the part of the kernel's queue a latency controller keeps for itself.
//!
//! Where we differ:
//! - The reserve is in whole segments of the limit, not a byte budget per message: a message
//!   larger than the reserve takes the rest of the limit like any other.
//! - Within one staging pass the scheduler's order stands: when the next message it picks is
//!   below `min_importance` and the reserve holds it back, the pass ends, even if another
//!   stream holds an important message (the next pass takes it).
//! - Cubic grows cwnd only while the window is full at times; with `segments > b` it is full
//!   only while important data uses the reserve (every frame's base layer in the conference).
//!
//! A fixed reserve larger than `b` keeps the window short of full all the time: cubic, a flow
//! that is then not cwnd-limited, grows its window less, and on Fig. 6's congested link five
//! segments halved the enhancement layers delivered. A form that kept the room only towards
//! the next important message's predicted arrival was built and measured no better than a
//! fixed reserve at full scale, twice (`docs/failover.md`), and removed.
//!
//! ```
//! use lowtide_proto::reserve::ImportanceReserve;
//! let r = ImportanceReserve { segments: 2, min_importance: 7 };
//! assert_eq!(r.bytes(1448), 2896);
//! assert!(r.covers(7) && !r.covers(6));
//! ```

use serde::{Deserialize, Serialize};

use crate::config::{check_range, ConfigError};
use crate::controller::ControllerConfig;

/// Most segments a reserve may hold back.
const MAX_SEGMENTS: u32 = 16;

/// `importance_reserve = { segments = 2, min_importance = 7 }`, checked by
/// [`ImportanceReserve::validate`] against the controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportanceReserve {
    /// Segments of the limit kept for important data.
    pub segments: u32,
    /// Messages at or above this importance may use the reserve.
    pub min_importance: u8,
}

impl ImportanceReserve {
    /// The reserve in bytes for this MSS.
    pub fn bytes(&self, mss: u32) -> u64 {
        u64::from(self.segments) * u64::from(mss)
    }

    /// Whether a message of `importance` may use the reserve.
    pub fn covers(&self, importance: u8) -> bool {
        importance >= self.min_importance
    }

    /// Checks the reserve: 1 to 16 segments, cut from a limit-based controller (MIN_BUF or
    /// DBAT).
    ///
    /// ```
    /// use lowtide_proto::reserve::ImportanceReserve;
    /// use lowtide_proto::ControllerConfig;
    /// let r = ImportanceReserve { segments: 5, min_importance: 7 };
    /// assert!(r.validate(&ControllerConfig::MinBuf { a: 1, b: 3 }).is_ok());
    /// let e = ImportanceReserve { segments: 17, ..r }.validate(&ControllerConfig::default()).unwrap_err();
    /// assert_eq!((e.field, e.value.as_str(), e.allowed), ("importance_reserve.segments", "17", "1..=16"));
    /// let e = r.validate(&ControllerConfig::Unlimited).unwrap_err();
    /// assert_eq!(e.field, "importance_reserve");
    /// ```
    pub fn validate(&self, controller: &ControllerConfig) -> Result<(), ConfigError> {
        match controller {
            ControllerConfig::MinBuf { .. } | ControllerConfig::Dbat(_) => check_range(
                "importance_reserve.segments",
                self.segments,
                1,
                MAX_SEGMENTS,
                "1..=16",
            ),
            other => Err(ConfigError::new(
                "importance_reserve",
                format!("with controller {other:?}"),
                "a limit-based controller (min_buf or dbat)",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_field_value_and_range() {
        let r = ImportanceReserve {
            segments: 0,
            min_importance: 7,
        };
        let e = r
            .validate(&ControllerConfig::MinBuf { a: 1, b: 3 })
            .unwrap_err();
        assert_eq!(
            (e.field, e.value.as_str()),
            ("importance_reserve.segments", "0")
        );
        let r = ImportanceReserve {
            segments: 16,
            min_importance: 7,
        };
        assert!(r.validate(&ControllerConfig::MinBuf { a: 1, b: 1 }).is_ok());
        let e = ImportanceReserve { segments: 17, ..r }
            .validate(&ControllerConfig::MinBuf { a: 1, b: 3 })
            .unwrap_err();
        assert_eq!((e.value.as_str(), e.allowed), ("17", "1..=16"));
        let e = r
            .validate(&ControllerConfig::NotsentLowat { bytes: 1000 })
            .unwrap_err();
        assert_eq!(e.allowed, "a limit-based controller (min_buf or dbat)");
        let parsed: ImportanceReserve = toml::from_str("segments = 2\nmin_importance = 7").unwrap();
        assert_eq!(parsed.bytes(1000), 2000);
        assert!(toml::from_str::<ImportanceReserve>("segments = 2").is_err());
        // The timed form is gone: a file that still asks for it is refused, not ignored.
        assert!(toml::from_str::<ImportanceReserve>(
            "segments = 2\nmin_importance = 7\ntimed = true"
        )
        .is_err());
    }
}
