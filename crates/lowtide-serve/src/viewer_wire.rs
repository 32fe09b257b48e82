//! The messages between `lowtide serve` and a viewer, one per WebSocket binary message.
//! Big-endian; the player page (`assets/player.js`) reads and writes the same layout.
//!
//! ```text
//! server → viewer
//! hello:   0x40 | version u8 (1) | codec u8 | server_us u64 | path_len u8 | path (UTF-8)
//! unit:    0x41 | index u64 | kind u8 | flags u8 | capture_us u64 | ingest_us u64
//!               | sent_us u64 | the access unit (Annex-B: each NAL unit behind 00 00 00 01)
//! dropped: 0x42 | units u32 | reason u8
//! end:     0x43
//! viewer → server
//! shown:   0x50 | index u64 | decoded_us u64 | shown_us u64
//! problem: 0x51 | the decoder's error message (UTF-8, at most 256 bytes)
//! ```
//!
//! - `codec`: 1 H.264, 2 H.265 (the codecs a browser's WebCodecs decodes from Annex-B).
//! - `kind`: 0 parameter sets (SPS/PPS, VPS; sent as their own unit before the keyframe that
//!   needs them), 1 keyframe, 2 reference, 3 non-reference. `flags`: bit 0 the unit carries
//!   parameter sets; bit 1 the unit is part of the catch-up a joining viewer gets (captured
//!   before it joined: its latency says when the viewer joined, not how late the stream is);
//!   other bits 0.
//! - Clocks, all µs since the Unix epoch: `capture_us` the capture instant from the unit's
//!   in-band stamp (`lowtidestamp`), 0 when the unit carries none; `ingest_us` when the
//!   server received the unit; `sent_us` when the server began writing it to this viewer;
//!   `server_us` the server's clock when it sent the hello. `decoded_us` and `shown_us` are
//!   the viewer's clock. Capture-to-shown latency is `shown_us − capture_us`, exact when the
//!   clocks agree (one host, or NTP within its error).
//! - The server sends a viewer only units it can decode: after a keyframe, every unit whose
//!   references were sent. `dropped` says how many units the server did not send since the
//!   previous message and why (`reason`: [`DropReason`]).
//! - `index` counts the stream's units from the publisher's first.
//!
//! [`decode_from_viewer`] never panics: a message shorter than its fixed part, an unknown tag,
//! a problem text over 256 bytes or not UTF-8 is a [`ViewerWireError`].

use lowtide_media::encoded::{Codec, FrameKind};

/// Tag of the server's first message to a viewer.
pub const TAG_HELLO: u8 = 0x40;
/// Tag of a unit.
pub const TAG_UNIT: u8 = 0x41;
/// Tag of a dropped-units notice.
pub const TAG_DROPPED: u8 = 0x42;
/// Tag of the stream's end.
pub const TAG_END: u8 = 0x43;
/// Tag of a viewer's report of a shown frame.
pub const TAG_SHOWN: u8 = 0x50;
/// Tag of a viewer's decoder problem.
pub const TAG_PROBLEM: u8 = 0x51;
/// The version this module writes.
pub const VERSION: u8 = 1;
/// A unit message's header.
pub const UNIT_HEADER_LEN: usize = 1 + 8 + 1 + 1 + 8 + 8 + 8;
/// The longest problem text a viewer may send.
pub const MAX_PROBLEM_LEN: usize = 256;

const FLAG_PARAMETER_SETS: u8 = 1;
const FLAG_CATCH_UP: u8 = 2;

/// Why the server did not send units to a viewer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DropReason {
    /// The unit's deadline passed before the viewer's socket could take it.
    Expired = 1,
    /// A unit it depends on was not sent (dropped, or the viewer joined after it).
    DependencyBroken = 2,
    /// The viewer's queue was over its byte or time bound.
    QueueFull = 3,
    /// The publisher's stream lost it before the server (the ingest gate).
    Upstream = 4,
}

impl DropReason {
    /// Every reason, in wire order.
    pub const ALL: [DropReason; 4] = [
        DropReason::Expired,
        DropReason::DependencyBroken,
        DropReason::QueueFull,
        DropReason::Upstream,
    ];

