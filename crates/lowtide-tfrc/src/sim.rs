//! A deterministic path for tests: two [`Endpoint`]s joined by two links, each a drop-tail
//! queue of `queue_bytes` drained at `rate` bytes per second, then `delay`, with optional
//! seeded random loss. Simulated time, a bounded drive loop (after quinn-proto's `Pair`).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::endpoint::{Endpoint, Event, TfrcConfig};
use crate::reassembly::Received;

/// One direction of the path.
#[derive(Debug, Clone, Copy)]
pub struct LinkParams {
    /// Bottleneck rate, bytes per second.
    pub rate: u64,
    /// One-way propagation delay.
    pub delay: Duration,
    /// Drop-tail queue, bytes.
    pub queue_bytes: u64,
    /// Random loss probability per packet (seeded).
    pub loss: f64,
}

impl Default for LinkParams {
    /// The paper's bottleneck: 500 kbit/s, 100 ms one way, 20 packets of queue.
    fn default() -> Self {
        Self {
            rate: 62_500,
            delay: Duration::from_millis(100),
            queue_bytes: 24_000,
            loss: 0.0,
        }
    }
}

/// A link: drop-tail queue, serialisation, delay. Each packet's service start is computed when
/// it is queued; the queue holds the packets whose service has not started.
#[derive(Debug)]
pub struct SimLink {
    /// Parameters (may be changed between steps; a new rate applies to packets queued later).
    pub params: LinkParams,
    /// (service start, bytes) of packets not yet in service.
    waiting: VecDeque<(Instant, u64)>,
    waiting_bytes: u64,
    busy_until: Option<Instant>,
    in_flight: VecDeque<(Instant, Vec<u8>)>,
    rng: u64,
    /// Packets dropped at the queue.
    pub dropped: u64,
    /// Packets dropped at random.
    pub lost: u64,
    /// Bytes delivered.
    pub delivered_bytes: u64,
}

impl SimLink {
    fn new(params: LinkParams, seed: u64) -> Self {
        Self {
            params,
            waiting: VecDeque::new(),
            waiting_bytes: 0,
            busy_until: None,
            in_flight: VecDeque::new(),
            rng: seed | 1,
            dropped: 0,
            lost: 0,
            delivered_bytes: 0,
        }
    }

    fn random(&mut self) -> f64 {
        // xorshift64*: deterministic, good enough for loss decisions
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        (self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Offers a packet at `now`.
    pub fn send(&mut self, now: Instant, p: Vec<u8>) {
        while self.waiting.front().is_some_and(|w| w.0 <= now) {
            self.waiting_bytes -= self.waiting.pop_front().expect("front").1;
        }
        if self.params.loss > 0.0 && self.random() < self.params.loss {
            self.lost += 1;
            return;
        }
        let len = p.len() as u64;
        if self.waiting_bytes + len > self.params.queue_bytes {
            self.dropped += 1;
            return;
        }
        let start = self.busy_until.map_or(now, |b| b.max(now));
        let done = start + Duration::from_secs_f64(len as f64 / self.params.rate as f64);
        self.busy_until = Some(done);
        if start > now {
            self.waiting.push_back((start, len));
            self.waiting_bytes += len;
        }
        self.in_flight.push_back((done + self.params.delay, p));
    }

    fn next_event(&self) -> Option<Instant> {
        self.in_flight.front().map(|a| a.0)
    }

    fn take_arrived(&mut self, now: Instant) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while self.in_flight.front().is_some_and(|a| a.0 <= now) {
            let p = self.in_flight.pop_front().expect("front").1;
            self.delivered_bytes += p.len() as u64;
            out.push(p);
        }
        out
    }
}

/// One endpoint and what it observed.
#[derive(Debug)]
pub struct SimEnd {
    /// The endpoint.
    pub ep: Endpoint,
    /// Messages received, with the time they were read.
    pub received: Vec<Received>,
    /// Events, with the simulated time they were read.
    pub events: Vec<(Instant, Event)>,
    /// Datagram errors, in order.
    pub errors: Vec<crate::TfrcError>,
}

/// Two endpoints and the path.
#[derive(Debug)]
pub struct SimPair {
    /// The clock.
    pub now: Instant,
    /// The end that usually sends media.
    pub a: SimEnd,
    /// The other end.
    pub b: SimEnd,
    /// a → b.
    pub ab: SimLink,
    /// b → a.
    pub ba: SimLink,
}

impl SimPair {
    /// Two ends on a path with the same parameters both ways.
    pub fn new(a: TfrcConfig, b: TfrcConfig, link: LinkParams) -> Self {
        let now = Instant::now();
        let end = |cfg| SimEnd {
            ep: Endpoint::new(cfg, now).expect("valid config"),
            received: Vec::new(),
            events: Vec::new(),
            errors: Vec::new(),
        };
        Self {
            now,
            a: end(a),
            b: end(b),
            ab: SimLink::new(link, 0x5eed_0001),
            ba: SimLink::new(link, 0x5eed_0002),
        }
    }

    fn run(now: Instant, end: &mut SimEnd, out: &mut SimLink, input: &mut SimLink) {
        for d in input.take_arrived(now) {
            if let Err(e) = end.ep.handle_datagram(now, &d) {
                end.errors.push(e);
            }
        }
        if end.ep.poll_timeout().is_some_and(|t| t <= now) {
            end.ep.handle_timeout(now);
        }
        while let Some(d) = end.ep.poll_transmit(now) {
            out.send(now, d);
        }
        while let Some(e) = end.ep.poll_event() {
            end.events.push((now, e));
        }
        while let Some(m) = end.ep.poll_message() {
            end.received.push(m);
        }
    }

    /// Runs both ends at the current time, then advances the clock to the next event. Returns
    /// `false` when nothing is left to do.
    pub fn step(&mut self) -> bool {
        self.step_within(None)
    }

    /// [`step`](Self::step), but the clock stops at `horizon` if the next event is later (so
    /// the test can act at that time, as an application would).
    fn step_within(&mut self, horizon: Option<Instant>) -> bool {
        let now = self.now;
        Self::run(now, &mut self.a, &mut self.ab, &mut self.ba);
        Self::run(now, &mut self.b, &mut self.ba, &mut self.ab);
        let next = [
            self.ab.next_event(),
            self.ba.next_event(),
            self.a.ep.poll_timeout(),
            self.b.ep.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min();
        match next {
            Some(t) => {
                let t = horizon.map_or(t, |h| t.min(h));
                self.now = t.max(now + Duration::from_micros(1));
                true
            }
            None => false,
        }
    }

    /// Steps until the clock passes `until`; panics after `max_steps` (a livelock).
    pub fn drive_until(&mut self, until: Instant, max_steps: usize) {
        for _ in 0..max_steps {
            if self.now >= until {
                return;
            }
            if !self.step_within(Some(until)) {
                self.now = until;
                return;
            }
        }
        panic!("clock did not reach the target after {max_steps} steps");
    }
}
