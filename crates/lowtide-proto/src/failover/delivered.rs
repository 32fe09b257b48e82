//! Exactly-once delivery: which (stream, seq) the receiver already delivered, in bounded
//! memory.
//!
//! Rule: a message is delivered at most once per (stream, seq). Per stream we keep a floor
//! (every sequence number below it is done: delivered or cancelled) and the done numbers
//! above it (out of order: importance preemption, cancellations, a resend after failover).
//! A copy of a done number is a duplicate. With failover on, the receiver also keeps a hash
//! of the most recent `window` messages per stream: a resent copy whose bytes differ from the
//! first is a protocol error ([`ProtocolError::ResentMessageDiffers`]); an identical one is
//! dropped and counted. Without failover no sender ever repeats a number, so a duplicate is a
//! protocol error ([`ProtocolError::DuplicateDelivery`]).
//!
//! Bounded memory: at most `window` numbers above the floor per stream (more, and the floor
//! jumps past the oldest gap: a message that never arrived, e.g. one whose CANCEL was lost with
//! a failed connection; a first copy arriving for it later is taken for a duplicate and
//! counted), at most `window` hashes per stream, and the windows of at most `max_closed`
//! closed streams (kept so a resend after failover of a closed stream's message is still
//! recognised).
//!
//! Where we differ: Paceline does not say how its receiver discards resent messages; this is
//! the usual sliding window of reliable protocols (e.g. SCTP's TSN map), per stream.
//!
//! ```
//! use lowtide_proto::failover::{Delivered, Verdict};
//! // A window of 64 numbers per stream: memory stays bounded however many arrive.
//! let mut d = Delivered::new(64, true, 16);
//! for seq in 0..10_000 {
//!     assert_eq!(d.on_message(0, seq, &seq.to_be_bytes())?, Verdict::New);
//! }
//! assert!(d.remembered() <= 64);
//! # Ok::<(), lowtide_proto::ProtocolError>(())
//! ```

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::hash::Hasher;

use crate::error::ProtocolError;

/// What to do with a complete message.
///
/// ```
/// use lowtide_proto::failover::{Delivered, Verdict};
/// use lowtide_proto::ProtocolError;
/// // With failover (hashes on): an identical resent copy is dropped, a different one refused.
/// let mut d = Delivered::new(64, true, 16);
/// assert_eq!(d.on_message(0, 0, b"frame")?, Verdict::New);
/// assert_eq!(d.on_message(0, 0, b"frame")?, Verdict::Duplicate);
/// assert_eq!(d.stats.duplicates_dropped, 1);
/// assert_eq!(
///     d.on_message(0, 0, b"other"),
///     Err(ProtocolError::ResentMessageDiffers { stream: 0, seq: 0 })
/// );
/// # Ok::<(), ProtocolError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// First copy: deliver.
    New,
    /// A copy of a message already delivered (or cancelled): drop it.
    Duplicate,
}

#[derive(Debug, Default)]
struct StreamWindow {
    floor: u64,
    above: BTreeSet<u64>,
    hashes: BTreeMap<u64, u64>,
}

/// Counters of the receiver's duplicate filter.
///
/// ```
/// use lowtide_proto::failover::Delivered;
/// let mut d = Delivered::new(64, true, 16);
/// d.on_message(0, 3, b"a")?;
/// d.on_cancel(0, 4);
/// d.on_message(0, 4, b"b")?; // a copy of a cancelled number: nothing to compare it with
/// assert_eq!((d.stats.duplicates_dropped, d.stats.duplicates_unverified), (0, 1));
/// # Ok::<(), lowtide_proto::ProtocolError>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct DeliveredStats {
    /// Identical copies dropped (compared with the first copy's hash).
    pub duplicates_dropped: u64,
    /// Copies dropped that could not be compared (the first copy's hash was already forgotten,
    /// or the number was cancelled).
    pub duplicates_unverified: u64,
    /// Gaps forgotten to keep the window bounded.
    pub gaps_forgotten: u64,
}

/// The delivered-set of one channel's receive side.
///
/// ```
/// use lowtide_proto::failover::{Delivered, Verdict};
/// use lowtide_proto::ProtocolError;
/// // Without failover no sender repeats a number: a copy is a protocol error.
/// let mut d = Delivered::new(64, false, 16);
/// d.on_message(2, 5, b"x")?; // out of order is fine
/// d.on_cancel(2, 4);
/// assert_eq!(d.on_message(2, 5, b"x"), Err(ProtocolError::DuplicateDelivery { stream: 2, seq: 5 }));
/// assert_eq!(d.on_message(2, 6, b"y")?, Verdict::New);
/// # Ok::<(), ProtocolError>(())
/// ```
#[derive(Debug)]
pub struct Delivered {
    window: usize,
    hashes: bool,
    max_closed: usize,
    streams: HashMap<u64, StreamWindow>,
    closed: VecDeque<u64>,
    /// Counters.
    pub stats: DeliveredStats,
}

