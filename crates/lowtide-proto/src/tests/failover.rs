//! Failover in simulated time: stall detection, resend, exactly-once delivery, bad input.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use proptest::prelude::*;

use super::limits::hello;
use crate::failover::FailoverConfig;
use crate::sim::{LinkParams, Pair};
use crate::wire::{DataFrame, FirstChunk, Frame};
use crate::{CancelReason, Config, Connection, Event, Message, ProtocolError, Side, StreamConfig};

const MS: Duration = Duration::from_millis(1);

fn fo_cfg() -> Config {
    Config {
        failover: Some(FailoverConfig {
            floor_ms: 60,
            ..FailoverConfig::default()
        }),
        ..Config::default()
    }
}

fn pair() -> Pair {
    Pair::new(fo_cfg(), fo_cfg(), LinkParams::default())
}

fn payload(i: u64, n: usize) -> Bytes {
    (0..n)
        .map(|k| (k as u64).wrapping_mul(7).wrapping_add(i) as u8)
        .collect::<Vec<u8>>()
        .into()
}

/// Sends `n` messages of `size` bytes, one every `gap`, calling `at(i, pair)` before each.
fn send_paced(
    p: &mut Pair,
    stream: u64,
    n: u64,
    size: usize,
    gap: Duration,
    mut at: impl FnMut(u64, &mut Pair),
) {
    for i in 0..n {
        at(i, p);
        let now = p.now;
        p.client
            .conn
            .send(now, stream, Message::new(payload(i, size)))
            .unwrap();
        let until = p.now + gap;
        p.drive_until(until, 1_000_000);
    }
}

/// Every message 0..n arrived exactly once with its bytes.
fn assert_exactly_once(p: &Pair, stream: u64, n: u64, size: usize) {
    let mut seen = BTreeMap::new();
    for r in p.server.received.iter().filter(|r| r.stream == stream) {
        assert_eq!(r.data, payload(r.seq, size), "bytes of {}", r.seq);
        *seen.entry(r.seq).or_insert(0u32) += 1;
    }
    let dup: Vec<_> = seen.iter().filter(|(_, c)| **c > 1).collect();
    assert!(dup.is_empty(), "delivered twice: {dup:?}");
    let missing: Vec<_> = (0..n).filter(|s| !seen.contains_key(s)).collect();
    assert!(missing.is_empty(), "lost: {missing:?}");
}

#[test]
fn a_blackholed_connection_stalls_fails_over_and_everything_arrives_once() {
    let mut p = pair();
    p.auto_failover = true;
    let s = p.client.conn.open_stream(StreamConfig::default()).unwrap();
    send_paced(&mut p, s, 300, 1000, 2 * MS, |i, p| {
        if i == 100 {
            p.c2s.blackholed = true;
            p.s2c.blackholed = true;
        }
    });
    p.drive_bounded(1_000_000);
    assert_exactly_once(&p, s, 300, 1000);
    let st = *p.client.conn.stats();
    assert_eq!(st.failovers, 1, "{st:?}");
    assert!(st.resent_messages > 0, "{st:?}");
    assert_eq!(st.false_failovers, 0, "the old connection was dead");
    assert_eq!(p.server.conn.stats().failovers, 1);
    let reports: Vec<_> = p
        .client
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Failover(r) => Some(*r),
            _ => None,
        })
        .collect();
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].path, 1);
    // 20 ms RTT plus P-ACK delay: the threshold is above the 60 ms floor, below 200 ms
    assert!(
        reports[0].threshold >= 60 * MS && reports[0].threshold < 200 * MS,
        "{reports:?}"
    );
    assert_eq!(p.client.conn.path(), 1);
    assert!(p.client.conn.error().is_none() && p.server.conn.error().is_none());
}

