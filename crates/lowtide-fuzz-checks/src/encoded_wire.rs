//! Feeds arbitrary bytes to the encoded-video message decoder (lowtide-media's
//! `encoded::wire`) and, split into messages, to the receiver behind a valid start message:
//! nothing may panic, a unit that decodes re-encodes to the same bytes, and the receiver
//! holds no more out-of-order bytes than its limit plus one unit. A publish message that
//! decodes names a valid stream path (`check_stream_path`: 1 to 255 bytes of
//! `[A-Za-z0-9._-/]`, no leading `/`, no empty, `.` or `..` segment) and re-encodes
//! (`encode_publish`) to the bytes it was read from; a pull message likewise (`encode_pull`).

use std::time::{Duration, Instant};

use lowtide_media::encoded::receiver::EncodedReceiver;
use lowtide_media::encoded::wire::{
    check_stream_path, decode, encode_publish, encode_pull, encode_start, encode_unit, StreamStart,
    WireMessage, TAG_PUBLISH,
};
use lowtide_media::encoded::Codec;

const MAX_HELD: usize = 4096;

pub fn check(data: &[u8]) {
    match decode(data) {
        Ok(WireMessage::Unit(h, payload)) => assert_eq!(encode_unit(&h, payload), data),
        Ok(WireMessage::Publish { path, token }) => {
            assert!(check_stream_path(path).is_ok(), "{path:?}");
            // The rule itself, as a path reaches URLs and file names.
            assert!((1..=255).contains(&path.len()));
            assert!(path
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-/".contains(&b)));
            assert!(path
                .split('/')
                .all(|seg| !seg.is_empty() && seg != "." && seg != ".."));
            let m = encode_publish(path, token).expect("a decoded publish re-encodes");
            // Bytes after the token are not read: the message is the front of the input.
            assert_eq!(&data[..m.len()], &m[..]);
            assert_eq!(decode(&m), Ok(WireMessage::Publish { path, token }));
        }
        Ok(WireMessage::Pull { path, token }) => {
            assert!(check_stream_path(path).is_ok(), "{path:?}");
            let m = encode_pull(path, token).expect("a decoded pull re-encodes");
            assert_eq!(&data[..m.len()], &m[..]);
        }
        _ => {}
    }
    // The input as a stream path: one that passes the check publishes and reads back.
    if let Ok(path) = std::str::from_utf8(data) {
        if check_stream_path(path).is_ok() {
            assert!(!path.starts_with('/') && !path.ends_with('/') && !path.contains("//"));
            let m = encode_publish(path, "t").expect("a valid path publishes");
            assert_eq!(m[0], TAG_PUBLISH);
            assert_eq!(decode(&m), Ok(WireMessage::Publish { path, token: "t" }));
        }
    }
    let now = Instant::now();
    let mut r = EncodedReceiver::new(MAX_HELD, Duration::from_millis(100));
    let start = StreamStart {
        codec: Codec::H264,
        ivf: None,
    };
    r.handle(now, &encode_start(&start)).expect("a valid start");
    // The first byte of each message is its length.
    let mut rest = data;
    while let Some((&len, tail)) = rest.split_first() {
        let (msg, tail) = tail.split_at(usize::from(len).min(tail.len()));
        if r.handle(now, msg).is_err() {
            break;
        }
        assert!(r.held_bytes() <= MAX_HELD + 256);
        let _ = r.take_output();
        let _ = r.poll_keyframe_request(now);
        rest = tail;
    }
    r.finish(now);
    assert_eq!(r.held_bytes(), 0);
}
