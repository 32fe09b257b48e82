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
//!   ACK. The price is that much of the window for the less important data, and its writer
//!   wakes by timer (a quarter RTT, at most 10 ms, as MIN_BUF when only in-flight bytes block
//!   it), since no kernel event says "an ACK freed room".
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
//! ## Timed: room in the window when the next important message is due
//!
//! A fixed reserve larger than `b` keeps the window short of full all the time; cubic, a
//! flow that is not cwnd-limited, grows its window less, and on Fig. 6's congested link five
//! segments halved the enhancement layers delivered. A periodic source (a frame's base layer
//! every 33 ms) needs the room only when its next important message arrives. With `timed`,
//! the connection learns the period of the important messages' arrivals and keeps, `Δ`
//! before the next one is due,
//!
//! `reserve(Δ) = max(0, limit − cwnd·mss + segments·mss − rate·Δ)`
//!
//! bytes from less important data, where `rate` is how fast ACKs free the window: the smaller
//! of `cwnd·mss / srtt` and the kernel's delivery rate (`tcpi_delivery_rate`). Less
//! important data may thus fill the kernel only as far as the ACKs until the due time will
//! empty it again: at the due time `segments` MSS of the congestion window are free, and the
//! important message is sent at once, behind no unsent bytes. Right after it, the reserve is
//! the next period's (`Δ` ≈ a frame time: usually none), and the less important data fill
//! the window and MIN_BUF's `b` segments again, so the flow is cwnd-limited once a frame.
//! The window's slots stand empty only in the last moments before the due time (on average
//! about half a segment time per free segment), not all the time.
//!
//! The period is a moving average (7/8 old) of the gaps between important arrivals; arrivals
//! within 1 ms of the last one are one burst (several streams' base layers of one frame); a
//! gap over 1 s forgets the period. Without a period, and once the next important message is
//! more than half a period overdue, there is no reserve: an aperiodic source gets MIN_BUF.
//!
//! ```
//! use lowtide_proto::reserve::ImportanceReserve;
//! let r = ImportanceReserve { segments: 2, min_importance: 7, timed: false };
//! assert_eq!(r.bytes(1448), 2896);
//! assert!(r.covers(7) && !r.covers(6));
//! ```

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::config::{check_range, ConfigError};
use crate::controller::{ControllerConfig, TcpState};

/// Important arrivals closer together than this are one burst.
const BURST: Duration = Duration::from_millis(1);

