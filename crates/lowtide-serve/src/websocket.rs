//! The WebSocket protocol (RFC 6455) as far as a server that sends video needs it: the
//! handshake's accept key (§4.2.2), the header of a server frame (§5.2, unmasked), and a
//! bounded decoder of client frames.
//!
//! Written here rather than taken from `tungstenite` because the server writes each unit as
//! one frame straight from the shared unit buffer, part by part as the viewer's latency
//! controller allows (a library's write buffer would hide the bytes the controller counts),
//! and reads only small messages (reports, pings, close). The decoder refuses what a browser
//! never sends: an unmasked client frame (§5.1), reserved bits without an extension (§5.2),
//! a control frame over 125 bytes or fragmented (§5.5), a message over the caller's limit.

use base64::Engine;
use sha1::{Digest, Sha1};

/// The GUID of §1.3 that the accept key hashes with the client's key.
const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// `Sec-WebSocket-Accept` for the client's `Sec-WebSocket-Key`.
///
/// ```
/// // RFC 6455 §1.3's example.
/// assert_eq!(
///     lowtide_serve::websocket::accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
///     "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
/// );
/// ```
pub fn accept_key(client_key: &str) -> String {
    let mut h = Sha1::new();
    h.update(client_key.trim().as_bytes());
    h.update(GUID.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(h.finalize())
}

/// Frame opcodes (§5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opcode {
    Continuation = 0x0,
    Text = 0x1,
    Binary = 0x2,
    Close = 0x8,
    Ping = 0x9,
    Pong = 0xA,
}

impl Opcode {
    fn of(b: u8) -> Option<Self> {
        Some(match b {
            0x0 => Opcode::Continuation,
            0x1 => Opcode::Text,
            0x2 => Opcode::Binary,
            0x8 => Opcode::Close,
            0x9 => Opcode::Ping,
            0xA => Opcode::Pong,
            _ => return None,
        })
    }

    fn is_control(self) -> bool {
        (self as u8) & 0x8 != 0
    }
}

/// The header of an unmasked, final server frame carrying `len` bytes: up to 10 bytes,
/// returned with its length.
///
/// ```
/// use lowtide_serve::websocket::{server_frame_header, Opcode};
/// let (h, n) = server_frame_header(Opcode::Binary, 300);
/// assert_eq!(&h[..n], &[0x82, 126, 0x01, 0x2c]);
/// ```
pub fn server_frame_header(op: Opcode, len: u64) -> ([u8; 10], usize) {
    let mut h = [0u8; 10];
    h[0] = 0x80 | op as u8;
    let n = if len < 126 {
        h[1] = len as u8;
        2
    } else if len <= u64::from(u16::MAX) {
        h[1] = 126;
        h[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        4
    } else {
        h[1] = 127;
        h[2..10].copy_from_slice(&len.to_be_bytes());
        10
    };
    (h, n)
}

/// A whole server frame (for small control and text frames).
pub fn server_frame(op: Opcode, payload: &[u8]) -> Vec<u8> {
    let (h, n) = server_frame_header(op, payload.len() as u64);
    let mut out = Vec::with_capacity(n + payload.len());
    out.extend_from_slice(&h[..n]);
    out.extend_from_slice(payload);
    out
}

/// A close frame with a status code (§7.4) and a reason (cut to fit 125 bytes).
pub fn close_frame(code: u16, reason: &str) -> Vec<u8> {
    let mut p = code.to_be_bytes().to_vec();
    let mut end = reason.len().min(123);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    p.extend_from_slice(&reason.as_bytes()[..end]);
    server_frame(Opcode::Close, &p)
}

/// A WebSocket message, reassembled from its frames.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WsMessage {
    Binary(Vec<u8>),
    Text(String),
    Ping(Vec<u8>),
    Pong,
    /// The close status code, if the frame had one.
    Close(Option<u16>),
}

