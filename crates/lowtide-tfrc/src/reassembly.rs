//! Messages back from fragments, in bounded memory. TFRC does not retransmit: a message with
//! a lost fragment is dropped (and counted) once every packet of its range is classified as
//! received or lost by the loss history.

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use bytes::Bytes;
use serde::Serialize;

use crate::packet::Piece;

/// Most partial messages kept at once; beyond it the oldest is dropped.
pub const MAX_PARTIALS: usize = 4096;

/// A message delivered to the application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// The sender's message sequence number.
    pub msg: u64,
    /// Its importance.
    pub importance: u8,
    /// The sender's clock when it was queued, µs since the sender's epoch.
    pub send_time_us: u64,
    /// Payload.
    pub data: Bytes,
    /// When its last fragment arrived.
    pub arrived: Instant,
}

/// Receive-side counters, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ReassemblyStats {
    /// Messages delivered.
    pub delivered: u64,
    /// Messages dropped: a fragment was lost.
    pub lost_fragment: u64,
    /// Messages dropped: over the receive memory budget.
    pub over_memory: u64,
    /// Messages dropped: too many partial messages at once.
    pub too_many_partials: u64,
    /// Messages dropped: their fragments contradict each other (sizes, counts, positions).
    pub inconsistent: u64,
}

#[derive(Debug)]
struct Partial {
    first_seq: u64,
    frag_count: u64,
    got: u64,
    /// Payload bytes received; a complete message has exactly its length.
    got_bytes: u64,
    /// The byte ranges received (offset → end), which must not overlap: with that, as many
    /// bytes as the message's length means no hole, whatever a lying peer sends.
    ranges: BTreeMap<u64, u64>,
    importance: u8,
    time_us: u64,
    data: Vec<u8>,
}

/// Reassembly state.
#[derive(Debug)]
pub struct Reassembly {
    partials: BTreeMap<u64, Partial>,
    delivered: VecDeque<Received>,
    memory: u64,
    max_memory: u64,
    /// Counters.
    pub stats: ReassemblyStats,
}

impl Reassembly {
    /// Partial and unread messages together stay within `max_memory` bytes.
    pub fn new(max_memory: u64) -> Self {
        Self {
            partials: BTreeMap::new(),
            delivered: VecDeque::new(),
            memory: 0,
            max_memory,
            stats: ReassemblyStats::default(),
        }
    }

    /// Bytes held (partial and unread messages).
    pub fn memory(&self) -> u64 {
        self.memory
    }

    /// A piece arrived in packet `seq` (not a duplicate: the loss history filters those).
    pub fn on_piece(&mut self, now: Instant, seq: u64, h: &Piece<'_>) {
        let payload = h.payload;
        if !self.partials.contains_key(&h.msg) {
            if self.memory + h.total_len > self.max_memory {
                self.stats.over_memory += 1;
                return;
            }
            if self.partials.len() >= MAX_PARTIALS {
                let (_, old) = self.partials.pop_first().expect("not empty");
                self.memory -= old.data.len() as u64;
                self.stats.too_many_partials += 1;
            }
            self.memory += h.total_len;
            self.partials.insert(
                h.msg,
                Partial {
                    first_seq: seq - h.frag_index,
                    frag_count: h.frag_count,
                    got: 0,
                    got_bytes: 0,
                    ranges: BTreeMap::new(),
                    importance: h.importance,
                    time_us: h.msg_time_us,
                    data: vec![0; h.total_len as usize],
                },
            );
        }
        let p = self.partials.get_mut(&h.msg).expect("inserted above");
        let (at, end) = (h.offset, h.offset + payload.len() as u64);
        let overlaps = p
            .ranges
            .range(..end)
            .next_back()
            .is_some_and(|(_, &e)| e > at)
            || p.ranges.contains_key(&at);
        let consistent = p.data.len() as u64 == h.total_len
            && p.frag_count == h.frag_count
            && p.first_seq == seq - h.frag_index
            && !overlaps;
        if !consistent {
            // a fragment that contradicts the message's first: the message is unusable
            self.discard(h.msg);
            return;
        }
        p.ranges.insert(at, end);
        let at = at as usize;
        p.data[at..at + payload.len()].copy_from_slice(payload);
        p.got += 1;
        p.got_bytes += payload.len() as u64;
        if p.got == p.frag_count {
            if p.got_bytes != h.total_len {
                // every fragment came, yet bytes are missing (a cut datagram): never deliver
                // a message with holes
                self.discard(h.msg);
                return;
            }
            let p = self.partials.remove(&h.msg).expect("present");
            self.stats.delivered += 1;
            self.delivered.push_back(Received {
                msg: h.msg,
                importance: p.importance,
                send_time_us: p.time_us,
                data: p.data.into(),
                arrived: now,
            });
        }
    }

