//! The IVF container (libvpx's `ivfenc.c`/`ivfdec.c`; no formal spec): a 32-byte file header
//! (`DKIF`, version 0, header length 32, the codec's fourcc, width, height, timebase rate and
//! scale, frame count, unused), then frames each behind a 12-byte header (payload size, u32
//! little-endian; timestamp, u64 little-endian).
//!
//! [`IvfReader`] reads it incrementally from chunks of any size, holding at most one frame;
//! [`IvfFramer`] turns its frames into [`AccessUnit`]s, classified by [`super::vpx`] (VP8, VP9)
//! or [`super::av1`].
//!
//! # When reading fails
//! [`IvfError`]: a header without `DKIF`, another version or header length, an unknown fourcc,
//! a zero timebase, a frame larger than the limit (refused from its 12-byte header, before any
//! of it is buffered), or bytes missing at the end (`finish`). Errors are final.

use std::time::Instant;

use super::{av1, vpx, AccessUnit, Codec, FrameError};

/// Why bytes are not an IVF stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IvfError {
    /// The file does not start with `DKIF`.
    #[error("not an IVF stream: signature {found:02x?} is not DKIF")]
    BadSignature { found: [u8; 4] },
    /// A version other than 0, or a header length other than 32.
    #[error("unsupported IVF header: version {version}, header length {header_len}")]
    UnsupportedHeader { version: u16, header_len: u16 },
    /// A fourcc other than VP80, VP90, AV01.
    #[error("unsupported IVF fourcc {fourcc:?}")]
    UnknownFourcc { fourcc: [u8; 4] },
    /// The timebase has a zero rate or scale.
    #[error("IVF timebase {rate}/{scale} has a zero")]
    ZeroTimebase { rate: u32, scale: u32 },
    /// A frame header declares more than the limit.
    #[error("IVF frame {frame} of {size} bytes is over the limit of {limit}")]
    FrameTooLarge { frame: u64, size: u32, limit: usize },
    /// The stream ended inside the file header, a frame header or a frame.
    #[error("IVF stream truncated: {missing} bytes missing at the end")]
    Truncated { missing: usize },
    /// A frame's payload is not what its codec allows.
    #[error("IVF frame {frame}: {error}")]
    Frame { frame: u64, error: FrameError },
}

/// The IVF file header's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IvfHeader {
    pub codec: Codec,
    pub width: u16,
    pub height: u16,
    /// Timestamps count in units of `scale / rate` seconds.
    pub timebase_rate: u32,
    pub timebase_scale: u32,
    /// As written by the muxer (often 0 or wrong for a live stream).
    pub frame_count: u32,
}

/// The file header's length.
pub const IVF_HEADER_LEN: usize = 32;
/// A frame header's length.
pub const IVF_FRAME_HEADER_LEN: usize = 12;

impl IvfHeader {
    /// Parses the 32-byte file header.
    pub fn parse(h: &[u8; IVF_HEADER_LEN]) -> Result<Self, IvfError> {
        let u16_at = |i: usize| u16::from_le_bytes([h[i], h[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let four = |i: usize| [h[i], h[i + 1], h[i + 2], h[i + 3]];
        if &h[..4] != b"DKIF" {
            return Err(IvfError::BadSignature { found: four(0) });
        }
        let (version, header_len) = (u16_at(4), u16_at(6));
        if version != 0 || usize::from(header_len) != IVF_HEADER_LEN {
            return Err(IvfError::UnsupportedHeader {
                version,
                header_len,
            });
        }
        let codec = match &four(8) {
            b"VP80" => Codec::Vp8,
            b"VP90" => Codec::Vp9,
            b"AV01" => Codec::Av1,
            _ => return Err(IvfError::UnknownFourcc { fourcc: four(8) }),
        };
        let (rate, scale) = (u32_at(16), u32_at(20));
        if rate == 0 || scale == 0 {
            return Err(IvfError::ZeroTimebase { rate, scale });
        }
        Ok(Self {
            codec,
            width: u16_at(12),
            height: u16_at(14),
            timebase_rate: rate,
            timebase_scale: scale,
            frame_count: u32_at(24),
        })
    }

    /// The header's 32 bytes (for writing an IVF stream back).
    pub fn to_bytes(&self) -> [u8; IVF_HEADER_LEN] {
        let mut h = [0u8; IVF_HEADER_LEN];
        h[..4].copy_from_slice(b"DKIF");
        h[6..8].copy_from_slice(&(IVF_HEADER_LEN as u16).to_le_bytes());
        h[8..12].copy_from_slice(match self.codec {
            Codec::Vp8 => b"VP80",
            Codec::Vp9 => b"VP90",
            _ => b"AV01",
        });
        h[12..14].copy_from_slice(&self.width.to_le_bytes());
        h[14..16].copy_from_slice(&self.height.to_le_bytes());
        h[16..20].copy_from_slice(&self.timebase_rate.to_le_bytes());
        h[20..24].copy_from_slice(&self.timebase_scale.to_le_bytes());
        h[24..28].copy_from_slice(&self.frame_count.to_le_bytes());
        h
    }
}

/// Appends one frame with its 12-byte header.
pub fn write_ivf_frame(out: &mut Vec<u8>, pts: u64, payload: &[u8]) {
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&pts.to_le_bytes());
    out.extend_from_slice(payload);
}

/// One IVF frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IvfFrame {
    pub pts: u64,
    pub data: Vec<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    FileHeader,
    FrameHeader,
    Payload { pts: u64 },
}

/// Reads IVF frames from chunks (see the module doc).
#[derive(Debug, Clone)]
pub struct IvfReader {
    max_frame: usize,
    header: Option<IvfHeader>,
    want: Want,
    /// Bytes still needed for what is wanted.
    need: usize,
    buf: Vec<u8>,
    frames: u64,
    failed: Option<IvfError>,
}

impl IvfReader {
    /// A reader refusing frames over `max_frame` bytes.
    pub fn new(max_frame: usize) -> Self {
        Self {
            max_frame,
            header: None,
            want: Want::FileHeader,
            need: IVF_HEADER_LEN,
            buf: Vec::new(),
            frames: 0,
            failed: None,
        }
    }

