//! `lowtide lab run`: a scenario's trials, each in a fresh emulated network, and the run
//! folder (provenance, raw CSV, `summary.json`, `report.html`).
//!
//! A trial is one dumbbell with its cross traffic (forward from sender 0, reverse from a
//! receiver), the floor probe, and one or more measured streams. Side by side, one trial holds
//! every variant (ports [`STREAM_PORT`]` + i`), so all see the very same queue; sequentially,
//! each variant gets its own trial, N runs each, the paper's way.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use lowtide::ChannelConfig;
use lowtide_netem::{AqmConfig, Dumbbell, QueueLimit, RunOptions, TopologyConfig};
use lowtide_traffic::runner::{run_schedule, Target};
use lowtide_traffic::schedule::Plan;
use lowtide_traffic::sink::{TcpSink, TcpSinkReport, UdpSink, UdpSinkReport};
use lowtide_traffic::Stop;

use crate::render::{self, SCENARIO, SCENARIO_AS_RUN, SUMMARY, SUMMARY_STORED};
use crate::results::{
    self, files, LabSummary, SummaryInputs, TrialNetwork, TrialRecord, VariantInfo, VideoInfo,
    Window,
};
use crate::scenario::{ApplicationKind, Checked, Mode, Overrides, Scenario, STREAM_PORT};
use crate::stream::{self, DeliveryErrors, Sample};
use crate::{conference, floor, ladder_flow, quic, tfrc_flow, video, LabError};

/// Ports of the cross-traffic sinks on every host, and of the floor probe.
const TCP_SINK_PORT: u16 = 5001;
const UDP_SINK_PORT: u16 = 5002;
const FLOOR_PORT: u16 = 6100;
/// Streams start this long after the threads are spawned, so every listener is up.
const LEAD_IN: Duration = Duration::from_millis(300);
/// Receivers keep reading this long after the senders stop.
pub(crate) const GRACE: Duration = Duration::from_secs(1);

/// What `lab run` was told besides the scenario.
#[derive(Debug, Clone, Default)]
pub struct LabOptions {
    /// The scenario file's text, copied into the run folder.
    pub scenario_text: String,
    /// Run the `[quick]` form.
    pub quick: bool,
    /// Overrides `run.runs` (after `--quick`).
    pub runs: Option<u32>,
    /// Queue and congestion-control changes for sensitivity runs.
    pub overrides: Overrides,
    pub out_dir: PathBuf,
    /// Write every packet leaving each bottleneck direction (`forward.pcap`, `reverse.pcap`)
    /// into `OUT/pcap/trial-N/`, with `start.txt` (the wall clock at the trial's start, which
    /// the pcap's timestamps use, so packets line up with the run's records) and
    /// `variants.txt` (the trial's variants, one a line).
    pub pcap: bool,
    /// For tests of failure handling only: the forward link's rate cell fails this many
    /// seconds into every trial, as a bug in a cell would.
    #[doc(hidden)]
    pub emulator_fault_at_s: Option<f64>,
}

/// A finished run.
#[derive(Debug)]
pub struct LabRun {
    pub summary: LabSummary,
    pub dir: PathBuf,
}

/// Runs every trial of a checked scenario and writes the run folder. When a trial fails, the
/// folder still gets what was measured so far, marked as failed, and the error says where.
pub fn run(
    checked: &Checked,
    opts: &LabOptions,
    mut progress: impl FnMut(&str),
) -> Result<LabRun, LabError> {
    let checked = effective(checked, opts)?;
    let s = &checked.scenario;
    let all: Vec<usize> = (0..s.variants.len()).collect();
    let mut trials: Vec<(Mode, u32, Vec<usize>)> = vec![];
    for &mode in &s.run.modes {
        for run in 1..=s.run.runs {
            match mode {
                Mode::SideBySide => trials.push((mode, run, all.clone())),
                Mode::Sequential => trials.extend(all.iter().map(|&i| (mode, run, vec![i]))),
            }
        }
    }
    // An earlier run's packets in a reused `--out` must not pass for this run's.
    let pcap_root = opts.out_dir.join("pcap");
    if pcap_root.is_dir() {
        std::fs::remove_dir_all(&pcap_root)
            .map_err(|e| LabError::io(format!("removing the old {}", pcap_root.display()), e))?;
    }
    progress("measuring this machine's timer wake-up noise (2 s)");
    let inputs = summary_inputs(&checked, opts, &[wakeup_noise()]);
    let mut records = vec![];
    let total = trials.len();
    let mut failed = None;
    for (k, (mode, run, variants)) in trials.into_iter().enumerate() {
        let names: Vec<String> = variants
            .iter()
            .map(|&i| s.variants[i].name.clone())
            .collect();
        let label = format!(
            "[{}/{total}] {} run {run}: {}",
            k + 1,
            mode.as_str(),
            names.join(", ")
        );
        let seed = s.run.seed + u64::from(run) - 1;
        let pcap_dir = opts
            .pcap
            .then(|| opts.out_dir.join("pcap").join(format!("trial-{}", k + 1)));
        let TrialOutcome { mut record, error } = run_trial(
            &checked,
            &variants,
            seed,
            TrialOptions {
                fault_at_s: opts.emulator_fault_at_s,
                pcap_dir,
            },
            &label,
            &mut progress,
        );
        record.mode = Some(mode);
        record.run = run;
        record.variants = names.clone();
        record.network.mode = Some(mode);
        record.network.run = run;
        record.network.variants = names;
        records.push(record);
        if let Some(e) = error {
            failed = Some(e);
            break;
        }
    }
    progress("writing the report");
    let summary = results::summarize(&inputs, &records, failed.as_ref().map(|e| e.to_string()));
    write_run_folder(&opts.out_dir, &opts.scenario_text, s, &summary, &records)?;
    match failed {
        Some(error) => Err(LabError::Partial {
            error: Box::new(error),
            dir: opts.out_dir.clone(),
        }),
        None => Ok(LabRun {
            summary,
            dir: opts.out_dir.clone(),
        }),
    }
}

