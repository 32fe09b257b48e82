//! Report rendering from recorded data, without namespaces: a summary and records built the
//! way a run builds them, written to a run folder, then re-rendered from the folder alone.

use lowtide_lab::results::{self, TrialRecord, VariantInfo, VideoInfo, Window};
use lowtide_lab::scenario::{Mode, Scenario};
use lowtide_lab::stream::{Sample, SendCost};
use lowtide_lab::video::WindowRecord;
use lowtide_lab::{runner, sweep};

/// A plain-TCP stream whose queue grows to seconds, a MinBuf stream near the floor.
fn recorded(mode: Mode, run: u32, names: &[&str]) -> Vec<TrialRecord> {
    let stream = |name: &str| {
        let tcp = name == "TCP";
        let samples: Vec<Sample> = (0..3000)
            .filter(|i| tcp || i % 10 != 0)
            .map(|i| {
                let t = i as f64 * 0.01;
                Sample {
                    sent_s: t,
                    latency_ms: if tcp {
                        50.0 + t * 60.0
                    } else {
                        55.0 + (i % 7) as f64
                    },
                }
            })
            .collect();
        (name.to_string(), samples)
    };
    let floor: Vec<Sample> = (0..3000)
        .map(|i| Sample {
            sent_s: i as f64 * 0.01,
            latency_ms: 50.0 + (i % 5) as f64,
        })
        .collect();
    let cost = |name: &str| {
        let messages = if name == "TCP" { 3000 } else { 2700 };
        let cost = SendCost {
            messages,
            cpu_user_s: 0.5,
            cpu_system_s: 1.0,
            driver_wakeups: messages,
            write_calls: messages,
            bytes_written: messages * 1448,
            controller_blocked: 0,
        };
        (name.to_string(), cost)
    };
    match mode {
        Mode::SideBySide => vec![TrialRecord {
            mode: Some(mode),
            run,
            streams: names.iter().map(|n| stream(n)).collect(),
            floor,
            costs: names.iter().map(|n| cost(n)).collect(),
            windows: vec![],
        }],
        Mode::Sequential => names
            .iter()
            .map(|n| TrialRecord {
                mode: Some(mode),
                run,
                streams: vec![stream(n)],
                floor: floor.clone(),
                costs: vec![cost(n)],
                windows: vec![],
            })
            .collect(),
    }
}

