use super::*;
use crate::controller::{AppProgress, LatencyController, TcpState, CA_RECOVERY};

fn probe(rtt_ms: u64, bw: u64) -> ProbeResult {
    ProbeResult {
        rtt: Duration::from_millis(rtt_ms),
        dispersion: Duration::from_micros(1),
        second_len: 1448,
        bandwidth: Some(bw),
    }
}

#[test]
fn slow_start_allowance_follows_the_doubling_rule() {
    let mut d = Dbat::new(DbatConfig::default()).unwrap();
    // 640 kbit/s = 80_000 B/s; iw 10·1000 B per 400 ms = 25_000 B/s; ratio 3.2 → 2 RTTs.
    d.set_stream_rate(80_000);
    let rtt = Duration::from_millis(400);
    assert_eq!(d.slow_start_time(1000, rtt), Duration::from_millis(800));
    assert_eq!(d.slow_start_allowance(1000, rtt), 64_000);
    // A rate below the initial window's: no doubling needed, the window itself.
    d.set_stream_rate(10_000);
    assert_eq!(d.slow_start_allowance(1000, rtt), 10_000);
}

#[test]
fn threshold_is_probed_bandwidth_times_weighted_rtt() {
    let mut d = Dbat::new(DbatConfig::default()).unwrap();
    d.on_probe(probe(400, 62_500));
    let srtt = Some(Duration::from_millis(500));
    assert_eq!(d.threshold(srtt, 1, 1448), 31_250);
    // Without a transport RTT the probe's RTT is used.
    assert_eq!(d.threshold(None, 1, 1448), 25_000);
}

/// Simulated time: a stream at 40 kB/s into a path that carries 62.5 kB/s, then 25 kB/s.
#[test]
fn signal_fires_when_the_smoothed_queue_crosses_and_clears_below() {
    let mut d = Dbat::new(DbatConfig::default()).unwrap();
    d.set_stream_rate(40_000);
    d.on_probe(probe(400, 62_500));
    let t0 = Instant::now();
    let rtt = Some(Duration::from_millis(400));
    let mut queue = 0.0f64;
    let mut signals = Vec::new();
    let step = Duration::from_millis(10);
    for i in 1..=3000u32 {
        let now = t0 + step * i;
        let secs = f64::from(i) * 0.01;
        // slow start for 1 s, then 62.5 kB/s until 10 s, 25 kB/s until 20 s, then 62.5.
        let drain = match secs {
            s if s < 1.0 => 20_000.0,
            s if s < 10.0 => 62_500.0,
            s if s < 20.0 => 25_000.0,
            _ => 62_500.0,
        };
        // 400 B per 10 ms in; what the path drains out, down to what is in flight.
        queue = (queue + 400.0 - drain * 0.01).max(8_000.0f64.min(queue + 400.0));
        d.on_queue(now, queue as u64, rtt, 40_000, 1448);
        while let Some(s) = d.poll_signal() {
            signals.push((secs, s));
        }
    }
    assert!(!d.in_slow_start());
    let (&(t_off, off), onsets) = signals.split_last().unwrap();
    let (t_on, on) = onsets[0];
    assert!(on.onset && on.threshold == 25_000);
    // the queue grows 15 kB/s from 8 kB past 10 s and crosses 25 kB near 11.1 s; the
    // average lags a ramp by τ = 2 RTTs = 0.8 s.
    assert!((11.1..12.5).contains(&t_on), "onset at {t_on}");
    // no answer from the application: the onset repeats as the average doubles
    assert!(
        onsets.iter().all(|(t, s)| s.onset && *t < 20.0),
        "{signals:?}"
    );
    for w in onsets.windows(2) {
        assert!(w[1].1.queue >= 2 * w[0].1.queue, "{signals:?}");
    }
    assert!(!off.onset && off.queue < 12_500);
    assert!(t_off > 20.0, "cleared at {t_off}");
}

