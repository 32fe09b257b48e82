use super::*;

fn params() -> SigmaParams {
    SigmaParams {
        alpha: 0.9,
        window: Duration::from_secs(1),
        probe_after: Some(Duration::from_secs(2)),
        probe_step: 0.05,
        link: None,
        keep_share: false,
    }
}

fn f(id: u64, target: f64, measured: f64) -> FlowSample {
    FlowSample {
        id,
        target,
        measured: Some(measured),
        recent: Some(measured),
        partial: 0.0,
        guaranteed: 0.0,
        min: 0.0,
        rtt: None,
    }
}

fn at(t0: Instant, ms: u64) -> Instant {
    t0 + Duration::from_millis(ms)
}

#[test]
fn starts_at_the_first_measured_aggregate() {
    let t0 = Instant::now();
    let mut r = SigmaRule::new(params());
    let young = FlowSample {
        measured: None,
        partial: 300e3,
        ..f(1, 0.0, 0.0)
    };
    r.on_tick(t0, &[young]);
    assert_eq!(r.sigma(), None);
    r.on_tick(at(t0, 200), &[f(1, 0.0, 900e3), f(2, 0.0, 60e3)]);
    assert_eq!(r.sigma(), Some(960e3));
}

#[test]
fn one_flow_below_alpha_gives_its_slack_to_the_others_then_takes_it_back() {
    let t0 = Instant::now();
    let mut r = SigmaRule::new(params());
    let flows = |m1: f64| [f(1, 500e3, m1), f(2, 230e3, 230e3), f(3, 230e3, 230e3)];
    r.on_tick(t0, &flows(500e3));
    assert_eq!(r.sigma(), Some(960e3));
    r.on_tick(at(t0, 1000), &flows(300e3));
    assert!(r.is_congested(1));
    assert!((r.sigma().unwrap() - 1010e3).abs() < 1e-6);
    // Still congested (and settling): no second increase.
    r.on_tick(at(t0, 1200), &flows(300e3));
    r.on_tick(at(t0, 2000), &flows(300e3));
    assert!((r.sigma().unwrap() - 1010e3).abs() < 1e-6);
    // Recovered: the slack comes back.
    r.on_tick(at(t0, 3000), &flows(480e3));
    assert!(!r.is_congested(1));
    assert!((r.sigma().unwrap() - 960e3).abs() < 1e-6);
    let c = r.counters();
    assert_eq!(
        (c.flow_congested, c.flow_recovered, c.link_congested),
        (1, 1, 0)
    );
}

#[test]
fn half_the_flows_below_alpha_is_link_congestion_judged_once_per_window() {
    let t0 = Instant::now();
    let mut r = SigmaRule::new(params());
    r.on_tick(t0, &[f(1, 0.0, 520e3), f(2, 0.0, 220e3), f(3, 0.0, 220e3)]);
    // A 240 kbit/s interferer: two of three flows fall short.
    let short = [f(1, 520e3, 500e3), f(2, 220e3, 110e3), f(3, 220e3, 110e3)];
    r.on_tick(at(t0, 1000), &short);
    assert_eq!(r.sigma(), Some(720e3));
    assert_eq!(r.counters().link_congested, 1);
    assert!(!r.is_congested(2));
    // Within the next window the rates still measure the old targets: no new verdict.
    let stale = [f(1, 520e3, 480e3), f(2, 150e3, 90e3), f(3, 150e3, 90e3)];
    r.on_tick(at(t0, 1200), &stale);
    r.on_tick(at(t0, 1800), &stale);
    assert_eq!(r.sigma(), Some(720e3));
    // A window later they are judged again.
    r.on_tick(at(t0, 2000), &stale);
    assert_eq!(r.sigma(), Some(660e3));
    assert_eq!(r.counters().link_congested, 2);
}

