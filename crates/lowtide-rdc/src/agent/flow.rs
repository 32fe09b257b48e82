//! A flow as the agent tracks it, the exit its held packets are released into, and the
//! decisions made per packet (which pass at once) and per period (the 1-bit law).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::config::AgentConfig;
use crate::one_bit::{Change, MarkShare, OneBitLaw, Period};
use crate::pacing::Pacer;
use crate::rto_guard::SenderRto;
use crate::rtt::RttEstimator;
use crate::segment::Segment;
use crate::status::{Counters, PassCounts, PassReason};

use super::release_log::ReleaseLog;
use super::LATE_RELEASE;

pub(super) struct Held<H> {
    pub(super) handle: H,
    pub(super) since: Instant,
    pub(super) release_at: Instant,
    pub(super) tsval: Option<u32>,
    /// Its acknowledgement number and raw window (the release log's).
    pub(super) ack: u32,
    pub(super) window: u16,
}

pub(super) struct Flow<H> {
    /// The sender's port (the release log names flows by it).
    pub(super) remote_port: u16,
    pub(super) held: VecDeque<Held<H>>,
    pub(super) pacer: Pacer,
    pub(super) delay: Duration,
    pub(super) rtt: RttEstimator,
    /// The sender's SRTT as the ACKs let go make it (`rto_guard`).
    pub(super) sender_rto: SenderRto,
    pub(super) period: Period,
    /// 1-bit: the moving share of marked data packets (the delay estimate's input).
    pub(super) mark_share: MarkShare,
    pub(super) mss: u32,
    pub(super) cwnd_estimate: f64,
    pub(super) last_ack: Option<(u32, u16)>,
    pub(super) last_seen: Instant,
    pub(super) stats: FlowCounts,
}

#[derive(Default)]
pub(super) struct FlowCounts {
    pub(super) data_packets: u64,
    pub(super) data_bytes: u64,
    pub(super) data_without_timestamps: u64,
    pub(super) ce_marked: u64,
    pub(super) delays_read: u64,
    pub(super) held: u64,
    pub(super) released_on_time: u64,
    pub(super) flushed: u64,
    pub(super) max_hold: Duration,
    /// Sum of the holds of the ACKs released on time (their mean is the delay imposed).
    pub(super) total_hold: Duration,
    pub(super) passed: PassCounts,
    pub(super) increases: u64,
    pub(super) decreases: u64,
    pub(super) capped: u64,
    pub(super) periods: u64,
}

impl<H> Flow<H> {
    /// When a held packet due at `release_at` may leave: then, or at the pacer's slot if
    /// pacing and that is later.
    pub(super) fn leaves_at(&self, pacing: Option<f64>, release_at: Instant) -> Instant {
        pacing
            .and(self.pacer.slot())
            .map_or(release_at, |s| s.max(release_at))
    }

    pub(super) fn new(remote_port: u16, now: Instant, first_period: Duration) -> Self {
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
pub(super) struct Exit<'a, H> {
    pub(super) released: &'a mut VecDeque<H>,
    pub(super) counters: &'a mut Counters,
    pub(super) held_now: &'a mut usize,
    pub(super) log: &'a mut ReleaseLog,
    /// The path RTT of a flow without an estimate (what the sender's SRTT copy adds holds to).
    pub(super) default_rtt: Duration,
}

impl<H> Exit<'_, H> {
    pub(super) fn pass(&mut self, flow: Option<&mut Flow<H>>, handle: H, reason: PassReason) {
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

    pub(super) fn release(
        &mut self,
        flow: &mut Flow<H>,
        held: Held<H>,
        now: Instant,
        on_time: bool,
    ) {
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
    pub(super) fn paced(&mut self, wait: Duration) {
        self.counters.paced += 1;
        let us = u64::try_from(wait.as_micros()).unwrap_or(u64::MAX);
        self.counters.max_pace_wait_us = self.counters.max_pace_wait_us.max(us);
    }

    pub(super) fn flush(&mut self, flow: &mut Flow<H>, now: Instant) {
        while let Some(h) = flow.held.pop_front() {
            self.release(flow, h, now, false);
        }
    }
}

/// Which outgoing packets pass at once regardless of the delay.
pub(super) fn classify<H>(seg: &Segment, flow: &Flow<H>) -> Option<PassReason> {
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
pub(super) fn decide<H>(flow: &mut Flow<H>, law: &OneBitLaw, cfg: &AgentConfig, now: Instant) {
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
