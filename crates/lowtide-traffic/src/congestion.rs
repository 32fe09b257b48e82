//! Congestion control per socket.
//!
//! The machine default here is BBR, so every flow names its algorithm and we set it with
//! `setsockopt(TCP_CONGESTION)` on each socket, before `connect` (or, for a sink sending a
//! download, right after reading the request and before the first byte). The kernel allows
//! an unprivileged socket only the algorithms in `tcp_allowed_congestion_control`; others need
//! CAP_NET_ADMIN. Its error (`ENOENT` for unknown, `EPERM` for not allowed) says neither, so
//! [`set_congestion_control`] turns it into a sentence that names the algorithm, both `/proc`
//! lists and the privilege.

use std::fs;
use std::io;
use std::os::fd::AsRawFd;

use socket2::SockRef;

use crate::TrafficError;

/// Linux `TCP_CA_NAME_MAX` is 16 including the terminating NUL.
pub const MAX_NAME_LEN: usize = 15;

const PROC_AVAILABLE: &str = "/proc/sys/net/ipv4/tcp_available_congestion_control";
const PROC_ALLOWED: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";
const PROC_DEFAULT: &str = "/proc/sys/net/ipv4/tcp_congestion_control";

/// True when `name` could be a kernel congestion-control name (it may still be unavailable).
pub fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Check the spelling of a name without touching a socket.
pub fn check_name(name: &str) -> Result<(), TrafficError> {
    if is_valid_name(name) {
        Ok(())
    } else {
        Err(TrafficError::CongestionControlName {
            name: name.to_owned(),
        })
    }
}

/// Set `TCP_CONGESTION` on a TCP socket, with an error that explains how to fix a failure.
pub fn set_congestion_control<'s>(
    socket: impl Into<SockRef<'s>>,
    name: &str,
) -> Result<(), TrafficError> {
    check_name(name)?;
    let sock: SockRef<'s> = socket.into();
    lowtide_sockopt::set_congestion(sock.as_raw_fd(), name).map_err(|e| {
        TrafficError::CongestionControl {
            algorithm: name.to_owned(),
            available: proc_line(PROC_AVAILABLE),
            allowed: proc_line(PROC_ALLOWED),
            default: proc_line(PROC_DEFAULT),
            error: e.error,
        }
    })
}

/// The congestion control currently set on a TCP socket.
pub fn congestion_control<'s>(socket: impl Into<SockRef<'s>>) -> io::Result<String> {
    let sock: SockRef<'s> = socket.into();
    lowtide_sockopt::congestion(sock.as_raw_fd()).map_err(|e| e.error)
}

/// The algorithms this kernel offers (`tcp_available_congestion_control`), if readable.
pub fn available() -> Option<Vec<String>> {
    fs::read_to_string(PROC_AVAILABLE)
        .ok()
        .map(|s| s.split_whitespace().map(str::to_owned).collect())
}

/// The kernel default (`tcp_congestion_control`), if readable. Note: per network namespace.
pub fn kernel_default() -> Option<String> {
    fs::read_to_string(PROC_DEFAULT)
        .ok()
        .map(|s| s.trim().to_owned())
}

fn proc_line(path: &str) -> String {
    match fs::read_to_string(path) {
        Ok(s) if !s.trim().is_empty() => s.trim().to_owned(),
        Ok(_) => "empty".to_owned(),
        Err(_) => "unknown".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(is_valid_name("cubic"));
        assert!(is_valid_name("bbr"));
        assert!(is_valid_name("dctcp_2"));
        assert!(!is_valid_name(""));
        assert!(!is_valid_name("Cubic"));
        assert!(!is_valid_name("a b"));
        assert!(!is_valid_name("sixteen_chars_xx"));
        let err = check_name("x/y").unwrap_err().to_string();
        assert!(err.contains("\"x/y\""), "{err}");
    }
}
