//! What a lab run recorded and what it concluded: raw records (one [`TrialRecord`] per
//! emulated network), their files ([`files`]), and `summary.json` ([`LabSummary`]). The
//! summary is computed from the records alone ([`summarize`]), so `lowtide lab report`
//! recomputes it from a run folder without namespaces.
//!
//! Every number carries the samples behind it; a number without samples is `None` (`null`
//! in JSON, "no data" in reports), never a zero that could pass for a measurement.

pub mod files;
pub mod ladder;
pub mod own_part;
mod table;
mod video;

use serde::{Deserialize, Serialize};

pub use table::{mbit, ratio, text_table};
pub use video::{VideoInfo, VideoSummary, TOLERANCES_MS};

use crate::conference::{AduRecord, ConferenceSummary};
use crate::floor::{self, FloorSent};
use crate::goals::{check_goals, GoalResult};
use crate::scenario::{Goal, Mode, PaperFigure, PaperNumbers};
use crate::stats::MeanCi;
use crate::stream::{DeliveryErrors, Sample, SendCost, MESSAGE_BYTES};
use crate::summary::LatencySummary;
use crate::tail::TailCauses;
use crate::tcpinfo::{TcpTimeline, TransportSummary};
use crate::video::WindowRecord;
use crate::LabError;
use lowtide_media::conference::Conference;
use lowtide_media::session::ConferenceSent;

/// The CSV series name of the network-floor probe.
pub const FLOOR: &str = crate::report::FLOOR_SERIES;

/// One emulated network's worth of data: the streams that ran in it and the floor probe.
#[derive(Debug, Clone, Default)]
pub struct TrialRecord {
    pub mode: Option<Mode>,
    /// Run number, from 1.
    pub run: u32,
    /// The variants that ran in this network.
    pub variants: Vec<String>,
    /// Variant name → every message it sent (delivered, or censored at the receiver's end).
    /// A video variant's messages are its windows (sent = capture of the first frame).
    pub streams: Vec<(String, Vec<Sample>)>,
    /// Probes received, sorted by send time...
    pub floor: Vec<Sample>,
    /// ...and what the probe's sender did.
    pub floor_sent: FloorSent,
    /// Variant name → what its sender spent.
    pub costs: Vec<(String, SendCost)>,
    /// Video variants: name → every adaptation window.
    pub windows: Vec<(String, Vec<WindowRecord>)>,
    /// Conference variants: name → every ADU sent, and what the sender counted.
    pub adus: Vec<(String, Vec<AduRecord>)>,
    pub conference_sent: Vec<(String, ConferenceSent)>,
    /// Variant name → its sender socket's `TCP_INFO` over time.
    pub tcp: Vec<(String, TcpTimeline)>,
    /// Variant name → messages that broke exactly-once delivery.
    pub delivery_errors: Vec<(String, DeliveryErrors)>,
    /// Bit-rate ladder variants: name → rates per second, switches, rebuffers.
    pub ladder: Vec<(String, crate::ladder_flow::LadderRecord)>,
    /// Live-video variants: name → frames per second, encoder rate, drops, decoder problems.
    pub live: Vec<(String, crate::live_video::LiveRecord)>,
    /// What the bottleneck did.
    pub network: TrialNetwork,
}

/// The trial of `mode` whose run 1 had the variant `name`: the run the reports plot.
pub fn first_run<'a>(
    records: &'a [TrialRecord],
    mode: Mode,
    name: &str,
) -> Option<&'a TrialRecord> {
    records
        .iter()
        .find(|r| r.mode == Some(mode) && r.run == 1 && r.variants.iter().any(|v| v == name))
}

fn find<'a, T>(list: &'a [(String, T)], name: &str) -> Option<&'a T> {
    list.iter().find(|(n, _)| n == name).map(|(_, x)| x)
}

impl TrialRecord {
    /// The windows of a video variant in this trial.
    pub fn windows_of(&self, name: &str) -> Option<&[WindowRecord]> {
        find(&self.windows, name).map(Vec::as_slice)
    }

