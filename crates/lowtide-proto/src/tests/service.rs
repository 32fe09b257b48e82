//! The service model: delivery, priorities, cancellation, expiry, fairness, controllers.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;

use crate::sim::{LinkParams, Pair};
use crate::{CancelReason, Config, ControllerConfig, Event, Fairness, Message, StreamConfig};

fn cfg(controller: ControllerConfig) -> Config {
    Config {
        controller,
        ..Config::default()
    }
}

fn pair(controller: ControllerConfig, link: LinkParams) -> Pair {
    Pair::new(cfg(controller), cfg(ControllerConfig::default()), link)
}

fn slow() -> LinkParams {
    LinkParams {
        rate: 1_000_000,
        cwnd: 10,
        ..LinkParams::default()
    }
}

fn payload(n: usize, salt: u8) -> Bytes {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt))
        .collect::<Vec<u8>>()
        .into()
}

#[test]
fn messages_arrive_intact_with_metadata_and_timestamps() {
    let mut p = pair(ControllerConfig::default(), LinkParams::default());
    let s = p.client.conn.open_stream(StreamConfig::default()).unwrap();
    let sizes = [0usize, 10, 5000, 100_000];
    let now = p.now;
    for (i, &n) in sizes.iter().enumerate() {
        p.client
            .conn
            .send(
                now,
                s,
                Message::new(payload(n, i as u8)).importance(i as u8),
            )
            .unwrap();
    }
    p.drive_bounded(100_000);
    let got = &p.server.received;
    assert_eq!(got.len(), sizes.len());
    for r in got {
        assert_eq!(r.stream, s);
        assert_eq!(r.importance as u64, r.seq);
        assert_eq!(r.data, payload(sizes[r.seq as usize], r.seq as u8));
        assert_eq!(r.send_time_us, 0, "enqueued at the client's epoch");
    }
    let acked: Vec<_> = p
        .client
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Acked { id, times, .. } => Some((id.seq, *times)),
            _ => None,
        })
        .collect();
    assert_eq!(acked.len(), sizes.len());
    for (_, t) in acked {
        let (first, last, ack) = (
            t.first_write.unwrap(),
            t.last_write.unwrap(),
            t.acked.unwrap(),
        );
        assert!(t.enqueued <= first && first <= last && last < ack, "{t:?}");
    }
    let st = p.client.conn.stats();
    assert_eq!(st.messages_acked, sizes.len() as u64);
    // Every write the harness made is counted, and each carried bytes.
    assert!(
        st.write_calls > 0 && st.write_calls <= st.bytes_written,
        "{st:?}"
    );
    assert_eq!(p.server.conn.recv_memory(), 0);
}

/// Sends 1 MB of bulk, then an urgent message 50 ms later; returns the position of the urgent
/// message in delivery order and its delay from enqueue to receipt.
fn urgent_after_bulk(controller: ControllerConfig) -> (usize, Duration) {
    let mut p = pair(controller, slow());
    let s = p.client.conn.open_stream(StreamConfig::default()).unwrap();
    let t0 = p.now;
    for i in 0..100 {
        p.client
            .conn
            .send(t0, s, Message::new(payload(10_000, i)))
            .unwrap();
    }
    p.drive_until(t0 + Duration::from_millis(50), 1_000_000);
    let t1 = p.now;
    let urgent = p
        .client
        .conn
        .send(t1, s, Message::new(payload(100, 7)).importance(9))
        .unwrap();
    p.drive_bounded(1_000_000);
    assert_eq!(p.server.received.len(), 101);
    let pos = p
        .server
        .received
        .iter()
        .position(|r| r.seq == urgent.seq)
        .unwrap();
    (pos, p.server.received[pos].received_at - t1)
}

#[test]
fn important_message_preempts_queued_bulk_under_min_buf() {
    let (pos, delay) = urgent_after_bulk(ControllerConfig::MinBuf { a: 1, b: 3 });
    // cwnd 10 + 3 segments of 1000 bytes at 1 MB/s: ~13 ms of queue, 10 ms propagation.
    assert!(
        delay < Duration::from_millis(40),
        "urgent message took {delay:?}"
    );
    assert!(pos < 10, "urgent message delivered at position {pos}");
}

