//! Receive-side reassembly: chunks back into messages, delivered complete in arrival order.
//!
//! Source: Paceline (Erbad and Krasic, "Sender-side Buffers and the Case for Multimedia
//! Adaptation"), "Framing and Fragmentation" (receiver-side reassembly) and "Data Service Model"
//! (messages may be skipped: cancelled sequence numbers are reported, so the receiver sees gaps
//! explicitly).
//!
//! Memory: partial messages are bounded by the channel budget minus room for one frame (so a
//! peer cannot wedge the channel with partial messages: it gets
//! [`ProtocolError::ReassemblyMemoryExceeded`]); complete messages not yet read by the
//! application count against the same budget, which the driver respects when it reads from
//! the socket (back-pressure through TCP flow control rather than an error).
//!
//! Zero copy: a message that arrives whole in one frame of a read the driver hands over as
//! [`Bytes`] ([`Connection::handle_read_buf`](crate::Connection::handle_read_buf), with TLS
//! [`Connection::handle_read`](crate::Connection::handle_read)) is delivered as a slice of
//! that read, without a copy, if it is at least a quarter of the buffer the read lies in (so
//! a message the application keeps pins at most four times its size: a slice keeps the
//! whole allocation alive, and a small read sits in a buffer of `read_chunk` plus one
//! frame). A smaller message is a slice too while fewer than `max_pinning_reads` reads (8 by
//! default) are pinned by such messages, queued or taken and kept by the application, and a
//! copy beyond that ([`PinnedReads`]): at a paced rate a read holds tens of messages, and
//! copying each out of it was the receiver's largest cost of its own (`docs/transport.md`),
//! while an application that keeps small messages pins at most that many reads' buffers per
//! channel. The read's other bytes (headers,
//! copied messages) stay allocated while such a slice lives; that overhead is charged to the
//! read's last zero-copy message, so the budget stays exact until the application takes it.
//!
//! Exactly once: every complete message passes the delivered-set
//! ([`crate::failover::Delivered`]) before it is delivered; a copy of a (stream, seq) already
//! delivered is dropped (failover: a resend) or refused (no failover: a protocol error).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use crate::error::ProtocolError;
use crate::failover::{Delivered, Verdict};
use crate::wire::{CancelReason, DataFrame};

/// A complete message, with its metadata.
///
/// ```
/// use lowtide_proto::sim::{LinkParams, Pair};
/// use lowtide_proto::{Config, Message, StreamConfig};
/// use std::time::Duration;
/// let mut pair = Pair::new(Config::default(), Config::default(), LinkParams::default());
/// let s = pair.client.conn.open_stream(StreamConfig::default())?;
/// pair.client.conn.send(pair.now, s, Message::new("hello").importance(2))?;
/// pair.drive_bounded(10_000);
/// let m = &pair.server.received[0];
/// assert_eq!((m.stream, m.seq, m.importance, &m.data[..]), (s, 0, 2, &b"hello"[..]));
/// // Both ends of this pair share an epoch: the one-way delay is 10 ms.
/// let sent = pair.client.conn.epoch() + Duration::from_micros(m.send_time_us);
/// assert!(m.received_at - sent >= Duration::from_millis(10));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// Stream id.
    pub stream: u64,
    /// Sequence number within the stream.
    pub seq: u64,
    /// Importance given by the sender.
    pub importance: u8,
    /// Sender's enqueue time, µs since the sender's epoch.
    pub send_time_us: u64,
    /// When the last chunk was handed to [`Connection::handle_bytes`](crate::Connection::handle_bytes).
    pub received_at: Instant,
    /// The message.
    pub data: Bytes,
}

