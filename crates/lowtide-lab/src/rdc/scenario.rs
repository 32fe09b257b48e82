//! RDC scenario files (`scenarios/rdc-*.toml`): bulk TCP flows through one bottleneck whose
//! queue management each variant chooses, with or without the RDC agent in the receivers.
//! Checked before anything runs; every error names the field, the value and what is allowed.

use std::path::Path;
use std::time::Duration;

use lowtide_netem::config::{AqmConfig, RdcMode, TopologyConfig};
use serde::{Deserialize, Serialize};

use crate::scenario::PaperFigure;

/// Flows a scenario may have.
pub const MAX_FLOWS: usize = 256;

/// A whole RDC scenario file (`kind = "rdc"`, with an `[rdc]` table).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RdcScenario {
    /// The experiment this file is (`kind = "rdc"`), read and checked by
    /// [`crate::experiment::registry`] before this struct is parsed; kept so the scenario as
    /// run names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub paper: PaperFigure,
    pub rdc: RunSettings,
    /// Flow i goes from sender `i % senders` to receiver `i % receivers`; `senders` and
    /// `receivers` are equal and at most `rdc.flows` (the dumbbell has at most 32 of each).
    /// `access_delay_ms` (one entry per sender host) gives the flows of a host a longer round
    /// trip (Fig. 9/10's RTT groups).
    pub topology: TopologyConfig,
    #[serde(rename = "variant")]
    pub variants: Vec<RdcVariant>,
    #[serde(default, rename = "goal")]
    pub goals: Vec<RdcGoal>,
}

/// How long, how many flows and how they send.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RunSettings {
    pub duration_s: f64,
    /// Queue, utilization, loss, timeouts and shares count from here (the end is the run's).
    pub measure_from_s: f64,
    /// `--quick`: this duration and `measure_from_s` scaled with it.
    #[serde(default = "quick_duration")]
    pub quick_duration_s: f64,
    #[serde(default = "one")]
    pub seed: u64,
    pub flows: usize,
    /// IP packet size of the data segments (the MSS is set so a segment with timestamps is
    /// this long).
    #[serde(default = "packet_bytes")]
    pub packet_bytes: usize,
    /// The maximum window, packets (ns-2's `window_`), kept by the sender (`flows`).
    pub window_packets: u32,
    /// Congestion control of every flow.
    #[serde(default = "cubic")]
    pub congestion: String,
    /// TCP sysctls of every sender and receiver host (`net.ipv4.tcp_*` names, numeric
    /// values), e.g. Linux's loss recovery turned off to match the paper's ns-2 Reno:
    /// `host_sysctls = { "net.ipv4.tcp_sack" = "0" }`.
    #[serde(default)]
    pub host_sysctls: std::collections::BTreeMap<String, String>,
    /// Start of each flow, s; when empty, each starts at a random time in
    /// `[0, random_start_s)` (seeded).
    #[serde(default)]
    pub starts_s: Vec<f64>,
    #[serde(default)]
    pub random_start_s: f64,
    /// Width of the packets-per-period bins (Fig. 3: 84 ms, two RTTs).
    #[serde(default = "bin_ms")]
    pub bin_ms: f64,
    /// A flow has settled when every later bin, averaged over `settle_smooth_bins` bins, is
    /// within this share of its mean over the last quarter of the run.
    #[serde(default = "settle_band")]
    pub settle_band: f64,
    /// Bins averaged (a moving average) before the settling test; 1: none.
    #[serde(default = "one_bin")]
    pub settle_smooth_bins: usize,
    /// Oscillation is measured from this time on (Fig. 3's "after 10 s").
    #[serde(default = "oscillation_from")]
    pub oscillation_from_s: f64,
    /// The receivers' first TCP port (flow i listens on `port + i`).
    #[serde(default = "port")]
    pub port: u16,
    /// How often each sender reads `TCP_INFO`, ms (fewer wake-ups for many flows).
    #[serde(default = "sample_ms")]
    pub sample_ms: f64,
    /// Present: every flow is the paper's layered video source (Section 4.3), not bulk.
    #[serde(default)]
    pub video: Option<VideoSettings>,
}