#[test]
fn unlimited_controller_queues_urgent_behind_bulk() {
    let (pos, delay) = urgent_after_bulk(ControllerConfig::Unlimited);
    assert!(delay > Duration::from_millis(500), "{delay:?}");
    assert_eq!(pos, 100, "plain TCP delivers in write order");
}

#[test]
fn chunks_of_a_preempted_message_interleave_and_reassemble() {
    let mut p = pair(ControllerConfig::default(), slow());
    let s = p.client.conn.open_stream(StreamConfig::default()).unwrap();
    let t0 = p.now;
    p.client
        .conn
        .send(t0, s, Message::new(payload(200_000, 1)))
        .unwrap();
    p.drive_until(t0 + Duration::from_millis(30), 100_000);
    assert!(
        p.server.conn.recv_memory() > 0 && p.server.received.is_empty(),
        "bulk message is partly across"
    );
    p.client
        .conn
        .send(p.now, s, Message::new(payload(3000, 2)).importance(1))
        .unwrap();
    p.drive_bounded(1_000_000);
    let seqs: Vec<u64> = p.server.received.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, vec![1, 0]);
    assert_eq!(p.server.received[1].data, payload(200_000, 1));
}

#[test]
fn cancelled_unsent_message_is_dropped_and_reported_on_both_ends() {
    let mut p = pair(ControllerConfig::default(), slow());
    let s = p.client.conn.open_stream(StreamConfig::default()).unwrap();
    let now = p.now;
    let ids: Vec<_> = (0..50)
        .map(|i| {
            p.client
                .conn
                .send(now, s, Message::new(payload(10_000, i)))
                .unwrap()
        })
        .collect();
    p.drive_until(now + Duration::from_millis(20), 100_000);
    assert!(p.client.conn.cancel(ids[40]));
    assert!(
        !p.client.conn.cancel(ids[40]),
        "second cancel finds nothing"
    );
    p.drive_bounded(1_000_000);
    assert_eq!(p.server.received.len(), 49);
    assert!(p.server.received.iter().all(|r| r.seq != 40));
    assert!(p.server.events.iter().any(|e| matches!(e,
        Event::PeerCancelled(c) if c.seq == 40 && c.freed == 0 && c.reason == CancelReason::Application)));
    assert!(p
        .client
        .events
        .iter()
        .any(|e| matches!(e, Event::Cancelled { id, sent: 0, .. } if *id == ids[40])));
    assert_eq!(p.client.conn.stats().cancelled_unsent, 1);
    assert!(
        !p.client.conn.cancel(ids[0]),
        "already written messages cannot be cancelled"
    );
}

#[test]
fn cancelled_partial_message_aborts_reassembly() {
    let mut p = pair(ControllerConfig::default(), slow());
    let s = p.client.conn.open_stream(StreamConfig::default()).unwrap();
    let t0 = p.now;
    let big = p
        .client
        .conn
        .send(t0, s, Message::new(payload(500_000, 3)))
        .unwrap();
    p.drive_until(t0 + Duration::from_millis(60), 100_000);
    assert!(p.server.conn.recv_memory() > 0);
    assert!(p.client.conn.cancel(big));
    p.drive_bounded(1_000_000);
    let freed = p.server.events.iter().find_map(|e| match e {
        Event::PeerCancelled(c) => Some(c.freed),
        _ => None,
    });
    assert!(freed.is_some_and(|f| f > 0), "{freed:?}");
    assert_eq!(p.server.conn.partial_messages(), 0);
    assert_eq!(p.server.conn.recv_memory(), 0);
    assert!(p.server.received.is_empty());
    assert_eq!(p.client.conn.stats().cancelled_partial, 1);
    // the channel goes on
    p.client
        .conn
        .send(p.now, s, Message::new(payload(20_000, 4)))
        .unwrap();
    p.drive_bounded(1_000_000);
    assert_eq!(p.server.received.len(), 1);
    assert_eq!(p.server.received[0].data, payload(20_000, 4));
}

