//! One viewer's queue without the I/O: which of the stream's units this viewer gets, in
//! decode order, and which it does not and why. The connection ([`super::connection`]) pops a
//! unit only when the viewer's latency controller lets it write, so a slow viewer's queue is
//! where its units wait and are dropped, never the kernel's buffer and never another viewer.
//!
//! The rules, in decode order at [`ViewerQueue::pop`]:
//! - parameter sets always go (they are small and every later keyframe needs them);
//! - a unit whose references this viewer did not get is dropped (`dependency-broken`): the
//!   [`Chain`] rule of the encoded-video model, so the viewer's decoder never sees a unit
//!   it cannot decode; after a break the viewer waits for the next keyframe;
//! - a unit that cannot be on the wire within the latency budget since it reached the
//!   server (its wait here plus the time the kernel's queue takes to leave) is dropped
//!   (`expired`), and with it what depends on it;
//! - a late keyframe that ends a wait for one is sent anyway, unless a newer keyframe is
//!   queued: without it a path that stays slower than the budget would show nothing;
//! - units the viewer was given to catch up at join (the stream's current group of
//!   pictures) have no deadline: without them the keyframe they follow is useless.
//!
//! At [`ViewerQueue::push`] the queue stays within its byte bound by dropping from the front
//! (`queue-full`), parameter sets excepted. Before its first keyframe a viewer that joined
//! without a catch-up ignores units silently: that is not a drop, the viewer had not started.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lowtide_media::encoded::{Chain, FrameKind};

use crate::hub::HubUnit;
use crate::viewer_wire::DropReason;

/// A viewer queue's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueConfig {
    /// A unit is useless this long after it reached the server.
    pub latency: Duration,
    /// Bytes of units queued at most.
    pub max_bytes: usize,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            latency: Duration::from_millis(300),
            max_bytes: 4 << 20,
        }
    }
}

/// A unit to send and whether it came as part of the join's catch-up.
#[derive(Debug, Clone)]
pub struct Next {
    pub unit: Arc<HubUnit>,
    pub catch_up: bool,
}

/// Units by fate for one viewer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueCounters {
    /// Units popped to be sent.
    pub sent: u64,
    pub sent_bytes: u64,
    /// Units not sent, by reason ([`DropReason`] as index − 1).
    pub dropped: [u64; 4],
    /// Breaks of the chain (a keyframe or reference unit dropped): each wants a keyframe.
    pub breaks: u64,
}

/// One viewer's queue (see the module doc).
#[derive(Debug)]
pub struct ViewerQueue {
    cfg: QueueConfig,
    units: VecDeque<Next>,
    bytes: usize,
    chain: Chain,
    started: bool,
    /// Drops not yet told to the viewer, by reason.
    untold: [u32; 4],
    counters: QueueCounters,
    /// A break happened since [`Self::take_break`].
    broke: bool,
}

impl ViewerQueue {
    pub fn new(cfg: QueueConfig) -> Self {
        Self {
            cfg,
            units: VecDeque::new(),
            bytes: 0,
            chain: Chain::default(),
            started: false,
            untold: [0; 4],
            counters: QueueCounters::default(),
            broke: false,
        }
    }

    /// Adds the stream's next unit (`catch_up`: part of the join's backlog, no deadline).
    pub fn push(&mut self, unit: Arc<HubUnit>, catch_up: bool) {
        let k = unit.info.kind;
        if !self.started && !matches!(k, FrameKind::Keyframe | FrameKind::ParameterSets) {
            return;
        }
        if k == FrameKind::Keyframe {
            self.started = true;
        }
        self.bytes += unit.data.len();
        self.units.push_back(Next { unit, catch_up });
        self.bound();
    }

    /// Units a publisher lost before the server: told to the viewer and counted. The
    /// chain does not break here: the server's ingest gate already dropped every unit that
    /// depended on them, so what still comes decodes.
    pub fn upstream_lost(&mut self, units: u32) {
        if units > 0 && self.started {
            // Saturating: the hub tells gaps of up to u32::MAX units each.
            let untold = &mut self.untold[DropReason::Upstream as usize - 1];
            *untold = untold.saturating_add(units);
            self.counters.dropped[DropReason::Upstream as usize - 1] += u64::from(units);
        }
    }

