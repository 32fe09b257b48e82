//! Live video's part of `report.html`: a table of frames shown, dropped and late per variant,
//! and per variant a plot of its run 1 (`live-MODE-K.svg` and its PNG): frames shown per
//! second and the encoder's bit rate over time, and each frame's glass-to-glass latency.

use std::path::Path;

use plotters::prelude::*;

use super::LiveRecord;
use crate::report::{self, color_of, draw_sized, legend, plot_err, titled};
use crate::results::{TrialRecord, VariantSummary};
use crate::scenario::Mode;
use crate::stream::Sample;
use crate::summary::{cell, NO_DATA};
use crate::LabError;

/// The section for the live-video variants of one mode.
pub fn section(
    dir: &Path,
    tag: &str,
    mode: Mode,
    variants: &[&VariantSummary],
    records: &[TrialRecord],
) -> Result<String, LabError> {
    let mut rows = vec![];
    let mut figures = String::new();
    for (k, v) in variants.iter().enumerate() {
        let Some(l) = &v.live else { continue };
        let lat = &v.latency_ms;
        let bound = |name: &str| lat.lower_bounds.iter().any(|b| b == name);
        rows.push(vec![
            v.name.clone(),
            format!("{} of {}", l.decoded, l.stamped),
            l.dropped_text(),
            l.censored.to_string(),
            cell(lat.p50, bound("p50"), |x| format!("{x:.0}")),
            cell(lat.p99, bound("p99"), |x| format!("{x:.0}")),
            cell(lat.max, bound("max"), |x| format!("{x:.0}")),
            cell(l.fps_p10, false, |x| {
                format!("{x:.0} ({} s)", l.fps_seconds)
            }),
            cell(l.fps_min, false, |x| format!("{x:.0}")),
            cell(l.longest_stall_ms, false, |x| format!("{x:.0}")),
            cell(l.encoded_bps, false, |x| format!("{:.2}", x / 1e6)),
            l.corrupted.to_string(),
            l.bus_problems.to_string(),
        ]);
        if let Some((rec, samples)) = first_run(mode, records, &v.name) {
            let name = format!("live-{tag}-{k}.svg");
            plot(&dir.join(&name), &v.name, rec, &samples)?;
            figures.push_str(&report::figure(
                &name,
                &format!("{}: frames shown, bit rate and latency", v.name),
            ));
        }
    }
    let table = report::html_table(
        &[
            "variant",
            "frames captured in the window: decoded of all",
            "not decoded, why",
            "never decoded by the end",
            "p50 ms",
            "p99 ms",
            "max ms",
            "frames shown per s, p10 (seconds)",
            "fewest in a second",
            "longest stall ms",
            "encoded Mbit/s (mean)",
            "corrupted frames",
            "bus errors and warnings",
        ],
        &rows,
    );
    Ok(format!(
        "<h3>Live video</h3><p>Glass-to-glass latency: each frame's capture instant travels in \
         band (an SEI stamp inserted after the encoder), read after the decoder, on the clock \
         the namespaces share; the same rule for every transport. Frames lowtide dropped by its \
         rule (expired, dependency-broken, ...) and frames skipped at the receiver (not decoded \
         though a later one was: the receiver's gate dropped it, or a client joining at a \
         keyframe never got it) are not latency samples; frames after the last one decoded \
         count with the time they had waited at the end (a lower bound, shown ≥). Frames shown per second count the decoder's output in each whole second \
         of the window, all runs; {NO_DATA} where nothing was measured.</p>{table}\
         <h3>Frames shown, bit rate and latency (run 1)</h3>{figures}"
    ))
}

/// Run 1's record and frames of `name`.
fn first_run<'a>(
    mode: Mode,
    records: &'a [TrialRecord],
    name: &str,
) -> Option<(&'a LiveRecord, Vec<Sample>)> {
    let t = crate::results::first_run(records, mode, name)?;
    let rec = t.live.iter().find(|(n, _)| n == name).map(|(_, r)| r)?;
    Some((rec, t.stream_of(name).unwrap_or_default().to_vec()))
}