#[test]
fn deadlines_expire_messages_not_yet_written() {
    let mut p = pair(ControllerConfig::default(), slow());
    let s = p.client.conn.open_stream(StreamConfig::default()).unwrap();
    let t0 = p.now;
    let deadline = t0 + Duration::from_millis(100);
    for i in 0..20 {
        p.client
            .conn
            .send(t0, s, Message::new(payload(50_000, i)).deadline(deadline))
            .unwrap();
    }
    p.drive_bounded(1_000_000);
    let expired: Vec<u64> = p
        .client
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Cancelled {
                id,
                reason: CancelReason::Expired,
                ..
            } => Some(id.seq),
            _ => None,
        })
        .collect();
    let received: Vec<u64> = p.server.received.iter().map(|r| r.seq).collect();
    // 1 MB/s for 100 ms: about two of the 50 kB messages make it.
    assert!((1..=3).contains(&received.len()), "{received:?}");
    assert_eq!(expired.len() + received.len(), 20);
    assert!(received.iter().all(|s| !expired.contains(s)));
    let st = p.client.conn.stats();
    assert_eq!(st.expired_unsent + st.expired_partial, expired.len() as u64);
    assert!(p.client.conn.poll_timeout().is_none());
}

#[test]
fn staging_stops_at_the_kernel_room_so_deadlines_still_reach_the_rest() {
    let mut p = pair(ControllerConfig::Unlimited, slow());
    let s = p.client.conn.open_stream(StreamConfig::default()).unwrap();
    let t0 = p.now;
    for i in 0..4 {
        let m = Message::new(payload(50_000, i)).deadline(t0 + Duration::from_millis(100));
        p.client.conn.send(t0, s, m).unwrap();
    }
    let tcp = crate::TcpState {
        mss: 1448,
        ..crate::TcpState::default()
    };
    // The kernel takes 3000 bytes: the rest stays queued, not staged.
    p.client.conn.set_kernel_room(Some(3000));
    p.client.conn.poll_transmit(t0, &tcp);
    let staged = p.client.conn.staged_len();
    assert!((1000..=3100).contains(&staged), "{staged}");
    // A full kernel still gets one MSS, so a writable socket always makes progress.
    p.client.conn.handle_written(t0, staged as usize);
    p.client.conn.set_kernel_room(Some(0));
    p.client.conn.poll_transmit(t0, &tcp);
    let one = p.client.conn.staged_len();
    assert!((1..=1448 + 64).contains(&one), "{one}");
    // While the kernel refuses what is staged, nothing joins it, whatever the room says.
    p.client.conn.set_kernel_room(Some(20_000));
    p.client.conn.poll_transmit(t0, &tcp);
    assert_eq!(p.client.conn.staged_len(), one);
    // Past the deadline every message not yet staged is withdrawn.
    p.client
        .conn
        .poll_transmit(t0 + Duration::from_millis(101), &tcp);
    let expired_unsent = p.client.conn.stats().expired_unsent;
    assert_eq!(expired_unsent, 3, "{:?}", p.client.conn.stats());
    // Unknown room: the old behaviour, a whole batch.
    p.client.conn.set_kernel_room(None);
    let m = Message::new(payload(200_000, 9));
    p.client.conn.send(t0, s, m).unwrap();
    p.client
        .conn
        .poll_transmit(t0 + Duration::from_millis(102), &tcp);
    assert!(p.client.conn.staged_len() > 100_000);
}

/// Bytes received per stream among messages received in `[from, to)`.
fn shares(p: &Pair, from: std::time::Instant, to: std::time::Instant) -> BTreeMap<u64, f64> {
    let mut m = BTreeMap::new();
    for r in &p.server.received {
        if r.received_at >= from && r.received_at < to {
            *m.entry(r.stream).or_insert(0.0) += r.data.len() as f64;
        }
    }
    m
}

fn fill(p: &mut Pair, stream: u64, n: usize) {
    let now = p.now;
    for i in 0..n {
        p.client
            .conn
            .send(now, stream, Message::new(payload(1000, i as u8)))
            .unwrap();
    }
}

fn fast() -> LinkParams {
    LinkParams {
        rate: 2_000_000,
        delay: Duration::from_millis(5),
        cwnd: 20,
        ..LinkParams::default()
    }
}

