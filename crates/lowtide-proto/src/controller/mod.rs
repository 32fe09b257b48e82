//! Latency controllers: how many bytes may enter the kernel now?
//!
//! Paceline (Erbad and Krasic, "Sender-side Buffers and the Case for Multimedia Adaptation",
//! "Latency Controller: How Many Chunks to Send?") keeps the kernel's send buffer filled to about
//! `cwnd + 3·MSS` so that the sender's data waits in lowtide's priority queues, where it can still
//! be reordered, cancelled or expired, instead of in the kernel's FIFO. Each controller here is a
//! pure function of a [`TcpState`] snapshot, the application's own progress ([`AppProgress`]) and
//! `now`; none makes a system call, so every control law is unit-tested.
//!
//! | controller | law | wake-up when blocked |
//! | --- | --- | --- |
//! | [`Unlimited`] | write whatever the kernel takes (plain TCP) | kernel writability |
//! | [`NotsentLowatController`] | the kernel's `TCP_NOTSENT_LOWAT` | kernel writability with the option set |
//! | [`MinBuf`] | `(a·cwnd + min(b, cwnd) + sacked)·mss − outq` (Goel et al. §6, §6.1) | `TCP_NOTSENT_LOWAT` = blocked part |
//! | [`PaceA`] | `latency × bandwidth` from P-ACKs, `+ b·mss`, minus unacknowledged bytes | next P-ACK |
//! | [`DbatController`] | slow-start allowance from the probe, then probed bandwidth × RTT (Hasan et al. §4); congestion signals | as MinBuf |
//!
//! See `docs/transport.md` for how the wake-up maps onto `TCP_NOTSENT_LOWAT` and where the
//! mapping is inexact.
//!
//! ```
//! use lowtide_proto::controller::{AppProgress, ControllerConfig, TcpState};
//! # let now = std::time::Instant::now();
//! let mut c = ControllerConfig::MinBuf { a: 1, b: 3 }.build()?;
//! let tcp = TcpState { cwnd: 10, mss: 1000, outq: 4000, ..TcpState::default() };
//! // (1·10 + 3) segments of 1000 bytes, of which 4000 are in the kernel already.
//! assert_eq!(c.decide(&tcp, &AppProgress::default(), now).allowance, 9000);
//! # Ok::<(), lowtide_proto::ConfigError>(())
//! ```

mod dbat;
mod min_buf;
mod notsent_lowat;
mod pace_a;
mod unlimited;

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

pub use dbat::{CongestionSignal, Dbat, DbatConfig, DbatController, ProbeResult};
pub(crate) use min_buf::decide_for_limit;
pub use min_buf::MinBuf;
pub use notsent_lowat::NotsentLowatController;
pub use pace_a::{PAckSample, PaceA};
pub use unlimited::Unlimited;

use crate::config::{check_range, ConfigError};

/// MSS assumed before the driver reports one (Ethernet, timestamps on).
pub const DEFAULT_MSS: u32 = 1448;

/// A snapshot of the kernel's TCP sender, as the driver reads it (`TCP_INFO`, `SIOCOUTQ`).
/// Segment counts are in MSS-sized segments, as the kernel keeps them.
///
/// A driver fills it from the socket (`lowtide::sys::tcp_state`); a test builds it by hand:
///
/// ```
/// use lowtide_proto::controller::{TcpState, DEFAULT_MSS};
/// use std::time::Duration;
/// let tcp = TcpState { cwnd: 10, mss: 1448, rtt: Duration::from_millis(40), ..TcpState::default() };
/// assert_eq!(tcp.mss_or_default(), 1448);
/// assert_eq!(TcpState::default().mss_or_default(), DEFAULT_MSS); // before the first sample
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct TcpState {
    /// Congestion window, segments (`tcpi_snd_cwnd`).
    pub cwnd: u32,
    /// Sender MSS, bytes (`tcpi_snd_mss`).
    pub mss: u32,
    /// Selectively acknowledged segments (`tcpi_sacked`).
    pub sacked: u32,
    /// Segments sent and not yet acknowledged (`tcpi_unacked`).
    pub unacked: u32,
    /// Smoothed round-trip time (`tcpi_rtt`).
    pub rtt: Duration,
    /// Minimum round-trip time seen (`tcpi_min_rtt`).
    pub min_rtt: Duration,
    /// Bytes in the send queue not yet sent (`tcpi_notsent_bytes`, `SIOCOUTQNSD`).
    pub notsent: u32,
    /// Bytes in the send queue, sent or not, not yet acknowledged (`SIOCOUTQ`).
    pub outq: u32,
    /// The kernel's delivery-rate estimate, bytes per second (`tcpi_delivery_rate`).
    pub delivery_rate: u64,
    /// Slow-start threshold, segments (`tcpi_snd_ssthresh`): [`INITIAL_SSTHRESH`] until the
    /// first loss or ECN echo ends slow start; 0 when unknown.
    pub ssthresh: u32,
    /// Congestion-avoidance state (`tcpi_ca_state`): 0 open, 1 disorder, 2 CWR,
    /// [`CA_RECOVERY`] (fast retransmit, RACK), [`CA_LOSS`] (after a timeout).
    pub ca_state: u8,
}