    /// The messages of a variant in this trial.
    pub fn stream_of(&self, name: &str) -> Option<&[Sample]> {
        find(&self.streams, name).map(Vec::as_slice)
    }

    /// Delivered bits/s in the window: a latency stream's payload received in it; a video's
    /// bytes received for the windows captured in it; a conference's ADUs captured in it
    /// that arrived; a ladder's bytes received in its seconds in it.
    fn delivered_bps(&self, name: &str, w: Window) -> Option<f64> {
        if let Some(windows) = self.windows_of(name) {
            return Some(video_bps(windows, w, |x| x.bytes_received));
        }
        if let Some(l) = find(&self.ladder, name) {
            return Some(ladder_bps(l, w, |s| s.throughput_bps));
        }
        if let Some(adus) = find(&self.adus, name) {
            let bytes: u64 = adus
                .iter()
                .filter(|a| a.latency_ms.is_some() && w.contains(a.capture_s))
                .map(|a| u64::from(a.bytes))
                .sum();
            return Some(bytes as f64 * 8.0 / w.len_s());
        }
        let samples = self.stream_of(name)?;
        let n = samples
            .iter()
            .filter(|s| !s.censored && w.contains(s.sent_s + s.latency_ms / 1e3))
            .count();
        Some(n as f64 * MESSAGE_BYTES as f64 * 8.0 / w.len_s())
    }

    /// Sent bits/s in the window: messages handed to the transport (latency stream), bytes
    /// written to the kernel for the windows captured in it (video, Goel et al. Table II),
    /// the bit rate a ladder streamed.
    /// A conference counts what it wrote per run, not per ADU: no figure for the window.
    fn sent_bps(&self, name: &str, w: Window) -> Option<f64> {
        if let Some(windows) = self.windows_of(name) {
            return Some(video_bps(windows, w, |x| x.bytes_written));
        }
        if find(&self.adus, name).is_some() {
            return None;
        }
        if let Some(l) = find(&self.ladder, name) {
            return Some(ladder_bps(l, w, |s| s.streamed_bps));
        }
        let n = self
            .stream_of(name)?
            .iter()
            .filter(|s| w.contains(s.sent_s))
            .count();
        Some(n as f64 * MESSAGE_BYTES as f64 * 8.0 / w.len_s())
    }
}

/// A ladder's bits per second over the window from its whole seconds in it.
fn ladder_bps(
    l: &crate::ladder_flow::LadderRecord,
    w: Window,
    bits: fn(&crate::ladder_flow::Second) -> f64,
) -> f64 {
    let total: f64 = l
        .seconds
        .iter()
        .filter(|s| w.contains(s.t_s))
        .map(bits)
        .sum();
    total / w.len_s()
}

fn video_bps(windows: &[WindowRecord], w: Window, bytes: fn(&WindowRecord) -> u64) -> f64 {
    let total: u64 = windows
        .iter()
        .filter(|x| w.contains(x.capture_s))
        .map(bytes)
        .sum();
    total as f64 * 8.0 / w.len_s()
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

    pub fn len_s(&self) -> f64 {
        self.to_s - self.from_s
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
    /// The run ended early with this error; the numbers cover what was measured before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
    /// Measurements that failed or broke a promise (no floor probes, `TCP_INFO` sampling
    /// failed, a message delivered twice): the run's numbers cannot all be trusted, and
    /// `lab run` exits non-zero.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub measurement_errors: Vec<String>,
    /// The plain-TCP variant goodput ratios refer to.
    pub baseline: Option<String>,
    /// The bottleneck in words (rate, delay, queue, AQM), for the report.
    pub network: String,
    /// The links' outages, marked on the latency plot.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outages: Vec<OutageMark>,
    /// The floor probe over every run (pooled).
    pub floor: FloorSummary,
    pub variants: Vec<VariantSummary>,
    /// Side by side: Jain's index over the greedy streams' goodputs ([`crate::fairness`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fairness: Option<crate::fairness::FairnessSummary>,
    pub goals: Vec<GoalResult>,
    /// Per emulated network: what the bottleneck did and what cross traffic got.
    pub trials: Vec<TrialNetwork>,
    /// Command line, revision, kernel, congestion control, seed, the machine's timer noise.
    pub provenance: Vec<(String, String)>,
}

/// One outage of one link, seconds from the run's start.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OutageMark {
    /// "path A forward", "path B reverse", ...
    pub link: String,
    pub from_s: f64,
    pub to_s: f64,
    /// "blackhole", "down" or "rate x 0.1".
    pub kind: String,
}

