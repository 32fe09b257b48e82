//! `lowtide demo`: the main job.

use std::path::PathBuf;

use clap::Args;
use lowtide_lab::demo::{self, DemoOptions};
use lowtide_lab::streams::outcome;

#[derive(Args)]
pub struct DemoArgs {
    /// The shorter form (27 s instead of 45 s).
    #[arg(long)]
    quick: bool,
    /// Folder for the report.
    #[arg(long, default_value = "out/demo")]
    out: PathBuf,
    /// Congestion control of every flow (cubic, reno, bbr); default cubic.
    #[arg(long)]
    cc: Option<String>,
    /// Exit 0 even when a goal the README promises is not met (for exploring).
    #[arg(long)]
    no_fail_on_goals: bool,
}

pub fn run(args: DemoArgs) -> anyhow::Result<i32> {
    let opts = DemoOptions {
        quick: args.quick,
        out_dir: args.out,
        congestion: args.cc,
    };
    println!(
        "lowtide demo: plain TCP and lowtide MinBuf(1,3), each with a latency stream and a \
         layered video, side by side through one emulated bottleneck (10 Mbit/s, 50 ms RTT, \
         3 elephants and 8 mice of cross traffic)"
    );
    let fail_on_goals = !args.no_fail_on_goals;
    let first = crate::lab::show(|progress| outcome(demo::run(&opts, progress), fail_on_goals))?;
    println!(
        "\nlowtide demo, part 2: real video (x264, 640x360, 2.5 Mbit/s) through GStreamer's \
         tcpserversink, then through lowtidesink, each on a link that falls from 6 to 1.5 Mbit/s \
         for 10 s; glass-to-glass latency stamped after the encoder, read after the decoder"
    );
    let second =
        crate::lab::show(|progress| outcome(demo::run_live(&opts, progress), fail_on_goals))?;
    Ok(first.max(second))
}