/// `tcpi_ca_state` while a loss is repaired by fast retransmit or RACK (`TCP_CA_Recovery`,
/// include/net/tcp.h).
pub const CA_RECOVERY: u8 = 3;
/// `tcpi_ca_state` after a retransmission timeout (`TCP_CA_Loss`).
pub const CA_LOSS: u8 = 4;

/// Linux's slow-start threshold before the first congestion event (`TCP_INFINITE_SSTHRESH`).
pub const INITIAL_SSTHRESH: u32 = 0x7fff_ffff;

impl TcpState {
    /// MSS, or [`DEFAULT_MSS`] when unknown.
    ///
    /// ```
    /// use lowtide_proto::controller::{TcpState, DEFAULT_MSS};
    /// assert_eq!(TcpState { mss: 1200, ..TcpState::default() }.mss_or_default(), 1200);
    /// assert_eq!(TcpState::default().mss_or_default(), DEFAULT_MSS); // no TCP_INFO sample yet
    /// ```
    pub fn mss_or_default(&self) -> u32 {
        if self.mss == 0 {
            DEFAULT_MSS
        } else {
            self.mss
        }
    }

    /// Whether TCP has left slow start: a congestion event set its slow-start threshold.
    ///
    /// ```
    /// use lowtide_proto::controller::{TcpState, INITIAL_SSTHRESH};
    /// assert!(!TcpState { ssthresh: INITIAL_SSTHRESH, ..TcpState::default() }.left_slow_start());
    /// assert!(TcpState { ssthresh: 20, ..TcpState::default() }.left_slow_start());
    /// assert!(!TcpState::default().left_slow_start()); // unknown
    /// ```
    pub fn left_slow_start(&self) -> bool {
        self.ssthresh != 0 && self.ssthresh < INITIAL_SSTHRESH
    }

    /// Whether the kernel is repairing a loss now (Recovery or Loss state): its window was
    /// cut for the repair, and the bytes behind the lost segment wait for it.
    ///
    /// ```
    /// use lowtide_proto::controller::{TcpState, CA_LOSS, CA_RECOVERY};
    /// assert!(TcpState { ca_state: CA_RECOVERY, ..TcpState::default() }.repairing_loss());
    /// assert!(TcpState { ca_state: CA_LOSS, ..TcpState::default() }.repairing_loss());
    /// assert!(!TcpState { ca_state: 1, ..TcpState::default() }.repairing_loss()); // disorder
    /// ```
    pub fn repairing_loss(&self) -> bool {
        self.ca_state == CA_RECOVERY || self.ca_state == CA_LOSS
    }
}

/// What the application side knows without the kernel.
///
/// ```
/// use lowtide_proto::controller::{AppProgress, LatencyController, PaceA, TcpState};
/// # let now = std::time::Instant::now();
/// // PaceA reads only this: 64 KB may be unacknowledged before its first estimate.
/// let app = AppProgress { written: 50_000, acked: 10_000, ..AppProgress::default() };
/// let d = PaceA::new(3).decide(&TcpState::default(), &app, now);
/// assert_eq!(d.allowance, (64 << 10) - 40_000);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct AppProgress {
    /// Bytes handed to the kernel so far (all of the channel, handshake included).
    pub written: u64,
    /// Bytes the peer acknowledged with P-ACKs.
    pub acked: u64,
    /// Bytes encoded and waiting for the next write (already committed).
    pub staged: u64,
    /// Bytes waiting in lowtide's send queues, not yet staged.
    pub queued: u64,
}

