//! One variant of an RDC scenario on its own emulated dumbbell: the variant's queue
//! management on the forward bottleneck, the agent in the receivers that have one, the flows,
//! and what the bottleneck saw from `measure_from_s` on.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lowtide_netem::stats::{DroppedSegment, LateDelivery, QueueSample};
use lowtide_netem::{Dumbbell, Host, LinkReport, RunOptions};
use lowtide_rdc::agent::ReleaseRecord;

use super::agents::{AgentReport, Agents};
use super::flows::{self, FlowPlan, ReceiverRecord, SenderRecord};
use super::scenario::{RdcScenario, RdcVariant};
use super::timing::CpuTimes;
use crate::LabError;
use lowtide_media::rdc_video::TcpSourceOptions;

/// Everything one variant's trial recorded.
#[derive(Debug, Clone)]
pub struct TrialRecord {
    pub variant: String,
    pub plans: Vec<FlowPlan>,
    /// Per flow (None: that side failed; `errors` says why).
    pub senders: Vec<Option<SenderRecord>>,
    pub receivers: Vec<Option<ReceiverRecord>>,
    /// The forward bottleneck from `measure_from_s` to the end.
    pub forward: Option<LinkReport>,
    /// The forward queue after each dequeue, `t_us` counted from the flows' origin (`t0`).
    pub queue: Vec<QueueSample>,
    /// Seconds the forward link was measured for.
    pub measured_s: f64,
    pub agents: Vec<AgentReport>,
    /// Each agent flow's delay over the run, read from the agents' status at every poll of
    /// the trial's loop (about twice a second).
    pub agent_delays: Vec<AgentDelaySample>,
    /// Every held ACK's release, by receiver, times from the flows' origin (`releases.csv`).
    pub releases: Vec<(usize, ReleaseRecord)>,
    /// Packets the emulator delivered more than 1 ms late, by link ("forward": the data's
    /// bottleneck, "reverse": the ACKs'), times from the flows' origin.
    pub late_deliveries: Vec<(&'static str, LateDelivery)>,
    /// The TCP segments the forward bottleneck dropped from `measure_from_s` on, times from
    /// the flows' origin.
    pub drops: Vec<DroppedSegment>,
    /// The machine's CPU counters at the start and the end of the measured window.
    pub cpu: Option<(CpuTimes, CpuTimes)>,
    pub errors: Vec<String>,
}

/// One agent flow's delay at one poll.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentDelaySample {
    /// Seconds from the flows' origin.
    pub t_s: f64,
    pub receiver: usize,
    /// The sender's port (the flow).
    pub remote_port: u16,
    pub delay_ms: f64,
    /// 1-bit: the moving share of marked data packets.
    pub mark_share: f64,
}

