//! One message pipe over the three transports the lab compares, so each measured application
//! is written once: lowtide's channel over TCP ([`lowtide`]), QUIC through quinn ([`quic`])
//! and TFRC over UDP ([`tfrc`], `lowtide-tfrc`, RFC 5348).
//!
//! A pipe carries whole messages one way, on one or more streams. The sending end
//! ([`SendPipe`]) has two ways to hand messages over:
//! - as fast as the transport takes them (the latency stream): [`SendPipe::writable`] waits
//!   until it takes one more, [`SendPipe::send`] hands over a [`lowtide::Message`](::lowtide::Message) (payload,
//!   importance, deadline) and says what became of it ([`Offer`]), [`SendPipe::events`]
//!   reports fates so far;
//! - queued with importance and deadline (the conference): [`SendPipe::queue`] at once, and
//!   [`SendPipe::next_event`] waits for each message's fate ([`PipeEvent`]) while the
//!   transport sends; [`SendPipe::cancel`] withdraws one not yet written.
//!
//! [`SendPipe::finish`] lets what is queued flow until the receiver's end, then closes.
//!
//! The receiving end ([`RecvPipe`]) accepts the first peer that delivers, then
//! [`RecvPipe::recv`]s each message with the time it was read.
//!
//! The transports differ, and a pipe says where rather than pretending ([`Capabilities`]):
//!
//! | | lowtide | QUIC | TFRC |
//! | --- | --- | --- | --- |
//! | waits for room ([`SendPipe::writable`]) | yes | yes (a stream of the window) | no: a full buffer refuses ([`Offer::Full`]) |
//! | queue ([`SendPipe::queue`]) | the channel's | the pipe's, above quinn, one message written at a time | the send buffer's; refuses when full |
//! | importance | schedules and preempts | order of the pipe's queue, and the stream's priority | evicts less important messages |
//! | deadline | cancels messages not written whole | resets messages not written whole | drops messages not started |
//! | cancel | until written whole | until taken from the pipe's queue | until started |
//! | several streams | yes, shared by the channel's fairness | no | no |
//! | written-to-kernel times | yes | no | no |
//! | `TCP_INFO` timeline, driver counters | yes | no | no |

pub mod lowtide;
pub mod quic;
pub mod tfrc;

use std::net::SocketAddr;
use std::time::Instant;

use lowtide_traffic::Stop;

use crate::stream::{stopped, SendCost};
use crate::tcpinfo::TcpTimeline;
use crate::LabError;

/// How one end of a pipe is set up: the transport and its settings.
#[derive(Clone)]
pub enum Transport {
    /// lowtide over TCP, the channel as configured.
    Lowtide(Box<::lowtide::ChannelConfig>),
    /// QUIC (quinn) with the run's certificate, shared by both ends.
    Quic(quic::QuicConfig, quic::Credentials),
    /// TFRC over UDP.
    Tfrc(lowtide_tfrc::TfrcConfig),
}

/// What a transport does with the parts of a message beyond its bytes (module table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// [`SendPipe::writable`] waits for room; `false`: it returns at once and a full
    /// transport refuses the message instead ([`Offer::Full`]).
    pub waits_for_room: bool,
    /// Message deadlines are enforced by the transport.
    pub deadlines: bool,
    /// [`SendPipe::cancel`] can withdraw a queued message.
    pub cancel: bool,
    /// [`PipeEvent::Written`] carries when the last byte went to the kernel.
    pub write_times: bool,
}

/// A message handed to a pipe: its number on the pipe, from 0 in send order (lowtide's
/// `MessageId::seq` on the pipe's stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MsgId {
    Lowtide(::lowtide::MessageId),
    Tfrc(lowtide_tfrc::MessageId),
    Quic(u64),
}

impl MsgId {
    /// The message's number on its pipe, from 0.
    pub fn seq(&self) -> u64 {
        match self {
            MsgId::Lowtide(id) => id.seq,
            MsgId::Tfrc(id) => id.seq,
            MsgId::Quic(n) => *n,
        }
    }
}

/// What [`SendPipe::send`] did with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// The transport has it.
    Taken(MsgId),
    /// No room (TFRC's full buffer): the message was not sent; try again later.
    Full,
    /// The cut-off came before the transport took all of it: withdrawn, never delivered.
    CutOff,
}

/// A message's fate at the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PipeEvent {
    /// Written whole to the transport below; `last_write` when its last byte went to the
    /// kernel, where the transport says ([`Capabilities::write_times`]).
    Written {
        id: MsgId,
        last_write: Option<Instant>,
    },
    /// It will not be delivered: expired at its deadline, cancelled or evicted.
    Dropped { id: MsgId },
}

/// A message as the receiver read it.
#[derive(Debug, Clone)]
pub struct Delivered {
    pub data: bytes::Bytes,
    /// When it was read (its last byte).
    pub at: Instant,
}

/// What a sender measures about itself between [`SendPipe::start_meter`] and
/// [`SendPipe::stop_meter`].
pub struct SendMeter(Meter);

enum Meter {
    Lowtide(lowtide::CostMeter, lowtide::Sampler),
    Cpu(Option<(f64, f64)>),
    None,
}