/// The sender withdrew a message: nothing (more) of it will arrive.
///
/// ```
/// use lowtide_proto::sim::{LinkParams, Pair};
/// use lowtide_proto::{CancelReason, Config, Event, Message, StreamConfig};
/// let mut pair = Pair::new(Config::default(), Config::default(), LinkParams::default());
/// let s = pair.client.conn.open_stream(StreamConfig::default())?;
/// // A large message, cancelled once its first part is on the way.
/// let id = pair.client.conn.send(pair.now, s, Message::new(vec![0u8; 200_000]))?;
/// pair.step();
/// assert!(pair.client.conn.cancel(id));
/// pair.drive_bounded(100_000);
/// let told = pair.server.events.iter().find_map(|e| match e {
///     Event::PeerCancelled(pc) => Some(*pc),
///     _ => None,
/// });
/// let pc = told.expect("the receiver was told");
/// assert_eq!((pc.stream, pc.seq, pc.reason), (s, 0, CancelReason::Application));
/// assert!(pair.server.received.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCancelled {
    /// Stream id.
    pub stream: u64,
    /// Sequence number.
    pub seq: u64,
    /// Why.
    pub reason: CancelReason,
    /// Bytes of the partial message freed (0 if none had arrived).
    pub freed: u64,
}

/// Zero-copy bookkeeping of the read being parsed.
#[derive(Debug, Default)]
struct ZeroCopyRead {
    /// Payload bytes delivered as slices of the read.
    bytes: u64,
    /// Index in `delivered` of the last such message.
    last: Option<usize>,
    /// The read wrapped by [`PinnedReads::track`], once a message smaller than a quarter of
    /// its buffer was delivered as a slice of it.
    tracked: Option<Bytes>,
    /// Bytes of the allocation the read lies in, which any slice of it keeps alive (0: the
    /// read's own length).
    buffer: u64,
}

/// The reads that messages smaller than a quarter of their read pin, counted so that at most
/// `max` are pinned at once. Each such read is wrapped ([`Bytes::from_owner`]) with a token
/// whose count says whether any of its slices is still alive: the application drops the
/// message, and with the last slice the read's buffer is released (the driver can reuse it)
/// and the token is left alone.
#[derive(Debug)]
struct PinnedReads {
    max: usize,
    tokens: Vec<Arc<()>>,
}

impl PinnedReads {
    /// Reads with a slice still alive.
    fn pinned(&mut self) -> usize {
        self.tokens.retain(|t| Arc::strong_count(t) > 1);
        self.tokens.len()
    }

    /// `read` wrapped so that its slices are counted, or `None` when `max` reads are pinned.
    fn track(&mut self, read: &Bytes) -> Option<Bytes> {
        if self.pinned() >= self.max {
            return None;
        }
        let token = Arc::new(());
        self.tokens.push(token.clone());
        Some(Bytes::from_owner(TrackedRead {
            read: read.clone(),
            _token: token,
        }))
    }
}

/// A read whose slices are counted: dropped with its last slice, and its token with it.
struct TrackedRead {
    read: Bytes,
    _token: Arc<()>,
}

impl AsRef<[u8]> for TrackedRead {
    fn as_ref(&self) -> &[u8] {
        &self.read
    }
}

#[derive(Debug)]
struct Partial {
    importance: u8,
    send_time_us: u64,
    total: u64,
    /// Bytes reserved (and charged against the budget) for this message.
    charged: u64,
    buf: Vec<u8>,
}

/// Reassembly state of one channel.
#[derive(Debug)]
pub(crate) struct Reassembly {
    partial: BTreeMap<(u64, u64), Partial>,
    partial_bytes: u64,
    /// Complete messages not yet taken, with the bytes charged for each.
    delivered: std::collections::VecDeque<(Received, u64)>,
    pub delivered_bytes: u64,
    read: ZeroCopyRead,
    pinning: PinnedReads,
    max_message_size: u64,
    partial_limit: u64,
    /// Which (stream, seq) were delivered.
    pub done: Delivered,
}

impl Reassembly {
    pub fn new(
        max_message_size: u64,
        budget: u64,
        max_frame: u64,
        max_pinning_reads: usize,
        done: Delivered,
    ) -> Self {
        Self {
            done,
            pinning: PinnedReads {
                max: max_pinning_reads,
                tokens: Vec::new(),
            },
            partial: BTreeMap::new(),
            partial_bytes: 0,
            delivered: Default::default(),
            delivered_bytes: 0,
            read: ZeroCopyRead::default(),
            max_message_size,
            partial_limit: budget.saturating_sub(max_frame),
        }
    }

    pub fn partial_bytes(&self) -> u64 {
        self.partial_bytes
    }

    pub fn partial_count(&self) -> usize {
        self.partial.len()
    }

