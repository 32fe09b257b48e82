//! `lowtide netem …`

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use lowtide_netem::check::{self, CheckOptions, Verdict};
use lowtide_netem::{cleanup, noise, timing, Dumbbell, RunOptions, TopologyConfig};

#[derive(Subcommand)]
pub enum NetemCommand {
    /// Build dumbbells, measure them with real TCP, print configured against measured;
    /// exits 1 when a figure is outside its bound (or has no data), 3 when the only misses
    /// are within the machine's own wake-up noise (measured first, printed at the top).
    Check(CheckArgs),
    /// Measure the machine's wake-up noise and the emulator's lateness and CPU under each way
    /// of waiting (SCHED_FIFO or not, timer slack, a spinning or polling tail).
    Timing(TimingArgs),
    /// Remove every namespace and veth device a killed lowtide run left behind.
    Cleanup,
    /// Run a command on a sender host behind an emulated link (mahimahi style).
    Shell(ShellArgs),
}

#[derive(Args)]
pub struct CheckArgs {
    /// Shorter runs and fewer points (what CI runs).
    #[arg(long)]
    quick: bool,
    /// Congestion controls for the TCP checks.
    #[arg(long, value_delimiter = ',', default_value = "cubic,bbr")]
    cc: Vec<String>,
    /// Also write the rows as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Args)]
pub struct TimingArgs {
    /// Seconds of noise measurement per way of waiting.
    #[arg(long, default_value_t = 2.0)]
    noise_secs: f64,
    /// Seconds of the lateness run (16 bulk flows at 30 Mbit/s) per way of waiting.
    #[arg(long, default_value_t = 6)]
    run_secs: u64,
    /// Congestion control of the bulk flows.
    #[arg(long, default_value = "cubic")]
    cc: String,
    /// Measure only the first N ways of waiting (SCHED_FIFO with sleep, spin 50 µs, spin
    /// 200 µs, poll 200 µs; SCHED_OTHER with sleep, slack 1 ns, spin 200 µs).
    #[arg(long)]
    first: Option<usize>,
    /// Also write the measurements as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Args)]
pub struct ShellArgs {
    /// Topology file (TOML); without it a symmetric link from --rate and --delay.
    #[arg(long)]
    topology: Option<PathBuf>,
    /// Bottleneck rate in Mbit/s.
    #[arg(long, default_value_t = 10.0)]
    rate: f64,
    /// One-way delay in ms.
    #[arg(long, default_value_t = 25.0)]
    delay: f64,
    /// Write forward.pcap and reverse.pcap here.
    #[arg(long)]
    pcap: Option<PathBuf>,
    /// The command and its arguments (default: $SHELL).
    #[arg(trailing_var_arg = true)]
    command: Vec<String>,
}

pub fn run(cmd: NetemCommand) -> anyhow::Result<i32> {
    match cmd {
        NetemCommand::Check(args) => check(args),
        NetemCommand::Cleanup => {
            let c = cleanup::cleanup_all();
            println!(
                "removed {} namespaces and {} veth devices{}",
                c.namespaces.len(),
                c.links.len(),
                if c.failed.is_empty() {
                    String::new()
                } else {
                    format!("; could not remove {:?}", c.failed)
                }
            );
            Ok(if c.failed.is_empty() { 0 } else { 1 })
        }
        NetemCommand::Shell(args) => shell(args),
        NetemCommand::Timing(args) => timing_sweep(args),
    }
}

/// The provenance lines every measuring command starts with.
fn provenance(title: &str) {
    println!("{title}");
    println!(
        "command: {}",
        std::env::args().collect::<Vec<_>>().join(" ")
    );
    println!(
        "kernel: {}; congestion controls available: {}",
        std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim(),
        lowtide_netem::dumbbell::available_congestion()
    );
}

fn check(args: CheckArgs) -> anyhow::Result<i32> {
    provenance("lowtide netem check");
    // The machine first, with no emulator running: timed bounds are judged against it.
    let noise = noise::measure(std::time::Duration::from_secs(2))?;
    println!("machine: {noise}");
    let opts = CheckOptions {
        quick: args.quick,
        congestion: args.cc,
    };
    let started = std::time::Instant::now();
    let rows = check::run(&opts, &noise, |what| {
        eprintln!("[{:>5.1} s] {what}", started.elapsed().as_secs_f64());
    })?;
    println!("{}", check::table(&rows));
    if let Some(path) = args.json {
        let json = serde_json::json!({ "noise": noise, "rows": rows });
        std::fs::write(&path, serde_json::to_string_pretty(&json)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let count = |v: Verdict| rows.iter().filter(|r| r.verdict == v).count();
    println!(
        "{} passed, {} failed, {} at the machine's limit, {} shown without a bound",
        count(Verdict::Pass),
        count(Verdict::Fail),
        count(Verdict::MachineLimit),
        count(Verdict::Info)
    );
    Ok(check::exit_code(&rows))
}

fn timing_sweep(args: TimingArgs) -> anyhow::Result<i32> {
    provenance("lowtide netem timing");
    let noise_for = std::time::Duration::from_secs_f64(args.noise_secs);
    let run_for = std::time::Duration::from_secs(args.run_secs);
    let mut points = vec![];
    let mut candidates = timing::candidates();
    candidates.truncate(args.first.unwrap_or(usize::MAX));
    for t in candidates {
        eprintln!("{t}: wake-up noise, then {} flows through the emulator", 16);
        let noise = noise::measure_with(noise_for, t)?;
        let run = check::lateness_run(&args.cc, 16, run_for, t)?;
        points.push(serde_json::json!({ "timing": t, "noise": noise, "emulator": run }));
        let l = &run.lateness_ms;
        let n = &noise.lateness_ms;
        let pct = |c: Option<f64>| c.map_or("?".to_string(), |c| format!("{:.0}%", c * 100.0));
        println!(
            "{t}{}\n  noise:    p50 {:.3} p99 {:.3} p99.9 {:.3} max {:.3} ms ({} wake-ups; at a random instant p99 {:.3} p99.9 {:.3}), thread CPU {}\n  emulator: p50 {:.3} p99 {:.3} p99.9 {:.3} max {:.3} ms ({} packets, {:.1} Mbit/s), worker CPU {}",
            if noise.realtime || !t.realtime { "" } else { " (real-time refused)" },
            n.p50, n.p99, n.p999, n.max, n.count,
            noise.at_random_instant_ms.p99, noise.at_random_instant_ms.p999, pct(noise.cpu_per_s),
            l.p50, l.p99, l.p999, l.max, l.count, run.goodput_bps / 1e6, pct(run.emulator_cpu_per_s),
        );
    }
    if let Some(path) = args.json {
        std::fs::write(&path, serde_json::to_string_pretty(&points)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(0)
}

fn shell(args: ShellArgs) -> anyhow::Result<i32> {
    let cfg = match &args.topology {
        Some(path) => TopologyConfig::from_file(path)?,
        None => TopologyConfig::symmetric(args.rate, args.delay),
    };
    if let Some(dir) = &args.pcap {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let net = Dumbbell::new(
        cfg,
        RunOptions {
            pcap_dir: args.pcap.clone(),
            seed: 1,
        },
    )?;
    let far = net.receiver(0);
    println!(
        "behind the link: you are on {} ({}); the far side is {} ({}): try `ping {}`",
        net.sender(0).name(),
        net.sender(0).addr(),
        far.name(),
        far.addr(),
        far.addr()
    );
    let mut command = args.command.clone();
    if command.is_empty() {
        command.push(std::env::var("SHELL").unwrap_or_else(|_| "/bin/sh".into()));
    }
    let mut cmd = net.sender(0).command(&command[0]);
    cmd.args(&command[1..])
        .env("LOWTIDE_FAR", far.addr().to_string());
    let status = cmd
        .status()
        .with_context(|| format!("running {:?} in the sender host", command))?;
    let fwd = net.forward().report();
    eprintln!(
        "forward link: {} packets delivered, {} dropped, {} marked, max queueing {:.1} ms",
        fwd.delivered_packets,
        fwd.total_drops(),
        fwd.total_marks(),
        fwd.sojourn_ms.max
    );
    Ok(status.code().unwrap_or(1))
}
