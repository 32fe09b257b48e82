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
//! library. Variants run one after another, each in a fresh dumbbell.
//!
//! - [`scenario`]: the scenario file (`[bwss]`), checked;
//! - [`procs`]: the programs, found before the run, stopped and reaped by their guards;
//! - [`trial`]: one variant's trial and its per-second rates;
//! - [`tfrc_video`]: the ladder over TFRC (the paper's UDP case);
//! - [`summary`]: the video's numbers, link utilization, goals;
//! - [`report`]: the plots, `report.html` and the printed table.

pub mod procs;
pub mod report;
pub mod scenario;
pub mod summary;
pub mod tfrc_video;
pub mod trial;

use std::path::{Path, PathBuf};

pub use procs::Tools;
pub use scenario::{is_bwss_scenario, BwssScenario};
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
    let mut records = vec![];
    let mut failed = None;
    for (i, v) in s.variants.iter().enumerate() {
        progress(&format!("[{}/{}] {}", i + 1, s.variants.len(), v.name));
        let r = trial::run_variant(
            s,
            v,
            opts.seed,
            &opts.tools,
            &dir.join(format!("variant-{i}")),
            &mut progress,
        );
        let stop = r.failed.clone();
        records.push(r);
        if let Some(e) = stop {
            failed = Some(format!("variant {}: {e}", v.name));
            break;
        }
    }
    progress("writing the report");
    let variants: Vec<_> = records
        .iter()
        .map(|r| summary::summarize_variant(s, r))
        .collect();
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
    let mut csv = String::from("variant,second,flow,kind,kbps,target_kbps\n");
    let opt = |x: Option<f64>| x.map_or(String::new(), |x| format!("{x:.1}"));
    for r in records {
        for f in &r.flows {
            for (k, x) in f.kbps.iter().enumerate() {
                let t = f.target_kbps.get(k).copied().flatten();
                csv += &format!(
                    "{},{k},{},{:?},{},{}\n",
                    r.variant,
                    f.name,
                    f.kind,
                    opt(*x),
                    opt(t)
                );
            }
        }
        for (k, x) in r.link_kbps.iter().enumerate() {
            csv += &format!("{},{k},link,Link,{},\n", r.variant, opt(*x));
        }
    }
    write("rates.csv", &csv)?;
    for (i, r) in records.iter().enumerate() {
        report::rates_plot(&dir.join(report::plot_name(i)), s, r)?;
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
