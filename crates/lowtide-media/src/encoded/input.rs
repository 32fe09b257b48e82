//! An encoded byte stream of a format named or detected (a pipe from `ffmpeg ... -f h264 -`):
//! [`detect`] tells the format from the first bytes, [`UnitReader`] reads any of them into
//! access units.
//!
//! # Detection
//! - `DKIF` → IVF (the codec comes from its header);
//! - zero bytes then `00 00 01` → Annex-B; H.264 and H.265 are told apart by the first NAL
//!   unit's header, taking only the types a stream can start with: for H.265 (2-byte header,
//!   `nuh_layer_id` 0, `nuh_temporal_id_plus1` ≥ 1) a VPS, SPS, PPS, access unit delimiter,
//!   prefix SEI or IRAP picture (§7.4.2.2); for H.264 (1 byte) an SPS, PPS, access unit
//!   delimiter or SEI with `nal_ref_idc` as §7.4.1 requires (0 for SEI and delimiters,
//!   non-zero for parameter sets), an IDR or a non-IDR slice. The two readings exclude each
//!   other for what encoders write first (an SPS `0x67` or a delimiter `0x09` has a layer id
//!   of 1 as H.265; a VPS `0x40 0x01` is type 0 as H.264, a delimiter `0x46` an SEI with
//!   `nal_ref_idc` 2); where both fit (an H.265 IRAP `0x28 0x01` reads as an H.264 PPS) the
//!   H.265 parameter set, delimiter or SEI reading wins, then H.264, then H.265 IRAP.
//!   Anything else is a [`DetectError`] showing the bytes seen.

use std::time::Instant;

use super::{
    AccessUnit, AnnexBReader, Codec, H264Framer, H265Framer, IvfError, IvfFramer, IvfHeader,
    ReadError,
};

/// A byte-stream format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum InputFormat {
    /// H.264 Annex-B.
    H264,
    /// H.265 Annex-B.
    H265,
    /// IVF with VP8, VP9 or AV1.
    Ivf,
}

impl std::str::FromStr for InputFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "h264" | "264" | "avc" => Ok(Self::H264),
            "h265" | "265" | "hevc" => Ok(Self::H265),
            "ivf" => Ok(Self::Ivf),
            _ => Err(format!("{s:?} is not h264, h265 or ivf")),
        }
    }
}

impl std::fmt::Display for InputFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::H264 => "h264",
            Self::H265 => "h265",
            Self::Ivf => "ivf",
        })
    }
}

/// Bytes [`detect`] looks at before it gives up.
pub const DETECT_LIMIT: usize = 64;

/// Why the format could not be detected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DetectError {
    /// Neither `DKIF` nor a start code.
    #[error(
        "the input starts with {seen}: neither IVF (DKIF) nor an Annex-B start code (00 00 01)"
    )]
    Unknown { seen: String },
    /// A start code, then a NAL header neither H.264 nor H.265 starts a stream with.
    #[error("the first NAL unit's header {seen} does not start an H.264 or H.265 stream")]
    UnknownNal { seen: String },
    /// The input ended first.
    #[error("the input ended after {len} bytes, before its format could be told")]
    TooShort { len: usize },
}

fn hex(b: &[u8]) -> String {
    let shown: Vec<String> = b.iter().take(16).map(|x| format!("{x:02x}")).collect();
    let more = if b.len() > 16 { " ..." } else { "" };
    format!("[{}{more}]", shown.join(" "))
}

