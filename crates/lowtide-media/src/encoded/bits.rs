//! A bit reader over the start of a NAL unit's or a frame's payload, for the few header fields
//! the model reads: fixed-width fields, `ue(v)` (exp-Golomb, ITU-T H.264 §9.1) and `leb128`
//! (AV1 spec §4.10.5). For H.264 and H.265 it skips emulation-prevention bytes (the `0x03` after
//! two zero bytes, H.264 §7.4.1 / H.265 §7.4.2), so it reads the RBSP the spec's syntax
//! describes, without copying the payload.

/// Ran out of bits: the header is shorter than its syntax.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OutOfBits;

/// Reads bits most significant first.
pub(crate) struct BitReader<'a> {
    data: &'a [u8],
    /// Next byte to load.
    pos: usize,
    /// Zero bytes just read (for emulation prevention).
    zeros: u8,
    /// Skip emulation-prevention bytes.
    rbsp: bool,
    cur: u8,
    /// Bits left in `cur`.
    left: u8,
}

impl<'a> BitReader<'a> {
    /// Reads `data` as is (VP8, VP9, AV1).
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Self {
            data,
            pos: 0,
            zeros: 0,
            rbsp: false,
            cur: 0,
            left: 0,
        }
    }

    /// Reads `data` as an H.264/H.265 RBSP: `00 00 03` yields `00 00`.
    pub(crate) fn rbsp(data: &'a [u8]) -> Self {
        Self {
            rbsp: true,
            ..Self::new(data)
        }
    }

    fn load(&mut self) -> Result<(), OutOfBits> {
        let mut b = *self.data.get(self.pos).ok_or(OutOfBits)?;
        self.pos += 1;
        if self.rbsp && self.zeros >= 2 && b == 3 {
            b = *self.data.get(self.pos).ok_or(OutOfBits)?;
            self.pos += 1;
            self.zeros = 0;
        }
        self.zeros = if b == 0 {
            self.zeros.saturating_add(1)
        } else {
            0
        };
        self.cur = b;
        self.left = 8;
        Ok(())
    }

    pub(crate) fn bit(&mut self) -> Result<bool, OutOfBits> {
        if self.left == 0 {
            self.load()?;
        }
        self.left -= 1;
        Ok((self.cur >> self.left) & 1 == 1)
    }

    /// `n` ≤ 32 bits as an unsigned number.
    pub(crate) fn bits(&mut self, n: u8) -> Result<u32, OutOfBits> {
        debug_assert!(n <= 32);
        let mut v = 0u32;
        for _ in 0..n {
            v = (v << 1) | u32::from(self.bit()?);
        }
        Ok(v)
    }

    /// `ue(v)`; more than 31 leading zero bits is out of range (no syntax element the model
    /// reads is that large), reported as running out.
    pub(crate) fn ue(&mut self) -> Result<u32, OutOfBits> {
        let mut zeros = 0u8;
        while !self.bit()? {
            zeros += 1;
            if zeros > 31 {
                return Err(OutOfBits);
            }
        }
        let rest = self.bits(zeros)?;
        Ok(((1u64 << zeros) - 1 + u64::from(rest)).min(u64::from(u32::MAX)) as u32)
    }
}

/// AV1's `leb128()`: at most 8 bytes, value below 2^32 (AV1 spec §4.10.5). Returns the value
/// and the bytes it took, or `None` if `data` ends inside it or it is out of range.
pub(crate) fn leb128(data: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, &b) in data.iter().take(8).enumerate() {
        value |= u64::from(b & 0x7f) << (i * 7);
        if b & 0x80 == 0 {
            return (value <= u64::from(u32::MAX)).then_some((value, i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_golomb_values() {
        // 1 | 010 | 011 | 00100 | 00111 → 0, 1, 2, 3, 6
        let mut r = BitReader::new(&[0b1010_0110, 0b0100_0011, 0b1000_0000]);
        let v: Vec<u32> = (0..5).map(|_| r.ue().unwrap()).collect();
        assert_eq!(v, [0, 1, 2, 3, 6]);
    }

    #[test]
    fn emulation_prevention_is_skipped() {
        let mut r = BitReader::rbsp(&[0, 0, 3, 1]);
        assert_eq!(r.bits(24), Ok(1));
        let mut raw = BitReader::new(&[0, 0, 3, 1]);
        assert_eq!(raw.bits(24), Ok(3));
    }

    #[test]
    fn runs_out() {
        assert_eq!(BitReader::new(&[0, 0, 0, 0, 0]).ue(), Err(OutOfBits));
        assert_eq!(BitReader::new(&[]).bit(), Err(OutOfBits));
    }

    #[test]
    fn leb128_bounds() {
        assert_eq!(leb128(&[0x7f]), Some((127, 1)));
        assert_eq!(leb128(&[0x80, 0x01]), Some((128, 2)));
        assert_eq!(leb128(&[0x80]), None);
        assert_eq!(leb128(&[0xff; 8]), None);
    }
}
