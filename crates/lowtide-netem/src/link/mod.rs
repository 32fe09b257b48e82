//! How a bottleneck link serves its queue: sans-IO state machines that are told `now` and the
//! queue, and say which packets leave and when (their logical departure times).
//!
//! - [`ConstantRate`]: serialisation at a fixed rate, as ns-2 and rattan's bandwidth cell;
//! - [`TraceReplay`]: a capacity trace's delivery opportunities, as mahimahi's `mm-link`.
//!
//! [`crate::cells::rate::RateCell`] drives either one inside the emulator. The call order is
//! the same for both: when a packet arrives at logical time `a`, call `serve_until(a)` first,
//! then put the packet in the queue; when the timer from `poll_timeout` fires, call
//! `serve_until(now)`. So the queue always holds exactly the packets that have arrived by the
//! time being served, and an arriving packet sees the queue as it is at its arrival.

pub mod constant_rate;
pub mod outage;
pub mod trace_replay;

use std::time::Instant;

pub use constant_rate::ConstantRate;
pub use outage::{OutageConfig, OutageKind, Outages};
pub use trace_replay::TraceReplay;

/// The queue a link drains (in the emulator: [`crate::queue::LinkQueue`]).
pub trait Backlog {
    type Packet;
    /// Whether no packet is waiting.
    fn is_empty(&self) -> bool;
    /// When the packet at the head arrived.
    fn head_arrival(&self) -> Option<Instant>;
    /// Takes the head packet at logical time `at` (an AQM may drop or mark on the way).
    fn pop(&mut self, at: Instant) -> Option<Self::Packet>;
    /// The packet's size in IP bytes: what the link's rate or opportunities are counted in.
    fn size(packet: &Self::Packet) -> usize;
    /// When the packet arrived.
    fn arrival(packet: &Self::Packet) -> Instant;
}

/// Either kind of link, for a driver that holds one.
pub enum Schedule<P> {
    Constant(ConstantRate<P>),
    Trace(TraceReplay<P>),
}

impl<P> Schedule<P> {
    /// Sends every packet whose departure time is at or before `now`, calling
    /// `depart(packet, departure)` for each in order.
    pub fn serve_until<B: Backlog<Packet = P>>(
        &mut self,
        now: Instant,
        backlog: &mut B,
        depart: &mut impl FnMut(P, Instant),
    ) {
        match self {
            Schedule::Constant(s) => s.serve_until(now, backlog, depart),
            Schedule::Trace(s) => s.serve_until(now, backlog, depart),
        }
    }

    /// When `serve_until` has something to do next; `None` while the link is idle (then
    /// only an arriving packet can start it).
    pub fn poll_timeout<B: Backlog<Packet = P>>(&self, backlog: &B) -> Option<Instant> {
        match self {
            Schedule::Constant(s) => s.poll_timeout(backlog),
            Schedule::Trace(s) => s.poll_timeout(backlog),
        }
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! A FIFO of (id, size, arrival) for the schedules' unit tests.
    use std::collections::VecDeque;
    use std::time::Instant;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct TestPacket {
        pub id: u32,
        pub size: usize,
        pub arrival: Instant,
    }

    #[derive(Default)]
    pub struct Fifo(pub VecDeque<TestPacket>);

    impl Fifo {
        pub fn push(&mut self, id: u32, size: usize, arrival: Instant) {
            self.0.push_back(TestPacket { id, size, arrival });
        }
        /// `count` packets of `size` bytes, all arrived at `at`.
        pub fn backlogged(count: u32, size: usize, at: Instant) -> Self {
            let mut f = Fifo::default();
            for id in 0..count {
                f.push(id, size, at);
            }
            f
        }
    }

    impl super::Backlog for Fifo {
        type Packet = TestPacket;
        fn is_empty(&self) -> bool {
            self.0.is_empty()
        }
        fn head_arrival(&self) -> Option<Instant> {
            self.0.front().map(|p| p.arrival)
        }
        fn pop(&mut self, at: Instant) -> Option<TestPacket> {
            assert!(
                self.0.front().is_none_or(|p| p.arrival <= at),
                "a packet left before it arrived"
            );
            self.0.pop_front()
        }
        fn size(p: &TestPacket) -> usize {
            p.size
        }
        fn arrival(p: &TestPacket) -> Instant {
            p.arrival
        }
    }
}
