//! Server-side switching (Hasan, Huang, Werstein, "Dynamic Send Buffer Active Tuning for Low
//! Latency Streaming Media", Section 5): the server holds the encodings (the paper's 80, 120,
//! 240, 320 and 640 kbit/s) and picks the one to stream from what it hears: a packet-pair
//! probe at session start, the client's reports (loss, rebuffering) and, with DBAT, the
//! transport's congestion signals. The client-side rule ([`super::throughput_rule`]) picks
//! from its own throughput samples instead; both share the [`Ladder`].
//!
//! This file: the signals ([`ServerSignal`], [`ClientReport`]), the [`ServerPolicy`] trait
//! that [`super::report_rule`] (the paper's baseline server) and [`super::dbat_rule`] (DBAT's
//! server) implement, the switch record, and the two steps both rules share: the first rung
//! from the probe, and up-switches as probes with backoff ([`UpProbe`]).

use std::time::{Duration, Instant};

use serde::Serialize;

use super::Ladder;

/// The paper's encodings: 80, 120, 240, 320 and 640 kbit/s.
pub fn hasan_ladder() -> Ladder {
    Ladder::new(&[80_000, 120_000, 240_000, 320_000, 640_000]).expect("a valid ladder")
}

/// What the client reports about one interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ClientReport {
    /// Media frames the server sent for the interval (the client learns it from sequence
    /// numbers).
    pub frames_expected: u64,
    /// Of those, frames that arrived.
    pub frames_received: u64,
    /// Times the playout buffer ran empty during the interval.
    pub rebuffers: u64,
    /// Media bytes received and the interval's length, for the receive rate.
    pub bytes: u64,
    /// Interval length, microseconds.
    pub duration_us: u64,
}

impl ClientReport {
    /// The fraction of frames lost; `None` when none were expected (no data, not 0).
    pub fn loss(&self) -> Option<f64> {
        (self.frames_expected > 0).then(|| {
            self.frames_expected.saturating_sub(self.frames_received) as f64
                / self.frames_expected as f64
        })
    }

    /// Receive rate, bit/s; `None` for an empty interval.
    pub fn bps(&self) -> Option<f64> {
        (self.duration_us > 0).then(|| self.bytes as f64 * 8e6 / self.duration_us as f64)
    }
}

/// What a server policy hears.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ServerSignal {
    /// The session-start packet pair finished; `None`: no estimate (both packets in one read).
    Probed {
        /// Bottleneck estimate, bit/s.
        bandwidth_bps: Option<u64>,
        /// The rate the transport's slow start begins at (its initial window per probed
        /// RTT), bit/s; `None` when unknown. [`super::dbat_rule`] starts on a rung slow start
        /// reaches soon.
        ramp_start_bps: Option<u64>,
    },
    /// A client report.
    Report(ClientReport),
    /// A fresh estimate of what the path gives this stream, bit/s (TFRC's equation rate, TCP's
    /// window per RTT, a later probe); [`super::dbat_rule`] goes up only when every estimate
    /// of a quiet period allowed it.
    Capacity {
        /// Estimate, bit/s.
        bps: u64,
    },
    /// DBAT's queue average and threshold now (bytes); [`super::dbat_rule`] goes up only
    /// while the average is well below the threshold.
    Queue {
        /// Time-weighted average of the send queue, bytes.
        average: u64,
        /// DBAT's threshold, bytes.
        threshold: u64,
    },
    /// DBAT's smoothed send queue crossed its threshold (`onset`) or cleared.
    Congestion {
        /// `true` at the onset.
        onset: bool,
        /// The transport's achieved rate, bit/s.
        rate_estimate_bps: u64,
    },
}

impl ServerSignal {
    /// From a DBAT signal, whose rate estimate is in bytes per second.
    pub fn congestion(onset: bool, rate_estimate_bytes_per_sec: u64) -> Self {
        ServerSignal::Congestion {
            onset,
            rate_estimate_bps: rate_estimate_bytes_per_sec.saturating_mul(8),
        }
    }
}

/// Why a server switched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerSwitchReason {
    /// The first rung, from the probe.
    Probe,
    /// The client reported loss above the threshold.
    Loss,
    /// The client's playout buffer ran empty.
    Rebuffer,
    /// DBAT signalled congestion.
    Congestion,
    /// A quiet period passed: one rung up.
    Quiet,
}

/// A switch record: when, from, to, why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ServerSwitch {
    /// Microseconds since the policy started.
    pub at_us: u64,
    pub from: usize,
    pub to: usize,
    pub reason: ServerSwitchReason,
}

/// A rule that picks the rung a server streams. Call [`Self::rung`] for the rung to stream
/// now; feed every signal in time order to [`Self::on_signal`]; a returned switch has taken
/// effect. Signals with a time earlier than the last are ignored and counted.
pub trait ServerPolicy {
    /// The ladder, rung, up-switch probe and records.
    fn state(&self) -> &RungState;
    fn on_signal(&mut self, now: Instant, signal: &ServerSignal) -> Option<ServerSwitch>;

