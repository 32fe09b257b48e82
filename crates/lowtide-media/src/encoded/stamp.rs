//! The capture instant in band: an SEI message that travels inside the video itself, so every
//! transport in a comparison carries it the same way and latency is measured by one rule.
//!
//! A stamp is a `user_data_unregistered` SEI message (H.264 §D.1.7 / §D.2.7, H.265 §D.2.7,
//! payload type 5): lowtide's 16-byte UUID, then the capture time as microseconds since the
//! Unix epoch (big-endian u64). It sits in an SEI NAL unit of its own (H.264 type 6, H.265
//! prefix SEI type 39) placed just before the unit's first picture NAL unit, where both
//! standards allow SEI. Decoders skip user data they do not know, so a stamped stream decodes
//! to the same pictures (test `a_stamped_stream_decodes_to_the_same_pictures`, in
//! `lowtide-cli`'s ffmpeg tests).
//!
//! Why in band: the capture time must survive whatever carries the stream (a lowtide channel,
//! GStreamer's `tcpserversink`, an MPEG-TS pipe) without each transport's own timestamps, which
//! differ.
//!
//! AV1 has no SEI; its stamp is a metadata OBU (AV1 Bitstream & Decoding Process
//! Specification §5.8.1, `obu_type` 5) of an unregistered user private `metadata_type` (6):
//! the same UUID and time, then trailing bits, placed just before the temporal unit's first
//! frame (header) OBU. Decoders skip metadata they do not know (dav1d and libaom do: test
//! `a_stamped_av1_stream_decodes_to_the_same_pictures` in `lowtide-cli`'s ffmpeg tests). VP8
//! and VP9 have no place for user data in the frame and are not stamped.

use super::access_unit::AccessUnit;
use super::annexb::{write_nal, AnnexBError, AnnexBSplitter};
use super::h264::H264NalHeader;
use super::h265::H265NalHeader;
use super::Codec;

/// lowtide's UUID for `user_data_unregistered` (random, version 4).
pub const STAMP_UUID: [u8; 16] = [
    0x6c, 0x6f, 0x77, 0x74, 0x69, 0x64, 0x65, 0x2d, 0x9a, 0x3e, 0x4b, 0x1f, 0x8c, 0x52, 0xd7, 0x07,
];

const USER_DATA_UNREGISTERED: u32 = 5;
const PAYLOAD_LEN: usize = 16 + 8;

/// The SEI NAL unit (without start code) that stamps `capture_us`.
pub fn stamp_nal(codec: Codec, capture_us: u64) -> Option<Vec<u8>> {
    let mut rbsp = Vec::with_capacity(2 + PAYLOAD_LEN + 1);
    rbsp.push(USER_DATA_UNREGISTERED as u8);
    rbsp.push(PAYLOAD_LEN as u8);
    rbsp.extend_from_slice(&STAMP_UUID);
    rbsp.extend_from_slice(&capture_us.to_be_bytes());
    rbsp.push(0x80); // rbsp_trailing_bits
    let mut nal = match codec {
        Codec::H264 => vec![0x06],          // nal_ref_idc 0, SEI
        Codec::H265 => vec![39 << 1, 0x01], // prefix SEI, layer 0, TemporalId 0
        _ => return None,
    };
    escape_into(&rbsp, &mut nal);
    Some(nal)
}

/// A NAL unit's type, from the codec's own header parser (`None`: no header or another codec).
fn nal_type(codec: Codec, nal: &[u8]) -> Option<u8> {
    match codec {
        Codec::H264 => H264NalHeader::parse(nal, 0).ok().map(|h| h.nal_unit_type),
        Codec::H265 => H265NalHeader::parse(nal, 0).ok().map(|h| h.nal_unit_type),
        _ => None,
    }
}

/// Whether a NAL unit (without start code) carries a picture (H.264 types 1-5, H.265 VCL
/// types 0-31).
fn is_picture(codec: Codec, nal: &[u8]) -> bool {
    match (codec, nal_type(codec, nal)) {
        (Codec::H264, Some(t)) => (1..=5).contains(&t),
        (Codec::H265, Some(t)) => t < 32,
        _ => false,
    }
}

