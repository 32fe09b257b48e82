//! Capacity-trace replay with mahimahi's semantics (Netravali et al., "Mahimahi: Accurate
//! Record-and-Replay for HTTP", USENIX ATC 2015, §3, and `LinkQueue::rationalize` in
//! mahimahi's `link_queue.cc`):
//!
//! - each line of the trace is one delivery opportunity of [`OPPORTUNITY_BYTES`] at that
//!   millisecond; repeated timestamps are several opportunities at once;
//! - an opportunity serves the packets queued by its time, in order: a packet smaller than
//!   the opportunity leaves and the rest of the opportunity goes to the next packet; a packet
//!   larger than what is left keeps its remainder for the next opportunities, and leaves at
//!   the one that completes it;
//! - an opportunity that finds the queue empty is lost (capacity cannot be saved up);
//! - the trace loops: after its last timestamp `P`, opportunity `t` recurs at `t + P`, `t + 2P`, …
//!
//! Every departure carries the time of the opportunity that completed it, so replay does not
//! depend on when the emulator's thread happens to wake.
//!
//! Where we differ:
//! - mahimahi reads its clock in whole milliseconds, so a packet arriving at 5.3 ms counts as
//!   arriving at 5 and misses the opportunity at 5 only if that one was served before the
//!   packet came in. We keep exact arrival times: an opportunity at 5 ms serves what arrived
//!   by 5.000 ms, and a packet arriving exactly at an opportunity's time misses it (mahimahi
//!   serves opportunities up to `now` before it enqueues, so it behaves the same there).
//! - mahimahi counts 1504 bytes per opportunity including its 4-byte TUN header; we count
//!   1500 bytes of IP packet (see [`OPPORTUNITY_BYTES`]): one full-size packet per
//!   opportunity in both.
//! - mahimahi can stop at the end of a trace (`repeat = false`); we always loop.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Backlog;
use crate::trace::{Trace, OPPORTUNITY_BYTES};

pub struct TraceReplay<P> {
    trace: Arc<Trace>,
    /// Trace time 0.
    start: Instant,
    /// Start of the current loop, ms of trace time (a multiple of the period).
    loop_ms: u64,
    /// Index in the trace of the next opportunity not yet used or lost.
    next: usize,
    /// The packet partly sent and its bytes still to send.
    in_transit: Option<(P, usize)>,
}

impl<P> TraceReplay<P> {
    /// Replays `trace` with its time 0 at `start`.
    pub fn new(trace: Arc<Trace>, start: Instant) -> Self {
        Self {
            trace,
            start,
            loop_ms: 0,
            next: 0,
            in_transit: None,
        }
    }

    /// The trace time (ms) of the next opportunity.
    fn next_ms(&self) -> u64 {
        self.loop_ms + self.trace.times_ms()[self.next]
    }

    /// When the next opportunity comes.
    pub fn next_opportunity(&self) -> Instant {
        self.start + Duration::from_millis(self.next_ms())
    }

    fn advance(&mut self) {
        self.next += 1;
        if self.next == self.trace.opportunities() {
            self.next = 0;
            self.loop_ms += self.trace.period_ms();
        }
    }

    /// Moves to the first opportunity after `now`: everything before is lost (an idle link).
    fn skip_through(&mut self, now: Instant) {
        let elapsed_ms = now.saturating_duration_since(self.start).as_millis() as u64;
        let target = elapsed_ms + 1;
        if self.next_ms() >= target {
            return;
        }
        let period = self.trace.period_ms();
        let times = self.trace.times_ms();
        // The loop that may hold the first opportunity at or after `target`: loop q - 1 ends
        // at q·period, so when `target` is a multiple of the period its last lines qualify.
        let (q, r) = (target / period, target % period);
        let mut k = if r == 0 && q > 0 { q - 1 } else { q };
        let mut index = times.partition_point(|&t| k * period + t < target);
        if index == times.len() {
            k += 1;
            index = times.partition_point(|&t| k * period + t < target);
        }
        self.loop_ms = k * period;
        self.next = index;
    }

