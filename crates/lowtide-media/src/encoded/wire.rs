//! The messages of an encoded-video stream on a lowtide channel (`lowtide send --input`,
//! `lowtide recv --output`): one message per access unit with a small header in front, and
//! three control messages. Big-endian, like the layered media header ([`crate::wire`]), whose
//! tags (`0x01`, `0x02`) these do not reuse, so each receiver refuses the other's stream.
//!
//! ```text
//! start:    0x20 | version u8 (1) | codec u8 | ivf u8 (0 or 1) | [IVF file header, 32 bytes]
//! unit:     0x21 | codec u8 | index u64 | kind u8 | temporal_id u8 | flags u8
//!                | capture_us u64 | [pts u64, if flags & PTS] | the unit's bytes
//! dropped:  0x22 | count u16 | count × (index u64 | kind u8 | temporal_id u8 | flags u8)
//! end:      0x23 | units u64
//! keyframe: 0x24 | reason u8 | index u64 | dropped_since u64      (receiver to sender)
//! publish:  0x25 | path_len u8 | path (UTF-8) | token_len u8 | token (UTF-8)
//! pull:     0x26 | path_len u8 | path (UTF-8) | token_len u8 | token (UTF-8)
//! ```
//!
//! - `codec`: 1 H.264, 2 H.265, 3 VP8, 4 VP9, 5 AV1. `kind`: 0 parameter sets, 1 keyframe,
//!   2 reference, 3 non-reference ([`FrameKind`]). `flags`: bit 0 the unit is skipped at random
//!   access (H.265 RASL), bit 1 it carries parameter sets, bit 2 a `pts` follows; other bits
//!   must be 0.
//! - `capture_us`: the unit's capture time in µs since the sender's first unit (the sender's
//!   clock; the receiver uses it only for logs, the two clocks are not aligned).
//! - `start` comes first, once: the codec and, for IVF, the container's file header, so the
//!   receiver can write an IVF stream back. `dropped` tells the receiver which units will not
//!   come and what they were ([`UnitInfo`]), so its gate breaks only what depends on them;
//!   without it a gap would count as a lost reference. `end` gives the number of units the
//!   stream had, so the receiver knows the last one and can stop.
//! - `keyframe` goes the other way, on a stream the receiver opens: its gate's
//!   [`KeyframeRequest`] for the sender's encoder (`reason` 0: no keyframe yet, 1: reference
//!   unit `index` was lost; `index` is 0 for reason 0).
//! - `publish` comes before `start` on a stream sent to a server (`lowtide serve`): the
//!   stream's path there and the publish token that allows it ([`encode_publish`]). A plain
//!   receiver refuses it; the server reads it and hands the rest to its receiver.
//! - `pull` is the first message a relay (`lowtide serve --upstream`) sends to another server:
//!   the path of the stream it wants and the server's relay token. The server answers on
//!   the same channel with that stream (`start`, units, `dropped`, `end`), and the relay's
//!   keyframe requests go back to it ([`encode_pull`]).
//!
//! # When decoding fails
//! [`decode`] never panics: a message shorter than its fixed part or its `count`, an unknown
//! tag, version, codec or kind, a flag bit that is not defined, an `ivf` byte other than 0 or
//! 1, or an IVF header that [`IvfHeader::parse`] refuses is a [`WireError`] naming the field.

use super::ivf::{IvfError, IvfHeader, IVF_HEADER_LEN};
use super::{Codec, FrameKind, KeyframeRequest, RequestReason, UnitInfo};

/// Tag of the stream's first message.
pub const TAG_START: u8 = 0x20;
/// Tag of a unit message.
pub const TAG_UNIT: u8 = 0x21;
/// Tag of a dropped-units notice.
pub const TAG_DROPPED: u8 = 0x22;
/// Tag of the stream's last message.
pub const TAG_END: u8 = 0x23;
/// Tag of a keyframe request (receiver to sender).
pub const TAG_KEYFRAME_REQUEST: u8 = 0x24;
/// Tag of a publish message (sender to a server, before [`TAG_START`]).
pub const TAG_PUBLISH: u8 = 0x25;
/// Tag of a pull message (a relay to the server it pulls a stream from).
pub const TAG_PULL: u8 = 0x26;
/// The header version this module writes and reads.
pub const VERSION: u8 = 1;
/// A unit message's header without the optional `pts`.
pub const UNIT_HEADER_LEN: usize = 1 + 1 + 8 + 1 + 1 + 1 + 8;
/// Units one `dropped` notice lists at most.
pub const MAX_DROPPED_PER_NOTICE: usize = u16::MAX as usize;