#[test]
fn a_rising_aggregate_raises_sigma() {
    let t0 = Instant::now();
    let mut r = SigmaRule::new(params());
    r.on_tick(t0, &[f(1, 0.0, 700e3)]);
    r.on_tick(at(t0, 1000), &[f(1, 700e3, 900e3)]);
    assert_eq!(r.sigma(), Some(900e3));
    assert_eq!(r.counters().aggregate_rose, 1);
}

/// Ticks every 200 ms for `secs`; the flows' rates come from `rates(sigma)`.
fn run(
    r: &mut SigmaRule,
    t0: Instant,
    from_ms: u64,
    secs: u64,
    rates: impl Fn(f64) -> Vec<FlowSample>,
) -> Vec<f64> {
    let mut trace = vec![];
    for ms in (from_ms..from_ms + secs * 1000).step_by(200) {
        let s = r.sigma().unwrap_or(0.0);
        r.on_tick(at(t0, ms), &rates(s));
        trace.push(r.sigma().unwrap());
    }
    trace
}

#[test]
fn a_probe_the_link_carries_holds() {
    let t0 = Instant::now();
    let mut r = SigmaRule::new(params());
    r.on_tick(t0, &[f(1, 0.0, 500e3), f(2, 0.0, 220e3)]);
    // The link has 960: the bulk flow takes what it is given.
    let flows = |s: f64| vec![f(1, 500e3, 500e3), f(2, s - 500e3, s - 500e3)];
    run(&mut r, t0, 200, 4, flows);
    let c = r.counters();
    // The first held at 756; the next began at once, its window quiet.
    assert_eq!((c.probes, c.probe_held, c.probe_failed), (2, 1, 0), "{c:?}");
    assert!((r.sigma().unwrap() - 756e3 * 1.05).abs() < 1e-6);
}

#[test]
fn a_failed_probe_is_undone_and_the_next_waits_longer() {
    let t0 = Instant::now();
    let mut r = SigmaRule::new(params());
    r.on_tick(t0, &[f(1, 0.0, 500e3), f(2, 0.0, 220e3)]);
    // The link has exactly 720: a probe's extra is not carried, flow 2 falls short.
    let full = |s: f64| {
        let bulk = s - 500e3;
        let got = bulk.min(220e3) - (bulk - 220e3).max(0.0);
        vec![f(1, 500e3, 500e3), f(2, bulk, got)]
    };
    let trace = run(&mut r, t0, 200, 60, full);
    let c = r.counters();
    assert_eq!(c.probes, c.probe_failed, "{c:?}");
    // Waits of 2, 4, 8, 16, 16 s (+ a window to judge, a window to settle): at most 6.
    assert!((3..=6).contains(&c.probes), "{c:?}");
    assert!(trace.iter().all(|&s| (720e3..=756e3 + 1.0).contains(&s)));
    assert_eq!(r.sigma(), Some(720e3));
    assert_eq!(c.link_congested, 0);
}

#[test]
fn no_change_on_a_steady_link_when_sigma_is_the_link() {
    let t0 = Instant::now();
    let mut r = SigmaRule::new(SigmaParams {
        link: Some(960e3),
        ..params()
    });
    let flows = |_| vec![f(1, 520e3, 517e3), f(2, 220e3, 214e3), f(3, 220e3, 221e3)];
    let trace = run(&mut r, t0, 0, 120, flows);
    assert!(trace.iter().all(|&s| s == 960e3));
    assert_eq!(r.counters().probes, 0);
}