impl LabSummary {
    /// Goals that were not met.
    pub fn goals_not_met(&self) -> usize {
        self.goals.iter().filter(|g| !g.met).count()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct FloorSummary {
    pub latency_ms: LatencySummary,
    /// Probes sent in every run, sends that failed, and probes that never arrived.
    pub probes_sent: u64,
    pub send_errors: u64,
    pub lost: u64,
}

/// Sender-side latency: a message's latency minus the floor at its send time.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct SenderSide {
    #[serde(flatten)]
    pub latency: LatencySummary,
    /// Messages whose latency was below the floor (a probe and a message racing): counted as
    /// zero.
    pub clamped: usize,
    /// Messages without a fresh probe (none within [`floor::MAX_AGE_S`] before): left out.
    pub without_floor: usize,
}

/// One variant in one mode.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct VariantSummary {
    pub name: String,
    pub mode: Mode,
    pub controller: String,
    pub congestion: String,
    pub ecn: bool,
    /// The plain-TCP variant of the same application this one is compared with.
    #[serde(default)]
    pub baseline: Option<String>,
    /// Messages (video: transmitted windows) sent in the window over all runs, delivered or
    /// not; `latency_ms.censored` of them never arrived.
    pub messages: usize,
    /// Pooled over runs, messages sent in the window; undelivered ones censored at the end.
    pub latency_ms: LatencySummary,
    pub sender_side_ms: SenderSide,
    /// lowtide's own part of each message's latency: its queue and the kernel's unsent bytes
    /// ahead ([`own_part`]); no samples for other transports.
    #[serde(default)]
    pub own_part_ms: LatencySummary,
    /// Mean over runs of the payload *delivered* in the window, bits/s.
    pub goodput_bps: Option<f64>,
    pub goodput_runs_bps: Vec<f64>,
    /// What the sender handed on in the window, bits/s, mean and 95% CI over runs (video: the
    /// bytes written to the kernel, Goel et al. Table II).
    pub sent_bps: Option<MeanCi>,
    /// Mean ratio of delivered goodput to the baseline's (same run side by side; the
    /// baseline's mean over runs sequentially)...
    pub goodput_vs_baseline: Option<f64>,
    pub normalized_throughput: Option<MeanCi>,
    /// ...and the same ratio of what was sent.
    pub sent_vs_baseline: Option<MeanCi>,
    /// The stream's TCP over the window (`TCP_INFO`).
    pub transport: TransportSummary,
    /// What made the messages over 160 ms late: loss recovery or queueing.
    #[serde(default)]
    pub tail_causes: TailCauses,
    /// Messages delivered twice or never sent: the transport broke its promise.
    pub delivery_errors: DeliveryErrors,
    /// The sender's CPU and wake-ups, mean over runs (Goel et al. Table I).
    pub sender_cost: Option<SenderCost>,
    /// Video variants: windows on time, dropped windows, layers and frame rate.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub video: Option<VideoSummary>,
    /// Conference variants: frame rate, layers, latency per importance (Paceline Fig. 5, 6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conference: Option<ConferenceSummary>,
    /// Bit-rate ladder variants: switches, rebuffers, rate match (Hasan et al.).
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub ladder: Option<ladder::LadderSummary>,
    /// Live-video variants: frames shown, dropped, per second; decoder problems.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<crate::live_video::LiveSummary>,
    pub paper: Option<PaperNumbers>,
}

