//! Real video through the emulator (needs root, GStreamer and the plugin, which `run.sh test`
//! builds): `scenarios/demo-live.toml`, GStreamer's tcpserversink and lowtide with rate
//! feedback, each through a link that falls from 6 to 1.5 Mbit/s for 10 s, 25 s each. The
//! bounds hold with room on a loaded two-core machine but not for a lowtide that queued like
//! plain TCP: tcpserversink's backlog of a 2.5 Mbit/s stream at 1.5 Mbit/s grows for the
//! whole 10 s (seconds of latency), lowtide's must not.

use lowtide_lab::results::VariantSummary;
use lowtide_lab::runner::{self, LabOptions};
use lowtide_lab::scenario::Scenario;

fn variant<'a>(vs: &'a [VariantSummary], name: &str) -> &'a VariantSummary {
    vs.iter()
        .find(|v| v.name == name)
        .unwrap_or_else(|| panic!("no variant {name}"))
}

#[test]
fn lowtide_keeps_real_video_live_where_tcpserversink_falls_behind() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios");
    let text = std::fs::read_to_string(format!("{dir}/demo-live.toml")).unwrap();
    let checked = Scenario::from_toml_in(&text, std::path::Path::new(dir)).unwrap();
    let out = std::env::temp_dir().join(format!("lowtide-live-video-{}", std::process::id()));
    let opts = LabOptions {
        scenario_text: text,
        out_dir: out.clone(),
        ..LabOptions::default()
    };
    let run = runner::run(&checked, &opts, |p| eprintln!("{p}")).unwrap();
    let vs = &run.summary.variants;
    let tcp = variant(vs, "tcpserversink");
    let lt = variant(vs, "lowtide + rate feedback");
    let (tl, ll) = (tcp.live.as_ref().unwrap(), lt.live.as_ref().unwrap());
    eprintln!(
        "live-video-measured: tcpserversink p50 {:?} p99 {:?} max {:?} decoded {}/{}; lowtide p50 {:?} p99 {:?} max {:?} decoded {}/{} dropped {} fps p10 {:?} corrupted {} bus {}",
        tcp.latency_ms.p50, tcp.latency_ms.p99, tcp.latency_ms.max, tl.decoded, tl.stamped,
        lt.latency_ms.p50, lt.latency_ms.p99, lt.latency_ms.max, ll.decoded, ll.stamped,
        ll.dropped_text(), ll.fps_p10, ll.corrupted, ll.bus_problems
    );
    // Both streamed real frames: 22 s of the window at 30 fps is 660 frames.
    for l in [tl, ll] {
        assert!(l.stamped > 500, "{l:?}");
    }
    // lowtide showed most frames, none broken, and stayed live through the drop.
    assert!(ll.decoded as f64 >= 0.8 * ll.stamped as f64, "{ll:?}");
    assert_eq!(ll.corrupted, 0, "{ll:?}");
    let lt_p99 = lt.latency_ms.p99.unwrap();
    assert!(lt_p99 < 1000.0, "lowtide p99 {lt_p99} ms");
    // tcpserversink queued what the narrow link could not carry: seconds, several times lowtide's.
    let tcp_max = tcp.latency_ms.max.unwrap();
    assert!(tcp_max > 2000.0, "tcpserversink max {tcp_max} ms");
    assert!(
        tcp_max > 3.0 * lt.latency_ms.max.unwrap(),
        "{tcp_max} vs {:?}",
        lt.latency_ms.max
    );
    let _ = std::fs::remove_dir_all(&out);
}
