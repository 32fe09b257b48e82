//! `lowtide netem check`: builds dumbbells, measures them with real Linux TCP and UDP, and
//! compares every figure with what the configuration promises. A figure outside its bound
//! fails the check, so a broken emulator (timer drift, hidden buffers, offloads that let
//! 64 KB frames through, a trace replayed wrong) is caught before any experiment trusts it.
//!
//! Hidden queueing: TCP's own smoothed RTT may never exceed the base RTT plus what the
//! emulator says its queues held (plus a margin for ACK timing); time beyond that sits in a
//! buffer the configuration does not account for (veth, AF_PACKET, channels).
//!
//! Honest verdicts (`judge`): a figure without samples fails as "no data"; a figure that
//! depends on how promptly the machine wakes threads is judged against the machine's own
//! wake-up noise, measured before the check ([`crate::noise`]), and a miss within that noise
//! is a "machine limit", shown with both numbers, never a silent pass.

mod judge;

use std::time::Duration;

use serde::Serialize;

pub use judge::{Allowance, Judged, Verdict};

use crate::config::{AqmConfig, QueueLimit, TopologyConfig, MTU};
use crate::dumbbell::{Dumbbell, RunOptions};
use crate::error::NetemError;
use crate::noise::WakeupNoise;
use crate::probe::{self, BulkResult, TcpView};
use crate::stats::{LinkReport, Percentiles};
use crate::timing::Timing;

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
        judged: Judged,
    ) -> Self {
        let measured = match judged.note {
            Some(note) => format!("{measured}; {note}"),
            None => measured,
        };
        Row {
            check: check.into(),
            configured: configured.into(),
            measured,
            bound,
            verdict: judged.verdict,
        }
    }

    fn info(
        check: impl Into<String>,
        configured: impl Into<String>,
        measured: String,
        bound: String,
    ) -> Self {
        Row {
            check: check.into(),
            configured: configured.into(),
            measured,
            bound,
            verdict: Verdict::Info,
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

/// Runs every check, reporting progress through `progress`. `noise` is the machine's wake-up
/// noise measured just before ([`crate::noise::measure`]): timed bounds are judged against it.
pub fn run(
    opts: &CheckOptions,
    noise: &WakeupNoise,
    mut progress: impl FnMut(&str),
) -> Result<Vec<Row>, NetemError> {
    let mut rows = vec![];
    let secs = |full: u64, quick: u64| Duration::from_secs(if opts.quick { quick } else { full });
    let rtts: &[f64] = if opts.quick {
        &[10.0, 100.0]
    } else {
        &[10.0, 50.0, 100.0, 200.0]
    };
    for &rtt in rtts {
        progress(&format!("minimum RTT at {rtt} ms"));
        rows.push(min_rtt(rtt, noise)?);
    }
    for cc in &opts.congestion {
        let rates: &[f64] = if opts.quick {
            &[30.0]
        } else {
            &[10.0, 30.0, 100.0]
        };
        for &rate in rates {
            progress(&format!("{cc} bulk goodput at {rate} Mbit/s"));
            rows.extend(goodput(cc, rate, secs(8, 5), secs(3, 2), noise)?);
        }
        progress(&format!("{cc} through a drop-tail queue of 50 packets"));
        rows.extend(drop_tail_bound(cc, secs(6, 4), noise)?);
        progress(&format!("{cc}: 16 flows at 30 Mbit/s, emulator lateness"));
        // The machine's noise again, right before: it changes while a check runs.
        let just_before = crate::noise::measure(Duration::from_secs(1))?;
        let run = lateness_run(cc, 16, secs(6, 4), Timing::default())?;
        rows.push(lateness_row(
            cc,
            16,
            &run,
            judge::noisier(noise, &just_before),
        ));
    }
    progress("cubic through a capacity trace with bursts and gaps");
    rows.extend(trace_goodput("cubic", secs(10, 6), secs(3, 2), noise)?);
    progress("cubic with ECN through RED");
    rows.extend(red_ecn(secs(8, 5), noise)?);
    if !opts.quick {
        for cc in &opts.congestion {
            progress(&format!(
                "{cc} latency stream, 30 Mbit/s, 50 ms each way, 125-packet queue"
            ));
            rows.extend(latency_stream(cc, secs(15, 8), noise)?);
        }
    }
    Ok(rows)
}

/// The exit code for a set of rows: 0 all held, 1 an emulator bound failed (or had no
/// data), 3 nothing failed but the machine's wake-up noise was the limit somewhere.
pub fn exit_code(rows: &[Row]) -> i32 {
    if rows.iter().any(|r| r.verdict == Verdict::Fail) {
        1
    } else if rows.iter().any(|r| r.verdict == Verdict::MachineLimit) {
        3
    } else {
        0
    }
}

fn net(cfg: TopologyConfig) -> Result<Dumbbell, NetemError> {
    Dumbbell::new(cfg, RunOptions::default())
}

fn min_rtt(rtt_ms: f64, noise: &WakeupNoise) -> Result<Row, NetemError> {
    let n = net(TopologyConfig::symmetric(100.0, rtt_ms / 2.0))?;
    let p = probe::udp_rtt(&n, 30, Duration::from_millis(20))?;
    // The smallest sample is the path with empty queues.
    let min = p.min;
    let judged = if min < rtt_ms - 1.0 {
        Judged::pass_if(false)
    } else {
        let allowance = Allowance::round_trip_p50(noise);
        judge::at_most_timed("minimum RTT", min, rtt_ms + 1.0, &allowance)
    };
    Ok(Row::new(
        "minimum RTT (UDP echo)",
        format!("{rtt_ms} ms"),
        format!("{min:.2} ms (median {:.2}, {} echoes)", p.p50, p.count),
        "configured ± 1 ms".into(),
        judged,
    ))
}

/// The hidden-queueing row for a flow: TCP's RTT against the emulator's own queues.
fn hidden_queueing(label: &str, n: &Dumbbell, tcp: &TcpView, noise: &WakeupNoise) -> Row {
    let base = n.config().base_rtt().as_secs_f64() * 1000.0;
    let fwd = n.forward().report().sojourn_ms;
    let rev = n.reverse().report().sojourn_ms;
    hidden_queueing_row(label, base, &fwd, &rev, tcp, noise)
}

fn hidden_queueing_row(
    label: &str,
    base: f64,
    fwd: &Percentiles,
    rev: &Percentiles,
    tcp: &TcpView,
    noise: &WakeupNoise,
) -> Row {
    // An empty reverse queue series is fine (nothing waited there); the forward one carried
    // the flow and must have samples.
    let (fwd_max, rev_max) = (fwd.max, rev.max);
    let allowed = base + fwd_max + rev_max + 10.0;
    let judged = if let Some(why) = tcp.no_data() {
        Judged::no_data(why)
    } else if fwd.count == 0 {
        Judged::no_data("no data: the forward queue recorded no dequeue")
    } else {
        let allowance = Allowance::round_trip_p99(noise);
        judge::at_most_timed("TCP max srtt", tcp.max_srtt_ms, allowed, &allowance)
    };
    Row::new(
        format!("{label}: no hidden queueing"),
        format!("base RTT {base:.0} ms"),
        format!(
            "TCP max srtt {:.1} ms ({} TCP_INFO samples); queues held {fwd_max:.1} + {rev_max:.1} ms",
            tcp.max_srtt_ms, tcp.samples
        ),
        format!("≤ base + queues + 10 ms = {allowed:.1} ms"),
        judged,
    )
}

fn frames_row(cc: &str, f: &LinkReport) -> Row {
    let frame = f.largest_frame_bytes;
    let judged = if f.arrived_packets == 0 {
        Judged::no_data("no data: no packet crossed the link")
    } else {
        Judged::pass_if(frame <= (MTU + 14) as u64)
    };
    Row::new(
        format!("{cc} frames are MTU-sized"),
        format!("MTU {MTU}"),
        format!(
            "largest frame {frame} bytes of {} packets",
            f.arrived_packets
        ),
        format!("≤ {} (no TSO/GSO super-frames)", MTU + 14),
        judged,
    )
}

/// Goodput against what the link can carry for 1448-byte segments.
fn goodput_judged(goodput_bps: f64, ideal_bps: f64) -> (f64, Judged) {
    let share = goodput_bps / ideal_bps;
    let judged = if goodput_bps <= 0.0 {
        Judged::no_data("no data: nothing arrived")
    } else {
        Judged::pass_if(share >= 0.93)
    };
    (share, judged)
}

fn goodput(
    cc: &str,
    rate: f64,
    duration: Duration,
    warmup: Duration,
    noise: &WakeupNoise,
) -> Result<Vec<Row>, NetemError> {
    let mut cfg = TopologyConfig::symmetric(rate, 20.0);
    cfg.hosts.congestion = cc.into();
    let n = net(cfg)?;
    let r = probe::bulk(&n, cc, 1, duration, warmup)?;
    let (share, judged) = goodput_judged(r.goodput_bps, rate * 1e6 * 1448.0 / 1500.0);
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
            judged,
        ),
        frames_row(cc, &n.forward().report()),
        hidden_queueing(&format!("{cc} at {rate} Mbit/s"), &n, &r.tcp, noise),
    ])
}

