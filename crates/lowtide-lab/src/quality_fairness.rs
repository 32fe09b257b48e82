//! Quality fairness among the videos of one channel (Erbad and Krasic, "Sender-side Buffers
//! and the Case for Multimedia Adaptation", Fig. 7 and "Stream Fairness: From Which
//! Stream?"): three videos on three streams of one Paceline channel show the same frame rate
//! over time while their bandwidth shares differ, because quality fairness advances a
//! stream's virtual time by an indicator of application quality instead of by bytes.
//!
//! Here every ADU costs 1 (`crate::conference`'s sender), so under
//! `Fairness::Quality` the channel's virtual-time scheduler gives every backlogged video the
//! same ADU rate whatever its ADU size. From the ADUs of a run this module computes, per
//! video, the frame rate and the share of the bytes that arrived: over the measurement window
//! ([`VideoShare`]) and second by second ([`timeline`], the plot of Fig. 7).
//!
//! Where we differ:
//! - the paper's quality indicator is the frame rate; ours is the ADU (one layer of a
//!   frame), which equals it only when every video is cut into the same eight layers;
//! - the share is of the bytes that arrived (ADUs captured in the second), not of what the
//!   sender wrote, so cancelled ADUs do not count.

use std::path::Path;

use lowtide_media::conference::Conference;
use lowtide_media::session::ConferenceSent;
use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use crate::conference::{viewer_of, AduRecord};
use crate::report::{self, color_of, draw_sized, legend, plot_err, titled};
use crate::results::{LabSummary, TrialRecord, VariantSummary, Window};
use crate::scenario::Mode;
use crate::stats::MeanCi;
use crate::summary::NO_DATA;
use crate::LabError;

/// One video of a channel over the measurement window.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct VideoShare {
    pub rate_bps: f64,
    /// Frames shown per second: mean and 95% CI over runs.
    pub fps: Option<MeanCi>,
    /// Its share of the bytes that arrived of every video's ADUs captured in the window,
    /// pooled over runs; `None` when nothing arrived.
    pub byte_share: Option<f64>,
}

impl VideoShare {
    /// Each video of `videos` (stream order) over the runs' ADUs.
    pub fn of(
        videos: &[Conference],
        runs: &[(&[AduRecord], Option<&ConferenceSent>)],
        w: Window,
    ) -> Vec<VideoShare> {
        let arrived = |video| arrived_bytes(runs.iter().flat_map(|(r, _)| r.iter()), video, w);
        let total = arrived(None);
        videos
            .iter()
            .enumerate()
            .map(|(video, &conf)| {
                let fps: Vec<f64> = runs
                    .iter()
                    .filter_map(|(r, _)| viewer_of(conf, video as u8, r).fps(w.from_s, w.to_s))
                    .collect();
                VideoShare {
                    rate_bps: conf.rate_bps,
                    fps: MeanCi::of(&fps),
                    byte_share: (total > 0.0).then(|| arrived(Some(video as u8)) / total),
                }
            })
            .collect()
    }
}

/// Bytes that arrived of the ADUs captured in `w`, of one video or (`None`) of every video.
fn arrived_bytes<'a>(
    adus: impl IntoIterator<Item = &'a AduRecord>,
    video: Option<u8>,
    w: Window,
) -> f64 {
    adus.into_iter()
        .filter(|a| video.is_none_or(|v| a.video == v))
        .filter(|a| w.contains(a.capture_s) && a.latency_ms.is_some())
        .map(|a| f64::from(a.bytes))
        .sum()
}

/// One second of a run: per video (stream order) its frame rate and byte share, `None` where
/// no frame was captured or nothing arrived.
#[derive(Debug, Clone, PartialEq)]
pub struct Second {
    pub from_s: f64,
    pub fps: Vec<Option<f64>>,
    pub share: Vec<Option<f64>>,
}

/// The seconds of `w` (a last partial second included) for the ADUs of one run.
pub fn timeline(videos: &[Conference], adus: &[AduRecord], w: Window) -> Vec<Second> {
    let viewers: Vec<_> = (0..videos.len())
        .map(|v| viewer_of(videos[v], v as u8, adus))
        .collect();
    let seconds = w.len_s().max(0.0).ceil() as usize;
    (0..seconds)
        .map(|k| {
            let from_s = w.from_s + k as f64;
            let to_s = (from_s + 1.0).min(w.to_s);
            let second = Window { from_s, to_s };
            let bytes: Vec<f64> = (0..videos.len())
                .map(|v| arrived_bytes(adus, Some(v as u8), second))
                .collect();
            let total: f64 = bytes.iter().sum();
            Second {
                from_s,
                fps: viewers.iter().map(|v| v.fps(from_s, to_s)).collect(),
                share: bytes
                    .iter()
                    .map(|b| (total > 0.0).then(|| b / total))
                    .collect(),
            }
        })
        .collect()
}