/// The format of a stream starting with `prefix`: `Ok(None)` if more bytes are needed (at
/// most [`DETECT_LIMIT`]); `at_end` says no more will come.
///
/// ```
/// use lowtide_media::encoded::input::{detect, InputFormat};
/// assert_eq!(detect(b"DKIF", false), Ok(Some(InputFormat::Ivf)));
/// assert_eq!(detect(&[0, 0, 0, 1, 0x67, 0x64], false), Ok(Some(InputFormat::H264)));
/// assert_eq!(detect(&[0, 0, 0, 1, 0x40, 0x01], false), Ok(Some(InputFormat::H265)));
/// assert_eq!(detect(&[0, 0], false), Ok(None));
/// assert!(detect(b"RIFF", false).is_err());
/// ```
pub fn detect(prefix: &[u8], at_end: bool) -> Result<Option<InputFormat>, DetectError> {
    let need_more = || {
        if at_end || prefix.len() >= DETECT_LIMIT {
            Err(DetectError::TooShort { len: prefix.len() })
        } else {
            Ok(None)
        }
    };
    if !prefix.is_empty() && prefix.len() < 4 && b"DKIF".starts_with(prefix) {
        return need_more();
    }
    if prefix.starts_with(b"DKIF") {
        return Ok(Some(InputFormat::Ivf));
    }
    let zeros = prefix.iter().take_while(|&&b| b == 0).count();
    let unknown = || DetectError::Unknown { seen: hex(prefix) };
    let Some(&after) = prefix.get(zeros) else {
        return need_more();
    };
    if after != 1 || zeros < 2 {
        return Err(unknown());
    }
    let header = &prefix[zeros + 1..];
    if header.len() < 2 {
        return need_more();
    }
    let (b0, b1) = (header[0], header[1]);
    let seen = || DetectError::UnknownNal {
        seen: hex(&header[..2]),
    };
    if b0 & 0x80 != 0 {
        return Err(seen());
    }
    let t265 = (b0 >> 1) & 0x3f;
    let h265_header = (b0 & 1) == 0 && (b1 >> 3) == 0 && (b1 & 7) != 0;
    let h265_ps = h265_header && matches!(t265, 32..=35 | 39);
    let h265_irap = h265_header && matches!(t265, 16..=21);
    let (ref_idc, t264) = ((b0 >> 5) & 3, b0 & 0x1f);
    let h264 = match t264 {
        6 | 9 => ref_idc == 0,
        7 | 8 => ref_idc != 0,
        1 | 5 => true,
        _ => false,
    };
    if h265_ps {
        Ok(Some(InputFormat::H265))
    } else if h264 {
        Ok(Some(InputFormat::H264))
    } else if h265_irap {
        Ok(Some(InputFormat::H265))
    } else {
        Err(seen())
    }
}

/// Why the input could not be read into access units.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    #[error(transparent)]
    Detect(#[from] DetectError),
    #[error("Annex-B input: {0}")]
    AnnexB(ReadError),
    #[error("IVF input: {0}")]
    Ivf(IvfError),
}

// The messages above show the inner error, so `source()` does not return it again (a
// printer of the whole chain would say it twice): `From` by hand instead of `#[from]`.
impl From<ReadError> for InputError {
    fn from(e: ReadError) -> Self {
        InputError::AnnexB(e)
    }
}

impl From<IvfError> for InputError {
    fn from(e: IvfError) -> Self {
        InputError::Ivf(e)
    }
}

#[derive(Debug, Clone)]
enum Inner {
    Detecting { prefix: Vec<u8>, limit: usize },
    H264(AnnexBReader<H264Framer>),
    H265(AnnexBReader<H265Framer>),
    Ivf(IvfFramer),
}

/// Reads a stream of a named or detected format into access units, incrementally and under
/// a byte limit per NAL unit, access unit or IVF frame.
///
/// ```
/// use std::time::Instant;
/// use lowtide_media::encoded::input::{InputFormat, UnitReader};
/// use lowtide_media::encoded::FrameKind;
/// let mut r = UnitReader::new(None, 1 << 20);
/// let stream = [0, 0, 0, 1, 0x67, 0x42, 0, 0, 1, 0x68, 0xce, 0, 0, 1, 0x65, 0x88];
/// let mut units = r.push(&stream[..3], Instant::now())?; // not enough to tell yet
/// units.extend(r.push(&stream[3..], Instant::now())?);
/// units.extend(r.finish()?);
/// assert_eq!(r.format(), Some(InputFormat::H264));
/// assert_eq!(units.iter().map(|u| u.kind).collect::<Vec<_>>(),
///            [FrameKind::ParameterSets, FrameKind::Keyframe]);
/// # Ok::<(), lowtide_media::encoded::input::InputError>(())
/// ```
#[derive(Debug, Clone)]
pub struct UnitReader {
    inner: Inner,
}

