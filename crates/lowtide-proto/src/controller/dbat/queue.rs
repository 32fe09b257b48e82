//! The queue samples: the weighted average against the threshold, the up-switch watch,
//! and the transport's loss repair.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::{Dbat, Phase};

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
pub(super) struct RiseWatch {
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

impl Dbat {
    /// A sample of the send queue (bytes waiting or unacknowledged at the sender) at `now`.
    /// Updates the average and the phase; a crossing queues a [`CongestionSignal`](super::CongestionSignal).
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
}
