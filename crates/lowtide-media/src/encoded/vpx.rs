//! VP8 and VP9 frames: keyframe or not, and (VP9) whether a frame refreshes a reference slot.
//!
//! - VP8 (RFC 6386 §9.1, the frame tag): bit 0 of the first byte is 0 for a key frame, which
//!   must then carry the start code `9d 01 2a` and its dimensions (10 bytes in all). Whether
//!   an inter frame refreshes the last, golden or altref buffer is in the bool-coded header
//!   (§9.7, §9.8), which we do not decode: every inter frame counts as a reference.
//! - VP9 (VP9 Bitstream Specification v0.6, §6.2 `uncompressed_header`, Annex B superframes):
//!   `frame_marker`, the profile, `show_existing_frame`, `frame_type` (0: key frame),
//!   `show_frame`, `error_resilient_mode`, then for a non-key frame `intra_only`,
//!   `reset_frame_context` and, after the sync code and colour config of an intra-only frame,
//!   `refresh_frame_flags`: 0 means no frame can reference it. A superframe (several frames
//!   in one IVF frame, its index at the end) is a keyframe if its first frame is one, and a
//!   reference if any of its frames refreshes a slot. A `show_existing_frame` frame refreshes
//!   nothing (non-reference).
//!
//! Neither carries a temporal layer id in the bitstream (VP8's comes from the RTP payload
//! descriptor or `GstVP8Meta`): every frame is in layer 0 here.

use super::bits::{BitReader, OutOfBits};
use super::{FrameError, FrameFacts, FrameKind};

/// Classifies one VP8 frame.
pub(crate) fn vp8(data: &[u8]) -> Result<FrameFacts, FrameError> {
    let &tag = data.first().ok_or(FrameError::Empty)?;
    if data.len() < 3 {
        return Err(FrameError::Truncated {
            what: "VP8 frame tag",
        });
    }
    if tag & 1 == 0 {
        if data.len() < 10 {
            return Err(FrameError::Truncated {
                what: "VP8 key frame header",
            });
        }
        if data[3..6] != [0x9d, 0x01, 0x2a] {
            return Err(FrameError::BadStartCode);
        }
        return Ok(FrameFacts::of(FrameKind::Keyframe));
    }
    Ok(FrameFacts::of(FrameKind::Reference))
}

/// The sizes of a VP9 superframe's frames, if `data` ends with a superframe index.
fn superframe(data: &[u8]) -> Result<Option<Vec<usize>>, FrameError> {
    let &last = data.last().ok_or(FrameError::Empty)?;
    if last & 0xe0 != 0xc0 {
        return Ok(None);
    }
    let frames = usize::from(last & 7) + 1;
    let mag = usize::from((last >> 3) & 3) + 1;
    let index_len = 2 + mag * frames;
    if data.len() < index_len || data[data.len() - index_len] != last {
        // Not an index after all: a frame's last byte may look like a marker.
        return Ok(None);
    }
    let index = &data[data.len() - index_len + 1..data.len() - 1];
    let sizes: Vec<usize> = index
        .chunks(mag)
        .map(|c| {
            c.iter()
                .rev()
                .fold(0usize, |v, &b| (v << 8) | usize::from(b))
        })
        .collect();
    let total: usize = sizes.iter().sum();
    if total > data.len() - index_len {
        return Err(FrameError::BadSuperframeIndex);
    }
    Ok(Some(sizes))
}

