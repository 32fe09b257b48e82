//! BWSS in the lab: Mehra, "Efficient Video Streaming using TCP", Section 4 (Fig. 4-6). A
//! receiver behind a 960 kbit/s access link runs a bit-rate-ladder video and bulk downloads;
//! a CBR UDP flow from another host interferes from 60 to 100 s. Plain TCP, the video over
//! a TCP-friendly UDP protocol, and BWSS (the video first, with a minimum rate) are compared
//! by the video's rate per second.
//!
//! Everything is a real program in the emulated network: `lowtide bwss daemon` on the
//! receiver (observing only in the variants without BWSS, so every flow is measured the same
//! way), `lowtide ladder serve`/`play` for the video (the player under the `LD_PRELOAD`
//! library), and unmodified `curl` fetching from `python3 -m http.server`, also under the
//! library. Variants run one after another, each trial in a fresh dumbbell; a variant with
//! several trials (`runs`) has its seconds pooled, and trials run in rounds.
//!
//! - [`experiment`]: its entry behind the lab's [`Experiment`](crate::experiment::Experiment)
//!   (`kind = "bwss"`);
//! - [`scenario`]: the scenario file (`[bwss]`), checked;
//! - [`procs`]: the programs, found before the run, stopped and reaped by their guards;
//! - [`trial`]: one variant's trial and its per-second rates;
//! - [`tfrc_video`]: the ladder over TFRC (the paper's UDP case);
//! - [`summary`]: the video's numbers, link utilization, goals;
//! - [`report`]: the plots, `report.html` and the printed table.

pub mod experiment;
pub mod procs;
pub mod report;
pub mod scenario;
pub mod summary;
pub mod tfrc_video;
pub mod trial;

use std::path::{Path, PathBuf};

pub use procs::Tools;
pub use scenario::BwssScenario;
use summary::{BwssSummary, VariantRecord};

use crate::LabError;

/// What `lab run` was told besides the scenario.
#[derive(Debug, Clone)]
pub struct BwssOptions {
    /// The scenario file's text, copied into the run folder.
    pub scenario_text: String,
    pub out_dir: PathBuf,
    pub tools: Tools,
    /// Emulator seed.
    pub seed: u64,
}

/// A finished run.
#[derive(Debug)]
pub struct BwssRun {
    pub summary: BwssSummary,
    pub records: Vec<VariantRecord>,
    pub dir: PathBuf,
}

/// Runs every variant and writes the run folder (`summary.json`, `rates.csv`,
/// `report.html`, one plot per variant, and per variant a folder with the daemon's log and
/// every program's output). When a variant fails the folder still gets what was measured,
/// and the error says where.
pub fn run(
    s: &BwssScenario,
    opts: &BwssOptions,
    mut progress: impl FnMut(&str),
) -> Result<BwssRun, LabError> {
    let dir = &opts.out_dir;
    std::fs::create_dir_all(dir)
        .map_err(|e| LabError::io(format!("creating {}", dir.display()), e))?;
    let trials = trial_order(s);
    let mut records = vec![];
    let mut failed = None;
    for (k, (i, run)) in trials.iter().copied().enumerate() {
        let v = &s.variants[i];
        let runs = s.runs_of(v);
        let label = if runs > 1 {
            format!("{} (trial {} of {runs})", v.name, run + 1)
        } else {
            v.name.clone()
        };
        progress(&format!("[{}/{}] {label}", k + 1, trials.len()));
        let mut r = trial::run_variant(
            s,
            v,
            opts.seed + u64::from(run),
            &opts.tools,
            &dir.join(trial_folder(i, run)),
            &mut progress,
        );
        r.run = run;
        let stop = r.failed.clone();
        records.push(r);
        if let Some(e) = stop {
            failed = Some(format!("{label}: {e}"));
            break;
        }
    }
    progress("writing the report");
    let variants = summary::summarize(s, &records);
    let summary = BwssSummary {
        name: s.name.clone(),
        paper: format!("{}: {}", s.paper.figure, s.paper.text),
        goals: summary::check_goals(s, &variants),
        variants,
        provenance: provenance(s, opts),
        failed: failed.clone(),
    };
    write_folder(dir, s, opts, &summary, &records)?;
    let run = BwssRun {
        summary,
        records,
        dir: dir.clone(),
    };
    match failed {
        Some(e) => Err(LabError::Partial {
            error: Box::new(LabError::io("the BWSS run", e)),
            dir: dir.clone(),
        }),
        None => Ok(run),
    }
}

/// The trials in the order they run, as (variant index, trial): in rounds, every variant
/// with trials left once per round, so slow drift of a shared machine falls on all alike.
pub fn trial_order(s: &BwssScenario) -> Vec<(usize, u32)> {
    let most = s.variants.iter().map(|v| s.runs_of(v)).max().unwrap_or(0);
    (0..most)
        .flat_map(|run| {
            s.variants
                .iter()
                .enumerate()
                .filter(move |(_, v)| run < s.runs_of(v))
                .map(move |(i, _)| (i, run))
        })
        .collect()
}

/// A trial's folder: `variant-I` for a variant's first trial, `variant-I-trial-K` (K from 2)
/// for the others.
pub fn trial_folder(variant: usize, run: u32) -> String {
    format!("variant-{variant}{}", trial_suffix(run))
}

