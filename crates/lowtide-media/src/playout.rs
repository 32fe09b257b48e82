//! The priority-progress receiver: collects each window's messages (they arrive in priority
//! order), reorders them by frame, and shows every frame at its deadline, capture time plus
//! the latency tolerance, with as many layers as arrived in order from the base. It measures
//! what a viewer gets: layers shown per frame, frame rate, and the share of windows that
//! arrived whole within the tolerance (the metric of Goel et al. 2008 Fig. 8 and 9).
//!
//! "Whole" means every message the sender finished writing for the window (it says how many
//! in the window-end message) arrived; a window's latency is from the capture of its first
//! frame to the arrival of its last message.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::wire::MediaHeader;

#[derive(Debug, Clone, Default)]
struct WindowState {
    arrived: u32,
    bytes: u64,
    last_arrival_s: f64,
    sent: Option<u32>,
}

/// Collects arrivals; all times are seconds from the stream start on the sender's clock.
#[derive(Debug, Clone)]
pub struct Playout {
    fps: f64,
    window_frames: u32,
    tolerance_s: f64,
    /// Per frame, per layer: arrival time.
    frames: BTreeMap<u32, BTreeMap<u8, f64>>,
    windows: BTreeMap<u32, WindowState>,
}

/// What the viewer got.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PlayoutStats {
    pub frames: u32,
    /// Frames shown (base layer in time) per second of video.
    pub fps: f64,
    /// Layers shown per frame, 0 for a frame not shown; `None` without frames.
    pub mean_layers: Option<f64>,
    /// Windows the sender transmitted (wrote at least one message of).
    pub transmitted_windows: u32,
    /// Per transmitted window: latency until it was whole, None if it never was.
    pub window_latency_s: Vec<Option<f64>>,
}

impl PlayoutStats {
    /// Share of transmitted windows that were whole within `tolerance_s`; `None` when no
    /// window was transmitted.
    pub fn windows_within(&self, tolerance_s: f64) -> Option<f64> {
        if self.transmitted_windows == 0 {
            return None;
        }
        let ok = self
            .window_latency_s
            .iter()
            .filter(|l| l.is_some_and(|l| l <= tolerance_s))
            .count();
        Some(ok as f64 / f64::from(self.transmitted_windows))
    }
}

impl Playout {
    pub fn new(fps: f64, window_frames: u32, tolerance_s: f64) -> Self {
        Self {
            fps,
            window_frames: window_frames.max(1),
            tolerance_s,
            frames: BTreeMap::new(),
            windows: BTreeMap::new(),
        }
    }

    /// A message of `bytes` bytes (header included) arrived at `at_s`.
    pub fn on_message(&mut self, header: MediaHeader, bytes: usize, at_s: f64) {
        match header {
            MediaHeader::Data {
                window,
                frame,
                layer,
            } => {
                self.frames
                    .entry(frame)
                    .or_default()
                    .entry(layer)
                    .or_insert(at_s);
                let w = self.windows.entry(window).or_default();
                w.arrived += 1;
                w.bytes += bytes as u64;
                w.last_arrival_s = w.last_arrival_s.max(at_s);
            }
            MediaHeader::WindowEnd { window, sent } => {
                self.windows.entry(window).or_default().sent = Some(sent);
            }
        }
    }

    /// Windows with at least one message arrived so far.
    pub fn windows_seen(&self) -> usize {
        self.windows.len()
    }

    /// Frames up to the end of the last window seen.
    pub fn frames_covered(&self) -> u32 {
        self.windows
            .keys()
            .next_back()
            .map_or(0, |w| (w + 1) * self.window_frames)
    }

    /// The layers of `frame` shown at its deadline.
    pub fn shown_layers(&self, frame: u32) -> u32 {
        let deadline = f64::from(frame) / self.fps + self.tolerance_s;
        let Some(layers) = self.frames.get(&frame) else {
            return 0;
        };
        (0u8..)
            .take_while(|l| layers.get(l).is_some_and(|t| *t <= deadline))
            .count() as u32
    }

    /// Messages of `window` that arrived.
    pub fn arrived(&self, window: u32) -> u32 {
        self.windows.get(&window).map_or(0, |w| w.arrived)
    }

    /// Bytes of `window`'s media messages that arrived.
    pub fn bytes_arrived(&self, window: u32) -> u64 {
        self.windows.get(&window).map_or(0, |w| w.bytes)
    }

    /// How many messages of `window` the sender said it wrote (None: no word yet).
    pub fn sent(&self, window: u32) -> Option<u32> {
        self.windows.get(&window).and_then(|w| w.sent)
    }

