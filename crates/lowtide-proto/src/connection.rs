//! The channel state machine: one TCP connection's worth of lowtide, without any I/O.
//!
//! # Call order (the driver's loop)
//! 1. [`Connection::new`] queues our handshake.
//! 2. Bytes read from the socket go to [`handle_bytes`](Connection::handle_bytes).
//! 3. At each write opportunity: sample the kernel into a [`TcpState`] (if
//!    [`needs_tcp_state`](Connection::needs_tcp_state)), call
//!    [`poll_transmit`](Connection::poll_transmit), write
//!    [`transmit_segments`](Connection::transmit_segments) with one `writev`, and report how
//!    many bytes the kernel took with [`handle_written`](Connection::handle_written). The
//!    returned [`Decision`] says how to wait when blocked.
//! 4. When [`poll_timeout`](Connection::poll_timeout) passes, call
//!    [`handle_timeout`](Connection::handle_timeout) (expiries, delayed P-ACKs).
//! 5. Drain [`poll_event`](Connection::poll_event) and [`poll_message`](Connection::poll_message).
//!
//! Sources: Paceline (Erbad and Krasic, "Sender-side Buffers and the Case for Multimedia
//! Adaptation", "Data Service Model" to "Latency Controller") for streams, messages, chunking,
//! cancellation and P-ACKs. Modelled on quinn-proto's `Connection` (`handle_*` inputs, `poll_*`
//! outputs, `now` passed in).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};

use crate::config::{Config, ConfigError, Fairness, StreamConfig};
use crate::controller::{
    AppProgress, Decision, LatencyController, PAckSample, ProbeResult, TcpState, Wake,
};
use crate::error::{ProtocolError, SendError, StreamError};
use crate::failover::duplicate::{DuplicateLane, DuplicateStats, Withdraw};
use crate::failover::{Delivered, FailoverReport};
use crate::pack_gap::pack_gap;
use crate::reassembly::{PeerCancelled, Reassembly, Received};
use crate::scheduler::Scheduler;
use crate::stream::{Pending, SendStream};
use crate::wire::{
    CancelReason, DataFrame, FirstChunk, Frame, FrameType, Hello, HelloOption, MAX_CLOSE_REASON,
    MAX_HEADER_LEN, MAX_PROBE_PAD, VERSION,
};

/// Which end of the TCP connection we are; decides stream-id parity.
///
/// ```
/// use lowtide_proto::{Config, Connection, Side, StreamConfig};
/// # let now = std::time::Instant::now();
/// let mut c = Connection::new(Config::default(), Side::Client, now)?;
/// let mut s = Connection::new(Config::default(), Side::Server, now)?;
/// assert_eq!(c.open_stream(StreamConfig::default())? % 2, 0);
/// assert_eq!(s.open_stream(StreamConfig::default())? % 2, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The connecting end (even stream ids).
    Client,
    /// The accepting end (odd stream ids).
    Server,
}

/// Identifies a message of ours: stream and sequence number.
///
/// ```
/// use lowtide_proto::{Config, Connection, Message, MessageId, Side, StreamConfig};
/// # let now = std::time::Instant::now();
/// let mut c = Connection::new(Config::default(), Side::Client, now)?;
/// let s = c.open_stream(StreamConfig::default())?;
/// let id = c.send(now, s, Message::new("frame").importance(2))?;
/// assert_eq!((id.stream, id.seq, id.importance()), (s, 0, 2));
/// // Held as integers elsewhere (the C API), rebuilt to cancel.
/// assert!(c.cancel(MessageId::from_parts(s, 0, 2)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageId {
    /// Stream id.
    pub stream: u64,
    /// Sequence number within the stream.
    pub seq: u64,
    importance: u8,
}

impl MessageId {
    /// Rebuilds an id from its parts (for callers that hold it as plain integers, such as the
    /// C API). An id that was never returned by `send`, or with another importance, matches
    /// no message: [`Connection::cancel`] returns `false` for it.
    ///
    /// ```
    /// use lowtide_proto::MessageId;
    /// let id = MessageId::from_parts(4, 17, 2);
    /// assert_eq!((id.stream, id.seq, id.importance()), (4, 17, 2));
    /// assert_ne!(id, MessageId::from_parts(4, 17, 0)); // the importance is part of the id
    /// ```
    pub fn from_parts(stream: u64, seq: u64, importance: u8) -> Self {
        Self {
            stream,
            seq,
            importance,
        }
    }

    /// Importance the message was sent with.
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, Message, Side, StreamConfig};
    /// # let now = std::time::Instant::now();
    /// let mut c = Connection::new(Config::default(), Side::Client, now)?;
    /// let s = c.open_stream(StreamConfig::default())?;
    /// let id = c.send(now, s, Message::new("key frame").importance(3))?;
    /// assert_eq!(id.importance(), 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn importance(&self) -> u8 {
        self.importance
    }
}

/// A message to send.
///
/// ```
/// use lowtide_proto::Message;
/// use std::time::{Duration, Instant};
/// let keyframe = Message::new(vec![0u8; 20_000])
///     .importance(3) // preempts importance 0..=2 queued on the same stream
///     .deadline(Instant::now() + Duration::from_millis(200)) // cancelled if not written by then
///     .cost(1.0); // one frame, for quality fairness
/// assert_eq!(keyframe.data.len(), 20_000);
/// ```
#[derive(Debug, Clone)]
pub struct Message {
    /// Payload.
    pub data: Bytes,
    /// Importance: higher preempts lower within a stream.
    pub importance: u8,
    /// Cost for quality fairness (defaults to the length).
    pub cost: Option<f64>,
    /// Cancel if not completely written to the kernel by then.
    pub deadline: Option<Instant>,
}

impl Message {
    /// A message of importance 0, no deadline.
    ///
    /// ```
    /// use lowtide_proto::Message;
    /// let m = Message::new("hello"); // anything that converts into `Bytes`
    /// assert_eq!((&m.data[..], m.importance, m.deadline, m.cost), (&b"hello"[..], 0, None, None));
    /// ```
    pub fn new(data: impl Into<Bytes>) -> Self {
        Self {
            data: data.into(),
            importance: 0,
            cost: None,
            deadline: None,
        }
    }
    /// Sets the importance.
    ///
    /// ```
    /// use lowtide_proto::sim::{LinkParams, Pair};
    /// use lowtide_proto::{Config, Message, StreamConfig};
    /// let mut pair = Pair::new(Config::default(), Config::default(), LinkParams::default());
    /// let s = pair.client.conn.open_stream(StreamConfig::default())?;
    /// pair.client.conn.send(pair.now, s, Message::new("delta"))?;
    /// pair.client.conn.send(pair.now, s, Message::new("key").importance(1))?;
    /// pair.drive_bounded(10_000);
    /// // Both were still queued: the more important one went first.
    /// assert_eq!(&pair.server.received[0].data[..], b"key");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn importance(mut self, i: u8) -> Self {
        self.importance = i;
        self
    }
    /// Sets the deadline.
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, Message, Side, StreamConfig};
    /// use std::time::Duration;
    /// # let now = std::time::Instant::now();
    /// let mut c = Connection::new(Config::default(), Side::Client, now)?;
    /// let s = c.open_stream(StreamConfig::default())?;
    /// c.send(now, s, Message::new("frame").deadline(now + Duration::from_millis(40)))?;
    /// c.handle_timeout(now + Duration::from_millis(40)); // never written: expired
    /// assert_eq!((c.stats().expired_unsent, c.queued_bytes()), (1, 0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn deadline(mut self, d: Instant) -> Self {
        self.deadline = Some(d);
        self
    }
    /// Sets the quality-fairness cost.
    ///
    /// ```
    /// use lowtide_proto::Message;
    /// // Quality fairness counts frames, not bytes: a key frame and a delta cost the same.
    /// let key = Message::new(vec![0u8; 20_000]).cost(1.0);
    /// let delta = Message::new(vec![0u8; 800]).cost(1.0);
    /// assert_eq!(key.cost, delta.cost);
    /// assert_eq!(Message::new("x").cost, None); // default: the length
    /// ```
    pub fn cost(mut self, c: f64) -> Self {
        self.cost = Some(c);
        self
    }
}

/// Observability timestamps of one message on the sender (sender clock).
///
/// ```
/// use lowtide_proto::sim::{LinkParams, Pair};
/// use lowtide_proto::{Config, Event, Message, StreamConfig};
/// let mut pair = Pair::new(Config::default(), Config::default(), LinkParams::default());
/// let s = pair.client.conn.open_stream(StreamConfig::default())?;
/// pair.client.conn.send(pair.now, s, Message::new(vec![0u8; 1000]))?;
/// pair.drive_bounded(10_000);
/// let acked = pair.client.events.iter().find_map(|e| match e {
///     Event::Acked { times, .. } => Some(*times),
///     _ => None,
/// });
/// let t = acked.expect("the receiver acknowledged the message");
/// // 10 ms one way: the P-ACK came at least a round trip after the last write.
/// assert!(t.acked.unwrap() - t.last_write.unwrap() >= std::time::Duration::from_millis(20));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageTimes {
    /// `send` was called.
    pub enqueued: Instant,
    /// First byte handed to the kernel.
    pub first_write: Option<Instant>,
    /// Last byte handed to the kernel.
    pub last_write: Option<Instant>,
    /// P-ACK covering the last byte processed.
    pub acked: Option<Instant>,
}

/// What happened to a message, stream or the channel.
///
/// ```
/// use lowtide_proto::sim::{LinkParams, Pair};
/// use lowtide_proto::{Config, Event, Message, StreamConfig};
/// let mut pair = Pair::new(Config::default(), Config::default(), LinkParams::default());
/// let s = pair.client.conn.open_stream(StreamConfig { weight: 2.0 })?;
/// pair.client.conn.send(pair.now, s, Message::new("hi"))?;
/// pair.drive_bounded(10_000);
/// assert!(pair.server.events.contains(&Event::StreamOpened { stream: s, weight: 2.0 }));
/// assert!(pair.client.events.iter().any(|e| matches!(e, Event::Written { .. })));
/// assert!(pair.client.events.iter().any(|e| matches!(e, Event::Acked { .. })));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Event {
    /// The whole message is in the kernel.
    Written {
        /// Message.
        id: MessageId,
        /// Timestamps so far.
        times: MessageTimes,
    },
    /// The receiver acknowledged the message (P-ACK).
    Acked {
        /// Message.
        id: MessageId,
        /// Timestamps.
        times: MessageTimes,
        /// Receiver clock in the P-ACK, µs since its epoch.
        peer_recv_time_us: u64,
    },
    /// We withdrew the message (application or deadline).
    Cancelled {
        /// Message.
        id: MessageId,
        /// Why.
        reason: CancelReason,
        /// Bytes that had been staged for the kernel (>0: the receiver was told to abort).
        sent: u64,
    },
    /// The peer withdrew one of its messages.
    PeerCancelled(PeerCancelled),
    /// The peer opened a stream.
    StreamOpened {
        /// Stream id.
        stream: u64,
        /// Its weight.
        weight: f64,
    },
    /// The peer closed a stream.
    StreamClosed {
        /// Stream id.
        stream: u64,
    },
    /// DBAT's smoothed send queue crossed its threshold (`onset`) or fell back below it.
    Congestion {
        /// `true` when congestion starts (or worsens: the average doubled since the last
        /// onset), `false` when it clears.
        onset: bool,
        /// Average send-queue size, bytes.
        queue: u64,
        /// The threshold (probed bandwidth × weighted RTT), bytes.
        threshold: u64,
        /// The transport's achieved-rate estimate, bytes per second.
        rate_estimate: u64,
    },
    /// A packet-pair probe finished ([`Config::probe_at_start`]).
    Probed(ProbeResult),
    /// The channel moved to a backup connection (failover; `crate::failover`).
    Failover(FailoverReport),
    /// The channel is closed.
    Closed {
        /// Closed by the peer's CLOSE frame.
        by_peer: bool,
        /// Close code.
        code: u64,
        /// Reason.
        reason: String,
    },
}

