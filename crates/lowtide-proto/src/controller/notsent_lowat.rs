//! The kernel's own latency bound: `TCP_NOTSENT_LOWAT`.
//!
//! Linux refuses writes (and reports the socket not writable) while the bytes not yet sent
//! reach the threshold. Unlike [`MinBuf`](super::MinBuf) it does not follow cwnd: the
//! threshold is a fixed number of unsent bytes on top of whatever is in flight.
//!
//! The kernel checks the threshold only when a write starts a new socket buffer, and TCP's
//! buffers grow to the GSO size (up to 64 KB) even on links without offloads, so one large
//! `writev` overshoots: measured through the emulator, a 4344-byte threshold left 33 KB unsent
//! on average and 65 KB at most. So the controller enforces the threshold itself from
//! `TCP_INFO` (write at most `bytes − notsent`, in whole segments) and keeps the option set
//! for the wake-up, which then comes at the kernel's own point (`2·notsent < lowat`).

use std::time::Instant;

use super::{AppProgress, Decision, LatencyController, TcpState, Wake};

/// Kernel `TCP_NOTSENT_LOWAT` with a fixed threshold.
///
/// ```
/// use lowtide_proto::controller::{AppProgress, LatencyController, NotsentLowatController, TcpState};
/// # let now = std::time::Instant::now();
/// let mut c = NotsentLowatController::new(4344);
/// let full = TcpState { mss: 1448, notsent: 4344, ..TcpState::default() };
/// assert!(c.decide(&full, &AppProgress::default(), now).blocked());
/// ```
#[derive(Debug, Clone, Copy)]
pub struct NotsentLowatController {
    bytes: u32,
}

impl NotsentLowatController {
    /// A controller that keeps at most about `bytes` unsent bytes in the kernel.
    ///
    /// ```
    /// use lowtide_proto::controller::{AppProgress, LatencyController, NotsentLowatController, TcpState};
    /// # let now = std::time::Instant::now();
    /// let mut c = NotsentLowatController::new(16_384);
    /// let tcp = TcpState { mss: 1448, notsent: 4000, ..TcpState::default() };
    /// let d = c.decide(&tcp, &AppProgress::default(), now);
    /// assert_eq!(d.allowance, 16_384 - 4000);
    /// assert_eq!(d.fixed_lowat, Some(16_384)); // the kernel enforces it too
    /// ```
    pub fn new(bytes: u32) -> Self {
        Self { bytes }
    }
}

impl LatencyController for NotsentLowatController {
    fn name(&self) -> &'static str {
        "notsent_lowat"
    }
    fn needs_tcp_state(&self) -> bool {
        true
    }
    fn watches_idle(&self) -> bool {
        false
    }
    fn decide(&mut self, tcp: &TcpState, app: &AppProgress, _now: Instant) -> Decision {
        let limit = u64::from(self.bytes);
        let unsent = u64::from(tcp.notsent) + app.staged;
        let allowance = limit.saturating_sub(unsent);
        let min_write = u64::from(tcp.mss_or_default()).min(limit).max(1);
        // NotsentBelow(x) makes the driver set the option to 2·x: the threshold itself.
        let wake = Wake::NotsentBelow((self.bytes / 2).max(1));
        Decision {
            allowance,
            limit,
            min_write,
            wake,
            fixed_lowat: Some(self.bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(notsent: u32) -> TcpState {
        TcpState {
            mss: 1448,
            notsent,
            ..Default::default()
        }
    }

    #[test]
    fn writes_up_to_the_threshold_and_keeps_the_option_set() {
        let mut c = NotsentLowatController::new(4344);
        let d = c.decide(&tcp(0), &AppProgress::default(), Instant::now());
        assert_eq!(d.fixed_lowat, Some(4344));
        assert_eq!(d.allowance, 4344);
        assert!(!d.blocked());
        let staged = AppProgress {
            staged: 1000,
            ..Default::default()
        };
        assert_eq!(
            c.decide(&tcp(2000), &staged, Instant::now()).allowance,
            1344
        );
    }

    #[test]
    fn blocks_below_one_segment_and_wakes_where_the_kernel_would() {
        let mut c = NotsentLowatController::new(4344);
        let d = c.decide(&tcp(3000), &AppProgress::default(), Instant::now());
        assert!(d.blocked(), "1344 bytes of room is less than one segment");
        assert_eq!(d.wake, Wake::NotsentBelow(2172));
        let d = c.decide(&tcp(9000), &AppProgress::default(), Instant::now());
        assert_eq!(d.allowance, 0);
    }
}