/// Runs one variant; a failure of the network or the agent is an error, a failed flow is
/// recorded in `errors`.
pub fn run_variant(
    s: &RdcScenario,
    v: &RdcVariant,
    progress: &mut dyn FnMut(&str),
) -> Result<TrialRecord, LabError> {
    let r = &s.rdc;
    let starts = s.starts();
    let plans: Vec<FlowPlan> = (0..r.flows)
        .map(|i| FlowPlan {
            index: i,
            start_s: starts[i],
            port: r.port + i as u16,
            packet_bytes: r.packet_bytes,
            window_packets: r.window_packets,
            congestion: r.congestion.clone(),
            bin: Duration::from_secs_f64(r.bin_ms / 1000.0),
            sample: Duration::from_secs_f64(r.sample_ms / 1000.0),
            duration: Duration::from_secs_f64(r.duration_s),
            video: r.video.as_ref().map(|v| TcpSourceOptions {
                source: v.source(r),
                payload_bytes: flows::payload_of(r.packet_bytes),
                occupancy: v.occupancy,
                window_bytes: Some(flows::window_bytes(r.window_packets, r.packet_bytes)),
            }),
        })
        .collect();
    progress(&format!("{}: building the network", v.name));
    let net = Dumbbell::new(
        s.topology_of(v),
        RunOptions {
            seed: r.seed,
            ..RunOptions::default()
        },
    )?;
    if !v.ecn_fallback {
        for h in net.senders() {
            h.sysctl("net.ipv4.tcp_ecn_fallback", "0")?;
        }
    }
    for (key, value) in &r.host_sysctls {
        for h in net.senders() {
            h.sysctl(key, value)?;
        }
        for h in net.receivers() {
            h.sysctl(key, value)?;
        }
    }
    if v.receiver_quickack {
        for r in 0..s.topology.receivers {
            ack_every_segment(net.receiver(r))?;
        }
    }
    // Declared after `net`: dropped (stopped, chains removed) before the namespaces go.
    let agents = match v.agent {
        Some(mode) => {
            // One agent per receiver host, for the ports of its flows that have one.
            let mut ports: Vec<Vec<u16>> = vec![vec![]; s.topology.receivers];
            for f in (0..r.flows).filter(|&f| v.has_agent(f)) {
                ports[s.host_of(f)].push(plans[f].port);
            }
            let agent = lowtide_rdc::AgentConfig {
                mode,
                max_increase: v
                    .agent_max_increase_ms
                    .map(|ms| Duration::from_secs_f64(ms / 1000.0)),
                full_mark_delay: s.agent_full_mark_delay(v),
                release_pacing: v.agent_release_pacing,
                rto_guard: v
                    .agent_rto_guard_ms
                    .map(|ms| Duration::from_secs_f64(ms / 1000.0)),
                ..lowtide_rdc::AgentConfig::default()
            };
            Some(Agents::start(&net, &agent, v.agent_realtime, &ports)?)
        }
        None => None,
    };
    let t0 = Instant::now();
    let mut receivers = vec![];
    for p in &plans {
        let plan = p.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        receivers.push(
            net.receiver(s.host_of(p.index))
                .spawn("rdc-sink", move || {
                    flows::receive(&plan, t0, move || {
                        let _ = tx.send(());
                    })
                })?,
        );
        // Listening before any sender connects (a failed receiver ends its wait too).
        let _ = rx.recv_timeout(Duration::from_secs(5));
    }
    let mut senders = vec![];
    for p in &plans {
        let plan = p.clone();
        let host = s.host_of(p.index);
        let dst = SocketAddr::from((net.receiver(host).addr(), p.port));
        senders.push(
            net.sender(host)
                .spawn("rdc-source", move || flows::send(&plan, dst, t0))?,
        );
    }
    let from = t0 + Duration::from_secs_f64(r.measure_from_s);
    let end = t0 + Duration::from_secs_f64(r.duration_s);
    let mut reset = false;
    let mut agent_delays = vec![];
    let mut cpu_from = None;
    let at_us = || t0.elapsed().as_micros() as u64;
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        if !reset && now >= from {
            net.forward().reset();
            cpu_from = CpuTimes::read(at_us());
            reset = true;
        }
        if let Some(e) = net.failure() {
            return Err(e.into());
        }
        let next = if reset { end } else { from };
        std::thread::sleep(
            next.saturating_duration_since(now)
                .min(Duration::from_millis(500)),
        );
        let statuses = agents.as_ref().map_or_else(Vec::new, |a| a.statuses());
        let t_s = t0.elapsed().as_secs_f64();
        for (receiver, status) in &statuses {
            agent_delays.extend(status.flows.iter().map(|f| AgentDelaySample {
                t_s,
                receiver: *receiver,
                remote_port: f.remote.port(),
                delay_ms: f.delay_ms,
                mark_share: f.mark_share,
            }));
        }
        let held = statuses.iter().map(|(_, s)| s.held_now).sum::<usize>();
        progress(&format!(
            "{}: {:.0} / {:.0} s{}",
            v.name,
            t0.elapsed().as_secs_f64(),
            r.duration_s,
            if agents.is_some() {
                format!(", {held} ACKs held")
            } else {
                String::new()
            }
        ));
    }
    let forward = net.forward().report();
    let cpu = cpu_from.zip(CpuTimes::read(at_us()));
    // The emulator counts from the network's start, the flows from `t0` (after the agents
    // started): one origin for every figure, or the queue plot runs seconds ahead of the
    // layers and packets it explains (100 streams take several seconds to set up).
    let origin_us = t0
        .saturating_duration_since(net.forward().started())
        .as_micros() as u64;
    // Only the window: after its end the agents are stopped, which releases every held ACK.
    let end_us = (r.duration_s * 1e6) as u64;
    let queue = net
        .forward()
        .queue_samples()
        .into_iter()
        .map(|q| QueueSample {
            t_us: q.t_us.saturating_sub(origin_us),
            ..q
        })
        .filter(|q| q.t_us <= end_us)
        .collect();
    let drops = net
        .forward()
        .dropped_segments()
        .into_iter()
        .map(|d| DroppedSegment {
            t_us: d.t_us.saturating_sub(origin_us),
            ..d
        })
        .collect();
    let measured_s = r.duration_s - r.measure_from_s;
    let mut errors = vec![];
    let senders: Vec<Option<SenderRecord>> = senders
        .into_iter()
        .enumerate()
        .map(|(i, h)| join(format!("flow {i} sender"), h, &mut errors))
        .collect();
    let receivers: Vec<Option<ReceiverRecord>> = receivers
        .into_iter()
        .enumerate()
        .map(|(i, h)| join(format!("flow {i} receiver"), h, &mut errors))
        .collect();
    let mut agents = agents.map(|a| a.stop(&net)).unwrap_or_default();
    let shift = |t: u64| t.saturating_sub(origin_us);
    let mut releases = vec![];
    for a in &mut agents {
        let receiver = a.receiver;
        if let Some(st) = a.status.as_mut() {
            releases.extend(std::mem::take(&mut st.releases).into_iter().map(|r| {
                let r = ReleaseRecord {
                    held_us: shift(r.held_us),
                    due_us: shift(r.due_us),
                    left_us: shift(r.left_us),
                    ..r
                };
                (receiver, r)
            }));
        }
    }
    let late_deliveries = [("forward", net.forward()), ("reverse", net.reverse())]
        .into_iter()
        .flat_map(|(link, stats)| {
            stats.late_deliveries().into_iter().map(move |d| {
                let d = LateDelivery {
                    t_us: d.t_us.saturating_sub(origin_us),
                    ..d
                };
                (link, d)
            })
        })
        .collect();
    for a in &agents {
        if let Some(e) = &a.error {
            errors.push(format!("receiver {} agent: {e}", a.receiver));
        }
        if !a.chains_left.is_empty() {
            errors.push(format!(
                "receiver {} agent left iptables chains behind: {}",
                a.receiver,
                a.chains_left.join(", ")
            ));
        }
    }
    Ok(TrialRecord {
        variant: v.name.clone(),
        plans,
        senders,
        receivers,
        forward: Some(forward),
        queue,
        measured_s,
        agents,
        agent_delays,
        releases,
        late_deliveries,
        drops,
        cpu,
        errors,
    })
}