const FLAG_RASL: u8 = 1;
const FLAG_PARAMETER_SETS: u8 = 2;
const FLAG_PTS: u8 = 4;
const DROPPED_ENTRY_LEN: usize = 8 + 3;

/// Why a message is not one of this stream's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The message ends inside `what`.
    #[error("encoded-video message of {len} bytes ends inside its {what}")]
    Short { what: &'static str, len: usize },
    /// A tag none of [`TAG_START`], [`TAG_UNIT`], [`TAG_DROPPED`], [`TAG_END`],
    /// [`TAG_KEYFRAME_REQUEST`], [`TAG_PUBLISH`], [`TAG_PULL`].
    #[error("unknown encoded-video message tag {0:#04x} (not an encoded-video stream?)")]
    UnknownTag(u8),
    /// A start message of another version.
    #[error("encoded-video stream version {0}, this receiver reads version {VERSION}")]
    Version(u8),
    /// A codec byte outside 1..=5.
    #[error("unknown codec {0}")]
    UnknownCodec(u8),
    /// A kind byte outside 0..=3.
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    /// A keyframe request's reason byte outside 0..=1.
    #[error("unknown keyframe request reason {0}")]
    UnknownReason(u8),
    /// A publish or pull message whose path or token is not UTF-8, or a path that is empty,
    /// holds something other than `[A-Za-z0-9._-]` and `/`, or starts with `/`.
    #[error("bad publish {what}: {why}")]
    BadPublish {
        what: &'static str,
        why: &'static str,
    },
    /// Flag bits that are not defined.
    #[error("undefined flag bits {0:#04x}")]
    UnknownFlags(u8),
    /// The start message's `ivf` byte is not 0 or 1, or says IVF for an H.264/H.265 stream.
    #[error("bad IVF marker {ivf} for codec {codec:?}")]
    BadIvfMarker { ivf: u8, codec: Codec },
    /// The IVF file header in the start message is refused.
    #[error("IVF header in the start message: {0}")]
    Ivf(IvfError),
}

/// The stream's first message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamStart {
    pub codec: Codec,
    /// The IVF file header, for a VP8, VP9 or AV1 stream read from IVF.
    pub ivf: Option<IvfHeader>,
}

/// What a unit message says about its unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnitHeader {
    pub codec: Codec,
    pub info: UnitInfo,
    pub has_parameter_sets: bool,
    /// µs since the sender's first unit.
    pub capture_us: u64,
    /// The IVF frame's timestamp.
    pub pts: Option<u64>,
}

/// A decoded message; a unit's bytes borrow from the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireMessage<'a> {
    Start(StreamStart),
    Unit(UnitHeader, &'a [u8]),
    Dropped(Vec<UnitInfo>),
    End { units: u64 },
    KeyframeRequest(KeyframeRequest),
    Publish { path: &'a str, token: &'a str },
    Pull { path: &'a str, token: &'a str },
}

fn codec_byte(c: Codec) -> u8 {
    match c {
        Codec::H264 => 1,
        Codec::H265 => 2,
        Codec::Vp8 => 3,
        Codec::Vp9 => 4,
        Codec::Av1 => 5,
    }
}

fn codec_of(b: u8) -> Result<Codec, WireError> {
    Ok(match b {
        1 => Codec::H264,
        2 => Codec::H265,
        3 => Codec::Vp8,
        4 => Codec::Vp9,
        5 => Codec::Av1,
        _ => return Err(WireError::UnknownCodec(b)),
    })
}

fn kind_byte(k: FrameKind) -> u8 {
    match k {
        FrameKind::ParameterSets => 0,
        FrameKind::Keyframe => 1,
        FrameKind::Reference => 2,
        FrameKind::NonReference => 3,
    }
}

fn kind_of(b: u8) -> Result<FrameKind, WireError> {
    Ok(match b {
        0 => FrameKind::ParameterSets,
        1 => FrameKind::Keyframe,
        2 => FrameKind::Reference,
        3 => FrameKind::NonReference,
        _ => return Err(WireError::UnknownKind(b)),
    })
}

