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

use crate::render::{self, MESSAGES, SCENARIO, SUMMARY, WINDOWS};
use crate::results::{self, LabSummary, TrialNetwork, TrialRecord, VariantInfo, VideoInfo, Window};
use crate::scenario::{ApplicationKind, Checked, Mode, Overrides, Scenario, STREAM_PORT};
use crate::stream::{self, Sample};
use crate::{floor, video, LabError};

/// Ports of the cross-traffic sinks on every host, and of the floor probe.
const TCP_SINK_PORT: u16 = 5001;
const UDP_SINK_PORT: u16 = 5002;
const FLOOR_PORT: u16 = 6100;
/// Streams start this long after the threads are spawned, so every listener is up.
const LEAD_IN: Duration = Duration::from_millis(300);
/// Receivers keep reading this long after the senders stop.
const GRACE: Duration = Duration::from_secs(1);

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
}

/// A finished run.
#[derive(Debug)]
pub struct LabRun {
    pub summary: LabSummary,
    pub dir: PathBuf,
}

/// Runs every trial of a checked scenario and writes the run folder.
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
    let mut records = vec![];
    let mut networks = vec![];
    let total = trials.len();
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
        let (mut record, network) = run_trial(&checked, &variants, seed, &label, &mut progress)?;
        record.mode = Some(mode);
        record.run = run;
        records.push(record);
        networks.push(TrialNetwork {
            mode: Some(mode),
            run,
            variants: names,
            ..network
        });
    }
    progress("writing the report");
    let summary = summarize(&checked, opts, &records, networks);
    write_run_folder(&opts.out_dir, &opts.scenario_text, &summary, &records)?;
    Ok(LabRun {
        summary,
        dir: opts.out_dir.clone(),
    })
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

