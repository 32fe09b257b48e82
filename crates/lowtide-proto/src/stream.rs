//! Per-stream send queues: messages ordered by importance, then position (sequence number).
//!
//! Source: Paceline, `/work/shared/papers/002_87fc88a8f1af51dc.txt`, "Framing and
//! Fragmentation": message queues are priority queues, so chunks of a newly arrived important
//! message preempt older, less important ones; a partly sent message simply waits at its place
//! while a more important one goes first (the receiver reassembles both).

use std::cmp::Reverse;
use std::collections::BTreeMap;
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
}

/// Queue key: most important first, then oldest.
pub(crate) type Key = (Reverse<u8>, u64);

/// One direction of one stream, on the sender.
#[derive(Debug)]
pub(crate) struct SendStream {
    pub queue: BTreeMap<Key, Pending>,
    pub next_seq: u64,
    /// Close once the queue is empty.
    pub closing: bool,
}

impl SendStream {
    pub fn new() -> Self {
        Self {
            queue: BTreeMap::new(),
            next_seq: 0,
            closing: false,
        }
    }
}
