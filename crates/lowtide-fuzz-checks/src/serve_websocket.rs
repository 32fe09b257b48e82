//! Feeds arbitrary bytes, cut at arbitrary chunk boundaries, to `lowtide serve`'s WebSocket
//! frame reader (client frames, masked, as the server reads them; or server frames,
//! unmasked, as `lowtide watch` reads them). The caller is modelled as the connection does
//! it: read at most `room()` bytes, push, take every message. Nothing may panic; every
//! message is within the limit (a ping's payload within 125 bytes); the reader's unparsed
//! bytes never exceed the limit plus 14; and the chunking changes nothing: the same messages
//! and the same error as pushing all the bytes at once. Then the same bytes as what a browser
//! sends (binary messages in two fragments with a ping between them) read back exactly, or
//! end in "too long" where a message is over the limit.

use arbitrary::{self, Arbitrary, Unstructured};
use lowtide_serve::websocket::{client_frame, FrameError, FrameReader, Opcode, WsMessage};

#[derive(Debug)]
struct Input {
    limit: usize,
    of_server: bool,
    /// Read sizes, used in turn.
    chunks: Vec<usize>,
    bytes: Vec<u8>,
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let flags = u8::arbitrary(u)?;
        let limit = usize::from(u16::from_be_bytes(u.arbitrary()?) % 1024);
        let n = usize::from(u8::arbitrary(u)? % 16);
        let chunks = (0..n)
            .map(|_| u8::arbitrary(u).map(usize::from))
            .collect::<arbitrary::Result<_>>()?;
        Ok(Input {
            limit,
            of_server: flags & 1 != 0,
            chunks,
            bytes: u.bytes(u.len())?.to_vec(),
        })
    }
}

fn reader(input: &Input) -> FrameReader {
    if input.of_server {
        FrameReader::of_server(input.limit)
    } else {
        FrameReader::new(input.limit)
    }
}

/// Takes every complete message; `Err` ends the stream.
fn drain(r: &mut FrameReader, limit: usize, out: &mut Vec<WsMessage>) -> Result<(), FrameError> {
    while let Some(m) = r.next_message()? {
        match &m {
            WsMessage::Binary(b) => assert!(b.len() <= limit),
            WsMessage::Text(t) => assert!(t.len() <= limit),
            WsMessage::Ping(p) => assert!(p.len() <= 125.min(limit)),
            WsMessage::Pong | WsMessage::Close(_) => {}
        }
        out.push(m);
    }
    Ok(())
}

/// Pushes `bytes` as the connection reads them: at most `room()` bytes a read, the read
/// sizes taken in turn from `chunks`, every message taken after each read; stops at an error.
fn read_chunked(
    r: &mut FrameReader,
    limit: usize,
    chunks: &[usize],
    bytes: &[u8],
) -> (Vec<WsMessage>, Result<(), FrameError>) {
    let mut got = Vec::new();
    let mut rest = bytes;
    let mut sizes = chunks.iter().cycle();
    while !rest.is_empty() {
        // A read gives at least a byte; no sizes: whatever the room allows.
        let size = sizes.next().map_or(rest.len(), |&c| c.max(1));
        let n = size.min(r.room()).min(rest.len());
        r.push(&rest[..n]);
        rest = &rest[n..];
        assert!(
            r.buffered() <= limit + 14,
            "{} bytes unparsed, limit {limit}",
            r.buffered()
        );
        if let Err(e) = drain(r, limit, &mut got) {
            return (got, Err(e));
        }
    }
    (got, Ok(()))
}

pub fn check(data: &[u8]) {
    // As libfuzzer-sys reads a typed input: all of the bytes, or nothing.
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    // All at once.
    let mut whole = reader(&input);
    whole.push(&input.bytes);
    let mut want = Vec::new();
    let want_end = drain(&mut whole, input.limit, &mut want);

    // As the connection reads.
    let (got, end) = read_chunked(
        &mut reader(&input),
        input.limit,
        &input.chunks,
        &input.bytes,
    );
    assert_eq!(got, want);
    assert_eq!(end, want_end);

    // What a browser sends: the bytes cut into binary messages (lengths from the read sizes),
    // each in two fragments with a ping between them (RFC 6455 §5.4). Each message arrives
    // whole, after its ping, unless over the limit.
    let mask = [0x37, 0xfa, 0x21, 0x3d];
    let mut stream = Vec::new();
    let mut want = Vec::new();
    let mut want_end = Ok(());
    let mut rest = &input.bytes[..];
    let mut lens = input.chunks.iter().cycle();
    while !rest.is_empty() {
        let n = lens
            .next()
            .map_or(rest.len(), |&c| c.max(1))
            .min(rest.len());
        let (msg, tail) = rest.split_at(n);
        rest = tail;
        let (a, b) = msg.split_at(msg.len() / 2);
        let ping = &msg[..msg.len().min(125).min(input.limit)];
        stream.extend(client_frame(Opcode::Binary, false, a, mask));
        stream.extend(client_frame(Opcode::Ping, true, ping, mask));
        stream.extend(client_frame(Opcode::Continuation, true, b, mask));
        let too_long = |len: usize| FrameError::TooLong {
            len: len as u64,
            limit: input.limit,
        };
        if a.len() > input.limit {
            want_end = Err(too_long(a.len()));
            break;
        }
        want.push(WsMessage::Ping(ping.to_vec()));
        if msg.len() > input.limit {
            want_end = Err(too_long(msg.len()));
            break;
        }
        want.push(WsMessage::Binary(msg.to_vec()));
    }
    let (got, end) = read_chunked(
        &mut FrameReader::new(input.limit),
        input.limit,
        &input.chunks,
        &stream,
    );
    assert_eq!(got, want);
    assert_eq!(end, want_end);
}
