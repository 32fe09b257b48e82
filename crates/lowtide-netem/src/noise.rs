//! The machine's own wake-up noise: how late a thread wakes from a timer when no emulator runs.
//!
//! The measuring thread wakes exactly as the emulator's worker does: one tokio worker thread
//! ([`crate::timing::worker_runtime`], SCHED_FIFO 50 when allowed), sleeping on a timerfd
//! woken through the runtime's epoll ([`crate::timer::Timer`]). It sleeps for random
//! stretches of 20 µs to 1 ms (the emulator's waits at tens of Mbit/s) and records, for each,
//! how long after the deadline it ran again. What this sees, the emulator cannot beat: a
//! lateness bound tighter than the machine's own noise fails for the machine, not for the
//! emulator, and `netem check` says which ([`crate::check`]).
//!
//! Two views of the same samples:
//! - per wake-up: one sample per sleep;
//! - at a random instant: how late a deadline falling at a random moment would be served.
//!   A stall of `L` ms makes every deadline inside it late, by `L` down to 0; the emulator
//!   has a packet due every 0.4 ms at 30 Mbit/s, so its per-packet lateness follows this
//!   view, where one long stall weighs more than one sample. The fraction of time a deadline
//!   would be served more than `x` late is `Σ max(0, Lᵢ − x) / T` over the samples `Lᵢ` of a
//!   measurement of length `T`; its percentiles are never below the per-wake-up ones (a
//!   deadline is never served faster than the timer path allows).

use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::error::NetemError;
use crate::stats::Percentiles;
use crate::timer::Timer;
use crate::timing::{worker_runtime, Timing};

/// How late a timer-woken thread ran on this machine, and how it was measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WakeupNoise {
    /// Wake-up lateness (ms): time from each deadline to the thread running again.
    pub lateness_ms: Percentiles,
    /// The lateness a deadline at a random instant would see (ms; see the module doc).
    pub at_random_instant_ms: Percentiles,
    /// How long the measurement ran, seconds.
    pub duration_s: f64,
    /// The scheduling and waiting the thread asked for.
    pub timing: Timing,
    /// Whether SCHED_FIFO was granted (false without root).
    pub realtime: bool,
    /// CPU time the measuring thread used per second (a spinning tail costs CPU).
    pub cpu_per_s: Option<f64>,
}

impl std::fmt::Display for WakeupNoise {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (l, r) = (&self.lateness_ms, &self.at_random_instant_ms);
        write!(
            f,
            "wake-up lateness p50 {:.3} ms, p99 {:.3} ms, p99.9 {:.3} ms, max {:.3} ms; at a random instant p99 {:.3} ms, p99.9 {:.3} ms ({} wake-ups in {:.1} s; timerfd + epoll, {}",
            l.p50, l.p99, l.p999, l.max, r.p99, r.p999, l.count, self.duration_s, self.timing
        )?;
        if self.timing.realtime && !self.realtime {
            write!(f, ", real-time priority refused")?;
        }
        if let Some(cpu) = self.cpu_per_s {
            write!(f, "; thread CPU {:.0}%", cpu * 100.0)?;
        }
        write!(f, ")")
    }
}

/// Measures the machine's wake-up noise for `duration` with the emulator's default timing.
pub fn measure(duration: Duration) -> Result<WakeupNoise, NetemError> {
    measure_with(duration, Timing::default())
}

