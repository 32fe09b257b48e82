//! Scenario files: one experiment as TOML, checked in full before any namespace exists.
//!
//! A scenario names the paper figure it reproduces (and the paper's numbers), the topology
//! (a [`TopologyConfig`], inline), forward and reverse cross traffic (lowtide-traffic
//! schedules), the variants to compare, and how to run them: all at once through the same
//! bottleneck (`side_by_side`, distinct ports, machine noise cancels) and/or one after another
//! (`sequential`, the paper's way, N runs each). A `[quick]` block scales it down for CI.
//!
//! ```toml
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

use std::collections::BTreeMap;
use std::fmt::Display;
use std::path::{Path, PathBuf};

use lowtide::ControllerConfig;
use lowtide_media::video::{SyntheticModel, Video, VideoError};
use lowtide_netem::{ConfigError, TopologyConfig};
use lowtide_traffic::schedule::{FlowSpec, Plan, Schedule, ScheduleError};
use serde::{Deserialize, Serialize};

pub use crate::goals::{Goal, Metric, Relation};

/// Variants per scenario at most (each side-by-side variant is one more stream in the queue).
pub const MAX_VARIANTS: usize = 9;
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

/// Values a scenario sweeps (`[sweep]`): one full run per combination, one index page.
///
/// ```toml
/// [sweep]
/// threshold_ms = [100, 200, 500, 1000, 2000, 5000, 20000]
/// fps_goal = { reference = "QUIC", variants = ["MinBuf(1,3)"], within = 0.1 }
/// ```
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct SweepConfig {
    /// The conference's latency thresholds, ms (Erbad and Krasic, Fig. 5).
    #[serde(default)]
    pub threshold_ms: Vec<f64>,
    /// Queue limits of both bottleneck directions, in BDP.
    #[serde(default)]
    pub queue_bdp: Vec<f64>,
    /// Congestion controls of every TCP flow.
    #[serde(default)]
    pub congestion: Vec<String>,
    /// A frame-rate goal held at every combination ([`crate::fps_sweep`]).
    #[serde(default)]
    pub fps_goal: Option<FpsGoal>,
}

/// Most values in one `[sweep]` list.
pub const MAX_SWEEP_VALUES: usize = 16;

/// At every combination of a sweep, each of `variants` shows at least `1 - within` times the
/// frame rate of `reference` (issue 10: "fps within 10% of QUIC's at every threshold").
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FpsGoal {
    pub reference: String,
    pub variants: Vec<String>,
    #[serde(default = "a_tenth")]
    pub within: f64,
}

fn a_tenth() -> f64 {
    0.1
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

fn plain_tcp() -> ControllerConfig {
    ControllerConfig::Unlimited
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

/// One way of sending the measured stream.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Variant {
    pub name: String,
    /// lowtide's latency controller (default: `unlimited`, plain TCP).
    #[serde(default = "plain_tcp")]
    pub controller: ControllerConfig,
    /// Congestion control of this stream's socket (default: `topology.hosts.congestion`).
    #[serde(default)]
    pub congestion: Option<String>,
    /// Negotiate ECN: the stream's sender host requests it (`net.ipv4.tcp_ecn = 1`).
    /// Default: `topology.hosts.ecn`.
    #[serde(default)]
    pub ecn: Option<bool>,
    /// Sender host index (ECN is per host, so ECN and non-ECN variants need different hosts).
    #[serde(default)]
    pub sender: usize,
    /// What this variant runs (default: `application.kind`).
    #[serde(default)]
    pub application: Option<ApplicationKind>,
    /// Run the application over QUIC (quinn) instead of lowtide over TCP: the clean-slate
    /// reference (`crate::quic`); `controller`, `congestion` and `sndbuf` then do not apply.
    #[serde(default)]
    pub quic: Option<crate::quic::QuicConfig>,
    /// Failover to backup TCP connections (Paceline's connection manager), e.g.
    /// `failover = { backups = 1, floor_ms = 200 }`; both ends of the variant's channel use it.
    #[serde(default)]
    pub failover: Option<lowtide::proto::FailoverConfig>,
    /// Segments of the controller's kernel-queue limit kept for important messages, e.g.
    /// `importance_reserve = { segments = 2, min_importance = 7 }` (`lowtide_proto::reserve`).
    #[serde(default)]
    pub importance_reserve: Option<lowtide::proto::reserve::ImportanceReserve>,
    /// Duplicate lane: messages at or above an importance also sent on a warm backup
    /// connection, e.g. `duplicate = { min_importance = 7 }` (`lowtide_proto::failover::
    /// duplicate`); needs `failover`.
    #[serde(default)]
    pub duplicate: Option<lowtide::proto::DuplicateConfig>,
    /// Conference: age cancellation, ms. An enhancement ADU (not the base layer) not written
    /// whole to the kernel this long after capture is cancelled before it reaches it, so a
    /// loss cannot catch it late (`lowtide_media::conference::Conference::age_cancel`).
    /// Lowtide's TCP variants only.
    #[serde(default)]
    pub age_cancel_ms: Option<f64>,
    /// Latency stream: each message carries what fills exactly one segment with lowtide's
    /// frame header (`Channel::one_segment_payload`, about 1434 bytes) instead of a whole MSS
    /// (1448 bytes, which with the header takes two segments). Goel et al.'s application
    /// wrote one MSS-sized packet per write. Lowtide's TCP variants without TLS only.
    #[serde(default)]
    pub one_segment_messages: bool,
    /// Run the application over TFRC (`lowtide-tfrc`, RFC 5348) instead of lowtide over TCP
    /// (`crate::tfrc_flow`; latency stream and bit-rate ladder); `controller`, `congestion` and
    /// `sndbuf` then do not apply.
    #[serde(default)]
    pub tfrc: Option<lowtide_tfrc::TfrcConfig>,
    /// `SO_SNDBUF` of the stream's socket, bytes (default: the kernel's autotuning, up to
    /// `tcp_wmem`'s 4 MB). The kernel doubles it; 65536 gives Linux 2.4's largest buffer.
    #[serde(default)]
    pub sndbuf: Option<u32>,
    /// lowtide over TLS 1.3 (a certificate made for the trial; see `docs/tls.md`). Not with
    /// `quic` (QUIC always encrypts).
    #[serde(default)]
    pub tls: bool,
    /// TCP sysctls of the variant's sender host, set before the trial starts, e.g.
    /// `sender_sysctls = { "net.ipv4.tcp_reordering" = "1" }`: loss-repair knobs that are
    /// per network namespace in Linux, so the host must not also send cross traffic.
    #[serde(default)]
    pub sender_sysctls: BTreeMap<String, String>,
    /// The paper's numbers for this variant, where it gives them.
    #[serde(default)]
    pub paper: Option<PaperNumbers>,
}

/// What the paper reports for one variant; its numbers are approximate ("about 30%",
/// "under 2%"), and the report shows them so.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct PaperNumbers {
    #[serde(default)]
    pub text: Option<String>,
    /// Share of packets over 160 ms (0..1).
    #[serde(default)]
    pub share_over_160: Option<f64>,
    /// Share of packets over 500 ms (0..1).
    #[serde(default)]
    pub share_over_500: Option<f64>,
    /// Throughput relative to TCP.
    #[serde(default)]
    pub goodput_vs_baseline: Option<f64>,
    /// Video: share of windows whole within 500 ms (0..1).
    #[serde(default)]
    pub windows_within_500: Option<f64>,
    /// Video: share of windows the sender dropped (0..1).
    #[serde(default)]
    pub dropped_windows: Option<f64>,
    /// Bit-rate ladder: the largest one-way latency, ms.
    #[serde(default)]
    pub max_latency_ms: Option<f64>,
    /// Bit-rate ladder: bit-rate switches.
    #[serde(default)]
    pub switches: Option<u64>,
}