/// What names a trial's files after its variant's: nothing for the first trial (a scenario
/// of one trial per variant names its files as before), `-trial-K` (K from 2) for the others.
pub fn trial_suffix(run: u32) -> String {
    match run {
        0 => String::new(),
        k => format!("-trial-{}", k + 1),
    }
}

fn write_folder(
    dir: &Path,
    s: &BwssScenario,
    opts: &BwssOptions,
    summary: &BwssSummary,
    records: &[VariantRecord],
) -> Result<(), LabError> {
    let write = |name: &str, text: &str| {
        std::fs::write(dir.join(name), text)
            .map_err(|e| LabError::io(format!("writing {}", dir.join(name).display()), e))
    };
    write("scenario.toml", &opts.scenario_text)?;
    let json = serde_json::to_string_pretty(summary)
        .map_err(|e| LabError::io("encoding summary.json", e))?;
    write("summary.json", &json)?;
    write(
        "records.json",
        &serde_json::to_string(records).unwrap_or_default(),
    )?;
    let mut csv = String::from("variant,trial,second,flow,kind,kbps,target_kbps\n");
    let opt = |x: Option<f64>| x.map_or(String::new(), |x| format!("{x:.1}"));
    for r in records {
        for f in &r.flows {
            for (k, x) in f.kbps.iter().enumerate() {
                let t = f.target_kbps.get(k).copied().flatten();
                csv += &format!(
                    "{},{},{k},{},{:?},{},{}\n",
                    r.variant,
                    r.run + 1,
                    f.name,
                    f.kind,
                    opt(*x),
                    opt(t)
                );
            }
        }
        for (k, x) in r.link_kbps.iter().enumerate() {
            csv += &format!("{},{},{k},link,Link,{},\n", r.variant, r.run + 1, opt(*x));
        }
    }
    write("rates.csv", &csv)?;
    for r in records {
        if let Some(i) = s.variants.iter().position(|v| v.name == r.variant) {
            report::rates_plot(&dir.join(report::plot_name(i, r.run)), s, r)?;
        }
    }
    write("report.html", &report::html(s, summary))
}

fn provenance(s: &BwssScenario, opts: &BwssOptions) -> Vec<(String, String)> {
    let git = crate::runner::git_revision();
    vec![
        (
            "command".into(),
            std::env::args().collect::<Vec<_>>().join(" "),
        ),
        (
            "scenario".into(),
            format!("{} (scenario.toml here)", s.name),
        ),
        ("git revision".into(), git),
        (
            "kernel".into(),
            std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_string(),
        ),
        (
            "network".into(),
            crate::runner::describe_network(&s.topology),
        ),
        ("seed".into(), opts.seed.to_string()),
        ("lowtide".into(), opts.tools.lowtide.display().to_string()),
        ("curl".into(), opts.tools.curl.display().to_string()),
        ("python3".into(), opts.tools.python3.display().to_string()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(runs: &str) -> Result<BwssScenario, crate::scenario::ScenarioError> {
        BwssScenario::from_toml_in(
            &format!(
                r#"
kind = "bwss"
name = "t"
[run]
duration_s = 50.0
{runs}
[topology]
senders = 2
receivers = 2
forward = {{ rate_mbps = 0.96, delay_ms = 15.0 }}
reverse = {{ rate_mbps = 0.96, delay_ms = 15.0 }}
[bwss]
downloads = 1
server_overdrive = 1.25
interference = {{ start_s = 20.0, stop_s = 40.0, rate_kbps = 240 }}
[[bwss.rules.rule]]
name = "video"
remote_port = 8450
min_kbps = 520
[[variant]]
name = "A"
video = "tcp"
steer = false
[[variant]]
name = "B"
video = "tcp"
steer = true
runs = 3
"#
            ),
            Path::new("."),
        )
    }

    #[test]
    fn trials_run_in_rounds_each_variant_as_often_as_it_asks() {
        let s = scenario("runs = 2").unwrap();
        assert_eq!(
            trial_order(&s),
            vec![(0, 0), (1, 0), (0, 1), (1, 1), (1, 2)]
        );
        assert_eq!(trial_folder(1, 0), "variant-1");
        assert_eq!(trial_folder(1, 2), "variant-1-trial-3");
        // --quick caps every variant at quick.runs (1); --runs sets every variant.
        assert_eq!(trial_order(&s.quick_form().unwrap()), vec![(0, 0), (1, 0)]);
        assert_eq!(trial_order(&s.with_runs(2).unwrap()).len(), 4);
    }

    #[test]
    fn a_trial_count_out_of_range_is_an_error_naming_the_field() {
        let e = scenario("runs = 0").unwrap_err().to_string();
        assert!(e.contains("run.runs"), "{e}");
        let s = scenario("").unwrap();
        let e = s.with_runs(1000).unwrap_err().to_string();
        assert!(e.contains("run.runs"), "{e}");
        let mut bad = s.clone();
        bad.variants[1].runs = Some(0);
        let e = bad.check().unwrap_err().to_string();
        assert!(e.contains("variant[1].runs"), "{e}");
    }
}
