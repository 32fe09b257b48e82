//! The run folder: written, cleared of an earlier run's files, and recomputed.

use std::path::{Path, PathBuf};

use super::{summary_inputs, LabOptions};
use crate::render::{self, SCENARIO, SCENARIO_AS_RUN, SUMMARY, SUMMARY_STORED};
use crate::results::{self, files, LabSummary, TrialRecord};
use crate::scenario::Scenario;
use crate::LabError;

/// Writes the raw data, the scenario as it ran, the summary and the report into `dir`.
pub fn write_run_folder(
    dir: &Path,
    scenario_text: &str,
    as_run: &Scenario,
    summary: &LabSummary,
    records: &[TrialRecord],
) -> Result<(), LabError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| LabError::io(format!("creating {}", dir.display()), e))?;
    remove_stale(dir)?;
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).map_err(|e| LabError::io(format!("writing {}", p.display()), e))
    };
    write(SCENARIO, scenario_text)?;
    let effective = toml::to_string(as_run)
        .map_err(|e| LabError::io(format!("encoding {SCENARIO_AS_RUN}"), e))?;
    write(
        SCENARIO_AS_RUN,
        &format!("# The scenario as it ran (after --quick, --runs and overrides).\n{effective}"),
    )?;
    files::write_records(dir, records)?;
    results::write_json(&dir.join(SUMMARY), summary)?;
    render::render(dir, summary, records)
}

/// Removes what an earlier run wrote into `dir` (a reused `--out`), so a plot or CSV of a mode
/// or an application this run lacks cannot pass for its own. Only our file names are touched.
fn remove_stale(dir: &Path) -> Result<(), LabError> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| LabError::io(format!("reading {}", dir.display()), e))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let ours = [
            render::REPORT,
            SUMMARY,
            files::MESSAGES,
            files::WINDOWS,
            files::TCPINFO,
            files::TRIALS,
            SCENARIO,
            SCENARIO_AS_RUN,
        ]
        .contains(&name.as_str())
            || (["latency-", "cdf-", "throughput-", "windows-", "ladder-"]
                .iter()
                .any(|p| name.starts_with(p))
                && (name.ends_with(".svg") || name.ends_with(".png")));
        if ours {
            let path = entry.path();
            std::fs::remove_file(&path)
                .map_err(|e| LabError::io(format!("removing the old {}", path.display()), e))?;
        }
    }
    Ok(())
}

/// What `lowtide lab report DIR` did: the summary recomputed from the run folder's records,
/// and where it differs from the stored one.
#[derive(Debug)]
pub struct Recomputed {
    pub report: PathBuf,
    pub summary: LabSummary,
    /// `path: stored → recomputed`, one line per difference; empty when they agree.
    pub differences: Vec<String>,
}

/// `lowtide lab report DIR`: recomputes the summary from the scenario as it ran and the raw
/// records, says where it differs from the stored `summary.json`, then writes the recomputed
/// summary and re-renders `report.html` (the stored one is kept as `summary.stored.json`
/// when they differ).
pub fn recompute(dir: &Path) -> Result<Recomputed, LabError> {
    let stored_path = dir.join(SUMMARY);
    let stored = results::read_json(&stored_path)?;
    let scenario_path = dir.join(SCENARIO_AS_RUN);
    let text = std::fs::read_to_string(&scenario_path)
        .map_err(|e| LabError::io(format!("reading {}", scenario_path.display()), e))?;
    let checked = Scenario::from_toml(&text)
        .map_err(|e| LabError::io(format!("checking {}", scenario_path.display()), e))?;
    let records = files::read_records(dir)?;
    let opts = LabOptions {
        quick: stored.quick,
        ..LabOptions::default()
    };
    let mut inputs = summary_inputs(&checked, &opts, &[]);
    inputs.provenance = stored.provenance.clone();
    let summary = results::summarize(&inputs, &records, stored.failed.clone());
    let differences = diff_json(
        &serde_json::to_value(&stored).unwrap_or_default(),
        &serde_json::to_value(&summary).unwrap_or_default(),
    );
    if !differences.is_empty() {
        std::fs::copy(&stored_path, dir.join(SUMMARY_STORED))
            .map_err(|e| LabError::io(format!("keeping {}", stored_path.display()), e))?;
    }
    results::write_json(&stored_path, &summary)?;
    render::render(dir, &summary, &records)?;
    Ok(Recomputed {
        report: dir.join(render::REPORT),
        summary,
        differences,
    })
}

/// Where two JSON values differ: one `path: a → b` line per leaf (numbers equal to a
/// relative 1e-9).
pub fn diff_json(a: &serde_json::Value, b: &serde_json::Value) -> Vec<String> {
    use serde_json::Value as V;
    fn walk(path: &str, a: &V, b: &V, out: &mut Vec<String>) {
        match (a, b) {
            (V::Object(x), V::Object(y)) => {
                let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                for k in keys {
                    let (p, null) = (format!("{path}.{k}"), V::Null);
                    walk(
                        &p,
                        x.get(k).unwrap_or(&null),
                        y.get(k).unwrap_or(&null),
                        out,
                    );
                }
            }
            (V::Array(x), V::Array(y)) if x.len() == y.len() => {
                for (i, (p, q)) in x.iter().zip(y).enumerate() {
                    walk(&format!("{path}[{i}]"), p, q, out);
                }
            }
            (V::Number(x), V::Number(y)) => {
                let (x, y) = (
                    x.as_f64().unwrap_or(f64::NAN),
                    y.as_f64().unwrap_or(f64::NAN),
                );
                if (x - y).abs() > 1e-9 * x.abs().max(y.abs()) {
                    out.push(format!("{path}: {x} → {y}"));
                }
            }
            _ if a != b => out.push(format!("{path}: {a} → {b}")),
            _ => {}
        }
    }
    let mut out = vec![];
    walk("summary", a, b, &mut out);
    out
}
