//! Video streams grouped by round trip (Hsiao, Kung and Tan, Section 5.4, Fig. 9 and 10: 100
//! streams in five groups of 20 at 220, 230, 240, 250 and 260 ms). The paper's finding: under
//! ECN a short-RTT stream grows to 8 layers and starves the long-RTT ones ("higher layer
//! disparity"); under 1-bit RDC the groups are closer. Here: per group the mean and spread of
//! its streams' time-averaged layers, one disparity figure across groups, and each group's
//! mean layers over time (the plot).
//!
//! A flow's group is its path's minimum RTT (the bottleneck's propagation delays both ways
//! plus twice its sender host's access delay), rounded to whole milliseconds.
//!
//! Where we differ from the paper: it gives no number for the disparity, only Fig. 10 (one
//! stream per group over time); we summarise every stream of every group.

use std::collections::BTreeMap;

use lowtide_media::rdc_video::LayerPoint;
use serde::Serialize;

use super::measure;
use crate::summary::Measured;

/// The layers of one RTT group's streams, each stream's time-weighted mean first.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct GroupLayers {
    /// Streams in the group (with or without data).
    pub streams: usize,
    /// Mean over the group's streams of their mean layers.
    pub mean: Measured,
    /// Standard deviation of those means (unfairness inside the group).
    pub spread: Measured,
}

/// Layers by RTT group and how far apart the groups are.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RttGroupLayers {
    /// Keyed by the group's RTT in ms (`"220"` in JSON), in increasing order.
    pub layers_by_rtt_group: BTreeMap<u32, GroupLayers>,
    /// The highest group mean over the lowest (1: no disparity). No data with fewer than two
    /// groups with data, or when the lowest group mean is 0 (see `layer_gap`).
    pub layer_disparity: Measured,
    /// The highest group mean minus the lowest, layers.
    pub layer_gap: Measured,
    /// The shortest-RTT group's mean over the longest-RTT group's (above 1: short round trips
    /// win, the paper's ECN finding).
    pub shortest_over_longest_rtt: Measured,
}

/// The group key of a round trip of `rtt_ms`.
pub fn group_of(rtt_ms: f64) -> u32 {
    rtt_ms.round().max(0.0) as u32
}

/// Groups streams by `rtt_ms` (one entry per stream, as `per_stream`) and summarises them.
pub fn summarise(rtt_ms: &[f64], per_stream: &[Measured]) -> RttGroupLayers {
    let mut means: BTreeMap<u32, (usize, Vec<f64>)> = BTreeMap::new();
    for (&rtt, m) in rtt_ms.iter().zip(per_stream) {
        let g = means.entry(group_of(rtt)).or_default();
        g.0 += 1;
        g.1.extend(m.value);
    }
    let layers_by_rtt_group: BTreeMap<u32, GroupLayers> = means
        .into_iter()
        .map(|(rtt, (streams, xs))| {
            let stats = measure::spread(&xs);
            let group = GroupLayers {
                streams,
                mean: Measured::new(stats.map(|s| s.0), xs.len()),
                spread: Measured::new(stats.map(|s| s.1), xs.len()),
            };
            (rtt, group)
        })
        .collect();
    let with_data: Vec<(f64, usize)> = layers_by_rtt_group
        .values()
        .filter_map(|g| g.mean.value.map(|m| (m, g.mean.samples)))
        .collect();
    let samples: usize = with_data.iter().map(|g| g.1).sum();
    let two_or_more = with_data.len() >= 2;
    let max = with_data.iter().map(|g| g.0).fold(f64::NAN, f64::max);
    let min = with_data.iter().map(|g| g.0).fold(f64::NAN, f64::min);
    let ends = layers_by_rtt_group
        .values()
        .next()
        .zip(layers_by_rtt_group.values().next_back());
    let shortest_over_longest = match ends.map(|(s, l)| (s.mean, l.mean)) {
        Some((s, l)) if two_or_more => match (s.value, l.value) {
            (Some(s_mean), Some(l_mean)) if l_mean > 0.0 => {
                Measured::new(Some(s_mean / l_mean), s.samples.min(l.samples))
            }
            _ => Measured::default(),
        },
        _ => Measured::default(),
    };
    RttGroupLayers {
        layers_by_rtt_group,
        layer_disparity: Measured::new((two_or_more && min > 0.0).then(|| max / min), samples),
        layer_gap: Measured::new(two_or_more.then_some(max - min), samples),
        shortest_over_longest_rtt: shortest_over_longest,
    }
}

