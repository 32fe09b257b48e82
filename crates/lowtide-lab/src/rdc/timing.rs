//! The machine's timing in a trial, reported beside the goals that depend on it (docs/rdc.md,
//! "Exact RDC's queue p99: the machine's stalls"). On the shared 2-vCPU machine, whose kernel
//! does not preempt (`preempt=none`), the emulator and the agents, both SCHED_FIFO, now and
//! then run milliseconds late. Each such stall bunches packets, and the agents' holds replay
//! the bunch for about two round trips: in the runs measured, every bottleneck queue sample
//! above 5 packets came within two round trips after a stall. So the queue is also counted
//! outside those stalls' *shadows*, and the CPU's pressure and steal are read from `/proc`
//! for the measured window: a queue goal missed on a machine that stalled says so.

use serde::Serialize;

use lowtide_netem::stats::QueueSample;

use super::measure;
use crate::summary::Measured;

/// An emulator delivery or an agent's release this late is a stall (netem's
/// `LATE_DELIVERY`, the agent's `released_late`).
pub const LATE_US: u64 = 1_000;
/// Late events closer together than this are one stall episode.
pub const EPISODE_GAP_US: u64 = 5_000;
/// How long after a stall its bunch can still build the queue, in round trips (with the
/// router's delay): the measured replays died out within two.
pub const SHADOW_ROUND_TRIPS: f64 = 2.0;

/// How well the machine kept time in a trial's measured window.
#[derive(Debug, Clone, Serialize)]
pub struct TimingHealth {
    /// The emulator's deliveries (either link) and the agents' held ACKs that left more than
    /// [`LATE_US`] after their time.
    pub emulator_late_deliveries: usize,
    pub agent_late_releases: usize,
    /// Those events, merged when less than [`EPISODE_GAP_US`] apart.
    pub stall_episodes: usize,
    /// The latest of them, ms.
    pub worst_late_ms: Option<f64>,
    /// The shadow of a stall: [`SHADOW_ROUND_TRIPS`] round trips (base RTT plus the router's
    /// median delay), ms.
    pub shadow_ms: f64,
    /// Share of the forward queue's samples whose packet arrived in a stall's shadow.
    pub queue_in_shadow: Measured,
    /// The queue's p99 over the samples outside every shadow, packets: what the control law
    /// keeps while the machine keeps time.
    pub queue_p99_outside_shadow: Measured,
    /// Share of the window in which some task waited for a CPU (PSI `some`), and share of
    /// CPU time the hypervisor took (steal); no data where `/proc` does not have them.
    pub cpu_pressure: Measured,
    pub cpu_steal: Measured,
}

impl TimingHealth {
    /// One line for the goal it qualifies.
    pub fn note(&self) -> String {
        let pct = |m: &Measured| super::summary::show(m, |x| format!("{:.1}%", x * 100.0));
        format!(
            "machine: {} stall episodes (emulator {} and agents {} > 1 ms late, worst {}), {} of the queue samples within {:.0} ms after one; queue p99 outside them {}; CPU pressure {}, steal {}",
            self.stall_episodes,
            self.emulator_late_deliveries,
            self.agent_late_releases,
            self.worst_late_ms
                .map_or("-".to_string(), |ms| format!("{ms:.1} ms")),
            pct(&self.queue_in_shadow),
            self.shadow_ms,
            super::summary::show(&self.queue_p99_outside_shadow, |x| format!("{x:.0}")),
            pct(&self.cpu_pressure),
            pct(&self.cpu_steal),
        )
    }
}

/// A late event: when it happened (µs from the flows' origin) and how late it was (µs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LateEvent {
    pub t_us: u64,
    pub late_us: u64,
}

/// What the trial recorded, for [`health`].
pub struct TimingInputs<'a> {
    pub queue: &'a [QueueSample],
    pub emulator_late: Vec<LateEvent>,
    pub agent_late: Vec<LateEvent>,
    pub round_trip_ms: f64,
    pub cpu: Option<(CpuTimes, CpuTimes)>,
}

