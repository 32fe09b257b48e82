//! What H.264 and H.265 share: NAL units grouped into access units, the group's parameter
//! sets split off into a unit of their own, and a reader from Annex-B bytes to access units.
//!
//! # When framing fails
//! A [`NalError`] names the NAL unit (its number in the stream, from 0) and what is wrong with
//! its header or the start of its slice header; an access unit longer than the limit is
//! refused rather than buffered.

use std::time::Instant;

use super::annexb::{write_nal, AnnexBError, AnnexBSplitter};
use super::{AccessUnit, Codec, FrameKind};

/// Why a NAL unit cannot be framed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NalError {
    /// A NAL unit shorter than its header (1 byte in H.264, 2 in H.265).
    #[error("NAL unit {nal} is shorter than its header")]
    TruncatedHeader { nal: u64 },
    /// `forbidden_zero_bit` is 1.
    #[error("NAL unit {nal} has forbidden_zero_bit set")]
    ForbiddenBit { nal: u64 },
    /// H.265 `nuh_temporal_id_plus1` is 0.
    #[error("NAL unit {nal} has nuh_temporal_id_plus1 = 0")]
    ZeroTemporalId { nal: u64 },
    /// An H.265 SPS ends before `sps_max_sub_layers_minus1`.
    #[error("SPS NAL unit {nal} ends before sps_max_sub_layers_minus1")]
    TruncatedParameterSet { nal: u64 },
    /// A slice NAL unit ends before the fields that place it in its picture.
    #[error("slice NAL unit {nal} (type {nal_type}) ends inside its slice header")]
    TruncatedSliceHeader { nal: u64, nal_type: u8 },
    /// The access unit grew past the limit.
    #[error("access unit ending at NAL unit {nal} is longer than the limit of {limit} bytes")]
    AccessUnitTooLarge { nal: u64, limit: usize },
}

/// A codec's rules for grouping its NAL units (ITU-T H.264 §7.4.1.2.3, H.265 §7.4.2.4.4).
pub trait NalFramer {
    /// Takes the next NAL unit (without start code), which reached the parser at `now`;
    /// returns the access units it completed, in decode order.
    fn push_nal(&mut self, nal: &[u8], now: Instant) -> Result<Vec<AccessUnit>, NalError>;
    /// The stream ended: returns the last access unit(s).
    fn finish(&mut self) -> Vec<AccessUnit>;
}

/// Facts about one NAL unit that the assembler needs, from the codec's parser.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NalFacts {
    /// Starts a new access unit if one with a picture is pending.
    pub starts_au: bool,
    pub parameter_set: bool,
    /// A slice of a picture; with `key`, `reference`, `rasl`, `temporal_id` about it.
    pub vcl: bool,
    pub key: bool,
    pub reference: bool,
    pub rasl: bool,
    pub temporal_id: u8,
}

/// Collects NAL units into access units (shared by both codecs).
#[derive(Debug, Clone)]
pub(crate) struct Assembler {
    codec: Codec,
    max_au: usize,
    next_index: u64,
    /// NAL units seen.
    pub nals: u64,
    ps: Vec<u8>,
    pic: Vec<u8>,
    vcl: Option<NalFacts>,
    key: bool,
    reference: bool,
    capture: Option<Instant>,
}

impl Assembler {
    pub fn new(codec: Codec, max_au: usize) -> Self {
        Self {
            codec,
            max_au,
            next_index: 0,
            nals: 0,
            ps: Vec::new(),
            pic: Vec::new(),
            vcl: None,
            key: false,
            reference: false,
            capture: None,
        }
    }

    pub fn add(
        &mut self,
        nal: &[u8],
        facts: NalFacts,
        now: Instant,
    ) -> Result<Vec<AccessUnit>, NalError> {
        let mut out = Vec::new();
        if facts.starts_au && self.vcl.is_some() {
            self.flush(&mut out);
        }
        if self.ps.len() + self.pic.len() + nal.len() + 4 > self.max_au {
            let (nal, limit) = (self.nals, self.max_au);
            return Err(NalError::AccessUnitTooLarge { nal, limit });
        }
        self.capture.get_or_insert(now);
        if facts.parameter_set {
            write_nal(&mut self.ps, nal);
        } else {
            write_nal(&mut self.pic, nal);
        }
        if facts.vcl {
            self.vcl.get_or_insert(facts);
            self.key |= facts.key;
            self.reference |= facts.reference;
        }
        self.nals += 1;
        Ok(out)
    }

