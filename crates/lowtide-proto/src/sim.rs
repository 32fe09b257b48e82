//! A deterministic test harness: two [`Connection`]s joined by two simulated kernel send
//! queues and links, driven in simulated time (after quinn-proto's `tests/util.rs` `Pair`).
//!
//! The kernel model per direction: a send buffer of `sndbuf` bytes holding unsent and
//! unacknowledged bytes; segments of at most `mss` bytes leave while in-flight bytes stay within
//! `cwnd·mss`, serialised at `rate` bytes per second, arrive after `delay`, and are acknowledged
//! another `delay` later. No loss, fixed cwnd: enough to exercise the latency controllers,
//! priorities, cancellation and fairness without real sockets or clocks.
//!
//! Failover: [`SimPipe::blackholed`] loses everything a direction carries from then on (and
//! never acknowledges it); [`SimPipe::hold_until`] models TCP repairing a lost segment
//! (later segments are acknowledged, SACKed, but the receiver gets nothing in order until
//! then); the client's stall verdicts see the pipe's ACK clock ([`Pair::ack_clock`]); [`Pair::switch_paths`] moves the client to a fresh pair of pipes (a
//! backup connection) while the server keeps using the old ones until the new connection's
//! first bytes arrive, as a real accepting side does; with [`Pair::auto_failover`] the pair
//! switches whenever the client's stall detector asks.
//!
//! ```
//! use lowtide_proto::sim::{LinkParams, Pair};
//! use lowtide_proto::{Config, ControllerConfig, Message, StreamConfig};
//! let minbuf = Config { controller: ControllerConfig::MinBuf { a: 1, b: 3 }, ..Config::default() };
//! let mut pair = Pair::new(minbuf, Config::default(), LinkParams::default());
//! let s = pair.client.conn.open_stream(StreamConfig::default())?;
//! for _ in 0..50 {
//!     pair.client.conn.send(pair.now, s, Message::new(vec![7u8; 10_000]))?;
//! }
//! let steps = pair.drive_bounded(1_000_000);
//! assert!(steps > 0);
//! assert_eq!(pair.server.received.len(), 50);
//! // MIN_BUF(1, 3) kept the kernel queue within (cwnd + 3) segments: 23 × 1000 bytes.
//! assert!(pair.c2s.max_outq <= 23_000);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::failover::AckClock;
use crate::{Config, Connection, Event, Received, Side, TcpState};

/// Parameters of one direction.
///
/// ```
/// use lowtide_proto::sim::{LinkParams, Pair};
/// use lowtide_proto::Config;
/// use std::time::Duration;
/// // A slow, long path: 1 Mbit/s, 100 ms one way, a 64 KB send buffer.
/// let link = LinkParams {
///     rate: 125_000,
///     delay: Duration::from_millis(100),
///     sndbuf: 64 << 10,
///     ..LinkParams::default()
/// };
/// let pair = Pair::new(Config::default(), Config::default(), link);
/// assert_eq!(pair.c2s.tcp_state().rtt, Duration::from_millis(200));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct LinkParams {
    /// Link rate, bytes per second.
    pub rate: u64,
    /// One-way delay.
    pub delay: Duration,
    /// Congestion window, segments.
    pub cwnd: u32,
    /// Segment size, bytes.
    pub mss: u32,
    /// Kernel send buffer, bytes.
    pub sndbuf: u64,
}

impl Default for LinkParams {
    /// 10 MB/s, 10 ms one way, cwnd 20, MSS 1000, 1 MB send buffer.
    fn default() -> Self {
        Self {
            rate: 10_000_000,
            delay: Duration::from_millis(10),
            cwnd: 20,
            mss: 1000,
            sndbuf: 1 << 20,
        }
    }
}

