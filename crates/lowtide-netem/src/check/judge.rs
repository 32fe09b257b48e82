//! How a measured figure is judged against its bound, honestly:
//!
//! - a figure with no samples is "no data" and fails; it never stands in for a perfect one
//!   (an empty lateness series is not "0 ms late", a failed TCP_INFO sampler is not
//!   "0 retransmits");
//! - a figure that depends on how promptly this machine wakes a thread (lateness, TCP's RTT,
//!   a maximum queueing delay) and misses its bound, but stays within the bound plus the
//!   machine's own wake-up noise measured before the check ([`crate::noise`]), is a
//!   "machine limit": not passed, not blamed on the emulator, and the row shows both numbers.
//!   Beyond that allowance it fails.

use serde::Serialize;

use crate::noise::WakeupNoise;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Pass,
    Fail,
    /// Outside the bound, within the bound plus the machine's measured wake-up noise.
    MachineLimit,
    /// Measured and shown, with no bound of its own.
    Info,
}

impl Verdict {
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::MachineLimit => "MACHINE LIMIT",
            Verdict::Info => "INFO",
        }
    }
}

/// What the machine's noise may add to a timed figure: which statistic, how much.
#[derive(Debug, Clone, PartialEq)]
pub struct Allowance {
    pub label: String,
    pub ms: f64,
}

impl Allowance {
    /// The 99th percentile of how late a deadline at a random instant is served: what a
    /// per-packet p99 of one timer path can be held to.
    pub fn p99(noise: &WakeupNoise) -> Self {
        Self {
            label: "wake-up p99 (at a random instant)".into(),
            ms: noise.at_random_instant_ms.p99,
        }
    }

    /// The worst wake-up seen (a maximum over a run).
    pub fn max(noise: &WakeupNoise) -> Self {
        Self {
            label: "wake-up max".into(),
            ms: noise.lateness_ms.max,
        }
    }

    /// Two wake-ups at the 99th percentile: a round trip crosses the emulator twice.
    pub fn round_trip_p99(noise: &WakeupNoise) -> Self {
        Self {
            label: "2 × wake-up p99 (at a random instant)".into(),
            ms: 2.0 * noise.at_random_instant_ms.p99,
        }
    }

    /// Two median wake-ups: the smallest round trip still wakes twice.
    pub fn round_trip_p50(noise: &WakeupNoise) -> Self {
        Self {
            label: "2 × wake-up p50".into(),
            ms: 2.0 * noise.lateness_ms.p50,
        }
    }
}

/// Of two noise measurements, the one that allows more (noise varies while a check runs).
pub fn noisier<'a>(a: &'a WakeupNoise, b: &'a WakeupNoise) -> &'a WakeupNoise {
    if b.at_random_instant_ms.p99 > a.at_random_instant_ms.p99 {
        b
    } else {
        a
    }
}

/// A verdict and, for a machine limit or missing data, what the row must say about it.
#[derive(Debug, Clone, PartialEq)]
pub struct Judged {
    pub verdict: Verdict,
    pub note: Option<String>,
}

impl Judged {
    pub fn pass_if(ok: bool) -> Self {
        Self {
            verdict: if ok { Verdict::Pass } else { Verdict::Fail },
            note: None,
        }
    }

    /// No samples: fails, and says so.
    pub fn no_data(why: impl Into<String>) -> Self {
        Self {
            verdict: Verdict::Fail,
            note: Some(why.into()),
        }
    }
}

/// `measured ≤ bound` (ms) for a figure the machine's wake-up noise adds to.
pub fn at_most_timed(what: &str, measured: f64, bound: f64, allowance: &Allowance) -> Judged {
    if measured <= bound {
        return Judged::pass_if(true);
    }
    if measured <= bound + allowance.ms {
        return Judged {
            verdict: Verdict::MachineLimit,
            note: Some(format!(
                "machine limit: {} {:.2} ms, measured with no emulator running; {what} {measured:.2} ms ≤ bound {bound:.1} ms + that",
                allowance.label, allowance.ms
            )),
        };
    }
    Judged {
        verdict: Verdict::Fail,
        note: Some(format!(
            "beyond the bound plus the machine's {} ({:.2} ms): an emulator fault",
            allowance.label, allowance.ms
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Percentiles;
    use crate::timing::Timing;

    fn noise(p99: f64) -> WakeupNoise {
        let p = Percentiles {
            count: 1000,
            min: 0.0,
            p50: p99 / 10.0,
            p99,
            p999: p99 * 2.0,
            max: p99 * 3.0,
        };
        WakeupNoise {
            lateness_ms: p,
            at_random_instant_ms: p,
            duration_s: 1.0,
            timing: Timing::default(),
            realtime: true,
            cpu_per_s: None,
        }
    }

    #[test]
    fn a_noisy_machine_is_named_not_the_emulator() {
        // The machine: emulator lateness p99 5.0 ms against a 1 ms bound.
        let quiet = at_most_timed("lateness p99", 5.0, 1.0, &Allowance::p99(&noise(0.05)));
        assert_eq!(quiet.verdict, Verdict::Fail);
        let noisy = at_most_timed("lateness p99", 5.0, 1.0, &Allowance::p99(&noise(4.8)));
        assert_eq!(noisy.verdict, Verdict::MachineLimit);
        let note = noisy.note.unwrap();
        assert!(note.contains("4.80") && note.contains("5.00"), "{note}");
        assert_eq!(
            at_most_timed("x", 0.5, 1.0, &Allowance::p99(&noise(4.8))).verdict,
            Verdict::Pass
        );
    }
}