#[test]
fn detection_waits_for_the_threshold_and_needs_unacked_bytes() {
    let mut p = pair();
    let s = p.client.conn.open_stream(StreamConfig::default()).unwrap();
    send_paced(&mut p, s, 50, 500, 5 * MS, |_, _| {});
    p.drive_bounded(100_000);
    // idle with everything acknowledged: no stall however long we wait
    let later = p.now + Duration::from_secs(10);
    p.drive_until(later, 100_000);
    assert!(!p.client.conn.failover_wanted());
    let th = p.client.conn.stall_threshold().unwrap();
    p.c2s.blackholed = true;
    let t0 = p.now;
    p.client
        .conn
        .send(t0, s, Message::new(payload(0, 500)))
        .unwrap();
    let mut wanted_at = None;
    for _ in 0..100_000 {
        let progressed = p.step();
        if p.client.conn.failover_wanted() {
            wanted_at = Some(p.now);
            break;
        }
        assert!(progressed, "idle without a stall");
    }
    let after = wanted_at.expect("stall detected").duration_since(t0);
    assert!(
        after >= th && after <= th + 2 * MS,
        "stall after {after:?}, threshold {th:?}"
    );
    // without a backup the stall is counted once
    p.client.conn.note_stall_without_backup();
    p.client.conn.note_stall_without_backup();
    assert_eq!(p.client.conn.stats().stalls_without_backup, 1);
}

#[test]
fn expired_messages_are_cancelled_not_resent() {
    let mut p = pair();
    p.auto_failover = true;
    let s = p.client.conn.open_stream(StreamConfig::default()).unwrap();
    p.drive_bounded(10_000);
    p.c2s.blackholed = true;
    p.s2c.blackholed = true;
    let now = p.now;
    for i in 0..20u64 {
        // half expire before the stall is detected (60 ms), half do not
        let deadline = now + if i % 2 == 0 { 30 * MS } else { 10_000 * MS };
        p.client
            .conn
            .send(now, s, Message::new(payload(i, 300)).deadline(deadline))
            .unwrap();
    }
    p.auto_failover = true;
    p.drive_bounded(1_000_000);
    let st = *p.client.conn.stats();
    assert_eq!(
        (st.failovers, st.failover_expired, st.resent_messages),
        (1, 10, 10),
        "{st:?}"
    );
    let got: Vec<u64> = p.server.received.iter().map(|r| r.seq).collect();
    assert_eq!(got, (0..20).filter(|i| i % 2 == 1).collect::<Vec<_>>());
    let peer_cancelled = p
        .server
        .events
        .iter()
        .filter(|e| matches!(e, Event::PeerCancelled(c) if c.reason == CancelReason::Expired))
        .count();
    assert_eq!(peer_cancelled, 10);
}

#[test]
fn no_false_failover_on_a_steady_link() {
    let mut p = pair();
    p.auto_failover = true;
    let s = p.client.conn.open_stream(StreamConfig::default()).unwrap();
    // 60 s at 1 MB/s on a 10 MB/s link: never a stall
    send_paced(&mut p, s, 6000, 10_000, 10 * MS, |_, _| {});
    p.drive_bounded(1_000_000);
    assert_eq!(p.client.conn.stats().failovers, 0);
    assert_exactly_once(&p, s, 6000, 10_000);
}

/// Start-up as in Fig. 6 (Erbad and Krasic): messages every 5 ms on an empty path (srtt
/// learns its 20 ms), then other flows' slow start fills the bottleneck queue within a few
/// round trips (one-way delay 10 → 46 ms in 30 ms) and loses a segment, which TCP repairs
/// in about a round trip: for 150 ms the receiver gets nothing in order while ACKs (SACKs)
/// keep arriving.
fn overshoot(i: u64, p: &mut Pair) {
    if (100..=105).contains(&i) {
        p.c2s.params.delay = (10 + 6 * (i - 99) as u32) * MS;
    }
    if i == 105 {
        p.c2s.hold_until = Some(p.now + 150 * MS);
    }
}

#[test]
fn a_slow_start_overshoot_does_not_fail_over() {
    // The P-ACK rule alone calls it a stall (its srtt is the empty path's); the test would
    // fail without the ACK clock. (Switching then cascades: every new connection meets the
    // same full queue before its first P-ACK, as in the lab.)
    let mut p = pair();
    p.ack_clock = false;
    let s = p.client.conn.open_stream(StreamConfig::default()).unwrap();
    send_paced(&mut p, s, 130, 1000, 5 * MS, overshoot);
    assert!(p.client.conn.failover_wanted());
    // With it: the ACKs held the verdict back, no failover, every message once.
    let mut p = pair();
    p.auto_failover = true;
    let s = p.client.conn.open_stream(StreamConfig::default()).unwrap();
    send_paced(&mut p, s, 300, 1000, 5 * MS, overshoot);
    p.drive_bounded(1_000_000);
    assert_exactly_once(&p, s, 300, 1000);
    let st = *p.client.conn.stats();
    assert_eq!((st.failovers, st.false_failovers), (0, 0), "{st:?}");
    assert!(st.stalls_held_by_acks >= 1, "{st:?}");
}

