use super::*;
use crate::goals::{Goal, Metric, Relation};
use crate::tcpinfo::TcpSample;

/// `n` delivered messages over 10 s.
fn samples(latency: f64, n: usize) -> Vec<Sample> {
    (0..n)
        .map(|i| Sample::delivered(i as f64 * 10.0 / n as f64, latency))
        .collect()
}

fn trial(mode: Mode, streams: Vec<(&str, Vec<Sample>)>) -> TrialRecord {
    TrialRecord {
        mode: Some(mode),
        run: 1,
        variants: streams.iter().map(|(n, _)| n.to_string()).collect(),
        streams: streams
            .into_iter()
            .map(|(n, s)| (n.to_string(), s))
            .collect(),
        floor: samples(50.0, 1000),
        floor_sent: FloorSent {
            probes: 1000,
            ..FloorSent::default()
        },
        ..TrialRecord::default()
    }
}

fn records() -> Vec<TrialRecord> {
    vec![
        trial(
            Mode::SideBySide,
            vec![("TCP", samples(400.0, 1000)), ("MB", samples(60.0, 900))],
        ),
        trial(Mode::Sequential, vec![("TCP", samples(400.0, 1000))]),
        trial(Mode::Sequential, vec![("MB", samples(60.0, 800))]),
    ]
}

fn infos() -> Vec<VariantInfo> {
    ["TCP", "MB"]
        .iter()
        .map(|n| VariantInfo {
            name: n.to_string(),
            controller: n.to_string(),
            congestion: "cubic".into(),
            ecn: false,
            paper: None,
            baseline: (*n != "TCP").then(|| "TCP".into()),
            video: None,
            conference: None,
            ladder: false,
            live: false,
        })
        .collect()
}

fn inputs(goals: Vec<Goal>) -> SummaryInputs {
    SummaryInputs {
        scenario: "t".into(),
        description: String::new(),
        paper: PaperFigure::default(),
        quick: false,
        duration_s: 10.0,
        window: Window {
            from_s: 1.0,
            to_s: 9.0,
        },
        runs: 1,
        modes: vec![Mode::SideBySide],
        baseline: Some("TCP".into()),
        network: String::new(),
        outages: vec![],
        variants: infos(),
        goals,
        provenance: vec![],
    }
}

fn goal(metric: Metric, max: f64) -> Goal {
    Goal {
        variant: "MB".into(),
        metric,
        vs_baseline: None,
        against: None,
        min: None,
        max: Some(max),
        min_samples: None,
        why: String::new(),
    }
}

#[test]
fn summary_has_sender_side_latency_and_goodput_ratios() {
    let w = inputs(vec![]).window;
    let v = summarize_variants(&records(), &infos(), w);
    assert_eq!(v.len(), 4);
    let mb = v
        .iter()
        .find(|v| v.name == "MB" && v.mode == Mode::SideBySide)
        .unwrap();
    assert_eq!(mb.sender_side_ms.latency.p99, Some(10.0));
    assert_eq!(
        (mb.sender_side_ms.clamped, mb.sender_side_ms.without_floor),
        (0, 0)
    );
    assert!(
        (mb.goodput_vs_baseline.unwrap() - 0.9).abs() < 0.02,
        "{mb:?}"
    );
    assert!(
        (mb.sent_vs_baseline.unwrap().mean - 0.9).abs() < 0.02,
        "{mb:?}"
    );
    let seq = v
        .iter()
        .find(|v| v.name == "MB" && v.mode == Mode::Sequential)
        .unwrap();
    assert!(
        (seq.goodput_vs_baseline.unwrap() - 0.8).abs() < 0.02,
        "{seq:?}"
    );
    assert_eq!(seq.latency_ms.share_over(160.0), Some(0.0));
    let floor = summarize_floor(&records(), w);
    assert_eq!(floor.latency_ms.p50, Some(50.0));
    assert_eq!((floor.probes_sent, floor.lost), (3000, 0));
}

