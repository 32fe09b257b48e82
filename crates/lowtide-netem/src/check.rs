//! `lowtide netem check`: builds dumbbells, measures them with real Linux TCP and UDP, and
//! compares every figure with what the configuration promises. A figure outside its bound
//! fails the check, so a broken emulator (timer drift, hidden buffers, offloads that let
//! 64 KB frames through) is caught before any experiment trusts it.
//!
//! Hidden queueing: TCP's own smoothed RTT may never exceed the base RTT plus what the
//! emulator says its queues held (plus a margin for ACK timing); time beyond that sits in a
//! buffer the configuration does not account for (veth, AF_PACKET, channels).

use std::time::Duration;

use serde::Serialize;

use crate::config::{AqmConfig, QueueLimit, TopologyConfig, MTU};
use crate::dumbbell::{Dumbbell, RunOptions};
use crate::error::NetemError;
use crate::probe;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    Fail,
    /// Measured and shown, with no bound of its own.
    Info,
}

/// One line of the check's table.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub check: String,
    pub configured: String,
    pub measured: String,
    pub bound: String,
    pub verdict: Verdict,
}

impl Row {
    fn new(
        check: impl Into<String>,
        configured: impl Into<String>,
        measured: String,
        bound: String,
        ok: Option<bool>,
    ) -> Self {
        Row {
            check: check.into(),
            configured: configured.into(),
            measured,
            bound,
            verdict: match ok {
                Some(true) => Verdict::Pass,
                Some(false) => Verdict::Fail,
                None => Verdict::Info,
            },
        }
    }
}

/// Which checks to run.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// Shorter runs and fewer points (CI); the full run is what notes quote.
    pub quick: bool,
    /// Congestion controls to run the TCP checks with.
    pub congestion: Vec<String>,
}

impl Default for CheckOptions {
    fn default() -> Self {
        Self {
            quick: false,
            congestion: vec!["cubic".into(), "bbr".into()],
        }
    }
}

/// Runs every check, reporting progress through `progress`.
pub fn run(opts: &CheckOptions, mut progress: impl FnMut(&str)) -> Result<Vec<Row>, NetemError> {
    let mut rows = vec![];
    let secs = |full: u64, quick: u64| Duration::from_secs(if opts.quick { quick } else { full });
    let rtts: &[f64] = if opts.quick {
        &[10.0, 100.0]
    } else {
        &[10.0, 50.0, 100.0, 200.0]
    };
    for &rtt in rtts {
        progress(&format!("minimum RTT at {rtt} ms"));
        rows.push(min_rtt(rtt)?);
    }
    for cc in &opts.congestion {
        let rates: &[f64] = if opts.quick {
            &[30.0]
        } else {
            &[10.0, 30.0, 100.0]
        };
        for &rate in rates {
            progress(&format!("{cc} bulk goodput at {rate} Mbit/s"));
            rows.extend(goodput(cc, rate, secs(8, 5), secs(3, 2))?);
        }
        progress(&format!("{cc} through a drop-tail queue of 50 packets"));
        rows.extend(drop_tail_bound(cc, secs(6, 4))?);
        progress(&format!("{cc}: 16 flows at 30 Mbit/s, emulator lateness"));
        rows.push(lateness(cc, 16, secs(6, 4))?);
    }
    progress("cubic with ECN through RED");
    rows.extend(red_ecn(secs(8, 5))?);
    if !opts.quick {
        for cc in &opts.congestion {
            progress(&format!(
                "{cc} latency stream, 30 Mbit/s, 50 ms each way, 125-packet queue"
            ));
            rows.extend(latency_stream(cc, secs(15, 8))?);
        }
    }
    Ok(rows)
}

fn net(cfg: TopologyConfig) -> Result<Dumbbell, NetemError> {
    Dumbbell::new(cfg, RunOptions::default())
}

fn min_rtt(rtt_ms: f64) -> Result<Row, NetemError> {
    let n = net(TopologyConfig::symmetric(100.0, rtt_ms / 2.0))?;
    let p = probe::udp_rtt(&n, 30, Duration::from_millis(20))?;
    // The smallest sample is the path with empty queues.
    let min = p.min;
    let ok = (min - rtt_ms).abs() <= 1.0;
    Ok(Row::new(
        "minimum RTT (UDP echo)",
        format!("{rtt_ms} ms"),
        format!("{min:.2} ms (median {:.2})", p.p50),
        "configured ± 1 ms".into(),
        Some(ok),
    ))
}