    fn bound(&mut self) {
        let mut i = 0;
        while self.bytes > self.cfg.max_bytes && i < self.units.len() {
            if self.units[i].unit.info.kind == FrameKind::ParameterSets {
                i += 1;
                continue;
            }
            let n = self.units.remove(i).expect("index checked");
            self.bytes -= n.unit.data.len();
            self.drop_unit(&n.unit, DropReason::QueueFull);
        }
    }

    fn drop_unit(&mut self, u: &HubUnit, reason: DropReason) {
        let was_broken = self.chain.is_broken();
        self.chain.step(&u.info, false);
        if !was_broken && self.chain.is_broken() {
            self.counters.breaks += 1;
            self.broke = true;
        }
        self.untold[reason as usize - 1] = self.untold[reason as usize - 1].saturating_add(1);
        self.counters.dropped[reason as usize - 1] += 1;
    }

    /// The next unit to send at `now`, dropping by the rules on the way; `None` when empty.
    /// `ahead` is how long the bytes already in the kernel take to leave (the connection
    /// estimates it from the window): a unit that would start on the wire after its
    /// deadline is dropped now rather than sent late, which would only delay the keyframe
    /// that comes next.
    pub fn pop(&mut self, now: Instant, ahead: Duration) -> Option<Next> {
        while let Some(n) = self.units.pop_front() {
            self.bytes -= n.unit.data.len();
            let u = &n.unit;
            if u.info.kind == FrameKind::ParameterSets {
                return Some(self.sent(n));
            }
            if !self.chain.decodable(&u.info) {
                self.drop_unit(&n.unit.clone(), DropReason::DependencyBroken);
                continue;
            }
            let late = now + ahead > u.ingest_at + self.cfg.latency;
            if !n.catch_up && late && !self.resumes(&n) {
                self.drop_unit(&n.unit.clone(), DropReason::Expired);
                continue;
            }
            self.chain.step(&u.info, true);
            return Some(self.sent(n));
        }
        None
    }

    /// A late keyframe that ends a wait for one goes anyway when no newer keyframe is
    /// queued: a path slower than the stream (the kernel's share, about one congestion
    /// window, draining for longer than the budget) would otherwise expire every keyframe
    /// and show nothing until it recovers; this way it shows at least each keyframe.
    fn resumes(&self, n: &Next) -> bool {
        n.unit.info.kind == FrameKind::Keyframe
            && self.chain.waiting_for_keyframe()
            && !self
                .units
                .iter()
                .any(|q| q.unit.info.kind == FrameKind::Keyframe)
    }

    fn sent(&mut self, n: Next) -> Next {
        self.counters.sent += 1;
        self.counters.sent_bytes += n.unit.data.len() as u64;
        n
    }

    /// One reason's drops not yet told to the viewer (then the next reason's).
    pub fn take_untold(&mut self) -> Option<(u32, DropReason)> {
        let i = self.untold.iter().position(|&n| n > 0)?;
        let n = std::mem::take(&mut self.untold[i]);
        Some((n, DropReason::ALL[i]))
    }

    /// Whether the chain broke since the last call (the server may ask for a keyframe).
    pub fn take_break(&mut self) -> bool {
        std::mem::take(&mut self.broke)
    }

    /// Whether this viewer waits for a keyframe (it joined, or its chain broke).
    pub fn waiting_for_keyframe(&self) -> bool {
        !self.started || self.chain.waiting_for_keyframe()
    }

    pub fn counters(&self) -> &QueueCounters {
        &self.counters
    }

    /// Bytes of units queued.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.units.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lowtide_media::encoded::UnitInfo;
    use proptest::prelude::*;
    use FrameKind::*;

    fn unit(index: u64, kind: FrameKind, at: Instant, bytes: usize) -> Arc<HubUnit> {
        Arc::new(HubUnit {
            info: UnitInfo::new(index, kind),
            has_parameter_sets: kind == ParameterSets,
            capture_us: 0,
            ingest_us: 0,
            ingest_at: at,
            data: vec![0; bytes],
        })
    }

    fn popped(q: &mut ViewerQueue, now: Instant) -> Vec<u64> {
        std::iter::from_fn(|| q.pop(now, Duration::ZERO))
            .map(|n| n.unit.info.index)
            .collect()
    }

