//! `lowtide rdc`: the RDC receiver agent on this host (logic in `lowtide_rdc`), its clean-up
//! and its benchmark.

use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use lowtide_netem::{Dumbbell, RunOptions, TopologyConfig};
use lowtide_rdc::bench::{self, BenchOptions};
use lowtide_rdc::driver::{self, Stopper};
use lowtide_rdc::iptables::{self, Selection};
use lowtide_rdc::{AgentConfig, AgentStatus, DriverConfig, Mode};

/// Receiver-based Delay Control: hold this host's TCP ACKs by the delay routers ask for.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct RdcArgs {
    #[command(subcommand)]
    command: Option<RdcCommand>,
    #[command(flatten)]
    agent: AgentArgs,
}

#[derive(Debug, Subcommand)]
enum RdcCommand {
    /// Remove the iptables chains a killed agent left in this network namespace.
    Cleanup {
        /// iptables program (default: iptables, then iptables-legacy).
        #[arg(long)]
        iptables: Option<String>,
    },
    /// Measure the agent on real packets over loopback in a namespace of its own: packets
    /// per second (wall and per CPU second) and added latency against no agent in the same run.
    Bench {
        #[arg(long)]
        json: bool,
        #[arg(long, default_value_t = 20_000)]
        round_trips: usize,
        #[arg(long, default_value_t = 3.0)]
        flood_seconds: f64,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ModeArg {
    /// The routers write the delay into each packet.
    Exact,
    /// The routers set CE; the agent learns the delay.
    OneBit,
}

#[derive(Debug, Args)]
struct AgentArgs {
    #[arg(long, value_enum, default_value = "one-bit")]
    mode: ModeArg,
    /// NFQUEUE number for incoming packets (outgoing use the next).
    #[arg(long, default_value_t = 7100)]
    queue: u16,
    /// Local TCP ports to manage (repeat or comma-separate); default every TCP flow.
    #[arg(long, value_delimiter = ',')]
    port: Vec<u16>,
    /// Largest delay imposed on an ACK, ms.
    #[arg(long, default_value_t = 4000.0)]
    max_delay_ms: f64,
    /// 1-bit: the most one increase adds to the delay, ms (default: the paper's doubling).
    #[arg(long)]
    max_increase_ms: Option<f64>,
    /// 1-bit: the routers' delay at which every packet is marked (a 1-bit cell's thresh_tb at
    /// its link's rate), ms; given, the delay is estimated from the share of marks (default:
    /// the paper's a/b law).
    #[arg(long)]
    full_mark_delay_ms: Option<f64>,
    /// Pace each flow's held ACKs: no faster than this factor times the flow's ACK rate
    /// (e.g. 1.1), so a bunch of ACKs does not leave as one (default: each at its time).
    #[arg(long)]
    release_pacing: Option<f64>,
    /// Hold no ACK past the sender's smallest possible RTO (its SRTT as the agent's releases
    /// make it, plus 200 ms) less this margin, ms (e.g. 50; default: no bound, the paper's
    /// agent).
    #[arg(long)]
    rto_guard_ms: Option<f64>,
    /// RTT assumed for flows without timestamps whose handshake was not seen, ms.
    #[arg(long, default_value_t = 100.0)]
    default_rtt_ms: f64,
    /// 1-bit: share of marked packets that increases the delay (the paper's a).
    #[arg(long, default_value_t = 0.9)]
    increase_above: f64,
    /// 1-bit: share at or below which the delay decreases (the paper's b).
    #[arg(long, default_value_t = 0.1)]
    decrease_below: f64,
    /// At most this many packets held at once; beyond, packets pass at once.
    #[arg(long, default_value_t = 4096)]
    max_held: usize,
    /// Do not mark outgoing ACKs as the agent's echo (then an RDC router that delays flows
    /// without an agent delays this host's flows too).
    #[arg(long)]
    no_echo: bool,
    /// iptables program (default: iptables, then iptables-legacy).
    #[arg(long)]
    iptables: Option<String>,
    /// Status every this many ms.
    #[arg(long, default_value_t = 1000)]
    interval_ms: u64,
    /// Run as an ordinary thread, not SCHED_FIFO (held ACKs may then leave late on a loaded
    /// host).
    #[arg(long)]
    no_realtime: bool,
    /// Status as JSON lines (one AgentStatus per interval, then the final one).
    #[arg(long)]
    json: bool,
}

fn ms(v: f64, what: &str) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(v / 1000.0)
        .with_context(|| format!("--{what} = {v}: a duration in ms"))
}

pub fn run(args: RdcArgs) -> anyhow::Result<i32> {
    match args.command {
        Some(RdcCommand::Cleanup { iptables: tool }) => {
            let tool = iptables::find_tool(tool.as_deref())?;
            let removed = iptables::remove_all_leftovers(&tool);
            println!(
                "removed {} chain(s){}",
                removed.len(),
                if removed.is_empty() {
                    String::new()
                } else {
                    format!(": {}", removed.join(", "))
                }
            );
            Ok(0)
        }
        Some(RdcCommand::Bench {
            json,
            round_trips,
            flood_seconds,
        }) => bench_in_namespace(json, round_trips, flood_seconds),
        None => agent(args.agent),
    }
}

fn agent(a: AgentArgs) -> anyhow::Result<i32> {
    let cfg = DriverConfig {
        agent: AgentConfig {
            mode: match a.mode {
                ModeArg::Exact => Mode::Exact,
                ModeArg::OneBit => Mode::OneBit,
            },
            increase_above: a.increase_above,
            decrease_below: a.decrease_below,
            max_delay: ms(a.max_delay_ms, "max-delay-ms")?,
            max_increase: a
                .max_increase_ms
                .map(|v| ms(v, "max-increase-ms"))
                .transpose()?,
            full_mark_delay: a
                .full_mark_delay_ms
                .map(|v| ms(v, "full-mark-delay-ms"))
                .transpose()?,
            default_rtt: ms(a.default_rtt_ms, "default-rtt-ms")?,
            release_pacing: a.release_pacing,
            rto_guard: a.rto_guard_ms.map(|v| ms(v, "rto-guard-ms")).transpose()?,
            max_held: a.max_held,
            echo: !a.no_echo,
            ..AgentConfig::default()
        },
        queue: a.queue,
        selection: Selection {
            ports: a.port.clone(),
            loopback: false,
        },
        iptables: a.iptables.clone(),
        status_interval: Duration::from_millis(a.interval_ms.max(10)),
        realtime: !a.no_realtime,
        ..DriverConfig::default()
    };
    let stopper = Stopper::new()?;
    let on_signal = stopper.clone();
    ctrlc::set_handler(move || on_signal.stop())
        .context("installing the Ctrl-C/SIGTERM handler")?;
    eprintln!(
        "lowtide rdc: {}; mode {}, NFQUEUE {} (in) and {} (out), ports {}; kernel {}",
        std::env::args().collect::<Vec<_>>().join(" "),
        cfg.agent.mode.as_str(),
        cfg.queue,
        cfg.queue.wrapping_add(1),
        if a.port.is_empty() {
            "all".to_string()
        } else {
            format!("{:?}", a.port)
        },
        std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim(),
    );
    let json = a.json;
    let last = driver::run(
        &cfg,
        &stopper,
        || {
            eprintln!(
                "lowtide rdc: rules installed; Ctrl-C or SIGTERM stops the agent and removes them"
            )
        },
        |s| print_status(s, json),
    )?;
    eprintln!(
        "lowtide rdc: stopped; {} packets held, every rule removed",
        last.counters.held
    );
    Ok(0)
}

fn print_status(s: &AgentStatus, json: bool) {
    if json {
        if let Ok(line) = serde_json::to_string(s) {
            println!("{line}");
        }
        return;
    }
    let c = &s.counters;
    println!(
        "flows {} | in {} out {} | held {} now {} | passed {} (sack {}, dup {}, full {}) | ce cleared {} | delays read {}",
        s.flows.len(),
        c.incoming,
        c.outgoing,
        c.held,
        s.held_now,
        c.passed.total(),
        c.passed.sack,
        c.passed.dup_ack,
        c.passed.hold_full,
        c.ce_cleared,
        c.delays_read
    );
    for f in &s.flows {
        println!(
            "  {} <- {}: delay {:.1} ms, rtt {:.1} ms ({:?}), cwnd~{:.1}, held {}, max hold {:.1} ms",
            f.local, f.remote, f.delay_ms, f.rtt_ms, f.rtt_source, f.cwnd_estimate, f.held, f.max_hold_ms
        );
    }
}

/// The benchmark runs in a namespace of its own (an idle dumbbell's receiver host), so its
/// loopback rules touch nothing else on the machine.
fn bench_in_namespace(json: bool, round_trips: usize, flood_seconds: f64) -> anyhow::Result<i32> {
    let net = Dumbbell::new(
        TopologyConfig::symmetric(1000.0, 0.0),
        RunOptions::default(),
    )?;
    let opts = BenchOptions {
        round_trips,
        flood: Duration::try_from_secs_f64(flood_seconds).context("--flood-seconds")?,
        ..BenchOptions::default()
    };
    let report = net.receiver(0).run(move || bench::run(&opts))??;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(0);
    }
    let (w, wo) = (&report.rtt_with_agent_us, &report.rtt_without_agent_us);
    println!(
        "lowtide rdc bench: TCP over loopback in a namespace, agent against no agent, same run"
    );
    println!(
        "ping-pong RTT (us)   p50 {:>8.1} p99 {:>8.1} p99.9 {:>8.1}   without agent",
        wo.p50, wo.p99, wo.p999
    );
    println!(
        "                     p50 {:>8.1} p99 {:>8.1} p99.9 {:>8.1}   with agent",
        w.p50, w.p99, w.p999
    );
    println!(
        "added per packet     p50 {:>8.1} p99 {:>8.1} us (goal: p99 <= 100 us)",
        report.added_latency_p50_us, report.added_latency_p99_us
    );
    let f = &report.flood;
    println!(
        "bulk through agent   {:.0} packets/s wall, {:.0} packets per agent CPU second (goal >= 20000), {:.2} CPU s for {} packets, held {}",
        f.packets_per_second, f.packets_per_cpu_second, f.agent_cpu_seconds, f.packets, f.held
    );
    println!(
        "bulk goodput         {:.0} Mbit/s with agent, {:.0} Mbit/s without (ratio {:.2})",
        f.goodput_mbps,
        report.flood_without_agent_mbps,
        f.goodput_mbps / report.flood_without_agent_mbps.max(1e-9)
    );
    Ok(0)
}
