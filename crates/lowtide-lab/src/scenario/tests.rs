use super::*;
use lowtide::ControllerConfig;

pub(super) const GOOD: &str = r#"
kind = "streams"
name = "t"
[run]
modes = ["side_by_side", "sequential"]
duration_s = 40.0
measure_from_s = 10.0
[topology]
receivers = 2
forward = { rate_mbps = 10, delay_ms = 25 }
reverse = { rate_mbps = 10, delay_ms = 25 }
[[forward_traffic.flow]]
kind = "elephant"
count = 3
start_s = 5.0
stop_s = 40.0
congestion_control = "cubic"
target = 1
[[variant]]
name = "TCP"
controller = "unlimited"
[[variant]]
name = "MinBuf(1,3)"
controller = { min_buf = { a = 1, b = 3 } }
"#;

fn err(text: &str) -> String {
    Scenario::from_toml(text).unwrap_err().to_string()
}

#[test]
fn a_good_scenario_checks_and_finds_its_baseline() {
    let c = Scenario::from_toml(GOOD).unwrap();
    assert_eq!(c.baseline, Some(0));
    assert_eq!(c.forward_plan.flows.len(), 3);
    assert_eq!(c.scenario.measure_to_s(), 40.0);
}

#[test]
fn quick_scales_every_time_and_runs_once() {
    let mut s = Scenario::from_toml(GOOD).unwrap().scenario;
    s.run.runs = 8;
    let q = s.quick();
    assert_eq!(q.run.duration_s, 20.0);
    assert_eq!(q.run.measure_from_s, 5.0);
    assert_eq!(q.forward_traffic.flows[0].start_s, 2.5);
    assert_eq!(q.run.runs, 1);
    q.check().unwrap();
}

#[test]
fn overrides_change_the_queue_and_every_congestion_control() {
    let s = Scenario::from_toml(GOOD).unwrap().scenario;
    let o = Overrides {
        queue_bdp: Some(0.5),
        congestion: Some("reno".into()),
        window_frames: Some(2),
        threshold_ms: Some(500.0),
    };
    let t = s.with_overrides(&o).check().unwrap().scenario;
    assert_eq!(
        t.topology.forward.queue,
        lowtide_netem::QueueLimit::Bdp(0.5)
    );
    assert_eq!(t.topology.hosts.congestion, "reno");
    assert_eq!(
        t.forward_traffic.flows[0].congestion_control.as_deref(),
        Some("reno")
    );
    assert_eq!(t.application.video.window_frames, 2);
    assert_eq!(t.application.conference.threshold_ms, 500.0);
    assert_eq!(o.suffix(), "-q0.5-reno-w2-t500");
    let e = s
        .with_overrides(&Overrides {
            queue_bdp: Some(-1.0),
            ..Overrides::default()
        })
        .check()
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("topology.forward.queue"), "{e}");
}

#[test]
fn unknown_fields_are_named() {
    let e = err(&GOOD.replace("duration_s = 40.0", "duration_s = 40.0\nlenght = 3"));
    assert!(e.contains("unknown field `lenght`"), "{e}");
}

#[test]
fn out_of_range_values_name_field_value_and_range() {
    let e = err(&GOOD.replace("duration_s = 40.0", "duration_s = 2.0"));
    assert_eq!(e, "run.duration_s = 2: allowed is 5 to 3600");
    let e = err(&GOOD.replace("measure_from_s = 10.0", "measure_from_s = 50.0"));
    assert!(e.starts_with("run.measure_from_s = 50"), "{e}");
    let e = err(&GOOD.replace("a = 1, b = 3", "a = 0, b = 3"));
    assert!(e.starts_with("variant[1].controller"), "{e}");
}

#[test]
fn cross_traffic_must_fit_the_topology_and_the_run() {
    let e = err(&GOOD.replace("target = 1", "target = 2"));
    assert!(e.starts_with("forward_traffic.flow[0].target = 2"), "{e}");
    let e = err(&GOOD.replace("stop_s = 40.0", "stop_s = 45.0"));
    assert!(e.starts_with("forward_traffic.flow[0].stop_s = 45"), "{e}");
    let e = err(&GOOD.replace("count = 3", "count = 65"));
    assert!(e.starts_with("forward_traffic.flow[0].count = 65"), "{e}");
}

