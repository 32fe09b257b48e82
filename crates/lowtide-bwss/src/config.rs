//! The daemon's rules (TOML), checked when they are read.
//!
//! ```toml
//! [system]
//! alpha = 0.9            # a flow below alpha x target is congested (Mehra, Sec. 3.3)
//! interval_ms = 200      # how often the allocation and the sigma rule run
//! window_ms = 1000       # rates are measured over this window
//! link_kbps = 960        # the access link, if known (sigma starts there, never exceeds it)
//! observe = false        # true: measure and log, steer nothing
//! judge_arrivals = true  # judge flows without a minimum by bytes arrived (false: read)
//! keep_share = true      # no minimum in force: never take less than the TCP flows would
//! clamp_rtts = 2         # window clamp in round trips of the target, while a minimum is promised (0: none)
//!
//! [default]              # flows no rule matches
//! priority = 0
//! min_kbps = 0
//! weight = 1
//!
//! [[rule]]               # the first rule that matches a flow gives its class
//! name = "video"
//! program = "lowtide"    # the executable's file name
//! remote_port = 8000     # also: local_port, address = "10.1.0.0/16" (the remote end)
//! priority = 10
//! min_kbps = 520
//! weight = 0
//! ```
//!
//! Every error names the field (with the rule's position), the value and what is allowed.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// A rule file that cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The TOML does not parse, or has an unknown or mistyped field (line and column inside).
    #[error("the BWSS rules do not parse: {0}")]
    Parse(String),
    /// The file cannot be read.
    #[error("cannot read the BWSS rules {path}: {reason}")]
    Read { path: String, reason: String },
    /// A field is outside what is allowed.
    #[error("invalid `{field}` = {value}: allowed is {allowed}")]
    Invalid {
        field: String,
        value: String,
        allowed: String,
    },
}

impl ConfigError {
    fn invalid(field: impl Into<String>, value: impl ToString, allowed: &str) -> Self {
        ConfigError::Invalid {
            field: field.into(),
            value: value.to_string(),
            allowed: allowed.into(),
        }
    }
}

/// The whole rule file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub system: SystemConfig,
    /// The class of flows no rule matches.
    #[serde(default)]
    pub default: Class,
    #[serde(default, rename = "rule")]
    pub rules: Vec<Rule>,
}

/// Parameters of the sigma rule and of measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SystemConfig {
    /// A flow measured below `alpha` x its target is congested.
    pub alpha: f64,
    /// Period of the control loop (measure, sigma, allocate, steer), ms.
    pub interval_ms: u64,
    /// Window over which a flow's rate is measured, ms.
    pub window_ms: u64,
    /// When every flow has met its target for this long (after sigma settled for a
    /// window), sigma is probed upwards, ms; doubled after each failed probe (0: never; the
    /// paper's rule has no probe, see `sigma/`).
    pub probe_after_ms: u64,
    /// A probe raises sigma by this fraction of the link's rate (of sigma when the link
    /// is unknown); halved after each failed probe.
    pub probe_step: f64,
    /// The access link's rate, if known: sigma never exceeds it (kbit/s; 0: unknown).
    pub link_kbps: f64,
    /// Measure and log every flow, steer none (a baseline with the same measurement).
    pub observe: bool,
    /// The sigma rule judges flows without a minimum by the bytes that arrived
    /// (`tcpi_bytes_received`) when the reader reports them; false: by the bytes read, as
    /// before (docs/bwss.md, "Judged by arrivals").
    pub judge_arrivals: bool,
    /// While no minimum rate is in force, sigma never holds the host's flows below what
    /// they obtain under competition (the aggregate, growing as TCP's additive increase)
    /// and a minimum its flow does not take goes to the others; false: the paper's
    /// reactive rule throughout (`sigma/`, "Keeping the host's share").
    pub keep_share: bool,
    /// A steered flow's window is clamped to this many round trips of its target, at the
    /// reader's round-trip estimate (`tcpi_rcv_rtt`), so its arrivals do not burst far
    /// ahead of its paced reads; with `keep_share`, only while some flow's minimum is
    /// promised (not while no flow has one or it wants less); 0: no clamp, the reads alone
    /// steer (docs/bwss.md).
    pub clamp_rtts: f64,
}

impl Default for SystemConfig {
    fn default() -> Self {
        Self {
            alpha: 0.9,
            interval_ms: 200,
            window_ms: 1000,
            probe_after_ms: 2000,
            probe_step: 0.05,
            link_kbps: 0.0,
            observe: false,
            judge_arrivals: true,
            keep_share: true,
            clamp_rtts: crate::fcs::CLAMP_RTTS,
        }
    }
}