    #[test]
    fn a_late_joiner_starts_at_a_keyframe_without_counting_drops() {
        let t0 = Instant::now();
        let mut q = ViewerQueue::new(QueueConfig::default());
        for (i, k) in [Reference, NonReference, ParameterSets, Keyframe, Reference]
            .into_iter()
            .enumerate()
        {
            q.push(unit(i as u64, k, t0, 100), false);
        }
        assert_eq!(popped(&mut q, t0), [2, 3, 4]);
        assert_eq!(q.counters().dropped, [0; 4]);
        assert_eq!(q.take_untold(), None);
    }

    #[test]
    fn an_expired_reference_takes_what_depends_on_it_until_the_next_keyframe() {
        let t0 = Instant::now();
        let cfg = QueueConfig {
            latency: Duration::from_millis(100),
            ..QueueConfig::default()
        };
        let mut q = ViewerQueue::new(cfg);
        let late = t0 + Duration::from_millis(150);
        q.push(unit(0, Keyframe, t0, 10), false);
        assert_eq!(popped(&mut q, t0), [0]);
        // 1 is old by the time it is popped; 2 and 3 are fresh but depend on it.
        q.push(unit(1, Reference, t0, 10), false);
        q.push(unit(2, NonReference, late, 10), false);
        q.push(unit(3, Reference, late, 10), false);
        q.push(unit(4, Keyframe, late, 10), false);
        q.push(unit(5, Reference, late, 10), false);
        assert_eq!(popped(&mut q, late), [4, 5]);
        assert_eq!(q.take_untold(), Some((1, DropReason::Expired)));
        assert_eq!(q.take_untold(), Some((2, DropReason::DependencyBroken)));
        assert_eq!(q.take_untold(), None);
        assert!(q.take_break());
        assert!(!q.take_break());
        assert_eq!(q.counters().breaks, 1);
    }

    #[test]
    fn a_late_keyframe_ends_a_wait_unless_a_newer_one_is_queued() {
        let t0 = Instant::now();
        let cfg = QueueConfig {
            latency: Duration::from_millis(100),
            ..QueueConfig::default()
        };
        let late = t0 + Duration::from_millis(500);
        let mut q = ViewerQueue::new(cfg);
        q.push(unit(0, Keyframe, t0, 10), false);
        assert_eq!(popped(&mut q, t0), [0]);
        // 1 expires and breaks the chain; keyframe 2 is late too, but it is the only one.
        q.push(unit(1, Reference, t0, 10), false);
        q.push(unit(2, Keyframe, t0, 10), false);
        q.push(unit(3, Reference, t0, 10), false);
        assert_eq!(popped(&mut q, late), [2]);
        // Two late keyframes queued: only the newer goes.
        q.push(unit(4, Reference, t0, 10), false);
        q.push(unit(5, Keyframe, t0, 10), false);
        q.push(unit(6, Keyframe, t0, 10), false);
        assert_eq!(popped(&mut q, late), [6]);
    }

    #[test]
    fn a_unit_the_kernels_queue_would_make_late_is_dropped_now() {
        let t0 = Instant::now();
        let cfg = QueueConfig {
            latency: Duration::from_millis(200),
            ..QueueConfig::default()
        };
        let mut q = ViewerQueue::new(cfg);
        q.push(unit(0, Keyframe, t0, 10), false);
        q.push(unit(1, Reference, t0, 10), false);
        assert_eq!(
            q.pop(t0, Duration::ZERO).map(|n| n.unit.info.index),
            Some(0)
        );
        // Fresh, but 300 ms of bytes wait in the kernel ahead of it.
        assert!(q.pop(t0, Duration::from_millis(300)).is_none());
        assert_eq!(q.take_untold(), Some((1, DropReason::Expired)));
    }

    #[test]
    fn catch_up_units_have_no_deadline() {
        let t0 = Instant::now();
        let mut q = ViewerQueue::new(QueueConfig::default());
        let much_later = t0 + Duration::from_secs(5);
        q.push(unit(0, ParameterSets, t0, 10), true);
        q.push(unit(1, Keyframe, t0, 10), true);
        q.push(unit(2, Reference, t0, 10), true);
        q.push(unit(3, Reference, much_later, 10), false);
        assert_eq!(popped(&mut q, much_later), [0, 1, 2, 3]);
    }

