//! Feeds arbitrary bytes, in chunks of a fuzzer-chosen size, to the IVF framer (lowtide-media's
//! encoded model): as they are, and behind a valid file header of each codec so the VP8, VP9
//! and AV1 frame classification is reached. Nothing may panic; the reader holds at most one
//! frame under its limit.

use std::time::Instant;

use lowtide_media::encoded::{Codec, IvfFramer, IvfHeader};

const MAX_FRAME: usize = 4096;

pub fn check(data: &[u8]) {
    let Some((&chunk, data)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(chunk).max(1);
    let now = Instant::now();
    let mut inputs = vec![data.to_vec()];
    for codec in [Codec::Vp8, Codec::Vp9, Codec::Av1] {
        let h = IvfHeader {
            codec,
            width: 64,
            height: 64,
            timebase_rate: 30,
            timebase_scale: 1,
            frame_count: 0,
        };
        inputs.push([&h.to_bytes()[..], data].concat());
    }
    for input in inputs {
        let mut ivf = IvfFramer::new(MAX_FRAME);
        for c in input.chunks(chunk) {
            match ivf.push(c, now) {
                Ok(units) => assert!(units.iter().all(|u| u.data.len() <= MAX_FRAME)),
                Err(_) => break,
            }
        }
        let _ = ivf.finish();
    }
}
