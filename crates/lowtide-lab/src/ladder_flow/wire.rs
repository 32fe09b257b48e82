//! The frame header and the client's report datagram (public for the fuzz checks: the
//! server reads reports from any UDP sender).

use lowtide_media::ladder::server_policy::ClientReport;

/// Frame header: send time (8), sequence number (8), rung (1).
pub const HEADER: usize = 17;
const REPORT_MAGIC: &[u8; 4] = b"LTR1";
/// A report datagram's length: the magic and five counters.
pub const REPORT_LEN: usize = 4 + 5 * 8;

/// The client's report as its datagram.
pub fn encode_report(r: &ClientReport) -> [u8; REPORT_LEN] {
    let mut b = [0u8; REPORT_LEN];
    b[..4].copy_from_slice(REPORT_MAGIC);
    let words = [
        r.frames_expected,
        r.frames_received,
        r.rebuffers,
        r.bytes,
        r.duration_us,
    ];
    for (k, w) in words.iter().enumerate() {
        b[4 + 8 * k..12 + 8 * k].copy_from_slice(&w.to_be_bytes());
    }
    b
}

/// The report in a datagram; `None` for anything else (a wrong length or magic, more frames
/// received than expected).
pub fn decode_report(b: &[u8]) -> Option<ClientReport> {
    if b.len() != REPORT_LEN || &b[..4] != REPORT_MAGIC {
        return None;
    }
    let w = |k: usize| u64::from_be_bytes(b[4 + 8 * k..12 + 8 * k].try_into().unwrap_or_default());
    let r = ClientReport {
        frames_expected: w(0),
        frames_received: w(1),
        rebuffers: w(2),
        bytes: w(3),
        duration_us: w(4),
    };
    (r.frames_received <= r.frames_expected).then_some(r)
}