/// How the driver should learn that the controller's allowance has grown again.
///
/// ```
/// use lowtide_proto::controller::{AppProgress, LatencyController, MinBuf, TcpState, Wake};
/// # let now = std::time::Instant::now();
/// // The kernel holds 13 segments, 5 of them unsent: MIN_BUF(1, 3) is full.
/// let tcp = TcpState { cwnd: 10, mss: 1000, outq: 13_000, notsent: 5_000, ..TcpState::default() };
/// let d = MinBuf::new(1, 3).decide(&tcp, &AppProgress::default(), now);
/// assert!(d.blocked());
/// // Writable again once fewer than 4001 bytes are unsent: the driver sets TCP_NOTSENT_LOWAT.
/// assert_eq!(d.wake, Wake::NotsentBelow(4001));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Wake {
    /// The kernel's ordinary writability (`EPOLLOUT`).
    Writable,
    /// Set `TCP_NOTSENT_LOWAT` to this many bytes and wait for writability.
    NotsentBelow(u32),
    /// No kernel event expresses the condition: check again at this time.
    At(#[serde(skip)] Instant),
    /// Wait for the peer's next P-ACK (read side).
    PAck,
}

/// One decision of a controller.
///
/// ```
/// use lowtide_proto::controller::{AppProgress, LatencyController, NotsentLowatController, TcpState};
/// # let now = std::time::Instant::now();
/// let tcp = TcpState { mss: 1000, notsent: 1000, ..TcpState::default() };
/// let d = NotsentLowatController::new(4000).decide(&tcp, &AppProgress::default(), now);
/// assert_eq!((d.allowance, d.limit, d.min_write), (3000, 4000, 1000));
/// assert_eq!(d.fixed_lowat, Some(4000)); // the driver keeps the socket option set
/// assert!(!d.blocked());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// Bytes that may be staged for the kernel now, beyond what is already staged.
    pub allowance: u64,
    /// Target fill of kernel queue plus staging, bytes (`u64::MAX` for none).
    pub limit: u64,
    /// Smallest write worth a system call, bytes.
    pub min_write: u64,
    /// How to be woken when blocked (`allowance < min_write`).
    pub wake: Wake,
    /// `TCP_NOTSENT_LOWAT` the driver must keep set, independent of blocking (NotsentLowat).
    pub fixed_lowat: Option<u32>,
}

impl Decision {
    /// Whether the controller currently forbids a write.
    ///
    /// ```
    /// use lowtide_proto::controller::{AppProgress, LatencyController, MinBuf, TcpState};
    /// # let now = std::time::Instant::now();
    /// let tcp = TcpState { cwnd: 10, mss: 1000, ..TcpState::default() };
    /// let mut c = MinBuf::new(1, 3); // 13 000 bytes
    /// assert!(!c.decide(&tcp, &AppProgress::default(), now).blocked());
    /// let full = TcpState { outq: 12_500, ..tcp }; // 500 bytes left: less than one MSS
    /// assert!(c.decide(&full, &AppProgress::default(), now).blocked());
    /// ```
    pub fn blocked(&self) -> bool {
        self.allowance < self.min_write
    }
}

