//! The measured application as layered video (Goel et al. 2008, Section 7): each variant's
//! channel carries lowtide-media's priority-progress stream, the same code `lowtide send` /
//! `lowtide recv` run between two machines. The sender's ledger (what it wrote and cancelled
//! per window) and the receiver's playout (what arrived, when, what a viewer saw) are joined
//! into one [`WindowRecord`] per adaptation window.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lowtide::ChannelConfig;
use lowtide_media::playout::Playout;
use lowtide_media::pps::Ledger;
use lowtide_media::session::{receive_video, send_video};
use lowtide_media::video::Video;
use lowtide_traffic::Stop;
use serde::{Deserialize, Serialize};

use crate::pipe::lowtide::{self as channel, CostMeter, Sampler};
use crate::stream::{self, Sample, SendCost};
use crate::tcpinfo::TcpTimeline;
use crate::LabError;

/// One adaptation window as both ends saw it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WindowRecord {
    pub window: u32,
    /// Capture of its first frame, seconds since the run started.
    pub capture_s: f64,
    /// Messages planned and written (a window with nothing written was dropped whole).
    pub planned: u32,
    pub written: u32,
    pub bytes_written: u64,
    /// Messages (and their bytes) that arrived by the end of the run, and whether the
    /// sender's count of written messages (sent after the window's deadline) arrived.
    pub received: u32,
    pub bytes_received: u64,
    pub count_received: bool,
    /// Capture of its first frame to the arrival of its last written message, ms; None if
    /// it never arrived whole.
    pub latency_ms: Option<f64>,
    /// A transmitted window that never arrived whole: capture to the end of the
    /// measurement, ms (a lower bound of its latency).
    pub censored_ms: Option<f64>,
    pub frames: u32,
    /// Frames with their base layer in time, and layers shown summed over the frames, at
    /// the scenario's display tolerance.
    pub frames_shown: u32,
    pub layers_shown: u32,
}

impl WindowRecord {
    pub fn dropped(&self) -> bool {
        self.planned > 0 && self.written == 0
    }

    pub fn transmitted(&self) -> bool {
        self.written > 0
    }

    /// The window as a latency sample: delivered if it arrived whole, censored if it was
    /// transmitted and never whole, none if nothing of it was written.
    pub fn sample(&self) -> Option<Sample> {
        match (self.latency_ms, self.censored_ms) {
            (Some(l), _) => Some(Sample::delivered(self.capture_s, l)),
            (None, Some(c)) => Some(Sample {
                latency_ms: c,
                ..Sample::censored(self.capture_s, self.capture_s)
            }),
            (None, None) => None,
        }
    }
}

/// What the video's sender did.
#[derive(Debug)]
pub struct VideoSent {
    pub cost: SendCost,
    pub ledger: Ledger,
    pub tcp: TcpTimeline,
}

/// Streams `video` from `start` with windows of `window_frames` frames; blocking, for a
/// thread inside a sender host. Connects before `start`, so the first window does not wait
/// for the handshake; after the last window the queued data and the final window counts keep
/// flowing until `receive_end`, so the receiver can count them.
pub fn send(
    dst: SocketAddr,
    cfg: ChannelConfig,
    video: Video,
    window_frames: u32,
    start: Instant,
    receive_end: Instant,
    stop: Stop,
) -> Result<VideoSent, LabError> {
    stream::runtime()?.block_on(async move {
        let ch = channel::connect(dst, cfg).await?;
        let meter = CostMeter::start();
        let sampler = Sampler::start(&ch, start);
        let report = tokio::select! {
            r = send_video(&ch, &video, window_frames, start, |_, _| {}) => {
                r.map_err(|e| LabError::io("streaming the video", e))?
            }
            _ = stream::stopped(&stop) => return Err(LabError::Stopped),
        };
        let messages = (0..report.windows)
            .map(|w| u64::from(report.ledger.get(w).written))
            .sum();
        let cost = meter.finish(&ch, messages);
        let tcp = sampler.finish().await;
        channel::finish_gracefully(&ch, receive_end, &stop).await;
        Ok(VideoSent {
            cost,
            ledger: report.ledger,
            tcp,
        })
    })
}

