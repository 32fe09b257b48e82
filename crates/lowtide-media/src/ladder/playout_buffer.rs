//! The client of a server-switched ladder (Hasan, Huang, Werstein, Section 5, after the
//! Goddard client): a playout buffer of media time that starts playing once `startup` is
//! buffered, counts a **rebuffer** each time it runs empty (play stops until `resume` is
//! buffered again), and the [`ClientReport`] per interval that the server's
//! [`super::report_rule`] reads: frames expected (from sequence numbers), frames received,
//! rebuffers, bytes.
//!
//! Where we differ: Goddard's buffer sizes and report interval are not in the paper; both are
//! config fields here. A frame that arrives after its play time still fills the buffer (the
//! model counts media time, not deadlines); one that never arrives is a lost frame.

use std::time::{Duration, Instant};

use serde::Serialize;

use super::server_policy::ClientReport;

/// Sequence numbers more than this far ahead of the highest seen are refused (a garbage
/// number must not count millions of lost frames).
pub const MAX_SEQ_JUMP: u64 = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum PlayState {
    /// Filling before the first play.
    Starting,
    Playing,
    /// Ran empty; filling to `resume`.
    Rebuffering,
}

#[derive(Debug, Clone)]
pub struct PlayoutBuffer {
    startup: Duration,
    resume: Duration,
    state: PlayState,
    /// Media time buffered (not yet played), at `at`.
    buffered: Duration,
    at: Instant,
    /// Rebuffers, and media time played, since the start.
    pub rebuffers: u64,
    pub played: Duration,
    /// Time spent stalled after the first play.
    pub stalled: Duration,
    // report state
    next_seq: Option<u64>,
    expected: u64,
    received: u64,
    bytes: u64,
    rebuffers_reported: u64,
    interval_start: Instant,
    /// Frames refused: sequence number beyond [`MAX_SEQ_JUMP`].
    pub refused: u64,
}

impl PlayoutBuffer {
    pub fn new(startup: Duration, resume: Duration, now: Instant) -> Self {
        PlayoutBuffer {
            startup,
            resume,
            state: PlayState::Starting,
            buffered: Duration::ZERO,
            at: now,
            rebuffers: 0,
            played: Duration::ZERO,
            stalled: Duration::ZERO,
            next_seq: None,
            expected: 0,
            received: 0,
            bytes: 0,
            rebuffers_reported: 0,
            interval_start: now,
            refused: 0,
        }
    }

    pub fn state(&self) -> PlayState {
        self.state
    }

    /// Media time buffered at the last update.
    pub fn buffered(&self) -> Duration {
        self.buffered
    }

    /// Plays out until `now`: an empty buffer while playing is a rebuffer.
    pub fn advance(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.at);
        self.at = self.at.max(now);
        match self.state {
            PlayState::Playing if dt >= self.buffered => {
                self.played += self.buffered;
                self.stalled += dt - self.buffered;
                self.buffered = Duration::ZERO;
                self.state = PlayState::Rebuffering;
                self.rebuffers += 1;
            }
            PlayState::Playing => {
                self.played += dt;
                self.buffered -= dt;
            }
            PlayState::Rebuffering => self.stalled += dt,
            PlayState::Starting => {}
        }
    }

    /// Frame `seq` of `media` duration and `bytes` arrived at `now`; `false` if refused.
    pub fn on_frame(&mut self, now: Instant, seq: u64, media: Duration, bytes: u64) -> bool {
        self.advance(now);
        let next = self.next_seq.unwrap_or(seq);
        if seq > next.saturating_add(MAX_SEQ_JUMP) {
            self.refused += 1;
            return false;
        }
        if seq >= next {
            self.expected += seq + 1 - next;
            self.next_seq = Some(seq + 1);
        }
        self.received += 1;
        self.bytes += bytes;
        self.buffered += media;
        let target = match self.state {
            PlayState::Starting => Some(self.startup),
            PlayState::Rebuffering => Some(self.resume),
            PlayState::Playing => None,
        };
        if target.is_some_and(|t| self.buffered >= t) {
            self.state = PlayState::Playing;
        }
        true
    }

    /// The report for the interval since the last one, ending at `now`.
    pub fn report(&mut self, now: Instant) -> ClientReport {
        self.advance(now);
        let r = ClientReport {
            frames_expected: self.expected,
            // a late frame of an earlier interval counts where it arrived
            frames_received: self.received.min(self.expected),
            rebuffers: self.rebuffers - self.rebuffers_reported,
            bytes: self.bytes,
            duration_us: now
                .saturating_duration_since(self.interval_start)
                .as_micros() as u64,
        };
        self.expected = 0;
        self.received = 0;
        self.bytes = 0;
        self.rebuffers_reported = self.rebuffers;
        self.interval_start = now;
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_after_startup_rebuffers_when_empty_and_reports_losses() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut b = PlayoutBuffer::new(ms(2000), ms(1000), t0);
        // 20 frames a second of 50 ms each; frames 5 and 6 lost
        let mut seq = 0;
        for i in 0..60u32 {
            let now = t0 + ms(50) * i;
            if seq != 5 && seq != 6 {
                b.on_frame(now, seq, ms(50), 1000);
            }
            seq += 1;
        }
        // 58 frames = 2.9 s of media arrived over 3 s; playing since the 40th, at 2.05 s
        assert_eq!(b.state(), PlayState::Playing);
        let r = b.report(t0 + ms(3000));
        assert_eq!(
            (r.frames_expected, r.frames_received, r.rebuffers),
            (60, 58, 0)
        );
        assert_eq!(r.bps(), Some(58_000.0 * 8.0 / 3.0));
        // the server stops for 3 s: the buffer runs dry, one rebuffer
        b.advance(t0 + ms(6000));
        assert_eq!(b.state(), PlayState::Rebuffering);
        // frames again: play resumes after 1 s of media
        for i in 0..30u32 {
            b.on_frame(t0 + ms(6000) + ms(50) * i, seq, ms(50), 1000);
            seq += 1;
        }
        assert_eq!(b.state(), PlayState::Playing);
        let r = b.report(t0 + ms(7500));
        assert_eq!(
            (r.frames_expected, r.frames_received, r.rebuffers),
            (30, 30, 1)
        );
        assert_eq!(b.rebuffers, 1);
        // played: 0.95 s until 3 s, the 1.95 s buffered then ran out at 4.95 s; 0.55 s since
        // play resumed at 6.95 s
        assert_eq!(b.played, ms(2900) + ms(550));
        assert_eq!(b.stalled, ms(2000));
        // a reordered frame counts once; an absurd jump is refused
        assert!(b.on_frame(t0 + ms(7600), seq - 3, ms(50), 1000));
        assert!(!b.on_frame(t0 + ms(7600), u64::MAX, ms(50), 1000));
        let r = b.report(t0 + ms(8000));
        assert_eq!((r.frames_expected, r.frames_received, b.refused), (0, 0, 1));
        assert_eq!(r.loss(), None, "no frames expected: no data");
    }
}
