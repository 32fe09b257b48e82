//! The measured application: what every variant runs unless it names its own.

use lowtide_media::video::{SyntheticModel, Video, VideoError};
use serde::{Deserialize, Serialize};

use super::{invalid, Scenario, ScenarioError, Variant};

/// The measured application.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Application {
    /// What every variant runs unless it names its own `application`.
    #[serde(default)]
    pub kind: ApplicationKind,
    /// Receiver host index the streams go to.
    #[serde(default)]
    pub receiver: usize,
    /// The video of `layered_video` variants.
    #[serde(default)]
    pub video: VideoApp,
    /// The stream of `conference` variants.
    #[serde(default)]
    pub conference: crate::conference::ConferenceApp,
    /// The stream of `bitrate_ladder` variants.
    #[serde(default)]
    pub ladder: crate::ladder_flow::LadderApp,
    /// The encoder of `live_video` variants.
    #[serde(default)]
    pub live: crate::live_video::LiveApp,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash, Default)]
#[serde(rename_all = "snake_case")]
pub enum ApplicationKind {
    /// [`crate::stream`]: one 1448-byte message whenever the transport can take one.
    #[default]
    LatencyStream,
    /// [`crate::video`]: layered video with priority-progress streaming (Goel et al. §7).
    LayeredVideo,
    /// [`crate::conference`]: Paceline's videoconference, ADUs expiring after a latency
    /// threshold (Erbad and Krasic).
    Conference,
    /// [`crate::ladder_flow`]: Hasan et al.'s bit-rate ladder, switched at the server.
    BitrateLadder,
    /// [`crate::live_video`]: a real encoder and decoder (GStreamer), stamped in band.
    LiveVideo,
}

/// The layered video a `layered_video` variant streams (looped to the run's length).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct VideoApp {
    /// A committed encoder trace by name (`testsrc2-4layer`, `mandelbrot-4layer`)...
    #[serde(default)]
    pub trace: Option<String>,
    /// ...or a synthetic source (exactly one of the two).
    #[serde(default)]
    pub synthetic: Option<SyntheticModel>,
    /// Frames per adaptation window (the paper: 4 = 133 ms, 2 = 66 ms).
    #[serde(default = "four")]
    pub window_frames: u32,
    /// When a frame is shown after its capture: it decides the mean layers and the frame
    /// rate a viewer sees (the windows-on-time curve covers every tolerance).
    #[serde(default = "five_hundred")]
    pub tolerance_ms: f64,
}

fn four() -> u32 {
    4
}
fn five_hundred() -> f64 {
    500.0
}

impl Default for VideoApp {
    fn default() -> Self {
        Self {
            trace: Some("testsrc2-4layer".into()),
            synthetic: None,
            window_frames: four(),
            tolerance_ms: five_hundred(),
        }
    }
}

impl VideoApp {
    /// `seconds` of the video.
    pub fn video(&self, seconds: f64) -> Result<Video, ScenarioError> {
        let field = |e: VideoError| match e {
            VideoError::Invalid {
                field,
                value,
                allowed,
            } => invalid(format!("application.video.{field}"), value, allowed),
            other => invalid("application.video.trace", "", other.to_string()),
        };
        match (&self.trace, &self.synthetic) {
            (Some(name), None) => Ok(Video::builtin(name, 30.0).map_err(field)?.looped(seconds)),
            (None, Some(m)) => m.generate(seconds).map_err(field),
            _ => Err(invalid(
                "application.video",
                "trace and synthetic both or neither",
                "exactly one of `trace` (a committed trace) and `synthetic` (a model)",
            )),
        }
    }
}

impl Scenario {
    /// What a variant runs.
    pub fn application_of(&self, v: &Variant) -> ApplicationKind {
        v.application.unwrap_or(self.application.kind)
    }

    /// The conference's videos as variant `v` sends them (its age cancellation).
    pub fn conference_videos(&self, v: &Variant) -> Vec<lowtide_media::conference::Conference> {
        let age = v
            .age_cancel_ms
            .map(|ms| std::time::Duration::from_secs_f64(ms / 1e3));
        self.application
            .conference
            .videos()
            .into_iter()
            .map(|c| lowtide_media::conference::Conference {
                age_cancel: age,
                ..c
            })
            .collect()
    }
}
