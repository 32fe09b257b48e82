//! `lowtide lab run FILE` and `lowtide lab report DIR`: thin wrappers over lowtide-lab.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use lowtide_lab::results;
use lowtide_lab::runner::{self, LabOptions};
use lowtide_lab::scenario::{Checked, Overrides, Scenario};
use lowtide_lab::{fps_sweep, sweep};

#[derive(Subcommand)]
pub enum LabCommand {
    /// Runs a scenario file (scenarios/*.toml) and writes a run folder with report.html.
    Run(RunArgs),
    /// Recomputes a run folder's summary from its raw records (CSV), says where it differs
    /// from the stored summary.json, and re-renders report.html.
    Report {
        /// A folder written by `lowtide lab run`.
        dir: PathBuf,
    },
}

#[derive(Args)]
pub struct RunArgs {
    /// The scenario file.
    file: PathBuf,
    /// Runs per mode (overrides the scenario's run.runs, after --quick); for a BWSS scenario,
    /// trials of every variant.
    #[arg(long)]
    runs: Option<u32>,
    /// The scenario's [quick] form: times scaled down, one run (for CI).
    #[arg(long)]
    quick: bool,
    /// Output folder (default out/lab/NAME[-q<BDP>][-<CC>][-w<FRAMES>][-quick]; a sweep: NAME-sweep).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Sensitivity: the queue limit of both bottleneck directions, in BDP (e.g. 0.5 or 2).
    /// A list (0.5,1,2) sweeps: one run per value, and one index.html over all.
    #[arg(long, value_delimiter = ',')]
    queue_bdp: Vec<f64>,
    /// Sensitivity: congestion control of every TCP flow (hosts, variants, cross traffic).
    /// A list (reno,cubic,bbr) sweeps, combined with every --queue-bdp value.
    #[arg(long, value_delimiter = ',')]
    cc: Vec<String>,
    /// Frames per adaptation window of the layered video (Fig. 8: 4, Fig. 9: 2).
    #[arg(long)]
    window_frames: Option<u32>,
    /// The conference's latency threshold in ms; a list (100,200,500,...) sweeps (Erbad and
    /// Krasic, Fig. 5). Each list flag replaces the scenario's own `[sweep]` list.
    #[arg(long, value_delimiter = ',')]
    threshold_ms: Vec<f64>,
    /// Exit 0 even when a goal of the scenario is not met (for exploring).
    #[arg(long)]
    no_fail_on_goals: bool,
    /// Only these variants (rows), by name; a list ("DBAT TCP,DBAT TFRC"; a comma inside
    /// parentheses belongs to the name: "MinBuf(1,3),MinBuf(1,3)+failover"). Goals of the
    /// others are left out too.
    #[arg(long)]
    variant: Vec<String>,
    /// Write every packet leaving the bottleneck, per trial, to OUT/pcap/trial-N/ (forward.pcap,
    /// reverse.pcap, start.txt: the trial's start on the pcap's wall clock); for
    /// scripts/conference-split.py and scripts/stream-split.py. About 90 MB per minute at 12
    /// Mbit/s.
    #[arg(long)]
    pcap: bool,
}

