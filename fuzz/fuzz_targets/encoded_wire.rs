//! Feeds arbitrary bytes to the encoded-video message decoder (lowtide-media's
//! `encoded::wire`) and, split into messages, to the receiver behind a valid start message:
//! nothing may panic, a unit that decodes re-encodes to the same bytes, and the receiver
//! holds no more out-of-order bytes than its limit plus one unit.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use lowtide_media::encoded::receiver::EncodedReceiver;
use lowtide_media::encoded::wire::{decode, encode_start, encode_unit, StreamStart, WireMessage};
use lowtide_media::encoded::Codec;

const MAX_HELD: usize = 4096;

fuzz_target!(|data: &[u8]| {
    if let Ok(WireMessage::Unit(h, payload)) = decode(data) {
        assert_eq!(encode_unit(&h, payload), data);
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
});