/// Changes `lowtide lab run` makes to a scenario (see [`Scenario::with_overrides`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    /// Queue limit of both bottleneck directions, in BDP.
    pub queue_bdp: Option<f64>,
    /// Congestion control of every TCP flow: the hosts, every variant, the cross traffic.
    pub congestion: Option<String>,
    /// Frames per adaptation window of the video (Fig. 8: 4, Fig. 9: 2).
    pub window_frames: Option<u32>,
    /// The conference's latency threshold, ms (Erbad and Krasic, Fig. 5).
    pub threshold_ms: Option<f64>,
}

impl Overrides {
    pub fn is_empty(&self) -> bool {
        *self == Overrides::default()
    }

    /// A suffix for the output folder, e.g. `-q0.5-reno-w2`.
    pub fn suffix(&self) -> String {
        let mut out = String::new();
        if let Some(q) = self.queue_bdp {
            out.push_str(&format!("-q{q}"));
        }
        if let Some(cc) = &self.congestion {
            out.push_str(&format!("-{cc}"));
        }
        if let Some(w) = self.window_frames {
            out.push_str(&format!("-w{w}"));
        }
        if let Some(t) = self.threshold_ms {
            out.push_str(&format!("-t{t}"));
        }
        out
    }
}

/// A scenario that cannot run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScenarioError {
    #[error("cannot read scenario {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    /// Not TOML, a wrong type or an unknown field (the message has line and column).
    #[error("the scenario does not parse: {0}")]
    Parse(String),
    #[error("{field} = {value}: allowed is {allowed}")]
    Invalid {
        field: String,
        value: String,
        allowed: String,
    },
    /// The topology's own check failed in a way that is not about one field.
    #[error("topology: {0}")]
    Topology(ConfigError),
    #[error("{which}.{source}")]
    Schedule {
        which: &'static str,
        source: ScheduleError,
    },
}

pub(crate) fn invalid(
    field: impl Into<String>,
    value: impl Display,
    allowed: impl Into<String>,
) -> ScenarioError {
    ScenarioError::Invalid {
        field: field.into(),
        value: value.to_string(),
        allowed: allowed.into(),
    }
}

/// The checks every scenario kind shares: a name fit for a folder, a valid topology.
pub(crate) fn check_name_and_topology(
    name: &str,
    topology: &TopologyConfig,
) -> Result<(), ScenarioError> {
    if name.trim().is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(invalid(
            "name",
            format!("{name:?}"),
            "a non-empty name of letters, digits, '-', '_' and '.' (it names the output folder)",
        ));
    }
    topology.validate().map_err(|e| match e {
        ConfigError::Invalid {
            field,
            value,
            allowed,
        } => invalid(format!("topology.{field}"), value, allowed),
        other => ScenarioError::Topology(other),
    })
}

/// TCP sysctls a scenario may set on its hosts: `net.ipv4.tcp_*` names with numeric values
/// (one or more non-negative integers), so nothing but a TCP knob of a namespace the lab made
/// is written.
pub(crate) fn check_tcp_sysctls(
    field: &str,
    sysctls: &BTreeMap<String, String>,
) -> Result<(), ScenarioError> {
    for (key, value) in sysctls {
        let name = key.strip_prefix("net.ipv4.tcp_").unwrap_or("");
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            return Err(invalid(
                field,
                format!("{key:?}"),
                "a TCP sysctl name such as \"net.ipv4.tcp_reordering\"",
            ));
        }
        let numeric = value.split_whitespace().count() > 0
            && value.len() <= 64
            && value.bytes().all(|b| b.is_ascii_digit() || b == b' ');
        if !numeric {
            return Err(invalid(
                format!("{field}.\"{key}\""),
                format!("{value:?}"),
                "one or more non-negative integers separated by spaces",
            ));
        }
    }
    Ok(())
}

pub(crate) fn check_range(field: &str, v: f64, min: f64, max: f64) -> Result<(), ScenarioError> {
    if v.is_finite() && (min..=max).contains(&v) {
        Ok(())
    } else {
        Err(invalid(field, v, format!("{min} to {max}")))
    }
}

/// A scenario that passed every check, with its cross traffic expanded into plans.
#[derive(Debug, Clone)]
pub struct Checked {
    pub scenario: Scenario,
    pub forward_plan: Plan,
    pub reverse_plan: Plan,
    /// Index of the first plain-TCP variant, if there is one.
    pub baseline: Option<usize>,
}

impl Checked {
    /// The plain-TCP variant a variant's goodput is compared with: the first `unlimited`
    /// one that runs the same application.
    pub fn baseline_of(&self, variant: usize) -> Option<usize> {
        let s = &self.scenario;
        let kind = s.application_of(&s.variants[variant]);
        s.variants.iter().position(|v| {
            v.controller == ControllerConfig::Unlimited && s.application_of(v) == kind
        })
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

    /// The scenario with one parameter changed everywhere it appears, for sensitivity runs
    /// (`--queue-bdp 0.5`, `--cc reno`): the paper's queue is unknown and its TCP is not ours.
    pub fn with_overrides(&self, o: &Overrides) -> Scenario {
        let mut s = self.clone();
        if let Some(bdp) = o.queue_bdp {
            s.topology.forward.queue = lowtide_netem::QueueLimit::Bdp(bdp);
            s.topology.reverse.queue = lowtide_netem::QueueLimit::Bdp(bdp);
        }
        if let Some(cc) = &o.congestion {
            s.topology.hosts.congestion = cc.clone();
            for v in &mut s.variants {
                v.congestion = None;
            }
            for f in s
                .forward_traffic
                .flows
                .iter_mut()
                .chain(s.reverse_traffic.flows.iter_mut())
            {
                if f.congestion_control.is_some() {
                    f.congestion_control = Some(cc.clone());
                }
            }
        }
        if let Some(w) = o.window_frames {
            s.application.video.window_frames = w;
        }
        if let Some(t) = o.threshold_ms {
            s.application.conference.threshold_ms = t;
        }
        s
    }

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
        s
    }

