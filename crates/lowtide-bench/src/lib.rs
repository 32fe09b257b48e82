//! `lowtide bench`: loopback measurements, every figure against raw TCP in the same run.
//!
//! - **goodput**: bulk 64 KB messages through a channel (default controller, MinBuf(1,3)) vs a
//!   raw TCP socket writing the same bytes in 64 KB writes; sender and receiver CPU per GB of
//!   both, and the receiver's wake-ups per GB; run as [`BenchConfig::bulk_pairs`] A/B pairs,
//!   each pair's figures reported ([`BulkPair`]);
//! - **small messages**: 100-byte messages per second through one channel vs raw TCP with a
//!   4-byte length prefix per message behind a 64 KB `BufWriter`;
//! - **CPU per GB**: sender-thread CPU (`getrusage(RUSAGE_THREAD)`, user + system) per GB at
//!   the same paced rate, MinBuf(1,3) and Unlimited, each against raw TCP; for MinBuf also the
//!   receiver thread and both ends ([`MachineCpu`]). Goel et al., "Low-Latency Adaptive
//!   Streaming over TCP", §5.2 and Table I: MIN_BUF(1,0) cost 2.7× TCP.
//!
//! Which CPU figure is judged: both ends' ([`MachineCpu::both_ends_s_per_gb`]), since on
//! loopback the kernel charges a segment's receive work to whichever thread runs on the CPU
//! that sent it, so one thread's share depends on who happened to be in a system call.
//!
//! - **many channels** (`channels.rs`, `lowtide bench --channels N`): one server thread
//!   streaming paced messages to N channels, memory per channel, CPU, p99 latency, against N
//!   raw TCP connections.
//!
//! The numbers come as a serializable report ([`BenchReport`]; example there); the CLI's
//! `lowtide bench` prints it.
//!
//! ```
//! use lowtide_bench::{BenchConfig, Part};
//! // What `lowtide bench --json` measures by default, as configuration:
//! let cfg = BenchConfig::default();
//! assert_eq!(cfg.parts, [Part::Goodput, Part::Small, Part::Cpu]);
//! println!("{}", serde_json::to_string(&cfg).unwrap());
//! ```
//!
//! Sender and receiver run as two OS threads, each with its own current-thread tokio runtime,
//! as the lab does. Receiver goodput is measured from the first to the last message received.
//! The variants of a comparison alternate round by round (so background load hits both
//! alike); each figure is the median over rounds, each ratio the median of per-round ratios.
//!
//! Why pairs, and why both threads: on a shared machine raw TCP's own receiver cost moved
//! 0.12-0.25 s/GB between runs of one binary, so one ratio of two 2-second measurements was
//! noise. Two transfers run back to back see about the same machine, so the ratio within a pair
//! cancels most of the drift, and the median of many pairs the rest. On loopback the kernel's TCP
//! work also moves between the threads (a segment is processed in the sending thread's softirq
//! unless the receiver holds its socket, an ACK in the receiving thread's unless the sender holds
//! its own), so the two threads' sum per GB is reported beside the receiver's share. Where the
//! scheduler puts the two threads (one core or two) moved a transfer's cost per GB up to 3x;
//! [`ThreadPlacement::OneCpu`] fixes that (both threads on one CPU, for both variants). Hardware
//! counters (instructions, cycles through `perf_event_open`) would be steadier still; virtual
//! machines without a PMU (as the one these notes were measured on) do not have them.
//!
//! A crate of its own so that the product crate `lowtide` carries only what a library user
//! needs: everything here goes through `lowtide`'s public API (channels, [`lowtide::sys`]),
//! and errors are [`lowtide::Error`]s, as a channel's.

#![warn(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)] // every unsafe block states its invariant

pub mod channels;
mod machine;
mod transfer;

use serde::{Deserialize, Serialize};

use lowtide::{ControllerConfig, Error};
use transfer::{lowtide_transfer, raw_transfer, Pattern, Placement, Run, Transfer};

