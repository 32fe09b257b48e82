//! Which flows answer RDC: the RDC cell's table of flows whose receiver runs the agent.
//!
//! Hsiao, Kung and Tan, "Streaming Video over TCP with Receiver-based Delay Control", Section
//! 2.1, argue that an exact-RDC flow is TCP-friendly because it "behaves the same as the
//! traditional TCP connection when the router has a large FIFO buffer and the outgoing link
//! runs at ... ρ times the original": the ACK waits where the data would have. That holds only
//! if every flow through the router meets that same slower FIFO, so the cell must treat a flow
//! whose receiver ignores its notifications differently from one that answers them, and for
//! that it must know which is which. The paper does not say how.
//!
//! Our answer: the receiver agent marks the ACKs it sends with an echo (`lowtide_rdc_wire::
//! set_echo`: the RDC flag with a zero delay). The link carrying the ACKs reads the echo and
//! clears it ([`crate::queue::LinkQueue`]); this table remembers, per data flow (the ACK's
//! addresses and ports swapped), that it echoed.
//!
//! A flow stops answering once it has *sent* for `timeout` without an echo, not once its last
//! echo is older than `timeout`: a receiver's agent echoes on ACKs, and ACKs answer data, so
//! a flow that sends nothing has nothing to be echoed. Measured (docs/rdc.md, "Each remaining
//! timeout's cause"): video streams that dropped to 0 layers stayed silent for 15.7 s, a
//! table that aged entries by the echo's age forgot them, and their restart was held in the
//! cell's delay line as if they had no agent while their later packets, once an echo taught
//! the table again, overtook the held ones: three retransmission timeouts per stream. So the
//! table counts, per flow, the time between its packets since the last echo, each gap at
//! most [`SENDING_GAP`]: a silence counts as one gap, an agent that stops echoing while its
//! flow sends is noticed after `timeout` of sending. (A flow whose agent is gone and that
//! sends in bursts with long silences between is trusted longer: `timeout` of its sending,
//! at most one [`SENDING_GAP`] per silence.)
//!
//! Bounded memory: at most `capacity` flows. When full, flows that no longer answer are
//! forgotten, then flows silent (no packet, no echo) for longer than `timeout`; if none is,
//! the new flow is refused (counted) and treated as not answering, the safe side: its packets
//! are delayed as a FIFO would delay them. A forgotten silent flow that restarts is held until
//! its next echo. A new connection on a remembered flow's addresses and ports inherits its
//! entry and is trusted for `timeout` of sending.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::FlowKey;

/// The table's default size: about 64 bytes an entry with the map's slack, about 2 MB.
pub const MAX_ANSWERING_FLOWS: usize = 32_768;

/// The most one gap between a flow's packets adds to its time sent without an echo: longer
/// than a window-limited flow's gaps under the agents' holds we measured (up to about 0.6 s),
/// short against the timeout, so a silence is one gap.
pub const SENDING_GAP: Duration = Duration::from_secs(1);

/// What the table has seen, for reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct AnsweringReport {
    /// Flows that answer now (sent for less than the timeout since their last echo).
    pub flows_now: u64,
    /// Echoes read.
    pub echoes: u64,
    /// Flows added to the table.
    pub learned: u64,
    /// Entries removed from a full table (no longer answering, or silent past the timeout).
    pub forgotten: u64,
    /// Echoes of new flows the full table had no room for.
    pub refused: u64,
}

/// One data flow's answering state.
#[derive(Debug, Clone, Copy)]
struct Entry {
    last_echo: Instant,
    /// The flow's latest packet after its last echo.
    last_packet: Option<Instant>,
    /// Time the flow has sent since its last echo (gaps capped at [`SENDING_GAP`]).
    unanswered: Duration,
}

impl Entry {
    fn last_heard(&self) -> Instant {
        self.last_packet
            .map_or(self.last_echo, |p| p.max(self.last_echo))
    }
}

pub struct AnsweringFlows {
    flows: HashMap<FlowKey, Entry>,
    timeout: Duration,
    capacity: usize,
    counts: AnsweringReport,
}

impl AnsweringFlows {
    pub fn new(timeout: Duration, capacity: usize) -> Self {
        Self {
            flows: HashMap::new(),
            timeout,
            capacity: capacity.max(1),
            counts: AnsweringReport::default(),
        }
    }

