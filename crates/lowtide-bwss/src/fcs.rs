//! The flow control system (FCS): one flow held to its target rate.
//!
//! Mehra, "Efficient Video Streaming using TCP", Sec. 3.2 and Fig. 2: the FCS "can constrain
//! the rate of a given TCP connection to a particular bit-rate achievable given the flow's
//! congestion window"; it is an iterative three-stage process: measure the flow's actual
//! rate, take the difference with the target, adapt the receiver's advertised window. The
//! prototype (Sec. 3.3) overrides `connect()` and `read()`.
//!
//! Here the advertised window is steered by **paced reads**: the application may take the
//! flow's bytes out of the kernel only as fast as a token bucket at the target rate allows, so
//! the receive buffer fills and the kernel advertises the free space, which the sender cannot
//! exceed. `docs/bwss.md` has the measurements that chose it: on Linux 6.18 paced reads hold a
//! flow within a few percent of targets from 100 kbit/s to 10 Mbit/s at RTTs of 20 and
//! 200 ms, while `TCP_WINDOW_CLAMP` and `SO_RCVBUF` cannot go below a window of about 2 KB
//! (820 kbit/s at 20 ms), miss by up to 50% on a target change, and the clamp is rewritten by
//! the kernel within 100 ms unless it is re-applied.
//!
//! Beside the reads, the reader clamps the window ([`window_clamp`], `TCP_WINDOW_CLAMP`,
//! re-applied every 100 ms because the kernel rewrites it) to two round trips of the
//! target: the reads keep the average exact, the clamp keeps the arrivals from coming in
//! bursts of a whole receive buffer.
//!
//! The loop of Fig. 2 closes through the daemon: measured rate in ([`Fcs::on_measurement`]),
//! read budget out ([`Fcs::budget`]), time passed in explicitly.
//!
//! Where we differ:
//! - The actuator is the read budget, not a computed window: reading at exactly the target
//!   makes the kernel's window follow without knowing the RTT; the measured rate corrects
//!   only what the bucket lost (an application that paused reading does not get a burst
//!   later: the bucket holds at most `depth`).
//! - A flow measured above its target (possible only through the bucket's depth) has its
//!   depth cut to one segment until it is back at the target.

use std::time::Instant;

/// Smallest bucket depth: one full-size segment, so a paced reader never has to take less.
pub const MIN_DEPTH: f64 = 1448.0;
/// The bucket holds this much time of the target rate.
pub const DEPTH_SECS: f64 = 0.05;
/// While no minimum is promised (`keep_share`, `Bwss::budget`), a flow measured under
/// [`UNDER_TARGET`] of its target (the link, not its target, holds it) has a bucket of this
/// much time of the target instead: a burst of arrivals is read at once, so the kernel
/// acknowledges it at once. A flow at its target keeps [`DEPTH_SECS`], so its reads stay
/// exact over short spans too. With [`DEPTH_SECS`] a burst waits in the receive buffer
/// for the bucket, and Linux delays the ACK of data the application has not read while its
/// window does not advance (`__tcp_ack_snd_check`: "tcp_recvmsg() will send ACK otherwise"),
/// which slows the sender's ACK clock against other hosts' flows.
pub const SHARE_DEPTH_SECS: f64 = 1.0;
/// A flow measured below this share of its target is under it (the default α of the σ rule).
pub const UNDER_TARGET: f64 = 0.9;
/// The window clamp allows this many round trips of the target rate (the default of
/// `[system] clamp_rtts`).
pub const CLAMP_RTTS: f64 = 2.0;
/// The clamp is never below this many segments: a window under one segment is advertised
/// as zero (receiver silly-window avoidance) and the flow would stall. Two also stay above
/// the kernel's own floor (about 2.3 KB).
pub const CLAMP_MIN_SEGMENTS: u32 = 2;
/// Re-apply the clamp this often (ms): the kernel rewrites it within 100 ms.
pub const CLAMP_EVERY_MS: u64 = 100;
/// The clamp that leaves a flow unclamped again (the largest `tcp_rmem` allows).
pub const NO_CLAMP: u32 = 1 << 30;

/// `TCP_WINDOW_CLAMP` for a flow paced at `rate` bytes/s over a path of `rtt` with segments
/// of `mss`: room for `rtts` round trips of the target (default [`CLAMP_RTTS`]), so the
/// sender cannot burst far ahead of the reads (at 100 kbit/s the arrivals measured per 2 s
/// stay within 10% of the target with 2, against up to 40% without), while the reads alone
/// hold the average.
pub fn window_clamp(rate: f64, rtt: std::time::Duration, mss: u32, rtts: f64) -> u32 {
    let w = rate * rtt.as_secs_f64() * rtts;
    (w.min(NO_CLAMP as f64) as u32).max(CLAMP_MIN_SEGMENTS * mss.max(536))
}

/// A token bucket of bytes: `rate` bytes/s, at most `depth` bytes saved up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenBucket {
    pub rate: f64,
    pub depth: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(now: Instant, rate: f64, depth: f64) -> Self {
        Self {
            rate,
            depth,
            tokens: depth,
            last: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        if now > self.last {
            let dt = now.duration_since(self.last).as_secs_f64();
            self.tokens = (self.tokens + dt * self.rate).min(self.depth);
            self.last = now;
        }
    }

    /// Bytes that may be read now.
    pub fn available(&mut self, now: Instant) -> u64 {
        self.refill(now);
        self.tokens.max(0.0) as u64
    }

    /// `n` bytes were read at `now`.
    pub fn take(&mut self, now: Instant, n: u64) {
        self.refill(now);
        self.tokens -= n as f64;
    }

    /// When at least `n` bytes (at most the depth) will be available.
    pub fn ready_at(&mut self, now: Instant, n: u64) -> Instant {
        self.refill(now);
        let want = (n as f64).min(self.depth) - self.tokens;
        if want <= 0.0 || self.rate <= 0.0 {
            return now;
        }
        now + std::time::Duration::from_secs_f64(want / self.rate)
    }

    /// Changes rate and depth, keeping the tokens saved (up to the new depth).
    pub fn set(&mut self, now: Instant, rate: f64, depth: f64) {
        self.refill(now);
        self.rate = rate;
        self.depth = depth;
        self.tokens = self.tokens.min(depth);
    }
}

