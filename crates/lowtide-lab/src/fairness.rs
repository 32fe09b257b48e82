//! Throughput fairness between the greedy streams of a side-by-side run: Jain's fairness
//! index (Jain, Chiu and Hawe, "A Quantitative Measure of Fairness and Discrimination for
//! Resource Allocation in Shared Computer Systems", 1984): `J = (Σx)² / (n · Σx²)` over the
//! streams' goodputs, 1 when all are equal, `1/n` when one takes everything. Issue 10 asks
//! it of a failover variant beside plain TCP and elephants, because a connection that fails
//! over starts afresh in slow start next to the old one's history (Erbad and Krasic,
//! "Connection Manager": "a trade-off between latency and fairness").
//!
//! Where we differ from a fairness experiment with every flow measured: the elephants'
//! sinks count their bytes together, so the index covers the measured streams only (the
//! variants of one run), and each stream's share is of what they delivered together.

use serde::{Deserialize, Serialize};

use crate::results::VariantSummary;
use crate::scenario::Mode;

/// Jain's index of `xs`; `None` without samples or when nothing was delivered.
pub fn jain(xs: &[f64]) -> Option<f64> {
    let sum: f64 = xs.iter().sum();
    let squares: f64 = xs.iter().map(|x| x * x).sum();
    (!xs.is_empty() && sum > 0.0 && sum.is_finite())
        .then(|| sum * sum / (xs.len() as f64 * squares))
}

/// Fairness among the greedy streams of one mode (`summary.json`: `fairness`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FairnessSummary {
    pub mode: Mode,
    /// Jain's index of each run (over the streams' goodputs in that run).
    pub jain_runs: Vec<f64>,
    /// Their mean; `None` without a run in which every stream has a goodput.
    pub jain_index: Option<f64>,
    /// Each stream's share of what the streams delivered together, mean over runs.
    pub shares: Vec<(String, f64)>,
}

/// Fairness of the side-by-side streams that take whatever their transport gives (latency
/// streams: not video, conference or ladder, whose rates are the application's); `None` with
/// fewer than two of them.
pub fn of(variants: &[VariantSummary]) -> Option<FairnessSummary> {
    let greedy: Vec<(String, Vec<f64>)> = variants
        .iter()
        .filter(|v| v.mode == Mode::SideBySide)
        .filter(|v| v.video.is_none() && v.conference.is_none() && v.ladder.is_none())
        .map(|v| (v.name.clone(), v.goodput_runs_bps.clone()))
        .collect();
    of_goodputs(&greedy)
}

/// Fairness of streams given as (name, goodput of each run); `None` with fewer than two.
pub fn of_goodputs(streams: &[(String, Vec<f64>)]) -> Option<FairnessSummary> {
    if streams.len() < 2 {
        return None;
    }
    let runs = streams.iter().map(|(_, g)| g.len()).min()?;
    let mut jain_runs = vec![];
    let mut shares = vec![0.0; streams.len()];
    for k in 0..runs {
        let xs: Vec<f64> = streams.iter().map(|(_, g)| g[k]).collect();
        let Some(j) = jain(&xs) else { continue };
        jain_runs.push(j);
        let sum: f64 = xs.iter().sum();
        for (s, x) in shares.iter_mut().zip(&xs) {
            *s += x / sum;
        }
    }
    let counted = jain_runs.len();
    let jain_index = (counted > 0).then(|| jain_runs.iter().sum::<f64>() / counted as f64);
    Some(FairnessSummary {
        mode: Mode::SideBySide,
        jain_runs,
        jain_index,
        shares: if counted == 0 {
            vec![]
        } else {
            streams
                .iter()
                .zip(shares)
                .map(|((n, _), s)| (n.clone(), s / counted as f64))
                .collect()
        },
    })
}

impl FairnessSummary {
    /// `Jain's index 0.98 over 3 streams (TCP 35%, MinBuf(1,3) 33%, ...)`.
    pub fn describe(&self) -> String {
        let shares: Vec<String> = self
            .shares
            .iter()
            .map(|(n, s)| format!("{n} {:.1}%", s * 100.0))
            .collect();
        match self.jain_index {
            Some(j) => format!(
                "Jain's index {j:.3} over {} streams, mean of {} run(s) ({})",
                self.shares.len(),
                self.jain_runs.len(),
                shares.join(", ")
            ),
            None => "Jain's index: no data (no run in which the streams delivered)".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jains_index_is_one_when_equal_and_one_over_n_when_one_takes_all() {
        assert_eq!(jain(&[5.0, 5.0, 5.0]), Some(1.0));
        assert!((jain(&[9.0, 0.0, 0.0]).unwrap() - 1.0 / 3.0).abs() < 1e-12);
        // (1 + 3)^2 / (2 * (1 + 9)) = 0.8
        assert!((jain(&[1.0, 3.0]).unwrap() - 0.8).abs() < 1e-12);
        assert_eq!(jain(&[]), None, "no streams: no data");
        assert_eq!(jain(&[0.0, 0.0]), None, "nothing delivered: no data");
    }

    #[test]
    fn the_summary_averages_runs_and_gives_shares() {
        let streams = vec![
            ("TCP".to_string(), vec![1.0, 2.0, 0.0]),
            ("FO".to_string(), vec![3.0, 2.0, 0.0]),
        ];
        let f = of_goodputs(&streams).unwrap();
        // Run 3 delivered nothing: left out, not counted as 0 or 1.
        assert_eq!(f.jain_runs, [0.8, 1.0]);
        assert!((f.jain_index.unwrap() - 0.9).abs() < 1e-12);
        assert_eq!(f.shares[0].0, "TCP");
        assert!((f.shares[0].1 - (0.25 + 0.5) / 2.0).abs() < 1e-12);
        assert!(
            f.describe().starts_with(
                "Jain's index 0.900 over 2 streams, mean of 2 run(s) (TCP 37.5%, FO 62.5%)"
            ),
            "{}",
            f.describe()
        );
        assert_eq!(
            of_goodputs(&streams[..1]),
            None,
            "one stream: nothing to compare"
        );
        let idle = of_goodputs(&[("a".into(), vec![0.0]), ("b".into(), vec![0.0])]).unwrap();
        assert_eq!((idle.jain_index, idle.shares.len()), (None, 0));
        assert!(idle.describe().contains("no data"));
    }
}