/// Mean over runs of what one sender spent streaming for a whole run.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Default)]
pub struct SenderCost {
    /// `None` when the sender thread's CPU time could not be read in some run.
    pub cpu_user_s: Option<f64>,
    pub cpu_system_s: Option<f64>,
    pub driver_wakeups: f64,
    pub write_calls: f64,
    pub messages: f64,
    /// CPU (user + system) per message sent, µs.
    pub cpu_us_per_message: Option<f64>,
    pub wakeups_per_message: Option<f64>,
    /// Failover variants: switches to a backup connection per run, and the false positives
    /// estimated among them (`lowtide_proto::failover`).
    #[serde(default)]
    pub failovers: f64,
    #[serde(default)]
    pub false_failovers: f64,
    /// Failover variants: stall verdicts the kernel's ACK clock held back, per run.
    #[serde(default)]
    pub stalls_held_by_acks: f64,
    /// Importance-reserve variants: staging passes the reserve held back, and bytes of
    /// important data staged into it, per run (`lowtide_proto::reserve`).
    #[serde(default)]
    pub reserve_held: f64,
    #[serde(default)]
    pub reserve_bytes_used: f64,
    /// Duplicate-lane variants, per run: copies written to the lane and their bytes, copies
    /// the receiver delivered first (the lane won) and dropped as second
    /// (`lowtide_proto::failover::duplicate`).
    #[serde(default)]
    pub copies_sent: f64,
    #[serde(default)]
    pub copy_bytes: f64,
    #[serde(default)]
    pub copies_first: f64,
    #[serde(default)]
    pub copies_late: f64,
    /// The lane's receiver: reads that ended inside a copy, acknowledged at once
    /// (`TCP_QUICKACK`).
    #[serde(default)]
    pub quick_acks: f64,
}

impl SenderCost {
    fn mean_of(costs: &[SendCost]) -> Option<Self> {
        if costs.is_empty() {
            return None;
        }
        let n = costs.len() as f64;
        let avg = |f: fn(&SendCost) -> f64| costs.iter().map(f).sum::<f64>() / n;
        let all = |f: fn(&SendCost) -> Option<f64>| -> Option<f64> {
            let xs: Option<Vec<f64>> = costs.iter().map(f).collect();
            xs.map(|v| v.iter().sum::<f64>() / n)
        };
        let messages = avg(|c| c.messages as f64);
        let (user, system) = (all(|c| c.cpu_user_s), all(|c| c.cpu_system_s));
        let wakeups = avg(|c| c.driver_wakeups as f64);
        let per = |x: Option<f64>| x.filter(|_| messages > 0.0).map(|x| x / messages);
        Some(Self {
            cpu_user_s: user,
            cpu_system_s: system,
            driver_wakeups: wakeups,
            write_calls: avg(|c| c.write_calls as f64),
            messages,
            cpu_us_per_message: per(user.zip(system).map(|(u, s)| (u + s) * 1e6)),
            wakeups_per_message: per(Some(wakeups)),
            failovers: avg(|c| c.failovers as f64),
            false_failovers: avg(|c| c.false_failovers as f64),
            stalls_held_by_acks: avg(|c| c.stalls_held_by_acks as f64),
            reserve_held: avg(|c| c.reserve_held as f64),
            reserve_bytes_used: avg(|c| c.reserve_bytes_used as f64),
            copies_sent: avg(|c| c.copies_sent as f64),
            copy_bytes: avg(|c| c.copy_bytes as f64),
            copies_first: avg(|c| c.copies_first as f64),
            copies_late: avg(|c| c.copies_late as f64),
            quick_acks: avg(|c| c.quick_acks as f64),
        })
    }
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
    /// `None`: the queue was never sampled.
    pub forward_sojourn_p99_ms: Option<f64>,
    /// Bytes the cross-traffic sinks received, as bits/s over the run.
    pub cross_traffic_bps: f64,
    /// With a second path: packets path B's forward link delivered, and the drops of both its
    /// directions (outages included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_b_forward_packets: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_b_drops: Option<u64>,
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
    /// Conference variants: their videos, in stream order.
    pub conference: Option<Vec<Conference>>,
    /// Bit-rate ladder variants.
    pub ladder: bool,
    /// Live-video variants.
    pub live: bool,
}