impl Delivered {
    /// `window` numbers per stream; `hashes`: failover on (duplicates are compared and
    /// dropped rather than refused); `max_closed`: closed streams remembered.
    ///
    /// ```
    /// use lowtide_proto::failover::{Delivered, Verdict};
    /// use lowtide_proto::ProtocolError;
    /// // Without failover a duplicate is the peer's error; with it, a resent copy to drop.
    /// let mut plain = Delivered::new(64, false, 16);
    /// plain.on_message(0, 0, b"a")?;
    /// assert!(plain.on_message(0, 0, b"a").is_err());
    /// let mut failover = Delivered::new(64, true, 16);
    /// failover.on_message(0, 0, b"a")?;
    /// assert_eq!(failover.on_message(0, 0, b"a")?, Verdict::Duplicate);
    /// # Ok::<(), ProtocolError>(())
    /// ```
    pub fn new(window: usize, hashes: bool, max_closed: usize) -> Self {
        Self {
            window: window.max(1),
            hashes,
            max_closed,
            streams: HashMap::new(),
            closed: VecDeque::new(),
            stats: DeliveredStats::default(),
        }
    }

    /// A complete message arrived: deliver it or drop it, or the peer broke the protocol.
    ///
    /// ```
    /// use lowtide_proto::failover::{Delivered, Verdict};
    /// use lowtide_proto::ProtocolError;
    /// let mut d = Delivered::new(64, true, 16);
    /// assert_eq!(d.on_message(0, 0, b"frame")?, Verdict::New);
    /// assert_eq!(d.on_message(0, 0, b"frame")?, Verdict::Duplicate); // a resent copy
    /// assert_eq!(d.stats.duplicates_dropped, 1);
    /// // A "copy" with other bytes is a broken peer.
    /// assert_eq!(d.on_message(0, 0, b"other"), Err(ProtocolError::ResentMessageDiffers { stream: 0, seq: 0 }));
    /// # Ok::<(), ProtocolError>(())
    /// ```
    pub fn on_message(
        &mut self,
        stream: u64,
        seq: u64,
        data: &[u8],
    ) -> Result<Verdict, ProtocolError> {
        let hash = self.hashes.then(|| {
            let mut h = DefaultHasher::new();
            h.write(data);
            h.finish()
        });
        let w = self.streams.entry(stream).or_default();
        if seq < w.floor || w.above.contains(&seq) {
            if !self.hashes {
                return Err(ProtocolError::DuplicateDelivery { stream, seq });
            }
            return match (w.hashes.get(&seq), hash) {
                (Some(first), Some(h)) if *first != h => {
                    Err(ProtocolError::ResentMessageDiffers { stream, seq })
                }
                (Some(_), _) => {
                    self.stats.duplicates_dropped += 1;
                    Ok(Verdict::Duplicate)
                }
                (None, _) => {
                    self.stats.duplicates_unverified += 1;
                    Ok(Verdict::Duplicate)
                }
            };
        }
        self.stats.gaps_forgotten += Self::mark(w, seq, self.window);
        if let Some(h) = hash {
            w.hashes.insert(seq, h);
            if w.hashes.len() > self.window {
                w.hashes.pop_first();
            }
        }
        Ok(Verdict::New)
    }

    /// The sender cancelled `seq`: nothing of it will be delivered.
    ///
    /// ```
    /// use lowtide_proto::failover::{Delivered, Verdict};
    /// let mut d = Delivered::new(64, true, 16);
    /// d.on_cancel(0, 0);
    /// // A resent copy of a cancelled message is dropped, not delivered late.
    /// assert_eq!(d.on_message(0, 0, b"late"), Ok(Verdict::Duplicate));
    /// assert_eq!(d.on_message(0, 1, b"next"), Ok(Verdict::New));
    /// ```
    pub fn on_cancel(&mut self, stream: u64, seq: u64) {
        let w = self.streams.entry(stream).or_default();
        if seq >= w.floor && !w.above.contains(&seq) {
            self.stats.gaps_forgotten += Self::mark(w, seq, self.window);
        }
    }