/// `(key, refreshes)` of one VP9 frame.
fn vp9_frame(data: &[u8]) -> Result<(bool, bool), FrameError> {
    let truncated = |_: OutOfBits| FrameError::Truncated {
        what: "VP9 uncompressed header",
    };
    let mut r = BitReader::new(data);
    if r.bits(2).map_err(truncated)? != 2 {
        return Err(FrameError::BadFrameMarker);
    }
    let low = r.bits(1).map_err(truncated)?;
    let profile = (r.bits(1).map_err(truncated)? << 1) | low;
    if profile == 3 {
        r.bit().map_err(truncated)?;
    }
    if r.bit().map_err(truncated)? {
        // show_existing_frame: shows a decoded frame, refreshes none.
        return Ok((false, false));
    }
    let key = !r.bit().map_err(truncated)?;
    if key {
        return Ok((true, true));
    }
    let show_frame = r.bit().map_err(truncated)?;
    let error_resilient = r.bit().map_err(truncated)?;
    let intra_only = !show_frame && r.bit().map_err(truncated)?;
    if !error_resilient {
        r.bits(2).map_err(truncated)?; // reset_frame_context
    }
    if intra_only {
        if r.bits(24).map_err(truncated)? != 0x49_83_42 {
            return Err(FrameError::BadStartCode);
        }
        if profile > 0 {
            if profile >= 2 {
                r.bit().map_err(truncated)?; // ten_or_twelve_bit
            }
            let color_space = r.bits(3).map_err(truncated)?;
            let odd_profile = profile == 1 || profile == 3;
            if color_space != 7 {
                r.bit().map_err(truncated)?; // color_range
                if odd_profile {
                    r.bits(3).map_err(truncated)?; // subsampling_x, _y, reserved
                }
            } else if odd_profile {
                r.bit().map_err(truncated)?;
            }
        }
    }
    let refresh = r.bits(8).map_err(truncated)?;
    Ok((false, refresh != 0))
}

/// Classifies one VP9 frame or superframe.
pub(crate) fn vp9(data: &[u8]) -> Result<FrameFacts, FrameError> {
    let frames = match superframe(data)? {
        Some(sizes) => {
            let mut at = 0;
            let mut parts = Vec::with_capacity(sizes.len());
            for s in sizes {
                parts.push(vp9_frame(&data[at..at + s])?);
                at += s;
            }
            parts
        }
        None => vec![vp9_frame(data)?],
    };
    let kind = if frames[0].0 {
        FrameKind::Keyframe
    } else if frames.iter().any(|f| f.1) {
        FrameKind::Reference
    } else {
        FrameKind::NonReference
    };
    Ok(FrameFacts::of(kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vp8_key_and_inter() {
        let key = [0x10, 0, 0, 0x9d, 0x01, 0x2a, 64, 0, 64, 0];
        assert_eq!(vp8(&key).unwrap().kind, FrameKind::Keyframe);
        assert_eq!(vp8(&[0x11, 0, 0]).unwrap().kind, FrameKind::Reference);
        assert_eq!(vp8(&[]), Err(FrameError::Empty));
        assert_eq!(
            vp8(&[0x10, 0, 0, 1, 2, 3, 0, 0, 0, 0]),
            Err(FrameError::BadStartCode)
        );
        assert!(matches!(
            vp8(&[0x10, 0, 0]),
            Err(FrameError::Truncated { .. })
        ));
    }

    #[test]
    fn vp9_headers() {
        // marker 10, profile 0 (0,0), show_existing 0, frame_type 0: key.
        assert_eq!(
            vp9(&[0b1000_0000, 0x49, 0x83, 0x42]).unwrap().kind,
            FrameKind::Keyframe
        );
        // inter, shown, not error resilient, reset 00, refresh 0000_0000: non-reference.
        assert_eq!(
            vp9(&[0b1000_0110, 0b0000_0000, 0]).unwrap().kind,
            FrameKind::NonReference
        );
        // ... refresh_frame_flags 0000_1000 (the 8 bits after reset_frame_context).
        assert_eq!(
            vp9(&[0b1000_0110, 0b0000_0010, 0]).unwrap().kind,
            FrameKind::Reference
        );
        // show_existing_frame.
        assert_eq!(vp9(&[0b1000_1000]).unwrap().kind, FrameKind::NonReference);
        assert_eq!(vp9(&[0b0100_0000]), Err(FrameError::BadFrameMarker));
        assert!(matches!(
            vp9(&[0b1000_0110]),
            Err(FrameError::Truncated { .. })
        ));
    }

    #[test]
    fn vp9_superframe() {
        // A hidden inter frame refreshing slot 0, then a shown existing frame; index of two
        // 1-byte sizes: marker 0b110_00_001.
        let hidden = [0b1000_0100, 0b0000_0010, 0];
        let mut sf = hidden.to_vec();
        sf.push(0b1000_1000);
        sf.extend_from_slice(&[0xc1, 3, 1, 0xc1]);
        assert_eq!(vp9(&sf).unwrap().kind, FrameKind::Reference);
        let mut bad = sf.clone();
        bad[5] = 200;
        assert_eq!(vp9(&bad), Err(FrameError::BadSuperframeIndex));
    }
}
