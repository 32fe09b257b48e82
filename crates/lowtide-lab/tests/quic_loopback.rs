//! The QUIC reference variant (`lowtide_lab::pipe::quic`) over loopback, without the emulator: the
//! latency stream delivers every message it sent exactly once, and the conference shows every
//! frame with all its layers on an idle path.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lowtide_lab::conference::{self, ConferenceApp};
use lowtide_lab::pipe::quic::{Credentials, QuicConfig};
use lowtide_lab::pipe::Transport;
use lowtide_lab::stream;
use lowtide_traffic::Stop;

fn free_udp_port() -> std::net::SocketAddr {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.local_addr().unwrap()
}

#[test]
fn the_latency_stream_over_quic_delivers_each_message_once() {
    let q = QuicConfig {
        congestion: "cubic".into(),
        send_window_bytes: 64 * 1024,
    };
    let creds = Credentials::generate().unwrap();
    let addr = free_udp_port();
    let start = Instant::now() + Duration::from_millis(500);
    let end = start + Duration::from_secs(1);
    let receive_end = end + Duration::from_millis(500);
    let stop = Stop::new(
        Arc::new(AtomicBool::new(false)),
        receive_end + Duration::from_secs(2),
    );
    let (rx_t, rstop) = (Transport::Quic(q.clone(), creds.clone()), stop.clone());
    let rx = std::thread::spawn(move || stream::receive(addr, rx_t, start, receive_end, rstop));
    let tx_t = Transport::Quic(q, creds);
    let sent = stream::send(addr, tx_t, false, start, end, receive_end, stop).unwrap();
    let received = rx.join().unwrap().unwrap();
    let (samples, errors) = stream::join_sent_and_received(&sent, &received, 1.5);
    assert!(
        sent.sent_s.len() > 100,
        "{} messages in 1 s",
        sent.sent_s.len()
    );
    assert_eq!((errors.duplicated, errors.unknown), (0, 0));
    let delivered = samples.iter().filter(|s| !s.censored).count();
    // Only a message cut off at the end (reset, never delivered) may be missing.
    assert!(
        delivered + 1 >= samples.len(),
        "{delivered} of {}",
        samples.len()
    );
}

#[test]
fn a_conference_over_quic_shows_every_frame_on_an_idle_path() {
    let q = QuicConfig {
        congestion: "newreno".into(),
        send_window_bytes: 256 * 1024,
    };
    let conf = ConferenceApp {
        rate_mbps: 4.0,
        threshold_ms: 500.0,
        ..ConferenceApp::default()
    }
    .conference();
    let creds = Credentials::generate().unwrap();
    let addr = free_udp_port();
    let start = Instant::now() + Duration::from_millis(500);
    let end = start + Duration::from_secs(1);
    let receive_end = end + Duration::from_millis(600);
    let stop = Stop::new(
        Arc::new(AtomicBool::new(false)),
        receive_end + Duration::from_secs(2),
    );
    let (rx_t, rstop) = (Transport::Quic(q.clone(), creds.clone()), stop.clone());
    let frames = conf.frames_in(1.0);
    let rx = std::thread::spawn(move || {
        conference::receive(addr, rx_t, vec![conf], frames, start, receive_end, rstop)
    });
    let tx_t = Transport::Quic(q, creds);
    let run = conference::send(addr, tx_t, vec![conf], start, end, receive_end, stop).unwrap();
    let seen = rx.join().unwrap().unwrap();
    let viewer = &seen.viewers[0];
    assert_eq!(run.sent.frames, 30);
    assert_eq!(run.sent.written, run.sent.sent, "{:?}", run.sent);
    assert_eq!((viewer.duplicated, viewer.unknown), (0, 0));
    assert_eq!(viewer.fps(0.0, 0.9), Some(30.0));
    assert_eq!(viewer.mean_layers(0.0, 0.9), Some(8.0));
}
