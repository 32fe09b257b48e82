//! What a lab run recorded and what it concluded: raw per-message records (one
//! [`TrialRecord`] per emulated network), their CSV form, and `summary.json`
//! ([`LabSummary`]). The summary is computed from the records alone, so a report can be
//! re-rendered from a run folder without namespaces.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::floor;
use crate::scenario::{Goal, Metric, Mode, PaperFigure, PaperNumbers};
use crate::stream::{Sample, SendCost, MESSAGE_BYTES};
use crate::summary::LatencySummary;
use crate::video::WindowRecord;
use crate::LabError;

/// The CSV series name of the network-floor probe.
pub const FLOOR: &str = crate::report::FLOOR_SERIES;

/// One emulated network's worth of data: the streams that ran in it and the floor probe.
#[derive(Debug, Clone, Default)]
pub struct TrialRecord {
    pub mode: Option<Mode>,
    /// Run number, from 1.
    pub run: u32,
    /// Variant name → its messages, in variant order.
    pub streams: Vec<(String, Vec<Sample>)>,
    /// Probes, sorted by send time.
    pub floor: Vec<Sample>,
    /// Variant name → what its sender spent (not in the CSV: `summary.json` keeps it).
    pub costs: Vec<(String, SendCost)>,
    /// Video variants: name → every adaptation window (`windows.csv`). Their `streams`
    /// entry holds the windows that arrived whole, as latency samples.
    pub windows: Vec<(String, Vec<WindowRecord>)>,
}

impl TrialRecord {
    /// The windows of a video variant in this trial.
    pub fn windows_of(&self, name: &str) -> Option<&[WindowRecord]> {
        self.windows
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, w)| w.as_slice())
    }

    /// A variant's goodput in this trial: the payload received in the window for a latency
    /// stream; the sender's throughput (Goel et al. Table II) for a video.
    fn goodput_bps(&self, name: &str, w: Window) -> Option<f64> {
        if let Some(windows) = self.windows_of(name) {
            return Some(sender_throughput_bps(windows, w));
        }
        let (_, samples) = self.streams.iter().find(|(n, _)| n == name)?;
        Some(goodput_bps(samples, w))
    }
}

/// The measurement window, seconds after the start of a run.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Window {
    pub from_s: f64,
    pub to_s: f64,
}

impl Window {
    pub fn contains(&self, t: f64) -> bool {
        t >= self.from_s && t < self.to_s
    }
}

/// `summary.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LabSummary {
    pub scenario: String,
    pub description: String,
    pub paper: PaperFigure,
    /// `--quick`: times scaled down, one run; not what the paper comparison quotes.
    pub quick: bool,
    pub duration_s: f64,
    pub window: Window,
    pub runs: u32,
    /// The plain-TCP variant goodput ratios refer to.
    pub baseline: Option<String>,
    /// The bottleneck in words (rate, delay, queue, AQM), for the report.
    pub network: String,
    /// The floor probe over every run (pooled).
    pub floor: FloorSummary,
    pub variants: Vec<VariantSummary>,
    pub goals: Vec<GoalResult>,
    /// Per emulated network: what the bottleneck did and what cross traffic got.
    pub trials: Vec<TrialNetwork>,
    /// Command line, revision, kernel, congestion control, seed.
    pub provenance: Vec<(String, String)>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct FloorSummary {
    pub latency_ms: LatencySummary,
    pub share_over_ms: BTreeMap<String, f64>,
}

/// Sender-side latency: protocol latency minus the floor at that moment.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Default)]
pub struct SenderSide {
    pub p50: f64,
    pub p99: f64,
}

/// Mean and 95% confidence interval (Student's t) over runs.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Default)]
pub struct MeanCi {
    pub mean: f64,
    pub ci95_low: f64,
    pub ci95_high: f64,
    pub runs: usize,
}

impl MeanCi {
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

/// Two-sided 95% quantile of Student's t with `df` degrees of freedom.
fn t95(df: usize) -> f64 {
    const T: [f64; 10] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    ];
    match df {
        0 => f64::NAN,
        1..=10 => T[df - 1],
        11..=20 => 2.086,
        21..=30 => 2.042,
        _ => 1.96,
    }
}

