//! The reader's side of a flow's slot: the token bucket that paces reads at the budget the
//! daemon wrote (shared by the `LD_PRELOAD` library and [`crate::steering`]).

use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::fcs::{window_clamp, TokenBucket, CLAMP_EVERY_MS, MIN_DEPTH, NO_CLAMP};
use crate::shm::Slot;
use crate::tcp;

/// A paced read waits for this much time of its rate (see [`Allowance::chunk`]).
pub const CHUNK_SECS: f64 = 0.01;

/// What a reader may do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allowance {
    /// Bytes readable now.
    pub bytes: u64,
    /// A read should wait until at least this much is allowed: 10 ms of the rate, at least
    /// one segment, at most the depth (fewer, larger reads; fewer wake-ups).
    pub chunk: u64,
    /// When `chunk` bytes will be allowed.
    pub ready: Instant,
}

impl Allowance {
    /// Whether a read of up to `len` bytes may go ahead now.
    pub fn open(&self, len: usize) -> bool {
        self.bytes >= self.chunk.min(len as u64).max(1)
    }
}

/// One flow's read pacing, its window clamp, and its count of bytes arrived.
#[derive(Debug, Clone, Default)]
pub struct Pacer {
    bucket: Option<TokenBucket>,
    /// When the clamp and the arrivals were last kept up ([`Pacer::maintain`]).
    maintained_at: Option<Instant>,
    /// A clamp is in force.
    clamped: bool,
    /// Round trips of the rate the window is clamped to ([`crate::Budget::clamp_rtts`]);
    /// 0: no clamp.
    clamp_rtts: f64,
}

impl Pacer {
    /// The allowance under the slot's budget; `None` when the flow is unsteered.
    pub fn allowance(&mut self, slot: &Slot, now: Instant) -> Option<Allowance> {
        let rate = slot.rate.load(Ordering::Acquire);
        if rate == 0 {
            self.bucket = None;
            return None;
        }
        let depth_bytes = slot.depth.load(Ordering::Relaxed).max(1);
        self.clamp_rtts = slot.clamp_milli_rtts.load(Ordering::Relaxed) as f64 / 1e3;
        let (rate, depth) = (rate as f64, depth_bytes as f64);
        let bucket = self
            .bucket
            .get_or_insert_with(|| TokenBucket::new(now, rate, depth));
        if bucket.rate != rate || bucket.depth != depth {
            bucket.set(now, rate, depth);
        }
        // Any process can write the slot: a depth above 2^53 is not exact as an f64 and
        // could round up, so both are bounded by the integer the slot holds.
        let chunk = ((rate * CHUNK_SECS).max(MIN_DEPTH).min(depth) as u64).min(depth_bytes);
        Some(Allowance {
            bytes: bucket.available(now).min(depth_bytes),
            chunk,
            ready: bucket.ready_at(now, chunk),
        })
    }

    /// Every [`CLAMP_EVERY_MS`]: publishes the bytes that have arrived and when (the σ
    /// rule judges flows without a minimum by them: a download reading its budget out of a
    /// backlog is not carried by the link), the round-trip estimate (what `keep_share`
    /// grows σ at) and applies the window clamp: `[system] clamp_rtts` round trips of the
    /// target while steered; unclamped again once the flow is not, or its budget asks for
    /// no clamp.
    pub fn maintain(&mut self, fd: RawFd, slot: &Slot, now: Instant) {
        if self
            .maintained_at
            .is_some_and(|t| now.duration_since(t) < Duration::from_millis(CLAMP_EVERY_MS))
        {
            return;
        }
        self.maintained_at = Some(now);
        let Some(rcv) = tcp::rcv_state(fd) else {
            return;
        };
        // Several processes may read one socket (after `fork`): the counter only grows.
        if slot
            .bytes_arrived
            .fetch_max(rcv.bytes_received, Ordering::Relaxed)
            <= rcv.bytes_received
        {
            slot.arrived_at_ns
                .store(crate::shm::monotonic_ns(), Ordering::Release);
        }
        if let Some(rtt) = rcv.rtt {
            slot.rtt_us.store(rtt.as_micros() as u64, Ordering::Relaxed);
        }
        match self.bucket.as_ref().filter(|_| self.clamp_rtts > 0.0) {
            Some(b) => {
                // Without an RTT estimate yet, assume 100 ms (a generous window).
                let rtt = rcv.rtt.unwrap_or(Duration::from_millis(100));
                let clamp = window_clamp(b.rate, rtt, rcv.mss, self.clamp_rtts);
                tcp::set_window_clamp(fd, clamp);
                self.clamped = true;
            }
            None if self.clamped => {
                tcp::set_window_clamp(fd, NO_CLAMP);
                self.clamped = false;
            }
            None => {}
        }
    }

    /// `n` bytes were delivered to the application (counted for the daemon, and paid from
    /// the bucket when the flow is steered).
    pub fn consumed(&mut self, slot: &Slot, now: Instant, n: u64) {
        slot.bytes_read.fetch_add(n, Ordering::Relaxed);
        if let Some(b) = &mut self.bucket {
            b.take(now, n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    /// Found by the `bwss_slot` fuzz target: a hostile depth near 2^64 rounded up as an f64
    /// and the allowance came out one byte over it.
    #[test]
    fn an_allowance_never_exceeds_the_depth_the_slot_holds() {
        let z = || AtomicU64::new(0);
        let slot = Slot {
            inode: z(),
            rate: z(),
            depth: z(),
            clamp_milli_rtts: z(),
            bytes_read: z(),
            bytes_arrived: z(),
            arrived_at_ns: z(),
            rtt_us: z(),
        };
        let now = Instant::now();
        for depth in [
            1,
            1500,
            1 << 53,
            (1 << 53) + 1,
            18_446_744_070_488_326_143,
            u64::MAX,
        ] {
            slot.depth.store(depth, Ordering::Relaxed);
            for rate in [1, 1_000_000, u64::MAX] {
                slot.rate.store(rate, Ordering::Release);
                let a = Pacer::default().allowance(&slot, now).expect("a rate");
                assert!(
                    a.bytes <= depth && a.chunk <= depth,
                    "{a:?} from depth {depth}"
                );
                assert!(a.ready >= now);
            }
        }
    }
}
