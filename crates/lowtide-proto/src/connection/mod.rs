//! The channel state machine: one TCP connection's worth of lowtide, without any I/O.
//!
//! # Call order (the driver's loop)
//! 1. [`Connection::new`] queues our handshake.
//! 2. Bytes read from the socket go to [`handle_bytes`](Connection::handle_bytes).
//! 3. At each write opportunity: sample the kernel into a [`TcpState`](crate::TcpState) (if
//!    [`needs_tcp_state`](Connection::needs_tcp_state)), call
//!    [`poll_transmit`](Connection::poll_transmit), write
//!    [`transmit_segments`](Connection::transmit_segments) with one `writev`, and report how
//!    many bytes the kernel took with [`handle_written`](Connection::handle_written). The
//!    returned [`Decision`] says how to wait when blocked.
//! 4. When [`poll_timeout`](Connection::poll_timeout) passes, call
//!    [`handle_timeout`](Connection::handle_timeout) (expiries, delayed P-ACKs).
//! 5. Drain [`poll_event`](Connection::poll_event) and [`poll_message`](Connection::poll_message).
//!
//! # Layout
//! This file holds the type, its construction and the timers; the rest of `impl Connection`
//! is split by concern: `messages` (streams, queues, cancel and expiry), `send` (staging and
//! what the kernel took), `acks` (P-ACKs sent and received), `receive` (parsing and delivery),
//! `probes` (packet pairs), `events` (events, counters, the decision log), and the
//! connection's side of [`failover`](crate::failover) in `failover_switch` and
//! `duplicate_lane`.
//!
//! Sources: Paceline (Erbad and Krasic, "Sender-side Buffers and the Case for Multimedia
//! Adaptation", "Data Service Model" to "Latency Controller") for streams, messages, chunking,
//! cancellation and P-ACKs. Modelled on quinn-proto's `Connection` (`handle_*` inputs, `poll_*`
//! outputs, `now` passed in).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Instant;

use bytes::{Bytes, BytesMut};

use crate::config::{Config, ConfigError};
use crate::controller::{Decision, LatencyController, Wake};
use crate::error::ProtocolError;
use crate::failover::duplicate::DuplicateLane;
use crate::failover::Delivered;
use crate::reassembly::Reassembly;
use crate::scheduler::Scheduler;
use crate::stream::SendStream;
use crate::wire::{CancelReason, Hello, HelloOption, MAX_HEADER_LEN, VERSION};

mod acks;
mod duplicate_lane;
mod events;
mod failover_switch;
mod messages;
mod probes;
mod receive;
mod send;

pub use events::{DecisionRecord, Event, Stats};
pub use messages::{Message, MessageId, MessageTimes};
pub use send::TransmitWork;

use probes::Probing;
use send::Marker;

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    Closed,
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
    failover: Option<Box<failover_switch::PathState>>,
    /// Duplicate lane (`duplicate = Some(..)`): copies to send, or the lane's parser.
    lane: Option<Box<DuplicateLane>>,
}

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
                .map(|f| Box::new(failover_switch::PathState::new(&f))),
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

    /// Whether the controller reads [`TcpState`](crate::TcpState) (else the driver may pass a
    /// default one). A pending probe needs it too (the MSS and the kernel's unsent bytes).
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

    fn us_since_epoch(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.epoch).as_micros() as u64
    }

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
}
