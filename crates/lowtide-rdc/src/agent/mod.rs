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
//!
//! The parts: a flow's state, the order its packets leave in and the law applied at the end of
//! a period (`flow.rs`), and the optional log of each held packet's release
//! (`release_log.rs`).

mod flow;
mod release_log;
#[cfg(test)]
mod tests;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use crate::config::{AgentConfig, ConfigError, Mode};
use crate::one_bit::OneBitLaw;
use crate::segment::{self, ParseError, Segment};
use crate::status::{AgentStatus, Counters, DriverCounters, FlowStatus, PassReason};
use crate::wire;

use flow::{classify, decide, Exit, Flow, Held};
use release_log::ReleaseLog;
pub use release_log::ReleaseRecord;

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
