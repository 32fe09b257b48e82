//! A real browser watches `lowtide serve`: headless Chromium opens the player page over
//! loopback, decodes the served H.264 with WebCodecs and reports each frame shown; the
//! server's shown log and the page's own numbers must agree that frames were decoded with
//! no error and shown soon after capture. Once over HTTP, once over HTTPS and WSS (a
//! self-signed certificate the browser is told to accept).

use std::time::Duration;

use lowtide_lab::chromium::Chromium;
use lowtide_serve::transport::TlsFiles;
use lowtide_serve::{source, ServeConfig, Server};

#[test]
fn headless_chromium_decodes_and_shows_a_served_stream() {
    watch_in_chromium("http");
}

#[test]
fn headless_chromium_decodes_and_shows_a_stream_served_over_https() {
    watch_in_chromium("https");
}

/// One browser at a time: two would share the cores and miss the frame rate.
static ONE_BROWSER: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn watch_in_chromium(scheme: &str) {
    let _one = ONE_BROWSER.lock().unwrap_or_else(|e| e.into_inner());
    let chromium = match Chromium::find() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("skipped: {e} (run.sh installs chromium)");
            return;
        }
    };
    let dir = std::env::temp_dir().join(format!(
        "lowtide-browser-serve-{scheme}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let tls = (scheme == "https").then(|| {
        let c = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
        std::fs::write(dir.join("cert.pem"), c.cert.pem()).unwrap();
        std::fs::write(dir.join("key.pem"), c.key_pair.serialize_pem()).unwrap();
        TlsFiles::new(dir.join("cert.pem"), dir.join("key.pem"))
    });
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
        tls,
        ..ServeConfig::default()
    };
    let server = rt.block_on(Server::start(cfg)).unwrap();
    let hub = server.hub().clone();
    // 10 s of 640x360 at 30 frames/s; the browser watches for about 5 of them.
    let cmd = source::test_pattern_command(640, 360, 800, Some(300));
    let src = rt.spawn(async move { source::run(hub, "test", &cmd).await });
    assert_eq!(server.scheme(), scheme);
    let url = format!("{scheme}://{}/watch/test", server.http_addr());
    let mut command = chromium
        .viewer(&url, (800, 500), &dir.join("chromium.log"))
        .unwrap();
    if scheme == "https" {
        command = command.arg("--ignore-certificate-errors");
    }
    let (mut viewer, mut devtools) = command.spawn_with_devtools().unwrap();
    let page = devtools.page().unwrap();
    std::thread::sleep(Duration::from_secs(5));
    let status = devtools
        .evaluate(&page, "({...window.lowtidePlayer})")
        .unwrap();
    // A secure context (what HTTPS is for: WebCodecs on a viewer that is not localhost).
    let secure = devtools
        .evaluate(&page, "[window.isSecureContext, location.protocol]")
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
    assert_eq!(secure, serde_json::json!([true, format!("{scheme}:")]));
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