    /// End of the measurement window, seconds.
    pub fn measure_to_s(&self) -> f64 {
        self.run.measure_to_s.unwrap_or(self.run.duration_s)
    }

    /// Checks every field; the error names the first bad one.
    pub fn check(self) -> Result<Checked, ScenarioError> {
        check_name_and_topology(&self.name, &self.topology)?;
        let r = &self.run;
        if r.modes.is_empty() {
            return Err(invalid(
                "run.modes",
                "[]",
                "one or both of \"side_by_side\", \"sequential\"",
            ));
        }
        let (lo, hi) = DURATION_RANGE_S;
        check_range("run.duration_s", r.duration_s, lo, hi)?;
        check_range(
            "run.measure_from_s",
            r.measure_from_s,
            0.0,
            r.duration_s - 1.0,
        )?;
        check_range(
            "run.measure_to_s",
            self.measure_to_s(),
            r.measure_from_s + 1.0,
            r.duration_s,
        )?;
        if !(1..=MAX_RUNS).contains(&r.runs) {
            return Err(invalid("run.runs", r.runs, format!("1 to {MAX_RUNS}")));
        }
        check_range("quick.time_scale", self.quick.time_scale, 0.01, 1.0)?;
        if !(1..=MAX_RUNS).contains(&self.quick.runs) {
            return Err(invalid(
                "quick.runs",
                self.quick.runs,
                format!("1 to {MAX_RUNS}"),
            ));
        }
        self.check_variants()?;
        if let Some(sw) = &self.sweep {
            self.check_sweep(sw)?;
        }
        let forward_plan = self.check_schedule(
            "forward_traffic",
            &self.forward_traffic,
            self.topology.receivers,
            "receivers",
        )?;
        let reverse_plan = self.check_schedule(
            "reverse_traffic",
            &self.reverse_traffic.schedule(),
            self.topology.senders,
            "senders",
        )?;
        if let Some(h) = self.reverse_traffic.host {
            if h >= self.topology.receivers {
                return Err(invalid(
                    "reverse_traffic.host",
                    h,
                    format!(
                        "a receiver index below topology.receivers ({})",
                        self.topology.receivers
                    ),
                ));
            }
        }
        if self.application.receiver >= self.topology.receivers {
            return Err(invalid(
                "application.receiver",
                self.application.receiver,
                format!(
                    "a receiver index below topology.receivers ({})",
                    self.topology.receivers
                ),
            ));
        }
        if self
            .variants
            .iter()
            .any(|v| self.application_of(v) == ApplicationKind::LayeredVideo)
        {
            let v = &self.application.video;
            if !(1..=30).contains(&v.window_frames) {
                return Err(invalid(
                    "application.video.window_frames",
                    v.window_frames,
                    "1 to 30 frames",
                ));
            }
            check_range("application.video.tolerance_ms", v.tolerance_ms, 1.0, 60e3)?;
            v.video(1.0)?;
        }
        if self
            .variants
            .iter()
            .any(|v| self.application_of(v) == ApplicationKind::Conference)
        {
            let c = &self.application.conference;
            check_range(
                "application.conference.rate_mbps",
                c.rate_mbps,
                0.01,
                1000.0,
            )?;
            check_range(
                "application.conference.threshold_ms",
                c.threshold_ms,
                1.0,
                600e3,
            )?;
            let most = lowtide_media::session::MAX_VIDEOS;
            if c.videos_mbps.len() > most {
                return Err(invalid(
                    "application.conference.videos_mbps",
                    format!("{} videos", c.videos_mbps.len()),
                    format!("at most {most} videos"),
                ));
            }
            for (k, &r) in c.videos_mbps.iter().enumerate() {
                check_range(
                    &format!("application.conference.videos_mbps[{k}]"),
                    r,
                    0.01,
                    1000.0,
                )?;
            }
            for conf in c.videos() {
                conf.check()
                    .map_err(|e| invalid("application.conference", "", e))?;
            }
        }
        if self
            .variants
            .iter()
            .any(|v| self.application_of(v) == ApplicationKind::BitrateLadder)
        {
            self.application
                .ladder
                .check(self.run.duration_s)
                .map_err(|(f, v, a)| invalid(f, v, a))?;
        }
        for (i, g) in self.goals.iter().enumerate() {
            if !self.variants.iter().any(|v| v.name == g.variant) {
                return Err(invalid(
                    format!("goal[{i}].variant"),
                    format!("{:?}", g.variant),
                    "the name of a variant of this scenario",
                ));
            }
            if g.min.is_none() && g.max.is_none() {
                return Err(invalid(
                    format!("goal[{i}]"),
                    "no bound",
                    "min, max or both",
                ));
            }
            if g.vs_baseline.is_some() {
                if g.metric.is_relative() {
                    return Err(invalid(
                        format!("goal[{i}].vs_baseline"),
                        g.metric.as_str(),
                        "a metric that is not already relative to the baseline",
                    ));
                }
                let v = self.variants.iter().find(|v| v.name == g.variant);
                let has_baseline = v.is_some_and(|v| {
                    v.controller != ControllerConfig::Unlimited
                        && self.variants.iter().any(|b| {
                            b.controller == ControllerConfig::Unlimited
                                && self.application_of(b) == self.application_of(v)
                        })
                });
                if !has_baseline {
                    return Err(invalid(
                        format!("goal[{i}].vs_baseline"),
                        &g.variant,
                        "a variant with a plain-TCP baseline of its application (and not that baseline)",
                    ));
                }
            }
        }
        let baseline = self
            .variants
            .iter()
            .position(|v| v.controller == ControllerConfig::Unlimited);
        Ok(Checked {
            scenario: self,
            forward_plan,
            reverse_plan,
            baseline,
        })
    }