/// Whether a NAL unit is SEI (H.264 type 6, H.265 prefix 39 or suffix 40).
fn is_sei(codec: Codec, nal: &[u8]) -> bool {
    matches!(
        (codec, nal_type(codec, nal)),
        (Codec::H264, Some(6)) | (Codec::H265, Some(39 | 40))
    )
}

/// The unit's NAL units, without start codes (a unit's data is Annex-B with 4-byte codes).
fn nal_units(data: &[u8]) -> Vec<Vec<u8>> {
    let mut s = AnnexBSplitter::new(data.len().max(1));
    let mut v = s.push(data).unwrap_or_default();
    v.extend(s.finish().ok().flatten());
    v
}

/// Why an access unit's bytes could not be read for a stamp.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StampError {
    /// Not Annex-B (no start code, a forbidden sequence, an empty NAL unit).
    #[error(transparent)]
    AnnexB(#[from] AnnexBError),
    /// A NAL unit whose header does not parse (forbidden bit set, too short).
    #[error("NAL unit {nal} of the access unit has no valid {codec:?} header")]
    NalHeader { nal: usize, codec: Codec },
    /// A codec without a place for user data (VP8, VP9).
    #[error(
        "{0:?} has no place for user data to carry a stamp (H.264, H.265 and AV1 are stamped)"
    )]
    Codec(Codec),
    /// An AV1 temporal unit whose OBUs do not parse (a forbidden bit, a size past the end,
    /// an OBU without its size field before the last).
    #[error("AV1 OBU {obu} of the temporal unit: {why}")]
    Obu { obu: usize, why: &'static str },
}

/// The NAL units of one Annex-B access unit, checked: every NAL unit has a header of `codec`.
fn checked_nal_units(codec: Codec, data: &[u8]) -> Result<Vec<Vec<u8>>, StampError> {
    if !matches!(codec, Codec::H264 | Codec::H265) {
        return Err(StampError::Codec(codec));
    }
    let mut s = AnnexBSplitter::new(data.len().max(1));
    let mut v = s.push(data)?;
    v.extend(s.finish()?);
    if let Some(nal) = v.iter().position(|n| nal_type(codec, n).is_none()) {
        return Err(StampError::NalHeader { nal, codec });
    }
    Ok(v)
}

/// [`stamp`] on the bytes of one unit as a GStreamer buffer holds it: an Annex-B access unit
/// of H.264 or H.265 (`alignment=au`, [`stamp_annexb`]), or an AV1 temporal unit of OBUs with
/// size fields (`stream-format=obu-stream,alignment=tu`). `None`: left as it is (no picture,
/// or stamped already). Bytes that are not a unit of `codec` are an error.
pub fn stamp_unit_bytes(
    codec: Codec,
    data: &[u8],
    capture_us: u64,
) -> Result<Option<Vec<u8>>, StampError> {
    match codec {
        Codec::Av1 => av1_stamp(data, capture_us),
        _ => stamp_annexb(codec, data, capture_us),
    }
}

/// [`read`] on the bytes of one unit as [`stamp_unit_bytes`] takes them.
pub fn read_unit_bytes(codec: Codec, data: &[u8]) -> Result<Option<u64>, StampError> {
    match codec {
        Codec::Av1 => Ok(av1_read(&av1_obus(data)?)),
        _ => read_annexb(codec, data),
    }
}

/// [`stamp`] on the bytes of one Annex-B access unit (a GStreamer buffer with
/// `alignment=au`): the stamped bytes, or `None` when the unit is left as it is (no picture,
/// or stamped already). Bytes that are not an access unit of `codec` are an error.
pub fn stamp_annexb(
    codec: Codec,
    data: &[u8],
    capture_us: u64,
) -> Result<Option<Vec<u8>>, StampError> {
    let nals = checked_nal_units(codec, data)?;
    if read_nals(codec, &nals).is_some() {
        return Ok(None);
    }
    let Some(first) = nals.iter().position(|n| is_picture(codec, n)) else {
        return Ok(None);
    };
    let sei = stamp_nal(codec, capture_us).ok_or(StampError::Codec(codec))?;
    let mut out = Vec::with_capacity(data.len() + sei.len() + 4 * (nals.len() + 1));
    for (i, n) in nals.iter().enumerate() {
        if i == first {
            write_nal(&mut out, &sei);
        }
        write_nal(&mut out, n);
    }
    Ok(Some(out))
}

