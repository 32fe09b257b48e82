//! Which units stay decodable when some are dropped, at the sender ([`SenderTracker`]).
//!
//! The rule is deliberately coarse, because most encoders do not say which frame a frame
//! references (H.264 and H.265 reference picture lists are in slice headers that depend on the
//! SPS/PPS; VP8's refresh flags are bool-coded; AV1's are deep in the frame header). It only
//! uses what [`UnitInfo`] carries, and it errs on the side of dropping:
//! - a [`Keyframe`](FrameKind::Keyframe) lost: every later unit until the next keyframe is
//!   undecodable;
//! - a [`Reference`](FrameKind::Reference) unit in temporal layer `T` lost: every later unit in
//!   layer `T` or above until the next keyframe (in a flat stream, all layers 0, that is every
//!   later unit: an IPPP chain breaks at the lost P). H.264 §8.2.5 and H.265 §8.3.2 allow a
//!   reference to be used until the next IDR, so the break lasts until the keyframe, not the
//!   next reference;
//! - a [`NonReference`](FrameKind::NonReference) unit lost: nothing else (H.264 `nal_ref_idc`
//!   0; H.265 `_N` pictures only in the highest temporal sub-layer, see [`super::h265`]);
//! - after a break, the H.265 RASL pictures that follow the next (CRA) keyframe reference
//!   pictures from before it and are dropped too; the first non-RASL picture ends that. A
//!   lost RASL picture breaks only the RASL pictures after it (H.265 §8.3.2: trailing
//!   pictures never reference one);
//! - parameter sets are a unit of their own ([`FrameKind::ParameterSets`], split off the
//!   picture by the H.264/H.265 framers): they are never dropped by this rule, and the sender
//!   sends them without a deadline. Should one be lost anyway it counts as a lost keyframe.
//!   Re-inserting them before the next keyframe was the alternative; splitting keeps the
//!   units immutable and the rule the same for every codec.
//!
//! Before the first keyframe nothing is decodable (a pipe joined mid-stream).
//!
//! The same rule drives the receiver ([`super::gate`]); [`Chain`] is the state both walk.

use std::collections::VecDeque;

use super::{FrameKind, UnitInfo};

/// Why a unit did not reach the decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DropReason {
    /// The application cancelled it.
    Cancelled,
    /// Its deadline passed before it was sent.
    Expired,
    /// It never arrived (the receiver saw a gap or a cancel notice).
    Lost,
    /// A unit it depends on was dropped.
    DependencyBroken,
    /// The receiver's output is stopped until the next keyframe.
    WaitingForKeyframe,
    /// It arrived after a later unit (the receiver takes units in decode order).
    OutOfOrder,
    /// The sender's queue was over its byte limit when the unit came (a source faster than
    /// the network for longer than the latency budget).
    QueueFull,
}

/// Units dropped, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DropCounters {
    pub cancelled: u64,
    pub expired: u64,
    pub lost: u64,
    pub dependency_broken: u64,
    pub waiting_for_keyframe: u64,
    pub out_of_order: u64,
    pub queue_full: u64,
}

impl DropCounters {
    /// Counts one drop.
    pub fn count(&mut self, reason: DropReason) {
        let c = match reason {
            DropReason::Cancelled => &mut self.cancelled,
            DropReason::Expired => &mut self.expired,
            DropReason::Lost => &mut self.lost,
            DropReason::DependencyBroken => &mut self.dependency_broken,
            DropReason::WaitingForKeyframe => &mut self.waiting_for_keyframe,
            DropReason::OutOfOrder => &mut self.out_of_order,
            DropReason::QueueFull => &mut self.queue_full,
        };
        *c = c.saturating_add(1);
    }

    /// All drops.
    pub fn total(&self) -> u64 {
        [
            self.cancelled,
            self.expired,
            self.lost,
            self.dependency_broken,
            self.waiting_for_keyframe,
            self.out_of_order,
            self.queue_full,
        ]
        .iter()
        .fold(0u64, |a, &b| a.saturating_add(b))
    }
}