    fn ladder(&self) -> &Ladder {
        &self.state().ladder
    }
    /// The rung to stream now.
    fn rung(&self) -> usize {
        self.state().rung
    }
    /// The switches so far.
    fn log(&self) -> &SwitchLog {
        &self.state().log
    }
    /// Up-switches that met trouble within the base wait.
    fn failed_probes(&self) -> u64 {
        self.state().up.failed
    }
}

/// Switch records kept (the oldest are dropped, and counted, beyond it).
pub const MAX_RECORDS: usize = 4096;

/// The switch records of a policy and the time order of its signals.
#[derive(Debug, Clone)]
pub struct SwitchLog {
    t0: Instant,
    last: Option<Instant>,
    records: std::collections::VecDeque<ServerSwitch>,
    /// Records dropped beyond [`MAX_RECORDS`].
    pub records_dropped: u64,
    /// Signals refused: earlier than the one before.
    pub out_of_order: u64,
}

impl SwitchLog {
    pub fn new(t0: Instant) -> Self {
        SwitchLog {
            t0,
            last: None,
            records: Default::default(),
            records_dropped: 0,
            out_of_order: 0,
        }
    }

    /// Whether a signal at `now` is in time order (else it is counted and must be ignored).
    pub fn in_order(&mut self, now: Instant) -> bool {
        if self.last.is_some_and(|last| now < last) {
            self.out_of_order += 1;
            return false;
        }
        self.last = Some(now);
        true
    }

    /// Records a switch.
    pub fn record(
        &mut self,
        now: Instant,
        from: usize,
        to: usize,
        reason: ServerSwitchReason,
    ) -> ServerSwitch {
        let s = ServerSwitch {
            at_us: now.saturating_duration_since(self.t0).as_micros() as u64,
            from,
            to,
            reason,
        };
        if self.records.len() == MAX_RECORDS {
            self.records.pop_front();
            self.records_dropped += 1;
        }
        self.records.push_back(s);
        s
    }

    /// The switches so far, oldest first.
    pub fn records(&self) -> impl Iterator<Item = &ServerSwitch> {
        self.records.iter()
    }

    /// Switches other than the first rung's choice, and of those the down-switches.
    pub fn switch_counts(&self) -> (u64, u64) {
        let moves = self
            .records
            .iter()
            .filter(|s| s.reason != ServerSwitchReason::Probe);
        let (mut all, mut down) = (0, 0);
        for s in moves {
            all += 1;
            down += u64::from(s.to < s.from);
        }
        (all, down)
    }
}

/// What every server rule keeps: the ladder, the rung it streams, its up-switch probe and
/// its switch records.
#[derive(Debug, Clone)]
pub struct RungState {
    pub ladder: Ladder,
    pub rung: usize,
    pub up: UpProbe,
    pub log: SwitchLog,
}

impl RungState {
    /// Rung `start` of `ladder`, up-switch waits `base`..=`max`, the clock starting at `now`.
    pub fn new(
        ladder: Ladder,
        start: usize,
        base: Duration,
        max: Duration,
        now: Instant,
    ) -> Result<Self, ServerPolicyError> {
        let rung = ladder.check(start)?;
        Ok(RungState {
            ladder,
            rung,
            up: UpProbe::new(base, max, now),
            log: SwitchLog::new(now),
        })
    }

    /// Moves to rung `to` (if it is another) and records why.
    pub fn switch(
        &mut self,
        now: Instant,
        to: usize,
        reason: ServerSwitchReason,
    ) -> Option<ServerSwitch> {
        (to != self.rung).then(|| {
            let from = std::mem::replace(&mut self.rung, to);
            self.log.record(now, from, to, reason)
        })
    }
}

/// The first rung: the highest whose rate is at most the probed bandwidth (the paper: "the
/// highest streaming bit rate which is likely to be supported by the network"); the lowest
/// if none fits, `current` without an estimate.
pub fn rung_for_probe(ladder: &Ladder, bandwidth_bps: Option<u64>, current: usize) -> usize {
    match bandwidth_bps {
        Some(bw) => ladder.highest_at_most(bw as f64).unwrap_or(0),
        None => current,
    }
}

/// A down-switch: the highest rung at most `fits_bps` (if known), and at least one rung down.
pub fn rung_down(ladder: &Ladder, current: usize, fits_bps: Option<f64>) -> usize {
    let fits = fits_bps.map_or(current, |bps| ladder.highest_at_most(bps).unwrap_or(0));
    fits.min(current.saturating_sub(1))
}

/// Up-switches as probes (the next rung's rate cannot be measured before it is streamed):
/// one rung up after `wait` without trouble; trouble within `base` of an up-switch doubles
/// the wait (up to `max`), an up-switch that held for `base` resets it.
#[derive(Debug, Clone)]
pub struct UpProbe {
    base: Duration,
    max: Duration,
    wait: Duration,
    quiet_since: Instant,
    probe_at: Option<Instant>,
    /// Up-switches followed by trouble within `base`.
    pub failed: u64,
}

