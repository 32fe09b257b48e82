//! The sender of an encoded stream over lowtide, without the I/O: which units to send and
//! with what importance and deadline, and what a drop takes with it.
//!
//! The driver (`crate::pipe`) calls, in this order:
//! 1. [`EncodedSender::admit`] for each unit the [`super::input::UnitReader`] produced: it
//!    answers with the message to send ([`Admit::Send`]) or why the unit is not sent
//!    ([`Admit::Skip`]: a reference it needs was dropped, or the queue is over its byte
//!    limit);
//! 2. [`EncodedSender::queued`] with the message's id once lowtide took it;
//! 3. from the channel's events: [`EncodedSender::written`], and
//!    [`EncodedSender::dropped`] for a message cancelled or expired, which returns the ids of
//!    the queued messages that depend on it: cancel them;
//! 4. [`EncodedSender::poll_notice`] after each of these: a dropped-units notice to send
//!    ([`super::wire`]), so the receiver's gate knows what will not come.
//!
//! The message ids are a type parameter (`lowtide::MessageId` in the driver, plain numbers in
//! tests). Parameter sets go without a deadline and are never skipped or cancelled by the
//! rule ([`super::dependency`]); the stream's start message and the notices go at the
//! highest importance, without a deadline.
//!
//! Memory: the tracker's window (`max_tracked` units), one entry per message lowtide holds,
//! and the notices not yet taken; the messages themselves are bounded by `max_queued_bytes`
//! (lowtide's queue) because a unit that would go over it is skipped, except parameter sets.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

use super::wire::{self, StreamStart, UnitHeader};
use super::{AccessUnit, DropCounters, DropReason, FrameKind, SenderTracker, UnitInfo};

/// How the sender schedules units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SenderConfig {
    /// A unit's deadline is its capture time plus this.
    pub latency: Duration,
    /// A unit is skipped (dropped by rule, [`DropReason::QueueFull`]) if lowtide already holds
    /// this many bytes; parameter sets are sent anyway.
    pub max_queued_bytes: u64,
    /// Units the dependency tracker remembers ([`SenderTracker::new`]).
    pub max_tracked: usize,
}

impl Default for SenderConfig {
    fn default() -> Self {
        Self {
            latency: Duration::from_millis(200),
            max_queued_bytes: 64 << 20,
            max_tracked: 4096,
        }
    }
}

/// A message for lowtide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// Header and unit ([`super::wire`]).
    pub data: Vec<u8>,
    pub importance: u8,
    /// `None` for parameter sets and control messages.
    pub deadline: Option<Instant>,
}

/// What to do with a unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admit {
    /// Send this message, then tell [`EncodedSender::queued`] its id.
    Send(Outgoing),
    /// Do not send the unit (already counted, and listed in the next notice).
    Skip(DropReason),
}

/// Units by fate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SenderCounters {
    /// Units the reader produced.
    pub units: u64,
    /// Units handed to lowtide.
    pub sent: u64,
    /// Units written whole to the kernel.
    pub written: u64,
    /// Bytes of units (with headers) handed to lowtide.
    pub bytes_sent: u64,
}

#[derive(Debug, Clone, Copy)]
struct Queued {
    info: UnitInfo,
    /// Cancelled by the rule (its Cancelled event is not a new drop).
    cancelling: bool,
}

/// The sender's state (see the module doc).
///
/// ```
/// use std::time::{Duration, Instant};
/// use lowtide_media::encoded::sender::{Admit, EncodedSender, SenderConfig};
/// use lowtide_media::encoded::{AccessUnit, Codec, DropReason, FrameKind};
/// let now = Instant::now();
/// let unit = |index, kind| AccessUnit {
///     codec: Codec::Vp8, index, data: vec![0; 100], kind, temporal_id: 0,
///     has_parameter_sets: false, skipped_at_random_access: false, pts: Some(index), capture: now,
/// };
/// let mut s = EncodedSender::<u32>::new(SenderConfig::default());
/// for (id, kind) in [FrameKind::Keyframe, FrameKind::Reference, FrameKind::Reference].into_iter().enumerate() {
///     let Admit::Send(m) = s.admit(&unit(id as u64, kind), now, 0) else { panic!() };
///     assert_eq!(m.deadline, Some(now + Duration::from_millis(200)));
///     s.queued(id as u32);
/// }
/// // Unit 1 expired: unit 2, still queued, is to be cancelled too.
/// assert_eq!(s.dropped(1, DropReason::Expired), vec![2]);
/// ```
/// A unit's fate at the sender (see [`EncodedSender::record_fates`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Written whole to the kernel.
    Written,
    /// Not sent: [`EncodedSender::admit`] skipped it (`Expired` there: past its deadline
    /// when it came).
    Skipped(DropReason),
    /// Sent to lowtide, then dropped there (`DependencyBroken`: cancelled by the rule).
    Dropped(DropReason),
}