/// A gap longer than this is no period: the source paused.
const MAX_PERIOD: Duration = Duration::from_secs(1);

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
    /// `false` (the default): `segments` of the limit are kept all the time. `true`: the
    /// reserve grows towards the next important message's predicted arrival, when
    /// `segments` of the congestion window itself are free (module doc, "Timed").
    #[serde(default)]
    pub timed: bool,
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

    /// Bytes of the controller's `limit` kept from less important data now: `segments` MSS,
    /// or timed, `reserve(Δ)` of the module doc with `Δ = until_due` (`None`: no prediction,
    /// no reserve) and `acked_rate` the bytes per second the kernel's ACKs freed over the last
    /// round trip ([`AckedRate`]; `None`: estimated from `tcp`).
    ///
    /// ```
    /// use lowtide_proto::reserve::ImportanceReserve;
    /// use lowtide_proto::TcpState;
    /// use std::time::Duration;
    /// // 10 segments per 100 ms round trip: ACKs free 100 KB/s.
    /// let rtt = Duration::from_millis(100);
    /// let tcp = TcpState { cwnd: 10, mss: 1000, rtt, delivery_rate: 150_000, ..TcpState::default() };
    /// let limit = 13_000; // MIN_BUF(1, 3)
    /// let r = ImportanceReserve { segments: 2, min_importance: 7, timed: true };
    /// // Due now: MIN_BUF's 3 unsent segments and 2 of the window.
    /// let ms = |n| Some(Duration::from_millis(n));
    /// assert_eq!(r.bytes_now(limit, &tcp, ms(0), None), 5_000);
    /// // 20 ms before: the ACKs will free 2000 bytes until then.
    /// assert_eq!(r.bytes_now(limit, &tcp, ms(20), None), 3_000);
    /// assert_eq!(r.bytes_now(limit, &tcp, ms(60), None), 0);
    /// // ACKs measured freeing only 50 KB/s: 1000 bytes in 20 ms.
    /// assert_eq!(r.bytes_now(limit, &tcp, ms(20), Some(50_000.0)), 4_000);
    /// // In whole segments: 1.5 segments are kept as 2.
    /// assert_eq!(r.bytes_now(limit, &tcp, ms(35), None), 2_000);
    /// assert_eq!(r.bytes_now(limit, &tcp, None, None), 0);
    /// let fixed = ImportanceReserve { timed: false, ..r };
    /// assert_eq!(fixed.bytes_now(limit, &tcp, None, None), 2_000);
    /// ```
    pub fn bytes_now(
        &self,
        limit: u64,
        tcp: &TcpState,
        until_due: Option<Duration>,
        acked_rate: Option<f64>,
    ) -> u64 {
        let mss = tcp.mss_or_default();
        if !self.timed {
            return self.bytes(mss);
        }
        // No prediction, or no TCP_INFO sample yet: nothing to time the room by.
        let (Some(until_due), true) = (until_due, tcp.cwnd > 0) else {
            return 0;
        };
        let window = u64::from(tcp.cwnd) * u64::from(mss);
        let at_due = limit.saturating_sub(window) + self.bytes(mss);
        // How fast ACKs free the kernel's queue: measured over the last round trip when
        // known; else at most a window per round trip and no more than the kernel's
        // delivery-rate estimate.
        let per_rtt = (!tcp.rtt.is_zero()).then(|| window as f64 / tcp.rtt.as_secs_f64());
        let delivery = (tcp.delivery_rate > 0).then_some(tcp.delivery_rate as f64);
        let rate = match (acked_rate, per_rtt, delivery) {
            (Some(r), _, _) => r,
            (None, Some(a), Some(b)) => a.min(b),
            (None, a, b) => a.or(b).unwrap_or(0.0),
        };
        let bytes = at_due.saturating_sub((rate * until_due.as_secs_f64()) as u64);
        // Whole segments, as MIN_BUF's allowance: a cut at any byte leaves a sub-MSS tail
        // that goes out alone (TCP_NODELAY) and takes a whole packet of the window.
        bytes.div_ceil(u64::from(mss)) * u64::from(mss)
    }

    /// Checks the reserve: 1 to 16 segments, cut from a limit-based controller (MIN_BUF or
    /// DBAT).
    ///
    /// ```
    /// use lowtide_proto::reserve::ImportanceReserve;
    /// use lowtide_proto::ControllerConfig;
    /// let r = ImportanceReserve { segments: 5, min_importance: 7, timed: false };
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

/// When the next important message is due, from the arrivals of the last ones (a timed
/// reserve's clock).
///
/// ```
/// use lowtide_proto::reserve::ImportantArrivals;
/// use std::time::{Duration, Instant};
/// let t0 = Instant::now();
/// let ms = |n| t0 + Duration::from_millis(n);
/// let mut a = ImportantArrivals::default();
/// a.arrived(ms(0));
/// assert_eq!(a.until_due(ms(10)), None); // one arrival: no period yet
/// a.arrived(ms(33));
/// a.arrived(ms(33)); // the same burst
/// assert_eq!(a.until_due(ms(50)), Some(Duration::from_millis(16)));
/// assert_eq!(a.until_due(ms(70)), Some(Duration::ZERO)); // overdue: due now
/// assert_eq!(a.until_due(ms(90)), None); // over half a period overdue: no prediction
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct ImportantArrivals {
    last: Option<Instant>,
    period: Option<Duration>,
}

impl ImportantArrivals {
    /// An important message arrived (was handed to the connection) at `now`.
    pub fn arrived(&mut self, now: Instant) {
        if let Some(last) = self.last {
            let gap = now.saturating_duration_since(last);
            if gap < BURST {
                return;
            }
            self.period = (gap <= MAX_PERIOD).then(|| match self.period {
                Some(p) => (p * 7 + gap) / 8,
                None => gap,
            });
        }
        self.last = Some(now);
    }

