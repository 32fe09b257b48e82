//! Latency distributions as the reports quote them, honest about what was not measured.
//!
//! A summary of no samples has no percentiles (`null` in `summary.json`, "no data" in the
//! report), never zeros. Messages that were sent but not delivered by the end of a run are
//! *censored*: they enter the distribution with the time they had waited when the
//! measurement ended, a lower bound of their latency. A percentile (or a share over a
//! threshold) that a censored sample could move is marked as a lower bound.
//!
//! Percentiles are taken by `lowtide::proto::quantile`'s rule (`round((n - 1) q)` of the sorted
//! samples). A tail
//! percentile of few samples is one of the largest few: p99.9 over 15 samples is their
//! maximum. Such a cell says so ("188 (max of 15)", "97 (3rd largest of 400)") whenever fewer
//! than [`TAIL_SAMPLES`] samples lie above the percentile's rank.

use std::collections::BTreeMap;

use lowtide::proto::quantile;
use serde::{Deserialize, Serialize};

/// Percentiles in ms and the share of samples above each threshold.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
pub struct LatencySummary {
    /// Samples, censored ones included.
    pub count: usize,
    /// Samples never delivered: their value is the wait when the measurement ended.
    #[serde(default)]
    pub censored: usize,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
    pub p999: Option<f64>,
    pub max: Option<f64>,
    /// Threshold in ms (as a string key, for JSON) → share of samples above it.
    pub share_over_ms: BTreeMap<String, Option<f64>>,
    /// Which of the numbers above are only lower bounds because of censored samples, by
    /// name: `p99`, `max`, `over_160`, …
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lower_bounds: Vec<String>,
}

/// A percentile with fewer samples above its rank than this is shown as one of the largest
/// samples ("max of N", "k-th largest of N"), not as a tail estimate.
pub const TAIL_SAMPLES: usize = 10;

/// The thresholds of Goel et al.: interactive (160 ms) and control (500 ms).
pub const THRESHOLDS_MS: [f64; 2] = [160.0, 500.0];

const PERCENTILES: [(&str, f64); 6] = [
    ("p50", 0.5),
    ("p90", 0.9),
    ("p95", 0.95),
    ("p99", 0.99),
    ("p999", 0.999),
    ("max", 1.0),
];

impl LatencySummary {
    /// Delivered samples only.
    pub fn of(samples_ms: &[f64]) -> Self {
        Self::with_censored(samples_ms, &[])
    }

    /// `delivered` exact latencies and `censored` lower bounds (non-finite values are left out).
    pub fn with_censored(delivered: &[f64], censored: &[f64]) -> Self {
        let mut v: Vec<(f64, bool)> = delivered
            .iter()
            .map(|&x| (x, false))
            .chain(censored.iter().map(|&x| (x, true)))
            .filter(|(x, _)| x.is_finite())
            .collect();
        let empty = THRESHOLDS_MS.iter().map(|t| (key(*t), None)).collect();
        if v.is_empty() {
            return Self {
                share_over_ms: empty,
                ..Self::default()
            };
        }
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        // censored_upto[i]: is any sample in v[..=i] censored?
        let mut censored_upto = Vec::with_capacity(v.len());
        let mut seen = false;
        for (_, c) in &v {
            seen |= c;
            censored_upto.push(seen);
        }
        let n = v.len();
        let mut lower_bounds = vec![];
        let mut at = |name: &str, q: f64| {
            let i = quantile::index(n, q).expect("n > 0");
            if censored_upto[i] {
                lower_bounds.push(name.to_string());
            }
            Some(v[i].0)
        };
        let [p50, p90, p95, p99, p999, max] = PERCENTILES.map(|(name, q)| at(name, q));
        let share_over_ms = THRESHOLDS_MS
            .iter()
            .map(|t| {
                let below = v.partition_point(|(x, _)| x <= t);
                // A censored sample at or below t may really be above it.
                if below > 0 && censored_upto[below - 1] {
                    lower_bounds.push(format!("over_{t:.0}"));
                }
                (key(*t), Some((n - below) as f64 / n as f64))
            })
            .collect();
        Self {
            count: n,
            censored: v.iter().filter(|(_, c)| *c).count(),
            p50,
            p90,
            p95,
            p99,
            p999,
            max,
            share_over_ms,
            lower_bounds,
        }
    }