/// Counters, by reason, for reports.
///
/// ```
/// use lowtide_proto::{Config, Connection, Message, Side, StreamConfig};
/// # let now = std::time::Instant::now();
/// let mut c = Connection::new(Config::default(), Side::Client, now)?;
/// let s = c.open_stream(StreamConfig::default())?;
/// let id = c.send(now, s, Message::new("late"))?;
/// c.cancel(id);
/// let st = c.stats();
/// assert_eq!((st.messages_queued, st.cancelled_unsent, st.messages_written), (1, 1, 0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stats {
    /// Messages accepted by `send`.
    pub messages_queued: u64,
    /// Messages completely written to the kernel.
    pub messages_written: u64,
    /// Messages acknowledged by P-ACK.
    pub messages_acked: u64,
    /// Cancelled by the application before any byte was staged.
    pub cancelled_unsent: u64,
    /// Cancelled by the application after some bytes were staged (abort sent).
    pub cancelled_partial: u64,
    /// Expired before any byte was staged.
    pub expired_unsent: u64,
    /// Expired after some bytes were staged.
    pub expired_partial: u64,
    /// Chunks staged.
    pub chunks_sent: u64,
    /// Bytes handed to the kernel.
    pub bytes_written: u64,
    /// Write system calls that handed bytes to the kernel (one per `handle_written`).
    pub write_calls: u64,
    /// Write opportunities at which the controller blocked.
    pub controller_blocked: u64,
    /// Messages delivered to the application.
    pub messages_received: u64,
    /// Packet-pair probes sent.
    pub probes_sent: u64,
    /// Probe reports ignored: unknown id, or for a probe not yet written.
    pub probe_reports_ignored: u64,
    /// Peer cancellations received.
    pub peer_cancelled: u64,
    /// P-ACKs sent.
    pub packs_sent: u64,
    /// Written messages forgotten before their P-ACK (the peer did not acknowledge).
    pub ack_tracking_dropped: u64,
    /// Switches to a backup connection, made (connecting side) or followed (accepting side).
    pub failovers: u64,
    /// Failovers after which the old connection still acknowledged bytes past the stall point
    /// (an estimate of false positives, `failover::old_path`).
    pub false_failovers: u64,
    /// Messages queued again by failovers.
    pub resent_messages: u64,
    /// Messages not P-ACKed at a failover whose deadline had passed (cancelled, not resent).
    pub failover_expired: u64,
    /// Backup connections refused (more idle ones than `failover.backups`).
    pub backups_refused: u64,
    /// Stalls detected while no backup connection was ready.
    pub stalls_without_backup: u64,
    /// Stall verdicts of the P-ACK rule held back because the kernel still received ACKs
    /// (its own loss recovery at work; once per oldest write, `failover::stall`).
    pub stalls_held_by_acks: u64,
    /// Written messages whose copy for resending was dropped (more unacknowledged than
    /// `max_queued_bytes`): a failover could not resend them.
    pub resend_tracking_dropped: u64,
    /// Received copies of messages already delivered, dropped (identical to the first copy).
    pub duplicates_dropped: u64,
    /// Received copies dropped without comparison (first copy's hash forgotten, or cancelled).
    pub duplicates_unverified: u64,
    /// Staging passes that ended because the next message was below the importance reserve's
    /// `min_importance` and only the reserve was left (`crate::reserve`).
    pub reserve_held: u64,
    /// Bytes of important messages staged into the reserve (beyond what less important data
    /// may fill).
    pub reserve_bytes_used: u64,
    /// The duplicate lane's counters (`crate::failover::duplicate`; zero when off).
    pub lane: DuplicateStats,
}

/// A controller decision with the state it was taken on, for plots.
///
/// ```
/// use lowtide_proto::sim::{LinkParams, Pair};
/// use lowtide_proto::{Config, Message, StreamConfig};
/// let mut pair = Pair::new(Config::default(), Config::default(), LinkParams::default());
/// pair.client.conn.record_decisions(1000);
/// let s = pair.client.conn.open_stream(StreamConfig::default())?;
/// pair.client.conn.send(pair.now, s, Message::new(vec![0u8; 100_000]))?;
/// pair.drive_bounded(100_000);
/// let log = pair.client.conn.drain_decisions();
/// // MIN_BUF(1, 3) at cwnd 20: the kernel queue never exceeds 23 segments.
/// assert!(log.iter().all(|r| r.decision.limit == 23 * 1000));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct DecisionRecord {
    /// µs since the connection's epoch.
    pub at_us: u64,
    /// Kernel snapshot.
    pub tcp: TcpState,
    /// Application progress.
    pub app: AppProgress,
    /// Decision.
    pub decision: Decision,
}

/// What a write opportunity has to do ([`Connection::transmit_work`]).
///
/// ```
/// use lowtide_proto::{Config, Connection, Message, Side, StreamConfig, TransmitWork};
/// # let now = std::time::Instant::now();
/// let mut c = Connection::new(Config::default(), Side::Client, now)?;
/// let s = c.open_stream(StreamConfig::default())?;
/// let id = c.send(now, s, Message::new("x"))?;
/// assert_eq!(c.transmit_work(), TransmitWork::Decide); // the hello and a message
/// c.cancel(id);
/// assert_ne!(c.transmit_work(), TransmitWork::Nothing); // the hello is still unwritten
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransmitWork {
    /// Nothing: no data or control frames to send, and the controller decides only about
    /// sending (its decision would change nothing).
    Nothing,
    /// Only control frames, which bypass the controller: the decision cannot stage data.
    ControlOnly,
    /// Data may be staged (or the controller follows the kernel while idle, or decisions are
    /// recorded): a decision on a fresh kernel sample.
    Decide,
}

#[derive(Debug)]
struct Marker {
    start: u64,
    end: u64,
    id: MessageId,
    enqueued: Instant,
    first: bool,
    last: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    Closed,
}

/// Written messages remembered for `Acked` events; beyond this the oldest are forgotten.
const MAX_UNACKED_TRACKED: usize = 1 << 20;

/// Payloads at most this long are copied into the staging buffer; longer ones are staged by
/// reference (a separate `writev` segment).
const COPY_THRESHOLD: usize = 2048;

/// Packet-pair probing state (`docs/dbat.md`): at most one probe of ours in flight and one of
/// the peer's being timed, so a peer cannot grow it.
#[derive(Debug, Default)]
struct Probing {
    /// The peer announced that it answers probes.
    peer_answers: bool,
    /// A probe should go out at the next aligned write opportunity.
    wanted: bool,
    next_id: u64,
    /// Our probe in flight: id, channel offset of its end, when the kernel took its end.
    sent: Option<(u64, u64, Option<Instant>)>,
    /// The peer's probe: id and arrival of its first packet.
    first_arrival: Option<(u64, Instant)>,
}

/// One lowtide channel, sans IO.
///
/// The module documentation fixes the call order; here it is by hand, with a `Vec<u8>`
/// standing in for the TCP connection (see [`sim::Pair`](crate::sim::Pair) for a harness with
/// a model of the kernel and the link):
///
/// ```
/// use lowtide_proto::{Config, Connection, Event, Message, Side, StreamConfig, TcpState};
/// use std::time::Instant;
///
/// /// One write opportunity: stage, "write" everything, report it.
/// fn write(conn: &mut Connection, now: Instant, socket: &mut Vec<u8>) {
///     let decision = conn.poll_transmit(now, &TcpState::default());
///     assert!(!decision.blocked());
///     let before = socket.len();
///     for segment in conn.transmit_segments() {
///         socket.extend_from_slice(segment);
///     }
///     conn.handle_written(now, socket.len() - before);
/// }
///
/// let now = Instant::now();
/// let mut client = Connection::new(Config::default(), Side::Client, now)?;
/// let mut server = Connection::new(Config::default(), Side::Server, now)?;
/// let stream = client.open_stream(StreamConfig::default())?;
/// client.send(now, stream, Message::new("hello").importance(1))?;
///
/// let mut socket = Vec::new();
/// write(&mut client, now, &mut socket);
/// server.handle_bytes(now, &socket)?;
///
/// let m = server.poll_message().expect("a whole message arrived");
/// assert_eq!((m.stream, m.importance, &m.data[..]), (stream, 1, &b"hello"[..]));
/// assert_eq!(server.poll_event(), Some(Event::StreamOpened { stream, weight: 1.0 }));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Connection {
    config: Config,
    side: Side,
    epoch: Instant,
    state: State,
    controller: Box<dyn LatencyController>,
    // handshake
    peer_hello: bool,
    peer_max_message: u64,
    peer_max_chunk: u64,
    peer_max_streams: u64,
    // send side
    streams: BTreeMap<u64, SendStream>,
    sched: Scheduler,
    next_stream: u64,
    deadlines: BTreeSet<(Instant, MessageId)>,
    queued_bytes: u64,
    control: Vec<u8>,
    scratch: Vec<u8>,
    small: BytesMut,
    staged: VecDeque<Bytes>,
    staged_len: u64,
    kernel_room: Option<u64>,
    markers: VecDeque<Marker>,
    first_writes: BTreeMap<MessageId, Instant>,
    unacked: VecDeque<(u64, MessageId, Instant, Instant, Instant)>,
    written: u64,
    /// End of the last message byte written (control frames excluded: a write of P-ACKs
    /// alone is never acknowledged).
    data_written: u64,
    acked: u64,
    last_decision: Option<Decision>,
    decisions: Option<(usize, VecDeque<DecisionRecord>)>,
    // receive side
    /// Unparsed bytes: an incomplete frame (or handshake) at the end of the last read.
    inbuf: BytesMut,
    /// Start and end address of the allocation the last read buffer lay in: a slice of a
    /// read pins all of it, also the part earlier reads used.
    read_alloc: (usize, usize),
    consumed: u64,
    reasm: Reassembly,
    peer_streams: BTreeSet<u64>,
    last_pack_bytes: u64,
    last_pack_at: Option<Instant>,
    pack_needed: bool,
    pack_due: Option<Instant>,
    // both
    events: VecDeque<Event>,
    stats: Stats,
    error: Option<ProtocolError>,
    peer_closed: bool,
    probing: Probing,
    /// Receive budget left for reservations while parsing the current frame.
    spare: u64,
    /// Failover state (`failover = Some(..)` in the config).
    failover: Option<Box<switch::PathState>>,
    /// Duplicate lane (`duplicate = Some(..)`): copies to send, or the lane's parser.
    lane: Option<Box<DuplicateLane>>,
}

// Failover's switch between connections lives with the rest of failover; it is a child of
// this module because it rewinds the send and receive state.
#[path = "failover/switch.rs"]
mod switch;

// The duplicate lane's connection-side glue (sending copies, receiving them once).
#[path = "failover/lane.rs"]
mod lane;

