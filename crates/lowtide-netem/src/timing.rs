//! How the emulator's thread is scheduled and how it waits ([`Timing`]), and the runtime that
//! carries it: one tokio worker thread, set up by [`worker_runtime`], shared by the emulator
//! and by the noise measurement so both wake the same way.
//!
//! The default is what measured best on a two-core machine (docs/netem.md, "Timing"):
//! SCHED_FIFO and a plain timerfd sleep.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::runtime::Runtime;

pub use crate::timer::WakeTail;

/// The emulator worker's scheduling and waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timing {
    /// SCHED_FIFO priority 50 (needs root; without it the thread stays SCHED_OTHER and says so).
    pub realtime: bool,
    /// The thread's timer slack (PR_SET_TIMERSLACK) in ns; `None` keeps the inherited one
    /// (50 µs by default; the kernel ignores slack for real-time threads).
    pub timer_slack_ns: Option<u64>,
    /// What each wait does in its last stretch.
    pub tail: WakeTail,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            realtime: true,
            timer_slack_ns: None,
            tail: WakeTail::Sleep,
        }
    }
}

impl std::fmt::Display for Timing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}, {}",
            if self.realtime {
                "SCHED_FIFO 50"
            } else {
                "SCHED_OTHER"
            },
            self.tail
        )?;
        if let Some(ns) = self.timer_slack_ns {
            write!(f, ", timer slack {ns} ns")?;
        }
        Ok(())
    }
}

/// The ways of waiting `lowtide netem timing` measures against each other.
pub fn candidates() -> Vec<Timing> {
    let fifo = |tail| Timing {
        realtime: true,
        timer_slack_ns: None,
        tail,
    };
    let us = Duration::from_micros;
    vec![
        fifo(WakeTail::Sleep),
        fifo(WakeTail::Spin(us(50))),
        fifo(WakeTail::Spin(us(200))),
        fifo(WakeTail::YieldPoll(us(200))),
        Timing {
            realtime: false,
            timer_slack_ns: None,
            tail: WakeTail::Sleep,
        },
        Timing {
            realtime: false,
            timer_slack_ns: Some(1),
            tail: WakeTail::Sleep,
        },
        Timing {
            realtime: false,
            timer_slack_ns: None,
            tail: WakeTail::Spin(us(200)),
        },
    ]
}

/// What the worker thread reports about itself once it runs.
#[derive(Debug, Default)]
pub struct WorkerInfo {
    tid: AtomicI32,
    realtime: AtomicBool,
}

impl WorkerInfo {
    /// Whether SCHED_FIFO was granted.
    pub fn realtime(&self) -> bool {
        self.realtime.load(Ordering::Relaxed)
    }

    /// CPU time the worker thread has used so far (from /proc; `None` before it started or
    /// where /proc cannot be read).
    pub fn cpu_time(&self) -> Option<Duration> {
        let tid = self.tid.load(Ordering::Relaxed);
        if tid == 0 {
            return None;
        }
        thread_cpu_time(tid)
    }
}

/// CPU time of thread `tid` of this process: the first field of its schedstat, in ns.
pub fn thread_cpu_time(tid: i32) -> Option<Duration> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    let ns: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// A tokio runtime with one worker thread named `name`, scheduled as `timing` says.
pub fn worker_runtime(name: &str, timing: Timing) -> std::io::Result<(Runtime, Arc<WorkerInfo>)> {
    let info = Arc::new(WorkerInfo::default());
    let on_start = info.clone();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(name)
        .on_thread_start(move || {
            // The first thread is the worker; blocking-pool threads, if any, come later.
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() };
            let first = on_start
                .tid
                .compare_exchange(0, tid, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok();
            let rt = timing.realtime && raise_to_realtime();
            if first {
                on_start.realtime.store(rt, Ordering::Relaxed);
            }
            if let Some(ns) = timing.timer_slack_ns {
                // SAFETY: sets the calling thread's timer slack; no pointers.
                unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns.max(1) as libc::c_ulong) };
            }
        })
        .enable_all()
        .build()?;
    Ok((runtime, info))
}

/// Real-time priority for the calling thread: with senders, receivers and the emulator
/// sharing two cores, an ordinary thread waits behind the TCP threads and its packets leave
/// late. SCHED_FIFO lets it preempt them; it sleeps between packets, and the kernel's
/// real-time throttling keeps 5% of each second for everyone else.
fn raise_to_realtime() -> bool {
    let param = libc::sched_param { sched_priority: 50 };
    // SAFETY: sets the calling thread's policy; the parameter outlives the call.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc != 0 {
        tracing::warn!(
            "the emulator runs without real-time priority: {}",
            std::io::Error::last_os_error()
        );
    }
    rc == 0
}