/// The hidden-queueing row for a flow: TCP's RTT against the emulator's own queues.
fn hidden_queueing(label: &str, n: &Dumbbell, tcp_srtt_ms: f64) -> Row {
    let base = n.config().base_rtt().as_secs_f64() * 1000.0;
    let fwd = n.forward().report().sojourn_ms.max;
    let rev = n.reverse().report().sojourn_ms.max;
    let allowed = base + fwd + rev + 10.0;
    Row::new(
        format!("{label}: no hidden queueing"),
        format!("base RTT {base:.0} ms"),
        format!("TCP max srtt {tcp_srtt_ms:.1} ms; queues held {fwd:.1} + {rev:.1} ms"),
        format!("≤ base + queues + 10 ms = {allowed:.1} ms"),
        Some(tcp_srtt_ms <= allowed),
    )
}

fn goodput(
    cc: &str,
    rate: f64,
    duration: Duration,
    warmup: Duration,
) -> Result<Vec<Row>, NetemError> {
    let mut cfg = TopologyConfig::symmetric(rate, 20.0);
    cfg.hosts.congestion = cc.into();
    let n = net(cfg)?;
    let r = probe::bulk(&n, cc, 1, duration, warmup)?;
    let ideal = rate * 1e6 * 1448.0 / 1500.0;
    let share = r.goodput_bps / ideal;
    let frame = n.forward().report().largest_frame_bytes;
    Ok(vec![
        Row::new(
            format!("{cc} bulk goodput, 1 flow"),
            format!("{rate} Mbit/s, 40 ms RTT, 1 BDP drop-tail"),
            format!(
                "{:.2} Mbit/s = {:.1}% of rate×1448/1500",
                r.goodput_bps / 1e6,
                share * 100.0
            ),
            "≥ 93%".into(),
            Some(share >= 0.93),
        ),
        Row::new(
            format!("{cc} frames are MTU-sized"),
            format!("MTU {MTU}"),
            format!("largest frame {frame} bytes"),
            format!("≤ {} (no TSO/GSO super-frames)", MTU + 14),
            Some(frame <= (MTU + 14) as u64),
        ),
        hidden_queueing(&format!("{cc} at {rate} Mbit/s"), &n, r.tcp.max_srtt_ms),
    ])
}

fn drop_tail_bound(cc: &str, duration: Duration) -> Result<Vec<Row>, NetemError> {
    let limit = 50usize;
    let mut cfg = TopologyConfig::symmetric(10.0, 20.0);
    cfg.hosts.congestion = cc.into();
    cfg.forward.queue = QueueLimit::Packets(limit);
    let n = net(cfg)?;
    let r = probe::bulk(&n, cc, 2, duration, Duration::from_secs(1))?;
    let f = n.forward().report();
    let packet_ms = MTU as f64 * 8.0 / 10e6 * 1000.0;
    let bound = limit as f64 * packet_ms + 2.0;
    let only_full = f.drops.keys().all(|k| *k == "queue_full");
    let full_when_dropping = f.total_drops() == 0 || f.max_queue_packets as usize + 1 >= limit;
    Ok(vec![
        Row::new(
            format!("{cc} drop-tail queueing delay"),
            format!("{limit} packets at 10 Mbit/s"),
            format!(
                "max sojourn {:.2} ms, p99 {:.2} ms",
                f.sojourn_ms.max, f.sojourn_ms.p99
            ),
            format!("≤ L × packet time + 2 ms = {bound:.1} ms"),
            Some(f.sojourn_ms.max <= bound),
        ),
        Row::new(
            format!("{cc} drop-tail drops only when full"),
            "drop-tail".to_string(),
            format!(
                "{} drops {:?}, queue reached {} packets",
                f.total_drops(),
                f.drops,
                f.max_queue_packets + 1
            ),
            "every drop is queue_full, at a full queue".into(),
            Some(only_full && full_when_dropping),
        ),
        hidden_queueing(&format!("{cc} drop-tail"), &n, r.tcp.max_srtt_ms),
    ])
}