/// One variant in one mode.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct VariantSummary {
    pub name: String,
    pub mode: Mode,
    pub controller: String,
    pub congestion: String,
    pub ecn: bool,
    /// Messages sent in the window and delivered, over all runs.
    pub messages: usize,
    /// Pooled over runs, messages sent in the window.
    pub latency_ms: LatencySummary,
    pub sender_side_ms: SenderSide,
    pub share_over_ms: BTreeMap<String, f64>,
    /// Mean over runs of the payload received in the window, bits/s.
    pub goodput_bps: f64,
    pub goodput_runs_bps: Vec<f64>,
    /// Mean ratio to the baseline's goodput (same run side by side; the baseline's mean
    /// over runs sequentially).
    pub goodput_vs_baseline: Option<f64>,
    pub normalized_throughput: Option<MeanCi>,
    /// The sender's CPU and wake-ups, mean over runs (Goel et al. Table I).
    pub sender_cost: Option<SenderCost>,
    /// Video variants: windows on time, dropped windows, layers and frame rate.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub video: Option<VideoSummary>,
    pub paper: Option<PaperNumbers>,
}

/// What a video variant's viewer got (Goel et al. Fig. 8 and 9, Tables II and III), over the
/// windows captured in the measurement window.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct VideoSummary {
    /// Share of transmitted windows whole within 250, 500 and 1000 ms of their capture.
    pub windows_within_ms: BTreeMap<String, f64>,
    /// Share of windows of which the sender wrote nothing (pooled over runs)...
    pub dropped_windows: f64,
    /// ...and its mean and 95% interval over runs.
    pub dropped_windows_runs: Option<MeanCi>,
    /// Layers shown per frame at the display tolerance (0 for a frame not shown).
    pub mean_layers: f64,
    /// Frames shown per second.
    pub fps: f64,
    pub windows: usize,
    pub transmitted_windows: usize,
    /// What the sender wrote, bits/s, mean and 95% interval over runs.
    pub sender_throughput_bps: Option<MeanCi>,
    pub display_tolerance_ms: f64,
    pub window_frames: u32,
}

/// Tolerances `windows_within_ms` reports.
pub const TOLERANCES_MS: [f64; 3] = [250.0, 500.0, 1000.0];

impl VideoSummary {
    /// `runs`: per run, the windows captured in the measurement window.
    pub fn of(runs: &[Vec<WindowRecord>], w: Window, fps: f64, info: VideoInfo) -> Option<Self> {
        let all: Vec<&WindowRecord> = runs.iter().flatten().collect();
        if all.is_empty() {
            return None;
        }
        let transmitted: Vec<&&WindowRecord> = all.iter().filter(|x| x.transmitted()).collect();
        let within = |t: f64| {
            let ok = transmitted
                .iter()
                .filter(|x| x.latency_ms.is_some_and(|l| l <= t))
                .count();
            ok as f64 / transmitted.len().max(1) as f64
        };
        let share_dropped = |ws: &[&WindowRecord]| {
            ws.iter().filter(|x| x.dropped()).count() as f64 / ws.len().max(1) as f64
        };
        let frames: u32 = all.iter().map(|x| x.frames).sum();
        let frames = f64::from(frames.max(1));
        let per_run = |f: &dyn Fn(&[WindowRecord]) -> f64| {
            MeanCi::of(
                &runs
                    .iter()
                    .filter(|r| !r.is_empty())
                    .map(|r| f(r))
                    .collect::<Vec<_>>(),
            )
        };
        Some(Self {
            windows_within_ms: TOLERANCES_MS
                .iter()
                .map(|t| (format!("{t:.0}"), within(*t)))
                .collect(),
            dropped_windows: share_dropped(&all),
            dropped_windows_runs: per_run(&|r| share_dropped(&r.iter().collect::<Vec<_>>())),
            mean_layers: all.iter().map(|x| f64::from(x.layers_shown)).sum::<f64>() / frames,
            fps: all.iter().map(|x| f64::from(x.frames_shown)).sum::<f64>() / frames * fps,
            windows: all.len(),
            transmitted_windows: transmitted.len(),
            sender_throughput_bps: per_run(&|r| sender_throughput_bps(r, w)),
            display_tolerance_ms: info.tolerance_ms,
            window_frames: info.window_frames,
        })
    }

    pub fn within(&self, tolerance_ms: f64) -> f64 {
        self.windows_within_ms
            .get(&format!("{tolerance_ms:.0}"))
            .copied()
            .unwrap_or(0.0)
    }
}

/// Mean over runs of what one sender spent streaming for a whole run.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Default)]
pub struct SenderCost {
    pub cpu_user_s: f64,
    pub cpu_system_s: f64,
    pub driver_wakeups: f64,
    pub write_calls: f64,
    pub messages: f64,
    /// CPU (user + system) per message sent, µs.
    pub cpu_us_per_message: f64,
    pub wakeups_per_message: f64,
}

