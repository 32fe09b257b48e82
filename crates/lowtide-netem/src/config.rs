//! Typed topology configuration (TOML), checked when it is built.
//!
//! ```toml
//! senders = 2            # hosts on the left of the bottleneck
//! receivers = 2          # hosts on the right
//! [hosts]
//! ecn = false
//! congestion = "cubic"   # explicit: the machine's default is BBR
//! [forward]              # left -> right
//! rate_mbps = 30
//! delay_ms = 50          # one-way propagation delay
//! queue = { bdp = 1.0 }  # or { packets = 125 } or { bytes = 187500 }
//! aqm = { kind = "red" } # drop_tail (default), red, drd, codel
//! loss = 0.0
//! # trace = "cell.mahi" # mahimahi capacity trace, replaces rate_mbps (a relative path
//!                        # is relative to the file it is written in: `resolve_paths`)
//! # outages = [{ kind = "blackhole", at_s = 20, for_s = 5 }]  # `crate::link::outage`
//! [reverse]              # right -> left
//! rate_mbps = 30
//! delay_ms = 50
//! # access_delay_ms = [0, 5] # extra one-way delay per sender host, each way (top level)
//! # [path_b.forward]     # a second path from every sender to the receivers (optional)
//! # rate_mbps = 10       # every field of a link, its own queue, AQM and outages
//! # delay_ms = 20
//! # [path_b.reverse]
//! # rate_mbps = 10
//! # delay_ms = 20
//! ```
//!
//! Every check names the field, the value and what is allowed, so a bad scenario file fails
//! with one sentence before any namespace exists.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use crate::aqm::rdc::{RdcConfig, RdcMode};
use crate::error::ConfigError;
pub use crate::link::outage::{OutageConfig, OutageKind};
use crate::trace::Trace;

/// IPv4 MTU of every emulated link; queue limits in BDP multiples count packets of this size.
pub const MTU: usize = 1500;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TopologyConfig {
    #[serde(default = "one")]
    pub senders: usize,
    #[serde(default = "one")]
    pub receivers: usize,
    #[serde(default)]
    pub hosts: HostConfig,
    pub forward: LinkConfig,
    pub reverse: LinkConfig,
    /// Extra one-way delay between sender host i and the bottleneck, each way, ms (one entry
    /// per sender, or none): flows of different round trips (`crate::access`).
    #[serde(default)]
    pub access_delay_ms: Vec<f64>,
    /// A second network path: each sender host gets a second interface (10.3.i.1) through
    /// its own bottleneck in each direction to the same receivers (`crate::dumbbell`).
    #[serde(default)]
    pub path_b: Option<PathConfig>,
}

/// The two directions of a second path.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PathConfig {
    pub forward: LinkConfig,
    pub reverse: LinkConfig,
}

impl PathConfig {
    /// Path B's base round-trip time: its two propagation delays.
    pub fn base_rtt(&self) -> Duration {
        Duration::from_secs_f64((self.forward.delay_ms + self.reverse.delay_ms) / 1000.0)
    }
}

fn one() -> usize {
    1
}

/// Settings every host gets.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    /// Negotiate ECN on TCP connections (`net.ipv4.tcp_ecn` inside the host).
    #[serde(default)]
    pub ecn: bool,
    /// Congestion control that tools running on this host set per socket.
    #[serde(default = "default_congestion")]
    pub congestion: String,
}

fn default_congestion() -> String {
    "cubic".to_string()
}

impl Default for HostConfig {
    fn default() -> Self {
        Self {
            ecn: false,
            congestion: default_congestion(),
        }
    }
}

/// One direction of the bottleneck.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LinkConfig {
    /// Bottleneck rate in Mbit/s of IP packets (a 1500-byte packet takes 1500*8/rate).
    #[serde(default)]
    pub rate_mbps: Option<f64>,
    /// One-way propagation delay added after the queue.
    pub delay_ms: f64,
    #[serde(default)]
    pub queue: QueueLimit,
    #[serde(default)]
    pub aqm: AqmConfig,
    /// Probability that a packet is lost at random, before the queue.
    #[serde(default)]
    pub loss: f64,
    /// A mahimahi capacity trace (one line per 1500-byte delivery opportunity, in ms; see
    /// [`crate::trace`]).
    #[serde(default)]
    pub trace: Option<PathBuf>,
    /// Times the link goes dark, stops or slows (`crate::link::outage`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outages: Vec<OutageConfig>,
}

