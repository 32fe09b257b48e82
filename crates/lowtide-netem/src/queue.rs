//! The bottleneck queue: a FIFO with a packet or byte limit, an AQM control law, and a
//! counter for every drop and mark. Our rate cell ([`crate::cells::rate`]) drains it as a
//! [`Backlog`], at the logical times the link's schedule gives; it also implements rattan's
//! `PacketQueue`, so any rattan bandwidth cell can drain it (at wall-clock times).
//!
//! Semantics (as ns-2 and mahimahi): an arriving packet is dropped if the queue is full,
//! else the AQM may drop or mark it, else it is queued; CoDel decides again at dequeue.
//! Sojourn is the time from arrival to the moment the link takes the packet.

use std::collections::VecDeque;
use std::sync::Arc;

use rattan_core::cells::bandwidth::queue::PacketQueue;
use rattan_core::cells::Packet;

use crate::aqm::{Aqm, Arrival, QueueState, Reason, Verdict};
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
        Self {
            packets: VecDeque::new(),
            bytes: 0,
            limit_packets: limits.packets,
            limit_bytes: limits.bytes,
            aqm,
            stats,
        }
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
    fn apply(&self, packet: &mut P, verdict: Verdict) -> bool {
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
            Verdict::Drop(reason) => {
                self.stats.dropped(reason);
                return false;
            }
        }
        true
    }

    /// The link takes the head packet at `now` (CoDel may drop packets on the way).
    pub fn dequeue_at(&mut self, now: std::time::Instant) -> Option<P> {
        while let Some(mut packet) = self.packets.pop_front() {
            self.bytes -= packet.l3_length();
            let sojourn = now.saturating_duration_since(packet.get_timestamp().into_std());
            let ect = ecn::is_ecn_capable(packet.as_slice());
            let verdict = self.aqm.on_departure(sojourn, self.state(), ect, now);
            if !self.apply(&mut packet, verdict) {
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

    fn head_arrival(&self) -> Option<std::time::Instant> {
        self.packets.front().map(|p| p.get_timestamp().into_std())
    }

    fn pop(&mut self, at: std::time::Instant) -> Option<P> {
        self.dequeue_at(at)
    }

    fn size(packet: &P) -> usize {
        packet.l3_length()
    }

    fn arrival(packet: &P) -> std::time::Instant {
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
        if self.would_overflow(size) {
            self.stats.dropped(Reason::QueueFull);
            return;
        }
        // The packet's timestamp is the logical time it reached the queue.
        let arrival = Arrival {
            bytes: size,
            ecn_capable: ecn::is_ecn_capable(packet.as_slice()),
            tcp: ecn::tcp_flow(packet.as_slice()),
        };
        let verdict = self
            .aqm
            .on_arrival(self.state(), arrival, packet.get_timestamp().into_std());
        if !self.apply(&mut packet, verdict) {
            return;
        }
        self.bytes += size;
        self.packets.push_back(packet);
    }

    fn dequeue(&mut self) -> Option<P> {
        // A rattan cell calls this when its link is free, without the logical time: the wall
        // clock is within the emulator's lateness of it.
        self.dequeue_at(std::time::Instant::now())
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
    use std::time::Instant;

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
}
