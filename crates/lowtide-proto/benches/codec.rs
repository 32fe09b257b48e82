//! Codec micro-benchmarks: frame encode/decode, and a whole channel's byte path without I/O
//! (sender `poll_transmit` → receiver `handle_bytes` → `poll_message`).

use std::hint::black_box;
use std::time::Instant;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use lowtide_proto::wire::{DataFrame, FirstChunk, Frame};
use lowtide_proto::{Config, Connection, ControllerConfig, Message, Side, StreamConfig, TcpState};

fn frames(c: &mut Criterion) {
    let mut g = c.benchmark_group("frame");
    for size in [100usize, 1400, 32 << 10] {
        let payload = vec![7u8; size];
        let f = Frame::Data(DataFrame {
            stream: 2,
            seq: 123_456,
            offset: 0,
            first: Some(FirstChunk {
                importance: 3,
                send_time_us: 1 << 30,
                total_len: size as u64,
            }),
            payload: &payload,
        });
        let mut buf = Vec::with_capacity(size + 64);
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_with_input(BenchmarkId::new("encode", size), &f, |b, f| {
            b.iter(|| {
                buf.clear();
                black_box(f).encode(&mut buf);
                black_box(buf.len())
            })
        });
        buf.clear();
        f.encode(&mut buf);
        g.bench_with_input(BenchmarkId::new("decode", size), &buf, |b, buf| {
            b.iter(|| Frame::decode(black_box(buf), 1 << 20).unwrap().unwrap().1)
        });
    }
    g.finish();
}

/// Moves `n` messages of `size` bytes from one connection to another, in memory.
fn channel_path(c: &mut Criterion) {
    let mut g = c.benchmark_group("channel_path");
    for (size, n) in [(100usize, 10_000u64), (64 << 10, 64)] {
        g.throughput(Throughput::Elements(n));
        g.bench_function(BenchmarkId::new("messages", size), |b| {
            let cfg = Config {
                controller: ControllerConfig::Unlimited,
                ack_events: false,
                ..Config::default()
            };
            let now = Instant::now();
            let mut tx = Connection::new(cfg.clone(), Side::Client, now).unwrap();
            let mut rx = Connection::new(cfg, Side::Server, now).unwrap();
            let s = tx.open_stream(StreamConfig::default()).unwrap();
            let payload = Bytes::from(vec![1u8; size]);
            let tcp = TcpState {
                mss: 1448,
                ..TcpState::default()
            };
            let mut wire = Vec::new();
            b.iter(|| {
                for _ in 0..n {
                    tx.send(now, s, Message::new(payload.clone())).unwrap();
                }
                let mut got = 0;
                while got < n {
                    tx.poll_transmit(now, &tcp);
                    wire.clear();
                    for seg in tx.transmit_segments() {
                        wire.extend_from_slice(seg);
                    }
                    tx.handle_written(now, wire.len());
                    while tx.poll_event().is_some() {}
                    rx.handle_bytes(now, &wire).unwrap();
                    while rx.poll_message().is_some() {
                        got += 1;
                    }
                }
                black_box(got)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, frames, channel_path);
criterion_main!(benches);
