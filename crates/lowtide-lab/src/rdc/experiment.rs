//! The RDC experiments behind [`Experiment`] (`kind = "rdc"`, an `[rdc]` table): one trial per
//! variant, so `--runs` and the streams kind's sensitivity flags do not apply.

use crate::experiment::{Experiment, Finished, Flag, PlanError, Prepared, RunRequest, Stopped};

use super::{RdcOptions, RdcScenario, REPORT, SUMMARY};

/// The `rdc` experiment.
#[derive(Debug)]
pub struct Rdc;

impl Experiment for Rdc {
    fn kind(&self) -> &'static str {
        "rdc"
    }

    fn section(&self) -> Option<&'static str> {
        Some("rdc")
    }

    fn prepare(&self, text: &str, request: &RunRequest) -> Result<Box<dyn Prepared>, PlanError> {
        let scenario = RdcScenario::from_toml_in(text, request.folder())
            .map_err(|e| PlanError::scenario(request, e))?;
        request.refuse("an RDC scenario ([rdc])", &Flag::ALL)?;
        Ok(Box::new(RdcRun {
            headline: request.headline(&scenario.name),
            opts: RdcOptions {
                quick: request.quick,
                out_dir: request.out_dir(&scenario.name),
            },
            scenario,
            fail_on_goals: request.fail_on_goals,
        }))
    }
}

struct RdcRun {
    scenario: RdcScenario,
    opts: RdcOptions,
    headline: String,
    fail_on_goals: bool,
}

impl Prepared for RdcRun {
    fn headline(&self) -> String {
        self.headline.clone()
    }

    /// Exit code 2 when a variant's trial failed (the others ran on), else 1 when a goal was
    /// not met (with `fail_on_goals`).
    fn run(self: Box<Self>, progress: &mut dyn FnMut(&str)) -> Result<Finished, Stopped> {
        let summary = super::run(&self.scenario, &self.opts, progress).map_err(Stopped::new)?;
        let goals_met = summary.goals.iter().all(|g| g.met);
        Ok(Finished {
            text: format!(
                "{}run folder: {} (open {REPORT}; {SUMMARY})\n",
                super::text_table(&summary),
                self.opts.out_dir.display(),
            ),
            notes: vec![],
            exit_code: if !summary.errors.is_empty() {
                2
            } else if goals_met || !self.fail_on_goals {
                0
            } else {
                1
            },
        })
    }
}
