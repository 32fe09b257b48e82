//! The receiver's loss event rate, RFC 5348 §5.
//!
//! - §5.1: a packet is lost when at least `NDUPACK = 3` packets with a higher sequence number
//!   have arrived; its arrival time is interpolated between its neighbours' (§5.2).
//! - §5.2: losses within one RTT of the start of the current loss event belong to it; a later
//!   loss starts a new loss event.
//! - §5.3: a loss interval is the number of packets from the start of one loss event to the
//!   start of the next; `I_0` is the open interval since the most recent one.
//! - §5.4: the average loss interval over the last `n = 8` intervals with weights
//!   `1, 1, 1, 1, 0.8, 0.6, 0.4, 0.2`, `I_mean = max(I_tot0, I_tot1) / W_tot` (the open interval
//!   counts only when it raises the average), and `p = 1 / I_mean`.
//!
//! Where we differ:
//! - History discounting (§5.5, optional) is not implemented: after a long loss-free period
//!   `p` falls only as fast as `I_0` grows.
//! - A packet that arrives after it was declared lost stays lost (the RFC allows undoing the
//!   loss; with `NDUPACK = 3` that needs reordering by more than three packets).
//! - A sequence number more than [`MAX_SEQ_JUMP`] beyond the highest seen is refused (the
//!   caller reports an error and drops the packet): a garbage or hostile packet must not make
//!   us classify billions of "lost" packets.
//! - With [`LossHistory::small_packets`], RFC 4828's rules for short intervals and a young
//!   open interval apply ([`crate::small_packets`]); each loss event keeps its lost packets
//!   and each closed interval its duration for them.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use crate::small_packets;

/// Packets with higher sequence numbers that make a missing packet lost (RFC 5348 §5.1).
pub const NDUPACK: usize = 3;
/// Loss intervals averaged (RFC 5348 §5.4).
pub const N_INTERVALS: usize = 8;
/// Weights `w_1 … w_8` (RFC 5348 §5.4).
pub const WEIGHTS: [f64; N_INTERVALS] = [1.0, 1.0, 1.0, 1.0, 0.8, 0.6, 0.4, 0.2];
/// Largest accepted jump of the sequence number over the highest seen.
pub const MAX_SEQ_JUMP: u64 = 1 << 16;

/// A sequence number too far ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqJump {
    /// The highest sequence number seen before.
    pub highest: u64,
    /// The one received.
    pub seq: u64,
}

/// What one arrival changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Arrival {
    /// The packet was a duplicate or arrived after it was declared lost.
    pub late: bool,
    /// Sequence numbers newly declared lost.
    pub lost: Vec<u64>,
    /// A new loss event started.
    pub new_event: bool,
}

/// A closed loss interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Interval {
    /// Packets from the start of its loss event to the start of the next.
    packets: u64,
    /// Packets lost in the loss event that starts it.
    lost: u64,
    /// From the start of its loss event to the next; `None` for the synthetic first one.
    duration: Option<Duration>,
}

/// The most recent loss event.
#[derive(Debug, Clone, Copy)]
struct LossEvent {
    /// Its first lost sequence number and that packet's (interpolated) arrival time.
    start: u64,
    at: Instant,
    /// Packets lost in it so far.
    lost: u64,
}

/// The loss history of one receiver.
#[derive(Debug, Clone, Default)]
pub struct LossHistory {
    /// Received packets not yet classified, and the last classified one (for interpolation).
    recent: BTreeMap<u64, Instant>,
    /// Lowest sequence number not yet classified as received or lost.
    next: u64,
    highest: Option<u64>,
    /// The most recent loss event.
    event: Option<LossEvent>,
    /// Closed intervals, most recent first (`I_1 … I_8`).
    intervals: VecDeque<Interval>,
    /// RFC 4828's rules (TFRC-SP).
    small_packets: bool,
    /// Loss events seen.
    pub loss_events: u64,
    /// Packets declared lost.
    pub lost_packets: u64,
}

impl LossHistory {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty history with TFRC-SP's interval rules (RFC 4828 §3).
    pub fn small_packets() -> Self {
        Self {
            small_packets: true,
            ..Self::default()
        }
    }

    /// Highest sequence number received.
    pub fn highest(&self) -> Option<u64> {
        self.highest
    }