fn flags_of(info: &UnitInfo, parameter_sets: bool, pts: bool) -> u8 {
    let mut f = 0;
    if info.skipped_at_random_access {
        f |= FLAG_RASL;
    }
    if parameter_sets {
        f |= FLAG_PARAMETER_SETS;
    }
    if pts {
        f |= FLAG_PTS;
    }
    f
}

/// Encodes the start message.
pub fn encode_start(start: &StreamStart) -> Vec<u8> {
    let mut out = vec![
        TAG_START,
        VERSION,
        codec_byte(start.codec),
        u8::from(start.ivf.is_some()),
    ];
    if let Some(h) = &start.ivf {
        out.extend_from_slice(&h.to_bytes());
    }
    out
}

/// Encodes a unit message: the header, then `payload`.
///
/// ```
/// use lowtide_media::encoded::wire::{decode, encode_unit, UnitHeader, WireMessage};
/// use lowtide_media::encoded::{Codec, FrameKind, UnitInfo};
/// let h = UnitHeader {
///     codec: Codec::H264,
///     info: UnitInfo::new(7, FrameKind::Reference),
///     has_parameter_sets: false,
///     capture_us: 233_333,
///     pts: None,
/// };
/// let m = encode_unit(&h, &[0, 0, 0, 1, 0x41, 0x9a]);
/// assert_eq!(decode(&m), Ok(WireMessage::Unit(h, &[0, 0, 0, 1, 0x41, 0x9a][..])));
/// assert!(decode(&m[..5]).is_err());
/// ```
pub fn encode_unit(h: &UnitHeader, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(UNIT_HEADER_LEN + 8 + payload.len());
    out.push(TAG_UNIT);
    out.push(codec_byte(h.codec));
    out.extend_from_slice(&h.info.index.to_be_bytes());
    out.push(kind_byte(h.info.kind));
    out.push(h.info.temporal_id);
    out.push(flags_of(&h.info, h.has_parameter_sets, h.pts.is_some()));
    out.extend_from_slice(&h.capture_us.to_be_bytes());
    if let Some(pts) = h.pts {
        out.extend_from_slice(&pts.to_be_bytes());
    }
    out.extend_from_slice(payload);
    out
}

/// Encodes a dropped-units notice (at most [`MAX_DROPPED_PER_NOTICE`] units; the rest are
/// left out, so send them in another notice).
pub fn encode_dropped(units: &[UnitInfo]) -> Vec<u8> {
    let units = &units[..units.len().min(MAX_DROPPED_PER_NOTICE)];
    let mut out = Vec::with_capacity(3 + units.len() * DROPPED_ENTRY_LEN);
    out.push(TAG_DROPPED);
    out.extend_from_slice(&(units.len() as u16).to_be_bytes());
    for u in units {
        out.extend_from_slice(&u.index.to_be_bytes());
        out.push(kind_byte(u.kind));
        out.push(u.temporal_id);
        out.push(flags_of(u, false, false));
    }
    out
}

/// Encodes the end message.
pub fn encode_end(units: u64) -> Vec<u8> {
    let mut out = vec![TAG_END];
    out.extend_from_slice(&units.to_be_bytes());
    out
}

/// Encodes a keyframe request (the receiver's, for the sender).
///
/// ```
/// use lowtide_media::encoded::wire::{decode, encode_keyframe_request, WireMessage};
/// use lowtide_media::encoded::{KeyframeRequest, RequestReason};
/// let r = KeyframeRequest { reason: RequestReason::ReferenceLost { index: 41 }, dropped_since: 3 };
/// assert_eq!(decode(&encode_keyframe_request(&r)), Ok(WireMessage::KeyframeRequest(r)));
/// ```
pub fn encode_keyframe_request(r: &KeyframeRequest) -> Vec<u8> {
    let (reason, index) = match r.reason {
        RequestReason::ReferenceLost { index } => (1, index),
        _ => (0, 0),
    };
    let mut out = vec![TAG_KEYFRAME_REQUEST, reason];
    out.extend_from_slice(&index.to_be_bytes());
    out.extend_from_slice(&r.dropped_since.to_be_bytes());
    out
}

/// Encodes a publish message. Errors if the path is not a valid stream path
/// ([`check_stream_path`]) or the path or token is over 255 bytes.
///
/// ```
/// use lowtide_media::encoded::wire::{decode, encode_publish, WireMessage};
/// let m = encode_publish("cam/1", "secret")?;
/// assert_eq!(decode(&m), Ok(WireMessage::Publish { path: "cam/1", token: "secret" }));
/// assert!(encode_publish("../etc", "t").is_err());
/// # Ok::<(), lowtide_media::encoded::wire::WireError>(())
/// ```
pub fn encode_publish(path: &str, token: &str) -> Result<Vec<u8>, WireError> {
    encode_path_and_token(TAG_PUBLISH, path, token)
}

