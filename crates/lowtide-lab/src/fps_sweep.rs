//! Frame rate against the latency threshold (Erbad and Krasic, "Sender-side Buffers and the
//! Case for Multimedia Adaptation", Fig. 5): from a threshold sweep of a conference scenario,
//! one curve per variant (mean frames/s of the frames captured in the measurement window, at
//! each threshold), the plot with a log x axis, and the goal held at every threshold:
//! each named variant shows at least `1 - within` times the reference's frame rate.
//!
//! Where we differ: the paper plots its curves from eight videos per transport; a point here is
//! one conference stream's mean over the scenario's runs. A threshold whose run has no frame
//! captured in the window (or no conference summary) is "no data": a gap in the curve, and the
//! goal not met there.

use std::path::Path;

use plotters::prelude::*;
use serde::Serialize;

use crate::report::{color_of, draw, legend, plot_err, titled};
use crate::scenario::FpsGoal;
use crate::sweep::SweepPoint;
use crate::LabError;

/// The plot the sweep's index shows.
pub const PLOT: &str = "fps-threshold.svg";

/// The frame rates one combination of a sweep measured: what the curves and the goal read.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FpsAt {
    pub folder: String,
    pub threshold_ms: Option<f64>,
    /// The combination's other values (`q0.5-reno`), empty when only the threshold varies.
    pub rest: String,
    /// Each conference variant's mean frames/s, `None` without data.
    pub fps: Vec<(String, Option<f64>)>,
}

impl FpsAt {
    /// The conference variants' frame rates of one combination.
    pub fn of(p: &SweepPoint) -> Self {
        let mut rest = vec![];
        if let Some(q) = p.queue_bdp {
            rest.push(format!("q{q}"));
        }
        if let Some(cc) = &p.congestion {
            rest.push(cc.clone());
        }
        Self {
            folder: p.folder.clone(),
            threshold_ms: p.threshold_ms,
            rest: rest.join("-"),
            fps: p
                .summary
                .variants
                .iter()
                .filter_map(|v| Some((v.name.clone(), v.conference.as_ref()?.fps.map(|f| f.mean))))
                .collect(),
        }
    }

    fn fps_of(&self, variant: &str) -> Option<f64> {
        self.fps.iter().find(|(n, _)| n == variant)?.1
    }
}

/// One variant's frame rate at each threshold (ascending), `None` where it has no data.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FpsCurve {
    /// The variant, and the rest of its combination when the sweep varies more than the
    /// threshold (`MinBuf(1,3) q0.5-reno`).
    pub name: String,
    pub points: Vec<(f64, Option<f64>)>,
}

/// The curves of every conference variant over the sweep's thresholds; combinations without
/// a threshold are left out.
pub fn curves(sweep: &[FpsAt]) -> Vec<FpsCurve> {
    let mut out: Vec<FpsCurve> = vec![];
    for p in sweep {
        let Some(t) = p.threshold_ms else { continue };
        for (variant, fps) in &p.fps {
            let name = if p.rest.is_empty() {
                variant.clone()
            } else {
                format!("{variant} {}", p.rest)
            };
            match out.iter_mut().find(|c| c.name == name) {
                Some(c) => c.points.push((t, *fps)),
                None => out.push(FpsCurve {
                    name,
                    points: vec![(t, *fps)],
                }),
            }
        }
    }
    for c in &mut out {
        c.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

/// The goal at one combination of the sweep.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GoalRow {
    pub folder: String,
    pub threshold_ms: Option<f64>,
    pub reference: String,
    pub reference_fps: Option<f64>,
    pub variants: Vec<GoalCell>,
}

/// One variant held to the reference at one combination.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GoalCell {
    pub variant: String,
    pub fps: Option<f64>,
    /// Its frame rate over the reference's; `None` without both (or a reference of 0).
    pub ratio: Option<f64>,
    /// At least `1 - within` of the reference's; never met without data.
    pub met: bool,
}

/// The goal at every combination of the sweep.
pub fn goal_rows(sweep: &[FpsAt], goal: &FpsGoal) -> Vec<GoalRow> {
    sweep
        .iter()
        .map(|p| {
            let reference_fps = p.fps_of(&goal.reference);
            let variants = goal
                .variants
                .iter()
                .map(|name| {
                    let fps = p.fps_of(name);
                    let met = matches!((fps, reference_fps), (Some(f), Some(r))
                        if f >= (1.0 - goal.within) * r);
                    let ratio = match (fps, reference_fps) {
                        (Some(f), Some(r)) if r > 0.0 => Some(f / r),
                        _ => None,
                    };
                    GoalCell {
                        variant: name.clone(),
                        fps,
                        ratio,
                        met,
                    }
                })
                .collect();
            GoalRow {
                folder: p.folder.clone(),
                threshold_ms: p.threshold_ms,
                reference: goal.reference.clone(),
                reference_fps,
                variants,
            }
        })
        .collect()
}

/// `fps 27.3 (0.91 of QUIC's): met`, or `no data: not met`.
pub fn describe(c: &GoalCell, reference: &str) -> String {
    let verdict = if c.met { "met" } else { "not met" };
    match (c.fps, c.ratio) {
        (Some(f), Some(r)) => format!("{f:.1} fps ({r:.2} of {reference}'s): {verdict}"),
        (Some(f), None) => format!("{f:.1} fps ({reference}: no data): {verdict}"),
        (None, _) => format!("no data: {verdict}"),
    }
}

/// The goal as the terminal prints it: one line per combination and variant.
pub fn goal_text(rows: &[GoalRow], goal: &FpsGoal) -> String {
    let mut out = format!(
        "goal: fps at least {:.0}% of {}'s at every threshold\n",
        (1.0 - goal.within) * 100.0,
        goal.reference
    );
    for r in rows {
        for c in &r.variants {
            out.push_str(&format!(
                "  {:<16} {:<22} {}\n",
                r.folder,
                c.variant,
                describe(c, &r.reference)
            ));
        }
    }
    out
}