/// The parts of the benchmark.
///
/// ```
/// use lowtide_bench::{BenchConfig, Part};
/// // `lowtide bench --parts small,cpu` in code:
/// let cfg = BenchConfig { parts: vec![Part::Small, Part::Cpu], ..BenchConfig::default() };
/// assert_eq!(serde_json::to_string(&cfg.parts).unwrap(), r#"["small","cpu"]"#);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Part {
    /// Bulk goodput and its CPU cost.
    Goodput,
    /// Small-message rate.
    Small,
    /// CPU per GB at a paced rate.
    Cpu,
}

/// What to measure.
///
/// ```
/// use lowtide_bench::{BenchConfig, Part};
/// // Goodput only, 64 KB messages, 3 rounds of 1 s per variant.
/// let cfg = BenchConfig { seconds: 3.0, parts: vec![Part::Goodput], ..BenchConfig::default() };
/// assert_eq!((cfg.rounds, cfg.bulk_message), (3, 64 << 10));
/// // Checked when run: seconds must be in (0, 600].
/// let bad = BenchConfig { seconds: 0.0, ..BenchConfig::default() };
/// assert!(lowtide_bench::run(&bad).is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BenchConfig {
    /// Total duration of each measurement (all rounds of one variant), seconds.
    pub seconds: f64,
    /// Each measurement is split into this many rounds.
    pub rounds: usize,
    /// Which parts to run.
    pub parts: Vec<Part>,
    /// The goodput part's rounds: A/B pairs (a lowtide and a raw TCP transfer back to back,
    /// the order alternating), each transfer `seconds / rounds` long, instead of `rounds`.
    pub bulk_pairs: usize,
    /// Bulk message size, bytes.
    pub bulk_message: usize,
    /// Small message size, bytes.
    pub small_message: usize,
    /// Paced rate for the CPU comparison, bytes per second.
    pub paced_rate: f64,
    /// Message size for the CPU comparison, bytes.
    pub paced_message: usize,
    /// MSS (`TCP_MAXSEG`) for the CPU comparison; 1448 emulates Ethernet so that MinBuf's
    /// limit is in realistic segments rather than 64 KB loopback ones.
    pub paced_mss: Option<u32>,
    /// Congestion control for every socket (`None`: system default).
    pub congestion: Option<String>,
    /// Where each transfer's sender and receiver threads run (lowtide and raw TCP alike).
    pub placement: ThreadPlacement,
}

/// Where a transfer's two threads run.
///
/// ```
/// use lowtide_bench::{BenchConfig, ThreadPlacement};
/// let cfg = BenchConfig { placement: ThreadPlacement::OneCpu, ..BenchConfig::default() };
/// assert_eq!(serde_json::to_string(&cfg.placement).unwrap(), r#""one_cpu""#);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThreadPlacement {
    /// Wherever the scheduler puts them.
    #[default]
    Scheduler,
    /// Both on the first CPU the process may use.
    OneCpu,
    /// The sender on the first CPU the process may use, the receiver on the second (with a
    /// single CPU: both on it).
    TwoCpus,
}

impl Default for BenchConfig {
    fn default() -> Self {
        Self {
            seconds: 2.0,
            rounds: 3,
            parts: vec![Part::Goodput, Part::Small, Part::Cpu],
            bulk_pairs: 9,
            bulk_message: 64 << 10,
            small_message: 100,
            paced_rate: 200e6,
            paced_message: 8 << 10,
            paced_mss: Some(1448),
            congestion: Some("cubic".into()),
            placement: ThreadPlacement::Scheduler,
        }
    }
}

/// Where and how the numbers were produced.
///
/// ```
/// fn header(r: &lowtide_bench::BenchReport) -> String {
///     let p = &r.provenance;
///     format!("lowtide {} on Linux {}, {} s per measurement", p.version, p.kernel, p.config.seconds)
/// }
/// ```
#[derive(Debug, Clone, Serialize)]
pub struct Provenance {
    /// lowtide version.
    pub version: &'static str,
    /// `uname -r`.
    pub kernel: String,
    /// The configuration used.
    pub config: BenchConfig,
}