/// One direction: the sender's kernel queue and the link.
///
/// ```
/// use lowtide_proto::sim::{LinkParams, Pair};
/// use lowtide_proto::{Config, Message, StreamConfig};
/// let mut pair = Pair::new(Config::default(), Config::default(), LinkParams::default());
/// let s = pair.client.conn.open_stream(StreamConfig::default())?;
/// pair.client.conn.send(pair.now, s, Message::new(vec![0u8; 100_000]))?;
/// pair.step(); // the first write
/// let tcp = pair.c2s.tcp_state(); // what TCP_INFO and SIOCOUTQ would say
/// assert_eq!(u64::from(tcp.outq), pair.c2s.outq());
/// assert!(tcp.outq > 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct SimPipe {
    /// Parameters.
    pub params: LinkParams,
    unsent: VecDeque<u8>,
    in_flight: u64,
    link_free: Option<Instant>,
    arrivals: VecDeque<(Instant, Vec<u8>)>,
    acks: VecDeque<(Instant, u64)>,
    /// Largest send-queue fill seen right after a write, bytes.
    pub max_outq: u64,
    /// Everything sent from now on is lost and never acknowledged (a failed path).
    pub blackholed: bool,
    /// Until then the receiver gets nothing while ACKs keep coming: TCP's recovery of a lost
    /// segment (head-of-line blocking behind its retransmission).
    pub hold_until: Option<Instant>,
    /// When the sender last received an ACK.
    last_ack: Option<Instant>,
}

impl SimPipe {
    fn new(params: LinkParams) -> Self {
        Self {
            params,
            unsent: VecDeque::new(),
            in_flight: 0,
            link_free: None,
            arrivals: VecDeque::new(),
            acks: VecDeque::new(),
            max_outq: 0,
            blackholed: false,
            hold_until: None,
            last_ack: None,
        }
    }

    /// Bytes in the send queue (SIOCOUTQ).
    ///
    /// ```
    /// use lowtide_proto::sim::{LinkParams, Pair};
    /// use lowtide_proto::{Config, Message, StreamConfig};
    /// let mut pair = Pair::new(Config::default(), Config::default(), LinkParams::default());
    /// assert_eq!(pair.c2s.outq(), 0);
    /// let s = pair.client.conn.open_stream(StreamConfig::default())?;
    /// pair.client.conn.send(pair.now, s, Message::new(vec![0u8; 100_000]))?;
    /// pair.step(); // the client writes what its controller allows
    /// assert!(pair.c2s.outq() > 0);
    /// pair.drive_bounded(100_000);
    /// assert_eq!(pair.c2s.outq(), 0); // all delivered and acknowledged
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn outq(&self) -> u64 {
        self.unsent.len() as u64 + self.in_flight
    }

    /// The snapshot a driver would read.
    ///
    /// ```
    /// use lowtide_proto::sim::{LinkParams, Pair};
    /// use lowtide_proto::Config;
    /// let link = LinkParams { cwnd: 20, mss: 1000, ..LinkParams::default() };
    /// let pair = Pair::new(Config::default(), Config::default(), link);
    /// let tcp = pair.c2s.tcp_state();
    /// assert_eq!((tcp.cwnd, tcp.mss, tcp.unacked), (20, 1000, 0));
    /// ```
    pub fn tcp_state(&self) -> TcpState {
        let mss = self.params.mss;
        TcpState {
            cwnd: self.params.cwnd,
            mss,
            sacked: 0,
            unacked: self.in_flight.div_ceil(u64::from(mss)) as u32,
            rtt: self.params.delay * 2,
            min_rtt: self.params.delay * 2,
            notsent: self.unsent.len() as u32,
            outq: self.outq() as u32,
            delivery_rate: self.params.rate,
            // a fixed window has no slow start to leave
            ssthresh: 0,
            ca_state: 0, // no loss recovery is modelled
        }
    }

