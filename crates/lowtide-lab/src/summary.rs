//! Latency distributions as the reports quote them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Percentiles in ms and the share of samples above each threshold.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
pub struct LatencySummary {
    pub count: usize,
    pub p50: f64,
    pub p90: f64,
    #[serde(default)]
    pub p95: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    /// Threshold in ms (as a string key, for JSON) → share of samples above it.
    pub share_over_ms: BTreeMap<String, f64>,
}

/// The thresholds of Goel et al.: interactive (160 ms) and control (500 ms).
pub const THRESHOLDS_MS: [f64; 2] = [160.0, 500.0];

impl LatencySummary {
    pub fn of(samples_ms: &[f64]) -> Self {
        let mut v: Vec<f64> = samples_ms
            .iter()
            .copied()
            .filter(|x| x.is_finite())
            .collect();
        if v.is_empty() {
            return Self::default();
        }
        v.sort_by(|a, b| a.total_cmp(b));
        let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
        let share_over_ms = THRESHOLDS_MS
            .iter()
            .map(|t| {
                let over = v.len() - v.partition_point(|x| x <= t);
                (format!("{t:.0}"), over as f64 / v.len() as f64)
            })
            .collect();
        Self {
            count: v.len(),
            p50: at(0.5),
            p90: at(0.9),
            p95: at(0.95),
            p99: at(0.99),
            p999: at(0.999),
            max: at(1.0),
            share_over_ms,
        }
    }

    pub fn share_over(&self, ms: f64) -> f64 {
        self.share_over_ms
            .get(&format!("{ms:.0}"))
            .copied()
            .unwrap_or(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_shares() {
        let samples: Vec<f64> = (1..=1000).map(|i| i as f64).collect();
        let s = LatencySummary::of(&samples);
        assert_eq!(s.count, 1000);
        assert_eq!(s.p50, 501.0);
        assert_eq!(s.p95, 950.0);
        assert_eq!(s.max, 1000.0);
        assert!((s.share_over(160.0) - 0.84).abs() < 1e-9);
        assert!((s.share_over(500.0) - 0.5).abs() < 1e-9);
    }

    #[test]
    fn empty_and_non_finite_samples() {
        assert_eq!(LatencySummary::of(&[]).count, 0);
        assert_eq!(LatencySummary::of(&[f64::NAN, 3.0]).count, 1);
    }
}
