//! Receiver-based Delay Control (RDC): Hsiao, Kung and Tan, "Streaming Video over TCP with
//! Receiver-based Delay Control". Routers say how congested they are (exact RDC: the delay a
//! packet would have had in a FIFO; 1-bit RDC: CE marks); the receiver delays its ACKs by that
//! much, so an unmodified sender slows down through a longer round trip instead of a smaller
//! window, and router queues stay short.
//!
//! This crate is the receiver side, an agent for a real Linux host (the router side is
//! lowtide-netem's RDC cell):
//!
//! ```text
//!  data in ──► iptables mangle INPUT ─► NFQUEUE ─► agent: read delay / CE, clear it ─► kernel TCP
//!  ACKs out ◄── NFQUEUE verdict after D ◄── agent: hold per flow, in order ◄── mangle OUTPUT ◄── kernel TCP
//! ```
//!
//! - [`wire`]: the IPv4 header fields RDC uses (shared with the router);
//! - [`segment`]: the TCP segment of a packet;
//! - [`agent`]: the sans-IO core (per-flow state, ACK classification, holding), with
//!   [`one_bit`] (the 1-bit delay law), [`rtt`] (RTT from TCP timestamps), [`pacing`]
//!   (held ACKs spread at their flow's rate, an option) and [`rto_guard`] (no hold past the
//!   sender's RTO, an option);
//! - [`status`]: counters by reason, per flow;
//! - [`driver`]: the thin NFQUEUE shell and [`iptables`]: the rules of its own chain;
//! - [`bench`](mod@bench): the agent measured on real packets over loopback.

#![deny(clippy::undocumented_unsafe_blocks)] // every unsafe block states its invariant

pub mod agent;
pub mod bench;
pub mod config;
pub mod driver;
pub mod iptables;
pub mod one_bit;
pub mod pacing;
pub mod rto_guard;
pub mod rtt;
pub mod segment;
pub mod status;
/// The IPv4 header fields RDC reads and writes (the `lowtide-rdc-wire` crate, shared with the
/// router cell in lowtide-netem).
pub use lowtide_rdc_wire as wire;

pub use agent::{Agent, FlowKey, Rewrite};
pub use config::{AgentConfig, ConfigError, Mode};
pub use driver::{AgentError, AgentHandle, DriverConfig};
pub use status::{AgentStatus, Counters, DriverCounters, FlowStatus};
