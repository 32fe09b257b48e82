//! The RDC agent (`lowtide-rdc`) in the receivers' namespaces for one trial: started before
//! the flows, for the flows' ports only, and stopped after them. Stopping releases every held
//! ACK and removes the agent's iptables chains; a dropped [`Agents`] (an error or a panic in
//! the trial) stops them the same way, before the namespaces go. After the stop the
//! receivers' mangle tables are read again: a chain of ours still there is reported.

use lowtide_netem::Dumbbell;
use lowtide_rdc::iptables::{self, Selection};
use lowtide_rdc::{AgentConfig, AgentHandle, AgentStatus, DriverConfig};
use serde::Serialize;
use std::time::Instant;

use crate::LabError;

/// Held ACKs whose release each agent records (`releases.csv`): Fig. 3's 30 s hold about
/// 80,000 per agent; 40 bytes each.
pub const RELEASE_LOG: usize = 500_000;

/// One receiver's agent after the run.
#[derive(Debug, Clone, Serialize)]
pub struct AgentReport {
    /// The receiver host, and the ports of the flows it served.
    pub receiver: usize,
    pub ports: Vec<u16>,
    /// Its final counters (None when it failed to stop cleanly: `error` says why).
    pub status: Option<AgentStatus>,
    pub error: Option<String>,
    /// iptables chains of the agent found in the receiver after it stopped (should be none).
    pub chains_left: Vec<String>,
}

/// Running agents, one per receiver that has one.
pub struct Agents {
    running: Vec<(usize, Vec<u16>, AgentHandle)>,
}

impl Agents {
    /// Starts an agent with `agent`'s settings (its thread real-time if `realtime`) in every
    /// receiver host `r` with ports in `ports[r]`, for those ports. Each records its held
    /// ACKs' releases ([`RELEASE_LOG`]) in µs since the network's start.
    pub fn start(
        net: &Dumbbell,
        agent: &AgentConfig,
        realtime: bool,
        ports: &[Vec<u16>],
    ) -> Result<Self, LabError> {
        let origin: Instant = net.forward().started();
        let mut agents = Agents { running: vec![] };
        for (receiver, ports) in ports.iter().enumerate().filter(|(_, p)| !p.is_empty()) {
            let cfg = DriverConfig {
                agent: agent.clone(),
                selection: Selection {
                    ports: ports.clone(),
                    loopback: false,
                },
                realtime,
                release_log: RELEASE_LOG,
                log_origin: Some(origin),
                ..DriverConfig::default()
            };
            let handle = net
                .receiver(receiver)
                .run(move || AgentHandle::start(cfg))?
                .map_err(|e| {
                    LabError::io(format!("starting the RDC agent in receiver {receiver}"), e)
                })?;
            // Pushed at once: an error for a later receiver drops (stops) the earlier ones.
            agents.running.push((receiver, ports.clone(), handle));
        }
        Ok(agents)
    }

    /// The latest status of each agent, by receiver.
    pub fn statuses(&self) -> Vec<(usize, AgentStatus)> {
        self.running
            .iter()
            .map(|(r, _, h)| (*r, h.status()))
            .collect()
    }

    /// Stops every agent and checks that its chains are gone.
    pub fn stop(mut self, net: &Dumbbell) -> Vec<AgentReport> {
        let running = std::mem::take(&mut self.running);
        running
            .into_iter()
            .map(|(receiver, ports, handle)| {
                let (status, error) = match handle.stop() {
                    Ok(s) => (Some(s), None),
                    Err(e) => (None, Some(e.to_string())),
                };
                let chains_left = chains_in(net, receiver);
                AgentReport {
                    receiver,
                    ports,
                    status,
                    error,
                    chains_left,
                }
            })
            .collect()
    }
}

/// Chains of the agent in receiver `receiver`'s mangle table, with every iptables backend.
pub fn chains_in(net: &Dumbbell, receiver: usize) -> Vec<String> {
    net.receiver(receiver)
        .run(|| {
            iptables::TOOLS
                .iter()
                .flat_map(|t| iptables::our_chains(t))
                .collect::<Vec<_>>()
        })
        .unwrap_or_else(|e| vec![format!("(could not look: {e})")])
}
