//! `lowtide demo`, the main job: `scenarios/demo.toml` through the lab runner. One emulated
//! bottleneck (10 Mbit/s, 50 ms RTT, drop-tail of one BDP) loaded with cross traffic, and the
//! same latency stream through plain TCP and through lowtide's MinBuf(1,3) at once, side by
//! side, so both see the very same queue; a UDP probe measures the network floor.
//!
//! It echoes Goel, Krasic and Walpole, "Low-Latency Adaptive Streaming over TCP" (2008), Fig. 3
//! (Section 4): about 30% of TCP's packets over 160 ms, under 2% with MIN_BUF(1,3), at 95% of TCP's
//! throughput; their set-up was heavier (30 Mbit/s, 100 ms RTT, 15 elephants and 80 mice).
//!
//! Its second part (`scenarios/demo-live.toml`) is real video: x264 into GStreamer's
//! tcpserversink and into lowtidesink side by side, through a link that narrows for 10 s.

use std::path::PathBuf;

use crate::runner::{self, LabOptions, LabRun};
use crate::scenario::{Overrides, Scenario};
use crate::LabError;

/// The scenario the demo runs, built in so the demo needs no file.
pub const SCENARIO: &str = include_str!("../../../scenarios/demo.toml");

/// The demo's second part, real video; its link trace is read from the repository.
pub const LIVE_SCENARIO: &str = include_str!("../../../scenarios/demo-live.toml");

/// Where the live part's relative trace path starts.
const SCENARIOS_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios");

/// What the demo can be told.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// The scenario's `[quick]` form (27 s instead of 45 s).
    pub quick: bool,
    /// Where the report goes.
    pub out_dir: PathBuf,
    /// Congestion control of every flow (default: the scenario's cubic).
    pub congestion: Option<String>,
}

impl Default for DemoOptions {
    fn default() -> Self {
        Self {
            quick: false,
            out_dir: PathBuf::from("out/demo"),
            congestion: None,
        }
    }
}

/// Runs the demo; `progress` hears about each step.
pub fn run(opts: &DemoOptions, progress: impl FnMut(&str)) -> Result<LabRun, LabError> {
    let checked = Scenario::from_toml(SCENARIO)
        .map_err(|e| LabError::io("checking the built-in demo scenario", e))?;
    let lab = LabOptions {
        scenario_text: SCENARIO.to_string(),
        quick: opts.quick,
        runs: None,
        overrides: Overrides {
            congestion: opts.congestion.clone(),
            ..Overrides::default()
        },
        out_dir: opts.out_dir.clone(),
        ..LabOptions::default()
    };
    runner::run(&checked, &lab, progress)
}

/// Runs the demo's live-video part into `OUT/live`.
pub fn run_live(opts: &DemoOptions, progress: impl FnMut(&str)) -> Result<LabRun, LabError> {
    let checked = Scenario::from_toml_in(LIVE_SCENARIO, std::path::Path::new(SCENARIOS_DIR))
        .map_err(|e| LabError::io("checking the built-in live-video demo scenario", e))?;
    let lab = LabOptions {
        scenario_text: LIVE_SCENARIO.to_string(),
        quick: opts.quick,
        out_dir: opts.out_dir.join("live"),
        ..LabOptions::default()
    };
    runner::run(&checked, &lab, progress)
}