impl SenderCost {
    fn mean_of(costs: &[SendCost]) -> Option<Self> {
        if costs.is_empty() {
            return None;
        }
        let n = costs.len() as f64;
        let avg = |f: fn(&SendCost) -> f64| costs.iter().map(f).sum::<f64>() / n;
        let messages = avg(|c| c.messages as f64);
        let user = avg(|c| c.cpu_user_s);
        let system = avg(|c| c.cpu_system_s);
        let wakeups = avg(|c| c.driver_wakeups as f64);
        let per = |x: f64| if messages > 0.0 { x / messages } else { 0.0 };
        Some(Self {
            cpu_user_s: user,
            cpu_system_s: system,
            driver_wakeups: wakeups,
            write_calls: avg(|c| c.write_calls as f64),
            messages,
            cpu_us_per_message: per((user + system) * 1e6),
            wakeups_per_message: per(wakeups),
        })
    }
}

/// A goal and whether the run met it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GoalResult {
    #[serde(flatten)]
    pub goal: Goal,
    pub mode: Mode,
    pub measured: Option<f64>,
    pub met: bool,
}

/// What one emulated network did.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct TrialNetwork {
    pub mode: Option<Mode>,
    pub run: u32,
    pub variants: Vec<String>,
    pub forward_drops: u64,
    pub forward_marks: u64,
    pub reverse_drops: u64,
    pub forward_max_queue_packets: u32,
    pub forward_sojourn_p99_ms: f64,
    /// Bytes the cross-traffic sinks received, as bits/s over the run.
    pub cross_traffic_bps: f64,
}

/// Facts about the variants the summary needs besides the records.
#[derive(Debug, Clone)]
pub struct VariantInfo {
    pub name: String,
    pub controller: String,
    pub congestion: String,
    pub ecn: bool,
    pub paper: Option<PaperNumbers>,
    /// The plain-TCP variant of the same application its goodput is compared with.
    pub baseline: Option<String>,
    /// Video variants: how their video is played.
    pub video: Option<VideoInfo>,
}

/// How a video variant's windows are cut and shown.
#[derive(Debug, Clone, Copy)]
pub struct VideoInfo {
    pub window_frames: u32,
    /// Display deadline after capture, ms.
    pub tolerance_ms: f64,
}

/// Bits/s a video's sender wrote for the windows captured in `w` (Goel et al. Table II).
fn sender_throughput_bps(windows: &[WindowRecord], w: Window) -> f64 {
    let bytes: u64 = windows
        .iter()
        .filter(|x| w.contains(x.capture_s))
        .map(|x| x.bytes_written)
        .sum();
    bytes as f64 * 8.0 / (w.to_s - w.from_s)
}

/// Payload bits/s of the messages *received* in the window: a queue that holds seconds of
/// data cannot count what it never delivered.
pub fn goodput_bps(samples: &[Sample], w: Window) -> f64 {
    let n = samples
        .iter()
        .filter(|s| w.contains(s.sent_s + s.latency_ms / 1e3))
        .count();
    n as f64 * MESSAGE_BYTES as f64 * 8.0 / (w.to_s - w.from_s)
}

