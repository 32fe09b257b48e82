//! Active queue management: the control laws that decide, for each packet, whether the
//! bottleneck queue takes it, marks it (ECN CE) or drops it.
//!
//! Each law is a pure state machine fed with the queue's state, the packet's ECN capability
//! and `now`; it makes no system call and reads no clock, so every law is unit-tested in
//! simulated time. [`crate::queue::LinkQueue`] applies the verdicts to real packets and counts
//! every drop and mark by its [`Reason`] (the ns-3 `DropBeforeEnqueue`/`Mark(item, reason)`
//! idea).
//!
//! Why our own and not rattan-core's queues: rattan 0.1.1 has drop-tail, drop-head and CoDel,
//! but no RED, no DRD, no ECN marking, and its queues drop silently (no reason, no counter).
//! We keep rattan's bandwidth cell and plug these laws in through its `PacketQueue` trait.

pub mod answering;
mod codel;
mod drd;
pub mod rdc;
mod red;

use std::net::SocketAddrV4;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use answering::{AnsweringFlows, AnsweringReport};

pub use codel::Codel;
pub use drd::Drd;
pub use rdc::{NonAnswering, NotEct, Rdc};
pub use red::Red;

/// What the queue holds when a decision is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueState {
    pub packets: usize,
    pub bytes: usize,
}

#[cfg(test)]
impl QueueState {
    /// A queue of `packets` MTU-sized packets.
    pub(crate) fn of_packets(packets: usize) -> Self {
        QueueState {
            packets,
            bytes: packets * crate::config::MTU,
        }
    }
}

/// The arriving packet, as a law sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// IP bytes (the queue's byte count).
    pub bytes: usize,
    /// ECT(0), ECT(1) or CE.
    pub ecn_capable: bool,
    /// The TCP connection it belongs to; None for anything but TCP over IPv4.
    pub tcp: Option<TcpFlow>,
}

/// What a law may know of a TCP segment: the direction of its connection, and whether it
/// asks for or agrees to ECN (RFC 3168 §6.1.1: a SYN or SYN-ACK with ECE set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpFlow {
    pub key: FlowKey,
    pub ecn_setup: bool,
}

/// Source and destination address and port of a TCP segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKey {
    pub src: SocketAddrV4,
    pub dst: SocketAddrV4,
}

#[cfg(test)]
impl Arrival {
    /// An MTU-sized packet.
    pub(crate) fn mtu(ecn_capable: bool) -> Self {
        Arrival {
            bytes: crate::config::MTU,
            ecn_capable,
            tcp: None,
        }
    }
}

/// A control law's decision for one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Mark(Reason),
    Drop(Reason),
    /// Pass, writing this delay into the packet (exact RDC, [`rdc`]).
    Stamp(Duration),
    /// Pass a packet the law would have dropped (it cannot be marked), counted by why.
    Spare(Reason),
    /// Let the packet wait this long in the queue's delay line before it joins the FIFO
    /// (RDC, a flow that does not answer: [`rdc`]), counted by why.
    Hold(Duration, Reason),
}

/// Why a packet was dropped, marked or spared; reports count each by one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    /// The queue limit (packets or bytes) was reached: the only drop of a drop-tail queue.
    QueueFull,
    /// RED's probabilistic drop or mark between the thresholds.
    RedEarly,
    /// RED above max_th (or above 2*max_th in gentle mode).
    RedForced,
    /// DRD's probabilistic drop or mark between drdmin and drdcongest.
    DrdEarly,
    /// DRD above drdcongest.
    DrdCongest,
    /// CoDel's control law (sojourn above target for an interval).
    Codel,
    /// The link's configured random loss.
    RandomLoss,
    /// The link was in a blackhole outage (`crate::link::outage`).
    Outage,
    /// The emulator could not hand the packet to the destination host's interface: its send
    /// queue (1024 frames, rattan's) was full.
    InterfaceBusy,
    /// RDC's token bucket is above size_tb.
    RdcBucketFull,
    /// 1-bit RDC's mark (or drop, for a packet that is not ECN-capable).
    RdcExcess,
    /// 1-bit RDC spared a packet that is not ECN-capable (`not_ect = "pass"`).
    RdcNotEct,
    /// 1-bit RDC spared a packet that is not ECN-capable of a flow that sent ECN-capable
    /// ones (a retransmission or control segment of an ECN connection).
    RdcEcnFlow,
    /// 1-bit RDC spared an ECN-setup SYN or SYN-ACK (never ECN-capable, RFC 3168 §6.1.1).
    RdcEcnSetup,
    /// RDC held a packet of a flow whose receiver does not answer RDC in the delay line.
    RdcNotAnswering,
    /// RDC's delay line held `size_tb` already.
    RdcHoldFull,
}

