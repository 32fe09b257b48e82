//! The BWSS report: per variant the rate of every flow per second (Mehra Fig. 4-6), the
//! video's numbers beside the paper's, the goals, the provenance.

use std::path::Path;

use plotters::prelude::*;

use super::scenario::BwssScenario;
use super::summary::{BwssSummary, FlowKind, Measured, VariantRecord};
use crate::report::{self as plot, escape, html_table};
use crate::LabError;

/// The plot's file name for variant `i`'s trial `run` (SVG; a PNG copy beside it).
pub fn plot_name(i: usize, run: u32) -> String {
    format!("rates-{i}{}.svg", super::trial_suffix(run))
}

/// Per-second kbit/s of every flow and of the link, the interference shaded, the video's
/// minimum dashed.
pub fn rates_plot(path: &Path, s: &BwssScenario, r: &VariantRecord) -> Result<(), LabError> {
    let secs = s.run.duration_s;
    let link = s.link_kbps().unwrap_or(1000.0);
    let ymax = r
        .flows
        .iter()
        .flat_map(|f| f.kbps.iter().flatten())
        .chain(r.link_kbps.iter().flatten())
        .fold(link, |m, &x| m.max(x))
        * 1.1;
    let min = s.video_min_kbps().unwrap_or(0.0);
    let i = &s.bwss.interference;
    plot::draw(path, |root| {
        let trial = match s.variants.iter().find(|v| v.name == r.variant) {
            Some(v) if s.runs_of(v) > 1 => format!(" (trial {})", r.run + 1),
            _ => String::new(),
        };
        let title = format!("{}{trial}: rate per second", r.variant);
        let mut chart = plot::titled(&root, &title)
            .build_cartesian_2d(0f64..secs, 0f64..ymax)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("time (s)")
            .y_desc("kbit/s")
            .draw()
            .map_err(|e| e.to_string())?;
        chart
            .draw_series([Rectangle::new(
                [(i.start_s, 0.0), (i.stop_s, ymax)],
                RGBColor(255, 220, 180).mix(0.4).filled(),
            )])
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(DashedLineSeries::new(
                [(0.0, min), (secs, min)],
                6,
                4,
                BLACK.stroke_width(1),
            ))
            .map_err(|e| e.to_string())?
            .label(format!("video minimum {min:.0}"))
            .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLACK));
        let mut lines: Vec<(&str, &[Option<f64>], RGBColor, u32)> = vec![];
        for (k, f) in r.flows.iter().enumerate() {
            let width = if f.kind == FlowKind::Video { 3 } else { 1 };
            lines.push((&f.name, &f.kbps, plot::color_of(k, &f.name), width));
        }
        lines.push((
            "link (all packets)",
            &r.link_kbps,
            RGBColor(120, 120, 120),
            1,
        ));
        for (name, kbps, color, width) in lines {
            let points: Vec<(f64, f64)> = kbps
                .iter()
                .enumerate()
                .filter_map(|(k, x)| x.map(|x| (k as f64 + 0.5, x)))
                .collect();
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(width)))
                .map_err(|e| e.to_string())?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 16, y)], color.stroke_width(width))
                });
        }
        plot::legend(&mut chart, SeriesLabelPosition::UpperRight)
    })
    .map_err(plot::plot_err("the rate plot"))
}

fn num(m: Measured, digits: usize) -> String {
    match m.value {
        Some(v) => format!("{v:.digits$} ({} s)", m.samples),
        None => "no data".into(),
    }
}

fn pct(m: Measured) -> String {
    match m.value {
        Some(v) => format!("{:.1}% ({} s)", v * 100.0, m.samples),
        None => "no data".into(),
    }
}