/// Summarises every variant of every mode from the records.
pub fn summarize_variants(
    records: &[TrialRecord],
    infos: &[VariantInfo],
    w: Window,
) -> Vec<VariantSummary> {
    let mut modes: Vec<Mode> = records.iter().filter_map(|r| r.mode).collect();
    modes.sort();
    modes.dedup();
    let mut out = vec![];
    for mode in modes {
        let trials: Vec<&TrialRecord> = records.iter().filter(|r| r.mode == Some(mode)).collect();
        // Goodput per (variant, run).
        let goodput_of = |name: &str| -> Vec<(u32, f64)> {
            trials
                .iter()
                .filter_map(|t| Some((t.run, t.goodput_bps(name, w)?)))
                .collect()
        };
        for info in infos {
            let base_runs = info.baseline.as_deref().map(goodput_of).unwrap_or_default();
            let base_mean = MeanCi::of(&base_runs.iter().map(|x| x.1).collect::<Vec<_>>());
            let mut lat = vec![];
            let mut sender_side = vec![];
            for t in &trials {
                for (_, samples) in t.streams.iter().filter(|(n, _)| *n == info.name) {
                    for s in samples.iter().filter(|s| w.contains(s.sent_s)) {
                        lat.push(s.latency_ms);
                        if let Some(f) = floor::at(&t.floor, s.sent_s) {
                            sender_side.push((s.latency_ms - f).max(0.0));
                        }
                    }
                }
            }
            if lat.is_empty()
                && !trials
                    .iter()
                    .any(|t| t.streams.iter().any(|(n, _)| *n == info.name))
            {
                continue;
            }
            let runs = goodput_of(&info.name);
            let ratios: Vec<f64> = match (mode, base_mean) {
                (Mode::SideBySide, _) => runs
                    .iter()
                    .filter_map(|(run, g)| {
                        let b = base_runs.iter().find(|(r, _)| r == run)?.1;
                        (b > 0.0).then(|| g / b)
                    })
                    .collect(),
                (Mode::Sequential, Some(b)) if b.mean > 0.0 => {
                    runs.iter().map(|(_, g)| g / b.mean).collect()
                }
                _ => vec![],
            };
            let normalized = MeanCi::of(&ratios);
            let costs: Vec<SendCost> = trials
                .iter()
                .flat_map(|t| {
                    t.costs
                        .iter()
                        .filter(|(n, _)| *n == info.name)
                        .map(|(_, c)| *c)
                })
                .collect();
            let video = info.video.and_then(|video| {
                let runs: Vec<Vec<WindowRecord>> = trials
                    .iter()
                    .filter_map(|t| t.windows_of(&info.name))
                    .map(|ws| {
                        ws.iter()
                            .filter(|x| w.contains(x.capture_s))
                            .copied()
                            .collect()
                    })
                    .collect();
                VideoSummary::of(&runs, w, crate::video::FPS, video)
            });
            let latency = LatencySummary::of(&lat);
            let ss = LatencySummary::of(&sender_side);
            let goodputs: Vec<f64> = runs.iter().map(|x| x.1).collect();
            out.push(VariantSummary {
                name: info.name.clone(),
                mode,
                controller: info.controller.clone(),
                congestion: info.congestion.clone(),
                ecn: info.ecn,
                messages: latency.count,
                share_over_ms: latency.share_over_ms.clone(),
                latency_ms: latency,
                sender_side_ms: SenderSide {
                    p50: ss.p50,
                    p99: ss.p99,
                },
                goodput_bps: MeanCi::of(&goodputs).map_or(0.0, |m| m.mean),
                goodput_runs_bps: goodputs,
                goodput_vs_baseline: normalized.map(|n| n.mean),
                normalized_throughput: normalized,
                sender_cost: SenderCost::mean_of(&costs),
                video,
                paper: info.paper.clone(),
            });
        }
    }
    out
}

/// The floor probe pooled over every trial, in the window.
pub fn summarize_floor(records: &[TrialRecord], w: Window) -> FloorSummary {
    let lat: Vec<f64> = records
        .iter()
        .flat_map(|r| r.floor.iter().filter(|s| w.contains(s.sent_s)))
        .map(|s| s.latency_ms)
        .collect();
    let latency_ms = LatencySummary::of(&lat);
    FloorSummary {
        share_over_ms: latency_ms.share_over_ms.clone(),
        latency_ms,
    }
}

/// Checks each goal in each mode the variant ran in.
pub fn check_goals(
    goals: &[Goal],
    variants: &[VariantSummary],
    floor: &FloorSummary,
) -> Vec<GoalResult> {
    let mut out = vec![];
    for g in goals {
        for v in variants.iter().filter(|v| v.name == g.variant) {
            let measured = match g.metric {
                Metric::LatencyP50Ms => Some(v.latency_ms.p50),
                Metric::LatencyP99Ms => Some(v.latency_ms.p99),
                Metric::SenderSideP99Ms => Some(v.sender_side_ms.p99),
                Metric::ShareOver160 => Some(v.latency_ms.share_over(160.0)),
                Metric::ShareOver160AboveFloor => {
                    Some(v.latency_ms.share_over(160.0) - floor.latency_ms.share_over(160.0))
                }
                Metric::GoodputVsBaseline => v.goodput_vs_baseline,
                Metric::WindowsWithin500 => v.video.as_ref().map(|x| x.within(500.0)),
                Metric::DroppedWindows => v.video.as_ref().map(|x| x.dropped_windows),
                Metric::MeanLayers => v.video.as_ref().map(|x| x.mean_layers),
            };
            let met = measured
                .is_some_and(|m| g.min.is_none_or(|lo| m >= lo) && g.max.is_none_or(|hi| m <= hi));
            out.push(GoalResult {
                goal: g.clone(),
                mode: v.mode,
                measured,
                met,
            });
        }
    }
    out
}