#[test]
fn fair_start_new_stream_shares_equally_without_starving_the_old() {
    let mut p = pair(ControllerConfig::default(), fast());
    let a = p.client.conn.open_stream(StreamConfig::default()).unwrap();
    fill(&mut p, a, 4000);
    let t0 = p.now;
    p.drive_until(t0 + Duration::from_millis(500), 1_000_000);
    let b = p.client.conn.open_stream(StreamConfig::default()).unwrap();
    fill(&mut p, b, 4000);
    let t1 = p.now + Duration::from_millis(50);
    p.drive_until(t1 + Duration::from_millis(500), 1_000_000);
    let s = shares(&p, t1, p.now);
    let ratio = s[&b] / (s[&a] + s[&b]);
    assert!((ratio - 0.5).abs() < 0.025, "stream b got {ratio}");
}

#[test]
fn use_it_or_lose_it_idle_stream_saves_no_credit() {
    let mut p = pair(ControllerConfig::default(), fast());
    let a = p.client.conn.open_stream(StreamConfig::default()).unwrap();
    let b = p.client.conn.open_stream(StreamConfig::default()).unwrap();
    fill(&mut p, a, 4000);
    fill(&mut p, b, 10);
    let t0 = p.now;
    p.drive_until(t0 + Duration::from_millis(500), 1_000_000);
    // b went idle after 10 messages while a kept sending; now b has data again
    fill(&mut p, b, 4000);
    let t1 = p.now;
    p.drive_until(t1 + Duration::from_millis(100), 1_000_000);
    let s = shares(&p, t1 + Duration::from_millis(20), p.now);
    let ratio = s[&b] / (s[&a] + s[&b]);
    assert!(
        (ratio - 0.5).abs() < 0.05,
        "stream b got {ratio} right after reactivation"
    );
}

fn weighted_run(fairness: Fairness, weights: [f64; 3], costs: [f64; 3]) -> [f64; 3] {
    let c = Config {
        fairness,
        ..cfg(ControllerConfig::default())
    };
    let mut p = Pair::new(c, Config::default(), fast());
    let ids: Vec<u64> = weights
        .iter()
        .map(|&w| {
            p.client
                .conn
                .open_stream(StreamConfig { weight: w })
                .unwrap()
        })
        .collect();
    let now = p.now;
    for (k, &id) in ids.iter().enumerate() {
        for i in 0..2500 {
            p.client
                .conn
                .send(now, id, Message::new(payload(1000, i as u8)).cost(costs[k]))
                .unwrap();
        }
    }
    let t0 = p.now + Duration::from_millis(50);
    p.drive_until(t0 + Duration::from_millis(2000), 10_000_000);
    let s = shares(&p, t0, p.now);
    let total: f64 = s.values().sum();
    [s[&ids[0]] / total, s[&ids[1]] / total, s[&ids[2]] / total]
}

#[test]
fn weighted_shares_within_five_percent_over_a_long_run() {
    let got = weighted_run(Fairness::Resource, [1.0, 2.0, 3.0], [1.0; 3]);
    for (g, want) in got.iter().zip([1.0 / 6.0, 2.0 / 6.0, 3.0 / 6.0]) {
        assert!(
            (g / want - 1.0).abs() < 0.05,
            "share {g} want {want} ({got:?})"
        );
    }
}

#[test]
fn quality_fairness_equalises_cost_not_bytes() {
    // Equal weights; stream 0's messages cost 3x: it gets a third of the bytes of the others.
    let got = weighted_run(Fairness::Quality, [1.0; 3], [3.0, 1.0, 1.0]);
    for (g, want) in got.iter().zip([1.0 / 7.0, 3.0 / 7.0, 3.0 / 7.0]) {
        assert!(
            (g / want - 1.0).abs() < 0.05,
            "share {g} want {want} ({got:?})"
        );
    }
}

fn bulk_outq(controller: ControllerConfig, link: LinkParams) -> (u64, f64) {
    let mut p = pair(controller, link);
    let s = p.client.conn.open_stream(StreamConfig::default()).unwrap();
    fill(&mut p, s, 3000);
    let t0 = p.now;
    p.drive_until(t0 + Duration::from_millis(1000), 10_000_000);
    let bytes: f64 = p.server.received.iter().map(|r| r.data.len() as f64).sum();
    (p.c2s.max_outq, bytes / 1e6)
}