#[test]
fn empty_variant_empty_floor_and_failed_sampler_are_no_data_and_goals_not_met() {
    // MB ran, but its receiver failed (no messages recorded), no probe arrived, and its
    // TCP_INFO sampler failed.
    let mut r = trial(Mode::SideBySide, vec![("TCP", samples(400.0, 1000))]);
    r.variants.push("MB".into());
    r.floor.clear();
    r.tcp = vec![(
        "MB".into(),
        TcpTimeline {
            errors: 3,
            first_error: Some("getsockopt(TCP_INFO) on fd 9: Bad file descriptor".into()),
            ..TcpTimeline::default()
        },
    )];
    let goals = vec![
        goal(Metric::LatencyP99Ms, 100.0),
        goal(Metric::SenderSideP99Ms, 100.0),
        goal(Metric::ShareOver160, 0.02),
        goal(Metric::ShareOver160AboveFloor, 0.02),
        goal(Metric::Timeouts, 1.0),
        goal(Metric::RetransmittedSegments, 10.0),
        goal(Metric::Undelivered, 0.01),
        Goal {
            vs_baseline: Some(Relation::Ratio),
            against: None,
            ..goal(Metric::LatencyP95Ms, 0.5)
        },
    ];
    let s = summarize(&inputs(goals), &[r], None);
    let mb = s.variants.iter().find(|v| v.name == "MB").unwrap();
    assert_eq!(mb.latency_ms.count, 0);
    assert_eq!(mb.latency_ms.p99, None);
    assert_eq!(mb.sender_side_ms.latency.p99, None);
    assert_eq!(mb.transport.timeouts.value, None);
    assert_eq!(s.floor.latency_ms.p50, None);
    assert_eq!(s.floor.lost, 1000);
    for g in &s.goals {
        assert!(!g.met && g.measured.is_none(), "{g:?}");
    }
    assert_eq!(s.goals_not_met(), 8);
    let errors = s.measurement_errors.join("\n");
    assert!(errors.contains("no floor probe arrived"), "{errors}");
    assert!(
        errors.contains("TCP_INFO sampling of MB failed"),
        "{errors}"
    );
    let json = serde_json::to_value(&s).unwrap();
    let v = &json["variants"][1];
    assert!(v["latency_ms"]["p99"].is_null() && v["goodput_vs_baseline"].is_null());
    let table = text_table(&s);
    assert!(
        table.contains("no data") && table.contains("NOT met"),
        "{table}"
    );
    // A stream that ran and recorded nothing has no latency either.
    let r = trial(
        Mode::SideBySide,
        vec![("TCP", samples(400.0, 10)), ("MB", vec![])],
    );
    let s = summarize(&inputs(vec![goal(Metric::LatencyP50Ms, 1e9)]), &[r], None);
    assert_eq!(s.variants[1].latency_ms.p50, None);
    assert!(!s.goals[0].met);
    // A goal on a variant that never ran is not met either.
    let s = summarize(
        &inputs(vec![goal(Metric::LatencyP50Ms, 1e9)]),
        &[],
        Some("x".into()),
    );
    assert!(!s.goals[0].met && s.failed.is_some());
}

#[test]
fn undelivered_messages_are_censored_in_the_distribution() {
    // 90 delivered at 100 ms, 10 never delivered: the measurement ended 5 s after they left.
    let mut msgs = samples(100.0, 100);
    for s in msgs.iter_mut().step_by(10) {
        *s = Sample::censored(s.sent_s, s.sent_s + 5.0);
    }
    let r = trial(
        Mode::SideBySide,
        vec![("TCP", samples(100.0, 100)), ("MB", msgs)],
    );
    let s = summarize(&inputs(vec![goal(Metric::Undelivered, 0.05)]), &[r], None);
    let mb = s.variants.iter().find(|v| v.name == "MB").unwrap();
    let l = &mb.latency_ms;
    // In the window (1 s to 9 s): 80 messages, 8 of them censored.
    assert_eq!((l.count, l.censored), (80, 8));
    assert_eq!(l.p50, Some(100.0));
    assert!(l.is_lower_bound("p99") && !l.is_lower_bound("p50"));
    assert!((l.share_over(160.0).unwrap() - 0.1).abs() < 1e-12);
    assert!(!s.goals[0].met && (s.goals[0].measured.unwrap() - 0.1).abs() < 1e-12);
    // Goodput counts delivered messages only.
    assert!(mb.goodput_vs_baseline.unwrap() < 0.95);
}