/// The layered video source of every flow (Section 5.1's values by default). A layer is
/// `layer_kbytes_per_s` of packets of `packet_bytes` on the wire (the source runs once every
/// `packet_bytes / layer rate`: 50 ms), the send buffer's size is `window_packets`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct VideoSettings {
    #[serde(default = "layer_kbytes")]
    pub layer_kbytes_per_s: f64,
    /// T_add, packets.
    #[serde(default)]
    pub add_at_most: u32,
    /// T_drop, packets.
    #[serde(default = "drop_above")]
    pub drop_above: u32,
    /// The interval of observations at most T_add before a layer is added, s.
    #[serde(default = "add_after")]
    pub add_after_s: f64,
    #[serde(default = "one_layer")]
    pub initial_layers: u32,
    #[serde(default = "max_layers")]
    pub max_layers: u32,
    /// `unsent` (`SIOCOUTQNSD`, the paper's ns-2 buffer) or `unacked` (`SIOCOUTQ`).
    #[serde(default)]
    pub occupancy: lowtide_media::rdc_video::Occupancy,
}

fn layer_kbytes() -> f64 {
    20.0
}
fn drop_above() -> u32 {
    20
}
fn add_after() -> f64 {
    15.0
}
fn one_layer() -> u32 {
    1
}
fn max_layers() -> u32 {
    16
}
fn sample_ms() -> f64 {
    10.0
}

impl VideoSettings {
    /// The source's parameters for flows of this run.
    pub fn source(&self, r: &RunSettings) -> lowtide_media::rdc_video::SourceConfig {
        lowtide_media::rdc_video::SourceConfig {
            segment_bytes: r.packet_bytes as u32,
            layer_bytes_per_s: self.layer_kbytes_per_s * 1000.0,
            buffer_packets: r.window_packets,
            add_at_most: self.add_at_most,
            drop_above: self.drop_above,
            add_after: std::time::Duration::from_secs_f64(self.add_after_s.clamp(0.0, 1e6)),
            initial_layers: self.initial_layers,
            max_layers: self.max_layers,
        }
    }
}

fn quick_duration() -> f64 {
    6.0
}
fn one() -> u64 {
    1
}
fn packet_bytes() -> usize {
    1000
}
fn cubic() -> String {
    "cubic".into()
}
fn bin_ms() -> f64 {
    84.0
}
fn one_bin() -> usize {
    1
}
fn settle_band() -> f64 {
    0.2
}
fn oscillation_from() -> f64 {
    10.0
}
fn yes() -> bool {
    true
}
fn port() -> u16 {
    7400
}