impl LinkConfig {
    /// A link of `rate_mbps` and `delay_ms` with a drop-tail queue of one BDP.
    pub fn new(rate_mbps: f64, delay_ms: f64) -> Self {
        Self {
            rate_mbps: Some(rate_mbps),
            delay_ms,
            queue: QueueLimit::default(),
            aqm: AqmConfig::DropTail,
            loss: 0.0,
            trace: None,
            outages: vec![],
        }
    }
}

/// How much the bottleneck queue holds.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum QueueLimit {
    Packets(usize),
    Bytes(usize),
    /// A multiple of the bandwidth-delay product (rate x base RTT of both directions).
    Bdp(f64),
}

impl Default for QueueLimit {
    fn default() -> Self {
        QueueLimit::Bdp(1.0)
    }
}

/// Active queue management at the bottleneck.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum AqmConfig {
    /// Drop only when the queue is full.
    #[default]
    DropTail,
    /// RED (Floyd and Jacobson 1993), thresholds in packets of the averaged queue.
    Red {
        /// Averaged queue (packets) where marking starts; default limit/4.
        #[serde(default)]
        min_th: Option<f64>,
        /// Averaged queue (packets) where the probability reaches max_p; default limit/2.
        #[serde(default)]
        max_th: Option<f64>,
        #[serde(default = "red_max_p")]
        max_p: f64,
        #[serde(default = "red_weight")]
        weight: f64,
        /// Between max_th and 2*max_th the probability rises from max_p to 1 instead of jumping.
        #[serde(default = "yes")]
        gentle: bool,
        /// Mark ECN-capable packets instead of dropping them.
        #[serde(default = "yes")]
        ecn: bool,
        /// As ns-2's RED (`mark_p_`, on by default there): a packet chosen while the
        /// probability is at least this is dropped even when ECN-capable. Default: none
        /// (RFC 3168 and Linux mark up to max_th, or 2*max_th when gentle).
        #[serde(default)]
        mark_p: Option<f64>,
    },
    /// Derivative random drop, as in nistnet (Goel et al. 2008, Section 4.1): no averaging.
    Drd {
        #[serde(default = "drd_min")]
        min_bdp: f64,
        #[serde(default = "drd_max")]
        max_bdp: f64,
        #[serde(default = "drd_max")]
        congest_bdp: f64,
        #[serde(default = "yes")]
        ecn: bool,
    },
    /// RDC's token bucket (Hsiao, Kung, Tan): exact delay notifications or 1-bit CE marks
    /// for receivers running the RDC agent (`crate::aqm::rdc`).
    Rdc(RdcConfig),
    /// CoDel (RFC 8289).
    Codel {
        #[serde(default = "codel_target")]
        target_ms: f64,
        #[serde(default = "codel_interval")]
        interval_ms: f64,
        #[serde(default)]
        ecn: bool,
    },
}

fn yes() -> bool {
    true
}
fn red_max_p() -> f64 {
    0.1
}
fn red_weight() -> f64 {
    0.002
}
fn drd_min() -> f64 {
    1.0
}
fn drd_max() -> f64 {
    2.0
}
fn codel_target() -> f64 {
    5.0
}
fn codel_interval() -> f64 {
    100.0
}

impl AqmConfig {
    pub fn name(&self) -> &'static str {
        match self {
            AqmConfig::DropTail => "drop_tail",
            AqmConfig::Red { .. } => "red",
            AqmConfig::Drd { .. } => "drd",
            AqmConfig::Codel { .. } => "codel",
            AqmConfig::Rdc(_) => "rdc",
        }
    }
}

impl TopologyConfig {
    /// A dumbbell of one sender and one receiver, both directions at `rate_mbps`.
    pub fn symmetric(rate_mbps: f64, one_way_delay_ms: f64) -> Self {
        Self {
            senders: 1,
            receivers: 1,
            hosts: HostConfig::default(),
            forward: LinkConfig::new(rate_mbps, one_way_delay_ms),
            reverse: LinkConfig::new(rate_mbps, one_way_delay_ms),
            access_delay_ms: vec![],
            path_b: None,
        }
    }

    /// Parses and validates a TOML document.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let cfg: TopologyConfig =
            toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reads, parses and validates a TOML file; relative trace paths in it are relative to
    /// the file's folder.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        let mut cfg: TopologyConfig =
            toml::from_str(&text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        cfg.resolve_paths(path.parent().unwrap_or(Path::new(".")));
        cfg.validate()?;
        Ok(cfg)
    }