    #[test]
    fn the_byte_bound_drops_from_the_front_but_keeps_parameter_sets() {
        let t0 = Instant::now();
        let cfg = QueueConfig {
            max_bytes: 250,
            ..QueueConfig::default()
        };
        let mut q = ViewerQueue::new(cfg);
        q.push(unit(0, ParameterSets, t0, 50), false);
        q.push(unit(1, Keyframe, t0, 100), false);
        q.push(unit(2, Reference, t0, 100), false);
        q.push(unit(3, Reference, t0, 100), false);
        assert!(q.bytes() <= 250);
        // The keyframe went: the parameter sets stay, the references are undecodable.
        assert_eq!(popped(&mut q, t0), [0]);
        assert_eq!(q.counters().dropped[DropReason::QueueFull as usize - 1], 1);
        assert_eq!(
            q.counters().dropped[DropReason::DependencyBroken as usize - 1],
            2
        );
        assert!(q.waiting_for_keyframe());
    }

    #[test]
    fn huge_upstream_gaps_saturate_the_untold_count_instead_of_overflowing() {
        // A publisher's index may jump by up to u64::MAX; the hub tells each gap clamped to
        // u32::MAX, and two of them before the viewer is told must not overflow.
        let t0 = Instant::now();
        let mut q = ViewerQueue::new(QueueConfig::default());
        q.push(unit(0, Keyframe, t0, 10), false);
        q.upstream_lost(u32::MAX);
        q.upstream_lost(u32::MAX);
        assert_eq!(
            q.counters().dropped[DropReason::Upstream as usize - 1],
            2 * u64::from(u32::MAX)
        );
        assert_eq!(q.take_untold(), Some((u32::MAX, DropReason::Upstream)));
        assert_eq!(q.take_untold(), None);
    }

    proptest! {
        /// Whatever arrives and whenever it is popped: every unit is sent or counted as
        /// dropped exactly once, the queue stays within its bound (parameter sets aside), and
        /// no unit is sent whose references were not (the decoder's view, replayed).
        #[test]
        fn sent_units_always_decode_and_every_unit_is_accounted_for(
            kinds in proptest::collection::vec(0u8..4, 1..200),
            gaps in proptest::collection::vec(0u64..80, 1..200),
            pops in proptest::collection::vec(any::<bool>(), 1..200),
        ) {
            let t0 = Instant::now();
            let cfg = QueueConfig { latency: Duration::from_millis(100), max_bytes: 1000 };
            let mut q = ViewerQueue::new(cfg);
            let mut now = t0;
            let mut sent = Vec::new();
            let mut pushed_after_start = 0u64;
            let mut all = Vec::new();
            for (i, k) in kinds.iter().enumerate() {
                let kind = [ParameterSets, Keyframe, Reference, NonReference][*k as usize];
                now += Duration::from_millis(gaps[i % gaps.len()]);
                let was_started = q.started || kind == Keyframe || kind == ParameterSets;
                q.push(unit(i as u64, kind, now, 300), false);
                all.push(UnitInfo::new(i as u64, kind));
                if was_started { pushed_after_start += 1; }
                let params: usize = q.units.iter().filter(|n| n.unit.info.kind == ParameterSets).map(|n| n.unit.data.len()).sum();
                prop_assert!(q.bytes() <= 1000 + params);
                if pops[i % pops.len()] {
                    while let Some(n) = q.pop(now, Duration::ZERO) { sent.push(n.unit.info); }
                }
            }
            now += Duration::from_secs(1);
            while let Some(n) = q.pop(now, Duration::ZERO) { sent.push(n.unit.info); }
            let dropped: u64 = q.counters().dropped.iter().sum();
            prop_assert_eq!(sent.len() as u64 + dropped, pushed_after_start);
            // The decoder's view: every unit of the stream in order, delivered or missing.
            let mut decoder = Chain::default();
            for u in &all {
                let delivered = sent.iter().any(|s| s.index == u.index);
                let decodes = decoder.step(u, delivered);
                prop_assert_eq!(decodes, delivered, "unit {} sent undecodable", u.index);
            }
        }
    }
}