/// The machine's timer wake-up noise, measured on the emulator's timer path before the run, as
/// a provenance line: the emulator cannot be more punctual than this.
fn wakeup_noise() -> (String, String) {
    let value = match lowtide_netem::noise::measure(Duration::from_secs(2)) {
        Ok(noise) => noise.to_string(),
        Err(e) => format!("not measured: {e}"),
    };
    ("timer wake-up noise".into(), value)
}

/// The scenario as it will run: overrides, then `--quick`, then `--runs`, checked again
/// (scaling can make a schedule invalid).
pub fn effective(checked: &Checked, opts: &LabOptions) -> Result<Checked, LabError> {
    let base = checked.scenario.with_overrides(&opts.overrides);
    let mut scenario = if opts.quick { base.quick() } else { base };
    if let Some(n) = opts.runs {
        scenario.run.runs = n;
    }
    scenario.check().map_err(|e| {
        LabError::io(
            "checking the scenario after --quick, --runs, --queue-bdp, --cc",
            e,
        )
    })
}

/// Writes the raw data, the scenario as it ran, the summary and the report into `dir`.
pub fn write_run_folder(
    dir: &Path,
    scenario_text: &str,
    as_run: &Scenario,
    summary: &LabSummary,
    records: &[TrialRecord],
) -> Result<(), LabError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| LabError::io(format!("creating {}", dir.display()), e))?;
    remove_stale(dir)?;
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).map_err(|e| LabError::io(format!("writing {}", p.display()), e))
    };
    write(SCENARIO, scenario_text)?;
    let effective = toml::to_string(as_run)
        .map_err(|e| LabError::io(format!("encoding {SCENARIO_AS_RUN}"), e))?;
    write(
        SCENARIO_AS_RUN,
        &format!("# The scenario as it ran (after --quick, --runs and overrides).\n{effective}"),
    )?;
    files::write_records(dir, records)?;
    results::write_json(&dir.join(SUMMARY), summary)?;
    render::render(dir, summary, records)
}

/// Removes what an earlier run wrote into `dir` (a reused `--out`), so a plot or CSV of a mode
/// or an application this run lacks cannot pass for its own. Only our file names are touched.
fn remove_stale(dir: &Path) -> Result<(), LabError> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| LabError::io(format!("reading {}", dir.display()), e))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let ours = [
            render::REPORT,
            SUMMARY,
            files::MESSAGES,
            files::WINDOWS,
            files::TCPINFO,
            files::TRIALS,
            SCENARIO,
            SCENARIO_AS_RUN,
        ]
        .contains(&name.as_str())
            || (["latency-", "cdf-", "throughput-", "windows-", "ladder-"]
                .iter()
                .any(|p| name.starts_with(p))
                && (name.ends_with(".svg") || name.ends_with(".png")));
        if ours {
            let path = entry.path();
            std::fs::remove_file(&path)
                .map_err(|e| LabError::io(format!("removing the old {}", path.display()), e))?;
        }
    }
    Ok(())
}

/// What `lowtide lab report DIR` did: the summary recomputed from the run folder's records,
/// and where it differs from the stored one.
#[derive(Debug)]
pub struct Recomputed {
    pub report: PathBuf,
    pub summary: LabSummary,
    /// `path: stored → recomputed`, one line per difference; empty when they agree.
    pub differences: Vec<String>,
}

/// `lowtide lab report DIR`: recomputes the summary from the scenario as it ran and the raw
/// records, says where it differs from the stored `summary.json`, then writes the recomputed
/// summary and re-renders `report.html` (the stored one is kept as `summary.stored.json`
/// when they differ).
pub fn recompute(dir: &Path) -> Result<Recomputed, LabError> {
    let stored_path = dir.join(SUMMARY);
    let stored = results::read_json(&stored_path)?;
    let scenario_path = dir.join(SCENARIO_AS_RUN);
    let text = std::fs::read_to_string(&scenario_path)
        .map_err(|e| LabError::io(format!("reading {}", scenario_path.display()), e))?;
    let checked = Scenario::from_toml(&text)
        .map_err(|e| LabError::io(format!("checking {}", scenario_path.display()), e))?;
    let records = files::read_records(dir)?;
    let opts = LabOptions {
        quick: stored.quick,
        ..LabOptions::default()
    };
    let mut inputs = summary_inputs(&checked, &opts, &[]);
    inputs.provenance = stored.provenance.clone();
    let summary = results::summarize(&inputs, &records, stored.failed.clone());
    let differences = diff_json(
        &serde_json::to_value(&stored).unwrap_or_default(),
        &serde_json::to_value(&summary).unwrap_or_default(),
    );
    if !differences.is_empty() {
        std::fs::copy(&stored_path, dir.join(SUMMARY_STORED))
            .map_err(|e| LabError::io(format!("keeping {}", stored_path.display()), e))?;
    }
    results::write_json(&stored_path, &summary)?;
    render::render(dir, &summary, &records)?;
    Ok(Recomputed {
        report: dir.join(render::REPORT),
        summary,
        differences,
    })
}

