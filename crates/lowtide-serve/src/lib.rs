//! `lowtide serve`: live encoded video from lowtide publishers to viewers over WebSocket, each
//! viewer's socket kept at low tide by its own latency controller.
//!
//! - [`viewer_wire`]: the messages between the server and a viewer (the player page reads
//!   the same layout).

pub mod viewer_wire;
