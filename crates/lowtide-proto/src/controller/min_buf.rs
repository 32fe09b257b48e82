//! MIN_BUF(a, b): keep the kernel's send queue at `a·cwnd + min(b, cwnd)` segments, plus the
//! SACK correction. Paceline calls this kernel-assisted controller PaceK.
//!
//! Source: Goel, Krasic and Walpole, "Low-Latency Adaptive Streaming over TCP", Section 5 (the
//! A·CWND + B trade-off, why B = 3 covers ACK arrival, delayed ACKs and cwnd increase), Section 6
//! (the in-kernel limit `A·CWND + MIN(B, CWND)` segments), Section 6.1 (SACK correction: add
//! `sacked_out` so the limit covers the `cwnd + sacked_out` window) and Section 6.2 (the
//! application-level variant, whose problem is polling).
//!
//! Where we differ:
//! - The paper limits the socket buffer inside the kernel. We run at application level
//!   (§6.2) and read `cwnd`, `sacked` from `TCP_INFO` and the queue from `SIOCOUTQ` at each
//!   write opportunity. Instead of polling, the driver sets `TCP_NOTSENT_LOWAT` to the blocked
//!   part of the allowance ([`Wake::NotsentBelow`]); when the blocked part is made of in-flight
//!   bytes only, no kernel event expresses "an ACK freed space", and we fall back to a timer of
//!   a quarter RTT ([`Wake::At`]). `docs/transport.md` discusses the mapping.
//! - Writes are MSS-aligned: we wait until at least one MSS is allowed (the paper wakes the
//!   writer "when at least one packet can be admitted"), and round the allowance down to
//!   whole segments, so no write produces a sub-MSS segment that would be sent alone.
//! - Bytes staged for the next write count as queued.

use std::time::{Duration, Instant};

use super::{AppProgress, Decision, LatencyController, TcpState, Wake};

/// cwnd assumed before a `TCP_INFO` sample (Linux's initial window).
const INITIAL_CWND: u32 = 10;

/// The MIN_BUF(a, b) controller with SACK correction.
///
/// ```
/// use lowtide_proto::controller::{MinBuf, TcpState};
/// // cwnd 10, 2 segments SACKed: (1·10 + min(3, 10) + 2) segments.
/// let tcp = TcpState { cwnd: 10, sacked: 2, mss: 1448, ..TcpState::default() };
/// assert_eq!(MinBuf::new(1, 3).limit(&tcp), 15 * 1448);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct MinBuf {
    a: u32,
    b: u32,
}

impl MinBuf {
    /// MIN_BUF(a, b); (1, 3) is the paper's best trade-off.
    ///
    /// ```
    /// use lowtide_proto::controller::{MinBuf, TcpState};
    /// let tcp = TcpState { cwnd: 10, mss: 1000, ..TcpState::default() };
    /// assert_eq!(MinBuf::new(1, 0).limit(&tcp), 10_000); // exactly cwnd
    /// assert_eq!(MinBuf::new(2, 3).limit(&tcp), 23_000);
    /// ```
    pub fn new(a: u32, b: u32) -> Self {
        Self { a, b }
    }

    /// The limit in bytes: `(a·cwnd + min(b, cwnd) + sacked)·mss`.
    ///
    /// ```
    /// use lowtide_proto::controller::{MinBuf, TcpState, DEFAULT_MSS};
    /// let c = MinBuf::new(1, 3);
    /// // b is capped at cwnd: with cwnd 2, (2 + 2) segments.
    /// assert_eq!(c.limit(&TcpState { cwnd: 2, mss: 1000, ..TcpState::default() }), 4000);
    /// // Before a TCP_INFO sample: Linux's initial window of 10 and the default MSS.
    /// assert_eq!(c.limit(&TcpState::default()), 13 * u64::from(DEFAULT_MSS));
    /// ```
    pub fn limit(&self, tcp: &TcpState) -> u64 {
        let cwnd = if tcp.cwnd == 0 {
            INITIAL_CWND
        } else {
            tcp.cwnd
        };
        let segs = u64::from(self.a) * u64::from(cwnd)
            + u64::from(self.b.min(cwnd))
            + u64::from(tcp.sacked);
        segs * u64::from(tcp.mss_or_default())
    }
}

