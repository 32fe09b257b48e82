//! Goals: numbers a scenario must reach (`[[goal]]`), checked against the summary.
//!
//! A goal names a variant, a metric and a bound, optionally relative to the variant's
//! plain-TCP baseline (`vs_baseline = "ratio"` or `"difference"`). A metric without
//! samples is never met: no data is not a pass.

use serde::{Deserialize, Serialize};

use crate::results::{FloorSummary, VariantSummary};
use crate::scenario::Mode;
use crate::summary::Measured;

/// A number the run should reach, e.g. MinBuf(1,3)'s sender-side p99 at most one RTT.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Goal {
    pub variant: String,
    pub metric: Metric,
    /// Compare with the variant's baseline (its application's plain-TCP variant) instead
    /// of taking the metric as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vs_baseline: Option<Relation>,
    /// With `vs_baseline`: compare with this variant (same mode) instead of the baseline,
    /// e.g. lowtide's handover against MPTCP's in the same run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub against: Option<String>,
    #[serde(default)]
    pub min: Option<f64>,
    #[serde(default)]
    pub max: Option<f64>,
    /// The fewest samples the goal may be judged on (runs, for a metric over runs): fewer is
    /// not met, whatever the value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_samples: Option<usize>,
    /// Where the goal comes from (issue, paper), for the report.
    #[serde(default)]
    pub why: String,
}

/// How a goal relates a variant's metric to its baseline's.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Relation {
    /// variant / baseline
    Ratio,
    /// variant − baseline
    Difference,
}

/// Metrics a goal can name.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    LatencyP50Ms,
    LatencyP95Ms,
    LatencyP99Ms,
    SenderSideP99Ms,
    /// lowtide's own part of the latency (its queue and the kernel's unsent bytes ahead), p99.
    SenderOwnP99Ms,
    #[serde(rename = "share_over_160")]
    ShareOver160,
    /// Share over 160 ms minus the floor probe's: what the sender added above the network.
    #[serde(rename = "share_over_160_above_floor")]
    ShareOver160AboveFloor,
    /// Share of the messages sent in the window that never arrived.
    Undelivered,
    /// Delivered goodput over the baseline's (per run side by side).
    GoodputVsBaseline,
    /// What the sender wrote over the baseline's (Goel et al. Table II, video).
    SentVsBaseline,
    /// Video: share of transmitted windows whole within 500 ms.
    #[serde(rename = "windows_within_500")]
    WindowsWithin500,
    /// Video: share of windows the sender dropped whole.
    DroppedWindows,
    /// Video: layers shown per frame.
    MeanLayers,
    /// Segments the stream's TCP retransmitted in the window (`TCP_INFO`).
    RetransmittedSegments,
    /// Retransmission timeouts of the stream's TCP in the window (`TCP_INFO`).
    Timeouts,
    /// Conference: frames shown per second (Erbad and Krasic, Fig. 5).
    ConferenceFps,
    /// Conference: the base layer's median latency minus the floor probe's median.
    BaseP50AboveFloorMs,
    /// Conference: the highest p99.9 latency of any importance bucket (Fig. 6), runs pooled.
    WorstImportanceP999Ms,
    /// The same, in the worst run (a bound that must hold in every run); samples: runs.
    WorstImportanceP999MsWorstRun,
    /// The same, the median over runs; samples: runs.
    WorstImportanceP999MsMedianRun,
    /// Conference: layers per shown frame (a quality floor beside the latency goals).
    ConferenceMeanLayers,
    /// The largest latency of a message sent in the window (censored ones as lower bounds).
    LatencyMaxMs,
    /// Conference: the base layer's (importance 7) largest capture-to-arrival latency in the
    /// window, pooled over runs (a handover's worst for the most important messages; pair it
    /// with `conference_fps`, as base ADUs cancelled at the threshold never arrive).
    BaseMaxMs,
    /// Bit-rate ladder: switches after the first rung, worst run (Hasan et al.).
    Switches,
    /// Bit-rate ladder: down-switches, worst run.
    DownSwitches,
    /// Bit-rate ladder: rebuffers at least a second after play started, worst run.
    RebuffersAfterFirstS,
    /// Bit-rate ladder: share of the stream's seconds whose throughput kept up with the
    /// streamed bit rate.
    RateMatchShare,
    /// The same share as first defined: the stream's last second counted too.
    RateMatchShareWithLastSecond,
    /// Live video: share of the frames stamped in the window that were decoded.
    LiveShownShare,
    /// Live video: decoded frames the decoder marked corrupted (a reference missing).
    LiveCorruptedFrames,
    /// Live video: errors and warnings the receiver's GStreamer printed; samples: runs.
    LiveBusProblems,
    /// Live video: the 10th percentile of frames shown per second; samples: seconds.
    LiveFpsP10,
    /// Live video: the longest time between two decoded frames, ms, worst run.
    LiveLongestStallMs,
}