/// Where two JSON values differ: one `path: a → b` line per leaf (numbers equal to a
/// relative 1e-9).
pub fn diff_json(a: &serde_json::Value, b: &serde_json::Value) -> Vec<String> {
    use serde_json::Value as V;
    fn walk(path: &str, a: &V, b: &V, out: &mut Vec<String>) {
        match (a, b) {
            (V::Object(x), V::Object(y)) => {
                let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                for k in keys {
                    let (p, null) = (format!("{path}.{k}"), V::Null);
                    walk(
                        &p,
                        x.get(k).unwrap_or(&null),
                        y.get(k).unwrap_or(&null),
                        out,
                    );
                }
            }
            (V::Array(x), V::Array(y)) if x.len() == y.len() => {
                for (i, (p, q)) in x.iter().zip(y).enumerate() {
                    walk(&format!("{path}[{i}]"), p, q, out);
                }
            }
            (V::Number(x), V::Number(y)) => {
                let (x, y) = (
                    x.as_f64().unwrap_or(f64::NAN),
                    y.as_f64().unwrap_or(f64::NAN),
                );
                if (x - y).abs() > 1e-9 * x.abs().max(y.abs()) {
                    out.push(format!("{path}: {x} → {y}"));
                }
            }
            _ if a != b => out.push(format!("{path}: {a} → {b}")),
            _ => {}
        }
    }
    let mut out = vec![];
    walk("summary", a, b, &mut out);
    out
}

/// What the summary needs besides the records: the scenario as it ran, in words, and the
/// provenance (with `extra` lines such as the machine's timer noise).
pub fn summary_inputs(
    checked: &Checked,
    opts: &LabOptions,
    extra: &[(String, String)],
) -> SummaryInputs {
    let s = &checked.scenario;
    let variants = s
        .variants
        .iter()
        .enumerate()
        .map(|(i, v)| VariantInfo {
            name: v.name.clone(),
            controller: match (&v.quic, v.sndbuf) {
                (Some(q), _) => format!(
                    "QUIC (quinn), send window {} KB",
                    q.send_window_bytes / 1024
                ),
                _ if v.tfrc.is_some() => tfrc_flow::describe(v.tfrc.as_ref()),
                (None, Some(b)) => format!("{}, SO_SNDBUF {b}", controller_name(&v.controller)),
                (None, None) => controller_name(&v.controller),
            },
            congestion: match &v.quic {
                Some(q) => q.congestion.clone(),
                None => match &v.tfrc {
                    Some(t) if t.small_packets => "TFRC-SP (RFC 4828)".into(),
                    Some(_) => "TFRC (RFC 5348)".into(),
                    None => v
                        .congestion
                        .clone()
                        .unwrap_or_else(|| s.topology.hosts.congestion.clone()),
                },
            },
            ecn: s.ecn_of(v),
            paper: v.paper.clone(),
            baseline: checked.baseline_of(i).map(|b| s.variants[b].name.clone()),
            video: (s.application_of(v) == ApplicationKind::LayeredVideo).then_some(VideoInfo {
                window_frames: s.application.video.window_frames,
                tolerance_ms: s.application.video.tolerance_ms,
            }),
            conference: (s.application_of(v) == ApplicationKind::Conference)
                .then(|| s.conference_videos(v)),
            ladder: s.application_of(v) == ApplicationKind::BitrateLadder,
        })
        .collect();
    let mut provenance = provenance(s, opts);
    provenance.extend(extra.iter().cloned());
    SummaryInputs {
        scenario: s.name.clone(),
        description: s.description.clone(),
        paper: s.paper.clone(),
        quick: opts.quick,
        duration_s: s.run.duration_s,
        window: Window {
            from_s: s.run.measure_from_s,
            to_s: s.measure_to_s(),
        },
        runs: s.run.runs,
        modes: s.run.modes.clone(),
        baseline: checked.baseline.map(|i| s.variants[i].name.clone()),
        network: describe_network(&s.topology),
        variants,
        goals: s.goals.clone(),
        provenance,
    }
}

/// `MinBuf(1,3)`, `NotsentLowat(4344)`: how the paper and the tables name controllers.
pub fn controller_name(c: &lowtide::ControllerConfig) -> String {
    use lowtide::ControllerConfig as C;
    match *c {
        C::Unlimited => "Unlimited".into(),
        C::NotsentLowat { bytes } => format!("NotsentLowat({bytes})"),
        C::MinBuf { a, b } => format!("MinBuf({a},{b})"),
        C::PaceA { b } => format!("PaceA({b})"),
        C::Dbat(d) => format!("Dbat({}kbit/s)", d.bit_rate_kbps),
    }
}

/// The bottleneck in words, queue included: the paper does not give its router queue, so the
/// report must say which one we used.
pub fn describe_network(t: &TopologyConfig) -> String {
    let rtt = t.base_rtt();
    let link = |name: &str, l: &lowtide_netem::LinkConfig| {
        let queue = match l.queue {
            QueueLimit::Bdp(m) => format!("{m} BDP ({:.0} bytes)", m * l.bdp_bytes(rtt)),
            QueueLimit::Packets(p) => format!("{p} packets"),
            QueueLimit::Bytes(b) => format!("{b} bytes"),
        };
        let aqm = match &l.aqm {
            AqmConfig::DropTail => "drop-tail".to_string(),
            AqmConfig::Drd {
                min_bdp,
                max_bdp,
                congest_bdp,
                ecn,
            } => format!(
                "DRD (drdmin {min_bdp}, drdmax {max_bdp}, drdcongest {congest_bdp} BDP{})",
                if *ecn { ", ECN marking" } else { "" }
            ),
            other => other.name().to_string(),
        };
        format!(
            "{name} {:.1} Mbit/s, {} ms one way, {aqm} queue of {queue}",
            l.nominal_rate_bps() / 1e6,
            l.delay_ms
        )
    };
    format!(
        "{} sender(s), {} receiver(s), base RTT {:.0} ms; {}; {}; hosts: {}{}",
        t.senders,
        t.receivers,
        rtt.as_secs_f64() * 1e3,
        link("forward", &t.forward),
        link("reverse", &t.reverse),
        t.hosts.congestion,
        if t.hosts.ecn { ", ECN" } else { "" }
    )
}