/// The decodability state after a prefix of the stream in decode order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chain {
    /// Units in this temporal layer or above are undecodable until the next keyframe.
    broken_from: Option<u8>,
    /// RASL pictures after the current keyframe are undecodable.
    rasl_broken: bool,
}

impl Default for Chain {
    /// The start of a stream: waiting for a keyframe.
    fn default() -> Self {
        Self {
            broken_from: Some(0),
            rasl_broken: true,
        }
    }
}

impl Chain {
    /// Whether `u` would decode after the units seen so far.
    pub fn decodable(&self, u: &UnitInfo) -> bool {
        match u.kind {
            FrameKind::ParameterSets | FrameKind::Keyframe => true,
            _ if u.skipped_at_random_access && self.rasl_broken => false,
            _ => self.broken_from.is_none_or(|t| u.temporal_id < t),
        }
    }

    /// Whether output is stopped for every layer until a keyframe.
    pub fn waiting_for_keyframe(&self) -> bool {
        self.broken_from == Some(0)
    }

    /// Whether some layer is undecodable until a keyframe.
    pub fn is_broken(&self) -> bool {
        self.broken_from.is_some()
    }

    /// Steps over `u`, which reached the decoder if `delivered`; returns whether it decodes
    /// (false whenever it was not delivered).
    pub fn step(&mut self, u: &UnitInfo, delivered: bool) -> bool {
        let ok = self.decodable(u) && delivered;
        match u.kind {
            FrameKind::Keyframe if ok => {
                self.rasl_broken = self.broken_from.is_some();
                self.broken_from = None;
            }
            FrameKind::ParameterSets => {}
            _ if !u.skipped_at_random_access => self.rasl_broken = false,
            _ => {}
        }
        if !ok && u.skipped_at_random_access {
            // Only RASL pictures reference RASL pictures (H.265 §8.3.2: none is in a
            // trailing picture's reference picture set).
            self.rasl_broken = true;
        } else if !ok {
            let from = match u.kind {
                FrameKind::Keyframe | FrameKind::ParameterSets => Some(0),
                FrameKind::Reference => Some(u.temporal_id),
                FrameKind::NonReference => None,
            };
            if let Some(t) = from {
                self.broken_from = Some(self.broken_from.map_or(t, |b| b.min(t)));
            }
        }
        ok
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Pending,
    Dropped,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    info: UnitInfo,
    fate: Fate,
}

/// The sender's view: the units produced since the keyframe before the last one, which were
/// dropped, and what a new drop takes with it. Memory: at most `max_tracked` entries (a GOP
/// longer than that is tracked conservatively: a drop older than the window breaks the
/// stream until the next keyframe).
///
/// ```
/// use lowtide_media::encoded::{DropReason, FrameKind::*, SenderTracker, UnitInfo};
/// let mut t = SenderTracker::new(1024);
/// for (i, k) in [Keyframe, Reference, NonReference, Reference, Keyframe].into_iter().enumerate() {
///     assert!(t.produce(UnitInfo::new(i as u64, k)), "all decodable so far");
/// }
/// // Losing the P at 1 takes the B and P after it, up to the keyframe at 4.
/// assert_eq!(t.drop_unit(1, DropReason::Expired), vec![2, 3]);
/// assert!(t.produce(UnitInfo::new(5, Reference)));
/// assert_eq!((t.counters().expired, t.counters().dependency_broken), (1, 2));
/// ```
#[derive(Debug, Clone)]
pub struct SenderTracker {
    max_tracked: usize,
    /// The state before `window`'s first entry.
    base: Chain,
    window: VecDeque<Entry>,
    /// The state after the window's last entry.
    head: Chain,
    /// Entries were pruned for the cap since the last keyframe.
    pruned_mid_gop: bool,
    counters: DropCounters,
}

impl SenderTracker {
    /// A tracker keeping at most `max_tracked` units (at least 1).
    pub fn new(max_tracked: usize) -> Self {
        Self {
            max_tracked: max_tracked.max(1),
            base: Chain::default(),
            window: VecDeque::new(),
            head: Chain::default(),
            pruned_mid_gop: false,
            counters: DropCounters::default(),
        }
    }