/// How a flow is treated: the paper's priority, minimal rate and weight (Sec. 3.1).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Class {
    /// Minimum rates are given in decreasing priority.
    pub priority: i32,
    /// The rate this flow gets before any weighted sharing, kbit/s.
    pub min_kbps: f64,
    /// Share of what is left after every minimum (0: none of it).
    pub weight: f64,
}

impl Default for Class {
    fn default() -> Self {
        Self {
            priority: 0,
            min_kbps: 0.0,
            weight: 1.0,
        }
    }
}

/// A rule: every given matcher must match; the first matching rule wins.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Shown in the status; defaults to `rule N`.
    #[serde(default)]
    pub name: Option<String>,
    /// The executable's file name (`curl`, `lowtide`).
    #[serde(default)]
    pub program: Option<String>,
    #[serde(default)]
    pub local_port: Option<u16>,
    #[serde(default)]
    pub remote_port: Option<u16>,
    /// The remote address, or a network (`10.1.0.0/16`, `2001:db8::/32`).
    #[serde(default)]
    pub address: Option<String>,
    #[serde(default)]
    pub priority: i32,
    /// kbit/s
    #[serde(default)]
    pub min_kbps: f64,
    #[serde(default = "one")]
    pub weight: f64,
}

fn one() -> f64 {
    1.0
}

/// What the daemon knows about a flow when it classifies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowInfo {
    pub program: String,
    pub local: SocketAddr,
    pub remote: SocketAddr,
}

impl Config {
    /// Reads and checks a rule file.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        Config::from_toml(&text)
    }

    /// Parses and checks a rule file's text.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let cfg: Config = toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks every field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let s = &self.system;
        if !(s.alpha > 0.0 && s.alpha < 1.0) {
            return Err(ConfigError::invalid(
                "system.alpha",
                s.alpha,
                "0 < alpha < 1",
            ));
        }
        if !(20..=10_000).contains(&s.interval_ms) {
            return Err(ConfigError::invalid(
                "system.interval_ms",
                s.interval_ms,
                "20..=10000",
            ));
        }
        if s.window_ms < s.interval_ms || s.window_ms > 60_000 {
            return Err(ConfigError::invalid(
                "system.window_ms",
                s.window_ms,
                "interval_ms..=60000",
            ));
        }
        if s.probe_after_ms > 600_000 {
            return Err(ConfigError::invalid(
                "system.probe_after_ms",
                s.probe_after_ms,
                "0..=600000",
            ));
        }
        if !(s.probe_step > 0.0 && s.probe_step <= 1.0) {
            return Err(ConfigError::invalid(
                "system.probe_step",
                s.probe_step,
                "0 < probe_step <= 1",
            ));
        }
        if !(s.clamp_rtts.is_finite()
            && (s.clamp_rtts == 0.0 || (0.5..=64.0).contains(&s.clamp_rtts)))
        {
            return Err(ConfigError::invalid(
                "system.clamp_rtts",
                s.clamp_rtts,
                "0 (no clamp) or 0.5 to 64",
            ));
        }
        if !(s.link_kbps.is_finite() && s.link_kbps >= 0.0) {
            return Err(ConfigError::invalid(
                "system.link_kbps",
                s.link_kbps,
                "0 (unknown) or a positive rate",
            ));
        }
        check_class("default", &self.default)?;
        for (i, r) in self.rules.iter().enumerate() {
            let at = format!("rule[{i}]");
            check_class(&at, &r.class())?;
            if let Some(p) = &r.program {
                if p.is_empty() || p.contains('/') || p.len() > 255 {
                    return Err(ConfigError::invalid(
                        format!("{at}.program"),
                        format!("{p:?}"),
                        "an executable's file name (no '/', 1..=255 bytes)",
                    ));
                }
            }
            if let Some(a) = &r.address {
                parse_net(a).map_err(|_| {
                    ConfigError::invalid(
                        format!("{at}.address"),
                        format!("{a:?}"),
                        "an IPv4 or IPv6 address or network (10.1.0.0/16)",
                    )
                })?;
            }
            for (f, p) in [("local_port", r.local_port), ("remote_port", r.remote_port)] {
                if p == Some(0) {
                    return Err(ConfigError::invalid(format!("{at}.{f}"), 0, "1..=65535"));
                }
            }
            if r.program.is_none()
                && r.local_port.is_none()
                && r.remote_port.is_none()
                && r.address.is_none()
            {
                return Err(ConfigError::invalid(
                    at.clone(),
                    "a rule without a matcher",
                    "at least one of program, local_port, remote_port, address",
                ));
            }
        }
        Ok(())
    }

    /// The class of a flow, and the name of the rule that gave it (`None`: the default).
    pub fn classify(&self, flow: &FlowInfo) -> (Class, Option<String>) {
        for (i, r) in self.rules.iter().enumerate() {
            if r.matches(flow) {
                let name = r.name.clone().unwrap_or_else(|| format!("rule {i}"));
                return (r.class(), Some(name));
            }
        }
        (self.default, None)
    }
}