    /// Makes relative trace paths relative to `base` (the folder of the file they were
    /// written in), so a topology or scenario file works from any current directory.
    /// Absolute paths stay as they are.
    pub fn resolve_paths(&mut self, base: &Path) {
        let path_b = self
            .path_b
            .iter_mut()
            .flat_map(|p| [&mut p.forward, &mut p.reverse]);
        for link in [&mut self.forward, &mut self.reverse]
            .into_iter()
            .chain(path_b)
        {
            if let Some(trace) = &link.trace {
                if trace.is_relative() {
                    link.trace = Some(base.join(trace));
                }
            }
        }
    }

    /// The base round-trip time: both propagation delays, no queueing, no access delay.
    pub fn base_rtt(&self) -> Duration {
        Duration::from_secs_f64((self.forward.delay_ms + self.reverse.delay_ms) / 1000.0)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        check_range("senders", self.senders as f64, 1.0, 32.0, "1 to 32 hosts")?;
        check_range(
            "receivers",
            self.receivers as f64,
            1.0,
            32.0,
            "1 to 32 hosts",
        )?;
        check_congestion_name("hosts.congestion", &self.hosts.congestion)?;
        crate::access::validate(&self.access_delay_ms, self.senders)?;
        let mut links = vec![
            ("forward", &self.forward, self.base_rtt()),
            ("reverse", &self.reverse, self.base_rtt()),
        ];
        if let Some(p) = &self.path_b {
            if matches!(p.forward.aqm, AqmConfig::Rdc(_))
                || matches!(p.reverse.aqm, AqmConfig::Rdc(_))
            {
                return Err(ConfigError::invalid(
                    "path_b.forward.aqm",
                    "rdc",
                    "drop_tail, red, drd or codel (RDC cells run on path A only)",
                ));
            }
            links.push(("path_b.forward", &p.forward, p.base_rtt()));
            links.push(("path_b.reverse", &p.reverse, p.base_rtt()));
        }
        for (name, link, rtt) in links {
            link.validate(name)?;
            if let AqmConfig::Red { .. } | AqmConfig::Drd { .. } = link.aqm {
                // Thresholds derive from the queue limit and the BDP: they must be computable.
                link.aqm_thresholds(name, rtt)?;
            }
        }
        Ok(())
    }
}

impl LinkConfig {
    /// The rate the BDP is computed from: the configured rate, or the trace's mean rate.
    pub fn nominal_rate_bps(&self) -> f64 {
        match (self.rate_mbps, &self.trace) {
            (Some(r), _) => r * 1e6,
            (None, Some(path)) => Trace::load(path).map_or(0.0, |t| t.mean_rate_bps()),
            (None, None) => 0.0,
        }
    }

    /// Bytes in one bandwidth-delay product for a base RTT.
    pub fn bdp_bytes(&self, base_rtt: Duration) -> f64 {
        self.nominal_rate_bps() * base_rtt.as_secs_f64() / 8.0
    }

    /// The queue limit as (packets, bytes); one of them may be unlimited (None).
    pub fn queue_limit(&self, base_rtt: Duration) -> (Option<usize>, Option<usize>) {
        match self.queue {
            QueueLimit::Packets(p) => (Some(p), None),
            QueueLimit::Bytes(b) => (None, Some(b)),
            QueueLimit::Bdp(m) => {
                let bytes = (m * self.bdp_bytes(base_rtt)).round().max(MTU as f64) as usize;
                (None, Some(bytes))
            }
        }
    }

    /// The queue limit in packets of MTU size (used for thresholds and reports).
    pub fn queue_limit_packets(&self, base_rtt: Duration) -> f64 {
        match self.queue_limit(base_rtt) {
            (Some(p), _) => p as f64,
            (None, Some(b)) => b as f64 / MTU as f64,
            (None, None) => f64::INFINITY,
        }
    }