/// Measures the wake-up noise of a thread scheduled and waiting as `timing` says.
pub fn measure_with(duration: Duration, timing: Timing) -> Result<WakeupNoise, NetemError> {
    let (runtime, worker) = worker_runtime("lowtide-noise", timing)
        .map_err(|e| NetemError::setup("starting the noise measurement's thread", e))?;
    let task = runtime.spawn(async move {
        let mut timer = Timer::new(timing.tail)?;
        let mut rng = StdRng::seed_from_u64(7);
        let mut late_us = Vec::with_capacity(4096);
        let end = Instant::now() + duration;
        while Instant::now() < end {
            let deadline = Instant::now() + Duration::from_micros(rng.gen_range(20..=1000));
            timer.sleep_until(deadline).await?;
            let late = Instant::now().saturating_duration_since(deadline);
            late_us.push(late.as_micros().min(u32::MAX as u128) as u32);
        }
        Ok::<_, std::io::Error>(late_us)
    });
    let cpu_before = worker_cpu_after_start(&worker);
    let started = Instant::now();
    let mut late_us = runtime
        .block_on(task)
        .map_err(|e| NetemError::setup("measuring wake-up noise", e))?
        .map_err(|e| NetemError::setup("measuring wake-up noise (timerfd)", e))?;
    let elapsed = started.elapsed().as_secs_f64();
    let cpu_per_s = match (cpu_before, worker.cpu_time()) {
        (Some(a), Some(b)) if elapsed > 0.0 => Some((b - a).as_secs_f64() / elapsed),
        _ => None,
    };
    let realtime = worker.realtime();
    drop(runtime);
    if late_us.is_empty() {
        return Err(NetemError::setup(
            "measuring wake-up noise",
            "no wake-up was recorded",
        ));
    }
    let lateness_ms = Percentiles::of_micros(&mut late_us);
    Ok(WakeupNoise {
        at_random_instant_ms: at_random_instant(&late_us, elapsed * 1e6, &lateness_ms),
        lateness_ms,
        duration_s: duration.as_secs_f64(),
        timing,
        realtime,
        cpu_per_s,
    })
}

/// Percentiles of the lateness a deadline at a random instant sees, from wake-up lateness
/// samples (µs) over `total_us` of measurement; never below the per-wake-up ones.
pub fn at_random_instant(late_us: &[u32], total_us: f64, per_wakeup: &Percentiles) -> Percentiles {
    // The share of time a deadline would be served more than `x` µs late.
    let late_share = |x: f64| {
        late_us
            .iter()
            .map(|&l| (l as f64 - x).max(0.0))
            .sum::<f64>()
            / total_us.max(1.0)
    };
    let max = late_us.iter().copied().max().unwrap_or(0) as f64;
    // The smallest x whose share is at most 1 - q (the share falls as x grows).
    let quantile = |q: f64| {
        let (mut lo, mut hi) = (0.0, max);
        for _ in 0..50 {
            let mid = (lo + hi) / 2.0;
            if late_share(mid) <= 1.0 - q {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        hi / 1000.0
    };
    Percentiles {
        count: per_wakeup.count,
        min: per_wakeup.min,
        p50: quantile(0.5).max(per_wakeup.p50),
        p99: quantile(0.99).max(per_wakeup.p99),
        p999: quantile(0.999).max(per_wakeup.p999),
        max: per_wakeup.max,
    }
}

/// The worker's CPU time once it has started (it starts when the runtime is built, but its
/// id is published from inside the thread).
fn worker_cpu_after_start(worker: &crate::timing::WorkerInfo) -> Option<Duration> {
    for _ in 0..100 {
        if let Some(t) = worker.cpu_time() {
            return Some(t);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_long_stall_weighs_as_the_deadlines_it_delays() {
        // 1 s of prompt wake-ups (20 µs) and one 20 ms stall.
        let mut late: Vec<u32> = vec![20; 2000];
        late.push(20_000);
        let per_wakeup = Percentiles::of_micros(&mut late.clone());
        // Per wake-up the stall is one sample in 2001: p99 stays 0.02 ms.
        assert_eq!(per_wakeup.p99, 0.02);
        let r = at_random_instant(&late, 1e6, &per_wakeup);
        // 2% of the second is inside the stall: 1% of deadlines are served ≥ 10 ms late.
        assert!((r.p99 - 10.0).abs() < 0.05, "{r:?}");
        assert!((r.p999 - 19.0).abs() < 0.05, "{r:?}");
        assert_eq!(r.p50, 0.02);
        // Without stalls it is the per-wake-up view.
        let mut calm: Vec<u32> = vec![30; 1000];
        let p = Percentiles::of_micros(&mut calm);
        assert_eq!(at_random_instant(&calm, 1e6, &p), p);
    }
}