/// Why the client's bytes are not a WebSocket stream this server takes; the connection ends
/// with the close code [`FrameError::close_code`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    #[error("client frame not masked (RFC 6455 §5.1)")]
    Unmasked,
    #[error("server frame masked (RFC 6455 §5.1)")]
    Masked,
    #[error("reserved bits {0:#x} set without an extension")]
    ReservedBits(u8),
    #[error("unknown opcode {0:#x}")]
    UnknownOpcode(u8),
    #[error("control frame fragmented or over 125 bytes")]
    BadControlFrame,
    #[error("message of {len} bytes or more, over the limit of {limit}")]
    TooLong { len: u64, limit: usize },
    #[error("continuation frame without a message to continue")]
    StrayContinuation,
    #[error("a new message began inside a fragmented one")]
    Interleaved,
    #[error("text message is not UTF-8")]
    NotUtf8,
}

impl FrameError {
    /// The close status code for this error (§7.4.1): 1009 too big, 1007 bad UTF-8, else 1002.
    pub fn close_code(&self) -> u16 {
        match self {
            FrameError::TooLong { .. } => 1009,
            FrameError::NotUtf8 => 1007,
            _ => 1002,
        }
    }
}

/// An incremental decoder of client frames: [`Self::push`] bytes as they come, then take
/// messages with [`Self::next_message`]. Holds at most the limit of one message plus one
/// frame header of unparsed bytes.
#[derive(Debug)]
pub struct FrameReader {
    buf: Vec<u8>,
    max_message: usize,
    /// A server reads masked frames only (a client's); a client unmasked only (§5.1).
    masked: bool,
    /// A fragmented data message being reassembled: its opcode and bytes so far.
    partial: Option<(Opcode, Vec<u8>)>,
}

impl FrameReader {
    /// A server's reader of client frames, refusing messages over `max_message` bytes.
    pub fn new(max_message: usize) -> Self {
        Self {
            buf: Vec::new(),
            max_message,
            masked: true,
            partial: None,
        }
    }

    /// A client's reader of server frames (unmasked).
    pub fn of_server(max_message: usize) -> Self {
        Self {
            masked: false,
            ..Self::new(max_message)
        }
    }

    /// Bytes the reader still accepts before a message must be complete; read at most this
    /// much from the socket (a client cannot make the reader hold more).
    pub fn room(&self) -> usize {
        (self.max_message + 14)
            .saturating_sub(self.buf.len())
            .max(1)
    }

    /// Bytes pushed and not yet parsed into a frame (at most the limit plus 14, the
    /// longest frame header, when the caller reads at most [`Self::room`] each time and takes
    /// every message before the next read).
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Adds bytes read from the client.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete message, `Ok(None)` when more bytes are needed.
    pub fn next_message(&mut self) -> Result<Option<WsMessage>, FrameError> {
        loop {
            let Some(Frame {
                fin,
                op,
                payload,
                used,
            }) = self.frame()?
            else {
                return Ok(None);
            };
            self.buf.drain(..used);
            if op.is_control() {
                return Ok(Some(match op {
                    Opcode::Ping => WsMessage::Ping(payload),
                    Opcode::Pong => WsMessage::Pong,
                    _ => WsMessage::Close(
                        (payload.len() >= 2).then(|| u16::from_be_bytes([payload[0], payload[1]])),
                    ),
                }));
            }
            let (op, data) = match (op, self.partial.take()) {
                (Opcode::Continuation, Some((first, mut so_far))) => {
                    so_far.extend_from_slice(&payload);
                    (first, so_far)
                }
                (Opcode::Continuation, None) => return Err(FrameError::StrayContinuation),
                (_, Some(_)) => return Err(FrameError::Interleaved),
                (op, None) => (op, payload),
            };
            if data.len() > self.max_message {
                return Err(FrameError::TooLong {
                    len: data.len() as u64,
                    limit: self.max_message,
                });
            }
            if !fin {
                self.partial = Some((op, data));
                continue;
            }
            return Ok(Some(match op {
                Opcode::Text => {
                    WsMessage::Text(String::from_utf8(data).map_err(|_| FrameError::NotUtf8)?)
                }
                _ => WsMessage::Binary(data),
            }));
        }
    }