/// Encodes a pull message: what a relay asks of the server it pulls `path` from. Errors as
/// [`encode_publish`] does.
///
/// ```
/// use lowtide_media::encoded::wire::{decode, encode_pull, WireMessage};
/// let m = encode_pull("cam/1", "")?;
/// assert_eq!(decode(&m), Ok(WireMessage::Pull { path: "cam/1", token: "" }));
/// # Ok::<(), lowtide_media::encoded::wire::WireError>(())
/// ```
pub fn encode_pull(path: &str, token: &str) -> Result<Vec<u8>, WireError> {
    encode_path_and_token(TAG_PULL, path, token)
}

fn encode_path_and_token(tag: u8, path: &str, token: &str) -> Result<Vec<u8>, WireError> {
    check_stream_path(path)?;
    if token.len() > usize::from(u8::MAX) {
        return Err(WireError::BadPublish {
            what: "token",
            why: "over 255 bytes",
        });
    }
    let mut out = Vec::with_capacity(3 + path.len() + token.len());
    out.push(tag);
    out.push(path.len() as u8);
    out.extend_from_slice(path.as_bytes());
    out.push(token.len() as u8);
    out.extend_from_slice(token.as_bytes());
    Ok(out)
}

/// Whether `path` may name a stream: 1 to 255 bytes of `[A-Za-z0-9._-]` and `/`, not
/// starting with `/`, no empty, `.` or `..` segment (it appears in URLs and file names).
pub fn check_stream_path(path: &str) -> Result<(), WireError> {
    let bad = |why| {
        Err(WireError::BadPublish {
            what: "stream path",
            why,
        })
    };
    if path.is_empty() || path.len() > usize::from(u8::MAX) {
        return bad("not 1 to 255 bytes");
    }
    if !path
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._-/".contains(&b))
    {
        return bad("only letters, digits, '.', '_', '-' and '/' are allowed");
    }
    if path
        .split('/')
        .any(|seg| seg.is_empty() || seg == "." || seg == "..")
    {
        return bad("an empty, '.' or '..' segment");
    }
    Ok(())
}

/// A cursor over a message that reports where it ran short.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], WireError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            let len = self.bytes.len();
            return Err(WireError::Short { what, len });
        };
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, WireError> {
        Ok(self.take(1, what)?[0])
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, WireError> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, WireError> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    fn rest(&self) -> &'a [u8] {
        &self.bytes[self.at..]
    }
}

