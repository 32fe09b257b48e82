//! The bottleneck queue: a FIFO with a packet or byte limit, an AQM control law, and a
//! counter for every drop and mark. Our rate cell ([`crate::cells::rate`]) drains it as a
//! [`Backlog`], at the logical times the link's schedule gives; it also implements rattan's
//! `PacketQueue`, so any rattan bandwidth cell can drain it (at wall-clock times).
//!
//! Semantics (as ns-2 and mahimahi): an arriving packet is dropped if the queue is full,
//! else the AQM may drop or mark it, else it is queued; CoDel decides again at dequeue.
//! Sojourn is the time from arrival to the moment the link takes the packet.
//!
//! RDC adds two things ([`crate::aqm::rdc`], "TCP-friendliness"): a delay line, where a packet
//! the law holds ([`Verdict::Hold`]) waits before it joins the FIFO (at its due time, as an
//! arrival the law has already judged: only the queue limit applies again), and, on the link
//! carrying the ACKs, an echo reader that records the agents' echoes in the opposite cell's
//! table of answering flows and clears them, so the sender never sees one.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rattan_core::cells::bandwidth::queue::PacketQueue;
use rattan_core::cells::Packet;

use crate::aqm::{AnsweringFlows, Aqm, Arrival, QueueState, Reason, Verdict};
use crate::delay_line::DelayLine;
use crate::ecn;
use crate::link::Backlog;
use crate::stats::LinkStats;

pub struct LinkQueue<P> {
    packets: VecDeque<P>,
    bytes: usize,
    limit_packets: Option<usize>,
    limit_bytes: Option<usize>,
    aqm: Box<dyn Aqm>,
    stats: Arc<LinkStats>,
    /// Packets the law holds before they join the FIFO.
    held: DelayLine<P>,
    /// Where echoes seen on this link are recorded (the opposite link's RDC cell).
    echoes: Option<Arc<Mutex<AnsweringFlows>>>,
}

/// rattan asks every queue for a configuration type it can send at run time; ours is fixed
/// when the topology is built, so the only run-time change is a new pair of limits.
#[derive(Debug, Clone, Copy)]
pub struct LinkQueueLimits {
    pub packets: Option<usize>,
    pub bytes: Option<usize>,
}

impl<P: Packet> LinkQueue<P> {
    pub fn new(limits: LinkQueueLimits, aqm: Box<dyn Aqm>, stats: Arc<LinkStats>) -> Self {
        if let Some(table) = aqm.answering_flows() {
            stats.attach_answering(table);
        }
        Self {
            packets: VecDeque::new(),
            bytes: 0,
            limit_packets: limits.packets,
            limit_bytes: limits.bytes,
            held: DelayLine::new(aqm.delay_line_bytes()),
            aqm,
            stats,
            echoes: None,
        }
    }

    /// The table of answering flows of this link's RDC cell, if it has one.
    pub fn answering_flows(&self) -> Option<Arc<Mutex<AnsweringFlows>>> {
        self.aqm.answering_flows()
    }

    /// Reads the RDC agents' echoes on this link into `table` (the opposite link's cell's).
    pub fn read_echoes_into(&mut self, table: Arc<Mutex<AnsweringFlows>>) {
        self.echoes = Some(table);
    }

    /// When the first held packet is due to join the FIFO.
    pub fn next_release(&self) -> Option<Instant> {
        self.held.next_due()
    }

    /// Held packets due at `now` join the FIFO, each at its due time (the queue limit may
    /// still drop it).
    pub fn release_held(&mut self, now: Instant) {
        while let Some((mut packet, due)) = self.held.pop_due(now) {
            packet.delay_until(due.into());
            let size = packet.l3_length();
            if self.would_overflow(size) {
                self.stats
                    .dropped_frame(Reason::QueueFull, packet.as_slice(), due);
                continue;
            }
            self.bytes += size;
            self.packets.push_back(packet);
        }
    }

    /// Records and clears an RDC agent's echo.
    fn read_echo(&self, packet: &mut P, now: Instant) {
        let Some(table) = &self.echoes else { return };
        if !ecn::is_rdc_echo(packet.as_slice()) {
            return;
        }
        if let Some(tcp) = ecn::tcp_flow(packet.as_slice()) {
            let mut table = table.lock().unwrap_or_else(|p| p.into_inner());
            table.on_echo(tcp.key, now);
        }
        ecn::clear_rdc_flag(packet.as_raw_buffer());
    }