/// Fig. 5: frames per second against the latency threshold (log x), one line per curve,
/// a dashed line at the full 30 frames/s.
pub fn plot(path: &Path, title: &str, curves: &[FpsCurve], full_fps: f64) -> Result<(), LabError> {
    let ts = curves.iter().flat_map(|c| c.points.iter().map(|p| p.0));
    let (lo, hi) = ts.fold((f64::INFINITY, 0f64), |(lo, hi), t| (lo.min(t), hi.max(t)));
    let (lo, hi) = if lo.is_finite() {
        (lo / 1.5, hi * 1.5)
    } else {
        (10.0, 100e3)
    };
    draw(path, |root| {
        let mut chart = titled(&root, title)
            .build_cartesian_2d((lo..hi).log_scale(), 0f64..full_fps * 1.1)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("latency threshold (ms, log)")
            .y_desc("frames shown per second")
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, c) in curves.iter().enumerate() {
            let color = color_of(i, &c.name);
            // A threshold without data breaks the line rather than joining across it.
            for run in c.points.split(|p| p.1.is_none()) {
                let xy: Vec<(f64, f64)> = run.iter().filter_map(|&(t, f)| Some((t, f?))).collect();
                chart
                    .draw_series(LineSeries::new(xy.clone(), color.stroke_width(2)))
                    .map_err(|e| e.to_string())?;
                chart
                    .draw_series(xy.iter().map(|&p| Circle::new(p, 4, color.filled())))
                    .map_err(|e| e.to_string())?;
            }
            chart
                .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())
                .map_err(|e| e.to_string())?
                .label(c.name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 14, y)], color.stroke_width(2))
                });
        }
        chart
            .draw_series(DashedLineSeries::new(
                [(lo, full_fps), (hi, full_fps)],
                6,
                4,
                BLACK.mix(0.5).into(),
            ))
            .map_err(|e| e.to_string())?;
        legend(&mut chart, SeriesLabelPosition::LowerRight)?;
        Ok(())
    })
    .map_err(plot_err("the frame rate against the threshold"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t: f64, fps: [(&str, Option<f64>); 3]) -> FpsAt {
        FpsAt {
            folder: format!("t{t}"),
            threshold_ms: Some(t),
            rest: String::new(),
            fps: fps.iter().map(|&(n, f)| (n.to_string(), f)).collect(),
        }
    }

    fn sweep() -> Vec<FpsAt> {
        vec![
            at(
                1000.0,
                [
                    ("TCP", Some(20.0)),
                    ("MinBuf", Some(29.0)),
                    ("QUIC", Some(30.0)),
                ],
            ),
            at(
                100.0,
                [
                    ("TCP", Some(2.0)),
                    ("MinBuf", Some(25.0)),
                    ("QUIC", Some(28.0)),
                ],
            ),
            at(
                500.0,
                [("TCP", None), ("MinBuf", Some(26.0)), ("QUIC", None)],
            ),
        ]
    }

    #[test]
    fn curves_are_per_variant_in_threshold_order_with_gaps_for_no_data() {
        let c = curves(&sweep());
        assert_eq!(c.len(), 3);
        assert_eq!(c[0].name, "TCP");
        assert_eq!(
            c[0].points,
            [(100.0, Some(2.0)), (500.0, None), (1000.0, Some(20.0))]
        );
        let mut other = sweep();
        other[0].rest = "q0.5-reno".into();
        other[1].threshold_ms = None;
        let c = curves(&other);
        assert!(c.iter().any(|c| c.name == "QUIC q0.5-reno"), "{c:?}");
        let quic = c.iter().find(|c| c.name == "QUIC").unwrap();
        assert_eq!(quic.points, [(500.0, None)], "no threshold: not on a curve");
    }

    #[test]
    fn the_goal_holds_each_variant_to_the_reference_and_no_data_is_never_met() {
        let goal = FpsGoal {
            reference: "QUIC".into(),
            variants: vec!["MinBuf".into(), "TCP".into()],
            within: 0.1,
        };
        let rows = goal_rows(&sweep(), &goal);
        let met: Vec<Vec<bool>> = rows
            .iter()
            .map(|r| r.variants.iter().map(|c| c.met).collect())
            .collect();
        // 29/30 met, 20/30 not; 25/28 = 0.89 not; no reference: not met.
        assert_eq!(met, [[true, false], [false, false], [false, false]]);
        assert!((rows[1].variants[0].ratio.unwrap() - 25.0 / 28.0).abs() < 1e-12);
        assert_eq!(rows[2].variants[0].ratio, None);
        assert_eq!(
            describe(&rows[2].variants[0], "QUIC"),
            "26.0 fps (QUIC: no data): not met"
        );
        assert_eq!(describe(&rows[2].variants[1], "QUIC"), "no data: not met");
        assert_eq!(
            describe(&rows[0].variants[0], "QUIC"),
            "29.0 fps (0.97 of QUIC's): met"
        );
        let text = goal_text(&rows, &goal);
        assert!(
            text.starts_with("goal: fps at least 90% of QUIC's"),
            "{text}"
        );
        assert_eq!(text.lines().count(), 1 + 3 * 2);
    }

    #[test]
    fn the_plot_is_drawn() {
        let dir = std::env::temp_dir().join(format!("lowtide-fps-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(PLOT);
        plot(&path, "fps", &curves(&sweep()), 30.0).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.contains("MinBuf") && svg.contains("latency threshold"));
        assert!(path.with_extension("png").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
