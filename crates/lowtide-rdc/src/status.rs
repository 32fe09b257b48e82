//! What the agent did: counters for the whole agent and per flow, by reason. Every packet is
//! counted once in `incoming` or `outgoing`, and every outgoing packet leaves through exactly
//! one of `held` (then `released_on_time` or `flushed`) or a `passed` reason.

use std::net::SocketAddrV4;

use serde::Serialize;

use crate::config::Mode;
use crate::driver::sched::Scheduling;
use crate::rtt::RttSource;

/// Why an outgoing packet was not held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassReason {
    /// Not TCP over IPv4, or headers the agent cannot parse.
    NotTcp,
    Malformed,
    /// No incoming data of this flow was seen (or the flow table is full).
    Untracked,
    /// SYN or RST: connection control is never delayed.
    Control,
    /// SACK blocks: data arrived out of order (the paper: never delayed).
    Sack,
    /// A duplicate ACK (same ack and window as the previous one).
    DupAck,
    /// The flow's delay is zero and nothing of it is held.
    NoDelay,
    /// `max_held` packets are already held: fail open.
    HoldFull,
}

/// Outgoing packets passed at once, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PassCounts {
    pub not_tcp: u64,
    pub malformed: u64,
    pub untracked: u64,
    pub control: u64,
    pub sack: u64,
    pub dup_ack: u64,
    pub no_delay: u64,
    pub hold_full: u64,
}

impl PassCounts {
    pub fn add(&mut self, reason: PassReason) {
        let c = match reason {
            PassReason::NotTcp => &mut self.not_tcp,
            PassReason::Malformed => &mut self.malformed,
            PassReason::Untracked => &mut self.untracked,
            PassReason::Control => &mut self.control,
            PassReason::Sack => &mut self.sack,
            PassReason::DupAck => &mut self.dup_ack,
            PassReason::NoDelay => &mut self.no_delay,
            PassReason::HoldFull => &mut self.hold_full,
        };
        *c += 1;
    }

    pub fn total(&self) -> u64 {
        self.not_tcp
            + self.malformed
            + self.untracked
            + self.control
            + self.sack
            + self.dup_ack
            + self.no_delay
            + self.hold_full
    }
}

/// Agent-wide counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    pub incoming: u64,
    pub outgoing: u64,
    /// Incoming packets that are not TCP over IPv4, or cannot be parsed (passed untouched).
    pub incoming_not_tcp: u64,
    pub incoming_malformed: u64,
    /// Incoming packets of flows the table had no room for (passed untouched, CE kept).
    pub incoming_untracked: u64,
    pub flows_created: u64,
    pub flows_expired: u64,
    /// 1-bit: CE marks cleared before the kernel saw them.
    pub ce_cleared: u64,
    /// Exact: delay notifications read (and removed).
    pub delays_read: u64,
    /// Exact: notifications above `max_delay`, clamped.
    pub delays_clamped: u64,
    /// Exact: data packets without a notification (the flow keeps its delay).
    pub delays_absent: u64,
    /// Exact: a notification flag on a packet that cannot carry one (left untouched).
    pub delays_invalid: u64,
    pub held: u64,
    pub released_on_time: u64,
    /// Held packets released more than 1 ms after their release time (the agent woke late),
    /// and the latest such release, µs after its time.
    pub released_late: u64,
    pub max_release_lateness_us: u64,
    /// Held packets released early, in order, ahead of one that had to pass at once.
    pub flushed: u64,
    /// With `release_pacing`: held packets that waited past their time for the pacer, and
    /// the longest such wait, µs.
    pub paced: u64,
    pub max_pace_wait_us: u64,
    /// With `rto_guard`: held packets given a shorter hold than the flow's delay, so they
    /// reach the sender before its RTO.
    pub rto_bounded: u64,
    pub passed: PassCounts,
    /// Outgoing packets of tracked flows marked as the agent's echo, and those that could not
    /// be (not atomic datagrams, or not copied whole into the agent).
    pub echoed: u64,
    pub echo_skipped: u64,
}