    fn state(&self) -> QueueState {
        QueueState {
            packets: self.packets.len(),
            bytes: self.bytes,
        }
    }

    fn would_overflow(&self, size: usize) -> bool {
        self.limit_packets.is_some_and(|l| self.packets.len() >= l)
            || self.limit_bytes.is_some_and(|l| self.bytes + size > l)
    }

    /// Applies a verdict to the packet; returns whether the packet goes on.
    fn apply(&self, packet: &mut P, verdict: Verdict, now: Instant) -> bool {
        match verdict {
            Verdict::Pass => {}
            Verdict::Mark(reason) => {
                if ecn::set_ce(packet.as_raw_buffer()) {
                    self.stats.marked(reason);
                }
            }
            Verdict::Stamp(delay) => match ecn::stamp_rdc_delay(packet.as_raw_buffer(), delay) {
                Some(written) => self.stats.stamped(written),
                None => self.stats.stamp_skipped(),
            },
            Verdict::Spare(reason) => self.stats.spared(reason),
            // Put in the delay line by `enqueue`, never applied here.
            Verdict::Hold(..) => {}
            Verdict::Drop(reason) => {
                self.stats.dropped_frame(reason, packet.as_slice(), now);
                return false;
            }
        }
        true
    }

    /// A packet that reached the link and was lost before the queue (a blackhole outage):
    /// counted as arrived and dropped, as the queue's own drops are.
    pub fn lose(&self, packet: &P, reason: Reason) {
        self.stats.arrived(packet.l2_length());
        let now = packet.get_timestamp().into_std();
        self.stats.dropped_frame(reason, packet.as_slice(), now);
    }

    /// The link takes the head packet at `now` (CoDel may drop packets on the way).
    pub fn dequeue_at(&mut self, now: Instant) -> Option<P> {
        while let Some(mut packet) = self.packets.pop_front() {
            self.bytes -= packet.l3_length();
            let sojourn = now.saturating_duration_since(packet.get_timestamp().into_std());
            let ect = ecn::is_ecn_capable(packet.as_slice());
            let verdict = self.aqm.on_departure(sojourn, self.state(), ect, now);
            if !self.apply(&mut packet, verdict, now) {
                continue;
            }
            self.stats
                .dequeued(now, self.packets.len(), self.bytes, sojourn);
            return Some(packet);
        }
        None
    }
}

impl<P: Packet> Backlog for LinkQueue<P> {
    type Packet = P;

    fn is_empty(&self) -> bool {
        self.packets.is_empty()
    }

    fn head_arrival(&self) -> Option<Instant> {
        self.packets.front().map(|p| p.get_timestamp().into_std())
    }

    fn pop(&mut self, at: Instant) -> Option<P> {
        self.dequeue_at(at)
    }

    fn size(packet: &P) -> usize {
        packet.l3_length()
    }

    fn arrival(packet: &P) -> Instant {
        packet.get_timestamp().into_std()
    }
}

impl<P: Packet> PacketQueue<P> for LinkQueue<P> {
    type Config = LinkQueueLimits;

    fn configure(&mut self, limits: Self::Config) {
        self.limit_packets = limits.packets;
        self.limit_bytes = limits.bytes;
    }

    fn enqueue(&mut self, mut packet: P) {
        let size = packet.l3_length();
        self.stats.arrived(packet.l2_length());
        // The packet's timestamp is the logical time it reached the queue.
        let now = packet.get_timestamp().into_std();
        if self.would_overflow(size) {
            self.stats
                .dropped_frame(Reason::QueueFull, packet.as_slice(), now);
            return;
        }
        self.read_echo(&mut packet, now);
        let arrival = Arrival {
            bytes: size,
            ecn_capable: ecn::is_ecn_capable(packet.as_slice()),
            tcp: ecn::tcp_flow(packet.as_slice()),
        };
        let verdict = self.aqm.on_arrival(self.state(), arrival, now);
        if let Verdict::Hold(delay, reason) = verdict {
            match self.held.push(packet, size, now + delay) {
                Ok(()) => self.stats.held(reason, delay),
                Err(p) => self
                    .stats
                    .dropped_frame(Reason::RdcHoldFull, p.as_slice(), now),
            }
            return;
        }
        if !self.apply(&mut packet, verdict, now) {
            return;
        }
        self.bytes += size;
        self.packets.push_back(packet);
    }

