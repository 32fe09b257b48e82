//! Runs a [`Plan`]: one thread per flow instance, each sleeping until its start time and
//! running until its stop time (or the shared stop flag), all measured from one start instant.
//!
//! Call it from the sender host's namespace thread: threads spawned there inherit the thread's
//! network namespace. If flows of one schedule must start in different namespaces, use
//! [`run_schedule_with`] and spawn each [`FlowJob`] in the right one. The runner returns when
//! every flow has ended, which is bounded by the plan's last stop time plus a connect timeout.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::cbr::{run_cbr, CbrConfig};
use crate::elephant::{run_elephant, ElephantConfig};
use crate::mice::{run_mice, MiceConfig};
use crate::report::{FlowOutcome, FlowReport, ScheduleReport};
use crate::schedule::{FlowKind, Plan, PlannedFlow, ScheduleError};
use crate::{congestion, Stop};

/// Where the servers of one target host listen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// The [`TcpSink`](crate::sink::TcpSink) (elephants and mice).
    pub tcp: SocketAddr,
    /// The [`UdpSink`](crate::sink::UdpSink) (CBR).
    pub udp: SocketAddr,
}

/// One flow's work, ready to run on a thread of the caller's choice.
pub type FlowJob = Box<dyn FnOnce() -> FlowReport + Send + 'static>;

/// Run `plan` against `targets` (indexed by each flow's `target`) on threads spawned here.
/// Setting `stop` ends every flow early.
pub fn run_schedule(
    plan: &Plan,
    targets: &[Target],
    stop: Arc<AtomicBool>,
) -> Result<ScheduleReport, ScheduleError> {
    run_schedule_with(plan, targets, stop, |flow, job| {
        thread::Builder::new()
            .name(format!("traffic-{}-{}", flow.entry, flow.instance))
            .spawn(job)
    })
}

/// As [`run_schedule`], with the caller spawning each flow's thread (e.g. in a namespace).
pub fn run_schedule_with<S>(
    plan: &Plan,
    targets: &[Target],
    stop: Arc<AtomicBool>,
    mut spawn: S,
) -> Result<ScheduleReport, ScheduleError>
where
    S: FnMut(&PlannedFlow, FlowJob) -> io::Result<JoinHandle<FlowReport>>,
{
    for f in &plan.flows {
        if f.target >= targets.len() {
            return Err(ScheduleError::Invalid {
                entry: f.entry,
                field: "target",
                value: f.target.to_string(),
                allowed: format!(
                    "a host index below {} (the number of targets given)",
                    targets.len()
                ),
            });
        }
    }
    // Flow ids are unique within a run and unlikely to collide with another run's at a shared
    // sink: a random high half, entry and instance in the low half.
    let nonce = RandomState::new().hash_one(std::process::id()) & 0xffff_ffff;
    let t0 = Instant::now();
    let mut handles = Vec::with_capacity(plan.flows.len());
    for f in &plan.flows {
        let flow_id = (nonce << 32) | ((f.entry as u64 & 0xffff) << 16) | u64::from(f.instance);
        let base = blank_report(f, flow_id);
        let job_flow = f.clone();
        let target = targets[f.target];
        let stop = stop.clone();
        let job: FlowJob = Box::new(move || run_one(&job_flow, target, flow_id, t0, stop));
        match spawn(f, job) {
            Ok(h) => handles.push((base, Some(h))),
            Err(e) => {
                let mut r = base;
                r.outcome = FlowOutcome::Failed {
                    error: format!("spawning the flow thread: {e}"),
                };
                handles.push((r, None));
            }
        }
    }
    let flows = handles
        .into_iter()
        .map(|(base, h)| match h.map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => FlowReport {
                outcome: FlowOutcome::Failed {
                    error: "the flow thread panicked".into(),
                },
                ..base
            },
            None => base,
        })
        .collect();
    Ok(ScheduleReport {
        kernel_default_congestion_control: congestion::kernel_default(),
        available_congestion_control: congestion::available(),
        duration_s: t0.elapsed().as_secs_f64(),
        flows,
    })
}

fn blank_report(f: &PlannedFlow, flow_id: u64) -> FlowReport {
    let (direction, cc) = match &f.kind {
        FlowKind::Elephant {
            congestion_control,
            direction,
            ..
        }
        | FlowKind::Mice {
            congestion_control,
            direction,
            ..
        } => (*direction, Some(congestion_control.clone())),
        FlowKind::Cbr { .. } => (crate::Direction::Upload, None),
    };
    FlowReport {
        entry: f.entry,
        instance: f.instance,
        flow_id,
        kind: f.kind.name(),
        direction,
        congestion_control: cc,
        target: f.target,
        start_s: f.start.as_secs_f64(),
        stop_s: f.stop.as_secs_f64(),
        started_at_s: None,
        bytes: 0,
        goodput_bps: 0.0,
        outcome: FlowOutcome::NotStarted,
    }
}

fn run_one(
    f: &PlannedFlow,
    target: Target,
    flow_id: u64,
    t0: Instant,
    flag: Arc<AtomicBool>,
) -> FlowReport {
    let mut report = blank_report(f, flow_id);
    let stop = Stop::new(flag, t0 + f.stop);
    if !stop.sleep_until(t0 + f.start) {
        return report;
    }
    report.started_at_s = Some(t0.elapsed().as_secs_f64());
    let result = match &f.kind {
        FlowKind::Elephant {
            congestion_control,
            direction,
            window,
        } => run_elephant(
            &ElephantConfig {
                server: target.tcp,
                congestion_control: congestion_control.clone(),
                direction: *direction,
                drain: Duration::ZERO,
                window: *window,
            },
            &stop,
        )
        .map(|r| (r.bytes, r.goodput_bps, FlowOutcome::Elephant(r))),
        FlowKind::Mice {
            congestion_control,
            direction,
            bytes,
            gap,
        } => run_mice(
            &MiceConfig {
                server: target.tcp,
                congestion_control: congestion_control.clone(),
                direction: *direction,
                bytes: *bytes,
                gap: *gap,
                max_transfers: None,
            },
            &stop,
        )
        .map(|r| (r.bytes, r.goodput_bps, FlowOutcome::Mice(r))),
        FlowKind::Cbr {
            rate_bps,
            packet_size,
        } => run_cbr(
            &CbrConfig {
                server: target.udp,
                rate_bps: *rate_bps,
                packet_size: *packet_size,
                flow_id,
            },
            &stop,
        )
        .map(|r| {
            (
                r.sent * r.packet_size as u64,
                r.sent_bps,
                FlowOutcome::Cbr(r),
            )
        }),
    };
    match result {
        Ok((bytes, goodput, outcome)) => {
            report.bytes = bytes;
            report.goodput_bps = goodput;
            report.outcome = outcome;
        }
        Err(e) => {
            tracing::warn!(entry = f.entry, instance = f.instance, error = %e, "cross-traffic flow failed");
            report.outcome = FlowOutcome::Failed {
                error: e.to_string(),
            }
        }
    }
    report
}
