//! The lab's RDC experiments (Hsiao, Kung and Tan, "Streaming Video over TCP with
//! Receiver-based Delay Control", Sections 3 and 5): bulk TCP flows or the paper's layered
//! video streams (`[rdc.video]`, `lowtide_media::rdc_video`) through one bottleneck,
//! one emulated dumbbell per variant (drop-tail, RED with ECN, the RDC cell in exact or 1-bit
//! mode), and for the RDC variants the receiver agent of `lowtide-rdc` running in each
//! receiver's namespace for the length of the trial.
//!
//! A scenario file of `kind = "rdc"`, with an `[rdc]` table, is one of these (`lowtide lab run
//! scenarios/rdc-fig3.toml`); [`experiment`] is its entry behind the lab's
//! [`Experiment`](crate::experiment::Experiment).
//!
//! - [`scenario`]: the file, checked;
//! - [`flows`]: the flows (packet size, window cap, start times, packets per bin, `TCP_INFO`,
//!   bulk or video);
//! - [`agents`]: the agent in the receivers, stopped and checked for leftover rules;
//! - [`trial`]: one variant on its own network;
//! - [`measure`]: settling time, oscillation, shares, percentiles;
//! - [`rtt_groups`]: streams of different round trips (Fig. 9/10): layers per RTT group and
//!   the disparity between groups;
//! - [`summary`]: `summary.json` and the printed table; [`plot`]: Fig. 3, and for video
//!   Fig. 6/8 (layers) and Fig. 7 (queue); [`report`]: `report.html`.
//!
//! Where we differ from the paper: real Linux TCP (the scenario's congestion control) in
//! namespaces, not ns-2; packets per bin are counted at the sender (`tcpi_data_segs_out`,
//! retransmissions included), the paper counts them at the router; the agent estimates the
//! RTT from TCP timestamps and cwnd from bytes per RTT, where the paper's simulation used the
//! first two packets' gap and the maximum window.

pub mod agents;
pub mod experiment;
pub mod flows;
pub mod measure;
pub mod plot;
pub mod report;
pub mod rtt_groups;
pub mod scenario;
pub mod summary;
pub mod timing;
pub mod trial;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

pub use scenario::RdcScenario;
pub use summary::{text_table, RdcSummary};

use crate::LabError;
use lowtide_media::rdc_video::LayerPoint;

/// How to run an RDC scenario.
#[derive(Debug, Clone, Default)]
pub struct RdcOptions {
    pub quick: bool,
    pub out_dir: PathBuf,
}

pub const SUMMARY: &str = "summary.json";
pub const REPORT: &str = "report.html";
pub const FLOWS_CSV: &str = "flows.csv";
/// Each agent flow's delay and mark share over the run (runs with an agent).
pub const AGENT_DELAYS_CSV: &str = "agent-delays.csv";
pub const PLOT: &str = "packets-per-bin.svg";
pub const LAYERS_CSV: &str = "layers.csv";
/// The forward queue after each dequeue, from `measure_from_s`.
pub const QUEUE_CSV: &str = "queue.csv";
/// Every held ACK's release (runs with an agent).
pub const RELEASES_CSV: &str = "releases.csv";
/// The emulator's deliveries more than 1 ms late, both links.
pub const LATE_CSV: &str = "late-deliveries.csv";
/// Every flow's `TCP_INFO` samples, with the sender's port.
pub const TCPINFO_CSV: &str = "tcpinfo.csv";
/// The TCP segments the forward bottleneck dropped.
pub const DROPS_CSV: &str = "drops.csv";
pub const LAYERS_PLOT: &str = "layers.svg";
pub const QUEUE_PLOT: &str = "queue.svg";
pub const LAYERS_BY_RTT_PLOT: &str = "layers-by-rtt.svg";
/// Step of each RTT group's mean layers over time, s.
const GROUP_STEP_S: f64 = 1.0;
/// Streams drawn per panel of the layers figure (the paper shows 10 of its 100).
const STREAMS_DRAWN: usize = 10;