#[test]
fn stale_and_racing_floor_samples_are_counted() {
    let mut r = trial(Mode::SideBySide, vec![("TCP", samples(400.0, 100))]);
    // Probes only in the first half, at 50 ms; one message at 40 ms races a probe.
    r.floor.retain(|p| p.sent_s < 5.0);
    r.streams[0].1[20].latency_ms = 40.0;
    let v = summarize_variants(&[r], &infos()[..1], inputs(vec![]).window);
    let ss = &v[0].sender_side_ms;
    assert_eq!(ss.clamped, 1);
    assert!(ss.without_floor >= 35, "{ss:?}");
    assert_eq!(ss.latency.count + ss.without_floor, v[0].latency_ms.count);
}

#[test]
fn transport_goals_read_tcp_info() {
    let mut r = trial(
        Mode::SideBySide,
        vec![("TCP", samples(400.0, 100)), ("MB", samples(60.0, 100))],
    );
    let at = |t_s: f64, retrans: u32, rto: u16| TcpSample {
        t_s,
        cwnd: 10,
        srtt_ms: 60.0,
        rttvar_ms: 3.0,
        total_retrans: retrans,
        total_rto: Some(rto),
        backoff: 0,
        ca_state: 0,
        lost: 0,
        unacked: 0,
        notsent: 0,
        rto_ms: None,
    };
    r.tcp = vec![(
        "MB".into(),
        TcpTimeline {
            samples: vec![at(0.5, 1, 0), at(5.0, 9, 2), at(8.5, 11, 2)],
            ..TcpTimeline::default()
        },
    )];
    let s = summarize(&inputs(vec![goal(Metric::Timeouts, 1.0)]), &[r], None);
    let mb = s.variants.iter().find(|v| v.name == "MB").unwrap();
    assert_eq!(mb.transport.retransmitted_segments.value, Some(10.0));
    assert_eq!(s.goals[0].measured, Some(2.0));
    assert!(!s.goals[0].met);
    assert!(
        s.measurement_errors.is_empty(),
        "{:?}",
        s.measurement_errors
    );
}

#[test]
fn tail_causes_come_from_tcp_info_and_the_floor() {
    let mut r = trial(
        Mode::SideBySide,
        vec![("TCP", samples(400.0, 100)), ("MB", samples(60.0, 100))],
    );
    // Retransmissions (no timeout) at 5 s; TCP_INFO every 10 ms.
    let timeline = TcpTimeline {
        samples: (0..1000)
            .map(|k| {
                let t_s = k as f64 * 0.01;
                TcpSample {
                    t_s,
                    cwnd: 10,
                    srtt_ms: 60.0,
                    rttvar_ms: 3.0,
                    total_retrans: if t_s >= 5.0 { 3 } else { 0 },
                    total_rto: Some(0),
                    backoff: 0,
                    ca_state: 0,
                    lost: 0,
                    unacked: 0,
                    notsent: 0,
                    rto_ms: None,
                }
            })
            .collect(),
        ..TcpTimeline::default()
    };
    r.tcp = vec![("TCP".into(), timeline)];
    let s = summarize(&inputs(vec![]), &[r], None);
    let tcp = &s
        .variants
        .iter()
        .find(|v| v.name == "TCP")
        .unwrap()
        .tail_causes;
    // 400 ms messages every 100 ms in the window 1-9 s: all 80 over 160 ms; the ones in flight
    // at 5 s (sent from 4.6 s) are fast retransmits, the rest sender queue (floor 50 ms).
    assert_eq!(tcp.over, 80);
    assert!((3..=5).contains(&tcp.fast_retransmit), "{tcp:?}");
    assert_eq!(tcp.sender_queue, 80 - tcp.fast_retransmit, "{tcp:?}");
    assert_eq!((tcp.rto, tcp.network_queue, tcp.unknown), (0, 0, 0));
    let mb = &s
        .variants
        .iter()
        .find(|v| v.name == "MB")
        .unwrap()
        .tail_causes;
    assert_eq!(mb.over, 0);
    assert_eq!(
        mb.share(mb.unknown),
        None,
        "no message over the threshold: no data"
    );
}