#[test]
fn after_slow_start_the_threshold_follows_the_streams_share_not_the_bottleneck() {
    let mut d = Dbat::new(DbatConfig::default()).unwrap();
    d.set_stream_rate(40_000);
    d.on_probe(probe(400, 62_500));
    let t0 = Instant::now();
    let rtt = Some(Duration::from_millis(400));
    // during slow start the probe's bottleneck bandwidth counts, whatever the rate
    assert_eq!(d.threshold(rtt, 6_000, 1448), 25_000);
    d.on_queue(t0, 1000, rtt, 40_000, 1448);
    d.on_queue(t0 + Duration::from_millis(500), 1000, rtt, 40_000, 1448);
    assert!(!d.in_slow_start());
    // a bulk flow holds the stream to 6 kB/s: twice that × 400 ms, not the link's 25 kB
    assert_eq!(d.threshold(rtt, 6_000, 1448), 4_800);
    // a share above half the bottleneck leaves the probe's bound
    assert_eq!(d.threshold(rtt, 40_000, 1448), 25_000);
    // a transport faster than the stream: the probe, within twice each rate
    assert_eq!(d.threshold(rtt, 50_000, 1448), 25_000);
    d.set_stream_rate(10_000);
    assert_eq!(d.threshold(rtt, 50_000, 1448), 25_000);
    // no rate estimate yet: the probe
    assert_eq!(d.threshold(rtt, 0, 1448), 25_000);
}

#[test]
fn a_probe_below_what_the_transport_carries_does_not_pin_the_threshold_at_one_mss() {
    // The lab's DBAT TCP row: the packet pair said 1532 B/s (bulk-flow packets between
    // its two), the stream is 10 kB/s (80 kbit/s) and TCP delivers it whole.
    let mut d = Dbat::new(DbatConfig::default()).unwrap();
    d.set_stream_rate(10_000);
    d.on_probe(probe(800, 1_532));
    let t0 = Instant::now();
    let rtt = Some(Duration::from_millis(800));
    let ms = Duration::from_millis;
    d.on_queue(t0, 1_000, rtt, 37_500, 1448);
    d.on_queue(t0 + ms(900), 1_000, rtt, 37_500, 1448);
    assert!(!d.in_slow_start());
    // twice the stream's bytes in flight (10 kB/s × 0.8 s), not one MSS
    assert_eq!(d.threshold(rtt, 37_500, 1448), 16_000);
    assert_eq!(d.buffer_limit(rtt, 37_500, 1448), 32_000);
    // the queue the lab's run held (in flight plus a frame or two, 4-9 kB) is no onset
    for i in 2..100u32 {
        let q = if i % 2 == 0 { 4_000 } else { 9_000 };
        d.on_queue(t0 + ms(900) + ms(100) * i, q, rtt, 37_500, 1448);
    }
    assert_eq!(d.poll_signal(), None);
    // a transport that carries less than the stream: twice what it carries
    assert_eq!(d.threshold(rtt, 6_000, 1448), 9_600);
}

#[test]
fn onset_repeats_while_the_queue_keeps_doubling_and_clears_once() {
    let mut d = Dbat::new(DbatConfig::default()).unwrap();
    d.set_stream_rate(40_000);
    d.on_probe(probe(400, 62_500));
    let t0 = Instant::now();
    let rtt = Some(Duration::from_millis(400));
    let at = |i: u32| t0 + Duration::from_millis(100) * i;
    d.on_queue(at(0), 1000, rtt, 40_000, 1448);
    d.on_queue(at(5), 1000, rtt, 40_000, 1448);
    assert!(!d.in_slow_start());
    // the queue grows 2 kB per 100 ms for 20 s: over 25 kB, then doubling past each onset
    let mut onsets = vec![];
    for i in 6..206u32 {
        d.on_queue(at(i), u64::from(i) * 2000, rtt, 40_000, 1448);
        while let Some(s) = d.poll_signal() {
            assert!(s.onset, "{s:?}");
            onsets.push(s.queue);
        }
    }
    assert!(onsets.len() >= 3, "{onsets:?}");
    assert!(onsets[0] > 25_000 && onsets[0] < 2 * 25_000, "{onsets:?}");
    for w in onsets.windows(2) {
        assert!(w[1] >= 2 * w[0], "{onsets:?}");
    }
    // a queue that stays high after the last onset does not repeat it
    let high = onsets.last().copied().unwrap();
    for i in 206..300u32 {
        d.on_queue(at(i), high, rtt, 40_000, 1448);
    }
    assert_eq!(d.poll_signal(), None);
    // drained: one clear
    for i in 300..400u32 {
        d.on_queue(at(i), 0, rtt, 40_000, 1448);
    }
    assert_eq!(d.poll_signal().map(|s| s.onset), Some(false));
    assert_eq!(d.poll_signal(), None);
}

