//! Packet-pair probing and DBAT over the simulated kernel send queue.

use std::time::Duration;

use bytes::Bytes;

use crate::controller::DbatConfig;
use crate::sim::{LinkParams, Pair};
use crate::wire::{Hello, HelloOption, VERSION};
use crate::{Config, Connection, ControllerConfig, Event, Message, Side, StreamConfig};

/// 500 kbit/s, 100 ms one way (the paper's bottleneck has 200 ms), cwnd large enough not to
/// limit: the link is the bottleneck.
fn paper_link() -> LinkParams {
    LinkParams {
        rate: 62_500,
        delay: Duration::from_millis(100),
        cwnd: 40,
        mss: 1000,
        sndbuf: 1 << 20,
    }
}

fn dbat_pair(link: LinkParams) -> Pair {
    let client = Config {
        controller: ControllerConfig::Dbat(DbatConfig::default()),
        probe_at_start: true,
        ..Config::default()
    };
    Pair::new(client, Config::default(), link)
}

fn probed(events: &[Event]) -> Vec<crate::controller::ProbeResult> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Probed(p) => Some(*p),
            _ => None,
        })
        .collect()
}

#[test]
fn packet_pair_measures_the_bottleneck_and_the_rtt() {
    let mut p = dbat_pair(paper_link());
    let t0 = p.now;
    p.drive_until(t0 + Duration::from_secs(2), 100_000);
    let got = probed(&p.client.events);
    assert_eq!(got.len(), 1, "{:?}", p.client.events);
    let r = got[0];
    // one 1000-byte segment at 62.5 kB/s: 16 ms apart at the receiver
    assert_eq!(r.dispersion, Duration::from_millis(16));
    assert_eq!(r.second_len, 1000);
    assert_eq!(r.bandwidth, Some(62_500));
    // 200 ms of propagation plus one segment's serialisation each way (probe, report)
    let rtt = r.rtt.as_secs_f64();
    assert!((0.2..0.25).contains(&rtt), "rtt {rtt}");
    assert_eq!(p.client.conn.stats().probes_sent, 1);
    // the server (no probe_at_start) sent none, and nothing else was disturbed
    assert!(probed(&p.server.events).is_empty());
    assert!(p.client.conn.error().is_none() && p.server.conn.error().is_none());
}

#[test]
fn a_peer_that_does_not_announce_probe_answers_gets_no_probe() {
    let now = std::time::Instant::now();
    let mut c = Connection::new(Config::default(), Side::Client, now).unwrap();
    assert!(!c.request_probe(), "no hello yet");
    // an older peer: its hello lacks key 6
    let mut hello = Vec::new();
    Hello {
        version: VERSION,
        options: vec![],
    }
    .encode(&mut hello);
    c.handle_bytes(now, &hello).unwrap();
    assert!(!c.request_probe());
    let mut c = Connection::new(Config::default(), Side::Client, now).unwrap();
    let mut hello = Vec::new();
    Hello {
        version: VERSION,
        options: vec![HelloOption::AnswersProbes(1)],
    }
    .encode(&mut hello);
    c.handle_bytes(now, &hello).unwrap();
    assert!(c.request_probe());
}

/// A 40 kB/s stream on a 62.5 kB/s path; at 10 s the path drops to 25 kB/s (a competing flow
/// arrives); at 16 s the application switches down to 10 kB/s. DBAT signals the onset within
/// a few RTTs of the drop, repeats it while the queue keeps doubling (the application has not
/// answered yet), and clears after the switch.
#[test]
fn dbat_signals_congestion_on_a_rate_drop_and_clears_after_a_switch_down() {
    let mut p = dbat_pair(paper_link());
    let s = p.client.conn.open_stream(StreamConfig::default()).unwrap();
    let t0 = p.now;
    let frame = Duration::from_millis(100);
    let mut rate = 40_000u64;
    p.client.conn.set_stream_rate(rate);
    // (seconds since start, onset, threshold) of each signal, stamped when seen
    let mut signals = Vec::new();
    let mut seen = 0;
    let mut collect = |p: &Pair, signals: &mut Vec<(f64, bool, u64)>| {
        for e in &p.client.events[seen..] {
            if let Event::Congestion {
                onset, threshold, ..
            } = e
            {
                let at = p.now.saturating_duration_since(t0).as_secs_f64();
                signals.push((at, *onset, *threshold));
            }
        }
        seen = p.client.events.len();
    };
    for i in 0..300u32 {
        let t = t0 + frame * i;
        p.drive_until(t, 1_000_000);
        collect(&p, &mut signals);
        if t >= t0 + Duration::from_secs(10) {
            p.c2s.params.rate = 25_000;
        }
        if t >= t0 + Duration::from_secs(16) && rate != 10_000 {
            rate = 10_000;
            p.client.conn.set_stream_rate(rate);
        }
        let bytes = (rate / 10) as usize;
        p.client
            .conn
            .send(p.now, s, Message::new(Bytes::from(vec![7u8; bytes])))
            .unwrap();
    }
    eprintln!("DBAT over TCP, signals (seconds, onset, threshold): {signals:?}");
    let (last, onsets) = signals.split_last().expect("signals");
    assert!(!last.1 && onsets.iter().all(|s| s.1), "{signals:?}");
    assert!(
        onsets.len() >= 2 && onsets.iter().all(|s| s.0 < 16.0),
        "repeated only before the switch: {signals:?}"
    );
    // threshold = min(probed 62.5 kB/s, 2 × the 25 kB/s share) × weighted RTT (≥ 200 ms)
    assert!(signals[0].2 >= 10_000, "{signals:?}");
    let (onset, clear) = (signals[0].0, last.0);
    assert!((10.0..13.0).contains(&onset), "onset at {onset}");
    assert!(clear > 16.0, "cleared at {clear}");
}

/// Reports for no probe of ours, or for an unknown id, are ignored and counted; a second probe
/// packet without its first is not timed; the channel goes on.
#[test]
fn stray_probe_reports_and_half_pairs_are_ignored_and_counted() {
    use crate::wire::Frame;
    let now = std::time::Instant::now();
    let mut c = Connection::new(Config::default(), Side::Client, now).unwrap();
    let mut bytes = Vec::new();
    Hello {
        version: VERSION,
        options: vec![HelloOption::AnswersProbes(1)],
    }
    .encode(&mut bytes);
    for id in [0, 7] {
        Frame::ProbeReport {
            id,
            dispersion_us: 1000,
            second_len: 1448,
        }
        .encode(&mut bytes);
    }
    // the second packet of a pair whose first never came: nothing to answer
    Frame::probe_of_len(3, 1, 200).encode(&mut bytes);
    c.handle_bytes(now, &bytes).unwrap();
    assert_eq!(c.stats().probe_reports_ignored, 2);
    let mut events = Vec::new();
    while let Some(e) = c.poll_event() {
        events.push(e);
    }
    assert!(probed(&events).is_empty(), "{events:?}");
    assert!(c.error().is_none());
    // an oversized probe pad is a decode error naming the field
    let mut bad = Vec::new();
    bad.push(0x0c);
    for v in [1u64, 0, crate::wire::MAX_PROBE_PAD + 1] {
        crate::wire::varint::put(&mut bad, v);
    }
    let e = c.handle_bytes(now, &bad).unwrap_err();
    assert!(e.to_string().contains("probe.pad_len"), "{e}");
}