#[test]
fn a_blackhole_during_loss_recovery_fails_over_within_a_threshold_of_the_last_ack() {
    let mut p = pair();
    let s = p.client.conn.open_stream(StreamConfig::default()).unwrap();
    send_paced(&mut p, s, 110, 1000, 5 * MS, overshoot);
    // the repair is under way (ACKs still come, the P-ACK rule is held); now the path dies
    assert!(p.c2s.hold_until.is_some_and(|t| t > p.now));
    assert!(p.client.conn.stats().stalls_held_by_acks >= 1);
    assert!(!p.client.conn.failover_wanted());
    p.c2s.blackholed = true;
    p.s2c.blackholed = true;
    let dark = p.now;
    let mut wanted_at = None;
    let mut sent = 110;
    for i in 110..400u64 {
        sent += 1;
        let now = p.now;
        p.client
            .conn
            .send(now, s, Message::new(payload(i, 1000)))
            .unwrap();
        let until = now + 5 * MS;
        while p.now < until && p.step() {
            if p.client.conn.failover_wanted() {
                wanted_at = Some(p.now);
                break;
            }
        }
        if wanted_at.is_some() {
            break;
        }
    }
    let after = wanted_at
        .expect("the dead path is detected")
        .duration_since(dark);
    let th = p.client.conn.stall_threshold().unwrap();
    // the last ACK came at most a round trip before the path died; the verdict comes one
    // threshold after it
    assert!(
        after <= th,
        "detected {after:?} after the blackhole, threshold {th:?}"
    );
    assert!(
        after >= th.saturating_sub(2 * 46 * MS),
        "{after:?}, threshold {th:?}"
    );
    p.auto_failover = true;
    p.drive_bounded(1_000_000);
    let st = *p.client.conn.stats();
    // The backup's path has the loaded round trip (92 ms), longer than the threshold learned
    // on the empty path, and its kernel has seen only the handshake's ACK: it may be left
    // once before its first P-ACK; the back-off (doubled threshold) ends the cascade there.
    assert!((1..=2).contains(&st.failovers), "{st:?}");
    assert!(st.false_failovers < st.failovers, "{st:?}");
    assert_exactly_once(&p, s, sent, 1000);
}

#[test]
fn a_forced_switch_on_a_live_connection_counts_a_false_failover() {
    let mut p = pair();
    let s = p.client.conn.open_stream(StreamConfig::default()).unwrap();
    send_paced(&mut p, s, 100, 2000, MS, |i, p| {
        if i == 50 {
            p.switch_paths();
        }
    });
    p.drive_bounded(1_000_000);
    assert_exactly_once(&p, s, 100, 2000);
    let st = *p.client.conn.stats();
    assert_eq!((st.failovers, st.false_failovers), (1, 1), "{st:?}");
    // the server delivered some messages from the old connection that were resent
    assert!(
        p.server.conn.stats().duplicates_dropped > 0,
        "{:?}",
        p.server.conn.stats()
    );
}

#[test]
fn both_directions_resend() {
    let mut p = pair();
    p.auto_failover = true;
    let s = p.client.conn.open_stream(StreamConfig::default()).unwrap();
    let back = p.server.conn.open_stream(StreamConfig::default()).unwrap();
    for i in 0..200u64 {
        if i == 80 {
            p.c2s.blackholed = true;
            p.s2c.blackholed = true;
        }
        let now = p.now;
        p.client
            .conn
            .send(now, s, Message::new(payload(i, 800)))
            .unwrap();
        p.server
            .conn
            .send(now, back, Message::new(payload(i, 600)))
            .unwrap();
        let until = now + 2 * MS;
        p.drive_until(until, 1_000_000);
    }
    p.drive_bounded(1_000_000);
    assert_exactly_once(&p, s, 200, 800);
    let mut seen: Vec<u64> = p.client.received.iter().map(|r| r.seq).collect();
    seen.sort_unstable();
    assert_eq!(
        seen,
        (0..200).collect::<Vec<_>>(),
        "server to client: each once"
    );
    assert!(p.server.conn.stats().resent_messages > 0);
}

// ------------------------------------------------------------------- bad input

fn first(seq: u64, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    Frame::Data(DataFrame {
        stream: 0,
        seq,
        offset: 0,
        first: Some(FirstChunk {
            importance: 0,
            send_time_us: 0,
            total_len: payload.len() as u64,
        }),
        payload,
    })
    .encode(&mut v);
    v
}

