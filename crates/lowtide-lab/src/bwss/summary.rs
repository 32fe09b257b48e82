//! Per-second rates of every flow (what Mehra's Fig. 4-6 plot) and the numbers taken from
//! them: the video's mean rate, its rate during the interference, the share of those seconds
//! at its minimum, and the link's utilization. A second without a measurement is `None` and
//! enters no number; a number without samples is `None` ("no data"), and a goal on it is
//! not met.

use serde::{Deserialize, Serialize};

use super::scenario::{BwssGoal, BwssMetric, BwssScenario};

/// What a flow is in the figure.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FlowKind {
    Video,
    Download,
    Interferer,
    /// A download of another host behind the same bottleneck ("no harm outside").
    Outside,
    /// A flow of the receiver nobody expected (reported, not judged).
    Other,
}

/// One full-size segment per second, kbit/s: paced reads and the daemon's per-second count
/// move in whole segments, so a flow read at exactly 520 kbit/s (44.9 segments a second)
/// shows 510 and 521 in alternate seconds.
pub const SEGMENT_KBPS: f64 = 1448.0 * 8.0 / 1e3;

/// One flow's rate per second of the trial (`kbps[k]` covers `[k, k+1)` s).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FlowSeries {
    pub name: String,
    pub kind: FlowKind,
    pub kbps: Vec<Option<f64>>,
    /// The daemon's target for it (steered variants).
    pub target_kbps: Vec<Option<f64>>,
}

/// One variant's trial as measured.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct VariantRecord {
    pub variant: String,
    pub flows: Vec<FlowSeries>,
    /// Bytes the bottleneck delivered per second (IP packets), kbit/s.
    pub link_kbps: Vec<Option<f64>>,
    /// The rung the player asked for after each second.
    pub rungs: Vec<Option<usize>>,
    /// How programs ended, what the TFRC server did, and the like.
    pub notes: Vec<String>,
    /// The trial ended early with this error.
    pub failed: Option<String>,
}

pub use crate::summary::Measured;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct VideoRate {
    pub mean: Measured,
    pub during_interference: Measured,
    /// Seconds during the interference with the video ≥ `at_min_kbps`, over those measured.
    pub share_of_seconds_at_min: Measured,
    pub min_kbps: f64,
    /// The bar a second must reach: the minimum, or what the server sends on the top rung
    /// when that is less (450 × 1.15 = 517.5 < 520: a receiver cannot read more than is
    /// sent), less one TCP segment per second ([`SEGMENT_KBPS`]).
    pub at_min_kbps: f64,
    /// The same share at the bar without the segment's allowance.
    pub share_of_seconds_at_min_strict: Measured,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct VariantSummary {
    pub name: String,
    pub video_rate_kbps: VideoRate,
    /// Delivered over the link's capacity, measured seconds.
    pub link_utilization: Measured,
    /// Mean rate of every flow over the measured seconds, kbit/s.
    pub flow_mean_kbps: Vec<(String, Measured)>,
    pub outside_mean_kbps: Option<Measured>,
    pub paper_video_kbps: Option<f64>,
    pub failed: Option<String>,
}

pub use crate::goals::ExperimentGoalResult as GoalResult;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BwssSummary {
    pub name: String,
    pub paper: String,
    pub variants: Vec<VariantSummary>,
    pub goals: Vec<GoalResult>,
    pub provenance: Vec<(String, String)>,
    pub failed: Option<String>,
}

impl BwssSummary {
    pub fn goals_not_met(&self) -> usize {
        self.goals.iter().filter(|g| !g.met).count()
    }
}

/// The seconds `[from, to)` that lie wholly inside, as indices.
fn seconds(from: f64, to: f64) -> std::ops::Range<usize> {
    (from.ceil().max(0.0) as usize)..(to.floor().max(0.0) as usize)
}

fn values(xs: &[Option<f64>], r: std::ops::Range<usize>) -> impl Iterator<Item = f64> + '_ {
    xs.get(r).unwrap_or(&[]).iter().flatten().copied()
}

/// The numbers of one variant's trial.
pub fn summarize_variant(s: &BwssScenario, r: &VariantRecord) -> VariantSummary {
    let measured = seconds(s.run.measure_from_s, s.run.duration_s);
    let i = &s.bwss.interference;
    let during = seconds(i.start_s, i.stop_s);
    let min_kbps = s.video_min_kbps().unwrap_or(0.0);
    let top_kbps = s.bwss.rungs_kbps.iter().max().copied().unwrap_or(0) as f64
        * lowtide_media::ladder::stream::ServerConfig::mehra().overdrive;
    let strict_kbps = min_kbps.min(top_kbps);
    let at_min_kbps = strict_kbps - SEGMENT_KBPS;
    let empty = vec![];
    let video = r
        .flows
        .iter()
        .find(|f| f.kind == FlowKind::Video)
        .map_or(&empty, |f| &f.kbps);
    let at_min =
        Measured::mean(
            values(video, during.clone()).map(|k| if k >= at_min_kbps { 1.0 } else { 0.0 }),
        );
    let link = s.link_kbps();
    let utilization =
        Measured::mean(values(&r.link_kbps, measured.clone()).filter_map(|k| link.map(|l| k / l)));
    let variant = s.variants.iter().find(|v| v.name == r.variant);
    VariantSummary {
        name: r.variant.clone(),
        video_rate_kbps: VideoRate {
            mean: Measured::mean(values(video, measured.clone())),
            during_interference: Measured::mean(values(video, during.clone())),
            share_of_seconds_at_min: at_min,
            min_kbps,
            at_min_kbps,
            share_of_seconds_at_min_strict: Measured::mean(
                values(video, during.clone()).map(|k| if k >= strict_kbps { 1.0 } else { 0.0 }),
            ),
        },
        link_utilization: utilization,
        flow_mean_kbps: r
            .flows
            .iter()
            .map(|f| {
                (
                    f.name.clone(),
                    Measured::mean(values(&f.kbps, measured.clone())),
                )
            })
            .collect(),
        outside_mean_kbps: r
            .flows
            .iter()
            .find(|f| f.kind == FlowKind::Outside)
            .map(|f| Measured::mean(values(&f.kbps, measured.clone()))),
        paper_video_kbps: variant.and_then(|v| v.paper_video_kbps),
        failed: r.failed.clone(),
    }
}

