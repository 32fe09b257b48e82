//! The bulk data path's economies: staging passes end on frame boundaries where only the
//! batch limits them (a message cut into two frames costs the receiver a copy), and a bulk
//! receiver sends at most one P-ACK per `pack_min_gap_us` (each one wakes the sender).

use std::time::{Duration, Instant};

use super::limits::{first, hello};
use crate::{Config, Connection, ControllerConfig, Message, Side, StreamConfig, TcpState};

fn sender(controller: ControllerConfig) -> (Connection, Instant, u64) {
    let now = Instant::now();
    let cfg = Config {
        controller,
        ..Config::default()
    };
    let mut c = Connection::new(cfg, Side::Client, now).unwrap();
    c.handle_bytes(now, &hello()).unwrap();
    let s = c.open_stream(StreamConfig::default()).unwrap();
    for _ in 0..8 {
        c.send(now, s, Message::new(vec![5u8; 64 << 10])).unwrap();
    }
    (c, now, s)
}

#[test]
fn a_pass_limited_by_the_batch_stages_whole_frames() {
    let (mut c, now, _) = sender(ControllerConfig::Unlimited);
    let loopback = TcpState {
        cwnd: 100,
        mss: 65483,
        ..TcpState::default()
    };
    let before = c.stats().chunks_sent;
    c.poll_transmit(now, &loopback);
    // 256 KB of batch hold three 64 KB frames and most of a fourth: the fourth waits whole
    assert_eq!(c.stats().chunks_sent - before, 3);
    let staged = c.staged_len();
    assert!(
        staged > 3 * (64 << 10) && staged < 4 * (64 << 10),
        "{staged}"
    );
    c.handle_written(now, staged as usize);
    let before = c.stats().chunks_sent;
    c.poll_transmit(now, &loopback);
    assert_eq!(
        c.stats().chunks_sent - before,
        3,
        "the next pass starts whole too"
    );
}

#[test]
fn a_pass_limited_by_the_controller_still_fills_its_allowance() {
    // MinBuf(1,3) with cwnd 1: an allowance of a few MSS, less than one message
    let (mut c, now, _) = sender(ControllerConfig::MinBuf { a: 1, b: 3 });
    let tcp = TcpState {
        cwnd: 1,
        mss: 1448,
        ..TcpState::default()
    };
    let before = c.stats().chunks_sent;
    let d = c.poll_transmit(now, &tcp);
    assert_eq!(c.stats().chunks_sent - before, 1);
    let staged = c.staged_len();
    assert!(
        (1448..64 << 10).contains(&staged),
        "{staged}: the message is cut to fit"
    );
    assert!(staged <= d.limit, "{d:?}");
}

/// A receiver that got the peer's hello and `n` bytes of data at `now`.
fn receive(c: &mut Connection, now: Instant, seq: u64, n: usize) {
    c.handle_bytes(now, &first(0, seq, n as u64, &vec![1u8; n]))
        .unwrap();
}

#[test]
fn bulk_p_acks_are_spaced_by_the_minimum_gap() {
    let t0 = Instant::now();
    let cfg = Config::default();
    let gap = Duration::from_micros(cfg.pack_min_gap_us);
    let mut c = Connection::new(cfg, Side::Server, t0).unwrap();
    c.handle_bytes(t0, &hello()).unwrap();
    receive(&mut c, t0, 0, 20_000);
    let after_first = c.stats().packs_sent;
    // more than `pack_every_bytes` again, but within the gap: the P-ACK waits for it
    let t1 = t0 + gap / 4;
    receive(&mut c, t1, 1, 20_000);
    assert_eq!(c.stats().packs_sent, after_first);
    assert_eq!(c.poll_timeout(), Some(t0 + gap));
    c.handle_timeout(t0 + gap);
    assert_eq!(c.stats().packs_sent, after_first + 1);
    // after a quiet gap a P-ACK goes at once (latency samples stay exact)
    let t2 = t0 + 3 * gap;
    receive(&mut c, t2, 2, 20_000);
    assert_eq!(c.stats().packs_sent, after_first + 2);
}

#[test]
fn without_a_gap_every_read_past_pack_every_bytes_is_acknowledged() {
    let t0 = Instant::now();
    let cfg = Config {
        pack_min_gap_us: 0,
        ..Config::default()
    };
    let mut c = Connection::new(cfg, Side::Server, t0).unwrap();
    c.handle_bytes(t0, &hello()).unwrap();
    receive(&mut c, t0, 0, 20_000);
    let after_first = c.stats().packs_sent;
    receive(&mut c, t0, 1, 20_000);
    assert_eq!(c.stats().packs_sent, after_first + 1);
}

#[test]
fn a_gap_longer_than_the_p_ack_interval_is_refused() {
    let cfg = Config {
        pack_min_gap_us: 2000,
        pack_interval_us: 1000,
        ..Config::default()
    };
    let e = Connection::new(cfg, Side::Server, Instant::now()).unwrap_err();
    assert!(e.to_string().contains("pack_min_gap_us"), "{e}");
}
