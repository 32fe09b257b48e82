//! Scenario files: one experiment as TOML, checked in full before any namespace exists.
//!
//! A scenario names the paper figure it reproduces (and the paper's numbers), the topology
//! (a [`TopologyConfig`], inline), forward and reverse cross traffic (lowtide-traffic
//! schedules), the variants to compare, and how to run them: all at once through the same
//! bottleneck (`side_by_side`, distinct ports, machine noise cancels) and/or one after another
//! (`sequential`, the paper's way, N runs each). A `[quick]` block scales it down for CI.
//!
//! ```toml
//! kind = "streams"                # the experiment (crate::experiment)
//! name = "fig3-forward"
//! [paper]
//! figure = "Goel, Krasic, Walpole 2008, Fig. 3"
//! text = "about 30% of TCP's packets over 160 ms, under 2% for MIN_BUF(1,3)"
//! [run]
//! modes = ["side_by_side"]
//! duration_s = 80.0
//! measure_from_s = 5.0
//! measure_to_s = 75.0
//! [quick]
//! time_scale = 0.375
//! [topology]                      # lowtide_netem::TopologyConfig
//! forward = { rate_mbps = 30, delay_ms = 50 }
//! reverse = { rate_mbps = 30, delay_ms = 50 }
//! [[forward_traffic.flow]]        # lowtide_traffic::schedule::Schedule, from sender 0
//! kind = "elephant"
//! count = 15
//! start_s = 5.0
//! stop_s = 60.0
//! congestion_control = "cubic"
//! [[variant]]
//! name = "TCP"
//! controller = "unlimited"
//! paper = { share_over_160 = 0.30 }
//! [[variant]]
//! name = "MinBuf(1,3)"
//! controller = { min_buf = { a = 1, b = 3 } }
//! ```
//!
//! Every error names the field, the value and what is allowed.
//!
//! The parts: `application.rs` (what a variant streams), `variant.rs` (one way of sending it
//! and its checks), `transport.rs` (the variant's transport as one typed value, checked once), `sweep.rs` (`[sweep]` and the command line's overrides), `error.rs` (the
//! error and the field checks every scenario kind shares) and `check.rs` (the whole scenario
//! checked into a [`Checked`]).

mod application;
mod check;
mod error;
mod sweep;
#[cfg(test)]
mod tests;
mod transport;
mod variant;

use std::path::Path;

use lowtide_netem::TopologyConfig;
use lowtide_traffic::schedule::{FlowSpec, Schedule};
use serde::{Deserialize, Serialize};

pub use crate::goals::{Goal, Metric, Relation};
pub use application::{Application, ApplicationKind, VideoApp};
pub use check::Checked;
pub use error::ScenarioError;
pub(crate) use error::{check_name_and_topology, check_range, check_tcp_sysctls, invalid};
pub use sweep::{FpsGoal, Overrides, SweepConfig, MAX_SWEEP_VALUES};
pub use transport::VariantTransport;
pub use variant::{MptcpMode, NetPath, PaperNumbers, Variant};

/// Variants per scenario at most (each side-by-side variant is one more stream in the queue;
/// the report has ten colours besides the floor's grey).
pub const MAX_VARIANTS: usize = 10;
/// Runs per mode at most.
pub const MAX_RUNS: u32 = 100;
/// Shortest and longest run, seconds.
pub const DURATION_RANGE_S: (f64, f64) = (5.0, 3600.0);
/// First port of the measured streams; variant `i` listens on `STREAM_PORT + i`.
pub const STREAM_PORT: u16 = 6001;

/// A scenario as written.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// The experiment this file is (`kind = "streams"`), read and checked by
    /// [`crate::experiment::registry`] before this struct is parsed; kept so the scenario as
    /// run names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Short name: the output folder and the report title use it.
    pub name: String,
    /// What the scenario shows, for the report.
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub paper: PaperFigure,
    pub run: RunConfig,
    #[serde(default)]
    pub quick: QuickConfig,
    pub topology: TopologyConfig,
    /// Cross traffic from sender host 0 toward the receivers (`target` = receiver index).
    #[serde(default)]
    pub forward_traffic: Schedule,
    /// Cross traffic from a receiver host toward the senders: it loads the reverse path,
    /// where the measured streams' acks travel (Fig. 4).
    #[serde(default)]
    pub reverse_traffic: ReverseTraffic,
    #[serde(default)]
    pub application: Application,
    #[serde(rename = "variant")]
    pub variants: Vec<Variant>,
    /// Numeric goals checked against the measured summary.
    #[serde(default, rename = "goal")]
    pub goals: Vec<Goal>,
    /// The sweep `lowtide lab run` makes of this scenario when no flag names one
    /// (`crate::sweep`); each list on the command line replaces the scenario's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<SweepConfig>,
}

/// The paper's figure and what it reports, shown beside our numbers.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct PaperFigure {
    /// E.g. "Goel, Krasic, Walpole 2008, Fig. 3".
    #[serde(default)]
    pub figure: String,
    /// The paper's numbers and set-up, free text.
    #[serde(default)]
    pub text: String,
    /// Where our set-up differs from the paper's (the report says so).
    #[serde(default)]
    pub differences: String,
}

