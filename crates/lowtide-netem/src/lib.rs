//! lowtide's emulated network: real Linux TCP between network namespaces, through a
//! bottleneck with a chosen rate, delay, queue and AQM, built on rattan-core.
//!
//! - [`config`]: the typed topology (TOML) and its checks;
//! - [`dumbbell`]: builds namespaces, veths and the emulator; [`host`]: run code in a host;
//! - [`queue`]: the bottleneck queue rattan's bandwidth cell drains; [`aqm`]: its control
//!   laws (drop-tail, RED, DRD, CoDel); [`ecn`]: CE marking;
//! - [`tap`]: the link exit (random loss, counters, lateness, pcap); [`stats`]: measurements;
//! - [`probe`]: instrumented flows (UDP echo, bulk TCP with TCP_INFO, latency stream);
//! - [`check`]: `lowtide netem check`, the emulator measured against its configuration;
//! - [`cleanup`]: nothing outlives a run.

pub mod aqm;
pub mod check;
pub mod cleanup;
pub mod config;
pub mod dumbbell;
pub mod ecn;
pub mod error;
pub mod host;
pub mod probe;
pub mod queue;
pub mod stats;
pub mod tap;

pub use config::{AqmConfig, HostConfig, LinkConfig, QueueLimit, TopologyConfig};
pub use dumbbell::{Dumbbell, RunOptions};
pub use error::{ConfigError, NetemError};
pub use host::Host;
pub use stats::{LinkReport, LinkStats, Percentiles};
