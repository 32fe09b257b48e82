//! The bottleneck's rate cell: our [`LinkQueue`] drained by a [`Schedule`] (a constant rate or
//! a capacity trace). A thin driver: it feeds arrivals and the clock to the sans-IO schedule,
//! sleeps on the emulator's timer until the schedule's next departure, and hands departing
//! packets on with their logical departure times.
//!
//! Call order (see [`crate::link`]): an arriving packet first lets the schedule serve up to its
//! arrival time, then enters the queue (where it may be dropped, marked or held, and is
//! counted); held packets join the queue at their due times the same way.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use rattan_core::cells::bandwidth::queue::PacketQueue;
use rattan_core::cells::{Cell, Egress, Packet, StdPacket};
use tokio::sync::mpsc;

use super::{channel, ChannelIngress, FixedConfig};
use crate::aqm::Reason;
use crate::link::{ConstantRate, Outages, Schedule, TraceReplay};
use crate::queue::LinkQueue;
use crate::timer::{Timer, WakeTail};
use crate::trace::Trace;

/// What drains the queue.
#[derive(Debug, Clone)]
pub enum Capacity {
    /// A fixed rate of IP bits per second.
    Constant { bps: u64 },
    /// A capacity trace; its time 0 is when the cell starts.
    Trace(Arc<Trace>),
}

pub struct RateCell {
    ingress: Arc<ChannelIngress>,
    egress: RateEgress,
}

impl RateCell {
    /// Must be built inside the emulator's runtime (the timer registers with its epoll).
    /// `fault`, when set, makes the cell panic at its next packet (see
    /// [`crate::Dumbbell::inject_fault`]).
    pub fn new(
        capacity: Capacity,
        outages: Outages,
        queue: LinkQueue<StdPacket>,
        tail: WakeTail,
        fault: Arc<AtomicBool>,
    ) -> std::io::Result<Self> {
        let (ingress, rx) = channel();
        Ok(Self {
            ingress,
            egress: RateEgress {
                rx,
                queue,
                capacity,
                outages,
                schedule: None,
                out: VecDeque::new(),
                timer: Timer::new(tail)?,
                fault,
            },
        })
    }
}

pub struct RateEgress {
    rx: mpsc::UnboundedReceiver<StdPacket>,
    queue: LinkQueue<StdPacket>,
    capacity: Capacity,
    /// Blackholes drop arrivals here; `down` and `rate` windows go to a constant schedule.
    outages: Outages,
    schedule: Option<Schedule<StdPacket>>,
    /// Packets that have left the link, in departure order.
    out: VecDeque<StdPacket>,
    timer: Timer,
    fault: Arc<AtomicBool>,
}

#[async_trait]
impl Egress<StdPacket> for RateEgress {
    async fn dequeue(&mut self) -> Option<StdPacket> {
        let Self {
            rx,
            queue,
            capacity,
            outages,
            schedule,
            out,
            timer,
            fault,
        } = self;
        let schedule = schedule.get_or_insert_with(|| match capacity {
            Capacity::Constant { bps } => {
                Schedule::Constant(ConstantRate::new(*bps).with_outages(outages.clone()))
            }
            Capacity::Trace(trace) => {
                Schedule::Trace(TraceReplay::new(trace.clone(), Instant::now()))
            }
        });
        loop {
            if let Some(packet) = out.pop_front() {
                return Some(packet);
            }
            let deadline = match (schedule.poll_timeout(queue), queue.next_release()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            tokio::select! {
                biased;
                packet = rx.recv() => {
                    // None: the emulator is shutting down.
                    let packet = packet?;
                    if fault.swap(false, Ordering::Relaxed) {
                        panic!("injected fault (Dumbbell::inject_fault)");
                    }
                    let arrival = packet.get_timestamp().into_std();
                    if outages.blackholed(arrival) {
                        queue.lose(&packet, Reason::Outage);
                        continue;
                    }
                    advance(schedule, queue, out, arrival);
                    queue.enqueue(packet);
                }
                woke = timer.sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                    if let Err(e) = woke {
                        // The guard records this as the link's failure.
                        panic!("the link's timer failed: {e}");
                    }
                    advance(schedule, queue, out, Instant::now());
                }
            }
        }
    }
}

/// Serves the link up to `until`; packets held in the queue's delay line (RDC) join the queue
/// at their due times in between, so each sees the queue as it is then.
fn advance(
    schedule: &mut Schedule<StdPacket>,
    queue: &mut LinkQueue<StdPacket>,
    out: &mut VecDeque<StdPacket>,
    until: Instant,
) {
    while let Some(due) = queue.next_release().filter(|d| *d <= until) {
        schedule.serve_until(due, queue, &mut |p, at| depart(out, p, at));
        queue.release_held(due);
    }
    schedule.serve_until(until, queue, &mut |p, at| depart(out, p, at));
}

/// A packet leaves the link at its logical departure time `at`.
fn depart(out: &mut VecDeque<StdPacket>, mut packet: StdPacket, at: Instant) {
    packet.delay_until(at.into());
    out.push_back(packet);
}

impl Cell<StdPacket> for RateCell {
    type IngressType = ChannelIngress;
    type EgressType = RateEgress;
    type ControlInterfaceType = FixedConfig;

    fn sender(&self) -> Arc<Self::IngressType> {
        self.ingress.clone()
    }
    fn receiver(&mut self) -> &mut Self::EgressType {
        &mut self.egress
    }
    fn into_receiver(self) -> Self::EgressType {
        self.egress
    }
    fn control_interface(&self) -> Arc<Self::ControlInterfaceType> {
        Arc::new(FixedConfig)
    }
}