impl Metric {
    /// Every metric, for checks and documentation.
    pub const ALL: [Metric; 33] = [
        Metric::LatencyP50Ms,
        Metric::LatencyP95Ms,
        Metric::LatencyP99Ms,
        Metric::SenderSideP99Ms,
        Metric::SenderOwnP99Ms,
        Metric::ShareOver160,
        Metric::ShareOver160AboveFloor,
        Metric::Undelivered,
        Metric::GoodputVsBaseline,
        Metric::SentVsBaseline,
        Metric::WindowsWithin500,
        Metric::DroppedWindows,
        Metric::MeanLayers,
        Metric::RetransmittedSegments,
        Metric::Timeouts,
        Metric::ConferenceFps,
        Metric::BaseP50AboveFloorMs,
        Metric::WorstImportanceP999Ms,
        Metric::WorstImportanceP999MsWorstRun,
        Metric::WorstImportanceP999MsMedianRun,
        Metric::ConferenceMeanLayers,
        Metric::LatencyMaxMs,
        Metric::BaseMaxMs,
        Metric::Switches,
        Metric::DownSwitches,
        Metric::RebuffersAfterFirstS,
        Metric::RateMatchShare,
        Metric::RateMatchShareWithLastSecond,
        Metric::LiveShownShare,
        Metric::LiveCorruptedFrames,
        Metric::LiveBusProblems,
        Metric::LiveFpsP10,
        Metric::LiveLongestStallMs,
    ];

