//! How the agent's thread is scheduled. A held ACK must leave at its time: on a loaded host
//! an ordinary (SCHED_OTHER) thread waits behind the TCP threads and the emulator for a few
//! ms now and then, and every ACK due in that stall leaves in one bunch, which a
//! window-limited sender answers with a burst of data. SCHED_FIFO lets the agent preempt
//! ordinary threads when its timer fires; it sleeps between packets, and the kernel's
//! real-time throttling keeps 5% of each second for everyone else. Measured (docs/rdc.md,
//! "Where the late releases come from"): under CPU load 0.05% of held ACKs late against
//! 1.6% for an ordinary thread in the same run; stalls of the whole machine remain.

use serde::Serialize;

/// SCHED_FIFO priority of the agent's thread: below the emulator's 50 (lowtide-netem's
/// timing), so in the lab the agent never delays the bottleneck it is measured through.
pub const PRIORITY: libc::c_int = 40;

/// How the agent's thread runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scheduling {
    /// SCHED_FIFO at [`PRIORITY`].
    Realtime,
    /// SCHED_OTHER with 1 ns timer slack: real-time priority was not asked for, or refused.
    #[default]
    Ordinary,
}

/// Sets the calling thread's scheduling: SCHED_FIFO if `realtime` and the kernel allows it
/// (root, or an RLIMIT_RTPRIO), else SCHED_OTHER with 1 ns timer slack (the default 50 µs
/// slack lets the kernel defer each wake-up; real-time threads have none).
pub fn apply(realtime: bool) -> Scheduling {
    // SAFETY: sets the calling thread's timer slack; no pointers. (A real-time thread has
    // no slack; set anyway, so a thread the kernel demotes keeps 1 ns.)
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
    if realtime {
        let param = libc::sched_param {
            sched_priority: PRIORITY,
        };
        // SAFETY: sets the calling thread's policy; the parameter outlives the call.
        if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } == 0 {
            return Scheduling::Realtime;
        }
        tracing::warn!(
            "the RDC agent runs without real-time priority (held ACKs may leave late): {}",
            std::io::Error::last_os_error()
        );
    }
    Scheduling::Ordinary
}
