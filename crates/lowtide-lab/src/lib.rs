//! lowtide's lab: measured streams through the emulated network, side by side with plain
//! TCP under the same bottleneck and cross traffic, summarised with the paper's figures beside
//! ours, and rendered as HTML reports with SVG plots.
//!
//! - [`experiment`]: the kinds of experiment (`kind = "..."` in a scenario file) behind one
//!   interface, and their registry;
//! - [`streams`]: the `streams` experiment's entry; its chain is [`scenario`], [`runner`],
//!   [`results`], [`render`] and [`goals`] below;
//! - [`bwss`]: Mehra's BWSS Fig. 4-6: real daemon, preload library, curl and the ladder in the lab;
//! - [`chromium`]: headless Chromium, a browser viewer of `lowtide serve`'s player page;
//! - [`clock`]: one process, one clock: timestamps that travel inside messages;
//! - [`pipe`]: one message pipe over lowtide, QUIC and TFRC, so each application is written once;
//! - [`stream`]: the measured latency stream, over any pipe;
//! - [`video`]: the measured layered video (priority-progress streaming, lowtide-media);
//! - [`ladder_flow`]: Hasan et al.'s bit-rate ladder, switched at the server, over TCP or TFRC;
//! - [`ladder_report`]: the ladder's table and plots in the report;
//! - [`floor`]: the network-floor probe (small UDP packets every 10 ms);
//! - [`tcpinfo`]: each measured stream's `TCP_INFO` over time;
//! - [`summary`]: latency percentiles and shares over thresholds, with sample counts;
//! - [`stats`]: means and confidence intervals over runs;
//! - [`goals`]: the numbers a scenario must reach;
//! - [`fairness`]: Jain's index over the greedy streams of a side-by-side run;
//! - [`report`]: plots and the HTML report;
//! - [`demo`]: `lowtide demo`, the main job;
//! - [`scenario`]: scenario files (TOML), checked before anything runs;
//! - [`runner`]: `lowtide lab run`, trials side by side and sequential, the run folder;
//! - [`results`]: raw records, their files, and `summary.json`;
//! - [`sweep`]: one scenario over several congestion controls, queues and thresholds, one index;
//! - [`fps_sweep`]: frame rate against the latency threshold (Paceline Fig. 5) and its goal;
//! - [`render`]: a run folder's `report.html`, from its summary and CSV alone;
//! - [`rdc`]: the RDC experiments (Hsiao, Kung, Tan): bulk flows, the agent in the receivers.

#![deny(clippy::undocumented_unsafe_blocks)] // every unsafe block states its invariant

pub mod bwss;
pub mod chromium;
pub mod clock;
pub mod conference;
pub mod demo;
pub mod experiment;
pub mod fairness;
pub mod floor;
pub mod fps_sweep;
pub mod goals;
pub mod ladder_flow;
pub mod ladder_report;
pub mod ladder_seconds;
pub mod live_video;
pub mod pipe;
pub mod procs;
pub mod quality_fairness;
pub mod rdc;
pub mod render;
pub mod report;
pub mod results;
pub mod runner;
pub mod scenario;
pub mod stats;
pub mod stream;
pub mod streams;
pub mod summary;
pub mod sweep;
pub mod tail;
pub mod tcpinfo;
pub mod tls;
pub mod video;

/// A lab run failed; the message says which step and why.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LabError {
    #[error(transparent)]
    Netem(#[from] lowtide_netem::NetemError),
    #[error("the transport failed during {what}: {error}")]
    Transport { what: String, error: lowtide::Error },
    #[error("cross traffic: {0}")]
    Traffic(String),
    #[error("{what}: {reason}")]
    Io { what: String, reason: String },
    /// A part of the run stopped because another part failed (that failure is the error
    /// the run reports).
    #[error("stopped because another part of the run failed")]
    Stopped,
    /// The run failed part-way; its run folder holds what was measured before, marked so.
    #[error("{error}; what was measured before is in {}", dir.display())]
    Partial {
        error: Box<LabError>,
        dir: std::path::PathBuf,
    },
}

impl LabError {
    pub(crate) fn io(what: impl Into<String>, reason: impl std::fmt::Display) -> Self {
        LabError::Io {
            what: what.into(),
            reason: reason.to_string(),
        }
    }
}