    /// Every sequence number below this one is classified: received or lost.
    pub fn classified_below(&self) -> u64 {
        self.next
    }

    /// A data packet `seq` arrived at `now`; `rtt` is the sender's RTT estimate (from the
    /// packet); `first_interval` gives the synthetic first interval when the first loss event
    /// is detected (§6.3.1).
    pub fn on_packet(
        &mut self,
        seq: u64,
        now: Instant,
        rtt: Duration,
        first_interval: impl FnOnce() -> u64,
    ) -> Result<Arrival, SeqJump> {
        let mut out = Arrival::default();
        if let Some(h) = self.highest {
            if seq > h.saturating_add(MAX_SEQ_JUMP) {
                return Err(SeqJump { highest: h, seq });
            }
        } else {
            // the first packet defines where the sequence starts
            self.next = seq;
        }
        if seq < self.next || self.recent.contains_key(&seq) {
            out.late = true;
            return Ok(out);
        }
        self.recent.insert(seq, now);
        self.highest = Some(self.highest.map_or(seq, |h| h.max(seq)));
        let mut first_interval = Some(first_interval);
        while Some(self.next) <= self.highest {
            let s = self.next;
            if self.recent.contains_key(&s) {
                self.next += 1;
                continue;
            }
            if self.recent.range(s + 1..).count() < NDUPACK {
                break;
            }
            self.next += 1;
            self.lost_packets += 1;
            out.lost.push(s);
            let t = self.interpolate(s);
            let closed = match self.event {
                None => Some(Interval {
                    packets: first_interval.take().map_or(1, |f| f()).max(1),
                    lost: 1,
                    duration: None,
                }),
                Some(e) if t > e.at + rtt => Some(Interval {
                    packets: s - e.start,
                    lost: e.lost,
                    duration: Some(t.saturating_duration_since(e.at)),
                }),
                Some(_) => None,
            };
            if let Some(closed) = closed {
                self.intervals.push_front(closed);
                self.intervals.truncate(N_INTERVALS);
                self.event = Some(LossEvent {
                    start: s,
                    at: t,
                    lost: 1,
                });
                self.loss_events += 1;
                out.new_event = true;
            } else if let Some(e) = &mut self.event {
                e.lost += 1;
            }
        }
        // keep only the newest classified arrival below `next`, for interpolation
        while let Some((&s, _)) = self.recent.first_key_value() {
            if s + 1 >= self.next || self.recent.range(..self.next).count() <= 1 {
                break;
            }
            self.recent.pop_first();
        }
        Ok(out)
    }

    /// Arrival time of lost packet `s`, interpolated between the received neighbours.
    fn interpolate(&self, s: u64) -> Instant {
        let before = self.recent.range(..s).next_back();
        let after = self.recent.range(s + 1..).next();
        match (before, after) {
            (Some((&sb, &tb)), Some((&sa, &ta))) => {
                let frac = (s - sb) as f64 / (sa - sb) as f64;
                tb + ta.saturating_duration_since(tb).mul_f64(frac)
            }
            (None, Some((_, &ta))) => ta,
            (Some((_, &tb)), None) => tb,
            (None, None) => unreachable!("a loss is declared only after later arrivals"),
        }
    }

    /// The open interval `I_0`: packets since the start of the most recent loss event.
    pub fn open_interval(&self) -> Option<u64> {
        let start = self.event?.start;
        Some(self.highest.unwrap_or(start) + 1 - start)
    }

    /// The closed intervals in packets, most recent first.
    pub fn intervals(&self) -> impl Iterator<Item = u64> + '_ {
        self.intervals.iter().map(|i| i.packets)
    }

    /// Packets lost in the most recent loss event.
    pub fn lost_in_last_event(&self) -> Option<u64> {
        self.event.map(|e| e.lost)
    }

    /// The loss event rate `p` at `now` with the sender's RTT `rtt` (0 before the first loss
    /// event). `now` and `rtt` matter only with TFRC-SP's rules.
    pub fn loss_event_rate(&self, now: Instant, rtt: Duration) -> f64 {
        let (Some(open), Some(event)) = (self.open_interval(), self.event) else {
            return 0.0;
        };
        if !self.small_packets {
            return 1.0 / mean_interval(open, self.intervals());
        }
        let closed = self.intervals.iter().map(|i| match i.duration {
            Some(d) => small_packets::interval_length(i.packets, i.lost, d, rtt),
            None => i.packets as f64,
        });
        let since = now.saturating_duration_since(event.at);
        let open = small_packets::open_counts(since, rtt).then_some(open as f64);
        1.0 / weighted_mean(open, closed)
    }
}

