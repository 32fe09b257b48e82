//! The bit-rate ladder's part of `report.html` (Hasan et al., Fig. 1-10): a table of
//! switches, rebuffers and rate match beside the paper's numbers, and per variant one plot
//! of the streamed bit rate against the achieved throughput and of the one-way latency over
//! time (run 1), `ladder-MODE-K.svg` and its PNG.

use std::path::Path;

use plotters::prelude::*;

use crate::ladder_flow::LadderRecord;
use crate::report::{self, color_of, draw_sized, legend, plot_err, titled};
use crate::results::{TrialRecord, VariantSummary};
use crate::scenario::Mode;
use crate::stream::Sample;
use crate::summary::{cell, NO_DATA};
use crate::LabError;

fn count(x: Option<u64>) -> String {
    x.map_or(NO_DATA.into(), |x| x.to_string())
}

/// The section for the ladder variants of one mode.
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
        let Some(l) = &v.ladder else { continue };
        let switches = l
            .switch_log
            .iter()
            .map(|s| {
                format!(
                    "{:.1} s {}→{} ({:?})",
                    s.at_s,
                    s.from_bps / 1000,
                    s.to_bps / 1000,
                    s.reason
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        rows.push(vec![
            v.name.clone(),
            l.policy.map_or(NO_DATA.into(), |p| format!("{p:?}")),
            cell(l.probe_bps.map(|b| b as f64), false, |b| {
                format!("{:.0}", b / 1e3)
            }),
            cell(
                v.latency_ms.max,
                v.latency_ms.lower_bounds.iter().any(|b| b == "max"),
                |x| format!("{:.2}", x / 1e3),
            ),
            cell(v.latency_ms.p50, false, |x| format!("{:.0}", x)),
            format!("{} ({} down)", count(l.switches), count(l.down_switches)),
            format!(
                "{} ({} after 1 s)",
                count(l.rebuffers),
                count(l.rebuffers_after_first_s)
            ),
            cell(l.rate_match_share, false, |x| {
                format!("{:.0}% of {} s", x * 100.0, l.rate_match_seconds)
            }),
            cell(l.streamed_bps, false, |x| format!("{:.0}", x / 1e3)),
            cell(l.throughput_bps, false, |x| format!("{:.0}", x / 1e3)),
            format!("{} of {}", l.frames_dropped_at_server, l.frames_made),
            l.frames_lost.to_string(),
            l.congestion_onsets.to_string(),
            switches,
            crate::render::paper_text(v.paper.as_ref()),
        ]);
        if let Some((rec, samples)) = first_run(mode, records, &v.name) {
            let name = format!("ladder-{tag}-{k}.svg");
            plot(&dir.join(&name), &v.name, rec, &samples)?;
            figures.push_str(&report::figure(
                &name,
                &format!("{}: bit rate and latency", v.name),
            ));
        }
    }
    let table = report::html_table(
        &[
            "variant",
            "server rule",
            "probe kbit/s",
            "max one-way latency s",
            "p50 ms",
            "switches (first run's records below)",
            "rebuffers",
            "throughput ≥ 90% of bit rate",
            "mean bit rate kbit/s",
            "mean throughput kbit/s",
            "frames dropped at the server",
            "frames lost (TFRC)",
            "DBAT onsets",
            "switch records (run 1)",
            "paper",
        ],
        &rows,
    );
    Ok(format!(
        "<h3>Bit-rate ladder (Hasan et al.)</h3><p>Counts are the worst run's; the rate match \
         pools every run's seconds of the stream at the client (its first and last left out), \
         each held against the bit rate streamed one pipeline delay (the median one-way \
         latency) earlier. Frames dropped at \
         the server are ones the transport could not take when they were made (a full send \
         buffer); over TFRC, which does not retransmit, frames sent that never arrived are lost; \
         neither is in the latency numbers.</p>{table}\
         <h3>Bit rate, throughput and one-way latency (run 1)</h3>{figures}"
    ))
}

/// Run 1's ladder record and delivered frames of `name`.
fn first_run<'a>(
    mode: Mode,
    records: &'a [TrialRecord],
    name: &str,
) -> Option<(&'a LadderRecord, Vec<Sample>)> {
    let t = crate::results::first_run(records, mode, name)?;
    let rec = t.ladder.iter().find(|(n, _)| n == name).map(|(_, r)| r)?;
    let samples = t
        .stream_of(name)
        .unwrap_or_default()
        .iter()
        .copied()
        .filter(|s| !s.censored)
        .collect();
    Some((rec, samples))
}

/// Two panels over run time: streamed bit rate (shifted by the pipeline delay) and throughput
/// per second at the client (kbit/s, with the switches as steps), and each delivered frame's
/// one-way latency (s).
fn plot(path: &Path, name: &str, rec: &LadderRecord, samples: &[Sample]) -> Result<(), LabError> {
    let t0 = rec.seconds.first().map_or(0.0, |s| s.t_s);
    let t1 = rec
        .seconds
        .last()
        .map_or(1.0, |s| s.t_s + 1.0)
        .max(t0 + 1.0);
    let kmax = rec
        .seconds
        .iter()
        .map(|s| s.streamed_bps.max(s.throughput_bps) / 1e3)
        .fold(700.0f64, f64::max)
        * 1.1;
    let lmax = samples
        .iter()
        .map(|s| s.latency_ms / 1e3)
        .fold(1.0f64, f64::max)
        * 1.15;
    draw_sized(path, (960, 720), |root| {
        let (top, bottom) = root.split_vertically(360);
        let mut c = titled(&top, &format!("{name}: streamed bit rate and throughput"))
            .build_cartesian_2d(t0..t1, 0f64..kmax)
            .map_err(|e| e.to_string())?;
        c.configure_mesh()
            .x_desc("time (s)")
            .y_desc("kbit/s")
            .draw()
            .map_err(|e| e.to_string())?;
        let line = |f: fn(&crate::ladder_flow::Second) -> f64| {
            rec.seconds
                .iter()
                .flat_map(move |s| [(s.t_s, f(s) / 1e3), (s.t_s + 1.0, f(s) / 1e3)])
                .collect::<Vec<_>>()
        };
        for (i, (label, pts)) in [
            (
                "streamed bit rate, one pipeline delay later",
                line(|s| s.streamed_bps),
            ),
            ("throughput", line(|s| s.throughput_bps)),
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
        for t in &rec.rebuffers_s {
            c.draw_series(std::iter::once(Cross::new((*t, kmax * 0.05), 5, BLACK)))
                .map_err(|e| e.to_string())?;
        }
        legend(&mut c, SeriesLabelPosition::UpperRight)?;
        let mut c = titled(&bottom, &format!("{name}: one-way latency of each frame"))
            .build_cartesian_2d(t0..t1, 0f64..lmax)
            .map_err(|e| e.to_string())?;
        c.configure_mesh()
            .x_desc("send time (s)")
            .y_desc("latency (s)")
            .draw()
            .map_err(|e| e.to_string())?;
        let color = color_of(2, name);
        c.draw_series(
            samples
                .iter()
                .map(|s| Circle::new((s.sent_s, s.latency_ms / 1e3), 1, color.filled())),
        )
        .map_err(|e| e.to_string())?;
        c.draw_series(LineSeries::new([(t0, 1.0), (t1, 1.0)], BLACK.mix(0.6)))
            .map_err(|e| e.to_string())?;
        Ok(())
    })
    .map_err(plot_err("the ladder plot"))
}
