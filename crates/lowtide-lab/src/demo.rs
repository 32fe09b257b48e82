//! `lowtide demo`, the main job: one emulated bottleneck (10 Mbit/s, 50 ms RTT, a drop-tail
//! queue of one BDP) loaded with cross traffic, and the same latency stream through plain TCP
//! and through lowtide's MinBuf(1,3) at once, side by side, so both see the very same queue.
//! A UDP probe every 10 ms measures the network floor at each moment.
//!
//! The figure it echoes is Goel, Krasic, Walpole 2008, Fig. 3 (`shared/papers/000_…`, Section
//! 4): about 30% of TCP's packets over 160 ms, under 2% with MIN_BUF(1,3), at 95% of TCP's
//! throughput; their set-up was heavier (30 Mbit/s, 100 ms RTT, 15 elephants and 80 mice).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lowtide::{ChannelConfig, ControllerConfig};
use lowtide_netem::{Dumbbell, RunOptions, TopologyConfig};
use lowtide_traffic::runner::{run_schedule, Target};
use lowtide_traffic::schedule::Schedule;
use lowtide_traffic::sink::TcpSink;
use lowtide_traffic::Stop;
use serde::Serialize;

use crate::report::{self, Series};
use crate::stream::{self, Sample};
use crate::summary::LatencySummary;
use crate::{floor, LabError};

/// What the demo can be told.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Length of the run, seconds (cross traffic starts at 5 s, statistics at 10 s).
    pub duration_s: f64,
    /// Where the report goes.
    pub out_dir: PathBuf,
    /// Congestion control of every flow.
    pub congestion: String,
}

impl Default for DemoOptions {
    fn default() -> Self {
        Self {
            duration_s: 45.0,
            out_dir: PathBuf::from("out/demo"),
            congestion: "cubic".into(),
        }
    }
}

/// Cross traffic: elephants for the whole run, mice that come and go.
const CROSS_TRAFFIC: &str = r#"
[[flow]]
kind = "elephant"
count = 3
start_s = 5.0
stop_s = STOP
congestion_control = "CC"

[[flow]]
kind = "mice"
count = 8
bytes_kb = 20
gap_ms = 100
start_s = 5.0
stop_s = STOP
congestion_control = "CC"
"#;

/// Statistics leave out the start (slow start, the cross traffic ramping up).
const MEASURE_FROM_S: f64 = 10.0;

/// One measured variant.
#[derive(Debug, Clone, Serialize)]
pub struct VariantResult {
    pub name: String,
    pub controller: String,
    pub latency_ms: LatencySummary,
    /// Latency minus the network floor at the same moment: what the sender side added.
    pub sender_side_ms: LatencySummary,
    pub goodput_bps: f64,
    /// Goodput relative to plain TCP in the same run.
    pub goodput_vs_baseline: f64,
    pub messages: usize,
}

/// Everything the demo measured.
#[derive(Debug, Clone, Serialize)]
pub struct DemoSummary {
    pub variants: Vec<VariantResult>,
    pub floor_latency_ms: LatencySummary,
    pub cross_traffic_goodput_bps: f64,
    pub bottleneck_drops: u64,
    pub paper: &'static str,
    pub report: PathBuf,
}

struct Variant {
    name: &'static str,
    controller: ControllerConfig,
    port: u16,
}

fn variants() -> Vec<Variant> {
    vec![
        Variant {
            name: "plain TCP",
            controller: ControllerConfig::Unlimited,
            port: 6001,
        },
        Variant {
            name: "lowtide MinBuf(1,3)",
            controller: ControllerConfig::MinBuf { a: 1, b: 3 },
            port: 6002,
        },
    ]
}

