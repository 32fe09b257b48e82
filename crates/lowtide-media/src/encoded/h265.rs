//! H.265 access units from NAL units (ITU-T H.265 §7.3.1.2 NAL unit header, §7.4.2.2 its
//! semantics and the NAL unit types, §7.4.2.4.4 order of NAL units and access units).
//!
//! - The 2-byte header: `forbidden_zero_bit` (must be 0), `nal_unit_type` (6 bits),
//!   `nuh_layer_id` (6), `nuh_temporal_id_plus1` (3, must not be 0): the temporal id.
//! - A new access unit starts at AUD (35), VPS/SPS/PPS (32..=34), prefix SEI (39) or types
//!   41..=44 and 48..=55 after a slice of the current one, or at a slice segment (types
//!   0..=31) whose `first_slice_segment_in_pic_flag` is 1.
//! - Kind: IRAP pictures (16..=23: BLA, IDR, CRA) are keyframes. The sub-layer non-reference
//!   types (`_N`: 0, 2, 4, ..., 14) are not referenced by pictures of their own sub-layer but
//!   may be by higher ones (§3, "sub-layer non-reference picture"), so only those in the
//!   highest sub-layer (`sps_max_sub_layers_minus1`, read from the SPS) are non-reference;
//!   the others are references. RASL pictures (8, 9) are marked: they cannot be decoded when
//!   decoding starts at the CRA before them.
//! - VPS, SPS and PPS go to a parameter-set unit.
//!
//! Limits: NAL units with `nuh_layer_id > 0` (scalable or multiview layers) stay with their
//! access unit and do not start one; the highest sub-layer is taken from the last SPS seen
//! (one SPS per stream, as encoders send it).

use std::time::Instant;

use super::bits::BitReader;
use super::nal::{Assembler, NalError, NalFacts, NalFramer};
use super::{AccessUnit, Codec};

/// The H.265 NAL header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct H265NalHeader {
    pub nal_unit_type: u8,
    pub layer_id: u8,
    /// `nuh_temporal_id_plus1 - 1`.
    pub temporal_id: u8,
}

impl H265NalHeader {
    /// Parses the first two bytes of `nal` (NAL number `n` in the stream, for the error).
    pub fn parse(nal: &[u8], n: u64) -> Result<Self, NalError> {
        let [b0, b1, ..] = *nal else {
            return Err(NalError::TruncatedHeader { nal: n });
        };
        if b0 & 0x80 != 0 {
            return Err(NalError::ForbiddenBit { nal: n });
        }
        let tid_plus1 = b1 & 7;
        if tid_plus1 == 0 {
            return Err(NalError::ZeroTemporalId { nal: n });
        }
        Ok(Self {
            nal_unit_type: (b0 >> 1) & 0x3f,
            layer_id: ((b0 & 1) << 5) | (b1 >> 3),
            temporal_id: tid_plus1 - 1,
        })
    }

    /// An IRAP picture (§7.4.2.2: types 16..=23).
    pub fn is_irap(&self) -> bool {
        (16..=23).contains(&self.nal_unit_type)
    }
}

/// Groups H.265 NAL units into access units ([`NalFramer`]).
#[derive(Debug, Clone)]
pub struct H265Framer {
    asm: Assembler,
    /// `sps_max_sub_layers_minus1` of the last SPS.
    highest_sub_layer: Option<u8>,
}

impl H265Framer {
    /// A framer refusing access units over `max_au` bytes.
    pub fn new(max_au: usize) -> Self {
        Self {
            asm: Assembler::new(Codec::H265, max_au),
            highest_sub_layer: None,
        }
    }
}