/// Receives a video stream on `addr` until `end`; blocking, for a receiver host.
pub fn receive(
    addr: SocketAddr,
    cfg: ChannelConfig,
    window_frames: u32,
    tolerance: Duration,
    start: Instant,
    end: Instant,
    stop: Stop,
) -> Result<Playout, LabError> {
    stream::runtime()?.block_on(async move {
        let listener = channel::listen(addr, cfg).await?;
        let (ch, first) = channel::accept_first(&listener, end, &stop).await?;
        let playout = tokio::select! {
            p = receive_video(&ch, Some(first), FPS, window_frames, tolerance, start, end, |_| {}) => p,
            _ = stream::stopped(&stop) => return Err(LabError::Stopped),
        };
        ch.close(0, "measurement over").await;
        Ok(playout)
    })
}

/// Frame rate of every lab video.
pub const FPS: f64 = 30.0;

/// Joins the sender's ledger and the receiver's playout, window by window; the receiver
/// stopped `end_s` seconds after the start.
pub fn windows(
    video: &Video,
    window_frames: u32,
    sent: &Ledger,
    seen: &Playout,
    end_s: f64,
) -> Vec<WindowRecord> {
    let n = (video.frames.len() as u32).div_ceil(window_frames);
    (0..n)
        .map(|w| {
            let account = sent.get(w);
            let first = w * window_frames;
            let frames = window_frames.min(video.frames.len() as u32 - first);
            let shown: Vec<u32> = (first..first + frames)
                .map(|f| seen.shown_layers(f))
                .collect();
            let capture_s = video.capture_s(first);
            let latency_ms = seen.whole_latency_s(w).map(|s| s * 1e3);
            WindowRecord {
                window: w,
                capture_s,
                planned: account.planned,
                written: account.written,
                bytes_written: account.bytes_written,
                received: seen.arrived(w),
                bytes_received: seen.bytes_arrived(w),
                count_received: seen.sent(w).is_some(),
                latency_ms,
                censored_ms: (latency_ms.is_none() && account.written > 0)
                    .then(|| (end_s - capture_s).max(0.0) * 1e3),
                frames,
                frames_shown: shown.iter().filter(|l| **l > 0).count() as u32,
                layers_shown: shown.iter().sum(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use lowtide_media::video::Frame;
    use lowtide_media::wire::MediaHeader;

    #[test]
    fn ledger_and_playout_join_per_window() {
        let video = Video {
            fps: FPS,
            frames: (0..6)
                .map(|index| Frame {
                    index,
                    layers: vec![100, 100],
                })
                .collect(),
        };
        // Windows of 4 frames: window 0 (frames 0-3) sent whole, window 1 (4-5) dropped.
        let mut ledger = Ledger::default();
        ledger.planned(0, 8);
        for _ in 0..8 {
            ledger.written(0, 110);
        }
        ledger.planned(1, 4);
        for _ in 0..4 {
            ledger.cancelled(1);
        }
        let mut p = Playout::new(FPS, 4, 0.5);
        for f in 0..4 {
            for layer in 0..2 {
                let h = MediaHeader::Data {
                    window: 0,
                    frame: f,
                    layer,
                };
                // Frame 3's second layer comes too late for its deadline (0.1 + 0.5 s).
                let at = if f == 3 && layer == 1 { 0.7 } else { 0.3 };
                p.on_message(h, 110, at);
            }
        }
        p.on_message(MediaHeader::WindowEnd { window: 0, sent: 8 }, 8, 0.7);
        p.on_message(MediaHeader::WindowEnd { window: 1, sent: 0 }, 8, 0.8);
        let w = windows(&video, 4, &ledger, &p, 2.0);
        assert_eq!(w.len(), 2);
        assert_eq!((w[0].written, w[0].bytes_written), (8, 880));
        assert_eq!((w[0].received, w[0].count_received), (8, true));
        assert_eq!((w[0].bytes_received, w[0].censored_ms), (880, None));
        assert!((w[0].latency_ms.unwrap() - 700.0).abs() < 1e-9);
        assert_eq!(
            (w[0].frames, w[0].frames_shown, w[0].layers_shown),
            (4, 4, 7)
        );
        assert!(w[1].dropped() && !w[1].transmitted());
        assert_eq!(
            (w[1].frames, w[1].latency_ms, w[1].censored_ms),
            (2, None, None)
        );
        assert!(
            w[1].sample().is_none(),
            "nothing written: no latency at all"
        );
        assert!((w[1].capture_s - 4.0 / 30.0).abs() < 1e-12);
        assert_eq!(w[0].sample().unwrap().latency_ms, w[0].latency_ms.unwrap());
    }
}
