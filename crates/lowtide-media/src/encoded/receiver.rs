//! The receiver of an encoded stream over lowtide, without the I/O: messages in
//! ([`super::wire`]), a decodable byte stream out, in decode order, through a
//! [`ReceiverGate`].
//!
//! lowtide delivers messages in arrival order, and a more important unit may overtake a less
//! important one queued before it. The receiver therefore holds units in a reorder buffer
//! until every earlier index has arrived or been announced as dropped (the sender's notice),
//! then hands them to the gate in index order. The buffer is bounded: past `max_held_bytes`
//! the oldest gap is given up (the gate counts it as a lost reference and waits for a
//! keyframe), and a unit arriving after its index was passed is dropped as out of order.
//!
//! Output: Annex-B units as received (each NAL with a 4-byte start code), or for IVF the
//! stream's file header once, then each frame behind its 12-byte frame header with the
//! sender's timestamp. A keyframe request
//! ([`EncodedReceiver::poll_keyframe_request`]) is the gate's: the caller forwards it to an
//! encoder if it has one (a pipe has none).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::ivf::write_ivf_frame;
use super::wire::{self, StreamStart, UnitHeader, WireError, WireMessage};
use super::{DropCounters, KeyframeRequest, ReceiverGate, UnitInfo, Verdict};

/// Why a message broke the stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReceiveError {
    #[error(transparent)]
    Wire(#[from] WireError),
    /// A unit or notice before the start message, or a second start message.
    #[error("{0} (the sender is not an encoded-video sender?)")]
    OutOfSequence(&'static str),
    /// A unit of another codec than the start message's.
    #[error("a unit of codec {got:?} in a {want:?} stream")]
    CodecChanged {
        want: super::Codec,
        got: super::Codec,
    },
}

#[derive(Debug, Clone)]
enum Slot {
    Unit(UnitHeader, Vec<u8>),
    Dropped(UnitInfo),
}

/// Counts of what the receiver did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReceiverCounters {
    /// Unit messages received.
    pub received: u64,
    /// Units written to the output.
    pub written: u64,
    /// Units the sender announced as dropped.
    pub announced_dropped: u64,
    /// Keyframe requests the gate raised.
    pub keyframe_requests: u64,
    /// Gaps given up because the reorder buffer was full.
    pub gaps_given_up: u64,
}

/// The receiver's state (see the module doc).
///
/// Both ends without a channel: a non-reference unit expires at the sender, the unit after it
/// overtakes the keyframe, and the receiver still writes the rest in decode order.
///
/// ```
/// use std::time::{Duration, Instant};
/// use lowtide_media::encoded::receiver::EncodedReceiver;
/// use lowtide_media::encoded::sender::{Admit, EncodedSender, SenderConfig};
/// use lowtide_media::encoded::wire::StreamStart;
/// use lowtide_media::encoded::{AccessUnit, Codec, DropReason, FrameKind};
/// let now = Instant::now();
/// let unit = |index: u64, kind| AccessUnit {
///     codec: Codec::H264, index, data: vec![index as u8], kind, temporal_id: 0,
///     has_parameter_sets: false, skipped_at_random_access: false, pts: None, capture: now,
/// };
/// let start = StreamStart { codec: Codec::H264, ivf: None };
/// let mut rx = EncodedReceiver::new(1 << 20, Duration::from_secs(1));
/// rx.handle(now, &EncodedSender::<u32>::start_message(&start).data)?;
/// let mut tx = EncodedSender::<u32>::new(SenderConfig::default());
/// let mut messages = Vec::new();
/// for (i, kind) in [FrameKind::Keyframe, FrameKind::NonReference, FrameKind::Reference]
///     .into_iter()
///     .enumerate()
/// {
///     let Admit::Send(m) = tx.admit(&unit(i as u64, kind), now, 0) else { unreachable!() };
///     tx.queued(i as u32);
///     messages.push(m.data);
/// }
/// // The non-reference unit expires in lowtide's queue: nothing else to cancel.
/// assert!(tx.dropped(1, DropReason::Expired).is_empty());
/// let notice = tx.poll_notice().expect("the receiver is told");
/// rx.handle(now, &messages[2])?; // it overtook the keyframe
/// rx.handle(now, &notice.data)?;
/// rx.handle(now, &messages[0])?;
/// assert_eq!(rx.take_output(), [0, 2]); // decode order, the dropped unit left out
/// # Ok::<(), lowtide_media::encoded::receiver::ReceiveError>(())
/// ```
#[derive(Debug, Clone)]
pub struct EncodedReceiver {
    gate: ReceiverGate,
    start: Option<StreamStart>,
    wrote_header: bool,
    /// The index the gate takes next.
    next: u64,
    held: BTreeMap<u64, Slot>,
    held_bytes: usize,
    max_held_bytes: usize,
    /// The number of units, from the end message.
    end: Option<u64>,
    out: Vec<u8>,
    /// `Some` in unit mode ([`Self::unit_output`]): the units passed, not yet taken.
    units: Option<Vec<OutputUnit>>,
    counters: ReceiverCounters,
}

