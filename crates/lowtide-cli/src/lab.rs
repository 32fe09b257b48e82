//! `lowtide lab run FILE` and `lowtide lab report DIR`: thin wrappers over lowtide-lab, the
//! scenario's kind told by its registry (`lowtide_lab::experiment`).

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use lowtide_lab::experiment::{registry, Finished, RunRequest, Stopped};

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
    /// crates/lowtide-lab/analysis/conference-split.py and crates/lowtide-lab/analysis/stream-split.py. About 90 MB per minute at 12
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
            let recomputed = registry::of_run_folder(&dir)
                .map_err(anyhow::Error::from)
                .and_then(|experiment| Ok(experiment.report(&dir)?))
                .with_context(|| format!("recomputing the summary in {}", dir.display()))?;
            print_finished(recomputed)
        }
    }
}

/// Reads the scenario, tells its kind through the registry (warning when the file does not
/// name it), has the kind check it with the flags, then runs it.
fn run_scenario(args: RunArgs) -> anyhow::Result<i32> {
    let mut text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("reading scenario {}", args.file.display()))?;
    if !args.variant.is_empty() {
        let names: Vec<String> = args.variant.iter().flat_map(|v| split_names(v)).collect();
        text = only_variants(&text, &names)?;
    }
    let resolved = registry::resolve(&text)
        .with_context(|| format!("checking scenario {}", args.file.display()))?;
    if let Some(warning) = resolved.warning() {
        eprintln!("warning: {}: {warning}", args.file.display());
    }
    let request = RunRequest {
        file: args.file,
        quick: args.quick,
        runs: args.runs,
        out: args.out,
        queue_bdp: args.queue_bdp,
        cc: args.cc,
        window_frames: args.window_frames,
        threshold_ms: args.threshold_ms,
        pcap: args.pcap,
        fail_on_goals: !args.no_fail_on_goals,
    };
    let prepared = resolved.experiment.prepare(&text, &request)?;
    println!("lowtide lab: {}", prepared.headline());
    show(|progress| prepared.run(progress))
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
/// Exit code: the run's ([`Finished::exit_code`]); a run that stopped is an error (2), after
/// what it measured and its partial report.
pub fn show(
    run: impl FnOnce(&mut dyn FnMut(&str)) -> Result<Finished, Stopped>,
) -> anyhow::Result<i32> {
    let result = run(&mut progress_line());
    eprintln!();
    match result {
        Ok(finished) => print_finished(finished),
        Err(stopped) => {
            print!("{}", stopped.text);
            Err(stopped.error.into())
        }
    }
}

/// Prints what a run or a recomputed folder says, its notes on standard error, and gives
/// its exit code.
fn print_finished(finished: Finished) -> anyhow::Result<i32> {
    print!("{}", finished.text);
    for note in &finished.notes {
        eprintln!("{note}");
    }
    Ok(finished.exit_code)
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
kind = "streams"
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
        // The experiment's kind survives, so the selection runs as the same kind.
        assert_eq!(out["kind"].as_str(), Some("streams"));
        let err = only_variants(text, &["C".into()]).unwrap_err().to_string();
        assert!(err.contains("\"C\"") && err.contains("B b"), "{err}");
    }
}
