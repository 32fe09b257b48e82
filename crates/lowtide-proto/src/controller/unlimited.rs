//! Plain TCP: write whatever the kernel accepts. The baseline of every comparison
//! (Paceline's "TCP mode", where the latency controller is disabled).

use std::time::Instant;

use super::{AppProgress, Decision, LatencyController, TcpState, Wake};

/// No application-level limit; the kernel's send buffer is the only bound.
///
/// ```
/// use lowtide_proto::controller::{AppProgress, LatencyController, TcpState, Unlimited, Wake};
/// # let now = std::time::Instant::now();
/// let d = Unlimited.decide(&TcpState::default(), &AppProgress::default(), now);
/// assert!(!d.blocked());
/// assert_eq!(d.wake, Wake::Writable);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Unlimited;

impl LatencyController for Unlimited {
    fn name(&self) -> &'static str {
        "unlimited"
    }
    fn needs_tcp_state(&self) -> bool {
        false
    }
    fn watches_idle(&self) -> bool {
        false
    }
    fn decide(&mut self, _tcp: &TcpState, _app: &AppProgress, _now: Instant) -> Decision {
        Decision {
            allowance: u64::MAX,
            limit: u64::MAX,
            min_write: 1,
            wake: Wake::Writable,
            fixed_lowat: None,
        }
    }
}