    /// The name as written in scenario files.
    pub fn as_str(self) -> &'static str {
        match self {
            Metric::LatencyP50Ms => "latency_p50_ms",
            Metric::LatencyP95Ms => "latency_p95_ms",
            Metric::LatencyP99Ms => "latency_p99_ms",
            Metric::SenderSideP99Ms => "sender_side_p99_ms",
            Metric::SenderOwnP99Ms => "sender_own_p99_ms",
            Metric::ShareOver160 => "share_over_160",
            Metric::ShareOver160AboveFloor => "share_over_160_above_floor",
            Metric::Undelivered => "undelivered",
            Metric::GoodputVsBaseline => "goodput_vs_baseline",
            Metric::SentVsBaseline => "sent_vs_baseline",
            Metric::WindowsWithin500 => "windows_within_500",
            Metric::DroppedWindows => "dropped_windows",
            Metric::MeanLayers => "mean_layers",
            Metric::RetransmittedSegments => "retransmitted_segments",
            Metric::Timeouts => "timeouts",
            Metric::ConferenceFps => "conference_fps",
            Metric::BaseP50AboveFloorMs => "base_p50_above_floor_ms",
            Metric::WorstImportanceP999Ms => "worst_importance_p999_ms",
            Metric::WorstImportanceP999MsWorstRun => "worst_importance_p999_ms_worst_run",
            Metric::WorstImportanceP999MsMedianRun => "worst_importance_p999_ms_median_run",
            Metric::ConferenceMeanLayers => "conference_mean_layers",
            Metric::LatencyMaxMs => "latency_max_ms",
            Metric::BaseMaxMs => "base_max_ms",
            Metric::Switches => "switches",
            Metric::DownSwitches => "down_switches",
            Metric::RebuffersAfterFirstS => "rebuffers_after_first_s",
            Metric::RateMatchShare => "rate_match_share",
            Metric::RateMatchShareWithLastSecond => "rate_match_share_with_last_second",
            Metric::LiveShownShare => "live_shown_share",
            Metric::LiveCorruptedFrames => "live_corrupted_frames",
            Metric::LiveBusProblems => "live_bus_problems",
            Metric::LiveFpsP10 => "live_fps_p10",
            Metric::LiveLongestStallMs => "live_longest_stall_ms",
        }
    }

    /// Metrics that are already relative to the baseline cannot be taken relative again.
    pub fn is_relative(self) -> bool {
        matches!(self, Metric::GoodputVsBaseline | Metric::SentVsBaseline)
    }

    /// The metric in `v`, with the samples behind it.
    pub fn measure(self, v: &VariantSummary, floor: &FloorSummary) -> Measured {
        let l = &v.latency_ms;
        let latency = |x: Option<f64>| Measured::new(x, l.count);
        let video = |f: &dyn Fn(&crate::results::VideoSummary) -> Measured| {
            v.video.as_ref().map_or(Measured::default(), f)
        };
        // A ladder count stands on the stream's seconds: none streamed is no data.
        let ladder = |f: &dyn Fn(&crate::results::ladder::LadderSummary) -> Option<f64>| {
            v.ladder.as_ref().map_or(Measured::default(), |l| {
                Measured::new(f(l), l.rate_match_seconds)
            })
        };
        let live = |f: &dyn Fn(&crate::live_video::LiveSummary) -> Measured| {
            v.live.as_ref().map_or(Measured::default(), f)
        };
        match self {
            Metric::LiveShownShare => live(&|x| Measured::new(x.shown_share(), x.stamped)),
            Metric::LiveCorruptedFrames => {
                live(&|x| Measured::new((x.decoded > 0).then_some(x.corrupted as f64), x.decoded))
            }
            Metric::LiveBusProblems => {
                live(&|x| Measured::new((x.runs > 0).then_some(x.bus_problems as f64), x.runs))
            }
            Metric::LiveFpsP10 => live(&|x| Measured::new(x.fps_p10, x.fps_seconds)),
            Metric::LiveLongestStallMs => live(&|x| Measured::new(x.longest_stall_ms, x.decoded)),
            Metric::LatencyP50Ms => latency(l.p50),
            Metric::LatencyP95Ms => latency(l.p95),
            Metric::LatencyP99Ms => latency(l.p99),
            Metric::SenderSideP99Ms => {
                Measured::new(v.sender_side_ms.latency.p99, v.sender_side_ms.latency.count)
            }
            Metric::SenderOwnP99Ms => Measured::new(v.own_part_ms.p99, v.own_part_ms.count),
            Metric::ShareOver160 => latency(l.share_over(160.0)),
            Metric::ShareOver160AboveFloor => {
                let f = &floor.latency_ms;
                Measured::new(
                    l.share_over(160.0)
                        .zip(f.share_over(160.0))
                        .map(|(a, b)| a - b),
                    l.count.min(f.count),
                )
            }
            Metric::Undelivered => Measured::share(l.censored, l.count),
            Metric::GoodputVsBaseline => v
                .normalized_throughput
                .map_or(Measured::default(), |n| Measured::new(Some(n.mean), n.runs)),
            Metric::SentVsBaseline => v
                .sent_vs_baseline
                .map_or(Measured::default(), |n| Measured::new(Some(n.mean), n.runs)),
            Metric::WindowsWithin500 => video(&|x| x.within(500.0)),
            Metric::DroppedWindows => video(&|x| x.dropped()),
            Metric::MeanLayers => video(&|x| x.layers()),
            Metric::RetransmittedSegments => v.transport.retransmitted_segments,
            Metric::Timeouts => v.transport.timeouts,
            Metric::ConferenceFps => v.conference.as_ref().map_or(Measured::default(), |c| {
                c.fps
                    .map_or(Measured::default(), |f| Measured::new(Some(f.mean), f.runs))
            }),
            Metric::BaseP50AboveFloorMs => {
                let base = v
                    .conference
                    .as_ref()
                    .and_then(|c| c.latency_by_importance_ms.get("7"));
                let f = &floor.latency_ms;
                base.map_or(Measured::default(), |b| {
                    Measured::new(b.p50.zip(f.p50).map(|(x, y)| x - y), b.count.min(f.count))
                })
            }
            Metric::LatencyMaxMs => latency(l.max),
            Metric::BaseMaxMs => v
                .conference
                .as_ref()
                .and_then(|c| c.latency_by_importance_ms.get("7"))
                .map_or(Measured::default(), |b| Measured::new(b.max, b.count)),
            Metric::Switches => ladder(&|l| l.switches.map(|x| x as f64)),
            Metric::DownSwitches => ladder(&|l| l.down_switches.map(|x| x as f64)),
            Metric::RebuffersAfterFirstS => {
                ladder(&|l| l.rebuffers_after_first_s.map(|x| x as f64))
            }
            Metric::RateMatchShare => ladder(&|l| l.rate_match_share),
            Metric::RateMatchShareWithLastSecond => {
                v.ladder.as_ref().map_or(Measured::default(), |l| {
                    Measured::new(
                        l.rate_match_share_with_last_second,
                        l.rate_match_seconds_with_last_second,
                    )
                })
            }
            Metric::WorstImportanceP999MsWorstRun | Metric::WorstImportanceP999MsMedianRun => {
                v.conference.as_ref().map_or(Measured::default(), |c| {
                    let mut runs: Vec<f64> = c
                        .worst_bucket_p999_by_run_ms
                        .iter()
                        .flatten()
                        .copied()
                        .collect();
                    // A run without data cannot show the bound holds: no value at all.
                    if runs.len() < c.worst_bucket_p999_by_run_ms.len() {
                        return Measured::new(None, c.worst_bucket_p999_by_run_ms.len());
                    }
                    runs.sort_by(f64::total_cmp);
                    let value = match self {
                        Metric::WorstImportanceP999MsWorstRun => runs.last().copied(),
                        _ => crate::stats::median(&runs),
                    };
                    Measured::new(value, runs.len())
                })
            }
            Metric::ConferenceMeanLayers => {
                v.conference.as_ref().map_or(Measured::default(), |c| {
                    Measured::new(c.mean_layers, c.adus_arrived)
                })
            }
            Metric::WorstImportanceP999Ms => {
                v.conference.as_ref().map_or(Measured::default(), |c| {
                    let buckets = c.latency_by_importance_ms.values();
                    Measured::new(
                        buckets.clone().filter_map(|l| l.p999).reduce(f64::max),
                        buckets.map(|l| l.count).sum(),
                    )
                })
            }
        }
    }
}