impl UnitReader {
    /// A reader of `format` (`None`: detect it), refusing units over `limit` bytes.
    pub fn new(format: Option<InputFormat>, limit: usize) -> Self {
        let inner = match format {
            None => Inner::Detecting {
                prefix: Vec::new(),
                limit,
            },
            Some(f) => Self::open(f, limit),
        };
        Self { inner }
    }

    fn open(f: InputFormat, limit: usize) -> Inner {
        match f {
            InputFormat::H264 => Inner::H264(AnnexBReader::new(H264Framer::new(limit), limit)),
            InputFormat::H265 => Inner::H265(AnnexBReader::new(H265Framer::new(limit), limit)),
            InputFormat::Ivf => Inner::Ivf(IvfFramer::new(limit)),
        }
    }

    /// The format, once named or detected.
    pub fn format(&self) -> Option<InputFormat> {
        match &self.inner {
            Inner::Detecting { .. } => None,
            Inner::H264(_) => Some(InputFormat::H264),
            Inner::H265(_) => Some(InputFormat::H265),
            Inner::Ivf(_) => Some(InputFormat::Ivf),
        }
    }

    /// The codec, once known (IVF: once its file header is read).
    pub fn codec(&self) -> Option<Codec> {
        match &self.inner {
            Inner::Detecting { .. } => None,
            Inner::H264(_) => Some(Codec::H264),
            Inner::H265(_) => Some(Codec::H265),
            Inner::Ivf(r) => r.header().map(|h| h.codec),
        }
    }

    /// The IVF file header, once read.
    pub fn ivf_header(&self) -> Option<IvfHeader> {
        match &self.inner {
            Inner::Ivf(r) => r.header().copied(),
            _ => None,
        }
    }

    /// Takes the next chunk, which arrived at `now`; returns the units it completed. Errors
    /// are final.
    pub fn push(&mut self, chunk: &[u8], now: Instant) -> Result<Vec<AccessUnit>, InputError> {
        if let Inner::Detecting { prefix, limit } = &mut self.inner {
            prefix.extend_from_slice(chunk);
            let Some(f) = detect(prefix, false)? else {
                return Ok(Vec::new());
            };
            let (prefix, limit) = (std::mem::take(prefix), *limit);
            self.inner = Self::open(f, limit);
            return self.push(&prefix, now);
        }
        Ok(match &mut self.inner {
            Inner::Detecting { .. } => Vec::new(),
            Inner::H264(r) => r.push(chunk, now)?,
            Inner::H265(r) => r.push(chunk, now)?,
            Inner::Ivf(r) => r.push(chunk, now)?,
        })
    }

