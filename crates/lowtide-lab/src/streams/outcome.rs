//! What a `streams` run, sweep or recomputed folder tells `lowtide lab`: the tables, where the
//! report is, and the exit code its goals and measurements give.

use std::path::Path;

use crate::experiment::{Finished, Stopped};
use crate::render::{REPORT, SUMMARY, SUMMARY_STORED};
use crate::results::{self, LabSummary};
use crate::runner::{LabRun, Recomputed};
use crate::scenario::Checked;
use crate::sweep::{self, SweepPoint};
use crate::{fps_sweep, LabError};

/// A run's result as `lowtide lab run` and `lowtide demo` show it: its table and report, or,
/// when a trial failed part-way, the table of what was measured before.
pub fn outcome(result: Result<LabRun, LabError>, fail_on_goals: bool) -> Result<Finished, Stopped> {
    let done = result.map_err(|e| {
        Stopped::after(e, |dir| {
            results::read_json(&dir.join(SUMMARY))
                .map(|s| results::text_table(&s))
                .unwrap_or_default()
        })
    })?;
    let (exit_code, notes) = judged(&[&done.summary], fail_on_goals);
    Ok(Finished {
        text: format!(
            "{}report: {}\n",
            results::text_table(&done.summary),
            done.dir.join(REPORT).display()
        ),
        notes,
        exit_code,
    })
}

/// A sweep's rows, its frame-rate goal at every combination (a threshold sweep's), its index.
pub fn swept(
    checked: &Checked,
    points: &[SweepPoint],
    out_dir: &Path,
    fail_on_goals: bool,
) -> Finished {
    let mut text = sweep::text_table(points);
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
        text += &fps_sweep::goal_text(&rows, goal);
    }
    text += &format!("index: {}\n", out_dir.join(sweep::INDEX).display());
    let summaries: Vec<&LabSummary> = points.iter().map(|p| &p.summary).collect();
    let (code, mut notes) = judged(&summaries, fail_on_goals);
    if fps_missed > 0 {
        notes.push(format!(
            "the sweep's frame-rate goal is not met at {fps_missed} (variant, combination) pairs"
        ));
    }
    Finished {
        text,
        notes,
        exit_code: if fps_missed > 0 && fail_on_goals {
            1
        } else {
            code
        },
    }
}

/// `lowtide lab report`: where the recomputed summary differs from the stored one, its table
/// and the report.
pub fn recomputed(done: &Recomputed) -> Finished {
    let mut text = if done.differences.is_empty() {
        "the summary recomputed from the records matches the stored one\n".to_string()
    } else {
        format!(
            "the summary recomputed from the records differs from the stored one in {} places \
             (the stored one is kept as {SUMMARY_STORED}):\n",
            done.differences.len(),
        )
    };
    for d in &done.differences {
        text += &format!("  {d}\n");
    }
    text += &results::text_table(&done.summary);
    text += &format!("report: {}\n", done.report.display());
    Finished {
        text,
        notes: vec![],
        exit_code: 0,
    }
}

/// The exit code and its notes: 1 when a measurement failed, or (with `fail_on_goals`) a goal
/// was not met; else 0.
fn judged(summaries: &[&LabSummary], fail_on_goals: bool) -> (i32, Vec<String>) {
    let errors = summaries.iter().any(|s| !s.measurement_errors.is_empty());
    let missed: usize = summaries.iter().map(|s| s.goals_not_met()).sum();
    let mut notes = vec![];
    if errors {
        notes.push("some measurements failed (see MEASUREMENT ERROR above): exit code 1".into());
    }
    if missed > 0 {
        notes.push(format!(
            "{missed} goal(s) not met{}",
            if fail_on_goals {
                ": exit code 1 (--no-fail-on-goals to explore)"
            } else {
                ""
            }
        ));
    }
    (i32::from(errors || (fail_on_goals && missed > 0)), notes)
}