/// One figure for lowtide and for raw TCP, measured in the same run.
///
/// ```
/// use lowtide_bench::Versus;
/// fn line(what: &str, v: &Versus) -> String {
///     format!("{what}: lowtide {:.0}, raw TCP {:.0} ({:.2}x)", v.lowtide, v.raw_tcp, v.ratio)
/// }
/// let v = Versus { lowtide: 900.0, raw_tcp: 1000.0, ratio: 0.9 };
/// assert_eq!(line("MB/s", &v), "MB/s: lowtide 900, raw TCP 1000 (0.90x)");
/// ```
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Versus {
    /// lowtide (median over rounds).
    pub lowtide: f64,
    /// Raw TCP (median over rounds).
    pub raw_tcp: f64,
    /// lowtide / raw TCP (median of the per-round ratios).
    pub ratio: f64,
}

/// Goodput with bulk messages.
///
/// ```
/// fn cheaper_than_raw_tcp(r: &lowtide_bench::BenchReport) -> Option<bool> {
///     let g = r.goodput.as_ref()?; // `None` unless Part::Goodput ran
///     Some(g.sender_cpu_s_per_gb.ratio <= 1.0)
/// }
/// ```
#[derive(Debug, Clone, Serialize)]
pub struct Goodput {
    /// Received MB/s (10^6 bytes).
    pub mb_s: Versus,
    /// Sender thread CPU seconds per GB.
    pub sender_cpu_s_per_gb: Versus,
    /// Receiver thread CPU seconds per GB.
    pub receiver_cpu_s_per_gb: Versus,
    /// Receiver thread wake-ups per GB: voluntary context switches (`getrusage`'s `ru_nvcsw`),
    /// each a sleep in `epoll_wait` (lowtide) or a blocking `read` (raw TCP) and its wake-up.
    pub receiver_wakeups_per_gb: Versus,
    /// Sender and receiver threads together, CPU seconds per GB: on loopback each thread
    /// also does some of the other's kernel work, and the sum does not depend on who did it.
    pub both_cpu_s_per_gb: Versus,
    /// CPU per GB of the whole process, of every CPU, of `ksoftirqd`, and of each end's CPU
    /// when the two ends ran on different CPUs: figures no thread split can move.
    pub machine: MachineCpu,
    /// Every A/B pair, in the order run ([`BenchConfig::bulk_pairs`]); the ratios above are the
    /// medians of these pairs' ratios.
    pub pairs: Vec<BulkPair>,
}

/// One A/B pair of the goodput part: a lowtide and a raw TCP transfer run back to back. Each
/// [`Versus`] here holds that pair's two transfers and their ratio (no medians).
///
/// ```
/// fn receiver_ratios(g: &lowtide_bench::Goodput) -> Vec<f64> {
///     g.pairs.iter().map(|p| p.receiver_cpu_s_per_gb.ratio).collect()
/// }
/// ```
#[derive(Debug, Clone, Copy, Serialize)]
pub struct BulkPair {
    /// Received MB/s.
    pub mb_s: Versus,
    /// Receiver thread CPU seconds per GB.
    pub receiver_cpu_s_per_gb: Versus,
    /// Sender and receiver threads together, CPU seconds per GB.
    pub both_cpu_s_per_gb: Versus,
    /// The machine's figures for this pair.
    pub machine: MachineCpu,
}