impl UpProbe {
    pub fn new(base: Duration, max: Duration, now: Instant) -> Self {
        UpProbe {
            base,
            max,
            wait: base,
            quiet_since: now,
            probe_at: None,
            failed: 0,
        }
    }

    /// The wait before the next up-switch.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// Trouble (loss, rebuffer, congestion) at `now`: the quiet period restarts, and a recent
    /// up-switch failed.
    pub fn trouble(&mut self, now: Instant) {
        self.quiet_since = now;
        if self
            .probe_at
            .take()
            .is_some_and(|at| now.saturating_duration_since(at) < self.base)
        {
            self.failed += 1;
            self.wait = (self.wait * 2).min(self.max);
        }
    }

    /// Whether to go up one rung at `now` (the caller checks there is a rung above and that
    /// nothing else forbids it).
    pub fn due(&mut self, now: Instant) -> bool {
        if self
            .probe_at
            .is_some_and(|at| now.saturating_duration_since(at) >= self.base)
        {
            self.probe_at = None;
            self.wait = self.base;
        }
        now.saturating_duration_since(self.quiet_since) >= self.wait
    }

    /// The quiet period restarts at `now` without blaming a recent up-switch (congestion
    /// cleared).
    pub fn restart_quiet(&mut self, now: Instant) {
        self.quiet_since = now;
    }

    /// An up-switch happened at `now`.
    pub fn switched_up(&mut self, now: Instant) {
        self.probe_at = Some(now);
        self.quiet_since = now;
    }
}

/// Milliseconds in a checked range, or an error naming the field.
pub(crate) fn check_ms(
    field: &'static str,
    value: u64,
    range: std::ops::RangeInclusive<u64>,
) -> Result<(), ServerPolicyError> {
    if range.contains(&value) {
        Ok(())
    } else {
        Err(ServerPolicyError::Field {
            field,
            value: value.to_string(),
            allowed: format!("{} to {}", range.start(), range.end()),
        })
    }
}

/// A policy's configuration was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ServerPolicyError {
    #[error("{field} = {value}: allowed is {allowed}")]
    Field {
        field: &'static str,
        value: String,
        allowed: String,
    },
    #[error(transparent)]
    Ladder(#[from] super::LadderError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_picks_the_highest_rung_that_fits_and_down_is_at_least_one_rung() {
        let l = hasan_ladder();
        // the paper's 500 kbit/s bottleneck: 320 kbit/s
        assert_eq!(rung_for_probe(&l, Some(500_000), 0), 3);
        assert_eq!(rung_for_probe(&l, Some(10_000), 3), 0);
        assert_eq!(rung_for_probe(&l, None, 2), 2);
        assert_eq!(rung_down(&l, 3, Some(300_000.0)), 2);
        assert_eq!(rung_down(&l, 3, Some(1e9)), 2, "at least one rung down");
        assert_eq!(rung_down(&l, 4, Some(130_000.0)), 1);
        assert_eq!(rung_down(&l, 0, Some(1.0)), 0);
        assert_eq!(rung_down(&l, 3, None), 2);
    }

    #[test]
    fn a_report_without_frames_or_time_has_no_rates() {
        let r = ClientReport {
            frames_expected: 0,
            frames_received: 0,
            rebuffers: 0,
            bytes: 0,
            duration_us: 0,
        };
        assert_eq!((r.loss(), r.bps()), (None, None));
        let r = ClientReport {
            frames_expected: 20,
            frames_received: 19,
            bytes: 40_000,
            duration_us: 1_000_000,
            ..r
        };
        assert_eq!(r.loss(), Some(0.05));
        assert_eq!(r.bps(), Some(320_000.0));
        assert_eq!(
            ServerSignal::congestion(true, 40_000),
            ServerSignal::Congestion {
                onset: true,
                rate_estimate_bps: 320_000
            }
        );
    }

    #[test]
    fn up_probes_back_off_when_they_fail_and_reset_when_they_hold() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut u = UpProbe::new(s(10), s(40), t0);
        assert!(!u.due(t0 + s(9)));
        assert!(u.due(t0 + s(10)));
        u.switched_up(t0 + s(10));
        u.trouble(t0 + s(12)); // within 10 s of the switch: failed
        assert_eq!((u.failed, u.wait()), (1, s(20)));
        assert!(!u.due(t0 + s(31)));
        assert!(u.due(t0 + s(32)));
        u.switched_up(t0 + s(32));
        u.trouble(t0 + s(33));
        u.switched_up(t0 + s(80)); // (as if due)
        u.trouble(t0 + s(81));
        assert_eq!(u.wait(), s(40), "capped");
        // a switch that held for 10 s resets the wait
        u.switched_up(t0 + s(200));
        assert!(!u.due(t0 + s(209)));
        u.due(t0 + s(210));
        assert_eq!(u.wait(), s(10));
        // trouble long after a switch is not a failed probe
        u.trouble(t0 + s(300));
        assert_eq!(u.failed, 3);
    }
}