/// Everything the summary is computed from besides the records.
#[derive(Debug, Clone)]
pub struct SummaryInputs {
    pub scenario: String,
    pub description: String,
    pub paper: PaperFigure,
    pub quick: bool,
    pub duration_s: f64,
    pub window: Window,
    pub runs: u32,
    pub modes: Vec<Mode>,
    pub baseline: Option<String>,
    pub network: String,
    pub outages: Vec<OutageMark>,
    pub variants: Vec<VariantInfo>,
    pub goals: Vec<Goal>,
    pub provenance: Vec<(String, String)>,
}

/// The summary of `records`; `failed` says why the run ended early, if it did.
pub fn summarize(
    inputs: &SummaryInputs,
    records: &[TrialRecord],
    failed: Option<String>,
) -> LabSummary {
    let variants = summarize_variants(records, &inputs.variants, inputs.window);
    let floor = summarize_floor(records, inputs.window);
    let goals = check_goals(&inputs.goals, &inputs.modes, &variants, &floor);
    LabSummary {
        scenario: inputs.scenario.clone(),
        description: inputs.description.clone(),
        paper: inputs.paper.clone(),
        quick: inputs.quick,
        duration_s: inputs.duration_s,
        window: inputs.window,
        runs: inputs.runs,
        measurement_errors: measurement_errors(records),
        failed,
        baseline: inputs.baseline.clone(),
        network: inputs.network.clone(),
        outages: inputs.outages.clone(),
        floor,
        fairness: crate::fairness::of(&variants),
        variants,
        goals,
        trials: records.iter().map(|r| r.network.clone()).collect(),
        provenance: inputs.provenance.clone(),
    }
}

/// What went wrong with the measurements themselves, trial by trial.
fn measurement_errors(records: &[TrialRecord]) -> Vec<String> {
    let mut out = vec![];
    for r in records {
        let trial = format!("{} run {}", r.mode.map_or("", Mode::as_str), r.run);
        let f = &r.floor_sent;
        if f.send_errors > 0 {
            out.push(format!(
                "{trial}: {} of {} floor probes could not be sent ({})",
                f.send_errors,
                f.probes + f.send_errors,
                f.first_error.as_deref().unwrap_or("no reason given")
            ));
        }
        if r.floor.is_empty() {
            out.push(format!(
                "{trial}: no floor probe arrived, so there is no sender-side latency"
            ));
        }
        for (name, t) in &r.tcp {
            if t.failed() {
                out.push(format!(
                    "{trial}: TCP_INFO sampling of {name} failed: {}",
                    t.first_error.as_deref().unwrap_or("no reason given")
                ));
            }
        }
        for (name, e) in &r.delivery_errors {
            if *e != DeliveryErrors::default() {
                out.push(format!(
                    "{trial}: {name} delivered {} messages twice and {} that were never sent",
                    e.duplicated, e.unknown
                ));
            }
        }
    }
    out
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
        for info in infos {
            let ran: Vec<&TrialRecord> = trials
                .iter()
                .copied()
                .filter(|t| t.variants.contains(&info.name))
                .collect();
            if ran.is_empty() {
                continue;
            }
            out.push(summarize_variant(info, &ran, &trials, w, mode));
        }
    }
    out
}

/// Per run, `f` of a variant in the trials it ran in.
fn per_run(
    trials: &[&TrialRecord],
    name: &str,
    f: impl Fn(&TrialRecord) -> Option<f64>,
) -> Vec<(u32, f64)> {
    trials
        .iter()
        .filter(|t| t.variants.iter().any(|v| v == name))
        .filter_map(|t| Some((t.run, f(t)?)))
        .collect()
}