#[test]
fn slow_start_backlog_is_not_congestion() {
    let mut d = Dbat::new(DbatConfig::default()).unwrap();
    d.set_stream_rate(40_000);
    d.on_probe(probe(400, 62_500));
    let t0 = Instant::now();
    let rtt = Some(Duration::from_millis(400));
    // a 60 kB backlog during the first second, then it drains to 10 kB
    for i in 1..=100u32 {
        let q = if i < 50 { 60_000 } else { 10_000 };
        d.on_queue(t0 + Duration::from_millis(20) * i, q, rtt, 40_000, 1448);
    }
    assert!(!d.in_slow_start());
    assert_eq!(d.poll_signal(), None);
}

#[test]
fn controller_limits_the_kernel_to_the_phase_limit_but_never_below_a_window() {
    let mut c = DbatController::new(DbatConfig::default()).unwrap();
    c.on_probe(&probe(400, 62_500));
    let tcp = TcpState {
        cwnd: 4,
        mss: 1000,
        rtt: Duration::from_millis(400),
        ..Default::default()
    };
    let now = Instant::now();
    let d = c.decide(&tcp, &AppProgress::default(), now);
    // slow start: max(allowance, 2 × 25 kB threshold) = 50 kB
    assert_eq!(d.limit, 50_000);
    // steady with a tiny probe and a transport that delivers almost nothing: the window
    // floor (cwnd + 1 segments)
    let tcp = TcpState {
        delivery_rate: 100,
        ..tcp
    };
    let mut c = DbatController::new(DbatConfig::default()).unwrap();
    c.on_probe(&probe(400, 100));
    let queued = AppProgress {
        queued: 1,
        ..Default::default()
    };
    c.decide(&tcp, &queued, now);
    let d = c.decide(&tcp, &AppProgress::default(), now + Duration::from_secs(5));
    assert!(!c.dbat().in_slow_start());
    assert_eq!(d.limit, 5_000);
}

#[test]
fn tcp_leaving_slow_start_ends_dbats_slow_start() {
    let mut c = DbatController::new(DbatConfig::default()).unwrap();
    c.on_probe(&probe(400, 62_500));
    let mut tcp = TcpState {
        cwnd: 4,
        mss: 1000,
        rtt: Duration::from_millis(400),
        delivery_rate: 5_000,
        ssthresh: super::super::INITIAL_SSTHRESH,
        ..Default::default()
    };
    let queued = AppProgress {
        queued: 30_000,
        ..Default::default()
    };
    let t0 = Instant::now();
    c.decide(&tcp, &queued, t0);
    c.decide(&tcp, &queued, t0 + Duration::from_millis(500));
    assert!(
        c.dbat().in_slow_start(),
        "far behind the stream, still ramping"
    );
    tcp.ssthresh = 3; // a loss
    c.decide(&tcp, &queued, t0 + Duration::from_millis(600));
    assert!(!c.dbat().in_slow_start());
    // at 5 kB/s, far below the stream's 40 kB/s, with 30 kB queued (threshold: twice the
    // achieved rate × 400 ms = 4 kB): the onset at once, not after the average climbs
    let s = c.poll_signal().expect("an onset as slow start ends");
    assert_eq!((s.onset, s.queue, s.threshold), (true, 30_000, 4_000));
    assert_eq!(c.poll_signal(), None);
}

