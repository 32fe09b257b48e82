//! The whole message path without I/O, for instruction counts: `n` messages of `size` bytes
//! from `send` through `poll_transmit`/`handle_written` into a receiver's `handle_read` and
//! `poll_message`. Run under callgrind to see where instructions go:
//!
//! ```sh
//! cargo build --release -p lowtide-proto --example message_path
//! valgrind --tool=callgrind ./target/release/examples/message_path 100 100000
//! ```

use std::time::Instant;

use bytes::Bytes;
use lowtide_proto::{Config, Connection, ControllerConfig, Message, Side, StreamConfig, TcpState};

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>());
    let size = args.next().and_then(Result::ok).unwrap_or(100);
    let n = args.next().and_then(Result::ok).unwrap_or(100_000);
    let cfg = Config {
        controller: ControllerConfig::Unlimited,
        ack_events: false,
        written_events: false,
        ..Config::default()
    };
    let now = Instant::now();
    let mut tx = Connection::new(cfg.clone(), Side::Client, now).expect("valid config");
    let mut rx = Connection::new(cfg, Side::Server, now).expect("valid config");
    let s = tx.open_stream(StreamConfig::default()).expect("a stream");
    let payload = Bytes::from(vec![1u8; size]);
    let tcp = TcpState {
        mss: 1448,
        ..TcpState::default()
    };
    for _ in 0..n {
        tx.send(now, s, Message::new(payload.clone()))
            .expect("queue has room");
    }
    let mut got = 0;
    while got < n {
        tx.poll_transmit(now, &tcp);
        let mut wire = Vec::with_capacity(tx.staged_len() as usize);
        for seg in tx.transmit_segments() {
            wire.extend_from_slice(seg);
        }
        tx.handle_written(now, wire.len());
        while tx.poll_event().is_some() {}
        rx.handle_read(now, Bytes::from(wire))
            .expect("valid frames");
        while rx.poll_message().is_some() {
            got += 1;
        }
    }
    println!("{got} messages of {size} bytes");
}
