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

/// Paceline's videoconferencing application on an idle path, two videos (4 and 2 Mbit/s) on
/// two streams of one channel: every ADU is written and reaches its own video's viewer in
/// time, once, and every frame of both is shown with all eight layers at 30 frames per second.
#[test]
fn a_conference_stream_shows_every_frame_on_an_idle_path() {
    use lowtide_media::conference::Conference;
    use lowtide_media::session::{receive_conference, send_conference};

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // Every ADU is to be written: none may be superseded when a stalled task writes two
        // frames at once.
        let conf = Conference {
            drop_superseded: false,
            ..Conference::paceline(Duration::from_millis(500))
        };
        let videos = [
            conf,
            Conference {
                rate_bps: 2e6,
                ..conf
            },
        ];
        let frames = conf.frames_in(1.5);
        let mut cfg = ChannelConfig::with_controller(ControllerConfig::MinBuf { a: 1, b: 3 });
        cfg.transport.fairness = lowtide::Fairness::Quality;
        let listener = lowtide::listen("127.0.0.1:0".parse().unwrap(), cfg.clone())
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let start = Instant::now() + Duration::from_millis(100);
        let end = start + Duration::from_secs(3);
        let recv = tokio::spawn(async move {
            let ch = listener.accept().await.unwrap();
            receive_conference(&ch, None, &videos, frames, start, end).await
        });
        let ch = lowtide::connect(addr, cfg).await.unwrap();
        let sent = send_conference(&ch, &videos, frames, start, end)
            .await
            .unwrap();
        ch.flush().await.unwrap();
        ch.close(0, "done").await;
        let viewers = recv.await.unwrap();
        assert_eq!(frames, 45);
        assert_eq!((sent.len(), viewers.len()), (2, 2));
        for ((sent, seen), video) in sent.iter().zip(&viewers).zip(&videos) {
            assert_eq!(sent.sent, [45; 8]);
            assert_eq!(sent.bytes_written, 45 * 8 * video.adu_bytes() as u64);
            assert_eq!(
                seen.conference(),
                *video,
                "each video reaches its own viewer"
            );
            assert_eq!(sent.written, [45; 8], "{sent:?}");
            assert_eq!(sent.cancelled, [0; 8]);
            // An ADU routed to the wrong viewer would come twice there, and be missing here.
            assert_eq!((seen.duplicated, seen.unknown), (0, 0));
            assert_eq!(seen.fps(0.0, 1.5), Some(30.0));
            assert_eq!(seen.mean_layers(0.0, 1.5), Some(8.0));
            let worst = (0..frames)
                .flat_map(|f| (0..8).map(move |l| (f, l)))
                .map(|(f, l)| seen.latency_ms(f, l).expect("every ADU arrived"))
                .fold(0.0, f64::max);
            assert!(worst < 500.0, "an ADU took {worst} ms on loopback");
        }
    });
}
