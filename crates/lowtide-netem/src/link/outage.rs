//! A link's outages: windows of time, counted from the network's start, in which the link goes
//! dark, stops serving, or serves at a fraction of its rate. What a broadcaster's uplink does
//! when a Wi-Fi access point hands over, a cellular bearer is re-established, or a cable is
//! pulled.
//!
//! ```toml
//! outages = [
//!   { kind = "blackhole", at_s = 20, for_s = 5 },  # every packet entering the link is lost
//!   { kind = "down", at_s = 40, for_s = 2 },       # nothing leaves; the queue fills and drops
//!   { kind = "rate", at_s = 50, for_s = 10, factor = 0.1 },  # 10% of the rate
//! ]
//! ```
//!
//! A blackhole drops packets as they arrive at the link (a dead radio: what is already queued
//! or in flight still arrives). `down` and `rate` change how a constant-rate link serves its
//! queue; a trace link takes only blackholes (its capacity is the trace's).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;

/// One outage of a link, as written in a topology.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OutageConfig {
    pub kind: OutageKind,
    /// When it starts, seconds from the network's start.
    pub at_s: f64,
    /// How long it lasts, seconds.
    pub for_s: f64,
    /// For `rate`: the fraction of the link's rate left (above 0, below 1).
    #[serde(default)]
    pub factor: Option<f64>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum OutageKind {
    /// Every packet that reaches the link is lost.
    Blackhole,
    /// The link serves nothing; arrivals queue (and overflow) until it is back.
    Down,
    /// The link serves at `factor` times its rate.
    Rate,
}

impl OutageKind {
    pub fn as_str(self) -> &'static str {
        match self {
            OutageKind::Blackhole => "blackhole",
            OutageKind::Down => "down",
            OutageKind::Rate => "rate",
        }
    }
}

impl OutageConfig {
    /// What it does, for reports: "blackhole", "down" or "rate x 0.1".
    pub fn describe(&self) -> String {
        match (self.kind, self.factor) {
            (OutageKind::Rate, Some(f)) => format!("rate x {f}"),
            (k, _) => k.as_str().to_string(),
        }
    }

