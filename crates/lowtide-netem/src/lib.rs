//! lowtide's emulated network: real Linux TCP between network namespaces, through a
//! bottleneck with a chosen rate, delay, queue and AQM, built on rattan-core.
//!
//! - [`config`]: the typed topology (TOML) and its checks; [`trace`]: capacity trace files;
//! - [`dumbbell`]: builds namespaces, veths and the emulator; [`host`]: run code in a host;
//!   [`access`]: per-sender access delay (flows of different RTTs);
//! - [`link`]: how a link serves its queue (constant rate, mahimahi trace replay), sans-IO;
//! - [`cells`]: our rattan cells (rate, delay) and the guard every cell runs in;
//! - [`queue`]: the bottleneck queue; [`aqm`]: its control laws (drop-tail, RED, DRD,
//!   CoDel, RDC); [`delay_line`]: where RDC holds flows that do not answer; [`ecn`]: CE
//!   marks, RDC delay stamps and echoes;
//! - [`tap`]: the link exit (random loss, counters, lateness, pcap); [`stats`]: measurements;
//! - [`timer`], [`timing`]: how the emulator's thread waits and is scheduled; [`noise`]: the
//!   machine's own wake-up noise;
//! - [`failure`]: a cell or the worker that failed, as an error naming the link;
//! - [`probe`]: instrumented flows (UDP echo, bulk TCP with TCP_INFO, latency stream);
//! - [`check`]: `lowtide netem check`, the emulator measured against its configuration;
//! - [`cleanup`]: nothing outlives a run.

pub mod access;
pub mod aqm;
pub mod cells;
pub mod check;
pub mod cleanup;
pub mod config;
pub mod delay_line;
pub mod dumbbell;
pub mod ecn;
pub mod error;
pub mod failure;
pub mod host;
pub mod link;
pub mod noise;
pub mod probe;
pub mod queue;
pub mod stats;
pub mod tap;
pub mod timer;
pub mod timing;
pub mod trace;

pub use config::{
    AqmConfig, HostConfig, LinkConfig, OutageConfig, OutageKind, PathConfig, QueueLimit,
    TopologyConfig,
};
pub use dumbbell::{Dumbbell, RunOptions};
pub use error::{ConfigError, NetemError};
pub use failure::{Direction, EmulatorFailure, FailureWatch};
pub use host::Host;
pub use noise::WakeupNoise;
pub use stats::{LinkReport, LinkStats, Percentiles};
pub use timing::Timing;