/// Ratios of `runs` to the baseline's: per run side by side, to the baseline's mean
/// sequentially (each variant has its own networks there).
fn ratios(mode: Mode, runs: &[(u32, f64)], base: &[(u32, f64)]) -> Vec<f64> {
    let base_mean = MeanCi::of(&base.iter().map(|x| x.1).collect::<Vec<_>>());
    match (mode, base_mean) {
        (Mode::SideBySide, _) => runs
            .iter()
            .filter_map(|(run, g)| {
                let b = base.iter().find(|(r, _)| r == run)?.1;
                (b > 0.0).then(|| g / b)
            })
            .collect(),
        (Mode::Sequential, Some(b)) if b.mean > 0.0 => {
            runs.iter().map(|(_, g)| g / b.mean).collect()
        }
        _ => vec![],
    }
}

fn summarize_variant(
    info: &VariantInfo,
    ran: &[&TrialRecord],
    trials: &[&TrialRecord],
    w: Window,
    mode: Mode,
) -> VariantSummary {
    let mut delivered = vec![];
    let mut censored = vec![];
    let mut side = SideSamples::default();
    let mut tail_causes = TailCauses::new();
    let mut own = own_part::OwnPart::default();
    for t in ran {
        let samples = t.stream_of(&info.name).unwrap_or_default();
        let tcp = find(&t.tcp, &info.name);
        let in_window: Vec<&Sample> = samples.iter().filter(|s| w.contains(s.sent_s)).collect();
        own.add(&in_window, tcp);
        for s in in_window {
            if s.censored {
                censored.push(s.latency_ms);
            } else {
                delivered.push(s.latency_ms);
            }
            let floor_ms = floor::at(&t.floor, s.sent_s);
            side.add(s, floor_ms);
            tail_causes.add(s, tcp, floor_ms);
        }
    }
    let latency = LatencySummary::with_censored(&delivered, &censored);
    let goodput = per_run(ran, &info.name, |t| t.delivered_bps(&info.name, w));
    let sent = per_run(ran, &info.name, |t| t.sent_bps(&info.name, w));
    let (base_goodput, base_sent) = match info.baseline.as_deref() {
        Some(b) => (
            per_run(trials, b, |t| t.delivered_bps(b, w)),
            per_run(trials, b, |t| t.sent_bps(b, w)),
        ),
        None => (vec![], vec![]),
    };
    let normalized = MeanCi::of(&ratios(mode, &goodput, &base_goodput));
    let costs: Vec<SendCost> = ran
        .iter()
        .filter_map(|t| find(&t.costs, &info.name).copied())
        .collect();
    let timelines: Vec<&TcpTimeline> = ran
        .iter()
        .filter_map(|t| find(&t.tcp, &info.name))
        .collect();
    let mut delivery_errors = DeliveryErrors::default();
    for e in ran
        .iter()
        .filter_map(|t| find(&t.delivery_errors, &info.name))
    {
        delivery_errors.duplicated += e.duplicated;
        delivery_errors.unknown += e.unknown;
    }
    let video = info.video.and_then(|video| {
        let runs: Vec<Vec<WindowRecord>> = ran
            .iter()
            .filter_map(|t| t.windows_of(&info.name))
            .map(|ws| {
                ws.iter()
                    .filter(|x| w.contains(x.capture_s))
                    .copied()
                    .collect()
            })
            .collect();
        VideoSummary::of(&runs, crate::video::FPS, video)
    });
    let conference = info.conference.as_ref().map(|videos| {
        let runs: Vec<(&[AduRecord], Option<&ConferenceSent>)> = ran
            .iter()
            .filter_map(|t| {
                let adus = find(&t.adus, &info.name)?;
                Some((adus.as_slice(), find(&t.conference_sent, &info.name)))
            })
            .collect();
        ConferenceSummary::of(videos, &runs, w)
    });
    let ladder = info.ladder.then(|| {
        let runs: Vec<&crate::ladder_flow::LadderRecord> = ran
            .iter()
            .filter_map(|t| find(&t.ladder, &info.name))
            .collect();
        ladder::LadderSummary::of(&runs).unwrap_or_default()
    });
    let live = info.live.then(|| {
        let runs: Vec<&crate::live_video::LiveRecord> = ran
            .iter()
            .filter_map(|t| find(&t.live, &info.name))
            .collect();
        crate::live_video::LiveSummary::of(&runs, w.from_s, w.to_s).unwrap_or_default()
    });
    let goodputs: Vec<f64> = goodput.iter().map(|x| x.1).collect();
    VariantSummary {
        name: info.name.clone(),
        mode,
        controller: info.controller.clone(),
        congestion: info.congestion.clone(),
        ecn: info.ecn,
        baseline: info.baseline.clone(),
        messages: latency.count,
        latency_ms: latency,
        sender_side_ms: side.summary(),
        own_part_ms: own.summary(),
        goodput_bps: MeanCi::of(&goodputs).map(|m| m.mean),
        goodput_runs_bps: goodputs,
        sent_bps: MeanCi::of(&sent.iter().map(|x| x.1).collect::<Vec<_>>()),
        goodput_vs_baseline: normalized.map(|n| n.mean),
        normalized_throughput: normalized,
        sent_vs_baseline: MeanCi::of(&ratios(mode, &sent, &base_sent)),
        transport: TransportSummary::of(&timelines, w),
        tail_causes,
        delivery_errors,
        sender_cost: SenderCost::mean_of(&costs),
        video,
        conference,
        ladder,
        live,
        paper: info.paper.clone(),
    }
}