/// Splits a `--variant` list at the commas outside parentheses (variant names such as
/// `MinBuf(1,3)` hold commas).
fn split_names(list: &str) -> Vec<String> {
    let (mut names, mut cur, mut depth) = (Vec::new(), String::new(), 0i32);
    for c in list.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth <= 0 => {
                names.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    names.push(cur);
    names.into_iter().filter(|n| !n.is_empty()).collect()
}

/// The scenario text with only the `[[variant]]` tables named in `keep` and the goals that
/// name only them; an unknown name is an error listing the scenario's variants.
fn only_variants(text: &str, keep: &[String]) -> anyhow::Result<String> {
    let mut doc: toml::Table =
        toml::from_str(text).context("parsing the scenario for --variant")?;
    let name_of = |v: &toml::Value| v.get("name").and_then(|n| n.as_str()).map(str::to_owned);
    let variants = match doc.get_mut("variant") {
        Some(toml::Value::Array(a)) => a,
        _ => anyhow::bail!("--variant: the scenario has no [[variant]] tables"),
    };
    let names: Vec<String> = variants.iter().filter_map(name_of).collect();
    if let Some(unknown) = keep.iter().find(|k| !names.contains(k)) {
        anyhow::bail!("--variant {unknown:?}: the scenario's variants are {names:?}");
    }
    variants.retain(|v| name_of(v).is_some_and(|n| keep.contains(&n)));
    if let Some(toml::Value::Array(goals)) = doc.get_mut("goal") {
        // A goal relative to another variant (RDC: `relative_to`) needs that one too.
        let kept = |g: &toml::Value, key: &str| {
            g.get(key)
                .and_then(|n| n.as_str())
                .is_none_or(|n| keep.iter().any(|k| k == n))
        };
        goals.retain(|g| kept(g, "variant") && kept(g, "relative_to"));
    }
    Ok(toml::to_string(&doc)?)
}

pub fn run(cmd: LabCommand) -> anyhow::Result<i32> {
    match cmd {
        LabCommand::Run(args) => run_scenario(args),
        LabCommand::Report { dir } => {
            let done = runner::recompute(&dir)
                .with_context(|| format!("recomputing the summary in {}", dir.display()))?;
            if done.differences.is_empty() {
                println!("the summary recomputed from the records matches the stored one");
            } else {
                println!(
                    "the summary recomputed from the records differs from the stored one in {} places \
                     (the stored one is kept as {}):",
                    done.differences.len(),
                    lowtide_lab::render::SUMMARY_STORED
                );
                for d in &done.differences {
                    println!("  {d}");
                }
            }
            print!("{}", results::text_table(&done.summary));
            println!("report: {}", done.report.display());
            Ok(0)
        }
    }
}

fn run_scenario(args: RunArgs) -> anyhow::Result<i32> {
    let mut text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("reading scenario {}", args.file.display()))?;
    if !args.variant.is_empty() {
        let names: Vec<String> = args.variant.iter().flat_map(|v| split_names(v)).collect();
        text = only_variants(&text, &names)?;
    }
    let folder = args.file.parent().unwrap_or(std::path::Path::new("."));
    let special =
        lowtide_lab::rdc::is_rdc_scenario(&text) || lowtide_lab::bwss::is_bwss_scenario(&text);
    anyhow::ensure!(
        !(special && args.pcap),
        "--pcap is for the lab's own scenarios, not RDC or BWSS ones"
    );
    if lowtide_lab::rdc::is_rdc_scenario(&text) {
        return run_rdc(&args, &text, folder);
    }
    if lowtide_lab::bwss::is_bwss_scenario(&text) {
        let folder = folder.to_path_buf();
        return run_bwss(args, text, &folder);
    }
    let checked = Scenario::from_toml_in(&text, folder)
        .with_context(|| format!("checking scenario {}", args.file.display()))?;
    if let Some(n) = args.runs {
        if !(1..=lowtide_lab::scenario::MAX_RUNS).contains(&n) {
            anyhow::bail!(
                "--runs {n} is outside 1 to {}",
                lowtide_lab::scenario::MAX_RUNS
            );
        }
    }
    let combos = sweep::planned(
        &checked.scenario,
        &args.cc,
        &args.queue_bdp,
        args.window_frames,
        &args.threshold_ms,
    );
    if combos.len() > 1 {
        return run_sweep(args, text, &checked, &combos);
    }
    let overrides = combos.into_iter().next().unwrap_or_default();
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
        pcap: args.pcap,
        ..LabOptions::default()
    };
    println!(
        "lowtide lab: {name}{} from {}",
        if args.quick { " (--quick)" } else { "" },
        args.file.display()
    );
    show(!args.no_fail_on_goals, |progress| {
        runner::run(&checked, &opts, progress)
    })
}

