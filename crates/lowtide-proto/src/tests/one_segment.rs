//! Messages sized by [`Connection::one_segment_payload`] fill exactly one segment each, across
//! the moments the header's varints grow (sequence numbers 128 and 16384, send times 2^21 µs),
//! while a message of a whole MSS spills its header into a second segment.

use std::time::{Duration, Instant};

use super::limits::hello;
use crate::{Config, Connection, Message, Side, StreamConfig, TcpState};

fn kernel(mss: u32) -> TcpState {
    TcpState {
        cwnd: 100,
        mss,
        ..TcpState::default()
    }
}

/// A client with one stream whose STREAM_OPEN, and the P-ACK of the server's hello, are
/// written already (no other control frame follows: the server sends nothing more).
fn open(mss: u32) -> (Connection, u64, Instant) {
    let start = Instant::now();
    let mut c = Connection::new(Config::default(), Side::Client, start).unwrap();
    c.handle_bytes(start, &hello()).unwrap();
    let s = c.open_stream(StreamConfig::default()).unwrap();
    let t0 = start + Duration::from_millis(10);
    c.poll_transmit(t0, &kernel(mss));
    let n = c.staged_len() as usize;
    c.handle_written(t0, n);
    (c, s, t0)
}

#[test]
fn each_message_of_one_segment_payload_is_one_whole_segment_on_the_wire() {
    for mss in [536, 1448, 8948] {
        let (mut c, s, t0) = open(mss);
        // 20,000 messages 150 µs apart: 3 s, past 2^21 µs and sequence number 16384.
        for k in 0..20_000u64 {
            let now = t0 + Duration::from_micros(150 * k);
            let p = c.one_segment_payload(now, s, 0, mss).unwrap();
            c.send(now, s, Message::new(vec![7u8; p])).unwrap();
            c.poll_transmit(now, &kernel(mss));
            assert_eq!(
                c.staged_len(),
                u64::from(mss),
                "message {k}, mss {mss}: payload {p}"
            );
            c.handle_written(now, mss as usize);
        }
    }
}

#[test]
fn a_message_of_a_whole_mss_takes_two_segments() {
    let (mut c, s, t0) = open(1448);
    let p = c.one_segment_payload(t0, s, 0, 1448).unwrap();
    assert!((1430..1448).contains(&p), "{p}");
    c.send(t0, s, Message::new(vec![0u8; 1448])).unwrap();
    c.poll_transmit(t0, &kernel(1448));
    assert!(c.staged_len() > 1448, "{}", c.staged_len());
}

#[test]
fn no_payload_for_an_unknown_stream_or_a_segment_too_small_for_a_header() {
    let (c, s, t0) = open(1448);
    assert_eq!(c.one_segment_payload(t0, s + 2, 0, 1448), None);
    assert_eq!(c.one_segment_payload(t0, s, 0, 4), None);
    assert!(c.one_segment_payload(t0, s, 0, 64).is_some_and(|p| p < 64));
}