/// Sender-side samples as they are collected.
#[derive(Default)]
struct SideSamples {
    delivered: Vec<f64>,
    censored: Vec<f64>,
    clamped: usize,
    without_floor: usize,
}

impl SideSamples {
    fn add(&mut self, s: &Sample, floor: Option<f64>) {
        let Some(f) = floor else {
            self.without_floor += 1;
            return;
        };
        let mut x = s.latency_ms - f;
        if x < 0.0 {
            self.clamped += 1;
            x = 0.0;
        }
        if s.censored {
            self.censored.push(x);
        } else {
            self.delivered.push(x);
        }
    }

    fn summary(&self) -> SenderSide {
        SenderSide {
            latency: LatencySummary::with_censored(&self.delivered, &self.censored),
            clamped: self.clamped,
            without_floor: self.without_floor,
        }
    }
}

/// The floor probe pooled over every trial, in the window.
pub fn summarize_floor(records: &[TrialRecord], w: Window) -> FloorSummary {
    let lat: Vec<f64> = records
        .iter()
        .flat_map(|r| r.floor.iter().filter(|s| w.contains(s.sent_s)))
        .map(|s| s.latency_ms)
        .collect();
    let probes_sent: u64 = records.iter().map(|r| r.floor_sent.probes).sum();
    let received = records.iter().map(|r| r.floor.len() as u64).sum::<u64>();
    FloorSummary {
        latency_ms: LatencySummary::of(&lat),
        probes_sent,
        send_errors: records.iter().map(|r| r.floor_sent.send_errors).sum(),
        lost: probes_sent.saturating_sub(received),
    }
}

pub fn write_json(path: &std::path::Path, s: &LabSummary) -> Result<(), LabError> {
    let text =
        serde_json::to_string_pretty(s).map_err(|e| LabError::io("encoding summary.json", e))?;
    std::fs::write(path, text).map_err(|e| LabError::io(format!("writing {}", path.display()), e))
}

pub fn read_json(path: &std::path::Path) -> Result<LabSummary, LabError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| LabError::io(format!("reading {}", path.display()), e))?;
    serde_json::from_str(&text).map_err(|e| LabError::io(format!("decoding {}", path.display()), e))
}

#[cfg(test)]
mod tests;
