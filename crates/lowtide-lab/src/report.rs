//! Reports a person reads: SVG plots (plotters) and one HTML page that shows them with the
//! table and the provenance, readable offline.

use std::path::Path;

use plotters::prelude::*;

use crate::stream::Sample;
use crate::LabError;

/// One series of a plot.
pub struct Series<'a> {
    pub name: &'a str,
    pub samples: &'a [Sample],
}

/// Tableau's ten colours and black: ten besides the floor's grey, so the most variants a
/// scenario may have (`MAX_VARIANTS`) never share a colour.
const COLORS: [RGBColor; 11] = [
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(120, 120, 120),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
    RGBColor(23, 190, 207),
    RGBColor(227, 119, 194),
    RGBColor(188, 189, 34),
    RGBColor(0, 0, 0),
];

/// The series name the floor probe is drawn under; it is always grey.
pub const FLOOR_SERIES: &str = "network floor (UDP)";

/// Grey for the floor probe; the palette (grey skipped) for the rest, in order.
pub(crate) fn color_of(i: usize, name: &str) -> RGBColor {
    if name == FLOOR_SERIES {
        return COLORS[2];
    }
    let palette: Vec<RGBColor> = COLORS
        .iter()
        .enumerate()
        .filter(|(k, _)| *k != 2)
        .map(|(_, c)| *c)
        .collect();
    palette[i % palette.len()]
}

pub(crate) fn plot_err(what: &str) -> impl FnOnce(String) -> LabError + '_ {
    move |e| LabError::io(format!("drawing {what}"), e)
}

/// Latency of every message against its send time, log scale, with the paper's 160 and
/// 500 ms lines and the links' outages shaded (from, to, label).
pub fn latency_over_time(
    path: &Path,
    title: &str,
    series: &[Series],
    duration_s: f64,
    outages: &[(f64, f64, String)],
) -> Result<(), LabError> {
    let ymax = latency_axis_max(series);
    draw(path, |root| {
        let mut chart = titled(&root, title)
            .build_cartesian_2d(0f64..duration_s, (1f64..ymax).log_scale())
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("send time (s)")
            .y_desc("latency (ms, log)")
            .draw()
            .map_err(|e| e.to_string())?;
        for (k, (from, to, label)) in outages.iter().enumerate() {
            let shade = RGBColor(200, 60, 60).mix(0.12);
            let area = chart
                .draw_series([Rectangle::new([(*from, 1.0), (*to, ymax)], shade.filled())])
                .map_err(|e| e.to_string())?;
            if k == 0 || outages[..k].iter().all(|o| o.2 != *label) {
                area.label(label.clone()).legend(move |(x, y)| {
                    Rectangle::new([(x, y - 4), (x + 10, y + 4)], shade.filled())
                });
            }
        }
        for (i, s) in series.iter().enumerate() {
            let color = color_of(i, s.name);
            chart
                .draw_series(
                    s.samples
                        .iter()
                        .map(|x| Circle::new((x.sent_s, x.latency_ms.max(1.0)), 1, color.filled())),
                )
                .map_err(|e| e.to_string())?
                .label(s.name)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 4), (x + 10, y + 4)], color.filled())
                });
        }
        for t in [160.0, 500.0] {
            chart
                .draw_series(LineSeries::new([(0.0, t), (duration_s, t)], BLACK.mix(0.6)))
                .map_err(|e| e.to_string())?;
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
        Ok(())
    })
    .map_err(plot_err("the latency plot"))
}

/// The top of a latency axis: the largest sample (at least 1 s, so the 160 and 500 ms lines
/// always show) with 20% headroom.
fn latency_axis_max(series: &[Series]) -> f64 {
    series
        .iter()
        .flat_map(|s| s.samples.iter().map(|x| x.latency_ms))
        .fold(1000.0f64, f64::max)
        * 1.2
}

