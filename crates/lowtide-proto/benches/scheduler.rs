//! Scheduler micro-benchmark: pick + charge with many active streams.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use lowtide_proto::scheduler::Scheduler;

fn pick_and_charge(c: &mut Criterion) {
    let mut g = c.benchmark_group("scheduler");
    for streams in [1u64, 8, 64] {
        let mut s = Scheduler::new();
        for id in 0..streams {
            s.add(id, 1.0 + id as f64);
            s.set_active(id, true);
        }
        g.throughput(Throughput::Elements(1));
        g.bench_function(BenchmarkId::new("pick_charge", streams), |b| {
            b.iter(|| {
                let id = s.pick().unwrap();
                s.charge(id, black_box(1000.0));
                id
            })
        });
    }
    g.finish();
}

criterion_group!(benches, pick_and_charge);
criterion_main!(benches);
