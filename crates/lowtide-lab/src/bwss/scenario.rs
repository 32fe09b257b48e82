//! A BWSS scenario file (Mehra Fig. 4-6): the access link, the daemon's rules, the video, the
//! downloads, the interferer and the variants, checked in full before any namespace exists.
//! A BWSS scenario says `kind = "bwss"` and has a `[bwss]` table.
//!
//! ```toml
//! kind = "bwss"
//! name = "bwss-fig6"
//! [run]
//! duration_s = 150.0
//! measure_from_s = 10.0
//! [topology]                       # lowtide_netem::TopologyConfig: 2 senders, 2 receivers
//! [bwss]
//! downloads = 2
//! interference = { start_s = 60.0, stop_s = 100.0, rate_kbps = 240 }
//! [bwss.rules]                     # the daemon's rule file, as `lowtide bwss daemon --rules`
//! [[variant]]
//! name = "BWSS"
//! video = "tcp"                    # or "tfrc"
//! steer = true                     # false: the daemon only observes
//! paper_video_kbps = 488
//! runs = 3                         # trials of this variant (default run.runs, 1)
//! ```

use std::path::Path;

use lowtide_netem::TopologyConfig;
use serde::{Deserialize, Serialize};

use crate::scenario::{
    check_name_and_topology, check_range, invalid, PaperFigure, ScenarioError, DURATION_RANGE_S,
    MAX_RUNS,
};

/// Port of the ladder server (and of the TFRC video) on sender 0.
pub const VIDEO_PORT: u16 = 8450;
/// Port of `python3 -m http.server` on sender 0.
pub const HTTP_PORT: u16 = 8000;
/// Port of the interferer's sink on receiver 0.
pub const INTERFERER_PORT: u16 = 8600;
/// Downloads on the receiver at most.
pub const MAX_DOWNLOADS: usize = 8;

/// A BWSS scenario as written.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BwssScenario {
    /// The experiment this file is (`kind = "bwss"`), read and checked by
    /// [`crate::experiment::registry`] before this struct is parsed; kept so the scenario as
    /// run names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub paper: PaperFigure,
    pub run: BwssRun,
    #[serde(default)]
    pub quick: BwssQuick,
    /// Sender 0 serves the video and the downloads, sender 1 sends the interferer; receiver 0
    /// runs the daemon, the player and the downloads, receiver 1 the outside download.
    pub topology: TopologyConfig,
    pub bwss: BwssSetup,
    #[serde(rename = "variant")]
    pub variants: Vec<BwssVariant>,
    #[serde(default, rename = "goal")]
    pub goals: Vec<BwssGoal>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BwssRun {
    /// Length of one variant's trial, seconds.
    pub duration_s: f64,
    /// Means are taken over seconds from here to the end (the start-up is left out).
    #[serde(default)]
    pub measure_from_s: f64,
    /// Trials of every variant that does not name its own `runs`. Trials run in rounds (each
    /// variant once per round), so a machine that slows down for a while slows every variant
    /// alike, and a variant's numbers pool the seconds of all its trials.
    #[serde(default = "one_run")]
    pub runs: u32,
}

