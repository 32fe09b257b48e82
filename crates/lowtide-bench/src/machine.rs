//! What a transfer cost the machine, beside what its two threads were charged.
//!
//! On loopback the kernel's TCP receive work runs in softirq on the CPU that sent the segment
//! and is charged to whichever thread runs there (a data segment to the sender inside its
//! `sendmsg`, an ACK to the receiver inside its read), or to `ksoftirqd` when the kernel
//! defers it, or to no thread at all when it runs on an idle CPU. So a thread's CPU time says
//! who was charged, not whose work it was. The figures here do not depend on that split: the
//! whole process's CPU time (`getrusage(RUSAGE_SELF)`), the `ksoftirqd` threads' run time
//! (`/proc/<pid>/schedstat`) and every CPU's busy time (`/proc/stat`), each read before and
//! after a transfer.

use std::time::Duration;

use lowtide::sys;

/// Busy clock ticks of one CPU, from a `cpuN` line of `/proc/stat`.
fn busy_ticks(line: &str, count_nice: bool) -> Option<u64> {
    // user nice system idle iowait irq softirq steal ...
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().ok())
        .collect::<Option<_>>()?;
    let at = |i: usize| f.get(i).copied();
    let nice = if count_nice { at(1)? } else { 0 };
    Some(at(0)? + nice + at(2)? + at(5)? + at(6)?)
}

/// Every CPU's busy ticks, indexed by CPU number (`None` where `/proc/stat` cannot be read).
fn cpu_busy_ticks(count_nice: bool) -> Option<Vec<u64>> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let mut out = Vec::new();
    for line in text.lines() {
        // "cpuN ..." lines; the "cpu ..." line (all CPUs summed) has a space after "cpu"
        let Some(rest) = line.strip_prefix("cpu") else {
            continue;
        };
        let Some(Ok(cpu)) = rest
            .split(' ')
            .next()
            .filter(|n| !n.is_empty())
            .map(str::parse::<usize>)
        else {
            continue;
        };
        if out.len() <= cpu {
            out.resize(cpu + 1, 0);
        }
        out[cpu] = busy_ticks(line, count_nice)?;
    }
    (!out.is_empty()).then_some(out)
}

/// Run time of a thread in ns, the first field of its `schedstat`.
fn schedstat_ns(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// The `ksoftirqd/N` kernel threads' pids.
fn ksoftirqd_pids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        comm.starts_with("ksoftirqd/").then_some(pid)
    })
    .collect()
}

/// Where the machine's counters are read; made once per bench run.
#[derive(Debug, Clone)]
pub(super) struct Probe {
    ksoftirqd: Vec<u32>,
    tick: Duration,
    /// Count `nice` time as busy: only when this process itself runs niced, since on a shared
    /// machine the niced time is other people's builds.
    count_nice: bool,
}

/// One reading of the counters.
#[derive(Debug, Clone)]
pub(super) struct Reading {
    busy_ticks: Option<Vec<u64>>,
    ksoftirqd_ns: Option<u64>,
    process: Option<Duration>,
}

/// What the machine spent between two readings.
#[derive(Debug, Default, Clone)]
pub(super) struct MachineUsage {
    /// Busy time of each CPU (user, system, irq and softirq time of `/proc/stat`, sampled on
    /// the scheduler tick): everything that ran there, the bench's threads, the kernel's work
    /// in any context, and other processes.
    pub(super) per_cpu: Option<Vec<Duration>>,
    /// The `ksoftirqd` threads: softirq work the kernel deferred, charged to no bench thread.
    pub(super) ksoftirqd: Option<Duration>,
    /// Every thread of this process (both ends of the transfer and the thread joining them).
    pub(super) process: Option<Duration>,
}

impl MachineUsage {
    /// All CPUs' busy time.
    pub(super) fn busy(&self) -> Option<Duration> {
        self.per_cpu.as_ref().map(|v| v.iter().sum())
    }
}

impl Probe {
    pub(super) fn new() -> Self {
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        let hz = if hz > 0 { hz as u64 } else { 100 };
        // SAFETY: getpriority has no preconditions; -1 is also a valid niceness, and either
        // way not a niced process.
        let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        Self {
            ksoftirqd: ksoftirqd_pids(),
            tick: Duration::from_nanos(1_000_000_000 / hz),
            count_nice: nice > 0,
        }
    }

    pub(super) fn read(&self) -> Reading {
        let ksoftirqd_ns = (!self.ksoftirqd.is_empty())
            .then(|| self.ksoftirqd.iter().map(|&p| schedstat_ns(p)).sum())
            .flatten();
        Reading {
            busy_ticks: cpu_busy_ticks(self.count_nice),
            ksoftirqd_ns,
            process: sys::cpu_time().ok(),
        }
    }

    /// What was spent from `before` to `after`.
    pub(super) fn since(&self, before: &Reading, after: &Reading) -> MachineUsage {
        let per_cpu = match (&before.busy_ticks, &after.busy_ticks) {
            (Some(b), Some(a)) if a.len() == b.len() => Some(
                a.iter()
                    .zip(b)
                    .map(|(a, b)| self.tick * a.saturating_sub(*b) as u32)
                    .collect(),
            ),
            _ => None,
        };
        let ksoftirqd = match (before.ksoftirqd_ns, after.ksoftirqd_ns) {
            (Some(b), Some(a)) => Some(Duration::from_nanos(a.saturating_sub(b))),
            _ => None,
        };
        let process = match (before.process, after.process) {
            (Some(b), Some(a)) => Some(a.saturating_sub(b)),
            _ => None,
        };
        MachineUsage {
            per_cpu,
            ksoftirqd,
            process,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_ticks_count_user_system_irq_and_softirq() {
        let line = "cpu1 100 50 30 900 7 2 4 9 0 0";
        assert_eq!(busy_ticks(line, false), Some(100 + 30 + 2 + 4));
        assert_eq!(busy_ticks(line, true), Some(100 + 50 + 30 + 2 + 4));
        assert_eq!(busy_ticks("cpu1 1 2", false), None, "too few fields");
        assert_eq!(busy_ticks("cpu1 1 x 3 4 5 6 7", false), None);
    }

    #[test]
    fn a_busy_thread_shows_in_the_process_and_the_cpus() {
        let probe = Probe::new();
        let before = probe.read();
        let t0 = std::time::Instant::now();
        let mut x = 0u64;
        while t0.elapsed() < Duration::from_millis(60) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        let used = probe.since(&before, &probe.read());
        assert!(x > 0);
        assert!(used.process.expect("getrusage") >= Duration::from_millis(40));
        // Ticks are sampled (4 ms at 250 Hz) and other processes run beside: only that the
        // CPUs counted about as much busy time as this thread spent.
        let per_cpu = used.per_cpu.clone().expect("/proc/stat on Linux");
        assert!(!per_cpu.is_empty());
        assert!(
            used.busy().unwrap() >= Duration::from_millis(20),
            "{used:?}"
        );
    }
}