    /// An echo on a packet of `ack_flow` (receiver to sender) at `now`: the data flow the
    /// other way answers.
    pub fn on_echo(&mut self, ack_flow: FlowKey, now: Instant) {
        self.counts.echoes += 1;
        let data_flow = FlowKey {
            src: ack_flow.dst,
            dst: ack_flow.src,
        };
        let answered = Entry {
            last_echo: now,
            last_packet: None,
            unanswered: Duration::ZERO,
        };
        if let Some(entry) = self.flows.get_mut(&data_flow) {
            *entry = Entry {
                last_echo: entry.last_echo.max(now),
                ..answered
            };
            return;
        }
        if self.flows.len() >= self.capacity {
            self.make_room(now);
            if self.flows.len() >= self.capacity {
                self.counts.refused += 1;
                return;
            }
        }
        self.counts.learned += 1;
        self.flows.insert(data_flow, answered);
    }

    /// A packet of `data_flow` (sender to receiver) arrives at `now`; returns whether its
    /// receiver answers.
    pub fn on_packet(&mut self, data_flow: &FlowKey, now: Instant) -> bool {
        let Some(entry) = self.flows.get_mut(data_flow) else {
            return false;
        };
        if let Some(last) = entry.last_packet {
            entry.unanswered += now.saturating_duration_since(last).min(SENDING_GAP);
        }
        entry.last_packet = Some(entry.last_packet.map_or(now, |l| l.max(now)));
        entry.unanswered < self.timeout
    }

    /// Whether the receiver of `data_flow` (sender to receiver) answers, as of its last packet.
    pub fn answers(&self, data_flow: &FlowKey) -> bool {
        self.flows
            .get(data_flow)
            .is_some_and(|e| e.unanswered < self.timeout)
    }

    /// Full: forgets flows that no longer answer, then flows silent past the timeout.
    fn make_room(&mut self, now: Instant) {
        let timeout = self.timeout;
        let before = self.flows.len();
        self.flows.retain(|_, e| e.unanswered < timeout);
        if self.flows.len() >= self.capacity {
            self.flows
                .retain(|_, e| now.saturating_duration_since(e.last_heard()) < timeout);
        }
        self.counts.forgotten += (before - self.flows.len()) as u64;
    }