    fn dequeue(&mut self) -> Option<P> {
        // A rattan cell calls this when its link is free, without the logical time: the wall
        // clock is within the emulator's lateness of it.
        let now = Instant::now();
        self.release_held(now);
        self.dequeue_at(now)
    }

    fn is_empty(&self) -> bool {
        self.packets.is_empty()
    }

    fn get_front_size(&self) -> Option<usize> {
        self.packets.front().map(|p| p.l3_length())
    }

    fn length(&self) -> usize {
        self.packets.len()
    }

    fn retain<F>(&mut self, mut f: F)
    where
        F: FnMut(&P) -> bool,
    {
        self.packets.retain(|p| f(p));
        self.bytes = self.packets.iter().map(|p| p.l3_length()).sum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aqm::DropTail;
    use rattan_core::cells::StdPacket;
    use std::time::{Duration, Instant};

    /// A 1514-byte Ethernet frame carrying a 1500-byte IPv4 packet, ECT(0) if `ect`.
    fn frame(ect: bool) -> StdPacket {
        let mut f = vec![0u8; 1514];
        f[12] = 0x08;
        f[14] = 0x45;
        f[15] = if ect { 0b10 } else { 0 };
        f[16] = 0x05;
        f[17] = 0xdc;
        StdPacket::from_raw_buffer(&f)
    }

    fn queue(
        packets: Option<usize>,
        bytes: Option<usize>,
    ) -> (LinkQueue<StdPacket>, Arc<LinkStats>) {
        queue_with(Box::new(DropTail), LinkQueueLimits { packets, bytes })
    }

    fn queue_with(
        aqm: Box<dyn Aqm>,
        limits: LinkQueueLimits,
    ) -> (LinkQueue<StdPacket>, Arc<LinkStats>) {
        let stats = Arc::new(LinkStats::new(Instant::now()));
        (LinkQueue::new(limits, aqm, stats.clone()), stats)
    }

    const TEN_PACKETS: LinkQueueLimits = LinkQueueLimits {
        packets: Some(10),
        bytes: None,
    };

    #[test]
    fn drop_tail_drops_only_at_the_packet_limit() {
        let (mut q, stats) = queue(Some(3), None);
        for _ in 0..5 {
            q.enqueue(frame(false));
        }
        assert_eq!(q.length(), 3);
        let r = stats.report();
        assert_eq!(r.drops.get("queue_full"), Some(&2));
        assert_eq!(r.arrived_packets, 5);
        while q.dequeue().is_some() {}
        assert_eq!(q.bytes, 0);
        assert_eq!(stats.report().max_queue_packets, 2);
    }

    #[test]
    fn byte_limit_counts_ip_bytes() {
        let (mut q, stats) = queue(None, Some(3000));
        for _ in 0..3 {
            q.enqueue(frame(false));
        }
        assert_eq!(q.length(), 2);
        assert_eq!(stats.report().total_drops(), 1);
    }

    struct AlwaysMark;
    impl Aqm for AlwaysMark {
        fn on_arrival(&mut self, _: QueueState, packet: Arrival, _: Instant) -> Verdict {
            if packet.ecn_capable {
                Verdict::Mark(Reason::RedEarly)
            } else {
                Verdict::Drop(Reason::RedEarly)
            }
        }
        fn name(&self) -> &'static str {
            "always"
        }
    }

    #[test]
    fn marks_set_ce_on_the_wire_and_are_counted() {
        let (mut q, stats) = queue_with(Box::new(AlwaysMark), TEN_PACKETS);
        q.enqueue(frame(true));
        q.enqueue(frame(false));
        let out = q.dequeue().unwrap();
        assert_eq!(out.as_slice()[15] & 0b11, 0b11);
        assert!(q.dequeue().is_none());
        let r = stats.report();
        assert_eq!(r.marks.get("red_early"), Some(&1));
        assert_eq!(r.drops.get("red_early"), Some(&1));
    }

