//! A CI-sized demo run through the emulator (needs root): under load, lowtide's MinBuf(1,3)
//! must beat plain TCP's latency by a wide margin without giving up most of its goodput.

use lowtide_lab::demo::{self, DemoOptions};

#[test]
fn min_buf_halves_plain_tcp_latency_under_load() {
    let out = std::env::temp_dir().join(format!("lowtide-demo-test-{}", std::process::id()));
    let opts = DemoOptions {
        duration_s: 25.0,
        out_dir: out.clone(),
        congestion: "cubic".into(),
    };
    let s = demo::run(&opts, |_| {}).expect("the demo runs (as root)");
    let (tcp, min_buf) = (&s.variants[0], &s.variants[1]);
    assert!(tcp.messages > 100 && min_buf.messages > 100, "{s:#?}");
    // Plain TCP queues hundreds of ms in its send buffer; MinBuf keeps it near one cwnd.
    assert!(min_buf.latency_ms.p50 < tcp.latency_ms.p50 / 2.0, "{s:#?}");
    assert!(min_buf.latency_ms.p99 < tcp.latency_ms.p99 / 2.0, "{s:#?}");
    assert!(min_buf.goodput_vs_baseline >= 0.5, "{s:#?}");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("latency.svg") && html.contains("MinBuf(1,3)"));
    std::fs::remove_dir_all(&out).unwrap();
}