/// Cumulative distribution of latency, log x, one line per series.
pub fn latency_cdf(path: &Path, title: &str, series: &[Series]) -> Result<(), LabError> {
    let xmax = latency_axis_max(series);
    draw(path, |root| {
        let mut chart = titled(&root, title)
            .build_cartesian_2d((1f64..xmax).log_scale(), 0f64..1f64)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("latency (ms, log)")
            .y_desc("share of messages at or below")
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, s) in series.iter().enumerate() {
            let color = color_of(i, s.name);
            let mut v: Vec<f64> = s.samples.iter().map(|x| x.latency_ms.max(1.0)).collect();
            v.sort_by(|a, b| a.total_cmp(b));
            let n = v.len().max(1) as f64;
            // At most ~2000 points per line keeps the SVG small.
            let step = (v.len() / 2000).max(1);
            let points = v
                .iter()
                .enumerate()
                .filter(|(k, _)| k % step == 0 || *k + 1 == v.len())
                .map(|(k, x)| (*x, (k + 1) as f64 / n));
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(s.name)
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 14, y)], color.stroke_width(2))
                });
        }
        for t in [160.0, 500.0] {
            chart
                .draw_series(LineSeries::new([(t, 0.0), (t, 1.0)], BLACK.mix(0.5)))
                .map_err(|e| e.to_string())?;
        }
        legend(&mut chart, SeriesLabelPosition::LowerRight)?;
        Ok(())
    })
    .map_err(plot_err("the latency distribution"))
}

/// One line of [`windows_on_time`]: the latencies of the windows that arrived whole, and how
/// many windows were transmitted (the rest never arrived whole).
pub struct WindowCurve<'a> {
    pub name: &'a str,
    pub whole_latency_ms: Vec<f64>,
    pub transmitted: usize,
}

/// Goel et al. Fig. 8 and 9: the share of transmitted windows that arrived whole within a
/// latency tolerance, as a curve over the tolerance.
pub fn windows_on_time(path: &Path, title: &str, curves: &[WindowCurve]) -> Result<(), LabError> {
    const XMAX: f64 = 2000.0;
    draw(path, |root| {
        let mut chart = titled(&root, title)
            .build_cartesian_2d(0f64..XMAX, 0f64..1f64)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("latency tolerance (ms, capture to whole window)")
            .y_desc("share of windows whole in time")
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, c) in curves.iter().enumerate() {
            let color = color_of(i, c.name);
            let mut v = c.whole_latency_ms.clone();
            v.sort_by(|a, b| a.total_cmp(b));
            let n = c.transmitted.max(1) as f64;
            let mut points = vec![(0.0, 0.0)];
            for (k, x) in v.iter().enumerate().filter(|(_, x)| **x <= XMAX) {
                points.push((*x, k as f64 / n));
                points.push((*x, (k + 1) as f64 / n));
            }
            let last = points.last().map_or(0.0, |p| p.1);
            points.push((XMAX, last));
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(c.name)
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 14, y)], color.stroke_width(2))
                });
        }
        chart
            .draw_series(LineSeries::new(
                [(500.0, 0.0), (500.0, 1.0)],
                BLACK.mix(0.5),
            ))
            .map_err(|e| e.to_string())?;
        legend(&mut chart, SeriesLabelPosition::LowerRight)?;
        Ok(())
    })
    .map_err(plot_err("the windows-on-time curve"))
}

/// One bar of [`normalized_throughput`]: a label, the mean and its 95% interval.
pub struct Bar {
    pub label: String,
    pub mean: f64,
    pub low: f64,
    pub high: f64,
}