/// Writes the raw data, the summary and the report into `dir`.
pub fn write_run_folder(
    dir: &Path,
    scenario_text: &str,
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
    write(MESSAGES, &results::to_csv(records))?;
    if records.iter().any(|r| !r.windows.is_empty()) {
        write(WINDOWS, &results::windows_to_csv(records))?;
    }
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
        let ours = [render::REPORT, SUMMARY, MESSAGES, WINDOWS, SCENARIO].contains(&name.as_str())
            || (["latency-", "cdf-", "throughput-", "windows-"]
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

/// `lowtide lab report DIR`: re-renders `report.html` from `summary.json` and the CSV.
pub fn rerender(dir: &Path) -> Result<PathBuf, LabError> {
    let summary = results::read_json(&dir.join(SUMMARY))?;
    let csv_path = dir.join(MESSAGES);
    let csv = std::fs::read_to_string(&csv_path)
        .map_err(|e| LabError::io(format!("reading {}", csv_path.display()), e))?;
    let mut records = results::from_csv(&csv)?;
    let windows_path = dir.join(WINDOWS);
    if windows_path.exists() {
        let text = std::fs::read_to_string(&windows_path)
            .map_err(|e| LabError::io(format!("reading {}", windows_path.display()), e))?;
        results::windows_from_csv(&text, &mut records)?;
    }
    render::render(dir, &summary, &records)?;
    Ok(dir.join(render::REPORT))
}

fn summarize(
    checked: &Checked,
    opts: &LabOptions,
    records: &[TrialRecord],
    trials: Vec<TrialNetwork>,
) -> LabSummary {
    let s = &checked.scenario;
    let window = Window {
        from_s: s.run.measure_from_s,
        to_s: s.measure_to_s(),
    };
    let infos: Vec<VariantInfo> = s
        .variants
        .iter()
        .enumerate()
        .map(|(i, v)| VariantInfo {
            name: v.name.clone(),
            controller: match v.sndbuf {
                Some(b) => format!("{}, SO_SNDBUF {b}", controller_name(&v.controller)),
                None => controller_name(&v.controller),
            },
            congestion: v
                .congestion
                .clone()
                .unwrap_or_else(|| s.topology.hosts.congestion.clone()),
            ecn: s.ecn_of(v),
            paper: v.paper.clone(),
            baseline: checked.baseline_of(i).map(|b| s.variants[b].name.clone()),
            video: (s.application_of(v) == ApplicationKind::LayeredVideo).then_some(VideoInfo {
                window_frames: s.application.video.window_frames,
                tolerance_ms: s.application.video.tolerance_ms,
            }),
        })
        .collect();
    let baseline = checked.baseline.map(|i| s.variants[i].name.clone());
    let variants = results::summarize_variants(records, &infos, window);
    let floor = results::summarize_floor(records, window);
    let goals = results::check_goals(&s.goals, &variants, &floor);
    LabSummary {
        scenario: s.name.clone(),
        description: s.description.clone(),
        paper: s.paper.clone(),
        quick: opts.quick,
        duration_s: s.run.duration_s,
        window,
        runs: s.run.runs,
        baseline,
        network: describe_network(&s.topology),
        floor,
        variants,
        goals,
        trials,
        provenance: provenance(s, opts),
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

/// Command line, revision, kernel, congestion control, seed.
fn provenance(s: &Scenario, opts: &LabOptions) -> Vec<(String, String)> {
    let git = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
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

type Joined<T> = JoinHandle<Result<T, LabError>>;

/// The cross-traffic sinks of one trial: a TCP and a UDP sink on each target host.
#[derive(Default)]
struct Sinks {
    tcp: Vec<Joined<TcpSinkReport>>,
    udp: Vec<Joined<UdpSinkReport>>,
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
                self.tcp.push(h.spawn("tcp-sink", move || {
                    TcpSink::bind(t.tcp)
                        .map_err(traffic_err)?
                        .run(&s)
                        .map_err(traffic_err)
                })?);
                let s = stop.clone();
                self.udp.push(h.spawn("udp-sink", move || {
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

    /// Waits for every sink; the payload bytes they received.
    fn join(self) -> Result<u64, LabError> {
        let mut bytes = 0;
        for h in self.tcp {
            bytes += join(h, "a TCP sink")??.bytes_received;
        }
        for h in self.udp {
            bytes += join(h, "a UDP sink")??.bytes;
        }
        Ok(bytes)
    }
}

/// The threads of one measured variant.
enum Measured {
    Stream {
        tx: Joined<stream::SendCost>,
        rx: Joined<stream::Received>,
    },
    Video {
        tx: Joined<video::VideoSent>,
        rx: Joined<lowtide_media::playout::Playout>,
    },
}

/// Sets the trial's stop flag when the trial ends, however it ends.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn join<T>(h: JoinHandle<T>, what: &str) -> Result<T, LabError> {
    h.join()
        .map_err(|_| LabError::io(what.to_string(), "the thread panicked"))
}

fn traffic_err(e: impl std::fmt::Display) -> LabError {
    LabError::Traffic(e.to_string())
}

/// One emulated network: cross traffic, floor probe and the streams of `variants`.
fn run_trial(
    checked: &Checked,
    variants: &[usize],
    seed: u64,
    label: &str,
    progress: &mut impl FnMut(&str),
) -> Result<(TrialRecord, TrialNetwork), LabError> {
    let s = &checked.scenario;
    progress(&format!("{label}: building the emulated network"));
    let net = Dumbbell::new(
        s.topology.clone(),
        RunOptions {
            pcap_dir: None,
            seed,
        },
    )?;
    set_ecn(s, &net, variants)?;

    let duration = Duration::from_secs_f64(s.run.duration_s);
    let start = Instant::now() + LEAD_IN;
    let end = start + duration;
    let stop_flag = Arc::new(AtomicBool::new(false));
    // Whatever ends this trial early (an error below) stops its cross traffic and sinks too.
    let _stop_on_exit = StopOnDrop(stop_flag.clone());
    let sink_stop = Stop::new(stop_flag.clone(), end + GRACE * 2);

    // Sinks on every host: receivers take forward cross traffic, senders reverse.
    let mut sinks = Sinks::default();
    let forward_targets = sinks.start(
        net.receivers(),
        !checked.forward_plan.flows.is_empty(),
        &sink_stop,
    )?;
    let reverse_targets = sinks.start(
        net.senders(),
        !checked.reverse_plan.flows.is_empty(),
        &sink_stop,
    )?;

    let rx_host = net.receiver(s.application.receiver);
    let app = &s.application.video;
    let wants_video = variants
        .iter()
        .any(|&i| s.application_of(&s.variants[i]) == ApplicationKind::LayeredVideo);
    let clip = wants_video
        .then(|| app.video(s.run.duration_s))
        .transpose()
        .map_err(|e| LabError::io("building the video", e))?;
    let mut measured = vec![];
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
        cfg.sndbuf = v.sndbuf;
        let addr = SocketAddr::from((rx_host.addr(), STREAM_PORT + i as u16));
        let tx_host = net.sender(v.sender);
        measured.push(match s.application_of(v) {
            ApplicationKind::LatencyStream => {
                let rcfg = cfg.clone();
                Measured::Stream {
                    rx: rx_host.spawn("stream-recv", move || {
                        stream::receive(addr, rcfg, start, end + GRACE)
                    })?,
                    tx: tx_host.spawn("stream-send", move || {
                        std::thread::sleep(start.saturating_duration_since(Instant::now()));
                        stream::send(addr, cfg, end)
                    })?,
                }
            }
            ApplicationKind::LayeredVideo => {
                let clip = clip
                    .clone()
                    .expect("built above when a variant streams video");
                let tolerance = Duration::from_secs_f64(app.tolerance_ms / 1e3);
                let rcfg = cfg.clone();
                let frames = app.window_frames;
                Measured::Video {
                    rx: rx_host.spawn("video-recv", move || {
                        video::receive(addr, rcfg, frames, tolerance, start, end + GRACE)
                    })?,
                    tx: tx_host.spawn("video-send", move || {
                        video::send(addr, cfg, clip, frames, start)
                    })?,
                }
            }
        });
    }
    let floor_addr = SocketAddr::from((rx_host.addr(), FLOOR_PORT));
    let floor_rx = rx_host.spawn("floor-recv", move || {
        floor::receive(floor_addr, start, end + GRACE)
    })?;
    let floor_tx = net.sender(0).spawn("floor-send", move || {
        std::thread::sleep(start.saturating_duration_since(Instant::now()));
        floor::send(floor_addr, end)
    })?;

    let schedule = |host: &lowtide_netem::Host, plan: &Plan, targets: Vec<Target>| {
        let plan = plan.clone();
        let flag = stop_flag.clone();
        host.spawn("cross-traffic", move || {
            std::thread::sleep(start.saturating_duration_since(Instant::now()));
            run_schedule(&plan, &targets, flag).map_err(traffic_err)
        })
    };
    let forward = (!checked.forward_plan.flows.is_empty())
        .then(|| schedule(net.sender(0), &checked.forward_plan, forward_targets))
        .transpose()?;
    let reverse_host = s.reverse_traffic.host.unwrap_or(s.topology.receivers - 1);
    let reverse = (!checked.reverse_plan.flows.is_empty())
        .then(|| {
            schedule(
                net.receiver(reverse_host),
                &checked.reverse_plan,
                reverse_targets,
            )
        })
        .transpose()?;

    while Instant::now() < end {
        std::thread::sleep(
            Duration::from_secs(1).min(end.saturating_duration_since(Instant::now())),
        );
        let t = Instant::now()
            .saturating_duration_since(start)
            .as_secs_f64()
            .min(s.run.duration_s);
        progress(&format!("{label}: {t:>4.0} / {:.0} s", s.run.duration_s));
    }

    let mut streams = vec![];
    let mut costs = vec![];
    let mut windows = vec![];
    for (&i, m) in variants.iter().zip(measured) {
        let name = s.variants[i].name.clone();
        match m {
            Measured::Stream { tx, rx } => {
                let cost = join(tx, "a stream sender")??;
                let received = join(rx, "a stream receiver")??;
                tracing::debug!(variant = %name, ?cost, received = received.samples.len(), "stream done");
                streams.push((name.clone(), received.samples));
                costs.push((name, cost));
            }
            Measured::Video { tx, rx } => {
                let sent = join(tx, "a video sender")??;
                let seen = join(rx, "a video receiver")??;
                let clip = clip
                    .as_ref()
                    .expect("built above when a variant streams video");
                let w = video::windows(clip, app.window_frames, &sent.ledger, &seen);
                streams.push((name.clone(), w.iter().filter_map(|x| x.sample()).collect()));
                windows.push((name.clone(), w));
                costs.push((name, sent.cost));
            }
        }
    }
    join(floor_tx, "the floor probe")??;
    let mut floor_samples: Vec<Sample> = join(floor_rx, "the floor sink")??;
    floor_samples.sort_by(|a, b| a.sent_s.total_cmp(&b.sent_s));
    for h in [forward, reverse].into_iter().flatten() {
        join(h, "the cross traffic")??;
    }
    stop_flag.store(true, Ordering::Relaxed);
    let cross_bytes = sinks.join()?;
    let fwd = net.forward().report();
    let rev = net.reverse().report();
    let network = TrialNetwork {
        forward_drops: fwd.total_drops(),
        forward_marks: fwd.total_marks(),
        reverse_drops: rev.total_drops(),
        forward_max_queue_packets: fwd.max_queue_packets,
        forward_sojourn_p99_ms: fwd.sojourn_ms.p99,
        cross_traffic_bps: cross_bytes as f64 * 8.0 / s.run.duration_s,
        ..TrialNetwork::default()
    };
    drop(net);
    Ok((
        TrialRecord {
            streams,
            floor: floor_samples,
            costs,
            windows,
            ..TrialRecord::default()
        },
        network,
    ))
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