#[test]
fn sigma_regrows_after_link_congestion_with_an_app_limited_top_flow() {
    // The Fig. 6 mix: a video that never sends more than 517.5 kbit/s (target 520 when
    // sigma allows) and two bulk flows sharing the rest; the link has `cap`.
    let t0 = Instant::now();
    let mut r = SigmaRule::new(SigmaParams {
        link: Some(960e3),
        window: Duration::from_secs(2),
        probe_after: Some(Duration::from_secs(1)),
        probe_step: 0.1,
        ..params()
    });
    let mix = |cap: f64| {
        move |s: f64| {
            let video_t = s.min(520e3);
            let bulk_t = (s - video_t) / 2.0;
            let video = video_t.min(517.5e3);
            let bulk = bulk_t.min(((cap - video) / 2.0).max(0.0));
            vec![f(1, video_t, video), f(2, bulk_t, bulk), f(3, bulk_t, bulk)]
        }
    };
    run(&mut r, t0, 0, 10, mix(960e3));
    assert_eq!(r.sigma(), Some(960e3));
    // The interferer takes 240: sigma falls near what is left.
    let during = run(&mut r, t0, 10_000, 40, mix(720e3));
    assert!(r.counters().link_congested >= 1);
    assert!(
        during[25..].iter().all(|&s| (520e3..=816e3).contains(&s)),
        "{during:?}"
    );
    // It stops: sigma climbs back to the link although the video never reads more.
    let after = run(&mut r, t0, 50_000, 30, mix(960e3));
    let back = after.iter().position(|&s| s >= 955e3);
    assert!(back.is_some_and(|k| k <= 5 * 20), "{after:?}");
    assert_eq!(r.sigma(), Some(960e3));
    assert!(r.counters().probe_held >= 2, "{:?}", r.counters());
}

#[test]
fn a_flow_that_wants_less_than_its_target_does_not_stop_the_probe() {
    let t0 = Instant::now();
    let mut r = SigmaRule::new(SigmaParams {
        window: Duration::from_secs(2),
        ..params()
    });
    // Sigma fell to 720 during congestion; the video only ever wants 450 of its 520.
    r.on_tick(t0, &[f(1, 0.0, 450e3), f(2, 0.0, 135e3), f(3, 0.0, 135e3)]);
    assert_eq!(r.sigma(), Some(720e3));
    let trace = run(&mut r, t0, 200, 40, |s| {
        // The link has 960: the bulk flows get what they are given up to the rest.
        let bulk = ((s - 520e3) / 2.0).min((960e3 - 450e3) / 2.0);
        vec![f(1, 520e3, 450e3), f(2, bulk, bulk), f(3, bulk, bulk)]
    });
    assert!(r.is_congested(1));
    assert!(r.counters().probe_held >= 3, "{:?}", r.counters());
    assert!(*trace.last().unwrap() >= 900e3, "{trace:?}");
}

#[test]
fn young_and_slow_flows_are_not_judged_and_changes_clear_marks() {
    let t0 = Instant::now();
    let mut r = SigmaRule::new(SigmaParams {
        probe_after: None,
        ..params()
    });
    r.on_tick(t0, &[f(1, 0.0, 900e3), f(2, 0.0, 60e3), f(3, 0.0, 0.0)]);
    r.on_tick(
        at(t0, 1000),
        &[f(1, 800e3, 900e3), f(2, 150e3, 10e3), f(3, 200e3, 200e3)],
    );
    assert!(r.is_congested(2));
    let young = FlowSample {
        measured: None,
        partial: 1e3,
        ..f(4, 200e3, 0.0)
    };
    r.on_tick(
        at(t0, 2000),
        &[f(1, 700e3, 900e3), f(2, 150e3, 10e3), young],
    );
    assert!(!r.is_congested(2) && !r.is_congested(4));
    assert_eq!(r.counters().flow_set_changed, 2);
    // A target of 100 kbit/s over a 1 s window is under ten segments: not judged.
    r.on_tick(
        at(t0, 3000),
        &[f(1, 700e3, 900e3), f(2, 100e3, 10e3), young],
    );
    assert!(!r.is_congested(2));
}

