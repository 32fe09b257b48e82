//! DBAT as the lowtide channel's latency controller over TCP.

use std::time::Instant;

use super::{CongestionSignal, Dbat, DbatConfig, ProbeResult};
use crate::config::ConfigError;
use crate::controller::{AppProgress, Decision, LatencyController, TcpState};

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
    pub(super) dbat: Dbat,
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
        crate::controller::min_buf::decide_for_limit(limit, tcp, app, now)
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
