//! `lowtide bwss …`: the host's BWSS daemon, its status, and programs run under the
//! `LD_PRELOAD` library (logic in `lowtide_bwss`).

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Subcommand};
use lowtide_bwss::client::Client;
use lowtide_bwss::daemon::{Daemon, DaemonOptions};
use lowtide_bwss::wire::{socket_name, SOCKET_ENV};
use lowtide_bwss::{Config, Status};

#[derive(Subcommand)]
pub enum BwssCommand {
    /// Run the host's daemon (one per host or network namespace) until SIGINT/SIGTERM.
    Daemon(DaemonArgs),
    /// Print every flow's target and measured rate, and sigma.
    Status(StatusArgs),
    /// Check a rule file and print how it reads.
    Check {
        /// The rule file (TOML).
        rules: PathBuf,
    },
    /// Run a program under liblowtide_bwss.so (LD_PRELOAD).
    Exec(ExecArgs),
}

#[derive(Args)]
pub struct DaemonArgs {
    /// Rule file (TOML); without it every flow has the default class.
    #[arg(long)]
    rules: Option<PathBuf>,
    /// Socket: `@name` (abstract, per network namespace) or a path [env LOWTIDE_BWSS_SOCKET].
    #[arg(long)]
    socket: Option<String>,
    /// Append each flow's rate per second (JSON lines) to this file.
    #[arg(long)]
    log: Option<PathBuf>,
    /// Measure and log every flow, steer none (sets `system.observe`).
    #[arg(long)]
    observe: bool,
}

#[derive(Args)]
pub struct StatusArgs {
    /// One JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Socket of the daemon [env LOWTIDE_BWSS_SOCKET].
    #[arg(long)]
    socket: Option<String>,
}

#[derive(Args)]
pub struct ExecArgs {
    /// The library [env LOWTIDE_BWSS_LIB; default: liblowtide_bwss.so beside this binary].
    #[arg(long)]
    lib: Option<PathBuf>,
    /// Socket of the daemon [env LOWTIDE_BWSS_SOCKET].
    #[arg(long)]
    socket: Option<String>,
    /// The program and its arguments.
    #[arg(trailing_var_arg = true, required = true)]
    command: Vec<String>,
}

pub fn run(cmd: BwssCommand) -> anyhow::Result<i32> {
    match cmd {
        BwssCommand::Daemon(args) => daemon(args),
        BwssCommand::Status(args) => status(args),
        BwssCommand::Check { rules } => {
            let cfg = Config::from_file(&rules)?;
            println!("{}", toml::to_string_pretty(&cfg)?);
            Ok(0)
        }
        BwssCommand::Exec(args) => exec(args),
    }
}

fn daemon(args: DaemonArgs) -> anyhow::Result<i32> {
    let mut config = match &args.rules {
        Some(path) => Config::from_file(path)?,
        None => Config::default(),
    };
    config.system.observe |= args.observe;
    let socket = args.socket.unwrap_or_else(socket_name);
    let daemon = Daemon::bind(DaemonOptions {
        socket,
        config,
        log: args.log,
    })?;
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    ctrlc::set_handler(move || s.store(true, Ordering::Relaxed))
        .context("installing the SIGINT/SIGTERM handler")?;
    eprintln!(
        "lowtide bwss: daemon on {} (rules: {})",
        daemon.socket(),
        args.rules
            .as_ref()
            .map_or("none".into(), |p| p.display().to_string())
    );
    daemon.run(stop).context("serving readers")?;
    Ok(0)
}

fn status(args: StatusArgs) -> anyhow::Result<i32> {
    let socket = args.socket.unwrap_or_else(socket_name);
    let status = Client::connect(&socket)
        .and_then(|mut c| c.status())
        .with_context(|| format!("asking the BWSS daemon at {socket} (is `lowtide bwss daemon` running in this network namespace?)"))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&status)?);
    } else {
        print!("{}", table(&status));
    }
    Ok(0)
}

fn kbps(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.0}"))
}

/// The status as a table (kbit/s).
fn table(s: &Status) -> String {
    let mut out = format!(
        "sigma {} kbit/s, measured {:.0} kbit/s, {} flows\n",
        kbps(s.sigma_kbps),
        s.aggregate_kbps,
        s.flows.len()
    );
    out += &format!(
        "{:>4} {:<12} {:<22} {:<22} {:<10} {:>4} {:>6} {:>6} {:>8} {:>8}\n",
        "id", "program", "local", "remote", "rule", "prio", "min", "weight", "target", "measured"
    );
    for f in &s.flows {
        out += &format!(
            "{:>4} {:<12} {:<22} {:<22} {:<10} {:>4} {:>6.0} {:>6} {:>8} {:>8}{}\n",
            f.id,
            f.program,
            f.local,
            f.remote,
            f.rule.as_deref().unwrap_or("default"),
            f.priority,
            f.min_kbps,
            f.weight,
            kbps(f.target_kbps),
            kbps(f.measured_kbps),
            if f.congested { " congested" } else { "" }
        );
    }
    out
}

fn exec(args: ExecArgs) -> anyhow::Result<i32> {
    let lib = match args
        .lib
        .or_else(|| std::env::var_os("LOWTIDE_BWSS_LIB").map(PathBuf::from))
    {
        Some(p) => p,
        None => std::env::current_exe()?
            .parent()
            .map(|d| d.join("liblowtide_bwss.so"))
            .context("locating this binary's folder")?,
    };
    anyhow::ensure!(
        lib.exists(),
        "{} does not exist: build it with `cargo build --release -p lowtide-bwss-preload`, or pass --lib",
        lib.display()
    );
    let mut cmd = std::process::Command::new(&args.command[0]);
    cmd.args(&args.command[1..]).env("LD_PRELOAD", &lib);
    if let Some(s) = args.socket {
        cmd.env(SOCKET_ENV, s);
    }
    let e = cmd.exec();
    Err(anyhow::anyhow!("running {:?}: {e}", args.command))
}