fn lateness(cc: &str, flows: usize, duration: Duration) -> Result<Row, NetemError> {
    let mut cfg = TopologyConfig::symmetric(30.0, 20.0);
    cfg.hosts.congestion = cc.into();
    let n = net(cfg)?;
    let r = probe::bulk(&n, cc, flows, duration, Duration::from_secs(1))?;
    let f = n.forward().report();
    Ok(Row::new(
        format!("{cc} emulator lateness, {flows} flows"),
        "30 Mbit/s, 1 BDP; emulator: 1 worker, SCHED_FIFO, unpinned".to_string(),
        format!(
            "p99 {:.3} ms, p99.9 {:.3} ms, max {:.2} ms over {} packets ({:.1} Mbit/s)",
            f.lateness_ms.p99,
            f.lateness_ms.p999,
            f.lateness_ms.max,
            f.lateness_ms.count,
            r.goodput_bps / 1e6
        ),
        "p99 ≤ 1 ms".into(),
        Some(f.lateness_ms.p99 <= 1.0),
    ))
}

fn red_ecn(duration: Duration) -> Result<Vec<Row>, NetemError> {
    let mut cfg = TopologyConfig::symmetric(10.0, 20.0);
    cfg.hosts.ecn = true;
    cfg.forward.queue = QueueLimit::Packets(100);
    cfg.forward.aqm = AqmConfig::Red {
        min_th: Some(10.0),
        max_th: Some(30.0),
        max_p: 0.1,
        weight: 0.002,
        gentle: true,
        ecn: true,
    };
    let n = net(cfg)?;
    let r = probe::bulk(&n, "cubic", 1, duration, Duration::from_secs(1))?;
    let f = n.forward().report();
    Ok(vec![
        Row::new(
            "RED with ECN hosts: marks, not drops",
            "RED 10/30 packets, max_p 0.1, gentle".to_string(),
            format!(
                "{} marks, {} drops, {} retransmits, {:.2} Mbit/s",
                f.total_marks(),
                f.total_drops(),
                r.tcp.retransmits,
                r.goodput_bps / 1e6
            ),
            "marks > 0, drops = 0, retransmits = 0".into(),
            Some(f.total_marks() > 0 && f.total_drops() == 0 && r.tcp.retransmits == 0),
        ),
        hidden_queueing("cubic RED/ECN", &n, r.tcp.max_srtt_ms),
    ])
}

/// The set-up of the BBR question in the emulator issue: where does a lowat-limited stream's
/// latency go? Shown as a decomposition; the bound is the network's, the rest is TCP's.
fn latency_stream(cc: &str, duration: Duration) -> Result<Vec<Row>, NetemError> {
    let mut cfg = TopologyConfig::symmetric(30.0, 50.0);
    cfg.hosts.congestion = cc.into();
    cfg.forward.queue = QueueLimit::Packets(125);
    let n = net(cfg)?;
    let r = probe::latency_stream(
        &n,
        cc,
        3 * probe::RECORD as u32,
        duration,
        Duration::from_secs(3),
    )?;
    let f = n.forward().report();
    let network_bound = 50.0 + 125.0 * MTU as f64 * 8.0 / 30e6 * 1000.0;
    Ok(vec![
        Row::new(
            format!("{cc} latency stream (NOTSENT_LOWAT 3 MSS)"),
            "30 Mbit/s, 50 ms each way, 125 packets".to_string(),
            format!(
                "one-way p50 {:.1} ms, p99 {:.1} ms; queue p50 {:.1} ms max {:.1} ms; {} drops, {} retransmits; {:.1} Mbit/s",
                r.latency_ms.p50, r.latency_ms.p99, f.sojourn_ms.p50, f.sojourn_ms.max, f.total_drops(), r.tcp.retransmits, r.goodput_bps / 1e6
            ),
            format!("network part ≤ {network_bound:.0} ms; the rest is the sender's and TCP's"),
            None,
        ),
        hidden_queueing(&format!("{cc} latency stream"), &n, r.tcp.max_srtt_ms),
    ])
}

/// Renders rows as a fixed-width table.
pub fn table(rows: &[Row]) -> String {
    let headers = ["check", "configured", "measured", "bound", "verdict"];
    let cells: Vec<[String; 5]> = rows
        .iter()
        .map(|r| {
            [
                r.check.clone(),
                r.configured.clone(),
                r.measured.clone(),
                r.bound.clone(),
                format!("{:?}", r.verdict).to_uppercase(),
            ]
        })
        .collect();
    let mut widths = headers.map(|h| h.chars().count());
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |row: &[String]| -> String {
        row.iter()
            .zip(widths)
            .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
            .collect::<Vec<_>>()
            .join(" | ")
            .trim_end()
            .to_string()
    };
    let mut out = line(&headers.map(String::from));
    out.push('\n');
    out.push_str(&widths.map(|w| "-".repeat(w)).join("-|-"));
    out.push('\n');
    for row in &cells {
        out.push_str(&line(row));
        out.push('\n');
    }
    out
}