/// CPU seconds per GB that do not depend on which thread the kernel charged for its work, and
/// each end's share when the ends ran on different CPUs. `None` (JSON `null`): no data (a
/// counter could not be read, or the placement has no separate ends).
///
/// On loopback a segment's receive processing runs in softirq on the CPU that sent it, charged
/// to whichever thread was running there, to `ksoftirqd` when deferred, or to no thread on an
/// idle CPU. The ends' own CPUs ([`MachineCpu::sender_side_s_per_gb`],
/// [`MachineCpu::receiver_side_s_per_gb`]) say what each end costs only when each end's
/// incoming segments are also processed on its own CPU: `tools/bench-separate-ends.sh`
/// runs the bench so (two CPUs, receive flow steering in a network namespace of its own).
///
/// ```
/// fn whole_machine_ratio(g: &lowtide_bench::Goodput) -> Option<f64> {
///     Some(g.machine.machine_s_per_gb?.ratio)
/// }
/// ```
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct MachineCpu {
    /// Both ends of the transfer, whoever was charged: the whole process plus `ksoftirqd`.
    /// Issue 14's "CPU per GB" goal is judged on this figure (docs/transport.md, "Which CPU
    /// per GB").
    pub both_ends_s_per_gb: Option<Versus>,
    /// Every thread of the bench process (both ends), `getrusage(RUSAGE_SELF)`.
    pub process_s_per_gb: Option<Versus>,
    /// Every CPU's busy time (`/proc/stat`: user, system, irq and softirq, sampled on the
    /// scheduler tick; `nice` only if the bench itself runs niced, since on a shared machine
    /// niced time is other people's builds): both ends, the kernel's work in any context, and
    /// whatever else ran un-niced meanwhile.
    pub machine_s_per_gb: Option<Versus>,
    /// The `ksoftirqd` threads (`/proc/<pid>/schedstat`): softirq work the kernel deferred,
    /// charged to no bench thread. Its ratio is `null` when raw TCP's is 0.
    pub ksoftirqd_s_per_gb: Option<Versus>,
    /// Busy time of the sender's CPU (`/proc/stat`), with [`ThreadPlacement::TwoCpus`].
    pub sender_side_s_per_gb: Option<Versus>,
    /// Busy time of the receiver's CPU (`/proc/stat`), with [`ThreadPlacement::TwoCpus`].
    pub receiver_side_s_per_gb: Option<Versus>,
}

/// Small-message rate.
///
/// ```
/// fn rate(r: &lowtide_bench::BenchReport) -> Option<f64> {
///     Some(r.small_messages.as_ref()?.msgs_s.lowtide) // messages per second
/// }
/// ```
#[derive(Debug, Clone, Serialize)]
pub struct SmallMessages {
    /// Messages per second (raw TCP: 4-byte length prefix per message).
    pub msgs_s: Versus,
    /// Sender thread CPU seconds per million messages.
    pub sender_cpu_s_per_m_msgs: Versus,
}

/// Sender CPU per GB at a paced rate.
///
/// ```
/// fn min_buf_overhead(r: &lowtide_bench::BenchReport) -> Option<f64> {
///     // Goel et al. Table I: MIN_BUF(1,0) cost 2.7x TCP's CPU.
///     Some(r.cpu.as_ref()?.min_buf.ratio)
/// }
/// ```
#[derive(Debug, Clone, Serialize)]
pub struct CpuCost {
    /// MinBuf(1,3): sender CPU seconds per GB, against raw TCP.
    pub min_buf: Versus,
    /// Unlimited (plain TCP's policy through lowtide): sender CPU seconds per GB, against raw TCP.
    pub unlimited: Versus,
    /// MinBuf / Unlimited, median of per-round ratios.
    pub min_buf_vs_unlimited: f64,
    /// Receiver CPU seconds per GB under MinBuf, against raw TCP.
    pub receiver_min_buf: Versus,
    /// Sender and receiver threads together under MinBuf, against raw TCP.
    pub both_min_buf: Versus,
    /// The machine's figures under MinBuf, against raw TCP.
    pub machine_min_buf: MachineCpu,
    /// Rates actually received, MB/s: MinBuf, Unlimited, raw TCP.
    pub achieved_mb_s: [f64; 3],
}