/// Runs the demo; `progress` hears about each second of the run.
pub fn run(opts: &DemoOptions, mut progress: impl FnMut(&str)) -> Result<DemoSummary, LabError> {
    let mut topology = TopologyConfig::symmetric(10.0, 25.0);
    topology.hosts.congestion = opts.congestion.clone();
    progress("building the emulated network (10 Mbit/s, 50 ms RTT, drop-tail of 1 BDP)");
    let net = Dumbbell::new(
        topology.clone(),
        RunOptions {
            pcap_dir: None,
            seed: 1,
        },
    )?;
    let (sender, receiver) = (net.sender(0), net.receiver(0));
    let far = receiver.addr();

    let start = Instant::now() + Duration::from_millis(300);
    let end = start + Duration::from_secs_f64(opts.duration_s);
    let stop_flag = Arc::new(AtomicBool::new(false));
    let sink_stop = Stop::new(stop_flag.clone(), end + Duration::from_secs(2));
    let sink_addr = SocketAddr::from((far, 5001));
    let sink_thread = receiver.spawn("cross-sink", move || {
        TcpSink::bind(sink_addr)?.run(&sink_stop)
    })?;

    let mut receivers = vec![];
    let mut senders = vec![];
    for v in variants() {
        let cfg = channel_config(&opts.congestion, v.controller);
        let addr = SocketAddr::from((far, v.port));
        let rcfg = cfg.clone();
        receivers.push(receiver.spawn("stream-recv", move || {
            stream::receive(addr, rcfg, start, end + Duration::from_secs(1))
        })?);
        senders.push(sender.spawn("stream-send", move || {
            std::thread::sleep(start.saturating_duration_since(Instant::now()));
            stream::send(addr, cfg, end)
        })?);
    }
    let floor_addr = SocketAddr::from((far, 6100));
    let floor_rx = receiver.spawn("floor-recv", move || {
        floor::receive(floor_addr, start, end + Duration::from_secs(1))
    })?;
    let floor_tx = sender.spawn("floor-send", move || {
        std::thread::sleep(start.saturating_duration_since(Instant::now()));
        floor::send(floor_addr, end)
    })?;

    let plan_text = CROSS_TRAFFIC
        .replace("STOP", &format!("{:.1}", opts.duration_s))
        .replace("CC", &opts.congestion);
    let plan =
        Schedule::plan_from_toml_str(&plan_text).map_err(|e| LabError::Traffic(e.to_string()))?;
    let targets = [Target {
        tcp: sink_addr,
        udp: SocketAddr::from((far, 5002)),
    }];
    let flag = stop_flag.clone();
    let traffic = sender.spawn("cross-traffic", move || {
        std::thread::sleep(start.saturating_duration_since(Instant::now()));
        run_schedule(&plan, &targets, flag)
    })?;

    while Instant::now() < end {
        std::thread::sleep(
            Duration::from_secs(1).min(end.saturating_duration_since(Instant::now())),
        );
        let t = Instant::now()
            .saturating_duration_since(start)
            .as_secs_f64()
            .min(opts.duration_s);
        progress(&format!("streaming: {t:>4.0} / {:.0} s", opts.duration_s));
    }

    let joined = |what: &str| LabError::io(what.to_string(), "the thread panicked");
    let mut sent = vec![];
    for s in senders {
        sent.push(s.join().map_err(|_| joined("a stream sender"))??);
    }
    let mut received = vec![];
    for r in receivers {
        received.push(r.join().map_err(|_| joined("a stream receiver"))??);
    }
    floor_tx.join().map_err(|_| joined("the floor probe"))??;
    let mut floor_samples = floor_rx.join().map_err(|_| joined("the floor sink"))??;
    floor_samples.sort_by(|a, b| a.sent_s.total_cmp(&b.sent_s));
    let traffic = traffic
        .join()
        .map_err(|_| joined("the cross traffic"))?
        .map_err(|e| LabError::Traffic(e.to_string()))?;
    stop_flag.store(true, std::sync::atomic::Ordering::Relaxed);
    let sink_report = sink_thread
        .join()
        .map_err(|_| joined("the cross-traffic sink"))?
        .map_err(|e| LabError::Traffic(e.to_string()))?;
    tracing::debug!(?sent, "messages sent per variant");

    let from = MEASURE_FROM_S.min(opts.duration_s / 2.0);
    let to = opts.duration_s;
    let baseline_goodput = received[0].goodput_bps(from, to).max(1.0);
    let results: Vec<VariantResult> = variants()
        .iter()
        .zip(&received)
        .map(|(v, r)| {
            let lat = r.latencies(from, to);
            let sender_side: Vec<f64> = r
                .samples
                .iter()
                .filter(|s| s.sent_s >= from && s.sent_s < to)
                .filter_map(|s| {
                    floor::at(&floor_samples, s.sent_s).map(|f| (s.latency_ms - f).max(0.0))
                })
                .collect();
            let goodput = r.goodput_bps(from, to);
            VariantResult {
                name: v.name.to_string(),
                controller: format!("{:?}", v.controller),
                latency_ms: LatencySummary::of(&lat),
                sender_side_ms: LatencySummary::of(&sender_side),
                goodput_bps: goodput,
                goodput_vs_baseline: goodput / baseline_goodput,
                messages: lat.len(),
            }
        })
        .collect();
    let floor_lat: Vec<f64> = floor_samples
        .iter()
        .filter(|s| s.sent_s >= from && s.sent_s < to)
        .map(|s| s.latency_ms)
        .collect();
    let cross_bytes: u64 = sink_report.bytes_received;
    let summary = DemoSummary {
        variants: results,
        floor_latency_ms: LatencySummary::of(&floor_lat),
        cross_traffic_goodput_bps: cross_bytes as f64 * 8.0 / opts.duration_s,
        bottleneck_drops: net.forward().report().total_drops(),
        paper: "Goel et al. 2008 Fig. 3 (30 Mbit/s, 100 ms RTT, 15 elephants + 80 mice): \
                ~30% of TCP's packets over 160 ms, < 2% with MIN_BUF(1,3), at 95% of TCP's throughput",
        report: opts.out_dir.join("report.html"),
    };
    tracing::debug!(flows = traffic.flows.len(), "cross traffic done");
    write_report(opts, &topology, &summary, &received, &floor_samples)?;
    Ok(summary)
}

