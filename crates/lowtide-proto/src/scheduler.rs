//! The stream scheduler: weighted fair queuing on virtual time.
//!
//! Source: Paceline (Erbad and Krasic, "Sender-side Buffers and the Case for Multimedia
//! Adaptation"), "Stream Fairness". Each stream has a cumulative virtual time; the active stream
//! (one with data queued) with the smallest virtual time sends the next chunk, and its virtual time
//! grows by the chunk's bytes (resource fairness) or by its share of the message's cost (quality
//! fairness), divided by the stream's weight. Two rules set virtual time:
//! - **Fair Start**: a new stream starts at the minimum virtual time of the active streams, or,
//!   if none is active, at the maximum of the idle ones (zero if it is the only stream);
//! - **Use It Or Lose It**: a stream that becomes active again starts at
//!   `max(own, min of the active streams)`, so idleness saves no credit.
//!
//! Where we differ: the paper charges whole messages; we charge per chunk (a message's cost is
//! spread over its bytes), which keeps shares exact when large messages interleave. Ties go to
//! the lower stream id, so the schedule is deterministic.
//!
//! Use It Or Lose It: a stream idle while another sent comes back level with it, not ahead.
//!
//! ```
//! use lowtide_proto::scheduler::Scheduler;
//! let mut s = Scheduler::new();
//! s.add(0, 1.0);
//! s.add(2, 1.0);
//! s.set_active(0, true);
//! s.charge(0, 50_000.0); // stream 0 sent alone for a while
//! s.set_active(2, true); // stream 2 wakes up: no credit for its idle time
//! assert_eq!(s.vtime(2), Some(50_000.0));
//! assert_eq!(s.lead(0), 0.0);
//! ```

use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy)]
struct Entry {
    vtime: f64,
    weight: f64,
    active: bool,
}

/// Virtual-time state of all streams of one sender.
///
/// ```
/// use lowtide_proto::scheduler::Scheduler;
/// let mut s = Scheduler::new();
/// s.add(0, 3.0); // video
/// s.add(2, 1.0); // audio
/// s.set_active(0, true);
/// s.set_active(2, true);
/// let mut sent = [0u32; 2];
/// for _ in 0..400 {
///     let id = s.pick().expect("both active");
///     s.charge(id, 1000.0); // one 1000-byte chunk
///     sent[id as usize / 2] += 1;
/// }
/// assert_eq!(sent, [300, 100]); // 3 : 1
/// ```
#[derive(Debug, Default, Clone)]
pub struct Scheduler {
    entries: BTreeMap<u64, Entry>,
}

impl Scheduler {
    /// An empty scheduler.
    ///
    /// ```
    /// use lowtide_proto::scheduler::Scheduler;
    /// let s = Scheduler::new();
    /// assert_eq!(s.pick(), None); // no streams, nothing to send
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    fn min_active(&self) -> Option<f64> {
        self.entries
            .values()
            .filter(|e| e.active)
            .map(|e| e.vtime)
            .reduce(f64::min)
    }

    /// Adds an idle stream, applying Fair Start.
    ///
    /// ```
    /// use lowtide_proto::scheduler::Scheduler;
    /// let mut s = Scheduler::new();
    /// s.add(0, 1.0);
    /// s.set_active(0, true);
    /// s.charge(0, 5000.0);
    /// // Fair Start: a new stream starts at the active streams' virtual time, not at 0.
    /// s.add(2, 1.0);
    /// assert_eq!(s.vtime(2), Some(5000.0));
    /// assert_eq!(s.weight(2), Some(1.0));
    /// ```
    pub fn add(&mut self, id: u64, weight: f64) {
        let vtime = match self.min_active() {
            Some(m) => m,
            None => self
                .entries
                .values()
                .map(|e| e.vtime)
                .reduce(f64::max)
                .unwrap_or(0.0),
        };
        self.entries.insert(
            id,
            Entry {
                vtime,
                weight,
                active: false,
            },
        );
    }