impl Reason {
    pub const ALL: [Reason; 16] = [
        Reason::QueueFull,
        Reason::RedEarly,
        Reason::RedForced,
        Reason::DrdEarly,
        Reason::DrdCongest,
        Reason::Codel,
        Reason::RandomLoss,
        Reason::Outage,
        Reason::InterfaceBusy,
        Reason::RdcBucketFull,
        Reason::RdcExcess,
        Reason::RdcNotEct,
        Reason::RdcEcnFlow,
        Reason::RdcEcnSetup,
        Reason::RdcNotAnswering,
        Reason::RdcHoldFull,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::QueueFull => "queue_full",
            Reason::RedEarly => "red_early",
            Reason::RedForced => "red_forced",
            Reason::DrdEarly => "drd_early",
            Reason::DrdCongest => "drd_congest",
            Reason::Codel => "codel",
            Reason::RandomLoss => "random_loss",
            Reason::Outage => "outage",
            Reason::InterfaceBusy => "interface_busy",
            Reason::RdcBucketFull => "rdc_bucket_full",
            Reason::RdcExcess => "rdc_excess",
            Reason::RdcNotEct => "rdc_not_ect",
            Reason::RdcEcnFlow => "rdc_ecn_flow",
            Reason::RdcEcnSetup => "rdc_ecn_setup",
            Reason::RdcNotAnswering => "rdc_not_answering",
            Reason::RdcHoldFull => "rdc_hold_full",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// A control law. The queue limit itself is enforced by the queue, not here.
pub trait Aqm: Send {
    /// A packet arrives at `now` to a queue in state `queue` (not counting the packet).
    fn on_arrival(&mut self, queue: QueueState, packet: Arrival, now: Instant) -> Verdict;

    /// The head packet leaves at `now` after `sojourn` in the queue, leaving `queue` behind.
    fn on_departure(
        &mut self,
        _sojourn: Duration,
        _queue: QueueState,
        _ecn_capable: bool,
        _now: Instant,
    ) -> Verdict {
        Verdict::Pass
    }

    fn name(&self) -> &'static str;

    /// Bytes the queue's delay line may hold for [`Verdict::Hold`] (0: the law never holds).
    fn delay_line_bytes(&self) -> usize {
        0
    }

    /// The flows that answer this law (RDC), filled from echoes on the opposite link.
    fn answering_flows(&self) -> Option<Arc<Mutex<AnsweringFlows>>> {
        None
    }
}

/// Drop-tail: the queue limit alone decides.
pub struct DropTail;

impl Aqm for DropTail {
    fn on_arrival(&mut self, _: QueueState, _: Arrival, _: Instant) -> Verdict {
        Verdict::Pass
    }
    fn name(&self) -> &'static str {
        "drop_tail"
    }
}

/// Mark when the packet and the law allow it, else drop.
fn mark_or_drop(ecn: bool, ecn_capable: bool, reason: Reason) -> Verdict {
    if ecn && ecn_capable {
        Verdict::Mark(reason)
    } else {
        Verdict::Drop(reason)
    }
}