fn switch(path: u64) -> Vec<u8> {
    let mut v = Vec::new();
    Frame::Switch { path }.encode(&mut v);
    v
}

#[test]
fn a_duplicate_without_failover_is_a_protocol_error() {
    let now = Instant::now();
    let mut c = Connection::new(Config::default(), Side::Server, now).unwrap();
    c.handle_bytes(now, &hello()).unwrap();
    c.handle_bytes(now, &first(0, b"abc")).unwrap();
    assert_eq!(
        c.handle_bytes(now, &first(0, b"abc")),
        Err(ProtocolError::DuplicateDelivery { stream: 0, seq: 0 })
    );
    assert_eq!(c.poll_message().unwrap().data, Bytes::from_static(b"abc"));
    assert!(c.poll_message().is_none());
}

#[test]
fn a_resent_message_with_other_bytes_is_a_protocol_error_naming_it() {
    let now = Instant::now();
    let mut c = Connection::new(fo_cfg(), Side::Server, now).unwrap();
    c.handle_bytes(now, &hello()).unwrap();
    c.handle_bytes(now, &first(0, b"abc")).unwrap();
    c.handle_bytes(now, &first(1, b"def")).unwrap();
    c.begin_path(now, 1).unwrap();
    // identical copy: dropped; another copy with other bytes: error, code 6
    let mut b = switch(1);
    b.extend(first(0, b"abc"));
    c.handle_bytes(now, &b).unwrap();
    let e = c.handle_bytes(now, &first(1, b"xyz")).unwrap_err();
    assert_eq!(e, ProtocolError::ResentMessageDiffers { stream: 0, seq: 1 });
    assert_eq!(e.code(), 6);
    assert!(e.to_string().contains("0/1"), "{e}");
    let got: Vec<_> = std::iter::from_fn(|| c.poll_message())
        .map(|r| r.seq)
        .collect();
    assert_eq!(got, vec![0, 1], "nothing delivered twice");
    assert_eq!(c.stats().duplicates_dropped, 1);
}

#[test]
fn a_backup_used_without_its_switch_and_a_stray_switch_are_errors() {
    let now = Instant::now();
    let mut c = Connection::new(fo_cfg(), Side::Server, now).unwrap();
    c.handle_bytes(now, &hello()).unwrap();
    assert!(matches!(
        c.handle_bytes(now, &switch(1)),
        Err(ProtocolError::BadSwitch { expected: 0, .. })
    ));
    let mut c = Connection::new(fo_cfg(), Side::Server, now).unwrap();
    c.handle_bytes(now, &hello()).unwrap();
    c.begin_path(now, 2).unwrap();
    let e = c.handle_bytes(now, &first(0, b"abc")).unwrap_err();
    assert_eq!(
        e,
        ProtocolError::BadSwitch {
            expected: 2,
            got: "DATA".into()
        }
    );
    let mut c = Connection::new(fo_cfg(), Side::Server, now).unwrap();
    c.handle_bytes(now, &hello()).unwrap();
    c.begin_path(now, 2).unwrap();
    assert!(matches!(
        c.handle_bytes(now, &switch(3)),
        Err(ProtocolError::BadSwitch { expected: 2, .. })
    ));
}

#[test]
fn the_accepting_side_ignores_a_switch_overtaken_by_a_later_one() {
    // The peer switched to 1, then (1's first bytes lost and retransmitted) to 2, whose
    // SWITCH arrived first. Following 1 now would close the connection the peer uses.
    let now = Instant::now();
    let mut c = Connection::new(fo_cfg(), Side::Server, now).unwrap();
    c.handle_bytes(now, &hello()).unwrap();
    c.handle_bytes(now, &first(0, b"abc")).unwrap();
    assert_eq!(c.begin_path(now, 2).map(|r| r.path), Some(2));
    let mut b = switch(2);
    b.extend(first(1, b"def"));
    c.handle_bytes(now, &b).unwrap();
    assert!(
        c.begin_path(now, 1).is_none(),
        "a lower ordinal is not followed"
    );
    assert!(c.begin_path(now, 2).is_none(), "nor the one in use");
    assert_eq!((c.path(), c.stats().failovers), (2, 1));
    // the connection in use reads on, nothing expected of it
    c.handle_bytes(now, &first(2, b"ghi")).unwrap();
    let got: Vec<_> = std::iter::from_fn(|| c.poll_message())
        .map(|r| r.seq)
        .collect();
    assert_eq!(got, vec![0, 1, 2]);
}

