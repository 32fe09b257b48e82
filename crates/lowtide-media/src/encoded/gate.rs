//! The receiver's gate in front of the decoder: it hands on only units whose references it
//! handed on since the last keyframe, stops at a break, asks the sender for a keyframe, and
//! resumes at the keyframe.
//!
//! The gate takes units in decode order with their [`UnitInfo`] (a few bytes the sender can
//! put in each message beside the unit; their wire form belongs to the session that carries
//! the units, not to this model), and is told of units that will not come ([`ReceiverGate::missing`],
//! from lowtide's cancel notice, with the unit's info if the sender sent it). A gap in the
//! indices whose units it was not told about is taken as a lost reference in layer 0, the
//! worst case. It applies the sender's rule ([`super::dependency`]), so when the sender's
//! tracker cancelled what a drop took with it the gate drops nothing more.
//!
//! The keyframe request (an upstream force-key-unit event, or an API call) is raised when
//! the chain breaks and repeated while it stays broken, at most once per `request_interval`
//! (about an RTT: the time the request and the keyframe need to arrive), because a request
//! or the encoder may fail to act on it. Time comes in as `now`; [`ReceiverGate::poll_timeout`]
//! says when to poll again.

use std::time::{Duration, Instant};

use super::dependency::{Chain, DropCounters, DropReason};
use super::{FrameKind, UnitInfo};

/// Why the gate asks for a keyframe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestReason {
    /// The stream did not start with a keyframe.
    NoKeyframeYet,
    /// Unit `index`, which later units reference, was lost (or unknown units from `index`
    /// on: a gap).
    ReferenceLost { index: u64 },
}

/// Ask the encoder for a keyframe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyframeRequest {
    pub reason: RequestReason,
    /// Units dropped since the break (what the viewer has missed so far).
    pub dropped_since: u64,
}

/// What to do with a received unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Hand it to the decoder.
    Decode,
    /// Drop it, for this reason (already counted).
    Drop(DropReason),
}

/// The gate (see the module doc).
///
/// ```
/// use std::time::{Duration, Instant};
/// use lowtide_media::encoded::{FrameKind::*, ReceiverGate, UnitInfo, Verdict};
/// let now = Instant::now();
/// let mut g = ReceiverGate::new(Duration::from_millis(100));
/// assert_eq!(g.receive(now, UnitInfo::new(0, Keyframe)), Verdict::Decode);
/// assert_eq!(g.receive(now, UnitInfo::new(1, Reference)), Verdict::Decode);
/// // Unit 2 never came: 3 is not decodable, and the gate asks for a keyframe once.
/// assert!(matches!(g.receive(now, UnitInfo::new(3, Reference)), Verdict::Drop(_)));
/// assert!(g.poll_keyframe_request(now).is_some());
/// assert!(g.poll_keyframe_request(now).is_none());
/// assert_eq!(g.receive(now, UnitInfo::new(4, Keyframe)), Verdict::Decode);
/// assert_eq!(g.poll_timeout(), None);
/// ```
#[derive(Debug, Clone)]
pub struct ReceiverGate {
    chain: Chain,
    /// The index expected next.
    next: u64,
    request_interval: Duration,
    /// The current break: its reason and when it was noticed.
    broken: Option<(RequestReason, Instant)>,
    dropped_since: u64,
    last_request: Option<Instant>,
    seen_keyframe: bool,
    counters: DropCounters,
}

impl ReceiverGate {
    /// A gate asking for a keyframe at most once per `request_interval`.
    pub fn new(request_interval: Duration) -> Self {
        Self {
            chain: Chain::default(),
            next: 0,
            request_interval,
            broken: None,
            dropped_since: 0,
            last_request: None,
            seen_keyframe: false,
            counters: DropCounters::default(),
        }
    }

    /// Units dropped, by reason ([`DropReason::Lost`] counts each index of a gap).
    pub fn counters(&self) -> &DropCounters {
        &self.counters
    }

    /// Whether output is stopped until a keyframe.
    pub fn waiting_for_keyframe(&self) -> bool {
        self.chain.waiting_for_keyframe()
    }

    /// Records a break (if the chain is broken and no break is recorded).
    fn note_break(&mut self, now: Instant, index: u64) {
        if self.chain.is_broken() && self.broken.is_none() {
            let reason = if self.seen_keyframe {
                RequestReason::ReferenceLost { index }
            } else {
                RequestReason::NoKeyframeYet
            };
            self.broken = Some((reason, now));
        }
    }

    /// Steps over the indices before `index` the gate was not told about.
    fn gap(&mut self, now: Instant, index: u64) {
        if index > self.next {
            let first = self.next;
            self.counters.lost = self.counters.lost.saturating_add(index - first);
            self.dropped_since = self.dropped_since.saturating_add(index - first);
            self.chain
                .step(&UnitInfo::new(first, FrameKind::Reference), false);
            self.note_break(now, first);
        }
    }

    /// Unit `index` will not arrive (cancelled, expired or lost); `info` if known, otherwise
    /// it is taken as a reference in layer 0.
    pub fn missing(&mut self, now: Instant, index: u64, info: Option<UnitInfo>) {
        if index < self.next {
            return;
        }
        self.gap(now, index);
        let info = info.filter(|i| i.index == index);
        let info = info.unwrap_or(UnitInfo::new(index, FrameKind::Reference));
        self.counters.count(DropReason::Lost);
        self.dropped_since = self.dropped_since.saturating_add(1);
        self.chain.step(&info, false);
        self.next = index.saturating_add(1);
        self.note_break(now, index);
    }

