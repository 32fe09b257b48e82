//! The `streams` experiment (`kind = "streams"`): each variant a transport (plain TCP, a
//! lowtide controller, QUIC, TFRC) carrying one measured application (latency stream, layered
//! video, conference, bit-rate ladder, live video) through one emulated network with cross
//! traffic, side by side or one after another: Goel et al., Paceline, DBAT, TFRC, the demo.
//!
//! Its chain lives in the crate's root modules, where it grew before the lab had other kinds:
//! [`crate::scenario`] (the file, checked) → [`crate::runner`] (trials, the run folder) →
//! [`crate::results`] (records, the summary) → [`crate::render`] (the report) →
//! [`crate::goals`], with [`crate::sweep`] for several combinations of one scenario. This
//! module is its entry behind [`Experiment`]: one run, or a sweep when the command line or the
//! scenario's `[sweep]` asks for more than one combination; `outcome.rs` turns what they
//! return into what `lowtide lab` prints (also for `lowtide demo`, the same chain).

mod outcome;

use crate::experiment::{Experiment, Finished, PlanError, Prepared, RunRequest, Stopped};
use crate::runner::{self, LabOptions};
use crate::scenario::{Checked, Overrides, Scenario, MAX_RUNS};
use crate::{sweep, LabError};

pub use outcome::outcome;

/// The `streams` experiment.
#[derive(Debug)]
pub struct Streams;

impl Experiment for Streams {
    fn kind(&self) -> &'static str {
        "streams"
    }

    /// None: a file is this kind when it has no other kind's table.
    fn section(&self) -> Option<&'static str> {
        None
    }

    fn prepare(&self, text: &str, request: &RunRequest) -> Result<Box<dyn Prepared>, PlanError> {
        let checked = Scenario::from_toml_in(text, request.folder())
            .map_err(|e| PlanError::scenario(request, e))?;
        if let Some(n) = request.runs {
            if !(1..=MAX_RUNS).contains(&n) {
                return Err(PlanError::Flag(format!(
                    "--runs {n} is outside 1 to {MAX_RUNS}"
                )));
            }
        }
        let combos = sweep::planned(
            &checked.scenario,
            &request.cc,
            &request.queue_bdp,
            request.window_frames,
            &request.threshold_ms,
        );
        let opts = LabOptions {
            scenario_text: text.to_string(),
            quick: request.quick,
            runs: request.runs,
            pcap: request.pcap,
            ..LabOptions::default()
        };
        let name = &checked.scenario.name;
        if combos.len() > 1 {
            let stem = format!(
                "{name}-sweep{}",
                request
                    .window_frames
                    .map_or(String::new(), |w| format!("-w{w}"))
            );
            let headline = format!(
                "{name}, {} combinations (congestion control, queue, latency threshold){}",
                combos.len(),
                request.quick_suffix(" (--quick)")
            );
            return Ok(Box::new(SweepRun {
                opts: LabOptions {
                    out_dir: request.out_dir(&stem),
                    ..opts
                },
                checked,
                combos,
                headline,
                fail_on_goals: request.fail_on_goals,
            }));
        }
        let overrides = combos.into_iter().next().unwrap_or_default();
        let stem = format!("{name}{}", overrides.suffix());
        Ok(Box::new(OneRun {
            headline: request.headline(name),
            opts: LabOptions {
                overrides,
                out_dir: request.out_dir(&stem),
                ..opts
            },
            checked,
            fail_on_goals: request.fail_on_goals,
        }))
    }

    fn report(&self, dir: &std::path::Path) -> Result<Finished, LabError> {
        runner::recompute(dir).map(|done| outcome::recomputed(&done))
    }
}

/// One run of the scenario.
struct OneRun {
    checked: Checked,
    opts: LabOptions,
    headline: String,
    fail_on_goals: bool,
}

impl Prepared for OneRun {
    fn headline(&self) -> String {
        self.headline.clone()
    }

    fn run(self: Box<Self>, progress: &mut dyn FnMut(&str)) -> Result<Finished, Stopped> {
        outcome(
            runner::run(&self.checked, &self.opts, progress),
            self.fail_on_goals,
        )
    }
}

/// Several combinations of `--cc`, `--queue-bdp` and `--threshold-ms` (or the scenario's
/// `[sweep]`): one run folder each, one index.
struct SweepRun {
    checked: Checked,
    opts: LabOptions,
    combos: Vec<Overrides>,
    headline: String,
    fail_on_goals: bool,
}

impl Prepared for SweepRun {
    fn headline(&self) -> String {
        self.headline.clone()
    }

    fn run(self: Box<Self>, progress: &mut dyn FnMut(&str)) -> Result<Finished, Stopped> {
        let points =
            sweep::run(&self.checked, &self.opts, &self.combos, progress).map_err(Stopped::new)?;
        Ok(outcome::swept(
            &self.checked,
            &points,
            &self.opts.out_dir,
            self.fail_on_goals,
        ))
    }
}
