//! Per-stream send queues: messages ordered by importance, then position (sequence number).
//!
//! Source: Paceline (Erbad and Krasic, "Sender-side Buffers and the Case for Multimedia
//! Adaptation"), "Framing and Fragmentation": message queues are priority queues, so chunks of a
//! newly arrived important message preempt older, less important ones; a partly sent message simply
//! waits at its place while a more important one goes first (the receiver reassembles both).

use std::cmp::Reverse;
use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use bytes::Bytes;

/// A message waiting (entirely or partly) in a send queue.
#[derive(Debug)]
pub(crate) struct Pending {
    pub data: Bytes,
    /// Bytes already staged for the kernel.
    pub sent: usize,
    pub cost: f64,
    pub deadline: Option<Instant>,
    pub enqueued: Instant,
    pub send_time_us: u64,
    /// A copy went to the duplicate lane (each message is copied at most once).
    pub copied: bool,
}

/// A stream's messages, most important first, then oldest: one FIFO per importance level
/// (sequence numbers only grow, so a new message always joins the end of its level; this
/// keeps `send` and staging O(levels) rather than O(log messages)).
#[derive(Debug, Default)]
pub(crate) struct MessageQueue {
    levels: BTreeMap<Reverse<u8>, VecDeque<(u64, Pending)>>,
}

impl MessageQueue {
    pub fn is_empty(&self) -> bool {
        self.levels.is_empty()
    }

    /// Messages queued (partly staged ones included).
    pub fn len(&self) -> usize {
        self.levels.values().map(VecDeque::len).sum()
    }

    /// Appends a message; `seq` must be larger than any queued at this importance.
    pub fn push(&mut self, importance: u8, seq: u64, p: Pending) {
        let level = self.levels.entry(Reverse(importance)).or_default();
        debug_assert!(level.back().is_none_or(|(s, _)| *s < seq));
        level.push_back((seq, p));
    }

    /// Puts a message back at its place (failover: a resend of a number older than the
    /// queued ones).
    pub fn push_resend(&mut self, importance: u8, seq: u64, p: Pending) {
        let level = self.levels.entry(Reverse(importance)).or_default();
        let i = level.partition_point(|(s, _)| *s < seq);
        level.insert(i, (seq, p));
    }

    /// Failover: partly staged messages start again from their first byte; returns the bytes
    /// that are queued again.
    pub fn rewind_partial(&mut self) -> u64 {
        let mut n = 0;
        for level in self.levels.values_mut() {
            for (_, p) in level.iter_mut() {
                n += p.sent as u64;
                p.sent = 0;
            }
        }
        n
    }

    /// Every queued message: importance, sequence number, state.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (u8, u64, &mut Pending)> {
        self.levels
            .iter_mut()
            .flat_map(|(imp, level)| level.iter_mut().map(move |(seq, p)| (imp.0, *seq, p)))
    }

    /// The message to send next: importance, sequence number, state.
    pub fn front_mut(&mut self) -> Option<(u8, u64, &mut Pending)> {
        let (imp, level) = self.levels.iter_mut().next()?;
        let (seq, p) = level.front_mut()?;
        Some((imp.0, *seq, p))
    }

    /// Removes the message [`front_mut`](Self::front_mut) returned.
    pub fn pop_front(&mut self) -> Option<Pending> {
        let mut level = self.levels.first_entry()?;
        let (_, p) = level.get_mut().pop_front()?;
        if level.get().is_empty() {
            level.remove();
        }
        Some(p)
    }

    /// Removes a message by importance and sequence number.
    pub fn remove(&mut self, importance: u8, seq: u64) -> Option<Pending> {
        let level = self.levels.get_mut(&Reverse(importance))?;
        let i = level.binary_search_by_key(&seq, |(s, _)| *s).ok()?;
        let (_, p) = level.remove(i)?;
        if level.is_empty() {
            self.levels.remove(&Reverse(importance));
        }
        Some(p)
    }
}

/// One direction of one stream, on the sender.
#[derive(Debug)]
pub(crate) struct SendStream {
    pub queue: MessageQueue,
    pub next_seq: u64,
    /// Close once the queue is empty.
    pub closing: bool,
}

impl SendStream {
    pub fn new() -> Self {
        Self {
            queue: MessageQueue::default(),
            next_seq: 0,
            closing: false,
        }
    }
}
