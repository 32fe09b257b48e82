//! The receiver agent's core: a sans-IO state machine that sees every TCP packet entering and
//! leaving the receiving host and decides, per flow, how long each outgoing ACK waits.
//! Hsiao, Kung and Tan, "Streaming Video over TCP with Receiver-based Delay Control", Section
//! 2.1: "the TCP receiver will forward the payload of the packet to the application
//! immediately, but will impose a delay on the ACKing ... if a data packet arrives out of
//! order, an ACK packet will be sent immediately".
//!
//! Call order (the driver owns the packets; the core owns the decisions; `now` always comes in):
//! 1. An incoming packet: [`Agent::handle_incoming`] reads the router's notification (exact:
//!    the delay field; 1-bit: CE, counted into the flow's observation period) and returns the
//!    header edits to make before the kernel sees it ([`Rewrite`]: clear CE, remove the delay
//!    flag). The packet is then accepted at once.
//! 2. An outgoing packet: [`Agent::handle_outgoing`] takes the parsed packet and an opaque handle
//!    (the driver's NFQUEUE message). The handle comes back from [`Agent::poll_release`] when
//!    the packet may leave: at once, or after the flow's delay.
//! 3. Timers: [`Agent::poll_timeout`] says when the next held packet is due;
//!    [`Agent::handle_timeout`] releases what is due (and forgets idle flows).
//! 4. [`Agent::poll_release`] until `None` after each of the above: release in that order.
//!
//! Rules for outgoing packets of a tracked flow:
//! - SYN, RST, SACK-carrying ACKs and duplicate ACKs pass at once; whatever the flow has held
//!   is released first, in order, so the sender never sees ACKs out of order.
//! - Everything else that acknowledges (pure ACKs, FINs, data the receiver sends back) waits
//!   until `max(now + D, release time of the flow's previous held packet)`: one FIFO per flow.
//! - Fail open: when `max_held` packets are held, the packet passes at once (counted), and
//!   packets of flows the table has no room for pass untouched.
//!
//! Where we differ from the paper: exact RDC applies to an ACK the delay of the latest data
//! packet received before it (an ACK covers several packets when the kernel delays ACKs); a
//! data packet without a notification leaves the flow's delay as it was.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use crate::config::{AgentConfig, ConfigError, Mode};
use crate::one_bit::{Change, MarkShare, OneBitLaw, Period};
use crate::pacing::Pacer;
use crate::rto_guard::SenderRto;
use crate::rtt::RttEstimator;
use crate::segment::{self, ParseError, Segment};
use crate::status::{AgentStatus, Counters, DriverCounters, FlowStatus, PassCounts, PassReason};
use crate::wire;
use serde::Serialize;

/// A held packet released more than this after its time is counted late.
const LATE_RELEASE: Duration = Duration::from_millis(1);

/// Idle flows are looked for at most this often.
const EXPIRY_SCAN: Duration = Duration::from_secs(1);

/// A flow: this host's end and the remote end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowKey {
    pub local: SocketAddrV4,
    pub remote: SocketAddrV4,
}

/// Header edits to make to an incoming packet before the kernel sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rewrite {
    /// 1-bit RDC: CE becomes ECT(0), so the sender does not also halve its window.
    pub clear_ce: bool,
    /// Exact RDC: the notification flag goes.
    pub clear_delay: bool,
}

impl Rewrite {
    pub fn is_empty(&self) -> bool {
        !self.clear_ce && !self.clear_delay
    }

    /// Applies the edits to an IPv4 packet, fixing its header checksum.
    pub fn apply(&self, ip: &mut [u8]) -> Result<(), wire::WireError> {
        if self.clear_ce {
            wire::set_ecn(ip, wire::ECT0)?;
        }
        if self.clear_delay {
            wire::clear_delay(ip)?;
        }
        Ok(())
    }
}

struct Held<H> {
    handle: H,
    since: Instant,
    release_at: Instant,
    tsval: Option<u32>,
    /// Its acknowledgement number and raw window (the release log's).
    ack: u32,
    window: u16,
}

struct Flow<H> {
    /// The sender's port (the release log names flows by it).
    remote_port: u16,
    held: VecDeque<Held<H>>,
    pacer: Pacer,
    delay: Duration,
    rtt: RttEstimator,
    /// The sender's SRTT as the ACKs let go make it (`rto_guard`).
    sender_rto: SenderRto,
    period: Period,
    /// 1-bit: the moving share of marked data packets (the delay estimate's input).
    mark_share: MarkShare,
    mss: u32,
    cwnd_estimate: f64,
    last_ack: Option<(u32, u16)>,
    last_seen: Instant,
    stats: FlowCounts,
}

#[derive(Default)]
struct FlowCounts {
    data_packets: u64,
    data_bytes: u64,
    data_without_timestamps: u64,
    ce_marked: u64,
    delays_read: u64,
    held: u64,
    released_on_time: u64,
    flushed: u64,
    max_hold: Duration,
    /// Sum of the holds of the ACKs released on time (their mean is the delay imposed).
    total_hold: Duration,
    passed: PassCounts,
    increases: u64,
    decreases: u64,
    capped: u64,
    periods: u64,
}

impl<H> Flow<H> {
    /// When a held packet due at `release_at` may leave: then, or at the pacer's slot if
    /// pacing and that is later.
    fn leaves_at(&self, pacing: Option<f64>, release_at: Instant) -> Instant {
        pacing
            .and(self.pacer.slot())
            .map_or(release_at, |s| s.max(release_at))
    }

