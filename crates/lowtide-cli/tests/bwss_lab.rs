//! The BWSS lab path end to end, short (needs root, `curl`, `python3` and the preload
//! library, which `bash run.sh test` builds beside this crate's `lowtide`): the daemon in
//! the receiver's namespace, the ladder player and two unmodified `curl` downloads under
//! `LD_PRELOAD`, `python3 -m http.server` and the ladder server on the sender, a CBR
//! interferer from another host; 8 s. Every flow must have per-second rates, the daemon
//! must have steered the video to its target, and no namespace or program may be left.

use std::path::PathBuf;

use lowtide_lab::bwss::summary::FlowKind;
use lowtide_lab::bwss::{self, BwssOptions, BwssScenario, Tools};

const SCENARIO: &str = r#"
kind = "bwss"
name = "bwss-smoke"
[run]
duration_s = 8.0
measure_from_s = 2.0
[topology]
senders = 2
receivers = 2
[topology.forward]
rate_mbps = 0.96
delay_ms = 15.0
queue = { packets = 30 }
[topology.reverse]
rate_mbps = 10.0
delay_ms = 15.0
queue = { packets = 100 }
[bwss]
downloads = 2
file_mb = 64
server_overdrive = 1.25
player_rule = { startup_ms = 4000 }
interference = { start_s = 3.0, stop_s = 6.0, rate_kbps = 240 }
[bwss.rules.system]
link_kbps = 960
window_ms = 2000
probe_after_ms = 1000
probe_step = 0.1
[[bwss.rules.rule]]
name = "video"
remote_port = 8450
priority = 10
min_kbps = 520
weight = 0
[[variant]]
name = "BWSS"
video = "tcp"
steer = true
"#;

fn ours(prefix: &str) -> Vec<String> {
    let out = std::process::Command::new("ps")
        .args(["-eo", "args"])
        .output()
        .expect("ps");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(prefix))
        .map(str::to_string)
        .collect()
}

#[test]
fn daemon_preload_and_curl_run_in_the_lab_and_yield_per_second_rates() {
    let lowtide = PathBuf::from(env!("CARGO_BIN_EXE_lowtide"));
    let tools = Tools::with_lowtide(lowtide).expect("curl, python3, lowtide and the .so");
    let s = BwssScenario::from_toml_in(SCENARIO, std::path::Path::new(".")).unwrap();
    let out = std::env::temp_dir().join(format!("lowtide-bwss-lab-{}", std::process::id()));
    let opts = BwssOptions {
        scenario_text: SCENARIO.into(),
        out_dir: out.clone(),
        tools,
        seed: 1,
    };
    let run = bwss::run(&s, &opts, |_| {}).expect("the run");
    let r = &run.records[0];
    assert!(r.failed.is_none(), "{:?}", r.failed);
    let with_data = |kind: FlowKind| -> Vec<usize> {
        r.flows
            .iter()
            .filter(|f| f.kind == kind)
            .map(|f| f.kbps.iter().flatten().filter(|&&k| k > 0.0).count())
            .collect()
    };
    let video = with_data(FlowKind::Video);
    let downloads = with_data(FlowKind::Download);
    let interferer = with_data(FlowKind::Interferer);
    eprintln!(
        "seconds with data: video {video:?}, downloads {downloads:?}, interferer {interferer:?}"
    );
    assert_eq!(video.len(), 1, "one video flow: {:?}", r.flows);
    assert!(video[0] >= 5, "video seconds {video:?}");
    assert_eq!(
        downloads.len(),
        2,
        "the two curls registered: {:?}",
        r.flows
    );
    assert!(downloads.iter().all(|&n| n >= 4), "{downloads:?}");
    assert!(interferer.iter().all(|&n| n >= 2), "{interferer:?}");
    // The daemon steered: the video's target is its 520 kbit/s minimum in its last seconds.
    let v = r.flows.iter().find(|f| f.kind == FlowKind::Video).unwrap();
    let targets: Vec<f64> = v.target_kbps.iter().flatten().copied().collect();
    assert!(
        targets
            .iter()
            .rev()
            .take(3)
            .all(|&t| (t - 520.0).abs() < 1.0),
        "{targets:?}"
    );
    assert!(r.link_kbps.iter().flatten().count() >= 7);
    let summary = std::fs::read_to_string(out.join("summary.json")).unwrap();
    assert!(summary.contains("video_rate_kbps") && summary.contains("link_utilization"));
    assert!(out.join("rates-0.png").exists() && out.join("report.html").exists());
    // Every program was stopped and reaped (their command lines name the run folder).
    let left = ours(&out.to_string_lossy());
    assert!(left.is_empty(), "programs left: {left:?}");
    std::fs::remove_dir_all(&out).unwrap();
}
