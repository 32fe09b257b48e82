//! Report rendering from recorded data, without namespaces: records built the way a run
//! builds them for the demo scenario, written to a run folder, then recomputed and
//! re-rendered from the folder alone.

use lowtide_lab::results::{self, TrialRecord};
use lowtide_lab::runner::{self, LabOptions};
use lowtide_lab::scenario::{Mode, Scenario};
use lowtide_lab::stream::{Sample, SendCost};
use lowtide_lab::sweep;
use lowtide_lab::video::WindowRecord;

const TCP: &str = "plain TCP";
const MB: &str = "lowtide MinBuf(1,3)";
const VIDEO_TCP: &str = "video, plain TCP";
const VIDEO_MB: &str = "video, MinBuf(1,3)";

/// A plain-TCP stream whose queue grows to seconds (its last messages never arrive), a
/// MinBuf stream near the floor.
fn stream(name: &str) -> (String, Vec<Sample>) {
    let tcp = name == TCP;
    let samples: Vec<Sample> = (0..3000)
        .filter(|i| tcp || i % 10 != 0)
        .map(|i| {
            let t = i as f64 * 0.01;
            match (tcp, t > 28.0) {
                (true, true) => Sample::censored(t, 31.0),
                (true, false) => Sample::delivered(t, 50.0 + t * 60.0),
                (false, _) => Sample::delivered(t, 55.0 + (i % 7) as f64),
            }
        })
        .collect();
    (name.to_string(), samples)
}

fn cost(name: &str) -> (String, SendCost) {
    let messages = if name == TCP { 3000 } else { 2700 };
    let cost = SendCost {
        messages,
        cpu_user_s: Some(0.5),
        cpu_system_s: Some(1.0),
        driver_wakeups: messages,
        write_calls: messages,
        bytes_written: messages * 1448,
        controller_blocked: 0,
        ..SendCost::default()
    };
    (name.to_string(), cost)
}

/// Windows of 4 frames: plain TCP's late and sometimes dropped, MinBuf's on time.
fn video(name: &str) -> Vec<WindowRecord> {
    let tcp = name == VIDEO_TCP;
    (0..225)
        .map(|k| {
            let capture_s = f64::from(k) * 4.0 / 30.0;
            let dropped = tcp && k % 4 == 0;
            let latency_ms =
                (!dropped).then_some(if tcp { 300.0 + capture_s * 40.0 } else { 280.0 });
            let shown = latency_ms.is_some_and(|l| l <= 500.0);
            WindowRecord {
                window: k,
                capture_s,
                planned: 16,
                written: if dropped { 0 } else { 12 },
                bytes_written: if dropped { 0 } else { 6000 },
                received: if dropped { 0 } else { 12 },
                bytes_received: if dropped { 0 } else { 6000 },
                count_received: true,
                latency_ms,
                censored_ms: None,
                frames: 4,
                frames_shown: if shown { 4 } else { 0 },
                layers_shown: if shown { 12 } else { 0 },
            }
        })
        .collect()
}

fn trial(mode: Mode, run: u32, names: &[&str]) -> TrialRecord {
    let floor = (0..3000)
        .map(|i| Sample::delivered(i as f64 * 0.01, 50.0 + (i % 5) as f64))
        .collect();
    let mut t = TrialRecord {
        mode: Some(mode),
        run,
        variants: names.iter().map(|n| n.to_string()).collect(),
        floor,
        costs: names.iter().map(|n| cost(n)).collect(),
        ..TrialRecord::default()
    };
    t.floor_sent.probes = 3000;
    for n in names {
        if n.starts_with("video") {
            let w = video(n);
            t.streams.push((
                n.to_string(),
                w.iter().filter_map(WindowRecord::sample).collect(),
            ));
            t.windows.push((n.to_string(), w));
        } else {
            t.streams.push(stream(n));
        }
    }
    t.network.mode = Some(mode);
    t.network.run = run;
    t.network.variants = t.variants.clone();
    t
}