/// The whole page.
pub fn html(s: &BwssScenario, summary: &BwssSummary) -> String {
    let mut sections = vec![];
    if let Some(f) = &summary.failed {
        sections.push(format!(
            "<p><b>The run failed:</b> {}. What was measured before is shown.</p>",
            escape(f)
        ));
    }
    sections.push(format!(
        "<p>{}</p><p><b>Paper:</b> {} — {}</p><p><b>Where we differ:</b> {}</p>",
        escape(&s.description),
        escape(&s.paper.figure),
        escape(&s.paper.text),
        escape(&s.paper.differences)
    ));
    let rows: Vec<Vec<String>> = summary
        .variants
        .iter()
        .map(|v| {
            vec![
                v.name.clone(),
                num(v.video_rate_kbps.mean, 0),
                v.paper_video_kbps.map_or("–".into(), |p| format!("{p:.0}")),
                num(v.video_rate_kbps.during_interference, 0),
                format!(
                    "{} (≥ {:.0}, judged); within a segment a second (≥ {:.1}): {}",
                    pct(v.video_rate_kbps.share_of_seconds_at_min),
                    v.video_rate_kbps.min_kbps,
                    v.video_rate_kbps.min_kbps - super::summary::SEGMENT_KBPS,
                    pct(v.video_rate_kbps.share_of_seconds_within_a_segment)
                ),
                pct(v.link_utilization),
                v.flow_mean_kbps
                    .iter()
                    .map(|(n, m)| format!("{n}: {}", num(*m, 0)))
                    .collect::<Vec<_>>()
                    .join("; "),
                v.failed.clone().unwrap_or_default(),
            ]
        })
        .collect();
    sections.push(format!(
        "<h2>Video rate and link use</h2>{}",
        html_table(
            &[
                "variant",
                "video mean kbit/s (seconds)",
                "paper",
                "during interference",
                "seconds ≥ minimum, during interference",
                "link utilization",
                "every flow's mean kbit/s",
                "failed",
            ],
            &rows
        )
    ));
    if let Some(table) = outside_html(summary) {
        sections.push(table);
    }
    sections.push(crate::goals::experiment_goals_html(&summary.goals));
    for v in &summary.variants {
        let Some(i) = s.variants.iter().position(|o| o.name == v.name) else {
            continue;
        };
        let plots: Vec<String> = v
            .trials
            .iter()
            .map(|t| {
                plot::figure(
                    &plot_name(i, t.run),
                    &format!("rates of {}, trial {}", v.name, t.run + 1),
                )
            })
            .collect();
        sections.push(format!("<h2>{}</h2>{}", escape(&v.name), plots.join("")));
    }
    sections.push(
        "<p>Raw data: <code>rates.csv</code> (variant, trial, second, flow, kbit/s, target), each \
         variant's folder (daemon logs, program output, rules).</p>"
            .into(),
    );
    plot::page(
        &format!("{} (BWSS)", summary.name),
        &summary.provenance,
        &sections,
    )
}

/// Each trial's outside download beside the pooled mean, for the variants that have one:
/// how far trials of one variant differ is the noise the "no harm outside" goal is read
/// against.
fn outside_html(summary: &BwssSummary) -> Option<String> {
    let rows: Vec<Vec<String>> = summary
        .variants
        .iter()
        .filter_map(|v| {
            let pooled = v.outside_mean_kbps?;
            let trials = v
                .trials
                .iter()
                .map(|t| t.outside_mean_kbps.map_or("no data".into(), |m| num(m, 0)))
                .collect::<Vec<_>>()
                .join("; ");
            let ci = v.outside_kbps_over_trials.map_or("–".into(), |c| {
                format!(
                    "{:.0} to {:.0} ({} trials)",
                    c.ci95_low, c.ci95_high, c.runs
                )
            });
            Some(vec![v.name.clone(), trials, num(pooled, 0), ci])
        })
        .collect();
    (!rows.is_empty()).then(|| {
        format!(
            "<h2>The other host's download</h2><p>The goal compares the pooled means (every \
             measured second of every trial).</p>{}",
            html_table(
                &[
                    "variant",
                    "each trial's mean kbit/s (seconds)",
                    "pooled mean",
                    "95% interval of the trials' means",
                ],
                &rows
            )
        )
    })
}

/// The text table `lab run` prints.
pub fn text_table(summary: &BwssSummary) -> String {
    let mut out = format!(
        "{:<14} {:>16} {:>7} {:>16} {:>18} {:>14}\n",
        "variant", "video kbit/s", "paper", "during interf.", "s >= min (interf.)", "link util."
    );
    for v in &summary.variants {
        let n = |m: Measured| m.value.map_or("no data".into(), |x| format!("{x:.0}"));
        let p = |m: Measured| {
            m.value
                .map_or("no data".into(), |x| format!("{:.1}%", x * 100.0))
        };
        out += &format!(
            "{:<14} {:>16} {:>7} {:>16} {:>18} {:>14}\n",
            v.name,
            n(v.video_rate_kbps.mean),
            v.paper_video_kbps.map_or("-".into(), |x| format!("{x:.0}")),
            n(v.video_rate_kbps.during_interference),
            p(v.video_rate_kbps.share_of_seconds_at_min),
            p(v.link_utilization)
        );
        for (name, m) in &v.flow_mean_kbps {
            out += &format!("    {name}: {}\n", n(*m));
        }
        if v.trials.len() > 1 {
            let each = |f: &dyn Fn(&super::summary::TrialNumbers) -> Option<Measured>| {
                v.trials
                    .iter()
                    .map(|t| f(t).map_or("no data".into(), n))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            out += &format!(
                "    {} trials pooled; video per trial: {}\n",
                v.trials.len(),
                each(&|t| Some(t.video_mean_kbps))
            );
            if v.outside_mean_kbps.is_some() {
                out += &format!(
                    "    outside per trial: {}\n",
                    each(&|t| t.outside_mean_kbps)
                );
            }
        }
    }
    for g in &summary.goals {
        out += &format!(
            "goal {} {}: {} ({})\n",
            g.variant,
            g.metric,
            g.shown(),
            if g.met { "met" } else { "NOT met" }
        );
    }
    out
}