/// A group's mean layers over time: at every `step_s` from 0 to `end_s`, the mean of the
/// layer counts of the streams that have started by then (a stream's count holds from one
/// point to the next); times before any stream started have no point.
pub fn mean_over_time(streams: &[&[LayerPoint]], step_s: f64, end_s: f64) -> Vec<(f64, f64)> {
    if step_s.is_nan() || step_s <= 0.0 {
        return vec![];
    }
    let steps = (end_s / step_s).floor() as usize;
    (0..=steps)
        .filter_map(|k| {
            let t = k as f64 * step_s;
            let now: Vec<f64> = streams.iter().filter_map(|pts| layers_at(pts, t)).collect();
            (!now.is_empty()).then(|| (t, now.iter().sum::<f64>() / now.len() as f64))
        })
        .collect()
}

/// A stream's layer count at `t_s`; `None` before its first point.
fn layers_at(points: &[LayerPoint], t_s: f64) -> Option<f64> {
    points
        .iter()
        .take_while(|p| p.t_s <= t_s)
        .last()
        .map(|p| f64::from(p.layers))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(x: f64) -> Measured {
        Measured::new(Some(x), 10)
    }

    #[test]
    fn streams_are_grouped_by_rounded_rtt_and_summarised_per_group() {
        // Two groups: 220 ms (4 and 6 layers), 260 ms (2 and 2, and one stream with no data).
        let rtt = [220.0, 259.6, 220.4, 260.0, 260.2];
        let per_stream = [m(4.0), m(2.0), m(6.0), Measured::default(), m(2.0)];
        let g = summarise(&rtt, &per_stream);
        let keys: Vec<u32> = g.layers_by_rtt_group.keys().copied().collect();
        assert_eq!(keys, [220, 260]);
        let short = g.layers_by_rtt_group[&220];
        assert_eq!((short.streams, short.mean.value), (2, Some(5.0)));
        assert_eq!(short.spread.value, Some(1.0));
        let long = g.layers_by_rtt_group[&260];
        assert_eq!(
            long.streams, 3,
            "the stream with no data is counted as a stream"
        );
        assert_eq!((long.mean.value, long.mean.samples), (Some(2.0), 2));
        assert_eq!(long.spread.value, Some(0.0));
        assert_eq!(g.layer_disparity.value, Some(2.5));
        assert_eq!(g.layer_disparity.samples, 4);
        assert_eq!(g.layer_gap.value, Some(3.0));
        assert_eq!(g.shortest_over_longest_rtt.value, Some(2.5));
    }

    #[test]
    fn disparity_is_max_over_min_whatever_the_order() {
        // The longest round trip wins here: disparity still ≥ 1, the direction below 1.
        let g = summarise(&[230.0, 240.0, 250.0], &[m(2.0), m(3.0), m(4.0)]);
        assert_eq!(g.layer_disparity.value, Some(2.0));
        assert_eq!(g.layer_gap.value, Some(2.0));
        assert_eq!(g.shortest_over_longest_rtt.value, Some(0.5));
    }

    #[test]
    fn one_group_or_a_starved_group_has_no_ratio() {
        let one = summarise(&[220.0, 220.0], &[m(3.0), m(5.0)]);
        assert_eq!(one.layers_by_rtt_group.len(), 1);
        assert_eq!(one.layer_disparity.value, None);
        assert_eq!(one.layer_gap.value, None);
        assert_eq!(one.shortest_over_longest_rtt.value, None);
        // A group at 0 layers: no finite ratio, but the gap says how far apart they are.
        let starved = summarise(&[220.0, 260.0], &[m(4.0), m(0.0)]);
        assert_eq!(starved.layer_disparity.value, None);
        assert_eq!(starved.layer_gap.value, Some(4.0));
        assert_eq!(starved.shortest_over_longest_rtt.value, None);
        // No streams at all.
        let none = summarise(&[], &[]);
        assert!(none.layers_by_rtt_group.is_empty());
        assert_eq!(none.layer_disparity, Measured::default());
    }

    #[test]
    fn json_keys_are_the_rtts_in_ms() {
        let g = summarise(&[230.0, 220.0], &[m(2.0), m(4.0)]);
        let json = serde_json::to_value(&g).unwrap();
        let groups = json["layers_by_rtt_group"].as_object().unwrap();
        assert_eq!(groups.keys().collect::<Vec<_>>(), ["220", "230"]);
        assert_eq!(groups["220"]["mean"]["value"], 4.0);
        assert_eq!(json["layer_disparity"]["value"], 2.0);
    }

    #[test]
    fn a_groups_mean_over_time_counts_the_streams_started() {
        let p = |t_s: f64, layers: u32| LayerPoint { t_s, layers };
        let a = [p(0.5, 2), p(2.0, 4)];
        let b = [p(1.5, 6)];
        let series = mean_over_time(&[&a, &b], 1.0, 3.0);
        // t = 0: nothing started; 1: a alone (2); 2: a 4, b 6; 3: the same.
        assert_eq!(series, [(1.0, 2.0), (2.0, 5.0), (3.0, 5.0)]);
        assert!(mean_over_time(&[&a], 0.0, 3.0).is_empty());
        assert!(mean_over_time(&[], 1.0, 3.0).is_empty());
    }
}
