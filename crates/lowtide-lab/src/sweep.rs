//! Sensitivity sweeps: one scenario under several congestion controls and queue sizes
//! (`lowtide lab run FILE --cc reno,cubic,bbr --queue-bdp 0.5,1,2`), or conference latency
//! thresholds (`--threshold-ms 100,500,2000`: Erbad and Krasic's Fig. 5). The paper's router queue
//! is unknown and its TCP (Linux 2.4) is not ours, so a claim holds only if it holds across
//! them. A scenario may declare its own sweep (`[sweep]`); each list given on the command line
//! replaces the scenario's. Each combination is a full lab run in its own subfolder;
//! `index.html` puts every row in one table, with a link to each run's report, and, for a
//! threshold sweep, the frame rate against the threshold ([`crate::fps_sweep`]) and the
//! scenario's `fps_goal` at every threshold; `sweep.json` keeps the summaries and both.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::fps_sweep::{self, FpsAt, FpsCurve, GoalRow};
use crate::report;
use crate::results::{mbit, ratio, LabSummary};
use crate::runner::{self, LabOptions};
use crate::scenario::{Checked, FpsGoal, Overrides, Scenario};
use crate::summary::{Measured, NO_DATA};
use crate::LabError;

/// The page and the data a sweep writes.
pub const INDEX: &str = "index.html";
pub const SWEEP_JSON: &str = "sweep.json";

/// One combination and what it measured.
#[derive(Debug, Clone, Serialize)]
pub struct SweepPoint {
    /// The subfolder (e.g. `q0.5-reno`).
    pub folder: String,
    pub queue_bdp: Option<f64>,
    pub congestion: Option<String>,
    #[serde(default)]
    pub threshold_ms: Option<f64>,
    pub summary: LabSummary,
}

/// `sweep.json`: every combination's summary, and for a threshold sweep the frame-rate curves
/// and the goal at every combination.
#[derive(Debug, Clone, Serialize)]
pub struct SweepFile<'a> {
    pub points: &'a [SweepPoint],
    pub fps_by_threshold: Vec<FpsCurve>,
    pub fps_goal: Option<&'a FpsGoal>,
    pub fps_goal_rows: Vec<GoalRow>,
}

/// The sweep to run: each list from the command line, or else the scenario's `[sweep]`.
pub fn planned(
    scenario: &Scenario,
    congestion: &[String],
    queue_bdp: &[f64],
    window_frames: Option<u32>,
    threshold_ms: &[f64],
) -> Vec<Overrides> {
    let declared = scenario.sweep.clone().unwrap_or_default();
    combinations(
        &or_declared(congestion, &declared.congestion),
        &or_declared(queue_bdp, &declared.queue_bdp),
        window_frames,
        &or_declared(threshold_ms, &declared.threshold_ms),
    )
}

/// The command line's list, or the scenario's when the command line gives none.
fn or_declared<T: Clone>(cli: &[T], declared: &[T]) -> Vec<T> {
    if cli.is_empty() { declared } else { cli }.to_vec()
}

/// Every combination of `congestion` × `queue_bdp` × `threshold_ms` (an empty list keeps the
/// scenario's).
pub fn combinations(
    congestion: &[String],
    queue_bdp: &[f64],
    window_frames: Option<u32>,
    threshold_ms: &[f64],
) -> Vec<Overrides> {
    let ccs: Vec<Option<String>> = if congestion.is_empty() {
        vec![None]
    } else {
        congestion.iter().cloned().map(Some).collect()
    };
    let queues: Vec<Option<f64>> = if queue_bdp.is_empty() {
        vec![None]
    } else {
        queue_bdp.iter().copied().map(Some).collect()
    };
    let thresholds: Vec<Option<f64>> = if threshold_ms.is_empty() {
        vec![None]
    } else {
        threshold_ms.iter().copied().map(Some).collect()
    };
    let mut out = vec![];
    for cc in &ccs {
        for q in &queues {
            for t in &thresholds {
                out.push(Overrides {
                    queue_bdp: *q,
                    congestion: cc.clone(),
                    window_frames,
                    threshold_ms: *t,
                });
            }
        }
    }
    out
}