fn one_run() -> u32 {
    1
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BwssQuick {
    /// `--quick` multiplies every time by this.
    pub time_scale: f64,
    /// `--quick` runs every variant at most this many times.
    #[serde(default = "one_run")]
    pub runs: u32,
}

impl Default for BwssQuick {
    fn default() -> Self {
        Self {
            time_scale: 0.2,
            runs: 1,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BwssSetup {
    /// Bulk downloads (`curl` from `python3 -m http.server`) on the receiver.
    pub downloads: usize,
    /// Size of the file they fetch, MB (sparse; larger than a run can carry).
    #[serde(default = "default_file_mb")]
    pub file_mb: u64,
    /// The video's rungs, kbit/s (Mehra: 450, 350, 262, 60).
    #[serde(default = "mehra_rungs")]
    pub rungs_kbps: Vec<u64>,
    pub interference: Interference,
    /// The player's switching rule (`ladder play --rule`), over TCP and TFRC alike.
    #[serde(default)]
    pub player_rule: lowtide_media::ladder::throughput_rule::ThroughputRuleConfig,
    /// The receiver daemon's rules (`lowtide bwss daemon --rules`), checked by lowtide-bwss.
    pub rules: lowtide_bwss::Config,
    /// The video's minimum (the report's "at minimum" share); default the `video` rule's.
    #[serde(default)]
    pub video_min_kbps: Option<f64>,
    /// The ladder server sends a rung at this multiple of its rate (`ladder serve
    /// --overdrive`; the Helix server's habit in Mehra's Fig. 5: 350 kbit/s sent at 400, 1.15).
    /// It must carry the video's minimum with room to spare (see [`MIN_ROOM_KBPS`]): at 1.15
    /// the top rung (450 × 1.15 = 517.5) could never reach Mehra's 520, so "seconds at the
    /// minimum" could only be judged below it.
    #[serde(default = "helix_overdrive")]
    pub server_overdrive: f64,
}

/// What the server's top rate must exceed the video's minimum by: two full-size segments a
/// second, so a video read at its minimum is not capped by the server.
pub const MIN_ROOM_KBPS: f64 = 2.0 * super::summary::SEGMENT_KBPS;

fn helix_overdrive() -> f64 {
    lowtide_media::ladder::stream::ServerConfig::mehra().overdrive
}

fn default_file_mb() -> u64 {
    1024
}

fn mehra_rungs() -> Vec<u64> {
    vec![60, 262, 350, 450]
}

/// Constant-bit-rate UDP from sender 1 to receiver 0 (RUDE in the paper).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Interference {
    pub start_s: f64,
    pub stop_s: f64,
    /// UDP payload rate.
    pub rate_kbps: u64,
    #[serde(default = "default_packet")]
    pub packet_bytes: usize,
}

fn default_packet() -> usize {
    1000
}

/// How the video travels.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum VideoTransport {
    /// `lowtide ladder serve` / `lowtide ladder play` over TCP, the player under the library.
    Tcp,
    /// The same ladder and switching rule over TFRC (RFC 5348), the paper's TCP-friendly UDP.
    Tfrc,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BwssVariant {
    pub name: String,
    pub video: VideoTransport,
    /// The daemon steers (true) or only observes and logs (false: plain TCP).
    pub steer: bool,
    /// A download on receiver 1 through the same bottleneck, not steered (an observing
    /// daemon on receiver 1 measures it): the "no harm outside" flow.
    #[serde(default)]
    pub outside_download: bool,
    /// The paper's average video rate, kbit/s.
    #[serde(default)]
    pub paper_video_kbps: Option<f64>,
    /// Trials of this variant (default `run.runs`): more for a noisy comparison.
    #[serde(default)]
    pub runs: Option<u32>,
}

/// A number a variant must reach.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BwssGoal {
    pub variant: String,
    pub metric: BwssMetric,
    #[serde(default)]
    pub min: Option<f64>,
    #[serde(default)]
    pub max: Option<f64>,
    /// For `outside_share_vs_baseline`: the variant compared with.
    #[serde(default)]
    pub baseline: Option<String>,
    #[serde(default)]
    pub why: String,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum BwssMetric {
    /// Mean video rate over the measured seconds, kbit/s.
    VideoMeanKbps,
    /// Mean video rate during the interference, kbit/s.
    VideoDuringInterferenceKbps,
    /// Share of the seconds during the interference with the video at or above its minimum.
    ShareOfSecondsAtMin,
    /// Bytes the bottleneck delivered over its capacity, measured seconds.
    LinkUtilization,
    /// The outside download's mean rate over the same in the goal's `baseline` variant.
    OutsideShareVsBaseline,
}

impl BwssMetric {
    pub fn as_str(self) -> &'static str {
        match self {
            BwssMetric::VideoMeanKbps => "video_mean_kbps",
            BwssMetric::VideoDuringInterferenceKbps => "video_during_interference_kbps",
            BwssMetric::ShareOfSecondsAtMin => "share_of_seconds_at_min",
            BwssMetric::LinkUtilization => "link_utilization",
            BwssMetric::OutsideShareVsBaseline => "outside_share_vs_baseline",
        }
    }
}

impl BwssScenario {
    pub fn from_toml_in(text: &str, base: &Path) -> Result<BwssScenario, ScenarioError> {
        let mut s: BwssScenario =
            toml::from_str(text).map_err(|e| ScenarioError::Parse(e.to_string()))?;
        s.topology.resolve_paths(base);
        s.check()?;
        Ok(s)
    }

    /// The minimum the video should get: `bwss.video_min_kbps`, else the `video` rule's.
    /// What the ladder server sends on its top rung, kbit/s.
    pub fn server_top_kbps(&self) -> f64 {
        self.bwss.rungs_kbps.iter().max().copied().unwrap_or(0) as f64 * self.bwss.server_overdrive
    }

    pub fn video_min_kbps(&self) -> Option<f64> {
        self.bwss.video_min_kbps.or_else(|| {
            self.bwss
                .rules
                .rules
                .iter()
                .find(|r| r.name.as_deref() == Some("video"))
                .map(|r| r.min_kbps)
        })
    }

    /// The access link's rate, kbit/s.
    pub fn link_kbps(&self) -> Option<f64> {
        self.topology.forward.rate_mbps.map(|m| m * 1000.0)
    }

    /// Trials of variant `v`.
    pub fn runs_of(&self, v: &BwssVariant) -> u32 {
        v.runs.unwrap_or(self.run.runs)
    }

    /// The `--quick` form: every time multiplied by `quick.time_scale`, every variant run at
    /// most `quick.runs` times; checked again.
    pub fn quick_form(&self) -> Result<BwssScenario, ScenarioError> {
        let k = self.quick.time_scale;
        let mut s = self.clone();
        s.run.duration_s *= k;
        s.run.measure_from_s *= k;
        s.bwss.interference.start_s *= k;
        s.bwss.interference.stop_s *= k;
        let cap = self.quick.runs;
        s.run.runs = s.run.runs.min(cap);
        for v in &mut s.variants {
            v.runs = v.runs.map(|n| n.min(cap));
        }
        s.check()?;
        Ok(s)
    }

    /// Every variant run `n` times (`lab run --runs`), checked again.
    pub fn with_runs(&self, n: u32) -> Result<BwssScenario, ScenarioError> {
        let mut s = self.clone();
        s.run.runs = n;
        for v in &mut s.variants {
            v.runs = None;
        }
        s.check()?;
        Ok(s)
    }

    pub fn check(&self) -> Result<(), ScenarioError> {
        check_name_and_topology(&self.name, &self.topology)?;
        if self.topology.senders < 2 || self.topology.receivers < 2 {
            return Err(invalid(
                "topology.senders/receivers",
                format!("{}/{}", self.topology.senders, self.topology.receivers),
                "at least 2 each (sender 1 sends the interferer, receiver 1 hosts the outside download)",
            ));
        }
        let (lo, hi) = DURATION_RANGE_S;
        // --quick may scale below the lab's 5 s floor: a BWSS trial of 2 s still measures.
        check_range("run.duration_s", self.run.duration_s, lo.min(2.0), hi)?;
        check_range(
            "run.measure_from_s",
            self.run.measure_from_s,
            0.0,
            self.run.duration_s - 1.0,
        )?;
        check_range("quick.time_scale", self.quick.time_scale, 0.01, 1.0)?;
        for (field, n) in [("run.runs", self.run.runs), ("quick.runs", self.quick.runs)] {
            if !(1..=MAX_RUNS).contains(&n) {
                return Err(invalid(field, n, format!("1 to {MAX_RUNS}")));
            }
        }
        let b = &self.bwss;
        if !(1..=MAX_DOWNLOADS).contains(&b.downloads) {
            return Err(invalid(
                "bwss.downloads",
                b.downloads,
                format!("1 to {MAX_DOWNLOADS}"),
            ));
        }
        if !(1..=1 << 20).contains(&b.file_mb) {
            return Err(invalid("bwss.file_mb", b.file_mb, "1 to 1048576"));
        }
        let bps: Vec<u64> = b.rungs_kbps.iter().map(|k| k * 1000).collect();
        lowtide_media::ladder::Ladder::new(&bps).map_err(|e| {
            invalid(
                "bwss.rungs_kbps",
                format!("{:?}", b.rungs_kbps),
                e.to_string(),
            )
        })?;
        b.player_rule
            .check()
            .map_err(|e| invalid("bwss.player_rule", "(the table)", e.to_string()))?;
        let i = &b.interference;
        check_range(
            "bwss.interference.start_s",
            i.start_s,
            0.0,
            self.run.duration_s,
        )?;
        check_range(
            "bwss.interference.stop_s",
            i.stop_s,
            i.start_s + 1.0,
            self.run.duration_s,
        )?;
        if !(1..=100_000).contains(&i.rate_kbps) {
            return Err(invalid(
                "bwss.interference.rate_kbps",
                i.rate_kbps,
                "1 to 100000",
            ));
        }
        if !(64..=1472).contains(&i.packet_bytes) {
            return Err(invalid(
                "bwss.interference.packet_bytes",
                i.packet_bytes,
                "64 to 1472",
            ));
        }
        b.rules
            .validate()
            .map_err(|e| invalid("bwss.rules", "(the table)", e.to_string()))?;
        if let Some(m) = b.video_min_kbps {
            check_range("bwss.video_min_kbps", m, 0.0, 1e7)?;
        }
        check_range("bwss.server_overdrive", b.server_overdrive, 1.0, 4.0)?;
        let top_kbps = self.server_top_kbps();
        if let Some(min) = self.video_min_kbps().filter(|&m| m > 0.0) {
            if top_kbps < min + MIN_ROOM_KBPS {
                return Err(invalid(
                    "bwss.server_overdrive",
                    b.server_overdrive,
                    format!(
                        "a rate that carries the video's minimum with room: the top rung × \
                         overdrive = {top_kbps:.1} kbit/s, wanted ≥ {:.1} (the minimum {min} + \
                         two segments a second); raise bwss.server_overdrive or the top rung",
                        min + MIN_ROOM_KBPS
                    ),
                ));
            }
        }
        if self.variants.is_empty() || self.variants.len() > crate::scenario::MAX_VARIANTS {
            return Err(invalid(
                "variant",
                self.variants.len(),
                format!("1 to {} variants", crate::scenario::MAX_VARIANTS),
            ));
        }
        for (k, v) in self.variants.iter().enumerate() {
            if v.name.trim().is_empty() {
                return Err(invalid(format!("variant[{k}].name"), "\"\"", "a name"));
            }
            if self.variants[..k].iter().any(|o| o.name == v.name) {
                return Err(invalid(
                    format!("variant[{k}].name"),
                    &v.name,
                    "a name no other variant has",
                ));
            }
            if let Some(n) = v.runs.filter(|n| !(1..=MAX_RUNS).contains(n)) {
                return Err(invalid(
                    format!("variant[{k}].runs"),
                    n,
                    format!("1 to {MAX_RUNS}"),
                ));
            }
        }
        for (k, g) in self.goals.iter().enumerate() {
            if !self.variants.iter().any(|v| v.name == g.variant) {
                return Err(invalid(
                    format!("goal[{k}].variant"),
                    &g.variant,
                    "the name of a variant",
                ));
            }
            if g.min.is_none() && g.max.is_none() {
                return Err(invalid(format!("goal[{k}]"), "no bound", "min and/or max"));
            }
            if g.metric == BwssMetric::OutsideShareVsBaseline {
                let with_outside = |name: &str| {
                    self.variants
                        .iter()
                        .any(|v| v.name == name && v.outside_download)
                };
                if !with_outside(&g.variant) {
                    return Err(invalid(
                        format!("goal[{k}].variant"),
                        &g.variant,
                        "a variant with outside_download = true",
                    ));
                }
                match &g.baseline {
                    Some(b) if with_outside(b) => {}
                    other => {
                        return Err(invalid(
                            format!("goal[{k}].baseline"),
                            format!("{other:?}"),
                            "another variant with outside_download = true",
                        ))
                    }
                }
            }
        }
        if self.video_min_kbps().is_none() {
            return Err(invalid(
                "bwss.video_min_kbps",
                "none",
                "a value, or a [[bwss.rules.rule]] named \"video\" with min_kbps",
            ));
        }
        Ok(())
    }
}
