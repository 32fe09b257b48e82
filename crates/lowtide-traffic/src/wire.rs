//! The few bytes clients and sinks agree on.
//!
//! A TCP flow starts with a fixed 32-byte request so that one sink serves uploads and downloads
//! and can apply the client's congestion control to data it sends:
//!
//! ```text
//! 0..4   magic "LTT1"
//! 4      mode: 'U' upload (client sends until it closes) | 'D' download (sink sends)
//! 5      length of the congestion-control name (0: the sink's own setting)
//! 6..8   zero
//! 8..16  download size in bytes, big-endian u64 (0: until the client closes)
//! 16..32 congestion-control name, zero padded
//! ```
//!
//! A download answer starts with one status byte ([`STATUS_OK`] or [`STATUS_CC_REFUSED`]) so a
//! refused algorithm is an error at the client, not an empty transfer. Upload data follows the
//! request directly; the sink closes after the client's FIN, which tells the client (a mouse)
//! that all its bytes were read.
//!
//! A CBR datagram starts with `"LTU1"`, the flow id (u64) and a sequence number (u64), all
//! big-endian, so one UDP sink separates flows and counts loss.

use crate::congestion::MAX_NAME_LEN;
use crate::Direction;

/// Size of the TCP request.
pub const REQUEST_LEN: usize = 32;
/// Magic of the TCP request.
pub const REQUEST_MAGIC: [u8; 4] = *b"LTT1";
/// Download status: the sink will send.
pub const STATUS_OK: u8 = 0;
/// Download status: the sink could not set the requested congestion control.
pub const STATUS_CC_REFUSED: u8 = 1;
/// Magic of a CBR datagram.
pub const DATAGRAM_MAGIC: [u8; 4] = *b"LTU1";
/// Bytes of a CBR datagram taken by the header; the smallest allowed packet size.
pub const DATAGRAM_HEADER_LEN: usize = 20;

/// What a TCP client asks of the sink.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Who sends.
    pub direction: Direction,
    /// For downloads: bytes to send, 0 for "until the client closes".
    pub download_bytes: u64,
    /// Congestion control for the sink's side of the connection (only used by downloads).
    pub congestion_control: Option<String>,
}

impl Request {
    /// Encode; a congestion-control name longer than [`MAX_NAME_LEN`] is the caller's bug and
    /// is checked before (see [`crate::congestion::check_name`]).
    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let mut b = [0u8; REQUEST_LEN];
        b[..4].copy_from_slice(&REQUEST_MAGIC);
        b[4] = match self.direction {
            Direction::Upload => b'U',
            Direction::Download => b'D',
        };
        if let Some(cc) = &self.congestion_control {
            let n = cc.len().min(MAX_NAME_LEN);
            b[5] = n as u8;
            b[16..16 + n].copy_from_slice(&cc.as_bytes()[..n]);
        }
        b[8..16].copy_from_slice(&self.download_bytes.to_be_bytes());
        b
    }

    /// Decode, or say what is wrong.
    pub fn decode(b: &[u8; REQUEST_LEN]) -> Result<Self, String> {
        if b[..4] != REQUEST_MAGIC {
            return Err(format!("bad request magic {:02x?}", &b[..4]));
        }
        let direction = match b[4] {
            b'U' => Direction::Upload,
            b'D' => Direction::Download,
            m => return Err(format!("bad request mode {m:#04x}")),
        };
        let n = b[5] as usize;
        if n > MAX_NAME_LEN {
            return Err(format!(
                "congestion-control name length {n} > {MAX_NAME_LEN}"
            ));
        }
        let congestion_control = if n == 0 {
            None
        } else {
            let name = std::str::from_utf8(&b[16..16 + n])
                .map_err(|_| "congestion-control name is not UTF-8".to_owned())?;
            Some(name.to_owned())
        };
        let mut size = [0u8; 8];
        size.copy_from_slice(&b[8..16]);
        Ok(Self {
            direction,
            download_bytes: u64::from_be_bytes(size),
            congestion_control,
        })
    }
}

/// Write a CBR header into the start of `buf` (at least [`DATAGRAM_HEADER_LEN`] bytes).
pub fn encode_datagram(buf: &mut [u8], flow_id: u64, seq: u64) {
    buf[..4].copy_from_slice(&DATAGRAM_MAGIC);
    buf[4..12].copy_from_slice(&flow_id.to_be_bytes());
    buf[12..20].copy_from_slice(&seq.to_be_bytes());
}

/// Read a CBR header: `(flow_id, seq)`, or None if this is not one of ours.
pub fn decode_datagram(buf: &[u8]) -> Option<(u64, u64)> {
    if buf.len() < DATAGRAM_HEADER_LEN || buf[..4] != DATAGRAM_MAGIC {
        return None;
    }
    let mut id = [0u8; 8];
    let mut seq = [0u8; 8];
    id.copy_from_slice(&buf[4..12]);
    seq.copy_from_slice(&buf[12..20]);
    Some((u64::from_be_bytes(id), u64::from_be_bytes(seq)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trip() {
        let r = Request {
            direction: Direction::Download,
            download_bytes: 123_456,
            congestion_control: Some("cubic".into()),
        };
        assert_eq!(Request::decode(&r.encode()).unwrap(), r);
        let u = Request {
            direction: Direction::Upload,
            download_bytes: 0,
            congestion_control: None,
        };
        assert_eq!(Request::decode(&u.encode()).unwrap(), u);
        let mut bad = u.encode();
        bad[0] = b'X';
        assert!(Request::decode(&bad).unwrap_err().contains("magic"));
    }

    #[test]
    fn datagram_round_trip() {
        let mut b = [0u8; 64];
        encode_datagram(&mut b, 7, 42);
        assert_eq!(decode_datagram(&b), Some((7, 42)));
        assert_eq!(decode_datagram(&b[..10]), None);
        assert_eq!(decode_datagram(&[0u8; 64]), None);
    }
}