/// A BWSS scenario (`[bwss]`, Mehra Fig. 4-6): real daemon, preload library and programs.
fn run_bwss(args: RunArgs, text: String, folder: &std::path::Path) -> anyhow::Result<i32> {
    use lowtide_lab::bwss::{self, BwssOptions, BwssScenario, Tools};
    anyhow::ensure!(
        args.queue_bdp.is_empty()
            && args.cc.is_empty()
            && args.window_frames.is_none()
            && args.threshold_ms.is_empty(),
        "a BWSS scenario takes only --quick, --runs, --variant, --out and --no-fail-on-goals"
    );
    let mut s = BwssScenario::from_toml_in(&text, folder)
        .with_context(|| format!("checking scenario {}", args.file.display()))?;
    if args.quick {
        s = s.quick_form().context("the --quick form")?;
    }
    if let Some(n) = args.runs {
        s = s.with_runs(n).context("--runs")?;
    }
    let out_dir = args.out.unwrap_or_else(|| {
        PathBuf::from("out/lab").join(format!(
            "{}{}",
            s.name,
            if args.quick { "-quick" } else { "" }
        ))
    });
    let opts = BwssOptions {
        scenario_text: text,
        out_dir,
        tools: Tools::find()?,
        seed: 1,
    };
    println!(
        "lowtide lab: {}{} from {} (BWSS)",
        s.name,
        if args.quick { " (--quick)" } else { "" },
        args.file.display()
    );
    let result = bwss::run(&s, &opts, progress_line());
    eprintln!();
    let done = match result {
        Ok(done) => done,
        Err(lowtide_lab::LabError::Partial { error, dir }) => {
            println!("partial report: {}", dir.join("report.html").display());
            anyhow::bail!("the run failed: {error}");
        }
        Err(e) => return Err(e.into()),
    };
    print!("{}", bwss::report::text_table(&done.summary));
    println!("report: {}", done.dir.join("report.html").display());
    let missed = done.summary.goals_not_met();
    if missed > 0 {
        eprintln!("{missed} goal(s) not met");
    }
    Ok(i32::from(missed > 0 && !args.no_fail_on_goals))
}

/// An RDC scenario (`[rdc]`): one trial per variant, bulk flows, the agent in the receivers.
fn run_rdc(args: &RunArgs, text: &str, folder: &std::path::Path) -> anyhow::Result<i32> {
    use lowtide_lab::rdc::{self, RdcOptions, RdcScenario};
    let s = RdcScenario::from_toml_in(text, folder)
        .with_context(|| format!("checking scenario {}", args.file.display()))?;
    if args.runs.is_some()
        || !args.queue_bdp.is_empty()
        || !args.cc.is_empty()
        || args.window_frames.is_some()
        || !args.threshold_ms.is_empty()
    {
        anyhow::bail!(
            "--runs, --queue-bdp, --cc, --window-frames and --threshold-ms do not apply to an \
             RDC scenario ([rdc])"
        );
    }
    let out_dir = args.out.clone().unwrap_or_else(|| {
        PathBuf::from("out/lab").join(format!(
            "{}{}",
            s.name,
            if args.quick { "-quick" } else { "" }
        ))
    });
    println!(
        "lowtide lab: {}{} from {}",
        s.name,
        if args.quick { " (--quick)" } else { "" },
        args.file.display()
    );
    let opts = RdcOptions {
        quick: args.quick,
        out_dir: out_dir.clone(),
    };
    let summary = rdc::run(&s, &opts, &mut progress_line());
    eprintln!();
    let summary = summary?;
    print!("{}", rdc::text_table(&summary));
    println!(
        "run folder: {} (open {}; {})",
        out_dir.display(),
        rdc::REPORT,
        rdc::SUMMARY
    );
    let goals_met = summary.goals.iter().all(|g| g.met);
    Ok(if !summary.errors.is_empty() {
        2
    } else if goals_met || args.no_fail_on_goals {
        0
    } else {
        1
    })
}

/// Several combinations of --cc and --queue-bdp: one run folder each, one index.
fn run_sweep(
    args: RunArgs,
    text: String,
    checked: &Checked,
    combos: &[Overrides],
) -> anyhow::Result<i32> {
    let name = &checked.scenario.name;
    let out_dir = args.out.unwrap_or_else(|| {
        PathBuf::from("out/lab").join(format!(
            "{name}-sweep{}{}",
            args.window_frames
                .map_or(String::new(), |w| format!("-w{w}")),
            if args.quick { "-quick" } else { "" }
        ))
    });
    let opts = LabOptions {
        scenario_text: text,
        quick: args.quick,
        runs: args.runs,
        out_dir,
        pcap: args.pcap,
        ..LabOptions::default()
    };
    println!(
        "lowtide lab: {name}, {} combinations (congestion control, queue, latency threshold){}",
        combos.len(),
        if args.quick { " (--quick)" } else { "" }
    );
    let points = sweep::run(checked, &opts, combos, progress_line())?;
    eprintln!();
    print!("{}", sweep::text_table(&points));
    let mut fps_missed = 0;
    if let Some(goal) = checked
        .scenario
        .sweep
        .as_ref()
        .and_then(|s| s.fps_goal.as_ref())
    {
        let fps: Vec<_> = points.iter().map(fps_sweep::FpsAt::of).collect();
        let rows = fps_sweep::goal_rows(&fps, goal);
        fps_missed = rows
            .iter()
            .flat_map(|r| &r.variants)
            .filter(|c| !c.met)
            .count();
        print!("{}", fps_sweep::goal_text(&rows, goal));
    }
    println!("index: {}", opts.out_dir.join(sweep::INDEX).display());
    let summaries: Vec<&results::LabSummary> = points.iter().map(|p| &p.summary).collect();
    let code = exit_code(&summaries, !args.no_fail_on_goals);
    if fps_missed > 0 {
        eprintln!(
            "the sweep's frame-rate goal is not met at {fps_missed} (variant, combination) pairs"
        );
    }
    Ok(if fps_missed > 0 && !args.no_fail_on_goals {
        1
    } else {
        code
    })
}