/// `git rev-parse HEAD`, or "unknown".
pub(crate) fn git_revision() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// Command line, revision, kernel, congestion control, seed.
fn provenance(s: &Scenario, opts: &LabOptions) -> Vec<(String, String)> {
    let git = git_revision();
    let dirty = std::process::Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .ok()
        .is_some_and(|o| !o.stdout.is_empty());
    let proc = |p: &str| {
        std::fs::read_to_string(p)
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    let mut lines: Vec<(String, String)> = vec![
        (
            "command".into(),
            std::env::args().collect::<Vec<_>>().join(" "),
        ),
        (
            "scenario".into(),
            format!("{} ({SCENARIO} in this folder)", s.name),
        ),
        (
            "git revision".into(),
            format!("{git}{}", if dirty { " (with local changes)" } else { "" }),
        ),
        ("kernel".into(), proc("/proc/sys/kernel/osrelease")),
        (
            "congestion control".into(),
            format!(
                "hosts: {}; variants: {}; kernel default: {}",
                s.topology.hosts.congestion,
                s.variants
                    .iter()
                    .map(|v| format!(
                        "{}={}",
                        v.name,
                        v.congestion
                            .as_deref()
                            .unwrap_or(&s.topology.hosts.congestion)
                    ))
                    .collect::<Vec<_>>()
                    .join(", "),
                proc("/proc/sys/net/ipv4/tcp_congestion_control")
            ),
        ),
        (
            "seed".into(),
            format!("{} (run k uses seed + k - 1)", s.run.seed),
        ),
        (
            "topology".into(),
            toml::to_string(&s.topology).unwrap_or_default(),
        ),
    ];
    if opts.quick || opts.runs.is_some() || !opts.overrides.is_empty() {
        let change = format!(
            "quick: {}, runs: {:?}, {:?} (the topology above is the one that ran)",
            opts.quick, opts.runs, opts.overrides
        );
        lines.push(("changes to the scenario".into(), change));
    }
    lines
}

/// A thread of a trial: running, or finished with its result. The trial looks at its
/// threads every second, so one that fails ends the trial at once, not at its end.
pub(crate) enum Task<T> {
    Running(&'static str, JoinHandle<Result<T, LabError>>),
    Done(&'static str, Result<T, LabError>),
}

impl<T> Task<T> {
    pub(crate) fn spawn(
        host: &lowtide_netem::Host,
        what: &'static str,
        f: impl FnOnce() -> Result<T, LabError> + Send + 'static,
    ) -> Result<Self, LabError>
    where
        T: Send + 'static,
    {
        Ok(Task::Running(what, host.spawn(what, f)?))
    }

    /// Takes the result of a finished thread; the error of a failed one, once.
    fn poll(&mut self) -> Option<LabError> {
        if let Task::Running(what, h) = self {
            if !h.is_finished() {
                return None;
            }
            let what = *what;
            let Task::Running(_, h) =
                std::mem::replace(self, Task::Done(what, Err(LabError::Stopped)))
            else {
                unreachable!("matched above")
            };
            *self = Task::Done(what, join(h, what));
        }
        match self {
            Task::Done(what, Err(e)) if !matches!(e, LabError::Stopped) => {
                let e = std::mem::replace(e, LabError::Stopped);
                Some(LabError::io(format!("the {what}"), e))
            }
            _ => None,
        }
    }

    /// Waits for the thread; `Err` if it failed (or stopped because something else did).
    fn wait(self) -> Result<T, LabError> {
        match self {
            Task::Running(what, h) => join(h, what),
            Task::Done(_, r) => r,
        }
    }
}

fn join<T>(h: JoinHandle<Result<T, LabError>>, what: &str) -> Result<T, LabError> {
    h.join()
        .map_err(|p| {
            let why = p
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| p.downcast_ref::<&str>().copied())
                .unwrap_or("no message");
            LabError::io(what.to_string(), format!("the thread panicked: {why}"))
        })
        .and_then(|r| r)
}

/// The cross-traffic sinks of one trial: a TCP and a UDP sink on each target host.
#[derive(Default)]
struct Sinks {
    tcp: Vec<Task<TcpSinkReport>>,
    udp: Vec<Task<UdpSinkReport>>,
}

impl Sinks {
    /// The targets on `hosts`, with sinks started there when a schedule uses them.
    fn start(
        &mut self,
        hosts: &[lowtide_netem::Host],
        used: bool,
        stop: &Stop,
    ) -> Result<Vec<Target>, LabError> {
        let mut out = vec![];
        for h in hosts {
            let t = Target {
                tcp: SocketAddr::from((h.addr(), TCP_SINK_PORT)),
                udp: SocketAddr::from((h.addr(), UDP_SINK_PORT)),
            };
            if used {
                let s = stop.clone();
                self.tcp.push(Task::spawn(h, "TCP sink", move || {
                    TcpSink::bind(t.tcp)
                        .map_err(traffic_err)?
                        .run(&s)
                        .map_err(traffic_err)
                })?);
                let s = stop.clone();
                self.udp.push(Task::spawn(h, "UDP sink", move || {
                    UdpSink::bind(t.udp)
                        .map_err(traffic_err)?
                        .run(&s)
                        .map_err(traffic_err)
                })?);
            }
            out.push(t);
        }
        Ok(out)
    }

    fn poll(&mut self) -> Option<LabError> {
        let tcp = self.tcp.iter_mut().find_map(Task::poll);
        tcp.or_else(|| self.udp.iter_mut().find_map(Task::poll))
    }

    /// Waits for every sink; the payload bytes they received.
    fn join(self) -> Result<u64, LabError> {
        let mut bytes = 0;
        for t in self.tcp {
            bytes += t.wait()?.bytes_received;
        }
        for t in self.udp {
            bytes += t.wait()?.bytes;
        }
        Ok(bytes)
    }
}

/// The threads of one measured variant.
// One value per variant and trial: the size difference between variants costs nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Measured {
    Stream {
        tx: Task<stream::StreamSent>,
        rx: Task<stream::Received>,
    },
    Video {
        tx: Task<video::VideoSent>,
        rx: Task<lowtide_media::playout::Playout>,
    },
    Conference {
        tx: Task<conference::ConferenceRun>,
        rx: Task<conference::ConferenceSeen>,
    },
    Ladder {
        tx: Task<ladder_flow::LadderSent>,
        rx: Task<ladder_flow::LadderSeen>,
    },
}

impl Measured {
    fn poll(&mut self) -> Option<LabError> {
        match self {
            Measured::Stream { tx, rx } => tx.poll().or_else(|| rx.poll()),
            Measured::Video { tx, rx } => tx.poll().or_else(|| rx.poll()),
            Measured::Conference { tx, rx } => tx.poll().or_else(|| rx.poll()),
            Measured::Ladder { tx, rx } => tx.poll().or_else(|| rx.poll()),
        }
    }
}

/// Sets the trial's stop flag when the trial ends, however it ends.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn traffic_err(e: impl std::fmt::Display) -> LabError {
    LabError::Traffic(e.to_string())
}

