//! lowtide-proto: the sans-IO core of lowtide, a message transport over one TCP connection
//! that keeps the kernel's send buffer at low tide.
//!
//! No sockets, no threads, no clock reads: every time-dependent call takes `now`, the next
//! deadline comes out of [`Connection::poll_timeout`], and the kernel's state comes in as a
//! [`TcpState`] snapshot. The tokio driver is the `lowtide` crate.
//!
//! ```text
//! send(msg) ─► stream queue (importance, then position) ─► chunker ─► scheduler (WFQ, virtual
//! time) ─► latency controller (allowance) ─► staged frames ─► driver writev ─► kernel
//! kernel ─► driver read ─► handle_bytes ─► decoder ─► reassembly ─► poll_message
//!                                      └► P-ACKs ─► Acked events, PaceA
//! ```
//!
//! Layers, bottom up:
//! - [`wire`]: handshake and frame codec (varints; `docs/wire.md`);
//! - `stream`, [`scheduler`]: per-stream priority queues and weighted fair queuing with Fair
//!   Start and Use It Or Lose It (Paceline: Erbad and Krasic, "Sender-side Buffers and
//!   the Case for Multimedia Adaptation");
//! - [`controller`]: latency controllers (Unlimited, NotsentLowat, MinBuf of Goel, Krasic and
//!   Walpole, "Low-Latency Adaptive Streaming over TCP", PaceA);
//! - `reassembly`: chunks back into messages, bounded memory;
//! - [`Connection`]: the state machine tying them together;
//! - [`failover`]: Paceline's connection manager (stall detection, resend, exactly-once
//!   delivery across backup connections);
//! - [`sim`] (cargo feature `sim`): a deterministic two-endpoint harness with a model of the
//!   kernel's send queue, for tests.
//!
//! Beside them, [`quantile`]: the one percentile convention of every lowtide report.
//!
//! Two endpoints in simulated time: a cancelled message never reaches the receiver, the
//! important one does.
//!
//! ```
//! use lowtide_proto::sim::{LinkParams, Pair};
//! use lowtide_proto::{Config, Message, StreamConfig};
//! let mut pair = Pair::new(Config::default(), Config::default(), LinkParams::default());
//! let video = pair.client.conn.open_stream(StreamConfig::default())?;
//! let now = pair.now;
//! let stale = pair.client.conn.send(now, video, Message::new(vec![0u8; 4000]))?;
//! pair.client.conn.send(now, video, Message::new(vec![1u8; 4000]).importance(1))?;
//! pair.client.conn.cancel(stale);
//! pair.drive_bounded(10_000);
//! let got: Vec<u8> = pair.server.received.iter().map(|m| m.importance).collect();
//! assert_eq!(got, [1]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

pub mod config;
mod connection;
pub mod controller;
mod error;
pub mod failover;
mod pack_gap;
pub mod quantile;
mod reassembly;
pub mod reserve;
pub mod scheduler;
// A test harness, not part of the transport: built for this crate's tests and documentation,
// and for other crates with the `sim` feature.
#[cfg(any(test, doc, feature = "sim"))]
pub mod sim;
mod stream;
pub mod wire;

pub use config::{Config, ConfigError, Fairness, StreamConfig};
pub use connection::{
    Connection, DecisionRecord, Event, Message, MessageId, MessageTimes, Side, Stats, TransmitWork,
};
pub use controller::{AppProgress, ControllerConfig, Decision, LatencyController, TcpState, Wake};
pub use error::{ProtocolError, SendError, StreamError};
pub use failover::duplicate::DuplicateConfig;
pub use failover::{FailoverConfig, FailoverReport};
pub use reassembly::{PeerCancelled, Received};
pub use wire::CancelReason;

#[cfg(test)]
mod tests;
