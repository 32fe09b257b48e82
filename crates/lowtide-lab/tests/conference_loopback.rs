//! Paceline's videoconferencing application (`lowtide_lab::conference`) over a lowtide pipe on
//! loopback, without the emulator: two videos (4 and 2 Mbit/s) on two streams of one channel;
//! every ADU is written and reaches its own video's viewer in time, once, and every frame of
//! both is shown with all eight layers at 30 frames per second.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lowtide::{ChannelConfig, ControllerConfig};
use lowtide_lab::conference;
use lowtide_lab::pipe::Transport;
use lowtide_media::conference::Conference;
use lowtide_traffic::Stop;

fn free_tcp_port() -> std::net::SocketAddr {
    let s = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    s.local_addr().unwrap()
}

#[test]
fn a_conference_over_lowtide_shows_every_frame_of_both_videos_on_an_idle_path() {
    // Every ADU is to be written: none may be superseded when a stalled task writes two
    // frames at once.
    let conf = Conference {
        drop_superseded: false,
        ..Conference::paceline(Duration::from_millis(500))
    };
    let videos = vec![
        conf,
        Conference {
            rate_bps: 2e6,
            ..conf
        },
    ];
    let frames = conf.frames_in(1.5);
    let mut cfg = ChannelConfig::with_controller(ControllerConfig::MinBuf { a: 1, b: 3 });
    cfg.transport.fairness = lowtide::Fairness::Quality;
    let addr = free_tcp_port();
    let start = Instant::now() + Duration::from_millis(300);
    let end = start + Duration::from_secs_f64(1.5);
    let receive_end = start + Duration::from_secs(3);
    let stop = Stop::new(
        Arc::new(AtomicBool::new(false)),
        receive_end + Duration::from_secs(2),
    );
    let (rx_t, rvideos, rstop) = (
        Transport::Lowtide(Box::new(cfg.clone())),
        videos.clone(),
        stop.clone(),
    );
    let rx = std::thread::spawn(move || {
        conference::receive(addr, rx_t, rvideos, frames, start, receive_end, rstop)
    });
    let tx_t = Transport::Lowtide(Box::new(cfg));
    let run = conference::send(addr, tx_t, videos.clone(), start, end, receive_end, stop).unwrap();
    let seen = rx.join().unwrap().unwrap();
    assert_eq!(frames, 45);
    assert_eq!(run.sent.frames, 90, "45 frames of each video");
    assert_eq!(run.sent.sent, [90; 8]);
    assert_eq!(run.sent.written, [90; 8], "{:?}", run.sent);
    assert_eq!(run.sent.cancelled, [0; 8]);
    let bytes: usize = videos.iter().map(|v| 45 * 8 * v.adu_bytes()).sum();
    assert_eq!(run.sent.bytes_written, bytes as u64);
    assert_eq!(seen.viewers.len(), 2);
    for (seen, video) in seen.viewers.iter().zip(&videos) {
        assert_eq!(
            seen.conference(),
            *video,
            "each video reaches its own viewer"
        );
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
}
