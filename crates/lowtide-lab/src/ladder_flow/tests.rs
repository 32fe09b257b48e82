use super::server::tcp_capacity_bps;
use super::wire::{decode_report, encode_report};
use std::time::{Duration, Instant};

use lowtide_media::ladder::dbat_rule::{DbatRule, DbatRuleConfig};
use lowtide_media::ladder::server_policy::{
    hasan_ladder, ClientReport, ServerPolicy, ServerSignal,
};

use super::*;

#[test]
fn a_repair_in_the_interval_keeps_the_dbat_rule_from_going_up_for_its_wait() {
    let srtt = Duration::from_millis(780);
    // the lab's DBAT TCP at 120 kbit/s: a window of 25 segments, 371 kbit/s by the window
    assert_eq!(
        tcp_capacity_bps(25, 1448, srtt, false, 120_000),
        Some(371_282)
    );
    assert_eq!(
        tcp_capacity_bps(25, 1448, srtt, true, 120_000),
        Some(120_000)
    );
    assert_eq!(
        tcp_capacity_bps(25, 1448, Duration::ZERO, false, 120_000),
        None
    );
    // Reports every second at 120 kbit/s (rung 1), the window's estimate 371 kbit/s, one
    // repair at 10 s: the rule goes up to 240 only a wait after the repair, not before.
    let t0 = Instant::now();
    let cfg = DbatRuleConfig::default();
    let mut rule = DbatRule::new(hasan_ladder(), 1, cfg, t0).unwrap();
    let mut up_at = None;
    for s in 1..=60u64 {
        let bps = tcp_capacity_bps(25, 1448, srtt, s == 10, 120_000).unwrap();
        let at = t0 + Duration::from_secs(s);
        if rule
            .on_signal(at, &ServerSignal::Capacity { bps })
            .is_some()
        {
            up_at.get_or_insert(s);
        }
    }
    let without = {
        let mut rule = DbatRule::new(hasan_ladder(), 1, cfg, t0).unwrap();
        (1..=60u64).find(|&s| {
            let at = t0 + Duration::from_secs(s);
            let bps = tcp_capacity_bps(25, 1448, srtt, false, 120_000).unwrap();
            rule.on_signal(at, &ServerSignal::Capacity { bps })
                .is_some()
        })
    };
    let (with, without) = (up_at.expect("up after the wait"), without.expect("up"));
    assert!(
        with > 10 + 19 && with > without,
        "with {with}, without {without}"
    );
}

#[test]
fn reports_round_trip_and_garbage_is_refused() {
    let r = ClientReport {
        frames_expected: 25,
        frames_received: 20,
        rebuffers: 1,
        bytes: 40_000,
        duration_us: 1_000_000,
    };
    assert_eq!(decode_report(&encode_report(&r)), Some(r));
    assert_eq!(decode_report(b"LTR1"), None);
    let mut bad = encode_report(&r);
    bad[0] = b'X';
    assert_eq!(decode_report(&bad), None);
    // more received than expected cannot be true
    let mut lie = r;
    lie.frames_received = 30;
    assert_eq!(decode_report(&encode_report(&lie)), None);
}

#[test]
fn running_dry_after_the_last_frame_is_the_end_not_a_rebuffer() {
    let f = |t_s| FrameSent {
        t_s,
        rate_bps: 320_000,
        bytes: 1600,
        accepted: true,
    };
    let sent = LadderSent {
        frames: vec![f(30.0), f(60.0), f(120.0)],
        ..LadderSent::default()
    };
    let seen = LadderSeen {
        arrivals: vec![(30.3, 1600), (60.4, 1600), (120.2, 1600)],
        ..LadderSeen::default()
    };
    let record = |rebuffers_s: Vec<f64>| LadderRecord {
        rebuffers_s,
        ..LadderRecord::default()
    };
    // a stall mid-stream stays; emptying after the last frame arrived is the end
    let r = split_stream_end(record(vec![45.0, 120.9]), &sent, &seen);
    assert_eq!(
        (r.rebuffers_s, r.ran_dry_at_end_s),
        (vec![45.0], Some(120.9))
    );
    // emptying after the last frame was made, while it was still on its way, is a stall
    let r = split_stream_end(record(vec![120.1]), &sent, &seen);
    assert_eq!((r.rebuffers_s, r.ran_dry_at_end_s), (vec![120.1], None));
    // frames that never arrived: emptying before the last one was made is a stall
    let lost = LadderSeen {
        arrivals: vec![(30.3, 1600)],
        ..LadderSeen::default()
    };
    let r = split_stream_end(record(vec![40.0]), &sent, &lost);
    assert_eq!((r.rebuffers_s, r.ran_dry_at_end_s), (vec![40.0], None));
}
