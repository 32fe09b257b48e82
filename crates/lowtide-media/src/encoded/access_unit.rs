//! An access unit: one coded picture with everything the decoder takes with it (H.264
//! §7.4.1.2.3, H.265 §7.4.2.4.4), or one IVF frame (a VP8/VP9 frame, an AV1 temporal unit),
//! with what lowtide needs to schedule it: its importance among the stream's messages and its
//! deadline.
//!
//! # Importance
//! lowtide sends a message of higher importance first and cancels lower ones first
//! ([`lowtide::Message::importance`], a `u8`). The order here: parameter sets (never to be
//! dropped) > keyframes > reference frames > non-reference frames, and within a kind a lower
//! temporal layer before a higher one (the base layer is what the others predict from). The
//! values use 0..=15, so a stream can share a channel with other streams' importances, and an
//! [`ImportanceReserve`](lowtide::proto::reserve::ImportanceReserve) with `min_importance = 14` covers exactly
//! the parameter sets and keyframes.

use std::time::{Duration, Instant};

use super::Codec;

/// What a unit is to the decoder's reference structure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FrameKind {
    /// A frame that does not reference other frames and after which decoding can start
    /// (H.264 IDR, H.265 IRAP, VP8/VP9/AV1 shown key frame).
    Keyframe,
    /// A frame that later frames may reference.
    Reference,
    /// A frame no other frame references: dropping it breaks nothing.
    NonReference,
    /// Parameter sets only (H.264 SPS/PPS, H.265 VPS/SPS/PPS), split off the picture they came
    /// with so they can be sent without a deadline and never dropped.
    ParameterSets,
}

/// The highest importance a unit gets (parameter sets).
pub const MAX_IMPORTANCE: u8 = 15;

/// Temporal layers the importance tells apart; higher ones share the last step.
const LAYERS: u8 = 7;

/// Importance of a unit of `kind` in temporal layer `temporal_id`, for
/// [`lowtide::Message::importance`]: higher is more important (see the module doc).
///
/// ```
/// use lowtide_media::encoded::{importance, FrameKind::*};
/// assert!(importance(ParameterSets, 0) > importance(Keyframe, 0));
/// assert!(importance(Keyframe, 3) > importance(Reference, 0));
/// assert!(importance(Reference, 0) > importance(Reference, 1));
/// assert!(importance(Reference, 6) > importance(NonReference, 0));
/// assert_eq!(importance(NonReference, 200), 0);
/// ```
pub fn importance(kind: FrameKind, temporal_id: u8) -> u8 {
    let layer = temporal_id.min(LAYERS - 1);
    match kind {
        FrameKind::ParameterSets => MAX_IMPORTANCE,
        FrameKind::Keyframe => MAX_IMPORTANCE - 1,
        FrameKind::Reference => MAX_IMPORTANCE - 2 - layer,
        FrameKind::NonReference => LAYERS - 1 - layer,
    }
}

/// One access unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessUnit {
    pub codec: Codec,
    /// Position in the stream, counting every unit the parser produced (parameter-set units
    /// included) from 0, in decode order.
    pub index: u64,
    /// The bytes to hand the decoder: for H.264/H.265 the NAL units each with a 4-byte start
    /// code (concatenated units are an Annex-B stream); for VP8/VP9/AV1 the IVF frame's payload.
    pub data: Vec<u8>,
    pub kind: FrameKind,
    /// Temporal layer (H.265 `TemporalId`, AV1 `temporal_id`; 0 where the format has none).
    pub temporal_id: u8,
    /// Carries parameter sets (AV1: a sequence header OBU, which stays in its temporal unit).
    pub has_parameter_sets: bool,
    /// An H.265 RASL picture: it references pictures before the keyframe it follows, so it
    /// cannot be decoded when decoding (re)starts at that keyframe (H.265 §8.1.3).
    pub skipped_at_random_access: bool,
    /// The container's timestamp in its timebase (IVF), if it has one.
    pub pts: Option<u64>,
    /// When the unit was captured: as the parser knows it, the `now` given with the chunk that
    /// completed the unit's first NAL unit (Annex-B: when the next NAL unit's start code came)
    /// or its IVF frame. Replace it with [`Self::with_capture`] when the source knows better
    /// (a GStreamer buffer's running time, a capture timestamp in band).
    pub capture: Instant,
}

impl AccessUnit {
    /// This unit's importance ([`importance`]).
    pub fn importance(&self) -> u8 {
        importance(self.kind, self.temporal_id)
    }

    /// When the unit is useless: capture time + the stream's latency budget (a message's
    /// [`lowtide::Message::deadline`]). Parameter-set units should be sent without one.
    pub fn deadline(&self, latency_budget: Duration) -> Instant {
        self.capture + latency_budget
    }

    /// The unit with another capture time.
    pub fn with_capture(mut self, capture: Instant) -> Self {
        self.capture = capture;
        self
    }

    /// The facts about this unit the dependency tracker and the receiver gate use.
    pub fn info(&self) -> UnitInfo {
        UnitInfo {
            index: self.index,
            kind: self.kind,
            temporal_id: self.temporal_id,
            skipped_at_random_access: self.skipped_at_random_access,
        }
    }
}

/// What [`crate::encoded::SenderTracker`] and [`crate::encoded::ReceiverGate`] need to know
/// about a unit: small enough to travel in a message header beside the unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UnitInfo {
    pub index: u64,
    pub kind: FrameKind,
    pub temporal_id: u8,
    pub skipped_at_random_access: bool,
}

impl UnitInfo {
    /// A unit of `kind` at `index` in layer 0.
    pub fn new(index: u64, kind: FrameKind) -> Self {
        Self {
            index,
            kind,
            temporal_id: 0,
            skipped_at_random_access: false,
        }
    }

    /// The same unit in temporal layer `t`.
    pub fn layer(mut self, t: u8) -> Self {
        self.temporal_id = t;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn importance_orders_kinds_then_layers() {
        use FrameKind::*;
        let mut all = vec![importance(ParameterSets, 0), importance(Keyframe, 0)];
        all.extend((0..LAYERS).map(|t| importance(Reference, t)));
        all.extend((0..LAYERS).map(|t| importance(NonReference, t)));
        assert!(all.windows(2).all(|w| w[0] > w[1]), "{all:?}");
        assert_eq!(*all.last().unwrap(), 0);
        assert!(all.iter().all(|&i| i <= MAX_IMPORTANCE));
    }

    #[test]
    fn deadline_is_capture_plus_budget() {
        let t0 = Instant::now();
        let au = AccessUnit {
            codec: Codec::Vp8,
            index: 0,
            data: vec![],
            kind: FrameKind::Keyframe,
            temporal_id: 0,
            has_parameter_sets: false,
            skipped_at_random_access: false,
            pts: None,
            capture: t0,
        };
        assert_eq!(
            au.deadline(Duration::from_millis(150)),
            t0 + Duration::from_millis(150)
        );
        let later = t0 + Duration::from_secs(1);
        assert_eq!(au.with_capture(later).capture, later);
    }
}