/// `I_mean` of RFC 5348 §5.4 from the open interval `I_0` and the closed ones `I_1 … I_k`,
/// most recent first (at most 8 are used).
pub fn mean_interval(open: u64, closed: impl IntoIterator<Item = u64>) -> f64 {
    weighted_mean(Some(open as f64), closed.into_iter().map(|i| i as f64))
}

/// §5.4's average: `max(I_tot0, I_tot1) / W_tot`, or `I_tot1 / W_tot` when the open interval
/// does not count (`None`, TFRC-SP's young `I_0`); at least one packet, so `p ≤ 1`.
fn weighted_mean(open: Option<f64>, closed: impl IntoIterator<Item = f64>) -> f64 {
    let closed: Vec<f64> = closed.into_iter().take(N_INTERVALS).collect();
    let k = closed.len();
    if k == 0 {
        return open.unwrap_or(1.0).max(1.0);
    }
    let (mut i_tot0, mut i_tot1, mut w_tot) = (open.map_or(0.0, |o| o * WEIGHTS[0]), 0.0, 0.0);
    for (i, w) in WEIGHTS.iter().enumerate().take(k) {
        i_tot1 += closed[i] * w;
        w_tot += w;
        if i + 1 < k {
            i_tot0 += closed[i] * WEIGHTS[i + 1];
        }
    }
    let i_tot = if open.is_some() {
        i_tot0.max(i_tot1)
    } else {
        i_tot1
    };
    (i_tot / w_tot).max(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_interval_uses_the_rfc_weights() {
        // I_1..I_8 = 100: I_tot1 = 100·6 = 600, W_tot = 6.
        assert_eq!(
            mean_interval(50, [100; 8]),
            100.0,
            "I_0 ignored when it lowers the mean"
        );
        // I_0 = 500: I_tot0 = 500 + 100·(1+1+1+0.8+0.6+0.4+0.2) = 1000
        assert!((mean_interval(500, [100; 8]) - 1000.0 / 6.0).abs() < 1e-9);
        // weights matter: an old short interval counts less than a recent one
        let recent_short = mean_interval(0, [10, 100, 100, 100, 100, 100, 100, 100]);
        let old_short = mean_interval(0, [100, 100, 100, 100, 100, 100, 100, 10]);
        assert!(old_short > recent_short);
        // (10·1 + 100·(1+1+1+0.8+0.6+0.4+0.2)) / 6
        assert!((recent_short - 510.0 / 6.0).abs() < 1e-9);
        // fewer than 8 intervals: k = 2, W_tot = w_1 + w_2
        assert_eq!(mean_interval(10, [30, 50]), 40.0);
    }

    fn feed(h: &mut LossHistory, seqs: &[u64], t0: Instant, step: Duration) -> Vec<Arrival> {
        seqs.iter()
            .map(|&s| {
                h.on_packet(s, t0 + step * s as u32, Duration::from_millis(100), || 1000)
                    .unwrap()
            })
            .collect()
    }

    #[test]
    fn a_gap_is_a_loss_after_three_later_packets() {
        let mut h = LossHistory::new();
        let t0 = Instant::now();
        let a = feed(&mut h, &[0, 1, 2, 4, 5], t0, Duration::from_millis(10));
        assert!(a.iter().all(|a| a.lost.is_empty()));
        let a = feed(&mut h, &[6], t0, Duration::from_millis(10));
        assert_eq!(a[0].lost, vec![3]);
        assert!(a[0].new_event);
        assert_eq!(h.loss_events, 1);
        // first interval seeded (1000), I_0 = 6 + 1 − 3 = 4: p = 1/1000
        let rtt = Duration::from_millis(100);
        assert!((h.loss_event_rate(t0, rtt) - 0.001).abs() < 1e-12);
        // a reordered packet, not lost: 8 after 9 with only one later packet
        let a = feed(&mut h, &[7, 9, 8], t0, Duration::from_millis(10));
        assert!(a.iter().all(|a| a.lost.is_empty()));
        // the late arrival of 3 is ignored
        assert!(feed(&mut h, &[3], t0, Duration::from_millis(10))[0].late);
    }

    #[test]
    fn losses_within_one_rtt_are_one_event_and_intervals_count_packets() {
        let mut h = LossHistory::new();
        let t0 = Instant::now();
        let step = Duration::from_millis(10);
        // RTT 100 ms = 10 packets. Lose 20, 22 (same event), 100 (new event).
        let seqs: Vec<u64> = (0..200).filter(|s| ![20, 22, 100].contains(s)).collect();
        feed(&mut h, &seqs, t0, step);
        assert_eq!(h.lost_packets, 3);
        assert_eq!(h.loss_events, 2);
        assert_eq!(h.intervals().collect::<Vec<_>>(), vec![80, 1000]);
        assert_eq!(h.open_interval(), Some(100));
    }

    /// RFC 4828 §3 on the same arrivals: an interval shorter than two RTTs counts every
    /// packet lost in the event that starts it, and a young open interval does not count.
    #[test]
    fn small_packet_rules_count_lost_packets_in_short_intervals() {
        let t0 = Instant::now();
        let step = Duration::from_millis(10);
        let rtt = Duration::from_millis(100);
        // lose 20, 22, 24 (one event at 200 ms, 3 lost), 35 (350 ms: a new event, so the
        // first closed interval is 15 packets in 150 ms), 100 (1 s; 65 packets in 650 ms)
        let lost = [20, 22, 24, 35, 100];
        let seqs: Vec<u64> = (0..200).filter(|s| !lost.contains(s)).collect();
        let (mut std, mut sp) = (LossHistory::new(), LossHistory::small_packets());
        feed(&mut std, &seqs, t0, step);
        feed(&mut sp, &seqs, t0, step);
        assert_eq!(sp.intervals().collect::<Vec<_>>(), vec![65, 15, 1000]);
        assert_eq!(sp.lost_in_last_event(), Some(1));
        let now = t0 + step * 199;
        // RFC 5348: I_tot1 = 65 + 15 + 1000 over W_tot = 3 (I_0 = 100 lowers it)
        assert!((std.loss_event_rate(now, rtt) - 3.0 / 1080.0).abs() < 1e-12);
        // TFRC-SP: the 15-packet interval lasted 150 ms < 2 RTT and began with 3 losses: 5
        assert!((sp.loss_event_rate(now, rtt) - 3.0 / 1070.0).abs() < 1e-12);

        // one loss at 20 after a 10-packet seed; I_0 = 180 raises the mean once it counts
        let mut sp = LossHistory::small_packets();
        for s in (0..200).filter(|&s| s != 20) {
            sp.on_packet(s, t0 + step * s as u32, rtt, || 10).unwrap();
        }
        let now = t0 + step * 199;
        assert!((sp.loss_event_rate(now, rtt) - 1.0 / 180.0).abs() < 1e-12);
        // with a 1 s RTT the event (1.8 s ago) is younger than 2 RTT: I_0 does not count
        let long = Duration::from_secs(1);
        assert!((sp.loss_event_rate(now, long) - 1.0 / 10.0).abs() < 1e-12);
        assert!(
            (weighted_mean(None, [100.0; 8]) - 100.0).abs() < 1e-12
                && (weighted_mean(Some(500.0), [100.0; 8]) - 1000.0 / 6.0).abs() < 1e-12
        );
    }

    #[test]
    fn absurd_sequence_jumps_are_refused_and_memory_stays_bounded() {
        let mut h = LossHistory::new();
        let t0 = Instant::now();
        h.on_packet(5, t0, Duration::from_millis(10), || 1).unwrap();
        assert_eq!(
            h.on_packet(u64::MAX, t0, Duration::from_millis(10), || 1),
            Err(SeqJump {
                highest: 5,
                seq: u64::MAX
            })
        );
        for s in 6..10_000u64 {
            if s % 7 != 0 {
                h.on_packet(s, t0, Duration::from_millis(10), || 1).unwrap();
            }
        }
        assert!(h.recent.len() <= NDUPACK + 2, "{}", h.recent.len());
        assert!(h.intervals.len() <= N_INTERVALS);
    }
}