/// A latency controller. Implementations are deterministic functions of their inputs.
///
/// Configurations name the built-in ones ([`ControllerConfig`]); an embedder may write its
/// own and call it the way the connection does:
///
/// ```
/// use lowtide_proto::controller::{AppProgress, Decision, LatencyController, TcpState, Wake};
/// use std::time::Instant;
///
/// /// At most `n` bytes in the kernel and staged, whatever cwnd is.
/// #[derive(Debug)]
/// struct Fixed(u64);
///
/// impl LatencyController for Fixed {
///     fn name(&self) -> &'static str { "fixed" }
///     fn needs_tcp_state(&self) -> bool { true }
///     fn decide(&mut self, tcp: &TcpState, app: &AppProgress, _now: Instant) -> Decision {
///         let used = u64::from(tcp.outq) + app.staged;
///         Decision {
///             allowance: self.0.saturating_sub(used),
///             limit: self.0,
///             min_write: 1,
///             wake: Wake::Writable,
///             fixed_lowat: None,
///         }
///     }
/// }
///
/// let tcp = TcpState { outq: 1500, ..TcpState::default() };
/// let d = Fixed(4000).decide(&tcp, &AppProgress::default(), Instant::now());
/// assert_eq!(d.allowance, 2500);
/// ```
pub trait LatencyController: Send + std::fmt::Debug {
    /// Short name for logs and reports.
    ///
    /// ```
    /// use lowtide_proto::ControllerConfig;
    /// assert_eq!(ControllerConfig::default().build()?.name(), "min_buf");
    /// assert_eq!(ControllerConfig::Unlimited.build()?.name(), "unlimited");
    /// # Ok::<(), lowtide_proto::ConfigError>(())
    /// ```
    fn name(&self) -> &'static str;
    /// Whether [`decide`](Self::decide) reads the kernel snapshot (the driver may skip sampling
    /// `TCP_INFO` otherwise).
    ///
    /// ```
    /// use lowtide_proto::ControllerConfig;
    /// // MinBuf sizes its limit from cwnd; PaceA only from its P-ACKs.
    /// assert!(ControllerConfig::MinBuf { a: 1, b: 3 }.build()?.needs_tcp_state());
    /// assert!(!ControllerConfig::PaceA { b: 3 }.build()?.needs_tcp_state());
    /// # Ok::<(), lowtide_proto::ConfigError>(())
    /// ```
    fn needs_tcp_state(&self) -> bool;
    /// Whether [`decide`](Self::decide) must also see the kernel while the connection has
    /// nothing to send (it follows the queue over time, as DBAT's congestion detection does).
    /// A controller whose decision is a pure function of its inputs returns `false`, and the
    /// driver then skips the kernel sample and the decision while nothing is queued or staged.
    ///
    /// ```
    /// use lowtide_proto::{controller::DbatConfig, ControllerConfig};
    /// // MinBuf's limit is a function of the sample it is given; DBAT averages the queue.
    /// assert!(!ControllerConfig::MinBuf { a: 1, b: 3 }.build()?.watches_idle());
    /// assert!(ControllerConfig::Dbat(DbatConfig::default()).build()?.watches_idle());
    /// # Ok::<(), lowtide_proto::ConfigError>(())
    /// ```
    fn watches_idle(&self) -> bool {
        true
    }
    /// The decision for this write opportunity.
    ///
    /// ```
    /// use lowtide_proto::controller::{AppProgress, TcpState};
    /// use lowtide_proto::ControllerConfig;
    /// # let now = std::time::Instant::now();
    /// let mut c = ControllerConfig::MinBuf { a: 1, b: 3 }.build()?;
    /// let tcp = TcpState { cwnd: 10, mss: 1000, outq: 4000, ..TcpState::default() };
    /// let app = AppProgress { staged: 2000, ..AppProgress::default() };
    /// let d = c.decide(&tcp, &app, now);
    /// // (1·10 + 3) segments = 13 000 bytes, 6000 of them occupied (kernel queue + staged).
    /// assert_eq!((d.limit, d.allowance), (13_000, 7000));
    /// # Ok::<(), lowtide_proto::ConfigError>(())
    /// ```
    fn decide(&mut self, tcp: &TcpState, app: &AppProgress, now: Instant) -> Decision;
    /// A P-ACK arrived (only [`PaceA`] uses it).
    ///
    /// ```
    /// use lowtide_proto::controller::{AppProgress, LatencyController, PAckSample, PaceA, TcpState};
    /// use std::time::{Duration, Instant};
    /// let (t0, ms) = (Instant::now(), Duration::from_millis);
    /// let mut c = PaceA::new(0);
    /// // Two P-ACKs 20 ms apart, 20 000 bytes consumed in between: 1 MB/s, 20 ms latency.
    /// c.on_pack(&PAckSample { now: t0 + ms(20), bytes: 10_000, recv_time_us: 10_000, covered_write_time: Some(t0) });
    /// c.on_pack(&PAckSample { now: t0 + ms(40), bytes: 30_000, recv_time_us: 30_000, covered_write_time: Some(t0 + ms(20)) });
    /// let tcp = TcpState { mss: 1000, ..TcpState::default() };
    /// let d = c.decide(&tcp, &AppProgress::default(), t0 + ms(40));
    /// assert!((19_999..=20_000).contains(&d.limit)); // cwnd' = 1 MB/s × 20 ms
    /// ```
    fn on_pack(&mut self, _sample: &PAckSample) {}
    /// A packet-pair probe finished (only [`DbatController`] uses it).
    ///
    /// ```
    /// use lowtide_proto::controller::{DbatController, DbatConfig, LatencyController, ProbeResult};
    /// use std::time::Duration;
    /// let mut c = DbatController::new(DbatConfig::default())?;
    /// let probe = ProbeResult::from_dispersion(Duration::from_millis(100), Duration::from_millis(16), 1000, Duration::from_micros(50));
    /// c.on_probe(&probe);
    /// assert_eq!(c.dbat().probe(), Some(probe));
    /// // The other controllers ignore probes.
    /// let mut minbuf = lowtide_proto::ControllerConfig::default().build()?;
    /// minbuf.on_probe(&probe);
    /// # Ok::<(), lowtide_proto::ConfigError>(())
    /// ```
    fn on_probe(&mut self, _probe: &ProbeResult) {}
    /// The application's stream bit rate changed, bytes per second (DBAT's slow start).
    ///
    /// ```
    /// use lowtide_proto::controller::{DbatConfig, DbatController, LatencyController};
    /// let mut c = DbatController::new(DbatConfig { bit_rate_kbps: 320, ..DbatConfig::default() })?;
    /// assert_eq!(c.dbat().stream_rate(), 40_000); // 320 kbit/s
    /// c.set_stream_rate(80_000); // the encoder switched to 640 kbit/s
    /// assert_eq!(c.dbat().stream_rate(), 80_000);
    /// # Ok::<(), lowtide_proto::ConfigError>(())
    /// ```
    fn set_stream_rate(&mut self, _bytes_per_sec: u64) {}
    /// The next congestion signal for the application (only [`DbatController`] has any).
    ///
    /// ```
    /// use lowtide_proto::controller::{AppProgress, DbatConfig, DbatController, LatencyController, TcpState};
    /// use std::time::{Duration, Instant};
    /// let (t0, ms) = (Instant::now(), Duration::from_millis);
    /// let mut c = DbatController::new(DbatConfig::default())?; // 40 kB/s
    /// let tcp = TcpState { cwnd: 10, mss: 1000, rtt: ms(100), delivery_rate: 40_000, ..TcpState::default() };
    /// let queued = |outq| TcpState { outq, ..tcp };
    /// c.decide(&queued(1000), &AppProgress::default(), t0); // slow start begins
    /// c.decide(&queued(1000), &AppProgress::default(), t0 + ms(200)); // caught up: steady
    /// assert_eq!(c.poll_signal(), None);
    /// // A queue of 100 kB against a threshold of 40 kB/s × 100 ms = 4 kB: congestion.
    /// c.decide(&queued(100_000), &AppProgress::default(), t0 + ms(1200));
    /// let s = c.poll_signal().expect("an onset");
    /// assert!(s.onset && s.threshold == 4000);
    /// # Ok::<(), lowtide_proto::ConfigError>(())
    /// ```
    fn poll_signal(&mut self) -> Option<CongestionSignal> {
        None
    }
    /// DBAT's queue average and threshold, bytes (only [`DbatController`] has them): an
    /// application going up a bit rate checks the queue is well below the threshold.
    ///
    /// ```
    /// use lowtide_proto::controller::{AppProgress, DbatConfig, DbatController, LatencyController, TcpState};
    /// # let now = std::time::Instant::now();
    /// let mut c = DbatController::new(DbatConfig::default())?;
    /// assert_eq!(c.queue_level(), None);
    /// let tcp = TcpState { cwnd: 10, mss: 1000, outq: 3000, rtt: std::time::Duration::from_millis(100), ..TcpState::default() };
    /// c.decide(&tcp, &AppProgress::default(), now);
    /// // no probe yet: TCP's window rate (10 kB per 100 ms) × 100 ms
    /// assert_eq!(c.queue_level(), Some((3000, 10_000)));
    /// # Ok::<(), lowtide_proto::ConfigError>(())
    /// ```
    fn queue_level(&self) -> Option<(u64, u64)> {
        None
    }
}