    struct AlwaysSpare;
    impl Aqm for AlwaysSpare {
        fn on_arrival(&mut self, _: QueueState, _: Arrival, _: Instant) -> Verdict {
            Verdict::Spare(Reason::RdcEcnFlow)
        }
        fn name(&self) -> &'static str {
            "always_spare"
        }
    }

    #[test]
    fn spared_packets_are_queued_unchanged_and_counted() {
        let (mut q, stats) = queue_with(Box::new(AlwaysSpare), TEN_PACKETS);
        q.enqueue(frame(false));
        assert_eq!(q.dequeue().unwrap().as_slice(), frame(false).as_slice());
        let r = stats.report();
        assert_eq!(r.spares.get("rdc_ecn_flow"), Some(&1));
        assert_eq!(r.total_drops() + r.total_marks(), 0);
    }

    struct AlwaysHold;
    impl Aqm for AlwaysHold {
        fn on_arrival(&mut self, _: QueueState, _: Arrival, _: Instant) -> Verdict {
            Verdict::Hold(Duration::from_millis(20), Reason::RdcNotAnswering)
        }
        fn name(&self) -> &'static str {
            "always_hold"
        }
        fn delay_line_bytes(&self) -> usize {
            3000
        }
    }

    #[test]
    fn held_packets_join_the_fifo_at_their_due_time_within_the_line_limit() {
        let (mut q, stats) = queue_with(Box::new(AlwaysHold), TEN_PACKETS);
        let t = Instant::now();
        for _ in 0..3 {
            let mut p = frame(false);
            p.delay_until(t.into());
            q.enqueue(p);
        }
        // Two 1500-byte packets fit the 3000-byte line; the third is dropped.
        assert_eq!(q.length(), 0);
        assert_eq!(q.next_release(), Some(t + Duration::from_millis(20)));
        q.release_held(t + Duration::from_millis(19));
        assert_eq!(q.length(), 0);
        q.release_held(t + Duration::from_millis(20));
        assert_eq!(q.length(), 2);
        let out = q.dequeue_at(t + Duration::from_millis(21)).unwrap();
        assert_eq!(
            out.get_timestamp().into_std(),
            t + Duration::from_millis(20)
        );
        let r = stats.report();
        assert_eq!(r.holds.get("rdc_not_answering"), Some(&2));
        assert_eq!(r.drops.get("rdc_hold_full"), Some(&1));
        assert_eq!((r.rdc_hold_ms.count, r.rdc_hold_ms.max), (2, 20.0));
        assert_eq!(
            r.sojourn_ms.max, 1.0,
            "sojourn counts from joining the FIFO"
        );
    }

    /// A TCP ACK from 10.2.1.1:5000 to 10.1.1.1:40000 carrying an RDC agent's echo.
    fn echoed_ack() -> StdPacket {
        let mut f = vec![0u8; 14 + 40];
        f[12] = 0x08;
        let mut ip = vec![
            0x45, 0, 0, 40, 0x12, 0x34, 0x40, 0, 64, 6, 0, 0, 10, 2, 1, 1, 10, 1, 1, 1,
        ];
        ip.extend([0x13, 0x88, 0x9c, 0x40]);
        ip.extend([0u8; 8]);
        ip.extend([0x50, 0x10]);
        ip.extend([0u8; 6]);
        lowtide_rdc_wire::set_echo(&mut ip).unwrap();
        f[14..].copy_from_slice(&ip);
        StdPacket::from_raw_buffer(&f)
    }

    #[test]
    fn echoes_on_the_ack_link_are_recorded_for_the_data_flow_and_cleared() {
        let (mut q, _) = queue(Some(10), None);
        let table = Arc::new(Mutex::new(AnsweringFlows::new(Duration::from_secs(10), 8)));
        q.read_echoes_into(table.clone());
        let ack = echoed_ack();
        let t = ack.get_timestamp().into_std();
        q.enqueue(ack);
        let out = q.dequeue_at(t).unwrap();
        assert!(
            !ecn::is_rdc_echo(out.as_slice()),
            "the sender never sees it"
        );
        let data_flow = crate::aqm::FlowKey {
            src: "10.1.1.1:40000".parse().unwrap(),
            dst: "10.2.1.1:5000".parse().unwrap(),
        };
        assert!(table.lock().unwrap().answers(&data_flow));
    }
}