    /// What `TCP_INFO` would say about the sender's ACKs at `now` (`None`: none received
    /// yet). There is no retransmission timer in the model.
    ///
    /// ```
    /// use lowtide_proto::sim::{LinkParams, Pair};
    /// use lowtide_proto::{Config, Message, StreamConfig};
    /// let mut pair = Pair::new(Config::default(), Config::default(), LinkParams::default());
    /// assert_eq!(pair.c2s.ack_clock(pair.now), None);
    /// let s = pair.client.conn.open_stream(StreamConfig::default())?;
    /// pair.client.conn.send(pair.now, s, Message::new("hello"))?;
    /// pair.drive_bounded(10_000);
    /// let k = pair.c2s.ack_clock(pair.now).expect("acknowledged");
    /// assert!(!k.timeout_recovery);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn ack_clock(&self, now: Instant) -> Option<AckClock> {
        self.last_ack.map(|a| AckClock {
            since_last_ack: now.saturating_duration_since(a),
            timeout_recovery: false,
        })
    }

    fn space(&self) -> u64 {
        self.params.sndbuf.saturating_sub(self.outq())
    }

    fn advance(&mut self, now: Instant) {
        if self.blackholed {
            self.arrivals.clear();
            self.acks.clear();
        }
        while let Some(&(t, n)) = self.acks.front() {
            if t > now {
                break;
            }
            self.acks.pop_front();
            self.in_flight -= n;
            self.last_ack = Some(t);
        }
        let window = u64::from(self.params.cwnd) * u64::from(self.params.mss);
        loop {
            let free = self.link_free.unwrap_or(now).max(now);
            if self.unsent.is_empty() || free > now || self.in_flight >= window {
                break;
            }
            let n = (self.unsent.len() as u64)
                .min(u64::from(self.params.mss))
                .min(window - self.in_flight);
            let seg: Vec<u8> = self.unsent.drain(..n as usize).collect();
            let done = free + Duration::from_nanos(n * 1_000_000_000 / self.params.rate);
            self.link_free = Some(done);
            self.in_flight += n;
            if !self.blackholed {
                self.arrivals.push_back((done + self.params.delay, seg));
                self.acks.push_back((done + self.params.delay * 2, n));
            }
        }
    }

    fn has_arrived(&self, now: Instant) -> bool {
        self.arrivals.front().is_some_and(|a| a.0 <= now) && !self.held(now)
    }

    fn held(&self, now: Instant) -> bool {
        self.hold_until.is_some_and(|t| t > now)
    }

    fn next_event(&self, now: Instant) -> Option<Instant> {
        let window = u64::from(self.params.cwnd) * u64::from(self.params.mss);
        let send = (!self.unsent.is_empty() && self.in_flight < window)
            .then(|| self.link_free.unwrap_or(now).max(now));
        [
            self.acks.front().map(|a| a.0),
            self.arrivals
                .front()
                .map(|a| self.hold_until.map_or(a.0, |h| a.0.max(h))),
            send,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn take_arrived(&mut self, now: Instant) -> Vec<u8> {
        let mut out = Vec::new();
        if self.held(now) {
            return out;
        }
        while let Some((t, _)) = self.arrivals.front() {
            if *t > now {
                break;
            }
            out.extend(self.arrivals.pop_front().expect("front exists").1);
        }
        out
    }
}

/// One endpoint: its connection and what it observed.
///
/// ```
/// use lowtide_proto::sim::{LinkParams, Pair};
/// use lowtide_proto::{Config, Message, StreamConfig};
/// let mut pair = Pair::new(Config::default(), Config::default(), LinkParams::default());
/// pair.server.app_paused = true; // the application stops reading
/// let s = pair.client.conn.open_stream(StreamConfig::default())?;
/// pair.client.conn.send(pair.now, s, Message::new("queued at the receiver"))?;
/// pair.drive_bounded(10_000);
/// assert!(pair.server.received.is_empty());
/// assert!(pair.server.conn.recv_memory() > 0); // held for it, within max_reassembly_bytes
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Endpoint {
    /// The connection.
    pub conn: Connection,
    /// Messages received, in delivery order.
    pub received: Vec<Received>,
    /// Events, in order.
    pub events: Vec<Event>,
    /// Stop reading messages from the connection (to test receive memory bounds).
    pub app_paused: bool,
}

/// Two endpoints and two pipes in simulated time.
///
/// ```
/// use lowtide_proto::sim::{LinkParams, Pair};
/// use lowtide_proto::{Config, Message, StreamConfig};
/// use std::time::Duration;
/// let mut pair = Pair::new(Config::default(), Config::default(), LinkParams::default());
/// let start = pair.now;
/// let s = pair.client.conn.open_stream(StreamConfig::default())?;
/// pair.client.conn.send(pair.now, s, Message::new("ping"))?;
/// pair.drive_until(start + Duration::from_millis(15), 10_000);
/// // 10 ms one way: the message arrived, simulated time ran, no wall-clock time passed.
/// assert_eq!(&pair.server.received[0].data[..], b"ping");
/// assert!(pair.now >= start + Duration::from_millis(15));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Pair {
    /// The clock.
    pub now: Instant,
    /// The connecting end.
    pub client: Endpoint,
    /// The accepting end.
    pub server: Endpoint,
    /// Client to server.
    pub c2s: SimPipe,
    /// Server to client.
    pub s2c: SimPipe,
    /// The pipes before the last switch, and the path the server switches to once the new
    /// connection's first bytes arrive (`None`: it has).
    old: Option<(SimPipe, SimPipe, Option<u64>)>,
    /// Switch whenever the client's stall detector asks.
    pub auto_failover: bool,
    /// The client's stall verdicts see the kernel's ACK clock (as the driver samples it from
    /// `TCP_INFO`); `false`: the P-ACK rule alone. On by default.
    pub ack_clock: bool,
    paths: u64,
    /// The duplicate lane, client to server ([`Pair::add_lane`]).
    pub lane: Option<SimPipe>,
}

