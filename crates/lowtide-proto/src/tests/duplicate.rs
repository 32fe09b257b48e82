//! The duplicate lane (`crate::failover::duplicate`) in simulated time: the receiver keeps
//! the first copy whichever connection brings it, the lane skips the primary's backlog and
//! its outages, and exactly-once delivery holds with random failover points and lane losses.

use std::time::Duration;

use bytes::Bytes;
use proptest::prelude::*;

use super::failover::{random_failover_run, Point};
use super::{latencies_ms, quantile};
use crate::failover::duplicate::DuplicateConfig;
use crate::failover::FailoverConfig;
use crate::sim::{LinkParams, Pair};
use crate::{Config, ControllerConfig, Message, StreamConfig};

const MS: Duration = Duration::from_millis(1);

fn cfg(min_importance: Option<u8>) -> Config {
    Config {
        controller: ControllerConfig::MinBuf { a: 1, b: 3 },
        failover: Some(FailoverConfig {
            floor_ms: 60,
            ..FailoverConfig::default()
        }),
        duplicate: min_importance.map(|m| DuplicateConfig {
            min_importance: m,
            ..DuplicateConfig::default()
        }),
        ..Config::default()
    }
}

fn payload(i: u64, n: usize) -> Bytes {
    (0..n)
        .map(|k| (k as u64).wrapping_mul(13).wrapping_add(i) as u8)
        .collect::<Vec<u8>>()
        .into()
}

/// Sends 50 messages, every other one important, over a 10 ms primary and a lane of
/// `lane_ms`; returns the pair after everything settled.
fn alternate(lane_ms: u32) -> Pair {
    let mut p = Pair::new(cfg(Some(7)), cfg(Some(7)), LinkParams::default());
    p.add_lane(lane_ms * MS);
    let s = p.client.conn.open_stream(StreamConfig::default()).unwrap();
    p.drive_bounded(10_000);
    for i in 0..50u64 {
        let m = Message::new(payload(i, 1500)).importance(if i.is_multiple_of(2) { 7 } else { 3 });
        p.client.conn.send(p.now, s, m).unwrap();
        let until = p.now + 5 * MS;
        p.drive_until(until, 1_000_000);
    }
    p.drive_bounded(1_000_000);
    let mut seqs: Vec<u64> = p.server.received.iter().map(|m| m.seq).collect();
    seqs.sort();
    assert_eq!(seqs, (0..50).collect::<Vec<_>>(), "each message once");
    for m in &p.server.received {
        assert_eq!(m.data, payload(m.seq, 1500));
    }
    p
}

#[test]
fn the_first_copy_wins_on_either_connection() {
    // The lane is faster: its copies of the 25 important messages are delivered, the
    // primary's copies dropped as identical duplicates.
    let fast = alternate(2);
    let st = fast.server.conn.stats();
    let c = fast.client.conn.stats();
    assert_eq!((c.lane.copies_sent, c.lane.copy_bytes), (25, 25 * 1500));
    assert_eq!((st.lane.copies_first, st.lane.copies_late), (25, 0));
    assert_eq!(st.duplicates_dropped, 25);
    // The lane is slower: the primary's copies win, the lane's are dropped.
    let slow = alternate(40);
    let st = slow.server.conn.stats();
    assert_eq!(
        st.lane.copies_first + st.lane.copies_late + slow.client.conn.stats().lane.copies_unneeded,
        25
    );
    assert_eq!(st.lane.copies_first, 0);
    assert!(st.lane.copies_late > 0);
}

#[test]
fn without_the_lane_nothing_is_copied_and_bad_lane_bytes_close_the_channel() {
    let mut p = Pair::new(cfg(None), cfg(None), LinkParams::default());
    let s = p.client.conn.open_stream(StreamConfig::default()).unwrap();
    p.client
        .conn
        .send(p.now, s, Message::new("x").importance(7))
        .unwrap();
    p.drive_bounded(10_000);
    assert!(!p.client.conn.sends_copies() && !p.client.conn.lane_has_work());
    assert_eq!(p.client.conn.stats().lane.copies_sent, 0);
    // Lane bytes to a side that did not configure the lane: a protocol error, channel closed.
    let e = p.server.conn.handle_lane_bytes(p.now, b"\x03").unwrap_err();
    assert!(e.to_string().contains("did not configure"), "{e}");
    assert!(p.server.conn.is_closed());
}