/// Controller choice, as found in configuration files.
///
/// ```
/// use lowtide_proto::{Config, ControllerConfig};
/// let cfg: Config = toml::from_str("controller = { pace_a = { b = 2 } }").unwrap();
/// assert_eq!(cfg.controller, ControllerConfig::PaceA { b: 2 });
/// assert_eq!(cfg.controller.build()?.name(), "pace_a");
/// // Parameters are checked; the error names the field.
/// let e = ControllerConfig::MinBuf { a: 0, b: 3 }.validate().unwrap_err();
/// assert_eq!(e.field, "controller.min_buf.a");
/// # Ok::<(), lowtide_proto::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ControllerConfig {
    /// Plain TCP.
    Unlimited,
    /// The kernel's `TCP_NOTSENT_LOWAT` with this many bytes.
    NotsentLowat {
        /// Threshold, bytes.
        bytes: u32,
    },
    /// Goel et al.'s MIN_BUF(a, b) with the SACK correction (Paceline's PaceK).
    MinBuf {
        /// Multiple of cwnd.
        a: u32,
        /// Extra segments, capped at cwnd.
        b: u32,
    },
    /// Paceline's PaceA: cwnd' = latency × bandwidth from P-ACKs.
    PaceA {
        /// Extra segments beyond cwnd'.
        b: u32,
    },
    /// Hasan et al.'s DBAT: buffer for slow start, then near the probed BDP, with congestion
    /// signals (`{ dbat = { bit_rate_kbps = 320 } }`).
    Dbat(DbatConfig),
}

