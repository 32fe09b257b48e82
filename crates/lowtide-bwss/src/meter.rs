//! A flow's rate over a sliding window, from readings of a cumulative byte counter.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Readings of one flow's byte counter; the rate is taken over the last `window`.
#[derive(Debug, Clone)]
pub struct Meter {
    window: Duration,
    /// (when, cumulative bytes), oldest first; the oldest is at most one reading older than
    /// `now - window`.
    readings: VecDeque<(Instant, u64)>,
    started: Instant,
}

impl Meter {
    pub fn new(now: Instant, window: Duration) -> Self {
        Self {
            window,
            readings: VecDeque::new(),
            started: now,
        }
    }

    /// Records the counter's value at `now` (it never goes down; a smaller value is ignored).
    pub fn record(&mut self, now: Instant, bytes: u64) {
        if let Some(&(t, b)) = self.readings.back() {
            if now < t || bytes < b {
                return;
            }
        }
        self.readings.push_back((now, bytes));
        while self.readings.len() > 2 && now.duration_since(self.readings[1].0) >= self.window {
            self.readings.pop_front();
        }
    }

    /// Bit/s over the last full window; `None` while the flow is younger than the window.
    pub fn rate(&self, now: Instant) -> Option<f64> {
        if now.duration_since(self.started) < self.window {
            return None;
        }
        let &(t1, b1) = self.readings.back()?;
        let &(t0, b0) = self.readings.front()?;
        let span = t1.duration_since(t0).as_secs_f64();
        (span > 0.0).then(|| (b1 - b0) as f64 * 8.0 / span)
    }

    /// Bit/s over the most recent `span` (at most the window: the readings kept cover no
    /// more), from the newest reading back to the last one at least `span` older; `None`
    /// while the flow is younger than the window or no reading is that old.
    pub fn recent_rate(&self, now: Instant, span: Duration) -> Option<f64> {
        if now.duration_since(self.started) < self.window {
            return None;
        }
        let &(t1, b1) = self.readings.back()?;
        let &(t0, b0) = self
            .readings
            .iter()
            .rev()
            .find(|(t, _)| t1.duration_since(*t) >= span)?;
        let dt = t1.duration_since(t0).as_secs_f64();
        Some((b1 - b0) as f64 * 8.0 / dt)
    }

    /// Bit/s since the flow started (for flows younger than a window).
    pub fn rate_since_start(&self, now: Instant) -> f64 {
        let span = now.duration_since(self.started).as_secs_f64();
        match self.readings.back() {
            Some(&(_, b)) if span > 0.0 => b as f64 * 8.0 / span,
            _ => 0.0,
        }
    }

    /// The counter's last reading.
    pub fn total(&self) -> u64 {
        self.readings.back().map_or(0, |r| r.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_over_the_window_only() {
        let t0 = Instant::now();
        let ms = |m| t0 + Duration::from_millis(m);
        let mut m = Meter::new(t0, Duration::from_secs(1));
        let mut bytes = 0;
        for i in 0..=10 {
            m.record(ms(i * 100), bytes);
            bytes += 10_000; // 800 kbit/s
        }
        assert!(m.rate(ms(900)).is_none(), "younger than the window");
        assert!((m.rate(ms(1000)).unwrap() - 800e3).abs() < 1.0);
        bytes -= 10_000;
        for i in 11..=20 {
            bytes += 2_500; // 200 kbit/s
            m.record(ms(i * 100), bytes);
        }
        assert!((m.rate(ms(2000)).unwrap() - 200e3).abs() < 1.0);
        assert!(m.readings.len() <= 12);
        // The last 500 ms only: 200 kbit/s, also right after a change of rate.
        assert!((m.recent_rate(ms(2000), Duration::from_millis(500)).unwrap() - 200e3).abs() < 1.0);
        bytes += 12_500; // 1 Mbit/s for 100 ms
        m.record(ms(2100), bytes);
        let recent = m.recent_rate(ms(2100), Duration::from_millis(500)).unwrap();
        assert!((recent - 360e3).abs() < 1.0, "{recent}");
        assert!(m.recent_rate(ms(2100), Duration::from_secs(5)).is_none());
        m.record(ms(1500), 0);
        assert_eq!(m.total(), bytes);
    }
}