    fn new(remote_port: u16, now: Instant, first_period: Duration) -> Self {
        Flow {
            remote_port,
            held: VecDeque::new(),
            pacer: Pacer::default(),
            delay: Duration::ZERO,
            rtt: RttEstimator::default(),
            sender_rto: SenderRto::default(),
            period: Period::new(now, first_period),
            mark_share: MarkShare::default(),
            mss: 0,
            cwnd_estimate: 0.0,
            last_ack: None,
            last_seen: now,
            stats: FlowCounts::default(),
        }
    }
}

/// What leaves, in order, and how the counters see it: the parts of the agent a flow's
/// packets are released into (split from the flow table so both can be borrowed).
struct Exit<'a, H> {
    released: &'a mut VecDeque<H>,
    counters: &'a mut Counters,
    held_now: &'a mut usize,
    log: &'a mut ReleaseLog,
    /// The path RTT of a flow without an estimate (what the sender's SRTT copy adds holds to).
    default_rtt: Duration,
}

impl<H> Exit<'_, H> {
    fn pass(&mut self, flow: Option<&mut Flow<H>>, handle: H, reason: PassReason) {
        self.counters.passed.add(reason);
        if let Some(f) = flow {
            f.stats.passed.add(reason);
            if reason != PassReason::Control {
                let path = f.rtt.estimate(self.default_rtt).0;
                f.sender_rto.on_ack(path, Duration::ZERO);
            }
        }
        self.released.push_back(handle);
    }

    fn release(&mut self, flow: &mut Flow<H>, held: Held<H>, now: Instant, on_time: bool) {
        *self.held_now -= 1;
        if on_time {
            self.counters.released_on_time += 1;
            flow.stats.released_on_time += 1;
            let late = now.saturating_duration_since(held.release_at);
            if late > LATE_RELEASE {
                self.counters.released_late += 1;
            }
            let late_us = u64::try_from(late.as_micros()).unwrap_or(u64::MAX);
            let max = &mut self.counters.max_release_lateness_us;
            *max = (*max).max(late_us);
        } else {
            self.counters.flushed += 1;
            flow.stats.flushed += 1;
        }
        let hold = now.saturating_duration_since(held.since);
        let path = flow.rtt.estimate(self.default_rtt).0;
        flow.sender_rto.on_ack(path, hold);
        flow.stats.max_hold = flow.stats.max_hold.max(hold);
        if on_time {
            flow.stats.total_hold += hold;
        }
        if let Some(v) = held.tsval {
            flow.rtt.on_released(v, now);
        }
        self.log.record(flow.remote_port, &held, now, !on_time);
        self.released.push_back(held.handle);
    }

    /// A held packet waited `wait` past its time for the pacer.
    fn paced(&mut self, wait: Duration) {
        self.counters.paced += 1;
        let us = u64::try_from(wait.as_micros()).unwrap_or(u64::MAX);
        self.counters.max_pace_wait_us = self.counters.max_pace_wait_us.max(us);
    }

    fn flush(&mut self, flow: &mut Flow<H>, now: Instant) {
        while let Some(h) = flow.held.pop_front() {
            self.release(flow, h, now, false);
        }
    }
}

/// One held packet's way through the agent: when it was held, due and released (µs since
/// the origin given to [`Agent::take_release_log`]). `left_us − due_us` is its lateness;
/// `due_us − held_us` the hold the flow's delay and order gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ReleaseRecord {
    pub remote_port: u16,
    pub held_us: u64,
    pub due_us: u64,
    pub left_us: u64,
    /// Released early, ahead of a packet that had to pass at once.
    pub flushed: bool,
    /// The ACK's acknowledgement number and raw (unscaled) window.
    pub ack: u32,
    pub window: u16,
}

struct LoggedRelease {
    remote_port: u16,
    held: Instant,
    due: Instant,
    left: Instant,
    flushed: bool,
    ack: u32,
    window: u16,
}

/// Bounded: at most `limit` records, the rest counted.
#[derive(Default)]
struct ReleaseLog {
    limit: usize,
    records: Vec<LoggedRelease>,
    dropped: u64,
}

impl ReleaseLog {
    fn record<H>(&mut self, remote_port: u16, held: &Held<H>, left: Instant, flushed: bool) {
        if self.limit == 0 {
            return;
        }
        if self.records.len() >= self.limit {
            self.dropped += 1;
            return;
        }
        self.records.push(LoggedRelease {
            remote_port,
            held: held.since,
            due: held.release_at,
            left,
            flushed,
            ack: held.ack,
            window: held.window,
        });
    }
}

/// The receiver agent's core, generic over the driver's packet handle `H`.
pub struct Agent<H> {
    cfg: AgentConfig,
    law: OneBitLaw,
    flows: HashMap<FlowKey, Flow<H>>,
    /// (release time of a flow's first held packet, flow); entries may be stale.
    due: BinaryHeap<Reverse<(Instant, FlowKey)>>,
    released: VecDeque<H>,
    held_now: usize,
    counters: Counters,
    next_expiry_scan: Option<Instant>,
    log: ReleaseLog,
}