fn drop_tail_bound(
    cc: &str,
    duration: Duration,
    noise: &WakeupNoise,
) -> Result<Vec<Row>, NetemError> {
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
    let delay = if f.sojourn_ms.count == 0 {
        Judged::no_data("no data: no packet left the queue")
    } else {
        // Sojourn is logical (arrival to the link taking the packet); only a packet that
        // reached the rate cell late, behind a late wake-up, can add to it.
        judge::at_most_timed(
            "max sojourn",
            f.sojourn_ms.max,
            bound,
            &Allowance::max(noise),
        )
    };
    let drops = if f.arrived_packets == 0 {
        Judged::no_data("no data: no packet arrived")
    } else {
        Judged::pass_if(only_full && full_when_dropping)
    };
    Ok(vec![
        Row::new(
            format!("{cc} drop-tail queueing delay"),
            format!("{limit} packets at 10 Mbit/s"),
            format!(
                "max sojourn {:.2} ms, p99 {:.2} ms over {} packets",
                f.sojourn_ms.max, f.sojourn_ms.p99, f.sojourn_ms.count
            ),
            format!("≤ L × packet time + 2 ms = {bound:.1} ms"),
            delay,
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
            drops,
        ),
        hidden_queueing(&format!("{cc} drop-tail"), &n, &r.tcp, noise),
    ])
}