/// What the FCS asks of the flow's reader.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    /// Bytes/s the application may read.
    pub rate: f64,
    /// Bytes the bucket may save up.
    pub depth: f64,
    /// Round trips of the rate the reader clamps the window to ([`window_clamp`]); 0: no
    /// clamp. None for a flow held at its minimum rate: the clamp, sized on the receiver's
    /// lagging RTT estimate, caps the flow below its rate while a queue grows, and the
    /// minimum comes first (the lab, `docs/bwss.md`); with `keep_share`, none while no
    /// minimum is promised (`Bwss::budget`).
    pub clamp_rtts: f64,
}

/// One flow's control: target in, read budget out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fcs {
    target: Option<f64>,
    over: bool,
    under: bool,
}

impl Default for Fcs {
    fn default() -> Self {
        Self::new()
    }
}

impl Fcs {
    /// Unsteered until a target is set.
    pub fn new() -> Self {
        Self {
            target: None,
            over: false,
            under: false,
        }
    }

    /// Sets the target, bit/s (`None`: unsteered).
    pub fn set_target(&mut self, target: Option<f64>) {
        self.target = target;
    }

    pub fn target(&self) -> Option<f64> {
        self.target
    }

    /// The flow's measured rate over the last window, bit/s.
    pub fn on_measurement(&mut self, _now: Instant, measured: f64) {
        self.over = self.target.is_some_and(|t| measured > t * 1.05);
        self.under = self.target.is_some_and(|t| measured < t * UNDER_TARGET);
    }

    /// Measured under [`UNDER_TARGET`] of its target over the last window (`false` before
    /// the first measurement).
    pub fn under(&self) -> bool {
        self.under
    }

    /// The read budget, `None` when unsteered.
    pub fn budget(&self) -> Option<Budget> {
        let rate = self.target? / 8.0;
        let depth = if self.over {
            MIN_DEPTH
        } else {
            (rate * DEPTH_SECS).max(MIN_DEPTH)
        };
        Some(Budget {
            rate,
            depth,
            clamp_rtts: CLAMP_RTTS,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn bucket_paces_at_its_rate_and_saves_at_most_its_depth() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(t0, 10_000.0, 2_000.0);
        assert_eq!(b.available(t0), 2_000);
        b.take(t0, 2_000);
        assert_eq!(b.available(t0), 0);
        let t = t0 + Duration::from_millis(100);
        assert_eq!(b.available(t), 1_000);
        assert_eq!(b.ready_at(t, 1_500), t + Duration::from_millis(50));
        // An idle reader does not save more than the depth.
        assert_eq!(b.available(t0 + Duration::from_secs(10)), 2_000);
        // Reading more than the tokens (a read larger than the budget) is paid back.
        b.take(t0 + Duration::from_secs(10), 3_000);
        assert_eq!(b.available(t0 + Duration::from_millis(10_050)), 0);
        assert_eq!(b.available(t0 + Duration::from_millis(10_200)), 1_000);
    }

    #[test]
    fn simulated_reader_gets_exactly_the_target() {
        // A reader that always wants 64 KiB and reads whatever the bucket allows, every 1 ms.
        let t0 = Instant::now();
        let mut fcs = Fcs::new();
        fcs.set_target(Some(480e3));
        let b = fcs.budget().unwrap();
        let mut bucket = TokenBucket::new(t0, b.rate, b.depth);
        let mut read = 0u64;
        for ms in 0..10_000u64 {
            let now = t0 + Duration::from_millis(ms);
            let n = bucket.available(now).min(65536);
            bucket.take(now, n);
            read += n;
        }
        let rate = read as f64 * 8.0 / 10.0;
        assert!((rate / 480e3 - 1.0).abs() < 0.01, "{rate}");
    }

    #[test]
    fn clamp_is_two_round_trips_with_a_floor() {
        let ms = std::time::Duration::from_millis;
        assert_eq!(window_clamp(27_500.0, ms(60), 1448, 2.0), 3_300);
        assert_eq!(window_clamp(27_500.0, ms(60), 1448, 4.0), 6_600);
        assert_eq!(window_clamp(12_500.0, ms(20), 1448, 2.0), 2 * 1448);
        // Loopback's 64 KB segments: never a window below two of them.
        assert_eq!(window_clamp(2e6, ms(1), 65483, 2.0), 2 * 65483);
        assert_eq!(window_clamp(1e12, ms(1000), 1448, 2.0), NO_CLAMP);
    }

    #[test]
    fn over_target_cuts_the_depth_and_unsteered_has_no_budget() {
        let mut fcs = Fcs::new();
        assert_eq!(fcs.budget(), None);
        fcs.set_target(Some(8e6));
        assert_eq!(fcs.budget().unwrap().depth, 50_000.0);
        fcs.on_measurement(Instant::now(), 9e6);
        assert_eq!(fcs.budget().unwrap().depth, MIN_DEPTH);
    }
}