/// How the variants run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    pub modes: Vec<Mode>,
    /// Length of one run, seconds.
    pub duration_s: f64,
    /// Statistics cover messages sent from here...
    #[serde(default)]
    pub measure_from_s: f64,
    /// ...to here (default: the end of the run).
    #[serde(default)]
    pub measure_to_s: Option<f64>,
    /// Runs per mode (side by side: runs of all variants at once; sequential: runs per variant).
    #[serde(default = "one")]
    pub runs: u32,
    /// Seed of the emulator's random numbers (run `k` uses `seed + k`).
    #[serde(default = "one_u64")]
    pub seed: u64,
}

fn one() -> u32 {
    1
}
fn one_u64() -> u64 {
    1
}

/// How variants share the network.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// All variants at once through one bottleneck and one cross-traffic schedule.
    SideBySide,
    /// One variant at a time, each in its own emulated network.
    Sequential,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::SideBySide => "side_by_side",
            Mode::Sequential => "sequential",
        }
    }
}

/// The scaled-down form for CI (`--quick`): every time multiplied by `time_scale`, one run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct QuickConfig {
    #[serde(default = "default_time_scale")]
    pub time_scale: f64,
    #[serde(default = "one")]
    pub runs: u32,
}

fn default_time_scale() -> f64 {
    0.5
}

impl Default for QuickConfig {
    fn default() -> Self {
        Self {
            time_scale: default_time_scale(),
            runs: 1,
        }
    }
}

/// Reverse-path cross traffic: a schedule run on receiver `host` toward the senders.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct ReverseTraffic {
    /// Receiver host index that sends (default: the last receiver, away from the streams).
    #[serde(default)]
    pub host: Option<usize>,
    #[serde(default, rename = "flow")]
    pub flows: Vec<FlowSpec>,
}

impl ReverseTraffic {
    pub fn schedule(&self) -> Schedule {
        Schedule {
            flows: self.flows.clone(),
        }
    }
}

impl Scenario {
    /// Parses and checks a TOML document; relative trace paths are relative to the current
    /// folder.
    pub fn from_toml(text: &str) -> Result<Checked, ScenarioError> {
        Self::from_toml_in(text, Path::new("."))
    }

    /// Parses and checks a TOML document written in the folder `base`: relative trace paths
    /// in it are relative to `base`, so a scenario file runs from any current folder.
    pub fn from_toml_in(text: &str, base: &Path) -> Result<Checked, ScenarioError> {
        let mut s: Scenario =
            toml::from_str(text).map_err(|e| ScenarioError::Parse(e.to_string()))?;
        s.topology.resolve_paths(base);
        s.check()
    }

    /// Reads, parses and checks a scenario file.
    pub fn from_file(path: &Path) -> Result<Checked, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|e| ScenarioError::Read {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        Self::from_toml_in(&text, path.parent().unwrap_or(Path::new(".")))
    }

    /// The `--quick` form: every time scaled by `quick.time_scale`, `quick.runs` runs.
    pub fn quick(&self) -> Scenario {
        let k = self.quick.time_scale;
        let mut s = self.clone();
        s.run.duration_s *= k;
        s.run.measure_from_s *= k;
        s.run.measure_to_s = s.run.measure_to_s.map(|t| t * k);
        s.run.runs = self.quick.runs.min(self.run.runs).max(1);
        s.application.ladder.start_s *= k;
        for f in s
            .forward_traffic
            .flows
            .iter_mut()
            .chain(s.reverse_traffic.flows.iter_mut())
        {
            f.start_s *= k;
            f.stop_s *= k;
        }
        let t = &mut s.topology;
        let path_b = t
            .path_b
            .iter_mut()
            .flat_map(|p| [&mut p.forward, &mut p.reverse]);
        for link in [&mut t.forward, &mut t.reverse].into_iter().chain(path_b) {
            for o in &mut link.outages {
                o.at_s *= k;
                o.for_s *= k;
            }
        }
        s
    }

    /// Every link's outages, for reports: (which link, from, to, what), seconds of the run.
    pub fn outage_marks(&self) -> Vec<crate::results::OutageMark> {
        let t = &self.topology;
        let mut links = vec![
            ("path A forward", &t.forward),
            ("path A reverse", &t.reverse),
        ];
        if let Some(b) = &t.path_b {
            links.push(("path B forward", &b.forward));
            links.push(("path B reverse", &b.reverse));
        }
        links
            .into_iter()
            .flat_map(|(name, l)| {
                l.outages.iter().map(move |o| crate::results::OutageMark {
                    link: name.to_string(),
                    from_s: o.at_s,
                    to_s: o.at_s + o.for_s,
                    kind: o.describe(),
                })
            })
            .collect()
    }

    /// End of the measurement window, seconds.
    pub fn measure_to_s(&self) -> f64 {
        self.run.measure_to_s.unwrap_or(self.run.duration_s)
    }
}