    /// The file header, once read.
    pub fn header(&self) -> Option<&IvfHeader> {
        self.header.as_ref()
    }

    /// Bytes held (at most the frame limit, or a header).
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Takes the next chunk; returns the frames it completed.
    pub fn push(&mut self, mut chunk: &[u8]) -> Result<Vec<IvfFrame>, IvfError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let mut out = Vec::new();
        while !chunk.is_empty() || (self.need == 0 && matches!(self.want, Want::Payload { .. })) {
            let take = self.need.min(chunk.len());
            self.buf.extend_from_slice(&chunk[..take]);
            chunk = &chunk[take..];
            self.need -= take;
            if self.need > 0 {
                break;
            }
            if let Err(e) = self.complete(&mut out) {
                self.failed = Some(e.clone());
                return Err(e);
            }
        }
        Ok(out)
    }

    fn complete(&mut self, out: &mut Vec<IvfFrame>) -> Result<(), IvfError> {
        match self.want {
            Want::FileHeader => {
                let h: &[u8; IVF_HEADER_LEN] = self.buf[..].try_into().expect("32 bytes");
                self.header = Some(IvfHeader::parse(h)?);
                self.want = Want::FrameHeader;
                self.need = IVF_FRAME_HEADER_LEN;
            }
            Want::FrameHeader => {
                let b = &self.buf;
                let size = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                let pts = u64::from_le_bytes(b[4..12].try_into().expect("8 bytes"));
                if size as usize > self.max_frame {
                    let (frame, limit) = (self.frames, self.max_frame);
                    return Err(IvfError::FrameTooLarge { frame, size, limit });
                }
                self.want = Want::Payload { pts };
                self.need = size as usize;
            }
            Want::Payload { pts } => {
                out.push(IvfFrame {
                    pts,
                    data: std::mem::take(&mut self.buf),
                });
                self.frames += 1;
                self.want = Want::FrameHeader;
                self.need = IVF_FRAME_HEADER_LEN;
            }
        }
        self.buf.clear();
        Ok(())
    }

    /// The stream ended: an error if it ended inside a header or a frame.
    pub fn finish(&mut self) -> Result<(), IvfError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let inside = match self.want {
            Want::FileHeader | Want::Payload { .. } => true,
            Want::FrameHeader => !self.buf.is_empty(),
        };
        if inside {
            return Err(IvfError::Truncated { missing: self.need });
        }
        Ok(())
    }
}

/// IVF bytes in, classified access units out.
///
/// ```
/// use std::time::Instant;
/// use lowtide_media::encoded::{write_ivf_frame, Codec, FrameKind, IvfFramer, IvfHeader};
/// let header = IvfHeader { codec: Codec::Vp8, width: 64, height: 64, timebase_rate: 25,
///     timebase_scale: 1, frame_count: 2 };
/// let mut file = header.to_bytes().to_vec();
/// // A VP8 keyframe (frame tag bit 0 = 0, start code 9d 01 2a, 64x64), then an inter frame.
/// write_ivf_frame(&mut file, 0, &[0x10, 0, 0, 0x9d, 0x01, 0x2a, 64, 0, 64, 0]);
/// write_ivf_frame(&mut file, 1, &[0x11, 0, 0]);
/// let mut r = IvfFramer::new(1 << 20);
/// let units = r.push(&file, Instant::now())?;
/// r.finish()?;
/// assert_eq!(units.iter().map(|u| u.kind).collect::<Vec<_>>(), [FrameKind::Keyframe, FrameKind::Reference]);
/// assert_eq!(units[1].pts, Some(1));
/// # Ok::<(), lowtide_media::encoded::IvfError>(())
/// ```
#[derive(Debug, Clone)]
pub struct IvfFramer {
    reader: IvfReader,
    av1: av1::Av1State,
}