/// Throughput normalised to plain TCP: a bar per variant, the 95% confidence interval over
/// runs as a whisker (as Goel et al. Fig. 6 shows it), a line at 1.
pub fn normalized_throughput(path: &Path, title: &str, bars: &[Bar]) -> Result<(), LabError> {
    let ymax = bars
        .iter()
        .map(|b| b.high.max(b.mean))
        .fold(1.2f64, f64::max)
        * 1.1;
    let n = bars.len().max(1);
    draw(path, |root| {
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(60)
            .y_label_area_size(64)
            .build_cartesian_2d(0f64..n as f64, 0f64..ymax)
            .map_err(|e| e.to_string())?;
        let label_of = |x: &f64| {
            let i = x.floor() as usize;
            if (x - i as f64 - 0.5).abs() < 1e-6 {
                bars.get(i).map(|b| b.label.clone()).unwrap_or_default()
            } else {
                String::new()
            }
        };
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(2 * n + 1)
            .x_label_formatter(&label_of)
            .y_desc("throughput / plain TCP's")
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, b) in bars.iter().enumerate() {
            let x = i as f64;
            let color = color_of(i, &b.label);
            chart
                .draw_series([Rectangle::new(
                    [(x + 0.2, 0.0), (x + 0.8, b.mean)],
                    color.mix(0.7).filled(),
                )])
                .map_err(|e| e.to_string())?;
            let whisker = [
                vec![(x + 0.5, b.low), (x + 0.5, b.high)],
                vec![(x + 0.4, b.low), (x + 0.6, b.low)],
                vec![(x + 0.4, b.high), (x + 0.6, b.high)],
            ];
            for w in whisker {
                chart
                    .draw_series(LineSeries::new(w, BLACK.stroke_width(2)))
                    .map_err(|e| e.to_string())?;
            }
        }
        chart
            .draw_series(LineSeries::new(
                [(0.0, 1.0), (n as f64, 1.0)],
                BLACK.mix(0.5),
            ))
            .map_err(|e| e.to_string())?;
        Ok(())
    })
    .map_err(plot_err("the throughput plot"))
}

/// A chart with the report's title style and label areas.
pub(crate) fn titled<'a, 'b, DB: DrawingBackend>(
    root: &'a DrawingArea<DB, plotters::coord::Shift>,
    title: &'b str,
) -> ChartBuilder<'a, 'b, DB> {
    let mut b = ChartBuilder::on(root);
    b.caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64);
    b
}

/// The series names, boxed, at `at`.
pub(crate) fn legend<'a, DB: DrawingBackend + 'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    at: SeriesLabelPosition,
) -> Result<(), String> {
    chart
        .configure_series_labels()
        .position(at)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())
}

/// Draws the SVG at `path`, then its PNG copy beside it.
pub(crate) fn draw(
    path: &Path,
    body: impl FnOnce(DrawingArea<SVGBackend, plotters::coord::Shift>) -> Result<(), String>,
) -> Result<(), String> {
    draw_sized(path, (960, 440), body)
}

/// [`draw`] on a canvas of `size` pixels.
pub(crate) fn draw_sized(
    path: &Path,
    size: (u32, u32),
    body: impl FnOnce(DrawingArea<SVGBackend, plotters::coord::Shift>) -> Result<(), String>,
) -> Result<(), String> {
    let root = SVGBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    body(root.clone())?;
    root.present().map_err(|e| e.to_string())?;
    drop(root);
    png_copy(path)
}

/// Rasterises an SVG to the same name with `.png` (resvg). The text needs a sans-serif font
/// on the system (`run.sh` installs DejaVu); without one the PNG has no labels, the SVG is
/// unaffected.
pub(crate) fn png_copy(svg_path: &Path) -> Result<(), String> {
    use resvg::{tiny_skia, usvg};
    static OPTIONS: std::sync::OnceLock<usvg::Options<'static>> = std::sync::OnceLock::new();
    let opt = OPTIONS.get_or_init(|| {
        let mut opt = usvg::Options::default();
        let db = opt.fontdb_mut();
        db.load_system_fonts();
        db.set_sans_serif_family("DejaVu Sans");
        opt
    });
    let svg = std::fs::read(svg_path).map_err(|e| e.to_string())?;
    let tree = usvg::Tree::from_data(&svg, opt).map_err(|e| e.to_string())?;
    let size = tree.size().to_int_size();
    let mut pixmap =
        tiny_skia::Pixmap::new(size.width(), size.height()).ok_or("the plot has no area")?;
    pixmap.fill(tiny_skia::Color::WHITE);
    resvg::render(&tree, tiny_skia::Transform::default(), &mut pixmap.as_mut());
    pixmap
        .save_png(svg_path.with_extension("png"))
        .map_err(|e| e.to_string())
}