/// What the lateness scenario measured: `flows` bulk flows at 30 Mbit/s, 1 BDP.
#[derive(Debug, Clone, Serialize)]
pub struct LatenessRun {
    /// How late packets left the forward link against the emulator's schedule.
    pub lateness_ms: Percentiles,
    /// CPU time of the emulator's worker per second of the run (1.0 = a whole core).
    pub emulator_cpu_per_s: Option<f64>,
    pub goodput_bps: f64,
    pub timing: Timing,
    pub realtime: bool,
}

/// Runs the lateness scenario with the emulator's worker scheduled as `timing` says.
pub fn lateness_run(
    cc: &str,
    flows: usize,
    duration: Duration,
    timing: Timing,
) -> Result<LatenessRun, NetemError> {
    let mut cfg = TopologyConfig::symmetric(30.0, 20.0);
    cfg.hosts.congestion = cc.into();
    let n = Dumbbell::with_timing(cfg, RunOptions::default(), timing)?;
    let cpu_before = n.emulator_cpu_time();
    let started = std::time::Instant::now();
    let r = probe::bulk(&n, cc, flows, duration, Duration::from_secs(1))?;
    let elapsed = started.elapsed().as_secs_f64();
    let emulator_cpu_per_s = match (cpu_before, n.emulator_cpu_time()) {
        (Some(a), Some(b)) => Some((b - a).as_secs_f64() / elapsed),
        _ => None,
    };
    n.check_alive()?;
    Ok(LatenessRun {
        lateness_ms: n.forward().report().lateness_ms,
        emulator_cpu_per_s,
        goodput_bps: r.goodput_bps,
        timing,
        realtime: n.realtime(),
    })
}