#[test]
fn without_failover_config_begin_path_does_nothing() {
    let now = Instant::now();
    let mut c = Connection::new(Config::default(), Side::Client, now).unwrap();
    assert!(c.begin_path(now, 1).is_none());
    assert!(c.stall_threshold().is_none());
}

// ------------------------------------------------------------------- property

/// A failover point of [`random_failover_run`].
#[derive(Debug, Clone, Copy)]
pub(super) enum Point {
    /// Both directions of the connection in use go dark (the stall detector must find it).
    Blackhole,
    /// A forced switch on a live connection.
    Switch,
    /// The duplicate lane fails: both ends drop it and a new one opens (with a lane only).
    LaneLost,
}

/// Random messages (size, importance, second stream) on two streams with failover points
/// before the given message indexes, on `client`/`server` configs, with a duplicate lane of
/// `lane` one-way delay if any: every message must arrive exactly once with its bytes.
pub(super) fn random_failover_run(
    cfg: Config,
    msgs: &[(usize, u8, bool)],
    points: &[(usize, Point)],
    delay: Duration,
    lane: Option<Duration>,
) -> Result<(), TestCaseError> {
    let link = LinkParams {
        delay,
        ..LinkParams::default()
    };
    let mut p = Pair::new(cfg.clone(), cfg, link);
    if let Some(d) = lane {
        p.add_lane(d);
    }
    p.auto_failover = true;
    let streams = [
        p.client.conn.open_stream(StreamConfig::default()).unwrap(),
        p.client
            .conn
            .open_stream(StreamConfig { weight: 2.0 })
            .unwrap(),
    ];
    // a backup joins a channel only once the primary's hellos arrived
    p.drive_bounded(10_000);
    let mut sent = BTreeMap::new();
    for (i, &(size, importance, second)) in msgs.iter().enumerate() {
        for &(_, point) in points.iter().filter(|(at, _)| *at == i) {
            match (point, lane) {
                (Point::Blackhole, _) => {
                    p.c2s.blackholed = true;
                    p.s2c.blackholed = true;
                }
                (Point::LaneLost, Some(d)) => {
                    p.client.conn.lane_lost();
                    p.server.conn.lane_lost();
                    p.add_lane(d);
                }
                (Point::Switch | Point::LaneLost, _) => {
                    p.switch_paths();
                }
            }
        }
        let stream = streams[usize::from(second)];
        let data = payload(i as u64, size);
        let now = p.now;
        let id = p.client.conn.send(
            now,
            stream,
            Message::new(data.clone()).importance(importance),
        );
        prop_assert!(
            id.is_ok(),
            "client {:?} server {:?}",
            p.client.conn.error(),
            p.server.conn.error()
        );
        let id = id.unwrap();
        sent.insert((id.stream, id.seq), data);
        let until = now + MS;
        p.drive_until(until, 1_000_000);
    }
    p.drive_bounded(2_000_000);
    prop_assert!(
        p.server.conn.error().is_none(),
        "{:?}",
        p.server.conn.error()
    );
    prop_assert!(
        p.client.conn.error().is_none(),
        "{:?}",
        p.client.conn.error()
    );
    let mut got = BTreeMap::new();
    for r in &p.server.received {
        prop_assert!(
            got.insert((r.stream, r.seq), r.data.clone()).is_none(),
            "twice: {}/{}",
            r.stream,
            r.seq
        );
    }
    prop_assert_eq!(got.len(), sent.len());
    prop_assert!(got == sent, "bytes differ");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Random messages (sizes, importances, two streams) and random failover points, forced
    /// switches on live connections and blackholes that the stall detector must find: every
    /// message arrives exactly once with its bytes.
    #[test]
    fn exactly_once_with_random_failover_points(
        msgs in proptest::collection::vec((1usize..4000, 0u8..4, any::<bool>()), 20..120),
        points in proptest::collection::vec((0usize..120, any::<bool>()), 0..6),
        delay_ms in 1u32..30,
    ) {
        let points: Vec<_> = points
            .into_iter()
            .map(|(at, b)| (at, if b { Point::Blackhole } else { Point::Switch }))
            .collect();
        random_failover_run(fo_cfg(), &msgs, &points, delay_ms * MS, None)?;
    }
}
