//! The Annex-B byte stream (ITU-T H.264 Annex B, H.265 Annex B): NAL units each preceded by a
//! start code `00 00 01`, optionally with more zero bytes before it (the 4-byte form
//! `00 00 00 01`, `leading_zero_8bits`, `trailing_zero_8bits`).
//!
//! [`AnnexBSplitter`] cuts a stream that arrives in chunks of any size (a pipe from an
//! encoder) into NAL units, byte by byte through a small state machine, so a start code split
//! across chunks is found and the result does not depend on the chunking.
//!
//! # When splitting fails
//! Memory is bounded by the NAL size limit: the splitter holds at most the NAL being read
//! (a run of zero bytes is counted, not stored), and refuses with an [`AnnexBError`] a NAL
//! longer than the limit, bytes other than zeros before the first start code, an empty NAL
//! (two start codes in a row) and the sequences `00 00 00` and `00 00 02` inside a NAL, which
//! H.264 §7.4.1 and H.265 §7.4.2 forbid. An error is final: every later call returns it.

/// Why a byte stream is not Annex-B. Offsets count bytes from the start of the stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AnnexBError {
    /// A byte other than zero before the first start code: not an Annex-B stream.
    #[error("no start code before byte {offset} (not an Annex-B stream?)")]
    NoStartCode { offset: u64 },
    /// A NAL unit grew past the limit.
    #[error("NAL unit at byte {offset} is longer than the limit of {limit} bytes")]
    NalTooLarge { offset: u64, limit: usize },
    /// A start code right after another one, or at the very end of the stream.
    #[error("empty NAL unit at byte {offset}")]
    EmptyNal { offset: u64 },
    /// `00 00 00` or `00 00 02` inside a NAL unit.
    #[error("forbidden byte sequence 00 00 {byte:02x} inside a NAL unit at byte {offset}")]
    ForbiddenSequence { offset: u64, byte: u8 },
}

/// The default NAL size limit: 8 MiB, far above a 4K intra picture at a broadcast bit rate.
pub const DEFAULT_MAX_NAL: usize = 8 << 20;

/// Splits an Annex-B stream into NAL units (without start codes, with their
/// emulation-prevention bytes), incrementally.
///
/// ```
/// use lowtide_media::encoded::AnnexBSplitter;
/// let mut s = AnnexBSplitter::new(1024);
/// let mut nals = s.push(&[0, 0, 0, 1, 0x67, 0x42, 0, 0])?;
/// nals.extend(s.push(&[1, 0x68, 0xce])?);
/// nals.extend(s.finish()?);
/// assert_eq!(nals, vec![vec![0x67, 0x42], vec![0x68, 0xce]]);
/// # Ok::<(), lowtide_media::encoded::AnnexBError>(())
/// ```
#[derive(Debug, Clone)]
pub struct AnnexBSplitter {
    max_nal: usize,
    nal: Vec<u8>,
    in_nal: bool,
    /// Zero bytes seen and not yet stored (they may be part of a start code).
    zeros: u64,
    /// Bytes consumed so far.
    offset: u64,
    /// Offset where the current NAL started.
    nal_offset: u64,
    failed: Option<AnnexBError>,
}

impl AnnexBSplitter {
    /// A splitter refusing NAL units longer than `max_nal` bytes.
    pub fn new(max_nal: usize) -> Self {
        Self {
            max_nal,
            nal: Vec::new(),
            in_nal: false,
            zeros: 0,
            offset: 0,
            nal_offset: 0,
            failed: None,
        }
    }

    /// Bytes held for the NAL being read (at most the limit).
    pub fn buffered(&self) -> usize {
        self.nal.len()
    }

    fn fail(&mut self, e: AnnexBError) -> AnnexBError {
        self.failed = Some(e.clone());
        e
    }

