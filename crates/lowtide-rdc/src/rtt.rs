//! A flow's round-trip time, measured at the receiver.
//!
//! With TCP timestamps (RFC 7323) the sender echoes, in each segment's TSecr, the TSval of the
//! latest ACK it received. The agent notes when each TSval left the host (after its hold), so
//! a data segment echoing it gives one sample of the path's round trip without the imposed
//! delay: ACK released → sender → data back. The estimate is the minimum over a window (10 s),
//! which removes the time an application-limited sender waited before sending again.
//!
//! Without timestamps, the handshake gives one sample (SYN-ACK out → first ACK in) if the agent
//! saw it; otherwise the configured default RTT is used. The source is reported per flow.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde::Serialize;

/// TSvals remembered per flow; older ones are forgotten (a sender echoes recent ones).
const REMEMBERED: usize = 256;
/// Samples kept for the windowed minimum.
const SAMPLES: usize = 256;

/// Where a flow's RTT estimate comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RttSource {
    Timestamps,
    Handshake,
    Default,
}

#[derive(Debug, Clone, Copy)]
struct Sent {
    tsval: u32,
    released: Option<Instant>,
}

#[derive(Debug, Clone, Default)]
pub struct RttEstimator {
    sent: VecDeque<Sent>,
    /// (when, sample), increasing in both: the front is the window's minimum.
    samples: VecDeque<(Instant, Duration)>,
    synack_at: Option<Instant>,
    handshake: Option<Duration>,
    timestamp_samples: u64,
}

impl RttEstimator {
    /// An outgoing segment carried `tsval`; it leaves the host at `released` (None: held).
    pub fn on_sent(&mut self, tsval: u32, released: Option<Instant>) {
        if self.sent.back().is_some_and(|s| s.tsval == tsval) {
            return;
        }
        if self.sent.len() == REMEMBERED {
            self.sent.pop_front();
        }
        self.sent.push_back(Sent { tsval, released });
    }

    /// A held segment that carried `tsval` left the host at `now`.
    pub fn on_released(&mut self, tsval: u32, now: Instant) {
        if let Some(s) = self.sent.iter_mut().rev().find(|s| s.tsval == tsval) {
            s.released.get_or_insert(now);
        }
    }

    /// An incoming segment echoed `tsecr` at `now`; returns the sample it gave.
    pub fn on_echo(&mut self, tsecr: u32, now: Instant, window: Duration) -> Option<Duration> {
        let i = self.sent.iter().rposition(|s| s.tsval == tsecr)?;
        let released = self.sent[i].released?;
        self.sent.drain(..=i);
        let sample = now.saturating_duration_since(released);
        self.timestamp_samples += 1;
        self.push(now, sample, window);
        Some(sample)
    }

    /// The host answered a SYN at `now`.
    pub fn on_synack(&mut self, now: Instant) {
        self.synack_at = Some(now);
    }

    /// The first segment after the SYN-ACK arrived at `now`.
    pub fn on_handshake_done(&mut self, now: Instant) {
        if let Some(at) = self.synack_at.take() {
            self.handshake = Some(now.saturating_duration_since(at));
        }
    }

    fn push(&mut self, now: Instant, sample: Duration, window: Duration) {
        while self.samples.back().is_some_and(|(_, s)| *s >= sample) {
            self.samples.pop_back();
        }
        if self.samples.len() == SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back((now, sample));
        while self
            .samples
            .front()
            .is_some_and(|(t, _)| now.saturating_duration_since(*t) > window)
        {
            self.samples.pop_front();
        }
    }

    /// The path's round trip (without the imposed delay) and where it comes from.
    pub fn estimate(&self, default: Duration) -> (Duration, RttSource) {
        if let Some((_, s)) = self.samples.front() {
            (*s, RttSource::Timestamps)
        } else if let Some(h) = self.handshake {
            (h, RttSource::Handshake)
        } else {
            (default, RttSource::Default)
        }
    }

    pub fn timestamp_samples(&self) -> u64 {
        self.timestamp_samples
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: Duration = Duration::from_secs(10);

    #[test]
    fn an_echo_measures_from_the_release_not_from_the_hold() {
        let t0 = Instant::now();
        let mut r = RttEstimator::default();
        assert_eq!(r.estimate(Duration::from_millis(100)).1, RttSource::Default);
        r.on_sent(1000, None);
        // Held 30 ms, then released; the echo comes 42 ms after the release.
        r.on_released(1000, t0 + Duration::from_millis(30));
        let s = r.on_echo(1000, t0 + Duration::from_millis(72), W);
        assert_eq!(s, Some(Duration::from_millis(42)));
        assert_eq!(
            r.estimate(Duration::ZERO),
            (Duration::from_millis(42), RttSource::Timestamps)
        );
        // The same TSval is echoed once; an unknown one gives nothing.
        assert_eq!(r.on_echo(1000, t0 + Duration::from_millis(90), W), None);
        assert_eq!(r.on_echo(7, t0 + Duration::from_millis(90), W), None);
    }

    #[test]
    fn the_estimate_is_the_windowed_minimum() {
        let t0 = Instant::now();
        let mut r = RttEstimator::default();
        let ms = Duration::from_millis;
        for (i, rtt) in [50u64, 40, 60, 45].iter().enumerate() {
            let sent = t0 + ms(100 * i as u64);
            r.on_sent(i as u32, Some(sent));
            r.on_echo(i as u32, sent + ms(*rtt), W);
        }
        assert_eq!(r.estimate(ms(1)).0, ms(40));
        // 11 s later the 40 ms sample has left the window.
        let late = t0 + Duration::from_secs(11);
        r.on_sent(99, Some(late));
        r.on_echo(99, late + ms(55), W);
        assert_eq!(r.estimate(ms(1)).0, ms(55));
    }

    #[test]
    fn without_timestamps_the_handshake_then_the_default() {
        let t0 = Instant::now();
        let mut r = RttEstimator::default();
        r.on_synack(t0);
        r.on_handshake_done(t0 + Duration::from_millis(33));
        assert_eq!(
            r.estimate(Duration::from_millis(100)),
            (Duration::from_millis(33), RttSource::Handshake)
        );
    }

    #[test]
    fn memory_is_bounded() {
        let t0 = Instant::now();
        let mut r = RttEstimator::default();
        for v in 0..10_000u32 {
            r.on_sent(v, Some(t0));
        }
        assert_eq!(r.sent.len(), REMEMBERED);
        for v in 0..10_000u32 {
            r.on_sent(v, Some(t0));
            r.on_echo(
                v,
                t0 + Duration::from_millis(u64::from(10_000 - v)),
                Duration::from_secs(600),
            );
        }
        assert!(r.samples.len() <= SAMPLES);
    }
}
