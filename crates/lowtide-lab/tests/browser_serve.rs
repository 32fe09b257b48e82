//! A real browser watches `lowtide serve`: headless Chromium opens the player page over
//! loopback, decodes the served H.264 with WebCodecs and reports each frame shown; the
//! server's shown log and the page's own numbers must agree that frames were decoded with
//! no error and shown soon after capture.

use std::time::Duration;

use lowtide_lab::chromium::Chromium;
use lowtide_serve::{source, ServeConfig, Server};

#[test]
fn headless_chromium_decodes_and_shows_a_served_stream() {
    let chromium = match Chromium::find() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("skipped: {e} (run.sh installs chromium)");
            return;
        }
    };
    let dir = std::env::temp_dir().join(format!("lowtide-browser-serve-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let shown_log = dir.join("shown.csv");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let cfg = ServeConfig {
        http: "127.0.0.1:0".parse().unwrap(),
        ingest: "127.0.0.1:0".parse().unwrap(),
        publish_token: "t".into(),
        shown_log: Some(shown_log.clone()),
        ..ServeConfig::default()
    };
    let server = rt.block_on(Server::start(cfg)).unwrap();
    let hub = server.hub().clone();
    // 10 s of 640x360 at 30 frames/s; the browser watches for about 5 of them.
    let cmd = source::test_pattern_command(640, 360, 800, Some(300));
    let src = rt.spawn(async move { source::run(hub, "test", &cmd).await });
    let url = format!("http://{}/watch/test", server.http_addr());
    let (mut viewer, mut devtools) = chromium
        .viewer(&url, (800, 500), &dir.join("chromium.log"))
        .unwrap()
        .spawn_with_devtools()
        .unwrap();
    let page = devtools.page().unwrap();
    std::thread::sleep(Duration::from_secs(5));
    let status = devtools
        .evaluate(&page, "({...window.lowtidePlayer})")
        .unwrap();
    let png = devtools.screenshot_png(&page).unwrap();
    std::fs::write(dir.join("page.png"), &png).unwrap();
    viewer.stop();
    src.abort();
    let shown = status["framesShown"].as_u64().unwrap_or(0);
    assert!(
        shown >= 90,
        "the page showed {shown} frames in 5 s: {status}"
    );
    assert_eq!(status["decoderErrors"], 0, "{status}");
    // The server's view of the same frames: capture (the source's stamp) to shown.
    let log = std::fs::read_to_string(&shown_log).unwrap();
    let mut ms: Vec<f64> = log
        .lines()
        .skip(1)
        .filter_map(|l| {
            // viewer,addr,index,capture_us,ingest_us,sent_us,decoded_us,shown_us,catch_up
            let f: Vec<&str> = l.split(',').collect();
            let n = |i: usize| f[i].parse::<u64>().unwrap();
            (n(3) != 0 && n(8) == 0).then(|| (n(7) as f64 - n(3) as f64) / 1000.0)
        })
        .collect();
    assert!(
        ms.len() as u64 >= shown / 2,
        "{} logged of {shown}",
        ms.len()
    );
    ms.sort_by(f64::total_cmp);
    let p50 = ms[ms.len() / 2];
    // Over loopback the frame waits for nothing but decoding and drawing.
    assert!(p50 < 150.0, "capture to shown p50 {p50} ms");
    let _ = std::fs::remove_dir_all(&dir);
}