#[test]
fn min_buf_bounds_the_kernel_queue_and_keeps_throughput() {
    let link = fast();
    let (q_unl, mb_unl) = bulk_outq(ControllerConfig::Unlimited, link);
    let (q_min, mb_min) = bulk_outq(ControllerConfig::MinBuf { a: 1, b: 3 }, link);
    let limit = u64::from((link.cwnd + 3) * link.mss);
    // control frames (P-ACKs, stream opens) bypass the controller: a few bytes of slack
    assert!(q_min <= limit + 64, "MinBuf(1,3) queue {q_min} > {limit}");
    assert!(
        q_unl > 10 * limit,
        "plain TCP fills the send buffer: {q_unl}"
    );
    assert!(
        mb_min >= 0.95 * mb_unl,
        "throughput {mb_min} MB vs {mb_unl} MB"
    );
}

#[test]
fn pace_a_learns_the_path_without_kernel_information() {
    let link = LinkParams {
        rate: 2_000_000,
        delay: Duration::from_millis(10),
        cwnd: 1000,
        sndbuf: 4 << 20,
        ..LinkParams::default()
    };
    let (q_unl, mb_unl) = bulk_outq(ControllerConfig::Unlimited, link);
    let (q_pa, mb_pa) = bulk_outq(ControllerConfig::PaceA { b: 3 }, link);
    // BDP = 2 MB/s x 20 ms = 40 kB
    assert!(q_pa < 120_000, "PaceA queue {q_pa}");
    assert!(q_unl > 1_000_000, "{q_unl}");
    assert!(
        mb_pa >= 0.9 * mb_unl,
        "throughput {mb_pa} MB vs {mb_unl} MB"
    );
}

#[test]
fn decisions_are_recorded_when_asked() {
    let mut p = pair(ControllerConfig::default(), fast());
    p.client.conn.record_decisions(16);
    let s = p.client.conn.open_stream(StreamConfig::default()).unwrap();
    fill(&mut p, s, 100);
    p.drive_bounded(100_000);
    let d = p.client.conn.drain_decisions();
    assert_eq!(d.len(), 16);
    assert!(d.iter().all(|r| r.decision.limit == 23_000));
}

#[test]
fn closing_a_stream_flushes_its_queue_first() {
    let mut p = pair(ControllerConfig::default(), slow());
    let s = p.client.conn.open_stream(StreamConfig::default()).unwrap();
    fill(&mut p, s, 20);
    p.client.conn.close_stream(s).unwrap();
    let now = p.now;
    assert_eq!(
        p.client.conn.send(now, s, Message::new(payload(10, 0))),
        Err(crate::SendError::StreamClosing(s))
    );
    p.drive_bounded(1_000_000);
    assert_eq!(p.server.received.len(), 20);
    let opened = p
        .server
        .events
        .iter()
        .position(|e| matches!(e, Event::StreamOpened { stream, .. } if *stream == s));
    let closed = p
        .server
        .events
        .iter()
        .position(|e| matches!(e, Event::StreamClosed { stream } if *stream == s));
    assert!(opened.unwrap() < closed.unwrap());
    assert_eq!(
        p.client.conn.send(p.now, s, Message::new(payload(10, 0))),
        Err(crate::SendError::UnknownStream(s))
    );
    // the server may answer on a stream the client opened, until the client closed it
    let t = p.server.conn.open_stream(StreamConfig::default()).unwrap();
    assert_eq!(t % 2, 1, "server streams are odd");
}

#[test]
fn stream_limit_is_enforced_locally() {
    let c = Config {
        max_streams: 2,
        ..cfg(ControllerConfig::default())
    };
    let mut p = Pair::new(c, Config::default(), fast());
    p.client.conn.open_stream(StreamConfig::default()).unwrap();
    p.client.conn.open_stream(StreamConfig::default()).unwrap();
    assert!(matches!(
        p.client.conn.open_stream(StreamConfig::default()),
        Err(crate::StreamError::TooManyStreams { max: 2 })
    ));
}
