//! Messages and their queues: the ids and timestamps the application sees, streams opened and
//! closed, messages queued by importance, withdrawn by the application or by their deadline.

use std::time::Instant;

use bytes::Bytes;

use super::{Connection, Event, Side, State};
use crate::config::StreamConfig;
use crate::error::{SendError, StreamError};
use crate::failover::duplicate::Withdraw;
use crate::stream::{Pending, SendStream};
use crate::wire::{CancelReason, Frame};

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
    pub(super) importance: u8,
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

impl Connection {
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

    pub(super) fn finish_stream(&mut self, stream: u64) {
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
        let copied = match (&mut self.lane, self.side) {
            (Some(lane), Side::Client) if lane.copies_new() => {
                lane.offer(id, send_time_us, msg.deadline, msg.data.clone())
            }
            _ => false,
        };
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
                copied,
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

    pub(super) fn withdraw(&mut self, id: MessageId, reason: CancelReason) -> bool {
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
}
