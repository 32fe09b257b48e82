//! The Rust API on loopback, with a daemon in this process: a `PacedReader` over a std
//! `TcpStream`, and a lowtide channel registered as a flow. Each reads for about 1.5 s at a
//! 16 Mbit/s target (margin 20%) and holds a lock so the two never share the cores.

// A daemon, sockets and threads: not under Miri (`bash run.sh miri` runs the unit tests).
#![cfg(not(miri))]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lowtide_bwss::client::Client;
use lowtide_bwss::daemon::{Daemon, DaemonOptions, RunningDaemon};
use lowtide_bwss::{Config, Steering};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn daemon(name: &str) -> RunningDaemon {
    let socket = format!("@lowtide-bwss-api-{}-{name}", std::process::id());
    let config = Config::from_toml("[system]\nlink_kbps = 16000\n").unwrap();
    Daemon::bind(DaemonOptions {
        socket,
        config,
        log: None,
    })
    .unwrap()
    .spawn()
    .unwrap()
}

fn within(got: f64, want: f64, margin: f64) -> bool {
    (got / want - 1.0).abs() <= margin
}

/// A server writing bulk data to its first connection until `stop`.
fn bulk_server(stop: Arc<AtomicBool>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut c, _) = l.accept().unwrap();
        c.set_write_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let buf = vec![3u8; 65536];
        while !stop.load(Ordering::Relaxed) {
            if let Err(e) = c.write(&buf) {
                if !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) {
                    break;
                }
            }
        }
    });
    addr
}

#[test]
fn a_paced_reader_reads_at_its_target() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let d = daemon("reader");
    let stop = Arc::new(AtomicBool::new(false));
    let addr = bulk_server(stop.clone());
    let steering = Steering::connect_to(d.socket(), "api-test").unwrap();
    let stream = std::net::TcpStream::connect(addr).unwrap();
    let mut r = steering.paced_reader(stream).unwrap();
    assert_eq!(r.flow().target_bps(), Some(16e6));
    let mut buf = vec![0u8; 65536];
    let start = Instant::now();
    let mut bytes = 0;
    while start.elapsed() < Duration::from_millis(1500) {
        bytes += r.read(&mut buf).unwrap();
    }
    // The reader publishes the bytes that arrived (what the σ rule judges) every 100 ms:
    // at least what it had read by then (16 Mbit/s x 100 ms = 200 KB of 3 MB).
    let status = Client::connect(d.socket()).unwrap().status().unwrap();
    stop.store(true, Ordering::Relaxed);
    let f = &status.flows[0];
    let arrived = f.bytes_arrived.expect("arrivals reported");
    assert!(
        arrived as f64 >= 0.8 * f.bytes as f64,
        "{arrived} arrived, {} read",
        f.bytes
    );
    assert!(f.arrived_kbps.is_some(), "{f:?}");
    let rate = bytes as f64 * 8.0 / start.elapsed().as_secs_f64();
    assert!(within(rate, 16e6, 0.2), "{:.2} Mbit/s", rate / 1e6);
}

#[test]
fn a_lowtide_channel_is_a_flow() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let d = daemon("channel");
    let rt = lowtide::current_thread_runtime().unwrap();
    rt.block_on(async {
        let l = lowtide::listen("127.0.0.1:0".parse().unwrap(), Default::default())
            .await
            .unwrap();
        let addr = l.local_addr().unwrap();
        let (tx, rx) = tokio::join!(lowtide::connect(addr, Default::default()), l.accept());
        let (tx, rx) = (tx.unwrap(), rx.unwrap());
        let steering = Steering::connect_to(d.socket(), "api-test").unwrap();
        let _flow = steering.register_channel(&rx).unwrap();
        let stream = tx.open_stream(lowtide::StreamConfig::default()).unwrap();
        let sender = async {
            let payload = bytes::Bytes::from(vec![5u8; 16 << 10]);
            loop {
                if tx.queue_below(1 << 20).await.is_err() {
                    break;
                }
                if tx
                    .send(stream, lowtide::Message::new(payload.clone()))
                    .is_err()
                {
                    break;
                }
            }
        };
        let receiver = async {
            let start = Instant::now();
            let mut bytes = 0usize;
            while start.elapsed() < Duration::from_millis(1500) {
                match tokio::time::timeout(Duration::from_secs(2), rx.recv()).await {
                    Ok(Some(m)) => bytes += m.data.len(),
                    _ => break,
                }
            }
            bytes as f64 * 8.0 / start.elapsed().as_secs_f64()
        };
        let rate = tokio::select! {
            r = receiver => r,
            _ = sender => panic!("the sender stopped"),
        };
        assert!(within(rate, 16e6, 0.2), "{:.2} Mbit/s", rate / 1e6);
    });
}