fn lateness_row(cc: &str, flows: usize, run: &LatenessRun, noise: &WakeupNoise) -> Row {
    let l = &run.lateness_ms;
    let judged = if l.count == 0 {
        Judged::no_data("no data: no packet left the link")
    } else {
        judge::at_most_timed("emulator lateness p99", l.p99, 1.0, &Allowance::p99(noise))
    };
    let judged = match (judged.verdict, judged.note) {
        // A pass still shows what the machine allowed.
        (Verdict::Pass, None) => Judged {
            verdict: Verdict::Pass,
            note: Some(format!(
                "machine wake-up p99 {:.3} ms at a random instant",
                noise.at_random_instant_ms.p99
            )),
        },
        (verdict, note) => Judged { verdict, note },
    };
    let cpu = run
        .emulator_cpu_per_s
        .map_or("unknown".to_string(), |c| format!("{:.0}%", c * 100.0));
    Row::new(
        format!("{cc} emulator lateness, {flows} flows"),
        format!(
            "30 Mbit/s, 1 BDP; emulator: 1 worker, {}{}",
            run.timing,
            if run.realtime || !run.timing.realtime { "" } else { " (refused)" }
        ),
        format!(
            "p99 {:.3} ms, p99.9 {:.3} ms, max {:.2} ms over {} packets ({:.1} Mbit/s); emulator CPU {cpu} of a core",
            l.p99,
            l.p999,
            l.max,
            l.count,
            run.goodput_bps / 1e6
        ),
        "p99 ≤ 1 ms".into(),
        judged,
    )
}

/// A capacity trace with bursts (4 opportunities in the same millisecond every 3 ms) and a
/// 16 ms gap in each 50 ms period: 49 opportunities per 50 ms, 11.76 Mbit/s.
pub fn bursty_trace() -> Vec<u64> {
    let mut times: Vec<u64> = (0..12).flat_map(|k| [1 + 3 * k; 4]).collect();
    times.push(50);
    times
}

fn trace_goodput(
    cc: &str,
    duration: Duration,
    warmup: Duration,
    noise: &WakeupNoise,
) -> Result<Vec<Row>, NetemError> {
    let path = std::env::temp_dir().join(format!("lowtide-check-{}.mahi", std::process::id()));
    let text: String = bursty_trace().iter().map(|t| format!("{t}\n")).collect();
    std::fs::write(&path, text)
        .map_err(|e| NetemError::setup(format!("writing {}", path.display()), e))?;
    let mut cfg = TopologyConfig::symmetric(30.0, 20.0);
    cfg.hosts.congestion = cc.into();
    cfg.forward.rate_mbps = None;
    cfg.forward.trace = Some(path.clone());
    let result = net(cfg).and_then(|n| {
        let r = probe::bulk(&n, cc, 1, duration, warmup)?;
        n.check_alive()?;
        let hidden = hidden_queueing(&format!("{cc} through a trace"), &n, &r.tcp, noise);
        Ok((
            r,
            n.config().forward.nominal_rate_bps(),
            n.forward().report(),
            hidden,
        ))
    });
    let _ = std::fs::remove_file(&path);
    let (r, capacity, f, hidden) = result?;
    // Every opportunity carries one 1500-byte packet: 1448 bytes of a TCP segment.
    let (share, judged) = goodput_judged(r.goodput_bps, capacity * 1448.0 / 1500.0);
    Ok(vec![
        Row::new(
            format!("{cc} goodput through a trace, 1 flow"),
            format!(
                "{:.2} Mbit/s in 4-packet bursts, a 16 ms gap every 50 ms; 40 ms RTT, 1 BDP",
                capacity / 1e6
            ),
            format!(
                "{:.2} Mbit/s = {:.1}% of capacity×1448/1500; {} drops",
                r.goodput_bps / 1e6,
                share * 100.0,
                f.total_drops()
            ),
            "≥ 93%".into(),
            judged,
        ),
        hidden,
    ])
}