    /// The input ended: the last units, or why the stream is incomplete.
    pub fn finish(&mut self) -> Result<Vec<AccessUnit>, InputError> {
        Ok(match &mut self.inner {
            Inner::Detecting { prefix, .. } => {
                detect(prefix, true)?;
                Vec::new()
            }
            Inner::H264(r) => r.finish()?,
            Inner::H265(r) => r.finish()?,
            Inner::Ivf(r) => {
                r.finish()?;
                Vec::new()
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn nal(header: &[u8]) -> Vec<u8> {
        [&[0, 0, 0, 1][..], header].concat()
    }

    #[test]
    fn first_nal_tells_h264_from_h265() {
        use InputFormat::*;
        let cases: &[(&[u8], InputFormat)] = &[
            (&[0x67, 0x64], H264), // SPS (x264)
            (&[0x27, 0x42], H264), // SPS, nal_ref_idc 1
            (&[0x09, 0xf0], H264), // access unit delimiter
            (&[0x09, 0x10], H264),
            (&[0x06, 0x05], H264), // SEI (as H.265: a TSA picture, not a start)
            (&[0x65, 0x88], H264), // IDR
            (&[0x40, 0x01], H265), // VPS (x265)
            (&[0x42, 0x01], H265), // SPS
            (&[0x46, 0x01], H265), // access unit delimiter
            (&[0x4e, 0x01], H265), // prefix SEI
            (&[0x26, 0x01], H265), // IDR_W_RADL
            (&[0x2a, 0x01], H265), // CRA
        ];
        for &(header, want) in cases {
            let got = detect(&nal(header), false);
            assert_eq!(got, Ok(Some(want)), "{header:02x?}");
            // Three-byte start codes and leading zero bytes too.
            let three = [&[0, 0, 0, 0, 0, 1][..], header].concat();
            assert_eq!(detect(&three, false), Ok(Some(want)), "{header:02x?}");
        }
    }

    #[test]
    fn undecided_then_refused_with_what_was_seen() {
        assert_eq!(detect(&[], false), Ok(None));
        assert_eq!(detect(b"DK", false), Ok(None));
        assert_eq!(detect(&[0, 0, 0, 1, 0x67], false), Ok(None));
        assert_eq!(
            detect(&[0, 0, 1], true),
            Err(DetectError::TooShort { len: 3 })
        );
        let e = detect(b"\x1aE\xdf\xa3 matroska", false).unwrap_err();
        assert!(e.to_string().contains("[1a 45 df a3"), "{e}");
        assert!(matches!(
            detect(b"GIF89a", false),
            Err(DetectError::Unknown { .. })
        ));
        assert!(matches!(
            detect(&[0, 1, 0x67, 0x64], false),
            Err(DetectError::Unknown { .. })
        ));
        // An H.264 SPS with nal_ref_idc 0, an H.265 NAL with layer id 5: neither.
        for h in [[0x07, 0x42], [0x40, 0x29]] {
            assert!(matches!(
                detect(&nal(&h), false),
                Err(DetectError::UnknownNal { .. })
            ));
        }
        assert_eq!(
            detect(&[0; DETECT_LIMIT], false),
            Err(DetectError::TooShort { len: DETECT_LIMIT })
        );
    }

    #[test]
    fn reader_refuses_undetectable_input_and_reads_ivf() {
        let mut r = UnitReader::new(None, 1024);
        assert!(matches!(
            r.push(b"hello", Instant::now()),
            Err(InputError::Detect(_))
        ));
        let mut r = UnitReader::new(None, 1024);
        r.push(&[0, 0], Instant::now()).unwrap();
        assert!(matches!(
            r.finish(),
            Err(InputError::Detect(DetectError::TooShort { len: 2 }))
        ));
        let h = IvfHeader {
            codec: Codec::Vp8,
            width: 64,
            height: 64,
            timebase_rate: 30,
            timebase_scale: 1,
            frame_count: 0,
        };
        let mut file = h.to_bytes().to_vec();
        super::super::write_ivf_frame(&mut file, 0, &[0x10, 0, 0, 0x9d, 0x01, 0x2a, 64, 0, 64, 0]);
        let mut r = UnitReader::new(None, 1024);
        let mut units = Vec::new();
        for b in &file {
            units.extend(r.push(std::slice::from_ref(b), Instant::now()).unwrap());
        }
        units.extend(r.finish().unwrap());
        assert_eq!(
            (r.format(), r.codec()),
            (Some(InputFormat::Ivf), Some(Codec::Vp8))
        );
        assert_eq!(r.ivf_header(), Some(h));
        assert_eq!(units.len(), 1);
    }

    proptest! {
        #[test]
        fn detection_never_panics_and_is_stable(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            let all = detect(&bytes, true);
            // A decision on a prefix stands for the whole.
            for n in 0..=bytes.len() {
                if let Ok(Some(f)) = detect(&bytes[..n], false) {
                    prop_assert_eq!(all.clone(), Ok(Some(f)));
                    break;
                }
            }
        }
    }
}