    /// Time until the next important message is due (zero when overdue); `None` without a
    /// period, or once it is more than half a period overdue.
    pub fn until_due(&self, now: Instant) -> Option<Duration> {
        let (last, period) = (self.last?, self.period?);
        let due = last + period;
        if now > due + period / 2 {
            return None;
        }
        Some(due.saturating_duration_since(now))
    }
}

/// How fast the kernel's ACKs free its queue: bytes acknowledged (bytes written minus
/// `SIOCOUTQ`) per second over the last round trip, half old and half new. The window's
/// own estimate (`cwnd·mss / srtt`) was a third above what Fig. 6's conference delivered
/// (a window is not full all the time, the round-trip estimate trails), and a timed reserve
/// that counts on ACKs that do not come leaves no room at the due time.
///
/// ```
/// use lowtide_proto::reserve::AckedRate;
/// use std::time::{Duration, Instant};
/// let t0 = Instant::now();
/// let rtt = Duration::from_millis(50);
/// let mut a = AckedRate::default();
/// a.sample(t0, 0, rtt);
/// a.sample(t0 + Duration::from_millis(20), 4_000, rtt); // shorter than a round trip
/// assert_eq!(a.rate(), None);
/// a.sample(t0 + Duration::from_millis(50), 10_000, rtt);
/// assert_eq!(a.rate(), Some(200_000.0));
/// a.sample(t0 + Duration::from_millis(100), 15_000, rtt);
/// assert_eq!(a.rate(), Some(150_000.0));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct AckedRate {
    since: Option<(Instant, u64)>,
    rate: Option<f64>,
}

impl AckedRate {
    /// `acked`: bytes the kernel has acknowledged on this connection so far. A count that
    /// goes back (a new connection after failover) starts over.
    pub fn sample(&mut self, now: Instant, acked: u64, rtt: Duration) {
        let Some((at, base)) = self.since else {
            self.since = Some((now, acked));
            return;
        };
        if acked < base {
            *self = Self::default();
            self.since = Some((now, acked));
            return;
        }
        let elapsed = now.saturating_duration_since(at);
        if elapsed < rtt.max(Duration::from_millis(10)) {
            return;
        }
        let r = (acked - base) as f64 / elapsed.as_secs_f64();
        self.rate = Some(self.rate.map_or(r, |old| (old + r) / 2.0));
        self.since = Some((now, acked));
    }

    /// Bytes per second; `None` before a round trip was measured.
    pub fn rate(&self) -> Option<f64> {
        self.rate
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
            timed: false,
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
            timed: true,
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
        let timed: ImportanceReserve =
            toml::from_str("segments = 2\nmin_importance = 7\ntimed = true").unwrap();
        assert!(timed.timed && !parsed.timed);
    }

    #[test]
    fn a_timed_reserve_follows_the_period_and_forgets_a_pause() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut a = ImportantArrivals::default();
        for n in 0..10 {
            a.arrived(ms(n * 40));
        }
        assert_eq!(a.until_due(ms(370)), Some(Duration::from_millis(30)));
        // The period moves by an eighth of a new gap's difference.
        a.arrived(ms(360 + 48));
        assert_eq!(a.until_due(ms(408)), Some(Duration::from_millis(41)));
        // A pause of over a second: no period until two arrivals again.
        a.arrived(ms(2000));
        assert_eq!(a.until_due(ms(2001)), None);
        a.arrived(ms(2030));
        assert_eq!(a.until_due(ms(2040)), Some(Duration::from_millis(20)));
        // Before a TCP_INFO sample there is no window to keep room in; without a rate
        // nothing drains the reserve: the whole of it at any time.
        let r = ImportanceReserve {
            segments: 2,
            min_importance: 7,
            timed: true,
        };
        let tcp = TcpState {
            mss: 1000,
            ..TcpState::default()
        };
        assert_eq!(r.bytes_now(13_000, &tcp, Some(Duration::ZERO), None), 0);
        let tcp = TcpState { cwnd: 10, ..tcp };
        let second = Some(Duration::from_secs(1));
        assert_eq!(r.bytes_now(13_000, &tcp, second, None), 5_000);
    }
}
