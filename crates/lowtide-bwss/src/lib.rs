//! BWSS: a receiver shares its access link among its own TCP flows (Mehra, "Efficient
//! Video Streaming using TCP"), by steering each flow's receive window through paced reads.
//!
//! The sans-IO core, every function of time taking `now`:
//! - [`config`]: the rules (TOML): class per flow by program, port or address;
//! - [`allocation`]: σ shared by priority, minimum rate and weight (Sec. 3.1);
//! - [`sigma`]: the reactive σ rule (Sec. 3.3);
//! - [`fcs`]: the flow control system, a read budget per flow (Sec. 3.2); [`meter`]: rates;
//! - [`system`]: all of it together, [`Bwss`].
//!
//! The drivers: [`daemon`] (`lowtide bwss`: one per host, a Unix socket, shared memory with
//! the readers), [`client`] (registering flows with it; used by the `LD_PRELOAD` library
//! `liblowtide_bwss.so` in `crates/lowtide-bwss-preload` and by [`steering`], the API for
//! Rust programs and lowtide channels), [`shm`] (the shared slots), [`pacer`] (a reader's
//! side of its slot), [`wire`] (the socket's messages), [`unix`] and [`tcp`] (sockets).
//!
//! Design and measurements: `docs/bwss.md`.

#![deny(clippy::undocumented_unsafe_blocks)] // every unsafe block states its invariant

pub mod allocation;
pub mod client;
pub mod config;
pub mod daemon;
pub mod fcs;
pub mod meter;
pub mod pacer;
pub mod shm;
pub mod sigma;
pub mod steering;
pub mod system;
pub mod tcp;
pub mod unix;
pub mod wire;

pub use config::{Class, Config, ConfigError, FlowInfo};
pub use fcs::{Budget, TokenBucket};
pub use steering::{PacedReader, SteeredFlow, Steering};
pub use system::{Bwss, FlowId, FlowStatus, Status};
