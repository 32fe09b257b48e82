//! `lowtide ladder …`: a bit-rate ladder over plain TCP (logic in
//! `lowtide_media::ladder`): a server that paces the chosen rung, and a player that
//! switches as a commercial player does, printing one JSON line per sample.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use lowtide_media::ladder::stream::{self, PlayConfig, ServerConfig};
use lowtide_media::ladder::throughput_rule::{ThroughputRule, ThroughputRuleConfig};
use lowtide_media::ladder::Ladder;

#[derive(Subcommand)]
pub enum LadderCommand {
    /// Serve the ladder to every client until SIGINT/SIGTERM.
    Serve(ServeArgs),
    /// Play from a ladder server: one JSON line per sample on stdout, a summary at the end.
    Play(PlayArgs),
}

#[derive(Args)]
pub struct ServeArgs {
    #[arg(long, default_value = "0.0.0.0:8450")]
    listen: SocketAddr,
    /// Rungs in kbit/s (default: Mehra's 450,350,262,60).
    #[arg(long, value_delimiter = ',')]
    rungs_kbps: Vec<u64>,
    /// Send at this multiple of the rung's rate (the Helix server of the paper: 1.15).
    #[arg(long, default_value_t = 1.15)]
    overdrive: f64,
    /// Congestion control of the served connections (set on the listener, which they
    /// inherit); default: the host's.
    #[arg(long)]
    congestion: Option<String>,
}

#[derive(Args)]
pub struct PlayArgs {
    #[arg(long)]
    to: SocketAddr,
    /// How long to play, seconds.
    #[arg(long, default_value_t = 60.0)]
    secs: f64,
    /// The first rung (0 = lowest); default the top.
    #[arg(long)]
    start: Option<usize>,
    /// Measurement interval, milliseconds.
    #[arg(long, default_value_t = 1000)]
    sample_ms: u64,
    /// The switching rule's constants (TOML: down_after_ms, down_below, up_after_ms,
    /// up_headroom, max_up_after_ms, startup_ms); defaults otherwise.
    #[arg(long)]
    rule: Option<PathBuf>,
}

pub fn run(cmd: LadderCommand) -> anyhow::Result<i32> {
    match cmd {
        LadderCommand::Serve(args) => serve(args),
        LadderCommand::Play(args) => play(args),
    }
}

fn serve(args: ServeArgs) -> anyhow::Result<i32> {
    let mut cfg = ServerConfig::mehra();
    if !args.rungs_kbps.is_empty() {
        let bps: Vec<u64> = args.rungs_kbps.iter().map(|k| k * 1000).collect();
        cfg.ladder = Ladder::new(&bps).context("--rungs-kbps")?;
    }
    cfg.overdrive = args.overdrive;
    cfg.check().context("--overdrive")?;
    let listener =
        TcpListener::bind(args.listen).with_context(|| format!("listening on {}", args.listen))?;
    if let Some(cc) = &args.congestion {
        lowtide_traffic::congestion::set_congestion_control(&listener, cc)
            .context("--congestion")?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    ctrlc::set_handler(move || s.store(true, Ordering::Relaxed))
        .context("installing the SIGINT/SIGTERM handler")?;
    eprintln!(
        "lowtide ladder: serving {:?} bit/s at {}x on {}",
        cfg.ladder.rates_bps(),
        cfg.overdrive,
        args.listen
    );
    stream::serve(listener, cfg, stop, |end| match end {
        Ok(r) => eprintln!(
            "lowtide ladder: a client left: {}",
            serde_json::to_string(&r).unwrap_or_default()
        ),
        Err(e) => eprintln!("lowtide ladder: a client ended with an error: {e}"),
    })?;
    Ok(0)
}

fn play(args: PlayArgs) -> anyhow::Result<i32> {
    anyhow::ensure!(
        args.secs > 0.0 && args.secs <= 86_400.0,
        "--secs {}: allowed is above 0 to 86400",
        args.secs
    );
    anyhow::ensure!(
        (10..=60_000).contains(&args.sample_ms),
        "--sample-ms {}: allowed is 10 to 60000",
        args.sample_ms
    );
    let rule: ThroughputRuleConfig = match &args.rule {
        Some(p) => toml::from_str(
            &std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?,
        )
        .with_context(|| format!("{}", p.display()))?,
        None => Default::default(),
    };
    rule.check().context("the switching rule")?;
    let s = TcpStream::connect(args.to).with_context(|| format!("connecting to {}", args.to))?;
    let report = stream::play(
        s,
        &PlayConfig {
            sample_interval: Duration::from_millis(args.sample_ms),
            duration: Duration::from_secs_f64(args.secs),
        },
        |ladder| {
            let start = args.start.unwrap_or(ladder.top());
            ThroughputRule::new(ladder, start, rule).map_err(|e| e.to_string())
        },
        |sample| println!("{}", serde_json::to_string(sample).unwrap_or_default()),
    )?;
    let summary = serde_json::json!({
        "summary": {
            "rates_bps": report.rates_bps,
            "mean_kbps": report.mean_kbps,
            "secs": report.secs,
            "bytes_by_rung": report.bytes_by_rung,
            "switches": report.samples.iter().filter(|s| s.switch.is_some()).count(),
            "ended_early": report.ended_early,
        }
    });
    println!("{summary}");
    Ok(0)
}