/// A goal, checked on this run's numbers. A figure without data has `value: None` ("no
/// data") and is never met: the goal stays in the report rather than vanishing.
///
/// ```
/// fn unmet(goals: &[lowtide_bench::Goal]) -> Vec<String> {
///     goals
///         .iter()
///         .filter(|g| !g.met)
///         .map(|g| format!("{} = {}, wanted {} ({} samples)", g.what, g.shown(), g.bound, g.samples))
///         .collect()
/// }
/// ```
#[derive(Debug, Clone, Serialize)]
pub struct Goal {
    /// What is compared.
    pub what: &'static str,
    /// Measured (`None`: no data).
    pub value: Option<f64>,
    /// The bound.
    pub bound: String,
    /// What the value stands on: rounds of a comparison, messages of a latency.
    pub samples: usize,
    /// Whether the measurement meets it (never without data).
    pub met: bool,
    /// Whether issue 14's goal is judged on this figure. The others are one thread's share of
    /// work the kernel splits between the threads as it likes on loopback, kept so runs stay
    /// comparable with earlier ones (docs/transport.md, "Which CPU per GB").
    pub judged: bool,
}

impl Goal {
    /// The value for a table: "no data" when there is none.
    pub fn shown(&self) -> String {
        self.value
            .map_or_else(|| "no data".to_owned(), |v| format!("{v:.3}"))
    }
}

/// The whole report (`lowtide bench --json`).
///
/// ```
/// use lowtide_bench::{run, BenchConfig, Part};
/// // A short run (0.2 s per variant, one round): the small-message part only.
/// let cfg = BenchConfig { seconds: 0.2, rounds: 1, parts: vec![Part::Small], ..BenchConfig::default() };
/// let report = run(&cfg)?;
/// let small = report.small_messages.as_ref().expect("the part ran");
/// assert!(small.msgs_s.lowtide > 0.0 && small.msgs_s.raw_tcp > 0.0);
/// assert!(report.goodput.is_none() && report.cpu.is_none());
/// println!("{}", serde_json::to_string_pretty(&report).unwrap()); // `lowtide bench --json`
/// # Ok::<(), lowtide::Error>(())
/// ```
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// Provenance.
    pub provenance: Provenance,
    /// Goodput (if run).
    pub goodput: Option<Goodput>,
    /// Small messages (if run).
    pub small_messages: Option<SmallMessages>,
    /// CPU cost (if run).
    pub cpu: Option<CpuCost>,
    /// The goals, against this run.
    pub goals: Vec<Goal>,
}

