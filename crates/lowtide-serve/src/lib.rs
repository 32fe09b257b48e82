//! `lowtide serve`: live encoded video from lowtide publishers to viewers over WebSocket, each
//! viewer's socket kept at low tide by its own latency controller.
//!
//! ```text
//! publisher ─ lowtide channel ─ ingest ─┐                ┌─ viewer queue ─ connection ─ WebSocket ─ browser
//! local encoder (--source) ─ source ────┴─ hub (streams) ┼─ viewer queue ─ connection ─ WebSocket ─ browser
//!                                                        └─ ...  one queue and one controller per viewer
//! ```
//!
//! - [`ingest`]: publishers in (a publish message with path and token, then an encoded
//!   stream); [`source`]: a local encoder process as a publisher;
//! - [`hub`]: the streams, the catch-up a joiner starts from, every viewer's queue;
//! - [`viewer::queue`]: one viewer's drop rules (dependencies, deadlines, bounds) without
//!   I/O; [`viewer::connection`]: its socket under lowtide's latency controller;
//! - [`transport`]: plain TCP or TLS (rustls) under HTTP, with ciphertext counted for the
//!   controller; [`http`], [`websocket`]: the request head and the WebSocket frames;
//!   [`viewer_wire`]: the messages between the server and a viewer;
//! - [`metrics`]: the Prometheus page; [`server`]: the listeners and routes;
//! - [`relay`]: relay chains, an edge server pulling a stream from an origin over a lowtide
//!   channel (`--upstream`) and the origin serving it as one more viewer;
//! - [`client`]: a light viewer that times and checks units without decoding them.
//!
//! Design and numbers: `docs/serve.md`.

pub mod client;
pub mod http;
pub mod hub;
pub mod ingest;
pub mod metrics;
pub mod relay;
pub mod server;
pub mod source;
pub mod transport;
pub mod viewer;
pub mod viewer_wire;
pub mod websocket;

pub use server::{ServeConfig, ServeError, Server};

/// Now, µs since the Unix epoch: the clock of every `_us` field the server writes.
pub use lowtide_media::wall_clock::now_us as wall_us;