fn measure(g: &BwssGoal, v: &VariantSummary, baseline: Option<&VariantSummary>) -> Measured {
    let none = Measured::default();
    match g.metric {
        BwssMetric::VideoMeanKbps => v.video_rate_kbps.mean,
        BwssMetric::VideoDuringInterferenceKbps => v.video_rate_kbps.during_interference,
        BwssMetric::ShareOfSecondsAtMin => v.video_rate_kbps.share_of_seconds_at_min,
        BwssMetric::LinkUtilization => v.link_utilization,
        BwssMetric::OutsideShareVsBaseline => {
            match (
                v.outside_mean_kbps,
                baseline.and_then(|f| f.outside_mean_kbps),
            ) {
                (Some(a), Some(b)) => match (a.value, b.value) {
                    (Some(x), Some(y)) if y > 0.0 => {
                        Measured::new(Some(x / y), a.samples.min(b.samples))
                    }
                    _ => none,
                },
                _ => none,
            }
        }
    }
}

/// Every goal, judged: a goal on no data is not met.
pub fn check_goals(s: &BwssScenario, variants: &[VariantSummary]) -> Vec<GoalResult> {
    s.goals
        .iter()
        .map(|g| {
            let measured = variants
                .iter()
                .find(|v| v.name == g.variant)
                .map(|v| {
                    let baseline = g
                        .baseline
                        .as_ref()
                        .and_then(|b| variants.iter().find(|o| &o.name == b));
                    measure(g, v, baseline)
                })
                .unwrap_or_default();
            GoalResult::judge(
                &g.variant,
                g.metric.as_str(),
                g.min,
                g.max,
                measured,
                &g.why,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario() -> BwssScenario {
        toml::from_str(
            r#"
name = "t"
[run]
duration_s = 10.0
measure_from_s = 2.0
[topology]
senders = 2
receivers = 2
forward = { rate_mbps = 0.96, delay_ms = 15.0 }
reverse = { rate_mbps = 0.96, delay_ms = 15.0 }
[bwss]
downloads = 2
interference = { start_s = 4.0, stop_s = 8.0, rate_kbps = 240 }
[[bwss.rules.rule]]
name = "video"
remote_port = 8450
priority = 10
min_kbps = 520
weight = 0
[[variant]]
name = "BWSS"
video = "tcp"
steer = true
[[goal]]
variant = "BWSS"
metric = "share_of_seconds_at_min"
min = 0.95
"#,
        )
        .unwrap()
    }

    fn flow(kind: FlowKind, kbps: Vec<Option<f64>>) -> FlowSeries {
        FlowSeries {
            name: format!("{kind:?}"),
            kind,
            target_kbps: vec![None; kbps.len()],
            kbps,
        }
    }

    #[test]
    fn the_video_numbers_count_only_measured_seconds() {
        let s = scenario();
        s.check().unwrap();
        let mut video: Vec<Option<f64>> = vec![Some(500.0); 10];
        video[5] = None; // a second without a measurement
        video[6] = Some(530.0);
        video[4] = Some(530.0);
        let r = VariantRecord {
            variant: "BWSS".into(),
            flows: vec![flow(FlowKind::Video, video)],
            link_kbps: vec![Some(960.0); 10],
            ..Default::default()
        };
        let v = summarize_variant(&s, &r);
        // seconds 2..10 measured, 7 of 8 with data
        assert_eq!(v.video_rate_kbps.mean.samples, 7);
        // seconds 4..8 during the interference: 4 (530), 6 (530), 7 (500) measured
        assert_eq!(v.video_rate_kbps.during_interference.samples, 3);
        let share = v.video_rate_kbps.share_of_seconds_at_min;
        assert!((share.value.unwrap() - 2.0 / 3.0).abs() < 1e-9);
        assert_eq!(v.link_utilization.value, Some(1.0));
        let goals = check_goals(&s, &[v]);
        assert!(!goals[0].met);
    }

    #[test]
    fn no_video_samples_is_no_data_and_the_goal_is_not_met() {
        let s = scenario();
        let r = VariantRecord {
            variant: "BWSS".into(),
            flows: vec![],
            link_kbps: vec![None; 10],
            ..Default::default()
        };
        let v = summarize_variant(&s, &r);
        assert_eq!(v.video_rate_kbps.mean.value, None);
        assert_eq!(v.video_rate_kbps.share_of_seconds_at_min.samples, 0);
        assert_eq!(v.link_utilization.value, None);
        let goals = check_goals(&s, &[v]);
        assert!(!goals[0].met);
    }
}