    /// Share of samples above `ms`; `None` with no samples or for a threshold not computed.
    pub fn share_over(&self, ms: f64) -> Option<f64> {
        self.share_over_ms.get(&key(ms)).copied().flatten()
    }

    /// Whether the number called `name` (`p99`, `over_160`, …) is only a lower bound.
    pub fn is_lower_bound(&self, name: &str) -> bool {
        self.lower_bounds.iter().any(|n| n == name)
    }

    /// A percentile for a report cell (`digits` decimals): "no data", "≥ x" for a lower
    /// bound, and "x (max of N)" for a percentile that is one of the largest few samples
    /// ([`LatencySummary::tail_rank`]).
    pub fn show(&self, name: &str, digits: usize) -> String {
        let x = cell(self.percentile(name), self.is_lower_bound(name), |x| {
            format!("{x:.digits$}")
        });
        match self.tail_rank(name) {
            Some(note) if self.percentile(name).is_some() => format!("{x} ({note})"),
            _ => x,
        }
    }

    /// For a percentile with fewer than [`TAIL_SAMPLES`] samples above its rank: which of the
    /// largest samples it is, "max of N" or "k-th largest of N". `None` for the maximum itself,
    /// for the median (a centre, not a tail), for a name that is no percentile, and when
    /// enough samples lie above.
    pub fn tail_rank(&self, name: &str) -> Option<String> {
        let q = PERCENTILES
            .iter()
            .find(|(n, q)| *n == name && *n != "max" && *q >= 0.9)?
            .1;
        let n = self.count;
        if n == 0 {
            return None;
        }
        let above = n - 1 - quantile::index(n, q).expect("n > 0");
        match above {
            0 => Some(format!("max of {n}")),
            a if a < TAIL_SAMPLES => Some(format!("{} largest of {n}", ordinal(a + 1))),
            _ => None,
        }
    }

    /// The share over `ms` for a report cell, in percent with one decimal.
    pub fn show_share(&self, ms: f64) -> String {
        cell(
            self.share_over(ms),
            self.is_lower_bound(&format!("over_{ms:.0}")),
            |x| format!("{:.1}%", x * 100.0),
        )
    }

    /// A percentile by its name (`p50` … `max`).
    pub fn percentile(&self, name: &str) -> Option<f64> {
        match name {
            "p50" => self.p50,
            "p90" => self.p90,
            "p95" => self.p95,
            "p99" => self.p99,
            "p999" => self.p999,
            "max" => self.max,
            _ => None,
        }
    }
}