    /// Forgets a stream.
    ///
    /// ```
    /// use lowtide_proto::scheduler::Scheduler;
    /// let mut s = Scheduler::new();
    /// s.add(0, 1.0);
    /// s.set_active(0, true);
    /// s.remove(0);
    /// assert_eq!((s.pick(), s.weight(0)), (None, None));
    /// ```
    pub fn remove(&mut self, id: u64) {
        self.entries.remove(&id);
    }

    /// Marks a stream active (data queued) or idle; on idle-to-active applies Use It Or Lose It.
    ///
    /// ```
    /// use lowtide_proto::scheduler::Scheduler;
    /// let mut s = Scheduler::new();
    /// s.add(0, 1.0);
    /// s.add(2, 1.0);
    /// s.set_active(0, true);
    /// s.charge(0, 8000.0); // stream 2 was idle meanwhile
    /// // Use It Or Lose It: stream 2 does not get 8000 bytes of credit for idling.
    /// s.set_active(2, true);
    /// assert_eq!(s.vtime(2), Some(8000.0));
    /// s.set_active(0, false);
    /// assert_eq!(s.pick(), Some(2));
    /// ```
    pub fn set_active(&mut self, id: u64, active: bool) {
        let floor = if active { self.min_active() } else { None };
        if let Some(e) = self.entries.get_mut(&id) {
            if active && !e.active {
                if let Some(m) = floor {
                    e.vtime = e.vtime.max(m);
                }
            }
            e.active = active;
        }
    }

    /// The active stream with the smallest virtual time (lowest id on ties).
    ///
    /// ```
    /// use lowtide_proto::scheduler::Scheduler;
    /// let mut s = Scheduler::new();
    /// s.add(4, 1.0);
    /// s.add(2, 1.0);
    /// assert_eq!(s.pick(), None); // both idle
    /// s.set_active(4, true);
    /// s.set_active(2, true);
    /// assert_eq!(s.pick(), Some(2)); // a tie: lowest id
    /// s.charge(2, 100.0);
    /// assert_eq!(s.pick(), Some(4));
    /// ```
    pub fn pick(&self) -> Option<u64> {
        let mut best: Option<(u64, f64)> = None;
        for (&id, e) in &self.entries {
            if e.active && best.is_none_or(|(_, v)| e.vtime < v) {
                best = Some((id, e.vtime));
            }
        }
        best.map(|(id, _)| id)
    }

    /// How far `id`'s virtual time may advance while it stays the scheduler's pick: the gap to
    /// the smallest virtual time of the other active streams (infinite when it is alone). The
    /// sender uses it to stage several chunks' worth of one message as one frame without
    /// changing the schedule.
    ///
    /// ```
    /// use lowtide_proto::scheduler::Scheduler;
    /// let mut s = Scheduler::new();
    /// s.add(0, 1.0);
    /// s.set_active(0, true);
    /// assert_eq!(s.lead(0), f64::INFINITY); // alone: it may send everything
    /// s.add(2, 1.0);
    /// s.set_active(2, true);
    /// s.charge(2, 3000.0);
    /// assert_eq!(s.lead(0), 3000.0); // stream 0 stays the pick for 3000 more bytes
    /// ```
    pub fn lead(&self, id: u64) -> f64 {
        let Some(own) = self.entries.get(&id) else {
            return 0.0;
        };
        self.entries
            .iter()
            .filter(|&(&other, e)| other != id && e.active)
            .map(|(_, e)| (e.vtime - own.vtime).max(0.0))
            .reduce(f64::min)
            .unwrap_or(f64::INFINITY)
    }

    /// A stream's weight.
    ///
    /// ```
    /// use lowtide_proto::scheduler::Scheduler;
    /// let mut s = Scheduler::new();
    /// s.add(0, 3.0);
    /// assert_eq!(s.weight(0), Some(3.0));
    /// assert_eq!(s.weight(1), None);
    /// ```
    pub fn weight(&self, id: u64) -> Option<f64> {
        self.entries.get(&id).map(|e| e.weight)
    }

