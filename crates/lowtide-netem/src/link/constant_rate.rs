//! A link of fixed rate: each packet takes `size × 8 / rate` to serialise, starting when the
//! packet before it has left or when it arrives, whichever is later (ns-2's `LinkDelay`,
//! rattan's `BwCell`, mahimahi's fixed-rate links). Sizes are IP bytes: a 1500-byte packet at
//! 12 Mbit/s takes exactly 1 ms.
//!
//! Outages ([`super::outage`]): no packet starts inside a `down` window, and a packet that
//! starts inside a `rate` window is serialised at that window's fraction of the rate.
//!
//! Where we differ: nothing in the rule. Departure times are computed in whole nanoseconds
//! (rounded down per packet: under 1 ns per packet, 0.001% at 100 Mbit/s).

use std::time::{Duration, Instant};

use super::outage::Outages;
use super::Backlog;

pub struct ConstantRate<P> {
    bps: u64,
    /// The packet being serialised and when its last bit leaves.
    in_transit: Option<(P, Instant)>,
    /// When the link finished its last packet.
    free_at: Option<Instant>,
    outages: Outages,
}

impl<P> ConstantRate<P> {
    /// A link of `bps` bit/s of IP packets; `bps` must be above 0 (the topology checks it).
    pub fn new(bps: u64) -> Self {
        Self {
            bps: bps.max(1),
            in_transit: None,
            free_at: None,
            outages: Outages::default(),
        }
    }

    /// The same link with outages (`down` and `rate` windows change its service).
    pub fn with_outages(mut self, outages: Outages) -> Self {
        self.outages = outages;
        self
    }

    /// When a packet waiting since `ready` may start: after the link is free and up.
    fn start_time(&self, ready: Instant) -> Instant {
        let ready = self.free_at.map_or(ready, |f| f.max(ready));
        self.outages.serving_from(ready)
    }

    /// How long `bytes` take on this link.
    pub fn transmission_time(&self, bytes: usize) -> Duration {
        let ns = bytes as u128 * 8 * 1_000_000_000 / self.bps as u128;
        Duration::from_nanos(ns.min(u64::MAX as u128) as u64)
    }

    /// See [`super::Schedule::serve_until`].
    pub fn serve_until<B: Backlog<Packet = P>>(
        &mut self,
        now: Instant,
        backlog: &mut B,
        depart: &mut impl FnMut(P, Instant),
    ) {
        loop {
            if let Some((_, done)) = &self.in_transit {
                let done = *done;
                if done > now {
                    return;
                }
                if let Some((packet, _)) = self.in_transit.take() {
                    depart(packet, done);
                }
                self.free_at = Some(done);
            }
            let Some(arrival) = backlog.head_arrival() else {
                return;
            };
            let start = self.start_time(arrival);
            if start > now {
                return;
            }
            if let Some(packet) = backlog.pop(start) {
                // The head may have been dropped at dequeue (CoDel): never start a packet
                // before it arrived.
                let start = self.start_time(start.max(B::arrival(&packet)));
                let time = self.transmission_time(B::size(&packet));
                let done = start + time.div_f64(self.outages.rate_factor(start));
                self.in_transit = Some((packet, done));
            }
        }
    }

