//! The emulator's timer: a timerfd on CLOCK_MONOTONIC (nanosecond resolution) waited on
//! through the tokio runtime's epoll, as rattan-core's `metal::timer` does (tokio's own timers
//! round to whole milliseconds), with an optional busy tail for the last stretch.
//!
//! Every timed wait of our cells (the link's rate or trace, the propagation delay) and the
//! machine's noise measurement ([`crate::noise`]) go through this one type, so what the noise
//! measurement sees is the path the emulator wakes on.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// What a wait does in its last stretch before the deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WakeTail {
    /// Sleep on the timerfd until the deadline.
    Sleep,
    /// Sleep until this long before the deadline, then spin on the clock (the thread keeps
    /// its core: nothing else runs on the emulator's worker meanwhile).
    Spin(Duration),
    /// Sleep until this long before the deadline, then poll the clock, yielding to the
    /// emulator's other tasks between polls (a busy-poll window).
    YieldPoll(Duration),
}

impl WakeTail {
    fn window(self) -> Duration {
        match self {
            WakeTail::Sleep => Duration::ZERO,
            WakeTail::Spin(d) | WakeTail::YieldPoll(d) => d,
        }
    }
}

impl std::fmt::Display for WakeTail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WakeTail::Sleep => write!(f, "sleep"),
            WakeTail::Spin(d) => write!(f, "sleep, spin the last {} µs", d.as_micros()),
            WakeTail::YieldPoll(d) => write!(f, "sleep, poll the last {} µs", d.as_micros()),
        }
    }
}

/// A one-shot timer for one task. Must be created inside a tokio runtime with I/O enabled.
pub struct Timer {
    fd: AsyncFd<OwnedFd>,
    tail: WakeTail,
}

impl Timer {
    pub fn new(tail: WakeTail) -> io::Result<Self> {
        // SAFETY: timerfd_create has no memory preconditions; the result is checked.
        let raw = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: the AsyncFd owns the OwnedFd, so the descriptor stays open and the same for
        // the AsyncFd's whole life.
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
            .map_err(|e| e.into_parts().1)?;
        Ok(Self {
            fd,
            tail: tail_checked(tail),
        })
    }

    /// Returns at `deadline` (or as soon after as the machine wakes this thread).
    pub async fn sleep_until(&mut self, deadline: Instant) -> io::Result<()> {
        let window = self.tail.window();
        let now = Instant::now();
        let wake = deadline.checked_sub(window).unwrap_or(deadline);
        if wake > now {
            self.arm(wake - now)?;
            self.wait().await?;
        }
        match self.tail {
            WakeTail::Sleep => {}
            WakeTail::Spin(_) => {
                while Instant::now() < deadline {
                    std::hint::spin_loop();
                }
            }
            WakeTail::YieldPoll(_) => {
                while Instant::now() < deadline {
                    tokio::task::yield_now().await;
                }
            }
        }
        Ok(())
    }

    fn arm(&self, after: Duration) -> io::Result<()> {
        // A zero it_value disarms a timerfd: wait at least 1 ns.
        let after = after.max(Duration::from_nanos(1));
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: after.as_secs() as libc::time_t,
                tv_nsec: after.subsec_nanos() as libc::c_long,
            },
        };
        // SAFETY: the fd is a live timerfd; `spec` outlives the call; no old value is asked.
        let rc =
            unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits for the armed timer. Re-arming resets the expiry count, so a readiness left over
    /// from a wait that was cancelled reads EAGAIN and is waited out again.
    async fn wait(&self) -> io::Result<()> {
        loop {
            let mut guard = self.fd.readable().await?;
            let read = guard.try_io(|fd| {
                let mut ticks = [0u8; 8];
                // SAFETY: reads at most 8 bytes into a live 8-byte buffer.
                let n = unsafe { libc::read(fd.as_raw_fd(), ticks.as_mut_ptr().cast(), 8) };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(())
                }
            });
            match read {
                Ok(result) => return result,
                Err(_would_block) => continue,
            }
        }
    }
}

/// A tail longer than 10 ms would spend the emulator's thread on nothing; clamp it.
fn tail_checked(tail: WakeTail) -> WakeTail {
    let max = Duration::from_millis(10);
    match tail {
        WakeTail::Spin(d) => WakeTail::Spin(d.min(max)),
        WakeTail::YieldPoll(d) => WakeTail::YieldPoll(d.min(max)),
        WakeTail::Sleep => WakeTail::Sleep,
    }
}