impl Connection {
    /// A new channel; `now` becomes its epoch (wire timestamps count µs from it).
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, Side};
    /// # let now = std::time::Instant::now();
    /// let c = Connection::new(Config::default(), Side::Server, now)?;
    /// assert!(!c.is_established() && c.epoch() == now);
    /// // The configuration is checked: the error names the field.
    /// let bad = Config { max_streams: 0, ..Config::default() };
    /// assert_eq!(Connection::new(bad, Side::Client, now).unwrap_err().field, "max_streams");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(config: Config, side: Side, now: Instant) -> Result<Self, ConfigError> {
        Self::with_token(config, side, now, 0)
    }

    /// A new channel whose hello carries `token` (hello key 4; failover's connecting side: a
    /// random nonzero value naming the channel to the peer; 0: none).
    ///
    /// ```
    /// use lowtide_proto::wire::{Hello, HelloOption};
    /// use lowtide_proto::{Config, Connection, Side, TcpState};
    /// # let now = std::time::Instant::now();
    /// let mut c = Connection::with_token(Config::default(), Side::Client, now, 0x5eed)?;
    /// c.poll_transmit(now, &TcpState::default());
    /// let hello: Vec<u8> = c.transmit_segments().flatten().copied().collect();
    /// let (hello, _) = Hello::decode(&hello)?.expect("a whole hello");
    /// assert!(hello.options.contains(&HelloOption::ChannelToken(0x5eed)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_token(
        config: Config,
        side: Side,
        now: Instant,
        token: u64,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let controller = config.controller.build()?;
        let max_frame = config.max_chunk_len + MAX_HEADER_LEN as u64;
        let done = Delivered::new(
            config.failover.map_or(4096, |f| f.dedup_window as usize),
            config.failover.is_some(),
            config.max_streams as usize,
        );
        let reasm = Reassembly::new(
            config.max_message_size,
            config.max_reassembly_bytes,
            max_frame,
            config.max_pinning_reads as usize,
            done,
        );
        let mut c = Self {
            side,
            epoch: now,
            state: State::Open,
            controller,
            peer_hello: false,
            peer_max_message: config.max_message_size,
            peer_max_chunk: config.max_chunk_len,
            peer_max_streams: u64::from(config.max_streams),
            streams: BTreeMap::new(),
            sched: Scheduler::new(),
            next_stream: 0,
            deadlines: BTreeSet::new(),
            queued_bytes: 0,
            control: Vec::new(),
            scratch: Vec::with_capacity(MAX_HEADER_LEN),
            small: BytesMut::new(),
            staged: VecDeque::new(),
            staged_len: 0,
            kernel_room: None,
            markers: VecDeque::new(),
            first_writes: BTreeMap::new(),
            unacked: VecDeque::new(),
            data_written: 0,
            written: 0,
            acked: 0,
            last_decision: None,
            decisions: None,
            inbuf: BytesMut::new(),
            read_alloc: (0, 0),
            consumed: 0,
            reasm,
            peer_streams: BTreeSet::new(),
            last_pack_bytes: 0,
            last_pack_at: None,
            pack_needed: false,
            pack_due: None,
            events: VecDeque::new(),
            stats: Stats::default(),
            error: None,
            peer_closed: false,
            probing: Probing::default(),
            spare: 0,
            failover: config
                .failover
                .map(|f| Box::new(switch::PathState::new(&f))),
            lane: config
                .duplicate
                .map(|d| Box::new(DuplicateLane::new(d, config.max_queued_bytes))),
            config,
        };
        let mut options = vec![
            HelloOption::MaxMessageSize(c.config.max_message_size),
            HelloOption::MaxChunkLen(c.config.max_chunk_len),
            HelloOption::MaxStreams(u64::from(c.config.max_streams)),
            HelloOption::AnswersProbes(1),
        ];
        if token != 0 {
            options.push(HelloOption::ChannelToken(token));
        }
        Hello {
            version: VERSION,
            options,
        }
        .encode(&mut c.control);
        Ok(c)
    }

    /// The configuration.
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, Side};
    /// # let now = std::time::Instant::now();
    /// let c = Connection::new(Config { max_streams: 8, ..Config::default() }, Side::Client, now)?;
    /// assert_eq!(c.config().max_streams, 8);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The clock origin of this side's wire timestamps.
    ///
    /// ```
    /// use lowtide_proto::sim::{LinkParams, Pair};
    /// use lowtide_proto::{Config, Message, StreamConfig};
    /// let mut pair = Pair::new(Config::default(), Config::default(), LinkParams::default());
    /// let s = pair.client.conn.open_stream(StreamConfig::default())?;
    /// pair.client.conn.send(pair.now, s, Message::new("t"))?;
    /// let sent = pair.now;
    /// pair.drive_bounded(10_000);
    /// // Wire timestamps count µs from the sender's epoch.
    /// let m = &pair.server.received[0];
    /// assert_eq!(m.send_time_us, (sent - pair.client.conn.epoch()).as_micros() as u64);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn epoch(&self) -> Instant {
        self.epoch
    }

    /// How many bytes a message sent on `stream` at `now` with `importance` may carry so
    /// that its frame fills exactly `mss` bytes: one segment. Goel, Krasic and Walpole,
    /// "Low-Latency Adaptive Streaming over TCP", Section 6.2: applications align their data
    /// with packets by writing MSS-sized packets; over lowtide a message of `mss` bytes takes
    /// its frame header into a second segment and waits for a second opening of the window.
    /// While every write is a whole number of such frames, the kernel's segments stay
    /// aligned with the messages. `None` for a stream we cannot send on or an `mss` that
    /// leaves no payload. (The header's send-time field grows by a byte at 2^21 µs, 2^28 µs
    /// ...: a message sent later than `now` may come out a byte longer at those moments.)
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, Message, Side, StreamConfig, TcpState};
    /// # let now = std::time::Instant::now();
    /// let mut c = Connection::new(Config::default(), Side::Client, now)?;
    /// let s = c.open_stream(StreamConfig::default())?;
    /// let tcp = TcpState { cwnd: 10, mss: 1448, ..TcpState::default() };
    /// c.poll_transmit(now, &tcp); // the stream's STREAM_OPEN
    /// let n = c.staged_len() as usize;
    /// c.handle_written(now, n);
    /// let p = c.one_segment_payload(now, s, 0, 1448).unwrap();
    /// c.send(now, s, Message::new(vec![0u8; p]))?;
    /// c.poll_transmit(now, &tcp);
    /// assert_eq!(c.staged_len(), 1448); // header and payload: one segment
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn one_segment_payload(
        &self,
        now: Instant,
        stream: u64,
        importance: u8,
        mss: u32,
    ) -> Option<usize> {
        let seq = match self.streams.get(&stream) {
            Some(s) if !s.closing => s.next_seq,
            Some(_) => return None,
            None if self.peer_streams.contains(&stream) => 0,
            None => return None,
        };
        let send_time_us = self.us_since_epoch(now);
        let frame = |len: u64| {
            let first = FirstChunk {
                importance,
                send_time_us,
                total_len: len,
            };
            len + Frame::data_header_len(stream, seq, Some(first), 0, len) as u64
        };
        let mss = u64::from(mss);
        // The header holds the payload's length twice: a shorter payload may need shorter
        // varints, so step down until the frame fits, then up while it still does.
        let mut len = mss.saturating_sub(frame(0));
        while len > 0 && frame(len) > mss {
            len -= 1;
        }
        while frame(len + 1) <= mss {
            len += 1;
        }
        let max = self.config.max_message_size.min(self.peer_max_message);
        (len > 0 && frame(len) <= mss).then_some(len.min(max) as usize)
    }

    /// Counters.
    ///
    /// ```
    /// use lowtide_proto::sim::{LinkParams, Pair};
    /// use lowtide_proto::{Config, Message, StreamConfig};
    /// let mut pair = Pair::new(Config::default(), Config::default(), LinkParams::default());
    /// let s = pair.client.conn.open_stream(StreamConfig::default())?;
    /// for _ in 0..3 {
    ///     pair.client.conn.send(pair.now, s, Message::new("x"))?;
    /// }
    /// pair.drive_bounded(10_000);
    /// let (c, r) = (pair.client.conn.stats(), pair.server.conn.stats());
    /// assert_eq!((c.messages_queued, c.messages_written, r.messages_received), (3, 3, 3));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Name of the latency controller.
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, ControllerConfig, Side};
    /// # let now = std::time::Instant::now();
    /// let c = Connection::new(Config::default(), Side::Client, now)?;
    /// assert_eq!(c.controller_name(), "min_buf");
    /// let cfg = Config { controller: ControllerConfig::PaceA { b: 3 }, ..Config::default() };
    /// assert_eq!(Connection::new(cfg, Side::Client, now)?.controller_name(), "pace_a");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn controller_name(&self) -> &'static str {
        self.controller.name()
    }

    /// The controller's queue average and threshold, bytes, if it keeps them (DBAT).
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, Side};
    /// # let now = std::time::Instant::now();
    /// let c = Connection::new(Config::default(), Side::Client, now)?;
    /// assert_eq!(c.controller_queue_level(), None); // MinBuf keeps none
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn controller_queue_level(&self) -> Option<(u64, u64)> {
        self.controller.queue_level()
    }

    /// Whether the controller reads [`TcpState`] (else the driver may pass a default one). A
    /// pending probe needs it too (the MSS and the kernel's unsent bytes).
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, ControllerConfig, Side};
    /// # let now = std::time::Instant::now();
    /// assert!(Connection::new(Config::default(), Side::Client, now)?.needs_tcp_state());
    /// // Unlimited reads nothing: the driver may skip TCP_INFO.
    /// let cfg = Config { controller: ControllerConfig::Unlimited, ..Config::default() };
    /// assert!(!Connection::new(cfg, Side::Client, now)?.needs_tcp_state());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn needs_tcp_state(&self) -> bool {
        self.controller.needs_tcp_state() || self.probing.wanted
    }

    /// The application's stream bit rate changed, bytes per second (DBAT sizes slow start
    /// from it; other controllers ignore it).
    ///
    /// ```
    /// use lowtide_proto::controller::DbatConfig;
    /// use lowtide_proto::{Config, Connection, ControllerConfig, Side, TcpState};
    /// use std::time::Duration;
    /// # let now = std::time::Instant::now();
    /// let cfg = Config { controller: ControllerConfig::Dbat(DbatConfig::default()), ..Config::default() };
    /// let mut c = Connection::new(cfg, Side::Client, now)?;
    /// let tcp = TcpState { cwnd: 10, mss: 1000, rtt: Duration::from_millis(400), ..TcpState::default() };
    /// let before = c.poll_transmit(now, &tcp).limit;
    /// c.set_stream_rate(400_000); // 3.2 Mbit/s: a longer slow start needs a larger buffer
    /// assert!(c.poll_transmit(now, &tcp).limit > before);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_stream_rate(&mut self, bytes_per_sec: u64) {
        self.controller.set_stream_rate(bytes_per_sec);
    }

    /// Asks for a packet-pair probe at the next write opportunity where nothing is staged or
    /// unsent (so each probe frame fills one segment). Ignored if the peer does not answer
    /// probes or one is in flight; returns whether it was requested.
    ///
    /// ```
    /// use lowtide_proto::sim::{LinkParams, Pair};
    /// use lowtide_proto::Config;
    /// let mut pair = Pair::new(Config::default(), Config::default(), LinkParams::default());
    /// assert!(!pair.client.conn.request_probe()); // the peer has not said it answers probes
    /// pair.drive_bounded(10_000); // the hellos cross
    /// assert!(pair.client.conn.request_probe());
    /// pair.drive_bounded(10_000);
    /// assert_eq!(pair.client.conn.stats().probes_sent, 1);
    /// ```
    pub fn request_probe(&mut self) -> bool {
        if !self.probing.peer_answers || self.probing.sent.is_some() {
            return false;
        }
        self.probing.wanted = true;
        true
    }

    /// The error that closed the channel, if any.
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, Side};
    /// # let now = std::time::Instant::now();
    /// let mut c = Connection::new(Config::default(), Side::Server, now)?;
    /// assert!(c.error().is_none());
    /// // A peer that does not speak lowtide.
    /// let e = c.handle_bytes(now, b"GET / HTTP/1.1\r\n\r\n").unwrap_err();
    /// assert_eq!(c.error(), Some(&e));
    /// assert!(c.is_closed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn error(&self) -> Option<&ProtocolError> {
        self.error.as_ref()
    }

    /// Whether the channel is closed (by us, the peer, or an error).
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, Message, Side, StreamConfig};
    /// # let now = std::time::Instant::now();
    /// let mut c = Connection::new(Config::default(), Side::Client, now)?;
    /// let s = c.open_stream(StreamConfig::default())?;
    /// assert!(!c.is_closed());
    /// c.close(0, "done");
    /// assert!(c.is_closed());
    /// assert!(c.send(now, s, Message::new("late")).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_closed(&self) -> bool {
        self.state == State::Closed
    }

    /// Whether the peer's handshake arrived.
    ///
    /// ```
    /// use lowtide_proto::sim::{LinkParams, Pair};
    /// use lowtide_proto::Config;
    /// let mut pair = Pair::new(Config::default(), Config::default(), LinkParams::default());
    /// assert!(!pair.client.conn.is_established());
    /// pair.drive_bounded(10_000);
    /// assert!(pair.client.conn.is_established() && pair.server.conn.is_established());
    /// ```
    pub fn is_established(&self) -> bool {
        self.peer_hello
    }

    /// Keep the last `capacity` controller decisions (0 disables).
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, Side, TcpState};
    /// # let now = std::time::Instant::now();
    /// let mut c = Connection::new(Config::default(), Side::Client, now)?;
    /// c.record_decisions(4); // a ring of the last 4
    /// for _ in 0..10 {
    ///     c.poll_transmit(now, &TcpState::default());
    /// }
    /// assert_eq!(c.drain_decisions().len(), 4);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn record_decisions(&mut self, capacity: usize) {
        self.decisions = (capacity > 0).then(|| (capacity, VecDeque::new()));
    }

    /// Takes the recorded decisions.
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, Side, TcpState};
    /// # let now = std::time::Instant::now();
    /// let mut c = Connection::new(Config::default(), Side::Client, now)?;
    /// assert!(c.drain_decisions().is_empty()); // recording is off by default
    /// c.record_decisions(16);
    /// c.poll_transmit(now, &TcpState { cwnd: 10, mss: 1000, ..TcpState::default() });
    /// let log = c.drain_decisions();
    /// assert_eq!((log.len(), log[0].tcp.cwnd, log[0].decision.limit), (1, 10, 13_000));
    /// assert!(c.drain_decisions().is_empty()); // taken
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn drain_decisions(&mut self) -> Vec<DecisionRecord> {
        match &mut self.decisions {
            Some((_, d)) => d.drain(..).collect(),
            None => Vec::new(),
        }
    }

    fn us_since_epoch(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.epoch).as_micros() as u64
    }

    // ---------------------------------------------------------------- streams and messages

    fn stream_limit(&self) -> u64 {
        u64::from(self.config.max_streams).min(self.peer_max_streams)
    }

    /// Opens a stream of ours and announces it.
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, Side, StreamConfig};
    /// # let now = std::time::Instant::now();
    /// let mut c = Connection::new(Config { max_streams: 2, ..Config::default() }, Side::Client, now)?;
    /// let a = c.open_stream(StreamConfig::default())?;
    /// let b = c.open_stream(StreamConfig { weight: 3.0, ..StreamConfig::default() })?;
    /// assert_ne!(a, b);
    /// assert!(c.open_stream(StreamConfig::default()).is_err()); // max_streams
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open_stream(&mut self, cfg: StreamConfig) -> Result<u64, StreamError> {
        cfg.validate()?;
        if self.is_closed() {
            return Err(StreamError::Closed);
        }
        let max = self.stream_limit();
        if self.streams.len() as u64 >= max {
            return Err(StreamError::TooManyStreams { max });
        }
        let id = self.next_stream * 2 + u64::from(self.side == Side::Server);
        self.next_stream += 1;
        self.streams.insert(id, SendStream::new());
        self.sched.add(id, cfg.weight);
        Frame::StreamOpen {
            stream: id,
            weight_milli: (cfg.weight * 1000.0).round() as u64,
        }
        .encode(&mut self.control);
        Ok(id)
    }

    /// Closes our direction of a stream once its queue is empty.
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, Message, Side, StreamConfig};
    /// # let now = std::time::Instant::now();
    /// let mut c = Connection::new(Config::default(), Side::Client, now)?;
    /// let s = c.open_stream(StreamConfig::default())?;
    /// c.send(now, s, Message::new("last"))?;
    /// c.close_stream(s)?; // after "last" is sent
    /// assert!(c.send(now, s, Message::new("more")).is_err());
    /// assert!(c.close_stream(s + 100).is_err()); // unknown stream
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn close_stream(&mut self, stream: u64) -> Result<(), StreamError> {
        let s = self
            .streams
            .get_mut(&stream)
            .ok_or(StreamError::UnknownStream(stream))?;
        s.closing = true;
        if s.queue.is_empty() {
            self.finish_stream(stream);
        }
        Ok(())
    }

    fn finish_stream(&mut self, stream: u64) {
        self.streams.remove(&stream);
        self.sched.remove(stream);
        Frame::StreamClose { stream }.encode(&mut self.control);
    }

    /// Queues a message. Fails on closed channels, unknown or closing streams, size and queue
    /// limits.
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, Message, Side, StreamConfig};
    /// # let now = std::time::Instant::now();
    /// let cfg = Config { max_message_size: 1000, ..Config::default() };
    /// let mut c = Connection::new(cfg, Side::Client, now)?;
    /// let s = c.open_stream(StreamConfig::default())?;
    /// assert_eq!(c.send(now, s, Message::new("a"))?.seq, 0);
    /// assert_eq!(c.send(now, s, Message::new("b"))?.seq, 1);
    /// assert!(c.send(now, s, Message::new(vec![0u8; 1001])).is_err()); // max_message_size
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn send(
        &mut self,
        now: Instant,
        stream: u64,
        msg: Message,
    ) -> Result<MessageId, SendError> {
        if self.is_closed() {
            return Err(SendError::Closed);
        }
        let size = msg.data.len() as u64;
        let max = self.config.max_message_size.min(self.peer_max_message);
        if size > max {
            return Err(SendError::MessageTooLarge { size, max });
        }
        if self.queued_bytes + size > self.config.max_queued_bytes {
            return Err(SendError::QueueFull {
                queued: self.queued_bytes,
                max: self.config.max_queued_bytes,
            });
        }
        if !self.streams.contains_key(&stream) {
            if !self.peer_streams.contains(&stream) {
                return Err(SendError::UnknownStream(stream));
            }
            // Answering on a stream the peer opened: it knows the id already.
            self.streams.insert(stream, SendStream::new());
            self.sched.add(stream, 1.0);
        }
        let send_time_us = self.us_since_epoch(now);
        let s = self.streams.get_mut(&stream).expect("inserted above");
        if s.closing {
            return Err(SendError::StreamClosing(stream));
        }
        let seq = s.next_seq;
        s.next_seq += 1;
        let was_empty = s.queue.is_empty();
        let id = MessageId {
            stream,
            seq,
            importance: msg.importance,
        };
        if let (Some(lane), Side::Client) = (&mut self.lane, self.side) {
            lane.offer(id, send_time_us, msg.deadline, msg.data.clone());
        }
        s.queue.push(
            msg.importance,
            seq,
            Pending {
                cost: msg.cost.unwrap_or(size as f64),
                data: msg.data,
                sent: 0,
                deadline: msg.deadline,
                enqueued: now,
                send_time_us,
            },
        );
        if was_empty {
            self.sched.set_active(stream, true);
        }
        if let Some(d) = msg.deadline {
            self.deadlines.insert((d, id));
        }
        self.queued_bytes += size;
        self.stats.messages_queued += 1;
        Ok(id)
    }

    /// Bytes waiting in send queues (not yet staged).
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, ControllerConfig, Message, Side, StreamConfig, TcpState};
    /// # let now = std::time::Instant::now();
    /// let cfg = Config { controller: ControllerConfig::Unlimited, ..Config::default() };
    /// let mut c = Connection::new(cfg, Side::Client, now)?;
    /// let s = c.open_stream(StreamConfig::default())?;
    /// c.send(now, s, Message::new(vec![0u8; 3000]))?;
    /// assert_eq!(c.queued_bytes(), 3000);
    /// c.poll_transmit(now, &TcpState::default()); // staged: no longer queued
    /// assert_eq!(c.queued_bytes(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn queued_bytes(&self) -> u64 {
        self.queued_bytes
    }

    /// Whether any stream has data queued.
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, Message, Side, StreamConfig};
    /// # let now = std::time::Instant::now();
    /// let mut c = Connection::new(Config::default(), Side::Client, now)?;
    /// let s = c.open_stream(StreamConfig::default())?;
    /// assert!(!c.has_queued());
    /// let id = c.send(now, s, Message::new("x"))?;
    /// assert!(c.has_queued());
    /// c.cancel(id);
    /// assert!(!c.has_queued());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn has_queued(&self) -> bool {
        self.queued_bytes > 0 || self.streams.values().any(|s| !s.queue.is_empty())
    }

    /// An upper bound on the bytes that staging everything queued takes on the wire: the
    /// payload plus, for every frame it can make, the largest data frame header. A staging
    /// pass cuts frames at quanta of at least 64 bytes (`Config::chunk_len`), at message ends
    /// and once where its budget ends, so it makes at most `bytes / 64 + messages + 1`.
    ///
    /// ```
    /// use lowtide_proto::wire::Frame;
    /// use lowtide_proto::{Config, Connection, Message, Side, StreamConfig};
    /// # let now = std::time::Instant::now();
    /// let mut c = Connection::new(Config::default(), Side::Client, now)?;
    /// let s = c.open_stream(StreamConfig::default())?;
    /// c.send(now, s, Message::new(vec![0u8; 1000]))?;
    /// // 1000 bytes of payload, at most 1000 / 64 + 1 + 1 = 17 frame headers.
    /// assert_eq!(c.queued_wire_bound(), 1000 + 17 * Frame::MAX_DATA_HEADER_LEN as u64);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn queued_wire_bound(&self) -> u64 {
        let messages: usize = self.streams.values().map(|s| s.queue.len()).sum();
        let frames = self.queued_bytes / 64 + messages as u64 + 1;
        self.queued_bytes + frames * Frame::MAX_DATA_HEADER_LEN as u64
    }

    /// What a write opportunity has to do now, so that a driver can spare the kernel sample
    /// where the decision cannot matter (call [`handle_timeout`](Self::handle_timeout) first:
    /// it may stage a P-ACK or CANCEL).
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, ControllerConfig, Message, Side, StreamConfig};
    /// use lowtide_proto::{TcpState, TransmitWork};
    /// # let now = std::time::Instant::now();
    /// let cfg = Config { controller: ControllerConfig::Unlimited, ..Config::default() };
    /// let mut c = Connection::new(cfg, Side::Client, now)?;
    /// let s = c.open_stream(StreamConfig::default())?;
    /// c.send(now, s, Message::new("frame"))?;
    /// assert_eq!(c.transmit_work(), TransmitWork::Decide);
    /// // Stage and write everything: a wake-up now has nothing to decide.
    /// c.poll_transmit(now, &TcpState::default());
    /// let n: usize = c.transmit_segments().map(|seg| seg.len()).sum();
    /// c.handle_written(now, n);
    /// assert_eq!(c.transmit_work(), TransmitWork::Nothing);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn transmit_work(&self) -> TransmitWork {
        if self.has_queued()
            || self.staged_len > 0
            || !self.small.is_empty()
            || self.probing.wanted
            || self.decisions.is_some()
            || self.controller.watches_idle()
        {
            TransmitWork::Decide
        } else if !self.control.is_empty() {
            TransmitWork::ControlOnly
        } else {
            TransmitWork::Nothing
        }
    }

    /// Withdraws a message that is not yet completely staged. Returns `false` if it is no longer
    /// queued (already written, cancelled, or unknown).
    ///
    /// ```
    /// use lowtide_proto::{CancelReason, Config, Connection, Event, Message, Side, StreamConfig};
    /// # let now = std::time::Instant::now();
    /// let mut c = Connection::new(Config::default(), Side::Client, now)?;
    /// let s = c.open_stream(StreamConfig::default())?;
    /// let id = c.send(now, s, Message::new(vec![0u8; 5000]))?;
    /// assert!(c.cancel(id));
    /// assert!(!c.cancel(id)); // already gone
    /// assert_eq!(c.poll_event(), Some(Event::Cancelled { id, reason: CancelReason::Application, sent: 0 }));
    /// assert_eq!(c.queued_bytes(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cancel(&mut self, id: MessageId) -> bool {
        self.withdraw(id, CancelReason::Application)
    }

    fn withdraw(&mut self, id: MessageId, reason: CancelReason) -> bool {
        let Some(s) = self.streams.get_mut(&id.stream) else {
            return false;
        };
        let Some(p) = s.queue.remove(id.importance, id.seq) else {
            return false;
        };
        let now_empty = s.queue.is_empty();
        let closing = s.closing;
        self.queued_bytes -= (p.data.len() - p.sent) as u64;
        if let Some(d) = p.deadline {
            self.deadlines.remove(&(d, id));
        }
        if let Some(lane) = &mut self.lane {
            let why = match reason {
                CancelReason::Application => Withdraw::Cancelled,
                CancelReason::Expired => Withdraw::Expired,
            };
            lane.withdraw(id, why);
        }
        let partial = p.sent > 0;
        match (reason, partial) {
            (CancelReason::Application, false) => self.stats.cancelled_unsent += 1,
            (CancelReason::Application, true) => self.stats.cancelled_partial += 1,
            (CancelReason::Expired, false) => self.stats.expired_unsent += 1,
            (CancelReason::Expired, true) => self.stats.expired_partial += 1,
        }
        tracing::trace!(
            stream = id.stream,
            seq = id.seq,
            ?reason,
            sent = p.sent,
            "message withdrawn"
        );
        Frame::Cancel {
            stream: id.stream,
            seq: id.seq,
            reason,
        }
        .encode(&mut self.control);
        self.events.push_back(Event::Cancelled {
            id,
            reason,
            sent: p.sent as u64,
        });
        if now_empty {
            self.sched.set_active(id.stream, false);
            if closing {
                self.finish_stream(id.stream);
            }
        }
        true
    }

    /// Closes the channel: a CLOSE frame is staged and nothing else will be.
    ///
    /// ```
    /// use lowtide_proto::sim::{LinkParams, Pair};
    /// use lowtide_proto::{Config, Event};
    /// let mut pair = Pair::new(Config::default(), Config::default(), LinkParams::default());
    /// pair.client.conn.close(0, "bye");
    /// pair.drive_bounded(10_000);
    /// assert!(pair.server.conn.is_closed());
    /// let closed = Event::Closed { by_peer: true, code: 0, reason: "bye".into() };
    /// assert_eq!(pair.server.events.last(), Some(&closed));
    /// ```
    pub fn close(&mut self, code: u64, reason: &str) {
        if self.is_closed() {
            return;
        }
        Frame::Close { code, reason }.encode(&mut self.control);
        self.state = State::Closed;
        self.events.push_back(Event::Closed {
            by_peer: false,
            code,
            reason: reason.to_owned(),
        });
    }

    // ---------------------------------------------------------------- time

    /// The earliest time at which [`handle_timeout`](Self::handle_timeout) has work.
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, Message, Side, StreamConfig};
    /// use std::time::Duration;
    /// # let now = std::time::Instant::now();
    /// let mut c = Connection::new(Config::default(), Side::Client, now)?;
    /// let s = c.open_stream(StreamConfig::default())?;
    /// let (late, soon) = (now + Duration::from_millis(90), now + Duration::from_millis(30));
    /// c.send(now, s, Message::new("b").deadline(late))?;
    /// c.send(now, s, Message::new("a").deadline(soon))?;
    /// assert_eq!(c.poll_timeout(), Some(soon)); // the earliest deadline
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn poll_timeout(&self) -> Option<Instant> {
        let deadline = self.deadlines.first().map(|(t, _)| *t);
        let wake = match self.last_decision {
            Some(Decision {
                wake: Wake::At(t), ..
            }) if self.has_queued() => Some(t),
            _ => None,
        };
        [deadline, self.pack_due, wake, self.stall_at()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Expires messages whose deadline passed and sends due P-ACKs.
    ///
    /// ```
    /// use lowtide_proto::{CancelReason, Config, Connection, Event, Message, Side, StreamConfig};
    /// use std::time::{Duration, Instant};
    /// let now = Instant::now();
    /// let mut c = Connection::new(Config::default(), Side::Client, now)?;
    /// let s = c.open_stream(StreamConfig::default())?;
    /// let due = now + Duration::from_millis(50);
    /// let id = c.send(now, s, Message::new("frame 17").deadline(due))?;
    /// assert_eq!(c.poll_timeout(), Some(due)); // the driver sleeps until then
    /// c.handle_timeout(due);
    /// assert_eq!(c.poll_event(), Some(Event::Cancelled { id, reason: CancelReason::Expired, sent: 0 }));
    /// assert_eq!(c.stats().expired_unsent, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&(t, id)) = self.deadlines.first() {
            if t > now {
                break;
            }
            self.deadlines.pop_first();
            self.withdraw(id, CancelReason::Expired);
        }
        if self.pack_due.is_some_and(|t| t <= now) {
            self.send_pack(now);
        }
        self.check_stall(now);
    }

    // ---------------------------------------------------------------- transmit

    /// What the kernel's send buffer takes now, bytes (`None`: unknown). Staging stops there
    /// (at least one MSS, and nothing while bytes the kernel refused are still staged): bytes
    /// staged beyond what the kernel takes wait in user space where a deadline can no longer
    /// withdraw them, a hidden send buffer. The driver sets it before each
    /// [`poll_transmit`](Self::poll_transmit).
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, ControllerConfig, Message, Side, StreamConfig, TcpState};
    /// # let now = std::time::Instant::now();
    /// let cfg = Config { controller: ControllerConfig::Unlimited, ..Config::default() };
    /// let mut c = Connection::new(cfg, Side::Client, now)?;
    /// let s = c.open_stream(StreamConfig::default())?;
    /// c.send(now, s, Message::new(vec![0u8; 100_000]))?;
    /// c.set_kernel_room(Some(8000)); // what the send buffer takes now
    /// c.poll_transmit(now, &TcpState::default());
    /// assert!(c.staged_len() <= 8000 + 1448); // the rest stays queued, still cancellable
    /// assert!(c.queued_bytes() > 90_000);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_kernel_room(&mut self, bytes: Option<u64>) {
        self.kernel_room = bytes;
    }

    /// Stages bytes for the kernel as far as the controller allows and returns its decision.
    /// The bytes are in [`transmit_segments`](Self::transmit_segments).
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, Message, Side, StreamConfig, TcpState};
    /// # let now = std::time::Instant::now();
    /// let mut c = Connection::new(Config::default(), Side::Client, now)?; // MIN_BUF(1, 3)
    /// let s = c.open_stream(StreamConfig::default())?;
    /// c.send(now, s, Message::new(vec![0u8; 100_000]))?;
    /// let tcp = TcpState { cwnd: 10, mss: 1000, ..TcpState::default() };
    /// let d = c.poll_transmit(now, &tcp);
    /// assert_eq!(d.limit, 13_000);
    /// assert!(c.staged_len() <= 13_000 && c.queued_bytes() > 87_000);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn poll_transmit(&mut self, now: Instant, tcp: &TcpState) -> Decision {
        // Bytes still staged now are bytes the kernel refused.
        let refused = self.staged_len;
        self.handle_timeout(now);
        self.stage_probe(tcp);
        self.flush_control();
        let app = AppProgress {
            written: self.written,
            acked: self.acked,
            staged: self.staged_len,
            queued: self.queued_bytes,
        };
        let mut d = self.controller.decide(tcp, &app, now);
        while let Some(sig) = self.controller.poll_signal() {
            self.events.push_back(Event::Congestion {
                onset: sig.onset,
                queue: sig.queue,
                threshold: sig.threshold,
                rate_estimate: sig.rate_estimate,
            });
        }
        if let Some((cap, rec)) = &mut self.decisions {
            if rec.len() == *cap {
                rec.pop_front();
            }
            rec.push_back(DecisionRecord {
                at_us: now.saturating_duration_since(self.epoch).as_micros() as u64,
                tcp: *tcp,
                app,
                decision: d,
            });
        }
        if self.state == State::Open {
            if d.blocked() {
                if self.has_queued() {
                    self.stats.controller_blocked += 1;
                }
            } else {
                let mss = tcp.mss_or_default();
                let kernel = match self.kernel_room {
                    None => u64::MAX,
                    // What the kernel refused last time goes first; nothing joins it.
                    Some(_) if refused > 0 => 0,
                    Some(r) => r.max(u64::from(mss)),
                };
                let room = self
                    .config
                    .max_batch
                    .saturating_sub(self.staged_len)
                    .min(kernel);
                let reserve = self.config.importance_reserve;
                let held = self.stage_data(d.allowance, room, mss);
                if let (true, Some(r)) = (held, reserve) {
                    // What applies now is the limit without the reserve: block (and wake)
                    // for the less important data waiting, not for the reserve's free room.
                    let app = AppProgress {
                        staged: self.staged_len,
                        queued: self.queued_bytes,
                        ..app
                    };
                    let low = d.limit.saturating_sub(r.bytes(mss));
                    d = crate::controller::decide_for_limit(low, tcp, &app, now);
                }
            }
        }
        self.seal_small();
        self.last_decision = Some(d);
        d
    }

    /// Stages a wanted probe pair: two frames of one MSS each, first in an empty kernel queue,
    /// so each fills one segment and their dispersion at the receiver is one segment's time at
    /// the bottleneck.
    fn stage_probe(&mut self, tcp: &TcpState) {
        if !self.probing.wanted
            || self.staged_len > 0
            || tcp.notsent > 0
            || self.state != State::Open
        {
            return;
        }
        self.probing.wanted = false;
        let id = self.probing.next_id;
        self.probing.next_id += 1;
        let mss = u64::from(tcp.mss_or_default());
        for index in 0..2 {
            self.scratch.clear();
            Frame::probe_of_len(id, index, mss).encode(&mut self.scratch);
            self.small.extend_from_slice(&self.scratch);
            self.staged_len += self.scratch.len() as u64;
        }
        self.probing.sent = Some((id, self.written + self.staged_len, None));
        self.stats.probes_sent += 1;
    }

    fn flush_control(&mut self) {
        if self.control.is_empty() {
            return;
        }
        let n = self.control.len() as u64;
        self.small.extend_from_slice(&self.control);
        self.control.clear();
        self.staged_len += n;
    }

    fn seal_small(&mut self) {
        if !self.small.is_empty() {
            self.staged.push_back(self.small.split().freeze());
        }
    }

    /// Stages frames up to the controller's `allowance` and the pass's `room`. The scheduler
    /// works in quanta of `chunk_len(mss)` (the fairness step between streams), but consecutive
    /// quanta of one message that the scheduler would pick anyway go out as one frame, up to
    /// `max_chunk_len`: the byte order on the wire is the same as with one frame per quantum (a
    /// message that arrives later can only preempt at the next staging pass either way), with
    /// one header instead of many.
    ///
    /// A frame is cut to fill the `allowance` exactly. `room` (the batch and the kernel's
    /// free space) only bounds how much one pass stages, so a pass that already staged a frame
    /// ends before the next one that does not fit instead of cutting it: a message cut into
    /// two frames costs the receiver a copy, and with 64 KB messages in 256 KB batches every
    /// fourth message was cut.
    ///
    /// With an importance reserve, a message below its `min_importance` may use the budget
    /// only beyond the reserve's bytes; returns whether the reserve held one back.
    fn stage_data(&mut self, allowance: u64, room: u64, mss: u32) -> bool {
        let reserve = self.config.importance_reserve;
        let reserve_bytes = reserve.map_or(0, |r| r.bytes(mss));
        let mut held = false;
        let mut budget = allowance.min(room);
        let mut room_left = room;
        if budget > 0 && self.sched.pick().is_some() {
            // Headers and small payloads are copied here: one allocation for the whole pass
            // rather than regrowth copies (the buffer's last allocation is usually still
            // shared with bytes the kernel has not taken yet).
            self.small
                .reserve(budget.min(self.config.max_batch) as usize);
        }
        let quantum = (self.config.chunk_len(mss) as u64).min(self.peer_max_chunk) as usize;
        let max_frame = self.config.max_chunk_len.min(self.peer_max_chunk) as usize;
        while let Some(sid) = self.sched.pick() {
            let lead = self.sched.lead(sid) * self.sched.weight(sid).unwrap_or(1.0);
            let s = self
                .streams
                .get_mut(&sid)
                .expect("scheduler lists only live streams");
            let (importance, seq, p) = s.queue.front_mut().expect("active streams have data");
            let total = p.data.len();
            let remaining = total - p.sent;
            let first = (p.sent == 0).then_some(FirstChunk {
                importance,
                send_time_us: p.send_time_us,
                total_len: total as u64,
            });
            // Bytes this stream may send before another one's virtual time is lower.
            let per_byte = match self.config.fairness {
                Fairness::Resource => 1.0,
                Fairness::Quality => p.cost / total.max(1) as f64,
            };
            let fair = lead / per_byte;
            let fair = if fair.is_finite() {
                (fair as usize).max(quantum)
            } else {
                usize::MAX
            };
            let want = remaining.min(fair).min(max_frame);
            let important = reserve.is_none_or(|r| r.covers(importance));
            // The part of the budget this message may use: all of it, or what lies beyond
            // the reserve.
            let usable = if important {
                budget
            } else {
                budget.saturating_sub(reserve_bytes)
            };
            let hdr = Frame::data_header_len(sid, seq, first, p.sent as u64, want as u64) as u64;
            let len = if hdr + want as u64 <= usable {
                want
            } else if room_left < room && hdr + want as u64 > room_left {
                // only the pass's room is short: the frame goes whole in the next pass
                break;
            } else if usable > hdr && (usable - hdr) as usize >= want.min(64) {
                // Fill the budget exactly, but do not cut a message into slivers.
                (usable - hdr) as usize
            } else {
                // Held back by the reserve if the whole budget would have taken a frame.
                held = !important && budget > hdr && (budget - hdr) as usize >= want.min(64);
                break;
            };
            let hdr = Frame::data_header_len(sid, seq, first, p.sent as u64, len as u64) as u64;
            let payload = p.data.slice(p.sent..p.sent + len);
            let start = self.written + self.staged_len;
            let df = DataFrame {
                stream: sid,
                seq,
                offset: p.sent as u64,
                first,
                payload: &payload,
            };
            self.scratch.clear();
            Frame::encode_data_header(&mut self.scratch, &df);
            debug_assert_eq!(self.scratch.len() as u64, hdr);
            self.small.extend_from_slice(&self.scratch);
            if len <= COPY_THRESHOLD {
                self.small.extend_from_slice(&payload);
            } else {
                if !self.small.is_empty() {
                    self.staged.push_back(self.small.split().freeze());
                }
                self.staged.push_back(payload);
            }
            let frame_len = hdr + len as u64;
            if reserve.is_some() && important {
                self.stats.reserve_bytes_used +=
                    frame_len.saturating_sub(budget.saturating_sub(reserve_bytes));
            }
            self.staged_len += frame_len;
            budget -= frame_len;
            room_left -= frame_len;
            p.sent += len;
            let done = p.sent == total;
            let cost_share = p.cost * len as f64 / total.max(1) as f64;
            let (enqueued, deadline) = (p.enqueued, p.deadline);
            let id = MessageId {
                stream: sid,
                seq,
                importance,
            };
            self.markers.push_back(Marker {
                start,
                end: start + frame_len,
                id,
                enqueued,
                first: first.is_some(),
                last: done,
            });
            self.queued_bytes -= len as u64;
            self.stats.chunks_sent += 1;
            if done {
                let p = self
                    .streams
                    .get_mut(&sid)
                    .and_then(|s| s.queue.pop_front())
                    .expect("front exists");
                self.retain_for_resend(id, start + frame_len, p);
                if let Some(d) = deadline {
                    self.deadlines.remove(&(d, id));
                }
            }
            let charge = match self.config.fairness {
                Fairness::Resource => len as f64,
                Fairness::Quality => cost_share,
            };
            self.sched.charge(sid, charge);
            if s_is_empty(&self.streams, sid) {
                self.sched.set_active(sid, false);
                if self.streams[&sid].closing {
                    self.finish_stream(sid);
                    self.flush_control();
                }
            }
        }
        if held {
            self.stats.reserve_held += 1;
        }
        held
    }

    /// The staged bytes, in order, for one `writev`.
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, Message, Side, StreamConfig, TcpState};
    /// # let now = std::time::Instant::now();
    /// let mut c = Connection::new(Config::default(), Side::Client, now)?;
    /// let s = c.open_stream(StreamConfig::default())?;
    /// c.send(now, s, Message::new("payload"))?;
    /// c.poll_transmit(now, &TcpState::default());
    /// // The hello, the stream's announcement and the data frame, ready for one writev.
    /// let bytes: Vec<u8> = c.transmit_segments().flatten().copied().collect();
    /// assert_eq!(bytes.len() as u64, c.staged_len());
    /// assert!(bytes.windows(7).any(|w| w == b"payload"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn transmit_segments(&self) -> impl Iterator<Item = &[u8]> {
        self.staged.iter().map(|b| &b[..])
    }

    /// Number of staged bytes.
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, Side, TcpState};
    /// # let now = std::time::Instant::now();
    /// let mut c = Connection::new(Config::default(), Side::Client, now)?;
    /// assert_eq!(c.staged_len(), 0);
    /// c.poll_transmit(now, &TcpState::default()); // stages the hello
    /// let hello = c.staged_len();
    /// assert!(hello > 0);
    /// c.handle_written(now, 3); // a short write
    /// assert_eq!(c.staged_len(), hello - 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn staged_len(&self) -> u64 {
        self.staged_len
    }

    /// Bytes handed to the kernel so far.
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, Side, TcpState};
    /// # let now = std::time::Instant::now();
    /// let mut c = Connection::new(Config::default(), Side::Client, now)?;
    /// c.poll_transmit(now, &TcpState::default());
    /// let staged = c.staged_len();
    /// c.handle_written(now, staged as usize);
    /// assert_eq!((c.written(), c.staged_len()), (staged, 0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Bytes the peer acknowledged by P-ACK.
    ///
    /// ```
    /// use lowtide_proto::sim::{LinkParams, Pair};
    /// use lowtide_proto::{Config, Message, StreamConfig};
    /// let mut pair = Pair::new(Config::default(), Config::default(), LinkParams::default());
    /// let s = pair.client.conn.open_stream(StreamConfig::default())?;
    /// pair.client.conn.send(pair.now, s, Message::new(vec![0u8; 50_000]))?;
    /// pair.drive_bounded(100_000);
    /// // The receiver consumed everything and said so with P-ACKs.
    /// let c = &pair.client.conn;
    /// assert!(c.acked() > 50_000);
    /// assert_eq!(c.acked(), c.written());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn acked(&self) -> u64 {
        self.acked
    }

    /// Our sending direction waits for the peer: message bytes written and not yet covered by
    /// a P-ACK, or a probe without its report. Those answers come in the peer's byte stream,
    /// behind its data, so a driver that stops reading ahead of a slow application must read
    /// on while this holds, or the controllers and stall detection would go without them.
    ///
    /// ```
    /// use lowtide_proto::sim::{LinkParams, Pair};
    /// use lowtide_proto::{Config, Connection, Message, Side, StreamConfig, TcpState};
    /// # let now = std::time::Instant::now();
    /// let mut c = Connection::new(Config::default(), Side::Client, now)?;
    /// c.poll_transmit(now, &TcpState::default());
    /// c.handle_written(now, c.staged_len() as usize);
    /// assert!(!c.awaits_peer()); // the handshake alone is never P-ACKed
    /// let s = c.open_stream(StreamConfig::default())?;
    /// c.send(now, s, Message::new("x"))?;
    /// c.poll_transmit(now, &TcpState::default());
    /// c.handle_written(now, c.staged_len() as usize);
    /// assert!(c.awaits_peer()); // a message in the kernel, no P-ACK yet
    ///
    /// let mut pair = Pair::new(Config::default(), Config::default(), LinkParams::default());
    /// let s = pair.client.conn.open_stream(StreamConfig::default())?;
    /// pair.client.conn.send(pair.now, s, Message::new(vec![0u8; 50_000]))?;
    /// pair.drive_bounded(100_000);
    /// // every byte P-ACKed; the server, which sent only P-ACKs, waits for nothing either
    /// assert!(!pair.client.conn.awaits_peer() && !pair.server.conn.awaits_peer());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn awaits_peer(&self) -> bool {
        self.data_written > self.acked || self.probing.sent.is_some()
    }

    /// The kernel accepted the first `n` staged bytes at `now`.
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, Event, Message, Side, StreamConfig, TcpState};
    /// # let now = std::time::Instant::now();
    /// let mut c = Connection::new(Config::default(), Side::Client, now)?;
    /// let s = c.open_stream(StreamConfig::default())?;
    /// let id = c.send(now, s, Message::new("x"))?;
    /// c.poll_transmit(now, &TcpState::default());
    /// c.handle_written(now, c.staged_len() as usize); // the kernel took everything
    /// let written = std::iter::from_fn(|| c.poll_event()).any(|e| matches!(e, Event::Written { id: w, .. } if w == id));
    /// assert!(written);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn handle_written(&mut self, now: Instant, n: usize) {
        let n = (n as u64).min(self.staged_len);
        self.staged_len -= n;
        self.written += n;
        self.note_data_written(now);
        self.stats.bytes_written += n;
        self.stats.write_calls += 1;
        if let Some((_, end, at @ None)) = &mut self.probing.sent {
            if self.written >= *end {
                *at = Some(now);
            }
        }
        let mut left = n as usize;
        while left > 0 {
            let front = self
                .staged
                .front_mut()
                .expect("staged_len counts these bytes");
            if front.len() <= left {
                left -= front.len();
                self.staged.pop_front();
            } else {
                front.advance(left);
                left = 0;
            }
        }
        while let Some(m) = self.markers.front() {
            if m.start >= self.written {
                break;
            }
            if m.first
                && !(m.last && m.end <= self.written)
                && !self.first_writes.contains_key(&m.id)
            {
                self.first_writes.insert(m.id, now);
            }
            if m.end > self.written {
                break;
            }
            let m = self.markers.pop_front().expect("front exists");
            if m.last {
                let first = if m.first {
                    now
                } else {
                    self.first_writes.remove(&m.id).unwrap_or(now)
                };
                self.stats.messages_written += 1;
                if self.config.written_events {
                    self.events.push_back(Event::Written {
                        id: m.id,
                        times: MessageTimes {
                            enqueued: m.enqueued,
                            first_write: Some(first),
                            last_write: Some(now),
                            acked: None,
                        },
                    });
                }
                if self.config.ack_events {
                    if self.unacked.len() == MAX_UNACKED_TRACKED {
                        // a peer that never acknowledges must not grow our memory
                        self.unacked.pop_front();
                        self.stats.ack_tracking_dropped += 1;
                    }
                    self.unacked
                        .push_back((m.end, m.id, m.enqueued, first, now));
                }
            }
        }
    }

    // ---------------------------------------------------------------- receive

    /// Bytes of whole messages waiting for [`poll_message`](Self::poll_message), as charged to
    /// the receive budget (a message kept as a slice of a larger read may be charged more than
    /// its length). A driver stops reading ahead of the application when this grows.
    ///
    /// ```
    /// # use lowtide_proto::{Config, Connection, Message, Side, StreamConfig, TcpState};
    /// # let now = std::time::Instant::now();
    /// # let mut client = Connection::new(Config::default(), Side::Client, now)?;
    /// let mut server = Connection::new(Config::default(), Side::Server, now)?;
    /// # let s = client.open_stream(StreamConfig::default())?;
    /// client.send(now, s, Message::new(vec![7u8; 5000]))?;
    /// # client.poll_transmit(now, &TcpState::default());
    /// let wire: Vec<u8> = client.transmit_segments().flatten().copied().collect();
    /// server.handle_bytes(now, &wire[..wire.len() - 1])?;
    /// assert_eq!(server.ready_bytes(), 0); // the message is not whole yet
    /// server.handle_bytes(now, &wire[wire.len() - 1..])?;
    /// assert!(server.ready_bytes() >= 5000);
    /// server.poll_message().expect("a message");
    /// assert_eq!(server.ready_bytes(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn ready_bytes(&self) -> u64 {
        self.reasm.delivered_bytes
    }

    /// Memory held for the receive side: unparsed bytes, partial and unread messages.
    ///
    /// ```
    /// # use lowtide_proto::{Config, Connection, Message, Side, StreamConfig, TcpState};
    /// # let now = std::time::Instant::now();
    /// # let mut client = Connection::new(Config::default(), Side::Client, now)?;
    /// let mut server = Connection::new(Config::default(), Side::Server, now)?;
    /// # let s = client.open_stream(StreamConfig::default())?;
    /// client.send(now, s, Message::new(vec![7u8; 5000]))?;
    /// # client.poll_transmit(now, &TcpState::default());
    /// let wire: Vec<u8> = client.transmit_segments().flatten().copied().collect();
    /// server.handle_bytes(now, &wire)?;
    /// assert!(server.recv_memory() >= 5000); // a whole message, not taken yet
    /// server.poll_message().expect("a message");
    /// assert_eq!(server.recv_memory(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn recv_memory(&self) -> u64 {
        self.inbuf.len() as u64 + self.reasm.partial_bytes() + self.reasm.delivered_bytes
    }

    /// How many bytes the driver may read from the socket now without exceeding
    /// `max_reassembly_bytes`. Zero means: wait until the application reads messages.
    ///
    /// Half of what is left: a read handed over as `Bytes` ([`handle_read`](Self::handle_read))
    /// may cost twice its length while a message delivered as a slice of it keeps it alive
    /// (the read itself, plus the bytes copied out of it into other messages).
    ///
    /// ```
    /// # use lowtide_proto::{Config, Connection, Message, Side, StreamConfig, TcpState};
    /// # let now = std::time::Instant::now();
    /// # let mut client = Connection::new(Config::default(), Side::Client, now)?;
    /// let cfg = Config { max_reassembly_bytes: 100_000, ..Config::default() };
    /// let mut server = Connection::new(cfg, Side::Server, now)?;
    /// assert_eq!(server.recv_budget(), 50_000); // half of what is left
    /// # let s = client.open_stream(StreamConfig::default())?;
    /// client.send(now, s, Message::new(vec![7u8; 20_000]))?;
    /// # client.poll_transmit(now, &TcpState { cwnd: 100, ..TcpState::default() });
    /// let wire: Vec<u8> = client.transmit_segments().flatten().copied().collect();
    /// server.handle_bytes(now, &wire)?;
    /// assert!(server.recv_budget() <= 40_000); // the unread message is held
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn recv_budget(&self) -> u64 {
        let left = self
            .config
            .max_reassembly_bytes
            .saturating_sub(self.recv_memory());
        if left == 1 {
            1
        } else {
            left / 2
        }
    }

    /// Reads that delivered messages smaller than a quarter of their read's buffer still pin
    /// ([`Config::max_pinning_reads`] at most).
    #[cfg(test)]
    pub(crate) fn pinned_reads(&mut self) -> usize {
        self.reasm.pinned_reads()
    }

    /// Number of partial messages being reassembled.
    ///
    /// ```
    /// # use lowtide_proto::{Config, Connection, ControllerConfig, Message, Side, StreamConfig, TcpState};
    /// # let now = std::time::Instant::now();
    /// # let cfg = Config { controller: ControllerConfig::Unlimited, ..Config::default() };
    /// # let mut client = Connection::new(cfg, Side::Client, now)?;
    /// let mut server = Connection::new(Config::default(), Side::Server, now)?;
    /// # let s = client.open_stream(StreamConfig::default())?;
    /// client.send(now, s, Message::new(vec![7u8; 100_000]))?; // two frames of at most 64 KB
    /// # client.poll_transmit(now, &TcpState::default());
    /// let wire: Vec<u8> = client.transmit_segments().flatten().copied().collect();
    /// server.handle_bytes(now, &wire[..wire.len() - 100])?; // all but the last 100 bytes
    /// assert_eq!(server.partial_messages(), 1);
    /// server.handle_bytes(now, &wire[wire.len() - 100..])?;
    /// assert_eq!((server.partial_messages(), server.poll_message().map(|m| m.data.len())), (0, Some(100_000)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn partial_messages(&self) -> usize {
        self.reasm.partial_count()
    }

    /// Feeds bytes read from the socket (copied where they are kept). On a protocol violation
    /// the channel closes (a CLOSE frame naming the violation is staged) and the error is
    /// returned.
    ///
    /// ```
    /// # use lowtide_proto::{Config, Connection, Message, Side, StreamConfig, TcpState};
    /// # let now = std::time::Instant::now();
    /// # let mut client = Connection::new(Config::default(), Side::Client, now)?;
    /// let mut server = Connection::new(Config::default(), Side::Server, now)?;
    /// # let s = client.open_stream(StreamConfig::default())?;
    /// client.send(now, s, Message::new("byte by byte"))?;
    /// # client.poll_transmit(now, &TcpState::default());
    /// let wire: Vec<u8> = client.transmit_segments().flatten().copied().collect();
    /// // TCP may split the stream anywhere: one byte per read still parses.
    /// for b in &wire {
    ///     server.handle_bytes(now, std::slice::from_ref(b))?;
    /// }
    /// assert_eq!(&server.poll_message().expect("a message").data[..], b"byte by byte");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn handle_bytes(&mut self, now: Instant, data: &[u8]) -> Result<(), ProtocolError> {
        self.handle_input(now, data, None, data.len())
    }

    /// [`handle_bytes`](Self::handle_bytes) for a read the driver owns as [`Bytes`]: a message
    /// that arrives whole in it is delivered as a slice of it, without a copy (see the
    /// reassembly notes on what that keeps alive and how it is charged).
    ///
    /// ```
    /// # use lowtide_proto::wire::Hello;
    /// # use lowtide_proto::{Config, Connection, Message, Side, StreamConfig, TcpState};
    /// # let now = std::time::Instant::now();
    /// # let mut client = Connection::new(Config::default(), Side::Client, now)?;
    /// let mut server = Connection::new(Config::default(), Side::Server, now)?;
    /// # let s = client.open_stream(StreamConfig::default())?;
    /// client.send(now, s, Message::new(vec![9u8; 3000]))?;
    /// # client.poll_transmit(now, &TcpState::default());
    /// let wire: Vec<u8> = client.transmit_segments().flatten().copied().collect();
    /// let (_, hello_len) = Hello::decode(&wire)?.expect("the hello first");
    /// server.handle_bytes(now, &wire[..hello_len])?;
    /// // The driver's next read, owned as `Bytes`.
    /// let read = bytes::Bytes::copy_from_slice(&wire[hello_len..]);
    /// server.handle_read(now, read.clone())?;
    /// let m = server.poll_message().expect("a message");
    /// // Delivered as a slice of the read: same memory, no copy.
    /// assert!(read.as_ptr_range().contains(&m.data.as_ptr()));
    /// assert_eq!(m.data.len(), 3000);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn handle_read(&mut self, now: Instant, data: Bytes) -> Result<(), ProtocolError> {
        self.handle_input(now, &data, Some(&data), data.len())
    }

    /// Lends the read buffer for the driver's next read: the incomplete frame an earlier read
    /// left (at its front, counted as held), and how many bytes complete that frame (`None`
    /// when there is none or its header is still incomplete). The driver appends what it reads
    /// (making room first if it must: only then is the frame's head copied) and hands the
    /// buffer back with [`handle_read_buf`](Self::handle_read_buf), also when it read nothing.
    /// The frame is completed where it is, so a message arriving in it is never copied.
    ///
    /// ```
    /// # use lowtide_proto::{Config, Connection, ControllerConfig, Message, Side, StreamConfig, TcpState};
    /// # let now = std::time::Instant::now();
    /// # let cfg = Config { controller: ControllerConfig::Unlimited, ..Config::default() };
    /// # let mut client = Connection::new(cfg, Side::Client, now)?;
    /// let mut server = Connection::new(Config::default(), Side::Server, now)?;
    /// # let s = client.open_stream(StreamConfig::default())?;
    /// client.send(now, s, Message::new(vec![1u8; 60_000]))?;
    /// # client.poll_transmit(now, &TcpState::default());
    /// let wire: Vec<u8> = client.transmit_segments().flatten().copied().collect();
    /// let mut at = 0;
    /// for read in [2000, 30_000, 100_000] {
    ///     let (mut buf, _need) = server.take_read_buf();
    ///     // The driver's read(2) appends to the buffer; here a copy of the wire.
    ///     let n = read.min(wire.len() - at);
    ///     buf.extend_from_slice(&wire[at..at + n]);
    ///     at += n;
    ///     server.handle_read_buf(now, buf, n)?;
    /// }
    /// let (buf, need) = server.take_read_buf();
    /// assert_eq!((buf.len(), need), (0, None)); // nothing left incomplete
    /// server.handle_read_buf(now, buf, 0)?;
    /// assert_eq!(server.poll_message().map(|m| m.data.len()), Some(60_000));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn take_read_buf(&mut self) -> (BytesMut, Option<usize>) {
        let buf = std::mem::take(&mut self.inbuf);
        let need = if self.peer_hello && self.error.is_none() {
            Frame::frame_len(&buf, self.config.max_chunk_len)
                .ok()
                .flatten()
                .map(|total| total.saturating_sub(buf.len()))
        } else {
            None
        };
        (buf, need)
    }

    /// The longest frame the peer may send us (a data frame of `max_chunk_len`, a probe or a
    /// close frame, with the longest header): room that lets any frame starting in a read be
    /// completed in place.
    pub fn max_frame_len(&self) -> usize {
        let payload = self
            .config
            .max_chunk_len
            .max(MAX_PROBE_PAD)
            .max(MAX_CLOSE_REASON as u64);
        usize::try_from(payload)
            .unwrap_or(usize::MAX)
            .saturating_add(MAX_HEADER_LEN)
    }

    /// Takes back the buffer [`take_read_buf`](Self::take_read_buf) lent, with `n` bytes the
    /// driver read appended. The incomplete frame at its front, once complete, is parsed on
    /// its own; the whole frames after it are split off and parsed in place. Whole messages of
    /// at least a quarter of the buffer's allocation (which a slice keeps alive) are slices,
    /// smaller ones while [`Config::max_pinning_reads`] allows, else copies; an incomplete
    /// frame at the end stays in the buffer for the next read.
    pub fn handle_read_buf(
        &mut self,
        now: Instant,
        mut buf: BytesMut,
        n: usize,
    ) -> Result<(), ProtocolError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        if n == 0 {
            self.inbuf = buf;
            return Ok(());
        }
        self.note_read_alloc(&buf);
        let res = self.parse_in_place(now, &mut buf, n);
        self.inbuf = buf;
        self.after_input(now, res, n)
    }

    /// Tells reassembly how much memory a slice of `buf` keeps alive: its allocation from the
    /// start, which `BytesMut` does not show once reads were split off its front. A buffer
    /// ending where the last one ended continues that allocation (the frame a read ended in,
    /// completed in place); any other is a buffer of its own, seen from its start.
    fn note_read_alloc(&mut self, buf: &BytesMut) {
        let start = buf.as_ptr() as usize;
        let end = start + buf.capacity();
        self.read_alloc = match self.read_alloc {
            (s, e) if e == end => (s.min(start), end),
            _ => (start, end),
        };
        self.reasm
            .set_read_buffer((self.read_alloc.1 - self.read_alloc.0) as u64);
    }

    /// [`handle_read_buf`](Self::handle_read_buf)'s parsing: `buf` ends with `fresh` bytes just
    /// read; what it held before is the head of one incomplete frame (or of the handshake).
    fn parse_in_place(
        &mut self,
        now: Instant,
        buf: &mut BytesMut,
        fresh: usize,
    ) -> Result<(), ProtocolError> {
        let max = self.config.max_chunk_len;
        if !self.peer_hello {
            let used = self.parse(now, buf, 0, None)?;
            buf.advance(used);
            return Ok(());
        }
        if buf.len() > fresh {
            match Frame::frame_len(buf, max)? {
                Some(total) if total <= buf.len() => {
                    let frame = buf.split_to(total).freeze();
                    let res = self.parse(now, &frame, buf.len() as u64, Some(&frame));
                    self.reasm.end_read(frame.len() as u64);
                    res?;
                }
                _ => return Ok(()),
            }
        }
        let mut whole = 0;
        while let Some(len) = Frame::frame_len(&buf[whole..], max)? {
            if whole + len > buf.len() {
                break;
            }
            whole += len;
        }
        if whole > 0 {
            let data = buf.split_to(whole).freeze();
            let res = self.parse(now, &data, buf.len() as u64, Some(&data));
            self.reasm.end_read(data.len() as u64);
            res?;
        }
        Ok(())
    }

    fn handle_input(
        &mut self,
        now: Instant,
        data: &[u8],
        read: Option<&Bytes>,
        n_read: usize,
    ) -> Result<(), ProtocolError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let mut buf = std::mem::take(&mut self.inbuf);
        // the caller's allocation is not known: each read counts as its own buffer
        self.reasm.set_read_buffer(0);
        let res = self.feed(now, &mut buf, data, read);
        self.reasm.end_read(data.len() as u64);
        self.inbuf = buf;
        self.after_input(now, res, n_read)
    }

    /// After a read was parsed: count it for P-ACKs, or close the channel on a protocol error.
    fn after_input(
        &mut self,
        now: Instant,
        res: Result<(), ProtocolError>,
        n_read: usize,
    ) -> Result<(), ProtocolError> {
        match res {
            Ok(_) => {
                // P-ACKs count bytes read, not frames parsed, so their granularity does not
                // depend on frame sizes; a data frame still arriving needs acknowledging too.
                self.consumed += n_read as u64;
                self.pack_needed |= self.peer_hello
                    && self
                        .inbuf
                        .first()
                        .is_some_and(|&t| t != FrameType::PAck as u8);
                if !self.pack_needed {
                    // only P-ACKs arrived: acknowledging them would ping-pong forever
                } else if self.consumed - self.last_pack_bytes >= self.config.pack_every_bytes {
                    self.pack_by_bytes(now);
                } else if self.pack_due.is_none() {
                    self.pack_due = Some(now + Duration::from_micros(self.config.pack_interval_us));
                }
                Ok(())
            }
            Err(e) => {
                self.inbuf = BytesMut::new();
                Err(self.fail(e))
            }
        }
    }

    /// The byte rule's P-ACK: now, unless the last one was sent less than the gap ago
    /// (`pack_gap`). A P-ACK held back goes with a later read once the gap has passed (a
    /// read wakes the driver anyway; a timer would wake it once more), by timer only when no
    /// read came within `pack_interval_us`, and at most `pack_max_gap_us` after the last.
    fn pack_by_bytes(&mut self, now: Instant) {
        let Some(last) = self.last_pack_at else {
            return self.send_pack(now);
        };
        let gap = pack_gap(
            &self.config,
            now.saturating_duration_since(last),
            self.consumed - self.last_pack_bytes,
        );
        if now >= last + gap {
            return self.send_pack(now);
        }
        let interval = Duration::from_micros(self.config.pack_interval_us);
        let max_gap = Duration::from_micros(self.config.pack_max_gap_us);
        self.pack_due = Some((last + gap).max(now + interval).min(last + max_gap));
    }

    /// Closes the channel on a protocol error: a CLOSE frame naming it goes to the peer.
    fn fail(&mut self, e: ProtocolError) -> ProtocolError {
        tracing::debug!(error = %e, "protocol error, closing channel");
        {
            {
                if self.state == State::Open {
                    Frame::Close {
                        code: e.code(),
                        reason: &e.to_string(),
                    }
                    .encode(&mut self.control);
                    self.state = State::Closed;
                    self.events.push_back(Event::Closed {
                        by_peer: false,
                        code: e.code(),
                        reason: e.to_string(),
                    });
                }
                self.error = Some(e.clone());
                e
            }
        }
    }

    /// Parses `data` after the bytes already `pending` (an incomplete frame). Only the bytes
    /// that complete the pending frame are copied; the rest is parsed in place and its
    /// incomplete tail kept in `pending`.
    fn feed(
        &mut self,
        now: Instant,
        pending: &mut BytesMut,
        mut data: &[u8],
        read: Option<&Bytes>,
    ) -> Result<(), ProtocolError> {
        if !self.peer_hello {
            pending.extend_from_slice(data);
            let used = self.parse(now, pending, 0, None)?;
            pending.advance(used);
            return Ok(());
        }
        while !pending.is_empty() {
            let want =
                Frame::frame_len(pending, self.config.max_chunk_len)?.unwrap_or(pending.len() + 1);
            let take = want.saturating_sub(pending.len()).min(data.len());
            pending.extend_from_slice(&data[..take]);
            data = &data[take..];
            if pending.len() < want {
                return Ok(());
            }
            if Frame::frame_len(pending, self.config.max_chunk_len)? == Some(pending.len()) {
                // One whole frame: it becomes the owner of its message (no second copy).
                let frame = std::mem::take(pending).freeze();
                let res = self.parse(now, &frame, data.len() as u64, Some(&frame));
                self.reasm.end_read(frame.len() as u64);
                res?;
            }
        }
        let used = self.parse(now, data, 0, read)?;
        let tail = &data[used..];
        // Room for the whole frame at once, so completing it by the next read does not copy
        // its head a second time on regrowth. The
        // length is bounded by `max_chunk_len`; the budget leaves room for one frame.
        if let Ok(Some(frame)) = Frame::frame_len(tail, self.config.max_chunk_len) {
            pending.reserve(frame);
        }
        pending.extend_from_slice(tail);
        Ok(())
    }

    fn send_pack(&mut self, now: Instant) {
        self.pack_due = None;
        if !self.pack_needed || self.state != State::Open {
            return;
        }
        self.pack_needed = false;
        self.last_pack_bytes = self.consumed;
        self.last_pack_at = Some(now);
        self.stats.packs_sent += 1;
        Frame::PAck {
            bytes: self.consumed - self.path_in_base(),
            recv_time_us: self.us_since_epoch(now),
        }
        .encode(&mut self.control);
    }

    /// Parses as many whole frames as `buf` holds; returns the bytes used.
    /// `beyond` counts bytes of the current read that follow `buf` (not parsed yet); they are
    /// already inside the read budget, so reservations must leave room for them.
    /// `read` owns `buf` when it is parsed in place from a read handed over as [`Bytes`].
    fn parse(
        &mut self,
        now: Instant,
        buf: &[u8],
        beyond: u64,
        read: Option<&Bytes>,
    ) -> Result<usize, ProtocolError> {
        let mut pos = 0;
        if !self.peer_hello {
            let Some((hello, n)) = Hello::decode(buf)? else {
                return Ok(0);
            };
            for o in hello.options {
                match o {
                    HelloOption::MaxMessageSize(v) => self.peer_max_message = v,
                    HelloOption::MaxChunkLen(v) => self.peer_max_chunk = v.max(64),
                    HelloOption::MaxStreams(v) => self.peer_max_streams = v,
                    HelloOption::AnswersProbes(v) => self.probing.peer_answers = v == 1,
                    _ => {}
                }
            }
            self.peer_hello = true;
            self.pack_needed = true;
            if self.config.probe_at_start {
                self.request_probe();
            }
            pos = n;
        }
        while pos < buf.len() && self.peer_hello {
            if self.peer_closed {
                // nothing after CLOSE is meaningful
                return Ok(buf.len());
            }
            let Some((frame, n)) = Frame::decode(&buf[pos..], self.config.max_chunk_len)? else {
                break;
            };
            self.pack_needed |= !matches!(frame, Frame::PAck { .. });
            self.expect_switch(&frame)?;
            // Room for reserving a partial message beyond its received bytes: the budget minus
            // what is held, minus the rest of this read (this frame included).
            let unparsed = (buf.len() - pos) as u64 + beyond;
            let held =
                self.reasm.partial_bytes() + self.reasm.delivered_bytes + self.inbuf.len() as u64;
            self.spare = self
                .config
                .max_reassembly_bytes
                .saturating_sub(held + unparsed);
            self.on_frame(now, frame, read)?;
            pos += n;
        }
        Ok(pos)
    }

    fn note_peer_stream(&mut self, stream: u64) -> Result<bool, ProtocolError> {
        if self.peer_streams.contains(&stream) || self.streams.contains_key(&stream) {
            return Ok(false);
        }
        if self.peer_streams.len() as u64 >= u64::from(self.config.max_streams) {
            return Err(ProtocolError::TooManyStreams {
                max: self.config.max_streams,
            });
        }
        self.peer_streams.insert(stream);
        Ok(true)
    }

    fn on_frame(
        &mut self,
        now: Instant,
        frame: Frame<'_>,
        read: Option<&Bytes>,
    ) -> Result<(), ProtocolError> {
        match frame {
            Frame::StreamOpen {
                stream,
                weight_milli,
            } => {
                if self.note_peer_stream(stream)? {
                    self.events.push_back(Event::StreamOpened {
                        stream,
                        weight: weight_milli as f64 / 1000.0,
                    });
                }
            }
            Frame::StreamClose { stream } => {
                self.peer_streams.remove(&stream);
                self.reasm.drop_stream(stream);
                self.events.push_back(Event::StreamClosed { stream });
            }
            Frame::Data(d) => {
                self.note_peer_stream(d.stream)?;
                let before = self.reasm.delivered_count();
                self.reasm.on_data(&d, now, self.spare, read)?;
                self.stats.messages_received += (self.reasm.delivered_count() - before) as u64;
                self.sync_duplicate_stats();
            }
            Frame::Cancel {
                stream,
                seq,
                reason,
            } => {
                let freed = self.reasm.on_cancel(stream, seq);
                self.stats.peer_cancelled += 1;
                self.events.push_back(Event::PeerCancelled(PeerCancelled {
                    stream,
                    seq,
                    reason,
                    freed,
                }));
            }
            Frame::PAck {
                bytes,
                recv_time_us,
            } => self.on_pack(now, bytes, recv_time_us),
            // checked by `expect_switch` before
            Frame::Switch { .. } => {}
            Frame::Probe { id, index, pad_len } => self.on_probe(now, id, index, pad_len),
            Frame::ProbeReport {
                id,
                dispersion_us,
                second_len,
            } => self.on_probe_report(now, id, dispersion_us, second_len),
            Frame::Close { code, reason } => {
                self.state = State::Closed;
                self.peer_closed = true;
                self.events.push_back(Event::Closed {
                    by_peer: true,
                    code,
                    reason: reason.to_owned(),
                });
            }
        }
        Ok(())
    }

    fn on_pack(&mut self, now: Instant, bytes: u64, recv_time_us: u64) {
        // P-ACKs count the bytes of the connection in use
        let bytes = bytes.saturating_add(self.path_out_base());
        if bytes <= self.acked {
            return;
        }
        self.acked = bytes.min(self.written);
        self.release_acked(now);
        let mut covered = None;
        while let Some(&(end, id, enqueued, first, last)) = self.unacked.front() {
            if end > self.acked {
                break;
            }
            self.unacked.pop_front();
            covered = Some(last);
            self.stats.messages_acked += 1;
            self.events.push_back(Event::Acked {
                id,
                times: MessageTimes {
                    enqueued,
                    first_write: Some(first),
                    last_write: Some(last),
                    acked: Some(now),
                },
                peer_recv_time_us: recv_time_us,
            });
        }
        self.controller.on_pack(&PAckSample {
            now,
            bytes: self.acked,
            recv_time_us,
            covered_write_time: covered,
        });
    }

    /// The peer's probe: time the pair and answer at once (the report leaves with the next
    /// write, which the driver makes right after this read).
    fn on_probe(&mut self, now: Instant, id: u64, index: u8, pad_len: u64) {
        match (index, self.probing.first_arrival) {
            (0, _) => self.probing.first_arrival = Some((id, now)),
            (_, Some((first, t0))) if first == id => {
                self.probing.first_arrival = None;
                let mut frame = Vec::new();
                Frame::Probe { id, index, pad_len }.encode(&mut frame);
                Frame::ProbeReport {
                    id,
                    dispersion_us: now.saturating_duration_since(t0).as_micros() as u64,
                    second_len: frame.len() as u64,
                }
                .encode(&mut self.control);
            }
            // a second packet without its first: nothing to time
            _ => {}
        }
    }

    fn on_probe_report(&mut self, now: Instant, id: u64, dispersion_us: u64, second_len: u64) {
        let Some((sent_id, _, Some(written_at))) = self.probing.sent else {
            self.stats.probe_reports_ignored += 1;
            return;
        };
        if sent_id != id {
            self.stats.probe_reports_ignored += 1;
            return;
        }
        self.probing.sent = None;
        let dispersion = Duration::from_micros(dispersion_us);
        let rtt = now
            .saturating_duration_since(written_at)
            .saturating_sub(dispersion);
        let result = ProbeResult::from_dispersion(
            rtt,
            dispersion,
            second_len.min(u64::from(u32::MAX)) as u32,
            Duration::from_micros(1),
        );
        self.controller.on_probe(&result);
        self.events.push_back(Event::Probed(result));
    }

    /// Next event, if any.
    ///
    /// ```
    /// use lowtide_proto::sim::{LinkParams, Pair};
    /// use lowtide_proto::{Config, Event, Message, StreamConfig};
    /// let mut pair = Pair::new(Config::default(), Config::default(), LinkParams::default());
    /// let s = pair.client.conn.open_stream(StreamConfig::default())?;
    /// let id = pair.client.conn.send(pair.now, s, Message::new("x"))?;
    /// pair.drive_bounded(10_000);
    /// // `Pair` collects each side's events; a driver calls poll_event until `None`.
    /// let acked = pair.client.events.iter().any(|e| matches!(e, Event::Acked { id: a, .. } if *a == id));
    /// assert!(acked);
    /// assert_eq!(pair.client.conn.poll_event(), None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Next complete message, in arrival order.
    ///
    /// ```
    /// # use lowtide_proto::{Config, Connection, Message, Side, StreamConfig, TcpState};
    /// # let now = std::time::Instant::now();
    /// # let mut client = Connection::new(Config::default(), Side::Client, now)?;
    /// let mut server = Connection::new(Config::default(), Side::Server, now)?;
    /// # let s = client.open_stream(StreamConfig::default())?;
    /// client.send(now, s, Message::new("one"))?;
    /// client.send(now, s, Message::new("two"))?;
    /// # client.poll_transmit(now, &TcpState::default());
    /// let wire: Vec<u8> = client.transmit_segments().flatten().copied().collect();
    /// server.handle_bytes(now, &wire)?;
    /// let got: Vec<_> = std::iter::from_fn(|| server.poll_message()).map(|m| m.data).collect();
    /// assert_eq!(got, ["one", "two"]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn poll_message(&mut self) -> Option<Received> {
        self.reasm.pop()
    }
}

fn s_is_empty(streams: &BTreeMap<u64, SendStream>, sid: u64) -> bool {
    streams.get(&sid).is_none_or(|s| s.queue.is_empty())
}