/// One way of running the bottleneck and the receivers.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RdcVariant {
    pub name: String,
    /// The forward bottleneck's queue management (replaces `topology.forward.aqm`).
    pub aqm: AqmConfig,
    /// Hosts negotiate ECN (`net.ipv4.tcp_ecn`; 1-bit RDC needs ECT packets to mark).
    #[serde(default)]
    pub ecn: bool,
    /// Linux's RFC 3168 fallback (`net.ipv4.tcp_ecn_fallback` on the senders): when a SYN
    /// is retransmitted, the connection gives up ECN. `false` keeps every flow ECN-capable,
    /// as the paper's simulated flows are, even when the bottleneck dropped its first SYN.
    #[serde(default = "yes")]
    pub ecn_fallback: bool,
    /// Start the RDC agent in the receivers' namespaces, in this mode.
    #[serde(default)]
    pub agent: Option<lowtide_rdc::Mode>,
    /// Flows whose receiver runs the agent (default: every flow).
    #[serde(default)]
    pub agent_flows: Option<Vec<usize>>,
    /// 1-bit agent: the most one increase adds to the ACK delay, ms (default: the paper's
    /// doubling; `lowtide_rdc::AgentConfig::max_increase`).
    #[serde(default)]
    pub agent_max_increase_ms: Option<f64>,
    /// 1-bit agent: estimate the delay from the share of marks, knowing the cell's
    /// `thresh_tb` at the link's rate (`lowtide_rdc::AgentConfig::full_mark_delay`; the lab
    /// gives the agent the variant's own cell's); default: the paper's a/b law.
    #[serde(default)]
    pub agent_estimates_delay: bool,
    /// Pace each flow's held ACKs at this factor over the flow's ACK rate
    /// (`lowtide_rdc::AgentConfig::release_pacing`); default: not paced (the paper's agent).
    #[serde(default)]
    pub agent_release_pacing: Option<f64>,
    /// Hold no ACK past the sender's smallest possible RTO less this margin, ms
    /// (`lowtide_rdc::AgentConfig::rto_guard`); default: no bound (the paper's agent).
    #[serde(default)]
    pub agent_rto_guard_ms: Option<f64>,
    /// The agents' threads at real-time priority (default; `lowtide_rdc::DriverConfig::
    /// realtime`); `false` runs them as ordinary threads, the baseline of that change.
    #[serde(default = "yes")]
    pub agent_realtime: bool,
    /// The receivers acknowledge every segment (a `quickack` route), as the paper's ns-2
    /// sink does; default: Linux's delayed ACKs (one ACK per two segments).
    #[serde(default)]
    pub receiver_quickack: bool,
    /// What the paper reports for this variant (shown beside ours).
    #[serde(default)]
    pub paper: String,
}

impl RdcVariant {
    pub fn has_agent(&self, flow: usize) -> bool {
        self.agent.is_some() && self.agent_flows.as_ref().is_none_or(|f| f.contains(&flow))
    }
}

/// A number a variant must reach.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RdcGoal {
    pub variant: String,
    pub metric: RdcMetric,
    #[serde(default)]
    pub min: Option<f64>,
    #[serde(default)]
    pub max: Option<f64>,
    /// The bound is on this variant's metric over the named variant's (Table 1: 1-bit RDC's
    /// timeouts at most ECN's / 100); over a base of 0 the ratio is the value itself.
    #[serde(default)]
    pub relative_to: Option<String>,
    #[serde(default)]
    pub why: String,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RdcMetric {
    /// Bottleneck queue after each dequeue, 99th percentile, packets.
    QueueP99Packets,
    /// Bytes the bottleneck delivered over what its rate allows, in the window.
    Utilization,
    /// Smallest flow goodput over the largest, in the window.
    ShareRatio,
    /// Retransmission timeouts of all flows in the window.
    Timeouts,
    /// Bottleneck drops over arrivals in the window.
    LossRate,
    /// Seconds after the last flow started until every flow settled.
    SettlingS,
    /// Video: the streams' mean layers in the window.
    LayersMean,
    /// Video: the standard deviation of the streams' mean layers.
    LayersSpread,
    /// Video with access delays: the highest RTT group's mean layers over the lowest's.
    LayerDisparity,
}

impl RdcMetric {
    pub fn as_str(self) -> &'static str {
        match self {
            RdcMetric::QueueP99Packets => "queue_p99_packets",
            RdcMetric::Utilization => "utilization",
            RdcMetric::ShareRatio => "share_ratio",
            RdcMetric::Timeouts => "timeouts",
            RdcMetric::LossRate => "loss_rate",
            RdcMetric::SettlingS => "settling_s",
            RdcMetric::LayersMean => "layers_mean",
            RdcMetric::LayersSpread => "layers_spread",
            RdcMetric::LayerDisparity => "layer_disparity",
        }
    }

    /// Whether a stall of the machine moves this metric by itself (a stall bunches packets,
    /// and the bunch builds the queue): its goal then carries the run's timing health.
    pub fn depends_on_timing(self) -> bool {
        matches!(self, RdcMetric::QueueP99Packets)
    }
}