    /// See [`super::Schedule::poll_timeout`].
    pub fn poll_timeout<B: Backlog<Packet = P>>(&self, backlog: &B) -> Option<Instant> {
        if let Some((_, done)) = &self.in_transit {
            return Some(*done);
        }
        let arrival = backlog.head_arrival()?;
        Some(self.start_time(arrival))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::testing::Fifo;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn backlogged_packets_leave_one_transmission_time_apart() {
        let t0 = Instant::now();
        let mut link = ConstantRate::new(12_000_000);
        let mut q = Fifo::backlogged(1000, 1500, t0);
        let mut out = vec![];
        link.serve_until(t0 + ms(1000), &mut q, &mut |p, t| out.push((p.id, t)));
        assert_eq!(out.len(), 1000);
        for (k, (id, t)) in out.iter().enumerate() {
            assert_eq!(*id as usize, k);
            assert_eq!(*t, t0 + ms(k as u64 + 1));
        }
        assert_eq!(link.poll_timeout(&q), None);
    }

    #[test]
    fn an_idle_link_starts_at_the_arrival() {
        let t0 = Instant::now();
        let mut link = ConstantRate::new(1_000_000);
        let mut q = Fifo::default();
        q.push(1, 125, t0 + ms(10));
        // 125 bytes at 1 Mbit/s: 1 ms.
        assert_eq!(link.poll_timeout(&q), Some(t0 + ms(10)));
        let mut out = vec![];
        link.serve_until(t0 + ms(10), &mut q, &mut |p, t| out.push((p.id, t)));
        assert!(out.is_empty());
        assert_eq!(link.poll_timeout(&q), Some(t0 + ms(11)));
        link.serve_until(t0 + ms(50), &mut q, &mut |p, t| out.push((p.id, t)));
        assert_eq!(out, vec![(1, t0 + ms(11))]);
        // The next packet, arriving long after, is not held back by the old departure.
        q.push(2, 250, t0 + ms(60));
        link.serve_until(t0 + ms(70), &mut q, &mut |p, t| out.push((p.id, t)));
        assert_eq!(out[1], (2, t0 + ms(62)));
    }

    #[test]
    fn a_down_window_holds_the_queue_and_a_rate_window_slows_it() {
        use crate::link::outage::{OutageConfig, OutageKind};
        let t0 = Instant::now();
        let window = |kind, at_s, for_s, factor| OutageConfig {
            kind,
            at_s,
            for_s,
            factor,
        };
        let outages = Outages::new(
            &[
                window(OutageKind::Down, 0.010, 0.020, None),
                window(OutageKind::Rate, 0.100, 0.100, Some(0.5)),
            ],
            t0,
        );
        // 12 Mbit/s: 1 ms per 1500-byte packet outside the windows.
        let mut link = ConstantRate::new(12_000_000).with_outages(outages);
        let mut q = Fifo::backlogged(12, 1500, t0);
        q.push(100, 1500, t0 + ms(100));
        let mut out = vec![];
        link.serve_until(t0 + ms(200), &mut q, &mut |p, t| out.push((p.id, t)));
        // Ten leave by 10 ms; none starts from 10 to 30 ms; the last two at 31 and 32 ms.
        assert_eq!(out[9], (9, t0 + ms(10)));
        assert_eq!(out[10], (10, t0 + ms(31)));
        assert_eq!(out[11], (11, t0 + ms(32)));
        assert_eq!(out[12], (100, t0 + ms(102)), "half the rate: 2 ms");
        // Asking while down: the next departure is after the window.
        let mut link = ConstantRate::new(12_000_000).with_outages(Outages::new(
            &[window(OutageKind::Down, 0.0, 0.050, None)],
            t0,
        ));
        let q = Fifo::backlogged(1, 1500, t0 + ms(5));
        assert_eq!(link.poll_timeout(&q), Some(t0 + ms(50)));
        let mut q = q;
        link.serve_until(t0 + ms(50), &mut q, &mut |_, _| panic!("left while down"));
    }

    #[test]
    fn exact_bytes_at_rates_from_a_tenth_to_a_hundred_mbit() {
        for mbps in [0.1f64, 1.0, 12.0, 100.0] {
            let bps = (mbps * 1e6) as u64;
            let t0 = Instant::now();
            let mut link = ConstantRate::new(bps);
            // 1.2 s of 1500-byte packets at this rate: exactly mbps × 100 packets.
            let n = (mbps * 100.0).round() as u32;
            let mut q = Fifo::backlogged(n + 10, 1500, t0);
            let mut bytes = 0;
            link.serve_until(t0 + ms(1200), &mut q, &mut |p, _| bytes += p.size);
            assert_eq!(bytes, n as usize * 1500, "{mbps} Mbit/s");
        }
    }
}