/// A unit the gate passed, for a consumer that wants units rather than a byte stream (a
/// GStreamer source pushes one buffer per unit): [`EncodedReceiver::unit_output`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputUnit {
    pub header: UnitHeader,
    /// The unit's bytes as the sender's reader produced them (Annex-B NAL units each behind
    /// a 4-byte start code; a VP8/VP9 frame or an AV1 temporal unit).
    pub data: Vec<u8>,
}

impl EncodedReceiver {
    /// A receiver holding at most `max_held_bytes` of units out of order, asking for a
    /// keyframe at most once per `request_interval`.
    pub fn new(max_held_bytes: usize, request_interval: Duration) -> Self {
        Self {
            gate: ReceiverGate::new(request_interval),
            start: None,
            wrote_header: false,
            next: 0,
            held: BTreeMap::new(),
            held_bytes: 0,
            max_held_bytes,
            end: None,
            out: Vec::new(),
            units: None,
            counters: ReceiverCounters::default(),
        }
    }

    /// The same receiver handing out the units it passes one by one
    /// ([`Self::take_units`]) instead of a byte stream ([`Self::take_output`] stays empty).
    pub fn unit_output(mut self) -> Self {
        self.units = Some(Vec::new());
        self
    }

    /// In unit mode, the units passed since the last call, in decode order.
    pub fn take_units(&mut self) -> Vec<OutputUnit> {
        self.units.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// The stream's start message, once received.
    pub fn stream(&self) -> Option<&StreamStart> {
        self.start.as_ref()
    }

    /// Whether every unit up to the end message has been accounted for.
    pub fn is_done(&self) -> bool {
        self.end.is_some_and(|n| self.next >= n)
    }

    /// Counts so far.
    pub fn counters(&self) -> &ReceiverCounters {
        &self.counters
    }

    /// The gate's drops, by reason.
    pub fn drops(&self) -> &DropCounters {
        self.gate.counters()
    }

    /// Bytes of units held out of order.
    pub fn held_bytes(&self) -> usize {
        self.held_bytes
    }

    /// Takes one message received at `now`.
    pub fn handle(&mut self, now: Instant, msg: &[u8]) -> Result<(), ReceiveError> {
        match wire::decode(msg)? {
            WireMessage::Start(s) => {
                if self.start.is_some() {
                    return Err(ReceiveError::OutOfSequence("a second start message"));
                }
                self.start = Some(s);
            }
            WireMessage::Unit(h, payload) => {
                let Some(start) = self.start else {
                    return Err(ReceiveError::OutOfSequence("a unit before the start"));
                };
                if h.codec != start.codec {
                    let (want, got) = (start.codec, h.codec);
                    return Err(ReceiveError::CodecChanged { want, got });
                }
                self.counters.received += 1;
                if h.info.index < self.next {
                    // Its index was passed (given up): the gate counts it out of order.
                    let _ = self.gate.receive(now, h.info);
                } else if !self.held.contains_key(&h.info.index) {
                    self.held_bytes += payload.len();
                    self.held
                        .insert(h.info.index, Slot::Unit(h, payload.to_vec()));
                }
            }
            WireMessage::Dropped(units) => {
                if self.start.is_none() {
                    return Err(ReceiveError::OutOfSequence("a notice before the start"));
                }
                for u in units {
                    self.counters.announced_dropped += 1;
                    if u.index >= self.next {
                        self.held.entry(u.index).or_insert(Slot::Dropped(u));
                    }
                }
            }
            WireMessage::End { units } => {
                // Every unit and notice was written before it: nothing more will come.
                self.end = Some(units);
                self.finish(now);
            }
            WireMessage::KeyframeRequest(_) => {
                return Err(ReceiveError::OutOfSequence(
                    "a keyframe request, which goes to a sender",
                ));
            }
            WireMessage::Publish { .. } => {
                return Err(ReceiveError::OutOfSequence(
                    "a publish message, which goes to a server (lowtide serve)",
                ));
            }
            WireMessage::Pull { .. } => {
                return Err(ReceiveError::OutOfSequence(
                    "a pull message, which goes to a server (lowtide serve)",
                ));
            }
        }
        self.release(now);
        Ok(())
    }

    /// Hands the gate every unit it can take in order, giving up gaps while over the limit.
    fn release(&mut self, now: Instant) {
        loop {
            if let Some(slot) = self.held.remove(&self.next) {
                self.take(now, slot);
                continue;
            }
            let Some((&first, _)) = self.held.first_key_value() else {
                break;
            };
            if self.held_bytes > self.max_held_bytes {
                // Give the gap up: the gate sees the next unit after it and counts the gap.
                self.counters.gaps_given_up += 1;
                self.next = first;
                continue;
            }
            break;
        }
    }

    fn take(&mut self, now: Instant, slot: Slot) {
        match slot {
            Slot::Dropped(info) => self.gate.missing(now, info.index, Some(info)),
            Slot::Unit(h, data) => {
                self.held_bytes -= data.len();
                if self.gate.receive(now, h.info) == Verdict::Decode {
                    self.write(&h, data);
                }
            }
        }
        self.next = self.next.saturating_add(1);
    }

    fn write(&mut self, h: &UnitHeader, data: Vec<u8>) {
        self.counters.written += 1;
        if let Some(units) = &mut self.units {
            units.push(OutputUnit { header: *h, data });
            return;
        }
        let data = &data[..];
        match self.start.and_then(|s| s.ivf) {
            Some(ivf) => {
                if !self.wrote_header {
                    self.out.extend_from_slice(&ivf.to_bytes());
                    self.wrote_header = true;
                }
                write_ivf_frame(&mut self.out, h.pts.unwrap_or(h.info.index), data);
            }
            None => self.out.extend_from_slice(data),
        }
    }

    /// The stream ended (the channel closed): every unit still held is handed on in order,
    /// gaps counted as lost.
    pub fn finish(&mut self, now: Instant) {
        while let Some((&first, _)) = self.held.first_key_value() {
            if first > self.next {
                self.counters.gaps_given_up += 1;
            }
            self.next = self.next.max(first);
            let slot = self.held.remove(&first).expect("present");
            self.take(now, slot);
        }
        if let Some(n) = self.end {
            if n > self.next {
                self.gate.missing(now, n - 1, None);
                self.next = n;
            }
        }
    }

    /// The bytes to write to the output now (empty if none).
    pub fn take_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    /// A keyframe request from the gate, if one is due.
    pub fn poll_keyframe_request(&mut self, now: Instant) -> Option<KeyframeRequest> {
        let r = self.gate.poll_keyframe_request(now);
        if r.is_some() {
            self.counters.keyframe_requests += 1;
        }
        r
    }

    /// When [`Self::poll_keyframe_request`] may return one next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.gate.poll_timeout()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoded::wire::{encode_dropped, encode_end, encode_start, encode_unit};
    use crate::encoded::{Codec, FrameKind};

    fn unit(index: u64, kind: FrameKind) -> Vec<u8> {
        let h = UnitHeader {
            codec: Codec::H264,
            info: UnitInfo::new(index, kind),
            has_parameter_sets: false,
            capture_us: 0,
            pts: None,
        };
        encode_unit(&h, &[index as u8])
    }

    fn start() -> Vec<u8> {
        encode_start(&StreamStart {
            codec: Codec::H264,
            ivf: None,
        })
    }

    #[test]
    fn reorders_and_applies_notices() {
        use FrameKind::*;
        let now = Instant::now();
        let mut r = EncodedReceiver::new(1 << 20, Duration::from_millis(100));
        r.handle(now, &start()).unwrap();
        // The keyframe overtook the two units before it; a non-reference unit was dropped.
        r.handle(now, &unit(0, ParameterSets)).unwrap();
        r.handle(now, &unit(3, Keyframe)).unwrap();
        assert_eq!(r.take_output(), [0]);
        r.handle(now, &unit(1, Keyframe)).unwrap();
        r.handle(now, &encode_dropped(&[UnitInfo::new(2, NonReference)]))
            .unwrap();
        r.handle(now, &unit(4, Reference)).unwrap();
        r.handle(now, &encode_end(5)).unwrap();
        assert!(r.is_done());
        assert_eq!(r.take_output(), [1, 3, 4]);
        assert_eq!(r.drops().lost, 1);
        assert_eq!(
            r.poll_keyframe_request(now),
            None,
            "a lost B breaks nothing"
        );
    }

    #[test]
    fn a_lost_reference_stops_output_until_the_keyframe() {
        use FrameKind::*;
        let now = Instant::now();
        let mut r = EncodedReceiver::new(1 << 20, Duration::from_millis(100));
        r.handle(now, &start()).unwrap();
        r.handle(now, &unit(0, Keyframe)).unwrap();
        r.handle(now, &encode_dropped(&[UnitInfo::new(1, Reference)]))
            .unwrap();
        r.handle(now, &unit(2, Reference)).unwrap();
        assert!(r.poll_keyframe_request(now).is_some());
        assert_eq!(r.counters().keyframe_requests, 1);
        r.handle(now, &unit(3, Keyframe)).unwrap();
        assert_eq!(r.take_output(), [0, 3]);
        let d = r.drops();
        assert_eq!((d.lost, d.waiting_for_keyframe), (1, 1));
        assert_eq!(r.poll_timeout(), None, "the keyframe repaired the stream");
    }

    #[test]
    fn a_full_buffer_gives_the_gap_up_and_late_units_are_out_of_order() {
        use FrameKind::*;
        let now = Instant::now();
        let mut r = EncodedReceiver::new(2, Duration::from_millis(100));
        r.handle(now, &start()).unwrap();
        r.handle(now, &unit(0, Keyframe)).unwrap();
        for i in 2..5 {
            r.handle(now, &unit(i, Reference)).unwrap();
        }
        assert!(r.held_bytes() <= 2);
        assert_eq!(r.counters().gaps_given_up, 1);
        r.handle(now, &unit(1, Reference)).unwrap();
        assert_eq!(r.drops().out_of_order, 1);
        assert_eq!(r.take_output(), [0]);
    }

    proptest::proptest! {
        /// What `fuzz/fuzz_targets/encoded_wire.rs` checks: arbitrary messages after a valid
        /// start never panic, the held bytes stay under the limit, `finish` empties the buffer.
        #[test]
        fn arbitrary_messages_never_panic_and_stay_bounded(
            msgs in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40), 0..40),
            tags in proptest::collection::vec(0x20u8..=0x24, 40),
        ) {
            let now = Instant::now();
            let mut r = EncodedReceiver::new(64, Duration::from_millis(100));
            r.handle(now, &start()).unwrap();
            for (mut m, tag) in msgs.into_iter().zip(tags) {
                // Mostly well-tagged, so the decoder gets past the tag.
                if let Some(b) = m.first_mut() {
                    *b = tag;
                }
                let _ = r.handle(now, &m);
                proptest::prop_assert!(r.held_bytes() <= 64);
                let _ = r.take_output();
                let _ = r.poll_keyframe_request(now);
            }
            r.finish(now);
            proptest::prop_assert_eq!(r.held_bytes(), 0);
        }
    }

    #[test]
    fn unit_output_hands_out_units_with_their_headers() {
        use FrameKind::*;
        let now = Instant::now();
        let mut r = EncodedReceiver::new(1 << 20, Duration::from_millis(100)).unit_output();
        r.handle(now, &start()).unwrap();
        r.handle(now, &unit(1, Reference)).unwrap();
        r.handle(now, &unit(0, Keyframe)).unwrap();
        let units = r.take_units();
        let got: Vec<(u64, FrameKind, Vec<u8>)> = units
            .into_iter()
            .map(|u| (u.header.info.index, u.header.info.kind, u.data))
            .collect();
        assert_eq!(got, [(0, Keyframe, vec![0]), (1, Reference, vec![1])]);
        assert!(r.take_output().is_empty());
        assert!(r.take_units().is_empty());
        let request = crate::encoded::wire::encode_keyframe_request(&KeyframeRequest {
            reason: crate::encoded::RequestReason::NoKeyframeYet,
            dropped_since: 0,
        });
        assert!(matches!(
            r.handle(now, &request),
            Err(ReceiveError::OutOfSequence(_))
        ));
    }

    #[test]
    fn bad_sequences_are_errors() {
        let now = Instant::now();
        let mut r = EncodedReceiver::new(1 << 20, Duration::from_millis(100));
        assert!(matches!(
            r.handle(now, &unit(0, FrameKind::Keyframe)),
            Err(ReceiveError::OutOfSequence(_))
        ));
        r.handle(now, &start()).unwrap();
        assert!(r.handle(now, &start()).is_err());
        assert!(matches!(r.handle(now, &[0x01]), Err(ReceiveError::Wire(_))));
    }
}