/// The raw CSV: one line per delivered message and per probe.
pub fn to_csv(records: &[TrialRecord]) -> String {
    let mut out = String::from("mode,run,series,sent_s,latency_ms\n");
    for r in records {
        let mode = r.mode.map_or("", Mode::as_str);
        let all = r
            .streams
            .iter()
            .map(|(n, s)| (n.as_str(), s))
            .chain([(FLOOR, &r.floor)]);
        for (name, samples) in all {
            for p in samples {
                let _ = writeln!(
                    out,
                    "{mode},{},\"{name}\",{:.6},{:.3}",
                    r.run, p.sent_s, p.latency_ms
                );
            }
        }
    }
    out
}

/// Reads what [`to_csv`] wrote back into records.
pub fn from_csv(text: &str) -> Result<Vec<TrialRecord>, LabError> {
    let mut records: Vec<TrialRecord> = vec![];
    for (i, line) in text.lines().enumerate().skip(1) {
        let bad = |what: &str| {
            LabError::io(
                format!("reading messages.csv line {}", i + 1),
                what.to_string(),
            )
        };
        let cols = split_csv_line(line);
        let [mode, run, series, sent, lat] = cols[..] else {
            return Err(bad("expected 5 columns: mode,run,series,sent_s,latency_ms"));
        };
        let mode = parse_mode(mode).map_err(bad)?;
        let run: u32 = run.parse().map_err(|_| bad("run is not a number"))?;
        let sample = Sample {
            sent_s: sent.parse().map_err(|_| bad("sent_s is not a number"))?,
            latency_ms: lat.parse().map_err(|_| bad("latency_ms is not a number"))?,
        };
        // A new trial starts when (mode, run) changes, or when a stream follows the floor
        // (sequential runs have the same (mode, run) for each variant).
        let new_trial = match records.last() {
            None => true,
            Some(t) => {
                t.mode != mode
                    || t.run != run
                    || (series != FLOOR
                        && !t.floor.is_empty()
                        && !t.streams.iter().any(|(n, _)| n == series))
            }
        };
        if new_trial {
            records.push(TrialRecord {
                mode,
                run,
                ..TrialRecord::default()
            });
        }
        let t = records.last_mut().expect("pushed above");
        if series == FLOOR {
            t.floor.push(sample);
        } else {
            match t.streams.iter_mut().find(|(n, _)| n == series) {
                Some((_, s)) => s.push(sample),
                None => t.streams.push((series.to_string(), vec![sample])),
            }
        }
    }
    Ok(records)
}

/// Splits one CSV line; a field in double quotes may hold commas (variant names such as
/// `MinBuf(1,3)` do). Names never hold quotes or newlines (the scenario check forbids them).
fn split_csv_line(line: &str) -> Vec<&str> {
    let mut out = vec![];
    let mut rest = line;
    loop {
        if let Some(quoted) = rest.strip_prefix('"') {
            let Some(end) = quoted.find('"') else {
                out.push(quoted);
                return out;
            };
            out.push(&quoted[..end]);
            match quoted[end + 1..].strip_prefix(',') {
                Some(r) => rest = r,
                None => return out,
            }
        } else {
            match rest.split_once(',') {
                Some((field, r)) => {
                    out.push(field);
                    rest = r;
                }
                None => {
                    out.push(rest);
                    return out;
                }
            }
        }
    }
}

/// `windows.csv`: one line per adaptation window of every video variant.
pub fn windows_to_csv(records: &[TrialRecord]) -> String {
    let mut out = String::from(
        "mode,run,series,window,capture_s,planned,written,bytes_written,received,count_received,latency_ms,frames,frames_shown,layers_shown\n",
    );
    for r in records {
        let mode = r.mode.map_or("", Mode::as_str);
        for (name, windows) in &r.windows {
            for x in windows {
                let _ = writeln!(
                    out,
                    "{mode},{},\"{name}\",{},{:.6},{},{},{},{},{},{},{},{},{}",
                    r.run,
                    x.window,
                    x.capture_s,
                    x.planned,
                    x.written,
                    x.bytes_written,
                    x.received,
                    u8::from(x.count_received),
                    x.latency_ms.map_or(String::new(), |l| format!("{l:.3}")),
                    x.frames,
                    x.frames_shown,
                    x.layers_shown
                );
            }
        }
    }
    out
}