#[test]
fn sigma_never_exceeds_the_link() {
    let t0 = Instant::now();
    let mut r = SigmaRule::new(SigmaParams {
        link: Some(960e3),
        ..params()
    });
    assert_eq!(r.sigma(), Some(960e3), "a known link is the first sigma");
    r.on_tick(t0, &[f(1, 0.0, 2e6)]);
    assert_eq!(r.sigma(), Some(960e3));
}
/// The Fig. 6 mix as the lab shows it: the downloads, held to their targets by their
/// receive windows, lose nothing; the video (minimum 520, never more than 517.5 sent)
/// gets what the link has left. `guarantee`: whether the video's minimum is given to
/// the rule. Returns the video's rate and σ per tick.
fn fig6_lab_like(r: &mut SigmaRule, t0: Instant, guarantee: bool) -> Vec<(f64, f64)> {
    let mut trace = vec![];
    for ms in (0..90_000).step_by(200) {
        let cap = if (10_000..50_000).contains(&ms) {
            720e3
        } else {
            960e3
        };
        let s = r.sigma().unwrap_or(960e3);
        let video_t = s.min(520e3);
        let bulk_t = (s - video_t) / 2.0;
        let bulk = bulk_t.min(cap / 2.0);
        let video = 517.5e3_f64.min(cap - 2.0 * bulk);
        let video_f = FlowSample {
            guaranteed: if guarantee { video_t } else { 0.0 },
            ..f(1, video_t, video)
        };
        r.on_tick(
            at(t0, ms),
            &[video_f, f(2, bulk_t, bulk), f(3, bulk_t, bulk)],
        );
        trace.push((video, r.sigma().unwrap()));
    }
    trace
}

fn fig6_params() -> SigmaParams {
    SigmaParams {
        link: Some(960e3),
        window: Duration::from_secs(2),
        probe_after: Some(Duration::from_secs(1)),
        probe_step: 0.1,
        ..params()
    }
}

#[test]
fn a_flow_short_of_its_minimum_makes_the_others_yield_until_it_has_it_again() {
    let t0 = Instant::now();
    // Without the minimum the paper's rule takes the video for congested on its own
    // and hands its slack on: it stays far below 520 through the interference.
    let mut plain = SigmaRule::new(fig6_params());
    let without = fig6_lab_like(&mut plain, t0, false);
    let short = without[55..250]
        .iter()
        .filter(|(v, _)| *v < 505.9e3)
        .count();
    assert!(
        short >= 190,
        "{short} of 195 ticks short without the minimum"
    );
    // With it, σ yields: below what the link has left, never below the minimum.
    let mut r = SigmaRule::new(fig6_params());
    let with = fig6_lab_like(&mut r, t0, true);
    let c = r.counters();
    assert!(
        c.min_short + c.onset_yield >= 1 && c.yield_held >= 1,
        "{c:?}"
    );
    assert_eq!(c.yield_undone, 0, "{c:?}");
    assert!(with.iter().all(|&(_, s)| s >= 520e3), "{with:?}");
    // The lab's "at the minimum" (517.5 less a segment a second), tick by tick from
    // the first verdict (a window into the interference): only failed probes into the
    // full link cost ticks, one window each, ever more rarely.
    let during = &with[60..250];
    let at_min = during.iter().filter(|(v, _)| *v >= 505.9e3).count();
    assert!(
        at_min * 100 >= 85 * during.len(),
        "{at_min} of {}: {with:?}",
        during.len()
    );
    // The downloads keep what the minimum leaves: σ ends the interference near 720.
    let late = with[200..250].iter().map(|&(_, s)| s).sum::<f64>() / 50.0;
    assert!((620e3..=760e3).contains(&late), "{late}");
    // After it, the probes take σ back to the ceiling (the link less the margin)
    // within 20 s.
    let back = with[250..]
        .iter()
        .position(|&(_, s)| s >= 0.95 * 960e3 - 1.0);
    assert!(back.is_some_and(|k| k <= 100), "{:?}", &with[250..]);
}

