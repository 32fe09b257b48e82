//! The ladder's messages on a plain TCP socket (big-endian):
//!
//! ```text
//! server → client, once:  'L' | version 1 | n u8 | n × rate u64 (bit/s, lowest first)
//! server → client, media: 0x01 | rung u8 | len u16 | len bytes of the rung's media
//! client → server:        0x02 | rung u8      (switch to that rung; also the first request)
//! ```
//!
//! The server sends nothing but the manifest until the client's first request. Frames are
//! at most [`MAX_FRAME`] bytes of media; the parser keeps no payload, so a client's memory
//! is bounded whatever the server sends.

use super::{Ladder, LadderError, MAX_RUNGS};

pub const MANIFEST_TAG: u8 = b'L';
pub const VERSION: u8 = 1;
pub const MEDIA_TAG: u8 = 0x01;
pub const SWITCH_TAG: u8 = 0x02;
/// Media bytes in one frame, at most.
pub const MAX_FRAME: usize = 16 * 1024;
pub const MEDIA_HEADER: usize = 4;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LadderWireError {
    #[error("not a ladder server: the first byte is {0:#04x}, expected 'L'")]
    NotAManifest(u8),
    #[error("manifest version {0}: this client speaks version {VERSION}")]
    Version(u8),
    #[error("manifest: {0}")]
    Ladder(LadderError),
    #[error("switch request: {0}")]
    Switch(LadderError),
    #[error("unknown message tag {0:#04x}")]
    UnknownTag(u8),
    #[error("media frame of {len} bytes: at most {MAX_FRAME} allowed")]
    FrameTooLong { len: usize },
    #[error("media for rung {rung}, but the ladder has {len} rungs")]
    NoSuchRung { rung: u8, len: usize },
    /// Rungs are named by their index in the manifest, lowest rate first: a manifest in
    /// another order would have the client count every rung's bytes against another rung.
    #[error("manifest: rung {index} ({bps} bit/s) is not above the rung before it; rates go lowest first")]
    Unordered { index: usize, bps: u64 },
}

// `Ladder` shows the inner error, so `source()` does not return it again: `From` by hand.
impl From<LadderError> for LadderWireError {
    fn from(e: LadderError) -> Self {
        LadderWireError::Ladder(e)
    }
}

pub fn manifest(ladder: &Ladder) -> Vec<u8> {
    let mut out = vec![MANIFEST_TAG, VERSION, ladder.len() as u8];
    for r in ladder.rates_bps() {
        out.extend_from_slice(&r.to_be_bytes());
    }
    out
}

/// A media frame's header for `len` (≤ [`MAX_FRAME`]) bytes of rung `rung`.
pub fn media_header(rung: usize, len: usize) -> [u8; MEDIA_HEADER] {
    debug_assert!(len <= MAX_FRAME && rung < MAX_RUNGS);
    let len = (len as u16).to_be_bytes();
    [MEDIA_TAG, rung as u8, len[0], len[1]]
}

pub fn switch_request(rung: usize) -> [u8; 2] {
    [SWITCH_TAG, rung as u8]
}

/// The server's side: a switch request's rung, checked against the ladder.
pub fn decode_switch(msg: [u8; 2], ladder: &Ladder) -> Result<usize, LadderWireError> {
    if msg[0] != SWITCH_TAG {
        return Err(LadderWireError::UnknownTag(msg[0]));
    }
    ladder
        .check(usize::from(msg[1]))
        .map_err(LadderWireError::Switch)
}

#[derive(Debug, Clone)]
enum State {
    /// Collecting the manifest's bytes.
    Manifest(Vec<u8>),
    /// Collecting a media header.
    Header([u8; MEDIA_HEADER], usize),
    Payload {
        rung: usize,
        left: usize,
    },
}

/// The client's side: bytes in as they come, media bytes counted per rung.
#[derive(Debug, Clone)]
pub struct MediaParser {
    state: State,
    ladder: Option<Ladder>,
    bytes_by_rung: Vec<u64>,
    last_rung: Option<usize>,
}

impl Default for MediaParser {
    fn default() -> Self {
        MediaParser {
            state: State::Manifest(Vec::new()),
            ladder: None,
            bytes_by_rung: Vec::new(),
            last_rung: None,
        }
    }
}

impl MediaParser {
    /// The server's ladder, once its manifest has arrived.
    pub fn ladder(&self) -> Option<&Ladder> {
        self.ladder.as_ref()
    }

    /// Media bytes received per rung so far.
    pub fn bytes_by_rung(&self) -> &[u64] {
        &self.bytes_by_rung
    }

    /// The rung of the last media byte received.
    pub fn last_rung(&self) -> Option<usize> {
        self.last_rung
    }

