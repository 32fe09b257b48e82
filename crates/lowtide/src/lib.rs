//! lowtide: prioritized, cancellable messages over one TCP connection, with latency
//! controllers that keep the kernel's send buffer at low tide.
//!
//! This crate is the thin tokio driver over the sans-IO core [`lowtide_proto`] (the split of
//! quinn over quinn-proto): [`sys`] holds every system call, [`channel`] the driver loop,
//! `failover` the backup connections (`failover = { .. }` in the transport config),
//! `tls` the optional TLS 1.3 record layer ([`TlsConfig`]).
//!
//! ```no_run
//! # async fn demo() -> Result<(), lowtide::Error> {
//! use lowtide::{ChannelConfig, Message, StreamConfig};
//! let cfg = ChannelConfig { congestion: Some("cubic".into()), ..ChannelConfig::default() };
//! let ch = lowtide::connect("127.0.0.1:4000".parse().unwrap(), cfg).await?;
//! let s = ch.open_stream(StreamConfig::default())?;
//! ch.send_when_writable(s, Message::new(vec![0u8; 1448]).importance(3)).await?;
//! # Ok(()) }
//! ```
//!
//! Design notes: `docs/transport.md`; wire format: `docs/wire.md`.

pub mod bench;
pub mod channel;
mod config;
mod error;
mod failover;
mod handles;
pub mod sys;
mod tls;

pub use channel::{connect, listen, Channel, Listener, ReadGate};
pub use config::ChannelConfig;
pub use error::Error;
pub use handles::{Messages, SendStream};
/// The sans-IO core, for types not re-exported here.
pub use lowtide_proto as proto;
pub use lowtide_proto::{
    CancelReason, Config, ControllerConfig, Decision, DecisionRecord, Event, Fairness, Message,
    MessageId, MessageTimes, PeerCancelled, Received, Stats, StreamConfig, TcpState, Wake,
};
pub use tls::{TlsConfig, RECORD_OVERHEAD as TLS_RECORD_OVERHEAD};

/// A current-thread tokio runtime with I/O and timers: what each lab host thread (already in
/// its network namespace) builds to run its channels.
pub fn current_thread_runtime() -> Result<tokio::runtime::Runtime, Error> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Io {
            what: "building a current-thread tokio runtime".into(),
            source: std::sync::Arc::new(e),
        })
}