    /// AQM thresholds in packets: (min, max, hard) for RED and DRD.
    pub fn aqm_thresholds(
        &self,
        field: &str,
        base_rtt: Duration,
    ) -> Result<(f64, f64, f64), ConfigError> {
        let limit = self.queue_limit_packets(base_rtt);
        let bdp_pkts = self.bdp_bytes(base_rtt) / MTU as f64;
        let (min, max, hard, names) = match &self.aqm {
            AqmConfig::Red { min_th, max_th, .. } => {
                let min = min_th.unwrap_or(limit / 4.0);
                let max = max_th.unwrap_or(limit / 2.0);
                (min, max, 2.0 * max, ["aqm.min_th", "aqm.max_th"])
            }
            AqmConfig::Drd {
                min_bdp,
                max_bdp,
                congest_bdp,
                ..
            } => {
                if congest_bdp < max_bdp {
                    return Err(ConfigError::invalid(
                        format!("{field}.aqm.congest_bdp"),
                        congest_bdp,
                        format!("at least aqm.max_bdp ({max_bdp})"),
                    ));
                }
                (
                    min_bdp * bdp_pkts,
                    max_bdp * bdp_pkts,
                    congest_bdp * bdp_pkts,
                    ["aqm.min_bdp", "aqm.max_bdp"],
                )
            }
            _ => return Ok((0.0, 0.0, 0.0)),
        };
        if !(min > 0.0 && min.is_finite()) {
            return Err(ConfigError::invalid(
                format!("{field}.{}", names[0]),
                min,
                "a threshold above 0 packets (set it, or give the link a finite queue)",
            ));
        }
        if !(max > min && max.is_finite()) {
            return Err(ConfigError::invalid(
                format!("{field}.{}", names[1]),
                max,
                format!("a threshold above the minimum ({min:.1} packets)"),
            ));
        }
        Ok((min, max, hard))
    }

    fn validate(&self, name: &str) -> Result<(), ConfigError> {
        match (self.rate_mbps, &self.trace) {
            (Some(rate), None) => check_range(
                &format!("{name}.rate_mbps"),
                rate,
                1e-3,
                10_000.0,
                "a rate from 0.001 to 10000 Mbit/s",
            )?,
            (None, Some(path)) => {
                Trace::load(path).map_err(|error| ConfigError::Trace {
                    field: format!("{name}.trace"),
                    error,
                })?;
            }
            (Some(_), Some(_)) => {
                return Err(ConfigError::invalid(
                    format!("{name}.trace"),
                    "set together with rate_mbps",
                    "either rate_mbps or trace, not both",
                ))
            }
            (None, None) => {
                return Err(ConfigError::invalid(
                    format!("{name}.rate_mbps"),
                    "missing",
                    "a rate from 0.001 to 10000 Mbit/s, or a trace file",
                ))
            }
        }
        check_range(
            &format!("{name}.delay_ms"),
            self.delay_ms,
            0.0,
            10_000.0,
            "a one-way delay from 0 to 10000 ms",
        )?;
        check_range(
            &format!("{name}.loss"),
            self.loss,
            0.0,
            0.99,
            "a probability from 0 to 0.99",
        )?;
        OutageConfig::validate_all(&self.outages, name, self.trace.is_some())?;
        match self.queue {
            QueueLimit::Packets(p) if p == 0 || p > 1_000_000 => {
                return Err(ConfigError::invalid(
                    format!("{name}.queue.packets"),
                    p,
                    "1 to 1000000 packets",
                ))
            }
            QueueLimit::Bytes(b) if !(MTU..=1_500_000_000).contains(&b) => {
                return Err(ConfigError::invalid(
                    format!("{name}.queue.bytes"),
                    b,
                    "1500 (one packet) to 1500000000 bytes",
                ))
            }
            QueueLimit::Bdp(m) => check_range(
                &format!("{name}.queue.bdp"),
                m,
                0.01,
                100.0,
                "0.01 to 100 bandwidth-delay products",
            )?,
            _ => {}
        }
        match &self.aqm {
            AqmConfig::DropTail => {}
            AqmConfig::Rdc(rdc) => rdc.validate(&format!("{name}.aqm"))?,
            AqmConfig::Red {
                max_p,
                weight,
                mark_p,
                ..
            } => {
                check_range(
                    &format!("{name}.aqm.max_p"),
                    *max_p,
                    1e-6,
                    1.0,
                    "a probability above 0, at most 1",
                )?;
                if let Some(mark_p) = mark_p {
                    check_range(
                        &format!("{name}.aqm.mark_p"),
                        *mark_p,
                        1e-6,
                        1.0,
                        "a probability above 0, at most 1",
                    )?;
                }
                check_range(
                    &format!("{name}.aqm.weight"),
                    *weight,
                    1e-6,
                    1.0,
                    "an averaging weight above 0, at most 1",
                )?;
            }
            AqmConfig::Drd {
                min_bdp, max_bdp, ..
            } => {
                check_range(
                    &format!("{name}.aqm.min_bdp"),
                    *min_bdp,
                    0.01,
                    100.0,
                    "0.01 to 100 BDP",
                )?;
                check_range(
                    &format!("{name}.aqm.max_bdp"),
                    *max_bdp,
                    *min_bdp + 1e-9,
                    100.0,
                    format!("above aqm.min_bdp ({min_bdp}), at most 100 BDP"),
                )?;
            }
            AqmConfig::Codel {
                target_ms,
                interval_ms,
                ..
            } => {
                check_range(
                    &format!("{name}.aqm.target_ms"),
                    *target_ms,
                    0.1,
                    10_000.0,
                    "0.1 to 10000 ms",
                )?;
                check_range(
                    &format!("{name}.aqm.interval_ms"),
                    *interval_ms,
                    *target_ms,
                    100_000.0,
                    "at least aqm.target_ms, at most 100000 ms",
                )?;
            }
        }
        Ok(())
    }
}

