//! When a flow or a server must end: a shared flag (the lab's "stop everything") or a deadline,
//! whichever comes first. Having both in one value means no loop can forget either.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::POLL_INTERVAL;

/// A shared stop flag plus a deadline. Cheap to clone; clones share the flag.
#[derive(Clone, Debug)]
pub struct Stop {
    flag: Arc<AtomicBool>,
    deadline: Instant,
}

impl Stop {
    /// Stop when `flag` becomes true or at `deadline`, whichever is first.
    pub fn new(flag: Arc<AtomicBool>, deadline: Instant) -> Self {
        Self { flag, deadline }
    }

    /// Stop after `duration` from now, with a fresh flag (see [`Stop::flag`] to share it).
    pub fn after(duration: Duration) -> Self {
        Self::new(Arc::new(AtomicBool::new(false)), Instant::now() + duration)
    }

    /// The shared flag; setting it to true stops everything holding a clone.
    pub fn flag(&self) -> &Arc<AtomicBool> {
        &self.flag
    }

    /// Set the shared flag.
    pub fn stop_all(&self) {
        self.flag.store(true, Ordering::Relaxed);
    }

    /// The deadline.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The same flag with an earlier deadline (never a later one).
    pub fn until(&self, deadline: Instant) -> Self {
        Self::new(self.flag.clone(), deadline.min(self.deadline))
    }

    /// True when the flag is set or the deadline has passed.
    pub fn is_stopped(&self) -> bool {
        self.flag.load(Ordering::Relaxed) || Instant::now() >= self.deadline
    }

    /// True when the shared flag (not the deadline) has been set.
    pub fn flag_is_set(&self) -> bool {
        self.flag.load(Ordering::Relaxed)
    }

    /// Time left until the deadline (zero once passed).
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Sleep until `t` in slices of at most [`POLL_INTERVAL`]. Returns false, early, if the flag
    /// is set or the deadline comes before `t`.
    pub fn sleep_until(&self, t: Instant) -> bool {
        loop {
            if self.flag.load(Ordering::Relaxed) {
                return false;
            }
            let now = Instant::now();
            if now >= t {
                return true;
            }
            if now >= self.deadline {
                return false;
            }
            let slice = (t - now).min(self.deadline - now).min(POLL_INTERVAL);
            thread::sleep(slice);
        }
    }
}
