//! Report rendering from recorded data, without namespaces: a summary and records built the
//! way a run builds them, written to a run folder, then re-rendered from the folder alone.

use lowtide_lab::results::{self, TrialRecord, VariantInfo, Window};
use lowtide_lab::runner;
use lowtide_lab::scenario::{Mode, Scenario};
use lowtide_lab::stream::{Sample, SendCost};

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
        }],
        Mode::Sequential => names
            .iter()
            .map(|n| TrialRecord {
                mode: Some(mode),
                run,
                streams: vec![stream(n)],
                floor: floor.clone(),
                costs: vec![cost(n)],
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
        })
        .collect();
    let window = Window {
        from_s: 5.0,
        to_s: 25.0,
    };
    let variants = results::summarize_variants(&records, &infos, Some("TCP"), window);
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

    let dir = std::env::temp_dir().join(format!("lowtide-render-{}", std::process::id()));
    runner::write_run_folder(&dir, &text, &summary, &records).unwrap();
    let first = std::fs::read_to_string(dir.join("report.html")).unwrap();
    for svg in [
        "latency-side_by_side.svg",
        "cdf-side_by_side.svg",
        "latency-sequential.svg",
        "cdf-sequential.svg",
        "throughput-sequential.svg",
    ] {
        let text = std::fs::read_to_string(dir.join(svg)).unwrap_or_else(|e| panic!("{svg}: {e}"));
        assert!(text.starts_with("<svg"), "{svg}");
        assert!(first.contains(svg), "report.html does not show {svg}");
    }
    assert!(first.contains("drop-tail queue of 1 BDP") && first.contains("MinBuf(1,3)"));
    assert!(first.contains("Table I") && first.contains("wake-ups per message"));
    std::fs::remove_file(dir.join("report.html")).unwrap();
    runner::rerender(&dir).unwrap();
    let again = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert_eq!(
        first, again,
        "re-rendering from the folder gives the same page"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
