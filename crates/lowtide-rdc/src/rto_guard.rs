//! The sender's retransmission timer, as the agent can see it: a held ACK must reach the
//! sender before its RTO fires, or the sender retransmits data that arrived long ago.
//!
//! Why (docs/rdc.md, "Each remaining timeout's cause"): the sender's RTO follows the round
//! trips it measures (RFC 6298, Section 2: SRTT with gain 1/8, RTO = SRTT + max(G, 4·RTTVAR);
//! Linux floors the variance term at 200 ms, `TCP_RTO_MIN`). Two things make the agent's hold
//! outrun it:
//! - the delay jumps (the paper's law doubles, the delay estimate follows the marks), and the
//!   sender's SRTT has not yet seen the longer holds;
//! - after a loss the ACKs with SACK blocks pass at once (as the paper requires, for fast
//!   retransmit), and Linux takes round-trip samples from newly SACKed segments: its SRTT
//!   falls to the path's round trip within a few ACKs (measured: 320 → 110 ms in 100 ms), the
//!   RTO with it, and the next held ACK (the one that ends the recovery) arrives after it.
//!
//! So the agent keeps a copy of the sender's SRTT, fed with what the sender will measure for
//! each ACK the agent lets go: the path's round trip plus the ACK's hold (zero for one passed
//! at once), and holds no ACK longer than `SRTT + TCP_RTO_MIN − path RTT − guard`: the
//! smallest RTO the sender can have with that SRTT, less the path and a margin. In a steady
//! state (SRTT = path + D) this allows D + 200 ms − guard, so it never shortens the hold the
//! law wants; it only slows a jump to about 200 ms − guard per SRTT catch-up, and shortens
//! holds while passed-at-once ACKs have pulled the sender's SRTT down.
//!
//! The copy errs low, which is the safe side: the path's round trip is the agent's windowed
//! minimum (the sender's samples add queueing and the receiver's ACK delay), and every ACK
//! passed at once counts as a sample even when the sender takes none from it.

use std::time::Duration;

/// Linux's floor on the RTO's variance term (`TCP_RTO_MIN`, 200 ms): the sender's RTO is at
/// least its SRTT plus this.
pub const RTO_MIN: Duration = Duration::from_millis(200);

/// The agent's copy of one sender's smoothed round trip.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SenderRto {
    srtt: Option<Duration>,
}

impl SenderRto {
    /// An ACK left the agent after `hold`; the sender measures about `path_rtt + hold`.
    pub fn on_ack(&mut self, path_rtt: Duration, hold: Duration) {
        let sample = path_rtt + hold;
        self.srtt = Some(match self.srtt {
            None => sample,
            // RFC 6298 (2.3): SRTT ← 7/8 SRTT + 1/8 R'.
            Some(s) if sample >= s => s + (sample - s) / 8,
            Some(s) => s - (s - sample) / 8,
        });
    }

    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// The longest hold that still reaches the sender `guard` before its smallest possible
    /// RTO; None before the first sample (nothing known, no bound).
    pub fn max_hold(&self, path_rtt: Duration, guard: Duration) -> Option<Duration> {
        let srtt = self.srtt?;
        Some((srtt + RTO_MIN).saturating_sub(path_rtt + guard))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn no_bound_before_the_first_ack() {
        assert_eq!(SenderRto::default().max_hold(40 * MS, 50 * MS), None);
    }

    #[test]
    fn a_steady_hold_is_allowed_with_the_rto_floor_to_spare() {
        let mut s = SenderRto::default();
        for _ in 0..200 {
            s.on_ack(40 * MS, 300 * MS);
        }
        assert_eq!(s.srtt(), Some(340 * MS));
        // 340 + 200 − 40 − 50: the law's 300 ms and 150 ms more.
        assert_eq!(s.max_hold(40 * MS, 50 * MS), Some(450 * MS));
    }

    #[test]
    fn a_jump_is_allowed_only_as_fast_as_the_srtt_follows() {
        let mut s = SenderRto::default();
        for _ in 0..200 {
            s.on_ack(40 * MS, 100 * MS);
        }
        // The law doubles to 200 ms, then to 400 ms: each ACK may be held at most
        // SRTT + 150 ms − 40 ms, and the SRTT climbs by an eighth of the gap per ACK.
        let mut holds = vec![];
        for _ in 0..40 {
            let hold = s.max_hold(40 * MS, 50 * MS).unwrap().min(400 * MS);
            holds.push(hold);
            s.on_ack(40 * MS, hold);
        }
        assert_eq!(holds[0], 250 * MS, "140 ms SRTT + 150 ms − 40 ms");
        assert!(holds.windows(2).all(|w| w[1] >= w[0]), "{holds:?}");
        assert_eq!(*holds.last().unwrap(), 400 * MS, "reached within 40 ACKs");
        // The bound climbs by an eighth of the floor less the guard per ACK, not in jumps.
        for w in holds.windows(2) {
            assert!(w[1] - w[0] <= 150 * MS);
        }
    }

    #[test]
    fn acks_passed_at_once_pull_the_bound_down() {
        let mut s = SenderRto::default();
        for _ in 0..200 {
            s.on_ack(40 * MS, 300 * MS);
        }
        // A loss: eight ACKs with SACK blocks pass at once (the sender's SRTT falls from
        // 340 ms toward the path's 40 ms).
        for _ in 0..8 {
            s.on_ack(40 * MS, Duration::ZERO);
        }
        let srtt = s.srtt().unwrap();
        assert!(srtt > 140 * MS && srtt < 145 * MS, "{srtt:?}");
        // The ACK that ends the recovery may now wait about 253 ms, not the law's 300 ms:
        // held 300 ms it would arrive 340 ms after its data left, past an RTO of about
        // 343 ms less the sender's own jitter.
        let max = s.max_hold(40 * MS, 50 * MS).unwrap();
        assert!(max > 250 * MS && max < 255 * MS, "{max:?}");
        // A path longer than the SRTT and the floor: nothing may be held.
        assert_eq!(s.max_hold(2 * srtt + RTO_MIN, MS), Some(Duration::ZERO));
    }
}