/// One trial's outcome: what it measured, and the error that ended it early, if one did.
struct TrialOutcome {
    record: TrialRecord,
    error: Option<LabError>,
}

/// What one trial does besides measuring.
struct TrialOptions {
    /// The forward link's rate cell fails this many seconds in (tests only).
    fault_at_s: Option<f64>,
    /// Write the bottleneck's pcaps and the trial's start here.
    pcap_dir: Option<PathBuf>,
}

/// One emulated network: cross traffic, floor probe and the streams of `variants`.
fn run_trial(
    checked: &Checked,
    variants: &[usize],
    seed: u64,
    TrialOptions {
        fault_at_s,
        pcap_dir,
    }: TrialOptions,
    label: &str,
    progress: &mut impl FnMut(&str),
) -> TrialOutcome {
    let s = &checked.scenario;
    progress(&format!("{label}: building the emulated network"));
    let failed = |e: LabError| TrialOutcome {
        record: TrialRecord::default(),
        error: Some(e),
    };
    if let Some(dir) = &pcap_dir {
        if let Err(e) = std::fs::create_dir_all(dir) {
            return failed(LabError::io("creating the pcap folder", e));
        }
    }
    let net = match Dumbbell::new(
        s.topology.clone(),
        RunOptions {
            pcap_dir: pcap_dir.clone(),
            seed,
        },
    ) {
        Ok(net) => net,
        Err(e) => return failed(e.into()),
    };
    if let Err(e) = set_ecn(s, &net, variants) {
        return failed(e);
    }
    if let Err(e) = set_sender_sysctls(s, &net, variants) {
        return failed(e);
    }
    let duration = Duration::from_secs_f64(s.run.duration_s);
    let start = Instant::now() + LEAD_IN;
    let end = start + duration;
    if let Some(dir) = &pcap_dir {
        // The pcap's timestamps are the wall clock; the records count from `start`.
        let wall = std::time::SystemTime::now() + start.saturating_duration_since(Instant::now());
        let secs = wall
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        let names: String = variants
            .iter()
            .map(|&i| format!("{}\n", s.variants[i].name))
            .collect();
        let written = std::fs::write(dir.join("start.txt"), format!("{secs:.6}\n"))
            .and_then(|()| std::fs::write(dir.join("variants.txt"), names));
        if let Err(e) = written {
            return failed(LabError::io(
                "writing the trial's start and variants for the pcap",
                e,
            ));
        }
    }
    let stop_flag = Arc::new(AtomicBool::new(false));
    // Whatever ends this trial (an error, a panic) stops its threads too.
    let _stop_on_exit = StopOnDrop(stop_flag.clone());
    let stop = Stop::new(stop_flag.clone(), end + GRACE * 2);
    let mut threads = match start_trial(checked, &net, variants, start, end, &stop) {
        Ok(t) => t,
        Err(e) => return failed(e),
    };

    let mut error = None;
    while Instant::now() < end + GRACE && error.is_none() {
        std::thread::sleep(
            Duration::from_secs(1).min((end + GRACE).saturating_duration_since(Instant::now())),
        );
        let t = Instant::now()
            .saturating_duration_since(start)
            .as_secs_f64()
            .min(s.run.duration_s);
        progress(&format!("{label}: {t:>4.0} / {:.0} s", s.run.duration_s));
        if fault_at_s.is_some_and(|at| t >= at) {
            net.inject_fault(lowtide_netem::Direction::Forward);
        }
        error = net.failure().map(LabError::from).or_else(|| threads.poll());
    }
    stop_flag.store(true, Ordering::Relaxed);
    let receive_end_s = s.run.duration_s + GRACE.as_secs_f64();
    let record = threads.collect(checked, &net, receive_end_s, &mut error);
    // An emulator failure explains the threads' errors that follow from it: it goes first.
    if let Some(e) = net.failure() {
        if !matches!(error, Some(LabError::Netem(_))) {
            error = Some(e.into());
        }
    }
    drop(net);
    TrialOutcome { record, error }
}

