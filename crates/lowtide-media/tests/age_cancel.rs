//! Age cancellation ([`Conference::age_cancel`]) in simulated time: a conference at twice
//! the link's rate through MIN_BUF(1, 3) on lowtide's sans-IO core and its simulated kernel
//! (`lowtide_proto::sim`). With a budget, no enhancement ADU reaches the kernel later than
//! the budget after capture and the base layer loses nothing; without one, enhancement ADUs
//! do reach it later (what the budget is for).

use std::collections::HashMap;
use std::time::Duration;

use lowtide::proto::sim::{LinkParams, Pair};
use lowtide::proto::{CancelReason, Config, ControllerConfig, Event, Message, StreamConfig};
use lowtide_media::conference::{importance, Conference, ADUS_PER_FRAME};

/// What happened to the ADUs of one run, by layer.
#[derive(Debug, Default)]
struct Fates {
    /// Capture to the last byte in the kernel, ms, of every ADU written whole.
    written_ms: Vec<Vec<f64>>,
    /// ADUs that expired before they were written whole.
    expired: Vec<u32>,
}

fn run(conf: Conference, frames: u32) -> Fates {
    let link = LinkParams {
        rate: 250_000, // 2 Mbit/s: half the conference's 4
        delay: Duration::from_millis(15),
        cwnd: 6,
        mss: 1448,
        ..LinkParams::default()
    };
    let minbuf = Config {
        controller: ControllerConfig::MinBuf { a: 1, b: 3 },
        ..Config::default()
    };
    let mut pair = Pair::new(minbuf, Config::default(), link);
    let s = pair
        .client
        .conn
        .open_stream(StreamConfig::default())
        .unwrap();
    let start = pair.now;
    let mut adus = HashMap::new();
    for frame in 0..frames {
        let capture = start + Duration::from_secs_f64(conf.capture_s(frame));
        pair.drive_until(capture, 1_000_000);
        for layer in 0..ADUS_PER_FRAME {
            let msg = Message::new(vec![layer; conf.adu_bytes()])
                .importance(importance(layer))
                .deadline(conf.deadline(capture, layer));
            let id = pair.client.conn.send(pair.now, s, msg).unwrap();
            adus.insert(id, (capture, usize::from(layer)));
        }
    }
    pair.drive_until(pair.now + conf.threshold * 2, 10_000_000);
    let layers = usize::from(ADUS_PER_FRAME);
    let mut fates = Fates {
        written_ms: vec![vec![]; layers],
        expired: vec![0; layers],
    };
    for e in &pair.client.events {
        match e {
            Event::Written { id, times } => {
                let (capture, layer) = adus[id];
                let at = times.last_write.expect("written whole");
                fates.written_ms[layer].push((at - capture).as_secs_f64() * 1e3);
            }
            Event::Cancelled {
                id,
                reason: CancelReason::Expired,
                ..
            } => fates.expired[adus[id].1] += 1,
            _ => {}
        }
    }
    fates
}

fn worst(ms: &[f64]) -> f64 {
    ms.iter().copied().fold(0.0, f64::max)
}

#[test]
fn enhancement_adus_older_than_the_budget_never_reach_the_kernel() {
    let frames = 90; // 3 s
    let plain = Conference::paceline(Duration::from_secs(1));
    let budget = Duration::from_millis(40);
    let aged = Conference {
        age_cancel: Some(budget),
        ..plain
    };
    let with = run(aged, frames);
    let without = run(plain, frames);
    let enhancement = |f: &Fates| -> Vec<f64> { f.written_ms[1..].concat() };
    // With the budget: every enhancement ADU written whole was in the kernel within it; the
    // overload is shed as aged ADUs, the base layer loses none and waits no longer.
    assert!(
        worst(&enhancement(&with)) <= 40.0 + 1e-6,
        "{}",
        worst(&enhancement(&with))
    );
    assert_eq!(with.expired[0], 0, "base ADUs keep the threshold");
    assert_eq!(with.written_ms[0].len(), frames as usize);
    assert!(with.expired[1..].iter().sum::<u32>() > 0);
    assert!(
        !enhancement(&with).is_empty(),
        "the budget leaves room for some layers"
    );
    // Without it the same overload writes enhancement ADUs far later than the budget.
    assert!(
        worst(&enhancement(&without)) > 100.0,
        "{}",
        worst(&enhancement(&without))
    );
    assert!(worst(&with.written_ms[0]) <= worst(&without.written_ms[0]) + 1e-6);
}