    fn discard(&mut self, msg: u64) {
        let p = self.partials.remove(&msg).expect("present");
        self.memory -= p.data.len() as u64;
        self.stats.inconsistent += 1;
    }

    /// Every packet below `horizon` is classified: partial messages that end below it miss a
    /// lost fragment.
    pub fn drop_incomplete_below(&mut self, horizon: u64) {
        let doomed: Vec<u64> = self
            .partials
            .iter()
            .filter(|(_, p)| p.first_seq.saturating_add(p.frag_count) <= horizon)
            .map(|(k, _)| *k)
            .collect();
        for k in doomed {
            let p = self.partials.remove(&k).expect("listed");
            self.memory -= p.data.len() as u64;
            self.stats.lost_fragment += 1;
        }
    }

    /// The next complete message.
    pub fn pop(&mut self) -> Option<Received> {
        let r = self.delivered.pop_front()?;
        self.memory -= r.data.len() as u64;
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frag(
        msg: u64,
        seq: u64,
        index: u64,
        count: u64,
        offset: u64,
        total: u64,
    ) -> (u64, Piece<'static>) {
        (
            seq,
            Piece {
                msg,
                importance: 0,
                msg_time_us: 0,
                total_len: total,
                offset,
                frag_index: index,
                frag_count: count,
                payload: &[],
            },
        )
    }

    fn on(
        r: &mut Reassembly,
        now: Instant,
        (seq, p): (u64, Piece<'static>),
        payload: &'static [u8],
    ) {
        r.on_piece(now, seq, &Piece { payload, ..p });
    }

    #[test]
    fn fragments_make_a_message_and_contradictions_or_holes_are_counted_not_delivered() {
        let now = Instant::now();
        let mut r = Reassembly::new(1 << 20);
        on(&mut r, now, frag(0, 10, 1, 2, 3, 5), b"de");
        on(&mut r, now, frag(0, 9, 0, 2, 0, 5), b"abc");
        assert_eq!(&r.pop().unwrap().data[..], b"abcde");
        assert_eq!(r.memory(), 0);
        // two fragments, but the second was cut: 4 of 5 bytes
        on(&mut r, now, frag(1, 11, 0, 2, 0, 5), b"abc");
        on(&mut r, now, frag(1, 12, 1, 2, 3, 5), b"d");
        // a fragment that names another first packet
        on(&mut r, now, frag(2, 13, 0, 2, 0, 5), b"abc");
        on(&mut r, now, frag(2, 15, 1, 2, 3, 5), b"de");
        assert!(r.pop().is_none());
        assert_eq!(r.stats.inconsistent, 2);
        // a lying peer: the same bytes twice, adding up to the length with a hole at 2..4
        on(&mut r, now, frag(4, 20, 0, 2, 0, 4), b"ab");
        on(&mut r, now, frag(4, 21, 1, 2, 0, 4), b"ab");
        // or overlapping pieces
        on(&mut r, now, frag(5, 22, 0, 2, 0, 4), b"abc");
        on(&mut r, now, frag(5, 23, 1, 2, 2, 4), b"cd");
        assert!(
            r.pop().is_none(),
            "a message with a hole is never delivered"
        );
        assert_eq!(r.stats.inconsistent, 4);
        assert_eq!(r.memory(), 0);
        // a message missing a fragment is dropped once its range is classified
        on(&mut r, now, frag(3, 16, 0, 2, 0, 5), b"abc");
        r.drop_incomplete_below(17);
        assert_eq!(r.stats.lost_fragment, 0);
        r.drop_incomplete_below(18);
        assert_eq!(r.stats.lost_fragment, 1);
        assert_eq!(r.memory(), 0);
    }

    #[test]
    fn memory_is_bounded() {
        let now = Instant::now();
        let mut r = Reassembly::new(10_000);
        for m in 0..100 {
            on(&mut r, now, frag(m, m * 10, 0, 10, 0, 4000), &[1; 400]);
        }
        assert!(r.memory() <= 10_000);
        assert_eq!(r.stats.over_memory, 98);
    }
}
