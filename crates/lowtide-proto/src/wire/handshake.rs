//! The handshake: each side sends one `Hello` first, then frames.

use super::{varint, DecodeError, Reader, Short};

/// First four bytes on the wire.
pub const MAGIC: [u8; 4] = *b"LWTD";
/// The version this code speaks.
pub const VERSION: u8 = 1;
/// The most options a hello may carry (bounds parsing work).
pub const MAX_HELLO_OPTIONS: u64 = 32;

/// An option announced in the handshake. Unknown keys are skipped by the receiver.
///
/// ```
/// use lowtide_proto::wire::{Hello, HelloOption, VERSION};
/// let hello = Hello {
///     version: VERSION,
///     options: vec![HelloOption::MaxStreams(8), HelloOption::Unknown(99, 7)],
/// };
/// let mut buf = Vec::new();
/// hello.encode(&mut buf);
/// let (back, _) = Hello::decode(&buf)?.expect("complete");
/// assert_eq!(back.options[1], HelloOption::Unknown(99, 7)); // kept, and ignored by a Connection
/// # Ok::<(), lowtide_proto::wire::DecodeError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HelloOption {
    /// Largest message (bytes) the sender of the hello accepts (key 1).
    MaxMessageSize(u64),
    /// Largest chunk payload (bytes) the sender of the hello accepts (key 2).
    MaxChunkLen(u64),
    /// Most concurrent streams the sender of the hello accepts from its peer (key 3).
    MaxStreams(u64),
    /// The sender of the hello answers packet-pair PROBE frames with PROBE_REPORT (key 6,
    /// value 1); a peer must not send PROBE to one that did not announce it.
    AnswersProbes(u64),
    /// The channel this connection belongs to (key 4, failover): a random nonzero token the
    /// connecting side chose for the channel, in the hello of its primary and of every backup.
    ChannelToken(u64),
    /// The connection's ordinal within its channel (key 5, failover): absent on the primary,
    /// 1, 2, ... on the backups the connecting side opens; the accepting side echoes it.
    Path(u64),
    /// An option this version does not know: key, value.
    Unknown(u64, u64),
}

impl HelloOption {
    fn key_value(self) -> (u64, u64) {
        match self {
            HelloOption::MaxMessageSize(v) => (1, v),
            HelloOption::MaxChunkLen(v) => (2, v),
            HelloOption::MaxStreams(v) => (3, v),
            HelloOption::AnswersProbes(v) => (6, v),
            HelloOption::ChannelToken(v) => (4, v),
            HelloOption::Path(v) => (5, v),
            HelloOption::Unknown(k, v) => (k, v),
        }
    }
    fn from_key_value(k: u64, v: u64) -> Self {
        match k {
            1 => HelloOption::MaxMessageSize(v),
            2 => HelloOption::MaxChunkLen(v),
            3 => HelloOption::MaxStreams(v),
            6 => HelloOption::AnswersProbes(v),
            4 => HelloOption::ChannelToken(v),
            5 => HelloOption::Path(v),
            _ => HelloOption::Unknown(k, v),
        }
    }
}

/// The handshake message: magic, version, options.
///
/// ```
/// use lowtide_proto::wire::{DecodeError, Hello, HelloOption, MAGIC, VERSION};
/// let mut buf = Vec::new();
/// Hello { version: VERSION, options: vec![HelloOption::MaxMessageSize(1 << 20)] }.encode(&mut buf);
/// assert_eq!(buf[..4], MAGIC);
/// let (hello, used) = Hello::decode(&buf)?.expect("complete");
/// assert_eq!((hello.version, used), (VERSION, buf.len()));
/// assert_eq!(Hello::decode(b"SSH-2.0-"), Err(DecodeError::BadMagic(*b"SSH-")));
/// # Ok::<(), DecodeError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// Protocol version.
    pub version: u8,
    /// Announced options.
    pub options: Vec<HelloOption>,
}