/// A field outside what is allowed.
#[derive(Debug, thiserror::Error)]
pub enum RdcScenarioError {
    #[error(transparent)]
    Toml(#[from] toml::de::Error),
    #[error("`{field}` = {value}: allowed is {allowed}")]
    Field {
        field: String,
        value: String,
        allowed: String,
    },
    #[error("topology: {0}")]
    Topology(String),
}

fn check(
    ok: bool,
    field: impl Into<String>,
    value: impl std::fmt::Display,
    allowed: impl Into<String>,
) -> Result<(), RdcScenarioError> {
    if ok {
        Ok(())
    } else {
        Err(RdcScenarioError::Field {
            field: field.into(),
            value: value.to_string(),
            allowed: allowed.into(),
        })
    }
}

impl RdcScenario {
    /// Parses and checks a file's text; relative trace paths are relative to `base`.
    pub fn from_toml_in(text: &str, base: &Path) -> Result<Self, RdcScenarioError> {
        let mut s: RdcScenario = toml::from_str(text)?;
        s.topology.resolve_paths(base);
        s.check()?;
        Ok(s)
    }

    /// The `--quick` form: a shorter run, the measurement window scaled with it.
    pub fn quick(&self) -> Self {
        let mut s = self.clone();
        let scale = (s.rdc.quick_duration_s / s.rdc.duration_s).min(1.0);
        s.rdc.duration_s *= scale;
        s.rdc.measure_from_s *= scale;
        s.rdc.oscillation_from_s *= scale;
        s
    }

