//! The numbers of an RDC run, from its raw records: how long the flows took to settle and how
//! much they still oscillate (Fig. 3), how they share the link, and what the bottleneck's
//! queue held. Pure functions, unit-tested on made-up series.

use lowtide_media::rdc_video::LayerPoint;

use crate::summary::Measured;

/// Each point the mean of `w` bins from it on (a series `w - 1` shorter).
pub fn smooth(xs: &[u64], w: usize) -> Vec<u64> {
    let w = w.max(1);
    xs.windows(w)
        .map(|b| (b.iter().sum::<u64>() as f64 / w as f64).round() as u64)
        .collect()
}

/// When every flow settled: the time, from bin `from` on, after which each flow's packets
/// per bin stay within `band` (a share) of that flow's mean over the last quarter of the
/// run. `Some(seconds after bin from's start)`; `None` when a flow is outside its band in
/// the last bin (it never settled) or a flow sent nothing at the end.
pub fn settling_s(flows: &[Vec<u64>], from: usize, bin_s: f64, band: f64) -> Option<f64> {
    let bins = flows.iter().map(Vec::len).min()?;
    if from >= bins {
        return None;
    }
    let tail = bins - (bins - from).div_ceil(4);
    let mut last_outside: Option<usize> = None;
    for f in flows {
        let end: Vec<f64> = f[tail..bins].iter().map(|&x| x as f64).collect();
        let mean = mean(&end)?;
        if mean <= 0.0 {
            return None;
        }
        for (i, &x) in f.iter().enumerate().take(bins).skip(from) {
            if (x as f64 - mean).abs() > band * mean {
                last_outside = Some(last_outside.map_or(i, |l: usize| l.max(i)));
            }
        }
    }
    match last_outside {
        None => Some(0.0),
        Some(i) if i + 1 >= bins => None,
        Some(i) => Some((i + 1 - from) as f64 * bin_s),
    }
}

/// Oscillation from bin `from` on: each flow's coefficient of variation (standard deviation
/// over mean of its packets per bin), averaged over flows.
pub fn oscillation(flows: &[Vec<u64>], from: usize) -> Measured {
    let cvs: Vec<f64> = flows
        .iter()
        .filter_map(|f| {
            let xs: Vec<f64> = f.iter().skip(from).map(|&x| x as f64).collect();
            let m = mean(&xs)?;
            (m > 0.0).then(|| {
                let var = xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / xs.len() as f64;
                var.sqrt() / m
            })
        })
        .collect();
    Measured::new(mean(&cvs), cvs.len())
}

/// Smallest flow total over the largest (1 is an even share).
pub fn share_ratio(totals: &[f64]) -> Measured {
    let max = totals.iter().copied().fold(f64::NAN, f64::max);
    let min = totals.iter().copied().fold(f64::NAN, f64::min);
    Measured::new((max > 0.0).then(|| min / max), totals.len())
}

/// The `p`-th percentile (0-100) of `xs` (`lowtide::proto::quantile`'s rule); `None` for no
/// samples.
pub fn percentile(xs: &mut [u32], p: f64) -> Option<f64> {
    xs.sort_unstable();
    lowtide::proto::quantile::of_sorted(xs, p / 100.0).map(f64::from)
}

/// A stream's layers averaged over time in `[from_s, to_s)` (from its first point on, if
/// later); `None` when the stream has no point before `to_s`.
pub fn mean_layers(points: &[LayerPoint], from_s: f64, to_s: f64) -> Option<f64> {
    let start = points.first()?.t_s.max(from_s);
    if start >= to_s {
        return None;
    }
    let mut area = 0.0;
    for (i, p) in points.iter().enumerate() {
        let next = points.get(i + 1).map_or(to_s, |q| q.t_s.min(to_s));
        let a = p.t_s.max(start);
        if next > a {
            area += f64::from(p.layers) * (next - a);
        }
    }
    Some(area / (to_s - start))
}

/// Segments in flight against the stated maximum window.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct InFlight {
    /// The scenario's `window_packets` (the paper's maximum window).
    pub window_packets: u32,
    /// Flows whose sampled `tcpi_unacked` ever exceeded it, over the flows sampled.
    pub flows_over: Measured,
    /// The largest `tcpi_unacked` of any flow, segments.
    pub max_packets: Measured,
}

/// [`InFlight`] from each flow's largest `tcpi_unacked` (`None`: never sampled). The kernel's
/// own count, not the sender's intent, so a bound that does not hold shows (the receiver's
/// clamp did not); samples every few ms can miss a short excess, not invent one.
pub fn in_flight(max_unacked: &[Option<u32>], window_packets: u32) -> InFlight {
    let sampled: Vec<u32> = max_unacked.iter().flatten().copied().collect();
    let n = sampled.len();
    let over = sampled.iter().filter(|&&m| m > window_packets).count();
    InFlight {
        window_packets,
        flows_over: Measured::new(Some(over as f64), n),
        max_packets: Measured::new(sampled.iter().max().map(|&m| f64::from(m)), n),
    }
}

