//! BWSS behind [`Experiment`] (`kind = "bwss"`, a `[bwss]` table): real programs in the
//! emulated network, so the streams kind's sensitivity flags and `--pcap` do not apply.

use crate::experiment::{Experiment, Finished, Flag, PlanError, Prepared, RunRequest, Stopped};
use crate::render::REPORT;

use super::{BwssOptions, BwssScenario, Tools};

/// The `bwss` experiment.
#[derive(Debug)]
pub struct Bwss;

impl Experiment for Bwss {
    fn kind(&self) -> &'static str {
        "bwss"
    }

    fn section(&self) -> Option<&'static str> {
        Some("bwss")
    }

    fn prepare(&self, text: &str, request: &RunRequest) -> Result<Box<dyn Prepared>, PlanError> {
        request.refuse(
            "a BWSS scenario ([bwss])",
            &[
                Flag::QueueBdp,
                Flag::Cc,
                Flag::WindowFrames,
                Flag::ThresholdMs,
                Flag::Pcap,
            ],
        )?;
        let mut s = BwssScenario::from_toml_in(text, request.folder())
            .map_err(|e| PlanError::scenario(request, e))?;
        let flag = |flag| {
            move |e: crate::scenario::ScenarioError| PlanError::FlagValue {
                flag,
                error: Box::new(e),
            }
        };
        if request.quick {
            s = s.quick_form().map_err(flag("the --quick form"))?;
        }
        if let Some(n) = request.runs {
            s = s.with_runs(n).map_err(flag("--runs"))?;
        }
        Ok(Box::new(BwssRun {
            headline: format!("{} (BWSS)", request.headline(&s.name)),
            out_dir: request.out_dir(&s.name),
            scenario_text: text.to_string(),
            scenario: s,
            fail_on_goals: request.fail_on_goals,
        }))
    }
}

struct BwssRun {
    scenario: BwssScenario,
    scenario_text: String,
    out_dir: std::path::PathBuf,
    headline: String,
    fail_on_goals: bool,
}

impl Prepared for BwssRun {
    fn headline(&self) -> String {
        self.headline.clone()
    }

    /// Finds the programs first (`lowtide`, the preload library, `curl`, `python3`): a missing
    /// one stops the run before any namespace exists.
    fn run(self: Box<Self>, progress: &mut dyn FnMut(&str)) -> Result<Finished, Stopped> {
        let opts = BwssOptions {
            scenario_text: self.scenario_text,
            out_dir: self.out_dir,
            tools: Tools::find().map_err(Stopped::new)?,
            seed: 1,
        };
        let done = super::run(&self.scenario, &opts, progress)
            .map_err(|e| Stopped::after(e, |_| String::new()))?;
        let missed = done.summary.goals_not_met();
        Ok(Finished {
            text: format!(
                "{}report: {}\n",
                super::report::text_table(&done.summary),
                done.dir.join(REPORT).display()
            ),
            notes: if missed > 0 {
                vec![format!("{missed} goal(s) not met")]
            } else {
                vec![]
            },
            exit_code: i32::from(missed > 0 && self.fail_on_goals),
        })
    }
}