    pub fn check(&self) -> Result<(), RdcScenarioError> {
        let r = &self.rdc;
        check(
            (2.0..=3600.0).contains(&r.duration_s),
            "rdc.duration_s",
            r.duration_s,
            "2 to 3600",
        )?;
        check(
            (2.0..=3600.0).contains(&r.quick_duration_s),
            "rdc.quick_duration_s",
            r.quick_duration_s,
            "2 to 3600",
        )?;
        check(
            r.measure_from_s >= 0.0 && r.measure_from_s < r.duration_s - 1.0,
            "rdc.measure_from_s",
            r.measure_from_s,
            format!("0 up to duration_s - 1 ({})", r.duration_s - 1.0),
        )?;
        check(
            (1..=MAX_FLOWS).contains(&r.flows),
            "rdc.flows",
            r.flows,
            "1 to 256",
        )?;
        check(
            (1.0..=1000.0).contains(&r.sample_ms) && r.sample_ms <= r.bin_ms,
            "rdc.sample_ms",
            r.sample_ms,
            "1 to 1000 ms, at most bin_ms",
        )?;
        if let Some(v) = &r.video {
            v.source(r).check().map_err(|e| RdcScenarioError::Field {
                field: format!("rdc.video: {}", e.field),
                value: e.value,
                allowed: e.allowed.into(),
            })?;
        }
        check(
            (200..=1500).contains(&r.packet_bytes),
            "rdc.packet_bytes",
            r.packet_bytes,
            "200 to 1500 bytes",
        )?;
        crate::scenario::check_tcp_sysctls("rdc.host_sysctls", &r.host_sysctls).map_err(
            |e| match e {
                crate::scenario::ScenarioError::Invalid {
                    field,
                    value,
                    allowed,
                } => RdcScenarioError::Field {
                    field,
                    value,
                    allowed,
                },
                other => RdcScenarioError::Topology(other.to_string()),
            },
        )?;
        check(
            (2..=100_000).contains(&r.window_packets),
            "rdc.window_packets",
            r.window_packets,
            "2 to 100000",
        )?;
        check(
            r.starts_s.is_empty() || r.starts_s.len() == r.flows,
            "rdc.starts_s",
            format!("{} entries", r.starts_s.len()),
            format!("none (random starts) or one per flow ({})", r.flows),
        )?;
        for (i, &t) in r.starts_s.iter().enumerate() {
            check(
                t >= 0.0 && t < r.duration_s,
                format!("rdc.starts_s[{i}]"),
                t,
                format!("0 up to duration_s ({})", r.duration_s),
            )?;
        }
        check(
            r.random_start_s >= 0.0 && r.random_start_s < r.duration_s,
            "rdc.random_start_s",
            r.random_start_s,
            format!("0 up to duration_s ({})", r.duration_s),
        )?;
        check(
            (10.0..=10_000.0).contains(&r.bin_ms),
            "rdc.bin_ms",
            r.bin_ms,
            "10 to 10000 ms",
        )?;
        check(
            r.settle_band > 0.0 && r.settle_band < 1.0,
            "rdc.settle_band",
            r.settle_band,
            "above 0, below 1",
        )?;
        check(
            (1..=1000).contains(&r.settle_smooth_bins),
            "rdc.settle_smooth_bins",
            r.settle_smooth_bins,
            "1 to 1000",
        )?;
        check(
            r.oscillation_from_s >= 0.0,
            "rdc.oscillation_from_s",
            r.oscillation_from_s,
            "0 or more",
        )?;
        check(
            usize::from(r.port) + r.flows <= 65535 && r.port >= 1024,
            "rdc.port",
            r.port,
            "1024 up to 65535 - flows",
        )?;
        let t = &self.topology;
        check(
            t.senders == t.receivers && t.senders <= r.flows,
            "topology.senders/receivers",
            format!("{}/{}", t.senders, t.receivers),
            format!("equal, and at most rdc.flows ({})", r.flows),
        )?;
        t.validate()
            .map_err(|e| RdcScenarioError::Topology(e.to_string()))?;
        check(
            !self.variants.is_empty(),
            "variant",
            "none",
            "at least one [[variant]]",
        )?;
        for (i, v) in self.variants.iter().enumerate() {
            check(
                self.variants[..i].iter().all(|w| w.name != v.name),
                format!("variant[{i}].name"),
                &v.name,
                "a name no other variant has",
            )?;
            let mut with = t.clone();
            with.forward.aqm = v.aqm.clone();
            with.validate()
                .map_err(|e| RdcScenarioError::Topology(format!("variant `{}`: {e}", v.name)))?;
            if let Some(step) = v.agent_max_increase_ms {
                check(
                    v.agent.is_some() && (1.0..=4000.0).contains(&step),
                    format!("variant[{i}].agent_max_increase_ms"),
                    step,
                    "1 to 4000 ms, with an agent",
                )?;
            }
            if let Some(g) = v.agent_rto_guard_ms {
                check(
                    v.agent.is_some() && (0.0..200.0).contains(&g),
                    format!("variant[{i}].agent_rto_guard_ms"),
                    g,
                    "0 to 200 ms (exclusive; the sender's RTO floor), with an agent",
                )?;
            }
            if let Some(f) = v.agent_release_pacing {
                check(
                    v.agent.is_some() && (1.0..=10.0).contains(&f),
                    format!("variant[{i}].agent_release_pacing"),
                    f,
                    "a factor from 1 to 10, with an agent",
                )?;
            }
            check(
                !v.agent_estimates_delay || self.agent_full_mark_delay(v).is_some(),
                format!("variant[{i}].agent_estimates_delay"),
                v.agent_estimates_delay,
                "true only with a 1-bit agent behind a 1-bit RDC cell on a link of fixed rate",
            )?;
            if let Some(flows) = &v.agent_flows {
                for &f in flows {
                    check(
                        f < r.flows,
                        format!("variant[{i}].agent_flows"),
                        f,
                        format!("flow indices below {}", r.flows),
                    )?;
                }
            }
        }
        for (i, g) in self.goals.iter().enumerate() {
            check(
                self.variants.iter().any(|v| v.name == g.variant),
                format!("goal[{i}].variant"),
                &g.variant,
                "the name of a [[variant]]",
            )?;
            if let Some(other) = &g.relative_to {
                check(
                    self.variants.iter().any(|v| &v.name == other),
                    format!("goal[{i}].relative_to"),
                    other,
                    "the name of a [[variant]]",
                )?;
            }
            check(
                g.min.is_some() || g.max.is_some(),
                format!("goal[{i}]"),
                "no bound",
                "min, max or both",
            )?;
        }
        Ok(())
    }

