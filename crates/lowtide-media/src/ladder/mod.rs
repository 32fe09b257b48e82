//! A bit-rate ladder: the same content encoded at a few rates ("rungs"), and a client that
//! picks one from what it measures, as commercial players do (RealNetworks' SureStream in
//! Mehra, "Efficient Video Streaming using TCP", Section 4: 450, 350, 262 and 60 kbit/s).
//!
//! - this module: the [`Ladder`] (rungs checked when built), the [`ThroughputSample`] a
//!   client feeds in, and the [`SwitchPolicy`] trait every switching rule implements, so
//!   ladders driven by other signals (a transport's bandwidth estimate) share the rest;
//! - [`throughput_rule`]: the commercial player's rule (down when the throughput falls
//!   below the rung's rate, up after sustained headroom);
//! - [`meter`]: bytes in, one throughput sample per interval out;
//! - [`wire`]: the ladder's messages on a plain TCP socket (manifest, switch, media);
//! - [`server_policy`], [`report_rule`], [`dbat_rule`]: server-side switching (Hasan et al.):
//!   the first rung from a probe, then on client loss/rebuffer reports or on DBAT's
//!   congestion signals, with switch records; [`playout_buffer`]: that client's playout
//!   buffer (rebuffer events) and its reports;
//! - [`stream`]: the thin driver: a server that paces the chosen rung, a client that reads,
//!   measures and asks for switches (blocking std sockets, so it also runs under
//!   `LD_PRELOAD` libraries such as BWSS's).
//!
//! All but [`stream`] is pure logic; time comes in as `now`.

pub mod dbat_rule;
pub mod meter;
pub mod playout_buffer;
pub mod report_rule;
pub mod server_policy;
pub mod stream;
pub mod throughput_rule;
pub mod wire;

use std::time::{Duration, Instant};

/// At most this many rungs (a manifest is one frame; players offer a handful).
pub const MAX_RUNGS: usize = 16;
/// Rates allowed for a rung, bit/s.
pub const RUNG_RATES_BPS: std::ops::RangeInclusive<u64> = 1_000..=10_000_000_000;

/// The rungs, lowest rate first; a rung is named by its index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ladder {
    rates_bps: Vec<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LadderError {
    #[error("rungs: {0} given, allowed are 1 to {MAX_RUNGS}")]
    Count(usize),
    #[error("rungs[{index}] = {bps} bit/s: allowed are 1000 bit/s to 10 Gbit/s")]
    Rate { index: usize, bps: u64 },
    #[error("rungs: {bps} bit/s appears twice; every rung needs its own rate")]
    Duplicate { bps: u64 },
    #[error("rung {index}: the ladder has {len} rungs (0 to {})", len - 1)]
    NoSuchRung { index: usize, len: usize },
}

impl Ladder {
    /// A ladder from its rates in bit/s, in any order.
    pub fn new(rates_bps: &[u64]) -> Result<Ladder, LadderError> {
        if !(1..=MAX_RUNGS).contains(&rates_bps.len()) {
            return Err(LadderError::Count(rates_bps.len()));
        }
        if let Some((index, &bps)) = rates_bps
            .iter()
            .enumerate()
            .find(|(_, r)| !RUNG_RATES_BPS.contains(r))
        {
            return Err(LadderError::Rate { index, bps });
        }
        let mut rates = rates_bps.to_vec();
        rates.sort_unstable();
        if let Some(w) = rates.windows(2).find(|w| w[0] == w[1]) {
            return Err(LadderError::Duplicate { bps: w[0] });
        }
        Ok(Ladder { rates_bps: rates })
    }

    /// Mehra's SureStream trailer: 60, 262, 350 and 450 kbit/s.
    pub fn mehra() -> Ladder {
        Ladder::new(&[60_000, 262_000, 350_000, 450_000]).expect("a valid ladder")
    }

    pub fn len(&self) -> usize {
        self.rates_bps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rates_bps.is_empty()
    }

    /// Rates in bit/s, lowest first.
    pub fn rates_bps(&self) -> &[u64] {
        &self.rates_bps
    }

    pub fn rate_bps(&self, rung: usize) -> u64 {
        self.rates_bps[rung]
    }

    /// The top rung's index.
    pub fn top(&self) -> usize {
        self.rates_bps.len() - 1
    }

    /// `rung` if the ladder has it.
    pub fn check(&self, rung: usize) -> Result<usize, LadderError> {
        if rung < self.len() {
            Ok(rung)
        } else {
            Err(LadderError::NoSuchRung {
                index: rung,
                len: self.len(),
            })
        }
    }

    /// The highest rung whose rate is at most `bps`, if any.
    pub fn highest_at_most(&self, bps: f64) -> Option<usize> {
        self.rates_bps.iter().rposition(|&r| r as f64 <= bps)
    }
}

/// What a client measured: `bytes` delivered to it during the `duration` that ended at `end`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThroughputSample {
    pub end: Instant,
    pub duration: Duration,
    pub bytes: u64,
}

impl ThroughputSample {
    /// bit/s; `None` for an empty interval ("no data", not zero).
    pub fn bps(&self) -> Option<f64> {
        let s = self.duration.as_secs_f64();
        (s > 0.0).then(|| self.bytes as f64 * 8.0 / s)
    }

    pub fn start(&self) -> Instant {
        self.end.checked_sub(self.duration).unwrap_or(self.end)
    }
}

/// Why a policy switched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SwitchReason {
    /// The throughput stayed below the rung's rate.
    BelowRate,
    /// The throughput kept headroom above the rung's rate.
    Headroom,
}

/// A decision to change rung.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Switch {
    pub from: usize,
    pub to: usize,
    pub reason: SwitchReason,
}

/// A rule that picks a rung from what the client measures. Call order: [`Self::rung`] for
/// the rung to ask for first, then [`Self::on_sample`] for every sample in time order;
/// a returned [`Switch`] has already taken effect in [`Self::rung`].
pub trait SwitchPolicy {
    fn ladder(&self) -> &Ladder;
    /// The rung the client wants now.
    fn rung(&self) -> usize;
    fn on_sample(&mut self, sample: ThroughputSample) -> Option<Switch>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ladder_is_sorted_and_checked() {
        let l = Ladder::new(&[450_000, 60_000, 350_000, 262_000]).unwrap();
        assert_eq!(l, Ladder::mehra());
        assert_eq!(l.top(), 3);
        assert_eq!(l.highest_at_most(300_000.0), Some(1));
        assert_eq!(l.highest_at_most(59_999.0), None);
        assert_eq!(l.highest_at_most(1e9), Some(3));
        assert_eq!(Ladder::new(&[]), Err(LadderError::Count(0)));
        assert_eq!(Ladder::new(&[1000; 17]), Err(LadderError::Count(17)));
        assert_eq!(
            Ladder::new(&[60_000, 999]),
            Err(LadderError::Rate { index: 1, bps: 999 })
        );
        assert_eq!(
            Ladder::new(&[60_000, 60_000]),
            Err(LadderError::Duplicate { bps: 60_000 })
        );
        let e = l.check(4).unwrap_err().to_string();
        assert_eq!(e, "rung 4: the ladder has 4 rungs (0 to 3)");
    }

    #[test]
    fn an_empty_interval_has_no_rate() {
        let now = Instant::now();
        let s = ThroughputSample {
            end: now,
            duration: Duration::ZERO,
            bytes: 0,
        };
        assert_eq!(s.bps(), None);
        let s = ThroughputSample {
            duration: Duration::from_millis(500),
            bytes: 1000,
            ..s
        };
        assert_eq!(s.bps(), Some(16_000.0));
    }
}