    fn charge(&mut self, n: u64) -> Result<(), ProtocolError> {
        let needed = self.partial_bytes + n;
        if needed > self.partial_limit {
            return Err(ProtocolError::ReassemblyMemoryExceeded {
                needed,
                limit: self.partial_limit,
            });
        }
        self.partial_bytes = needed;
        Ok(())
    }

    /// Reserves up to `want` more bytes for a partial message, within `spare` and the partial
    /// limit; returns what was reserved (and charged).
    fn reservation(&mut self, want: u64, spare: u64) -> u64 {
        let r = want
            .min(spare)
            .min(self.partial_limit.saturating_sub(self.partial_bytes));
        self.partial_bytes += r;
        r
    }

    /// A complete message (reassembled, or a duplicate lane's copy) passes the delivered-set:
    /// the first copy is queued for the application, later ones are dropped.
    pub fn deliver(&mut self, r: Received) -> Result<Verdict, ProtocolError> {
        if self.done.on_message(r.stream, r.seq, &r.data)? == Verdict::Duplicate {
            return Ok(Verdict::Duplicate);
        }
        let n = r.data.len() as u64;
        self.delivered_bytes += n;
        self.delivered.push_back((r, n));
        Ok(Verdict::New)
    }

    /// Complete messages not yet taken.
    pub fn delivered_count(&self) -> usize {
        self.delivered.len()
    }

    pub fn pop(&mut self) -> Option<Received> {
        let (r, charged) = self.delivered.pop_front()?;
        self.delivered_bytes -= charged;
        Some(r)
    }

    /// The allocation the next reads lie in is `len` bytes long (until the next call; 0:
    /// each read's own length).
    pub fn set_read_buffer(&mut self, len: u64) {
        self.read.buffer = len;
    }

    /// A read of `len` bytes was parsed: charge what its zero-copy messages keep alive beyond
    /// their own bytes to the last of them.
    pub fn end_read(&mut self, len: u64) {
        let buffer = self.read.buffer;
        let read = std::mem::replace(
            &mut self.read,
            ZeroCopyRead {
                buffer,
                ..ZeroCopyRead::default()
            },
        );
        if let Some(i) = read.last {
            let extra = len.saturating_sub(read.bytes);
            if let Some((_, charged)) = self.delivered.get_mut(i) {
                *charged += extra;
                self.delivered_bytes += extra;
            }
        }
    }

    /// Adds a chunk. `spare` is how much memory beyond the chunk's own bytes may be reserved
    /// now (the caller's budget minus what is held and what the current read still brings).
    /// `read` is the read the chunk was parsed from in place, if the driver handed it over
    /// as [`Bytes`] (zero copy is possible).
    pub fn on_data(
        &mut self,
        d: &DataFrame<'_>,
        now: Instant,
        spare: u64,
        read: Option<&Bytes>,
    ) -> Result<(), ProtocolError> {
        let (stream, seq) = (d.stream, d.seq);
        let len = d.payload.len() as u64;
        match d.first {
            Some(f) => {
                if f.total_len > self.max_message_size {
                    return Err(ProtocolError::MessageTooLarge {
                        stream,
                        seq,
                        size: f.total_len,
                        max: self.max_message_size,
                    });
                }
                if len > f.total_len {
                    return Err(ProtocolError::ChunkBeyondEnd {
                        stream,
                        seq,
                        end: len,
                        total: f.total_len,
                    });
                }
                if self.partial.contains_key(&(stream, seq)) {
                    return Err(ProtocolError::DuplicateMessage { stream, seq });
                }
                if len == f.total_len {
                    let slice_of = match read {
                        Some(r) if len > 0 && within(r, d.payload) => self.slice_source(r, len),
                        _ => None,
                    };
                    let data = match slice_of {
                        Some(r) => {
                            self.read.bytes += len;
                            self.read.last = Some(self.delivered.len());
                            r.slice_ref(d.payload)
                        }
                        None => Bytes::copy_from_slice(d.payload),
                    };
                    self.deliver(Received {
                        stream,
                        seq,
                        importance: f.importance,
                        send_time_us: f.send_time_us,
                        received_at: now,
                        data,
                    })?;
                    return Ok(());
                }
                // Reserve the rest of the message up front where the budget allows (one
                // allocation, no regrowth copies); reservations are charged like bytes.
                self.charge(len)?;
                let cap = len + self.reservation(f.total_len - len, spare);
                let mut buf = Vec::with_capacity(cap as usize);
                buf.extend_from_slice(d.payload);
                self.partial.insert(
                    (stream, seq),
                    Partial {
                        importance: f.importance,
                        send_time_us: f.send_time_us,
                        total: f.total_len,
                        charged: cap,
                        buf,
                    },
                );
                Ok(())
            }
            None => {
                let Some(p) = self.partial.get(&(stream, seq)) else {
                    return Err(ProtocolError::UnknownMessage { stream, seq });
                };
                let have = p.buf.len() as u64;
                if d.offset != have {
                    return Err(ProtocolError::OffsetMismatch {
                        stream,
                        seq,
                        expected: have,
                        got: d.offset,
                    });
                }
                let end = have + len;
                if end > p.total {
                    return Err(ProtocolError::ChunkBeyondEnd {
                        stream,
                        seq,
                        end,
                        total: p.total,
                    });
                }
                let (charged, total) = (p.charged, p.total);
                if end > charged {
                    self.charge(end - charged)?;
                    let new_cap = end + self.reservation(total - end, spare);
                    let p = self.partial.get_mut(&(stream, seq)).expect("checked above");
                    p.buf.reserve_exact((new_cap - have) as usize);
                    p.charged = new_cap;
                }
                let p = self.partial.get_mut(&(stream, seq)).expect("checked above");
                p.buf.extend_from_slice(d.payload);
                if end == p.total {
                    let p = self.partial.remove(&(stream, seq)).expect("checked above");
                    self.partial_bytes -= p.charged;
                    self.deliver(Received {
                        stream,
                        seq,
                        importance: p.importance,
                        send_time_us: p.send_time_us,
                        received_at: now,
                        data: Bytes::from(p.buf),
                    })?;
                }
                Ok(())
            }
        }
    }