/// Every thread of a trial.
struct TrialThreads {
    sinks: Sinks,
    measured: Vec<(usize, Measured)>,
    floor_tx: Task<floor::FloorSent>,
    floor_rx: Task<Vec<Sample>>,
    cross: Vec<Task<lowtide_traffic::report::ScheduleReport>>,
    clip: Option<lowtide_media::video::Video>,
    /// The TLS variants' certificate files, kept until the trial's threads are done.
    _tls_files: Option<crate::tls::TlsFiles>,
}

impl TrialThreads {
    /// The first failure among the threads, if one failed.
    fn poll(&mut self) -> Option<LabError> {
        self.sinks
            .poll()
            .or_else(|| self.measured.iter_mut().find_map(|(_, m)| m.poll()))
            .or_else(|| self.floor_tx.poll())
            .or_else(|| self.floor_rx.poll())
            .or_else(|| self.cross.iter_mut().find_map(Task::poll))
    }

    /// Waits for every thread and keeps what each measured. The first error not yet reported
    /// goes to `failure` (a thread that failed while the others stopped).
    fn collect(
        self,
        checked: &Checked,
        net: &Dumbbell,
        receive_end_s: f64,
        failure: &mut Option<LabError>,
    ) -> TrialRecord {
        let s = &checked.scenario;
        // A part stopped by the trial's end without another failure lost what it measured:
        // that is a failure too, never a variant silently missing from the summary.
        let mut stopped: Option<String> = None;
        let mut note = |what: &str, r: Result<(), LabError>| match r {
            Err(LabError::Stopped) => {
                stopped.get_or_insert_with(|| what.to_string());
            }
            Err(e) if failure.is_none() => *failure = Some(e),
            _ => {}
        };
        let mut record = TrialRecord::default();
        for (i, m) in self.measured {
            let name = s.variants[i].name.clone();
            // A QUIC or TFRC sender has no lowtide driver to count (Table I's columns): no
            // cost row.
            let quic = s.variants[i].quic.is_some() || s.variants[i].tfrc.is_some();
            match m {
                Measured::Stream { tx, rx } => match (tx.wait(), rx.wait()) {
                    (Ok(sent), Ok(received)) => {
                        let (samples, errors) =
                            stream::join_sent_and_received(&sent, &received, receive_end_s);
                        record.streams.push((name.clone(), samples));
                        record.delivery_errors.push((name.clone(), errors));
                        if !quic {
                            record.costs.push((name.clone(), sent.cost));
                        }
                        record.tcp.push((name, sent.tcp));
                    }
                    (a, b) => note(&name, a.map(drop).and(b.map(drop))),
                },
                Measured::Video { tx, rx } => match (tx.wait(), rx.wait(), &self.clip) {
                    (Ok(sent), Ok(seen), Some(clip)) => {
                        let app = &s.application.video;
                        let w = video::windows(
                            clip,
                            app.window_frames,
                            &sent.ledger,
                            &seen,
                            receive_end_s,
                        );
                        record
                            .streams
                            .push((name.clone(), w.iter().filter_map(|x| x.sample()).collect()));
                        record.windows.push((name.clone(), w));
                        record.costs.push((name.clone(), sent.cost));
                        record.tcp.push((name, sent.tcp));
                    }
                    (a, b, _) => note(&name, a.map(drop).and(b.map(drop))),
                },
                Measured::Conference { tx, rx } => match (tx.wait(), rx.wait()) {
                    (Ok(mut run), Ok(seen)) => {
                        let viewers = seen.viewers;
                        // the duplicate lane's receiving counters, beside the sender's
                        run.cost.copies_first = seen.lane.copies_first;
                        run.cost.copies_late = seen.lane.copies_late;
                        run.cost.quick_acks = seen.lane.quick_acks;
                        let mut adus = conference::records(&viewers);
                        conference::add_writes(&mut adus, &run.sent.writes);
                        record
                            .streams
                            .push((name.clone(), conference::samples(&adus)));
                        record.adus.push((name.clone(), adus));
                        record.conference_sent.push((name.clone(), run.sent));
                        record.delivery_errors.push((
                            name.clone(),
                            DeliveryErrors {
                                duplicated: viewers.iter().map(|v| v.duplicated).sum(),
                                unknown: viewers.iter().map(|v| v.unknown).sum(),
                            },
                        ));
                        if !quic {
                            record.costs.push((name.clone(), run.cost));
                        }
                        record.tcp.push((name, run.tcp));
                    }
                    (a, b) => note(&name, a.map(drop).and(b.map(drop))),
                },
                Measured::Ladder { tx, rx } => match (tx.wait(), rx.wait()) {
                    (Ok(sent), Ok(seen)) => {
                        let (samples, errors, ladder) =
                            ladder_flow::join(&sent, &seen, receive_end_s);
                        record.streams.push((name.clone(), samples));
                        record.delivery_errors.push((name.clone(), errors));
                        record.ladder.push((name.clone(), ladder));
                        record.tcp.push((name, sent.tcp));
                    }
                    (a, b) => note(&name, a.map(drop).and(b.map(drop))),
                },
            }
        }
        match (self.floor_tx.wait(), self.floor_rx.wait()) {
            (Ok(sent), Ok(mut probes)) => {
                probes.sort_by(|a, b| a.sent_s.total_cmp(&b.sent_s));
                record.floor = probes;
                record.floor_sent = sent;
            }
            (a, b) => note("the floor probe", a.map(drop).and(b.map(drop))),
        }
        for t in self.cross {
            note("cross traffic", t.wait().map(drop));
        }
        let cross_bytes = self.sinks.join();
        let fwd = net.forward().report();
        let rev = net.reverse().report();
        record.network = TrialNetwork {
            forward_drops: fwd.total_drops(),
            forward_marks: fwd.total_marks(),
            reverse_drops: rev.total_drops(),
            forward_max_queue_packets: fwd.max_queue_packets,
            forward_sojourn_p99_ms: (fwd.sojourn_ms.count > 0).then_some(fwd.sojourn_ms.p99),
            cross_traffic_bps: cross_bytes
                .as_ref()
                .map_or(f64::NAN, |b| *b as f64 * 8.0 / s.run.duration_s),
            ..TrialNetwork::default()
        };
        note("the cross traffic's sinks", cross_bytes.map(drop));
        if let (None, Some(what)) = (&failure, stopped) {
            *failure = Some(LabError::io(
                format!("measuring {what}"),
                "it had not finished when the trial ended, so it was stopped and what it measured is lost",
            ));
        }
        record
    }
}

