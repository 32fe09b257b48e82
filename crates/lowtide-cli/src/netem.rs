//! `lowtide netem …`

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use lowtide_netem::check::{self, CheckOptions, Verdict};
use lowtide_netem::{cleanup, Dumbbell, RunOptions, TopologyConfig};

#[derive(Subcommand)]
pub enum NetemCommand {
    /// Build dumbbells, measure them with real TCP, print configured against measured;
    /// exits 1 when a figure is outside its bound.
    Check(CheckArgs),
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
    }
}

fn check(args: CheckArgs) -> anyhow::Result<i32> {
    println!("lowtide netem check");
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
    let opts = CheckOptions {
        quick: args.quick,
        congestion: args.cc,
    };
    let started = std::time::Instant::now();
    let rows = check::run(&opts, |what| {
        eprintln!("[{:>5.1} s] {what}", started.elapsed().as_secs_f64());
    })?;
    println!("{}", check::table(&rows));
    if let Some(path) = args.json {
        std::fs::write(&path, serde_json::to_string_pretty(&rows)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let failed = rows.iter().filter(|r| r.verdict == Verdict::Fail).count();
    println!(
        "{} passed, {} failed, {} shown without a bound",
        rows.iter().filter(|r| r.verdict == Verdict::Pass).count(),
        failed,
        rows.iter().filter(|r| r.verdict == Verdict::Info).count()
    );
    Ok(if failed == 0 { 0 } else { 1 })
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
