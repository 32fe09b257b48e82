//! A channel: one TCP connection driven by a tokio task around a
//! [`Connection`](lowtide_proto::Connection).
//!
//! The application's handle ([`Channel`]) and the driver task share the connection behind a
//! mutex; the driver owns the socket. The driver loop is: read (within the receive budget) →
//! `handle_bytes`; sample the kernel → `poll_transmit` → `writev` → `handle_written`, repeated
//! while the controller allows (skipped, or on the last sample, when nothing can be staged);
//! publish events; then sleep on exactly the readiness the decision asks for (readable,
//! writable with `TCP_NOTSENT_LOWAT`, a timer, or the app).
//!
//! Layout: `setup` (sockets, connect, listen, accept, starting the driver), `shared` (the
//! state behind the mutex), `handle` with `send` and `recv` (the [`Channel`] handle), `driver`
//! (the loop) and `paths` (the loop's backup connections and duplicate lane).
//!
//! ```
//! # lowtide::current_thread_runtime()?.block_on(async {
//! # let any = "127.0.0.1:0".parse().unwrap();
//! # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
//! # let (client, server) = tokio::try_join!(
//! #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
//! #     listener.accept(),
//! # )?;
//! use lowtide::{Message, StreamConfig};
//! let video = client.open_stream(StreamConfig::default())?;
//! client.send_when_writable(video, Message::new("frame 1").importance(2)).await?;
//! let m = server.recv().await.expect("a message");
//! assert_eq!((m.stream, m.importance, &m.data[..]), (video, 2, &b"frame 1"[..]));
//! # Ok::<(), lowtide::Error>(())
//! # })?;
//! # Ok::<(), lowtide::Error>(())
//! ```

mod driver;
mod handle;
mod paths;
mod recv;
mod send;
mod setup;
mod shared;

pub use handle::{ActiveFd, Channel, CLOSE_LINGER};
pub(crate) use setup::{bind_local, configure, tcp_socket};
pub use setup::{connect, listen, Listener};
pub use shared::ReadGate;
