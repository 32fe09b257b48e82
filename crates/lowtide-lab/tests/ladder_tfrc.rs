//! A bit-rate-ladder stream over TFRC with a DBAT buffer through the emulator (needs root),
//! 6 s of traffic: the session probes, the DBAT rule streams the rung the probe allows, and the
//! run reports latency samples, per-second rates and the switch records; `lab report`
//! recomputes the same summary from the run folder.

use lowtide_lab::runner::{self, LabOptions};
use lowtide_lab::scenario::Scenario;

const SCENARIO: &str = r#"
kind = "streams"
name = "ladder-tfrc-test"
description = "A TFRC ladder stream alone through a 1 Mbit/s bottleneck"
[paper]
figure = "none"
text = ""
differences = ""
[run]
modes = ["sequential"]
duration_s = 6.0
measure_from_s = 0.5
runs = 1
seed = 1
[topology]
senders = 1
receivers = 1
[topology.hosts]
congestion = "cubic"
[topology.forward]
rate_mbps = 1.0
delay_ms = 20.0
queue = { bdp = 1.0 }
[topology.reverse]
rate_mbps = 1.0
delay_ms = 20.0
queue = { bdp = 1.0 }
[application]
kind = "bitrate_ladder"
[application.ladder]
start_s = 0.5
[[variant]]
name = "DBAT TFRC"
tfrc = { probe_at_start = true, buffer = { dbat = { bit_rate_kbps = 320, initial_window = 4 } } }
"#;

#[test]
fn a_tfrc_ladder_stream_runs_through_the_emulator_and_reports_samples() {
    let checked = Scenario::from_toml(SCENARIO).unwrap();
    let out = std::env::temp_dir().join(format!("lowtide-ladder-tfrc-{}", std::process::id()));
    let opts = LabOptions {
        scenario_text: SCENARIO.into(),
        out_dir: out.clone(),
        ..LabOptions::default()
    };
    let run = runner::run(&checked, &opts, |_| {}).expect("the lab runs (as root)");
    let v = &run.summary.variants[0];
    let l = v.ladder.as_ref().expect("a ladder summary");
    eprintln!(
        "ladder-tfrc-measured: frames {} delivered {} lost {} dropped {} p50 {:?} ms max {:?} ms probe {:?} bit/s seconds {} rate match {:?} switches {:?}",
        l.frames_made,
        v.latency_ms.count,
        l.frames_lost,
        l.frames_dropped_at_server,
        v.latency_ms.p50,
        v.latency_ms.max,
        l.probe_bps,
        l.rate_match_seconds,
        l.rate_match_share,
        l.switch_log
    );
    // 5.5 s of 40 ms frames: about 137 made; most of them delivered on an idle path.
    assert!(l.frames_made >= 100, "{l:?}");
    assert!(v.latency_ms.count >= 80, "{:?}", v.latency_ms);
    // No frame arrives before the path's 20 ms, none is seconds late on an idle path.
    let (p50, max) = (v.latency_ms.p50.unwrap(), v.latency_ms.max.unwrap());
    assert!((20.0..1000.0).contains(&p50), "p50 {p50}");
    assert!(max < 3000.0, "max {max}");
    assert!(l.rate_match_seconds >= 3, "{l:?}");
    assert!(l.rate_match_share.is_some());
    assert!(v.goodput_bps.is_some_and(|g| g > 20_000.0), "{v:?}");
    // The first rung comes from the packet pair (1 Mbit/s: the 640 kbit/s rung).
    assert!(l.probe_bps.is_some(), "no probe result: {l:?}");
    assert!(
        l.switch_log.first().is_some_and(|s| s.to_bps > 80_000),
        "{:?}",
        l.switch_log
    );
    let again = runner::recompute(&run.dir).unwrap();
    assert!(again.differences.is_empty(), "{:?}", again.differences);
    assert!(run.dir.join("ladder-sequential-0.png").exists());
    let _ = std::fs::remove_dir_all(&out);
}
