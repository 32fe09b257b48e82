//! `lowtide serve` with HTTPS and WSS over loopback, a self-signed certificate made here: a
//! light viewer over TLS gets every unit decodable and the end, the page and the metrics come
//! over HTTPS, a viewer that stops reading is dropped while the other keeps up, and what is
//! not a TLS handshake (plain HTTP, silence, a handshake that stops half way) is refused
//! within the request timeout.

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use lowtide_media::encoded::FrameKind;
use lowtide_serve::client::{self, WatchOptions, WatchTls};
use lowtide_serve::source;
use lowtide_serve::transport::{TlsFiles, Transport};
use lowtide_serve::{ServeConfig, Server};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A self-signed certificate for `localhost`, its PEM files in a directory removed on drop.
struct Cert {
    dir: PathBuf,
    der: CertificateDer<'static>,
}

impl Cert {
    fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("lowtide-serve-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let c = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        std::fs::write(dir.join("cert.pem"), c.cert.pem()).unwrap();
        std::fs::write(dir.join("key.pem"), c.key_pair.serialize_pem()).unwrap();
        Self {
            dir,
            der: c.cert.der().clone(),
        }
    }

    fn files(&self) -> TlsFiles {
        TlsFiles::new(self.dir.join("cert.pem"), self.dir.join("key.pem"))
    }

    fn watch_tls(&self) -> WatchTls {
        WatchTls::new([self.der.clone()], "localhost").unwrap()
    }
}