    /// The name in metrics and logs.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::Expired => "expired",
            DropReason::DependencyBroken => "dependency-broken",
            DropReason::QueueFull => "queue-full",
            DropReason::Upstream => "upstream",
        }
    }
}

/// The codec byte of `codec`, if a viewer can be sent it.
pub fn codec_byte(codec: Codec) -> Option<u8> {
    match codec {
        Codec::H264 => Some(1),
        Codec::H265 => Some(2),
        _ => None,
    }
}

fn kind_byte(k: FrameKind) -> u8 {
    match k {
        FrameKind::ParameterSets => 0,
        FrameKind::Keyframe => 1,
        FrameKind::Reference => 2,
        FrameKind::NonReference => 3,
    }
}

/// The hello message.
pub fn encode_hello(codec_byte: u8, server_us: u64, path: &str) -> Vec<u8> {
    let path = truncate_utf8(path, u8::MAX as usize);
    let mut out = Vec::with_capacity(12 + path.len());
    out.push(TAG_HELLO);
    out.push(VERSION);
    out.push(codec_byte);
    out.extend_from_slice(&server_us.to_be_bytes());
    out.push(path.len() as u8);
    out.extend_from_slice(path.as_bytes());
    out
}

/// What a unit message says before the unit's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnitFields {
    pub index: u64,
    pub kind: FrameKind,
    pub has_parameter_sets: bool,
    /// Sent as part of a joining viewer's catch-up.
    pub catch_up: bool,
    pub capture_us: u64,
    pub ingest_us: u64,
    pub sent_us: u64,
}

/// A unit message's header; the unit's bytes follow it in the same WebSocket message.
pub fn encode_unit_header(f: &UnitFields) -> [u8; UNIT_HEADER_LEN] {
    let mut h = [0u8; UNIT_HEADER_LEN];
    h[0] = TAG_UNIT;
    h[1..9].copy_from_slice(&f.index.to_be_bytes());
    h[9] = kind_byte(f.kind);
    h[10] = if f.has_parameter_sets {
        FLAG_PARAMETER_SETS
    } else {
        0
    } | if f.catch_up { FLAG_CATCH_UP } else { 0 };
    h[11..19].copy_from_slice(&f.capture_us.to_be_bytes());
    h[19..27].copy_from_slice(&f.ingest_us.to_be_bytes());
    h[27..35].copy_from_slice(&f.sent_us.to_be_bytes());
    h
}

/// A dropped-units notice.
pub fn encode_dropped(units: u32, reason: DropReason) -> [u8; 6] {
    let mut m = [0u8; 6];
    m[0] = TAG_DROPPED;
    m[1..5].copy_from_slice(&units.to_be_bytes());
    m[5] = reason as u8;
    m
}

/// The end message.
pub fn encode_end() -> [u8; 1] {
    [TAG_END]
}

/// A message from a viewer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FromViewer {
    /// A frame was shown.
    Shown {
        index: u64,
        decoded_us: u64,
        shown_us: u64,
    },
    /// The viewer's decoder failed.
    Problem(String),
}

/// Why a viewer's message is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ViewerWireError {
    #[error("viewer message of {len} bytes ends inside its {what}")]
    Short { what: &'static str, len: usize },
    #[error("unknown viewer message tag {0:#04x}")]
    UnknownTag(u8),
    #[error("viewer problem text of {0} bytes (at most {MAX_PROBLEM_LEN})")]
    ProblemTooLong(usize),
    #[error("viewer problem text is not UTF-8")]
    ProblemNotUtf8,
}

/// A shown report (the player writes the same bytes).
pub fn encode_shown(index: u64, decoded_us: u64, shown_us: u64) -> [u8; 25] {
    let mut m = [0u8; 25];
    m[0] = TAG_SHOWN;
    m[1..9].copy_from_slice(&index.to_be_bytes());
    m[9..17].copy_from_slice(&decoded_us.to_be_bytes());
    m[17..25].copy_from_slice(&shown_us.to_be_bytes());
    m
}