/// Runs every variant, one trial each, and writes the run folder: `summary.json`,
/// `flows.csv` (packets sent and bytes received per flow per bin), the timing records
/// ([`QUEUE_CSV`], [`LATE_CSV`], [`RELEASES_CSV`]), `scenario-as-run.toml`,
/// the Fig. 3 plot (SVG and PNG), the video figures, and `report.html`. A variant whose network fails is an error in the
/// summary; the others still run.
pub fn run(
    s: &RdcScenario,
    opts: &RdcOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<RdcSummary, LabError> {
    let s = if opts.quick { s.quick() } else { s.clone() };
    std::fs::create_dir_all(&opts.out_dir)
        .map_err(|e| LabError::io(format!("creating {}", opts.out_dir.display()), e))?;
    let rate_bps = s.topology.forward.nominal_rate_bps();
    let mut trials = vec![];
    let mut errors = vec![];
    for v in &s.variants {
        match trial::run_variant(&s, v, progress) {
            Ok(t) => trials.push(t),
            Err(e) => errors.push(format!("variant {}: {e}", v.name)),
        }
    }
    let variants: Vec<summary::VariantSummary> = trials
        .iter()
        .map(|t| summary::of_trial(&s, t, rate_bps))
        .collect();
    errors.extend(
        variants
            .iter()
            .flat_map(|v| v.errors.iter().map(move |e| format!("{}: {e}", v.name))),
    );
    let summary = RdcSummary {
        scenario: s.name.clone(),
        paper_figure: s.paper.figure.clone(),
        paper_text: s.paper.text.clone(),
        differences: s.paper.differences.clone(),
        goals: summary::goals(&s, &variants),
        variants,
        provenance: provenance(&s, opts),
        errors,
    };
    write_folder(&opts.out_dir, &s, &summary, &trials)?;
    Ok(summary)
}

fn provenance(s: &RdcScenario, opts: &RdcOptions) -> Vec<(String, String)> {
    let git = crate::runner::git_revision();
    vec![
        (
            "command".into(),
            std::env::args().collect::<Vec<_>>().join(" "),
        ),
        ("git revision".into(), git),
        (
            "kernel".into(),
            std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .into(),
        ),
        (
            "run".into(),
            format!(
                "{} s per variant{}, flows start at {:?} s",
                s.rdc.duration_s,
                if opts.quick { " (--quick)" } else { "" },
                s.starts()
            ),
        ),
    ]
}

fn write_folder(
    dir: &Path,
    s: &RdcScenario,
    summary: &RdcSummary,
    trials: &[trial::TrialRecord],
) -> Result<(), LabError> {
    let io = |what: &str| {
        let what = format!("writing {what} in {}", dir.display());
        move |e: std::io::Error| LabError::io(what, e)
    };
    let as_run = toml::to_string(s).map_err(|e| LabError::io("the scenario as run", e))?;
    std::fs::write(dir.join("scenario-as-run.toml"), as_run).map_err(io("the scenario"))?;
    let json = serde_json::to_string_pretty(summary)
        .map_err(|e| LabError::io("serialising the summary", e))?;
    std::fs::write(dir.join(SUMMARY), json).map_err(io(SUMMARY))?;
    let bin_s = s.rdc.bin_ms / 1000.0;
    let mut csv =
        std::io::BufWriter::new(std::fs::File::create(dir.join(FLOWS_CSV)).map_err(io(FLOWS_CSV))?);
    writeln!(csv, "variant,flow,bin_start_s,sent_packets,received_bytes").map_err(io(FLOWS_CSV))?;
    for t in trials {
        for (i, (snd, rcv)) in t.senders.iter().zip(&t.receivers).enumerate() {
            let sent = snd
                .as_ref()
                .map(|x| x.sent_packets.as_slice())
                .unwrap_or(&[]);
            let got = rcv
                .as_ref()
                .map(|x| x.received_bytes.as_slice())
                .unwrap_or(&[]);
            for k in 0..sent.len().max(got.len()) {
                let cell = |v: Option<&u64>| v.map_or(String::new(), u64::to_string);
                writeln!(
                    csv,
                    "{},{i},{:.3},{},{}",
                    t.variant,
                    k as f64 * bin_s,
                    cell(sent.get(k)),
                    cell(got.get(k))
                )
                .map_err(io(FLOWS_CSV))?;
            }
        }
    }
    csv.flush().map_err(io(FLOWS_CSV))?;
    write_analysis_files(dir, trials)?;
    let panels: Vec<(String, Vec<&[u64]>)> = trials
        .iter()
        .map(|t| {
            let flows = t
                .senders
                .iter()
                .map(|x| x.as_ref().map_or(&[][..], |x| x.sent_packets.as_slice()))
                .collect();
            (t.variant.clone(), flows)
        })
        .collect();
    if !panels.is_empty() {
        plot::packets_per_bin(&dir.join(PLOT), bin_s, &panels)?;
    }
    if s.rdc.video.is_some() {
        write_video_figures(dir, s, trials)?;
    }
    let page = report::html(summary, &|svg| dir.join(svg).exists());
    std::fs::write(dir.join(REPORT), page).map_err(io(REPORT))
}

/// The files the analysers in `crates/lowtide-lab/analysis/` read of an RDC run (besides
/// `layers.csv`): the agents' delays, and the queue, late deliveries, drops, `TCP_INFO` and released ACKs. Public so that their test
/// writes a folder through these very writers.
pub fn write_analysis_files(dir: &Path, trials: &[trial::TrialRecord]) -> Result<(), LabError> {
    let io =
        |name: &'static str| move |e: std::io::Error| LabError::io(format!("writing {name}"), e);
    if trials.iter().any(|t| !t.agent_delays.is_empty()) {
        let mut csv = std::io::BufWriter::new(
            std::fs::File::create(dir.join(AGENT_DELAYS_CSV)).map_err(io(AGENT_DELAYS_CSV))?,
        );
        writeln!(csv, "variant,t_s,receiver,remote_port,delay_ms,mark_share")
            .map_err(io(AGENT_DELAYS_CSV))?;
        for t in trials {
            for d in &t.agent_delays {
                writeln!(
                    csv,
                    "{},{:.3},{},{},{:.3},{:.4}",
                    t.variant, d.t_s, d.receiver, d.remote_port, d.delay_ms, d.mark_share
                )
                .map_err(io(AGENT_DELAYS_CSV))?;
            }
        }
        csv.flush().map_err(io(AGENT_DELAYS_CSV))?;
    }
    write_timing(dir, trials)
}

/// What the timing analysis of the queue reads (`crates/lowtide-lab/analysis/rdc-queue-causes.py`):
/// `queue.csv`, `releases.csv` (with an agent), `late-deliveries.csv`; times in µs from
/// the flows' origin. And what the analysis of timeouts reads (`crates/lowtide-lab/analysis/rdc-timeouts.py`):
/// `tcpinfo.csv` (s from the origin) and `drops.csv` (µs).
fn write_timing(dir: &Path, trials: &[trial::TrialRecord]) -> Result<(), LabError> {
    let file = |name: &str| -> Result<_, LabError> {
        let f = std::fs::File::create(dir.join(name))
            .map_err(|e| LabError::io(format!("writing {name}"), e))?;
        Ok(std::io::BufWriter::new(f))
    };
    let io =
        |name: &'static str| move |e: std::io::Error| LabError::io(format!("writing {name}"), e);
    let mut q = file(QUEUE_CSV)?;
    writeln!(q, "variant,t_us,packets,sojourn_us").map_err(io(QUEUE_CSV))?;
    for t in trials {
        for s in &t.queue {
            writeln!(q, "{},{},{},{}", t.variant, s.t_us, s.packets, s.sojourn_us)
                .map_err(io(QUEUE_CSV))?;
        }
    }
    q.flush().map_err(io(QUEUE_CSV))?;
    let mut l = file(LATE_CSV)?;
    writeln!(l, "variant,link,t_us,late_us").map_err(io(LATE_CSV))?;
    for t in trials {
        for (link, d) in &t.late_deliveries {
            writeln!(l, "{},{link},{},{}", t.variant, d.t_us, d.late_us).map_err(io(LATE_CSV))?;
        }
    }
    l.flush().map_err(io(LATE_CSV))?;
    let mut d = file(DROPS_CSV)?;
    writeln!(d, "variant,t_us,reason,src_port,dst_port,seq,payload").map_err(io(DROPS_CSV))?;
    for t in trials {
        for x in &t.drops {
            writeln!(
                d,
                "{},{},{},{},{},{},{}",
                t.variant, x.t_us, x.reason, x.src_port, x.dst_port, x.seq, x.payload
            )
            .map_err(io(DROPS_CSV))?;
        }
    }
    d.flush().map_err(io(DROPS_CSV))?;
    let mut c = file(TCPINFO_CSV)?;
    writeln!(
        c,
        "variant,flow,port,t_s,cwnd,srtt_ms,rttvar_ms,rto_ms,total_retrans,total_rto,backoff,\
         ca_state,lost,unacked,notsent"
    )
    .map_err(io(TCPINFO_CSV))?;
    let cell = |x: Option<String>| x.unwrap_or_default();
    for t in trials {
        for (i, snd) in t.senders.iter().enumerate() {
            let Some(snd) = snd else { continue };
            for x in &snd.timeline.samples {
                writeln!(
                    c,
                    "{},{i},{},{:.3},{},{:.3},{:.3},{},{},{},{},{},{},{},{}",
                    t.variant,
                    cell(snd.local_port.map(|p| p.to_string())),
                    x.t_s,
                    x.cwnd,
                    x.srtt_ms,
                    x.rttvar_ms,
                    cell(x.rto_ms.map(|r| format!("{r:.3}"))),
                    x.total_retrans,
                    cell(x.total_rto.map(|r| r.to_string())),
                    x.backoff,
                    x.ca_state,
                    x.lost,
                    x.unacked,
                    x.notsent
                )
                .map_err(io(TCPINFO_CSV))?;
            }
        }
    }
    c.flush().map_err(io(TCPINFO_CSV))?;
    if trials.iter().all(|t| t.releases.is_empty()) {
        return Ok(());
    }
    let mut r = file(RELEASES_CSV)?;
    writeln!(
        r,
        "variant,receiver,remote_port,held_us,due_us,left_us,flushed,ack,window"
    )
    .map_err(io(RELEASES_CSV))?;
    for t in trials {
        for (receiver, x) in &t.releases {
            writeln!(
                r,
                "{},{receiver},{},{},{},{},{},{},{}",
                t.variant,
                x.remote_port,
                x.held_us,
                x.due_us,
                x.left_us,
                x.flushed as u8,
                x.ack,
                x.window
            )
            .map_err(io(RELEASES_CSV))?;
        }
    }
    r.flush().map_err(io(RELEASES_CSV))
}

/// Video runs: `layers.csv` (every stream's layer count at its start and after each change),
/// the layers figure (Fig. 6 and 8: the first streams of each variant; Fig. 10, with RTT
/// groups: the first stream of each group), with RTT groups each group's mean layers over
/// time, and the bottleneck queue (Fig. 7: after each dequeue, in the measurement window).
fn write_video_figures(
    dir: &Path,
    s: &RdcScenario,
    trials: &[trial::TrialRecord],
) -> Result<(), LabError> {
    let io = |e: std::io::Error| LabError::io(format!("writing {LAYERS_CSV}"), e);
    let mut csv = std::io::BufWriter::new(std::fs::File::create(dir.join(LAYERS_CSV)).map_err(io)?);
    writeln!(csv, "variant,stream,t_s,layers").map_err(io)?;
    let mut layer_panels = vec![];
    let mut group_panels = vec![];
    let mut queue_panels = vec![];
    for t in trials {
        let streams: Vec<(usize, &[LayerPoint])> = t
            .senders
            .iter()
            .enumerate()
            .filter_map(|(i, snd)| {
                let v = snd.as_ref()?.video.as_ref()?;
                Some((i, v.layers.as_slice()))
            })
            .collect();
        for (i, points) in &streams {
            for p in *points {
                writeln!(csv, "{},{i},{:.3},{}", t.variant, p.t_s, p.layers).map_err(io)?;
            }
        }
        layer_panels.push(layers_panel(s, &t.variant, &streams));
        if s.has_rtt_groups() {
            group_panels.push(rtt_groups_panel(s, &t.variant, &streams));
        }
        let step = (t.queue.len() / 4000).max(1);
        let queue: Vec<(f64, f64)> = t
            .queue
            .iter()
            .step_by(step)
            .map(|q| (q.t_us as f64 / 1e6, f64::from(q.packets)))
            .collect();
        queue_panels.push(plot::Panel {
            title: t.variant.clone(),
            lines: vec![queue],
            labels: vec![],
        });
    }
    csv.flush().map_err(io)?;
    plot::stacked(&dir.join(LAYERS_PLOT), "layers", &layer_panels)?;
    if !group_panels.is_empty() {
        plot::stacked(
            &dir.join(LAYERS_BY_RTT_PLOT),
            "mean layers of the group",
            &group_panels,
        )?;
    }
    plot::stacked(&dir.join(QUEUE_PLOT), "queue (packets)", &queue_panels)
}

/// Fig. 6 and 8: the first streams, unnamed; with RTT groups (Fig. 10) the first stream of
/// each group, named by its round trip.
fn layers_panel(s: &RdcScenario, variant: &str, streams: &[(usize, &[LayerPoint])]) -> plot::Panel {
    let end = s.rdc.duration_s;
    let steps = |points: &[LayerPoint]| {
        let pts: Vec<(f64, u32)> = points.iter().map(|p| (p.t_s, p.layers)).collect();
        plot::steps(&pts, end)
    };
    if !s.has_rtt_groups() {
        return plot::Panel {
            title: variant.to_string(),
            lines: streams
                .iter()
                .take(STREAMS_DRAWN)
                .map(|(_, p)| steps(p))
                .collect(),
            labels: vec![],
        };
    }
    let first: Vec<(u32, (usize, &[LayerPoint]))> = by_rtt_group(s, streams)
        .into_iter()
        .map(|(rtt, g)| (rtt, g[0]))
        .collect();
    plot::Panel {
        title: format!("{variant}: one stream per RTT group"),
        lines: first.iter().map(|(_, (_, p))| steps(p)).collect(),
        labels: first
            .iter()
            .map(|(rtt, (i, _))| format!("{rtt} ms (stream {i})"))
            .collect(),
    }
}

/// `streams` (index, layer points) by RTT group, each group in stream order (never empty).
fn by_rtt_group<'a>(
    s: &RdcScenario,
    streams: &[(usize, &'a [LayerPoint])],
) -> BTreeMap<u32, Vec<(usize, &'a [LayerPoint])>> {
    let mut groups: BTreeMap<u32, Vec<(usize, &[LayerPoint])>> = BTreeMap::new();
    for &(i, points) in streams {
        groups
            .entry(rtt_groups::group_of(s.min_rtt_ms(i)))
            .or_default()
            .push((i, points));
    }
    groups
}

/// Each RTT group's mean layers over time.
fn rtt_groups_panel(
    s: &RdcScenario,
    variant: &str,
    streams: &[(usize, &[LayerPoint])],
) -> plot::Panel {
    let groups = by_rtt_group(s, streams);
    plot::Panel {
        title: format!("{variant}: mean layers per RTT group"),
        lines: groups
            .values()
            .map(|g| {
                let points: Vec<&[LayerPoint]> = g.iter().map(|(_, p)| *p).collect();
                rtt_groups::mean_over_time(&points, GROUP_STEP_S, s.rdc.duration_s)
            })
            .collect(),
        labels: groups
            .iter()
            .map(|(rtt, g)| format!("{rtt} ms ({} streams)", g.len()))
            .collect(),
    }
}