/// A plot as the report shows it: the SVG, and a link to its PNG copy.
pub fn figure(svg: &str, alt: &str) -> String {
    let png = Path::new(svg).with_extension("png");
    format!(
        "<img src=\"{svg}\" alt=\"{alt}\"><br><a href=\"{}\">PNG</a>",
        png.display()
    )
}

/// Escapes text for HTML.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// An HTML table from a header and rows of already-formatted cells.
pub fn html_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = String::from("<table>\n<tr>");
    for h in header {
        out.push_str(&format!("<th>{}</th>", escape(h)));
    }
    out.push_str("</tr>\n");
    for row in rows {
        out.push_str("<tr>");
        for c in row {
            out.push_str(&format!("<td>{}</td>", escape(c)));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
    out
}

/// The page around the parts: a title, provenance lines, and HTML sections.
pub fn page(title: &str, provenance: &[(String, String)], sections: &[String]) -> String {
    let prov: String = provenance
        .iter()
        .map(|(k, v)| {
            format!(
                "<tr><th>{}</th><td><code>{}</code></td></tr>\n",
                escape(k),
                escape(v)
            )
        })
        .collect();
    format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{t}</title>\n<style>\
         body{{font-family:sans-serif;max-width:1000px;margin:2em auto;color:#222}}\
         table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #bbb;padding:4px 8px;text-align:left}}\
         th{{background:#f2f2f2}}img{{max-width:100%}}code{{font-size:90%}}</style></head>\n<body>\n<h1>{t}</h1>\n\
         {body}\n<h2>Provenance</h2>\n<table>\n{prov}</table>\n</body></html>\n",
        t = escape(title),
        body = sections.join("\n"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_of_a_full_scenario_has_its_own_colour() {
        let n = crate::scenario::MAX_VARIANTS;
        let colours: Vec<RGBColor> = (0..n).map(|i| color_of(i, "variant")).collect();
        for (i, a) in colours.iter().enumerate() {
            assert_ne!(
                *a,
                color_of(0, FLOOR_SERIES),
                "variant {i} drawn in the floor's grey"
            );
            for b in &colours[i + 1..] {
                assert_ne!(a, b, "two of {n} variants share a colour");
            }
        }
    }

    fn samples() -> Vec<Sample> {
        (0..500)
            .map(|i| Sample::delivered(i as f64 * 0.02, 40.0 + (i % 50) as f64 * 20.0))
            .collect()
    }

    #[test]
    fn plots_render_to_svg_from_recorded_data() {
        let dir = std::env::temp_dir().join(format!("lowtide-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let s = samples();
        let series = [Series {
            name: "plain TCP",
            samples: &s,
        }];
        let outage = [(2.0, 4.0, "outage".to_string())];
        latency_over_time(&dir.join("t.svg"), "latency", &series, 10.0, &outage).unwrap();
        latency_cdf(&dir.join("c.svg"), "cdf", &series).unwrap();
        for f in ["t.svg", "c.svg"] {
            let svg = std::fs::read_to_string(dir.join(f)).unwrap();
            assert!(svg.starts_with("<svg") && svg.contains("plain TCP"), "{f}");
            assert!(svg.matches("<circle").count() >= 500 || f == "c.svg");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn html_escapes_what_it_shows() {
        let t = html_table(&["a"], &[vec!["<b>&".into()]]);
        assert!(t.contains("&lt;b&gt;&amp;"));
        let p = page("x<y", &[("command".into(), "a && b".into())], &[t]);
        assert!(p.contains("x&lt;y") && p.contains("a &amp;&amp; b"));
    }
}