fn channel_config(congestion: &str, controller: ControllerConfig) -> ChannelConfig {
    let mut cfg = ChannelConfig {
        congestion: Some(congestion.to_string()),
        ..ChannelConfig::default()
    };
    cfg.transport.controller = controller;
    cfg
}

/// The printed table.
pub fn table(s: &DemoSummary) -> String {
    let mut out = format!(
        "{:<22} {:>9} {:>9} {:>12} {:>14} {:>10}\n",
        "variant", "p50 ms", "p99 ms", "over 160 ms", "goodput Mbit/s", "vs TCP"
    );
    for v in &s.variants {
        out.push_str(&format!(
            "{:<22} {:>9.1} {:>9.1} {:>11.1}% {:>14.2} {:>9.0}%\n",
            v.name,
            v.latency_ms.p50,
            v.latency_ms.p99,
            v.latency_ms.share_over(160.0) * 100.0,
            v.goodput_bps / 1e6,
            v.goodput_vs_baseline * 100.0
        ));
    }
    let f = &s.floor_latency_ms;
    out.push_str(&format!(
        "{:<22} {:>9.1} {:>9.1} {:>11.1}% {:>14} {:>10}\n",
        "network floor (UDP)",
        f.p50,
        f.p99,
        f.share_over(160.0) * 100.0,
        "-",
        "-"
    ));
    out.push_str(&format!("paper: {}\n", s.paper));
    out
}