/// Reads `windows.csv` back into the records [`from_csv`] made: a variant's windows go to the
/// trial of the same mode and run that holds its stream (or the first such trial).
pub fn windows_from_csv(text: &str, records: &mut Vec<TrialRecord>) -> Result<(), LabError> {
    for (i, line) in text.lines().enumerate().skip(1) {
        let bad = |what: &str| {
            LabError::io(
                format!("reading windows.csv line {}", i + 1),
                what.to_string(),
            )
        };
        let cols = split_csv_line(line);
        let [mode, run, series, rest @ ..] = &cols[..] else {
            return Err(bad("too few columns"));
        };
        if rest.len() != 11 {
            return Err(bad("expected 14 columns"));
        }
        let mode = parse_mode(mode).map_err(&bad)?;
        let run: u32 = run.parse().map_err(|_| bad("run is not a number"))?;
        let num = |k: usize, what: &str| -> Result<f64, LabError> {
            rest[k]
                .parse()
                .map_err(|_| bad(&format!("{what} is not a number")))
        };
        let record = WindowRecord {
            window: num(0, "window")? as u32,
            capture_s: num(1, "capture_s")?,
            planned: num(2, "planned")? as u32,
            written: num(3, "written")? as u32,
            bytes_written: num(4, "bytes_written")? as u64,
            received: num(5, "received")? as u32,
            count_received: num(6, "count_received")? != 0.0,
            latency_ms: if rest[7].is_empty() {
                None
            } else {
                Some(num(7, "latency_ms")?)
            },
            frames: num(8, "frames")? as u32,
            frames_shown: num(9, "frames_shown")? as u32,
            layers_shown: num(10, "layers_shown")? as u32,
        };
        let same = |t: &TrialRecord| t.mode == mode && t.run == run;
        let at = records
            .iter()
            .position(|t| same(t) && t.streams.iter().any(|(n, _)| n == series))
            .or_else(|| records.iter().position(same));
        let at = match at {
            Some(k) => k,
            None => {
                records.push(TrialRecord {
                    mode,
                    run,
                    ..TrialRecord::default()
                });
                records.len() - 1
            }
        };
        let t = &mut records[at];
        match t.windows.iter_mut().find(|(n, _)| n == series) {
            Some((_, w)) => w.push(record),
            None => t.windows.push((series.to_string(), vec![record])),
        }
    }
    Ok(())
}

fn parse_mode(mode: &str) -> Result<Option<Mode>, &'static str> {
    match mode {
        "side_by_side" => Ok(Some(Mode::SideBySide)),
        "sequential" => Ok(Some(Mode::Sequential)),
        "" => Ok(None),
        _ => Err("mode is not side_by_side or sequential"),
    }
}

pub fn write_json(path: &Path, s: &LabSummary) -> Result<(), LabError> {
    let text =
        serde_json::to_string_pretty(s).map_err(|e| LabError::io("encoding summary.json", e))?;
    std::fs::write(path, text).map_err(|e| LabError::io(format!("writing {}", path.display()), e))
}

pub fn read_json(path: &Path) -> Result<LabSummary, LabError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| LabError::io(format!("reading {}", path.display()), e))?;
    serde_json::from_str(&text).map_err(|e| LabError::io(format!("decoding {}", path.display()), e))
}