    /// A unit arrived: decode it or drop it.
    pub fn receive(&mut self, now: Instant, info: UnitInfo) -> Verdict {
        if info.index < self.next {
            self.counters.count(DropReason::OutOfOrder);
            return Verdict::Drop(DropReason::OutOfOrder);
        }
        self.gap(now, info.index);
        self.next = info.index.saturating_add(1);
        let waiting = self.chain.waiting_for_keyframe();
        if self.chain.step(&info, true) {
            if info.kind == FrameKind::Keyframe {
                self.seen_keyframe = true;
            }
            if !self.chain.is_broken() {
                self.broken = None;
                self.dropped_since = 0;
            }
            return Verdict::Decode;
        }
        let reason = if waiting {
            DropReason::WaitingForKeyframe
        } else {
            DropReason::DependencyBroken
        };
        self.counters.count(reason);
        self.dropped_since = self.dropped_since.saturating_add(1);
        self.note_break(now, info.index);
        Verdict::Drop(reason)
    }

    /// A keyframe request, if the chain is broken and none was given in the last
    /// `request_interval`.
    pub fn poll_keyframe_request(&mut self, now: Instant) -> Option<KeyframeRequest> {
        let (reason, _) = self.broken?;
        if self.poll_timeout().is_some_and(|t| now < t) {
            return None;
        }
        self.last_request = Some(now);
        Some(KeyframeRequest {
            reason,
            dropped_since: self.dropped_since,
        })
    }

    /// When [`Self::poll_keyframe_request`] will return a request, if the chain is broken:
    /// at the break, or one `request_interval` after the last request.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let (_, since) = self.broken?;
        Some(match self.last_request {
            Some(t) => since.max(t + self.request_interval),
            None => since,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use FrameKind::*;

    #[test]
    fn stops_at_a_break_and_resumes_at_the_keyframe() {
        let t0 = Instant::now();
        let mut g = ReceiverGate::new(Duration::from_millis(100));
        assert_eq!(
            g.receive(t0, UnitInfo::new(0, ParameterSets)),
            Verdict::Decode
        );
        assert_eq!(
            g.poll_timeout(),
            None,
            "no request before the first keyframe is due"
        );
        assert_eq!(g.receive(t0, UnitInfo::new(1, Keyframe)), Verdict::Decode);
        g.missing(t0, 2, Some(UnitInfo::new(2, NonReference)));
        assert_eq!(
            g.poll_timeout(),
            None,
            "a lost non-reference breaks nothing"
        );
        assert_eq!(g.receive(t0, UnitInfo::new(3, Reference)), Verdict::Decode);
        g.missing(t0, 4, None);
        let w = Verdict::Drop(DropReason::WaitingForKeyframe);
        assert_eq!(g.receive(t0, UnitInfo::new(5, NonReference)), w);
        let r = g.poll_keyframe_request(t0).unwrap();
        assert_eq!(
            r,
            KeyframeRequest {
                reason: RequestReason::ReferenceLost { index: 4 },
                dropped_since: 2
            }
        );
        let t1 = t0 + Duration::from_millis(50);
        assert_eq!(g.poll_keyframe_request(t1), None);
        assert_eq!(g.poll_timeout(), Some(t0 + Duration::from_millis(100)));
        let t2 = t0 + Duration::from_millis(100);
        assert_eq!(g.poll_keyframe_request(t2).unwrap().dropped_since, 2);
        assert_eq!(
            g.receive(t2, UnitInfo::new(7, Reference)),
            w,
            "a gap at 6 as well"
        );
        assert_eq!(g.receive(t2, UnitInfo::new(8, Keyframe)), Verdict::Decode);
        assert_eq!(g.poll_keyframe_request(t2 + Duration::from_secs(1)), None);
        assert_eq!(
            g.receive(t2, UnitInfo::new(8, Reference)),
            Verdict::Drop(DropReason::OutOfOrder)
        );
        let c = g.counters();
        assert_eq!((c.lost, c.waiting_for_keyframe, c.out_of_order), (3, 2, 1));
    }

    #[test]
    fn extreme_indices_do_not_overflow() {
        let t0 = Instant::now();
        let mut g = ReceiverGate::new(Duration::from_millis(100));
        assert_eq!(
            g.receive(t0, UnitInfo::new(u64::MAX, Keyframe)),
            Verdict::Decode
        );
        g.missing(t0, u64::MAX, None);
        assert_eq!(g.counters().lost, u64::MAX);
    }

    #[test]
    fn a_stream_without_keyframe_asks_for_one() {
        let t0 = Instant::now();
        let mut g = ReceiverGate::new(Duration::from_millis(100));
        let v = g.receive(t0, UnitInfo::new(5, Reference));
        assert_eq!(v, Verdict::Drop(DropReason::WaitingForKeyframe));
        assert_eq!(
            g.poll_keyframe_request(t0).unwrap().reason,
            RequestReason::NoKeyframeYet
        );
    }

    #[test]
    fn upper_layers_break_while_the_base_plays() {
        let t0 = Instant::now();
        let mut g = ReceiverGate::new(Duration::from_millis(100));
        g.receive(t0, UnitInfo::new(0, Keyframe));
        g.missing(t0, 1, Some(UnitInfo::new(1, Reference).layer(1)));
        assert_eq!(g.receive(t0, UnitInfo::new(2, Reference)), Verdict::Decode);
        let v = g.receive(t0, UnitInfo::new(3, NonReference).layer(2));
        assert_eq!(v, Verdict::Drop(DropReason::DependencyBroken));
        assert!(!g.waiting_for_keyframe());
        assert!(g.poll_keyframe_request(t0).is_some());
    }
}