    pub fn feed(&mut self, mut data: &[u8]) -> Result<(), LadderWireError> {
        while !data.is_empty() {
            match &mut self.state {
                State::Manifest(buf) => {
                    buf.push(data[0]);
                    data = &data[1..];
                    if let Some(ladder) = parse_manifest(buf)? {
                        self.bytes_by_rung = vec![0; ladder.len()];
                        self.ladder = Some(ladder);
                        self.state = State::Header([0; MEDIA_HEADER], 0);
                    }
                }
                State::Header(h, have) => {
                    let n = (MEDIA_HEADER - *have).min(data.len());
                    h[*have..*have + n].copy_from_slice(&data[..n]);
                    *have += n;
                    data = &data[n..];
                    if *have == MEDIA_HEADER {
                        let h = *h;
                        if h[0] != MEDIA_TAG {
                            return Err(LadderWireError::UnknownTag(h[0]));
                        }
                        let len = usize::from(u16::from_be_bytes([h[2], h[3]]));
                        if len > MAX_FRAME {
                            return Err(LadderWireError::FrameTooLong { len });
                        }
                        let rungs = self.bytes_by_rung.len();
                        if usize::from(h[1]) >= rungs {
                            return Err(LadderWireError::NoSuchRung {
                                rung: h[1],
                                len: rungs,
                            });
                        }
                        self.state = State::Payload {
                            rung: usize::from(h[1]),
                            left: len,
                        };
                    }
                }
                State::Payload { rung, left } => {
                    let n = (*left).min(data.len());
                    self.bytes_by_rung[*rung] += n as u64;
                    self.last_rung = Some(*rung);
                    *left -= n;
                    data = &data[n..];
                }
            }
            if let State::Payload { left: 0, .. } = self.state {
                self.state = State::Header([0; MEDIA_HEADER], 0);
            }
        }
        Ok(())
    }
}

/// `Some` once `buf` holds a whole manifest; an error as soon as it cannot be one.
fn parse_manifest(buf: &[u8]) -> Result<Option<Ladder>, LadderWireError> {
    if buf[0] != MANIFEST_TAG {
        return Err(LadderWireError::NotAManifest(buf[0]));
    }
    if let Some(&v) = buf.get(1) {
        if v != VERSION {
            return Err(LadderWireError::Version(v));
        }
    }
    let Some(&n) = buf.get(2) else {
        return Ok(None);
    };
    let n = usize::from(n);
    if !(1..=MAX_RUNGS).contains(&n) {
        return Err(LadderError::Count(n).into());
    }
    if buf.len() < 3 + 8 * n {
        return Ok(None);
    }
    let rates: Vec<u64> = buf[3..3 + 8 * n]
        .chunks_exact(8)
        .map(|c| u64::from_be_bytes(c.try_into().expect("8 bytes")))
        .collect();
    let ladder = Ladder::new(&rates)?;
    if let Some(index) = (1..rates.len()).find(|&i| rates[i] <= rates[i - 1]) {
        return Err(LadderWireError::Unordered {
            index,
            bps: rates[index],
        });
    }
    Ok(Some(ladder))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `media_wire` fuzz target: an unordered manifest was read as the sorted
    /// ladder, so its rung indices named other rates than the sender's.
    #[test]
    fn a_manifest_out_of_order_is_refused() {
        let mut m = vec![MANIFEST_TAG, VERSION, 2];
        m.extend_from_slice(&262_000u64.to_be_bytes());
        m.extend_from_slice(&60_000u64.to_be_bytes());
        assert_eq!(
            MediaParser::default().feed(&m),
            Err(LadderWireError::Unordered {
                index: 1,
                bps: 60_000
            })
        );
        // The same rates lowest first, as `manifest` writes them, are a ladder.
        let mut p = MediaParser::default();
        assert_eq!(
            p.feed(&manifest(&Ladder::new(&[262_000, 60_000]).unwrap())),
            Ok(())
        );
        assert_eq!(p.ladder().map(Ladder::len), Some(2));
    }

    fn stream() -> Vec<u8> {
        let mut s = manifest(&Ladder::mehra());
        for (rung, len) in [(3, 1000), (3, 0), (1, MAX_FRAME)] {
            s.extend_from_slice(&media_header(rung, len));
            s.extend(std::iter::repeat_n(0xAA, len));
        }
        s
    }

    #[test]
    fn media_is_counted_per_rung_in_any_cut() {
        let s = stream();
        for cut in [1, 3, 7, 4096, s.len()] {
            let mut p = MediaParser::default();
            for piece in s.chunks(cut) {
                p.feed(piece).unwrap();
            }
            assert_eq!(p.ladder(), Some(&Ladder::mehra()));
            assert_eq!(p.bytes_by_rung(), &[0, MAX_FRAME as u64, 0, 1000]);
            assert_eq!(p.last_rung(), Some(1));
        }
    }

    #[test]
    fn bad_input_gets_a_precise_error() {
        let err = |bytes: &[u8]| MediaParser::default().feed(bytes).unwrap_err().to_string();
        assert_eq!(
            err(b"HTTP/1.1"),
            "not a ladder server: the first byte is 0x48, expected 'L'"
        );
        assert_eq!(
            err(&[b'L', 9]),
            "manifest version 9: this client speaks version 1"
        );
        assert_eq!(
            err(&[b'L', 1, 0]),
            "manifest: rungs: 0 given, allowed are 1 to 16"
        );
        let mut s = manifest(&Ladder::mehra());
        s.extend_from_slice(&[MEDIA_TAG, 4, 0, 1]);
        assert_eq!(err(&s), "media for rung 4, but the ladder has 4 rungs");
        let mut s = manifest(&Ladder::mehra());
        s.extend_from_slice(&[MEDIA_TAG, 0, 0xff, 0xff]);
        assert_eq!(err(&s), "media frame of 65535 bytes: at most 16384 allowed");
        let mut s = manifest(&Ladder::mehra());
        s.push(0x7f);
        s.extend_from_slice(&[0, 0, 0]);
        assert_eq!(err(&s), "unknown message tag 0x7f");
        let l = Ladder::mehra();
        assert_eq!(decode_switch(switch_request(2), &l), Ok(2));
        assert_eq!(
            decode_switch([SWITCH_TAG, 9], &l).unwrap_err().to_string(),
            "switch request: rung 9: the ladder has 4 rungs (0 to 3)"
        );
    }
}