impl Pair {
    /// Both ends with the given configurations, the same link both ways.
    ///
    /// ```
    /// use lowtide_proto::sim::{LinkParams, Pair};
    /// use lowtide_proto::{Config, ControllerConfig};
    /// let server = Config { controller: ControllerConfig::Unlimited, ..Config::default() };
    /// let mut pair = Pair::new(Config::default(), server, LinkParams::default());
    /// pair.drive_bounded(1000); // the hellos cross
    /// assert!(pair.client.conn.is_established() && pair.server.conn.is_established());
    /// assert_eq!(pair.server.conn.controller_name(), "unlimited");
    /// ```
    pub fn new(client: Config, server: Config, link: LinkParams) -> Self {
        let now = Instant::now();
        let mk = |cfg, side| Endpoint {
            conn: Connection::new(cfg, side, now).expect("valid config"),
            received: Vec::new(),
            events: Vec::new(),
            app_paused: false,
        };
        Self {
            now,
            client: mk(client, Side::Client),
            server: mk(server, Side::Server),
            c2s: SimPipe::new(link),
            s2c: SimPipe::new(link),
            old: None,
            auto_failover: false,
            ack_clock: true,
            paths: 0,
            lane: None,
        }
    }

    /// Opens a duplicate lane from client to server: the link's parameters with its own
    /// one-way `delay` (the client's config needs `duplicate`). The lane survives switches.
    pub fn add_lane(&mut self, delay: Duration) {
        self.lane = Some(SimPipe::new(LinkParams {
            delay,
            ..self.c2s.params
        }));
    }

    /// The lane's step: the client stages and writes copies, the server reads them.
    fn run_lane(&mut self, now: Instant) -> bool {
        let Some(lane) = &mut self.lane else {
            return false;
        };
        lane.advance(now);
        let mut progress = false;
        let data = lane.take_arrived(now);
        if !data.is_empty() {
            progress = true;
            let _ = self.server.conn.handle_lane_bytes(now, &data);
        }
        self.client.conn.poll_lane(now, &lane.tcp_state());
        let out = self.client.conn.lane_transmit();
        let n = out.len().min(lane.space() as usize);
        if n > 0 {
            lane.unsent.extend(&out[..n]);
            self.client.conn.handle_lane_written(n);
            lane.max_outq = lane.max_outq.max(lane.outq());
            progress = true;
        }
        lane.advance(now);
        progress
    }