/// The sending end of a pipe.
pub enum SendPipe {
    Lowtide(lowtide::Sender),
    Quic(quic::Sender),
    Tfrc(tfrc::Sender),
}

impl SendPipe {
    /// Connects to the receiving end at `dst` with `streams` message streams, retrying for a
    /// few seconds while it comes up. Only lowtide carries more than one stream.
    pub async fn connect(dst: SocketAddr, t: Transport, streams: usize) -> Result<Self, LabError> {
        if streams != 1 && !matches!(t, Transport::Lowtide(_)) {
            return Err(LabError::io(
                "opening the pipe",
                format!("{streams} streams: QUIC and TFRC pipes carry one"),
            ));
        }
        Ok(match t {
            Transport::Lowtide(cfg) => {
                SendPipe::Lowtide(lowtide::Sender::connect(dst, *cfg, streams).await?)
            }
            Transport::Quic(q, creds) => {
                SendPipe::Quic(quic::Sender::connect(dst, &q, &creds).await?)
            }
            Transport::Tfrc(cfg) => SendPipe::Tfrc(tfrc::Sender::connect(dst, cfg).await?),
        })
    }

    pub fn capabilities(&self) -> Capabilities {
        match self {
            SendPipe::Lowtide(_) => lowtide::CAPABILITIES,
            SendPipe::Quic(_) => quic::CAPABILITIES,
            SendPipe::Tfrc(_) => tfrc::CAPABILITIES,
        }
    }

    /// Waits until the transport takes one more message (at once where it does not wait:
    /// [`Capabilities::waits_for_room`]).
    pub async fn writable(&mut self) -> Result<(), LabError> {
        match self {
            SendPipe::Lowtide(s) => s.writable().await,
            SendPipe::Quic(s) => s.writable().await,
            SendPipe::Tfrc(_) => Ok(()),
        }
    }

    /// Hands `msg` to the transport on stream 0. Where handing over takes time (QUIC writes
    /// into its window), it stops at the message's deadline, `cutoff` or the stop and
    /// withdraws the message ([`Offer::CutOff`]).
    pub async fn send(
        &mut self,
        msg: ::lowtide::Message,
        cutoff: Instant,
        stop: &Stop,
    ) -> Result<Offer, LabError> {
        match self {
            SendPipe::Lowtide(s) => s.send(0, msg),
            SendPipe::Quic(s) => s.send(msg, cutoff, stop).await,
            SendPipe::Tfrc(s) => s.send(msg),
        }
    }

    /// Queues `msg` on `stream` without waiting; its fate comes from [`Self::next_event`].
    /// QUIC writes it by `cutoff` at the latest (the others keep sending what they hold until
    /// [`Self::finish`]); TFRC refuses it when its buffer is full ([`Offer::Full`]).
    pub fn queue(
        &mut self,
        stream: usize,
        msg: ::lowtide::Message,
        cutoff: Instant,
    ) -> Result<Offer, LabError> {
        match self {
            SendPipe::Lowtide(s) => s.send(stream, msg),
            SendPipe::Quic(s) => Ok(Offer::Taken(s.queue(msg, cutoff))),
            SendPipe::Tfrc(s) => s.send(msg),
        }
    }

    /// The next fate of a queued message, waiting until `until`; `None` then, or when the
    /// transport ends. Over QUIC this is where queued messages are written, one per call.
    pub async fn next_event(&mut self, until: Instant) -> Option<PipeEvent> {
        match self {
            SendPipe::Lowtide(s) => s.next_event(until).await,
            SendPipe::Quic(s) => s.next_event(until).await,
            SendPipe::Tfrc(s) => s.next_event(until).await,
        }
    }

    /// Queued messages the transport will never send now the sender is done: QUIC's queue
    /// above quinn, as fates. lowtide and TFRC keep sending theirs until [`Self::finish`].
    pub fn abandon_queued(&mut self) -> Vec<PipeEvent> {
        match self {
            SendPipe::Quic(s) => s.abandon_queued(),
            _ => vec![],
        }
    }

    /// The fates reported since the last call.
    pub fn events(&mut self) -> Vec<PipeEvent> {
        match self {
            SendPipe::Lowtide(s) => s.events(),
            SendPipe::Quic(_) => vec![],
            SendPipe::Tfrc(s) => s.events(),
        }
    }

    /// Withdraws a queued message; `false` if it was written or dropped meanwhile, or the
    /// transport cannot cancel ([`Capabilities::cancel`]).
    pub fn cancel(&mut self, id: MsgId) -> bool {
        match self {
            SendPipe::Lowtide(s) => s.cancel(id),
            SendPipe::Quic(s) => s.cancel(id),
            SendPipe::Tfrc(s) => s.cancel(id),
        }
    }

    /// The payload that fills exactly one packet, where the transport knows it (lowtide:
    /// one TCP segment with the frame header; TFRC: one data packet); `None` for QUIC.
    pub fn packet_payload(&self) -> Option<usize> {
        match self {
            SendPipe::Lowtide(s) => s.one_segment_payload(),
            SendPipe::Quic(_) => None,
            SendPipe::Tfrc(s) => Some(s.packet_payload()),
        }
    }