/// A progress line that rewrites itself: seconds since it was made, then what is going on.
fn progress_line() -> impl FnMut(&str) {
    let started = std::time::Instant::now();
    move |what: &str| {
        eprint!(
            "\r\x1b[2K[{:>6.1} s] {what}",
            started.elapsed().as_secs_f64()
        )
    }
}

/// Runs a lab run with a live progress line, then prints its table and names its report.
/// Exit code: 0 when every goal was met and every measurement worked, 1 when not (goals only
/// with `fail_on_goals`); a failed run is an error (2), after its partial report.
pub fn show(
    fail_on_goals: bool,
    run: impl FnOnce(&mut dyn FnMut(&str)) -> Result<runner::LabRun, lowtide_lab::LabError>,
) -> anyhow::Result<i32> {
    let result = run(&mut progress_line());
    eprintln!();
    let done = match result {
        Ok(done) => done,
        Err(lowtide_lab::LabError::Partial { error, dir }) => {
            if let Ok(s) = results::read_json(&dir.join(lowtide_lab::render::SUMMARY)) {
                print!("{}", results::text_table(&s));
            }
            println!("partial report: {}", dir.join("report.html").display());
            anyhow::bail!("the run failed: {error}");
        }
        Err(e) => return Err(e.into()),
    };
    print!("{}", results::text_table(&done.summary));
    println!("report: {}", done.dir.join("report.html").display());
    Ok(exit_code(&[&done.summary], fail_on_goals))
}

/// 1 when a measurement failed, or (with `fail_on_goals`) a goal was not met; else 0.
fn exit_code(summaries: &[&results::LabSummary], fail_on_goals: bool) -> i32 {
    let errors = summaries.iter().any(|s| !s.measurement_errors.is_empty());
    let missed: usize = summaries.iter().map(|s| s.goals_not_met()).sum();
    if errors {
        eprintln!("some measurements failed (see MEASUREMENT ERROR above): exit code 1");
    }
    if missed > 0 {
        eprintln!(
            "{missed} goal(s) not met{}",
            if fail_on_goals {
                ": exit code 1 (--no-fail-on-goals to explore)"
            } else {
                ""
            }
        );
    }
    i32::from(errors || (fail_on_goals && missed > 0))
}

#[cfg(test)]
mod tests {
    use super::{only_variants, split_names};

    #[test]
    fn variant_lists_split_outside_parentheses() {
        assert_eq!(
            split_names("MinBuf(1,3),MinBuf(1,3)+failover,DBAT TCP"),
            ["MinBuf(1,3)", "MinBuf(1,3)+failover", "DBAT TCP"]
        );
        assert_eq!(split_names("A,,B"), ["A", "B"]);
    }

    #[test]
    fn only_variants_keeps_the_named_rows_and_their_goals() {
        let text = r#"
name = "x"
[[variant]]
name = "A"
[[variant]]
name = "B b"
[[goal]]
variant = "A"
metric = "m"
[[goal]]
variant = "B b"
metric = "m"
[[goal]]
variant = "B b"
metric = "m"
relative_to = "A"
"#;
        let out: toml::Table =
            toml::from_str(&only_variants(text, &["B b".into()]).unwrap()).unwrap();
        let names = |k: &str, f: &str| -> Vec<String> {
            out[k]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v[f].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(names("variant", "name"), ["B b"]);
        assert_eq!(names("goal", "variant"), ["B b"]);
        assert_eq!(out["name"].as_str(), Some("x"));
        let err = only_variants(text, &["C".into()]).unwrap_err().to_string();
        assert!(err.contains("\"C\"") && err.contains("B b"), "{err}");
    }
}
