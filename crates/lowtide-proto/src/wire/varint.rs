//! LEB128 variable-length unsigned integers (7 bits per byte, low bits first, at most 10 bytes).
//!
//! Parsing fails only with [`DecodeError::VarintOverflow`] (more than 64 bits); a varint cut
//! short by the end of the buffer is reported as `Ok(None)` ("need more bytes").
//!
//! ```
//! use lowtide_proto::wire::{varint, DecodeError};
//! let mut out = Vec::new();
//! varint::put(&mut out, u64::MAX);
//! assert_eq!(out.len(), varint::MAX_LEN);
//! // Eleven continuation bytes: more than 64 bits.
//! assert_eq!(varint::get(&[0xff; 11]), Err(DecodeError::VarintOverflow));
//! ```

use super::DecodeError;

/// Longest encoding of a `u64`.
pub const MAX_LEN: usize = 10;

/// Appends `v` to `out`.
///
/// ```
/// use lowtide_proto::wire::varint;
/// let mut out = Vec::new();
/// varint::put(&mut out, 300);
/// assert_eq!(out, [0xac, 0x02]); // LEB128: low 7 bits first
/// assert_eq!(varint::len(300), 2);
/// assert_eq!(varint::get(&out)?, Some((300, 2)));
/// assert_eq!(varint::get(&out[..1])?, None); // ends inside the varint
/// # Ok::<(), lowtide_proto::wire::DecodeError>(())
/// ```
#[inline]
pub fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Number of bytes [`put`] writes for `v`.
#[inline]
///
/// ```
/// use lowtide_proto::wire::varint;
/// assert_eq!(varint::len(127), 1);
/// assert_eq!(varint::len(128), 2);
/// assert_eq!(varint::len(u64::MAX), varint::MAX_LEN);
/// ```
pub fn len(v: u64) -> usize {
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Reads one varint from the front of `buf`: `Ok(Some((value, bytes_used)))`, `Ok(None)` if
/// `buf` ends inside the varint.
#[inline]
///
/// ```
/// use lowtide_proto::wire::varint;
/// // 300 followed by the next field's bytes.
/// assert_eq!(varint::get(&[0xac, 0x02, 0x07])?, Some((300, 2)));
/// assert_eq!(varint::get(&[0xac])?, None); // need more bytes
/// # Ok::<(), lowtide_proto::wire::DecodeError>(())
/// ```
pub fn get(buf: &[u8]) -> Result<Option<(u64, usize)>, DecodeError> {
    let mut v: u64 = 0;
    for (i, &b) in buf.iter().enumerate().take(MAX_LEN) {
        let part = u64::from(b & 0x7f);
        if i == MAX_LEN - 1 && (b & 0x7f) > 1 {
            return Err(DecodeError::VarintOverflow);
        }
        v |= part << (7 * i);
        if b & 0x80 == 0 {
            return Ok(Some((v, i + 1)));
        }
    }
    if buf.len() >= MAX_LEN {
        return Err(DecodeError::VarintOverflow);
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_edges() {
        for v in [
            0,
            1,
            127,
            128,
            300,
            16383,
            16384,
            u32::MAX as u64,
            u64::MAX - 1,
            u64::MAX,
        ] {
            let mut out = Vec::new();
            put(&mut out, v);
            assert_eq!(out.len(), len(v), "len of {v}");
            assert_eq!(get(&out).unwrap(), Some((v, out.len())));
            assert_eq!(get(&out[..out.len() - 1]).unwrap(), None);
        }
    }

    #[test]
    fn overflow_is_an_error() {
        assert_eq!(get(&[0xff; 11]), Err(DecodeError::VarintOverflow));
        let mut ten = [0xff; 10];
        ten[9] = 0x02;
        assert_eq!(get(&ten), Err(DecodeError::VarintOverflow));
    }
}