/// An [`Error::Io`] naming what was attempted.
fn io_error(what: impl Into<String>, error: std::io::Error) -> Error {
    Error::Io {
        what: what.into(),
        error: std::sync::Arc::new(error),
    }
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

fn median(mut v: Vec<f64>) -> f64 {
    lowtide::proto::quantile::of(&mut v, 0.5).expect("at least one round")
}

/// The CPUs of [`BenchConfig::placement`], among those this process may use.
fn placement(cfg: &BenchConfig) -> Result<Placement, Error> {
    let cpus = match cfg.placement {
        ThreadPlacement::Scheduler => return Ok(None),
        _ => lowtide::sys::allowed_cpus()?,
    };
    let Some(&first) = cpus.first() else {
        return Ok(None);
    };
    let second = match cfg.placement {
        ThreadPlacement::TwoCpus => cpus.get(1).copied().unwrap_or(first),
        _ => first,
    };
    Ok(Some([first, second]))
}

/// Runs the variants round-robin (order rotated each round); returns, per variant, the
/// transfers of every round.
fn rounds(
    n: usize,
    variants: &[&dyn Fn() -> Result<Transfer, Error>],
) -> Result<Vec<Vec<Transfer>>, Error> {
    let mut out = vec![Vec::new(); variants.len()];
    for r in 0..n {
        for k in 0..variants.len() {
            let i = (k + r) % variants.len();
            out[i].push(variants[i]()?);
        }
    }
    Ok(out)
}

/// Medians of `f` over rounds for `a` and `b`, and the median of the per-round ratio.
fn versus(a: &[Transfer], b: &[Transfer], f: impl Fn(&Transfer) -> f64) -> Versus {
    Versus {
        lowtide: median(a.iter().map(&f).collect()),
        raw_tcp: median(b.iter().map(&f).collect()),
        ratio: median(a.iter().zip(b).map(|(x, y)| f(x) / f(y)).collect()),
    }
}

/// [`versus`] of a figure some transfers may lack (`None` if any does). A ratio whose raw TCP
/// figure is 0 is left out of the median (`null` if none is left).
fn versus_opt(
    a: &[Transfer],
    b: &[Transfer],
    f: impl Fn(&Transfer) -> Option<f64>,
) -> Option<Versus> {
    let fa: Vec<f64> = a.iter().map(&f).collect::<Option<_>>()?;
    let fb: Vec<f64> = b.iter().map(&f).collect::<Option<_>>()?;
    let ratios: Vec<f64> = fa
        .iter()
        .zip(&fb)
        .filter(|(_, y)| **y > 0.0)
        .map(|(x, y)| x / y)
        .collect();
    Some(Versus {
        lowtide: median(fa),
        raw_tcp: median(fb),
        ratio: if ratios.is_empty() {
            f64::NAN
        } else {
            median(ratios)
        },
    })
}

fn machine_cpu(a: &[Transfer], b: &[Transfer]) -> MachineCpu {
    MachineCpu {
        both_ends_s_per_gb: versus_opt(a, b, Transfer::both_ends_cpu_s_per_gb),
        process_s_per_gb: versus_opt(a, b, Transfer::process_cpu_s_per_gb),
        machine_s_per_gb: versus_opt(a, b, Transfer::machine_cpu_s_per_gb),
        ksoftirqd_s_per_gb: versus_opt(a, b, Transfer::ksoftirqd_cpu_s_per_gb),
        sender_side_s_per_gb: versus_opt(a, b, Transfer::sender_side_cpu_s_per_gb),
        receiver_side_s_per_gb: versus_opt(a, b, Transfer::receiver_side_cpu_s_per_gb),
    }
}

/// A judged goal: `value` within `min..=max`; no data (`None`, or not a number) is not met.
fn goal(
    what: &'static str,
    value: Option<f64>,
    samples: usize,
    (min, max): (Option<f64>, Option<f64>),
) -> Goal {
    let value = value.filter(|v| v.is_finite());
    let bound = match (min, max) {
        (Some(lo), Some(hi)) => format!("{lo} to {hi}"),
        (Some(lo), None) => format!(">= {lo}"),
        (None, Some(hi)) => format!("<= {hi}"),
        (None, None) => "-".to_owned(),
    };
    Goal {
        what,
        met: value.is_some_and(|v| min.is_none_or(|lo| v >= lo) && max.is_none_or(|hi| v <= hi)),
        value,
        bound,
        samples,
        judged: true,
    }
}

/// At most `x`.
const fn at_most(x: f64) -> (Option<f64>, Option<f64>) {
    (None, Some(x))
}

/// At least `x`.
const fn at_least(x: f64) -> (Option<f64>, Option<f64>) {
    (Some(x), None)
}

/// A goal on one thread's share of the CPU: reported, not judged.
fn thread_share_goal(what: &'static str, value: f64, samples: usize) -> Goal {
    Goal {
        judged: false,
        ..goal(what, Some(value), samples, at_most(1.3))
    }
}

/// The goal on both ends' CPU per GB: "no data" and not met when the figure has none (a
/// kernel without the counters, a run too short to read them).
fn both_ends_goal(what: &'static str, m: &MachineCpu, samples: usize) -> Goal {
    let r = m.both_ends_s_per_gb.map(|v| v.ratio);
    goal(what, r, samples, at_most(1.3))
}

/// Runs the configured parts.
///
/// ```
/// use lowtide_bench::{BenchConfig, Part};
/// // Goodput of 64 KB messages against raw TCP, 0.2 s per variant.
/// let cfg = BenchConfig { seconds: 0.2, rounds: 1, parts: vec![Part::Goodput], ..BenchConfig::default() };
/// let report = lowtide_bench::run(&cfg)?;
/// let g = report.goodput.expect("the part ran");
/// println!("lowtide/raw TCP goodput: {:.2}", g.mb_s.ratio);
/// assert!(g.mb_s.ratio > 0.0);
/// # Ok::<(), lowtide::Error>(())
/// ```
pub fn run(cfg: &BenchConfig) -> Result<BenchReport, Error> {
    if !(cfg.seconds > 0.0 && cfg.seconds <= 600.0) {
        return Err(
            lowtide::proto::ConfigError::new("bench.seconds", cfg.seconds, "(0, 600]").into(),
        );
    }
    if !(1..=100).contains(&cfg.rounds) {
        return Err(lowtide::proto::ConfigError::new("bench.rounds", cfg.rounds, "1..=100").into());
    }
    if !(1..=100).contains(&cfg.bulk_pairs) {
        let e = lowtide::proto::ConfigError::new("bench.bulk_pairs", cfg.bulk_pairs, "1..=100");
        return Err(e.into());
    }
    let n = cfg.rounds;
    let secs = cfg.seconds / n as f64;
    let cc = || cfg.congestion.clone();
    let probe = machine::Probe::new();
    let run = Run {
        probe: &probe,
        cpus: placement(cfg)?,
    };
    let run = &run;
    let lt = |ctl, mss, pattern| lowtide_transfer(cfg, ctl, mss, pattern, secs, run);
    let mut goals = Vec::new();

    let goodput = if cfg.parts.contains(&Part::Goodput) {
        let bulk = Pattern::Bulk(cfg.bulk_message);
        let r = rounds(
            cfg.bulk_pairs,
            &[&|| lt(ControllerConfig::default(), None, bulk), &|| {
                raw_transfer(cc(), None, bulk, false, secs, run)
            }],
        )?;
        let g = Goodput {
            mb_s: versus(&r[0], &r[1], Transfer::mb_s),
            sender_cpu_s_per_gb: versus(&r[0], &r[1], Transfer::sender_cpu_s_per_gb),
            receiver_cpu_s_per_gb: versus(&r[0], &r[1], Transfer::receiver_cpu_s_per_gb),
            receiver_wakeups_per_gb: versus(&r[0], &r[1], Transfer::receiver_wakeups_per_gb),
            both_cpu_s_per_gb: versus(&r[0], &r[1], Transfer::both_cpu_s_per_gb),
            machine: machine_cpu(&r[0], &r[1]),
            pairs: r[0]
                .iter()
                .zip(&r[1])
                .map(|(a, b)| {
                    let (a, b) = (std::slice::from_ref(a), std::slice::from_ref(b));
                    let one = |f: fn(&Transfer) -> f64| versus(a, b, f);
                    BulkPair {
                        mb_s: one(Transfer::mb_s),
                        receiver_cpu_s_per_gb: one(Transfer::receiver_cpu_s_per_gb),
                        both_cpu_s_per_gb: one(Transfer::both_cpu_s_per_gb),
                        machine: machine_cpu(a, b),
                    }
                })
                .collect(),
        };
        let pairs = cfg.bulk_pairs;
        goals.push(goal(
            "bulk goodput / raw TCP",
            Some(g.mb_s.ratio),
            pairs,
            at_least(0.9),
        ));
        goals.push(thread_share_goal(
            "bulk receiver CPU per GB / raw TCP",
            g.receiver_cpu_s_per_gb.ratio,
            pairs,
        ));
        goals.push(both_ends_goal(
            "bulk CPU per GB, both ends / raw TCP",
            &g.machine,
            pairs,
        ));
        Some(g)
    } else {
        None
    };

    let small_messages = if cfg.parts.contains(&Part::Small) {
        let small = Pattern::Bulk(cfg.small_message);
        let r = rounds(
            n,
            &[&|| lt(ControllerConfig::default(), None, small), &|| {
                raw_transfer(cc(), None, small, true, secs, run)
            }],
        )?;
        let s = SmallMessages {
            msgs_s: versus(&r[0], &r[1], Transfer::msgs_s),
            sender_cpu_s_per_m_msgs: versus(&r[0], &r[1], Transfer::sender_cpu_s_per_m_msgs),
        };
        goals.push(goal(
            "small messages per second",
            Some(s.msgs_s.lowtide),
            n,
            at_least(2e6),
        ));
        Some(s)
    } else {
        None
    };

    let cpu = if cfg.parts.contains(&Part::Cpu) {
        let paced = Pattern::Paced(cfg.paced_message, cfg.paced_rate);
        let r = rounds(
            n,
            &[
                &|| {
                    lt(
                        ControllerConfig::MinBuf { a: 1, b: 3 },
                        cfg.paced_mss,
                        paced,
                    )
                },
                &|| lt(ControllerConfig::Unlimited, cfg.paced_mss, paced),
                &|| raw_transfer(cc(), cfg.paced_mss, paced, false, secs, run),
            ],
        )?;
        let rate = |v: &[Transfer]| median(v.iter().map(Transfer::mb_s).collect());
        let c = CpuCost {
            min_buf: versus(&r[0], &r[2], Transfer::sender_cpu_s_per_gb),
            unlimited: versus(&r[1], &r[2], Transfer::sender_cpu_s_per_gb),
            min_buf_vs_unlimited: versus(&r[0], &r[1], Transfer::sender_cpu_s_per_gb).ratio,
            receiver_min_buf: versus(&r[0], &r[2], Transfer::receiver_cpu_s_per_gb),
            both_min_buf: versus(&r[0], &r[2], Transfer::both_cpu_s_per_gb),
            machine_min_buf: machine_cpu(&r[0], &r[2]),
            achieved_mb_s: [rate(&r[0]), rate(&r[1]), rate(&r[2])],
        };
        goals.push(thread_share_goal(
            "MinBuf sender CPU per GB / raw TCP",
            c.min_buf.ratio,
            n,
        ));
        goals.push(both_ends_goal(
            "paced MinBuf CPU per GB, both ends / raw TCP",
            &c.machine_min_buf,
            n,
        ));
        Some(c)
    } else {
        None
    };

    Ok(BenchReport {
        provenance: Provenance {
            version: env!("CARGO_PKG_VERSION"),
            kernel: kernel_release(),
            config: cfg.clone(),
        },
        goodput,
        small_messages,
        cpu,
        goals,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_figure_without_readings_is_no_data_not_zero() {
        let none = [Transfer::default()];
        let m = machine_cpu(&none, &none);
        assert!(m.both_ends_s_per_gb.is_none() && m.process_s_per_gb.is_none());
        assert!(m.machine_s_per_gb.is_none() && m.ksoftirqd_s_per_gb.is_none());
        assert!(m.sender_side_s_per_gb.is_none() && m.receiver_side_s_per_gb.is_none());
        let json = serde_json::to_value(m).unwrap();
        assert!(json["both_ends_s_per_gb"].is_null());
    }

    /// The goal stays in the report as "no data", judged and not met (it used to vanish).
    #[test]
    fn a_goal_without_data_is_shown_and_not_met() {
        let none = [Transfer::default()];
        let g = both_ends_goal("both ends", &machine_cpu(&none, &none), 3);
        assert!(g.judged && !g.met && g.value.is_none(), "{g:?}");
        assert_eq!(g.shown(), "no data");
        // A ratio that is not a number (every raw TCP figure was 0) is no data too.
        let nan = goal("x", Some(f64::NAN), 3, at_most(1.3));
        assert!(!nan.met && nan.value.is_none());
        let json = serde_json::to_value(&g).unwrap();
        assert!(json["value"].is_null() && json["met"] == false);
    }

    #[test]
    fn thread_share_goals_are_reported_not_judged() {
        let g = thread_share_goal("receiver thread", 1.4, 3);
        assert!(!g.judged && !g.met);
        let both = goal("both ends", Some(1.0), 3, at_most(1.3));
        assert!(both.judged && both.met && both.bound == "<= 1.3");
        assert!(!goal("low", Some(0.8), 3, at_least(0.9)).met);
    }
}