fn check_range(
    field: &str,
    value: f64,
    min: f64,
    max: f64,
    allowed: impl Into<String>,
) -> Result<(), ConfigError> {
    if value.is_finite() && value >= min && value <= max {
        Ok(())
    } else {
        Err(ConfigError::invalid(field, value, allowed))
    }
}

/// Congestion control names are kernel module names: short, lowercase, no path characters.
fn check_congestion_name(field: &str, name: &str) -> Result<(), ConfigError> {
    let ok = !name.is_empty()
        && name.len() < 16
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(ConfigError::invalid(
            field,
            name,
            "a kernel congestion control name such as cubic, reno or bbr",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
        senders = 2
        receivers = 2
        [hosts]
        ecn = true
        congestion = "reno"
        [forward]
        rate_mbps = 30
        delay_ms = 50
        queue = { packets = 125 }
        aqm = { kind = "drd" }
        [reverse]
        rate_mbps = 30
        delay_ms = 50
    "#;

    #[test]
    fn parses_a_full_dumbbell() {
        let cfg = TopologyConfig::from_toml(GOOD).unwrap();
        assert_eq!(cfg.senders, 2);
        assert!(cfg.hosts.ecn);
        assert_eq!(cfg.forward.queue, QueueLimit::Packets(125));
        assert_eq!(cfg.reverse.queue, QueueLimit::Bdp(1.0));
        assert_eq!(cfg.base_rtt(), Duration::from_millis(100));
        // 30 Mbit/s x 100 ms = 375000 bytes = 250 packets.
        let (min, max, hard) = cfg
            .forward
            .aqm_thresholds("forward", cfg.base_rtt())
            .unwrap();
        assert!((min - 250.0).abs() < 1e-6 && (max - 500.0).abs() < 1e-6 && hard == max);
    }

    fn err(text: &str) -> String {
        TopologyConfig::from_toml(text).unwrap_err().to_string()
    }

    #[test]
    fn bad_values_name_field_value_and_range() {
        let e = err(&GOOD.replace(
            "rate_mbps = 30\n        delay_ms = 50\n        queue",
            "rate_mbps = 0\n        delay_ms = 50\n        queue",
        ));
        assert!(
            e.contains("forward.rate_mbps") && e.contains('0') && e.contains("0.001"),
            "{e}"
        );
        let e = err(&GOOD.replace("packets = 125", "packets = 0"));
        assert!(
            e.contains("forward.queue.packets") && e.contains("1 to"),
            "{e}"
        );
        let e = err(&GOOD.replace(
            "delay_ms = 50\n        queue",
            "delay_ms = -5\n        queue",
        ));
        assert!(e.contains("forward.delay_ms") && e.contains("-5"), "{e}");
        let e = err(&GOOD.replace("\"drd\"", "\"wred\""));
        assert!(e.contains("wred") && e.contains("drop_tail"), "{e}");
        let e = err(&GOOD.replace("\"reno\"", "\"../x\""));
        assert!(e.contains("hosts.congestion"), "{e}");
        let e = err(&GOOD.replace(
            "rate_mbps = 30\n        delay_ms = 50\n        queue = { packets = 125 }",
            "delay_ms = 50\n        trace = \"/nonexistent/trace\"",
        ));
        assert!(
            e.contains("forward.trace") && e.contains("/nonexistent/trace"),
            "{e}"
        );
    }

    #[test]
    fn a_second_path_with_outages_parses_and_is_checked_as_its_own_links() {
        let two = format!(
            "{GOOD}\n[path_b.forward]\nrate_mbps = 10\ndelay_ms = 20\naqm = {{ kind = \"red\" }}\n\
             outages = [{{ kind = \"blackhole\", at_s = 20, for_s = 5 }}]\n\
             [path_b.reverse]\nrate_mbps = 10\ndelay_ms = 20\n"
        );
        let cfg = TopologyConfig::from_toml(&two).unwrap();
        let b = cfg.path_b.as_ref().unwrap();
        assert_eq!(b.base_rtt(), Duration::from_millis(40));
        assert_eq!(b.forward.outages[0].kind, OutageKind::Blackhole);
        assert!(TopologyConfig::from_toml(GOOD).unwrap().path_b.is_none());
        let e = err(&two.replace("at_s = 20", "at_s = -3"));
        assert!(e.contains("path_b.forward.outages[0].at_s"), "{e}");
        let e = err(&two.replace(
            "[path_b.reverse]\nrate_mbps = 10",
            "[path_b.reverse]\nrate_mbps = 0",
        ));
        assert!(e.contains("path_b.reverse.rate_mbps"), "{e}");
        let e = err(&two.replace("kind = \"red\"", "kind = \"rdc\""));
        assert!(e.contains("path_b") && e.contains("path A only"), "{e}");
    }

    #[test]
    fn drd_congest_below_max_is_refused() {
        let e = err(&GOOD.replace(
            "{ kind = \"drd\" }",
            "{ kind = \"drd\", max_bdp = 2.0, congest_bdp = 1.5 }",
        ));
        assert!(e.contains("congest_bdp") && e.contains("1.5"), "{e}");
    }

    #[test]
    fn red_takes_ns2s_mark_p_and_names_a_bad_one() {
        let cfg = TopologyConfig::from_toml(
            &GOOD.replace("{ kind = \"drd\" }", "{ kind = \"red\", mark_p = 0.1 }"),
        )
        .unwrap();
        assert!(matches!(
            cfg.forward.aqm,
            AqmConfig::Red {
                mark_p: Some(p),
                ..
            } if p == 0.1
        ));
        let e = err(&GOOD.replace("{ kind = \"drd\" }", "{ kind = \"red\", mark_p = 1.5 }"));
        assert!(e.contains("forward.aqm.mark_p") && e.contains("1.5"), "{e}");
    }

    #[test]
    fn an_rdc_cell_parses_with_the_papers_defaults_and_bad_values_are_named() {
        let cfg = TopologyConfig::from_toml(&GOOD.replace(
            "{ kind = \"drd\" }",
            "{ kind = \"rdc\", mode = \"exact\", rho = 0.95 }",
        ))
        .unwrap();
        let AqmConfig::Rdc(rdc) = cfg.forward.aqm else {
            panic!("{:?}", cfg.forward.aqm)
        };
        assert_eq!(rdc.mode, RdcMode::Exact);
        assert_eq!((rdc.rho, rdc.size_tb, rdc.thresh_tb), (0.95, 6400.0, 500.0));
        let e = err(&GOOD.replace("{ kind = \"drd\" }", "{ kind = \"rdc\", rho = 2 }"));
        assert!(e.contains("forward.aqm.rho") && e.contains('2'), "{e}");
        let e = err(&GOOD.replace("{ kind = \"drd\" }", "{ kind = \"rdc\", rh0 = 0.9 }"));
        assert!(e.contains("rh0"), "{e}");
    }

    #[test]
    fn trace_paths_resolve_against_the_file_and_bad_traces_name_the_line() {
        let dir = std::env::temp_dir().join(format!("lowtide-topo-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("links")).unwrap();
        std::fs::write(dir.join("links/up.mahi"), "1\n2\n").unwrap();
        std::fs::write(dir.join("links/bad.mahi"), "1\n2\nfast\n").unwrap();
        let topo = |trace: &str| {
            format!("[forward]\ndelay_ms = 5\ntrace = \"{trace}\"\n[reverse]\nrate_mbps = 10\ndelay_ms = 5\n")
        };
        let file = dir.join("topo.toml");
        std::fs::write(&file, topo("links/up.mahi")).unwrap();
        let cfg = TopologyConfig::from_file(&file).unwrap();
        assert_eq!(cfg.forward.trace, Some(dir.join("links/up.mahi")));
        assert!((cfg.forward.nominal_rate_bps() - 12e6).abs() < 1.0);
        std::fs::write(&file, topo("links/bad.mahi")).unwrap();
        let e = TopologyConfig::from_file(&file).unwrap_err().to_string();
        assert!(
            e.contains("forward.trace")
                && e.contains("bad.mahi")
                && e.contains("line 3")
                && e.contains("\"fast\""),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