impl<H> Agent<H> {
    pub fn new(cfg: AgentConfig) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let law = OneBitLaw {
            increase_above: cfg.increase_above,
            decrease_below: cfg.decrease_below,
            zero_below: cfg.zero_below,
            max_delay: cfg.max_delay,
            max_step: cfg.max_increase,
            full_mark_delay: cfg.full_mark_delay,
        };
        Ok(Agent {
            cfg,
            law,
            flows: HashMap::new(),
            due: BinaryHeap::new(),
            released: VecDeque::new(),
            held_now: 0,
            counters: Counters::default(),
            next_expiry_scan: None,
            log: ReleaseLog::default(),
        })
    }

    pub fn config(&self) -> &AgentConfig {
        &self.cfg
    }

    /// The flow table, the timer heap and the exit, borrowed apart.
    #[allow(clippy::type_complexity)]
    fn split(
        &mut self,
    ) -> (
        &mut HashMap<FlowKey, Flow<H>>,
        &mut BinaryHeap<Reverse<(Instant, FlowKey)>>,
        Exit<'_, H>,
    ) {
        (
            &mut self.flows,
            &mut self.due,
            Exit {
                released: &mut self.released,
                counters: &mut self.counters,
                held_now: &mut self.held_now,
                log: &mut self.log,
                default_rtt: self.cfg.default_rtt,
            },
        )
    }

    /// A packet arrived for this host; returns the edits to make before accepting it.
    pub fn handle_incoming(&mut self, now: Instant, ip: &[u8]) -> Rewrite {
        self.counters.incoming += 1;
        let seg = match segment::parse(ip) {
            Ok(s) => s,
            Err(ParseError::NotTcp) => {
                self.counters.incoming_not_tcp += 1;
                return Rewrite::default();
            }
            Err(_) => {
                self.counters.incoming_malformed += 1;
                return Rewrite::default();
            }
        };
        let key = FlowKey {
            local: seg.dst,
            remote: seg.src,
        };
        if !self.flows.contains_key(&key) {
            if self.flows.len() >= self.cfg.max_flows {
                // Untracked: CE stays, so the sender still reacts through plain ECN.
                self.counters.incoming_untracked += 1;
                return Rewrite::default();
            }
            self.counters.flows_created += 1;
            self.flows
                .insert(key, Flow::new(key.remote.port(), now, self.cfg.default_rtt));
        }
        let (cfg, law) = (&self.cfg, &self.law);
        let flow = self.flows.get_mut(&key).expect("inserted above");
        flow.last_seen = now;
        if !seg.syn {
            flow.rtt.on_handshake_done(now);
        }
        if let (Some((_, tsecr)), true) = (seg.timestamps, seg.has_ack) {
            flow.rtt.on_echo(tsecr, now, cfg.rtt_window);
        }
        if seg.payload > 0 {
            flow.stats.data_packets += 1;
            flow.stats.data_bytes += u64::from(seg.payload);
            flow.stats.data_without_timestamps += u64::from(seg.timestamps.is_none());
            flow.mss = flow.mss.max(seg.payload);
        }
        let mut rewrite = Rewrite::default();
        match cfg.mode {
            Mode::Exact => match wire::delay(ip) {
                Ok(Some(d)) => {
                    self.counters.delays_read += 1;
                    flow.stats.delays_read += 1;
                    if d > cfg.max_delay {
                        self.counters.delays_clamped += 1;
                    }
                    flow.delay = d.min(cfg.max_delay);
                    rewrite.clear_delay = true;
                }
                Ok(None) => self.counters.delays_absent += u64::from(seg.payload > 0),
                Err(_) => self.counters.delays_invalid += 1,
            },
            Mode::OneBit => {
                let ce = wire::ecn(ip) == Ok(wire::CE);
                if ce {
                    rewrite.clear_ce = true;
                    self.counters.ce_cleared += 1;
                    flow.stats.ce_marked += 1;
                }
                if seg.payload > 0 {
                    flow.period.record(seg.payload, ce);
                    flow.mark_share.record(ce);
                    if flow.period.is_over(now) {
                        decide(flow, law, cfg, now);
                    }
                }
            }
        }
        rewrite
    }

    /// Whether the driver should mark this outgoing packet as the agent's echo
    /// ([`wire::set_echo`]): it belongs to a tracked flow, `ip` is the whole packet (the driver
    /// copies only headers of outgoing packets, and a payload given back shorter would be
    /// trimmed) and an atomic datagram. Counted either way for tracked flows.
    pub fn wants_echo(&mut self, parsed: &Result<Segment, ParseError>, ip: &[u8]) -> bool {
        let Ok(seg) = parsed else { return false };
        let key = FlowKey {
            local: seg.src,
            remote: seg.dst,
        };
        if !self.cfg.echo || !self.flows.contains_key(&key) {
            return false;
        }
        let whole = ip.len() >= 4 && usize::from(u16::from_be_bytes([ip[2], ip[3]])) == ip.len();
        if whole && wire::is_atomic_datagram(ip) {
            self.counters.echoed += 1;
            true
        } else {
            self.counters.echo_skipped += 1;
            false
        }
    }

    /// A packet leaves this host: `parsed` is [`segment::parse`] of it (the driver parses
    /// before handing over the packet's `handle`, which comes back from
    /// [`poll_release`](Self::poll_release)).
    pub fn handle_outgoing(
        &mut self,
        now: Instant,
        parsed: Result<Segment, ParseError>,
        handle: H,
    ) {
        self.counters.outgoing += 1;
        let max_held = self.cfg.max_held;
        let pacing = self.cfg.release_pacing;
        let rto_guard = self.cfg.rto_guard;
        let (flows, due, mut exit) = self.split();
        let seg = match parsed {
            Ok(s) => s,
            Err(ParseError::NotTcp) => return exit.pass(None, handle, PassReason::NotTcp),
            Err(_) => return exit.pass(None, handle, PassReason::Malformed),
        };
        let key = FlowKey {
            local: seg.src,
            remote: seg.dst,
        };
        let Some(flow) = flows.get_mut(&key) else {
            return exit.pass(None, handle, PassReason::Untracked);
        };
        flow.last_seen = now;
        if seg.syn && seg.has_ack {
            flow.rtt.on_synack(now);
        }
        let at_once = classify(&seg, flow);
        let tsval = seg.timestamps.map(|(v, _)| v);
        if seg.has_ack {
            flow.last_ack = Some((seg.ack, seg.window));
        }
        let reason = match at_once {
            Some(reason) => Some(reason),
            None if flow.held.is_empty() && flow.delay.is_zero() => Some(PassReason::NoDelay),
            None if *exit.held_now >= max_held => Some(PassReason::HoldFull),
            None => None,
        };
        if let Some(reason) = reason {
            exit.flush(flow, now);
            if let Some(v) = tsval {
                flow.rtt.on_sent(v, Some(now));
            }
            return exit.pass(Some(flow), handle, reason);
        }
        let after_previous = flow.held.back().map_or(now, |h| h.release_at);
        let mut hold = flow.delay;
        if let Some(guard) = rto_guard {
            let path = flow.rtt.estimate(exit.default_rtt).0;
            if let Some(max) = flow.sender_rto.max_hold(path, guard).filter(|m| *m < hold) {
                hold = max;
                exit.counters.rto_bounded += 1;
            }
        }
        // Order first: an ACK never overtakes the one held before it.
        let release_at = (now + hold).max(after_previous);
        flow.pacer.on_held(now);
        if flow.held.is_empty() {
            due.push(Reverse((flow.leaves_at(pacing, release_at), key)));
        }
        if let Some(v) = tsval {
            flow.rtt.on_sent(v, None);
        }
        flow.held.push_back(Held {
            handle,
            since: now,
            release_at,
            tsval,
            ack: seg.ack,
            window: seg.window,
        });
        flow.stats.held += 1;
        exit.counters.held += 1;
        *exit.held_now += 1;
    }

    /// When the next held packet is due (possibly earlier: a wake-up with nothing to do is
    /// harmless).
    pub fn poll_timeout(&self) -> Option<Instant> {
        let due = self.due.peek().map(|Reverse((at, _))| *at);
        match (due, self.next_expiry_scan) {
            (Some(d), Some(e)) => Some(d.min(e)),
            (d, e) => d.or(e),
        }
    }

    /// Releases every held packet that is due at `now`, and forgets idle flows.
    pub fn handle_timeout(&mut self, now: Instant) {
        let pacing = self.cfg.release_pacing;
        while let Some(Reverse((at, key))) = self.due.peek().copied() {
            if at > now {
                break;
            }
            self.due.pop();
            let (flows, due, mut exit) = self.split();
            let Some(flow) = flows.get_mut(&key) else {
                continue;
            };
            let mut released = false;
            let mut paced_back = false;
            while let Some(front) = flow.held.front() {
                if front.release_at > now {
                    break;
                }
                // The pacer's slot, if pacing and later than the packet's own time.
                let slot = pacing
                    .and(flow.pacer.slot())
                    .filter(|s| *s > front.release_at);
                if slot.is_some_and(|s| s > now) {
                    paced_back = true;
                    break;
                }
                let mut h = flow.held.pop_front().expect("checked");
                if let Some(s) = slot {
                    exit.paced(s.saturating_duration_since(h.release_at));
                    h.release_at = s;
                }
                exit.release(flow, h, now, true);
                if let Some(f) = pacing {
                    flow.pacer.on_released(now, f);
                }
                released = true;
            }
            // Only an entry that released or met the pacer re-arms: a stale one (left by a
            // flush) just goes.
            if released || paced_back {
                if let Some(next) = flow.held.front() {
                    due.push(Reverse((flow.leaves_at(pacing, next.release_at), key)));
                }
            }
        }
        self.expire_idle(now);
    }

    fn expire_idle(&mut self, now: Instant) {
        match self.next_expiry_scan {
            Some(at) if at > now => return,
            None if self.flows.is_empty() => return,
            _ => {}
        }
        let idle = self.cfg.idle_timeout;
        let before = self.flows.len();
        self.flows
            .retain(|_, f| !f.held.is_empty() || now.saturating_duration_since(f.last_seen) < idle);
        self.counters.flows_expired += (before - self.flows.len()) as u64;
        self.next_expiry_scan = (!self.flows.is_empty()).then_some(now + EXPIRY_SCAN);
    }

    /// The next packet that may leave, in release order.
    pub fn poll_release(&mut self) -> Option<H> {
        self.released.pop_front()
    }

    /// Releases everything held (shutting down), in order per flow.
    pub fn release_all(&mut self, now: Instant) {
        let (flows, _, mut exit) = self.split();
        let mut keys: Vec<FlowKey> = flows.keys().copied().collect();
        keys.sort();
        for key in keys {
            if let Some(flow) = flows.get_mut(&key) {
                exit.flush(flow, now);
            }
        }
    }

    /// Keeps a record of the next `limit` held packets' release ([`ReleaseRecord`]), for
    /// timing analysis (the lab's `releases.csv`); 0 stops recording. Off by default.
    pub fn record_releases(&mut self, limit: usize) {
        self.log.limit = limit;
    }

    /// The records so far, times in µs since `origin`, and how many were not kept (over
    /// the limit); the log starts again empty.
    pub fn take_release_log(&mut self, origin: Instant) -> (Vec<ReleaseRecord>, u64) {
        let us = |t: Instant| t.saturating_duration_since(origin).as_micros() as u64;
        let records = std::mem::take(&mut self.log.records)
            .into_iter()
            .map(|r| ReleaseRecord {
                remote_port: r.remote_port,
                held_us: us(r.held),
                due_us: us(r.due),
                left_us: us(r.left),
                flushed: r.flushed,
                ack: r.ack,
                window: r.window,
            })
            .collect();
        (records, std::mem::take(&mut self.log.dropped))
    }

    pub fn held_now(&self) -> usize {
        self.held_now
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// A snapshot of the agent and every flow.
    pub fn status(&self) -> AgentStatus {
        let mut flows: Vec<FlowStatus> = self
            .flows
            .iter()
            .map(|(key, f)| {
                let (rtt, source) = f.rtt.estimate(self.cfg.default_rtt);
                let s = &f.stats;
                FlowStatus {
                    local: key.local,
                    remote: key.remote,
                    delay_ms: ms(f.delay),
                    rtt_ms: ms(rtt),
                    rtt_source: source,
                    cwnd_estimate: f.cwnd_estimate,
                    data_packets: s.data_packets,
                    data_bytes: s.data_bytes,
                    data_without_timestamps: s.data_without_timestamps,
                    ce_marked: s.ce_marked,
                    delays_read: s.delays_read,
                    held: s.held,
                    held_now: f.held.len(),
                    released_on_time: s.released_on_time,
                    flushed: s.flushed,
                    max_hold_ms: ms(s.max_hold),
                    mean_hold_ms: (s.released_on_time > 0)
                        .then(|| ms(s.total_hold) / s.released_on_time as f64),
                    mark_share: f.mark_share.get(),
                    passed: s.passed,
                    increases: s.increases,
                    decreases: s.decreases,
                    capped: s.capped,
                    periods: s.periods,
                }
            })
            .collect();
        flows.sort_by_key(|f| (f.local, f.remote));
        AgentStatus {
            mode: self.cfg.mode,
            counters: self.counters,
            held_now: self.held_now,
            flows,
            driver: DriverCounters::default(),
            releases: Vec::new(),
            releases_not_kept: 0,
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Which outgoing packets pass at once regardless of the delay.
fn classify<H>(seg: &Segment, flow: &Flow<H>) -> Option<PassReason> {
    if seg.syn || seg.rst {
        Some(PassReason::Control)
    } else if seg.sack {
        Some(PassReason::Sack)
    } else if seg.is_pure_ack() && flow.last_ack == Some((seg.ack, seg.window)) {
        Some(PassReason::DupAck)
    } else {
        None
    }
}

/// The end of a 1-bit observation period: apply the law and start the next period.
fn decide<H>(flow: &mut Flow<H>, law: &OneBitLaw, cfg: &AgentConfig, now: Instant) {
    let (rtt, _) = flow.rtt.estimate(cfg.default_rtt);
    let cwnd = flow.period.cwnd_estimate(now, flow.mss);
    let (delay, change) = law.next(flow.delay, flow.period.seen, rtt, cwnd, flow.mark_share);
    let s = &mut flow.stats;
    s.periods += 1;
    match change {
        Change::Increased => s.increases += 1,
        Change::Capped => s.capped += 1,
        Change::Decreased => s.decreases += 1,
        Change::Kept | Change::NoData => {}
    }
    flow.cwnd_estimate = cwnd;
    flow.delay = delay;
    flow.period = Period::new(now, rtt + delay);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::tests::Spec;

    const MS: Duration = Duration::from_millis(1);

    fn one_bit() -> Agent<u32> {
        Agent::new(AgentConfig {
            default_rtt: 40 * MS,
            ..AgentConfig::default()
        })
        .unwrap()
    }

    fn out(a: &mut Agent<u32>, now: Instant, ip: &[u8], id: u32) {
        a.handle_outgoing(now, segment::parse(ip), id);
    }

    fn released(a: &mut Agent<u32>) -> Vec<u32> {
        std::iter::from_fn(|| a.poll_release()).collect()
    }

    fn data(seq: u32, ce: bool) -> Vec<u8> {
        let mut s = Spec::data(seq, 1000);
        if ce {
            s.ecn = wire::CE;
        }
        s.build()
    }

    /// Feeds `n` data packets 1 ms apart from `t`, all marked or none; returns the time after.
    fn feed(a: &mut Agent<u32>, t: Instant, n: u32, ce: bool) -> Instant {
        for i in 0..n {
            let r = a.handle_incoming(t + MS * i, &data(1 + 1000 * i, ce));
            assert_eq!(r.clear_ce, ce);
        }
        t + MS * n
    }

    #[test]
    fn whole_outgoing_packets_of_tracked_flows_are_echoed() {
        let mut a = one_bit();
        let ack = Spec::ack(1001).build();
        let parsed = segment::parse(&ack);
        assert!(
            !a.wants_echo(&parsed, &ack),
            "no flow yet: not ours to answer for"
        );
        a.handle_incoming(Instant::now(), &data(1, false));
        assert!(a.wants_echo(&parsed, &ack));
        // A header-only copy of a longer packet would be trimmed if given back: skipped.
        assert!(!a.wants_echo(&parsed, &ack[..ack.len() - 1]));
        assert_eq!((a.counters().echoed, a.counters().echo_skipped), (1, 1));
        let mut echoed = ack.clone();
        wire::set_echo(&mut echoed).unwrap();
        assert!(wire::is_echo(&echoed));
        assert_eq!(segment::parse(&echoed).map(|s| s.ack), Ok(1001));
        let mut quiet = Agent::<u32>::new(AgentConfig {
            echo: false,
            ..AgentConfig::default()
        })
        .unwrap();
        quiet.handle_incoming(Instant::now(), &data(1, false));
        assert!(!quiet.wants_echo(&parsed, &ack));
    }

    #[test]
    fn marked_periods_raise_the_delay_and_acks_wait_for_it_in_order() {
        let mut a = one_bit();
        let t0 = Instant::now();
        // First period: 40 ms (the default RTT); the 41st packet closes it, all marked.
        let t = feed(&mut a, t0, 41, true);
        assert_eq!(a.status().flows[0].delay_ms, 40.0);
        assert_eq!(a.counters().ce_cleared, 41);
        // Three ACKs 1 ms apart: held 40 ms each, in order.
        for (i, ack) in [1001u32, 3001, 5001].iter().enumerate() {
            out(
                &mut a,
                t + MS * i as u32,
                &Spec::ack(*ack).build(),
                i as u32,
            );
        }
        assert!(released(&mut a).is_empty());
        assert_eq!(a.poll_timeout(), Some(t + 40 * MS));
        a.handle_timeout(t + 40 * MS);
        assert_eq!(released(&mut a), vec![0]);
        a.handle_timeout(t + 42 * MS);
        assert_eq!(released(&mut a), vec![1, 2]);
        assert_eq!(a.counters().released_on_time, 3);
        assert_eq!(a.held_now(), 0);
    }

    #[test]
    fn sack_and_duplicate_acks_pass_at_once_behind_what_was_held() {
        let mut a = one_bit();
        let t = feed(&mut a, Instant::now(), 41, true);
        out(&mut a, t, &Spec::ack(1001).build(), 1);
        out(&mut a, t, &Spec::ack(2001).build(), 2);
        // Data 3001.. was lost: the kernel acks 2001 again with a SACK block.
        let mut dup = Spec::ack(2001);
        dup.sack = Some((4001, 5001));
        out(&mut a, t + MS, &dup.build(), 3);
        assert_eq!(
            released(&mut a),
            vec![1, 2, 3],
            "flushed in order, then the dup"
        );
        // Without SACK: the same ack and window twice is a duplicate.
        out(&mut a, t + 2 * MS, &Spec::ack(2001).build(), 4);
        assert_eq!(released(&mut a), vec![4]);
        let c = a.counters();
        assert_eq!((c.flushed, c.passed.sack, c.passed.dup_ack), (2, 1, 1));
        assert_eq!(c.held, 2);
    }

    #[test]
    fn unmarked_periods_bring_the_delay_back_to_zero() {
        let mut a = one_bit();
        let mut t = feed(&mut a, Instant::now(), 41, true);
        assert_eq!(a.status().flows[0].delay_ms, 40.0);
        // Unmarked periods shrink it by cwnd/(cwnd+1) each; it ends at zero.
        for _ in 0..200 {
            t = feed(&mut a, t, 90, false);
        }
        let f = &a.status().flows[0];
        assert_eq!(f.delay_ms, 0.0, "{f:?}");
        assert!(f.decreases > 5 && f.increases == 1, "{f:?}");
        // With no delay and nothing held, ACKs pass at once.
        out(&mut a, t, &Spec::ack(1001).build(), 9);
        assert_eq!(released(&mut a), vec![9]);
        assert_eq!(a.counters().passed.no_delay, 1);
    }

    #[test]
    fn exact_mode_reads_the_stamp_removes_it_and_holds_by_it() {
        let mut a: Agent<u32> = Agent::new(AgentConfig {
            max_delay: Duration::from_secs(1),
            ..AgentConfig::exact()
        })
        .unwrap();
        let t = Instant::now();
        let mut p = data(1, false);
        wire::stamp_delay(&mut p, 25 * MS).unwrap();
        let r = a.handle_incoming(t, &p);
        assert_eq!(
            r,
            Rewrite {
                clear_ce: false,
                clear_delay: true
            }
        );
        r.apply(&mut p).unwrap();
        assert_eq!(wire::delay(&p), Ok(None));
        out(&mut a, t, &Spec::ack(1001).build(), 1);
        a.handle_timeout(t + 24 * MS);
        assert!(released(&mut a).is_empty());
        a.handle_timeout(t + 25 * MS);
        assert_eq!(released(&mut a), vec![1]);
        // Too large: clamped to max_delay. Without DF the flag is garbage: counted, kept.
        let mut p = data(1001, false);
        wire::stamp_delay(&mut p, Duration::from_secs(5)).unwrap();
        a.handle_incoming(t, &p);
        assert_eq!(a.status().flows[0].delay_ms, 1000.0);
        p[6] = 0x80; // the flag without DF: the ID may be a fragment ID
        assert_eq!(a.handle_incoming(t, &p), Rewrite::default());
        let c = a.counters();
        assert_eq!(
            (c.delays_read, c.delays_clamped, c.delays_invalid),
            (2, 1, 1)
        );
    }

    /// Exact mode, path RTT 100 ms (the default, no timestamps): 200 ACKs held by
    /// `steady`, then `sacks` ACKs with SACK blocks pass at once, then the stamp becomes
    /// `then` and one pure ACK is held. Its hold, and the agent's counters.
    fn hold_after(
        guard: Option<Duration>,
        steady: Duration,
        sacks: u32,
        then: Duration,
    ) -> (Duration, Counters) {
        let mut a: Agent<u32> = Agent::new(AgentConfig {
            rto_guard: guard,
            ..AgentConfig::exact()
        })
        .unwrap();
        let stamped = |seq: u32, d: Duration| {
            let mut p = data(seq, false);
            wire::stamp_delay(&mut p, d).unwrap();
            p
        };
        let mut t = Instant::now();
        let mut ack = 1001;
        a.handle_incoming(t, &stamped(1, steady));
        for i in 0..200 {
            out(&mut a, t, &Spec::ack(ack).build(), i);
            ack += 1000;
            t += 10 * MS;
            a.handle_timeout(t);
        }
        // The rest leave at their times too.
        for _ in 0..steady.as_millis() / 10 {
            t += 10 * MS;
            a.handle_timeout(t);
        }
        assert_eq!(a.held_now(), 0);
        released(&mut a);
        for i in 0..sacks {
            let mut dup = Spec::ack(ack);
            dup.sack = Some((ack + 1000 * (i + 1), ack + 1000 * (i + 2)));
            out(&mut a, t, &dup.build(), 1000 + i);
            t += MS;
        }
        released(&mut a);
        a.handle_incoming(t, &stamped(ack, then));
        out(
            &mut a,
            t,
            &Spec::ack(ack + 1000 * (sacks + 2)).build(),
            9999,
        );
        let due = a.poll_timeout().expect("held");
        (due - t, *a.counters())
    }

    #[test]
    fn the_rto_guard_shortens_a_hold_the_senders_rto_would_not_wait_for() {
        let off = |steady, sacks, then| hold_after(None, steady, sacks, then).0;
        let on = |steady, sacks, then| hold_after(Some(50 * MS), steady, sacks, then);
        // Steady: the sender's SRTT is 400 ms, its RTO at least 600 ms; 300 ms is allowed.
        let (hold, c) = on(300 * MS, 0, 300 * MS);
        assert_eq!((hold, c.rto_bounded), (300 * MS, 0));
        // After a loss, eight SACK ACKs passed at once pull the sender's SRTT to about
        // 203 ms: the ACK that ends the recovery may wait about 253 ms (203 + 200 − 100 −
        // 50), not the delay's 300 ms, which would reach the sender after its RTO.
        assert_eq!(off(300 * MS, 8, 300 * MS), 300 * MS);
        let (hold, c) = on(300 * MS, 8, 300 * MS);
        assert!(hold > 250 * MS && hold < 255 * MS, "{hold:?}");
        assert_eq!(c.rto_bounded, 1);
        // A jump of the delay from 100 to 400 ms: the first ACK waits 250 ms (an SRTT of
        // 200 ms + 200 − 100 − 50), later ones follow the sender's SRTT up.
        assert_eq!(off(100 * MS, 0, 400 * MS), 400 * MS);
        assert_eq!(on(100 * MS, 0, 400 * MS).0, 250 * MS);
    }

    #[test]
    fn a_release_after_its_time_is_counted_late() {
        let mut a: Agent<u32> = Agent::new(AgentConfig::exact()).unwrap();
        let t = Instant::now();
        for seq in [1, 1001, 2001] {
            let mut p = data(seq, false);
            wire::stamp_delay(&mut p, 10 * MS).unwrap();
            a.handle_incoming(t, &p);
        }
        out(&mut a, t, &Spec::ack(1001).build(), 1);
        out(&mut a, t + MS / 2, &Spec::ack(2001).build(), 2);
        a.handle_timeout(t + 11 * MS); // 1 ms and 0.5 ms after their times
        assert_eq!(released(&mut a), vec![1, 2]);
        let c = a.counters();
        assert_eq!((c.released_on_time, c.released_late), (2, 0));
        assert_eq!(c.max_release_lateness_us, 1000);
        out(&mut a, t + 11 * MS, &Spec::ack(3001).build(), 3);
        a.handle_timeout(t + 25 * MS);
        assert_eq!(released(&mut a), vec![3]);
        let c = a.counters();
        assert_eq!((c.released_late, c.max_release_lateness_us), (1, 4000));
    }

    /// An exact agent holding 10 ms, with `pacing`: 40 ACKs 1 ms apart, then a bunch of 8
    /// generated at once (as after a stall); returns when each of the bunch left, driving
    /// the timer as a driver would.
    fn bunch_leaves(pacing: Option<f64>) -> (Vec<Duration>, Counters) {
        let mut a: Agent<u32> = Agent::new(AgentConfig {
            release_pacing: pacing,
            ..AgentConfig::exact()
        })
        .unwrap();
        a.record_releases(1000);
        let t0 = Instant::now();
        let mut p = data(1, false);
        wire::stamp_delay(&mut p, 10 * MS).unwrap();
        a.handle_incoming(t0, &p);
        let mut id = 0;
        let mut ack = |a: &mut Agent<u32>, at: Instant| {
            id += 1;
            out(a, at, &Spec::ack(1 + 1000 * id).build(), id);
        };
        for i in 0..40 {
            ack(&mut a, t0 + MS * i);
        }
        let bunch = t0 + MS * 48;
        for _ in 0..8 {
            ack(&mut a, bunch);
        }
        let mut now = t0;
        while let Some(at) = a.poll_timeout() {
            now = now.max(at);
            a.handle_timeout(now);
            released(&mut a);
            if a.held_now() == 0 {
                break;
            }
        }
        let (log, lost) = a.take_release_log(t0);
        assert_eq!((log.len(), lost), (48, 0));
        let left = log[40..]
            .iter()
            .map(|r| Duration::from_micros(r.left_us) - 58 * MS)
            .collect();
        (left, *a.counters())
    }

    #[test]
    fn a_bunch_of_held_acks_leaves_at_once_unless_paced() {
        let (left, c) = bunch_leaves(None);
        assert!(left.iter().all(|d| d.is_zero()), "{left:?}");
        assert_eq!(c.paced, 0);
        // Paced at 1.25 x the flow's rate (mean gap 1 ms before the bunch, about 0.75 ms
        // after it: the bunch's 9 ms gap counts as 4): two leave at once, then one about
        // every 0.6 ms.
        let (left, c) = bunch_leaves(Some(1.25));
        let gaps: Vec<f64> = left
            .windows(2)
            .map(|w| (w[1] - w[0]).as_secs_f64() * 1000.0)
            .collect();
        assert_eq!(gaps[0], 0.0, "{gaps:?}");
        assert!(
            gaps[1..].iter().all(|g| (0.55..=0.85).contains(g)),
            "{gaps:?}"
        );
        assert_eq!(c.paced, 6);
        assert_eq!(c.released_late, 0, "a paced wait is not lateness");
        assert!(c.max_pace_wait_us > 3000, "{}", c.max_pace_wait_us);
    }

    #[test]
    fn garbage_unknown_flows_and_a_full_hold_pass_at_once() {
        let mut a: Agent<u32> = Agent::new(AgentConfig {
            max_held: 2,
            max_flows: 1,
            default_rtt: 40 * MS,
            ..AgentConfig::default()
        })
        .unwrap();
        let t0 = Instant::now();
        out(&mut a, t0, &[0xde, 0xad], 1);
        out(&mut a, t0, &Spec::ack(5).build(), 2);
        assert_eq!(a.handle_incoming(t0, &[0x45; 10]), Rewrite::default());
        let t = feed(&mut a, t0, 41, true);
        // A second flow does not fit the table: CE is left for the kernel.
        let mut other = Spec::data(1, 1000);
        other.src.1 = 40001;
        other.ecn = wire::CE;
        assert_eq!(a.handle_incoming(t, &other.build()), Rewrite::default());
        for i in 0..3 {
            out(&mut a, t, &Spec::ack(1001 + 1000 * i).build(), 10 + i);
        }
        // The third found the hold full: it passes behind the two held before it.
        assert_eq!(released(&mut a), vec![1, 2, 10, 11, 12]);
        let c = a.counters();
        assert_eq!(
            (
                c.passed.malformed,
                c.passed.untracked,
                c.passed.hold_full,
                c.incoming_untracked,
                c.incoming_malformed
            ),
            (1, 1, 1, 1, 1)
        );
    }

    #[test]
    fn idle_flows_are_forgotten_but_not_while_they_hold_packets() {
        let mut a = one_bit();
        let t = feed(&mut a, Instant::now(), 41, true);
        out(&mut a, t, &Spec::ack(1001).build(), 1);
        let later = t + Duration::from_secs(61);
        a.expire_idle(later);
        assert_eq!(a.status().flows.len(), 1, "it still holds an ACK");
        a.handle_timeout(later);
        assert_eq!(released(&mut a), vec![1]);
        a.handle_timeout(later + 2 * EXPIRY_SCAN);
        assert!(a.status().flows.is_empty());
        assert_eq!(a.counters().flows_expired, 1);
    }

    #[test]
    fn timestamps_give_the_path_rtt_without_the_hold() {
        let mut a = one_bit();
        let t0 = Instant::now();
        let t = feed(&mut a, t0, 41, true); // delay 40 ms from here
        let mut ack = Spec::ack(1001);
        ack.ts = Some((500, 1));
        out(&mut a, t, &ack.build(), 1);
        a.handle_timeout(t + 40 * MS);
        assert_eq!(released(&mut a), vec![1]);
        // The sender echoes TSval 500 in data arriving 30 ms after the release.
        let mut d = Spec::data(50_000, 1000);
        d.ts = Some((9, 500));
        a.handle_incoming(t + 70 * MS, &d.build());
        let f = &a.status().flows[0];
        assert_eq!(
            (f.rtt_ms, f.rtt_source),
            (30.0, crate::rtt::RttSource::Timestamps)
        );
        assert_eq!(f.data_without_timestamps, 41);
    }

    #[test]
    fn shutting_down_releases_everything() {
        let mut a = one_bit();
        let t = feed(&mut a, Instant::now(), 41, true);
        for i in 0..5 {
            out(&mut a, t, &Spec::ack(1001 + i * 1000).build(), i);
        }
        a.release_all(t);
        assert_eq!(released(&mut a), vec![0, 1, 2, 3, 4]);
        assert_eq!(a.held_now(), 0);
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Whatever the traffic, every outgoing packet leaves exactly once, each flow's in
            /// the order it was sent, and none leaves after its release time plus the step.
            #[test]
            fn every_packet_leaves_once_in_order(
                events in proptest::collection::vec((0u8..4, 0u16..3, any::<bool>(), 0u64..30), 1..300)
            ) {
                let mut a = one_bit();
                let t0 = Instant::now();
                let mut t = t0;
                let mut sent: Vec<(u16, u32)> = vec![];
                let mut left: Vec<u32> = vec![];
                for (kind, flow, flag, step) in events {
                    t += MS * step as u32;
                    let port = 40000 + flow;
                    match kind {
                        0 | 1 => {
                            let mut d = Spec::data(1, 1000);
                            d.src.1 = port;
                            d.ecn = if flag { wire::CE } else { wire::ECT0 };
                            a.handle_incoming(t, &d.build());
                        }
                        _ => {
                            let mut ack = Spec::ack(sent.len() as u32);
                            ack.dst.1 = port;
                            if flag && kind == 3 {
                                ack.sack = Some((1, 2));
                            }
                            let id = sent.len() as u32;
                            sent.push((flow, id));
                            out(&mut a, t, &ack.build(), id);
                        }
                    }
                    a.handle_timeout(t);
                    left.extend(std::iter::from_fn(|| a.poll_release()));
                }
                a.release_all(t);
                left.extend(std::iter::from_fn(|| a.poll_release()));
                let mut sorted = left.clone();
                sorted.sort();
                prop_assert_eq!(sorted, (0..sent.len() as u32).collect::<Vec<_>>());
                for f in 0..3 {
                    let order: Vec<u32> = left.iter().copied().filter(|id| sent[*id as usize].0 == f).collect();
                    prop_assert!(order.windows(2).all(|w| w[0] < w[1]), "flow {} out of order: {:?}", f, order);
                }
                prop_assert_eq!(a.held_now(), 0);
            }
        }
    }
}