    /// Each flow's start, s: the given ones, or random in `[0, random_start_s)` from the seed.
    pub fn starts(&self) -> Vec<f64> {
        use rand::{Rng, SeedableRng};
        let r = &self.rdc;
        if !r.starts_s.is_empty() {
            return r.starts_s.clone();
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(r.seed);
        (0..r.flows)
            .map(|_| {
                if r.random_start_s > 0.0 {
                    rng.gen_range(0.0..r.random_start_s)
                } else {
                    0.0
                }
            })
            .collect()
    }

    /// The sender and receiver host of flow `i`.
    pub fn host_of(&self, flow: usize) -> usize {
        flow % self.topology.senders.max(1)
    }

    /// Whether flows differ in round trip (`topology.access_delay_ms` given): the summary then
    /// groups the video streams by it (`rtt_groups`).
    pub fn has_rtt_groups(&self) -> bool {
        !self.topology.access_delay_ms.is_empty()
    }

    /// Flow `i`'s minimum round trip, ms: the bottleneck's propagation delays both ways plus
    /// twice its sender host's access delay.
    pub fn min_rtt_ms(&self, flow: usize) -> f64 {
        let t = &self.topology;
        let access = t.access_delay_ms.get(self.host_of(flow)).copied();
        t.forward.delay_ms + t.reverse.delay_ms + 2.0 * access.unwrap_or(0.0)
    }

    /// The topology a variant runs on.
    /// The delay at which the variant's 1-bit cell marks every packet, when its agent
    /// estimates the delay from the marks (`agent_estimates_delay`); None otherwise, or when
    /// the cell, the agent or the link's fixed rate is missing.
    pub fn agent_full_mark_delay(&self, v: &RdcVariant) -> Option<Duration> {
        let AqmConfig::Rdc(cell) = &v.aqm else {
            return None;
        };
        let rate_bps = self.topology.forward.rate_mbps? * 1e6;
        let one_bit = cell.mode == RdcMode::OneBit && v.agent == Some(lowtide_rdc::Mode::OneBit);
        (v.agent_estimates_delay && one_bit).then(|| cell.full_mark_delay(rate_bps))
    }

    pub fn topology_of(&self, v: &RdcVariant) -> TopologyConfig {
        let mut t = self.topology.clone();
        t.forward.aqm = v.aqm.clone();
        t.hosts.ecn = v.ecn;
        t.hosts.congestion = self.rdc.congestion.clone();
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shipped() -> Vec<(std::path::PathBuf, String)> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
        std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "toml"))
            .map(|p| {
                let text = std::fs::read_to_string(&p).unwrap();
                (p, text)
            })
            .filter(|(_, t)| {
                crate::experiment::registry::resolve(t).is_ok_and(|r| r.experiment.kind() == "rdc")
            })
            .collect()
    }

    /// Host sysctls are TCP knobs with numbers, nothing else: the error names the field.
    #[test]
    fn host_sysctls_other_than_tcp_knobs_are_refused() {
        let (path, text) = shipped()
            .into_iter()
            .find(|(p, _)| p.ends_with("rdc-ns2-timeouts.toml"))
            .expect("the shipped scenario");
        let mut s = RdcScenario::from_toml_in(&text, Path::new("."))
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        s.check().unwrap();
        s.rdc.host_sysctls.insert("kernel.panic".into(), "1".into());
        let e = s.check().unwrap_err().to_string();
        assert!(
            e.contains("rdc.host_sysctls") && e.contains("kernel.panic"),
            "{e}"
        );
        s.rdc.host_sysctls.remove("kernel.panic");
        s.rdc
            .host_sysctls
            .insert("net.ipv4.tcp_sack".into(), "off".into());
        let e = s.check().unwrap_err().to_string();
        assert!(e.contains("net.ipv4.tcp_sack"), "{e}");
    }

