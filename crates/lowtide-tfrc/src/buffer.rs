//! The send buffer: lowtide's message model over a transport that never retransmits.
//!
//! Messages wait here, most important first, then oldest first, until the rate control lets
//! a packet leave; each leaves as consecutive fragments of at most one packet's payload.
//! The buffer's size is fixed (the paper's 64 KB and 16 KB rows) or DBAT's
//! [`Dbat::buffer_limit`], recomputed as the RTT and rates change.
//!
//! - A message that does not fit is refused, as the paper's drop-tail buffer does (Hasan et
//!   al. §3: "whenever the send buffer is full, the sending function returns and drops the
//!   packet"), unless less important messages that have not started can be evicted for it.
//! - Deadlines and cancellation remove a message only before its first fragment leaves: a
//!   half-sent message is finished, since the receiver would otherwise wait for fragments
//!   that never come (TFRC does not retransmit, so a lost fragment loses the message anyway;
//!   the receiver counts that).
//! - Every refusal, eviction, expiry and cancellation is counted.
//!
//! Where we differ (from DBAT as the paper runs it over TCP): DBAT's slow-start phase starts
//! at TFRC's first feedback, not at the first queued byte (see [`SendBuffer::tune`]).

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use lowtide_proto::controller::{Dbat, DbatConfig};
use lowtide_proto::ConfigError;
use serde::{Deserialize, Serialize};

use crate::packet::DataHeader;

/// How the send buffer is sized, as found in configuration files.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum BufferConfig {
    /// A fixed size, bytes.
    Fixed {
        /// Size, bytes.
        bytes: u64,
    },
    /// Sized by DBAT (Hasan et al. §4).
    Dbat(DbatConfig),
}

impl Default for BufferConfig {
    fn default() -> Self {
        BufferConfig::Fixed { bytes: 64 << 10 }
    }
}

impl BufferConfig {
    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match *self {
            BufferConfig::Fixed { bytes } if !(1..=1 << 30).contains(&bytes) => Err(
                ConfigError::new("buffer.fixed.bytes", bytes, "1..=1073741824"),
            ),
            BufferConfig::Fixed { .. } => Ok(()),
            BufferConfig::Dbat(cfg) => cfg.validate(),
        }
    }
}

/// A message to send: lowtide's ([`lowtide_proto::Message`]). TFRC carries one stream, so
/// `cost` (quality fairness between streams) is ignored; `deadline` withdraws the message if
/// its first fragment has not left by then.
pub use lowtide_proto::Message;

/// Identifies a message of ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct MessageId {
    /// Message sequence number.
    pub seq: u64,
    /// Its importance.
    pub importance: u8,
}

/// Why a message of ours will not be delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum DropReason {
    /// Evicted from the buffer for a more important message.
    Evicted,
    /// Its deadline passed before it started.
    Expired,
    /// The application cancelled it.
    Cancelled,
}

/// `send` refused the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// The send buffer has no room (and nothing less important to evict).
    #[error(
        "send buffer full: {queued} of {capacity} bytes used, message of {size} bytes refused"
    )]
    BufferFull {
        /// Bytes in the buffer.
        queued: u64,
        /// Its size now.
        capacity: u64,
        /// The message's size.
        size: u64,
    },
    /// Larger than the peer accepts.
    #[error("message of {size} bytes exceeds the limit of {max}")]
    TooLarge {
        /// The message's size.
        size: u64,
        /// The limit.
        max: u64,
    },
    /// The session is closed.
    #[error("session closed")]
    Closed,
}

/// Counters of the send buffer, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct BufferStats {
    /// Messages accepted.
    pub accepted: u64,
    /// Messages refused: buffer full.
    pub refused_full: u64,
    /// Messages evicted for more important ones.
    pub evicted: u64,
    /// Messages expired before starting.
    pub expired: u64,
    /// Messages cancelled before starting.
    pub cancelled: u64,
    /// Messages whose last fragment left.
    pub sent: u64,
}

#[derive(Debug)]
struct Queued {
    data: Bytes,
    deadline: Option<Instant>,
    time_us: u64,
}

#[derive(Debug)]
struct Current {
    id: MessageId,
    data: Bytes,
    time_us: u64,
    offset: usize,
    frag_index: u64,
    frag_count: u64,
}

/// The buffer.
#[derive(Debug)]
pub struct SendBuffer {
    fixed: Option<u64>,
    dbat: Option<Dbat>,
    capacity: u64,
    queue: BTreeMap<(Reverse<u8>, u64), Queued>,
    current: Option<Current>,
    bytes: u64,
    next_msg: u64,
    dropped: Vec<(MessageId, DropReason)>,
    /// Counters.
    pub stats: BufferStats,
}