    /// Parses one frame at the front of the buffer.
    fn frame(&self) -> Result<Option<Frame>, FrameError> {
        let b = &self.buf;
        if b.len() < 2 {
            return Ok(None);
        }
        let fin = b[0] & 0x80 != 0;
        let rsv = b[0] & 0x70;
        if rsv != 0 {
            return Err(FrameError::ReservedBits(rsv >> 4));
        }
        let op = Opcode::of(b[0] & 0x0f).ok_or(FrameError::UnknownOpcode(b[0] & 0x0f))?;
        if (b[1] & 0x80 != 0) != self.masked {
            return Err(if self.masked {
                FrameError::Unmasked
            } else {
                FrameError::Masked
            });
        }
        let (len, at) = match b[1] & 0x7f {
            126 => {
                if b.len() < 4 {
                    return Ok(None);
                }
                (u64::from(u16::from_be_bytes([b[2], b[3]])), 4)
            }
            127 => {
                if b.len() < 10 {
                    return Ok(None);
                }
                let mut a = [0u8; 8];
                a.copy_from_slice(&b[2..10]);
                (u64::from_be_bytes(a), 10)
            }
            n => (u64::from(n), 2),
        };
        if op.is_control() && (!fin || len > 125) {
            return Err(FrameError::BadControlFrame);
        }
        // A control frame between a message's fragments (§5.4) is not part of the message.
        let so_far = match &self.partial {
            Some((_, d)) if !op.is_control() => d.len() as u64,
            _ => 0,
        };
        if len.saturating_add(so_far) > self.max_message as u64 {
            return Err(FrameError::TooLong {
                len: len.saturating_add(so_far),
                limit: self.max_message,
            });
        }
        let len = len as usize;
        let key = if self.masked { 4 } else { 0 };
        let end = at + key + len;
        if b.len() < end {
            return Ok(None);
        }
        let payload = if self.masked {
            let mask = [b[at], b[at + 1], b[at + 2], b[at + 3]];
            b[at + 4..end]
                .iter()
                .enumerate()
                .map(|(i, x)| x ^ mask[i % 4])
                .collect()
        } else {
            b[at..end].to_vec()
        };
        Ok(Some(Frame {
            fin,
            op,
            payload,
            used: end,
        }))
    }
}

/// One frame: final or not, its opcode, its unmasked payload and the bytes it took.
struct Frame {
    fin: bool,
    op: Opcode,
    payload: Vec<u8>,
    used: usize,
}