#[test]
fn an_application_limited_flow_short_of_its_minimum_does_not_hold_sigma_down() {
    // The video has had its minimum for 10 s, then wants 300 of its 520 (a low rung, or
    // an outside flow takes what the downloads give up): yielding gives it nothing, so
    // the yield is undone once and σ stays with the link while it remains short.
    let t0 = Instant::now();
    let mut r = SigmaRule::new(fig6_params());
    let mut trace = vec![];
    for ms in (0..60_000).step_by(200) {
        let s = r.sigma().unwrap();
        let video_t = s.min(520e3);
        let bulk_t = (s - video_t) / 2.0;
        let wants = if ms < 10_000 { 517.5e3 } else { 300e3 };
        let bulk = bulk_t.min((960e3 - wants) / 2.0);
        let video = FlowSample {
            guaranteed: video_t,
            ..f(1, video_t, wants)
        };
        r.on_tick(at(t0, ms), &[video, f(2, bulk_t, bulk), f(3, bulk_t, bulk)]);
        trace.push(s);
    }
    let c = r.counters();
    assert_eq!(c.yield_undone, 1, "{c:?}");
    assert_eq!(c.yield_held, 0, "{c:?}");
    // Yields only until the first undoing (each a window): none after.
    assert!(c.min_short <= 6, "{c:?}");
    let undone_by = trace.iter().rposition(|&s| s < 900e3).unwrap();
    assert!((50..=150).contains(&undone_by), "{trace:?}");
    assert!(
        trace[undone_by + 1..].iter().all(|&s| s >= 900e3),
        "{trace:?}"
    );
}
#[test]
fn a_starting_flow_that_another_hosts_flow_holds_short_is_undone_a_window_after_the_floor() {
    // The lab's "BWSS + outside" start: the video is short of its 520 kbit/s, the
    // downloads give way, but another host's flow takes most of what they leave. The
    // video either creeps up 50 kbit/s a window towards the 480 its share of the link
    // allows, or sits at 400 with its recent rate touching 520 now and then (the two
    // flows' sawtooth), never over a whole window. Neither reaches its minimum: the
    // yield is undone a window after σ got to the floor (the lab: 6-10 s of starved
    // downloads before, and the other host's flow kept what it took for seconds after).
    for touches in [false, true] {
        let t0 = Instant::now();
        let mut r = SigmaRule::new(SigmaParams {
            keep_share: true,
            ..fig6_params()
        });
        let mut at_floor = vec![];
        for ms in (0..30_000).step_by(200) {
            let s = r.sigma().unwrap();
            let video_t = s.min(520e3);
            let bulk_t = (s - video_t) / 2.0;
            let (video, recent) = if touches {
                (400e3, if ms % 1_000 == 0 { 520e3 } else { 380e3 })
            } else {
                let v = (250e3 + 25.0 * ms as f64).min(480e3);
                (v, v)
            };
            let sample = FlowSample {
                guaranteed: video_t,
                min: 520e3,
                recent: Some(recent),
                ..f(1, video_t, video)
            };
            let bulk = bulk_t.min(200e3);
            r.on_tick(
                at(t0, ms),
                &[sample, f(2, bulk_t, bulk), f(3, bulk_t, bulk)],
            );
            if r.sigma().unwrap() <= 520e3 + 1.0 {
                at_floor.push(ms);
            }
        }
        let c = r.counters();
        let msg = format!("touches {touches}: at the floor {at_floor:?}; {c:?}");
        assert_eq!(c.yield_undone, 1, "{msg}");
        assert_eq!(c.yield_held, 0, "{msg}");
        // One verdict a window (2 s) after σ reached the floor, a tick to apply it.
        assert!(!at_floor.is_empty(), "{msg}");
        let span = at_floor.last().unwrap() - at_floor[0];
        assert!(span <= 2_400, "{msg}");
    }
}