/// One flow, as the agent sees it.
#[derive(Debug, Clone, Serialize)]
pub struct FlowStatus {
    /// The receiver's end (this host) and the sender's.
    pub local: SocketAddrV4,
    pub remote: SocketAddrV4,
    /// The delay imposed on its ACKs now.
    pub delay_ms: f64,
    /// The path's round trip without the imposed delay, and its source.
    pub rtt_ms: f64,
    pub rtt_source: RttSource,
    /// 1-bit: the last period's cwnd estimate (segments); 0 before the first period ends.
    pub cwnd_estimate: f64,
    pub data_packets: u64,
    pub data_bytes: u64,
    /// Data packets without the TCP timestamp option.
    pub data_without_timestamps: u64,
    pub ce_marked: u64,
    pub delays_read: u64,
    pub held: u64,
    pub held_now: usize,
    pub released_on_time: u64,
    pub flushed: u64,
    pub max_hold_ms: f64,
    /// The mean hold of the ACKs released on time (None: none was): the delay imposed.
    pub mean_hold_ms: Option<f64>,
    /// 1-bit: the moving share of marked data packets now (`one_bit::MarkShare`).
    pub mark_share: f64,
    pub passed: PassCounts,
    /// 1-bit decisions by outcome.
    pub increases: u64,
    pub decreases: u64,
    pub capped: u64,
    pub periods: u64,
}

/// A snapshot of the agent.
#[derive(Debug, Clone, Serialize)]
pub struct AgentStatus {
    pub mode: Mode,
    pub counters: Counters,
    pub held_now: usize,
    pub flows: Vec<FlowStatus>,
    /// Filled by the NFQUEUE driver; zero for the sans-IO core alone.
    pub driver: DriverCounters,
    /// The driver's final status only, with `DriverConfig::release_log`: every held
    /// packet's release (not serialized: the lab writes them as `releases.csv`), and how
    /// many were over the log's limit.
    #[serde(skip)]
    pub releases: Vec<crate::agent::ReleaseRecord>,
    pub releases_not_kept: u64,
}

/// What the NFQUEUE driver and the kernel reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct DriverCounters {
    /// CPU time the agent's thread used so far.
    pub cpu_seconds: f64,
    /// Packets the kernel dropped because the queue was full (0 with fail-open, which the
    /// agent sets: then they pass unseen and uncounted by the kernel).
    pub queue_dropped: u64,
    /// Packets the kernel could not hand to the agent's socket.
    pub user_dropped: u64,
    /// recv() reported lost messages (ENOBUFS): packets the agent did not see.
    pub overruns: u64,
    /// Verdicts the kernel refused (the packet is then dropped by the kernel).
    pub verdict_errors: u64,
    pub packets_per_batch_max: u64,
    /// How the agent's thread ran (real-time priority or not).
    pub scheduling: Scheduling,
    /// Wake-ups that came more than 1 ms after the deadline the thread slept for (timer,
    /// scheduling), and the latest, µs: the part of a late release that is the thread's
    /// (`counters.released_late` is the whole).
    pub woke_late: u64,
    pub max_wake_lateness_us: u64,
}

impl DriverCounters {
    /// Counts a wake-up `late` after its deadline (`due`: the deadline had passed).
    pub fn on_wake(&mut self, late: std::time::Duration, due: bool) {
        if !due {
            return;
        }
        if late > std::time::Duration::from_millis(1) {
            self.woke_late += 1;
        }
        let us = u64::try_from(late.as_micros()).unwrap_or(u64::MAX);
        self.max_wake_lateness_us = self.max_wake_lateness_us.max(us);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn only_wake_ups_past_their_deadline_count_and_late_means_over_1_ms() {
        let mut d = DriverCounters::default();
        d.on_wake(Duration::ZERO, false);
        d.on_wake(Duration::from_micros(900), true);
        assert_eq!((d.woke_late, d.max_wake_lateness_us), (0, 900));
        d.on_wake(Duration::from_micros(2500), true);
        d.on_wake(Duration::from_micros(1200), true);
        assert_eq!((d.woke_late, d.max_wake_lateness_us), (2, 2500));
    }
}