/// A flow thread's result; its failure goes to `errors`.
fn join<T>(
    what: String,
    h: std::thread::JoinHandle<Result<T, String>>,
    errors: &mut Vec<String>,
) -> Option<T> {
    match h.join() {
        Ok(Ok(x)) => Some(x),
        Ok(Err(e)) => {
            errors.push(format!("{what}: {e}"));
            None
        }
        Err(_) => {
            errors.push(format!("{what}: panicked"));
            None
        }
    }
}

/// Makes `host` acknowledge every segment, as the paper's ns-2 sink does: Linux delays ACKs
/// (one per two full segments) unless a route says `quickack` (ip-route(8)), so each of the
/// host's routes is changed to carry it.
fn ack_every_segment(host: &Host) -> Result<(), LabError> {
    let what = || format!("turning on quickack in host {}", host.name());
    let routes = ip(host, &["-4", "route", "show"]).map_err(|e| LabError::io(what(), e))?;
    for change in quickack_changes(&routes).map_err(|e| LabError::io(what(), e))? {
        ip(host, &change).map_err(|e| LabError::io(what(), e))?;
    }
    Ok(())
}

/// The `ip` arguments that add `quickack 1` to each route of an `ip -4 route show` listing.
/// A host without routes is an error: the variant would run with delayed ACKs unannounced.
fn quickack_changes(routes: &str) -> Result<Vec<Vec<&str>>, String> {
    let changes: Vec<Vec<&str>> = routes
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|route| {
            let mut args = vec!["route", "change"];
            args.extend(route.split_whitespace());
            args.extend(["quickack", "1"]);
            args
        })
        .collect();
    if changes.is_empty() {
        return Err("the host has no IPv4 routes to carry `quickack`".into());
    }
    Ok(changes)
}

/// Runs `ip ARGS` in `host`; its standard output, or why it failed (exit status and stderr).
fn ip(host: &Host, args: &[&str]) -> Result<String, String> {
    let out = host
        .command("ip")
        .args(args)
        .output()
        .map_err(|e| format!("`ip {}`: {e}", args.join(" ")))?;
    if !out.status.success() {
        return Err(format!(
            "`ip {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::quickack_changes;

    #[test]
    fn quickack_is_added_to_every_route() {
        let routes = "10.0.1.0/24 dev veth0 proto kernel scope link src 10.0.1.2 \n\
                      default via 10.0.1.1 dev veth0\n\n";
        let changes = quickack_changes(routes).unwrap();
        assert_eq!(changes.len(), 2);
        assert_eq!(
            changes[1],
            ["route", "change", "default", "via", "10.0.1.1", "dev", "veth0", "quickack", "1"]
        );
        assert_eq!(changes[0][2], "10.0.1.0/24");
        assert_eq!(changes[0].last(), Some(&"1"));
    }

    #[test]
    fn a_host_without_routes_is_an_error() {
        let err = quickack_changes(" \n").unwrap_err();
        assert!(err.contains("no IPv4 routes"), "{err}");
    }
}