impl Default for ControllerConfig {
    /// MIN_BUF(1, 3), the paper's best trade-off.
    fn default() -> Self {
        ControllerConfig::MinBuf { a: 1, b: 3 }
    }
}

/// The names the command line and the GStreamer sink accept: `tcp` or `unlimited`,
/// `min-buf[:A,B]` (also `minbuf`; default 1,3), `notsent-lowat[:BYTES]` (default 4344),
/// `pace-a[:B]` (default 3). The error names what is wrong and what is allowed.
///
/// ```
/// use lowtide_proto::ControllerConfig;
/// assert_eq!("unlimited".parse(), Ok(ControllerConfig::Unlimited));
/// assert_eq!("minbuf".parse(), Ok(ControllerConfig::MinBuf { a: 1, b: 3 }));
/// assert_eq!("min-buf:2,5".parse(), Ok(ControllerConfig::MinBuf { a: 2, b: 5 }));
/// assert_eq!("notsent-lowat".parse(), Ok(ControllerConfig::NotsentLowat { bytes: 4344 }));
/// let e = "bbr".parse::<ControllerConfig>().unwrap_err();
/// assert!(e.contains("tcp, min-buf:A,B"), "{e}");
/// assert!("min-buf:x".parse::<ControllerConfig>().unwrap_err().contains("\"x\""));
/// ```
impl std::str::FromStr for ControllerConfig {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (name, arg) = s.split_once(':').unwrap_or((s, ""));
        let num = |v: &str| -> Result<u32, String> {
            v.trim()
                .parse()
                .map_err(|_| format!("{v:?} in controller {s} is not a whole number"))
        };
        let or = |v: &'static str| if arg.is_empty() { v } else { arg };
        Ok(match name {
            "tcp" | "unlimited" => ControllerConfig::Unlimited,
            "min-buf" | "minbuf" | "min_buf" => {
                let (a, b) = arg.split_once(',').unwrap_or((or("1"), "3"));
                ControllerConfig::MinBuf {
                    a: num(a)?,
                    b: num(b)?,
                }
            }
            "notsent-lowat" => ControllerConfig::NotsentLowat {
                bytes: num(or("4344"))?,
            },
            "pace-a" => ControllerConfig::PaceA { b: num(or("3"))? },
            _ => {
                return Err(format!(
                    "controller {s}: use tcp, min-buf:A,B, notsent-lowat:BYTES or pace-a:B"
                ))
            }
        })
    }
}