/// [`read`] on the bytes of one Annex-B access unit: the stamp, if it has one.
pub fn read_annexb(codec: Codec, data: &[u8]) -> Result<Option<u64>, StampError> {
    Ok(read_nals(codec, &checked_nal_units(codec, data)?))
}

/// Stamps a unit with a picture: its SEI goes just before the first picture NAL unit. Units
/// without a picture (parameter sets alone), units already stamped and codecs without SEI are
/// left as they are; returns whether the unit was stamped.
pub fn stamp(unit: &mut AccessUnit, capture_us: u64) -> bool {
    if unit.codec == Codec::Av1 {
        return match av1_stamp(&unit.data, capture_us) {
            Ok(Some(data)) => {
                unit.data = data;
                true
            }
            _ => false,
        };
    }
    let Some(sei) = stamp_nal(unit.codec, capture_us) else {
        return false;
    };
    let nals = nal_units(&unit.data);
    if read_nals(unit.codec, &nals).is_some() {
        return false;
    }
    let Some(first) = nals.iter().position(|n| is_picture(unit.codec, n)) else {
        return false;
    };
    let mut data = Vec::with_capacity(unit.data.len() + sei.len() + 4);
    for (i, n) in nals.iter().enumerate() {
        if i == first {
            write_nal(&mut data, &sei);
        }
        write_nal(&mut data, n);
    }
    unit.data = data;
    true
}

/// The capture time a unit's stamp carries, if it has one.
pub fn read(unit: &AccessUnit) -> Option<u64> {
    if unit.codec == Codec::Av1 {
        return av1_obus(&unit.data).ok().and_then(|o| av1_read(&o));
    }
    read_nals(unit.codec, &nal_units(&unit.data))
}

fn read_nals(codec: Codec, nals: &[Vec<u8>]) -> Option<u64> {
    let header = if codec == Codec::H265 { 2 } else { 1 };
    nals.iter()
        .filter(|n| is_sei(codec, n) && n.len() > header)
        .find_map(|n| read_sei(&unescape(&n[header..])))
}

/// Walks an SEI RBSP's messages (type and size each as a run of 0xFF bytes plus one byte).
fn read_sei(rbsp: &[u8]) -> Option<u64> {
    let mut at = 0;
    let varint = |at: &mut usize| -> Option<u32> {
        let mut v = 0u32;
        loop {
            let b = *rbsp.get(*at)?;
            *at += 1;
            v = v.checked_add(u32::from(b))?;
            if b != 0xff {
                return Some(v);
            }
        }
    };
    // Another message follows while more than the trailing bits are left.
    while rbsp.len().saturating_sub(at) > 1 {
        let kind = varint(&mut at)?;
        let size = varint(&mut at)? as usize;
        let payload = rbsp.get(at..at.checked_add(size)?)?;
        at += size;
        if kind == USER_DATA_UNREGISTERED && size == PAYLOAD_LEN && payload[..16] == STAMP_UUID {
            let mut us = [0u8; 8];
            us.copy_from_slice(&payload[16..]);
            return Some(u64::from_be_bytes(us));
        }
    }
    None
}

const OBU_METADATA: u8 = 5;
const OBU_FRAME_HEADER: u8 = 3;
const OBU_FRAME: u8 = 6;
/// The first of AV1's unregistered user private metadata types.
const METADATA_USER_PRIVATE: u8 = 6;

