//! The error of a scenario that cannot run, and the field checks every scenario kind shares.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::path::PathBuf;

use lowtide_netem::{ConfigError, TopologyConfig};
use lowtide_traffic::schedule::ScheduleError;

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
    #[error("{which}.{error}")]
    Schedule {
        which: &'static str,
        error: ScheduleError,
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
