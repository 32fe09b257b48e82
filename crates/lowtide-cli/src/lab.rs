//! `lowtide lab run FILE` and `lowtide lab report DIR`: thin wrappers over lowtide-lab.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use lowtide_lab::results::LabSummary;
use lowtide_lab::runner::{self, LabOptions};
use lowtide_lab::scenario::{Overrides, Scenario};

#[derive(Subcommand)]
pub enum LabCommand {
    /// Runs a scenario file (scenarios/*.toml) and writes a run folder with report.html.
    Run(RunArgs),
    /// Re-renders report.html from a run folder's summary.json and messages.csv.
    Report {
        /// A folder written by `lowtide lab run`.
        dir: PathBuf,
    },
}

#[derive(Args)]
pub struct RunArgs {
    /// The scenario file.
    file: PathBuf,
    /// Runs per mode (overrides the scenario's run.runs, after --quick).
    #[arg(long)]
    runs: Option<u32>,
    /// The scenario's [quick] form: times scaled down, one run (for CI).
    #[arg(long)]
    quick: bool,
    /// Output folder (default out/lab/NAME[-q<BDP>][-<CC>][-quick]).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Sensitivity: the queue limit of both bottleneck directions, in BDP (e.g. 0.5 or 2).
    #[arg(long)]
    queue_bdp: Option<f64>,
    /// Sensitivity: congestion control of every TCP flow (hosts, variants, cross traffic).
    #[arg(long)]
    cc: Option<String>,
}

pub fn run(cmd: LabCommand) -> anyhow::Result<i32> {
    match cmd {
        LabCommand::Run(args) => run_scenario(args),
        LabCommand::Report { dir } => {
            let path = runner::rerender(&dir)
                .with_context(|| format!("re-rendering the report in {}", dir.display()))?;
            println!("report: {}", path.display());
            Ok(0)
        }
    }
}

fn run_scenario(args: RunArgs) -> anyhow::Result<i32> {
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("reading scenario {}", args.file.display()))?;
    let checked = Scenario::from_toml(&text)
        .with_context(|| format!("checking scenario {}", args.file.display()))?;
    if let Some(n) = args.runs {
        if !(1..=lowtide_lab::scenario::MAX_RUNS).contains(&n) {
            anyhow::bail!(
                "--runs {n} is outside 1 to {}",
                lowtide_lab::scenario::MAX_RUNS
            );
        }
    }
    let overrides = Overrides {
        queue_bdp: args.queue_bdp,
        congestion: args.cc,
    };
    let name = &checked.scenario.name;
    let out_dir = args.out.unwrap_or_else(|| {
        PathBuf::from("out/lab").join(format!(
            "{name}{}{}",
            overrides.suffix(),
            if args.quick { "-quick" } else { "" }
        ))
    });
    let opts = LabOptions {
        scenario_text: text,
        quick: args.quick,
        runs: args.runs,
        overrides,
        out_dir,
    };
    println!(
        "lowtide lab: {name}{} from {}",
        if args.quick { " (--quick)" } else { "" },
        args.file.display()
    );
    let started = std::time::Instant::now();
    let done = runner::run(&checked, &opts, |what| {
        eprint!(
            "\r\x1b[2K[{:>6.1} s] {what}",
            started.elapsed().as_secs_f64()
        );
    })?;
    eprintln!();
    print!("{}", table(&done.summary));
    println!("report: {}", done.dir.join("report.html").display());
    Ok(0)
}

/// The printed table: per mode and variant, latency, share over 160 ms, goodput.
fn table(s: &LabSummary) -> String {
    let mut out = format!(
        "{:<13} {:<22} {:>8} {:>8} {:>9} {:>12} {:>9} {:>8}\n",
        "mode", "variant", "p50 ms", "p99 ms", "ss p99", "over 160 ms", "Mbit/s", "vs TCP"
    );
    for v in &s.variants {
        out.push_str(&format!(
            "{:<13} {:<22} {:>8.1} {:>8.1} {:>9.1} {:>11.1}% {:>9.2} {:>8}\n",
            v.mode.as_str(),
            v.name,
            v.latency_ms.p50,
            v.latency_ms.p99,
            v.sender_side_ms.p99,
            v.latency_ms.share_over(160.0) * 100.0,
            v.goodput_bps / 1e6,
            v.goodput_vs_baseline
                .map_or("-".into(), |r| format!("{:.0}%", r * 100.0)),
        ));
    }
    let f = &s.floor.latency_ms;
    out.push_str(&format!(
        "{:<13} {:<22} {:>8.1} {:>8.1} {:>9} {:>11.1}%\n",
        "",
        "network floor (UDP)",
        f.p50,
        f.p99,
        "-",
        f.share_over(160.0) * 100.0
    ));
    for g in &s.goals {
        out.push_str(&format!(
            "goal {}: {} {} = {} ({})\n",
            if g.met { "met" } else { "NOT met" },
            g.goal.variant,
            g.goal.metric.as_str(),
            g.measured.map_or("-".into(), |m| format!("{m:.3}")),
            g.goal.why
        ));
    }
    out
}