    /// When `window` became whole, from the capture of its first frame; None if it never did
    /// (or nothing of it was sent).
    pub fn whole_latency_s(&self, window: u32) -> Option<f64> {
        let w = self.windows.get(&window)?;
        let period = f64::from(self.window_frames) / self.fps;
        w.sent
            .is_some_and(|s| s > 0 && w.arrived >= s)
            .then(|| w.last_arrival_s - f64::from(window) * period)
    }

    /// Statistics over the first `frames` frames of the video.
    pub fn finish(&self, frames: u32) -> PlayoutStats {
        let shown: Vec<u32> = (0..frames).map(|f| self.shown_layers(f)).collect();
        let seconds = f64::from(frames) / self.fps;
        let window_latency_s: Vec<Option<f64>> = self
            .windows
            .iter()
            .filter(|(_, w)| w.sent.is_some_and(|s| s > 0))
            .map(|(i, _)| self.whole_latency_s(*i))
            .collect();
        PlayoutStats {
            frames,
            fps: shown.iter().filter(|l| **l > 0).count() as f64 / seconds.max(1e-9),
            mean_layers: (frames > 0)
                .then(|| shown.iter().map(|l| f64::from(*l)).sum::<f64>() / f64::from(frames)),
            transmitted_windows: window_latency_s.len() as u32,
            window_latency_s,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(window: u32, frame: u32, layer: u8) -> MediaHeader {
        MediaHeader::Data {
            window,
            frame,
            layer,
        }
    }

    #[test]
    fn a_frame_shows_the_layers_that_arrived_in_order_by_its_deadline() {
        // 30 fps, tolerance 0.5 s: frame 3 is due at 0.6 s.
        let mut p = Playout::new(30.0, 4, 0.5);
        p.on_message(data(0, 3, 0), 100, 0.30);
        p.on_message(data(0, 3, 2), 100, 0.40); // layer 2 without layer 1 is useless
        p.on_message(data(0, 3, 1), 100, 0.70); // too late
        assert_eq!(p.shown_layers(3), 1);
        p.on_message(data(0, 4, 1), 100, 0.2);
        assert_eq!(p.shown_layers(4), 0, "no base layer, nothing shown");
    }

    #[test]
    fn arrival_order_does_not_matter_only_times_do() {
        let mut a = Playout::new(30.0, 2, 1.0);
        let mut b = Playout::new(30.0, 2, 1.0);
        let msgs = [
            (data(0, 0, 0), 0.1),
            (data(0, 1, 0), 0.12),
            (data(0, 0, 1), 0.2),
            (data(0, 1, 1), 0.25),
        ];
        for (h, t) in msgs {
            a.on_message(h, 100, t);
        }
        for (h, t) in msgs.iter().rev() {
            b.on_message(*h, 100, *t);
        }
        assert_eq!(a.finish(2), b.finish(2));
        assert_eq!(a.finish(2).mean_layers, Some(2.0));
        assert_eq!(Playout::new(30.0, 2, 1.0).finish(0).mean_layers, None);
    }

    #[test]
    fn whole_windows_within_tolerance_and_dropped_windows() {
        // Period 4/30 s. Window 0: 2 sent, both arrive by 0.3 s (latency 0.3 s).
        // Window 1: 2 sent, one arrives: never whole. Window 2: nothing sent: not transmitted.
        let mut p = Playout::new(30.0, 4, 1.0);
        p.on_message(data(0, 0, 0), 100, 0.2);
        p.on_message(data(0, 1, 0), 100, 0.3);
        p.on_message(MediaHeader::WindowEnd { window: 0, sent: 2 }, 8, 0.31);
        p.on_message(data(1, 4, 0), 100, 0.5);
        p.on_message(MediaHeader::WindowEnd { window: 1, sent: 2 }, 8, 0.6);
        p.on_message(MediaHeader::WindowEnd { window: 2, sent: 0 }, 8, 0.7);
        let s = p.finish(12);
        assert_eq!(s.transmitted_windows, 2);
        assert_eq!(s.window_latency_s[0], Some(0.3));
        assert_eq!(s.window_latency_s[1], None);
        assert_eq!(s.windows_within(0.25), Some(0.0));
        assert_eq!(s.windows_within(0.5), Some(0.5));
        assert_eq!(
            (p.bytes_arrived(0), p.bytes_arrived(1), p.bytes_arrived(2)),
            (200, 100, 0)
        );
        assert_eq!(
            Playout::new(30.0, 4, 1.0).finish(4).windows_within(0.5),
            None
        );
        // 3 of 12 frames shown, 0.4 s of video: 7.5 frames per second.
        assert!((s.fps - 7.5).abs() < 1e-9, "{}", s.fps);
    }
}