    /// Drops counted so far (the reason given to [`Self::drop_unit`], and
    /// `dependency_broken` for what the rule took with it).
    pub fn counters(&self) -> &DropCounters {
        &self.counters
    }

    /// Whether units produced now are undecodable until the next keyframe in some layer (the
    /// encoder should be asked for one).
    pub fn is_broken(&self) -> bool {
        self.head.is_broken()
    }

    /// A new unit from the encoder, in decode order. Returns `false` if it cannot be decoded
    /// because of earlier drops: do not send it (it is counted as dependency-broken).
    pub fn produce(&mut self, info: UnitInfo) -> bool {
        if info.kind == FrameKind::Keyframe {
            self.prune_before_previous_keyframe();
        }
        let ok = self.head.step(&info, true);
        let fate = if ok { Fate::Pending } else { Fate::Dropped };
        if !ok {
            self.counters.count(DropReason::DependencyBroken);
        }
        self.window.push_back(Entry { info, fate });
        while self.window.len() > self.max_tracked {
            self.pop_front();
            self.pruned_mid_gop = true;
        }
        ok
    }

    /// Unit `index` was dropped for `reason`. Returns the later units, in order, that can no
    /// longer be decoded and should be cancelled too (each counted as dependency-broken;
    /// units already sent are listed as well: the receiver's gate will drop them).
    pub fn drop_unit(&mut self, index: u64, reason: DropReason) -> Vec<u64> {
        self.counters.count(reason);
        let Some(pos) = self.window.iter().position(|e| e.info.index == index) else {
            let older = self.window.front().is_some_and(|e| index < e.info.index);
            if older && self.pruned_mid_gop {
                // It may be a reference of the current GOP: break it all.
                self.base
                    .step(&UnitInfo::new(index, FrameKind::Keyframe), false);
                return self.rewalk();
            }
            return Vec::new();
        };
        if self.window[pos].fate == Fate::Dropped {
            return Vec::new();
        }
        self.window[pos].fate = Fate::Dropped;
        self.rewalk()
    }

    /// Recomputes every entry's fate from `base`; returns the newly dropped.
    fn rewalk(&mut self) -> Vec<u64> {
        let mut chain = self.base;
        let mut newly = Vec::new();
        for e in &mut self.window {
            let ok = chain.step(&e.info, e.fate == Fate::Pending);
            if !ok && e.fate == Fate::Pending {
                e.fate = Fate::Dropped;
                newly.push(e.info.index);
            }
        }
        self.head = chain;
        for _ in &newly {
            self.counters.count(DropReason::DependencyBroken);
        }
        newly
    }

    fn pop_front(&mut self) {
        if let Some(e) = self.window.pop_front() {
            self.base.step(&e.info, e.fate == Fate::Pending);
        }
    }

    /// Keeps the window from the last keyframe on (a drop before it can still break the RASL
    /// pictures after it), so a new keyframe's GOP and the one before it are tracked.
    fn prune_before_previous_keyframe(&mut self) {
        self.pruned_mid_gop = false;
        let last_key = self
            .window
            .iter()
            .rposition(|e| e.info.kind == FrameKind::Keyframe);
        for _ in 0..last_key.unwrap_or(0) {
            self.pop_front();
        }
    }