/// The trial's [`TimingHealth`].
pub fn health(i: TimingInputs<'_>) -> TimingHealth {
    let mut events: Vec<u64> = i
        .emulator_late
        .iter()
        .chain(&i.agent_late)
        .map(|e| e.t_us)
        .collect();
    events.sort_unstable();
    let worst = i
        .emulator_late
        .iter()
        .chain(&i.agent_late)
        .map(|e| e.late_us)
        .max();
    let shadow_ms = SHADOW_ROUND_TRIPS * i.round_trip_ms;
    let (inside, mut outside) = split_by_shadow(i.queue, &events, (shadow_ms * 1000.0) as u64);
    let n = i.queue.len();
    let (cpu_pressure, cpu_steal) = match i.cpu {
        Some((a, b)) => b.shares_since(&a),
        None => (Measured::default(), Measured::default()),
    };
    TimingHealth {
        emulator_late_deliveries: i.emulator_late.len(),
        agent_late_releases: i.agent_late.len(),
        stall_episodes: episodes(&events, EPISODE_GAP_US),
        worst_late_ms: worst.map(|us| us as f64 / 1000.0),
        shadow_ms,
        queue_in_shadow: Measured::new((n > 0).then(|| inside as f64 / n as f64), n),
        queue_p99_outside_shadow: Measured::new(
            measure::percentile(&mut outside, 99.0),
            outside.len(),
        ),
        cpu_pressure,
        cpu_steal,
    }
}

/// Episodes among sorted event times: runs of events less than `gap_us` apart.
pub fn episodes(sorted_us: &[u64], gap_us: u64) -> usize {
    sorted_us
        .windows(2)
        .filter(|w| w[1] - w[0] >= gap_us)
        .count()
        + usize::from(!sorted_us.is_empty())
}

/// Counts the samples whose packet arrived (sample time less its sojourn) at most `shadow_us`
/// after an event (`events` sorted), and returns the others' queue lengths.
pub fn split_by_shadow(queue: &[QueueSample], events: &[u64], shadow_us: u64) -> (usize, Vec<u32>) {
    let mut inside = 0;
    let mut outside = Vec::with_capacity(queue.len());
    for q in queue {
        let arrived = q.t_us.saturating_sub(u64::from(q.sojourn_us));
        let before = events.partition_point(|&e| e <= arrived);
        let shadowed = before > 0 && arrived - events[before - 1] <= shadow_us;
        if shadowed {
            inside += 1;
        } else {
            outside.push(q.packets);
        }
    }
    (inside, outside)
}

/// The machine's CPU counters at one instant: `/proc/stat`'s first line (ticks) and
/// `/proc/pressure/cpu`'s `some total` (µs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuTimes {
    pub at_us: u64,
    pub total_ticks: u64,
    pub steal_ticks: u64,
    pub pressure_us: Option<u64>,
}

