//! The `lowtide` command: thin wrappers over the libraries.

mod advice;
mod bench;
mod bwss;
mod demo;
mod lab;
mod ladder;
mod media;
mod netem;
mod pipe;
mod rdc;
mod serve;
mod stamp;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "lowtide",
    version,
    about = "Low-latency adaptive streaming over TCP, and the lab that measures it"
)]
struct Cli {
    /// Logs as JSON lines on standard error (one object per event: time, level, target,
    /// fields), for a log collector; the level filter is RUST_LOG's (default: warnings).
    #[arg(long, global = true)]
    log_json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The main job: plain TCP and lowtide side by side through an emulated bottleneck with
    /// cross traffic; prints the latency table and writes an HTML report.
    Demo(demo::DemoArgs),
    /// Transport benchmarks over loopback against raw TCP measured in the same run.
    Bench(bench::BenchArgs),
    /// Scenario runs: `lab run FILE` (side by side and sequential, report.html), `lab report DIR`.
    #[command(subcommand)]
    Lab(lab::LabCommand),
    /// Stream layered video to `lowtide recv` with priority-progress streaming, or with
    /// `--input -` an encoded stream from a pipe (ffmpeg's `-f h264 -`, `-f ivf -`).
    Send(media::SendArgs),
    /// Receive a `lowtide send` stream and report what a viewer saw, or with `--output -`
    /// write an encoded stream to a pipe (`| ffmpeg -i - ...`, `| ffplay -`).
    Recv(media::RecvArgs),
    /// Put the capture instant into an H.264/H.265 stream as an SEI message, or with
    /// `--measure FILE` read it after a transport: latency measured the same way over any.
    Stamp(stamp::StampArgs),
    /// The emulated network: check it, clean up after killed runs, run a command behind it.
    #[command(subcommand)]
    Netem(netem::NetemCommand),
    /// Receiver bandwidth sharing among this host's TCP flows: the daemon, its status, and
    /// programs run under the LD_PRELOAD library.
    #[command(subcommand)]
    Bwss(bwss::BwssCommand),
    /// A bit-rate ladder over plain TCP: `ladder serve` paces the chosen rung, `ladder play`
    /// switches as a commercial player does and prints its rates per sample.
    #[command(subcommand)]
    Ladder(ladder::LadderCommand),
    /// The RDC receiver agent: holds this host's ACKs by the delay routers ask for (NFQUEUE);
    /// `rdc cleanup` removes a killed agent's rules, `rdc bench` measures the agent.
    Rdc(rdc::RdcArgs),
    /// Live video to browsers: publishers in over lowtide (or a local --source), viewers out
    /// over WebSocket, each viewer's socket under its own latency controller.
    Serve(serve::ServeArgs),
    /// A light viewer of a `lowtide serve` stream: times every unit and checks it decodes.
    Watch(serve::WatchArgs),
}

fn main() {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        // tiny_skia warns of zero-length strokes (a one-run confidence whisker).
        tracing_subscriber::EnvFilter::new(
            "warn,rattan_core=error,rattan_env=error,tiny_skia=error",
        )
    });
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if cli.log_json {
        logs.json().init();
    } else {
        logs.init();
    }
    let role = match &cli.command {
        Command::Send(_) => advice::Role::Send,
        Command::Recv(_) => advice::Role::Recv,
        Command::Serve(_) => advice::Role::Serve,
        Command::Watch(_) => advice::Role::Watch,
        _ => advice::Role::Other,
    };
    let result = match cli.command {
        Command::Bench(args) => bench::run(args).map(|()| 0),
        Command::Demo(args) => demo::run(args),
        Command::Netem(cmd) => netem::run(cmd),
        Command::Bwss(cmd) => bwss::run(cmd),
        Command::Lab(cmd) => lab::run(cmd),
        Command::Ladder(cmd) => ladder::run(cmd),
        Command::Send(args) => media::send(args),
        Command::Recv(args) => media::recv(args),
        Command::Stamp(args) => stamp::run(args),
        Command::Rdc(args) => rdc::run(args),
        Command::Serve(args) => serve::serve(args),
        Command::Watch(args) => serve::watch(args),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            // Each layer of the chain says only its own part (see `advice`), then the fix.
            match advice::advice(role, &e) {
                Some(fix) => eprintln!("error: {e:#}; {fix}"),
                None => eprintln!("error: {e:#}"),
            }
            std::process::exit(2);
        }
    }
}
