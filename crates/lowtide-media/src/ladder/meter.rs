//! Bytes in, one [`ThroughputSample`] per interval out: what a player's throughput display
//! shows (bytes delivered to the application, not to the socket).

use std::time::{Duration, Instant};

use super::ThroughputSample;

#[derive(Debug, Clone)]
pub struct ThroughputMeter {
    interval: Duration,
    start: Instant,
    bytes: u64,
}

impl ThroughputMeter {
    /// Samples of `interval` (at least 1 ms), the first starting at `now`.
    pub fn new(now: Instant, interval: Duration) -> Self {
        ThroughputMeter {
            interval: interval.max(Duration::from_millis(1)),
            start: now,
            bytes: 0,
        }
    }

    pub fn on_bytes(&mut self, n: usize) {
        self.bytes += n as u64;
    }

    /// When the current sample ends.
    pub fn poll_timeout(&self) -> Instant {
        self.start + self.interval
    }

    /// The sample that ended, once `now` has reached its end. A late call closes the sample
    /// at `now` (its duration is what really passed), so no time is lost between samples.
    pub fn poll_sample(&mut self, now: Instant) -> Option<ThroughputSample> {
        if now < self.poll_timeout() {
            return None;
        }
        let s = ThroughputSample {
            end: now,
            duration: now - self.start,
            bytes: std::mem::take(&mut self.bytes),
        };
        self.start = now;
        Some(s)
    }

    /// The last, partial sample when measuring stops at `now`; `None` if no time passed.
    pub fn finish(&mut self, now: Instant) -> Option<ThroughputSample> {
        let duration = now.saturating_duration_since(self.start);
        (!duration.is_zero()).then(|| {
            self.start = now;
            ThroughputSample {
                end: now,
                duration,
                bytes: std::mem::take(&mut self.bytes),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_cover_time_without_gaps() {
        let t0 = Instant::now();
        let mut m = ThroughputMeter::new(t0, Duration::from_secs(1));
        m.on_bytes(1000);
        assert_eq!(m.poll_sample(t0 + Duration::from_millis(999)), None);
        let s = m.poll_sample(t0 + Duration::from_millis(1200)).unwrap();
        assert_eq!((s.duration, s.bytes), (Duration::from_millis(1200), 1000));
        assert_eq!(m.poll_timeout(), t0 + Duration::from_millis(2200));
        let s = m.poll_sample(t0 + Duration::from_millis(2200)).unwrap();
        assert_eq!((s.bytes, s.bps()), (0, Some(0.0)));
        m.on_bytes(10);
        let s = m.finish(t0 + Duration::from_millis(2300)).unwrap();
        assert_eq!((s.duration, s.bytes), (Duration::from_millis(100), 10));
        assert_eq!(m.finish(t0 + Duration::from_millis(2300)), None);
    }
}