/// The printed table: per mode and variant, latency, share over 160 ms, goodput; the goals;
/// the paper's figure beside ours.
pub fn text_table(s: &LabSummary) -> String {
    let mut out = format!(
        "{:<13} {:<22} {:>8} {:>8} {:>9} {:>12} {:>9} {:>8}\n",
        "mode", "variant", "p50 ms", "p99 ms", "ss p99", "over 160 ms", "Mbit/s", "vs TCP"
    );
    for v in s.variants.iter().filter(|v| v.video.is_none()) {
        out.push_str(&format!(
            "{:<13} {:<22} {:>8.1} {:>8.1} {:>9.1} {:>11.1}% {:>9.2} {:>8}\n",
            v.mode.as_str(),
            v.name,
            v.latency_ms.p50,
            v.latency_ms.p99,
            v.sender_side_ms.p99,
            v.latency_ms.share_over(160.0) * 100.0,
            v.goodput_bps / 1e6,
            v.goodput_vs_baseline
                .map_or("-".into(), |r| format!("{:.0}%", r * 100.0)),
        ));
    }
    let f = &s.floor.latency_ms;
    out.push_str(&format!(
        "{:<13} {:<22} {:>8.1} {:>8.1} {:>9} {:>11.1}%\n",
        "",
        "network floor (UDP)",
        f.p50,
        f.p99,
        "-",
        f.share_over(160.0) * 100.0
    ));
    let videos: Vec<(&VariantSummary, &VideoSummary)> = s
        .variants
        .iter()
        .filter_map(|v| Some((v, v.video.as_ref()?)))
        .collect();
    if !videos.is_empty() {
        let tolerance = videos[0].1.display_tolerance_ms;
        out.push_str(&format!(
            "\nlayered video: windows whole (capture to last byte) within 250 / 500 / 1000 ms, windows the sender \
             dropped, frames on time and layers shown at {tolerance:.0} ms\n\
             {:<13} {:<22} {:>18} {:>10} {:>8} {:>9} {:>7} {:>9} {:>8}\n",
            "mode", "variant", "whole in time", "window p50", "dropped", "on time", "layers", "Mbit/s", "vs TCP"
        ));
        for (v, x) in videos {
            let within: Vec<String> = TOLERANCES_MS
                .iter()
                .map(|t| format!("{:.0}", x.within(*t) * 100.0))
                .collect();
            let p50 = if v.messages > 0 {
                format!("{:.0} ms", v.latency_ms.p50)
            } else {
                "never".into()
            };
            out.push_str(&format!(
                "{:<13} {:<22} {:>17}% {:>10} {:>7.1}% {:>8.1}% {:>7.2} {:>9.2} {:>8}\n",
                v.mode.as_str(),
                v.name,
                within.join(" / "),
                p50,
                x.dropped_windows * 100.0,
                x.fps / crate::video::FPS * 100.0,
                x.mean_layers,
                v.goodput_bps / 1e6,
                v.goodput_vs_baseline
                    .map_or("-".into(), |r| format!("{:.0}%", r * 100.0)),
            ));
        }
    }
    for g in &s.goals {
        out.push_str(&format!(
            "goal {}: {} {} = {} ({})\n",
            if g.met { "met" } else { "NOT met" },
            g.goal.variant,
            g.goal.metric.as_str(),
            g.measured.map_or("-".into(), |m| format!("{m:.3}")),
            g.goal.why
        ));
    }
    if !s.paper.figure.is_empty() || !s.paper.text.is_empty() {
        out.push_str(&format!("paper: {}: {}\n", s.paper.figure, s.paper.text));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` messages over 10 s.
    fn samples(latency: f64, n: usize) -> Vec<Sample> {
        (0..n)
            .map(|i| Sample {
                sent_s: i as f64 * 10.0 / n as f64,
                latency_ms: latency,
            })
            .collect()
    }

    fn records() -> Vec<TrialRecord> {
        vec![
            TrialRecord {
                mode: Some(Mode::SideBySide),
                run: 1,
                streams: vec![
                    ("TCP".into(), samples(400.0, 1000)),
                    ("MB".into(), samples(60.0, 900)),
                ],
                floor: samples(50.0, 1000),
                ..TrialRecord::default()
            },
            TrialRecord {
                mode: Some(Mode::Sequential),
                run: 1,
                streams: vec![("TCP".into(), samples(400.0, 1000))],
                floor: samples(50.0, 1000),
                ..TrialRecord::default()
            },
            TrialRecord {
                mode: Some(Mode::Sequential),
                run: 1,
                streams: vec![("MB".into(), samples(60.0, 800))],
                floor: samples(50.0, 1000),
                ..TrialRecord::default()
            },
        ]
    }

    fn infos() -> Vec<VariantInfo> {
        ["TCP", "MB"]
            .iter()
            .map(|n| VariantInfo {
                name: n.to_string(),
                controller: n.to_string(),
                congestion: "cubic".into(),
                ecn: false,
                paper: None,
                baseline: Some("TCP".into()),
                video: None,
            })
            .collect()
    }

    #[test]
    fn csv_round_trips_trials_including_sequential_ones() {
        let r = records();
        let back = from_csv(&to_csv(&r)).unwrap();
        assert_eq!(back.len(), 3);
        assert_eq!(back[2].streams[0].0, "MB");
        assert_eq!(
            split_csv_line("a,1,\"MinBuf(1,3)\",2.0,3.5"),
            ["a", "1", "MinBuf(1,3)", "2.0", "3.5"]
        );
        assert_eq!(back[1].floor.len(), 1000);
        assert!((back[0].streams[1].1[5].sent_s - r[0].streams[1].1[5].sent_s).abs() < 1e-6);
    }

    #[test]
    fn summary_has_sender_side_latency_and_goodput_ratios() {
        let w = Window {
            from_s: 1.0,
            to_s: 9.0,
        };
        let v = summarize_variants(&records(), &infos(), w);
        assert_eq!(v.len(), 4);
        let mb = v
            .iter()
            .find(|v| v.name == "MB" && v.mode == Mode::SideBySide)
            .unwrap();
        assert!((mb.sender_side_ms.p99 - 10.0).abs() < 1e-9);
        assert!(
            (mb.goodput_vs_baseline.unwrap() - 0.9).abs() < 0.02,
            "{mb:?}"
        );
        let seq = v
            .iter()
            .find(|v| v.name == "MB" && v.mode == Mode::Sequential)
            .unwrap();
        assert!(
            (seq.goodput_vs_baseline.unwrap() - 0.8).abs() < 0.02,
            "{seq:?}"
        );
        assert_eq!(seq.share_over_ms["160"], 0.0);
        let floor = summarize_floor(&records(), w);
        assert_eq!(floor.latency_ms.p50, 50.0);
    }

    fn window(k: u32, written: u32, latency_ms: Option<f64>, bytes: u64) -> WindowRecord {
        WindowRecord {
            window: k,
            capture_s: f64::from(k) * 0.125,
            planned: 8,
            written,
            bytes_written: bytes,
            received: written,
            count_received: true,
            latency_ms,
            frames: 4,
            frames_shown: if latency_ms.is_some() { 4 } else { 0 },
            layers_shown: if latency_ms.is_some() { 8 } else { 0 },
        }
    }

    #[test]
    fn video_summary_counts_windows_on_time_dropped_layers_and_throughput() {
        let w = Window {
            from_s: 0.0,
            to_s: 1.0,
        };
        // Run 1: 4 windows: 200 ms, 600 ms, never whole, dropped. Run 2: 2 windows on time.
        let run1 = vec![
            window(0, 8, Some(200.0), 1000),
            window(1, 8, Some(600.0), 1000),
            window(2, 3, None, 500),
            window(3, 0, None, 0),
        ];
        let run2 = vec![
            window(0, 8, Some(100.0), 2000),
            window(1, 8, Some(300.0), 2000),
        ];
        let info = VideoInfo {
            window_frames: 4,
            tolerance_ms: 500.0,
        };
        let v = VideoSummary::of(&[run1.clone(), run2], w, 30.0, info).unwrap();
        assert_eq!((v.windows, v.transmitted_windows), (6, 5));
        assert_eq!(v.within(250.0), 2.0 / 5.0);
        assert_eq!(v.within(500.0), 3.0 / 5.0);
        assert_eq!(v.within(1000.0), 4.0 / 5.0);
        assert_eq!(v.dropped_windows, 1.0 / 6.0);
        assert_eq!(v.dropped_windows_runs.unwrap().mean, 0.125);
        // 4 of 6 windows shown with 2 layers per frame.
        assert!((v.mean_layers - 32.0 / 24.0).abs() < 1e-9);
        assert!((v.fps - 20.0).abs() < 1e-9, "{}", v.fps);
        assert_eq!(
            v.sender_throughput_bps.unwrap().mean,
            (2500.0 + 4000.0) * 8.0 / 2.0
        );

        // windows.csv round-trips, and goodput of a video variant is its sender throughput.
        let mut records = vec![TrialRecord {
            mode: Some(Mode::SideBySide),
            run: 1,
            streams: vec![(
                "video".into(),
                run1.iter().filter_map(WindowRecord::sample).collect(),
            )],
            windows: vec![("video".into(), run1.clone())],
            ..TrialRecord::default()
        }];
        let text = windows_to_csv(&records);
        let mut back = from_csv(&to_csv(&records)).unwrap();
        windows_from_csv(&text, &mut back).unwrap();
        assert_eq!(back[0].windows, records[0].windows);
        assert_eq!(back[0].goodput_bps("video", w), Some(2500.0 * 8.0));
        records[0].windows.clear();
        assert!(windows_from_csv("h\nside_by_side,1,\"x\",1,2\n", &mut records).is_err());
    }

    #[test]
    fn confidence_interval_uses_student_t() {
        let m = MeanCi::of(&[1.0, 2.0, 3.0]).unwrap();
        assert_eq!(m.mean, 2.0);
        assert!((m.ci95_high - (2.0 + 4.303 / 3f64.sqrt())).abs() < 1e-9);
        assert_eq!(MeanCi::of(&[5.0]).unwrap().ci95_low, 5.0);
    }
}