/// Fates kept for [`EncodedSender::poll_fate`] at most (the oldest go first).
const MAX_FATES: usize = 1 << 16;

#[derive(Debug, Clone)]
pub struct EncodedSender<K> {
    cfg: SenderConfig,
    tracker: SenderTracker,
    /// Messages lowtide holds, by id.
    queued: HashMap<K, Queued>,
    /// The id of each unit lowtide holds, by unit index.
    ids: HashMap<u64, K>,
    /// The first unit's capture time (the header's `capture_us` counts from it).
    epoch: Option<Instant>,
    notices: Vec<UnitInfo>,
    /// The unit last answered with [`Admit::Send`], until [`Self::queued`].
    admitted: Option<UnitInfo>,
    counters: SenderCounters,
    /// Units' fates by index, once [`Self::record_fates`] was called.
    fates: Option<std::collections::VecDeque<(u64, Fate)>>,
}

impl<K: Copy + Eq + Hash> EncodedSender<K> {
    /// A sender scheduling by `cfg`.
    pub fn new(cfg: SenderConfig) -> Self {
        Self {
            cfg,
            tracker: SenderTracker::new(cfg.max_tracked),
            queued: HashMap::new(),
            ids: HashMap::new(),
            epoch: None,
            notices: Vec::new(),
            admitted: None,
            counters: SenderCounters::default(),
            fates: None,
        }
    }

    /// From now on, keeps each unit's fate (by unit index) for [`Self::poll_fate`]; at most
    /// 65536 unpolled, the oldest dropped first.
    pub fn record_fates(&mut self) {
        self.fates.get_or_insert_with(Default::default);
    }

    /// The oldest fate not polled yet, as (unit index, fate).
    pub fn poll_fate(&mut self) -> Option<(u64, Fate)> {
        self.fates.as_mut()?.pop_front()
    }

    fn fate(&mut self, index: u64, fate: Fate) {
        if let Some(f) = self.fates.as_mut() {
            if f.len() >= MAX_FATES {
                f.pop_front();
            }
            f.push_back((index, fate));
        }
    }

    /// The stream's first message: send it before any unit.
    pub fn start_message(start: &StreamStart) -> Outgoing {
        Outgoing {
            data: wire::encode_start(start),
            importance: u8::MAX,
            deadline: None,
        }
    }

    /// The stream's last message, after every unit: the number of units.
    pub fn end_message(&self) -> Outgoing {
        Outgoing {
            data: wire::encode_end(self.counters.units),
            importance: u8::MAX,
            deadline: None,
        }
    }

    /// Units by fate.
    pub fn counters(&self) -> &SenderCounters {
        &self.counters
    }

    /// Units dropped, by reason (what the rule took with a drop is `dependency_broken`).
    pub fn drops(&self) -> &DropCounters {
        self.tracker.counters()
    }

    /// Messages lowtide holds whose fate is not known yet.
    pub fn in_flight(&self) -> usize {
        self.queued.len()
    }

    /// Whether units produced now cannot be decoded until the next keyframe (an encoder,
    /// if there were one to ask, should send one).
    pub fn is_broken(&self) -> bool {
        self.tracker.is_broken()
    }

    /// Decides about `unit`, read at `now`, with lowtide holding `queued_bytes`.
    pub fn admit(&mut self, unit: &AccessUnit, now: Instant, queued_bytes: u64) -> Admit {
        let info = unit.info();
        self.counters.units = self.counters.units.max(info.index.saturating_add(1));
        let epoch = *self.epoch.get_or_insert(unit.capture);
        if !self.tracker.produce(info) {
            self.notices.push(info);
            self.fate(info.index, Fate::Skipped(DropReason::DependencyBroken));
            return Admit::Skip(DropReason::DependencyBroken);
        }
        let parameter_sets = unit.kind == FrameKind::ParameterSets;
        let deadline = (!parameter_sets).then(|| unit.deadline(self.cfg.latency));
        let skip = if deadline.is_some_and(|d| d <= now) {
            Some(DropReason::Expired)
        } else if !parameter_sets
            && queued_bytes.saturating_add(unit.data.len() as u64) > self.cfg.max_queued_bytes
        {
            Some(DropReason::QueueFull)
        } else {
            None
        };
        if let Some(reason) = skip {
            // The newest unit: nothing later depends on it yet, so nothing is to cancel.
            self.tracker.drop_unit(info.index, reason);
            self.notices.push(info);
            self.fate(info.index, Fate::Skipped(reason));
            return Admit::Skip(reason);
        }
        let header = UnitHeader {
            codec: unit.codec,
            info,
            has_parameter_sets: unit.has_parameter_sets,
            capture_us: unit.capture.saturating_duration_since(epoch).as_micros() as u64,
            pts: unit.pts,
        };
        let data = wire::encode_unit(&header, &unit.data);
        self.admitted = Some(info);
        self.counters.sent += 1;
        self.counters.bytes_sent += data.len() as u64;
        Admit::Send(Outgoing {
            data,
            importance: unit.importance(),
            deadline,
        })
    }