    fn check_sweep(&self, sw: &SweepConfig) -> Result<(), ScenarioError> {
        let lists = [
            ("sweep.threshold_ms", sw.threshold_ms.len()),
            ("sweep.queue_bdp", sw.queue_bdp.len()),
            ("sweep.congestion", sw.congestion.len()),
        ];
        for (field, n) in lists {
            if n > MAX_SWEEP_VALUES {
                return Err(invalid(
                    field,
                    format!("{n} values"),
                    format!("at most {MAX_SWEEP_VALUES} values"),
                ));
            }
        }
        if lists.iter().all(|(_, n)| *n == 0) {
            return Err(invalid(
                "sweep",
                "no values",
                "at least one of threshold_ms, queue_bdp, congestion with values",
            ));
        }
        let conference = |name: &str| {
            self.variants
                .iter()
                .any(|v| v.name == name && self.application_of(v) == ApplicationKind::Conference)
        };
        if !sw.threshold_ms.is_empty() && !self.variants.iter().any(|v| conference(&v.name)) {
            return Err(invalid(
                "sweep.threshold_ms",
                format!("{:?}", sw.threshold_ms),
                "a sweep of a scenario with a conference variant (the threshold is the conference's)",
            ));
        }
        for (k, &t) in sw.threshold_ms.iter().enumerate() {
            check_range(&format!("sweep.threshold_ms[{k}]"), t, 1.0, 600e3)?;
            if sw.threshold_ms[..k].contains(&t) {
                return Err(invalid(
                    format!("sweep.threshold_ms[{k}]"),
                    t,
                    "a threshold not already in the list",
                ));
            }
        }
        for (k, &q) in sw.queue_bdp.iter().enumerate() {
            check_range(&format!("sweep.queue_bdp[{k}]"), q, 0.01, 100.0)?;
        }
        for (k, cc) in sw.congestion.iter().enumerate() {
            if !lowtide_traffic::congestion::is_valid_name(cc) {
                return Err(invalid(
                    format!("sweep.congestion[{k}]"),
                    cc,
                    "a kernel congestion control name such as cubic, reno or bbr",
                ));
            }
        }
        if let Some(g) = &sw.fps_goal {
            for (field, name) in std::iter::once(("sweep.fps_goal.reference", &g.reference))
                .chain(g.variants.iter().map(|n| ("sweep.fps_goal.variants", n)))
            {
                if !conference(name) {
                    return Err(invalid(
                        field,
                        format!("{name:?}"),
                        "the name of a conference variant of this scenario",
                    ));
                }
            }
            if g.variants.is_empty() {
                return Err(invalid(
                    "sweep.fps_goal.variants",
                    "[]",
                    "at least one variant held to the reference",
                ));
            }
            check_range("sweep.fps_goal.within", g.within, 0.0, 1.0)?;
        }
        Ok(())
    }

