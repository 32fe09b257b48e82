//! Feeds arbitrary bytes, in chunks of a fuzzer-chosen size, to the Annex-B splitter and the
//! H.264 and H.265 access-unit framers (lowtide-media's encoded model). None may panic, and
//! the splitter may hold no more than its NAL limit.

use std::time::Instant;

use lowtide_media::encoded::{AnnexBReader, AnnexBSplitter, H264Framer, H265Framer};

const MAX_NAL: usize = 4096;

pub fn check(data: &[u8]) {
    let Some((&chunk, data)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(chunk).max(1);
    let now = Instant::now();
    let mut splitter = AnnexBSplitter::new(MAX_NAL);
    let mut h264 = AnnexBReader::new(H264Framer::new(4 * MAX_NAL), MAX_NAL);
    let mut h265 = AnnexBReader::new(H265Framer::new(4 * MAX_NAL), MAX_NAL);
    for c in data.chunks(chunk) {
        if let Ok(nals) = splitter.push(c) {
            assert!(nals.iter().all(|n| !n.is_empty() && n.len() <= MAX_NAL));
        }
        assert!(splitter.buffered() <= MAX_NAL);
        let _ = h264.push(c, now);
        let _ = h265.push(c, now);
    }
    let _ = splitter.finish();
    let _ = h264.finish();
    let _ = h265.finish();
}
