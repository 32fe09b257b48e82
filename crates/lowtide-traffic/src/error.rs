//! Errors of the flow and sink operations. Every system-call error names what was attempted and
//! the address involved, so a lab log line can be understood without the source.

use std::io;
use std::net::SocketAddr;

/// An error running a flow or a sink.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrafficError {
    /// `TCP_CONGESTION` could not be set on a socket.
    #[error(
        "cannot set TCP congestion control {algorithm:?}: {error}; the algorithm must be \
         listed in /proc/sys/net/ipv4/tcp_available_congestion_control (here: {available}), \
         and any algorithm other than the kernel default ({default}) needs CAP_NET_ADMIN unless \
         it is listed in /proc/sys/net/ipv4/tcp_allowed_congestion_control (here: {allowed})"
    )]
    CongestionControl {
        /// The requested algorithm.
        algorithm: String,
        /// The contents of `tcp_available_congestion_control`, or "unknown".
        available: String,
        /// The contents of `tcp_allowed_congestion_control`, or "unknown".
        allowed: String,
        /// The kernel default (`tcp_congestion_control`), or "unknown".
        default: String,
        /// The error from `setsockopt` (shown in the message, so not a `source()` too).
        error: io::Error,
    },
    /// A congestion-control name that cannot be valid (empty, too long, odd characters).
    #[error(
        "invalid TCP congestion control name {name:?}: allowed are 1 to 15 characters of \
         a-z, 0-9 and '_' (e.g. \"cubic\", \"reno\", \"bbr\")"
    )]
    CongestionControlName {
        /// The rejected name.
        name: String,
    },
    /// The sink could not set the congestion control a download client asked for.
    #[error(
        "the sink at {addr} refused TCP congestion control {algorithm:?} for a download \
         (see the sink's log; it must be available and the sink needs CAP_NET_ADMIN)"
    )]
    RemoteCongestionControl {
        /// The sink.
        addr: SocketAddr,
        /// The requested algorithm.
        algorithm: String,
    },
    /// A flow parameter outside its range (the message names it and what is allowed).
    #[error("invalid {field} = {value}: {allowed}")]
    InvalidConfig {
        /// The parameter.
        field: &'static str,
        /// Its value, formatted.
        value: String,
        /// What is allowed.
        allowed: &'static str,
    },
    /// A system call failed.
    #[error("{what} ({addr}): {error}")]
    Io {
        /// What was attempted.
        what: &'static str,
        /// The local or remote address involved.
        addr: SocketAddr,
        /// The error (shown in the message, so not a `source()` too).
        error: io::Error,
    },
    /// The peer answered with something that is not our protocol.
    #[error("protocol error with {addr}: {what}")]
    Protocol {
        /// The peer.
        addr: SocketAddr,
        /// What was wrong.
        what: String,
    },
}

impl TrafficError {
    pub(crate) fn io(what: &'static str, addr: SocketAddr, error: io::Error) -> Self {
        TrafficError::Io { what, addr, error }
    }
}