    #[test]
    fn shipped_rdc_scenarios_check() {
        let files = shipped();
        assert!(files.len() >= 2, "rdc-fig3 and rdc-friendliness");
        for (path, text) in files {
            let s = RdcScenario::from_toml_in(&text, Path::new("."))
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            s.quick()
                .check()
                .unwrap_or_else(|e| panic!("{} --quick: {e}", path.display()));
        }
    }

    #[test]
    fn errors_name_the_field_value_and_range() {
        let (_, text) = shipped()
            .into_iter()
            .find(|(p, _)| p.ends_with("rdc-fig3.toml"))
            .unwrap();
        let bad = text.replace("starts_s = [0.0, 1.0]", "starts_s = [0.0]");
        let e = RdcScenario::from_toml_in(&bad, Path::new("."))
            .unwrap_err()
            .to_string();
        assert!(e.contains("rdc.starts_s") && e.contains("1 entries"), "{e}");
        let bad = text.replace("flows = 2", "flows = 3");
        let e = RdcScenario::from_toml_in(&bad, Path::new("."))
            .unwrap_err()
            .to_string();
        assert!(e.contains("rdc.starts_s") || e.contains("topology"), "{e}");
        let bad = text.replace("agent = \"exact\"", "agent = \"exact\"\nagent_flows = [5]");
        let e = RdcScenario::from_toml_in(&bad, Path::new("."))
            .unwrap_err()
            .to_string();
        assert!(e.contains("agent_flows") && e.contains("below 2"), "{e}");
    }

    #[test]
    fn the_delay_estimate_gets_its_cells_ramp_and_needs_a_one_bit_pair() {
        let s = shipped_scenario("rdc-friendliness.toml");
        let ramp = |name: &str| {
            let v = s.variants.iter().find(|v| v.name == name).unwrap();
            s.agent_full_mark_delay(v)
        };
        // thresh_tb 500 packets of 1000 bytes at 45 Mbit/s.
        let want = Duration::from_secs_f64(500.0 * 8000.0 / 45e6);
        assert_eq!(ramp("1-bit RDC + cubic"), Some(want));
        assert_eq!(ramp("1-bit RDC + cubic (paper's law)"), None);
        let (_, text) = shipped()
            .into_iter()
            .find(|(p, _)| p.ends_with("rdc-fig3.toml"))
            .unwrap();
        let bad = text.replace(
            "agent = \"exact\"",
            "agent = \"exact\"\nagent_estimates_delay = true",
        );
        let e = RdcScenario::from_toml_in(&bad, Path::new("."))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("agent_estimates_delay") && e.contains("1-bit"),
            "{e}"
        );
    }

    /// The shipped scenario `file`, checked.
    fn shipped_scenario(file: &str) -> RdcScenario {
        let (_, text) = shipped()
            .into_iter()
            .find(|(p, _)| p.ends_with(file))
            .unwrap();
        RdcScenario::from_toml_in(&text, Path::new(".")).unwrap()
    }

    #[test]
    fn mixed_rtt_flows_form_the_papers_five_groups_of_twenty() {
        let s = shipped_scenario("rdc-mixed-rtt.toml");
        assert!(s.has_rtt_groups());
        let mut groups = std::collections::BTreeMap::<u32, usize>::new();
        for f in 0..s.rdc.flows {
            *groups.entry(s.min_rtt_ms(f).round() as u32).or_default() += 1;
        }
        let want: std::collections::BTreeMap<u32, usize> =
            [(220, 20), (230, 20), (240, 20), (250, 20), (260, 20)].into();
        assert_eq!(groups, want);
        // Without access delays every flow has the bottleneck's round trip.
        let mut same = s.clone();
        same.topology.access_delay_ms.clear();
        assert!(!same.has_rtt_groups());
        assert_eq!(same.min_rtt_ms(7), 40.0);
    }

    #[test]
    fn random_starts_are_seeded_and_within_range() {
        let s = shipped_scenario("rdc-friendliness.toml");
        let a = s.starts();
        assert_eq!(a, s.starts());
        assert!(a.iter().all(|&t| (0.0..2.0).contains(&t)), "{a:?}");
    }
}