/// A goal and whether the run met it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GoalResult {
    #[serde(flatten)]
    pub goal: Goal,
    pub mode: Mode,
    /// `None`: no data (the goal is then not met).
    pub measured: Option<f64>,
    #[serde(default)]
    pub samples: usize,
    pub met: bool,
}

impl GoalResult {
    fn of(goal: &Goal, mode: Mode, m: Measured) -> Self {
        let met = m.within(goal.min, goal.max) && goal.min_samples.is_none_or(|n| m.samples >= n);
        Self {
            goal: goal.clone(),
            mode,
            measured: m.value,
            samples: m.samples,
            met,
        }
    }
}

/// A goal of an experiment with its own metrics and run loop (RDC, BWSS), judged.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ExperimentGoalResult {
    pub variant: String,
    pub metric: String,
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub measured: Measured,
    pub met: bool,
    pub why: String,
    /// For a metric that depends on the machine's timing: how well the machine kept time in
    /// that run, so a goal missed (or met) on a stalling machine says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<String>,
    /// Why a relative goal has no value although both variants have data ("no comparison").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The goals section of an experiment's `report.html`: one row per goal, "no data" where a
/// metric has no samples.
pub fn experiment_goals_html(goals: &[ExperimentGoalResult]) -> String {
    let rows: Vec<Vec<String>> = goals
        .iter()
        .map(|g| {
            vec![
                g.variant.clone(),
                g.metric.clone(),
                format!(
                    "{}{}",
                    g.min.map_or(String::new(), |m| format!("≥ {m} ")),
                    g.max.map_or(String::new(), |m| format!("≤ {m}"))
                ),
                g.shown(),
                if g.met { "met" } else { "NOT met" }.into(),
                match &g.timing {
                    Some(note) => format!("{} ({note})", g.why),
                    None => g.why.clone(),
                },
            ]
        })
        .collect();
    format!(
        "<h2>Goals</h2>{}",
        crate::report::html_table(
            &["variant", "metric", "bound", "measured", "", "why"],
            &rows
        )
    )
}