#[test]
fn sigma_climbs_back_from_the_minimums_floor_when_the_others_are_too_slow_to_judge() {
    // The link leaves only the video's minimum for 10 s: σ yields to the floor, the
    // downloads starve. Then the link is free again, but the downloads' reads count in
    // whole segments per window: a probe's few kbit/s cannot show as carried, and only
    // harm may fail it.
    let t0 = Instant::now();
    let mut r = SigmaRule::new(fig6_params());
    let whole = |bps: f64| (bps * 2.0 / 8.0 / SEGMENT).floor() * SEGMENT * 8.0 / 2.0;
    let mut trace = vec![];
    for ms in (0..80_000).step_by(200) {
        let cap = if (10_000..20_000).contains(&ms) {
            560e3
        } else {
            960e3
        };
        let s = r.sigma().unwrap();
        let video_t = s.min(520e3);
        let bulk_t = (s - video_t) / 2.0;
        let bulk = whole(bulk_t.min(cap / 2.0));
        let video = FlowSample {
            guaranteed: video_t,
            ..f(1, video_t, 517.5e3_f64.min(cap - 2.0 * bulk))
        };
        r.on_tick(at(t0, ms), &[video, f(2, bulk_t, bulk), f(3, bulk_t, bulk)]);
        trace.push(r.sigma().unwrap());
    }
    assert!(trace[60..100].iter().any(|&s| s <= 560e3), "{trace:?}");
    assert_eq!(r.counters().yield_undone, 0, "{:?}", r.counters());
    let back = trace[100..].iter().position(|&s| s >= 900e3);
    assert!(back.is_some_and(|k| k <= 250), "{:?}", &trace[100..]);
}

#[test]
fn keeping_the_share_sigma_grows_as_tcp_and_an_unused_minimum_goes_to_the_others() {
    // The video on its lowest rung from the start (69 of its 520 kbit/s minimum) and two
    // downloads that another host's flow holds at 200 kbit/s each.
    let trace = |keep_share| {
        let t0 = Instant::now();
        let mut r = SigmaRule::new(SigmaParams {
            keep_share,
            ..fig6_params()
        });
        let mut trace = vec![];
        for ms in (0..30_000).step_by(200) {
            let s = r.sigma().unwrap();
            let video_t = s.min(520e3).min(r.cap(1).unwrap_or(f64::MAX));
            let bulk_t = (s - video_t) / 2.0;
            let video = FlowSample {
                guaranteed: video_t.min(520e3),
                min: 520e3,
                ..f(1, video_t, 69e3)
            };
            let bulk = bulk_t.min(200e3);
            r.on_tick(at(t0, ms), &[video, f(2, bulk_t, bulk), f(3, bulk_t, bulk)]);
            trace.push((r.sigma().unwrap(), 69e3 + 2.0 * bulk, bulk_t));
        }
        (trace, r)
    };
    let (kept, r) = trace(true);
    let c = r.counters();
    // It has shown it wants less: a quarter above what it takes.
    assert_eq!(r.cap(1), Some(86.25e3), "1.25 × what the video takes");
    assert_eq!(c.demand_capped, 1, "{c:?}");
    assert!(c.link_congested >= 5 && c.probes == 0, "{c:?}");
    // From its first whole window (2 s) its minimum is in force: σ yields to it (a
    // starting flow: by TCP's initial window, then, the downloads having given way and
    // its rate not risen, to the floor), and a window later, its rate not risen, the
    // yield is undone (it wants less); only then is it capped. This costs the
    // downloads the ticks 3-16.
    assert_eq!(
        (c.onset_yield, c.min_short, c.yield_undone),
        (2, 0, 1),
        "{c:?}"
    );
    assert!(kept[3..13].iter().all(|k| k.0 <= 680.4e3), "{kept:?}");
    // From there σ grows by one segment per flow per 200 ms round trip, each round trip
    // (174 kbit/s a tick), to the ceiling (912), and link congestion (the downloads
    // below α × their targets) leaves it there: the downloads' targets stay above what
    // they get, and TCP shares the link with the other host's flow.
    assert!(kept[18..].iter().all(|k| k.2 >= 200e3 - 1.0), "{kept:?}");
    for (i, w) in kept.windows(2).enumerate().skip(18) {
        assert!(w[1].0 >= w[0].1, "σ below the aggregate: {kept:?}");
        let grew = w[1].0 >= (w[0].0 + 173e3).min(912e3 - 1.0);
        assert!(grew, "tick {i}: {kept:?}");
    }
    assert!(kept[30..].iter().all(|k| k.0 >= 912e3 - 1.0), "{kept:?}");
    // The paper's rule: σ reset to the aggregate, the video's minimum reserved, the
    // downloads held under what they could take for most of the run.
    let (paper, _) = trace(false);
    let starved = paper[10..].iter().filter(|k| k.2 < 200e3).count();
    assert!(starved * 2 >= paper[10..].len(), "{paper:?}");
}