    fn check_variants(&self) -> Result<(), ScenarioError> {
        let n = self.variants.len();
        if !(1..=MAX_VARIANTS).contains(&n) {
            return Err(invalid(
                "variant",
                format!("{n} entries"),
                format!("1 to {MAX_VARIANTS} [[variant]] entries"),
            ));
        }
        for (i, v) in self.variants.iter().enumerate() {
            let field = |f: &str| format!("variant[{i}].{f}");
            if v.name.trim().is_empty()
                || v.name.contains(['\n', '"'])
                || v.name == crate::report::FLOOR_SERIES
            {
                return Err(invalid(
                    field("name"),
                    format!("{:?}", v.name),
                    "a non-empty name without quotes or newlines, not the floor probe's (it is a CSV key)",
                ));
            }
            if self.variants[..i].iter().any(|w| w.name == v.name) {
                return Err(invalid(
                    field("name"),
                    &v.name,
                    "a name no other variant has",
                ));
            }
            if let Some(q) = &v.quic {
                q.check().map_err(|e| invalid(field("quic"), "", e))?;
                if v.tls {
                    return Err(invalid(
                        field("tls"),
                        "true",
                        "false with quic (QUIC always encrypts)",
                    ));
                }
                let app = self.application_of(v);
                let videos = self.application.conference.videos_mbps.len();
                if app == ApplicationKind::Conference && videos > 1 {
                    return Err(invalid(
                        "application.conference.videos_mbps",
                        format!("{videos} videos"),
                        format!(
                            "one video with a QUIC variant ({:?} sends each ADU on its own QUIC \
                             stream, with no channel to share among videos)",
                            v.name
                        ),
                    ));
                }
                let app = self.application_of(v);
                if matches!(
                    app,
                    ApplicationKind::LayeredVideo | ApplicationKind::BitrateLadder
                ) {
                    return Err(invalid(
                        field("application"),
                        format!("{app:?}"),
                        "latency_stream or conference for a QUIC variant",
                    ));
                }
                if v.controller != ControllerConfig::Unlimited
                    || v.congestion.is_some()
                    || v.sndbuf.is_some()
                {
                    return Err(invalid(
                        field("quic"),
                        "with controller, congestion or sndbuf",
                        "a QUIC variant without lowtide's TCP settings (its congestion control is quic.congestion)",
                    ));
                }
            }
            if let Some(f) = &v.failover {
                if v.tls {
                    return Err(invalid(
                        field("tls"),
                        "true with failover",
                        "TLS or failover, not both (yet)",
                    ));
                }
                if v.quic.is_some() {
                    return Err(invalid(
                        field("failover"),
                        "with quic",
                        "failover on lowtide's TCP variants only",
                    ));
                }
                f.validate()
                    .map_err(|e| invalid(field("failover"), format!("{f:?}"), e.to_string()))?;
            }
            if let Some(d) = &v.duplicate {
                if v.failover.is_none() {
                    return Err(invalid(
                        field("duplicate"),
                        "without failover",
                        "with failover = { ... } (the lane is a backup connection)",
                    ));
                }
                d.validate()
                    .map_err(|e| invalid(field("duplicate"), format!("{d:?}"), e.to_string()))?;
            }
            if let Some(ms) = v.age_cancel_ms {
                if v.quic.is_some() || self.application_of(v) != ApplicationKind::Conference {
                    return Err(invalid(
                        field("age_cancel_ms"),
                        format!("{ms}"),
                        "age cancellation on lowtide's conference variants only",
                    ));
                }
                if !(ms.is_finite() && (1.0..=600_000.0).contains(&ms)) {
                    return Err(invalid(
                        field("age_cancel_ms"),
                        format!("{ms}"),
                        "1 to 600000 ms",
                    ));
                }
            }
            if v.one_segment_messages
                && (v.quic.is_some()
                    || v.tfrc.is_some()
                    || v.tls
                    || self.application_of(v) != ApplicationKind::LatencyStream)
            {
                return Err(invalid(
                    field("one_segment_messages"),
                    "true",
                    "one-segment messages on lowtide's latency-stream variants over TCP without TLS only",
                ));
            }
            if let Some(r) = &v.importance_reserve {
                if v.quic.is_some() || v.tfrc.is_some() {
                    return Err(invalid(
                        field("importance_reserve"),
                        "with quic or tfrc",
                        "an importance reserve on lowtide's TCP variants only",
                    ));
                }
                r.validate(&v.controller).map_err(|e| {
                    invalid(field("importance_reserve"), format!("{r:?}"), e.to_string())
                })?;
            }
            if let Some(t) = &v.tfrc {
                t.validate()
                    .map_err(|e| invalid(field("tfrc"), "", e.to_string()))?;
                let app = self.application_of(v);
                if !matches!(
                    app,
                    ApplicationKind::LatencyStream | ApplicationKind::BitrateLadder
                ) {
                    return Err(invalid(
                        field("application"),
                        format!("{app:?}"),
                        "latency_stream or bitrate_ladder for a TFRC variant",
                    ));
                }
                if v.controller != ControllerConfig::Unlimited
                    || v.congestion.is_some()
                    || v.sndbuf.is_some()
                    || v.quic.is_some()
                    || v.failover.is_some()
                    || v.tls
                {
                    return Err(invalid(
                        field("tfrc"),
                        "with controller, congestion, sndbuf, quic, failover or tls",
                        "a TFRC variant without lowtide's TCP settings (its buffer is tfrc.buffer)",
                    ));
                }
            }
            v.controller.validate().map_err(|e| {
                invalid(
                    field("controller"),
                    format!("{:?}", v.controller),
                    e.to_string(),
                )
            })?;
            if let Some(cc) = &v.congestion {
                if !lowtide_traffic::congestion::is_valid_name(cc) {
                    return Err(invalid(
                        field("congestion"),
                        cc,
                        "a kernel congestion control name such as cubic, reno or bbr",
                    ));
                }
            }
            if let Some(b) = v.sndbuf {
                if !(4096..=(64 << 20)).contains(&b) {
                    return Err(invalid(field("sndbuf"), b, "4096 to 67108864 bytes"));
                }
            }
            if v.sender >= self.topology.senders {
                return Err(invalid(
                    field("sender"),
                    v.sender,
                    format!(
                        "a sender index below topology.senders ({})",
                        self.topology.senders
                    ),
                ));
            }
            self.check_sender_sysctls(i, v)?;
            if let Some(p) = &v.paper {
                for (name, x) in [
                    ("share_over_160", p.share_over_160),
                    ("share_over_500", p.share_over_500),
                    ("windows_within_500", p.windows_within_500),
                    ("dropped_windows", p.dropped_windows),
                ] {
                    if let Some(x) = x {
                        check_range(&field(&format!("paper.{name}")), x, 0.0, 1.0)?;
                    }
                }
            }
        }
        // ECN and sysctls are host settings: side by side, variants that differ in them need
        // their own host.
        if self.run.modes.contains(&Mode::SideBySide) {
            for (i, v) in self.variants.iter().enumerate() {
                for w in &self.variants[..i] {
                    if w.sender == v.sender && w.sender_sysctls != v.sender_sysctls {
                        return Err(invalid(
                            format!("variant[{i}].sender"),
                            v.sender,
                            format!(
                                "a sender of its own: side by side, {:?} has other sender_sysctls \
                                 on the same host",
                                w.name
                            ),
                        ));
                    }
                    if w.sender == v.sender && self.ecn_of(w) != self.ecn_of(v) {
                        return Err(invalid(
                            format!("variant[{i}].sender"),
                            v.sender,
                            format!(
                                "a sender host other than {:?}'s: ECN is set per host and they differ",
                                w.name
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether a variant negotiates ECN.
    pub fn ecn_of(&self, v: &Variant) -> bool {
        v.ecn.unwrap_or(self.topology.hosts.ecn)
    }

    /// `sender_sysctls`: TCP names (`net.ipv4.tcp_*`) with numeric values, on a host that
    /// sends no cross traffic (forward flows start on sender 0), so the knob reaches only
    /// the variant's stream.
    fn check_sender_sysctls(&self, i: usize, v: &Variant) -> Result<(), ScenarioError> {
        check_tcp_sysctls(&format!("variant[{i}].sender_sysctls"), &v.sender_sysctls)?;
        if !v.sender_sysctls.is_empty() && v.sender == 0 && !self.forward_traffic.flows.is_empty() {
            return Err(invalid(
                format!("variant[{i}].sender"),
                0,
                "a sender other than 0 with sender_sysctls: the forward cross traffic runs on \
                 sender 0 and would get them too",
            ));
        }
        Ok(())
    }

    fn check_schedule(
        &self,
        which: &'static str,
        schedule: &Schedule,
        hosts: usize,
        side: &str,
    ) -> Result<Plan, ScenarioError> {
        let plan = schedule
            .validate()
            .map_err(|source| ScenarioError::Schedule { which, source })?;
        for f in &plan.flows {
            if f.target >= hosts {
                return Err(invalid(
                    format!("{which}.flow[{}].target", f.entry),
                    f.target,
                    format!("a host index below topology.{side} ({hosts})"),
                ));
            }
            if f.stop.as_secs_f64() > self.run.duration_s + 1e-9 {
                return Err(invalid(
                    format!("{which}.flow[{}].stop_s", f.entry),
                    f.stop.as_secs_f64(),
                    format!("at most run.duration_s ({})", self.run.duration_s),
                ));
            }
        }
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
name = "t"
[run]
modes = ["side_by_side", "sequential"]
duration_s = 40.0
measure_from_s = 10.0
[topology]
receivers = 2
forward = { rate_mbps = 10, delay_ms = 25 }
reverse = { rate_mbps = 10, delay_ms = 25 }
[[forward_traffic.flow]]
kind = "elephant"
count = 3
start_s = 5.0
stop_s = 40.0
congestion_control = "cubic"
target = 1
[[variant]]
name = "TCP"
controller = "unlimited"
[[variant]]
name = "MinBuf(1,3)"
controller = { min_buf = { a = 1, b = 3 } }
"#;

    fn err(text: &str) -> String {
        Scenario::from_toml(text).unwrap_err().to_string()
    }

    #[test]
    fn a_good_scenario_checks_and_finds_its_baseline() {
        let c = Scenario::from_toml(GOOD).unwrap();
        assert_eq!(c.baseline, Some(0));
        assert_eq!(c.forward_plan.flows.len(), 3);
        assert_eq!(c.scenario.measure_to_s(), 40.0);
    }

    #[test]
    fn quick_scales_every_time_and_runs_once() {
        let mut s = Scenario::from_toml(GOOD).unwrap().scenario;
        s.run.runs = 8;
        let q = s.quick();
        assert_eq!(q.run.duration_s, 20.0);
        assert_eq!(q.run.measure_from_s, 5.0);
        assert_eq!(q.forward_traffic.flows[0].start_s, 2.5);
        assert_eq!(q.run.runs, 1);
        q.check().unwrap();
    }

    #[test]
    fn overrides_change_the_queue_and_every_congestion_control() {
        let s = Scenario::from_toml(GOOD).unwrap().scenario;
        let o = Overrides {
            queue_bdp: Some(0.5),
            congestion: Some("reno".into()),
            window_frames: Some(2),
            threshold_ms: Some(500.0),
        };
        let t = s.with_overrides(&o).check().unwrap().scenario;
        assert_eq!(
            t.topology.forward.queue,
            lowtide_netem::QueueLimit::Bdp(0.5)
        );
        assert_eq!(t.topology.hosts.congestion, "reno");
        assert_eq!(
            t.forward_traffic.flows[0].congestion_control.as_deref(),
            Some("reno")
        );
        assert_eq!(t.application.video.window_frames, 2);
        assert_eq!(t.application.conference.threshold_ms, 500.0);
        assert_eq!(o.suffix(), "-q0.5-reno-w2-t500");
        let e = s
            .with_overrides(&Overrides {
                queue_bdp: Some(-1.0),
                ..Overrides::default()
            })
            .check()
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("topology.forward.queue"), "{e}");
    }

    #[test]
    fn unknown_fields_are_named() {
        let e = err(&GOOD.replace("duration_s = 40.0", "duration_s = 40.0\nlenght = 3"));
        assert!(e.contains("unknown field `lenght`"), "{e}");
    }

    #[test]
    fn out_of_range_values_name_field_value_and_range() {
        let e = err(&GOOD.replace("duration_s = 40.0", "duration_s = 2.0"));
        assert_eq!(e, "run.duration_s = 2: allowed is 5 to 3600");
        let e = err(&GOOD.replace("measure_from_s = 10.0", "measure_from_s = 50.0"));
        assert!(e.starts_with("run.measure_from_s = 50"), "{e}");
        let e = err(&GOOD.replace("a = 1, b = 3", "a = 0, b = 3"));
        assert!(e.starts_with("variant[1].controller"), "{e}");
    }

    #[test]
    fn cross_traffic_must_fit_the_topology_and_the_run() {
        let e = err(&GOOD.replace("target = 1", "target = 2"));
        assert!(e.starts_with("forward_traffic.flow[0].target = 2"), "{e}");
        let e = err(&GOOD.replace("stop_s = 40.0", "stop_s = 45.0"));
        assert!(e.starts_with("forward_traffic.flow[0].stop_s = 45"), "{e}");
        let e = err(&GOOD.replace("count = 3", "count = 65"));
        assert!(e.starts_with("forward_traffic.flow[0].count = 65"), "{e}");
    }

    #[test]
    fn variants_must_be_distinct_and_ecn_needs_its_own_host() {
        let e = err(&GOOD.replace("name = \"MinBuf(1,3)\"", "name = \"TCP\""));
        assert!(e.starts_with("variant[1].name = TCP"), "{e}");
        let e = err(&GOOD.replace(
            "controller = { min_buf",
            "ecn = true\ncontroller = { min_buf",
        ));
        assert!(e.starts_with("variant[1].sender = 0"), "{e}");
    }

    #[test]
    fn sender_sysctls_need_a_tcp_name_a_number_and_a_host_without_cross_traffic() {
        let two = GOOD.replace("receivers = 2", "receivers = 2\nsenders = 2");
        let with = |text: &str, sysctls: &str| {
            text.replace(
                "controller = { min_buf",
                &format!("sender = 1\nsender_sysctls = {sysctls}\ncontroller = {{ min_buf"),
            )
        };
        let ok = Scenario::from_toml(&with(
            &two.replace("\"side_by_side\", ", ""),
            r#"{ "net.ipv4.tcp_reordering" = "1", "net.ipv4.tcp_recovery" = "5" }"#,
        ))
        .unwrap();
        assert_eq!(ok.scenario.variants[1].sender_sysctls.len(), 2);
        let e = err(&with(&two, r#"{ "kernel.panic" = "1" }"#));
        assert!(
            e.starts_with("variant[1].sender_sysctls = \"kernel.panic\""),
            "{e}"
        );
        let e = err(&with(&two, r#"{ "net.ipv4.tcp_../../x" = "1" }"#));
        assert!(e.starts_with("variant[1].sender_sysctls"), "{e}");
        let e = err(&with(
            &two,
            r#"{ "net.ipv4.tcp_reordering" = "1; reboot" }"#,
        ));
        assert!(
            e.starts_with("variant[1].sender_sysctls.\"net.ipv4.tcp_reordering\""),
            "{e}"
        );
        // Sender 0 also sends the forward cross traffic.
        let e = err(&with(&two, r#"{ "net.ipv4.tcp_reordering" = "1" }"#)
            .replace("sender = 1", "sender = 0"));
        assert!(e.starts_with("variant[1].sender = 0"), "{e}");
        // Side by side, a host is shared: other values on it need a host of their own.
        let e = err(&with(&two, r#"{ "net.ipv4.tcp_reordering" = "1" }"#)
            .replace("name = \"TCP\"", "name = \"TCP\"\nsender = 1"));
        assert!(e.starts_with("variant[1].sender = 1"), "{e}");
    }

    #[test]
    fn tfrc_and_ladder_variants_are_checked() {
        let with = |extra: &str| format!("{GOOD}[[variant]]\nname = \"X\"\n{extra}\n");
        let tfrc = "tfrc = { buffer = { fixed = { bytes = 16384 } } }";
        let ok = Scenario::from_toml(&with(tfrc)).unwrap();
        assert!(ok.scenario.variants[2].tfrc.is_some());
        let e = err(&with("tfrc = { buffer = { fixed = { bytes = 0 } } }"));
        assert!(
            e.starts_with("variant[2].tfrc") && e.contains("buffer.fixed.bytes"),
            "{e}"
        );
        let e = err(&with(&format!("{tfrc}\nsndbuf = 65536")));
        assert!(e.starts_with("variant[2].tfrc"), "{e}");
        let e = err(&with(&format!("{tfrc}\napplication = \"conference\"")));
        assert!(e.starts_with("variant[2].application = Conference"), "{e}");
        let ladder = |start_s: &str| {
            with("application = \"bitrate_ladder\"").replace(
                "name = \"t\"",
                &format!("name = \"t\"\n[application.ladder]\nstart_s = {start_s}"),
            )
        };
        Scenario::from_toml(&ladder("1.0")).unwrap();
        let e = err(&ladder("1e6"));
        assert!(e.starts_with("application.ladder.start_s = 1000000"), "{e}");
        let e = err(&with("application = \"bitrate_ladder\"\nquic = {}"));
        assert!(
            e.starts_with("variant[2].application = BitrateLadder"),
            "{e}"
        );
    }

    #[test]
    fn topology_errors_keep_their_field() {
        let e = err(&GOOD.replace("receivers = 2", "receivers = 0"));
        assert!(e.starts_with("topology.receivers = 0"), "{e}");
    }

    #[test]
    fn video_variants_need_a_video_and_get_a_baseline_of_their_kind() {
        let video = GOOD.replace(
            "name = \"t\"",
            "name = \"t\"\n[application.video]\ntrace = \"testsrc2-4layer\"\nwindow_frames = 2",
        ) + "[[variant]]\nname = \"video TCP\"\ncontroller = \"unlimited\"\napplication = \"layered_video\"\n\
             [[variant]]\nname = \"video MinBuf\"\ncontroller = { min_buf = { a = 1, b = 3 } }\napplication = \"layered_video\"\n";
        let c = Scenario::from_toml(&video).unwrap();
        assert_eq!(c.baseline_of(1), Some(0));
        assert_eq!(c.baseline_of(3), Some(2));
        let v = c.scenario.application.video.video(60.0).unwrap();
        assert_eq!((v.frames.len(), v.layer_count()), (1800, 4));
        let e = err(&video.replace("testsrc2-4layer", "nope"));
        assert!(e.starts_with("application.video.trace = \"nope\""), "{e}");
        let e = err(&video.replace("window_frames = 2", "window_frames = 0"));
        assert!(e.starts_with("application.video.window_frames = 0"), "{e}");
        let e = err(&video.replace(
            "window_frames = 2",
            "synthetic = { fps = 30, layer_bps = [1e5], gop = 30, i_frame_ratio = 2, spread = 0, seed = 1 }",
        ));
        assert!(
            e.starts_with("application.video = trace and synthetic"),
            "{e}"
        );
    }

    #[test]
    fn quic_variants_are_checked() {
        let quic = |extra: &str| format!("{GOOD}[[variant]]\nname = \"QUIC\"\n{extra}\n");
        let ok = Scenario::from_toml(&quic("quic = { congestion = \"bbr\" }")).unwrap();
        let v = &ok.scenario.variants[2];
        assert_eq!(v.controller, ControllerConfig::Unlimited);
        assert_eq!(v.quic.as_ref().unwrap().send_window_bytes, 65536);
        let e = err(&quic("quic = { congestion = \"vegas\" }"));
        assert!(
            e.starts_with("variant[2].quic") && e.contains("cubic, newreno, bbr"),
            "{e}"
        );
        let e = err(&quic("quic = { send_window_bytes = 100 }"));
        assert!(e.contains("send_window_bytes = 100"), "{e}");
        let e = err(&quic("quic = {}\ncongestion = \"reno\""));
        assert!(e.contains("without lowtide's TCP settings"), "{e}");
        let e = err(&quic("quic = {}\napplication = \"layered_video\""));
        assert!(e.starts_with("variant[2].application"), "{e}");
        // A variant without a controller is plain TCP.
        let plain = Scenario::from_toml(&format!("{GOOD}[[variant]]\nname = \"plain\"\n")).unwrap();
        assert_eq!(
            plain.scenario.variants[2].controller,
            ControllerConfig::Unlimited
        );
    }

    #[test]
    fn failover_variants_are_checked() {
        let fo = |extra: &str| format!("{GOOD}[[variant]]\nname = \"FO\"\n{extra}\n");
        let ok = Scenario::from_toml(&fo("failover = { backups = 2, floor_ms = 60 }")).unwrap();
        let f = ok.scenario.variants[2].failover.unwrap();
        assert_eq!((f.backups, f.floor_ms, f.factor), (2, 60, 2.0));
        let e = err(&fo("failover = { backups = 0 }"));
        assert!(
            e.starts_with("variant[2].failover")
                && e.contains("failover.backups")
                && e.contains("1..=8"),
            "{e}"
        );
        let e = err(&fo("failover = {}\nquic = {}"));
        assert!(e.contains("failover on lowtide's TCP variants only"), "{e}");
        assert!(Scenario::from_toml(&fo("failover = { bogus = 1 }")).is_err());
    }

    #[test]
    fn importance_reserve_variants_are_checked() {
        let r = |extra: &str| format!("{GOOD}[[variant]]\nname = \"R\"\n{extra}\n");
        let mb = "controller = { min_buf = { a = 1, b = 3 } }";
        let ok = Scenario::from_toml(&r(&format!(
            "{mb}\nimportance_reserve = {{ segments = 5, min_importance = 7 }}"
        )))
        .unwrap();
        let got = ok.scenario.variants[2].importance_reserve.unwrap();
        assert_eq!((got.segments, got.min_importance), (5, 7));
        let e = err(&r(&format!(
            "{mb}\nimportance_reserve = {{ segments = 0, min_importance = 7 }}"
        )));
        assert!(
            e.starts_with("variant[2].importance_reserve") && e.contains("1..=16"),
            "{e}"
        );
        // Plain TCP has no kernel-queue limit to keep a reserve in.
        let e = err(&r(
            "importance_reserve = { segments = 2, min_importance = 7 }",
        ));
        assert!(e.contains("a limit-based controller"), "{e}");
        let e = err(&r(
            "quic = {}\nimportance_reserve = { segments = 2, min_importance = 7 }",
        ));
        assert!(e.contains("lowtide's TCP variants only"), "{e}");
    }

    #[test]
    fn one_segment_messages_are_for_the_latency_stream_over_lowtide_only() {
        let ok = format!("{GOOD}[[variant]]\nname = \"A\"\none_segment_messages = true\n");
        let s = Scenario::from_toml(&ok).unwrap().scenario;
        assert!(s.variants.iter().any(|v| v.one_segment_messages));
        for other in ["quic = {}", "tls = true", "application = \"conference\""] {
            let r = format!("{ok}{other}\n");
            let e = err(&r);
            assert!(e.contains("one_segment_messages"), "{other}: {e}");
        }
    }

    #[test]
    fn age_cancellation_is_checked_and_reaches_the_videos() {
        let text = include_str!("../../../scenarios/paceline-fig6.toml");
        let s = Scenario::from_toml(text).unwrap().scenario;
        let videos = |name: &str| {
            let v = s.variants.iter().find(|v| v.name == name).unwrap();
            s.conference_videos(v)[0].age_cancel
        };
        assert_eq!(
            videos("MinBuf(1,3)+failover+age cancel"),
            Some(std::time::Duration::from_millis(15))
        );
        assert_eq!(videos("MinBuf(1,3)+failover"), None);
        let bad = |from: &str, to: &str| {
            let e = err(&text.replace(from, to));
            assert!(e.contains("age_cancel_ms"), "{e}");
            e
        };
        let e = bad("age_cancel_ms = 15.0", "age_cancel_ms = 0.0");
        assert!(e.contains("1 to 600000 ms"), "{e}");
        bad("age_cancel_ms = 15.0", "age_cancel_ms = nan");
        // Not on the QUIC variant, nor outside a conference.
        let e = bad(
            "quic = { congestion",
            "age_cancel_ms = 20.0\nquic = { congestion",
        );
        assert!(e.contains("conference variants only"), "{e}");
        let r = format!("{GOOD}[[variant]]\nname = \"A\"\nage_cancel_ms = 20.0\n");
        assert!(err(&r).contains("conference variants only"));
    }

    #[test]
    fn fig6_reserves_parse_and_the_removed_timed_form_is_refused() {
        let text = include_str!("../../../scenarios/paceline-fig6.toml");
        let s = Scenario::from_toml(text).unwrap().scenario;
        let reserve = |name: &str| {
            let v = s.variants.iter().find(|v| v.name == name).unwrap();
            v.importance_reserve.map(|r| (r.segments, r.min_importance))
        };
        assert_eq!(reserve("MinBuf(1,3)+failover+reserve 2"), Some((2, 7)));
        assert_eq!(reserve("MinBuf(1,3)+reserve 5"), Some((5, 7)));
        let timed = text.replace(
            "importance_reserve = { segments = 2, min_importance = 7 }",
            "importance_reserve = { segments = 2, min_importance = 7, timed = true }",
        );
        assert!(Scenario::from_toml(&timed).is_err());
    }

    #[test]
    fn several_conference_videos_are_checked_when_parsed() {
        let conf = GOOD.replace(
            "name = \"MinBuf(1,3)\"",
            "name = \"MinBuf(1,3)\"\napplication = \"conference\"",
        );
        let with = |app: &str| format!("{conf}[application.conference]\n{app}\n");
        let ok =
            Scenario::from_toml(&with("videos_mbps = [2, 4, 6]\nfairness = \"quality\"")).unwrap();
        let app = &ok.scenario.application.conference;
        assert_eq!(app.fairness, lowtide::Fairness::Quality);
        let rates: Vec<f64> = app.videos().iter().map(|c| c.rate_bps).collect();
        assert_eq!(rates, [2e6, 4e6, 6e6]);
        // The default: one video at rate_mbps, resource fairness (today's behaviour).
        let one = Scenario::from_toml(&with("rate_mbps = 3")).unwrap();
        let app = &one.scenario.application.conference;
        assert_eq!(app.fairness, lowtide::Fairness::Resource);
        assert_eq!(app.videos().len(), 1);
        assert_eq!(app.videos()[0].rate_bps, 3e6);
        let e = err(&with("videos_mbps = [2, 0]"));
        assert_eq!(
            e,
            "application.conference.videos_mbps[1] = 0: allowed is 0.01 to 1000"
        );
        let e = err(&with(&format!("videos_mbps = [{}]", ["1"; 17].join(", "))));
        assert!(e.contains("17 videos") && e.contains("at most 16"), "{e}");
        assert!(Scenario::from_toml(&with("fairness = \"bytes\"")).is_err());
        // QUIC sends ADUs on streams of their own: one video only.
        let quic = format!(
            "{}[[variant]]\nname = \"QUIC\"\napplication = \"conference\"\nquic = {{}}\n",
            with("videos_mbps = [2, 4]")
        );
        let e = err(&quic);
        assert!(
            e.starts_with("application.conference.videos_mbps = 2 videos") && e.contains("QUIC"),
            "{e}"
        );
    }

    #[test]
    fn a_declared_sweep_is_checked_when_parsed() {
        let conf = GOOD.replace(
            "name = \"MinBuf(1,3)\"",
            "name = \"MinBuf(1,3)\"\napplication = \"conference\"",
        ) + "[[variant]]\nname = \"QUIC\"\napplication = \"conference\"\nquic = {}\n";
        let with = |sweep: &str| format!("{conf}[sweep]\n{sweep}\n");
        let goal = "fps_goal = { reference = \"QUIC\", variants = [\"MinBuf(1,3)\"] }";
        let ok =
            Scenario::from_toml(&with(&format!("threshold_ms = [100, 2000]\n{goal}"))).unwrap();
        let sw = ok.scenario.sweep.as_ref().unwrap();
        assert_eq!(sw.threshold_ms, [100.0, 2000.0]);
        assert_eq!(sw.fps_goal.as_ref().unwrap().within, 0.1);
        let e = err(&with("threshold_ms = [100, 0.5]"));
        assert_eq!(e, "sweep.threshold_ms[1] = 0.5: allowed is 1 to 600000");
        let e = err(&with("threshold_ms = [100, 100]"));
        assert!(e.starts_with("sweep.threshold_ms[1] = 100"), "{e}");
        let e = err(&with(""));
        assert!(e.starts_with("sweep = no values"), "{e}");
        let e = err(&with("congestion = [\"cubic\", \"nope!\"]"));
        assert!(e.starts_with("sweep.congestion[1] = nope!"), "{e}");
        let e = err(&with("queue_bdp = [0.5, -1]"));
        assert!(e.starts_with("sweep.queue_bdp[1] = -1"), "{e}");
        let e = err(&with(&format!(
            "threshold_ms = [100]\n{}",
            goal.replace("\"QUIC\"", "\"SST\"")
        )));
        assert!(e.starts_with("sweep.fps_goal.reference = \"SST\""), "{e}");
        let e = err(&with(&format!(
            "threshold_ms = [100]\n{}",
            goal.replace("MinBuf(1,3)", "TCP")
        )));
        assert!(
            e.starts_with("sweep.fps_goal.variants = \"TCP\"") && e.contains("conference"),
            "{e}"
        );
        let e = err(&with("threshold_ms = [100]\nbogus = 1"));
        assert!(e.contains("unknown field `bogus`"), "{e}");
        // A threshold sweep needs a conference.
        let e = err(&format!("{GOOD}[sweep]\nthreshold_ms = [100]\n"));
        assert!(e.starts_with("sweep.threshold_ms"), "{e}");
        Scenario::from_toml(&format!("{GOOD}[sweep]\nqueue_bdp = [0.5, 2]\n")).unwrap();
    }

    #[test]
    fn goals_must_name_a_variant() {
        let e = err(&format!(
            "{GOOD}\n[[goal]]\nvariant = \"Nope\"\nmetric = \"latency_p99_ms\"\nmax = 1.0\n"
        ));
        assert!(e.starts_with("goal[0].variant"), "{e}");
    }

    #[test]
    fn shipped_scenarios_check() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let text = std::fs::read_to_string(&path).unwrap();
                if crate::rdc::is_rdc_scenario(&text) {
                    // Checked by the RDC experiments' own test.
                    continue;
                }
                if crate::bwss::is_bwss_scenario(&text) {
                    let s = crate::bwss::BwssScenario::from_toml_in(&text, &dir)
                        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                    s.quick_form()
                        .unwrap_or_else(|e| panic!("{} --quick: {e}", path.display()));
                    n += 1;
                    continue;
                }
                let c = Scenario::from_file(&path)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                c.scenario
                    .quick()
                    .check()
                    .unwrap_or_else(|e| panic!("{} --quick: {e}", path.display()));
                n += 1;
            }
        }
        assert!(
            n >= 5,
            "expected the five shipped scenarios in {}",
            dir.display()
        );
    }
}