    /// Lowtide took the message of the unit [`Self::admit`] last answered [`Admit::Send`]
    /// for as `id`.
    pub fn queued(&mut self, id: K) {
        let Some(info) = self.admitted.take() else {
            return;
        };
        self.queued.insert(
            id,
            Queued {
                info,
                cancelling: false,
            },
        );
        self.ids.insert(info.index, id);
    }

    /// Message `id` was written whole to the kernel.
    pub fn written(&mut self, id: K) {
        if let Some(q) = self.queued.remove(&id) {
            self.ids.remove(&q.info.index);
            self.counters.written += 1;
            self.fate(q.info.index, Fate::Written);
        }
    }

    /// Message `id` was cancelled or expired (`reason`): returns the ids of the queued
    /// messages that depend on it, to cancel (a cancel that comes too late is harmless: the
    /// receiver's gate drops the unit).
    pub fn dropped(&mut self, id: K, reason: DropReason) -> Vec<K> {
        let Some(q) = self.queued.remove(&id) else {
            return Vec::new();
        };
        self.ids.remove(&q.info.index);
        self.notices.push(q.info);
        if q.cancelling {
            // Counted as dependency-broken when the rule cancelled it.
            self.fate(q.info.index, Fate::Dropped(DropReason::DependencyBroken));
            return Vec::new();
        }
        self.fate(q.info.index, Fate::Dropped(reason));
        let mut cancel = Vec::new();
        for index in self.tracker.drop_unit(q.info.index, reason) {
            let Some(&dep) = self.ids.get(&index) else {
                continue;
            };
            if let Some(d) = self.queued.get_mut(&dep) {
                d.cancelling = true;
                cancel.push(dep);
            }
        }
        cancel
    }

