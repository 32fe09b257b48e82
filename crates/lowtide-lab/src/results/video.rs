//! What a video variant's viewer got (Goel et al. Fig. 8 and 9, Tables II and III), over the
//! windows captured in the measurement window.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::stats::MeanCi;
use crate::summary::Measured;
use crate::video::WindowRecord;

/// Tolerances `windows_within_ms` reports.
pub const TOLERANCES_MS: [f64; 3] = [250.0, 500.0, 1000.0];

/// How a video variant's windows are cut and shown.
#[derive(Debug, Clone, Copy)]
pub struct VideoInfo {
    pub window_frames: u32,
    /// Display deadline after capture, ms.
    pub tolerance_ms: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct VideoSummary {
    /// Share of transmitted windows whole within 250, 500 and 1000 ms of their capture
    /// (`null` when no window was transmitted).
    pub windows_within_ms: BTreeMap<String, Option<f64>>,
    /// Share of windows of which the sender wrote nothing (pooled over runs)...
    pub dropped_windows: Option<f64>,
    /// ...and its mean and 95% interval over runs.
    pub dropped_windows_runs: Option<MeanCi>,
    /// Layers shown per frame at the display tolerance (0 for a frame not shown).
    pub mean_layers: Option<f64>,
    /// Frames shown per second.
    pub fps: Option<f64>,
    pub windows: usize,
    pub transmitted_windows: usize,
    pub frames: u64,
    pub display_tolerance_ms: f64,
    pub window_frames: u32,
}

impl VideoSummary {
    /// `runs`: per run, the windows captured in the measurement window.
    pub fn of(runs: &[Vec<WindowRecord>], fps: f64, info: VideoInfo) -> Option<Self> {
        let all: Vec<&WindowRecord> = runs.iter().flatten().collect();
        if all.is_empty() {
            return None;
        }
        let transmitted: Vec<&&WindowRecord> = all.iter().filter(|x| x.transmitted()).collect();
        let within = |t: f64| {
            let ok = transmitted
                .iter()
                .filter(|x| x.latency_ms.is_some_and(|l| l <= t))
                .count();
            Measured::share(ok, transmitted.len()).value
        };
        let share_dropped = |ws: &[&WindowRecord]| {
            ws.iter().filter(|x| x.dropped()).count() as f64 / ws.len() as f64
        };
        let frames: u64 = all.iter().map(|x| u64::from(x.frames)).sum();
        let per_frame = |f: fn(&WindowRecord) -> u32| {
            (frames > 0).then(|| all.iter().map(|x| f64::from(f(x))).sum::<f64>() / frames as f64)
        };
        Some(Self {
            windows_within_ms: TOLERANCES_MS
                .iter()
                .map(|t| (format!("{t:.0}"), within(*t)))
                .collect(),
            dropped_windows: Some(share_dropped(&all)),
            dropped_windows_runs: MeanCi::of(
                &runs
                    .iter()
                    .filter(|r| !r.is_empty())
                    .map(|r| share_dropped(&r.iter().collect::<Vec<_>>()))
                    .collect::<Vec<_>>(),
            ),
            mean_layers: per_frame(|x| x.layers_shown),
            fps: per_frame(|x| x.frames_shown).map(|share| share * fps),
            windows: all.len(),
            transmitted_windows: transmitted.len(),
            frames,
            display_tolerance_ms: info.tolerance_ms,
            window_frames: info.window_frames,
        })
    }

    /// Share of transmitted windows whole within `tolerance_ms`, over the transmitted windows.
    pub fn within(&self, tolerance_ms: f64) -> Measured {
        let v = self
            .windows_within_ms
            .get(&format!("{tolerance_ms:.0}"))
            .copied()
            .flatten();
        Measured::new(v, self.transmitted_windows)
    }

    /// Share of windows dropped, over all windows.
    pub fn dropped(&self) -> Measured {
        Measured::new(self.dropped_windows, self.windows)
    }

    /// Layers shown per frame, over the frames.
    pub fn layers(&self) -> Measured {
        Measured::new(self.mean_layers, self.frames as usize)
    }
}
