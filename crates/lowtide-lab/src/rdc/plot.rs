//! Fig. 3 as we measured it: packets each flow sent per bin over time, one panel per variant
//! (SVG, and a PNG copy beside it).

use std::path::Path;

use plotters::prelude::*;

use crate::LabError;

/// One panel: a variant's name and each flow's packets per bin.
pub struct Panel<'a> {
    pub title: String,
    pub flows: Vec<&'a [u64]>,
}

const FLOW_COLORS: [RGBColor; 4] = [
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
];

/// Draws `panels` stacked, sharing the time axis (`bin_s` per point).
pub fn packets_per_bin(path: &Path, bin_s: f64, panels: &[Panel]) -> Result<(), LabError> {
    let err = |e: String| LabError::io("drawing the packets-per-bin plot", e);
    let height = 40 + 220 * panels.len() as u32;
    {
        let root = SVGBackend::new(path, (960, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
        let areas = root.split_evenly((panels.len().max(1), 1));
        let ymax = panels
            .iter()
            .flat_map(|p| p.flows.iter().flat_map(|f| f.iter().copied()))
            .max()
            .unwrap_or(1) as f64
            * 1.1;
        let xmax = panels
            .iter()
            .flat_map(|p| p.flows.iter().map(|f| f.len()))
            .max()
            .unwrap_or(1) as f64
            * bin_s;
        for (area, panel) in areas.iter().zip(panels) {
            let mut chart = ChartBuilder::on(area)
                .caption(&panel.title, ("sans-serif", 16))
                .margin(8)
                .x_label_area_size(32)
                .y_label_area_size(56)
                .build_cartesian_2d(0f64..xmax, 0f64..ymax.max(1.0))
                .map_err(|e| err(e.to_string()))?;
            chart
                .configure_mesh()
                .x_desc("time (s)")
                .y_desc(format!("packets / {:.0} ms", bin_s * 1000.0))
                .draw()
                .map_err(|e| err(e.to_string()))?;
            for (i, flow) in panel.flows.iter().enumerate() {
                let color = FLOW_COLORS[i % FLOW_COLORS.len()];
                chart
                    .draw_series(LineSeries::new(
                        flow.iter()
                            .enumerate()
                            .map(|(k, &n)| ((k as f64 + 0.5) * bin_s, n as f64)),
                        color.stroke_width(1),
                    ))
                    .map_err(|e| err(e.to_string()))?
                    .label(format!("flow {}", (b'A' + i as u8) as char))
                    .legend(move |(x, y)| {
                        Rectangle::new([(x, y - 4), (x + 10, y + 4)], color.filled())
                    });
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(|e| err(e.to_string()))?;
        }
        root.present().map_err(|e| err(e.to_string()))?;
    }
    crate::report::png_copy(path).map_err(err)
}