    fn unit(
        &mut self,
        data: Vec<u8>,
        kind: FrameKind,
        facts: NalFacts,
        capture: Instant,
    ) -> AccessUnit {
        let index = self.next_index;
        self.next_index += 1;
        AccessUnit {
            codec: self.codec,
            index,
            data,
            kind,
            temporal_id: facts.temporal_id,
            has_parameter_sets: kind == FrameKind::ParameterSets,
            skipped_at_random_access: facts.rasl,
            pts: None,
            capture,
        }
    }

    /// The units still pending at the end of the stream ([`NalFramer::finish`]).
    pub fn finish(&mut self) -> Vec<AccessUnit> {
        let mut out = Vec::new();
        self.flush(&mut out);
        out
    }

    /// Emits the pending parameter sets, then the pending picture.
    pub fn flush(&mut self, out: &mut Vec<AccessUnit>) {
        let Some(capture) = self.capture.take() else {
            return;
        };
        if !self.ps.is_empty() {
            let ps = std::mem::take(&mut self.ps);
            out.push(self.unit(ps, FrameKind::ParameterSets, NalFacts::default(), capture));
        }
        if !self.pic.is_empty() {
            // A group without a slice (stray SEI at the end) breaks nothing if dropped.
            let facts = self.vcl.unwrap_or_default();
            let kind = if self.key {
                FrameKind::Keyframe
            } else if self.reference {
                FrameKind::Reference
            } else {
                FrameKind::NonReference
            };
            let pic = std::mem::take(&mut self.pic);
            out.push(self.unit(pic, kind, facts, capture));
        }
        self.vcl = None;
        self.key = false;
        self.reference = false;
    }
}

