//! AV1 temporal units (one IVF frame each): the OBUs inside, enough of them to tell a key
//! frame (AV1 Bitstream & Decoding Process Specification §5.3 OBU syntax, §5.5 sequence header,
//! §5.9.2 uncompressed header, §7.5 ordering of OBUs).
//!
//! Each OBU: the header (`obu_forbidden_bit` 0, `obu_type`, `obu_extension_flag`,
//! `obu_has_size_field`), the extension (`temporal_id`, `spatial_id`) if flagged, the size as
//! `leb128()` (without it, the OBU runs to the end). Read from the OBUs:
//! - a sequence header (type 1) marks the unit as carrying parameter sets, and its
//!   `reduced_still_picture_header` bit says whether frame headers have the fields below;
//! - a frame header (3) or frame (6): `show_existing_frame`, `frame_type`, `show_frame`. A
//!   shown `KEY_FRAME` makes the unit a keyframe;
//! - the temporal id of the first frame (header) OBU is the unit's.
//!
//! Limits: `refresh_frame_flags` comes after fields that depend on the sequence header
//! (frame id numbers, order hints, screen content tools...) and is not read, so every other
//! unit is a reference (a frame with `refresh_frame_flags = 0` would be droppable); a hidden
//! key frame shown later by `show_existing_frame` (delayed random access) is not a keyframe
//! here; the sequence header stays inside its temporal unit (libaom and SVT-AV1 send one with
//! every key frame, so losing it is losing the key frame).

use super::bits::{leb128, BitReader};
use super::{FrameError, FrameFacts, FrameKind};

/// What a temporal unit's parsing needs from earlier ones.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Av1State {
    reduced_still_picture_header: bool,
}

impl Av1State {
    /// Classifies one temporal unit.
    pub(crate) fn temporal_unit(&mut self, data: &[u8]) -> Result<FrameFacts, FrameError> {
        if data.is_empty() {
            return Err(FrameError::Empty);
        }
        let mut rest = data;
        let mut facts = FrameFacts::of(FrameKind::Reference);
        let mut frames = 0;
        while !rest.is_empty() {
            let h = rest[0];
            if h & 0x80 != 0 {
                return Err(FrameError::ObuForbiddenBit);
            }
            let obu_type = (h >> 3) & 0xf;
            let ext = h & 4 != 0;
            let has_size = h & 2 != 0;
            let mut at = 1;
            let mut temporal_id = 0;
            if ext {
                let &e = rest.get(1).ok_or(FrameError::Truncated {
                    what: "OBU extension",
                })?;
                temporal_id = e >> 5;
                at += 1;
            }
            let size = if has_size {
                let (v, n) =
                    leb128(&rest[at..]).ok_or(FrameError::Truncated { what: "OBU size" })?;
                at += n;
                usize::try_from(v).unwrap_or(usize::MAX)
            } else {
                rest.len() - at
            };
            if size > rest.len() - at {
                return Err(FrameError::Truncated {
                    what: "OBU payload",
                });
            }
            let payload = &rest[at..at + size];
            rest = &rest[at + size..];
            let truncated = |_| FrameError::Truncated { what: "AV1 header" };
            match obu_type {
                1 => {
                    facts.has_parameter_sets = true;
                    let mut r = BitReader::new(payload);
                    r.bits(4).map_err(truncated)?; // seq_profile, still_picture
                    self.reduced_still_picture_header = r.bit().map_err(truncated)?;
                }
                3 | 6 => {
                    if frames == 0 {
                        facts.temporal_id = temporal_id;
                    }
                    frames += 1;
                    let key = if self.reduced_still_picture_header {
                        true
                    } else {
                        let mut r = BitReader::new(payload);
                        let show_existing = r.bit().map_err(truncated)?;
                        !show_existing && {
                            let frame_type = r.bits(2).map_err(truncated)?;
                            let show_frame = r.bit().map_err(truncated)?;
                            frame_type == 0 && show_frame
                        }
                    };
                    if key {
                        facts.kind = FrameKind::Keyframe;
                    }
                }
                _ => {}
            }
        }
        if frames == 0 {
            return Err(FrameError::NoFrame);
        }
        Ok(facts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obu(obu_type: u8, ext: Option<u8>, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![(obu_type << 3) | 2 | if ext.is_some() { 4 } else { 0 }];
        if let Some(t) = ext {
            v.push(t << 5);
        }
        v.push(payload.len() as u8);
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn key_inter_and_layers() {
        let mut s = Av1State::default();
        let td = obu(2, None, &[]);
        let seq = obu(1, None, &[0b0000_0000, 0]);
        // show_existing 0, frame_type 00 (KEY), show_frame 1.
        let key = [td.clone(), seq, obu(6, None, &[0b0001_0000, 0])].concat();
        let f = s.temporal_unit(&key).unwrap();
        assert_eq!((f.kind, f.has_parameter_sets), (FrameKind::Keyframe, true));
        // frame_type 01 (INTER) in temporal layer 2.
        let inter = [td.clone(), obu(6, Some(2), &[0b0011_0000, 0])].concat();
        let f = s.temporal_unit(&inter).unwrap();
        assert_eq!(
            (f.kind, f.temporal_id, f.has_parameter_sets),
            (FrameKind::Reference, 2, false)
        );
        // A hidden key frame is not a keyframe here.
        let hidden = [td.clone(), obu(3, None, &[0b0000_0000])].concat();
        assert_eq!(s.temporal_unit(&hidden).unwrap().kind, FrameKind::Reference);
    }

    #[test]
    fn precise_errors() {
        let mut s = Av1State::default();
        assert_eq!(s.temporal_unit(&[]), Err(FrameError::Empty));
        assert_eq!(s.temporal_unit(&[0x80]), Err(FrameError::ObuForbiddenBit));
        assert_eq!(
            s.temporal_unit(&obu(2, None, &[])),
            Err(FrameError::NoFrame)
        );
        assert_eq!(
            s.temporal_unit(&[0x32, 5, 0]),
            Err(FrameError::Truncated {
                what: "OBU payload"
            })
        );
        assert_eq!(
            s.temporal_unit(&[0x32, 0x80]),
            Err(FrameError::Truncated { what: "OBU size" })
        );
        assert_eq!(
            s.temporal_unit(&obu(6, None, &[])),
            Err(FrameError::Truncated { what: "AV1 header" })
        );
    }
}