fn window(k: u32, written: u32, latency_ms: Option<f64>, bytes: u64) -> WindowRecord {
    WindowRecord {
        window: k,
        capture_s: f64::from(k) * 0.125,
        planned: 8,
        written,
        bytes_written: bytes,
        received: written,
        bytes_received: if latency_ms.is_some() {
            bytes
        } else {
            bytes / 2
        },
        count_received: true,
        latency_ms,
        censored_ms: (latency_ms.is_none() && written > 0).then_some(900.0),
        frames: 4,
        frames_shown: if latency_ms.is_some() { 4 } else { 0 },
        layers_shown: if latency_ms.is_some() { 8 } else { 0 },
    }
}

#[test]
fn video_summary_counts_windows_on_time_dropped_layers_and_throughput() {
    // Run 1: 4 windows: 200 ms, 600 ms, never whole, dropped. Run 2: 2 windows on time.
    let run1 = vec![
        window(0, 8, Some(200.0), 1000),
        window(1, 8, Some(600.0), 1000),
        window(2, 3, None, 500),
        window(3, 0, None, 0),
    ];
    let run2 = vec![
        window(0, 8, Some(100.0), 2000),
        window(1, 8, Some(300.0), 2000),
    ];
    let info = VideoInfo {
        window_frames: 4,
        tolerance_ms: 500.0,
    };
    let v = VideoSummary::of(&[run1.clone(), run2], 30.0, info).unwrap();
    assert_eq!((v.windows, v.transmitted_windows), (6, 5));
    assert_eq!(v.within(250.0).value, Some(2.0 / 5.0));
    assert_eq!(v.within(500.0).value, Some(3.0 / 5.0));
    assert_eq!(v.within(1000.0).value, Some(4.0 / 5.0));
    assert_eq!(v.dropped_windows, Some(1.0 / 6.0));
    assert_eq!(v.dropped_windows_runs.unwrap().mean, 0.125);
    // 4 of 6 windows shown with 2 layers per frame.
    assert!((v.mean_layers.unwrap() - 32.0 / 24.0).abs() < 1e-9);
    assert!((v.fps.unwrap() - 20.0).abs() < 1e-9);
    // Nothing transmitted: no share of windows on time, not 0.
    let none = VideoSummary::of(&[vec![window(0, 0, None, 0)]], 30.0, info).unwrap();
    assert_eq!(none.within(500.0).value, None);

    // The never-whole window is a censored latency sample; the dropped one is no sample.
    let samples: Vec<Sample> = run1.iter().filter_map(WindowRecord::sample).collect();
    assert_eq!(samples.len(), 3);
    assert!(samples[2].censored && samples[2].latency_ms == 900.0);
    let w = Window {
        from_s: 0.0,
        to_s: 1.0,
    };
    let r = TrialRecord {
        mode: Some(Mode::SideBySide),
        run: 1,
        variants: vec!["video".into()],
        streams: vec![("video".into(), samples)],
        windows: vec![("video".into(), run1)],
        ..TrialRecord::default()
    };
    assert_eq!(r.sent_bps("video", w), Some(2500.0 * 8.0));
    assert_eq!(r.delivered_bps("video", w), Some(2250.0 * 8.0));
}

