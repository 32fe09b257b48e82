//! Property tests: nothing lost or duplicated unless cancelled; bad bytes never panic.

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;

use crate::sim::{LinkParams, Pair};
use crate::wire::{Frame, Hello, VERSION};
use crate::{
    CancelReason, Config, Connection, ControllerConfig, Event, Message, Side, StreamConfig,
};

#[derive(Debug, Clone)]
struct Op {
    stream: usize,
    size: usize,
    importance: u8,
    cancel_after_ms: Option<u64>,
    deadline_ms: Option<u64>,
}

fn op() -> impl Strategy<Value = Op> {
    (
        0..3usize,
        0..30_000usize,
        0..4u8,
        proptest::option::of(0..40u64),
        proptest::option::of(1..80u64),
    )
        .prop_map(
            |(stream, size, importance, cancel_after_ms, deadline_ms)| Op {
                stream,
                size,
                importance,
                cancel_after_ms,
                deadline_ms,
            },
        )
}

fn controller() -> impl Strategy<Value = ControllerConfig> {
    prop_oneof![
        Just(ControllerConfig::Unlimited),
        Just(ControllerConfig::MinBuf { a: 1, b: 3 }),
        Just(ControllerConfig::MinBuf { a: 1, b: 0 }),
        Just(ControllerConfig::PaceA { b: 3 }),
    ]
}

