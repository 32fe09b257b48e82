//! Per-second rates of every flow (what Mehra's Fig. 4-6 plot) and the numbers taken from
//! them: the video's mean rate, its rate during the interference, the share of those seconds
//! at its minimum, and the link's utilization. A second without a measurement is `None` and
//! enters no number; a number without samples is `None` ("no data"), and a goal on it is
//! not met.

use serde::{Deserialize, Serialize};

use super::scenario::{BwssGoal, BwssMetric, BwssScenario};
use crate::stats::MeanCi;

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
/// shows 510 and 521 in alternate seconds. The share of seconds within one segment of the
/// minimum is shown beside the judged (strict) share, never instead of it.
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
    /// Which of the variant's trials, from 0.
    #[serde(default)]
    pub run: u32,
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
    /// Seconds during the interference with the video at or above its minimum, over those
    /// measured (the judged share: the scenario's check makes the server able to send more).
    pub share_of_seconds_at_min: Measured,
    pub min_kbps: f64,
    /// The same share with one TCP segment a second of tolerance ([`SEGMENT_KBPS`]): shown
    /// beside the judged share, not judged.
    #[serde(default)]
    pub share_of_seconds_within_a_segment: Measured,
}

/// One trial's own numbers, to show how much trials of one variant differ.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TrialNumbers {
    pub run: u32,
    pub video_mean_kbps: Measured,
    pub link_utilization: Measured,
    pub outside_mean_kbps: Option<Measured>,
}

/// A variant's numbers: the seconds of all its trials pooled (each trial's own in `trials`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct VariantSummary {
    pub name: String,
    pub video_rate_kbps: VideoRate,
    /// Delivered over the link's capacity, measured seconds.
    pub link_utilization: Measured,
    /// Mean rate of every flow over the measured seconds, kbit/s.
    pub flow_mean_kbps: Vec<(String, Measured)>,
    pub outside_mean_kbps: Option<Measured>,
    /// Mean and 95% interval of the trials' outside means (two trials or more).
    pub outside_kbps_over_trials: Option<MeanCi>,
    pub trials: Vec<TrialNumbers>,
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

/// Each trial's first flow of `kind` (a trial without one has none).
fn flows_of<'a>(records: &[&'a VariantRecord], kind: FlowKind) -> Vec<&'a FlowSeries> {
    records
        .iter()
        .filter_map(|r| r.flows.iter().find(|f| f.kind == kind))
        .collect()
}

/// The measured seconds `r` of `flows`, one after another.
fn seconds_of(flows: &[&FlowSeries], r: std::ops::Range<usize>) -> Vec<f64> {
    flows
        .iter()
        .flat_map(|f| values(&f.kbps, r.clone()))
        .collect()
}

/// The numbers of one variant: every per-second figure over the seconds of all its trials
/// (`records`, the variant's trials in order), and each trial's own beside them.
pub fn summarize_variant(
    s: &BwssScenario,
    name: &str,
    records: &[&VariantRecord],
) -> VariantSummary {
    let measured = seconds(s.run.measure_from_s, s.run.duration_s);
    let i = &s.bwss.interference;
    let during = seconds(i.start_s, i.stop_s);
    let min_kbps = s.video_min_kbps().unwrap_or(0.0);

    let link = s.link_kbps();
    let videos = flows_of(records, FlowKind::Video);
    let video = seconds_of(&videos, measured.clone());
    let video_during = seconds_of(&videos, during.clone());
    let share_at = |bar: f64| {
        Measured::mean(
            video_during
                .iter()
                .map(|&k| if k >= bar { 1.0 } else { 0.0 }),
        )
    };
    let utilization = |recs: &[&VariantRecord]| {
        Measured::mean(
            recs.iter()
                .flat_map(|r| values(&r.link_kbps, measured.clone()))
                .filter_map(|k| link.map(|l| k / l)),
        )
    };
    let outside = |recs: &[&VariantRecord]| {
        let flows = flows_of(recs, FlowKind::Outside);
        (!flows.is_empty())
            .then(|| Measured::mean(seconds_of(&flows, measured.clone()).into_iter()))
    };
    // Every flow by name, in the order of first appearance.
    let mut names: Vec<&str> = vec![];
    for f in records.iter().flat_map(|r| &r.flows) {
        if !names.contains(&f.name.as_str()) {
            names.push(&f.name);
        }
    }
    let trials: Vec<TrialNumbers> = records
        .iter()
        .map(|r| TrialNumbers {
            run: r.run,
            video_mean_kbps: Measured::mean(
                seconds_of(&flows_of(&[r], FlowKind::Video), measured.clone()).into_iter(),
            ),
            link_utilization: utilization(&[r]),
            outside_mean_kbps: outside(&[r]),
        })
        .collect();
    let outside_means: Vec<f64> = trials
        .iter()
        .filter_map(|t| t.outside_mean_kbps.and_then(|m| m.value))
        .collect();
    let variant = s.variants.iter().find(|v| v.name == name);
    VariantSummary {
        name: name.to_string(),
        video_rate_kbps: VideoRate {
            mean: Measured::mean(video.iter().copied()),
            during_interference: Measured::mean(video_during.iter().copied()),
            share_of_seconds_at_min: share_at(min_kbps),
            min_kbps,
            share_of_seconds_within_a_segment: share_at(min_kbps - SEGMENT_KBPS),
        },
        link_utilization: utilization(records),
        flow_mean_kbps: names
            .iter()
            .map(|n| {
                let m = Measured::mean(
                    records
                        .iter()
                        .flat_map(|r| r.flows.iter().filter(|f| f.name == *n))
                        .flat_map(|f| values(&f.kbps, measured.clone())),
                );
                (n.to_string(), m)
            })
            .collect(),
        outside_mean_kbps: outside(records),
        outside_kbps_over_trials: (outside_means.len() >= 2)
            .then(|| MeanCi::of(&outside_means))
            .flatten(),
        trials,
        paper_video_kbps: variant.and_then(|v| v.paper_video_kbps),
        failed: records.iter().find_map(|r| r.failed.clone()),
    }
}