/// Starts a QUIC variant's two ends (`crate::quic`).
#[allow(clippy::too_many_arguments)]
fn start_quic(
    s: &Scenario,
    v: &crate::scenario::Variant,
    q: &crate::quic::QuicConfig,
    addr: SocketAddr,
    tx_host: &lowtide_netem::Host,
    rx_host: &lowtide_netem::Host,
    start: Instant,
    end: Instant,
    stop: &Stop,
) -> Result<Measured, LabError> {
    let creds = quic::Credentials::generate()?;
    let receive_end = end + GRACE;
    let (rq, rcreds, rstop, tstop) = (q.clone(), creds.clone(), stop.clone(), stop.clone());
    let q = q.clone();
    Ok(match s.application_of(v) {
        ApplicationKind::Conference => {
            let conf = s.application.conference.conference();
            Measured::Conference {
                rx: Task::spawn(rx_host, "QUIC conference receiver", move || {
                    quic::receive_conference(addr, rq, rcreds, conf, start, receive_end, rstop).map(
                        |v| conference::ConferenceSeen {
                            viewers: vec![v],
                            lane: Default::default(),
                        },
                    )
                })?,
                tx: Task::spawn(tx_host, "QUIC conference sender", move || {
                    quic::send_conference(addr, q, creds, conf, start, end, receive_end, tstop)
                })?,
            }
        }
        _ => Measured::Stream {
            rx: Task::spawn(rx_host, "QUIC stream receiver", move || {
                quic::receive_stream(addr, rq, rcreds, start, receive_end, rstop)
            })?,
            tx: Task::spawn(tx_host, "QUIC stream sender", move || {
                quic::send_stream(addr, q, creds, start, end, receive_end, tstop)
            })?,
        },
    })
}