#[test]
fn files_round_trip_every_record() {
    let dir = std::env::temp_dir().join(format!("lowtide-files-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut r = records();
    r[0].windows = vec![(
        "MB".into(),
        vec![window(0, 8, Some(200.0), 1000), window(1, 3, None, 10)],
    )];
    r[0].tcp = vec![(
        "MB".into(),
        TcpTimeline {
            samples: vec![TcpSample {
                t_s: 1.25,
                cwnd: 12,
                srtt_ms: 61.5,
                rttvar_ms: 2.25,
                total_retrans: 3,
                total_rto: None,
                backoff: 1,
                ca_state: 4,
                lost: 2,
                unacked: 9,
                notsent: 4344,
                rto_ms: Some(260.0),
            }],
            errors: 2,
            first_error: Some("boom".into()),
            ..TcpTimeline::default()
        },
    )];
    r[0].streams[1].1[3] = Sample::censored(0.03, 10.0);
    // a message's write into the kernel (written_ms) survives the files
    r[0].streams[1].1[2].written_ms = Some(12.5);
    r[1].delivery_errors = vec![(
        "TCP".into(),
        DeliveryErrors {
            duplicated: 1,
            unknown: 2,
        },
    )];
    r[2].network.forward_drops = 42;
    r[2].adus = vec![(
        "MB".into(),
        vec![
            crate::conference::AduRecord {
                video: 0,
                frame: 0,
                layer: 0,
                capture_s: 0.0,
                bytes: 2083,
                latency_ms: Some(41.5),
                written_ms: Some(12.25),
            },
            crate::conference::AduRecord {
                video: 2,
                frame: 0,
                layer: 7,
                capture_s: 0.0,
                bytes: 2083,
                latency_ms: None,
                written_ms: None,
            },
        ],
    )];
    r[2].conference_sent = vec![(
        "MB".into(),
        lowtide_media::session::ConferenceSent {
            frames: 1,
            sent: [1; 8],
            written: [1, 1, 1, 1, 1, 1, 0, 0],
            cancelled: [0, 0, 0, 0, 0, 0, 0, 1],
            superseded: [0; 8],
            aged: [0, 0, 0, 0, 0, 0, 1, 0],
            bytes_written: 12_000,
            writes: vec![],
        },
    )];
    files::write_records(&dir, &r).unwrap();
    let back = files::read_records(&dir).unwrap();
    assert_eq!(back.len(), 3);
    for (a, b) in r.iter().zip(&back) {
        assert_eq!(a.streams, b.streams);
        assert_eq!(a.floor, b.floor);
        assert_eq!(a.windows, b.windows);
        assert_eq!(a.tcp, b.tcp);
        assert_eq!(a.variants, b.variants);
        assert_eq!(a.delivery_errors, b.delivery_errors);
        assert_eq!(a.network, b.network);
        assert_eq!(a.adus, b.adus);
        assert_eq!(a.conference_sent, b.conference_sent);
    }
    // adus.csv from before several videos (no video column) reads as video 0.
    let adus = std::fs::read_to_string(dir.join(files::ADUS)).unwrap();
    let old: String = adus
        .lines()
        .map(|l| {
            let mut f: Vec<&str> = l.split(',').collect();
            f.remove(4);
            f.join(",") + "\n"
        })
        .collect();
    assert!(old.starts_with("trial,mode,run,series,frame,"), "{old}");
    std::fs::write(dir.join(files::ADUS), old).unwrap();
    let back = files::read_records(&dir).unwrap();
    assert!(back[2].adus[0].1.iter().all(|a| a.video == 0));
    assert_eq!(back[2].adus[0].1.len(), 2);
    // A row naming a trial that does not exist is an error with its line.
    std::fs::write(
        dir.join(files::MESSAGES),
        "trial,mode,run,series,sent_s,latency_ms,censored\n7,side_by_side,1,MB,1.0,2.0,0\n",
    )
    .unwrap();
    let e = files::read_records(&dir).unwrap_err().to_string();
    assert!(e.contains("line 2") && e.contains("trial 7"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A goal over runs needs its runs: one run cannot show a median over five.
#[test]
fn a_goal_on_fewer_samples_than_it_asks_for_is_not_met() {
    use crate::goals::check_goals;
    let w = inputs(vec![]).window;
    let v = summarize_variants(&records(), &infos(), w);
    let floor = summarize_floor(&[records()[0].clone()], w);
    let loose = Goal {
        min_samples: Some(1_000_000),
        ..goal(Metric::LatencyP99Ms, 1e9)
    };
    let r = check_goals(
        std::slice::from_ref(&loose),
        &[Mode::SideBySide],
        &v,
        &floor,
    );
    assert!(r[0].measured.is_some() && !r[0].met, "{r:?}");
    let enough = Goal {
        min_samples: Some(1),
        ..loose
    };
    assert!(check_goals(&[enough], &[Mode::SideBySide], &v, &floor)[0].met);
}
