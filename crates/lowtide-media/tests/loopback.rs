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
            receive_video(&ch, 30.0, 4, Duration::from_millis(500), start, end, |_| {})
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
        assert_eq!(seen.windows_within(0.5), 1.0, "{seen:?}");
        assert_eq!(seen.mean_layers, 4.0);
        assert!((seen.fps - 30.0).abs() < 1e-9);
        ch.close(0, "done").await;
    });
}