#[test]
fn a_lane_copy_with_other_bytes_is_refused() {
    let mut p = Pair::new(cfg(Some(7)), cfg(Some(7)), LinkParams::default());
    let s = p.client.conn.open_stream(StreamConfig::default()).unwrap();
    p.client
        .conn
        .send(p.now, s, Message::new("base").importance(7))
        .unwrap();
    p.drive_bounded(10_000);
    // A forged lane copy of seq 0 with other bytes.
    let mut forged = Vec::new();
    crate::wire::Frame::Data(crate::wire::DataFrame {
        stream: s,
        seq: 0,
        offset: 0,
        first: Some(crate::wire::FirstChunk {
            importance: 7,
            send_time_us: 0,
            total_len: 4,
        }),
        payload: b"evil",
    })
    .encode(&mut forged);
    let e = p.server.conn.handle_lane_bytes(p.now, &forged).unwrap_err();
    assert_eq!(
        e,
        crate::ProtocolError::ResentMessageDiffers { stream: s, seq: 0 }
    );
    assert_eq!(p.server.received.len(), 1);
}

/// 200 frames 33 ms apart, `layers` 2000-byte layers each (importance 7 = base), due in
/// 300 ms, over a 250 KB/s cwnd-limited primary (eight layers overfill it, two do not); the lane, if any, is a link of
/// the same rate and delay of its own (in the lab it shares the bottleneck). `blackout`: the
/// primary goes dark before that frame and failover (60 ms floor) moves the channel.
/// Returns the base layer's latencies, sorted, ms.
fn conference(lane: bool, blackout: Option<u32>, layers: u8) -> (Vec<f64>, Pair) {
    let link = LinkParams {
        rate: 250_000,
        delay: 20 * MS,
        cwnd: 20,
        mss: 1000,
        ..LinkParams::default()
    };
    let dup = lane.then_some(7);
    let mut p = Pair::new(cfg(dup), cfg(dup), link);
    if lane {
        p.add_lane(20 * MS);
    }
    p.auto_failover = true;
    let s = p.client.conn.open_stream(StreamConfig::default()).unwrap();
    let frame = Duration::from_micros(33_333);
    for f in 0..200u32 {
        if blackout == Some(f) {
            p.c2s.blackholed = true;
            p.s2c.blackholed = true;
        }
        let now = p.now;
        for layer in 0..layers {
            let m = Message::new(payload(u64::from(f) * 8 + u64::from(layer), 2000))
                .importance(7 - layer)
                .deadline(now + Duration::from_millis(300));
            p.client.conn.send(now, s, m).unwrap();
        }
        let until = p.client.conn.epoch() + frame * (f + 1);
        p.drive_until(until, 1_000_000);
    }
    p.drive_until(p.now + Duration::from_secs(2), 1_000_000);
    let base = latencies_ms(&p, 7);
    (base, p)
}

#[test]
fn the_base_layer_skips_the_primarys_backlog() {
    let (plain, _) = conference(false, None, 8);
    let (dup, p) = conference(true, None, 8);
    let (p50, d50) = (quantile(&plain, 0.5), quantile(&dup, 0.5));
    let lane = p.server.conn.stats().lane;
    eprintln!(
        "base p50 {p50:.1} -> {d50:.1} ms, max {:.1} -> {:.1} ms; copies first {} late {}",
        quantile(&plain, 1.0),
        quantile(&dup, 1.0),
        lane.copies_first,
        lane.copies_late
    );
    assert_eq!(
        (plain.len(), dup.len()),
        (200, 200),
        "every base message, once"
    );
    // The lane's floor: 20 ms one way plus 8 ms to serialise 2000 bytes at 250 KB/s.
    assert!(d50 <= 30.0, "median with the lane {d50:.1} ms");
    assert!(d50 + 10.0 <= p50, "median {p50:.1} -> {d50:.1} ms");
    assert!(lane.copies_first >= 190, "{lane:?}");
}

#[test]
fn the_base_layer_rides_out_an_outage_of_the_primary() {
    let (plain, pp) = conference(false, Some(60), 2);
    let (dup, p) = conference(true, Some(60), 2);
    let (pmax, dmax) = (quantile(&plain, 1.0), quantile(&dup, 1.0));
    eprintln!("base worst {pmax:.1} -> {dmax:.1} ms");
    assert_eq!(pp.client.conn.stats().failovers, 1);
    assert_eq!(p.client.conn.stats().failovers, 1);
    assert_eq!((plain.len(), dup.len()), (200, 200));
    // Without the lane the base waits for the stall threshold and the resend; with it the
    // copies keep arriving at the lane's own pace.
    assert!(pmax >= 80.0, "worst without the lane {pmax:.1} ms");
    assert!(dmax <= 40.0, "worst with the lane {dmax:.1} ms");
}