/// Starts every thread of a trial: sinks, measured streams, floor probe, cross traffic.
fn start_trial(
    checked: &Checked,
    net: &Dumbbell,
    variants: &[usize],
    start: Instant,
    end: Instant,
    stop: &Stop,
) -> Result<TrialThreads, LabError> {
    let s = &checked.scenario;
    // Sinks on every host: receivers take forward cross traffic, senders reverse.
    let mut sinks = Sinks::default();
    let forward_targets = sinks.start(
        net.receivers(),
        !checked.forward_plan.flows.is_empty(),
        stop,
    )?;
    let reverse_targets =
        sinks.start(net.senders(), !checked.reverse_plan.flows.is_empty(), stop)?;

    let rx_host = net.receiver(s.application.receiver);
    let app = &s.application.video;
    let wants_video = variants
        .iter()
        .any(|&i| s.application_of(&s.variants[i]) == ApplicationKind::LayeredVideo);
    let clip = wants_video
        .then(|| app.video(s.run.duration_s))
        .transpose()
        .map_err(|e| LabError::io("building the video", e))?;
    let receive_end = end + GRACE;
    let mut measured = vec![];
    let tls_files = variants
        .iter()
        .any(|&i| s.variants[i].tls)
        .then(|| crate::tls::TlsFiles::generate(rx_host.addr().into()))
        .transpose()?;
    for &i in variants {
        let v = &s.variants[i];
        let mut cfg = ChannelConfig {
            congestion: Some(
                v.congestion
                    .clone()
                    .unwrap_or_else(|| s.topology.hosts.congestion.clone()),
            ),
            ..ChannelConfig::default()
        };
        cfg.transport.controller = v.controller;
        cfg.transport.failover = v.failover;
        cfg.transport.importance_reserve = v.importance_reserve;
        cfg.transport.duplicate = v.duplicate;
        cfg.sndbuf = v.sndbuf;
        if s.application_of(v) == ApplicationKind::Conference {
            cfg.transport.fairness = s.application.conference.fairness;
        }
        let addr = SocketAddr::from((rx_host.addr(), STREAM_PORT + i as u16));
        let one_segment = v.one_segment_messages;
        let tx_host = net.sender(v.sender);
        let (mut rcfg, rstop, tstop) = (cfg.clone(), stop.clone(), stop.clone());
        if let (true, Some(files)) = (v.tls, &tls_files) {
            cfg.tls = Some(files.client());
            rcfg.tls = Some(files.server());
        }
        if let Some(q) = &v.quic {
            measured.push((
                i,
                start_quic(s, v, q, addr, tx_host, rx_host, start, end, stop)?,
            ));
            continue;
        }
        let hosts = (tx_host, rx_host);
        if let Some(m) = ladder_flow::start(s, v, i, &cfg, addr, hosts, start, end, stop)? {
            measured.push((i, m));
            continue;
        }
        if let Some(m) = tfrc_flow::start(v, addr, hosts, start, end, stop)? {
            measured.push((i, m));
            continue;
        }
        measured.push((
            i,
            match s.application_of(v) {
                ApplicationKind::LatencyStream => Measured::Stream {
                    rx: Task::spawn(rx_host, "stream receiver", move || {
                        stream::receive(addr, rcfg, start, receive_end, rstop)
                    })?,
                    tx: Task::spawn(tx_host, "stream sender", move || {
                        stream::send(addr, cfg, one_segment, start, end, receive_end, tstop)
                    })?,
                },
                ApplicationKind::LayeredVideo => {
                    let clip = clip
                        .clone()
                        .ok_or_else(|| LabError::io("building the video", "no clip"))?;
                    let tolerance = Duration::from_secs_f64(app.tolerance_ms / 1e3);
                    let frames = app.window_frames;
                    Measured::Video {
                        rx: Task::spawn(rx_host, "video receiver", move || {
                            video::receive(addr, rcfg, frames, tolerance, start, receive_end, rstop)
                        })?,
                        tx: Task::spawn(tx_host, "video sender", move || {
                            video::send(addr, cfg, clip, frames, start, receive_end, tstop)
                        })?,
                    }
                }
                ApplicationKind::BitrateLadder => {
                    return Err(LabError::io(
                        "starting the bit-rate ladder",
                        "ladder_flow::start did not take it (a bug)",
                    ))
                }
                ApplicationKind::Conference => {
                    let videos = s.conference_videos(v);
                    let frames = videos[0].frames_in(s.run.duration_s);
                    let rvideos = videos.clone();
                    Measured::Conference {
                        rx: Task::spawn(rx_host, "conference receiver", move || {
                            conference::receive(
                                addr,
                                rcfg,
                                rvideos,
                                frames,
                                start,
                                receive_end,
                                rstop,
                            )
                        })?,
                        tx: Task::spawn(tx_host, "conference sender", move || {
                            conference::send(addr, cfg, videos, start, end, receive_end, tstop)
                        })?,
                    }
                }
            },
        ));
    }
    let floor_addr = SocketAddr::from((rx_host.addr(), FLOOR_PORT));
    let fstop = stop.clone();
    let floor_rx = Task::spawn(rx_host, "floor-probe sink", move || {
        floor::receive(floor_addr, start, receive_end, fstop)
    })?;
    let fstop = stop.clone();
    let floor_tx = Task::spawn(net.sender(0), "floor-probe sender", move || {
        floor::send(floor_addr, start, end, fstop)
    })?;

    let schedule = |host: &lowtide_netem::Host, plan: &Plan, targets: Vec<Target>| {
        let plan = plan.clone();
        let flag = stop.flag().clone();
        Task::spawn(host, "cross traffic", move || {
            std::thread::sleep(start.saturating_duration_since(Instant::now()));
            run_schedule(&plan, &targets, flag).map_err(traffic_err)
        })
    };
    let mut cross = vec![];
    if !checked.forward_plan.flows.is_empty() {
        cross.push(schedule(
            net.sender(0),
            &checked.forward_plan,
            forward_targets,
        )?);
    }
    let reverse_host = s.reverse_traffic.host.unwrap_or(s.topology.receivers - 1);
    if !checked.reverse_plan.flows.is_empty() {
        cross.push(schedule(
            net.receiver(reverse_host),
            &checked.reverse_plan,
            reverse_targets,
        )?);
    }
    Ok(TrialThreads {
        sinks,
        measured,
        floor_tx,
        floor_rx,
        cross,
        clip,
        _tls_files: tls_files,
    })
}

/// ECN is a host setting (`net.ipv4.tcp_ecn`): a variant that differs from the topology's
/// default sets its sender host, and receivers then accept ECN when asked (`2`).
fn set_ecn(s: &Scenario, net: &Dumbbell, variants: &[usize]) -> Result<(), LabError> {
    let mut any = false;
    for &i in variants {
        let v = &s.variants[i];
        let ecn = s.ecn_of(v);
        any |= ecn;
        if ecn != s.topology.hosts.ecn {
            net.sender(v.sender)
                .sysctl("net.ipv4.tcp_ecn", if ecn { "1" } else { "0" })?;
        }
    }
    if any && !s.topology.hosts.ecn {
        for r in net.receivers() {
            r.sysctl("net.ipv4.tcp_ecn", "2")?;
        }
    }
    Ok(())
}

/// A variant's `sender_sysctls` on its sender host (the scenario check keeps them off hosts
/// that send cross traffic, and off hosts shared side by side with other values).
fn set_sender_sysctls(s: &Scenario, net: &Dumbbell, variants: &[usize]) -> Result<(), LabError> {
    for &i in variants {
        let v = &s.variants[i];
        for (key, value) in &v.sender_sysctls {
            net.sender(v.sender).sysctl(key, value)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_reach_the_scenario_that_runs() {
        let text = include_str!("../../../scenarios/fig3-forward.toml");
        let checked = Scenario::from_toml(text).unwrap();
        let opts = LabOptions {
            quick: true,
            runs: Some(3),
            overrides: Overrides {
                queue_bdp: Some(0.5),
                congestion: Some("reno".into()),
                window_frames: None,
                threshold_ms: None,
            },
            ..LabOptions::default()
        };
        let s = effective(&checked, &opts).unwrap().scenario;
        assert_eq!(s.run.duration_s, 30.0);
        assert_eq!(s.run.runs, 3);
        assert_eq!(s.topology.forward.queue, QueueLimit::Bdp(0.5));
        assert_eq!(s.topology.hosts.congestion, "reno");
        assert!(describe_network(&s.topology).contains("queue of 0.5 BDP"));
    }
}
