//! Live video: a real encoder in the sender's namespace, a real decoder in the receiver's,
//! through the emulated bottleneck (the issue "real video through lowtide", part 7).
//!
//! Each side is a `gst-launch-1.0` process: GStreamer's `videotestsrc` (live, moving) into
//! `x264enc tune=zerolatency`, `h264parse` to whole access units, `lowtidestamp` (the capture
//! instant in band, an SEI message, and a line per unit in `stamps.csv`), then the variant's
//! transport; at the receiver the transport's source, `lowtidemeter` (reads the stamp),
//! `avdec_h264`, `lowtidemeter` again (one line per decoded frame in `frames.csv`), `fakesink`.
//! Every variant is measured by that one rule: stamped after the encoder, read after the
//! decoder, both on the one clock the namespaces share.
//!
//! The transports: lowtide (`lowtidesink` → `lowtidesrc`, the variant's latency controller,
//! optionally the encoder's bit rate driven by lowtide's rate feedback), and what users do
//! today, GStreamer's `tcpserversink` → `tcpclientsrc`. The baseline carries RTP over TCP
//! (RFC 4571: `rtph264pay ! rtpstreampay`, as RTSP's interleaved mode), whose marker bit ends
//! each access unit, so its receiver has no Annex-B framing wait (`h264parse` after a raw
//! byte stream would hold each frame until the next one starts): its best case. (`gdppay`
//! would turn `h264parse`'s tag events into new stream headers that reset the decoder.)
//!
//! A third pair of ends puts a browser at the receiver (`serve.rs`): `lowtide serve` at the
//! sender with the same encoder as its source, headless Chromium at the receiver decoding
//! with WebCodecs; the frames it reports shown come back in the server's shown log, and the
//! page's decoder errors count as the receiver's bus problems.
//!
//! The parts: the configuration and the command lines (`pipeline.rs`), the two processes of a
//! variant (`run.rs`, `serve.rs`), their CSV files read into a record (`record.rs`), the
//! report's section (`report.rs`).

mod pipeline;
mod record;
pub mod report;
mod run;
mod serve;

use serde::{Deserialize, Serialize};

pub(crate) use pipeline::controller_property;
pub(crate) use record::join;
pub use record::{LiveRecord, LiveSecond, LiveSummary};
pub use run::preflight;
pub(crate) use run::{start, LiveSeen, LiveSent};

/// `[application.live]`: what the encoder makes. The same for every variant of a scenario.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LiveApp {
    pub width: u32,
    pub height: u32,
    /// Frames per second.
    pub fps: u32,
    /// x264enc's `bitrate` when the stream starts, kbit/s.
    pub bitrate_kbps: u32,
    /// The longest keyframe interval, frames (x264enc `key-int-max`).
    pub key_int_frames: u32,
    /// lowtide's latency budget: a unit's deadline is its capture time plus this (the sink's
    /// and the source's `latency-ms`).
    pub latency_ms: u32,
    /// `videotestsrc`'s pattern (`smpte`, `snow`, ...), scrolled `horizontal_speed` pixels per
    /// frame so the encoder has motion to code: with `smpte` and speed 8 x264 fills 4 Mbit/s.
    pub pattern: String,
    pub horizontal_speed: i32,
}

impl Default for LiveApp {
    fn default() -> Self {
        Self {
            width: 1280,
            height: 720,
            fps: 30,
            bitrate_kbps: 4000,
            key_int_frames: 60,
            latency_ms: 200,
            pattern: "smpte".into(),
            horizontal_speed: 8,
        }
    }
}

impl LiveApp {
    /// Checks the values; the error names the field and what it may be.
    pub fn check(&self) -> Result<(), (String, String, String)> {
        let range = |f: &str, v: u32, lo: u32, hi: u32| {
            if (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err((
                    format!("application.live.{f}"),
                    v.to_string(),
                    format!("{lo} to {hi}"),
                ))
            }
        };
        range("width", self.width, 16, 3840)?;
        range("height", self.height, 16, 2160)?;
        range("fps", self.fps, 1, 120)?;
        range("bitrate_kbps", self.bitrate_kbps, 50, 100_000)?;
        range("key_int_frames", self.key_int_frames, 1, 3000)?;
        range("latency_ms", self.latency_ms, 10, 10_000)?;
        if self.pattern.is_empty()
            || !self
                .pattern
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-')
        {
            return Err((
                "application.live.pattern".into(),
                format!("{:?}", self.pattern),
                "a videotestsrc pattern name (smpte, snow, ball, ...)".into(),
            ));
        }
        if !(-64..=64).contains(&self.horizontal_speed) {
            return Err((
                "application.live.horizontal_speed".into(),
                self.horizontal_speed.to_string(),
                "-64 to 64 pixels per frame".into(),
            ));
        }
        Ok(())
    }
}

/// A live-video variant's transport (`live = { transport = "tcpserversink" }`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum LiveTransport {
    /// `lowtidesink` → `lowtidesrc` with the variant's `controller`.
    #[default]
    Lowtide,
    /// GStreamer's `tcpserversink` → `tcpclientsrc`, RTP over TCP (RFC 4571) in between.
    Tcpserversink,
    /// `lowtide serve` in the sender's namespace (the encoder as its `--source`), headless
    /// Chromium in the receiver's watching the player page: the variant's `controller` on the
    /// viewer's socket, `latency_ms` the viewer queue's deadline.
    Serve,
    /// The same server as a plain WebSocket server: no controller, no deadline (what servers
    /// that write frames as fast as the socket takes them do).
    ServePlain,
}

/// `variant.live`: how a live-video variant carries the stream.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(deny_unknown_fields)]
pub struct LiveVariant {
    #[serde(default)]
    pub transport: LiveTransport,
    /// lowtide only: the sink sets x264enc's bit rate from its rate feedback.
    #[serde(default)]
    pub rate_feedback: bool,
}
