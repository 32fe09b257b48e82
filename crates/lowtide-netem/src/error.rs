//! Errors: one sentence that names what was attempted and what to do.

use std::fmt::Display;
use std::path::PathBuf;

/// A scenario or topology that cannot be built.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum ConfigError {
    /// The TOML text does not parse (the message carries line and column).
    #[error("the topology does not parse: {0}")]
    Parse(String),
    /// The file cannot be read.
    #[error("cannot read {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    /// A field is outside what is allowed.
    #[error("invalid `{field}` = {value}: allowed is {allowed}")]
    Invalid {
        field: String,
        value: String,
        allowed: String,
    },
    /// A capacity trace file that cannot be used (the error names file, line and value).
    #[error("`{field}`: {error}")]
    Trace {
        field: String,
        error: crate::trace::TraceError,
    },
}

impl ConfigError {
    pub fn invalid(
        field: impl Into<String>,
        value: impl Display,
        allowed: impl Into<String>,
    ) -> Self {
        ConfigError::Invalid {
            field: field.into(),
            value: value.to_string(),
            allowed: allowed.into(),
        }
    }
}

/// Building or running the emulated network failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NetemError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Namespaces and veth devices need CAP_NET_ADMIN and CAP_SYS_ADMIN.
    #[error("{what} needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN); run it as root, e.g. with sudo")]
    NotPrivileged { what: String },
    /// A congestion control the kernel does not offer.
    #[error("congestion control `{name}` is not available on this kernel (available: {available}); pick one of those")]
    Congestion { name: String, available: String },
    /// A system step failed; `what` says which.
    #[error("{what} failed: {reason}")]
    Setup { what: String, reason: String },
    /// The emulator failed while the network ran (see [`crate::Dumbbell::failure`]).
    #[error(transparent)]
    Emulator(#[from] crate::failure::EmulatorFailure),
}

impl NetemError {
    pub fn setup(what: impl Into<String>, reason: impl Display) -> Self {
        NetemError::Setup {
            what: what.into(),
            reason: reason.to_string(),
        }
    }
}
