//! H.264 access units from NAL units (ITU-T H.264 §7.3.1 NAL unit syntax, §7.4.1.2.3 order of
//! NAL units and access units, §7.3.3 slice header).
//!
//! - The NAL header: `forbidden_zero_bit` (must be 0), `nal_ref_idc`, `nal_unit_type`.
//! - A new access unit starts at an access unit delimiter (9), SEI (6), SPS (7), PPS (8) or
//!   types 14..=18 after a slice of the current one, or at a slice (types 1, 2, 5) whose
//!   `first_mb_in_slice` (`ue(v)`, read past emulation-prevention bytes) is 0.
//! - Kind: an IDR slice (5) makes a keyframe; otherwise `nal_ref_idc > 0` on a slice makes a
//!   reference picture, and `nal_ref_idc == 0` one no picture references (§7.4.1).
//! - SPS (7), PPS (8), SPS extension (13) and subset SPS (15) go to a parameter-set unit.
//!
//! Limits: a new picture is recognised by `first_mb_in_slice == 0` only, not by the full
//! §7.4.1.2.4 comparison (frame_num, pic_parameter_set_id, ...): a stream with arbitrary slice
//! order (Baseline ASO) or redundant pictures would be grouped wrongly. A non-IDR I picture
//! with a recovery-point SEI is a reference, not a keyframe. SVC/MVC NAL units (14, 20) stay
//! with their access unit, and their temporal layers are not read: every unit is in layer 0.

use std::time::Instant;

use super::bits::BitReader;
use super::nal::{Assembler, NalError, NalFacts, NalFramer};
use super::{AccessUnit, Codec};

/// The H.264 NAL header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct H264NalHeader {
    pub nal_ref_idc: u8,
    pub nal_unit_type: u8,
}

impl H264NalHeader {
    /// Parses the first byte of `nal` (NAL number `n` in the stream, for the error).
    pub fn parse(nal: &[u8], n: u64) -> Result<Self, NalError> {
        let &b = nal.first().ok_or(NalError::TruncatedHeader { nal: n })?;
        if b & 0x80 != 0 {
            return Err(NalError::ForbiddenBit { nal: n });
        }
        Ok(Self {
            nal_ref_idc: (b >> 5) & 3,
            nal_unit_type: b & 0x1f,
        })
    }
}

/// Groups H.264 NAL units into access units ([`NalFramer`]).
#[derive(Debug, Clone)]
pub struct H264Framer {
    asm: Assembler,
}

impl H264Framer {
    /// A framer refusing access units over `max_au` bytes.
    pub fn new(max_au: usize) -> Self {
        Self {
            asm: Assembler::new(Codec::H264, max_au),
        }
    }
}

impl NalFramer for H264Framer {
    fn push_nal(&mut self, nal: &[u8], now: Instant) -> Result<Vec<AccessUnit>, NalError> {
        let n = self.asm.nals;
        let h = H264NalHeader::parse(nal, n)?;
        let t = h.nal_unit_type;
        let mut facts = NalFacts {
            starts_au: matches!(t, 6..=9 | 14..=18),
            parameter_set: matches!(t, 7 | 8 | 13 | 15),
            ..NalFacts::default()
        };
        if matches!(t, 1 | 2 | 5) {
            let first_mb =
                BitReader::rbsp(&nal[1..])
                    .ue()
                    .map_err(|_| NalError::TruncatedSliceHeader {
                        nal: n,
                        nal_type: t,
                    })?;
            facts.vcl = true;
            facts.starts_au = first_mb == 0;
            facts.key = t == 5;
            facts.reference = h.nal_ref_idc > 0;
        }
        self.asm.add(nal, facts, now)
    }

    fn finish(&mut self) -> Vec<AccessUnit> {
        self.asm.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoded::FrameKind;
    use crate::encoded::FrameKind::*;

    fn frame(nals: &[&[u8]]) -> Result<Vec<(FrameKind, usize)>, NalError> {
        let now = Instant::now();
        let mut f = H264Framer::new(1 << 16);
        let mut out = Vec::new();
        for n in nals {
            out.extend(f.push_nal(n, now)?);
        }
        out.extend(f.finish());
        Ok(out.iter().map(|u| (u.kind, u.data.len())).collect())
    }

    #[test]
    fn groups_by_first_mb_and_delimiters() {
        let aud: &[u8] = &[0x09, 0xf0];
        let sps: &[u8] = &[0x67, 0x42];
        let idr0: &[u8] = &[0x65, 0x88]; // first_mb 0
        let idr1: &[u8] = &[0x65, 0x40]; // first_mb 1 (ue "010")
        let p0: &[u8] = &[0x41, 0x9a];
        let b0: &[u8] = &[0x01, 0x9a];
        let sei: &[u8] = &[0x06, 0x05];
        let units = frame(&[aud, sps, idr0, idr1, p0, sei, b0, aud, p0]).unwrap();
        assert_eq!(
            units,
            [
                (ParameterSets, 6),
                (Keyframe, 6 + 6 + 6),
                (Reference, 6),
                (NonReference, 12),
                (Reference, 12)
            ]
        );
    }

    #[test]
    fn first_mb_behind_emulation_prevention() {
        // RBSP 00 00 01 ff ff ff (first_mb_in_slice with 23 leading zeros), escaped as
        // 00 00 03 01 ...: read through the escape, it is a whole ue(v) and not 0.
        let s: &[u8] = &[0x41, 0x00, 0x00, 0x03, 0x01, 0xff, 0xff, 0xff];
        assert_eq!(
            frame(&[&[0x65, 0x88], s]).unwrap().len(),
            1,
            "first_mb != 0: same picture"
        );
    }

    #[test]
    fn precise_errors() {
        assert_eq!(frame(&[&[]]), Err(NalError::TruncatedHeader { nal: 0 }));
        assert_eq!(
            frame(&[&[0x65, 0x88], &[0xe5]]),
            Err(NalError::ForbiddenBit { nal: 1 })
        );
        assert_eq!(
            frame(&[&[0x41]]),
            Err(NalError::TruncatedSliceHeader {
                nal: 0,
                nal_type: 1
            })
        );
        let mut f = H264Framer::new(8);
        let e = f
            .push_nal(&[0x41, 0x80, 1, 2, 3], Instant::now())
            .unwrap_err();
        assert_eq!(e, NalError::AccessUnitTooLarge { nal: 0, limit: 8 });
    }
}