/// How unequal the frame rates are: over the seconds where every video has one, the mean of
/// the highest minus the lowest (frames/s); `None` without such a second.
pub fn fps_spread(seconds: &[Second]) -> Option<f64> {
    let gaps: Vec<f64> = seconds
        .iter()
        .filter_map(|s| {
            let fps: Vec<f64> = s.fps.iter().copied().collect::<Option<_>>()?;
            let hi = fps.iter().copied().fold(f64::MIN, f64::max);
            let lo = fps.iter().copied().fold(f64::MAX, f64::min);
            (!fps.is_empty()).then_some(hi - lo)
        })
        .collect();
    (!gaps.is_empty()).then(|| gaps.iter().sum::<f64>() / gaps.len() as f64)
}

/// Fig. 7 as a plot: each video's frame rate (top) and byte share (bottom) second by second.
pub fn plot(
    path: &Path,
    title: &str,
    videos: &[Conference],
    seconds: &[Second],
    w: Window,
) -> Result<(), LabError> {
    let names: Vec<String> = videos
        .iter()
        .enumerate()
        .map(|(i, c)| format!("video {} ({:.1} Mbit/s)", i + 1, c.rate_bps / 1e6))
        .collect();
    let fps_max = videos.iter().map(|c| c.fps).fold(1.0, f64::max) * 1.1;
    let panel = |area: &DrawingArea<SVGBackend, plotters::coord::Shift>,
                 caption: &str,
                 ymax: f64,
                 y_desc: &str,
                 legend_at: SeriesLabelPosition,
                 value: &dyn Fn(&Second, usize) -> Option<f64>|
     -> Result<(), String> {
        let mut chart = titled(area, caption)
            .build_cartesian_2d(w.from_s..w.to_s, 0f64..ymax)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("capture time (s)")
            .y_desc(y_desc)
            .draw()
            .map_err(|e| e.to_string())?;
        for (v, name) in names.iter().enumerate() {
            let color = color_of(v, name);
            // A second without data breaks the line rather than drawing it at zero.
            let mut runs: Vec<Vec<(f64, f64)>> = vec![vec![]];
            for s in seconds {
                match value(s, v) {
                    Some(y) => runs
                        .last_mut()
                        .expect("never empty")
                        .push((s.from_s + 0.5, y)),
                    None => runs.push(vec![]),
                }
            }
            let mut labelled = false;
            for points in runs.into_iter().filter(|p| !p.is_empty()) {
                let series = chart
                    .draw_series(LineSeries::new(points, color.stroke_width(2)))
                    .map_err(|e| e.to_string())?;
                if !labelled {
                    series.label(name.as_str()).legend(move |(x, y)| {
                        PathElement::new([(x, y), (x + 14, y)], color.stroke_width(2))
                    });
                    labelled = true;
                }
            }
        }
        legend(&mut chart, legend_at)
    };
    draw_sized(path, (960, 720), |root| {
        let areas = root.split_evenly((2, 1));
        panel(
            &areas[0],
            title,
            fps_max,
            "frames shown per s",
            SeriesLabelPosition::LowerRight,
            &|s, v| s.fps[v],
        )?;
        panel(
            &areas[1],
            "share of the bytes that arrived",
            1.0,
            "byte share",
            SeriesLabelPosition::UpperRight,
            &|s, v| s.share[v],
        )
    })
    .map_err(plot_err("the quality-fairness plot"))
}