impl CpuTimes {
    /// Now, or None where `/proc/stat` cannot be read.
    pub fn read(at_us: u64) -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let psi = std::fs::read_to_string("/proc/pressure/cpu").ok();
        Self::parse(at_us, &stat, psi.as_deref())
    }

    pub fn parse(at_us: u64, stat: &str, psi: Option<&str>) -> Option<Self> {
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        // user nice system idle iowait irq softirq steal (guest time is inside user)
        let ticks: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .take(8)
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        let steal_ticks = *ticks.get(7)?;
        let pressure_us = psi.and_then(|p| {
            let some = p.lines().find(|l| l.starts_with("some "))?;
            some.split_whitespace()
                .find_map(|f| f.strip_prefix("total="))?
                .parse()
                .ok()
        });
        Some(CpuTimes {
            at_us,
            total_ticks: ticks.iter().sum(),
            steal_ticks,
            pressure_us,
        })
    }

    /// (pressure, steal) shares between `earlier` and `self`; no data over no time.
    pub fn shares_since(&self, earlier: &CpuTimes) -> (Measured, Measured) {
        let wall = self.at_us.saturating_sub(earlier.at_us);
        let ticks = self.total_ticks.saturating_sub(earlier.total_ticks);
        let pressure = match (self.pressure_us, earlier.pressure_us) {
            (Some(b), Some(a)) if wall > 0 => {
                Measured::new(Some((b.saturating_sub(a) as f64 / wall as f64).min(1.0)), 1)
            }
            _ => Measured::default(),
        };
        let steal = Measured::new(
            (ticks > 0).then(|| {
                self.steal_ticks.saturating_sub(earlier.steal_ticks) as f64 / ticks as f64
            }),
            ticks as usize,
        );
        (pressure, steal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t_ms: u64, packets: u32, sojourn_ms: u32) -> QueueSample {
        QueueSample {
            t_us: t_ms * 1000,
            packets,
            bytes: packets * 1000,
            sojourn_us: sojourn_ms * 1000,
        }
    }

    #[test]
    fn events_closer_than_the_gap_are_one_episode() {
        assert_eq!(episodes(&[], 5_000), 0);
        assert_eq!(episodes(&[10], 5_000), 1);
        assert_eq!(episodes(&[10, 4_000, 8_000, 20_000, 24_999], 5_000), 2);
    }

    #[test]
    fn a_sample_is_shadowed_by_a_stall_before_its_packet_arrived() {
        // A stall at 100 ms, shadow 200 ms.
        let events = [100_000];
        let queue = [
            sample(90, 3, 0),   // before the stall
            sample(150, 20, 5), // arrived 145 ms: inside
            sample(310, 9, 5),  // arrived 305 ms: outside (205 ms after)
            sample(305, 9, 10), // arrived 295 ms: inside
            sample(500, 2, 0),  // long after
        ];
        let (inside, outside) = split_by_shadow(&queue, &events, 200_000);
        assert_eq!(inside, 2);
        assert_eq!(outside, vec![3, 9, 2]);
    }

    #[test]
    fn health_separates_the_queue_a_stall_built_from_the_rest() {
        // A quiet second at 1-2 packets, then a stall just before 1 s whose bunch builds 30
        // packets (each waited 4 ms, so arrived from 996 ms on).
        let mut queue: Vec<QueueSample> = (0..1000)
            .map(|ms| sample(ms, 1 + (ms % 2) as u32, 0))
            .collect();
        queue.extend((1000..1100).map(|ms| sample(ms, 30, 4)));
        let h = health(TimingInputs {
            queue: &queue,
            emulator_late: vec![LateEvent {
                t_us: 995_000,
                late_us: 6_000,
            }],
            agent_late: vec![LateEvent {
                t_us: 998_000,
                late_us: 2_000,
            }],
            round_trip_ms: 108.0,
            cpu: None,
        });
        assert_eq!(h.stall_episodes, 1);
        assert_eq!(h.worst_late_ms, Some(6.0));
        assert_eq!(h.queue_p99_outside_shadow.value, Some(2.0));
        assert_eq!(
            h.queue_in_shadow.value,
            Some(105.0 / 1100.0),
            "the bunch and the 5 quiet samples after the stall"
        );
        assert_eq!(h.cpu_pressure.value, None, "no /proc: no data, not 0");
        assert!(h.note().contains("1 stall episodes"), "{}", h.note());
    }

    #[test]
    fn cpu_shares_come_from_proc_stat_and_psi() {
        let stat =
            |steal: u64, idle: u64| format!("cpu  100 0 50 {idle} 0 0 0 {steal} 0 0\ncpu0 1 2 3\n");
        let psi = |total: u64| {
            format!("some avg10=1.00 avg60=0.50 avg300=0.10 total={total}\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
        };
        let a = CpuTimes::parse(0, &stat(0, 1000), Some(&psi(0))).unwrap();
        let b = CpuTimes::parse(2_000_000, &stat(10, 1090), Some(&psi(500_000))).unwrap();
        let (pressure, steal) = b.shares_since(&a);
        assert_eq!(pressure.value, Some(0.25));
        assert_eq!(steal.value, Some(0.1));
        let no_psi = CpuTimes::parse(2_000_000, &stat(10, 1090), None).unwrap();
        assert_eq!(no_psi.shares_since(&a).0.value, None);
        assert!(CpuTimes::parse(0, "intr 1 2\n", None).is_none());
        assert!(CpuTimes::parse(0, "cpu  1 x 3\n", None).is_none());
    }
}