impl Rule {
    /// The class this rule gives.
    pub fn class(&self) -> Class {
        Class {
            priority: self.priority,
            min_kbps: self.min_kbps,
            weight: self.weight,
        }
    }

    fn matches(&self, f: &FlowInfo) -> bool {
        self.program.as_ref().is_none_or(|p| *p == f.program)
            && self.local_port.is_none_or(|p| p == f.local.port())
            && self.remote_port.is_none_or(|p| p == f.remote.port())
            && self.address.as_ref().is_none_or(|a| {
                parse_net(a).is_ok_and(|net| net.contains(&canonical(f.remote.ip())))
            })
    }
}

/// An address or a network.
fn parse_net(s: &str) -> Result<IpNet, ()> {
    if let Ok(n) = s.parse::<IpNet>() {
        return Ok(n);
    }
    s.parse::<IpAddr>().map(IpNet::from).map_err(|_| ())
}

/// An IPv4-mapped IPv6 address (`::ffff:10.1.1.1`, from a dual-stack socket) as IPv4.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

fn check_class(at: &str, c: &Class) -> Result<(), ConfigError> {
    if !(c.min_kbps.is_finite() && (0.0..=100e6).contains(&c.min_kbps)) {
        return Err(ConfigError::invalid(
            format!("{at}.min_kbps"),
            c.min_kbps,
            "0..=100000000 (kbit/s)",
        ));
    }
    if !(c.weight.is_finite() && (0.0..=1e6).contains(&c.weight)) {
        return Err(ConfigError::invalid(
            format!("{at}.weight"),
            c.weight,
            "0..=1000000",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(program: &str, local: &str, remote: &str) -> FlowInfo {
        FlowInfo {
            program: program.into(),
            local: local.parse().unwrap(),
            remote: remote.parse().unwrap(),
        }
    }

    const RULES: &str = r#"
        [[rule]]
        name = "video"
        program = "vlc"
        priority = 10
        min_kbps = 520
        weight = 0
        [[rule]]
        address = "2001:db8::/32"
        weight = 3
        [[rule]]
        remote_port = 8000
        address = "10.1.0.0/16"
        weight = 2
    "#;

    #[test]
    fn first_matching_rule_wins() {
        let c = Config::from_toml(RULES).unwrap();
        let (class, name) = c.classify(&flow("vlc", "10.2.1.1:5000", "10.1.1.1:8000"));
        assert_eq!((class.priority, name.as_deref()), (10, Some("video")));
        let (class, name) = c.classify(&flow("curl", "10.2.1.1:5000", "10.1.1.1:8000"));
        assert_eq!((class.weight, name.as_deref()), (2.0, Some("rule 2")));
        // IPv4-mapped addresses match IPv4 networks; IPv6 networks match IPv6 peers.
        let (class, _) = c.classify(&flow("curl", "[::1]:1", "[::ffff:10.1.1.1]:8000"));
        assert_eq!(class.weight, 2.0);
        let (class, _) = c.classify(&flow("curl", "[::1]:1", "[2001:db8::5]:443"));
        assert_eq!(class.weight, 3.0);
        let (class, name) = c.classify(&flow("curl", "10.2.1.1:5000", "10.1.1.1:9000"));
        assert_eq!((class, name), (Class::default(), None));
    }

    #[test]
    fn errors_name_field_value_and_range() {
        let bad = |toml: &str| Config::from_toml(toml).unwrap_err().to_string();
        let e = bad("[system]\nalpha = 1.5");
        assert!(e.contains("system.alpha") && e.contains("1.5"), "{e}");
        let e = bad("[[rule]]\nprogram = \"a\"\nmin_kbps = -1");
        assert!(e.contains("rule[0].min_kbps") && e.contains("-1"), "{e}");
        let e = bad("[[rule]]\naddress = \"10.1.0.0/33\"");
        assert!(e.contains("rule[0].address"), "{e}");
        let e = bad("[[rule]]\nweight = 2");
        assert!(e.contains("without a matcher"), "{e}");
        let e = bad("[[rule]]\nprogram = \"/usr/bin/curl\"");
        assert!(e.contains("rule[0].program"), "{e}");
        let e = bad("[[rule]]\nprogam = \"curl\"");
        assert!(e.contains("unknown field") && e.contains("progam"), "{e}");
        let e = bad("[system]\ninterval_ms = 500\nwindow_ms = 100");
        assert!(e.contains("system.window_ms"), "{e}");
        let e = bad("[system]\nclamp_rtts = 0.1");
        assert!(e.contains("system.clamp_rtts") && e.contains("0.1"), "{e}");
        assert!(Config::from_toml("[system]\nclamp_rtts = 0").is_ok());
        assert!(Config::from_toml("").is_ok());
    }
}