/// Decodes one message (see the module doc for when it fails).
pub fn decode(bytes: &[u8]) -> Result<WireMessage<'_>, WireError> {
    let mut c = Cursor { bytes, at: 0 };
    let tag = c.u8("tag")?;
    match tag {
        TAG_START => {
            let version = c.u8("version")?;
            if version != VERSION {
                return Err(WireError::Version(version));
            }
            let codec = codec_of(c.u8("codec")?)?;
            let ivf = c.u8("IVF marker")?;
            let container = matches!(codec, Codec::Vp8 | Codec::Vp9 | Codec::Av1);
            let ivf = match ivf {
                0 => None,
                1 if container => {
                    let h: &[u8; IVF_HEADER_LEN] = c
                        .take(IVF_HEADER_LEN, "IVF header")?
                        .try_into()
                        .map_err(|_| WireError::Short {
                            what: "IVF header",
                            len: bytes.len(),
                        })?;
                    let h = IvfHeader::parse(h).map_err(WireError::Ivf)?;
                    if h.codec != codec {
                        return Err(WireError::BadIvfMarker { ivf, codec });
                    }
                    Some(h)
                }
                _ => return Err(WireError::BadIvfMarker { ivf, codec }),
            };
            Ok(WireMessage::Start(StreamStart { codec, ivf }))
        }
        TAG_UNIT => {
            let codec = codec_of(c.u8("codec")?)?;
            let index = c.u64("index")?;
            let kind = kind_of(c.u8("kind")?)?;
            let temporal_id = c.u8("temporal id")?;
            let flags = c.u8("flags")?;
            if flags & !(FLAG_RASL | FLAG_PARAMETER_SETS | FLAG_PTS) != 0 {
                return Err(WireError::UnknownFlags(flags));
            }
            let capture_us = c.u64("capture time")?;
            let pts = if flags & FLAG_PTS != 0 {
                Some(c.u64("pts")?)
            } else {
                None
            };
            let info = UnitInfo {
                index,
                kind,
                temporal_id,
                skipped_at_random_access: flags & FLAG_RASL != 0,
            };
            let h = UnitHeader {
                codec,
                info,
                has_parameter_sets: flags & FLAG_PARAMETER_SETS != 0,
                capture_us,
                pts,
            };
            Ok(WireMessage::Unit(h, c.rest()))
        }
        TAG_DROPPED => {
            let count = c.u16("count")?;
            let mut units = Vec::with_capacity(usize::from(count).min(c.rest().len() / 11));
            for _ in 0..count {
                let index = c.u64("dropped unit")?;
                let kind = kind_of(c.u8("dropped unit")?)?;
                let temporal_id = c.u8("dropped unit")?;
                let flags = c.u8("dropped unit")?;
                if flags & !FLAG_RASL != 0 {
                    return Err(WireError::UnknownFlags(flags));
                }
                units.push(UnitInfo {
                    index,
                    kind,
                    temporal_id,
                    skipped_at_random_access: flags & FLAG_RASL != 0,
                });
            }
            Ok(WireMessage::Dropped(units))
        }
        TAG_END => Ok(WireMessage::End {
            units: c.u64("unit count")?,
        }),
        TAG_KEYFRAME_REQUEST => {
            let reason = c.u8("reason")?;
            let index = c.u64("index")?;
            let dropped_since = c.u64("dropped count")?;
            let reason = match reason {
                0 => RequestReason::NoKeyframeYet,
                1 => RequestReason::ReferenceLost { index },
                r => return Err(WireError::UnknownReason(r)),
            };
            Ok(WireMessage::KeyframeRequest(KeyframeRequest {
                reason,
                dropped_since,
            }))
        }
        TAG_PUBLISH | TAG_PULL => {
            let n = c.u8("path length")?;
            let path = std::str::from_utf8(c.take(usize::from(n), "path")?).map_err(|_| {
                WireError::BadPublish {
                    what: "stream path",
                    why: "not UTF-8",
                }
            })?;
            check_stream_path(path)?;
            let n = c.u8("token length")?;
            let token = std::str::from_utf8(c.take(usize::from(n), "token")?).map_err(|_| {
                WireError::BadPublish {
                    what: "token",
                    why: "not UTF-8",
                }
            })?;
            Ok(if tag == TAG_PUBLISH {
                WireMessage::Publish { path, token }
            } else {
                WireMessage::Pull { path, token }
            })
        }
        t => Err(WireError::UnknownTag(t)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ivf(codec: Codec) -> IvfHeader {
        IvfHeader {
            codec,
            width: 160,
            height: 90,
            timebase_rate: 30,
            timebase_scale: 1,
            frame_count: 0,
        }
    }

    #[test]
    fn publish_refuses_paths_that_could_escape_a_url_or_a_folder() {
        for bad in [
            "",
            "/a",
            "a//b",
            "a/../b",
            "./a",
            "a b",
            "caf\u{e9}",
            &"x".repeat(256),
        ] {
            assert!(
                matches!(encode_publish(bad, "t"), Err(WireError::BadPublish { .. })),
                "{bad:?}"
            );
        }
        assert!(encode_publish("a", &"t".repeat(256)).is_err());
        // The decoder checks the path too: a hand-made message with "..".
        let m = [TAG_PUBLISH, 2, b'.', b'.', 0];
        assert!(matches!(decode(&m), Err(WireError::BadPublish { .. })));
        assert!(matches!(
            decode(&[TAG_PUBLISH, 5, b'a']),
            Err(WireError::Short { what: "path", .. })
        ));
        let ok = encode_publish("live/cam-1.main", "").unwrap();
        assert_eq!(
            decode(&ok),
            Ok(WireMessage::Publish {
                path: "live/cam-1.main",
                token: ""
            })
        );
    }

    #[test]
    fn every_message_round_trips() {
        for start in [
            StreamStart {
                codec: Codec::H265,
                ivf: None,
            },
            StreamStart {
                codec: Codec::Vp8,
                ivf: Some(ivf(Codec::Vp8)),
            },
        ] {
            assert_eq!(decode(&encode_start(&start)), Ok(WireMessage::Start(start)));
        }
        let rasl = UnitInfo {
            skipped_at_random_access: true,
            ..UnitInfo::new(u64::MAX, FrameKind::NonReference).layer(3)
        };
        let h = UnitHeader {
            codec: Codec::Av1,
            info: rasl,
            has_parameter_sets: true,
            capture_us: 1,
            pts: Some(42),
        };
        let m = encode_unit(&h, b"frame");
        assert_eq!(m.len(), UNIT_HEADER_LEN + 8 + 5);
        assert_eq!(decode(&m), Ok(WireMessage::Unit(h, &b"frame"[..])));
        let dropped = vec![rasl, UnitInfo::new(3, FrameKind::Keyframe)];
        assert_eq!(
            decode(&encode_dropped(&dropped)),
            Ok(WireMessage::Dropped(dropped))
        );
        assert_eq!(decode(&encode_end(61)), Ok(WireMessage::End { units: 61 }));
        let first = KeyframeRequest {
            reason: RequestReason::NoKeyframeYet,
            dropped_since: 0,
        };
        assert_eq!(
            decode(&encode_keyframe_request(&first)),
            Ok(WireMessage::KeyframeRequest(first))
        );
    }

    #[test]
    fn errors_name_the_field() {
        let short = |what| WireError::Short { what, len: 0 };
        assert_eq!(decode(&[]), Err(short("tag")));
        assert_eq!(decode(&[0x01, 0, 0]), Err(WireError::UnknownTag(1)));
        assert_eq!(
            decode(&[
                TAG_KEYFRAME_REQUEST,
                2,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0
            ]),
            Err(WireError::UnknownReason(2))
        );
        assert_eq!(
            decode(&[TAG_KEYFRAME_REQUEST, 1, 0]),
            Err(WireError::Short {
                what: "index",
                len: 3
            })
        );
        assert_eq!(decode(&[TAG_START, 2, 1, 0]), Err(WireError::Version(2)));
        assert_eq!(
            decode(&[TAG_START, 1, 9, 0]),
            Err(WireError::UnknownCodec(9))
        );
        assert_eq!(
            decode(&[TAG_START, 1, 1, 1]),
            Err(WireError::BadIvfMarker {
                ivf: 1,
                codec: Codec::H264
            })
        );
        let mut vp9_in_vp8 = encode_start(&StreamStart {
            codec: Codec::Vp8,
            ivf: Some(ivf(Codec::Vp9)),
        });
        assert!(matches!(
            decode(&vp9_in_vp8),
            Err(WireError::BadIvfMarker { .. })
        ));
        vp9_in_vp8[4] = b'X';
        assert!(matches!(decode(&vp9_in_vp8), Err(WireError::Ivf(_))));
        let h = UnitHeader {
            codec: Codec::H264,
            info: UnitInfo::new(1, FrameKind::Keyframe),
            has_parameter_sets: false,
            capture_us: 0,
            pts: Some(1),
        };
        let m = encode_unit(&h, &[]);
        assert_eq!(
            decode(&m[..UNIT_HEADER_LEN]),
            Err(WireError::Short {
                what: "pts",
                len: UNIT_HEADER_LEN
            })
        );
        let mut bad_kind = m.clone();
        bad_kind[10] = 4;
        assert_eq!(decode(&bad_kind), Err(WireError::UnknownKind(4)));
        let mut bad_flags = m;
        bad_flags[12] |= 0x80;
        assert!(matches!(
            decode(&bad_flags),
            Err(WireError::UnknownFlags(_))
        ));
        // A count larger than the entries that follow.
        assert!(matches!(
            decode(&[TAG_DROPPED, 0xff, 0xff, 0, 0]),
            Err(WireError::Short {
                what: "dropped unit",
                ..
            })
        ));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..96)) {
            let _ = decode(&bytes);
        }

        #[test]
        fn arbitrary_bytes_after_each_tag_never_panic(
            tag in TAG_START..=TAG_KEYFRAME_REQUEST,
            rest in proptest::collection::vec(any::<u8>(), 0..96),
        ) {
            let mut m = vec![tag];
            m.extend(rest);
            if let Ok(WireMessage::Unit(h, payload)) = decode(&m) {
                // What decodes re-encodes to the same bytes.
                prop_assert_eq!(encode_unit(&h, payload), m);
            }
        }
    }
}
