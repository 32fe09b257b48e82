//! Feeds arbitrary bytes to the in-band stamp (lowtide-media's `encoded::stamp`, which
//! `lowtidestamp` and `lowtidemeter` run on every buffer): reading never panics, and a unit
//! the stamper takes reads back with the very stamp it was given.

use lowtide_media::encoded::{stamp, Codec};

pub fn check(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let codec = match pick % 3 {
        0 => Codec::H264,
        1 => Codec::H265,
        _ => Codec::Av1,
    };
    let capture_us = u64::from(pick) << 32 | rest.len() as u64;
    let _ = stamp::read_unit_bytes(codec, rest);
    if let Ok(Some(stamped)) = stamp::stamp_unit_bytes(codec, rest, capture_us) {
        assert_eq!(
            stamp::read_unit_bytes(codec, &stamped).ok().flatten(),
            Some(capture_us),
            "a stamped unit reads back its stamp"
        );
    }
}