/// Leaving slow start having caught up, behind with less than the threshold queued, or by
/// DBAT's time limit, is no onset.
#[test]
fn leaving_slow_start_without_a_standing_backlog_is_no_onset() {
    let t0 = Instant::now();
    let rtt = Some(Duration::from_millis(400));
    for (queue, rate) in [(30_000, 40_000), (3_000, 5_000)] {
        let mut d = Dbat::new(DbatConfig::default()).unwrap();
        d.on_probe(probe(400, 62_500));
        d.on_queue(t0, queue, rtt, rate, 1000);
        d.transport_left_slow_start(t0 + Duration::from_millis(100));
        assert!(!d.in_slow_start());
        assert_eq!(d.poll_signal(), None, "{queue} B at {rate} B/s");
        assert_eq!(d.queue_average(), Some(0));
    }
    // DBAT's own time limit (1 doubling + 2 RTTs = 1.2 s) while far behind: the transport
    // may still be ramping, so no onset either
    let mut d = Dbat::new(DbatConfig::default()).unwrap();
    d.on_probe(probe(400, 62_500));
    d.on_queue(t0, 30_000, rtt, 5_000, 1000);
    d.on_queue(t0 + Duration::from_millis(1300), 30_000, rtt, 5_000, 1000);
    assert!(!d.in_slow_start());
    assert_eq!(d.poll_signal(), None);
}

#[test]
fn config_is_checked_with_field_names() {
    let e = Dbat::new(DbatConfig {
        smoothing_rtts: 0.0,
        ..Default::default()
    })
    .unwrap_err();
    assert_eq!(e.field, "controller.dbat.smoothing_rtts");
    let e = Dbat::new(DbatConfig {
        buffer_headroom: 0.5,
        ..Default::default()
    })
    .unwrap_err();
    assert_eq!(e.field, "controller.dbat.buffer_headroom");
    for (cfg, field) in [
        (
            DbatConfig {
                rise_growth: 0.0,
                ..Default::default()
            },
            "controller.dbat.rise_growth",
        ),
        (
            DbatConfig {
                rise_watch_rtts: f64::NAN,
                ..Default::default()
            },
            "controller.dbat.rise_watch_rtts",
        ),
    ] {
        assert_eq!(Dbat::new(cfg).unwrap_err().field, field);
    }
}

/// The lab's path in simulated time (0.9 s RTT, a 61 kB/s packet pair): a stream of
/// 1200-byte frames every 40 ms at 15 kB/s (120 kbit/s) that the path carries, steady, then
/// an up-switch at 20 s to 30 kB/s (240 kbit/s) over a path that carries `carried` B/s
/// from then on; the application goes back to 15 kB/s on an onset. Returns the signals
/// (seconds after the switch, signal) and the DBAT state.
fn rise(carried: f64) -> (Vec<(f64, CongestionSignal)>, Dbat) {
    let mut d = Dbat::new(DbatConfig::default()).unwrap();
    d.set_stream_rate(15_000);
    d.on_probe(probe(900, 61_000));
    let t0 = Instant::now();
    let rtt = Some(Duration::from_millis(900));
    let (mut queue, mut rate, mut signals) = (0.0f64, 15_000.0f64, vec![]);
    for i in 0..6000u32 {
        let (now, secs) = (t0 + Duration::from_millis(10) * i, f64::from(i) * 0.01);
        if i == 2000 {
            rate = 30_000.0;
            d.set_stream_rate(30_000);
        }
        if i % 4 == 0 {
            queue += rate * 0.04; // one frame
        }
        let path = if i < 2000 { 25_000.0 } else { carried };
        let sent = queue.min(path * 0.01);
        queue -= sent;
        d.on_queue(now, queue as u64, rtt, (path.min(rate)) as u64, 1200);
        while let Some(s) = d.poll_signal() {
            if s.onset {
                rate = 15_000.0;
                d.set_stream_rate(15_000);
            }
            signals.push((secs - 20.0, s));
        }
    }
    (signals, d)
}