/// Mean, population standard deviation, smallest and largest of `xs`.
pub fn spread(xs: &[f64]) -> Option<(f64, f64, f64, f64)> {
    let m = mean(xs)?;
    let sd = (xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / xs.len() as f64).sqrt();
    let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some((m, sd, min, max))
}

fn mean(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settling_is_after_the_last_bin_outside_the_band() {
        // Two flows: one swings until bin 5, then both sit at 50.
        let a = vec![100, 0, 90, 10, 70, 30, 50, 50, 50, 50, 50, 50];
        let b = vec![0, 100, 10, 90, 30, 70, 50, 50, 50, 50, 50, 50];
        let s = settling_s(&[a.clone(), b.clone()], 0, 0.1, 0.2).unwrap();
        assert!((s - 0.6).abs() < 1e-9);
        // Counted from bin 2: the last bin outside is still bin 5.
        let s = settling_s(&[a, b], 2, 0.1, 0.2).unwrap();
        assert!((s - 0.4).abs() < 1e-9);
        // Settled from the start.
        assert_eq!(settling_s(&[vec![50; 8]], 0, 0.1, 0.2), Some(0.0));
    }

    #[test]
    fn a_flow_still_swinging_at_the_end_never_settled() {
        let a = vec![50, 50, 50, 50, 100, 0, 100, 0];
        assert_eq!(settling_s(&[a], 0, 0.084, 0.2), None);
        // No flows, a flow that stopped, or a start past the end: no answer either.
        assert_eq!(settling_s(&[], 0, 0.1, 0.2), None);
        assert_eq!(settling_s(&[vec![5, 5, 0, 0]], 0, 0.1, 0.2), None);
        assert_eq!(settling_s(&[vec![5, 5]], 3, 0.1, 0.2), None);
    }

    #[test]
    fn smoothing_is_a_moving_average() {
        assert_eq!(smooth(&[0, 20, 0, 20, 0], 2), vec![10, 10, 10, 10]);
        assert_eq!(smooth(&[3, 4], 1), vec![3, 4]);
        assert!(smooth(&[3], 2).is_empty());
    }

    #[test]
    fn oscillation_is_the_mean_coefficient_of_variation() {
        let steady = vec![10, 10, 10, 10];
        let swinging = vec![0, 20, 0, 20];
        let o = oscillation(&[steady.clone(), swinging], 0);
        assert_eq!(o.samples, 2);
        assert!((o.value.unwrap() - 0.5).abs() < 1e-9);
        assert_eq!(oscillation(&[steady], 0).value, Some(0.0));
        assert_eq!(oscillation(&[vec![0, 0]], 0).value, None);
    }

    #[test]
    fn flows_over_the_window_are_counted_against_it() {
        // The last full run before the sender bound: 70 packets against 40.
        let f = in_flight(&[Some(19), Some(40), Some(70), None], 40);
        assert_eq!(f.flows_over, Measured::new(Some(1.0), 3));
        assert_eq!(f.max_packets, Measured::new(Some(70.0), 3));
        // Exactly the window is within it.
        let f = in_flight(&[Some(40), Some(40)], 40);
        assert_eq!(f.flows_over.value, Some(0.0));
        // Nothing sampled is no data, not "no flow over".
        let f = in_flight(&[None], 40);
        assert_eq!((f.flows_over.value, f.max_packets.value), (None, None));
    }

    #[test]
    fn layers_are_averaged_over_time_within_the_window() {
        let p = |t_s: f64, layers: u32| LayerPoint { t_s, layers };
        // 1 layer from 2 s, 3 from 6 s, 2 from 8 s; window [4, 10): 2×1 + 2×3 + 2×2 = 12.
        let pts = [p(2.0, 1), p(6.0, 3), p(8.0, 2)];
        assert_eq!(mean_layers(&pts, 4.0, 10.0), Some(2.0));
        // A stream that starts inside the window counts from its start.
        assert_eq!(mean_layers(&pts, 0.0, 6.0), Some(1.0));
        assert_eq!(mean_layers(&pts, 0.0, 2.0), None);
        assert_eq!(mean_layers(&[], 0.0, 2.0), None);
        let (m, sd, min, max) = spread(&[2.0, 4.0]).unwrap();
        assert_eq!((m, sd, min, max), (3.0, 1.0, 2.0, 4.0));
        assert_eq!(spread(&[]), None);
    }

    #[test]
    fn shares_and_percentiles() {
        assert_eq!(share_ratio(&[8.0, 10.0]).value, Some(0.8));
        assert_eq!(share_ratio(&[0.0, 0.0]).value, None);
        assert_eq!(share_ratio(&[]).value, None);
        let mut q: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile(&mut q, 99.0), Some(99.0));
        // Index round(99 q): 98 and 50, i.e. the values 99 and 51.
        assert_eq!(percentile(&mut q, 50.0), Some(51.0));
        assert_eq!(percentile(&mut [], 50.0), None);
    }
}