impl NalFramer for H265Framer {
    fn push_nal(&mut self, nal: &[u8], now: Instant) -> Result<Vec<AccessUnit>, NalError> {
        let n = self.asm.nals;
        let h = H265NalHeader::parse(nal, n)?;
        let t = h.nal_unit_type;
        let base = h.layer_id == 0;
        let mut facts = NalFacts {
            starts_au: base && matches!(t, 32..=35 | 39 | 41..=44 | 48..=55),
            parameter_set: matches!(t, 32..=34),
            temporal_id: h.temporal_id,
            ..NalFacts::default()
        };
        if t == 33 && base {
            // sps_video_parameter_set_id u(4), sps_max_sub_layers_minus1 u(3).
            let mut r = BitReader::rbsp(&nal[2..]);
            let minus1 = r.bits(4).and_then(|_| r.bits(3));
            let minus1 = minus1.map_err(|_| NalError::TruncatedParameterSet { nal: n })?;
            self.highest_sub_layer = Some(minus1 as u8);
        }
        if t < 32 {
            let first =
                BitReader::rbsp(&nal[2..])
                    .bit()
                    .map_err(|_| NalError::TruncatedSliceHeader {
                        nal: n,
                        nal_type: t,
                    })?;
            facts.vcl = true;
            facts.starts_au = base && first;
            facts.key = h.is_irap();
            let sub_layer_non_ref = t <= 14 && t % 2 == 0;
            facts.reference = !sub_layer_non_ref || self.highest_sub_layer != Some(h.temporal_id);
            facts.rasl = matches!(t, 8 | 9);
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
    use crate::encoded::FrameKind::{self, *};

    fn frame(nals: &[&[u8]]) -> Result<Vec<(FrameKind, u8, bool)>, NalError> {
        let now = Instant::now();
        let mut f = H265Framer::new(1 << 16);
        let mut out = Vec::new();
        for n in nals {
            out.extend(f.push_nal(n, now)?);
        }
        out.extend(f.finish());
        Ok(out
            .iter()
            .map(|u| (u.kind, u.temporal_id, u.skipped_at_random_access))
            .collect())
    }

    /// A header for type `t`, temporal id `tid`, then `rest`.
    fn nal(t: u8, tid: u8, rest: &[u8]) -> Vec<u8> {
        let mut v = vec![t << 1, tid + 1];
        v.extend_from_slice(rest);
        v
    }

    #[test]
    fn irap_layers_and_sub_layer_non_reference() {
        let vps = nal(32, 0, &[0x0c]);
        let sps = nal(33, 0, &[0x02]); // vps id 0, max_sub_layers_minus1 = 1
        let cra = nal(21, 0, &[0x80]);
        let rasl_n = nal(8, 0, &[0x80]);
        let trail_n1 = nal(0, 1, &[0x80]);
        let trail_n0 = nal(0, 0, &[0x80]);
        let second_segment = nal(0, 0, &[0x00]);
        let aud = nal(35, 0, &[0x50]);
        let units = frame(&[
            &vps,
            &sps,
            &cra,
            &rasl_n,
            &trail_n1,
            &aud,
            &trail_n0,
            &second_segment,
        ])
        .unwrap();
        assert_eq!(
            units,
            [
                (ParameterSets, 0, false),
                (Keyframe, 0, false),
                (Reference, 0, true), // RASL_N in layer 0 of 2: layer 1 may reference it
                (NonReference, 1, false),
                (Reference, 0, false),
            ]
        );
    }

    #[test]
    fn precise_errors() {
        assert_eq!(frame(&[&[0x40]]), Err(NalError::TruncatedHeader { nal: 0 }));
        assert_eq!(frame(&[&[0xc0, 1]]), Err(NalError::ForbiddenBit { nal: 0 }));
        assert_eq!(
            frame(&[&[0x40, 0]]),
            Err(NalError::ZeroTemporalId { nal: 0 })
        );
        assert_eq!(
            frame(&[&[0x42, 1]]),
            Err(NalError::TruncatedParameterSet { nal: 0 })
        );
        assert_eq!(
            frame(&[&nal(1, 0, &[])]),
            Err(NalError::TruncatedSliceHeader {
                nal: 0,
                nal_type: 1
            })
        );
    }
}