/// Decodes a viewer's message.
pub fn decode_from_viewer(m: &[u8]) -> Result<FromViewer, ViewerWireError> {
    let (&tag, rest) = m.split_first().ok_or(ViewerWireError::Short {
        what: "tag",
        len: 0,
    })?;
    match tag {
        TAG_SHOWN => {
            if rest.len() < 24 {
                return Err(ViewerWireError::Short {
                    what: "shown report",
                    len: m.len(),
                });
            }
            let u = |i: usize| u64::from_be_bytes(rest[i..i + 8].try_into().expect("8 bytes"));
            Ok(FromViewer::Shown {
                index: u(0),
                decoded_us: u(8),
                shown_us: u(16),
            })
        }
        TAG_PROBLEM => {
            if rest.len() > MAX_PROBLEM_LEN {
                return Err(ViewerWireError::ProblemTooLong(rest.len()));
            }
            std::str::from_utf8(rest)
                .map(|s| FromViewer::Problem(s.to_owned()))
                .map_err(|_| ViewerWireError::ProblemNotUtf8)
        }
        t => Err(ViewerWireError::UnknownTag(t)),
    }
}

/// A message from the server, as a viewer reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FromServer<'a> {
    Hello {
        codec: u8,
        server_us: u64,
        path: &'a str,
    },
    Unit(UnitFields, &'a [u8]),
    Dropped {
        units: u32,
        reason: DropReason,
    },
    End,
}

/// Why a server's message is refused (a viewer's reader).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ServerWireError {
    #[error("server message of {len} bytes ends inside its {what}")]
    Short { what: &'static str, len: usize },
    #[error("unknown server message tag {0:#04x}")]
    UnknownTag(u8),
    #[error("server protocol version {0}, this viewer reads {VERSION}")]
    Version(u8),
    #[error("unknown {what} {value}")]
    Unknown { what: &'static str, value: u8 },
    #[error("stream path is not UTF-8")]
    PathNotUtf8,
}

/// Decodes a server's message (what the player page does in JavaScript).
pub fn decode_from_server(m: &[u8]) -> Result<FromServer<'_>, ServerWireError> {
    let short = |what| ServerWireError::Short { what, len: m.len() };
    let u64_at = |i: usize| -> Result<u64, ServerWireError> {
        m.get(i..i + 8)
            .map(|b| u64::from_be_bytes(b.try_into().expect("8 bytes")))
            .ok_or(short("fields"))
    };
    match *m.first().ok_or(short("tag"))? {
        TAG_HELLO => {
            if m.len() < 12 {
                return Err(short("hello"));
            }
            if m[1] != VERSION {
                return Err(ServerWireError::Version(m[1]));
            }
            let n = usize::from(m[11]);
            let path = m.get(12..12 + n).ok_or(short("path"))?;
            Ok(FromServer::Hello {
                codec: m[2],
                server_us: u64_at(3)?,
                path: std::str::from_utf8(path).map_err(|_| ServerWireError::PathNotUtf8)?,
            })
        }
        TAG_UNIT => {
            if m.len() < UNIT_HEADER_LEN {
                return Err(short("unit header"));
            }
            let kind = match m[9] {
                0 => FrameKind::ParameterSets,
                1 => FrameKind::Keyframe,
                2 => FrameKind::Reference,
                3 => FrameKind::NonReference,
                k => {
                    return Err(ServerWireError::Unknown {
                        what: "kind",
                        value: k,
                    })
                }
            };
            if m[10] & !(FLAG_PARAMETER_SETS | FLAG_CATCH_UP) != 0 {
                return Err(ServerWireError::Unknown {
                    what: "flags",
                    value: m[10],
                });
            }
            let f = UnitFields {
                index: u64_at(1)?,
                kind,
                has_parameter_sets: m[10] & FLAG_PARAMETER_SETS != 0,
                catch_up: m[10] & FLAG_CATCH_UP != 0,
                capture_us: u64_at(11)?,
                ingest_us: u64_at(19)?,
                sent_us: u64_at(27)?,
            };
            Ok(FromServer::Unit(f, &m[UNIT_HEADER_LEN..]))
        }
        TAG_DROPPED => {
            if m.len() < 6 {
                return Err(short("dropped notice"));
            }
            let reason = *DropReason::ALL.iter().find(|r| **r as u8 == m[5]).ok_or(
                ServerWireError::Unknown {
                    what: "drop reason",
                    value: m[5],
                },
            )?;
            Ok(FromServer::Dropped {
                units: u32::from_be_bytes([m[1], m[2], m[3], m[4]]),
                reason,
            })
        }
        TAG_END => Ok(FromServer::End),
        t => Err(ServerWireError::UnknownTag(t)),
    }
}

fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_unit_header_puts_each_field_where_the_player_reads_it() {
        let h = encode_unit_header(&UnitFields {
            index: 7,
            kind: FrameKind::Keyframe,
            has_parameter_sets: true,
            catch_up: true,
            capture_us: 1,
            ingest_us: 2,
            sent_us: 3,
        });
        assert_eq!(h[0], TAG_UNIT);
        assert_eq!(&h[1..9], &7u64.to_be_bytes());
        assert_eq!((h[9], h[10]), (1, 3));
        assert_eq!(h[18], 1);
        assert_eq!(h[26], 2);
        assert_eq!(h[34], 3);
    }

    #[test]
    fn a_shown_report_reads_back() {
        let m = encode_shown(9, 100, 200);
        assert_eq!(
            decode_from_viewer(&m),
            Ok(FromViewer::Shown {
                index: 9,
                decoded_us: 100,
                shown_us: 200
            })
        );
        assert!(matches!(
            decode_from_viewer(&m[..24]),
            Err(ViewerWireError::Short { .. })
        ));
    }

    #[test]
    fn problems_are_bounded_text() {
        let mut m = vec![TAG_PROBLEM];
        m.extend_from_slice(b"decode error");
        assert_eq!(
            decode_from_viewer(&m),
            Ok(FromViewer::Problem("decode error".into()))
        );
        m.extend_from_slice(&[b'x'; MAX_PROBLEM_LEN]);
        assert_eq!(
            decode_from_viewer(&m),
            Err(ViewerWireError::ProblemTooLong(MAX_PROBLEM_LEN + 12))
        );
        assert_eq!(
            decode_from_viewer(&[TAG_PROBLEM, 0xff]),
            Err(ViewerWireError::ProblemNotUtf8)
        );
    }

    #[test]
    fn a_long_path_is_cut_at_a_character_boundary() {
        let path = "é".repeat(200);
        let m = encode_hello(1, 0, &path);
        let len = m[11] as usize;
        assert!(len <= 255);
        assert!(std::str::from_utf8(&m[12..12 + len]).is_ok());
    }

    #[test]
    fn every_server_message_reads_back() {
        let m = encode_hello(1, 5, "cam/1");
        assert_eq!(
            decode_from_server(&m),
            Ok(FromServer::Hello {
                codec: 1,
                server_us: 5,
                path: "cam/1"
            })
        );
        let f = UnitFields {
            index: 3,
            kind: FrameKind::Reference,
            has_parameter_sets: false,
            catch_up: false,
            capture_us: 4,
            ingest_us: 5,
            sent_us: 6,
        };
        let mut m = encode_unit_header(&f).to_vec();
        m.extend_from_slice(b"AU");
        assert_eq!(decode_from_server(&m), Ok(FromServer::Unit(f, &b"AU"[..])));
        assert!(decode_from_server(&m[..UNIT_HEADER_LEN - 1]).is_err());
        let d = encode_dropped(9, DropReason::QueueFull);
        assert_eq!(
            decode_from_server(&d),
            Ok(FromServer::Dropped {
                units: 9,
                reason: DropReason::QueueFull
            })
        );
        assert_eq!(decode_from_server(&encode_end()), Ok(FromServer::End));
    }

    proptest! {
        #[test]
        fn server_bytes_never_panic(m in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = decode_from_server(&m);
        }

        #[test]
        fn viewer_bytes_never_panic(m in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = decode_from_viewer(&m);
        }
    }
}