fn body(stream: usize, seq: usize, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i ^ (seq * 7) ^ (stream * 13)) as u8)
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_message_arrives_once_intact_unless_cancelled(
        ops in proptest::collection::vec(op(), 1..40),
        ctrl in controller(),
        chunk_fraction in 0.1f64..1.5,
    ) {
        let cfg = Config { controller: ctrl, chunk_fraction, ..Config::default() };
        let link = LinkParams { rate: 1_000_000, delay: Duration::from_millis(3), cwnd: 8, ..LinkParams::default() };
        let mut p = Pair::new(cfg, Config::default(), link);
        let streams: Vec<u64> = (0..3).map(|_| p.client.conn.open_stream(StreamConfig::default()).unwrap()).collect();
        let t0 = p.now;
        let mut sent = BTreeMap::new();
        let mut cancels = Vec::new();
        for (k, o) in ops.iter().enumerate() {
            let mut m = Message::new(body(o.stream, k, o.size)).importance(o.importance);
            if let Some(d) = o.deadline_ms {
                m = m.deadline(t0 + Duration::from_millis(d));
            }
            let id = p.client.conn.send(t0, streams[o.stream], m).unwrap();
            sent.insert((id.stream, id.seq), (o.stream, k, o.size));
            if let Some(c) = o.cancel_after_ms {
                cancels.push((c, id));
            }
        }
        cancels.sort();
        let mut cancelled_ok = 0;
        for (at, id) in cancels {
            p.drive_until(t0 + Duration::from_millis(at), 1_000_000);
            if p.client.conn.cancel(id) { cancelled_ok += 1; }
        }
        p.drive_bounded(2_000_000);

        let mut withdrawn = BTreeMap::new();
        for e in &p.client.events {
            if let Event::Cancelled { id, reason, .. } = e {
                prop_assert!(withdrawn.insert((id.stream, id.seq), *reason).is_none(), "withdrawn twice");
            }
        }
        prop_assert_eq!(withdrawn.values().filter(|r| **r == CancelReason::Application).count(), cancelled_ok);
        let mut seen = BTreeMap::new();
        for r in &p.server.received {
            let key = (r.stream, r.seq);
            prop_assert!(seen.insert(key, ()).is_none(), "duplicate {:?}", key);
            prop_assert!(!withdrawn.contains_key(&key), "withdrawn message delivered {:?}", key);
            let (s, k, n) = sent[&key];
            prop_assert_eq!(&r.data[..], &body(s, k, n)[..]);
        }
        prop_assert_eq!(seen.len() + withdrawn.len(), sent.len(), "lost messages");
        let peer_cancels = p.server.events.iter().filter(|e| matches!(e, Event::PeerCancelled(_))).count();
        prop_assert_eq!(peer_cancels, withdrawn.len());
        prop_assert_eq!(p.server.conn.recv_memory(), 0);
        prop_assert!(p.client.conn.error().is_none() && p.server.conn.error().is_none());
    }

    #[test]
    fn reads_completed_in_place_deliver_every_message_once_intact(
        sizes in proptest::collection::vec(0..150_000usize, 1..10),
        reads in proptest::collection::vec((1..100_000usize, any::<bool>()), 1..30),
    ) {
        let now = std::time::Instant::now();
        let cfg = Config { controller: ControllerConfig::Unlimited, ..Config::default() };
        let mut tx = Connection::new(cfg, Side::Client, now).unwrap();
        let mut rx = Connection::new(Config::default(), Side::Server, now).unwrap();
        let s = tx.open_stream(StreamConfig::default()).unwrap();
        for (k, &n) in sizes.iter().enumerate() {
            tx.send(now, s, Message::new(body(0, k, n))).unwrap();
        }
        let mut wire = Vec::new();
        while tx.queued_bytes() > 0 || tx.staged_len() > 0 {
            tx.poll_transmit(now, &crate::TcpState::default());
            let staged: Vec<u8> = tx.transmit_segments().flatten().copied().collect();
            tx.handle_written(now, staged.len());
            wire.extend(staged);
        }
        // Reads of random sizes appended in place; sometimes the driver has no room left and
        // moves the incomplete frame to a new buffer first.
        let mut at = 0;
        let mut i = 0;
        while at < wire.len() {
            let (len, moved) = reads[i % reads.len()];
            i += 1;
            let (mut buf, _) = rx.take_read_buf();
            if moved {
                buf = bytes::BytesMut::from(&buf[..]);
            }
            let n = len.min(wire.len() - at);
            buf.extend_from_slice(&wire[at..at + n]);
            at += n;
            rx.handle_read_buf(now, buf, n).unwrap();
            prop_assert!(rx.recv_memory() <= Config::default().max_reassembly_bytes);
        }
        let got: Vec<_> = std::iter::from_fn(|| rx.poll_message()).collect();
        prop_assert_eq!(got.len(), sizes.len());
        for (k, m) in got.iter().enumerate() {
            prop_assert_eq!(m.seq, k as u64);
            prop_assert_eq!(&m.data[..], &body(0, k, sizes[k])[..]);
        }
        prop_assert_eq!(rx.recv_memory(), 0);
        prop_assert!(rx.take_read_buf().0.is_empty());
    }

    #[test]
    fn decoder_on_random_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let mut pos = 0;
        while pos < bytes.len() {
            match Frame::decode(&bytes[pos..], 4096) {
                Ok(Some((_, n))) => { prop_assert!(n > 0); pos += n; }
                Ok(None) | Err(_) => break,
            }
        }
        let _ = Hello::decode(&bytes);
    }

    #[test]
    fn connection_on_random_frames_errs_without_panic_and_stays_bounded(
        bytes in proptest::collection::vec(any::<u8>(), 0..4096),
        splits in proptest::collection::vec(1..64usize, 1..20),
    ) {
        let cfg = Config { max_reassembly_bytes: 8192, max_chunk_len: 1024, ..Config::default() };
        let now = std::time::Instant::now();
        let mut c = Connection::new(cfg, Side::Server, now).unwrap();
        let mut input = Vec::new();
        Hello { version: VERSION, options: vec![] }.encode(&mut input);
        input.extend(&bytes);
        let mut rest = &input[..];
        let mut i = 0;
        while !rest.is_empty() {
            let n = splits[i % splits.len()].min(rest.len());
            let r = c.handle_bytes(now, &rest[..n]);
            prop_assert!(c.recv_memory() <= 8192);
            if r.is_err() {
                prop_assert!(c.is_closed());
                break;
            }
            rest = &rest[n..];
            i += 1;
        }
    }
}