    /// Starts measuring what sending costs: the thread's CPU and lowtide's `TCP_INFO`
    /// timeline from `start`. TFRC's sender is not measured (its cost stays zero, as in run
    /// folders written before the pipe).
    pub fn start_meter(&self, start: Instant) -> SendMeter {
        SendMeter(match self {
            SendPipe::Lowtide(s) => {
                let sampler = lowtide::Sampler::start(s.channel(), start);
                Meter::Lowtide(lowtide::CostMeter::start(), sampler)
            }
            SendPipe::Quic(_) => Meter::Cpu(crate::stream::thread_cpu_s()),
            SendPipe::Tfrc(_) => Meter::None,
        })
    }

    /// What sending `messages` messages cost since [`Self::start_meter`], and the `TCP_INFO`
    /// timeline (empty but for lowtide).
    pub async fn stop_meter(&self, meter: SendMeter, messages: u64) -> (SendCost, TcpTimeline) {
        match (meter.0, self) {
            (Meter::Lowtide(cost, sampler), SendPipe::Lowtide(s)) => {
                let cost = cost.finish(s.channel(), messages);
                (cost, sampler.finish().await)
            }
            (Meter::Cpu(before), _) => (cpu_cost(before, messages), TcpTimeline::default()),
            _ => (SendCost::default(), TcpTimeline::default()),
        }
    }

    /// Lets what is queued flow until `until` (the receiver's end) or the stop, so the
    /// receiver can still count it; then closes. Returns the fates reported meanwhile.
    pub async fn finish(self, until: Instant, stop: &Stop) -> Vec<PipeEvent> {
        match self {
            SendPipe::Lowtide(s) => s.finish(until, stop).await,
            SendPipe::Quic(s) => {
                s.finish(until, stop).await;
                vec![]
            }
            SendPipe::Tfrc(s) => s.finish(until, stop).await,
        }
    }
}

/// A sender's thread CPU since `before`; the driver counters are lowtide's and stay 0.
fn cpu_cost(before: Option<(f64, f64)>, messages: u64) -> SendCost {
    let cpu = crate::stream::thread_cpu_s()
        .zip(before)
        .map(|((u1, s1), (u0, s0))| (u1 - u0, s1 - s0));
    SendCost {
        messages,
        cpu_user_s: cpu.map(|c| c.0),
        cpu_system_s: cpu.map(|c| c.1),
        ..SendCost::default()
    }
}

/// The receiving end of a pipe.
pub enum RecvPipe {
    Lowtide(lowtide::Receiver),
    Quic(quic::Receiver),
    Tfrc(tfrc::Receiver),
}

impl RecvPipe {
    /// Listens on `addr` and accepts the first peer that delivers, until `deadline` or the
    /// stop. QUIC reads each message whole, so it delivers none longer than `max_message`
    /// bytes; the others deliver what was sent.
    pub async fn accept(
        addr: SocketAddr,
        t: Transport,
        max_message: usize,
        deadline: Instant,
        stop: &Stop,
    ) -> Result<Self, LabError> {
        Ok(match t {
            Transport::Lowtide(cfg) => {
                RecvPipe::Lowtide(lowtide::Receiver::accept(addr, *cfg, deadline, stop).await?)
            }
            Transport::Quic(q, creds) => RecvPipe::Quic(
                quic::Receiver::accept(addr, &q, &creds, max_message, deadline, stop).await?,
            ),
            Transport::Tfrc(cfg) => {
                RecvPipe::Tfrc(tfrc::Receiver::accept(addr, cfg, deadline, stop).await?)
            }
        })
    }

    /// The next message; `None` once the peer is gone.
    pub async fn recv(&mut self) -> Option<Delivered> {
        match self {
            RecvPipe::Lowtide(r) => r.recv().await,
            RecvPipe::Quic(r) => r.recv().await,
            RecvPipe::Tfrc(r) => r.recv().await,
        }
    }

    /// Reads messages until `end`, the stop or the peer's end, handing each to `on`.
    pub async fn recv_until(&mut self, end: Instant, stop: &Stop, mut on: impl FnMut(Delivered)) {
        let end = tokio::time::Instant::from_std(end);
        loop {
            let m = tokio::select! {
                m = self.recv() => m,
                _ = tokio::time::sleep_until(end) => None,
                _ = stopped(stop) => None,
            };
            let Some(m) = m else { break };
            on(m);
        }
    }

    /// The duplicate lane's receiving counters (lowtide with a lane; zero otherwise).
    pub fn lane(&self) -> ::lowtide::proto::failover::duplicate::DuplicateStats {
        match self {
            RecvPipe::Lowtide(r) => r.channel().stats().lane,
            _ => Default::default(),
        }
    }

    /// Closes the receiving end.
    pub async fn close(self) {
        match self {
            RecvPipe::Lowtide(r) => r.close().await,
            RecvPipe::Quic(r) => r.close(),
            RecvPipe::Tfrc(_) => {}
        }
    }
}