    /// The client moves to a new connection (fresh pipes with the same parameters); the server
    /// follows when the new connection's first bytes reach it.
    /// Does nothing before both hellos arrived (a real accepting side learns the channel's
    /// token from the primary's hello and refuses backups before).
    ///
    /// ```
    /// use lowtide_proto::failover::FailoverConfig;
    /// use lowtide_proto::sim::{LinkParams, Pair};
    /// use lowtide_proto::{Config, Event, Message, StreamConfig};
    /// let cfg = Config { failover: Some(FailoverConfig::default()), ..Config::default() };
    /// let mut pair = Pair::new(cfg.clone(), cfg, LinkParams::default());
    /// assert!(!pair.switch_paths()); // before the handshakes
    /// let s = pair.client.conn.open_stream(StreamConfig::default())?;
    /// pair.client.conn.send(pair.now, s, Message::new("before"))?;
    /// pair.drive_bounded(10_000);
    /// assert!(pair.switch_paths());
    /// pair.client.conn.send(pair.now, s, Message::new("after"))?;
    /// pair.drive_bounded(10_000);
    /// assert_eq!(pair.server.received.len(), 2);
    /// assert!(pair.server.events.iter().any(|e| matches!(e, Event::Failover(r) if r.path == 1)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn switch_paths(&mut self) -> bool {
        if !self.client.conn.is_established() || !self.server.conn.is_established() {
            return false;
        }
        self.paths += 1;
        let p = self.paths;
        self.client.conn.begin_path(self.now, p);
        let link = self.c2s.params;
        let c2s = std::mem::replace(&mut self.c2s, SimPipe::new(link));
        let s2c = std::mem::replace(&mut self.s2c, SimPipe::new(link));
        match &mut self.old {
            // The server is still on an older connection: it follows to the newest one
            // directly; the connection just abandoned is dropped unseen (as if its bytes never
            // arrived).
            Some((_, _, pending @ Some(_))) => *pending = Some(p),
            _ => self.old = Some((c2s, s2c, Some(p))),
        }
        true
    }

    fn run_endpoint(
        now: Instant,
        ep: &mut Endpoint,
        out: &mut SimPipe,
        input: &mut SimPipe,
        ack_clock: bool,
    ) -> bool {
        let mut progress = false;
        let data = input.take_arrived(now);
        if !data.is_empty() {
            progress = true;
            // As the driver reads: appended to the incomplete frame in the read buffer. Errors
            // are recorded in the connection (`error()`) and as a Closed event.
            let (mut buf, _) = ep.conn.take_read_buf();
            buf.extend_from_slice(&data);
            let _ = ep.conn.handle_read_buf(now, buf, data.len());
        }
        if ack_clock && ep.conn.wants_ack_clock(now) {
            if let Some(k) = out.ack_clock(now) {
                ep.conn.handle_ack_clock(now, k);
            }
        }
        if ep.conn.poll_timeout().is_some_and(|t| t <= now) {
            ep.conn.handle_timeout(now);
        }
        let tcp = out.tcp_state();
        ep.conn.poll_transmit(now, &tcp);
        let space = out.space() as usize;
        let mut n = 0;
        for seg in ep.conn.transmit_segments() {
            let take = seg.len().min(space - n);
            out.unsent.extend(&seg[..take]);
            n += take;
            if n == space {
                break;
            }
        }
        if n > 0 {
            progress = true;
            ep.conn.handle_written(now, n);
            out.max_outq = out.max_outq.max(out.outq());
        }
        while let Some(e) = ep.conn.poll_event() {
            ep.events.push(e);
        }
        if !ep.app_paused {
            while let Some(m) = ep.conn.poll_message() {
                ep.received.push(m);
            }
        }
        progress
    }

    /// One step at the current time, then advance the clock to the next event. Returns `false`
    /// when nothing is left to do.
    ///
    /// ```
    /// use lowtide_proto::sim::{LinkParams, Pair};
    /// use lowtide_proto::Config;
    /// let mut pair = Pair::new(Config::default(), Config::default(), LinkParams::default());
    /// let t0 = pair.now;
    /// assert!(pair.step()); // the hellos are written, the clock moves to their arrival
    /// let mut steps = 1;
    /// while pair.step() {
    ///     steps += 1;
    /// }
    /// assert!(steps < 100 && pair.now > t0);
    /// assert!(!pair.step()); // idle: nothing left to do
    /// ```
    pub fn step(&mut self) -> bool {
        let now = self.now;
        self.c2s.advance(now);
        self.s2c.advance(now);
        let ack_clock = self.ack_clock;
        let mut a = Self::run_endpoint(
            now,
            &mut self.client,
            &mut self.c2s,
            &mut self.s2c,
            ack_clock,
        );
        a |= self.run_lane(now);
        let mut b = match &mut self.old {
            Some((old_c2s, old_s2c, pending @ Some(_))) => {
                old_c2s.advance(now);
                old_s2c.advance(now);
                if self.c2s.has_arrived(now) {
                    let path = pending.take().expect("matched Some");
                    self.server.conn.begin_path(now, path);
                    Self::run_endpoint(now, &mut self.server, &mut self.s2c, &mut self.c2s, false)
                } else {
                    Self::run_endpoint(now, &mut self.server, old_s2c, old_c2s, false)
                }
            }
            _ => Self::run_endpoint(now, &mut self.server, &mut self.s2c, &mut self.c2s, false),
        };
        if let Some((old_c2s, old_s2c, pending)) = &mut self.old {
            old_c2s.advance(now);
            old_s2c.advance(now);
            if pending.is_none() {
                // the server left the old connection: what still arrives there is not read
                a |= !old_c2s.take_arrived(now).is_empty();
            }
            let late = old_s2c.take_arrived(now);
            if !late.is_empty() {
                self.client.conn.handle_old_path_bytes(&late);
                b = true;
            }
        }
        self.c2s.advance(now);
        self.s2c.advance(now);
        if self.auto_failover && self.client.conn.failover_wanted() && self.switch_paths() {
            return true;
        }
        if a || b {
            return true;
        }
        let old = self.old.as_ref();
        let next = [
            self.c2s.next_event(now),
            self.s2c.next_event(now),
            old.and_then(|o| o.0.next_event(now)),
            old.and_then(|o| o.1.next_event(now)),
            self.client.conn.poll_timeout(),
            self.server.conn.poll_timeout(),
            self.lane.as_ref().and_then(|l| l.next_event(now)),
        ]
        .into_iter()
        .flatten()
        .min();
        match next {
            Some(t) => {
                self.now = t.max(now + Duration::from_nanos(1));
                true
            }
            None => false,
        }
    }

    /// Steps until idle; panics after `max_steps` (a livelock).
    ///
    /// ```
    /// use lowtide_proto::sim::{LinkParams, Pair};
    /// use lowtide_proto::{Config, Message, StreamConfig};
    /// let mut pair = Pair::new(Config::default(), Config::default(), LinkParams::default());
    /// let s = pair.client.conn.open_stream(StreamConfig::default())?;
    /// for i in 0..10u8 {
    ///     pair.client.conn.send(pair.now, s, Message::new(vec![i; 5000]))?;
    /// }
    /// let steps = pair.drive_bounded(100_000);
    /// assert!(steps > 0);
    /// assert_eq!(pair.server.received.len(), 10);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn drive_bounded(&mut self, max_steps: usize) -> usize {
        for i in 0..max_steps {
            if !self.step() {
                return i;
            }
        }
        panic!("no quiescence after {max_steps} steps");
    }

    /// Steps until the clock passes `until` or the pair is idle.
    ///
    /// ```
    /// use lowtide_proto::sim::{LinkParams, Pair};
    /// use lowtide_proto::{Config, Message, StreamConfig};
    /// use std::time::Duration;
    /// let link = LinkParams { delay: Duration::from_millis(50), ..LinkParams::default() };
    /// let mut pair = Pair::new(Config::default(), Config::default(), link);
    /// let s = pair.client.conn.open_stream(StreamConfig::default())?;
    /// pair.client.conn.send(pair.now, s, Message::new("late"))?;
    /// let t0 = pair.now;
    /// pair.drive_until(t0 + Duration::from_millis(40), 10_000);
    /// assert!(pair.server.received.is_empty()); // 50 ms one way: not there yet
    /// pair.drive_until(t0 + Duration::from_millis(60), 10_000);
    /// assert_eq!(pair.server.received.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn drive_until(&mut self, until: Instant, max_steps: usize) {
        for _ in 0..max_steps {
            if self.now >= until || !self.step() {
                return;
            }
        }
        panic!("clock did not reach the target after {max_steps} steps");
    }
}