#[test]
fn a_run_folder_renders_and_recomputes_without_namespaces() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scenarios/demo.toml"
    ))
    .unwrap()
    .replace(
        "modes = [\"side_by_side\"]",
        "modes = [\"side_by_side\", \"sequential\"]",
    )
    .replace("runs = 1\nseed", "runs = 3\nseed")
    .replace(
        "measure_from_s = 10.0",
        "measure_from_s = 5.0\nmeasure_to_s = 29.0",
    );
    let checked = Scenario::from_toml(&text).unwrap();
    let all = [TCP, MB, VIDEO_TCP, VIDEO_MB];
    let mut records = vec![trial(Mode::SideBySide, 1, &all)];
    for run in 1..=3 {
        records.extend(all.iter().map(|n| trial(Mode::Sequential, run, &[n])));
    }
    let inputs = runner::summary_inputs(&checked, &LabOptions::default(), &[]);
    let summary = results::summarize(&inputs, &records, None);
    let mb = summary
        .variants
        .iter()
        .find(|v| v.name == MB && v.mode == Mode::Sequential)
        .unwrap();
    // 9 of 10 messages against TCP's, TCP's late arrivals counted by receive time.
    let ratio = mb.goodput_vs_baseline.unwrap();
    assert!((0.85..1.1).contains(&ratio), "{mb:#?}");
    assert!(mb.sender_side_ms.latency.p99.unwrap() <= 12.0, "{mb:#?}");
    let tcp = summary.variants.iter().find(|v| v.name == TCP).unwrap();
    assert!(tcp.latency_ms.censored > 0 && tcp.latency_ms.is_lower_bound("max"));
    let vmb = summary
        .variants
        .iter()
        .find(|v| v.name == VIDEO_MB)
        .unwrap();
    let x = vmb.video.as_ref().unwrap();
    assert_eq!(
        (x.within(500.0).value, x.dropped_windows, x.mean_layers),
        (Some(1.0), Some(0.0), Some(3.0))
    );
    let sent = vmb.sent_vs_baseline.unwrap().mean;
    assert!((sent - 4.0 / 3.0).abs() < 0.02, "{sent}");
    let json = serde_json::to_value(vmb).unwrap();
    for key in [
        "windows_within_ms",
        "dropped_windows",
        "mean_layers",
        "fps",
        "sent_bps",
    ] {
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
    runner::write_run_folder(&dir, &text, &checked.scenario, &summary, &records).unwrap();
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
    assert!(first.contains("drop-tail queue of 1 BDP") && first.contains(MB));
    assert!(first.contains("Table I") && first.contains("system µs per write call"));
    assert!(first.contains("Table II") && first.contains("windows.csv"));
    assert!(first.contains("≥ ") && first.contains("undelivered"));

    // `lab report` recomputes the same summary from the files alone...
    std::fs::remove_file(dir.join("report.html")).unwrap();
    let again = runner::recompute(&dir).unwrap();
    assert!(again.differences.is_empty(), "{:#?}", again.differences);
    assert_eq!(again.summary, summary);
    let page = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert_eq!(
        first, page,
        "re-rendering from the folder gives the same page"
    );
    // ...and says where a stored summary differs from what the records give.
    let mut edited = summary.clone();
    edited.variants[0].latency_ms.p50 = Some(1.0);
    results::write_json(&dir.join("summary.json"), &edited).unwrap();
    let again = runner::recompute(&dir).unwrap();
    assert_eq!(again.differences.len(), 1, "{:#?}", again.differences);
    assert!(
        again.differences[0].contains("latency_ms.p50: 1 →"),
        "{:?}",
        again.differences
    );
    assert!(dir.join("summary.stored.json").exists());

    // A sweep's index puts every combination's rows in one table.
    let points: Vec<sweep::SweepPoint> = ["q0.5-reno", "q2-bbr"]
        .iter()
        .map(|f| sweep::SweepPoint {
            folder: f.to_string(),
            queue_bdp: None,
            congestion: None,
            threshold_ms: None,
            summary: summary.clone(),
        })
        .collect();
    let index = sweep::write_index(&dir, "recorded", &points, None).unwrap();
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