    pub fn len(&self) -> usize {
        self.flows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    /// The counters, with the flows that answer now.
    pub fn report(&self) -> AnsweringReport {
        AnsweringReport {
            flows_now: self.flows.keys().filter(|k| self.answers(k)).count() as u64,
            ..self.counts
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddrV4;

    const S: Duration = Duration::from_secs(1);

    /// The ACK flow of data flow `i`: receiver 10.2.1.1:5000 to sender 10.1.1.1:(1000 + i).
    fn ack_flow(i: u16) -> FlowKey {
        FlowKey {
            src: SocketAddrV4::new([10, 2, 1, 1].into(), 5000),
            dst: SocketAddrV4::new([10, 1, 1, 1].into(), 1000 + i),
        }
    }

    fn data_flow(i: u16) -> FlowKey {
        let a = ack_flow(i);
        FlowKey {
            src: a.dst,
            dst: a.src,
        }
    }

    /// Flow `i` sends a packet every `gap` from `from` until `until` (exclusive); returns
    /// whether it answered at each.
    fn send(
        table: &mut AnsweringFlows,
        i: u16,
        from: Instant,
        until: Instant,
        gap: Duration,
    ) -> Vec<bool> {
        let mut t = from;
        let mut answered = Vec::new();
        while t < until {
            answered.push(table.on_packet(&data_flow(i), t));
            t += gap;
        }
        answered
    }

    #[test]
    fn an_echo_makes_the_data_flow_answer_until_it_sends_for_the_timeout_without_one() {
        let t = Instant::now();
        let ms = Duration::from_millis(1);
        let mut table = AnsweringFlows::new(10 * S, 8);
        assert!(!table.on_packet(&data_flow(1), t), "never echoed");
        table.on_echo(ack_flow(1), t);
        assert!(table.answers(&data_flow(1)));
        assert!(
            !table.answers(&ack_flow(1)),
            "the ACKs' own direction does not"
        );
        assert!(!table.answers(&data_flow(2)), "nor another flow");
        // The agent is gone: the flow sends a packet every 50 ms and no echo comes back.
        let answered = send(&mut table, 1, t, t + 11 * S, 50 * ms);
        let first_refusal = answered.iter().position(|a| !a).expect("stops answering");
        assert_eq!(
            first_refusal, 200,
            "after 10 s of sending: 200 gaps of 50 ms"
        );
        assert_eq!(table.report().flows_now, 0);
        // An echo makes it answer again.
        table.on_echo(ack_flow(1), t + 11 * S);
        assert!(table.on_packet(&data_flow(1), t + 11 * S));
        let r = table.report();
        assert_eq!((r.flows_now, r.echoes, r.learned), (1, 2, 1));
    }

    #[test]
    fn a_flow_silent_longer_than_the_timeout_still_answers_when_it_restarts() {
        // Docs/rdc.md's case: a video stream at 0 layers sends nothing for 15.7 s, then adds a
        // layer; its agent's echo comes back one round trip (plus the agent's hold) later.
        let t = Instant::now();
        let ms = Duration::from_millis(1);
        let mut table = AnsweringFlows::new(10 * S, 8);
        table.on_echo(ack_flow(1), t);
        // Its last packets get no echo before the silence (their ACKs were lost, or held).
        assert!(send(&mut table, 1, t, t + S, 50 * ms).iter().all(|a| *a));
        let restart = t + S + 15_700 * ms;
        let answered = send(&mut table, 1, restart, restart + 2 * S, 50 * ms);
        assert!(answered.iter().all(|a| *a), "answers from its first packet");
        table.on_echo(ack_flow(1), restart + 600 * ms);
        assert!(table.answers(&data_flow(1)));
        // Whatever the silences, only sending without an echo counts: bursts of 9 packets
        // 50 ms apart, 30 s between them, count 0.4 s each and 1 s per silence, so the 8th
        // burst passes 10 s.
        let mut at = restart + 2 * S;
        let mut answered = Vec::new();
        for _ in 0..20 {
            answered.extend(send(&mut table, 1, at, at + 450 * ms, 50 * ms));
            at += 30 * S;
        }
        let bursts_trusted = answered.iter().position(|a| !a).expect("stops") / 9;
        assert_eq!(bursts_trusted, 7);
    }

    #[test]
    fn a_full_table_forgets_flows_that_stopped_answering_then_silent_ones_then_refuses() {
        let t = Instant::now();
        let ms = Duration::from_millis(1);
        let mut table = AnsweringFlows::new(10 * S, 4);
        for i in 0..4 {
            table.on_echo(ack_flow(i), t);
        }
        // Full, all answering and heard from: a fifth flow is refused and does not answer.
        table.on_echo(ack_flow(4), t + 5 * S);
        assert!(!table.on_packet(&data_flow(4), t + 5 * S));
        assert_eq!(table.report().refused, 1);
        // Flow 0 sends 11 s without an echo: it no longer answers and makes room.
        send(&mut table, 0, t, t + 11 * S, 50 * ms);
        table.on_echo(ack_flow(4), t + 11 * S);
        assert!(table.on_packet(&data_flow(4), t + 11 * S));
        assert!(!table.on_packet(&data_flow(0), t + 11 * S));
        // All four answer and were heard from within the timeout: flow 5 is refused. 9.5 s
        // later flows 1-3 (last heard at 11 s) are silent past the timeout, flow 4 (12 s) not.
        for i in 1..4 {
            table.on_echo(ack_flow(i), t + 11 * S);
        }
        assert!(table.on_packet(&data_flow(4), t + 12 * S));
        table.on_echo(ack_flow(5), t + 12 * S);
        assert_eq!(table.report().refused, 2);
        table.on_echo(ack_flow(5), t + 21 * S + 500 * ms);
        assert!(table.answers(&data_flow(5)));
        assert!(
            table.answers(&data_flow(4)),
            "heard from 9.5 s before: kept"
        );
        assert_eq!(table.len(), 2);
        let r = table.report();
        assert_eq!((r.learned, r.forgotten, r.refused), (6, 4, 2));
        // Never more than the capacity, whatever arrives.
        for i in 100..1000 {
            table.on_echo(ack_flow(i), t + 100 * S);
            assert!(table.len() <= 4);
        }
    }
}