impl Hello {
    /// Appends the encoding to `out`.
    ///
    /// ```
    /// use lowtide_proto::wire::{Hello, HelloOption, MAGIC, VERSION};
    /// let mut out = Vec::new();
    /// Hello { version: VERSION, options: vec![HelloOption::MaxStreams(8)] }.encode(&mut out);
    /// // magic, version, one option: key 3, value 8 (one varint byte each).
    /// assert_eq!(out, [&MAGIC[..], &[VERSION, 1, 3, 8]].concat());
    /// ```
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&MAGIC);
        out.push(self.version);
        varint::put(out, self.options.len() as u64);
        for o in &self.options {
            let (k, v) = o.key_value();
            varint::put(out, k);
            varint::put(out, v);
        }
    }

    /// Parses a hello from the front of `buf`: `Ok(None)` if more bytes are needed.
    ///
    /// ```
    /// use lowtide_proto::wire::{DecodeError, Hello, HelloOption, VERSION};
    /// let mut buf = Vec::new();
    /// Hello { version: VERSION, options: vec![HelloOption::Unknown(99, 1)] }.encode(&mut buf);
    /// assert_eq!(Hello::decode(&buf[..5])?, None); // more bytes needed
    /// let (hello, used) = Hello::decode(&buf)?.expect("complete");
    /// assert_eq!((hello.options, used), (vec![HelloOption::Unknown(99, 1)], buf.len())); // kept, not refused
    /// # Ok::<(), DecodeError>(())
    /// ```
    pub fn decode(buf: &[u8]) -> Result<Option<(Hello, usize)>, DecodeError> {
        match Self::decode_inner(buf) {
            Ok(v) => Ok(Some(v)),
            Err(Short::Incomplete | Short::NeedTotal(_)) => Ok(None),
            Err(Short::Bad(e)) => Err(e),
        }
    }

    fn decode_inner(buf: &[u8]) -> Result<(Hello, usize), Short> {
        let mut r = Reader::new(buf);
        let magic = r.bytes(4)?;
        if magic != MAGIC {
            let mut m = [0u8; 4];
            m.copy_from_slice(magic);
            return Err(DecodeError::BadMagic(m).into());
        }
        let version = r.bytes(1)?[0];
        if version != VERSION {
            return Err(DecodeError::UnsupportedVersion(version).into());
        }
        let n = r.var_max("hello.option_count", MAX_HELLO_OPTIONS)?;
        let mut options = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let k = r.var()?;
            let v = r.var()?;
            options.push(HelloOption::from_key_value(k, v));
        }
        Ok((Hello { version, options }, r.pos))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trip_and_rejections() {
        let h = Hello {
            version: VERSION,
            options: vec![
                HelloOption::MaxMessageSize(1 << 20),
                HelloOption::MaxChunkLen(65536),
                HelloOption::Unknown(99, 7),
                HelloOption::ChannelToken(u64::MAX),
                HelloOption::Path(3),
            ],
        };
        let mut out = Vec::new();
        h.encode(&mut out);
        assert_eq!(Hello::decode(&out).unwrap(), Some((h, out.len())));
        assert_eq!(Hello::decode(&out[..5]).unwrap(), None);
        assert_eq!(
            Hello::decode(b"HTTP/1.1"),
            Err(DecodeError::BadMagic(*b"HTTP"))
        );
        // A TLS alert record (a TLS server's answer to our hello) is named as TLS.
        let tls = Hello::decode(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x32]).unwrap_err();
        assert_eq!(
            tls.to_string(),
            "bad magic [15, 03, 03, 00]: a TLS record: the peer speaks TLS"
        );
        assert!(DecodeError::BadMagic(*b"HTTP")
            .to_string()
            .ends_with("peer does not speak lowtide"));
        assert_eq!(
            Hello::decode(b"LWTD\x09\x00"),
            Err(DecodeError::UnsupportedVersion(9))
        );
        assert!(matches!(
            Hello::decode(b"LWTD\x01\x7f"),
            Err(DecodeError::FieldOutOfRange { .. })
        ));
    }
}