    /// See [`super::Schedule::serve_until`].
    pub fn serve_until<B: Backlog<Packet = P>>(
        &mut self,
        now: Instant,
        backlog: &mut B,
        depart: &mut impl FnMut(P, Instant),
    ) {
        while self.next_opportunity() <= now {
            if self.in_transit.is_none() && backlog.is_empty() {
                // Nothing can use the opportunities up to `now`: the driver serves up to a
                // packet's arrival before it enqueues the packet.
                self.skip_through(now);
                return;
            }
            let at = self.next_opportunity();
            self.advance();
            let mut bytes = OPPORTUNITY_BYTES;
            while bytes > 0 {
                if self.in_transit.is_none() {
                    match backlog.pop(at) {
                        Some(p) => {
                            let size = B::size(&p);
                            self.in_transit = Some((p, size));
                        }
                        // The rest of this opportunity is lost.
                        None => break,
                    }
                }
                let Some((_, left)) = self.in_transit.as_mut() else {
                    break;
                };
                if *left > bytes {
                    *left -= bytes;
                    bytes = 0;
                } else {
                    bytes -= *left;
                    if let Some((p, _)) = self.in_transit.take() {
                        depart(p, at);
                    }
                }
            }
        }
    }

    /// See [`super::Schedule::poll_timeout`].
    pub fn poll_timeout<B: Backlog<Packet = P>>(&self, backlog: &B) -> Option<Instant> {
        (self.in_transit.is_some() || !backlog.is_empty()).then(|| self.next_opportunity())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::testing::Fifo;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn trace(times: Vec<u64>) -> Arc<Trace> {
        Arc::new(Trace::from_times(times, "test").unwrap())
    }

    /// Serves until `until_ms` and returns (id, departure ms) of every packet that left.
    fn run(
        link: &mut TraceReplay<crate::link::testing::TestPacket>,
        q: &mut Fifo,
        t0: Instant,
        until_ms: u64,
    ) -> Vec<(u32, u64)> {
        let mut out = vec![];
        link.serve_until(t0 + ms(until_ms), q, &mut |p, t| {
            out.push((p.id, (t - t0).as_millis() as u64))
        });
        out
    }

    #[test]
    fn one_opportunity_per_ms_sends_one_packet_per_ms() {
        let t0 = Instant::now();
        let mut link = TraceReplay::new(trace((1..=1000).collect()), t0);
        let mut q = Fifo::backlogged(1500, 1500, t0);
        let out = run(&mut link, &mut q, t0, 1000);
        assert_eq!(out.len(), 1000);
        assert!(out
            .iter()
            .enumerate()
            .all(|(k, &(id, t))| id as usize == k && t == k as u64 + 1));
        // The second loop starts at 1000 + 1.
        assert_eq!(link.poll_timeout(&q), Some(t0 + ms(1001)));
    }

    #[test]
    fn a_500_ms_gap_holds_packets_until_the_next_opportunity() {
        let t0 = Instant::now();
        // On for 500 ms, off for 500 ms; the line 1000 sets the period (and is one more).
        let mut times: Vec<u64> = (1..=500).collect();
        times.push(1000);
        let mut link = TraceReplay::new(trace(times), t0);
        let mut q = Fifo::backlogged(5000, 1500, t0);
        let out = run(&mut link, &mut q, t0, 3000);
        assert_eq!(out.len(), 3 * 501);
        // Nothing leaves in a gap: only at 1..=500 (mod 1000) and at the period's end.
        assert!(out.iter().all(|&(_, t)| t % 1000 <= 500), "{out:?}");
        // A packet arriving in the gap of an idle link waits for the next "on" millisecond.
        let mut link = TraceReplay::new(trace((1..=500).chain([1000]).collect()), t0);
        let mut q = Fifo::default();
        link.serve_until(t0 + ms(700), &mut q, &mut |_, _| {});
        q.push(7, 1500, t0 + ms(700));
        assert_eq!(link.poll_timeout(&q), Some(t0 + ms(1000)));
        let out = run(&mut link, &mut q, t0, 5000);
        assert_eq!(out, vec![(7, 1000)]);
    }

    #[test]
    fn an_empty_second_carries_nothing() {
        let t0 = Instant::now();
        // Seconds 0 and 2 at 12 Mbit/s, second 1 empty.
        let times: Vec<u64> = (1..=1000).chain(2001..=3000).collect();
        let mut link = TraceReplay::new(trace(times), t0);
        let mut q = Fifo::backlogged(2500, 1500, t0);
        let out = run(&mut link, &mut q, t0, 3000);
        assert_eq!(out.len(), 2000);
        assert!(out.iter().all(|&(_, t)| !(1001..=2000).contains(&t)));
    }

    #[test]
    fn repeated_timestamps_are_a_burst() {
        let t0 = Instant::now();
        let mut link = TraceReplay::new(trace(vec![5, 5, 5, 5, 10]), t0);
        let mut q = Fifo::backlogged(6, 1500, t0);
        let out = run(&mut link, &mut q, t0, 10);
        assert_eq!(out, vec![(0, 5), (1, 5), (2, 5), (3, 5), (4, 10)]);
        // Small packets share an opportunity: 1500 / 100 = 15 per opportunity.
        let mut link = TraceReplay::new(trace(vec![5, 5, 5, 5, 10]), t0);
        let mut q = Fifo::backlogged(100, 100, t0);
        let out = run(&mut link, &mut q, t0, 5);
        assert_eq!(out.len(), 60);
        assert!(out.iter().all(|&(_, t)| t == 5));
    }

    #[test]
    fn a_packet_larger_than_an_opportunity_uses_several() {
        let t0 = Instant::now();
        let mut link = TraceReplay::new(trace((1..=10).collect()), t0);
        let mut q = Fifo::default();
        q.push(1, 4000, t0);
        q.push(2, 1000, t0);
        q.push(3, 1500, t0);
        // 4000 bytes: opportunities 1 and 2 and 1000 bytes of 3; packet 2 takes the 500
        // left in 3 and 500 of 4; packet 3 takes the 1000 left in 4 and 500 of 5.
        assert_eq!(run(&mut link, &mut q, t0, 10), vec![(1, 3), (2, 4), (3, 5)]);
    }

    #[test]
    fn unused_opportunities_are_lost() {
        let t0 = Instant::now();
        let mut link = TraceReplay::new(trace((1..=1000).collect()), t0);
        let mut q = Fifo::default();
        // Idle for an hour: nothing saved up, and the schedule keeps its place.
        link.serve_until(
            t0 + ms(3_600_000) + Duration::from_micros(300),
            &mut q,
            &mut |_, _| {},
        );
        for id in 0..3 {
            q.push(id, 1500, t0 + ms(3_600_000) + Duration::from_micros(300));
        }
        assert_eq!(
            run(&mut link, &mut q, t0, 3_600_010),
            vec![(0, 3_600_001), (1, 3_600_002), (2, 3_600_003)]
        );
        // A packet arriving exactly at an opportunity misses it (as in mahimahi).
        let mut link = TraceReplay::new(trace(vec![10, 20]), t0);
        let mut q = Fifo::default();
        link.serve_until(t0 + ms(10), &mut q, &mut |_, _| {});
        q.push(9, 1500, t0 + ms(10));
        assert_eq!(run(&mut link, &mut q, t0, 100), vec![(9, 20)]);
    }

    #[test]
    fn skipping_lands_on_shared_loop_boundaries() {
        let t0 = Instant::now();
        // Period 1000; the line 1000 and the next loop's 0 fall on the same millisecond.
        let mut link = TraceReplay::new(trace(vec![0, 400, 1000]), t0);
        let mut q = Fifo::default();
        link.serve_until(t0 + ms(999), &mut q, &mut |_, _| {});
        q.push(1, 1500, t0 + ms(999));
        q.push(2, 1500, t0 + ms(999));
        // Both opportunities at 1000 ms (end of loop 0, start of loop 1) serve.
        assert_eq!(run(&mut link, &mut q, t0, 1000), vec![(1, 1000), (2, 1000)]);
    }

    /// A trace of `mbps` over a 1200 ms period: mbps × 100 opportunities, spread evenly.
    fn rate_trace(mbps: f64) -> Arc<Trace> {
        let n = (mbps * 100.0).round() as u64;
        trace((1..=n).map(|k| (k * 1200).div_ceil(n)).collect())
    }

    #[test]
    fn exact_bytes_per_period_from_a_tenth_to_a_hundred_mbit() {
        for mbps in [0.1f64, 0.5, 1.0, 12.0, 50.0, 100.0] {
            let t0 = Instant::now();
            let tr = rate_trace(mbps);
            assert!((tr.mean_rate_bps() - mbps * 1e6).abs() < 1e-3, "{mbps}");
            let n = tr.opportunities();
            // Full-size packets: one per opportunity, exactly mbps × 1.2 s of bytes.
            let mut link = TraceReplay::new(tr.clone(), t0);
            let mut q = Fifo::backlogged(n as u32 + 100, 1500, t0);
            let mut bytes = 0;
            link.serve_until(t0 + ms(1200), &mut q, &mut |p, _| bytes += p.size);
            assert_eq!(bytes, n * 1500, "{mbps} Mbit/s");
            assert_eq!(n as f64, (mbps * 100.0).round());
            // ACK-sized packets: opportunities are split, the remainder carried over.
            let mut link = TraceReplay::new(tr, t0);
            let mut q = Fifo::backlogged((n * 40) as u32, 40, t0);
            let mut count = 0;
            link.serve_until(t0 + ms(1200), &mut q, &mut |_, _| count += 1);
            assert_eq!(count, n * 1500 / 40, "{mbps} Mbit/s, 40-byte packets");
        }
    }
}
