//! The RDC cell's delay line: where packets of flows that do not answer RDC wait the delay
//! the cell computed for them before they join the real FIFO (docs/rdc.md,
//! "TCP-friendliness"; the rule is in [`crate::aqm::rdc`]).
//!
//! One line for all flows, first in first out: a packet is due at `arrival + D`, or at the
//! due time of the packet before it if that is later, so no packet overtakes another (the
//! cell's delay can only fall by ρ of the time passed plus what the real FIFO took over, so
//! the correction is small). Bounded memory: at most `limit_bytes` wait; a packet that would
//! go beyond is refused (the caller drops and counts it). The RDC cell sets the limit to
//! `size_tb`, what the FIFO the line stands for would hold.

use std::collections::VecDeque;
use std::time::Instant;

pub struct DelayLine<P> {
    waiting: VecDeque<(Instant, usize, P)>,
    bytes: usize,
    limit_bytes: usize,
}

impl<P> DelayLine<P> {
    pub fn new(limit_bytes: usize) -> Self {
        Self {
            waiting: VecDeque::new(),
            bytes: 0,
            limit_bytes,
        }
    }

    /// Puts a packet of `bytes` in the line until `due`; gives it back when the line is full.
    pub fn push(&mut self, packet: P, bytes: usize, due: Instant) -> Result<(), P> {
        if self.bytes + bytes > self.limit_bytes {
            return Err(packet);
        }
        let due = self.waiting.back().map_or(due, |(last, ..)| due.max(*last));
        self.bytes += bytes;
        self.waiting.push_back((due, bytes, packet));
        Ok(())
    }

    /// When the first packet is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.waiting.front().map(|(due, ..)| *due)
    }

    /// The first packet and its due time, if it is due at `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<(P, Instant)> {
        if self.next_due()? > now {
            return None;
        }
        let (due, bytes, packet) = self.waiting.pop_front()?;
        self.bytes -= bytes;
        Some((packet, due))
    }

    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn packets_leave_at_their_time_in_order() {
        let t = Instant::now();
        let mut line = DelayLine::new(10_000);
        line.push(1, 1000, t + 50 * MS).unwrap();
        // Due earlier than the packet ahead: waits for it, never overtakes.
        line.push(2, 1000, t + 40 * MS).unwrap();
        line.push(3, 1000, t + 70 * MS).unwrap();
        assert_eq!(line.next_due(), Some(t + 50 * MS));
        assert_eq!(line.pop_due(t + 49 * MS), None);
        assert_eq!(line.pop_due(t + 50 * MS), Some((1, t + 50 * MS)));
        assert_eq!(line.pop_due(t + 50 * MS), Some((2, t + 50 * MS)));
        assert_eq!(line.pop_due(t + 60 * MS), None);
        assert_eq!(line.pop_due(t + 80 * MS), Some((3, t + 70 * MS)));
        assert!(line.is_empty() && line.bytes() == 0);
    }

    #[test]
    fn the_line_holds_at_most_its_limit() {
        let t = Instant::now();
        let mut line = DelayLine::new(2500);
        assert!(line.push(1, 1000, t).is_ok());
        assert!(line.push(2, 1000, t).is_ok());
        assert_eq!(line.push(3, 1000, t), Err(3), "3000 > 2500 bytes");
        assert!(line.push(4, 500, t).is_ok(), "a smaller one still fits");
        assert_eq!((line.len(), line.bytes()), (3, 2500));
        line.pop_due(t);
        assert!(line.push(5, 1000, t).is_ok(), "room again once one left");
    }
}
