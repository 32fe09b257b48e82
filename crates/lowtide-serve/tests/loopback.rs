//! `lowtide serve` over loopback with a real encoder: a local source and a lowtide publisher
//! in, light viewers out (they check every unit's references), a viewer that stops reading,
//! and the requests a server must refuse.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use lowtide_serve::client::{self, WatchError, WatchOptions};
use lowtide_serve::source;
use lowtide_serve::{ServeConfig, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn config() -> ServeConfig {
    ServeConfig {
        http: common::loopback(),
        ingest: common::loopback(),
        publish_token: "s3cret".into(),
        ..ServeConfig::default()
    }
}

async fn get(addr: SocketAddr, head: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "current_thread")]
async fn a_live_source_reaches_viewers_whole_and_decodable() {
    let server = Server::start(config()).await.unwrap();
    // 4 s of live 640x360 video.
    let cmd = source::test_pattern_command(640, 360, 1000, Some(120));
    let hub = server.hub().clone();
    let src = tokio::spawn(async move { source::run(hub, "test", &cmd).await });
    common::wait_for_stream(&server, "test", Duration::from_secs(5)).await;
    let addr = server.http_addr();
    let opts = WatchOptions {
        duration: Duration::from_secs(20),
        ..WatchOptions::default()
    };
    let (a, b) = tokio::join!(
        client::watch(addr, "test", opts),
        client::watch(addr, "test", opts)
    );
    src.await.unwrap().expect("the source ran to its end");
    for r in [a.unwrap(), b.unwrap()] {
        assert!(r.ended, "the end message arrives");
        assert_eq!(r.path, "test");
        assert_eq!(r.undecodable(), 0, "every unit's references arrived");
        let pictures = r
            .units
            .iter()
            .filter(|u| u.kind != lowtide_media::encoded::FrameKind::ParameterSets)
            .count();
        // A viewer joining up to a second late misses at most the first group of pictures.
        assert!(pictures >= 80, "{pictures} of 120 pictures");
        assert_eq!(r.dropped, [0; 4], "nothing dropped over loopback");
        // The catch-up (the current group of pictures on joining) comes first, flagged.
        let live = r.units.iter().position(|u| !u.catch_up).unwrap_or(0);
        assert!(
            r.units[live..].iter().all(|u| !u.catch_up),
            "catch-up after live units"
        );
        // Each picture carries the source's capture stamp; over loopback the wait is the
        // encoder's output to the viewer, far under the 300 ms budget for every unit.
        for u in r.units.iter().filter(|u| u.capture_us != 0) {
            let ms = (u.received_us.saturating_sub(u.capture_us)) as f64 / 1000.0;
            assert!(ms < 300.0, "unit {} took {ms} ms", u.index);
        }
    }
    let metrics = server.metrics();
    assert!(
        metrics.contains("lowtide_serve_viewers_accepted_total 2"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_publisher_needs_the_token_and_its_stream_reaches_a_viewer() {
    let server = Server::start(config()).await.unwrap();
    let ingest = server.ingest_addr();
    let encode = |frames| {
        tokio::process::Command::new("sh")
            .arg("-c")
            .arg(source::test_pattern_command(320, 180, 500, Some(frames)))
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap()
    };
    let publish = |token: &str| lowtide_media::pipe::SendOptions {
        publish: Some(lowtide_media::pipe::Publish {
            path: "cam".into(),
            token: token.into(),
        }),
        ..Default::default()
    };
    // A wrong token: the channel is closed with the reason.
    let mut enc = encode(30);
    let ch = lowtide::connect(ingest, lowtide::ChannelConfig::default())
        .await
        .unwrap();
    let r =
        lowtide_media::pipe::send_encoded(&ch, enc.stdout.take().unwrap(), publish("wrong")).await;
    let err = r.expect_err("refused").to_string();
    assert!(err.contains("wrong publish token"), "{err}");
    assert!(server.hub().get("cam").is_none());
    // The right token: published, watched.
    let mut enc = encode(90);
    let ch = lowtide::connect(ingest, lowtide::ChannelConfig::default())
        .await
        .unwrap();
    let out = enc.stdout.take().unwrap();
    let send = async {
        let r = lowtide_media::pipe::send_encoded(&ch, out, publish("s3cret")).await;
        ch.close(0, "done").await;
        r
    };
    let watch = async {
        common::wait_for_stream(&server, "cam", Duration::from_secs(5)).await;
        let opts = WatchOptions {
            duration: Duration::from_secs(20),
            ..WatchOptions::default()
        };
        client::watch(server.http_addr(), "cam", opts).await
    };
    let (sent, watched) = tokio::join!(send, watch);
    let sent = sent.unwrap();
    let watched = watched.unwrap();
    assert!(sent.counters.units >= 90, "{:?}", sent.counters);
    assert!(watched.ended);
    assert_eq!(watched.undecodable(), 0);
    assert!(watched.units.len() >= 40, "{} units", watched.units.len());
}

#[tokio::test(flavor = "current_thread")]
async fn a_viewer_that_stops_reading_is_dropped_and_the_other_viewer_notices_nothing() {
    let mut cfg = config();
    cfg.viewer.stall_timeout = Duration::from_secs(1);
    let server = Server::start(cfg).await.unwrap();
    // Noise at 4 Mbit/s (the ball alone compresses far under its rate): 2.5 MB in 5 s, well
    // over what a stalled viewer's socket holds (its 64 KiB receive buffer, and MIN_BUF's
    // (cwnd + 3) segments of loopback's 64 KiB MSS).
    let cmd = source::test_pattern_command(1280, 720, 4000, Some(150))
        .replace("pattern=ball", "pattern=snow");
    let hub = server.hub().clone();
    let src = tokio::spawn(async move { source::run(hub, "test", &cmd).await });
    common::wait_for_stream(&server, "test", Duration::from_secs(5)).await;
    let addr = server.http_addr();
    let steady = WatchOptions {
        duration: Duration::from_secs(20),
        ..WatchOptions::default()
    };
    // A small receive buffer, as a phone's: loopback's autotuned one would take the whole
    // stream without the viewer reading.
    let stalling = WatchOptions {
        stall_after_first: Some(Duration::from_secs(8)),
        recv_buffer: Some(64 << 10),
        ..steady
    };
    let (a, b) = tokio::join!(
        client::watch(addr, "test", steady),
        client::watch(addr, "test", stalling)
    );
    src.await.unwrap().unwrap();
    common::steady_kept_up_and_stalled_cut_off(a, b);
    let m = server.metrics();
    assert!(m.contains("lowtide_serve_viewers_stalled_total 1"), "{m}");
}

#[tokio::test(flavor = "current_thread")]
async fn requests_the_server_refuses_get_a_status_that_says_why() {
    let server = Server::start(config()).await.unwrap();
    let addr = server.http_addr();
    match client::watch(addr, "nobody", WatchOptions::default()).await {
        Err(WatchError::Refused { status: 404, body }) => {
            assert!(body.contains("no stream is published"), "{body}")
        }
        other => panic!("expected a 404, got {other:?}"),
    }
    let r = get(addr, "GET /live/x HTTP/1.1\r\nHost: h\r\n\r\n").await;
    assert!(r.starts_with("HTTP/1.1 426"), "{r}");
    let r = get(addr, "\x16\x03\x01\x00\x05hello\r\n\r\n").await;
    assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    let r = get(addr, "POST / HTTP/1.1\r\nHost: h\r\n\r\n").await;
    assert!(r.starts_with("HTTP/1.1 405"), "{r}");
    let r = get(addr, "GET /streams HTTP/1.1\r\nHost: h\r\n\r\n").await;
    assert!(r.starts_with("HTTP/1.1 200") && r.ends_with("[]"), "{r}");
    let r = get(addr, "GET /watch/x HTTP/1.1\r\nHost: h\r\n\r\n").await;
    assert!(r.contains("text/html"), "{r}");
    // A head that never ends is cut off at its limit.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let _ = s
        .write_all(format!("GET / HTTP/1.1\r\nX: {}\r\n", "a".repeat(9000)).as_bytes())
        .await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    assert!(String::from_utf8_lossy(&out).starts_with("HTTP/1.1 431"));
    assert!(server
        .metrics()
        .contains("lowtide_serve_bad_requests_total 2"));
}
