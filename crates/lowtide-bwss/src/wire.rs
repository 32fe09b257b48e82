//! The daemon's socket: one JSON object per line, each request answered by one line. The
//! answer to `hello` carries the shared memory's descriptor (`SCM_RIGHTS`).
//!
//! The socket is the abstract Unix name `@lowtide-bwss` by default: abstract names belong
//! to a network namespace, so "one daemon per host" holds for emulated hosts too. Set
//! `LOWTIDE_BWSS_SOCKET` (a path, or `@name`) to use another.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::system::Status;

/// Where the daemon listens unless told otherwise.
pub const DEFAULT_SOCKET: &str = "@lowtide-bwss";
/// The environment variable that overrides [`DEFAULT_SOCKET`].
pub const SOCKET_ENV: &str = "LOWTIDE_BWSS_SOCKET";
/// Longest line either side accepts.
pub const MAX_LINE: usize = 4 << 20;

/// The socket name from the environment, else the default.
pub fn socket_name() -> String {
    std::env::var(SOCKET_ENV)
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| DEFAULT_SOCKET.to_string())
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Request {
    /// First message of a reader process.
    Hello { pid: u32, program: String },
    /// A TCP connection of this process, by its socket's inode.
    Register {
        inode: u64,
        local: SocketAddr,
        remote: SocketAddr,
    },
    /// This process no longer holds the socket.
    Unregister { inode: u64 },
    /// The live status.
    Status,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    Hello { slots: usize },
    Registered { slot: u32 },
    Unregistered,
    Status(Status),
    Error { message: String },
}
