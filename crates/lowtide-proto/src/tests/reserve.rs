//! The importance reserve (`crate::reserve`) in simulated time: a layered conference whose
//! share of a cwnd-limited path carries only some layers.

use std::time::Duration;

use super::{latencies_ms, quantile};
use crate::reserve::ImportanceReserve;
use crate::sim::{LinkParams, Pair};
use crate::{Config, ControllerConfig, Message, StreamConfig};

/// 250 KB/s (one 1000-byte segment every 4 ms), less than the 480 KB/s offered; cwnd 20
/// keeps the link busy, so ACKs come back one segment time apart, as behind a bottleneck.
fn link() -> LinkParams {
    LinkParams {
        rate: 250_000,
        delay: Duration::from_millis(20),
        cwnd: 20,
        mss: 1000,
        ..LinkParams::default()
    }
}

struct Run {
    /// Base-layer latencies (enqueue to delivery), sorted, ms.
    base_ms: Vec<f64>,
    /// Bytes delivered of all layers.
    delivered: u64,
    reserve_held: u64,
    reserve_bytes_used: u64,
}

/// 300 frames 33 ms apart, each eight 2000-byte messages (importance 7 = base, down to 0),
/// every message due within 300 ms (expired ones are cancelled unsent).
fn conference(reserve: Option<ImportanceReserve>) -> Run {
    let cfg = Config {
        controller: ControllerConfig::MinBuf { a: 1, b: 3 },
        importance_reserve: reserve,
        ..Config::default()
    };
    let mut p = Pair::new(cfg, Config::default(), link());
    let s = p.client.conn.open_stream(StreamConfig::default()).unwrap();
    let frame = Duration::from_micros(33_333);
    for f in 0..300u32 {
        let now = p.now;
        for layer in 0..8u8 {
            let data = vec![layer; 2000];
            let m = Message::new(data)
                .importance(7 - layer)
                .deadline(now + Duration::from_millis(300));
            p.client.conn.send(now, s, m).unwrap();
        }
        let until = p.client.conn.epoch() + frame * (f + 1);
        p.drive_until(until, 1_000_000);
    }
    p.drive_bounded(1_000_000);
    let base_ms = latencies_ms(&p, 7);
    let st = p.client.conn.stats();
    Run {
        base_ms,
        delivered: p.server.received.iter().map(|m| m.data.len() as u64).sum(),
        reserve_held: st.reserve_held,
        reserve_bytes_used: st.reserve_bytes_used,
    }
}

#[test]
fn the_base_layer_skips_the_unsent_bytes_of_less_important_layers() {
    let plain = conference(None);
    let reserved = conference(Some(ImportanceReserve {
        segments: 2,
        min_importance: 7,
    }));
    assert_eq!(plain.base_ms.len(), 300, "every base message arrives");
    assert_eq!(reserved.base_ms.len(), 300);
    let (p50, r50) = (
        quantile(&plain.base_ms, 0.5),
        quantile(&reserved.base_ms, 0.5),
    );
    let (pmax, rmax) = (
        quantile(&plain.base_ms, 1.0),
        quantile(&reserved.base_ms, 1.0),
    );
    eprintln!(
        "base p50 {p50:.1} -> {r50:.1} ms, max {pmax:.1} -> {rmax:.1} ms; delivered {} -> {} bytes; held {} passes, {} bytes into the reserve",
        plain.delivered, reserved.delivered, reserved.reserve_held, reserved.reserve_bytes_used
    );
    // One segment leaves every 4 ms: two fewer unsent segments ahead of
    // the base are 8 ms; allow half of it for header bytes and the ACK clock's phase.
    assert!(r50 + 4.0 <= p50, "median {p50:.1} -> {r50:.1} ms");
    assert!(rmax <= pmax, "worst {pmax:.1} -> {rmax:.1} ms");
    // The less important layers lose little: the window stays full.
    assert!(
        reserved.delivered as f64 >= 0.95 * plain.delivered as f64,
        "{} -> {} bytes",
        plain.delivered,
        reserved.delivered
    );
    assert!(reserved.reserve_held > 0 && reserved.reserve_bytes_used > 0);
    assert_eq!((plain.reserve_held, plain.reserve_bytes_used), (0, 0));
}

#[test]
fn a_reserve_larger_than_b_keeps_headroom_in_the_window() {
    let two = conference(Some(ImportanceReserve {
        segments: 2,
        min_importance: 7,
    }));
    // Five segments with b = 3: the other layers stay two segments below cwnd, so the base
    // finds room in the window itself and waits for no ACK.
    let five = conference(Some(ImportanceReserve {
        segments: 5,
        min_importance: 7,
    }));
    let (t50, f50) = (quantile(&two.base_ms, 0.5), quantile(&five.base_ms, 0.5));
    eprintln!(
        "base p50 {t50:.1} -> {f50:.1} ms; delivered {} -> {} bytes",
        two.delivered, five.delivered
    );
    assert_eq!(five.base_ms.len(), 300);
    assert!(f50 + 4.0 <= t50, "median {t50:.1} -> {f50:.1} ms");
    assert!(five.delivered as f64 >= 0.95 * two.delivered as f64);
}

#[test]
fn a_reserve_of_b_segments_leaves_no_unsent_bytes_ahead_of_the_base_and_the_window_full() {
    let plain = conference(None);
    // MIN_BUF(1, 0) for layers 1-7, MIN_BUF(1, 3) for the base: the less important layers
    // never wait unsent in the kernel, and (the ACKs coming 4 ms apart) keep the window full.
    let three = conference(Some(ImportanceReserve {
        segments: 3,
        min_importance: 7,
    }));
    let (p50, t50) = (quantile(&plain.base_ms, 0.5), quantile(&three.base_ms, 0.5));
    eprintln!(
        "base p50 {p50:.1} -> {t50:.1} ms; delivered {} -> {} bytes",
        plain.delivered, three.delivered
    );
    assert_eq!(three.base_ms.len(), 300);
    // Three unsent segments fewer ahead of the base: 12 ms at one segment every 4 ms; allow
    // a third of it for header bytes and the ACK clock's phase.
    assert!(t50 + 8.0 <= p50, "median {p50:.1} -> {t50:.1} ms");
    assert!(
        three.delivered as f64 >= 0.95 * plain.delivered as f64,
        "{} -> {} bytes",
        plain.delivered,
        three.delivered
    );
}

#[test]
fn a_reserve_the_controller_cannot_give_is_refused_when_built() {
    let cfg = Config {
        controller: ControllerConfig::MinBuf { a: 1, b: 3 },
        importance_reserve: Some(ImportanceReserve {
            segments: 0,
            min_importance: 7,
        }),
        ..Config::default()
    };
    let e = crate::Connection::new(cfg.clone(), crate::Side::Client, std::time::Instant::now())
        .unwrap_err();
    assert_eq!(
        (e.field, e.value.as_str(), e.allowed),
        ("importance_reserve.segments", "0", "1..=16")
    );
    let plain_tcp = Config {
        controller: ControllerConfig::Unlimited,
        importance_reserve: Some(ImportanceReserve {
            segments: 2,
            min_importance: 7,
        }),
        ..cfg
    };
    let e = crate::Connection::new(plain_tcp, crate::Side::Client, std::time::Instant::now())
        .unwrap_err();
    assert_eq!(e.field, "importance_reserve");
}