impl ControllerConfig {
    /// Checks the parameters.
    ///
    /// ```
    /// use lowtide_proto::ControllerConfig;
    /// assert!(ControllerConfig::MinBuf { a: 1, b: 3 }.validate().is_ok());
    /// let e = ControllerConfig::NotsentLowat { bytes: 0 }.validate().unwrap_err();
    /// assert_eq!((e.field, e.allowed), ("controller.notsent_lowat.bytes", "1..=1073741824"));
    /// ```
    pub fn validate(&self) -> Result<(), ConfigError> {
        match *self {
            ControllerConfig::Unlimited => Ok(()),
            ControllerConfig::NotsentLowat { bytes } => check_range(
                "controller.notsent_lowat.bytes",
                bytes,
                1,
                1 << 30,
                "1..=1073741824",
            ),
            ControllerConfig::MinBuf { a, b } => {
                check_range("controller.min_buf.a", a, 1, 64, "1..=64")?;
                check_range("controller.min_buf.b", b, 0, 1024, "0..=1024")
            }
            ControllerConfig::PaceA { b } => {
                check_range("controller.pace_a.b", b, 0, 1024, "0..=1024")
            }
            ControllerConfig::Dbat(cfg) => cfg.validate(),
        }
    }

    /// Builds the controller after validating it.
    ///
    /// ```
    /// use lowtide_proto::ControllerConfig;
    /// let c = ControllerConfig::NotsentLowat { bytes: 16_384 }.build()?;
    /// assert_eq!(c.name(), "notsent_lowat");
    /// // A bad parameter is an error, not a controller.
    /// assert!(ControllerConfig::PaceA { b: 5000 }.build().is_err());
    /// # Ok::<(), lowtide_proto::ConfigError>(())
    /// ```
    pub fn build(&self) -> Result<Box<dyn LatencyController>, ConfigError> {
        self.validate()?;
        Ok(match *self {
            ControllerConfig::Unlimited => Box::new(Unlimited),
            ControllerConfig::NotsentLowat { bytes } => {
                Box::new(NotsentLowatController::new(bytes))
            }
            ControllerConfig::MinBuf { a, b } => Box::new(MinBuf::new(a, b)),
            ControllerConfig::PaceA { b } => Box::new(PaceA::new(b)),
            ControllerConfig::Dbat(cfg) => Box::new(DbatController::new(cfg)?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_errors_name_the_parameter() {
        let e = ControllerConfig::MinBuf { a: 0, b: 3 }.build().unwrap_err();
        assert_eq!(e.field, "controller.min_buf.a");
        let e = ControllerConfig::NotsentLowat { bytes: 0 }
            .build()
            .unwrap_err();
        assert_eq!(e.field, "controller.notsent_lowat.bytes");
        assert_eq!(
            ControllerConfig::default().build().unwrap().name(),
            "min_buf"
        );
    }

    #[test]
    fn dbat_reads_from_toml_and_is_checked() {
        #[derive(serde::Deserialize)]
        struct File {
            controller: ControllerConfig,
        }
        let f: File =
            toml::from_str("controller = { dbat = { bit_rate_kbps = 640, smoothing_rtts = 4.0 } }")
                .unwrap();
        let ControllerConfig::Dbat(cfg) = f.controller else {
            panic!("not dbat: {:?}", f.controller)
        };
        assert_eq!(cfg.bit_rate_kbps, 640);
        assert_eq!(cfg.initial_window, DbatConfig::default().initial_window);
        assert_eq!(f.controller.build().unwrap().name(), "dbat");
        let bad: File = toml::from_str("controller = { dbat = { clear_fraction = 2.0 } }").unwrap();
        assert_eq!(
            bad.controller.build().unwrap_err().field,
            "controller.dbat.clear_fraction"
        );
        assert!(toml::from_str::<File>("controller = { dbat = { nope = 1 } }").is_err());
    }
}
