//! `lowtide demo`: the main job.

use std::path::PathBuf;

use clap::Args;
use lowtide_lab::demo::{self, DemoOptions};

#[derive(Args)]
pub struct DemoArgs {
    /// Length of the run in seconds (statistics start at 10 s).
    #[arg(long, default_value_t = 45.0)]
    duration: f64,
    /// Folder for the report.
    #[arg(long, default_value = "out/demo")]
    out: PathBuf,
    /// Congestion control of every flow (cubic, reno, bbr).
    #[arg(long, default_value = "cubic")]
    cc: String,
}

pub fn run(args: DemoArgs) -> anyhow::Result<i32> {
    if !(20.0..=3600.0).contains(&args.duration) {
        anyhow::bail!("--duration {} is outside 20 to 3600 seconds", args.duration);
    }
    let opts = DemoOptions {
        duration_s: args.duration,
        out_dir: args.out,
        congestion: args.cc,
    };
    println!("lowtide demo: plain TCP and lowtide MinBuf(1,3) side by side through one emulated bottleneck");
    let started = std::time::Instant::now();
    let summary = demo::run(&opts, |what| {
        eprint!(
            "\r[{:>5.1} s] {what}      ",
            started.elapsed().as_secs_f64()
        );
    })?;
    eprintln!();
    println!("{}", demo::table(&summary));
    println!("report: {}", summary.report.display());
    Ok(0)
}