/// The metadata OBU (header with size field, size, payload) that stamps `capture_us`.
pub fn av1_stamp_obu(capture_us: u64) -> Vec<u8> {
    let mut payload = Vec::with_capacity(1 + PAYLOAD_LEN + 1);
    payload.push(METADATA_USER_PRIVATE); // leb128 of 6: one byte
    payload.extend_from_slice(&STAMP_UUID);
    payload.extend_from_slice(&capture_us.to_be_bytes());
    payload.push(0x80); // trailing_bits
    let mut obu = vec![(OBU_METADATA << 3) | 0x02, payload.len() as u8];
    obu.extend_from_slice(&payload);
    obu
}

/// One OBU of a temporal unit: its type and its bytes (header, size and payload).
struct Obu<'a> {
    kind: u8,
    bytes: &'a [u8],
    payload: &'a [u8],
}

/// The OBUs of an AV1 temporal unit; every OBU but the last must carry its size.
fn av1_obus(data: &[u8]) -> Result<Vec<Obu<'_>>, StampError> {
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let obu = out.len();
        let bad = |why| StampError::Obu { obu, why };
        let h = rest[0];
        if h & 0x80 != 0 {
            return Err(bad("forbidden bit set"));
        }
        let mut at = 1 + usize::from(h & 0x04 != 0);
        if at > rest.len() {
            return Err(bad("ends inside its extension header"));
        }
        let size = if h & 0x02 != 0 {
            let (v, n) = super::bits::leb128(&rest[at..]).ok_or(bad("bad or truncated size"))?;
            at += n;
            usize::try_from(v).map_err(|_| bad("size out of range"))?
        } else {
            rest.len() - at
        };
        let end = at.checked_add(size).filter(|&e| e <= rest.len());
        let end = end.ok_or(bad("size runs past the end of the unit"))?;
        out.push(Obu {
            kind: (h >> 3) & 0x0f,
            bytes: &rest[..end],
            payload: &rest[at..end],
        });
        rest = &rest[end..];
    }
    Ok(out)
}