    /// What a whole message of `len` bytes in `read` is delivered as a slice of: the read
    /// itself if the message is at least a quarter of the buffer the read lies in, the read
    /// wrapped by [`PinnedReads::track`] if fewer than the most reads are pinned by smaller
    /// messages, else nothing (it is copied).
    fn slice_source(&mut self, read: &Bytes, len: u64) -> Option<Bytes> {
        if len * 4 >= self.read.buffer.max(read.len() as u64) {
            return Some(read.clone());
        }
        let same = |t: &Bytes| t.as_ptr() == read.as_ptr() && t.len() == read.len();
        if let Some(t) = self.read.tracked.as_ref().filter(|t| same(t)) {
            return Some(t.clone());
        }
        let t = self.pinning.track(read)?;
        self.read.tracked = Some(t.clone());
        Some(t)
    }

    /// Reads that messages smaller than a quarter of their buffer still pin.
    #[cfg(test)]
    pub fn pinned_reads(&mut self) -> usize {
        self.pinning.pinned()
    }

    /// Frees a partial message; returns the bytes freed.
    pub fn on_cancel(&mut self, stream: u64, seq: u64) -> u64 {
        self.done.on_cancel(stream, seq);
        match self.partial.remove(&(stream, seq)) {
            Some(p) => {
                self.partial_bytes -= p.charged;
                p.buf.len() as u64
            }
            None => 0,
        }
    }

    /// Drops every partial message (failover: they will be resent whole on the new
    /// connection).
    pub fn drop_partials(&mut self) {
        self.partial.clear();
        self.partial_bytes = 0;
    }

    /// Drops every partial message of a stream; returns the bytes freed.
    pub fn drop_stream(&mut self, stream: u64) -> u64 {
        self.done.on_stream_closed(stream);
        let before = self.partial_bytes;
        let mut freed = 0;
        self.partial.retain(|&(s, _), p| {
            if s == stream {
                freed += p.charged;
                false
            } else {
                true
            }
        });
        self.partial_bytes = before - freed;
        freed
    }
}

/// Whether `part` lies inside `whole`'s memory (so `Bytes::slice_ref` cannot panic).
fn within(whole: &Bytes, part: &[u8]) -> bool {
    let (w, p) = (whole.as_ptr() as usize, part.as_ptr() as usize);
    p >= w && p + part.len() <= w + whole.len()
}
