//! The kernel's own latency bound: `TCP_NOTSENT_LOWAT`.
//!
//! Linux refuses writes (and reports the socket not writable) while the bytes not yet sent
//! reach the threshold, so the application-level law is "write while the kernel accepts"; the
//! controller only asks the driver to keep the option set. Unlike [`MinBuf`](super::MinBuf) it
//! does not follow cwnd: the threshold is a fixed number of unsent bytes on top of whatever is
//! in flight.

use std::time::Instant;

use super::{AppProgress, Decision, LatencyController, TcpState, Wake};

/// Kernel `TCP_NOTSENT_LOWAT` with a fixed threshold.
#[derive(Debug, Clone, Copy)]
pub struct NotsentLowatController {
    bytes: u32,
}

impl NotsentLowatController {
    /// A controller that keeps at most about `bytes` unsent bytes in the kernel.
    pub fn new(bytes: u32) -> Self {
        Self { bytes }
    }
}

impl LatencyController for NotsentLowatController {
    fn name(&self) -> &'static str {
        "notsent_lowat"
    }
    fn needs_tcp_state(&self) -> bool {
        false
    }
    fn decide(&mut self, _tcp: &TcpState, _app: &AppProgress, _now: Instant) -> Decision {
        Decision {
            allowance: u64::MAX,
            limit: u64::MAX,
            min_write: 1,
            wake: Wake::Writable,
            fixed_lowat: Some(self.bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_option_set_and_leaves_the_rest_to_the_kernel() {
        let d = NotsentLowatController::new(4096).decide(
            &TcpState::default(),
            &AppProgress::default(),
            Instant::now(),
        );
        assert_eq!(d.fixed_lowat, Some(4096));
        assert!(!d.blocked());
    }
}