impl LatencyController for MinBuf {
    fn name(&self) -> &'static str {
        "min_buf"
    }
    fn needs_tcp_state(&self) -> bool {
        true
    }
    fn watches_idle(&self) -> bool {
        false
    }
    fn decide(&mut self, tcp: &TcpState, app: &AppProgress, now: Instant) -> Decision {
        decide_for_limit(self.limit(tcp), tcp, app, now)
    }
}

/// The decision for a kernel-queue `limit` in bytes: the allowance in whole segments, and how
/// to be woken when blocked. Shared with DBAT, which keeps the kernel queue at its own limit.
pub(crate) fn decide_for_limit(
    limit: u64,
    tcp: &TcpState,
    app: &AppProgress,
    now: Instant,
) -> Decision {
    let mss = u64::from(tcp.mss_or_default());
    let occupied = u64::from(tcp.outq) + app.staged;
    let raw = limit.saturating_sub(occupied);
    let allowance = raw - raw % mss;
    let min_write = mss.min(limit);
    let wake = if allowance >= min_write {
        Wake::Writable
    } else {
        // Blocked. We can write one MSS again once occupied <= limit - mss. With
        // outq = in_flight + notsent that is notsent <= limit - mss - in_flight - staged,
        // and the kernel reports writability while notsent < lowat.
        let in_flight = u64::from(tcp.outq.saturating_sub(tcp.notsent));
        let room = limit.saturating_sub(mss + in_flight + app.staged);
        if room > 0 && u64::from(tcp.notsent) > room {
            Wake::NotsentBelow((room + 1).min(u64::from(u32::MAX)) as u32)
        } else {
            let rtt = if tcp.rtt.is_zero() {
                Duration::from_millis(1)
            } else {
                tcp.rtt
            };
            let wait = (rtt / 4).clamp(Duration::from_micros(100), Duration::from_millis(10));
            Wake::At(now + wait)
        }
    };
    Decision {
        allowance,
        limit,
        min_write,
        wake,
        fixed_lowat: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(cwnd: u32, sacked: u32, outq: u32, notsent: u32) -> TcpState {
        TcpState {
            cwnd,
            mss: 1000,
            sacked,
            outq,
            notsent,
            rtt: Duration::from_millis(40),
            ..Default::default()
        }
    }

    #[test]
    fn limit_follows_the_paper_formula_with_sack_correction() {
        let m = MinBuf::new(1, 3);
        assert_eq!(m.limit(&tcp(20, 0, 0, 0)), 23_000);
        assert_eq!(
            m.limit(&tcp(20, 4, 0, 0)),
            27_000,
            "sacked segments widen the window (6.1)"
        );
        assert_eq!(
            m.limit(&tcp(2, 0, 0, 0)),
            4_000,
            "min(b, cwnd) caps b at cwnd"
        );
        assert_eq!(MinBuf::new(2, 0).limit(&tcp(20, 0, 0, 0)), 40_000);
    }

    #[test]
    fn allowance_is_limit_minus_queue_in_whole_segments() {
        let mut m = MinBuf::new(1, 3);
        let now = Instant::now();
        let d = m.decide(&tcp(20, 0, 10_500, 0), &AppProgress::default(), now);
        assert_eq!(d.allowance, 12_000);
        let d = m.decide(
            &tcp(20, 0, 10_500, 0),
            &AppProgress {
                staged: 2_000,
                ..Default::default()
            },
            now,
        );
        assert_eq!(d.allowance, 10_000, "staged bytes count as queued");
        assert!(!d.blocked());
    }

    #[test]
    fn blocked_on_unsent_bytes_wakes_through_notsent_lowat() {
        let mut m = MinBuf::new(1, 3);
        // limit 23_000; 20_000 in flight, 2_500 unsent: allowance 500 < one MSS.
        let d = m.decide(
            &tcp(20, 0, 22_500, 2_500),
            &AppProgress::default(),
            Instant::now(),
        );
        assert!(d.blocked());
        // writable again when notsent <= 23_000 - 1_000 - 20_000 = 2_000, i.e. notsent < 2_001
        assert_eq!(d.wake, Wake::NotsentBelow(2_001));
    }

    #[test]
    fn blocked_on_in_flight_bytes_falls_back_to_a_timer() {
        let mut m = MinBuf::new(1, 3);
        let now = Instant::now();
        let d = m.decide(&tcp(20, 0, 23_000, 0), &AppProgress::default(), now);
        assert!(d.blocked());
        assert_eq!(d.wake, Wake::At(now + Duration::from_millis(10)));
    }
}