fn write_report(
    opts: &DemoOptions,
    topology: &TopologyConfig,
    s: &DemoSummary,
    received: &[stream::Received],
    floor_samples: &[Sample],
) -> Result<(), LabError> {
    let dir = &opts.out_dir;
    std::fs::create_dir_all(dir)
        .map_err(|e| LabError::io(format!("creating {}", dir.display()), e))?;
    let names: Vec<&str> = s.variants.iter().map(|v| v.name.as_str()).collect();
    let mut series: Vec<Series> = names
        .iter()
        .zip(received)
        .map(|(n, r)| Series {
            name: n,
            samples: &r.samples,
        })
        .collect();
    series.push(Series {
        name: "network floor (UDP)",
        samples: floor_samples,
    });
    report::latency_over_time(
        &dir.join("latency.svg"),
        "Latency of every message against its send time",
        &series,
        opts.duration_s,
    )?;
    let window: Vec<Vec<Sample>> = series
        .iter()
        .map(|x| {
            x.samples
                .iter()
                .copied()
                .filter(|p| p.sent_s >= MEASURE_FROM_S.min(opts.duration_s / 2.0))
                .collect()
        })
        .collect();
    let cdf: Vec<Series> = series
        .iter()
        .zip(&window)
        .map(|(x, w)| Series {
            name: x.name,
            samples: w,
        })
        .collect();
    report::latency_cdf(
        &dir.join("latency-cdf.svg"),
        "Latency distribution under load",
        &cdf,
    )?;
    write_json(&dir.join("summary.json"), s)?;
    write_csv(&dir.join("messages.csv"), &series)?;

    let rows: Vec<Vec<String>> = s
        .variants
        .iter()
        .map(|v| {
            vec![
                v.name.clone(),
                format!("{:.1}", v.latency_ms.p50),
                format!("{:.1}", v.latency_ms.p99),
                format!("{:.1}%", v.latency_ms.share_over(160.0) * 100.0),
                format!("{:.1}", v.sender_side_ms.p99),
                format!("{:.2}", v.goodput_bps / 1e6),
                format!("{:.0}%", v.goodput_vs_baseline * 100.0),
            ]
        })
        .collect();
    let table = report::html_table(
        &[
            "variant",
            "p50 ms",
            "p99 ms",
            "over 160 ms",
            "sender-side p99 ms",
            "goodput Mbit/s",
            "vs plain TCP",
        ],
        &rows,
    );
    let sections = vec![
        format!(
            "<p>One emulated bottleneck (10 Mbit/s, 25 ms each way, drop-tail of one BDP) with 3 {cc} \
             elephants and 8 mice (20 KiB, repeating) from 5 s; the two streams run at the same time \
             through the same queue; each writes a 1448-byte message whenever its transport can take one. \
             Statistics from {from:.0} s to {to:.0} s. The network floor is a UDP probe every 10 ms.</p>",
            cc = report::escape(&opts.congestion),
            from = MEASURE_FROM_S.min(opts.duration_s / 2.0),
            to = opts.duration_s
        ),
        table,
        format!("<p>Paper: {}</p>", report::escape(s.paper)),
        "<h2>Latency over time</h2><img src=\"latency.svg\" alt=\"latency over time\">".into(),
        "<h2>Latency distribution</h2><img src=\"latency-cdf.svg\" alt=\"latency CDF\">".into(),
        "<p>Raw data: <a href=\"messages.csv\">messages.csv</a>, <a href=\"summary.json\">summary.json</a>.</p>".into(),
    ];
    let html = report::page(
        "lowtide demo: plain TCP against MinBuf(1,3)",
        &provenance(opts, topology),
        &sections,
    );
    std::fs::write(&s.report, html)
        .map_err(|e| LabError::io(format!("writing {}", s.report.display()), e))
}

/// Command line, revision, kernel, congestion control, topology: enough to run it again.
pub fn provenance(opts: &DemoOptions, topology: &TopologyConfig) -> Vec<(String, String)> {
    let git = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
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
                .to_string(),
        ),
        ("congestion control".into(), opts.congestion.clone()),
        ("seed".into(), "1".into()),
        (
            "topology".into(),
            toml::to_string(topology).unwrap_or_default(),
        ),
    ]
}

fn write_json(path: &Path, s: &DemoSummary) -> Result<(), LabError> {
    let text =
        serde_json::to_string_pretty(s).map_err(|e| LabError::io("encoding summary.json", e))?;
    std::fs::write(path, text).map_err(|e| LabError::io(format!("writing {}", path.display()), e))
}

fn write_csv(path: &Path, series: &[Series]) -> Result<(), LabError> {
    let mut out = String::from("series,sent_s,latency_ms\n");
    for s in series {
        for p in s.samples {
            out.push_str(&format!("{},{:.6},{:.3}\n", s.name, p.sent_s, p.latency_ms));
        }
    }
    std::fs::write(path, out).map_err(|e| LabError::io(format!("writing {}", path.display()), e))
}