    /// Advances a stream's virtual time by `amount / weight`.
    ///
    /// ```
    /// use lowtide_proto::scheduler::Scheduler;
    /// let mut s = Scheduler::new();
    /// s.add(0, 4.0);
    /// s.charge(0, 1000.0);
    /// assert_eq!(s.vtime(0), Some(250.0)); // 1000 bytes / weight 4
    /// ```
    pub fn charge(&mut self, id: u64, amount: f64) {
        if let Some(e) = self.entries.get_mut(&id) {
            e.vtime += amount / e.weight;
        }
    }

    /// A stream's virtual time.
    ///
    /// ```
    /// use lowtide_proto::scheduler::Scheduler;
    /// let mut s = Scheduler::new();
    /// s.add(0, 2.0);
    /// assert_eq!(s.vtime(0), Some(0.0));
    /// s.charge(0, 500.0);
    /// assert_eq!(s.vtime(0), Some(250.0));
    /// assert_eq!(s.vtime(9), None);
    /// ```
    pub fn vtime(&self, id: u64) -> Option<f64> {
        self.entries.get(&id).map(|e| e.vtime)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(s: &mut Scheduler, n: usize, chunk: f64) -> BTreeMap<u64, f64> {
        let mut got = BTreeMap::new();
        for _ in 0..n {
            let id = s.pick().unwrap();
            s.charge(id, chunk);
            *got.entry(id).or_insert(0.0) += chunk;
        }
        got
    }

    #[test]
    fn weighted_shares() {
        let mut s = Scheduler::new();
        for (id, w) in [(1, 1.0), (2, 2.0), (3, 3.0)] {
            s.add(id, w);
            s.set_active(id, true);
        }
        let got = run(&mut s, 6000, 100.0);
        assert_eq!(got[&1] * 2.0, got[&2]);
        assert_eq!(got[&1] * 3.0, got[&3]);
    }

    #[test]
    fn lead_is_the_gap_to_the_next_active_stream() {
        let mut s = Scheduler::new();
        s.add(1, 2.0);
        s.set_active(1, true);
        assert_eq!(
            s.lead(1),
            f64::INFINITY,
            "alone: no other stream to yield to"
        );
        s.add(2, 1.0);
        s.set_active(2, true);
        s.charge(2, 300.0);
        assert_eq!(s.lead(1), 300.0);
        assert_eq!(s.lead(2), 0.0);
        s.set_active(2, false);
        assert_eq!(s.lead(1), f64::INFINITY, "idle streams do not count");
    }

    #[test]
    fn fair_start_new_stream_does_not_starve_old_ones() {
        let mut s = Scheduler::new();
        s.add(1, 1.0);
        s.set_active(1, true);
        run(&mut s, 1000, 100.0);
        s.add(2, 1.0);
        assert_eq!(
            s.vtime(2),
            s.vtime(1),
            "starts at the minimum active virtual time"
        );
        s.set_active(2, true);
        let got = run(&mut s, 100, 100.0);
        assert_eq!(got[&1], got[&2]);
    }

    #[test]
    fn fair_start_without_active_streams_uses_max_idle() {
        let mut s = Scheduler::new();
        s.add(1, 1.0);
        s.add(2, 1.0);
        s.set_active(2, true);
        s.charge(2, 500.0);
        s.set_active(2, false);
        s.add(3, 1.0);
        assert_eq!(s.vtime(3), Some(500.0));
    }

    #[test]
    fn use_it_or_lose_it() {
        let mut s = Scheduler::new();
        s.add(1, 1.0);
        s.add(2, 1.0);
        s.set_active(1, true);
        run(&mut s, 1000, 100.0);
        s.set_active(2, true);
        assert_eq!(s.vtime(2), s.vtime(1), "idle time saved no credit");
        let got = run(&mut s, 100, 100.0);
        assert_eq!(got[&1], got[&2]);
    }
}
