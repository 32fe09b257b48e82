//! The priority-progress sender (Qstream's PPS, Goel et al. 2008 Section 7; Krasic et al.
//! 2003): video is cut into adaptation windows of W frames. A window's data is ready once its
//! last frame is captured; during the next window period it is sent in priority order (every
//! frame's base layer, then every frame's layer 1, …) as lowtide messages whose importance
//! falls with the layer; at the end of that period whatever is still unsent is cancelled
//! (lowtide deadlines do it). A window of which nothing was sent is a dropped window.
//!
//! This module plans windows and keeps the ledger; the code that owns a channel sends the plan
//! and reports what was written.

use serde::Serialize;

use crate::video::Video;

/// One message of a window's plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Planned {
    pub frame: u32,
    pub layer: u8,
    pub bytes: u32,
    /// lowtide importance: higher is sent first; the base layer is the most important.
    pub importance: u8,
}

/// What to send for one window, and when.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WindowPlan {
    pub window: u32,
    /// When its data is ready (its last frame captured), seconds from the stream start.
    pub release_s: f64,
    /// When its unsent data is dropped: one window period later.
    pub deadline_s: f64,
    /// In sending order.
    pub messages: Vec<Planned>,
}

/// Cuts a video into adaptation windows.
#[derive(Debug, Clone)]
pub struct PpsSender<'a> {
    video: &'a Video,
    window_frames: u32,
}

impl<'a> PpsSender<'a> {
    /// `window_frames` frames per adaptation window (the paper: 4 frames = 133 ms, 2 = 66 ms).
    pub fn new(video: &'a Video, window_frames: u32) -> Result<Self, String> {
        if !(1..=300).contains(&window_frames) {
            return Err(format!(
                "window_frames = {window_frames}: allowed is 1 to 300 frames"
            ));
        }
        if video.layer_count() > 250 {
            return Err(format!(
                "{} layers: at most 250 fit lowtide's importance",
                video.layer_count()
            ));
        }
        Ok(Self {
            video,
            window_frames,
        })
    }

    /// The adaptation period, seconds.
    pub fn period_s(&self) -> f64 {
        f64::from(self.window_frames) / self.video.fps
    }

    pub fn window_count(&self) -> u32 {
        (self.video.frames.len() as u32).div_ceil(self.window_frames)
    }

    /// The window a frame belongs to.
    pub fn window_of(&self, frame: u32) -> u32 {
        frame / self.window_frames
    }

    pub fn plan(&self, window: u32) -> WindowPlan {
        let first = (window * self.window_frames) as usize;
        let frames = self
            .video
            .frames
            .get(first..(first + self.window_frames as usize).min(self.video.frames.len()))
            .unwrap_or(&[]);
        let layers = self.video.layer_count();
        let mut messages = Vec::with_capacity(frames.len() * layers);
        for layer in 0..layers {
            for f in frames {
                messages.push(Planned {
                    frame: f.index,
                    layer: layer as u8,
                    bytes: f.layers[layer],
                    importance: (layers - layer) as u8,
                });
            }
        }
        let period = self.period_s();
        WindowPlan {
            window,
            release_s: f64::from(window + 1) * period,
            deadline_s: f64::from(window + 2) * period,
            messages,
        }
    }
}

/// The sender's account of every window: planned, written, cancelled.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Ledger {
    windows: Vec<WindowAccount>,
}

#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct WindowAccount {
    pub planned: u32,
    pub written: u32,
    pub cancelled: u32,
    pub bytes_written: u64,
}

impl Ledger {
    pub fn planned(&mut self, window: u32, messages: u32) {
        self.account(window).planned += messages;
    }

    /// A message's last byte reached the kernel.
    pub fn written(&mut self, window: u32, bytes: u64) {
        let a = self.account(window);
        a.written += 1;
        a.bytes_written += bytes;
    }

    /// A message was cancelled at the window's end (or expired).
    pub fn cancelled(&mut self, window: u32) {
        self.account(window).cancelled += 1;
    }

    pub fn get(&self, window: u32) -> WindowAccount {
        self.windows
            .get(window as usize)
            .copied()
            .unwrap_or_default()
    }

    /// Share of planned windows of which nothing was written.
    pub fn dropped_share(&self) -> f64 {
        let planned = self.windows.iter().filter(|w| w.planned > 0).count();
        let dropped = self
            .windows
            .iter()
            .filter(|w| w.planned > 0 && w.written == 0)
            .count();
        if planned == 0 {
            0.0
        } else {
            dropped as f64 / planned as f64
        }
    }

    pub fn bytes_written(&self) -> u64 {
        self.windows.iter().map(|w| w.bytes_written).sum()
    }

    fn account(&mut self, window: u32) -> &mut WindowAccount {
        let i = window as usize;
        if self.windows.len() <= i {
            self.windows.resize(i + 1, WindowAccount::default());
        }
        &mut self.windows[i]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::video::Frame;

    fn video(frames: u32, layers: usize) -> Video {
        Video {
            fps: 30.0,
            frames: (0..frames)
                .map(|index| Frame {
                    index,
                    layers: (0..layers).map(|l| 1000 + l as u32).collect(),
                })
                .collect(),
        }
    }

    #[test]
    fn windows_cover_their_frames_and_send_in_the_next_period() {
        let v = video(10, 3);
        let s = PpsSender::new(&v, 4).unwrap();
        assert_eq!(s.window_count(), 3);
        let p = s.plan(1);
        let frames: Vec<u32> = p
            .messages
            .iter()
            .filter(|m| m.layer == 0)
            .map(|m| m.frame)
            .collect();
        assert_eq!(frames, vec![4, 5, 6, 7]);
        assert!((p.release_s - 8.0 / 30.0).abs() < 1e-12);
        assert!((p.deadline_s - 12.0 / 30.0).abs() < 1e-12);
        // The last window is short.
        assert_eq!(s.plan(2).messages.len(), 2 * 3);
    }

    #[test]
    fn every_base_layer_goes_before_any_enhancement() {
        let v = video(8, 3);
        let p = PpsSender::new(&v, 4).unwrap().plan(0);
        let layers: Vec<u8> = p.messages.iter().map(|m| m.layer).collect();
        assert_eq!(layers, vec![0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]);
        assert!(p
            .messages
            .windows(2)
            .all(|w| w[0].importance >= w[1].importance));
        assert_eq!(p.messages[0].importance, 3);
    }

    #[test]
    fn a_window_with_nothing_written_is_dropped() {
        let mut l = Ledger::default();
        l.planned(0, 8);
        l.planned(1, 8);
        l.planned(2, 8);
        l.written(0, 1000);
        for _ in 0..7 {
            l.cancelled(0);
        }
        for _ in 0..8 {
            l.cancelled(1);
        }
        l.written(2, 500);
        assert!((l.dropped_share() - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(
            l.get(0),
            WindowAccount {
                planned: 8,
                written: 1,
                cancelled: 7,
                bytes_written: 1000
            }
        );
        assert_eq!(l.bytes_written(), 1500);
    }

    #[test]
    fn bad_window_sizes_are_refused() {
        let v = video(4, 1);
        assert!(PpsSender::new(&v, 0)
            .unwrap_err()
            .contains("window_frames = 0"));
    }
}