#[test]
fn a_run_folder_renders_and_re_renders_without_namespaces() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scenarios/demo.toml"
    ))
    .unwrap();
    let scenario = Scenario::from_toml(&text).unwrap().scenario;
    let names = ["TCP", "MinBuf(1,3)"];
    let mut records = recorded(Mode::SideBySide, 1, &names);
    for run in 1..=3 {
        records.extend(recorded(Mode::Sequential, run, &names));
    }
    let infos: Vec<VariantInfo> = names
        .iter()
        .map(|n| VariantInfo {
            name: n.to_string(),
            controller: n.to_string(),
            congestion: "cubic".into(),
            ecn: false,
            paper: None,
            baseline: Some("TCP".into()),
            video: None,
        })
        .collect();
    // Side by side, two video variants too: windows of 4 frames, plain TCP's late and
    // sometimes dropped, MinBuf's on time.
    let video = |name: &str| -> Vec<WindowRecord> {
        let tcp = name == "video TCP";
        (0..225)
            .map(|k| {
                let capture_s = f64::from(k) * 4.0 / 30.0;
                let dropped = tcp && k % 4 == 0;
                let latency_ms =
                    (!dropped).then_some(if tcp { 300.0 + capture_s * 40.0 } else { 280.0 });
                WindowRecord {
                    window: k,
                    capture_s,
                    planned: 16,
                    written: if dropped { 0 } else { 12 },
                    bytes_written: if dropped { 0 } else { 6000 },
                    received: if dropped { 0 } else { 12 },
                    count_received: true,
                    latency_ms,
                    frames: 4,
                    frames_shown: if latency_ms.is_some_and(|l| l <= 500.0) {
                        4
                    } else {
                        0
                    },
                    layers_shown: if latency_ms.is_some_and(|l| l <= 500.0) {
                        12
                    } else {
                        0
                    },
                }
            })
            .collect()
    };
    for name in ["video TCP", "video MinBuf(1,3)"] {
        let w = video(name);
        records[0].streams.push((
            name.into(),
            w.iter().filter_map(WindowRecord::sample).collect(),
        ));
        records[0].windows.push((name.into(), w));
    }
    let mut infos = infos;
    for name in ["video TCP", "video MinBuf(1,3)"] {
        infos.push(VariantInfo {
            name: name.into(),
            controller: name.into(),
            congestion: "cubic".into(),
            ecn: false,
            paper: None,
            baseline: Some("video TCP".into()),
            video: Some(VideoInfo {
                window_frames: 4,
                tolerance_ms: 500.0,
            }),
        });
    }
    let window = Window {
        from_s: 5.0,
        to_s: 25.0,
    };
    let variants = results::summarize_variants(&records, &infos, window);
    let floor = results::summarize_floor(&records, window);
    let summary = results::LabSummary {
        scenario: "recorded".into(),
        description: "recorded data".into(),
        paper: scenario.paper.clone(),
        quick: false,
        duration_s: 30.0,
        window,
        runs: 3,
        baseline: Some("TCP".into()),
        network: runner::describe_network(&scenario.topology),
        floor,
        variants,
        goals: vec![],
        trials: vec![],
        provenance: vec![("command".into(), "test".into())],
    };
    let mb = summary
        .variants
        .iter()
        .find(|v| v.name == "MinBuf(1,3)" && v.mode == Mode::Sequential)
        .unwrap();
    // 9 of 10 messages against TCP's all, TCP's late arrivals counted by receive time.
    let ratio = mb.goodput_vs_baseline.unwrap();
    assert!((0.85..1.0).contains(&ratio), "{mb:#?}");
    assert!(mb.sender_side_ms.p99 <= 12.0, "{mb:#?}");
    let vmb = summary
        .variants
        .iter()
        .find(|v| v.name == "video MinBuf(1,3)")
        .unwrap();
    let x = vmb.video.as_ref().unwrap();
    assert_eq!(
        (x.within(500.0), x.dropped_windows, x.mean_layers),
        (1.0, 0.0, 3.0)
    );
    let ratio = vmb.goodput_vs_baseline.unwrap();
    assert!((ratio - 4.0 / 3.0).abs() < 0.02, "{ratio}");
    let json = serde_json::to_value(vmb).unwrap();
    for key in ["windows_within_ms", "dropped_windows", "mean_layers", "fps"] {
        assert!(json.get(key).is_some(), "summary.json lacks {key}");
    }
    assert!(serde_json::to_value(mb)
        .unwrap()
        .get("mean_layers")
        .is_none());

    let dir = std::env::temp_dir().join(format!("lowtide-render-{}", std::process::id()));
    // A reused folder: an earlier run's plot of another mode goes, files not ours stay.
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("latency-other.svg"), "<svg/>").unwrap();
    std::fs::write(dir.join("notes.txt"), "mine").unwrap();
    runner::write_run_folder(&dir, &text, &summary, &records).unwrap();
    assert!(!dir.join("latency-other.svg").exists());
    assert!(dir.join("notes.txt").exists());
    let first = std::fs::read_to_string(dir.join("report.html")).unwrap();
    for svg in [
        "latency-side_by_side.svg",
        "cdf-side_by_side.svg",
        "latency-sequential.svg",
        "cdf-sequential.svg",
        "throughput-sequential.svg",
        "windows-side_by_side.svg",
    ] {
        let text = std::fs::read_to_string(dir.join(svg)).unwrap_or_else(|e| panic!("{svg}: {e}"));
        assert!(text.starts_with("<svg"), "{svg}");
        assert!(first.contains(svg), "report.html does not show {svg}");
        let png = std::fs::read(dir.join(svg.replace(".svg", ".png"))).unwrap();
        assert!(
            png.starts_with(b"\x89PNG") && png.len() > 5000,
            "{svg}: PNG copy"
        );
    }
    assert!(first.contains("drop-tail queue of 1 BDP") && first.contains("MinBuf(1,3)"));
    assert!(first.contains("Table I") && first.contains("system µs per write call"));
    assert!(first.contains("Table II") && first.contains("windows.csv"));
    std::fs::remove_file(dir.join("report.html")).unwrap();
    runner::rerender(&dir).unwrap();
    let again = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert_eq!(
        first, again,
        "re-rendering from the folder gives the same page"
    );

    // A sweep's index puts every combination's rows in one table.
    let points: Vec<sweep::SweepPoint> = ["q0.5-reno", "q2-bbr"]
        .iter()
        .map(|f| sweep::SweepPoint {
            folder: f.to_string(),
            queue_bdp: None,
            congestion: None,
            summary: summary.clone(),
        })
        .collect();
    let index = sweep::write_index(&dir, "recorded", &points).unwrap();
    let html = std::fs::read_to_string(index).unwrap();
    assert_eq!(
        html.matches("<td>q2-bbr</td>").count(),
        summary.variants.len()
    );
    assert!(html.contains("href=\"q0.5-reno/report.html\""));
    let table = sweep::text_table(&points);
    assert_eq!(table.lines().count(), 1 + 2 * summary.variants.len());
    std::fs::remove_dir_all(&dir).unwrap();
}
