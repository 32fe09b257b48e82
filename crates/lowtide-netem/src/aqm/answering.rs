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
//! Our answer: the receiver agent marks the ACKs it sends with an echo (`lowtide_rdc::wire::
//! set_echo`: the RDC flag with a zero delay). The link carrying the ACKs reads the echo and
//! clears it ([`crate::queue::LinkQueue`]); this table remembers, per data flow (the ACK's
//! addresses and ports swapped), when it last echoed. A flow answers while its last echo is
//! younger than `timeout`.
//!
//! Bounded memory: at most `capacity` flows. When full, entries older than `timeout` are
//! forgotten; if none is, the new flow is refused (counted) and treated as not answering, the
//! safe side: its packets are delayed as a FIFO would delay them.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::FlowKey;

/// The table's default size: about 40 bytes an entry with the map's slack, under 2 MB.
pub const MAX_ANSWERING_FLOWS: usize = 32_768;

/// What the table has seen, for reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct AnsweringReport {
    /// Flows that answer now (echoed within the timeout).
    pub flows_now: u64,
    /// Echoes read.
    pub echoes: u64,
    /// Flows added to the table.
    pub learned: u64,
    /// Entries removed because their last echo was older than the timeout.
    pub forgotten: u64,
    /// Echoes of new flows the full table had no room for.
    pub refused: u64,
}

pub struct AnsweringFlows {
    last_echo: HashMap<FlowKey, Instant>,
    timeout: Duration,
    capacity: usize,
    counts: AnsweringReport,
}

impl AnsweringFlows {
    pub fn new(timeout: Duration, capacity: usize) -> Self {
        Self {
            last_echo: HashMap::new(),
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
        if let Some(last) = self.last_echo.get_mut(&data_flow) {
            *last = (*last).max(now);
            return;
        }
        if self.last_echo.len() >= self.capacity {
            self.forget_expired(now);
            if self.last_echo.len() >= self.capacity {
                self.counts.refused += 1;
                return;
            }
        }
        self.counts.learned += 1;
        self.last_echo.insert(data_flow, now);
    }

    /// Whether the receiver of `data_flow` (sender to receiver) answers at `now`.
    pub fn answers(&self, data_flow: &FlowKey, now: Instant) -> bool {
        self.last_echo
            .get(data_flow)
            .is_some_and(|last| now.saturating_duration_since(*last) < self.timeout)
    }

    fn forget_expired(&mut self, now: Instant) {
        let timeout = self.timeout;
        let before = self.last_echo.len();
        self.last_echo
            .retain(|_, last| now.saturating_duration_since(*last) < timeout);
        self.counts.forgotten += (before - self.last_echo.len()) as u64;
    }

    pub fn len(&self) -> usize {
        self.last_echo.len()
    }

    pub fn is_empty(&self) -> bool {
        self.last_echo.is_empty()
    }

    /// The counters, with the flows that answer at `now`.
    pub fn report(&self, now: Instant) -> AnsweringReport {
        AnsweringReport {
            flows_now: self
                .last_echo
                .keys()
                .filter(|k| self.answers(k, now))
                .count() as u64,
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

    #[test]
    fn an_echo_makes_the_data_flow_answer_until_the_timeout() {
        let t = Instant::now();
        let mut table = AnsweringFlows::new(10 * S, 8);
        assert!(!table.answers(&data_flow(1), t));
        table.on_echo(ack_flow(1), t);
        assert!(table.answers(&data_flow(1), t + 9 * S));
        assert!(
            !table.answers(&ack_flow(1), t),
            "the ACKs' own direction does not"
        );
        assert!(!table.answers(&data_flow(2), t), "nor another flow");
        assert!(!table.answers(&data_flow(1), t + 10 * S), "expired");
        // A later echo renews it; an echo that arrives out of order does not age it.
        table.on_echo(ack_flow(1), t + 8 * S);
        table.on_echo(ack_flow(1), t + 7 * S);
        assert!(table.answers(&data_flow(1), t + 17 * S));
        let r = table.report(t + 17 * S);
        assert_eq!((r.flows_now, r.echoes, r.learned), (1, 3, 1));
    }

    #[test]
    fn a_full_table_forgets_expired_flows_then_refuses() {
        let t = Instant::now();
        let mut table = AnsweringFlows::new(10 * S, 4);
        for i in 0..4 {
            table.on_echo(ack_flow(i), t + S * u32::from(i));
        }
        // Full, none expired: a fifth flow is refused and does not answer.
        table.on_echo(ack_flow(4), t + 5 * S);
        assert!(!table.answers(&data_flow(4), t + 5 * S));
        assert_eq!(table.report(t).refused, 1);
        // At 11.5 s flows 0 and 1 (echoed at 0 and 1 s) have expired: room for flow 4.
        table.on_echo(ack_flow(4), t + 11 * S + S / 2);
        assert!(table.answers(&data_flow(4), t + 12 * S));
        assert!(table.answers(&data_flow(3), t + 12 * S));
        assert!(!table.answers(&data_flow(0), t + 12 * S));
        assert_eq!(table.len(), 3);
        let r = table.report(t + 12 * S);
        assert_eq!((r.learned, r.forgotten, r.refused), (5, 2, 1));
        // Never more than the capacity, whatever arrives.
        for i in 100..1000 {
            table.on_echo(ack_flow(i), t + 12 * S);
            assert!(table.len() <= 4);
        }
    }
}