impl ExperimentGoalResult {
    /// The measured value with its sample count, the note of a relative goal with no
    /// comparison, or "no data".
    pub fn shown(&self) -> String {
        match (self.measured.value, &self.note) {
            (Some(v), _) => format!("{v:.3} ({} samples)", self.measured.samples),
            (None, Some(note)) => note.clone(),
            (None, None) => crate::summary::NO_DATA.to_string(),
        }
    }

    /// `measured` against `min..=max`; no data is not met.
    pub fn judge(
        variant: &str,
        metric: &str,
        min: Option<f64>,
        max: Option<f64>,
        measured: Measured,
        why: &str,
    ) -> Self {
        Self {
            variant: variant.to_string(),
            metric: metric.to_string(),
            min,
            max,
            met: measured.within(min, max),
            measured,
            why: why.to_string(),
            timing: None,
            note: None,
        }
    }
}

/// Checks each goal in each mode the scenario runs; a goal whose variant has no summary in
/// a mode (it never ran, the run failed) is not met.
pub fn check_goals(
    goals: &[Goal],
    modes: &[Mode],
    variants: &[VariantSummary],
    floor: &FloorSummary,
) -> Vec<GoalResult> {
    let mut out = vec![];
    for g in goals {
        for &mode in modes {
            let find = |name: &str| variants.iter().find(|v| v.name == name && v.mode == mode);
            let Some(v) = find(&g.variant) else {
                out.push(GoalResult::of(g, mode, Measured::default()));
                continue;
            };
            let own = g.metric.measure(v, floor);
            let m = match g.vs_baseline {
                None => own,
                Some(rel) => {
                    let base = g
                        .against
                        .as_deref()
                        .or(v.baseline.as_deref())
                        .and_then(find)
                        .map_or(Measured::default(), |b| g.metric.measure(b, floor));
                    let value = own.value.zip(base.value).and_then(|(a, b)| match rel {
                        Relation::Ratio => (b != 0.0).then(|| a / b),
                        Relation::Difference => Some(a - b),
                    });
                    Measured::new(value, own.samples.min(base.samples))
                }
            };
            out.push(GoalResult::of(g, mode, m));
        }
    }
    out
}

/// How a goal reads in a table: `latency_p95_ms / baseline ≤ 0.5`.
pub fn describe(g: &Goal) -> String {
    let base = g.against.as_deref().unwrap_or("baseline");
    let metric = match g.vs_baseline {
        None => g.metric.as_str().to_string(),
        Some(Relation::Ratio) => format!("{} / {base}", g.metric.as_str()),
        Some(Relation::Difference) => format!("{} − {base}", g.metric.as_str()),
    };
    let bound = match (g.min, g.max) {
        (Some(lo), Some(hi)) => format!("{lo} to {hi}"),
        (Some(lo), None) => format!("≥ {lo}"),
        (None, Some(hi)) => format!("≤ {hi}"),
        (None, None) => "-".into(),
    };
    match g.min_samples {
        Some(n) => format!("{metric} {bound} (on ≥ {n} samples)"),
        None => format!("{metric} {bound}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_names_match_their_serde_names() {
        for m in Metric::ALL {
            assert_eq!(
                serde_json::to_string(&m).unwrap(),
                format!("\"{}\"", m.as_str())
            );
        }
    }
}