impl SendBuffer {
    /// A checked buffer.
    pub fn new(cfg: BufferConfig) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let (fixed, dbat) = match cfg {
            BufferConfig::Fixed { bytes } => (Some(bytes), None),
            BufferConfig::Dbat(c) => (None, Some(Dbat::new(c)?)),
        };
        let mut b = Self {
            fixed,
            dbat,
            capacity: 0,
            queue: BTreeMap::new(),
            current: None,
            bytes: 0,
            next_msg: 0,
            dropped: Vec::new(),
            stats: BufferStats::default(),
        };
        b.capacity = b.fixed.unwrap_or(64 << 10);
        Ok(b)
    }

    /// DBAT's state, if DBAT sizes the buffer.
    pub fn dbat(&self) -> Option<&Dbat> {
        self.dbat.as_ref()
    }

    /// DBAT's state, mutable (probe results, stream rate, signals).
    pub fn dbat_mut(&mut self) -> Option<&mut Dbat> {
        self.dbat.as_mut()
    }

    /// The buffer's size now, bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bytes waiting (queued messages and the rest of the one being sent).
    pub fn len(&self) -> u64 {
        self.bytes
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0 && self.current.is_none() && self.queue.is_empty()
    }

    /// Feeds DBAT a queue sample and resizes (no-op for a fixed buffer). Until the transport
    /// has an RTT (`srtt` is `None`: no feedback yet) DBAT only sizes the buffer: TFRC's slow
    /// start begins with the first feedback, and before it the sender sends one packet per
    /// second (RFC 5348 §4.2), so a queue then is neither slow start's nor congestion's.
    pub fn tune(&mut self, now: Instant, srtt: Option<Duration>, rate: u64, s: u32) {
        if let Some(d) = &mut self.dbat {
            if srtt.is_some() {
                d.on_queue(now, self.bytes, srtt, rate, s);
            }
            self.capacity = d.buffer_limit(srtt, rate, s);
        }
    }

    /// Queues a message at `now` (`time_us` on the wire clock).
    pub fn push(&mut self, msg: Message, time_us: u64) -> Result<MessageId, SendError> {
        let size = msg.data.len() as u64;
        while self.bytes + size > self.capacity {
            // evict the least important, newest message that has not started
            let victim = self
                .queue
                .keys()
                .next_back()
                .copied()
                .filter(|(Reverse(imp), _)| *imp < msg.importance);
            let Some(key) = victim else {
                self.stats.refused_full += 1;
                return Err(SendError::BufferFull {
                    queued: self.bytes,
                    capacity: self.capacity,
                    size,
                });
            };
            self.withdraw(key, DropReason::Evicted);
        }
        let id = MessageId {
            seq: self.next_msg,
            importance: msg.importance,
        };
        self.next_msg += 1;
        self.bytes += size;
        self.stats.accepted += 1;
        self.queue.insert(
            (Reverse(msg.importance), id.seq),
            Queued {
                data: msg.data,
                deadline: msg.deadline,
                time_us,
            },
        );
        Ok(id)
    }

    /// Withdraws a message that has not started; `false` if it has or is unknown.
    pub fn cancel(&mut self, id: MessageId) -> bool {
        self.withdraw((Reverse(id.importance), id.seq), DropReason::Cancelled)
    }

    /// Removes a queued message that has not started, counts it by reason and reports it;
    /// `false` if it is not queued.
    fn withdraw(&mut self, key: (Reverse<u8>, u64), reason: DropReason) -> bool {
        let Some(q) = self.queue.remove(&key) else {
            return false;
        };
        self.bytes -= q.data.len() as u64;
        match reason {
            DropReason::Evicted => self.stats.evicted += 1,
            DropReason::Expired => self.stats.expired += 1,
            DropReason::Cancelled => self.stats.cancelled += 1,
        }
        let id = MessageId {
            seq: key.1,
            importance: key.0 .0,
        };
        self.dropped.push((id, reason));
        true
    }

    /// Removes messages whose deadline passed; returns the earliest deadline left.
    pub fn expire(&mut self, now: Instant) -> Option<Instant> {
        let expired: Vec<_> = self
            .queue
            .iter()
            .filter(|(_, q)| q.deadline.is_some_and(|d| d <= now))
            .map(|(k, _)| *k)
            .collect();
        for key in expired {
            self.withdraw(key, DropReason::Expired);
        }
        self.queue.values().filter_map(|q| q.deadline).min()
    }

    /// Messages dropped since the last call.
    pub fn take_dropped(&mut self) -> Vec<(MessageId, DropReason)> {
        std::mem::take(&mut self.dropped)
    }

    /// The next fragment of at most `max_payload` bytes, as packet `seq`: header fields
    /// (sequence number and clock fields left for the caller) and payload.
    pub fn next_fragment(
        &mut self,
        seq: u64,
        max_payload: usize,
    ) -> Option<(DataHeader, Bytes, Option<MessageId>)> {
        let max_payload = max_payload.max(1);
        if self.current.is_none() {
            let (key, q) = self.queue.pop_first()?;
            let len = q.data.len();
            self.current = Some(Current {
                id: MessageId {
                    seq: key.1,
                    importance: key.0 .0,
                },
                frag_count: len.div_ceil(max_payload).max(1) as u64,
                data: q.data,
                time_us: q.time_us,
                offset: 0,
                frag_index: 0,
            });
        }
        let c = self.current.as_mut().expect("set above");
        let n = (c.data.len() - c.offset).min(max_payload);
        let payload = c.data.slice(c.offset..c.offset + n);
        let header = DataHeader {
            seq,
            timestamp_us: 0,
            rtt_us: 0,
            msg: c.id.seq,
            importance: c.id.importance,
            msg_time_us: c.time_us,
            total_len: c.data.len() as u64,
            offset: c.offset as u64,
            frag_index: c.frag_index,
            frag_count: c.frag_count,
        };
        c.offset += n;
        c.frag_index += 1;
        self.bytes -= n as u64;
        let done = c.frag_index == c.frag_count;
        let finished = done.then_some(c.id);
        if done {
            self.current = None;
            self.stats.sent += 1;
        }
        Some((header, payload, finished))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed(bytes: u64) -> SendBuffer {
        SendBuffer::new(BufferConfig::Fixed { bytes }).unwrap()
    }

    #[test]
    fn a_full_buffer_refuses_unless_it_can_evict_less_important_messages() {
        let mut b = fixed(3000);
        b.push(Message::new(vec![0; 1000]).importance(1), 0)
            .unwrap();
        b.push(Message::new(vec![0; 1000]).importance(0), 0)
            .unwrap();
        b.push(Message::new(vec![0; 1000]).importance(0), 0)
            .unwrap();
        assert!(matches!(
            b.push(Message::new(vec![0; 1000]), 0),
            Err(SendError::BufferFull { queued: 3000, .. })
        ));
        // importance 2 evicts the newest importance-0 message
        b.push(Message::new(vec![0; 1000]).importance(2), 0)
            .unwrap();
        assert_eq!(
            b.take_dropped(),
            vec![(
                MessageId {
                    seq: 2,
                    importance: 0
                },
                DropReason::Evicted
            )]
        );
        assert_eq!(b.stats.refused_full, 1);
        // most important first
        let (h, _, _) = b.next_fragment(0, 1000).unwrap();
        assert_eq!(h.importance, 2);
    }

    #[test]
    fn fragments_are_consecutive_and_a_started_message_cannot_be_cancelled() {
        let mut b = fixed(1 << 20);
        let id = b.push(Message::new(vec![1; 2500]), 7).unwrap();
        let (h0, p0, done) = b.next_fragment(10, 1000).unwrap();
        assert_eq!(
            (h0.frag_index, h0.frag_count, h0.offset, p0.len()),
            (0, 3, 0, 1000)
        );
        assert!(done.is_none());
        assert!(!b.cancel(id), "started: it is finished, not cut");
        b.next_fragment(11, 1000).unwrap();
        let (h2, p2, done) = b.next_fragment(12, 1000).unwrap();
        assert_eq!((h2.frag_index, h2.offset, p2.len()), (2, 2000, 500));
        assert_eq!(done, Some(id));
        assert!(b.is_empty());
        assert_eq!(b.len(), 0);
        // an empty message is one empty fragment
        b.push(Message::new(Bytes::new()), 0).unwrap();
        let (h, p, done) = b.next_fragment(13, 1000).unwrap();
        assert_eq!((h.frag_count, p.len()), (1, 0));
        assert!(done.is_some());
    }

    #[test]
    fn deadlines_expire_queued_messages() {
        let mut b = fixed(1 << 20);
        let t0 = Instant::now();
        b.push(Message::new(vec![0; 10]).deadline(t0), 0).unwrap();
        let later = t0 + Duration::from_secs(1);
        b.push(Message::new(vec![0; 10]).deadline(later), 0)
            .unwrap();
        assert_eq!(b.expire(t0), Some(later));
        assert_eq!(b.stats.expired, 1);
        assert_eq!(b.len(), 10);
    }
}