    /// Checks one link's outages: each in range, `factor` only and always for `rate`, no two
    /// overlapping, and only blackholes on a trace link.
    pub fn validate_all(
        outages: &[OutageConfig],
        field: &str,
        trace_link: bool,
    ) -> Result<(), ConfigError> {
        let mut windows: Vec<(f64, f64, usize)> = Vec::with_capacity(outages.len());
        for (i, o) in outages.iter().enumerate() {
            let name = |f: &str| format!("{field}.outages[{i}].{f}");
            if !(o.at_s.is_finite() && (0.0..=86_400.0).contains(&o.at_s)) {
                return Err(ConfigError::invalid(
                    name("at_s"),
                    o.at_s,
                    "a start from 0 to 86400 s after the network starts",
                ));
            }
            if !(o.for_s.is_finite() && o.for_s > 0.0 && o.for_s <= 86_400.0) {
                return Err(ConfigError::invalid(
                    name("for_s"),
                    o.for_s,
                    "a duration above 0, at most 86400 s",
                ));
            }
            match (o.kind, o.factor) {
                (OutageKind::Rate, Some(f)) if f.is_finite() && f > 0.0 && f < 1.0 => {}
                (OutageKind::Rate, f) => {
                    return Err(ConfigError::invalid(
                        name("factor"),
                        f.map_or("missing".to_string(), |f| f.to_string()),
                        "the fraction of the rate left, above 0 and below 1 (`down` for none)",
                    ))
                }
                (_, Some(f)) => {
                    return Err(ConfigError::invalid(
                        name("factor"),
                        f,
                        "only for kind = \"rate\"",
                    ))
                }
                (_, None) => {}
            }
            if trace_link && o.kind != OutageKind::Blackhole {
                return Err(ConfigError::invalid(
                    name("kind"),
                    o.kind.as_str(),
                    "\"blackhole\" on a trace link (its capacity comes from the trace: \
                     write the outage into the trace)",
                ));
            }
            windows.push((o.at_s, o.at_s + o.for_s, i));
        }
        windows.sort_by(|a, b| a.0.total_cmp(&b.0));
        for w in windows.windows(2) {
            if w[1].0 < w[0].1 {
                return Err(ConfigError::invalid(
                    format!("{field}.outages[{}]", w[1].2),
                    format!("starting at {} s", w[1].0),
                    format!(
                        "no overlap with outages[{}] ({} to {} s)",
                        w[0].2, w[0].0, w[0].1
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// A link's outages on the network's clock (sans-IO: every question takes the time).
#[derive(Debug, Clone)]
pub struct Outages {
    /// Time 0 of the windows is `epoch` plus `shift` nanoseconds: a run that starts after the
    /// network is built moves every link's outages to its own start ([`Outages::shift`]).
    epoch: Instant,
    shift: Arc<AtomicU64>,
    /// (start, end, kind, factor) from time 0, sorted, not overlapping.
    windows: Vec<(Duration, Duration, OutageKind, f64)>,
}

impl Default for Outages {
    fn default() -> Self {
        Self::new(&[], Instant::now())
    }
}

impl Outages {
    /// `outages` (validated) placed on the clock that starts at `epoch`.
    pub fn new(outages: &[OutageConfig], epoch: Instant) -> Self {
        let mut windows: Vec<_> = outages
            .iter()
            .map(|o| {
                let start = Duration::from_secs_f64(o.at_s);
                let end = start + Duration::from_secs_f64(o.for_s);
                (start, end, o.kind, o.factor.unwrap_or(1.0))
            })
            .collect();
        windows.sort_by_key(|w| w.0);
        Self {
            epoch,
            shift: Arc::default(),
            windows,
        }
    }

    /// The same outages, with time 0 moved by whoever holds `shift` (nanoseconds after
    /// `epoch`): one handle moves every link of a network at once.
    pub fn shifted_by(mut self, shift: Arc<AtomicU64>) -> Self {
        self.shift = shift;
        self
    }

    /// Moves time 0 of every `Outages` sharing `shift` to `t` (at or after their epoch).
    pub fn shift(shift: &AtomicU64, epoch: Instant, t: Instant) {
        let ns = t.saturating_duration_since(epoch).as_nanos();
        shift.store(ns.min(u64::MAX as u128) as u64, Ordering::Relaxed);
    }

    fn at(&self, t: Instant) -> Option<(Instant, Instant, OutageKind, f64)> {
        if self.windows.is_empty() {
            return None;
        }
        let zero = self.epoch + Duration::from_nanos(self.shift.load(Ordering::Relaxed));
        let since = t.checked_duration_since(zero)?;
        self.windows
            .iter()
            .find(|w| w.0 <= since && since < w.1)
            .map(|w| (zero + w.0, zero + w.1, w.2, w.3))
    }

    /// Whether a packet arriving at `t` is lost to a blackhole.
    pub fn blackholed(&self, t: Instant) -> bool {
        self.at(t).is_some_and(|w| w.2 == OutageKind::Blackhole)
    }

    /// The earliest time at or after `t` at which the link may start sending a packet (the end
    /// of a `down` window that holds `t`).
    pub fn serving_from(&self, t: Instant) -> Instant {
        match self.at(t) {
            Some((_, end, OutageKind::Down, _)) => end,
            _ => t,
        }
    }

    /// The fraction of the link's rate at `t`.
    pub fn rate_factor(&self, t: Instant) -> f64 {
        match self.at(t) {
            Some((_, _, OutageKind::Rate, f)) => f,
            _ => 1.0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outage(kind: OutageKind, at_s: f64, for_s: f64, factor: Option<f64>) -> OutageConfig {
        OutageConfig {
            kind,
            at_s,
            for_s,
            factor,
        }
    }

    #[test]
    fn each_kind_answers_inside_its_window_only() {
        let t0 = Instant::now();
        let s = |x: f64| t0 + Duration::from_secs_f64(x);
        let o = Outages::new(
            &[
                outage(OutageKind::Down, 4.0, 1.0, None),
                outage(OutageKind::Blackhole, 1.0, 2.0, None),
                outage(OutageKind::Rate, 6.0, 1.0, Some(0.1)),
            ],
            t0,
        );
        assert!(!o.blackholed(s(0.99)) && o.blackholed(s(1.0)) && o.blackholed(s(2.99)));
        assert!(!o.blackholed(s(3.0)) && !o.blackholed(s(4.5)));
        assert_eq!(o.serving_from(s(3.9)), s(3.9));
        assert_eq!(o.serving_from(s(4.2)), s(5.0));
        assert_eq!(
            o.serving_from(s(1.5)),
            s(1.5),
            "a blackhole does not stop service"
        );
        assert_eq!(o.rate_factor(s(6.5)), 0.1);
        assert_eq!(o.rate_factor(s(7.0)), 1.0);
        assert!(Outages::default().is_empty() && !o.is_empty());
        // Moving time 0 by 10 s moves every window.
        let shift = Arc::new(AtomicU64::new(0));
        let o = o.shifted_by(shift.clone());
        Outages::shift(&shift, t0, s(10.0));
        assert!(!o.blackholed(s(1.5)) && o.blackholed(s(11.5)));
        assert_eq!(o.serving_from(s(14.2)), s(15.0));
    }

    #[test]
    fn bad_outages_are_named() {
        let e = |o: &[OutageConfig], trace: bool| {
            OutageConfig::validate_all(o, "path_b.forward", trace)
                .unwrap_err()
                .to_string()
        };
        let ok = [
            outage(OutageKind::Blackhole, 1.0, 1.0, None),
            outage(OutageKind::Rate, 2.0, 1.0, Some(0.5)),
        ];
        assert!(OutageConfig::validate_all(&ok, "forward", false).is_ok());
        let s = e(&[outage(OutageKind::Down, -1.0, 1.0, None)], false);
        assert!(
            s.contains("path_b.forward.outages[0].at_s") && s.contains("-1"),
            "{s}"
        );
        let s = e(&[outage(OutageKind::Down, 1.0, 0.0, None)], false);
        assert!(s.contains("outages[0].for_s"), "{s}");
        let s = e(&[outage(OutageKind::Rate, 1.0, 1.0, None)], false);
        assert!(
            s.contains("outages[0].factor") && s.contains("missing"),
            "{s}"
        );
        let s = e(&[outage(OutageKind::Rate, 1.0, 1.0, Some(1.5))], false);
        assert!(s.contains("1.5"), "{s}");
        let s = e(&[outage(OutageKind::Down, 1.0, 1.0, Some(0.5))], false);
        assert!(s.contains("only for kind"), "{s}");
        let s = e(&[outage(OutageKind::Down, 1.0, 1.0, None)], true);
        assert!(s.contains("outages[0].kind") && s.contains("trace"), "{s}");
        let s = e(
            &[
                outage(OutageKind::Down, 5.0, 2.0, None),
                outage(OutageKind::Blackhole, 1.0, 4.5, None),
            ],
            false,
        );
        assert!(s.contains("outages[0]") && s.contains("outages[1]"), "{s}");
    }
}