/// Why an Annex-B stream could not be read into access units.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    #[error(transparent)]
    AnnexB(#[from] AnnexBError),
    #[error(transparent)]
    Nal(#[from] NalError),
}

/// Annex-B bytes in, access units out: an [`AnnexBSplitter`] feeding a [`NalFramer`].
///
/// ```
/// use std::time::Instant;
/// use lowtide_media::encoded::{AnnexBReader, FrameKind, H264Framer};
/// let now = Instant::now();
/// let mut r = AnnexBReader::new(H264Framer::new(1 << 20), 1 << 20);
/// // SPS, PPS, an IDR slice, then a non-reference slice (first_mb_in_slice = 0: `0x80`).
/// let stream = [0, 0, 0, 1, 0x67, 0x42, 0, 0, 1, 0x68, 0xce, 0, 0, 1, 0x65, 0x88, 0, 0, 1, 0x01, 0x9a];
/// let mut units = r.push(&stream, now)?;
/// units.extend(r.finish()?);
/// let kinds: Vec<FrameKind> = units.iter().map(|u| u.kind).collect();
/// assert_eq!(kinds, [FrameKind::ParameterSets, FrameKind::Keyframe, FrameKind::NonReference]);
/// # Ok::<(), lowtide_media::encoded::ReadError>(())
/// ```
#[derive(Debug, Clone)]
pub struct AnnexBReader<F> {
    splitter: AnnexBSplitter,
    framer: F,
    /// When the last chunk arrived (the capture time of the NAL `finish` completes).
    last: Option<Instant>,
    /// The first error: every later call returns it.
    failed: Option<ReadError>,
}

impl<F: NalFramer> AnnexBReader<F> {
    /// A reader refusing NAL units over `max_nal` bytes.
    pub fn new(framer: F, max_nal: usize) -> Self {
        Self {
            splitter: AnnexBSplitter::new(max_nal),
            framer,
            last: None,
            failed: None,
        }
    }

    fn sticky<T>(&mut self, r: Result<T, ReadError>) -> Result<T, ReadError> {
        if let Err(e) = &r {
            self.failed = Some(e.clone());
        }
        r
    }

    /// Takes the next chunk of the stream, which arrived at `now`. An error is final: the
    /// units completed before it in this chunk are not returned.
    pub fn push(&mut self, chunk: &[u8], now: Instant) -> Result<Vec<AccessUnit>, ReadError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        self.last = Some(now);
        let r = self.push_inner(chunk, now);
        self.sticky(r)
    }

    fn push_inner(&mut self, chunk: &[u8], now: Instant) -> Result<Vec<AccessUnit>, ReadError> {
        let mut out = Vec::new();
        for nal in self.splitter.push(chunk)? {
            out.extend(self.framer.push_nal(&nal, now)?);
        }
        Ok(out)
    }

    /// The bytes so far end an access unit (a GStreamer buffer with `alignment=au`, an encoder
    /// known to write one access unit per write): returns it now rather than when the next
    /// one's first NAL unit arrives, a frame interval later. Later bytes must start with a
    /// start code. Called at the end of the stream, it is [`Self::finish`].
    pub fn end_access_unit(&mut self) -> Result<Vec<AccessUnit>, ReadError> {
        self.finish()
    }

    /// The stream ended.
    pub fn finish(&mut self) -> Result<Vec<AccessUnit>, ReadError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let r = self.finish_inner();
        self.sticky(r)
    }

    fn finish_inner(&mut self) -> Result<Vec<AccessUnit>, ReadError> {
        let mut out = Vec::new();
        if let (Some(nal), Some(now)) = (self.splitter.finish()?, self.last) {
            out.extend(self.framer.push_nal(&nal, now)?);
        }
        out.extend(self.framer.finish());
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoded::{FrameKind, H264Framer, DEFAULT_MAX_NAL};

    #[test]
    fn a_100_mb_nal_is_refused_at_the_limit_and_the_error_stays() {
        let now = Instant::now();
        let mut r = AnnexBReader::new(H264Framer::new(DEFAULT_MAX_NAL), DEFAULT_MAX_NAL);
        r.push(&[0, 0, 0, 1, 0x65, 0x88], now).unwrap();
        let mb = vec![0x55u8; 1 << 20];
        let mut fed = 0;
        let e = loop {
            fed += 1;
            assert!(fed <= 100, "100 MB accepted");
            if let Err(e) = r.push(&mb, now) {
                break e;
            }
            assert!(r.splitter.buffered() <= DEFAULT_MAX_NAL);
        };
        assert_eq!(fed, 8, "refused within the chunk that crosses 8 MiB");
        let limit = DEFAULT_MAX_NAL;
        assert_eq!(
            e,
            ReadError::AnnexB(AnnexBError::NalTooLarge { offset: 4, limit })
        );
        assert_eq!(r.push(&[0, 0, 1, 0x41, 0x88], now), Err(e.clone()));
        assert_eq!(r.finish(), Err(e));
    }

    #[test]
    fn an_aligned_access_unit_comes_out_without_waiting_for_the_next() {
        let now = Instant::now();
        let mut r = AnnexBReader::new(H264Framer::new(1024), 1024);
        assert_eq!(r.push(&[0, 0, 0, 1, 0x65, 0x88], now), Ok(vec![]));
        let key = r.end_access_unit().unwrap();
        assert_eq!(key.len(), 1);
        let p = r.push(&[0, 0, 0, 1, 0x41, 0x9a], now).unwrap();
        assert!(p.is_empty());
        let p = r.end_access_unit().unwrap();
        assert_eq!((p[0].index, p[0].kind), (1, FrameKind::Reference));
        assert_eq!(r.finish(), Ok(vec![]));
    }

    #[test]
    fn framer_errors_are_final_too() {
        let now = Instant::now();
        let mut r = AnnexBReader::new(H264Framer::new(1024), 1024);
        let e = r.push(&[0, 0, 1, 0xe5, 0x88, 0, 0, 1], now).unwrap_err();
        assert_eq!(e, ReadError::Nal(NalError::ForbiddenBit { nal: 0 }));
        assert_eq!(r.push(&[0, 0, 1, 0x65, 0x88], now), Err(e));
    }
}