    /// Takes the next chunk; returns the NAL units it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<Vec<u8>>, AnnexBError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let mut out = Vec::new();
        let mut i = 0;
        while i < chunk.len() {
            // Fast path: copy a run of non-zero bytes inside a NAL.
            if self.in_nal && self.zeros == 0 {
                let run = chunk[i..]
                    .iter()
                    .position(|&b| b == 0)
                    .unwrap_or(chunk.len() - i);
                if run > 0 {
                    if self.nal.len() + run > self.max_nal {
                        let e = self.too_large();
                        return Err(self.fail(e));
                    }
                    self.nal.extend_from_slice(&chunk[i..i + run]);
                    i += run;
                    self.offset += run as u64;
                    continue;
                }
            }
            let b = chunk[i];
            i += 1;
            self.offset += 1;
            if let Err(e) = self.byte(b, &mut out) {
                return Err(self.fail(e));
            }
        }
        Ok(out)
    }

    fn too_large(&self) -> AnnexBError {
        AnnexBError::NalTooLarge {
            offset: self.nal_offset,
            limit: self.max_nal,
        }
    }

    fn byte(&mut self, b: u8, out: &mut Vec<Vec<u8>>) -> Result<(), AnnexBError> {
        let at = self.offset - 1;
        if b == 0 {
            self.zeros += 1;
            return Ok(());
        }
        if b == 1 && self.zeros >= 2 {
            if self.in_nal {
                if self.nal.is_empty() {
                    return Err(AnnexBError::EmptyNal {
                        offset: self.nal_offset,
                    });
                }
                out.push(std::mem::take(&mut self.nal));
            }
            self.in_nal = true;
            self.zeros = 0;
            self.nal_offset = at + 1;
            return Ok(());
        }
        if !self.in_nal {
            return Err(AnnexBError::NoStartCode { offset: at });
        }
        if self.zeros >= 3 || (self.zeros == 2 && b == 2) {
            let byte = if self.zeros >= 3 { 0 } else { 2 };
            return Err(AnnexBError::ForbiddenSequence { offset: at, byte });
        }
        if self.nal.len() as u64 + self.zeros + 1 > self.max_nal as u64 {
            return Err(self.too_large());
        }
        self.nal.extend(std::iter::repeat_n(0, self.zeros as usize));
        self.nal.push(b);
        self.zeros = 0;
        Ok(())
    }

    /// The stream ended, or the caller knows a NAL unit ends here (an access-unit-aligned
    /// buffer): returns the NAL unit being read (its trailing zero bytes dropped). Bytes pushed
    /// afterwards must start with a start code again.
    pub fn finish(&mut self) -> Result<Option<Vec<u8>>, AnnexBError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        self.zeros = 0;
        if !self.in_nal {
            return Ok(None);
        }
        self.in_nal = false;
        if self.nal.is_empty() {
            let e = AnnexBError::EmptyNal {
                offset: self.nal_offset,
            };
            return Err(self.fail(e));
        }
        Ok(Some(std::mem::take(&mut self.nal)))
    }
}

/// Appends `nal` to `out` with a 4-byte start code.
pub fn write_nal(out: &mut Vec<u8>, nal: &[u8]) {
    out.extend_from_slice(&[0, 0, 0, 1]);
    out.extend_from_slice(nal);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_all(data: &[u8], max: usize) -> Result<Vec<Vec<u8>>, AnnexBError> {
        let mut s = AnnexBSplitter::new(max);
        let mut v = s.push(data)?;
        v.extend(s.finish()?);
        Ok(v)
    }

    #[test]
    fn three_and_four_byte_start_codes_and_trailing_zeros() {
        let data = [
            0, 0, 1, 9, 0xf0, 0, 0, 0, 0, 1, 0x67, 0, 0, 3, 1, 0, 0, 1, 0x65, 0x88, 0, 0,
        ];
        let nals = split_all(&data, 64).unwrap();
        assert_eq!(
            nals,
            vec![vec![9, 0xf0], vec![0x67, 0, 0, 3, 1], vec![0x65, 0x88]]
        );
    }

    #[test]
    fn errors_are_precise_and_final() {
        assert_eq!(
            split_all(&[0, 5], 64),
            Err(AnnexBError::NoStartCode { offset: 1 })
        );
        assert_eq!(
            split_all(&[0, 0, 1, 0, 0, 1], 64),
            Err(AnnexBError::EmptyNal { offset: 3 })
        );
        assert_eq!(
            split_all(&[0, 0, 1], 64),
            Err(AnnexBError::EmptyNal { offset: 3 })
        );
        assert_eq!(
            split_all(&[0, 0, 1, 0x41, 0, 0, 2], 64),
            Err(AnnexBError::ForbiddenSequence { offset: 6, byte: 2 })
        );
        assert_eq!(
            split_all(&[0, 0, 1, 0x41, 0, 0, 0, 7], 64),
            Err(AnnexBError::ForbiddenSequence { offset: 7, byte: 0 })
        );
        let mut s = AnnexBSplitter::new(4);
        let e = s.push(&[0, 0, 1, 1, 2, 3, 4, 5]).unwrap_err();
        assert_eq!(
            e,
            AnnexBError::NalTooLarge {
                offset: 3,
                limit: 4
            }
        );
        assert_eq!(s.push(&[0, 0, 1]), Err(e.clone()));
        assert_eq!(s.finish(), Err(e));
    }

    #[test]
    fn memory_stays_under_the_limit() {
        let mut s = AnnexBSplitter::new(1000);
        s.push(&[0, 0, 1]).unwrap();
        for _ in 0..100 {
            if s.push(&[0x55; 64]).is_err() {
                break;
            }
            assert!(s.buffered() <= 1000);
        }
        assert!(matches!(s.push(&[1]), Err(AnnexBError::NalTooLarge { .. })));
        // A long run of zeros is counted, not stored.
        let mut z = AnnexBSplitter::new(16);
        z.push(&vec![0; 100_000]).unwrap();
        assert_eq!(z.buffered(), 0);
    }
}
