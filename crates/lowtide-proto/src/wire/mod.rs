//! Wire format: handshake and frames. The normative description is `docs/wire.md`.
//!
//! Everything after the handshake is a sequence of frames; every integer is a LEB128 varint
//! ([`varint`]). A frame starts with its type, then its fields; the two data frames end with a
//! payload whose length precedes it.
//!
//! # When parsing fails
//! [`Frame::decode`] and [`Hello::decode`] never panic and never allocate on behalf of the peer:
//! they return `Ok(None)` when the buffer ends inside a frame (the caller must keep the bytes
//! and feed more) and an error as soon as the bytes seen so far cannot start a valid frame:
//! an unknown frame type, a varint longer than 64 bits, a field out of its range, a payload
//! longer than the negotiated chunk limit, or a close reason that is too long or not UTF-8.
//! Because the length check happens on the header, a peer cannot make us buffer more than one
//! maximal frame.
//!
//! ```
//! use lowtide_proto::wire::{DecodeError, Frame};
//! let mut buf = Vec::new();
//! Frame::PAck { bytes: 70_000, recv_time_us: 1_234 }.encode(&mut buf);
//! Frame::Close { code: 0, reason: "done" }.encode(&mut buf);
//! let (first, used) = Frame::decode(&buf, 65_536)?.expect("complete");
//! assert_eq!(first, Frame::PAck { bytes: 70_000, recv_time_us: 1_234 });
//! let (second, _) = Frame::decode(&buf[used..], 65_536)?.expect("complete");
//! assert_eq!(second, Frame::Close { code: 0, reason: "done" });
//! assert_eq!(Frame::decode(&buf[..used - 1], 65_536)?, None); // wait for more bytes
//! assert_eq!(Frame::decode(&[0x7f], 65_536), Err(DecodeError::UnknownFrameType(0x7f)));
//! # Ok::<(), DecodeError>(())
//! ```

mod frame;
mod handshake;
pub mod varint;

pub use frame::{
    probe_pad_len, CancelReason, DataFrame, FirstChunk, Frame, FrameType, MAX_CLOSE_REASON,
    MAX_HEADER_LEN, MAX_PROBE_PAD,
};
pub use handshake::{Hello, HelloOption, MAGIC, MAX_HELLO_OPTIONS, VERSION};

/// Why bytes from the peer could not be parsed.
///
/// ```
/// use lowtide_proto::wire::{DecodeError, Frame};
/// // A DATA_FIRST frame declaring a 1 MB chunk, refused from its header alone.
/// let mut buf = vec![0x03, 1, 0, 0, 0];
/// lowtide_proto::wire::varint::put(&mut buf, 1 << 20); // total_len
/// lowtide_proto::wire::varint::put(&mut buf, 1 << 20); // len
/// let e = Frame::decode(&buf, 65_536).unwrap_err();
/// assert_eq!(e, DecodeError::FrameTooLarge { len: 1 << 20, max: 65_536 });
/// assert_eq!(e.to_string(), "frame payload of 1048576 bytes exceeds the limit of 65536");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// A varint did not end within 10 bytes or does not fit in 64 bits.
    #[error("varint longer than 64 bits")]
    VarintOverflow,
    /// The frame type is not one this version defines.
    #[error("unknown frame type {0:#x}")]
    UnknownFrameType(u64),
    /// A chunk payload is longer than the receiver allows.
    #[error("frame payload of {len} bytes exceeds the limit of {max}")]
    FrameTooLarge {
        /// Declared payload length.
        len: u64,
        /// The receiver's limit.
        max: u64,
    },
    /// A field holds a value outside its range.
    #[error("field `{field}` out of range: {value}")]
    FieldOutOfRange {
        /// Field name as in `docs/wire.md`.
        field: &'static str,
        /// Value received.
        value: u64,
    },
    /// The close reason is not UTF-8.
    #[error("close reason is not UTF-8")]
    ReasonNotUtf8,
    /// The handshake did not start with the lowtide magic. The message says when the bytes
    /// are a TLS record's header (a peer that speaks TLS on the channel, this side not).
    #[error("bad magic {0:02x?}: {speaks}", speaks = what_speaks(.0))]
    BadMagic([u8; 4]),
    /// The peer speaks a version we do not.
    #[error("unsupported protocol version {0} (we speak {VERSION})")]
    UnsupportedVersion(u8),
}

/// Whether a peer's first bytes are a TLS record's: its content type (20 to 23:
/// change_cipher_spec, alert, handshake, application_data), then the major version 3
/// (RFC 8446, section 5.1).
fn is_tls_record(first: &[u8; 4]) -> bool {
    (20..=23).contains(&first[0]) && first[1] == 3
}

impl DecodeError {
    /// A [`DecodeError::BadMagic`] whose bytes are a TLS record's header: the peer speaks TLS
    /// on a channel where this side does not.
    ///
    /// ```
    /// use lowtide_proto::wire::DecodeError;
    /// assert!(DecodeError::BadMagic([0x15, 0x03, 0x03, 0x00]).peer_speaks_tls()); // an alert
    /// assert!(!DecodeError::BadMagic(*b"GET ").peer_speaks_tls());
    /// ```
    pub fn peer_speaks_tls(&self) -> bool {
        matches!(self, DecodeError::BadMagic(m) if is_tls_record(m))
    }
}

/// Whose first bytes these are, for [`DecodeError::BadMagic`].
fn what_speaks(magic: &[u8; 4]) -> &'static str {
    if is_tls_record(magic) {
        "a TLS record: the peer speaks TLS"
    } else {
        "peer does not speak lowtide"
    }
}

/// Internal parse outcome: either "need more bytes" or a hard error.
#[derive(Debug)]
pub(crate) enum Short {
    /// The buffer ends inside a varint of the header.
    Incomplete,
    /// The header is complete; the whole item is this many bytes.
    NeedTotal(usize),
    Bad(DecodeError),
}

impl From<DecodeError> for Short {
    fn from(e: DecodeError) -> Self {
        Short::Bad(e)
    }
}

/// A cursor over received bytes.
pub(crate) struct Reader<'a> {
    pub(crate) buf: &'a [u8],
    pub(crate) pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    pub(crate) fn var(&mut self) -> Result<u64, Short> {
        match varint::get(&self.buf[self.pos..])? {
            Some((v, n)) => {
                self.pos += n;
                Ok(v)
            }
            None => Err(Short::Incomplete),
        }
    }

    pub(crate) fn var_max(&mut self, field: &'static str, max: u64) -> Result<u64, Short> {
        let v = self.var()?;
        if v > max {
            return Err(DecodeError::FieldOutOfRange { field, value: v }.into());
        }
        Ok(v)
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8], Short> {
        if self.buf.len() - self.pos < n {
            return Err(Short::NeedTotal(self.pos + n));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
}