/// Runs every combination into `opts.out_dir/<combination>`, then writes the index. Every
/// combination is checked before the first one runs.
pub fn run(
    checked: &Checked,
    opts: &LabOptions,
    combos: &[Overrides],
    mut progress: impl FnMut(&str),
) -> Result<Vec<SweepPoint>, LabError> {
    // Each combination is one run: its scenario-as-run does not sweep again.
    let mut one = checked.clone();
    one.scenario.sweep = None;
    let fps_goal = checked
        .scenario
        .sweep
        .as_ref()
        .and_then(|s| s.fps_goal.as_ref());
    let checked = &one;
    let runs: Vec<LabOptions> = combos
        .iter()
        .map(|o| LabOptions {
            overrides: o.clone(),
            out_dir: opts.out_dir.join(folder_of(o)),
            ..opts.clone()
        })
        .collect();
    for r in &runs {
        runner::effective(checked, r)?;
    }
    let mut points = vec![];
    for (k, r) in runs.iter().enumerate() {
        let tag = format!(
            "[combination {}/{}: {}]",
            k + 1,
            runs.len(),
            folder_of(&r.overrides)
        );
        let done = runner::run(checked, r, |what| progress(&format!("{tag} {what}")))?;
        points.push(SweepPoint {
            folder: folder_of(&r.overrides),
            queue_bdp: r.overrides.queue_bdp,
            congestion: r.overrides.congestion.clone(),
            threshold_ms: r.overrides.threshold_ms,
            summary: done.summary,
        });
    }
    write_index(&opts.out_dir, &checked.scenario.name, &points, fps_goal)?;
    Ok(points)
}

fn folder_of(o: &Overrides) -> String {
    let s = o.suffix();
    let s = s.trim_start_matches('-');
    if s.is_empty() {
        "as-written".into()
    } else {
        s.to_string()
    }
}

/// `index.html` and `sweep.json` in `dir`; with a threshold sweep, the frame rate against
/// the threshold (`fps-threshold.svg`) and `fps_goal` at every combination.
pub fn write_index(
    dir: &Path,
    scenario: &str,
    points: &[SweepPoint],
    fps_goal: Option<&FpsGoal>,
) -> Result<PathBuf, LabError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| LabError::io(format!("creating {}", dir.display()), e))?;
    let fps: Vec<FpsAt> = points.iter().map(FpsAt::of).collect();
    let file = SweepFile {
        points,
        fps_by_threshold: fps_sweep::curves(&fps),
        fps_goal,
        fps_goal_rows: fps_goal.map_or(vec![], |g| fps_sweep::goal_rows(&fps, g)),
    };
    let json =
        serde_json::to_string_pretty(&file).map_err(|e| LabError::io("encoding sweep.json", e))?;
    let json_path = dir.join(SWEEP_JSON);
    std::fs::write(&json_path, json)
        .map_err(|e| LabError::io(format!("writing {}", json_path.display()), e))?;
    let mut sections = vec![format!(
        "<p>{} combinations of congestion control, bottleneck queue and conference latency \
         threshold, each a full run of <b>{}</b> (its report is linked). Every flow of a \
         combination, cross traffic included, uses its congestion control; both bottleneck \
         directions use its queue.</p>",
        points.len(),
        report::escape(scenario)
    )];
    if let Some(p) = points.first() {
        sections.push(format!(
            "<p><b>Paper ({}):</b> {}</p>",
            report::escape(&p.summary.paper.figure),
            report::escape(&p.summary.paper.text)
        ));
        if !p.summary.paper.differences.is_empty() {
            sections.push(format!(
                "<p><b>Differences from the paper:</b> {}</p>",
                report::escape(&p.summary.paper.differences)
            ));
        }
    }
    if !file.fps_by_threshold.is_empty() {
        // Every conference runs at the lab's frame rate (`ConferenceApp::conference`).
        let full = crate::video::FPS;
        fps_sweep::plot(
            &dir.join(fps_sweep::PLOT),
            "Frame rate against the latency threshold (Fig. 5)",
            &file.fps_by_threshold,
            full,
        )?;
        sections.push(format!(
            "<h2>Frame rate against the latency threshold</h2><p>Frames shown per second of \
             those captured in the measurement window (mean over runs), per variant; a gap is a \
             threshold without data. The dashed line is the full {full:.0} frames/s.</p>{}",
            report::figure(fps_sweep::PLOT, "frame rate against the latency threshold")
        ));
    }
    if let Some(g) = fps_goal {
        sections.push(goal_section(&file.fps_goal_rows, g));
    }
    sections.push(report::html_table(
        &[
            "combination",
            "variant",
            "mode",
            "p50 ms",
            "p99 ms",
            "sender-side p99 ms",
            "over 160 ms",
            "floor over 160 ms",
            "goodput Mbit/s",
            "vs TCP",
            "video whole ≤ 500 ms",
            "video dropped",
            "conference frames/s",
        ],
        &rows(points),
    ));
    let links: Vec<String> = points
        .iter()
        .map(|p| {
            format!(
                "<a href=\"{0}/report.html\">{0}</a>",
                report::escape(&p.folder)
            )
        })
        .collect();
    sections.push(format!("<p>Reports: {}.</p>", links.join(", ")));
    let html = report::page(&format!("lowtide lab sweep: {scenario}"), &[], &sections);
    let path = dir.join(INDEX);
    std::fs::write(&path, html)
        .map_err(|e| LabError::io(format!("writing {}", path.display()), e))?;
    Ok(path)
}