/// Every variant that has a trial, in the scenario's order, its trials pooled.
pub fn summarize(s: &BwssScenario, records: &[VariantRecord]) -> Vec<VariantSummary> {
    s.variants
        .iter()
        .filter_map(|v| {
            let mine: Vec<&VariantRecord> =
                records.iter().filter(|r| r.variant == v.name).collect();
            (!mine.is_empty()).then(|| summarize_variant(s, &v.name, &mine))
        })
        .collect()
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
kind = "bwss"
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
server_overdrive = 1.25
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
        let v = summarize_variant(&s, "BWSS", &[&r]);
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

    /// Judged at the stated minimum: 515 kbit/s is not 520 (the old bar, 517.5 less a
    /// segment, counted it as at the minimum). The tolerant share is shown beside it.
    #[test]
    fn seconds_at_the_minimum_are_judged_at_the_minimum() {
        let s = scenario();
        let r = VariantRecord {
            variant: "BWSS".into(),
            flows: vec![flow(FlowKind::Video, vec![Some(515.0); 10])],
            link_kbps: vec![Some(960.0); 10],
            ..Default::default()
        };
        let v = summarize_variant(&s, "BWSS", &[&r]);
        assert_eq!(v.video_rate_kbps.share_of_seconds_at_min.value, Some(0.0));
        let tolerant = v.video_rate_kbps.share_of_seconds_within_a_segment;
        assert_eq!(tolerant.value, Some(1.0));
        assert!(!check_goals(&s, &[v])[0].met);
    }

    /// A server whose top rate cannot carry the minimum with room is a scenario error.
    #[test]
    fn a_server_that_cannot_carry_the_minimum_is_refused() {
        let mut s = scenario();
        s.bwss.server_overdrive = 1.15; // 450 × 1.15 = 517.5 < 520
        let e = s.check().unwrap_err().to_string();
        assert!(
            e.contains("bwss.server_overdrive") && e.contains("517.5"),
            "{e}"
        );
        s.bwss.server_overdrive = 1.2; // 540 < 520 + 23.2
        assert!(s.check().is_err());
        s.bwss.server_overdrive = 1.25; // 562.5
        s.check().unwrap();
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
        let v = summarize_variant(&s, "BWSS", &[&r]);
        assert_eq!(v.video_rate_kbps.mean.value, None);
        assert_eq!(v.video_rate_kbps.share_of_seconds_at_min.samples, 0);
        assert_eq!(v.link_utilization.value, None);
        let goals = check_goals(&s, &[v]);
        assert!(!goals[0].met);
    }

    #[test]
    fn trials_pool_their_seconds_and_the_outside_goal_compares_pooled_means() {
        let mut s = scenario();
        s.variants = toml::from_str::<toml::Table>(
            r#"
[[variant]]
name = "TCP + outside"
video = "tcp"
steer = false
outside_download = true
[[variant]]
name = "BWSS + outside"
video = "tcp"
steer = true
outside_download = true
runs = 2
"#,
        )
        .unwrap()["variant"]
            .clone()
            .try_into()
            .unwrap();
        s.goals = vec![BwssGoal {
            variant: "BWSS + outside".into(),
            metric: BwssMetric::OutsideShareVsBaseline,
            min: Some(0.8),
            max: Some(1.25),
            baseline: Some("TCP + outside".into()),
            why: String::new(),
        }];
        s.check().unwrap();
        let trial = |variant: &str, run: u32, outside: f64| VariantRecord {
            variant: variant.into(),
            run,
            flows: vec![
                flow(FlowKind::Video, vec![Some(500.0); 10]),
                flow(FlowKind::Outside, vec![Some(outside); 10]),
            ],
            link_kbps: vec![Some(960.0); 10],
            ..Default::default()
        };
        let records = vec![
            trial("TCP + outside", 0, 200.0),
            trial("BWSS + outside", 0, 150.0),
            trial("BWSS + outside", 1, 290.0),
        ];
        let v = summarize(&s, &records);
        assert_eq!(v.len(), 2);
        let bwss = &v[1];
        assert_eq!(bwss.trials.len(), 2);
        // 8 measured seconds per trial, pooled
        assert_eq!(bwss.video_rate_kbps.mean.samples, 16);
        assert_eq!(bwss.outside_mean_kbps.unwrap().value, Some(220.0));
        let ci = bwss.outside_kbps_over_trials.unwrap();
        assert_eq!((ci.mean, ci.runs), (220.0, 2));
        assert!(ci.ci95_low < 150.0 && ci.ci95_high > 290.0);
        // One trial has no interval to show.
        assert_eq!(v[0].outside_kbps_over_trials, None);
        // 220 / 200: within the band, though one trial alone (0.75) was not.
        let goals = check_goals(&s, &v);
        assert!((goals[0].measured.value.unwrap() - 1.1).abs() < 1e-9);
        assert!(goals[0].met);
    }
}