/// σ's growth while no minimum is in force follows each flow's measured round trip as
/// TCP's additive increase does (8·MSS / RTT² a second), [`GROWTH_RTT`] without one.
#[test]
fn keeping_the_share_sigma_grows_at_the_flows_measured_round_trips() {
    let per_tick = |rtt_ms: Option<u64>| {
        let t0 = Instant::now();
        let mut r = SigmaRule::new(SigmaParams {
            keep_share: true,
            ..params()
        });
        let mut sigmas = vec![];
        for ms in (0..3_000).step_by(200) {
            // The flows take what they are given: no congestion, only growth.
            let each = r.sigma().unwrap_or(900e3) / 3.0;
            let flow = |id| FlowSample {
                rtt: rtt_ms.map(Duration::from_millis),
                ..f(id, each, each)
            };
            r.on_tick(at(t0, ms), &[flow(1), flow(2), flow(3)]);
            sigmas.push(r.sigma().unwrap());
        }
        sigmas[sigmas.len() - 1] - sigmas[sigmas.len() - 2]
    };
    // Three flows, 200 ms ticks: 3 × 8 × 1448 / RTT² × 0.2 s.
    let step = |rtt: f64| 3.0 * 8.0 * 1448.0 / (rtt * rtt) * 0.2;
    for (rtt_ms, rtt) in [
        (Some(100), 0.1),
        (Some(400), 0.4),
        (None, 0.2),
        (Some(1), 0.01),
    ] {
        let got = per_tick(rtt_ms);
        assert!(
            (got - step(rtt)).abs() < 1.0,
            "{rtt_ms:?}: {got} a tick, want {}",
            step(rtt)
        );
    }
}

/// The namespace test `bwss_lab`'s failing runs: all three flows start at 0; the video
/// reads 75 kbit/s, then `first` (its slow start, its player's first rung) until it
/// switches up at 3.5 s to its 517.5. The downloads' arrivals pause at 1.5-2 s, so at
/// the video's first whole window (2 s) the flows get little over the recent window;
/// else their arrivals follow their targets two seconds late (their receive windows
/// close a backlog later: 185-760 kbit/s together at 3-4 s with targets of 0). Returns
/// σ per 200 ms tick.
fn starting_video_run(r: &mut SigmaRule, first: f64) -> Vec<f64> {
    let t0 = Instant::now();
    let video_rate = |ms: u64| match ms {
        0..1000 => 75e3,
        1000..3500 => first,
        _ => 517.5e3,
    };
    let (mut video, mut bulk, mut targets) = (vec![], vec![], vec![]);
    let mean = |v: &[f64], ticks: usize| {
        let last = &v[v.len().saturating_sub(ticks)..];
        last.iter().sum::<f64>() / last.len() as f64
    };
    let mut sigmas = vec![];
    for ms in (0..12_000).step_by(200) {
        let s = r.sigma().unwrap_or(960e3);
        let (video_t, bulk_t) = (s.min(520e3), (s - s.min(520e3)) / 2.0);
        video.push(video_rate(ms));
        targets.push(bulk_t);
        let lagged = targets[targets.len().saturating_sub(11)];
        let paused = (1500..2000).contains(&ms);
        bulk.push(if paused {
            20e3
        } else {
            lagged.min((960e3 - video_rate(ms)) / 2.0)
        });
        let whole = ms >= 2000;
        let sample = |id, target, v: &[f64], guaranteed| FlowSample {
            measured: whole.then(|| mean(v, 10)),
            recent: whole.then(|| mean(v, 3)),
            partial: mean(v, 10) / 8.0,
            guaranteed,
            min: guaranteed,
            ..f(id, target, 0.0)
        };
        r.on_tick(
            at(t0, ms),
            &[
                sample(1, video_t, &video, video_t),
                sample(2, bulk_t, &bulk, 0.0),
                sample(3, bulk_t, &bulk, 0.0),
            ],
        );
        sigmas.push(r.sigma().unwrap());
    }
    sigmas
}