fn av1_read(obus: &[Obu<'_>]) -> Option<u64> {
    obus.iter()
        .filter(|o| o.kind == OBU_METADATA)
        .find_map(|o| {
            let p = o.payload;
            (p.len() > PAYLOAD_LEN && p[0] == METADATA_USER_PRIVATE && p[1..17] == STAMP_UUID).then(
                || {
                    let mut us = [0u8; 8];
                    us.copy_from_slice(&p[17..25]);
                    u64::from_be_bytes(us)
                },
            )
        })
}

fn av1_stamp(data: &[u8], capture_us: u64) -> Result<Option<Vec<u8>>, StampError> {
    let obus = av1_obus(data)?;
    if av1_read(&obus).is_some() {
        return Ok(None);
    }
    let Some(first) = obus
        .iter()
        .position(|o| o.kind == OBU_FRAME || o.kind == OBU_FRAME_HEADER)
    else {
        return Ok(None);
    };
    let stamp = av1_stamp_obu(capture_us);
    let mut out = Vec::with_capacity(data.len() + stamp.len());
    for (i, o) in obus.iter().enumerate() {
        if i == first {
            out.extend_from_slice(&stamp);
        }
        out.extend_from_slice(o.bytes);
    }
    Ok(Some(out))
}

/// Emulation prevention (H.264 §7.4.1, H.265 §7.4.2): a 0x03 after two zero bytes when the
/// next byte is 0-3.
fn escape_into(rbsp: &[u8], out: &mut Vec<u8>) {
    let mut zeros = 0;
    for &b in rbsp {
        if zeros >= 2 && b <= 3 {
            out.push(3);
            zeros = 0;
        }
        out.push(b);
        zeros = if b == 0 { zeros + 1 } else { 0 };
    }
}

fn unescape(ebsp: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(ebsp.len());
    let mut zeros = 0;
    for &b in ebsp {
        if zeros >= 2 && b == 3 {
            zeros = 0;
            continue;
        }
        out.push(b);
        zeros = if b == 0 { zeros + 1 } else { 0 };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoded::FrameKind;
    use proptest::prelude::*;
    use std::time::Instant;

    fn unit(codec: Codec, nals: &[&[u8]]) -> AccessUnit {
        let mut data = Vec::new();
        for n in nals {
            write_nal(&mut data, n);
        }
        AccessUnit {
            codec,
            index: 0,
            data,
            kind: FrameKind::Keyframe,
            temporal_id: 0,
            has_parameter_sets: false,
            skipped_at_random_access: false,
            pts: None,
            capture: Instant::now(),
        }
    }

    #[test]
    fn the_stamp_goes_before_the_first_picture_and_reads_back() {
        let aud: &[u8] = &[0x09, 0xf0];
        let x264_sei: &[u8] = &[0x06, 0x05, 0x01, 0xaa, 0x80];
        let idr: &[u8] = &[0x65, 0x88, 0x84, 0x00, 0x33];
        let mut u = unit(Codec::H264, &[aud, x264_sei, idr]);
        assert_eq!(read(&u), None);
        assert!(stamp(&mut u, 1_764_000_000_123_456));
        assert_eq!(read(&u), Some(1_764_000_000_123_456));
        let nals = nal_units(&u.data);
        assert_eq!(nals.len(), 4);
        assert_eq!(
            (nals[0].as_slice(), nals[1].as_slice(), nals[3].as_slice()),
            (aud, x264_sei, idr)
        );
        assert!(is_sei(Codec::H264, &nals[2]));
        // Stamped once only; a unit of parameter sets alone is not stamped.
        assert!(!stamp(&mut u, 7));
        assert_eq!(read(&u), Some(1_764_000_000_123_456));
        let mut sps = unit(Codec::H264, &[&[0x67, 0x42, 0x00, 0x1e]]);
        assert!(!stamp(&mut sps, 7));
        // H.265: a prefix SEI before a TRAIL_R slice; VP8 has no SEI.
        let mut h = unit(Codec::H265, &[&[0x02, 0x01, 0xd0, 0x2f]]);
        assert!(stamp(&mut h, 42));
        assert_eq!(read(&h), Some(42));
        assert_eq!(nal_units(&h.data)[0][..2], [39 << 1, 0x01]);
        let mut v = unit(Codec::Vp8, &[]);
        v.data = vec![0x10, 0x02, 0x00];
        assert!(!stamp(&mut v, 1));
    }

    #[test]
    fn a_foreign_or_broken_sei_is_no_stamp() {
        let mut other_uuid = vec![0x06, 0x05, 24];
        other_uuid.extend_from_slice(&[0x11; 16]);
        other_uuid.extend_from_slice(&[0; 8]);
        other_uuid.push(0x80);
        let idr: &[u8] = &[0x65, 0x88];
        assert_eq!(read(&unit(Codec::H264, &[&other_uuid, idr])), None);
        // Truncated: the size runs past the NAL unit's end.
        let truncated = &stamp_nal(Codec::H264, 5).unwrap()[..10];
        assert_eq!(read(&unit(Codec::H264, &[truncated, idr])), None);
        // 0xFF runs in type and size do not overflow.
        let ffs: Vec<u8> = std::iter::once(0x06)
            .chain(std::iter::repeat_n(0xff, 64))
            .collect();
        assert_eq!(read(&unit(Codec::H264, &[&ffs, idr])), None);
    }

    #[test]
    fn annexb_bytes_stamp_and_read_back_and_garbage_is_an_error() {
        let u = unit(Codec::H264, &[&[0x09, 0xf0], &[0x65, 0x88, 0x84]]);
        assert_eq!(read_annexb(Codec::H264, &u.data), Ok(None));
        let stamped = stamp_annexb(Codec::H264, &u.data, 99).unwrap().unwrap();
        assert_eq!(read_annexb(Codec::H264, &stamped), Ok(Some(99)));
        // Stamped once; parameter sets alone are left; 3-byte start codes are read too.
        assert_eq!(stamp_annexb(Codec::H264, &stamped, 5), Ok(None));
        assert_eq!(
            stamp_annexb(Codec::H264, &[0, 0, 1, 0x67, 0x42], 5),
            Ok(None)
        );
        assert!(matches!(
            stamp_annexb(Codec::H264, b"not a video", 5),
            Err(StampError::AnnexB(AnnexBError::NoStartCode { .. }))
        ));
        assert_eq!(
            stamp_annexb(Codec::H264, &[0, 0, 0, 1, 0xe5, 0x00], 5),
            Err(StampError::NalHeader {
                nal: 0,
                codec: Codec::H264
            })
        );
        assert_eq!(
            read_annexb(Codec::Vp8, &[1, 2]),
            Err(StampError::Codec(Codec::Vp8))
        );
    }

    #[test]
    fn an_av1_temporal_unit_gets_a_metadata_obu_before_its_frame() {
        // Temporal delimiter, sequence header (3 bytes), frame (4 bytes), each with a size.
        let td: &[u8] = &[0x12, 0x00];
        let seq: &[u8] = &[0x0a, 0x03, 0x00, 0x00, 0x00];
        let frame: &[u8] = &[0x32, 0x04, 0x10, 0x00, 0x00, 0x00];
        let tu = [td, seq, frame].concat();
        assert_eq!(read_unit_bytes(Codec::Av1, &tu), Ok(None));
        let stamped = stamp_unit_bytes(Codec::Av1, &tu, 1_764_000_000_654_321)
            .unwrap()
            .unwrap();
        assert_eq!(
            read_unit_bytes(Codec::Av1, &stamped),
            Ok(Some(1_764_000_000_654_321))
        );
        let obu = av1_stamp_obu(1_764_000_000_654_321);
        assert_eq!(stamped, [td, seq, &obu, frame].concat());
        // Once only; a unit without a frame is left; a truncated OBU is an error naming it.
        assert_eq!(stamp_unit_bytes(Codec::Av1, &stamped, 5), Ok(None));
        assert_eq!(
            stamp_unit_bytes(Codec::Av1, &[td, seq].concat(), 5),
            Ok(None)
        );
        assert!(matches!(
            stamp_unit_bytes(Codec::Av1, &[0x32, 0x09, 0x10], 5),
            Err(StampError::Obu { obu: 0, .. })
        ));
        // The AccessUnit form, and the codecs without a place for it.
        let mut u = unit(Codec::Av1, &[]);
        u.data = tu.clone();
        assert!(stamp(&mut u, 77));
        assert_eq!(read(&u), Some(77));
        assert_eq!(
            read_unit_bytes(Codec::Vp9, &[0x82, 0x49]),
            Err(StampError::Codec(Codec::Vp9))
        );
    }

    proptest! {
        /// Arbitrary bytes as an AV1 temporal unit never panic, and a stamp reads back.
        #[test]
        fn arbitrary_av1_bytes_do_not_panic(body in proptest::collection::vec(any::<u8>(), 0..200), us in any::<u64>()) {
            let _ = read_unit_bytes(Codec::Av1, &body);
            if let Ok(Some(s)) = stamp_unit_bytes(Codec::Av1, &body, us) {
                prop_assert_eq!(read_unit_bytes(Codec::Av1, &s), Ok(Some(us)));
            }
        }

        /// Any time round-trips, also those whose bytes need emulation prevention.
        #[test]
        fn any_time_round_trips(us in prop_oneof![any::<u64>(), (0u64..4).prop_map(|x| x << 8), Just(0u64)]) {
            for codec in [Codec::H264, Codec::H265] {
                let nal = stamp_nal(codec, us).unwrap();
                let header = if codec == Codec::H265 { 2 } else { 1 };
                prop_assert!(!nal.windows(3).any(|w| w[0] == 0 && w[1] == 0 && w[2] <= 3 && w[2] != 3));
                prop_assert_eq!(read_sei(&unescape(&nal[header..])), Some(us));
            }
        }

        /// Arbitrary SEI bytes never panic and never read as a stamp by accident.
        #[test]
        fn arbitrary_sei_bytes_do_not_panic(body in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = read_sei(&body);
            let mut nal = vec![0x06];
            nal.extend_from_slice(&body);
            let _ = read_nals(Codec::H264, &[nal]);
        }
    }
}