fn red_row(f: &LinkReport, r: &BulkResult) -> Row {
    let judged = match r.tcp.no_data() {
        Some(why) => Judged::no_data(why),
        None if f.arrived_packets == 0 => Judged::no_data("no data: no packet arrived"),
        None => {
            Judged::pass_if(f.total_marks() > 0 && f.total_drops() == 0 && r.tcp.retransmits == 0)
        }
    };
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
        judged,
    )
}

fn red_ecn(duration: Duration, noise: &WakeupNoise) -> Result<Vec<Row>, NetemError> {
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
        mark_p: None,
    };
    let n = net(cfg)?;
    let r = probe::bulk(&n, "cubic", 1, duration, Duration::from_secs(1))?;
    Ok(vec![
        red_row(&n.forward().report(), &r),
        hidden_queueing("cubic RED/ECN", &n, &r.tcp, noise),
    ])
}

/// The set-up of the BBR question in the emulator issue: where does a lowat-limited stream's
/// latency go? Shown as a decomposition; the bound is the network's, the rest is TCP's.
fn latency_stream(
    cc: &str,
    duration: Duration,
    noise: &WakeupNoise,
) -> Result<Vec<Row>, NetemError> {
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
        Row::info(
            format!("{cc} latency stream (NOTSENT_LOWAT 3 MSS)"),
            "30 Mbit/s, 50 ms each way, 125 packets".to_string(),
            format!(
                "one-way p50 {:.1} ms, p99 {:.1} ms over {} records; queue p50 {:.1} ms max {:.1} ms; {} drops, {} retransmits; {:.1} Mbit/s",
                r.latency_ms.p50, r.latency_ms.p99, r.latency_ms.count, f.sojourn_ms.p50, f.sojourn_ms.max, f.total_drops(), r.tcp.retransmits, r.goodput_bps / 1e6
            ),
            format!("network part ≤ {network_bound:.0} ms; the rest is the sender's and TCP's"),
        ),
        hidden_queueing(&format!("{cc} latency stream"), &n, &r.tcp, noise),
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
                r.verdict.label().to_string(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timing::Timing;

    fn quiet() -> WakeupNoise {
        let p = Percentiles {
            count: 1000,
            min: 0.005,
            p50: 0.01,
            p99: 0.05,
            p999: 0.2,
            max: 0.5,
        };
        WakeupNoise {
            lateness_ms: p,
            at_random_instant_ms: p,
            duration_s: 1.0,
            timing: Timing::default(),
            realtime: true,
            cpu_per_s: None,
        }
    }

    fn sampled(srtt: f64, retransmits: u32) -> TcpView {
        TcpView {
            flows: 1,
            flows_sampled: 1,
            samples: 500,
            retransmits,
            max_srtt_ms: srtt,
            min_rtt_ms: 40.0,
        }
    }

    fn some_ms(max: f64) -> Percentiles {
        Percentiles {
            count: 100,
            max,
            ..Default::default()
        }
    }

    #[test]
    fn a_failed_tcp_info_sampler_is_no_data_never_a_pass() {
        let noise = quiet();
        // The sampler got nothing: srtt 0 and 0 retransmits must not pass.
        let failed = TcpView::unsampled();
        let row = hidden_queueing_row("t", 40.0, &some_ms(5.0), &some_ms(0.0), &failed, &noise);
        assert_eq!(row.verdict, Verdict::Fail);
        assert!(row.measured.contains("no data"), "{}", row.measured);
        let ok = hidden_queueing_row(
            "t",
            40.0,
            &some_ms(5.0),
            &some_ms(0.0),
            &sampled(50.0, 0),
            &noise,
        );
        assert_eq!(ok.verdict, Verdict::Pass);
        // One of two flows unsampled: still no data.
        let mut two = sampled(50.0, 0);
        two.merge(&TcpView::unsampled());
        let row = hidden_queueing_row("t", 40.0, &some_ms(5.0), &some_ms(0.0), &two, &noise);
        assert_eq!(row.verdict, Verdict::Fail);
        assert!(row.measured.contains("1 of 2 flows"), "{}", row.measured);

        let mut f = crate::stats::LinkStats::new(std::time::Instant::now());
        for _ in 0..10 {
            f.arrived(1514);
        }
        f.marked(crate::aqm::Reason::RedEarly);
        let report = f.report();
        let bulk = |tcp| BulkResult {
            goodput_bps: 9e6,
            tcp,
        };
        let row = red_row(&report, &bulk(TcpView::unsampled()));
        assert_eq!(row.verdict, Verdict::Fail);
        assert!(row.measured.contains("no data"), "{}", row.measured);
        assert_eq!(
            red_row(&report, &bulk(sampled(50.0, 0))).verdict,
            Verdict::Pass
        );
        f = crate::stats::LinkStats::new(std::time::Instant::now());
        assert_eq!(
            red_row(&f.report(), &bulk(sampled(50.0, 0))).verdict,
            Verdict::Fail
        );
    }

    #[test]
    fn empty_series_are_no_data() {
        let noise = quiet();
        let run = LatenessRun {
            lateness_ms: Percentiles::default(),
            emulator_cpu_per_s: None,
            goodput_bps: 0.0,
            timing: Timing::default(),
            realtime: true,
        };
        let row = lateness_row("cubic", 16, &run, &noise);
        assert_eq!(row.verdict, Verdict::Fail);
        assert!(row.measured.contains("no data"), "{}", row.measured);
        let empty = crate::stats::LinkStats::new(std::time::Instant::now()).report();
        assert_eq!(frames_row("cubic", &empty).verdict, Verdict::Fail);
        assert_eq!(goodput_judged(0.0, 1e6).1.verdict, Verdict::Fail);
        let row = hidden_queueing_row(
            "t",
            40.0,
            &Percentiles::default(),
            &some_ms(0.0),
            &sampled(50.0, 0),
            &noise,
        );
        assert_eq!(row.verdict, Verdict::Fail);
    }

    #[test]
    fn the_bursty_trace_is_what_its_row_says() {
        let t = crate::trace::Trace::from_times(bursty_trace(), "check").unwrap();
        assert_eq!(t.period_ms(), 50);
        assert_eq!(t.opportunities(), 49);
        assert!((t.mean_rate_bps() - 11.76e6).abs() < 1.0);
    }

    #[test]
    fn exit_codes_tell_a_fault_from_a_machine_limit() {
        let row = |verdict| Row {
            check: String::new(),
            configured: String::new(),
            measured: String::new(),
            bound: String::new(),
            verdict,
        };
        assert_eq!(exit_code(&[row(Verdict::Pass), row(Verdict::Info)]), 0);
        assert_eq!(
            exit_code(&[row(Verdict::Pass), row(Verdict::MachineLimit)]),
            3
        );
        assert_eq!(
            exit_code(&[row(Verdict::Fail), row(Verdict::MachineLimit)]),
            1
        );
    }
}
