//! The buffer DBAT plans for: slow start's allowance, then the queue threshold (the
//! probed bandwidth-delay product, bounded by the transport's achieved rate).

use std::time::Duration;

use super::{Dbat, Phase};

/// After slow start, the bandwidth in the threshold is at most this multiple of the
/// transport's achieved rate. Twice, not once: over TCP the queue DBAT watches includes the
/// bytes in flight, one achieved rate × RTT on a healthy path.
const SHARE_BOUND: f64 = 2.0;

impl Dbat {
    /// The RTT to plan with: the transport's weighted RTT, else the probe's, else the fallback.
    pub(super) fn rtt(&self, srtt: Option<Duration>) -> Duration {
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
}