/// The frame-rate goal at every combination, as the index shows it.
fn goal_section(rows: &[GoalRow], g: &FpsGoal) -> String {
    let missed = rows
        .iter()
        .flat_map(|r| &r.variants)
        .filter(|c| !c.met)
        .count();
    let table: Vec<Vec<String>> = rows
        .iter()
        .flat_map(|r| {
            r.variants.iter().map(move |c| {
                vec![
                    r.folder.clone(),
                    c.variant.clone(),
                    r.reference_fps
                        .map_or(NO_DATA.into(), |f| format!("{f:.1}")),
                    fps_sweep::describe(c, &r.reference),
                ]
            })
        })
        .collect();
    format!(
        "<h2>Goal: frame rate within {:.0}% of {}'s at every threshold</h2><p>{}</p>{}",
        g.within * 100.0,
        report::escape(&g.reference),
        if missed == 0 {
            "Met at every combination.".to_string()
        } else {
            format!(
                "Not met at {missed} of {} (variant, combination) pairs; no data is never met.",
                rows.iter().map(|r| r.variants.len()).sum::<usize>()
            )
        },
        report::html_table(
            &[
                "combination",
                "variant",
                &format!("{} frames/s", g.reference),
                "frames/s, ratio: goal"
            ],
            &table
        )
    )
}

fn rows(points: &[SweepPoint]) -> Vec<Vec<String>> {
    let pct = |m: Measured| {
        m.value
            .map_or(NO_DATA.into(), |x| format!("{:.1}%", x * 100.0))
    };
    let mut out = vec![];
    for p in points {
        let floor = &p.summary.floor.latency_ms;
        for v in &p.summary.variants {
            let l = &v.latency_ms;
            out.push(vec![
                p.folder.clone(),
                v.name.clone(),
                v.mode.as_str().into(),
                l.show("p50", 0),
                l.show("p99", 0),
                v.sender_side_ms.latency.show("p99", 0),
                l.show_share(160.0),
                floor.show_share(160.0),
                mbit(v.goodput_bps),
                ratio(v.goodput_vs_baseline),
                v.video
                    .as_ref()
                    .map_or("-".into(), |x| pct(x.within(500.0))),
                v.video.as_ref().map_or("-".into(), |x| pct(x.dropped())),
                v.conference.as_ref().map_or("-".into(), |c| {
                    c.fps.map_or(NO_DATA.into(), |f| format!("{:.1}", f.mean))
                }),
            ]);
        }
    }
    out
}

/// The sweep as the terminal prints it: one line per combination and variant.
pub fn text_table(points: &[SweepPoint]) -> String {
    let mut out = format!(
        "{:<16} {:<22} {:>9} {:>9} {:>9} {:>12} {:>8} {:>9} {:>8}\n",
        "combination",
        "variant",
        "p50 ms",
        "p99 ms",
        "ss p99",
        "over 160 ms",
        "floor",
        "Mbit/s",
        "vs TCP"
    );
    for p in points {
        let floor = p.summary.floor.latency_ms.show_share(160.0);
        for v in &p.summary.variants {
            let l = &v.latency_ms;
            out.push_str(&format!(
                "{:<16} {:<22} {:>9} {:>9} {:>9} {:>12} {:>8} {:>9} {:>8}\n",
                p.folder,
                v.name,
                l.show("p50", 1),
                l.show("p99", 1),
                v.sender_side_ms.latency.show("p99", 1),
                l.show_share(160.0),
                floor,
                mbit(v.goodput_bps),
                ratio(v.goodput_vs_baseline),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combinations_are_the_product_and_name_their_folders() {
        let c = combinations(&["reno".into(), "bbr".into()], &[0.5, 2.0], None, &[]);
        assert_eq!(c.len(), 4);
        assert_eq!(folder_of(&c[0]), "q0.5-reno");
        assert_eq!(folder_of(&c[3]), "q2-bbr");
        let t = combinations(&[], &[], None, &[100.0, 2000.0]);
        assert_eq!(t.len(), 2);
        assert_eq!(folder_of(&t[1]), "t2000");
        let one = combinations(&[], &[], None, &[]);
        assert_eq!(one, vec![Overrides::default()]);
        assert_eq!(folder_of(&one[0]), "as-written");
    }

    #[test]
    fn the_scenarios_sweep_runs_unless_the_command_line_names_one() {
        let text = include_str!("../../../scenarios/paceline-fig5.toml");
        let s = crate::scenario::Scenario::from_toml(text).unwrap().scenario;
        let own = planned(&s, &[], &[], None, &[]);
        assert_eq!(own.len(), 7);
        assert_eq!(folder_of(&own[0]), "t100");
        assert_eq!(folder_of(&own[6]), "t20000");
        let cli = planned(&s, &[], &[], None, &[1000.0]);
        assert_eq!(cli.len(), 1, "one threshold from the command line: one run");
        let both = planned(&s, &["reno".into()], &[1.0], None, &[]);
        assert_eq!(folder_of(&both[0]), "q1-reno-t100");
        assert_eq!(both.len(), 7);
    }
}
