//! A priority-progress session over a real lowtide channel on loopback: with bandwidth to
//! spare every window arrives whole, every layer is shown, and nothing is dropped.

use std::time::{Duration, Instant};

use lowtide::{ChannelConfig, ControllerConfig};
use lowtide_media::session::{receive_video, send_video};
use lowtide_media::video::SyntheticModel;

#[test]
fn every_window_arrives_whole_on_an_idle_path() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let video = SyntheticModel::default().generate(2.0).unwrap();
        let cfg = ChannelConfig::with_controller(ControllerConfig::MinBuf { a: 1, b: 3 });
        let listener = lowtide::listen("127.0.0.1:0".parse().unwrap(), cfg.clone())
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let start = Instant::now() + Duration::from_millis(100);
        let end = start + Duration::from_secs(3);
        let frames = video.frames.len() as u32;
        let recv = tokio::spawn(async move {
            let ch = listener.accept().await.unwrap();
            receive_video(
                &ch,
                None,
                30.0,
                4,
                Duration::from_millis(500),
                start,
                end,
                |_| {},
            )
            .await
            .finish(frames)
        });
        let ch = lowtide::connect(addr, cfg).await.unwrap();
        let sent = send_video(&ch, &video, 4, start, |_, _| {}).await.unwrap();
        ch.flush().await.unwrap();
        let seen = recv.await.unwrap();
        assert_eq!(sent.windows, 15);
        assert_eq!(sent.dropped_windows, 0.0);
        assert_eq!(seen.transmitted_windows, 15);
        assert_eq!(seen.windows_within(0.5), Some(1.0), "{seen:?}");
        assert_eq!(seen.mean_layers, Some(4.0));
        assert!((seen.fps - 30.0).abs() < 1e-9);
        ch.close(0, "done").await;
    });
}

/// `lowtide recv`'s server: a peer sending garbage and a silent peer are dropped, and the
/// sender after them is served.
#[test]
fn the_receiving_server_survives_bad_peers() {
    use lowtide_media::server::{serve, ServeOptions, SessionEnd};
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let cfg = ChannelConfig::with_controller(ControllerConfig::MinBuf { a: 1, b: 3 });
        let listener = lowtide::listen("127.0.0.1:0".parse().unwrap(), cfg.clone())
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let ends: Arc<Mutex<Vec<String>>> = Arc::default();
        let log = ends.clone();
        let opts = ServeOptions {
            fps: 30.0,
            window_frames: 4,
            tolerance: Duration::from_millis(500),
            max_session: Duration::from_secs(3),
            first_message: Duration::from_millis(500),
            max_sessions: 4,
            sessions: Some(1),
            start_delay: Duration::from_millis(100),
        };
        let server = tokio::spawn(serve(
            listener,
            opts,
            move |_, end| {
                log.lock().unwrap().push(match end {
                    SessionEnd::Dropped { why } => format!("dropped: {why}"),
                    SessionEnd::Received { stats, .. } => {
                        format!("received {} windows", stats.transmitted_windows)
                    }
                })
            },
            |_, _| {},
        ));
        // Garbage, then silence.
        let mut garbage = std::net::TcpStream::connect(addr).unwrap();
        garbage.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        let _silent = std::net::TcpStream::connect(addr).unwrap();
        tokio::time::sleep(Duration::from_millis(700)).await;
        // Then a real sender.
        let video = SyntheticModel::default().generate(1.0).unwrap();
        let ch = lowtide::connect(addr, cfg).await.unwrap();
        let start = Instant::now() + Duration::from_millis(100);
        send_video(&ch, &video, 4, start, |_, _| {}).await.unwrap();
        ch.flush().await.unwrap();
        ch.close(0, "done").await;
        tokio::time::timeout(Duration::from_secs(10), server)
            .await
            .expect("the server returns after one good session")
            .unwrap()
            .unwrap();
        let ends = ends.lock().unwrap();
        assert_eq!(
            ends.iter().filter(|e| e.starts_with("dropped")).count(),
            2,
            "{ends:?}"
        );
        assert!(
            ends.iter()
                .any(|e| e.contains("bad magic") || e.contains("magic")),
            "{ends:?}"
        );
        assert!(ends.iter().any(|e| e == "received 8 windows"), "{ends:?}");
    });
}