/// A rung the path cannot carry (25 of 30 kB/s): the queue grows 5 kB/s and the onset
/// comes two RTTs after the switch (one to let the transport follow, one to measure),
/// with about 9 kB queued, where the average would cross the 45 kB threshold only after
/// nine seconds; back at 15 kB/s the backlog drains and the signal clears.
#[test]
fn an_up_switch_the_path_cannot_carry_is_signalled_within_two_rtts() {
    let (signals, d) = rise(25_000.0);
    assert!(!d.in_slow_start());
    let [(t_on, on), (t_off, off)] = signals[..] else {
        panic!("{signals:?}")
    };
    assert!(on.onset && !off.onset, "{signals:?}");
    assert!(
        (1.8..2.0).contains(&t_on),
        "onset {t_on} s after the switch"
    );
    assert!((7_000..11_000).contains(&on.queue), "{on:?}");
    assert_eq!(on.threshold, 45_000);
    assert!(
        (2.5..6.0).contains(&t_off),
        "cleared {t_off} s after the switch"
    );
    assert_eq!(d.rise_onsets, 1);
}

/// A rung the path carries (40 kB/s), or carries all but 5 % of (28.5 kB/s, under the 10 %
/// tolerance): no onset from the watch; the frames' sawtooth is not growth.
#[test]
fn an_up_switch_the_path_carries_is_no_onset() {
    let (signals, d) = rise(40_000.0);
    assert_eq!((signals.len(), d.rise_onsets), (0, 0), "{signals:?}");
    let (signals, d) = rise(28_500.0);
    // 1.5 kB/s of growth: only the average's crossing of the 51 kB threshold, 35 s later
    assert_eq!(d.rise_onsets, 0);
    assert!(
        signals.iter().all(|(t, s)| *t > 30.0 && s.queue > 51_000),
        "{signals:?}"
    );
}

/// Over TCP the queue holds the bytes in flight, which grow with the rate: after 10 → 15
/// kB/s at a 0.7 s RTT they climb 3.5 kB over two seconds as the window grows (1.75 kB/s,
/// above 10 % of the new rate) while nothing waits unsent. The watch reads the unsent part:
/// no onset. Fed the whole queue, it would have fired.
#[test]
fn bytes_in_flight_growing_with_an_up_switch_are_no_onset() {
    let run = |whole: bool| {
        let mut d = Dbat::new(DbatConfig::default()).unwrap();
        d.set_stream_rate(10_000);
        d.on_probe(probe(700, 60_000));
        let t0 = Instant::now();
        let rtt = Some(Duration::from_millis(700));
        for i in 0..1000u32 {
            let now = t0 + Duration::from_millis(10) * i;
            if i == 500 {
                d.set_stream_rate(15_000);
            }
            let ramp = (f64::from(i.saturating_sub(500)) / 200.0).min(1.0);
            let in_flight = (7_000.0 + 3_500.0 * ramp) as u64;
            let unsent = if whole { in_flight } else { 0 };
            d.on_queue_parts(now, in_flight, unsent, rtt, 15_000, 1448);
        }
        d.rise_onsets
    };
    assert_eq!(run(false), 0);
    assert_eq!(run(true), 1);
}

