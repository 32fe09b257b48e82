//! The figures as we measured them, one panel per variant, stacked on a shared time axis (SVG,
//! and a PNG copy beside it): packets each flow sent per bin (Fig. 3), layers per video
//! stream (Fig. 6 and 8), the bottleneck queue (Fig. 7).

use std::path::Path;

use plotters::prelude::*;

use crate::LabError;

/// One panel: a variant's name and its lines, each a series of (seconds, value), with a
/// legend when `labels` names them (one per line).
pub struct Panel {
    pub title: String,
    pub lines: Vec<Vec<(f64, f64)>>,
    pub labels: Vec<String>,
}

const LINE_COLORS: [RGBColor; 6] = [
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
];

/// Flows named in the Fig. 3 legend (flow A, B, ...); more are drawn unnamed.
const FLOWS_NAMED: usize = 4;

/// Fig. 3: packets per bin of `bin_s`, one line per flow.
pub fn packets_per_bin(
    path: &Path,
    bin_s: f64,
    panels: &[(String, Vec<&[u64]>)],
) -> Result<(), LabError> {
    let panels: Vec<Panel> = panels
        .iter()
        .map(|(title, flows)| Panel {
            title: title.clone(),
            labels: if flows.len() <= FLOWS_NAMED {
                (0..flows.len())
                    .map(|i| format!("flow {}", (b'A' + i as u8) as char))
                    .collect()
            } else {
                vec![]
            },
            lines: flows
                .iter()
                .map(|f| {
                    f.iter()
                        .enumerate()
                        .map(|(k, &n)| ((k as f64 + 0.5) * bin_s, n as f64))
                        .collect()
                })
                .collect(),
        })
        .collect();
    stacked(
        path,
        &format!("packets / {:.0} ms", bin_s * 1000.0),
        &panels,
    )
}

/// Fig. 6 and 8: a stream's layer count as steps from its points (seconds, layers) to `end_s`.
pub fn steps(points: &[(f64, u32)], end_s: f64) -> Vec<(f64, f64)> {
    let mut out = vec![];
    for (i, &(t, n)) in points.iter().enumerate() {
        let next = points.get(i + 1).map_or(end_s, |p| p.0);
        out.push((t, f64::from(n)));
        out.push((next, f64::from(n)));
    }
    out
}

/// Draws `panels` stacked, sharing the time axis; a legend names the lines of a panel with
/// labels.
pub fn stacked(path: &Path, y_desc: &str, panels: &[Panel]) -> Result<(), LabError> {
    let err = |e: String| LabError::io(format!("drawing {}", path.display()), e);
    let height = 40 + 220 * panels.len() as u32;
    {
        let root = SVGBackend::new(path, (960, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
        let areas = root.split_evenly((panels.len().max(1), 1));
        let points = || panels.iter().flat_map(|p| p.lines.iter().flatten());
        let ymax = points().map(|p| p.1).fold(1.0, f64::max) * 1.1;
        // Room on the right for the legend, so it hides no line's end.
        let legend_room = if panels.iter().any(|p| !p.labels.is_empty()) {
            1.25
        } else {
            1.0
        };
        let xmax = points().map(|p| p.0).fold(1.0, f64::max) * legend_room;
        for (area, panel) in areas.iter().zip(panels) {
            let mut chart = ChartBuilder::on(area)
                .caption(&panel.title, ("sans-serif", 16))
                .margin(8)
                .x_label_area_size(32)
                .y_label_area_size(56)
                .build_cartesian_2d(0f64..xmax, 0f64..ymax)
                .map_err(|e| err(e.to_string()))?;
            chart
                .configure_mesh()
                .x_desc("time (s)")
                .y_desc(y_desc)
                .draw()
                .map_err(|e| err(e.to_string()))?;
            let legend = !panel.labels.is_empty();
            for (i, line) in panel.lines.iter().enumerate() {
                let color = LINE_COLORS[i % LINE_COLORS.len()];
                let series = chart
                    .draw_series(LineSeries::new(line.iter().copied(), color.stroke_width(1)))
                    .map_err(|e| err(e.to_string()))?;
                if let Some(label) = panel.labels.get(i) {
                    series.label(label.as_str()).legend(move |(x, y)| {
                        Rectangle::new([(x, y - 4), (x + 10, y + 4)], color.filled())
                    });
                }
            }
            if legend {
                chart
                    .configure_series_labels()
                    .position(SeriesLabelPosition::UpperRight)
                    .background_style(WHITE.mix(0.85))
                    .border_style(BLACK)
                    .draw()
                    .map_err(|e| err(e.to_string()))?;
            }
        }
        root.present().map_err(|e| err(e.to_string()))?;
    }
    crate::report::png_copy(path).map_err(err)
}