/// A masked client frame (what a browser sends), for tests and the Rust viewer.
pub fn client_frame(op: Opcode, fin: bool, payload: &[u8], mask: [u8; 4]) -> Vec<u8> {
    let (mut h, n) = server_frame_header(op, payload.len() as u64);
    if !fin {
        h[0] &= 0x7f;
    }
    h[1] |= 0x80;
    let mut out = h[..n].to_vec();
    out.extend_from_slice(&mask);
    out.extend(payload.iter().enumerate().map(|(i, x)| x ^ mask[i % 4]));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const M: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

    #[test]
    fn rfc_6455_masked_hello_decodes() {
        // §5.7: a single-frame masked text message "Hello".
        let mut r = FrameReader::new(1024);
        r.push(&[
            0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58,
        ]);
        assert_eq!(r.next_message(), Ok(Some(WsMessage::Text("Hello".into()))));
        assert_eq!(r.next_message(), Ok(None));
    }

    #[test]
    fn fragments_reassemble_around_a_ping() {
        let mut r = FrameReader::new(1024);
        let mut bytes = client_frame(Opcode::Binary, false, b"ab", M);
        bytes.extend(client_frame(Opcode::Ping, true, b"p", M));
        bytes.extend(client_frame(Opcode::Continuation, true, b"cd", M));
        // One byte at a time: every split point of the stream.
        let mut got = Vec::new();
        for b in bytes {
            r.push(&[b]);
            while let Some(m) = r.next_message().unwrap() {
                got.push(m);
            }
        }
        assert_eq!(
            got,
            [
                WsMessage::Ping(b"p".to_vec()),
                WsMessage::Binary(b"abcd".to_vec())
            ]
        );
    }

    #[test]
    fn what_a_browser_never_sends_is_refused() {
        let cases: [(Vec<u8>, FrameError); 6] = [
            (vec![0x82, 0x01, 0x00], FrameError::Unmasked),
            (vec![0xc2, 0x80, 0, 0, 0, 0], FrameError::ReservedBits(4)),
            (vec![0x83, 0x80, 0, 0, 0, 0], FrameError::UnknownOpcode(3)),
            (
                client_frame(Opcode::Ping, false, b"", M),
                FrameError::BadControlFrame,
            ),
            (
                client_frame(Opcode::Continuation, true, b"x", M),
                FrameError::StrayContinuation,
            ),
            (
                client_frame(Opcode::Text, true, &[0xff], M),
                FrameError::NotUtf8,
            ),
        ];
        for (bytes, want) in cases {
            let mut r = FrameReader::new(64);
            r.push(&bytes);
            assert_eq!(r.next_message(), Err(want));
        }
    }

    #[test]
    fn a_message_over_the_limit_is_refused_from_its_header() {
        let mut r = FrameReader::new(100);
        // The header alone claims 2^40 bytes: refused before any payload is held.
        let mut h = vec![0x82, 0xff];
        h.extend_from_slice(&(1u64 << 40).to_be_bytes());
        r.push(&h);
        assert!(matches!(r.next_message(), Err(FrameError::TooLong { .. })));
        // Fragments that add up past the limit.
        let mut r = FrameReader::new(100);
        r.push(&client_frame(Opcode::Binary, false, &[0; 60], M));
        r.push(&client_frame(Opcode::Continuation, true, &[0; 60], M));
        assert!(matches!(r.next_message(), Err(FrameError::TooLong { .. })));
        assert_eq!(FrameError::TooLong { len: 0, limit: 0 }.close_code(), 1009);
    }

    #[test]
    fn a_ping_inside_a_fragmented_message_does_not_count_against_its_limit() {
        // §5.4: control frames may come between a message's fragments; their payload is not
        // part of the message.
        let mut r = FrameReader::new(64);
        r.push(&client_frame(Opcode::Binary, false, &[1; 60], M));
        r.push(&client_frame(Opcode::Ping, true, &[2; 10], M));
        r.push(&client_frame(Opcode::Continuation, true, &[3; 4], M));
        assert_eq!(r.next_message(), Ok(Some(WsMessage::Ping(vec![2; 10]))));
        let mut want = vec![1; 60];
        want.extend_from_slice(&[3; 4]);
        assert_eq!(r.next_message(), Ok(Some(WsMessage::Binary(want))));
        assert_eq!(r.next_message(), Ok(None));
    }

    #[test]
    fn server_headers_use_the_shortest_length_form() {
        assert_eq!(server_frame_header(Opcode::Binary, 125).1, 2);
        assert_eq!(server_frame_header(Opcode::Binary, 126).1, 4);
        assert_eq!(server_frame_header(Opcode::Binary, 65_535).1, 4);
        let (h, n) = server_frame_header(Opcode::Binary, 65_536);
        assert_eq!((n, h[1]), (10, 127));
        assert_eq!(&h[2..10], &65_536u64.to_be_bytes());
        let c = close_frame(1000, &"é".repeat(100));
        assert!(c.len() <= 2 + 125);
        assert!(std::str::from_utf8(&c[4..]).is_ok());
    }

    #[test]
    fn a_client_reads_unmasked_server_frames_and_refuses_masked_ones() {
        let mut r = FrameReader::of_server(100_000);
        r.push(&server_frame(Opcode::Binary, &[7; 70_000]));
        assert_eq!(
            r.next_message(),
            Ok(Some(WsMessage::Binary(vec![7; 70_000])))
        );
        r.push(&client_frame(Opcode::Binary, true, b"x", M));
        assert_eq!(r.next_message(), Err(FrameError::Masked));
    }

    proptest! {
        #[test]
        fn any_bytes_give_messages_or_an_error_within_the_limit(
            chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..20)
        ) {
            let mut r = FrameReader::new(64);
            'outer: for c in chunks {
                r.push(&c);
                loop {
                    match r.next_message() {
                        Ok(Some(WsMessage::Binary(b))) => prop_assert!(b.len() <= 64),
                        Ok(Some(WsMessage::Text(t))) => prop_assert!(t.len() <= 64),
                        Ok(Some(_)) => {}
                        Ok(None) => break,
                        Err(_) => break 'outer,
                    }
                }
            }
        }

        #[test]
        fn client_frames_round_trip(payload in proptest::collection::vec(any::<u8>(), 0..70_000), mask in any::<[u8; 4]>()) {
            let mut r = FrameReader::new(70_000);
            r.push(&client_frame(Opcode::Binary, true, &payload, mask));
            prop_assert_eq!(r.next_message(), Ok(Some(WsMessage::Binary(payload))));
        }
    }
}
