//! lowtide: prioritized, cancellable messages over one TCP connection, with latency
//! controllers that keep the kernel's send buffer at low tide.
//!
//! This crate is the thin tokio driver over the sans-IO core [`lowtide_proto`] (the split of
//! quinn over quinn-proto): [`sys`] holds every system call, [`channel`] the driver loop,
//! `failover` the backup connections (`failover = { .. }` in the transport config),
//! `tls` the optional TLS 1.3 record layer ([`TlsConfig`]).
//!
//! A channel over loopback: a sender that writes one message each time the transport can
//! take it (so each carries the freshest data), a receiver that reads them as a
//! `futures::Stream`.
//!
//! ```
//! use futures_util::StreamExt;
//! use lowtide::{ChannelConfig, Message, StreamConfig};
//!
//! # fn main() -> Result<(), lowtide::Error> {
//! lowtide::current_thread_runtime()?.block_on(async {
//!     let listener = lowtide::listen("127.0.0.1:0".parse().unwrap(), ChannelConfig::default()).await?;
//!     let cfg = ChannelConfig { congestion: Some("cubic".into()), ..ChannelConfig::default() };
//!     let (sender, receiver) =
//!         tokio::try_join!(lowtide::connect(listener.local_addr()?, cfg), listener.accept())?;
//!
//!     let video = sender.open_send_stream(StreamConfig::default())?;
//!     for frame in 0..10u8 {
//!         video.send_when_writable(Message::new(vec![frame; 1448]).importance(3)).await?;
//!     }
//!     sender.flush().await?;
//!     sender.close(0, "done").await;
//!
//!     let frames: Vec<_> = receiver.messages().collect().await;
//!     assert_eq!(frames.len(), 10);
//!     assert!(frames.iter().all(|m| m.importance == 3 && m.data.len() == 1448));
//!     Ok(())
//! })
//! # }
//! ```
//!
//! Design notes: `docs/transport.md`; wire format: `docs/wire.md`.

#![warn(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)] // every unsafe block states its invariant

pub mod channel;
mod config;
mod error;
mod failover;
mod handles;
mod read_buf;
pub mod sys;
mod tls;

pub use channel::{connect, listen, ActiveFd, Channel, Listener, ReadGate};
pub use config::ChannelConfig;
pub use error::{Error, Mistake};
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
///
/// ```
/// let rt = lowtide::current_thread_runtime()?;
/// let port = rt.block_on(async {
///     let any = "127.0.0.1:0".parse().unwrap();
///     let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
///     Ok::<_, lowtide::Error>(listener.local_addr()?.port())
/// })?;
/// assert_ne!(port, 0);
/// # Ok::<(), lowtide::Error>(())
/// ```
pub fn current_thread_runtime() -> Result<tokio::runtime::Runtime, Error> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Io {
            what: "building a current-thread tokio runtime".into(),
            error: std::sync::Arc::new(e),
        })
}
