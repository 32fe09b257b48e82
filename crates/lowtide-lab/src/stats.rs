//! Means with confidence intervals over runs, and the Student's t quantiles they need.

/// The median of `sorted` (ascending), by `lowtide::proto::quantile`'s rule: the middle value,
/// of an even count the upper of the two middle ones; `None` when empty.
pub fn median(sorted: &[f64]) -> Option<f64> {
    lowtide::proto::quantile::of_sorted(sorted, 0.5)
}

use serde::{Deserialize, Serialize};

/// Mean and 95% confidence interval (Student's t) over runs.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Default)]
pub struct MeanCi {
    pub mean: f64,
    pub ci95_low: f64,
    pub ci95_high: f64,
    pub runs: usize,
}

impl MeanCi {
    /// `None` for no runs; one run has a zero-width interval (the report shows no ±).
    pub fn of(xs: &[f64]) -> Option<Self> {
        let n = xs.len();
        if n == 0 {
            return None;
        }
        let mean = xs.iter().sum::<f64>() / n as f64;
        let half = if n < 2 {
            0.0
        } else {
            let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
            t95(n - 1) * (var / n as f64).sqrt()
        };
        Some(Self {
            mean,
            ci95_low: mean - half,
            ci95_high: mean + half,
            runs: n,
        })
    }
}

/// The 0.975 quantile of Student's t with `df` degrees of freedom (two-sided 95%).
///
/// Exact to four decimals from a table up to 30 degrees of freedom; beyond, the
/// Cornish-Fisher expansion around the normal quantile (Abramowitz & Stegun 26.7.5), whose
/// error at 31 degrees is below 1e-5 and falls with `df`.
pub fn t95(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281, 2.2010,
        2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860, 2.0796, 2.0739,
        2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423,
    ];
    match df {
        0 => f64::NAN,
        1..=30 => T[df - 1],
        _ => {
            let z: f64 = 1.959_963_985;
            let v = df as f64;
            let (z3, z5, z7) = (z.powi(3), z.powi(5), z.powi(7));
            z + (z3 + z) / (4.0 * v)
                + (5.0 * z5 + 16.0 * z3 + 3.0 * z) / (96.0 * v * v)
                + (3.0 * z7 + 19.0 * z5 + 17.0 * z3 - 15.0 * z) / (384.0 * v * v * v)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confidence_interval_uses_student_t() {
        let m = MeanCi::of(&[1.0, 2.0, 3.0]).unwrap();
        assert_eq!(m.mean, 2.0);
        assert!((m.ci95_high - (2.0 + 4.3027 / 3f64.sqrt())).abs() < 1e-9);
        assert_eq!(MeanCi::of(&[5.0]).unwrap().ci95_low, 5.0);
        assert!(MeanCi::of(&[]).is_none());
    }

    #[test]
    fn t_quantiles_match_published_values() {
        // Published two-sided 95% values (e.g. NIST/SEMATECH e-Handbook, Table 1.4.3.2).
        for (df, t) in [
            (1, 12.706),
            (11, 2.201),
            (20, 2.086),
            (21, 2.080),
            (30, 2.042),
            (40, 2.021),
            (60, 2.000),
            (100, 1.984),
            (1000, 1.962),
        ] {
            assert!((t95(df) - t).abs() < 6e-4, "df {df}: {} vs {t}", t95(df));
        }
        // The expansion continues the table smoothly.
        assert!((t95(31) - 2.0395).abs() < 1e-4, "{}", t95(31));
        assert!(t95(31) < t95(30) && t95(31) > 1.96);
    }
}