impl IvfFramer {
    /// A framer refusing frames over `max_frame` bytes.
    pub fn new(max_frame: usize) -> Self {
        Self {
            reader: IvfReader::new(max_frame),
            av1: av1::Av1State::default(),
        }
    }

    /// The file header, once read.
    pub fn header(&self) -> Option<&IvfHeader> {
        self.reader.header()
    }

    /// Takes the next chunk, which arrived at `now`; returns the units it completed.
    pub fn push(&mut self, chunk: &[u8], now: Instant) -> Result<Vec<AccessUnit>, IvfError> {
        let first = self.reader.frames;
        let frames = self.reader.push(chunk)?;
        let codec = self.reader.header.map(|h| h.codec).unwrap_or(Codec::Vp8);
        let mut out = Vec::with_capacity(frames.len());
        for (i, f) in frames.into_iter().enumerate() {
            let index = first + i as u64;
            let facts = match codec {
                Codec::Vp8 => vpx::vp8(&f.data),
                Codec::Vp9 => vpx::vp9(&f.data),
                _ => self.av1.temporal_unit(&f.data),
            };
            let facts = facts.map_err(|error| IvfError::Frame {
                frame: index,
                error,
            });
            let facts = match facts {
                Ok(x) => x,
                Err(e) => {
                    self.reader.failed = Some(e.clone());
                    return Err(e);
                }
            };
            out.push(AccessUnit {
                codec,
                index,
                data: f.data,
                kind: facts.kind,
                temporal_id: facts.temporal_id,
                has_parameter_sets: facts.has_parameter_sets,
                skipped_at_random_access: false,
                pts: Some(f.pts),
                capture: now,
            });
        }
        Ok(out)
    }

    /// The stream ended.
    pub fn finish(&mut self) -> Result<(), IvfError> {
        self.reader.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Vec<u8> {
        let h = IvfHeader {
            codec: Codec::Vp9,
            width: 64,
            height: 48,
            timebase_rate: 30,
            timebase_scale: 1,
            frame_count: 0,
        };
        assert_eq!(IvfHeader::parse(&h.to_bytes()), Ok(h));
        h.to_bytes().to_vec()
    }

    #[test]
    fn frames_across_chunks_and_empty_frames() {
        let mut file = header();
        write_ivf_frame(&mut file, 7, &[1, 2, 3]);
        write_ivf_frame(&mut file, 8, &[]);
        let mut r = IvfReader::new(16);
        let mut frames = Vec::new();
        for b in &file {
            frames.extend(r.push(std::slice::from_ref(b)).unwrap());
        }
        r.finish().unwrap();
        let want = [
            IvfFrame {
                pts: 7,
                data: vec![1, 2, 3],
            },
            IvfFrame {
                pts: 8,
                data: vec![],
            },
        ];
        assert_eq!(frames, want);
    }

    #[test]
    fn precise_errors() {
        let mut bad = header();
        bad[0] = b'X';
        let e = IvfReader::new(16).push(&bad).unwrap_err();
        assert_eq!(e, IvfError::BadSignature { found: *b"XKIF" });
        let mut fourcc = header();
        fourcc[8..12].copy_from_slice(b"H264");
        let e = IvfReader::new(16).push(&fourcc).unwrap_err();
        assert_eq!(e, IvfError::UnknownFourcc { fourcc: *b"H264" });
        let mut tb = header();
        tb[16..20].fill(0);
        assert!(matches!(
            IvfReader::new(16).push(&tb),
            Err(IvfError::ZeroTimebase { .. })
        ));
        let mut big = header();
        big.extend_from_slice(&100u32.to_le_bytes());
        big.extend_from_slice(&[0; 8]);
        let mut r = IvfReader::new(16);
        let e = r.push(&big).unwrap_err();
        assert_eq!(
            e,
            IvfError::FrameTooLarge {
                frame: 0,
                size: 100,
                limit: 16
            }
        );
        assert_eq!(r.push(&[]), Err(e));
        let mut cut = header();
        write_ivf_frame(&mut cut, 0, &[1, 2, 3]);
        cut.pop();
        let mut r = IvfReader::new(16);
        r.push(&cut).unwrap();
        assert_eq!(r.finish(), Err(IvfError::Truncated { missing: 1 }));
        assert_eq!(
            IvfReader::new(16).finish(),
            Err(IvfError::Truncated { missing: 32 })
        );
        let mut r = IvfReader::new(16);
        r.push(&header()[..10]).unwrap();
        assert_eq!(r.finish(), Err(IvfError::Truncated { missing: 22 }));
    }
}