#[test]
fn a_starting_flow_is_yielded_what_it_can_take_not_what_the_others_get_at_their_start() {
    // Yielding to what the flows get at the video's first whole window, or by its whole
    // shortfall, sent σ to the minimums' floor (520), and the held yield kept it there
    // to the end. A starting flow is yielded its shortfall, at most what it takes
    // already or TCP's initial window (10 segments per 500 ms: 232 kbit/s), from σ; again
    // only once the others gave way.
    for (first, yielded) in [(300e3, 220e3), (100e3, 231.7e3)] {
        let mut r = SigmaRule::new(fig6_params());
        let sigmas = starting_video_run(&mut r, first);
        let c = r.counters();
        let msg = format!("first {first}: σ {sigmas:?}; {c:?}");
        assert_eq!(c.onset_yield, 1, "{msg}");
        // The downloads kept 80-90 kbit/s each.
        let lowest = sigmas.iter().copied().fold(f64::INFINITY, f64::min);
        assert!((lowest - (912e3 - yielded)).abs() < 1e3, "{msg}");
        // A window after the yield the video rises, a window later it holds its minimum.
        assert_eq!((c.yield_held, c.yield_undone), (1, 0), "{msg}");
    }
}

#[test]
fn a_flow_in_slow_start_is_not_short_of_its_minimum() {
    // The video doubles its rate every 200 ms up to 517.5 kbit/s (slow start). Younger
    // than a window it is not judged; its first whole window still holds the ramp
    // (short over the window), but over the recent window it is at its minimum: no
    // yield. A flow that has not been at its minimum over a whole window is judged over
    // the recent window only.
    let t0 = Instant::now();
    let mut r = SigmaRule::new(fig6_params());
    let rate = |ms: u64| (20e3 * 2f64.powf(ms as f64 / 200.0)).min(517.5e3);
    let mean = |from: u64, to: u64| {
        let ticks: Vec<f64> = (from..to).step_by(200).map(rate).collect();
        ticks.iter().sum::<f64>() / ticks.len() as f64
    };
    let mut first_window = None;
    for ms in (0..10_000).step_by(200) {
        let whole = (ms >= 2000).then(|| mean(ms - 1800, ms + 200));
        first_window = first_window.or(whole);
        let video = FlowSample {
            measured: whole,
            recent: whole.map(|_| mean(ms - 400, ms + 200)),
            partial: mean(0, ms + 200) / 8.0,
            guaranteed: 520e3,
            ..f(1, 520e3, 0.0)
        };
        r.on_tick(at(t0, ms), &[video, f(2, 220e3, 220e3), f(3, 220e3, 220e3)]);
    }
    assert!(first_window.is_some_and(|m| m < 500e3), "{first_window:?}");
    let c = r.counters();
    assert_eq!((c.min_short, c.onset_yield), (0, 0), "{c:?}");
    assert_eq!(r.sigma(), r.ceiling());
    assert_eq!(
        r.ceiling(),
        Some(0.95 * 960e3),
        "the margin under a minimum"
    );
}
