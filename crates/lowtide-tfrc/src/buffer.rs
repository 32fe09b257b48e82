//! The send buffer: lowtide's message model over a transport that never retransmits.
//!
//! Messages wait here, most important first, then oldest first, until the rate control lets
//! a packet leave. [`SendBuffer::pack`] then fills that packet up to the segment size with
//! what is queued at that moment (it never waits to fill one): the rest of the message being
//! sent, then whole messages, then the head of the next message if it does not fit whole.
//! A message's pieces travel in consecutive packets, one per packet: the head wherever it
//! starts, then fixed-size continuation pieces each at the start of the next packet, so the
//! number of pieces is known when the head leaves and the receiver knows which packets hold
//! the message.
//! The buffer's size is fixed (the paper's 64 KB and 16 KB rows) or DBAT's
//! [`Dbat::buffer_limit`], recomputed as the RTT and rates change.
//!
//! - A message that does not fit is refused, as the paper's drop-tail buffer does (Hasan et
//!   al. §3: "whenever the send buffer is full, the sending function returns and drops the
//!   packet"), unless less important messages that have not started can be evicted for it.
//! - Deadlines and cancellation remove a message only before its first piece leaves: a
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

use lowtide_proto::wire::varint;

use crate::packet::{Piece, MAX_PACKET_HEADER};

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
    /// Messages whose last piece left.
    pub sent: u64,
    /// Pieces (messages and fragments) sent.
    pub pieces: u64,
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
    /// Bytes of each piece after the head.
    continuation: usize,
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
    /// `ramping`: TFRC is still in its slow start (no loss event yet).
    pub fn tune(&mut self, now: Instant, srtt: Option<Duration>, rate: u64, s: u32, ramping: bool) {
        if let Some(d) = &mut self.dbat {
            if srtt.is_some() {
                d.on_queue(now, self.bytes, srtt, rate, s);
                if !ramping {
                    d.transport_left_slow_start(now);
                }
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

    /// Fills a data packet: appends pieces to `out` (which holds the packet header) while
    /// they fit in `segment` bytes, taking only what is queued now. A message that does not
    /// fit whole starts here if at least [`MIN_HEAD`] of its bytes fit (or the packet is still
    /// empty); its later pieces are as long as fits in a packet whatever its header
    /// ([`continuation_len`]), each at the start of the next packet. Returns the number of
    /// pieces appended (0: nothing queued).
    pub fn pack(&mut self, out: &mut Vec<u8>, segment: usize) -> usize {
        let mut pieces = 0;
        loop {
            let n = if let Some(c) = &self.current {
                // a started message goes on at the start of a packet (the last one ended full)
                (c.data.len() - c.offset).min(c.continuation)
            } else {
                let Some(((Reverse(importance), seq), q)) = self.queue.first_key_value() else {
                    break;
                };
                let len = q.data.len();
                let head = Piece {
                    msg: *seq,
                    importance: *importance,
                    msg_time_us: q.time_us,
                    total_len: len as u64,
                    offset: 0,
                    frag_index: 0,
                    // an upper bound, for the header's length
                    frag_count: len.max(1) as u64,
                    payload: &[],
                };
                let room = segment.saturating_sub(out.len());
                let fields = crate::packet::piece_header_len(&head) + varint::len(room as u64);
                let fit = room.saturating_sub(fields);
                if len > fit && pieces > 0 && fit < MIN_HEAD {
                    break;
                }
                let first = len.min(fit.max(1));
                let continuation = continuation_len(&head, segment);
                let (key, q) = self.queue.pop_first().expect("peeked");
                self.current = Some(Current {
                    continuation,
                    id: MessageId {
                        seq: key.1,
                        importance: key.0 .0,
                    },
                    frag_count: 1 + (len - first).div_ceil(continuation) as u64,
                    data: q.data,
                    time_us: q.time_us,
                    offset: 0,
                    frag_index: 0,
                });
                first
            };
            pieces += 1;
            if !self.send_piece(out, n) {
                break; // the packet is full
            }
        }
        self.stats.pieces += pieces as u64;
        pieces
    }

    /// Appends the next `n` bytes of the message being sent as its next piece. Returns
    /// whether that was its last piece (else the packet is full: the next piece starts the
    /// next packet).
    fn send_piece(&mut self, out: &mut Vec<u8>, n: usize) -> bool {
        let c = self.current.as_mut().expect("a message is being sent");
        Piece {
            msg: c.id.seq,
            importance: c.id.importance,
            msg_time_us: c.time_us,
            total_len: c.data.len() as u64,
            offset: c.offset as u64,
            frag_index: c.frag_index,
            frag_count: c.frag_count,
            payload: &c.data[c.offset..c.offset + n],
        }
        .encode(out);
        c.offset += n;
        c.frag_index += 1;
        self.bytes -= n as u64;
        if c.frag_index < c.frag_count {
            return false;
        }
        self.current = None;
        self.stats.sent += 1;
        true
    }
}

/// Bytes of a message's every piece after its head (`head`: the head's fields, with a
/// `frag_count` at least the real one): what fits in `segment` with the longest packet header
/// and the longest header such a piece can have (its offset and index are at most the
/// message's length and piece count).
pub fn continuation_len(head: &Piece<'_>, segment: usize) -> usize {
    let header = MAX_PACKET_HEADER
        + [
            head.msg,
            u64::from(head.importance),
            head.msg_time_us,
            head.total_len,
            head.total_len,
            head.frag_count,
            head.frag_count,
            segment as u64,
        ]
        .into_iter()
        .map(varint::len)
        .sum::<usize>();
    segment.saturating_sub(header).max(1)
}

/// The fewest bytes of a message that start it at the end of a packet already holding other
/// pieces: a smaller head would put the message in one more packet (one more chance to lose
/// it) for a few bytes.
pub const MIN_HEAD: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{encode_data_header, DataHeader, Packet};

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
        assert_eq!(packet(&mut b, 0, 1000)[0].importance, 2);
    }

    /// Packs packet `seq` of at most `segment` bytes and decodes its pieces.
    fn packet(b: &mut SendBuffer, seq: u64, segment: usize) -> Vec<Owned> {
        let mut out = Vec::new();
        let h = DataHeader {
            seq,
            timestamp_us: 1,
            rtt_us: 0,
        };
        encode_data_header(&mut out, &h);
        assert!(b.pack(&mut out, segment) > 0);
        assert!(out.len() <= segment, "{} > {segment}", out.len());
        let Ok(Packet::Data(_, pieces)) = Packet::decode(&out, 1 << 20) else {
            panic!("undecodable");
        };
        pieces.map(Owned::from).collect()
    }

    #[derive(Debug, PartialEq)]
    struct Owned {
        msg: u64,
        importance: u8,
        offset: u64,
        index: u64,
        count: u64,
        len: usize,
    }
    impl From<Piece<'_>> for Owned {
        fn from(p: Piece<'_>) -> Self {
            Owned {
                msg: p.msg,
                importance: p.importance,
                offset: p.offset,
                index: p.frag_index,
                count: p.frag_count,
                len: p.payload.len(),
            }
        }
    }

    #[test]
    fn fragments_are_consecutive_and_a_started_message_cannot_be_cancelled() {
        let mut b = fixed(1 << 20);
        let id = b.push(Message::new(vec![1; 2500]), 7).unwrap();
        let p0 = packet(&mut b, 10, 1100);
        assert_eq!((p0[0].index, p0[0].count, p0[0].offset), (0, 3, 0));
        assert!(p0[0].len > 1000, "the head fills the packet: {p0:?}");
        assert!(!b.cancel(id), "started: it is finished, not cut");
        let p1 = packet(&mut b, 11, 1100);
        assert_eq!(p1[0].index, 1);
        assert!(p1[0].len > 1000, "{p1:?}");
        let p2 = packet(&mut b, 12, 1100);
        assert_eq!((p2[0].index, p2[0].offset as usize + p2[0].len), (2, 2500));
        assert_eq!(b.stats.sent, 1);
        assert!(b.is_empty());
        assert_eq!(b.len(), 0);
        // an empty message is one empty piece
        b.push(Message::new(Bytes::new()), 0).unwrap();
        let p = packet(&mut b, 13, 1100);
        assert_eq!((p[0].count, p[0].len), (1, 0));
        assert_eq!(b.stats.sent, 2);
    }

    #[test]
    fn small_messages_share_full_packets_in_importance_order() {
        let mut b = fixed(1 << 20);
        // the ladder's frames: 400 B at a low rung, 1600 B at 320 kbit/s
        for (i, size) in [400usize, 400, 1600, 400, 1600, 1600, 400]
            .into_iter()
            .enumerate()
        {
            b.push(Message::new(vec![i as u8; size]).importance(i as u8 % 2), 0)
                .unwrap();
        }
        let total: usize = 400 * 4 + 1600 * 3;
        let mut seq = 0;
        let mut sizes = Vec::new();
        let mut pieces = Vec::new();
        while !b.is_empty() {
            let mut out = Vec::new();
            encode_data_header(
                &mut out,
                &DataHeader {
                    seq,
                    timestamp_us: 1,
                    rtt_us: 0,
                },
            );
            b.pack(&mut out, 1200);
            sizes.push(out.len());
            let Ok(Packet::Data(_, ps)) = Packet::decode(&out, 1 << 20) else {
                panic!()
            };
            pieces.extend(ps.map(|p| (seq, Owned::from(p))));
            seq += 1;
        }
        // all but the last packet are full to within a piece header
        let (last, full) = sizes.split_last().unwrap();
        assert!(
            full.iter().all(|&s| s > 1200 - 40 && s <= 1200),
            "{sizes:?}"
        );
        assert!(*last <= 1200);
        assert_eq!(sizes.len(), total.div_ceil(1200 - 40), "{sizes:?}");
        // importance 1 first (messages 1, 3, 5), then 0; each message's pieces in
        // consecutive packets, index by index, covering it exactly
        let order: Vec<u64> = pieces.iter().map(|(_, p)| p.msg).collect();
        let mut firsts = order.clone();
        firsts.dedup();
        assert_eq!(firsts, [1, 3, 5, 0, 2, 4, 6]);
        for m in firsts {
            let mine: Vec<_> = pieces.iter().filter(|(_, p)| p.msg == m).collect();
            let (seq0, p0) = mine[0];
            assert_eq!(mine.len() as u64, p0.count);
            let mut offset = 0;
            for (i, (s, p)) in mine.iter().enumerate() {
                assert_eq!((*s, p.index, p.offset), (seq0 + i as u64, i as u64, offset));
                offset += p.len as u64;
            }
            assert_eq!(offset, if m % 3 == 2 || m == 4 { 1600 } else { 400 }, "{m}");
        }
        assert_eq!(b.stats.sent, 7);
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