    /// A dropped-units notice for the receiver, if units were dropped since the last one.
    pub fn poll_notice(&mut self) -> Option<Outgoing> {
        if self.notices.is_empty() {
            return None;
        }
        let n = self.notices.len().min(wire::MAX_DROPPED_PER_NOTICE);
        let units: Vec<UnitInfo> = self.notices.drain(..n).collect();
        Some(Outgoing {
            data: wire::encode_dropped(&units),
            importance: u8::MAX,
            deadline: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoded::wire::{decode, WireMessage};
    use crate::encoded::Codec;
    use FrameKind::*;

    fn unit(index: u64, kind: FrameKind, capture: Instant) -> AccessUnit {
        AccessUnit {
            codec: Codec::H264,
            index,
            data: vec![0; 1000],
            kind,
            temporal_id: 0,
            has_parameter_sets: kind == ParameterSets,
            skipped_at_random_access: false,
            pts: None,
            capture,
        }
    }

    /// Sends `kinds` from index 0 at `now`, each queued with its index as id.
    fn send_all(s: &mut EncodedSender<u64>, kinds: &[FrameKind], now: Instant) -> Vec<Outgoing> {
        let mut out = Vec::new();
        for (i, &k) in kinds.iter().enumerate() {
            let Admit::Send(m) = s.admit(&unit(i as u64, k, now), now, 0) else {
                panic!("unit {i} skipped");
            };
            s.queued(i as u64);
            out.push(m);
        }
        out
    }

    fn noticed(s: &mut EncodedSender<u64>) -> Vec<u64> {
        let Some(n) = s.poll_notice() else {
            return Vec::new();
        };
        assert_eq!((n.importance, n.deadline), (u8::MAX, None));
        let Ok(WireMessage::Dropped(units)) = decode(&n.data) else {
            panic!("not a notice");
        };
        units.iter().map(|u| u.index).collect()
    }

    #[test]
    fn an_expired_unit_cancels_its_dependents_and_keeps_parameter_sets() {
        let now = Instant::now();
        let mut s = EncodedSender::new(SenderConfig::default());
        let kinds = [
            ParameterSets,
            Keyframe,
            Reference,
            Reference,
            ParameterSets,
            Keyframe,
            Reference,
        ];
        let sent = send_all(&mut s, &kinds, now);
        // Importance and deadline by kind: parameter sets none, others capture + budget.
        assert_eq!(sent[0].deadline, None);
        assert_eq!(sent[0].importance, 15);
        assert_eq!(sent[1].importance, 14);
        assert_eq!(sent[2].deadline, Some(now + Duration::from_millis(200)));
        // The P at 2 expired: the P at 3 is cancelled; the parameter sets at 4 and the GOP
        // from the keyframe at 5 are kept.
        assert_eq!(s.dropped(2, DropReason::Expired), vec![3]);
        assert_eq!(noticed(&mut s), vec![2]);
        // lowtide reports the cancel: no new drop, no double count; the receiver is told.
        assert!(s.dropped(3, DropReason::Cancelled).is_empty());
        assert_eq!(noticed(&mut s), vec![3]);
        for id in [0, 1, 4, 5, 6] {
            s.written(id);
        }
        assert_eq!(s.in_flight(), 0);
        let d = *s.drops();
        assert_eq!((d.expired, d.dependency_broken, d.cancelled), (1, 1, 0));
        assert_eq!((s.counters().sent, s.counters().written), (7, 5));
    }

    #[test]
    fn fates_are_kept_by_index_once_asked_for() {
        let now = Instant::now();
        let mut s = EncodedSender::new(SenderConfig::default());
        s.record_fates();
        send_all(
            &mut s,
            &[ParameterSets, Keyframe, Reference, Reference],
            now,
        );
        s.written(0);
        assert_eq!(s.dropped(1, DropReason::Expired), vec![2, 3]);
        assert!(s.dropped(2, DropReason::Cancelled).is_empty());
        s.written(3);
        let late = now - Duration::from_secs(10);
        assert_eq!(
            s.admit(&unit(4, Keyframe, late), now, 0),
            Admit::Skip(DropReason::Expired)
        );
        let fates: Vec<_> = std::iter::from_fn(|| s.poll_fate()).collect();
        assert_eq!(
            fates,
            vec![
                (0, Fate::Written),
                (1, Fate::Dropped(DropReason::Expired)),
                (2, Fate::Dropped(DropReason::DependencyBroken)),
                (3, Fate::Written),
                (4, Fate::Skipped(DropReason::Expired)),
            ]
        );
    }

    #[test]
    fn after_a_lost_keyframe_units_are_not_sent_until_the_next_but_parameter_sets_are() {
        let now = Instant::now();
        let mut s = EncodedSender::new(SenderConfig::default());
        send_all(&mut s, &[ParameterSets, Keyframe, Reference], now);
        assert_eq!(s.dropped(1, DropReason::Expired), vec![2]);
        assert!(s.is_broken());
        let mut admit = |i, k| s.admit(&unit(i, k, now), now, 0);
        assert_eq!(
            admit(3, Reference),
            Admit::Skip(DropReason::DependencyBroken)
        );
        assert_eq!(
            admit(4, NonReference),
            Admit::Skip(DropReason::DependencyBroken)
        );
        assert!(matches!(admit(5, ParameterSets), Admit::Send(_)));
        s.queued(5);
        assert!(matches!(
            s.admit(&unit(6, Keyframe, now), now, 0),
            Admit::Send(_)
        ));
        s.queued(6);
        assert!(!s.is_broken());
        assert_eq!(noticed(&mut s), vec![1, 3, 4]);
        // The rule cancelled 2 while it was queued: its Cancelled event adds nothing.
        assert!(s.dropped(2, DropReason::Cancelled).is_empty());
        assert_eq!(noticed(&mut s), vec![2]);
        assert_eq!(s.drops().dependency_broken, 3);
        assert_eq!(s.end_message().data, wire::encode_end(7));
    }

    #[test]
    fn a_full_queue_drops_by_rule_but_never_parameter_sets() {
        let now = Instant::now();
        let cfg = SenderConfig {
            max_queued_bytes: 1500,
            ..SenderConfig::default()
        };
        let mut s = EncodedSender::new(cfg);
        send_all(&mut s, &[ParameterSets, Keyframe], now);
        let full = 1000;
        assert_eq!(
            s.admit(&unit(2, NonReference, now), now, full),
            Admit::Skip(DropReason::QueueFull)
        );
        assert!(matches!(
            s.admit(&unit(3, Reference, now), now, 0),
            Admit::Send(_)
        ));
        s.queued(3);
        assert!(matches!(
            s.admit(&unit(4, ParameterSets, now), now, u64::MAX),
            Admit::Send(_)
        ));
        s.queued(4);
        // A unit read after its deadline (a budget of 0) is dropped at once.
        let late = now + Duration::from_millis(200);
        assert_eq!(
            s.admit(&unit(5, Reference, now), late, 0),
            Admit::Skip(DropReason::Expired)
        );
        assert_eq!(noticed(&mut s), vec![2, 5]);
        assert_eq!((s.drops().queue_full, s.drops().expired), (1, 1));
    }
}