    /// The peer closed the stream: its window is kept among the last `max_closed` closed.
    ///
    /// ```
    /// use lowtide_proto::failover::Delivered;
    /// let mut d = Delivered::new(64, true, 1); // remember one closed stream
    /// d.on_message(0, 0, b"a").unwrap();
    /// d.on_message(2, 0, b"b").unwrap();
    /// d.on_stream_closed(0);
    /// assert_eq!(d.remembered(), 2);
    /// d.on_stream_closed(2); // pushes stream 0 out
    /// assert_eq!(d.remembered(), 1);
    /// ```
    pub fn on_stream_closed(&mut self, stream: u64) {
        if self.closed.contains(&stream) {
            return;
        }
        self.closed.push_back(stream);
        while self.closed.len() > self.max_closed {
            if let Some(old) = self.closed.pop_front() {
                self.streams.remove(&old);
            }
        }
    }

    /// Marks `seq` done; returns the gaps forgotten to stay within `window`.
    fn mark(w: &mut StreamWindow, seq: u64, window: usize) -> u64 {
        let mut forgotten = 0;
        if seq == w.floor {
            w.floor += 1;
        } else {
            w.above.insert(seq);
            if w.above.len() > window {
                let first = w.above.pop_first().expect("not empty");
                forgotten = first - w.floor;
                w.floor = first + 1;
            }
        }
        while w.above.first() == Some(&w.floor) {
            w.above.pop_first();
            w.floor += 1;
        }
        forgotten
    }

    /// Sequence numbers remembered (for memory checks in tests).
    ///
    /// ```
    /// use lowtide_proto::failover::Delivered;
    /// let mut d = Delivered::new(4, true, 16);
    /// for seq in 0..100 {
    ///     d.on_message(0, seq, b"x").unwrap();
    /// }
    /// // In order: the floor moves; only the last `window` hashes are kept.
    /// assert_eq!(d.remembered(), 4);
    /// ```
    pub fn remembered(&self) -> usize {
        self.streams
            .values()
            .map(|w| w.above.len() + w.hashes.len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_and_out_of_order_messages_are_delivered_once() {
        let mut d = Delivered::new(16, true, 4);
        for seq in [0, 2, 1, 5, 3] {
            assert_eq!(d.on_message(1, seq, b"x").unwrap(), Verdict::New);
        }
        for seq in [0, 1, 2, 3, 5] {
            assert_eq!(d.on_message(1, seq, b"x").unwrap(), Verdict::Duplicate);
        }
        assert_eq!(d.stats.duplicates_dropped, 5);
        assert_eq!(d.on_message(1, 4, b"x").unwrap(), Verdict::New);
        assert_eq!(d.streams[&1].floor, 6);
        assert!(d.streams[&1].above.is_empty());
        // another stream has its own numbers
        assert_eq!(d.on_message(3, 0, b"x").unwrap(), Verdict::New);
    }

    #[test]
    fn a_resent_copy_with_other_bytes_is_an_error_naming_it() {
        let mut d = Delivered::new(16, true, 4);
        d.on_message(2, 7, b"first").unwrap();
        assert_eq!(
            d.on_message(2, 7, b"other"),
            Err(ProtocolError::ResentMessageDiffers { stream: 2, seq: 7 })
        );
        let mut plain = Delivered::new(16, false, 4);
        plain.on_message(2, 0, b"a").unwrap();
        assert_eq!(
            plain.on_message(2, 0, b"a"),
            Err(ProtocolError::DuplicateDelivery { stream: 2, seq: 0 })
        );
    }

    #[test]
    fn cancelled_numbers_close_gaps_and_memory_stays_bounded() {
        let mut d = Delivered::new(64, true, 2);
        d.on_cancel(1, 0);
        d.on_message(1, 1, b"a").unwrap();
        assert_eq!(d.streams[&1].floor, 2);
        assert_eq!(d.on_message(1, 0, b"late").unwrap(), Verdict::Duplicate);
        assert_eq!(d.stats.duplicates_unverified, 1);
        // seq 2 never arrives: the window fills, the floor jumps past the gap
        for seq in 3..10_000 {
            d.on_message(1, seq, b"m").unwrap();
        }
        assert!(d.remembered() <= 2 * 64, "{}", d.remembered());
        assert_eq!(d.stats.gaps_forgotten, 1);
        assert_eq!(d.on_message(1, 2, b"m").unwrap(), Verdict::Duplicate);
        // closed streams are remembered up to max_closed
        for s in 10..20 {
            d.on_message(s, 0, b"m").unwrap();
            d.on_stream_closed(s);
        }
        assert!(d.streams.len() <= 3, "{}", d.streams.len());
        assert_eq!(d.on_message(19, 0, b"m").unwrap(), Verdict::Duplicate);
    }
}