    /// Units tracked now.
    pub fn tracked(&self) -> usize {
        self.window.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use FrameKind::*;

    fn stream(t: &mut SenderTracker, kinds: &[(FrameKind, u8)]) {
        for (i, &(k, tid)) in kinds.iter().enumerate() {
            t.produce(UnitInfo::new(i as u64, k).layer(tid));
        }
    }

    #[test]
    fn ippp_breaks_until_the_keyframe() {
        let mut t = SenderTracker::new(64);
        let k = [
            Keyframe, Reference, Reference, Reference, Keyframe, Reference,
        ];
        stream(&mut t, &k.map(|k| (k, 0)));
        assert_eq!(t.drop_unit(2, DropReason::Lost), vec![3]);
        assert!(!t.is_broken());
        assert_eq!(t.drop_unit(4, DropReason::Expired), vec![5]);
        assert!(t.is_broken());
        assert!(!t.produce(UnitInfo::new(6, Reference)));
        assert!(!t.produce(UnitInfo::new(7, NonReference)));
        assert!(t.produce(UnitInfo::new(8, ParameterSets)));
        assert!(t.produce(UnitInfo::new(9, Keyframe)));
        assert_eq!(t.counters().dependency_broken, 4);
    }

    #[test]
    fn non_reference_breaks_nothing() {
        let mut t = SenderTracker::new(64);
        stream(&mut t, &[(Keyframe, 0), (NonReference, 0), (Reference, 0)]);
        assert!(t.drop_unit(1, DropReason::Cancelled).is_empty());
        assert!(!t.is_broken());
        assert!(
            t.drop_unit(1, DropReason::Cancelled).is_empty(),
            "twice is harmless"
        );
    }

    #[test]
    fn temporal_layers_break_upwards() {
        let mut t = SenderTracker::new(64);
        let s = [
            (Keyframe, 0),
            (Reference, 2),
            (Reference, 1),
            (Reference, 2),
            (Reference, 0),
        ];
        stream(&mut t, &s);
        assert_eq!(t.drop_unit(2, DropReason::Expired), vec![3]);
        assert!(t.produce(UnitInfo::new(5, Reference).layer(0)));
        assert!(!t.produce(UnitInfo::new(6, NonReference).layer(1)));
    }

    #[test]
    fn rasl_after_a_broken_gop_is_dropped() {
        let mut t = SenderTracker::new(64);
        let rasl = UnitInfo {
            skipped_at_random_access: true,
            ..UnitInfo::new(3, Reference)
        };
        stream(&mut t, &[(Keyframe, 0), (Reference, 0), (Keyframe, 0)]);
        t.produce(rasl);
        t.produce(UnitInfo::new(4, Reference));
        assert_eq!(t.drop_unit(1, DropReason::Lost), vec![3]);
        // Without a break the RASL picture is kept.
        let mut u = SenderTracker::new(64);
        stream(&mut u, &[(Keyframe, 0), (Reference, 0), (Keyframe, 0)]);
        assert!(u.produce(rasl));
    }

    #[test]
    fn nothing_before_the_first_keyframe_and_memory_is_bounded() {
        let mut t = SenderTracker::new(8);
        assert!(!t.produce(UnitInfo::new(0, Reference)));
        for i in 1..100 {
            let kind = if i % 10 == 1 { Keyframe } else { Reference };
            assert!(t.produce(UnitInfo::new(i, kind)));
            assert!(t.tracked() <= 8);
        }
        // The GOP of 10 is longer than the cap: 92..=99 are tracked, 95 breaks the rest.
        assert_eq!(t.drop_unit(95, DropReason::Lost), vec![96, 97, 98, 99]);
    }

    #[test]
    fn old_drop_after_cap_pruning_breaks_conservatively() {
        let mut t = SenderTracker::new(4);
        t.produce(UnitInfo::new(0, Keyframe));
        for i in 1..10 {
            t.produce(UnitInfo::new(i, Reference));
        }
        assert_eq!(t.drop_unit(2, DropReason::Lost), vec![6, 7, 8, 9]);
        assert!(!t.produce(UnitInfo::new(10, Reference)));
    }
}