// ------------------------------------------------------------------- property

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Random messages and importances on two streams, a lane faster or slower than the
    /// primary (copies arrive first on either), random failover points (forced switches and
    /// blackholes) and random losses of the lane (dropped by both ends, a new one opened):
    /// every message exactly once with its bytes, no protocol error.
    #[test]
    fn exactly_once_with_a_lane_and_random_failover_points(
        msgs in proptest::collection::vec((1usize..4000, 0u8..4, any::<bool>()), 20..100),
        points in proptest::collection::vec((0usize..100, 0u8..3), 0..6),
        delay_ms in 1u32..30,
        lane_ms in 1u32..60,
        min_importance in 0u8..4,
    ) {
        let points: Vec<_> = points
            .into_iter()
            .map(|(at, k)| (at, [Point::Blackhole, Point::Switch, Point::LaneLost][usize::from(k)]))
            .collect();
        random_failover_run(cfg(Some(min_importance)), &msgs, &points, delay_ms * MS, Some(lane_ms * MS))?;
    }
}

/// `when = "recovery"`: nothing is copied while the primary is healthy; when its
/// `tcpi_ca_state` enters Recovery, every covered message not yet P-ACKed is copied once
/// (in flight or still queued), and so is each covered message queued during the repair.
#[test]
fn on_recovery_the_lane_copies_what_is_not_yet_acknowledged() {
    use crate::controller::{TcpState, CA_RECOVERY};
    use crate::failover::duplicate::CopyWhen;
    let recovery = || Config {
        duplicate: Some(DuplicateConfig {
            min_importance: 7,
            when: CopyWhen::Recovery,
            ..DuplicateConfig::default()
        }),
        ..cfg(None)
    };
    let mut p = Pair::new(recovery(), recovery(), LinkParams::default());
    p.add_lane(2 * MS);
    let s = p.client.conn.open_stream(StreamConfig::default()).unwrap();
    p.drive_bounded(10_000);
    let send = |p: &mut Pair, i: u64, importance: u8| {
        let m = Message::new(payload(i, 1500)).importance(importance);
        p.client.conn.send(p.now, s, m).unwrap();
    };
    // Healthy: two important, two not, in flight (written, not yet P-ACKed).
    for (i, imp) in [(0, 7), (1, 3), (2, 7), (3, 3)] {
        send(&mut p, i, imp);
    }
    let until = p.now + MS;
    p.drive_until(until, 100_000);
    assert_eq!(
        p.client.conn.stats().lane.copies_sent,
        0,
        "nothing copied while healthy"
    );
    // Two more queued, not yet staged, then the repair begins.
    send(&mut p, 4, 7);
    send(&mut p, 5, 3);
    let repairing = TcpState {
        cwnd: 10,
        mss: 1448,
        ca_state: CA_RECOVERY,
        ..TcpState::default()
    };
    p.client.conn.poll_transmit(p.now, &repairing);
    let lane = p.client.conn.stats().lane;
    assert_eq!((lane.recoveries, lane.copies_on_recovery), (1, 3));
    // During the repair a new important message is copied when queued; the repair going on
    // copies nothing twice.
    send(&mut p, 6, 7);
    p.client.conn.poll_transmit(p.now, &repairing);
    let lane = p.client.conn.stats().lane;
    assert_eq!((lane.recoveries, lane.copies_on_recovery), (1, 3));
    p.drive_bounded(1_000_000); // the simulated TCP is healthy again
    send(&mut p, 7, 7);
    p.drive_bounded(1_000_000);
    let c = p.client.conn.stats().lane;
    assert_eq!(
        c.copies_sent + c.copies_unneeded,
        4,
        "messages 0, 2, 4 and 6 copied, 7 not: {c:?}"
    );
    let mut seqs: Vec<u64> = p.server.received.iter().map(|m| m.seq).collect();
    seqs.sort();
    assert_eq!(seqs, (0..8).collect::<Vec<_>>(), "each message once");
}