/// The report's Fig. 7 section: a table of each video's frame rate and byte share per
/// conference variant with several videos, and the plot of run 1 of each.
pub fn section(
    dir: &Path,
    tag: &str,
    mode: Mode,
    variants: &[&VariantSummary],
    s: &LabSummary,
    records: &[TrialRecord],
) -> Result<String, LabError> {
    let mut rows = vec![];
    let mut figures = String::new();
    for (k, v) in variants.iter().enumerate() {
        let Some(c) = v.conference.as_ref().filter(|c| !c.videos.is_empty()) else {
            continue;
        };
        for (i, x) in c.videos.iter().enumerate() {
            rows.push(vec![
                v.name.clone(),
                format!("{} ({:.1} Mbit/s)", i + 1, x.rate_bps / 1e6),
                x.fps.map_or(NO_DATA.into(), |f| format!("{:.1}", f.mean)),
                x.byte_share
                    .map_or(NO_DATA.into(), |b| format!("{:.1}%", b * 100.0)),
                c.fps_spread.map_or(NO_DATA.into(), |g| format!("{g:.1}")),
            ]);
        }
        let videos: Vec<Conference> = c
            .videos
            .iter()
            .map(|x| Conference {
                rate_bps: x.rate_bps,
                fps: crate::video::FPS,
                threshold: std::time::Duration::from_secs_f64(c.threshold_ms / 1e3),
                drop_superseded: true,
                age_cancel: None,
            })
            .collect();
        let first = records
            .iter()
            .filter(|r| r.mode == Some(mode) && r.run == 1)
            .find_map(|r| r.adus.iter().find(|(n, _)| *n == v.name));
        if let Some((_, adus)) = first {
            let file = format!("quality-fairness-{tag}-{k}.svg");
            let seconds = timeline(&videos, adus, s.window);
            plot(
                &dir.join(&file),
                &format!("{}: frame rate per video (run 1)", v.name),
                &videos,
                &seconds,
                s.window,
            )?;
            figures.push_str(&report::figure(
                &file,
                "frame rate and byte share per video",
            ));
        }
    }
    Ok(format!(
        "<h3>Quality fairness (Erbad and Krasic, Fig. 7)</h3><p>Several videos on one channel, \
         one stream each. Frame rate and share of the bytes that arrived per video over the \
         measurement window; the spread is, second by second, the highest frame rate minus the \
         lowest (mean over the seconds; 0 = equal quality).</p>{}{figures}",
        report::html_table(
            &[
                "variant",
                "video",
                "frames shown per s",
                "byte share",
                "frame-rate spread (frames/s)"
            ],
            &rows
        )
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn conf(mbps: f64) -> Conference {
        Conference {
            rate_bps: mbps * 1e6,
            fps: 30.0,
            threshold: Duration::from_millis(200),
            drop_superseded: true,
            age_cancel: None,
        }
    }

    /// Two videos of 2 and 6 Mbit/s: every frame's base arrives for both in the first
    /// second; in the second, the 2 Mbit/s video loses every other frame's base.
    fn adus(videos: &[Conference]) -> Vec<AduRecord> {
        let mut out = vec![];
        for (v, c) in videos.iter().enumerate() {
            for frame in 0..60 {
                let lost = v == 0 && frame >= 30 && frame % 2 == 1;
                out.push(AduRecord {
                    video: v as u8,
                    frame,
                    layer: 0,
                    capture_s: c.capture_s(frame),
                    bytes: c.adu_bytes() as u32,
                    latency_ms: (!lost).then_some(50.0),
                    written_ms: None,
                });
            }
        }
        out
    }

    #[test]
    fn each_video_gets_its_frame_rate_and_byte_share() {
        let videos = [conf(2.0), conf(6.0)];
        let adus = adus(&videos);
        let w = Window {
            from_s: 0.0,
            to_s: 2.0,
        };
        let s = VideoShare::of(&videos, &[(&adus, None)], w);
        assert!((s[0].fps.unwrap().mean - 22.5).abs() < 1e-9, "{s:?}");
        assert!((s[1].fps.unwrap().mean - 30.0).abs() < 1e-9);
        // 45 ADUs of 1,042 bytes against 60 of 3,125.
        let want = 45.0 * 1042.0 / (45.0 * 1042.0 + 60.0 * 3125.0);
        assert!((s[0].byte_share.unwrap() - want).abs() < 1e-9, "{s:?}");
        assert!((s[0].byte_share.unwrap() + s[1].byte_share.unwrap() - 1.0).abs() < 1e-9);

        let t = timeline(&videos, &adus, w);
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].fps, vec![Some(30.0), Some(30.0)]);
        assert_eq!(t[1].fps, vec![Some(15.0), Some(30.0)]);
        assert!((t[0].share[1].unwrap() - 3125.0 / (3125.0 + 1042.0)).abs() < 1e-9);
        assert_eq!(fps_spread(&t), Some(7.5));

        // Nothing captured in the window: no data, not zero.
        let late = Window {
            from_s: 10.0,
            to_s: 11.0,
        };
        let none = VideoShare::of(&videos, &[(&adus, None)], late);
        assert_eq!((none[0].fps, none[0].byte_share), (None, None));
        let t = timeline(&videos, &adus, late);
        assert_eq!(t[0].share, vec![None, None]);
        assert_eq!(fps_spread(&t), None);
    }
}