#[test]
fn variants_must_be_distinct_and_ecn_needs_its_own_host() {
    let e = err(&GOOD.replace("name = \"MinBuf(1,3)\"", "name = \"TCP\""));
    assert!(e.starts_with("variant[1].name = TCP"), "{e}");
    let e = err(&GOOD.replace(
        "controller = { min_buf",
        "ecn = true\ncontroller = { min_buf",
    ));
    assert!(e.starts_with("variant[1].sender = 0"), "{e}");
}

#[test]
fn sender_sysctls_need_a_tcp_name_a_number_and_a_host_without_cross_traffic() {
    let two = GOOD.replace("receivers = 2", "receivers = 2\nsenders = 2");
    let with = |text: &str, sysctls: &str| {
        text.replace(
            "controller = { min_buf",
            &format!("sender = 1\nsender_sysctls = {sysctls}\ncontroller = {{ min_buf"),
        )
    };
    let ok = Scenario::from_toml(&with(
        &two.replace("\"side_by_side\", ", ""),
        r#"{ "net.ipv4.tcp_reordering" = "1", "net.ipv4.tcp_recovery" = "5" }"#,
    ))
    .unwrap();
    assert_eq!(ok.scenario.variants[1].sender_sysctls.len(), 2);
    let e = err(&with(&two, r#"{ "kernel.panic" = "1" }"#));
    assert!(
        e.starts_with("variant[1].sender_sysctls = \"kernel.panic\""),
        "{e}"
    );
    let e = err(&with(&two, r#"{ "net.ipv4.tcp_../../x" = "1" }"#));
    assert!(e.starts_with("variant[1].sender_sysctls"), "{e}");
    let e = err(&with(
        &two,
        r#"{ "net.ipv4.tcp_reordering" = "1; reboot" }"#,
    ));
    assert!(
        e.starts_with("variant[1].sender_sysctls.\"net.ipv4.tcp_reordering\""),
        "{e}"
    );
    // Sender 0 also sends the forward cross traffic.
    let e =
        err(&with(&two, r#"{ "net.ipv4.tcp_reordering" = "1" }"#)
            .replace("sender = 1", "sender = 0"));
    assert!(e.starts_with("variant[1].sender = 0"), "{e}");
    // Side by side, a host is shared: other values on it need a host of their own.
    let e = err(&with(&two, r#"{ "net.ipv4.tcp_reordering" = "1" }"#)
        .replace("name = \"TCP\"", "name = \"TCP\"\nsender = 1"));
    assert!(e.starts_with("variant[1].sender = 1"), "{e}");
}

#[test]
fn tfrc_and_ladder_variants_are_checked() {
    let with = |extra: &str| format!("{GOOD}[[variant]]\nname = \"X\"\n{extra}\n");
    let tfrc = "tfrc = { buffer = { fixed = { bytes = 16384 } } }";
    let ok = Scenario::from_toml(&with(tfrc)).unwrap();
    assert!(ok.scenario.variants[2].tfrc.is_some());
    let e = err(&with("tfrc = { buffer = { fixed = { bytes = 0 } } }"));
    assert!(
        e.starts_with("variant[2].tfrc") && e.contains("buffer.fixed.bytes"),
        "{e}"
    );
    let e = err(&with(&format!("{tfrc}\nsndbuf = 65536")));
    assert!(e.starts_with("variant[2].tfrc"), "{e}");
    let e = err(&with(&format!("{tfrc}\napplication = \"conference\"")));
    assert!(e.starts_with("variant[2].application = Conference"), "{e}");
    let ladder = |start_s: &str| {
        with("application = \"bitrate_ladder\"").replace(
            "name = \"t\"",
            &format!("name = \"t\"\n[application.ladder]\nstart_s = {start_s}"),
        )
    };
    Scenario::from_toml(&ladder("1.0")).unwrap();
    let e = err(&ladder("1e6"));
    assert!(e.starts_with("application.ladder.start_s = 1000000"), "{e}");
    let e = err(&with("application = \"bitrate_ladder\"\nquic = {}"));
    assert!(
        e.starts_with("variant[2].application = BitrateLadder"),
        "{e}"
    );
}

#[test]
fn topology_errors_keep_their_field() {
    let e = err(&GOOD.replace("receivers = 2", "receivers = 0"));
    assert!(e.starts_with("topology.receivers = 0"), "{e}");
}

#[test]
fn video_variants_need_a_video_and_get_a_baseline_of_their_kind() {
    let video = GOOD.replace(
        "name = \"t\"",
        "name = \"t\"\n[application.video]\ntrace = \"testsrc2-4layer\"\nwindow_frames = 2",
    ) + "[[variant]]\nname = \"video TCP\"\ncontroller = \"unlimited\"\napplication = \"layered_video\"\n\
         [[variant]]\nname = \"video MinBuf\"\ncontroller = { min_buf = { a = 1, b = 3 } }\napplication = \"layered_video\"\n";
    let c = Scenario::from_toml(&video).unwrap();
    assert_eq!(c.baseline_of(1), Some(0));
    assert_eq!(c.baseline_of(3), Some(2));
    let v = c.scenario.application.video.video(60.0).unwrap();
    assert_eq!((v.frames.len(), v.layer_count()), (1800, 4));
    let e = err(&video.replace("testsrc2-4layer", "nope"));
    assert!(e.starts_with("application.video.trace = \"nope\""), "{e}");
    let e = err(&video.replace("window_frames = 2", "window_frames = 0"));
    assert!(e.starts_with("application.video.window_frames = 0"), "{e}");
    let e = err(&video.replace(
        "window_frames = 2",
        "synthetic = { fps = 30, layer_bps = [1e5], gop = 30, i_frame_ratio = 2, spread = 0, seed = 1 }",
    ));
    assert!(
        e.starts_with("application.video = trace and synthetic"),
        "{e}"
    );
}

#[test]
fn quic_variants_are_checked() {
    let quic = |extra: &str| format!("{GOOD}[[variant]]\nname = \"QUIC\"\n{extra}\n");
    let ok = Scenario::from_toml(&quic("quic = { congestion = \"bbr\" }")).unwrap();
    let v = &ok.scenario.variants[2];
    assert_eq!(v.controller, ControllerConfig::Unlimited);
    assert_eq!(v.quic.as_ref().unwrap().send_window_bytes, 65536);
    let e = err(&quic("quic = { congestion = \"vegas\" }"));
    assert!(
        e.starts_with("variant[2].quic") && e.contains("cubic, newreno, bbr"),
        "{e}"
    );
    let e = err(&quic("quic = { send_window_bytes = 100 }"));
    assert!(e.contains("send_window_bytes = 100"), "{e}");
    let e = err(&quic("quic = {}\ncongestion = \"reno\""));
    assert!(e.contains("without lowtide's TCP settings"), "{e}");
    let e = err(&quic("quic = {}\napplication = \"layered_video\""));
    assert!(e.starts_with("variant[2].application"), "{e}");
    // A variant without a controller is plain TCP.
    let plain = Scenario::from_toml(&format!("{GOOD}[[variant]]\nname = \"plain\"\n")).unwrap();
    assert_eq!(
        plain.scenario.variants[2].controller,
        ControllerConfig::Unlimited
    );
}

#[test]
fn failover_variants_are_checked() {
    let fo = |extra: &str| format!("{GOOD}[[variant]]\nname = \"FO\"\n{extra}\n");
    let ok = Scenario::from_toml(&fo("failover = { backups = 2, floor_ms = 60 }")).unwrap();
    let f = ok.scenario.variants[2].failover.unwrap();
    assert_eq!((f.backups, f.floor_ms, f.factor), (2, 60, 2.0));
    let e = err(&fo("failover = { backups = 0 }"));
    assert!(
        e.starts_with("variant[2].failover")
            && e.contains("failover.backups")
            && e.contains("1..=8"),
        "{e}"
    );
    let e = err(&fo("failover = {}\nquic = {}"));
    assert!(e.contains("failover on lowtide's TCP variants only"), "{e}");
    assert!(Scenario::from_toml(&fo("failover = { bogus = 1 }")).is_err());
}

#[test]
fn two_path_variants_are_checked_and_outages_scale_with_quick() {
    let text = include_str!("../../../../scenarios/handover.toml");
    let c = Scenario::from_toml(text).unwrap();
    let v = &c.scenario.variants[2];
    assert_eq!(v.paths, vec![NetPath::A, NetPath::B]);
    let q = c.scenario.quick();
    assert_eq!(q.topology.forward.outages[0].at_s, 10.0);
    assert_eq!(q.topology.forward.outages[0].for_s, 2.5);
    let marks = c.scenario.outage_marks();
    assert_eq!(marks.len(), 4);
    assert_eq!(
        (marks[0].link.as_str(), marks[0].from_s, marks[0].to_s),
        ("path A forward", 20.0, 25.0)
    );
    assert_eq!(marks[1].kind, "rate x 0.1");
    let fo = |extra: &str| format!("{GOOD}[[variant]]\nname = \"FO\"\n{extra}\n");
    let e = err(&fo("failover = {}\npaths = [\"a\", \"b\"]"));
    assert!(
        e.contains("variant[2].paths") && e.contains("topology.path_b"),
        "{e}"
    );
    let e = err(&fo("paths = [\"a\", \"c\"]"));
    assert!(e.contains("variant"), "{e}");
    let two = text.replace("paths = [\"a\", \"b\"]", "paths = [\"b\", \"b\"]");
    let e = err(&two);
    assert!(e.contains("paths") && e.contains("at most once"), "{e}");
}

#[test]
fn importance_reserve_variants_are_checked() {
    let r = |extra: &str| format!("{GOOD}[[variant]]\nname = \"R\"\n{extra}\n");
    let mb = "controller = { min_buf = { a = 1, b = 3 } }";
    let ok = Scenario::from_toml(&r(&format!(
        "{mb}\nimportance_reserve = {{ segments = 5, min_importance = 7 }}"
    )))
    .unwrap();
    let got = ok.scenario.variants[2].importance_reserve.unwrap();
    assert_eq!((got.segments, got.min_importance), (5, 7));
    let e = err(&r(&format!(
        "{mb}\nimportance_reserve = {{ segments = 0, min_importance = 7 }}"
    )));
    assert!(
        e.starts_with("variant[2].importance_reserve") && e.contains("1..=16"),
        "{e}"
    );
    // Plain TCP has no kernel-queue limit to keep a reserve in.
    let e = err(&r(
        "importance_reserve = { segments = 2, min_importance = 7 }",
    ));
    assert!(e.contains("a limit-based controller"), "{e}");
    let e = err(&r(
        "quic = {}\nimportance_reserve = { segments = 2, min_importance = 7 }",
    ));
    assert!(e.contains("lowtide's TCP variants only"), "{e}");
}

#[test]
fn one_segment_messages_are_for_the_latency_stream_over_lowtide_only() {
    let ok = format!("{GOOD}[[variant]]\nname = \"A\"\none_segment_messages = true\n");
    let s = Scenario::from_toml(&ok).unwrap().scenario;
    assert!(s.variants.iter().any(|v| v.one_segment_messages));
    for other in ["quic = {}", "tls = true", "application = \"conference\""] {
        let r = format!("{ok}{other}\n");
        let e = err(&r);
        assert!(e.contains("one_segment_messages"), "{other}: {e}");
    }
}

#[test]
fn age_cancellation_is_checked_and_reaches_the_videos() {
    let text = include_str!("../../../../scenarios/paceline-fig6.toml");
    let s = Scenario::from_toml(text).unwrap().scenario;
    let videos = |name: &str| {
        let v = s.variants.iter().find(|v| v.name == name).unwrap();
        s.conference_videos(v)[0].age_cancel
    };
    assert_eq!(
        videos("MinBuf(1,3)+failover+age cancel"),
        Some(std::time::Duration::from_millis(15))
    );
    assert_eq!(videos("MinBuf(1,3)+failover"), None);
    let bad = |from: &str, to: &str| {
        let e = err(&text.replace(from, to));
        assert!(e.contains("age_cancel_ms"), "{e}");
        e
    };
    let e = bad("age_cancel_ms = 15.0", "age_cancel_ms = 0.0");
    assert!(e.contains("1 to 600000 ms"), "{e}");
    bad("age_cancel_ms = 15.0", "age_cancel_ms = nan");
    // Not on the QUIC variant, nor outside a conference.
    let e = bad(
        "quic = { congestion",
        "age_cancel_ms = 20.0\nquic = { congestion",
    );
    assert!(e.contains("conference variants only"), "{e}");
    let r = format!("{GOOD}[[variant]]\nname = \"A\"\nage_cancel_ms = 20.0\n");
    assert!(err(&r).contains("conference variants only"));
}

#[test]
fn fig6_reserves_parse_and_the_removed_timed_form_is_refused() {
    let text = include_str!("../../../../scenarios/paceline-fig6.toml");
    let s = Scenario::from_toml(text).unwrap().scenario;
    let reserve = |name: &str| {
        let v = s.variants.iter().find(|v| v.name == name).unwrap();
        v.importance_reserve.map(|r| (r.segments, r.min_importance))
    };
    assert_eq!(reserve("MinBuf(1,3)+failover+reserve 2"), Some((2, 7)));
    assert_eq!(reserve("MinBuf(1,3)+reserve 5"), Some((5, 7)));
    let timed = text.replace(
        "importance_reserve = { segments = 2, min_importance = 7 }",
        "importance_reserve = { segments = 2, min_importance = 7, timed = true }",
    );
    assert!(Scenario::from_toml(&timed).is_err());
}

#[test]
fn several_conference_videos_are_checked_when_parsed() {
    let conf = GOOD.replace(
        "name = \"MinBuf(1,3)\"",
        "name = \"MinBuf(1,3)\"\napplication = \"conference\"",
    );
    let with = |app: &str| format!("{conf}[application.conference]\n{app}\n");
    let ok = Scenario::from_toml(&with("videos_mbps = [2, 4, 6]\nfairness = \"quality\"")).unwrap();
    let app = &ok.scenario.application.conference;
    assert_eq!(app.fairness, lowtide::Fairness::Quality);
    let rates: Vec<f64> = app.videos().iter().map(|c| c.rate_bps).collect();
    assert_eq!(rates, [2e6, 4e6, 6e6]);
    // The default: one video at rate_mbps, resource fairness (today's behaviour).
    let one = Scenario::from_toml(&with("rate_mbps = 3")).unwrap();
    let app = &one.scenario.application.conference;
    assert_eq!(app.fairness, lowtide::Fairness::Resource);
    assert_eq!(app.videos().len(), 1);
    assert_eq!(app.videos()[0].rate_bps, 3e6);
    let e = err(&with("videos_mbps = [2, 0]"));
    assert_eq!(
        e,
        "application.conference.videos_mbps[1] = 0: allowed is 0.01 to 1000"
    );
    let e = err(&with(&format!("videos_mbps = [{}]", ["1"; 17].join(", "))));
    assert!(e.contains("17 videos") && e.contains("at most 16"), "{e}");
    assert!(Scenario::from_toml(&with("fairness = \"bytes\"")).is_err());
    // QUIC sends ADUs on streams of their own: one video only.
    let quic = format!(
        "{}[[variant]]\nname = \"QUIC\"\napplication = \"conference\"\nquic = {{}}\n",
        with("videos_mbps = [2, 4]")
    );
    let e = err(&quic);
    assert!(
        e.starts_with("application.conference.videos_mbps = 2 videos") && e.contains("QUIC"),
        "{e}"
    );
}

#[test]
fn a_declared_sweep_is_checked_when_parsed() {
    let conf = GOOD.replace(
        "name = \"MinBuf(1,3)\"",
        "name = \"MinBuf(1,3)\"\napplication = \"conference\"",
    ) + "[[variant]]\nname = \"QUIC\"\napplication = \"conference\"\nquic = {}\n";
    let with = |sweep: &str| format!("{conf}[sweep]\n{sweep}\n");
    let goal = "fps_goal = { reference = \"QUIC\", variants = [\"MinBuf(1,3)\"] }";
    let ok = Scenario::from_toml(&with(&format!("threshold_ms = [100, 2000]\n{goal}"))).unwrap();
    let sw = ok.scenario.sweep.as_ref().unwrap();
    assert_eq!(sw.threshold_ms, [100.0, 2000.0]);
    assert_eq!(sw.fps_goal.as_ref().unwrap().within, 0.1);
    let e = err(&with("threshold_ms = [100, 0.5]"));
    assert_eq!(e, "sweep.threshold_ms[1] = 0.5: allowed is 1 to 600000");
    let e = err(&with("threshold_ms = [100, 100]"));
    assert!(e.starts_with("sweep.threshold_ms[1] = 100"), "{e}");
    let e = err(&with(""));
    assert!(e.starts_with("sweep = no values"), "{e}");
    let e = err(&with("congestion = [\"cubic\", \"nope!\"]"));
    assert!(e.starts_with("sweep.congestion[1] = nope!"), "{e}");
    let e = err(&with("queue_bdp = [0.5, -1]"));
    assert!(e.starts_with("sweep.queue_bdp[1] = -1"), "{e}");
    let e = err(&with(&format!(
        "threshold_ms = [100]\n{}",
        goal.replace("\"QUIC\"", "\"SST\"")
    )));
    assert!(e.starts_with("sweep.fps_goal.reference = \"SST\""), "{e}");
    let e = err(&with(&format!(
        "threshold_ms = [100]\n{}",
        goal.replace("MinBuf(1,3)", "TCP")
    )));
    assert!(
        e.starts_with("sweep.fps_goal.variants = \"TCP\"") && e.contains("conference"),
        "{e}"
    );
    let e = err(&with("threshold_ms = [100]\nbogus = 1"));
    assert!(e.contains("unknown field `bogus`"), "{e}");
    // A threshold sweep needs a conference.
    let e = err(&format!("{GOOD}[sweep]\nthreshold_ms = [100]\n"));
    assert!(e.starts_with("sweep.threshold_ms"), "{e}");
    Scenario::from_toml(&format!("{GOOD}[sweep]\nqueue_bdp = [0.5, 2]\n")).unwrap();
}

#[test]
fn goals_must_name_a_variant() {
    let e = err(&format!(
        "{GOOD}\n[[goal]]\nvariant = \"Nope\"\nmetric = \"latency_p99_ms\"\nmax = 1.0\n"
    ));
    assert!(e.starts_with("goal[0].variant"), "{e}");
}

#[test]
fn shipped_scenarios_check() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let text = std::fs::read_to_string(&path).unwrap();
            let kind = crate::experiment::registry::resolve(&text)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
                .experiment
                .kind();
            if kind == "rdc" {
                // Checked by the RDC experiments' own test.
                continue;
            }
            if kind == "bwss" {
                let s = crate::bwss::BwssScenario::from_toml_in(&text, &dir)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                s.quick_form()
                    .unwrap_or_else(|e| panic!("{} --quick: {e}", path.display()));
                n += 1;
                continue;
            }
            let c =
                Scenario::from_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            c.scenario
                .quick()
                .check()
                .unwrap_or_else(|e| panic!("{} --quick: {e}", path.display()));
            n += 1;
        }
    }
    assert!(
        n >= 5,
        "expected the five shipped scenarios in {}",
        dir.display()
    );
}