/// 2nd, 3rd, 4th, … 11th, 12th, 13th, 21st.
fn ordinal(k: usize) -> String {
    let suffix = match (k % 10, k % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{k}{suffix}")
}

fn key(ms: f64) -> String {
    format!("{ms:.0}")
}

/// A number with the count of samples behind it: `value` is `None` when there were none.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, Default, PartialEq)]
pub struct Measured {
    pub value: Option<f64>,
    pub samples: usize,
}

impl Measured {
    pub fn new(value: Option<f64>, samples: usize) -> Self {
        Self {
            value: if samples == 0 { None } else { value },
            samples,
        }
    }

    /// `part / whole` as a measurement of `whole` samples.
    pub fn share(part: usize, whole: usize) -> Self {
        Self::new(Some(part as f64 / whole.max(1) as f64), whole)
    }

    /// The mean of `xs`, as a measurement of as many samples.
    pub fn mean(xs: impl Iterator<Item = f64>) -> Self {
        let (sum, n) = xs.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
        Self::new(Some(sum / n.max(1) as f64), n)
    }

    /// Within `min..=max` (either bound optional); no data is never within.
    pub fn within(&self, min: Option<f64>, max: Option<f64>) -> bool {
        self.value
            .is_some_and(|x| min.is_none_or(|lo| x >= lo) && max.is_none_or(|hi| x <= hi))
    }
}

/// `x` for a report cell: "no data" when absent, `≥` when only a lower bound.
pub fn cell(x: Option<f64>, lower_bound: bool, fmt: impl Fn(f64) -> String) -> String {
    match x {
        None => NO_DATA.into(),
        Some(v) if lower_bound => format!("≥ {}", fmt(v)),
        Some(v) => fmt(v),
    }
}

/// What a report shows for a metric without samples.
pub const NO_DATA: &str = "no data";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_shares() {
        let samples: Vec<f64> = (1..=1000).map(|i| i as f64).collect();
        let s = LatencySummary::of(&samples);
        assert_eq!(s.count, 1000);
        assert_eq!(s.p50, Some(501.0));
        assert_eq!(s.p95, Some(950.0));
        assert_eq!(s.max, Some(1000.0));
        assert!((s.share_over(160.0).unwrap() - 0.84).abs() < 1e-9);
        assert!((s.share_over(500.0).unwrap() - 0.5).abs() < 1e-9);
        assert!(s.lower_bounds.is_empty());
        assert_eq!(s.share_over(42.0), None, "a threshold never computed");
    }

    /// p99.9 of a bucket of 15 ADUs is its maximum: the cell says so, with the count.
    #[test]
    fn a_tail_percentile_of_few_samples_says_which_sample_it_is() {
        let fifteen: Vec<f64> = (1..=15).map(f64::from).collect();
        let s = LatencySummary::of(&fifteen);
        assert_eq!(s.show("p999", 0), "15 (max of 15)");
        assert_eq!(s.show("p99", 0), "15 (max of 15)");
        assert_eq!(s.show("p90", 0), "14 (2nd largest of 15)");
        assert_eq!(s.show("p50", 0), "8", "the median is no tail");
        assert_eq!(s.show("max", 0), "15", "the maximum needs no note");
        let thousand: Vec<f64> = (1..=1000).map(f64::from).collect();
        let s = LatencySummary::of(&thousand);
        assert_eq!(s.show("p999", 0), "999 (2nd largest of 1000)");
        assert_eq!(s.show("p99", 0), "990", "10 samples above: a tail estimate");
        assert_eq!(LatencySummary::of(&[]).show("p999", 0), NO_DATA);
        assert_eq!(ordinal(11), "11th");
        assert_eq!(ordinal(23), "23rd");
    }

    #[test]
    fn no_samples_is_no_data_not_zero() {
        let s = LatencySummary::of(&[]);
        assert_eq!(s.count, 0);
        assert_eq!((s.p50, s.p99, s.max), (None, None, None));
        assert_eq!(s.share_over(160.0), None);
        let json = serde_json::to_value(&s).unwrap();
        assert!(json["p99"].is_null() && json["share_over_ms"]["160"].is_null());
        assert_eq!(LatencySummary::of(&[f64::NAN, 3.0]).count, 1);
        assert_eq!(cell(None, false, |x| format!("{x}")), NO_DATA);
        assert_eq!(Measured::new(Some(0.0), 0).value, None);
    }

    #[test]
    fn censored_samples_make_lower_bounds_only_where_they_can_move_a_number() {
        // 98 delivered at 100 ms, 2 censored after waiting 5 s: the tail is a lower bound,
        // the median is exact.
        let delivered = vec![100.0; 98];
        let s = LatencySummary::with_censored(&delivered, &[5000.0, 5000.0]);
        assert_eq!((s.count, s.censored), (100, 2));
        assert_eq!(s.p50, Some(100.0));
        assert!(!s.is_lower_bound("p50"));
        assert!(s.is_lower_bound("max") && s.is_lower_bound("p99"));
        assert!(
            !s.is_lower_bound("over_160"),
            "5 s waits are surely over 160 ms"
        );
        assert!((s.share_over(160.0).unwrap() - 0.02).abs() < 1e-12);
        // Censored after only 50 ms: it may yet exceed 160 ms, so the share is a lower bound.
        let s = LatencySummary::with_censored(&delivered, &[50.0]);
        assert!(s.is_lower_bound("over_160") && s.is_lower_bound("p50"));
        assert_eq!(cell(Some(3.0), true, |x| format!("{x:.0}")), "≥ 3");
    }
}
