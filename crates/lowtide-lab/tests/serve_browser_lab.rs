//! A browser through the emulator (needs root, GStreamer, the plugin and Chromium, which
//! `run.sh test` installs and builds): `scenarios/serve-browser.toml`'s `lowtide serve`
//! variant on a steady 6 Mbit/s link for 10 s, headless Chromium in the receiver's namespace.
//! The stream (2.5 Mbit/s) fits the link, so the browser must show nearly every frame, decode
//! all of them, and each soon after capture: a stalled viewer connection, a page that never
//! configures its decoder or a server that queues would fail it.

use lowtide_lab::runner::{self, LabOptions};
use lowtide_lab::scenario::Scenario;

#[test]
fn a_browser_behind_the_emulator_shows_a_served_stream_live() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios");
    let full = std::fs::read_to_string(format!("{dir}/serve-browser.toml")).unwrap();
    // The steady part of the scenario, the lowtide serve variant alone, no goals.
    let head = &full[..full.find("[[variant]]").unwrap()];
    let text = head
        .replace("duration_s = 25.0", "duration_s = 10.0")
        .replace(
            "trace = \"../traces/links/step-6-1.5-6-short.mahi\"",
            "rate_mbps = 6.0",
        )
        + "[[variant]]\nname = \"lowtide serve\"\ncontroller = { min_buf = { a = 1, b = 3 } }\nlive = { transport = \"serve\" }\n";
    let checked = Scenario::from_toml_in(&text, std::path::Path::new(dir)).unwrap();
    let out = std::env::temp_dir().join(format!("lowtide-serve-lab-{}", std::process::id()));
    let opts = LabOptions {
        scenario_text: text,
        out_dir: out.clone(),
        ..LabOptions::default()
    };
    let run = runner::run(&checked, &opts, |p| eprintln!("{p}")).unwrap();
    let v = &run.summary.variants[0];
    let live = v.live.as_ref().unwrap();
    eprintln!(
        "serve-browser-measured: p50 {:?} p99 {:?} shown {}/{} fps p10 {:?} bus {}",
        v.latency_ms.p50,
        v.latency_ms.p99,
        live.decoded,
        live.stamped,
        live.fps_p10,
        live.bus_problems
    );
    // 7 s of the window at 30 frames/s.
    assert!(live.stamped > 180, "{live:?}");
    assert!(live.decoded as f64 >= 0.8 * live.stamped as f64, "{live:?}");
    assert_eq!(
        live.bus_problems, 0,
        "decoder errors in the browser: {live:?}"
    );
    // 50 ms one way, a frame's time on the link, decode and draw: about 100 ms.
    let p50 = v.latency_ms.p50.unwrap();
    assert!(p50 < 300.0, "capture to shown p50 {p50} ms");
    let _ = std::fs::remove_dir_all(&out);
}