/// The lab's DBAT TCP row (`tcpinfo.csv` of a full run): 0.78 s RTT, 80 → 120 kbit/s
/// (10 → 15 kB/s) at 20 s, and 1.5 s later a segment lost at the bulk flow's full queue:
/// 0.8 s of fast-retransmit recovery in which the cut window carries 8 kB/s, so the unsent
/// queue grows 7 kB/s. After it the path carries `carried` B/s. `tell`: the transport's
/// repair is reported (`on_transport_repair`). Returns the onsets (seconds after the
/// switch) and the DBAT state.
fn rise_with_repair(carried: f64, tell: bool) -> (Vec<f64>, Dbat) {
    let mut d = Dbat::new(DbatConfig::default()).unwrap();
    d.set_stream_rate(10_000);
    d.on_probe(probe(780, 61_000));
    let t0 = Instant::now();
    let rtt = Some(Duration::from_millis(780));
    let (mut unsent, mut rate, mut onsets) = (0.0f64, 10_000.0f64, vec![]);
    for i in 0..4000u32 {
        let (now, secs) = (t0 + Duration::from_millis(10) * i, f64::from(i) * 0.01);
        if i == 2000 {
            rate = 15_000.0;
            d.set_stream_rate(15_000);
        }
        if i % 4 == 0 {
            unsent += rate * 0.04; // one frame
        }
        let repairing = (2150..2230).contains(&i);
        let path = match i {
            _ if repairing => 8_000.0,
            0..2000 => 30_000.0,
            _ => carried,
        };
        unsent -= unsent.min(path * 0.01);
        let in_flight = rate.min(path) * 0.78;
        d.on_transport_repair(now, tell && repairing);
        let q = (in_flight + unsent) as u64;
        d.on_queue_parts(now, q, unsent as u64, rtt, rate.min(path) as u64, 1448);
        while let Some(s) = d.poll_signal() {
            if s.onset {
                onsets.push(secs - 20.0);
                rate = 10_000.0;
                d.set_stream_rate(10_000);
            }
        }
    }
    (onsets, d)
}

/// A loss repaired 1.5 s after an up-switch the path carries is no onset once the repair
/// is reported (unreported, the watch takes the rung back down: the lab's second
/// down-switch); a rung the path cannot carry (12 of 15 kB/s) is still signalled, two RTTs
/// after the repair ended.
#[test]
fn a_loss_repair_after_an_up_switch_is_not_the_path_failing_the_rate() {
    let (onsets, d) = rise_with_repair(30_000.0, false);
    assert_eq!((d.rise_onsets, onsets.len()), (1, 1), "{onsets:?}");
    assert!((1.5..2.4).contains(&onsets[0]), "{onsets:?}");
    let (onsets, d) = rise_with_repair(30_000.0, true);
    assert_eq!((d.rise_onsets, onsets.len()), (0, 0), "{onsets:?}");
    assert_eq!(d.rise_restarts_after_repair, 1);
    let (onsets, d) = rise_with_repair(12_000.0, true);
    assert_eq!((d.rise_onsets, d.rise_restarts_after_repair), (1, 1));
    // the repair's last sample is 2.29 s after the switch; grace and window are an RTT each
    assert!((3.8..4.3).contains(&onsets[0]), "{onsets:?}");
}

/// The controller reads the repair from `tcpi_ca_state`: Recovery holds the watch.
#[test]
fn the_controller_reports_tcps_loss_repair_to_dbat() {
    let mut c = DbatController::new(DbatConfig::default()).unwrap();
    c.dbat.set_stream_rate(10_000);
    let t0 = Instant::now();
    let tcp = TcpState {
        cwnd: 20,
        mss: 1448,
        rtt: Duration::from_millis(780),
        delivery_rate: 10_000,
        ..TcpState::default()
    };
    // leave slow start (its time limit), go up, then a repair starts
    c.decide(&TcpState { outq: 100, ..tcp }, &AppProgress::default(), t0);
    c.decide(&tcp, &AppProgress::default(), t0 + Duration::from_secs(10));
    assert!(!c.dbat.in_slow_start());
    c.set_stream_rate(15_000);
    c.decide(&tcp, &AppProgress::default(), t0 + Duration::from_secs(11));
    let repair = TcpState {
        ca_state: CA_RECOVERY,
        ..tcp
    };
    c.decide(
        &repair,
        &AppProgress::default(),
        t0 + Duration::from_secs(12),
    );
    c.decide(
        &repair,
        &AppProgress::default(),
        t0 + Duration::from_secs(13),
    );
    assert_eq!(c.dbat.rise_restarts_after_repair, 1);
}
