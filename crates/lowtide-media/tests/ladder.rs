//! The bit-rate ladder over loopback TCP: the real server and client of
//! `lowtide_media::ladder::stream`, with a rate-limiting relay between them standing in
//! for a bottleneck whose capacity changes (2 Mbit/s, then 320 kbit/s, then 2 Mbit/s), and
//! Mehra's ladder (60/262/350/450 kbit/s) with the switching rule's times scaled down so
//! the whole run takes 8 s. Bad requests and a server that is not a ladder server end with
//! precise errors. Each test holds a lock so they never share the cores.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lowtide_media::ladder::stream::{self, PlayConfig, ServerConfig, StreamError};
use lowtide_media::ladder::throughput_rule::{ThroughputRule, ThroughputRuleConfig};
use lowtide_media::ladder::wire::LadderWireError;
use lowtide_media::ladder::SwitchReason;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A server on a loopback port, stopped on drop.
struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    ends: Arc<Mutex<Vec<Result<stream::ServeReport, String>>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    fn start() -> Server {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let ends = Arc::new(Mutex::new(vec![]));
        let (s, e) = (stop.clone(), ends.clone());
        let thread = std::thread::spawn(move || {
            stream::serve(l, ServerConfig::mehra(), s, move |r| {
                e.lock().unwrap().push(r.map_err(|e| e.to_string()));
            })
            .unwrap();
        });
        Server {
            addr,
            stop,
            ends,
            thread: Some(thread),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Relays one connection: client → server at once, server → client at `capacity(t)` bit/s
/// (a token bucket of 10 ms). Stops with the connection or on drop.
struct Relay {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Relay {
    fn start(to: SocketAddr, capacity: fn(f64) -> f64) -> Relay {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        std::thread::spawn(move || {
            let (client, _) = l.accept().unwrap();
            let server = TcpStream::connect(to).unwrap();
            let (mut up_from, mut up_to) =
                (client.try_clone().unwrap(), server.try_clone().unwrap());
            up_from
                .set_read_timeout(Some(Duration::from_millis(50)))
                .unwrap();
            let s2 = s.clone();
            std::thread::spawn(move || {
                let mut b = [0u8; 64];
                while !s2.load(Ordering::Relaxed) {
                    match up_from.read(&mut b) {
                        Ok(0) => break,
                        Ok(n) => {
                            if up_to.write_all(&b[..n]).is_err() {
                                break;
                            }
                        }
                        Err(e)
                            if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                        Err(_) => break,
                    }
                }
            });
            let (mut from, mut to) = (server, client);
            from.set_read_timeout(Some(Duration::from_millis(5)))
                .unwrap();
            let mut last = Instant::now();
            let start = last;
            let (mut credit, mut buf) = (0f64, vec![0u8; 65536]);
            while !s.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(2));
                let now = Instant::now();
                let dt = (now - std::mem::replace(&mut last, now)).as_secs_f64();
                let bytes_per_s = capacity((now - start).as_secs_f64()) / 8.0;
                // At most 10 ms of unused capacity is kept.
                credit = (credit + bytes_per_s * dt).min(bytes_per_s * 0.01);
                let allowed = credit.floor() as usize;
                if allowed == 0 {
                    continue;
                }
                match from.read(&mut buf[..allowed.min(65536)]) {
                    Ok(0) => break,
                    Ok(n) => {
                        credit -= n as f64;
                        if to.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                    Err(_) => break,
                }
            }
            s.store(true, Ordering::Relaxed);
        });
        Relay { addr, stop }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn bottleneck(t: f64) -> f64 {
    if (1.5..3.5).contains(&t) {
        320e3
    } else {
        2e6
    }
}

/// The rule at a quarter-second pace (the defaults are 2 s down, 10 s up); headroom at
/// 1.05 x rate rather than 1.1, so the server's 1.15 leaves a margin against sampling jitter.
fn fast_rule() -> ThroughputRuleConfig {
    ThroughputRuleConfig {
        down_after_ms: 500,
        up_after_ms: 600,
        max_up_after_ms: 1200,
        up_headroom: 1.05,
        ..Default::default()
    }
}

#[test]
fn the_client_steps_down_under_a_bottleneck_and_back_up_after_it() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let server = Server::start();
    let relay = Relay::start(server.addr, bottleneck);
    let report = stream::play(
        TcpStream::connect(relay.addr).unwrap(),
        &PlayConfig {
            sample_interval: Duration::from_millis(250),
            duration: Duration::from_secs(8),
        },
        |ladder| ThroughputRule::new(ladder, 3, fast_rule()).map_err(|e| e.to_string()),
        |_| {},
    )
    .unwrap();
    let show = || {
        report
            .samples
            .iter()
            .map(|s| format!("{:.2}s {:.0}k r{}", s.t_s, s.kbps, s.rung))
            .collect::<Vec<_>>()
            .join(", ")
    };
    eprintln!("{}", show());
    assert_eq!(report.ended_early, None);
    // Before the bottleneck: 450 kbit/s sent at 1.15 x (517.5), every sample on rung 3.
    let phase = |from: f64, to: f64| {
        report
            .samples
            .iter()
            .filter(move |s| s.t_s > from && s.t_s <= to)
    };
    let early: Vec<f64> = phase(0.5, 1.5).map(|s| s.kbps).collect();
    let mean = early.iter().sum::<f64>() / early.len() as f64;
    assert!(
        (mean / 517.5 - 1.0).abs() < 0.2,
        "{mean:.0} kbit/s: {}",
        show()
    );
    assert!(phase(0.0, 1.5).all(|s| s.rung == 3), "{}", show());
    // Under 320 kbit/s: down below 450 within a second of the drop (down_after 0.5 s).
    let down = report
        .samples
        .iter()
        .find(|s| {
            s.switch
                .is_some_and(|w| w.reason == SwitchReason::BelowRate)
        })
        .unwrap_or_else(|| panic!("never went down: {}", show()));
    assert!(
        down.t_s > 1.5 && down.t_s <= 2.75,
        "down at {:.2} s: {}",
        down.t_s,
        show()
    );
    assert!(phase(2.5, 3.5).all(|s| s.rung < 3), "{}", show());
    assert!(phase(2.0, 3.5).all(|s| s.kbps < 320.0 * 1.25), "{}", show());
    // After it: back on 450, and the media that arrives is 450's.
    let last = report.samples.last().unwrap();
    assert_eq!((last.rung, last.media_rung), (3, Some(3)), "{}", show());
    assert!(
        report.bytes_by_rung.iter().take(3).any(|&b| b > 0),
        "{:?}",
        report.bytes_by_rung
    );
    drop(relay);
    drop(server);
}

#[test]
fn a_bad_switch_request_ends_the_connection_with_a_precise_error() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let server = Server::start();
    let mut c = TcpStream::connect(server.addr).unwrap();
    let mut manifest = [0u8; 3 + 4 * 8];
    c.read_exact(&mut manifest).unwrap();
    c.write_all(&[2, 3]).unwrap(); // rung 3: fine
    c.write_all(&[2, 9]).unwrap(); // no such rung
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut sink = vec![0u8; 65536];
    // The server closes: the reads end (EOF or reset), never hang.
    while matches!(c.read(&mut sink), Ok(n) if n > 0) {}
    let give_up = Instant::now() + Duration::from_secs(5);
    while server.ends.lock().unwrap().is_empty() && Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(20));
    }
    let ends = server.ends.lock().unwrap().clone();
    assert_eq!(
        ends,
        vec![Err(
            "switch request: rung 9: the ladder has 4 rungs (0 to 3)".to_string()
        )]
    );
}

#[test]
fn a_client_of_a_server_that_is_not_a_ladder_says_so() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        let (mut c, _) = l.accept().unwrap();
        let _ = c.write_all(b"HTTP/1.0 200 OK\r\n\r\n");
    });
    let err = stream::play(
        TcpStream::connect(addr).unwrap(),
        &PlayConfig {
            sample_interval: Duration::from_millis(250),
            duration: Duration::from_secs(1),
        },
        |ladder| ThroughputRule::new(ladder, 0, Default::default()).map_err(|e| e.to_string()),
        |_| {},
    )
    .unwrap_err();
    assert!(
        matches!(err, StreamError::Wire(LadderWireError::NotAManifest(b'H'))),
        "{err}"
    );
    t.join().unwrap();
}