/// Two panels over run time: frames shown per second and the bit rates (what the encoder
/// made, its setting, what lowtide wrote), and each frame's latency (censored ones hollow).
fn plot(path: &Path, name: &str, rec: &LiveRecord, samples: &[Sample]) -> Result<(), LabError> {
    let t1 = rec.seconds.len().max(1) as f64;
    let mbps_max = rec
        .seconds
        .iter()
        .flat_map(|s| [Some(s.encoded_bps), s.encoder_setting_bps, s.written_bps])
        .flatten()
        .fold(1e6f64, f64::max)
        / 1e6
        * 1.15;
    let fps_max = rec
        .seconds
        .iter()
        .map(|s| f64::from(s.shown.max(s.captured)))
        .fold(30.0f64, f64::max)
        * 1.15;
    // The axis fits the decoded frames; a censored one further up is drawn at the top.
    let lmax = samples
        .iter()
        .filter(|s| !s.censored)
        .map(|s| s.latency_ms / 1e3)
        .fold(0.5f64, f64::max)
        * 1.15;
    draw_sized(path, (960, 720), |root| {
        let (top, bottom) = root.split_vertically(360);
        let (left, right) = top.split_horizontally(480);
        let mut c = titled(&left, "frames shown per second")
            .build_cartesian_2d(0f64..t1, 0f64..fps_max)
            .map_err(|e| e.to_string())?;
        c.configure_mesh()
            .x_desc("time (s)")
            .y_desc("frames")
            .draw()
            .map_err(|e| e.to_string())?;
        let steps = |f: &dyn Fn(&super::LiveSecond) -> Option<f64>| {
            rec.seconds
                .iter()
                .filter_map(|s| f(s).map(|y| [(s.t_s, y), (s.t_s + 1.0, y)]))
                .flatten()
                .collect::<Vec<_>>()
        };
        for (i, (label, pts)) in [
            ("captured", steps(&|s| Some(f64::from(s.captured)))),
            ("shown", steps(&|s| Some(f64::from(s.shown)))),
        ]
        .into_iter()
        .enumerate()
        {
            let color = color_of(i, label);
            c.draw_series(LineSeries::new(pts, color.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(label)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color));
        }
        legend(&mut c, SeriesLabelPosition::LowerRight)?;
        let mut c = titled(&right, "bit rate")
            .build_cartesian_2d(0f64..t1, 0f64..mbps_max)
            .map_err(|e| e.to_string())?;
        c.configure_mesh()
            .x_desc("time (s)")
            .y_desc("Mbit/s")
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, (label, pts)) in [
            ("encoded", steps(&|s| Some(s.encoded_bps / 1e6))),
            (
                "encoder setting",
                steps(&|s| s.encoder_setting_bps.map(|b| b / 1e6)),
            ),
            (
                "written by lowtide",
                steps(&|s| s.written_bps.map(|b| b / 1e6)),
            ),
        ]
        .into_iter()
        .enumerate()
        .filter(|(_, (_, pts))| !pts.is_empty())
        {
            let color = color_of(i + 2, label);
            c.draw_series(LineSeries::new(pts, color.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(label)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color));
        }
        legend(&mut c, SeriesLabelPosition::UpperRight)?;
        let mut c = titled(
            &bottom,
            &format!("{name}: glass-to-glass latency of each frame"),
        )
        .build_cartesian_2d(0f64..t1, 0f64..lmax)
        .map_err(|e| e.to_string())?;
        c.configure_mesh()
            .x_desc("capture time (s)")
            .y_desc("latency (s)")
            .draw()
            .map_err(|e| e.to_string())?;
        let color = color_of(5, name);
        c.draw_series(samples.iter().map(|s| {
            let style = if s.censored {
                color.stroke_width(1)
            } else {
                color.filled()
            };
            Circle::new((s.sent_s, (s.latency_ms / 1e3).min(lmax)), 2, style)
        }))
        .map_err(|e| e.to_string())?;
        Ok(())
    })
    .map_err(plot_err("the live-video plot"))
}
