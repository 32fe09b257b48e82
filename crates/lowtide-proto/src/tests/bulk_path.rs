//! The bulk data path's economies: staging passes end on frame boundaries where only the
//! batch limits them (a message cut into two frames costs the receiver a copy), and a bulk
//! receiver sends at most one P-ACK per `pack_min_gap_us` (each one wakes the sender), a gap
//! that grows with the rate up to `pack_max_gap_us`.

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
fn with_a_fixed_gap_bulk_p_acks_are_spaced_by_the_minimum_gap() {
    let t0 = Instant::now();
    let cfg = Config {
        pack_max_gap_us: Config::default().pack_min_gap_us,
        ..Config::default()
    };
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

/// A receiver fed one read of `per_read` bytes (8 KB messages) every millisecond for
/// `reads` ms, its timers run as a driver would between reads: when each P-ACK went (ms after
/// the first read) and whether a read carried it (`false`: a timer).
fn paced_p_acks(cfg: Config, per_read: usize, reads: u64) -> Vec<(f64, bool)> {
    let t0 = Instant::now();
    let mut c = Connection::new(cfg, Side::Server, t0).unwrap();
    c.handle_bytes(t0, &hello()).unwrap();
    let mut sent = Vec::new();
    let mut seq = 0;
    let ms = |t: Instant| (t - t0).as_secs_f64() * 1e3;
    for i in 0..=reads {
        let at = t0 + Duration::from_millis(i);
        while let Some(due) = c.poll_timeout().filter(|&d| d < at) {
            let before = c.stats().packs_sent;
            c.handle_timeout(due);
            if c.stats().packs_sent > before {
                sent.push((ms(due), false));
            }
        }
        if i == reads {
            break;
        }
        let before = c.stats().packs_sent;
        let mut read = Vec::new();
        for _ in 0..per_read / 8192 {
            read.extend(first(0, seq, 8192, &[1u8; 8192]));
            seq += 1;
        }
        c.handle_bytes(at, &read).unwrap();
        if c.stats().packs_sent > before {
            sent.push((ms(at), true));
        }
    }
    // the last read's bytes: P-ACKed by timer within `pack_interval_us`
    let end = t0 + Duration::from_millis(reads + 10);
    while let Some(due) = c.poll_timeout().filter(|&d| d < end) {
        let before = c.stats().packs_sent;
        c.handle_timeout(due);
        if c.stats().packs_sent > before {
            sent.push((ms(due), false));
        }
    }
    sent
}

#[test]
fn at_a_high_rate_p_acks_ride_on_reads_spaced_by_a_gap_grown_with_the_rate_and_bounded() {
    let cfg = Config::default();
    let max_gap = cfg.pack_max_gap_us as f64 / 1e3;
    // 200 MB/s, the bench's paced rate: 200 KB every ms
    let sent = paced_p_acks(cfg.clone(), 200 << 10, 100);
    let (last, rest) = sent.split_last().unwrap();
    // a gap of about 3 ms at 200 MB/s, rounded up to the next read: one P-ACK per 4 reads
    assert!((24..=34).contains(&rest.len()), "{sent:?}");
    assert!(rest.iter().all(|&(_, by_read)| by_read), "{sent:?}");
    for w in sent.windows(2) {
        let gap = w[1].0 - w[0].0;
        assert!(gap >= 3.0 && gap <= max_gap + 1e-6, "{sent:?}");
    }
    // after the flow stops, its last bytes are P-ACKed by timer within the interval
    assert!(!last.1 && last.0 <= 99.0 + cfg.pack_interval_us as f64 / 1e3 + 1e-6);
    // the fixed gap of before: a P-ACK with every read
    let fixed = Config {
        pack_max_gap_us: cfg.pack_min_gap_us,
        ..cfg
    };
    assert!(paced_p_acks(fixed, 200 << 10, 100).len() >= 100);
}

#[test]
fn below_the_rate_of_the_byte_rule_every_read_past_pack_every_bytes_is_acknowledged_at_once() {
    // 16 KB every ms: 16 MB/s, under pack_every_bytes / pack_min_gap_us (33 MB/s)
    let sent = paced_p_acks(Config::default(), 16 << 10, 50);
    assert_eq!(sent.len(), 50, "{sent:?}");
    assert!(sent.iter().all(|&(_, by_read)| by_read));
}

#[test]
fn a_max_gap_outside_its_range_is_refused() {
    for (min, max) in [(500, 400), (500, 20_000)] {
        let cfg = Config {
            pack_min_gap_us: min,
            pack_max_gap_us: max,
            ..Config::default()
        };
        let e = Connection::new(cfg, Side::Server, Instant::now()).unwrap_err();
        assert!(e.to_string().contains("pack_max_gap_us"), "{e}");
    }
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