impl Drop for Cert {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn config(cert: &Cert) -> ServeConfig {
    ServeConfig {
        http: common::loopback(),
        ingest: common::loopback(),
        tls: Some(cert.files()),
        publish_token: "s3cret".into(),
        ..ServeConfig::default()
    }
}

/// One HTTPS GET; the whole answer.
async fn get_tls(addr: SocketAddr, cert: &Cert, path: &str) -> String {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let w = cert.watch_tls();
    let name = ServerName::try_from("localhost").unwrap();
    let mut t = Transport::connect(tcp, w.config, name, Duration::from_secs(5))
        .await
        .unwrap();
    t.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(Ok(n @ 1..)) = tokio::time::timeout(Duration::from_secs(5), t.read(&mut buf)).await
    {
        out.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "current_thread")]
async fn a_viewer_over_tls_gets_every_unit_decodable_and_the_end() {
    let cert = Cert::new("tls-watch");
    let server = Server::start(config(&cert)).await.unwrap();
    assert_eq!(server.scheme(), "https");
    let addr = server.http_addr();
    // The page and the metrics come over HTTPS too.
    let page = get_tls(addr, &cert, "/watch/test").await;
    assert!(
        page.starts_with("HTTP/1.1 200") && page.contains("<script"),
        "{page}"
    );
    let js = get_tls(addr, &cert, "/player.js").await;
    // The page opens wss:// when it was loaded over https://.
    assert!(js.contains(r#"location.protocol === "https:" ? "wss:""#));
    // 4 s of live 640x360 video.
    let cmd = source::test_pattern_command(640, 360, 1000, Some(120));
    let hub = server.hub().clone();
    let src = tokio::spawn(async move { source::run(hub, "test", &cmd).await });
    for _ in 0..200 {
        if server.hub().get("test").is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let opts = WatchOptions {
        duration: Duration::from_secs(20),
        ..WatchOptions::default()
    };
    let tls = cert.watch_tls();
    let r = client::watch_tls(addr, "test", opts, &tls).await.unwrap();
    src.await.unwrap().expect("the source ran to its end");
    assert!(r.ended, "the end message arrives");
    assert_eq!(r.path, "test");
    assert_eq!(r.undecodable(), 0, "every unit's references arrived");
    let pictures = r
        .units
        .iter()
        .filter(|u| u.kind != FrameKind::ParameterSets)
        .count();
    assert!(pictures >= 80, "{pictures} of 120 pictures");
    assert_eq!(r.dropped, [0; 4], "nothing dropped over loopback");
    for u in r.units.iter().filter(|u| u.capture_us != 0) {
        let ms = (u.received_us.saturating_sub(u.capture_us)) as f64 / 1000.0;
        assert!(ms < 300.0, "unit {} took {ms} ms", u.index);
    }
    let metrics = get_tls(addr, &cert, "/metrics").await;
    assert!(
        metrics.contains("lowtide_serve_viewers_accepted_total 1"),
        "{metrics}"
    );
    assert!(metrics.contains("lowtide_serve_bad_requests_total 0"));
    // A viewer that does not trust the certificate fails the handshake, with no harm done.
    let stranger = WatchTls::new([Cert::new("tls-stranger").der.clone()], "localhost").unwrap();
    let e = client::watch_tls(addr, "test", opts, &stranger)
        .await
        .unwrap_err();
    assert!(matches!(e, client::WatchError::Tls { .. }), "{e}");
    assert!(
        e.to_string().contains("trust the server's certificate"),
        "{e}"
    );
    assert!(server
        .metrics()
        .contains("lowtide_serve_bad_requests_total 0"));
}

/// Reads until the server closes; how long that took and what came.
async fn until_closed(s: &mut tokio::net::TcpStream) -> (Duration, Vec<u8>) {
    let t0 = Instant::now();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    (t0.elapsed(), out)
}

#[tokio::test(flavor = "current_thread")]
async fn plain_http_and_handshakes_that_never_finish_are_cut_off() {
    let cert = Cert::new("tls-refuse");
    let mut cfg = config(&cert);
    cfg.request_timeout = Duration::from_millis(500);
    let server = Server::start(cfg).await.unwrap();
    let addr = server.http_addr();
    // Plain HTTP to the HTTPS port: told so in plain HTTP, and closed.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /watch/test HTTP/1.1\r\nHost: h\r\n\r\n")
        .await
        .unwrap();
    let (took, out) = until_closed(&mut s).await;
    let out = String::from_utf8_lossy(&out);
    assert!(
        out.starts_with("HTTP/1.1 400") && out.contains("https://"),
        "{out}"
    );
    assert!(took < Duration::from_secs(2), "closed after {took:?}");
    // Silence, and a ClientHello that stops after its record header: both closed at the
    // timeout, not before and not much after.
    for first in [&b""[..], &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01][..]] {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(first).await.unwrap();
        let (took, out) = until_closed(&mut s).await;
        assert!(out.is_empty(), "{out:?}");
        assert!(
            took >= Duration::from_millis(400) && took < Duration::from_secs(3),
            "{} bytes sent: closed after {took:?}",
            first.len()
        );
    }
    // A handshake message of no known type where the ClientHello belongs: closed at once.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(&[0x16, 0x03, 0x01, 0x00, 0x04, 0xff, 0x00, 0x00, 0x00])
        .await
        .unwrap();
    let (took, _) = until_closed(&mut s).await;
    assert!(took < Duration::from_millis(400), "closed after {took:?}");
    // The server still serves.
    let page = get_tls(addr, &cert, "/streams").await;
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    let m = server.metrics();
    assert!(m.contains("lowtide_serve_bad_requests_total 4"), "{m}");
}

#[tokio::test(flavor = "current_thread")]
async fn over_tls_a_viewer_that_stops_reading_is_dropped_and_the_other_keeps_up() {
    let cert = Cert::new("tls-stall");
    let mut cfg = config(&cert);
    cfg.viewer.stall_timeout = Duration::from_secs(1);
    let server = Server::start(cfg).await.unwrap();
    // Noise at 4 Mbit/s, 2.5 MB in 5 s: far over what a stalled viewer's 64 KiB receive
    // buffer and its controller's share of the kernel hold.
    let cmd = source::test_pattern_command(640, 360, 4000, Some(150))
        .replace("pattern=ball", "pattern=snow");
    let hub = server.hub().clone();
    let src = tokio::spawn(async move { source::run(hub, "test", &cmd).await });
    for _ in 0..200 {
        if server.hub().get("test").is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let addr = server.http_addr();
    let steady = WatchOptions {
        duration: Duration::from_secs(20),
        ..WatchOptions::default()
    };
    let stalling = WatchOptions {
        stall_after_first: Some(Duration::from_secs(8)),
        recv_buffer: Some(64 << 10),
        ..steady
    };
    let tls = cert.watch_tls();
    let (a, b) = tokio::join!(
        client::watch_tls(addr, "test", steady, &tls),
        client::watch_tls(addr, "test", stalling, &tls)
    );
    src.await.unwrap().unwrap();
    common::steady_kept_up_and_stalled_cut_off(a, b);
    let m = server.metrics();
    assert!(m.contains("lowtide_serve_viewers_stalled_total 1"), "{m}");
}
