//! `lowtide lab run`: a scenario's trials, each in a fresh emulated network, and the run
//! folder (provenance, raw CSV, `summary.json`, `report.html`).
//!
//! A trial is one dumbbell with its cross traffic (forward from sender 0, reverse from a
//! receiver), the floor probe, and one or more measured streams. Side by side, one trial holds
//! every variant (ports [`STREAM_PORT`](crate::scenario::STREAM_PORT)` + i`), so all see the very same queue; sequentially,
//! each variant gets its own trial, N runs each, the paper's way.
//!
//! The parts: the run folder written and recomputed (`folder.rs`), what it says about how the
//! run was made (`provenance.rs`), the threads of a trial (`threads.rs`), one trial run and
//! collected (`trial.rs`) and its threads started (`start.rs`).

mod folder;
mod provenance;
mod start;
#[cfg(test)]
mod tests;
mod threads;
mod trial;

use std::path::PathBuf;
use std::time::Duration;

use crate::results::{self, LabSummary};
use crate::scenario::{Checked, Mode, Overrides};
use crate::LabError;
use trial::{run_trial, TrialOptions, TrialOutcome};

pub use folder::{diff_json, recompute, write_run_folder, Recomputed};
pub(crate) use provenance::git_revision;
pub use provenance::{controller_name, describe_network, summary_inputs};
pub(crate) use threads::{Measured, Task};

/// Ports of the cross-traffic sinks on every host, and of the floor probe.
const TCP_SINK_PORT: u16 = 5001;
const UDP_SINK_PORT: u16 = 5002;
const FLOOR_PORT: u16 = 6100;
/// Streams start this long after the threads are spawned, so every listener is up.
const LEAD_IN: Duration = Duration::from_millis(300);
/// Receivers keep reading this long after the senders stop.
pub(crate) const GRACE: Duration = Duration::from_secs(1);

/// What `lab run` was told besides the scenario.
#[derive(Debug, Clone, Default)]
pub struct LabOptions {
    /// The scenario file's text, copied into the run folder.
    pub scenario_text: String,
    /// Run the `[quick]` form.
    pub quick: bool,
    /// Overrides `run.runs` (after `--quick`).
    pub runs: Option<u32>,
    /// Queue and congestion-control changes for sensitivity runs.
    pub overrides: Overrides,
    pub out_dir: PathBuf,
    /// Write every packet leaving each bottleneck direction (`forward.pcap`, `reverse.pcap`)
    /// into `OUT/pcap/trial-N/`, with `start.txt` (the wall clock at the trial's start, which
    /// the pcap's timestamps use, so packets line up with the run's records) and
    /// `variants.txt` (the trial's variants, one a line).
    pub pcap: bool,
    /// For tests of failure handling only: the forward link's rate cell fails this many
    /// seconds into every trial, as a bug in a cell would.
    #[doc(hidden)]
    pub emulator_fault_at_s: Option<f64>,
}

/// A finished run.
#[derive(Debug)]
pub struct LabRun {
    pub summary: LabSummary,
    pub dir: PathBuf,
}

/// Runs every trial of a checked scenario and writes the run folder. When a trial fails, the
/// folder still gets what was measured so far, marked as failed, and the error says where.
pub fn run(
    checked: &Checked,
    opts: &LabOptions,
    mut progress: impl FnMut(&str),
) -> Result<LabRun, LabError> {
    let checked = effective(checked, opts)?;
    let s = &checked.scenario;
    if s.variants
        .iter()
        .any(|v| s.application_of(v) == crate::scenario::ApplicationKind::LiveVideo)
    {
        crate::live_video::preflight()?;
    }
    if s.variants.iter().any(|v| {
        use crate::live_video::LiveTransport as T;
        v.live
            .is_some_and(|l| matches!(l.transport, T::Serve | T::ServePlain))
    }) {
        crate::chromium::Chromium::find()?;
    }
    let all: Vec<usize> = (0..s.variants.len()).collect();
    let mut trials: Vec<(Mode, u32, Vec<usize>)> = vec![];
    for &mode in &s.run.modes {
        for run in 1..=s.run.runs {
            match mode {
                Mode::SideBySide => trials.push((mode, run, all.clone())),
                Mode::Sequential => trials.extend(all.iter().map(|&i| (mode, run, vec![i]))),
            }
        }
    }
    // An earlier run's packets in a reused `--out` must not pass for this run's.
    let pcap_root = opts.out_dir.join("pcap");
    if pcap_root.is_dir() {
        std::fs::remove_dir_all(&pcap_root)
            .map_err(|e| LabError::io(format!("removing the old {}", pcap_root.display()), e))?;
    }
    progress("measuring this machine's timer wake-up noise (2 s)");
    let inputs = summary_inputs(&checked, opts, &[wakeup_noise()]);
    let mut records = vec![];
    let total = trials.len();
    let mut failed = None;
    for (k, (mode, run, variants)) in trials.into_iter().enumerate() {
        let names: Vec<String> = variants
            .iter()
            .map(|&i| s.variants[i].name.clone())
            .collect();
        let label = format!(
            "[{}/{total}] {} run {run}: {}",
            k + 1,
            mode.as_str(),
            names.join(", ")
        );
        let seed = s.run.seed + u64::from(run) - 1;
        let pcap_dir = opts
            .pcap
            .then(|| opts.out_dir.join("pcap").join(format!("trial-{}", k + 1)));
        let TrialOutcome { mut record, error } = run_trial(
            &checked,
            &variants,
            seed,
            TrialOptions {
                fault_at_s: opts.emulator_fault_at_s,
                pcap_dir,
            },
            &label,
            &mut progress,
        );
        record.mode = Some(mode);
        record.run = run;
        record.variants = names.clone();
        record.network.mode = Some(mode);
        record.network.run = run;
        record.network.variants = names;
        records.push(record);
        if let Some(e) = error {
            failed = Some(e);
            break;
        }
    }
    progress("writing the report");
    let summary = results::summarize(&inputs, &records, failed.as_ref().map(|e| e.to_string()));
    write_run_folder(&opts.out_dir, &opts.scenario_text, s, &summary, &records)?;
    match failed {
        Some(error) => Err(LabError::Partial {
            error: Box::new(error),
            dir: opts.out_dir.clone(),
        }),
        None => Ok(LabRun {
            summary,
            dir: opts.out_dir.clone(),
        }),
    }
}

/// The machine's timer wake-up noise, measured on the emulator's timer path before the run, as
/// a provenance line: the emulator cannot be more punctual than this.
fn wakeup_noise() -> (String, String) {
    let value = match lowtide_netem::noise::measure(Duration::from_secs(2)) {
        Ok(noise) => noise.to_string(),
        Err(e) => format!("not measured: {e}"),
    };
    ("timer wake-up noise".into(), value)
}

/// The scenario as it will run: overrides, then `--quick`, then `--runs`, checked again
/// (scaling can make a schedule invalid).
pub fn effective(checked: &Checked, opts: &LabOptions) -> Result<Checked, LabError> {
    let base = checked.scenario.with_overrides(&opts.overrides);
    let mut scenario = if opts.quick { base.quick() } else { base };
    if let Some(n) = opts.runs {
        scenario.run.runs = n;
    }
    scenario.check().map_err(|e| {
        LabError::io(
            "checking the scenario after --quick, --runs, --queue-bdp, --cc",
            e,
        )
    })
}
