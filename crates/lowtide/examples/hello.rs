//! The lowtide API in one screen: a receiver and a latency-stream sender on two OS threads
//! (each with its own runtime, as the lab runs them), protocol latency from the sender's
//! write time to the receiver's receive time.
use std::time::Instant;

use lowtide::{ChannelConfig, Config, ControllerConfig, Event, Message, StreamConfig};

fn main() -> Result<(), lowtide::Error> {
    let cfg = ChannelConfig {
        transport: Config { controller: ControllerConfig::MinBuf { a: 1, b: 3 }, ..Config::default() },
        congestion: Some("cubic".into()),
        ..ChannelConfig::default()
    };
    let rt = || tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let (tx, rx) = std::sync::mpsc::channel();
    let server_cfg = cfg.clone();
    let receiver = std::thread::spawn(move || -> Vec<(u64, Instant)> {
        rt().block_on(async move {
            let l = lowtide::listen("127.0.0.1:0".parse().unwrap(), server_cfg).await.expect("listen");
            tx.send(l.local_addr().expect("addr")).expect("main thread waits");
            let ch = l.accept().await.expect("accept");
            let mut got = Vec::new();
            while let Some(m) = ch.recv().await {
                got.push((m.seq, m.received_at)); // also: m.stream, m.importance, m.data
            }
            got
        })
    });

    let addr = rx.recv().expect("receiver thread sends its address");
    let written = rt().block_on(async move {
        let ch = lowtide::connect(addr, cfg).await?;
        let s = ch.open_stream(StreamConfig { weight: 1.0 })?;
        let mss = ch.last_tcp_state().mss as usize;
        for i in 0..1000u32 {
            // waits until the controller lets a write into the kernel
            ch.send_when_writable(s, Message::new(vec![0u8; mss]).importance((i % 4) as u8)).await?;
        }
        let stale = ch.send(s, Message::new(vec![0u8; 10 * mss]))?;
        ch.cancel(stale); // dropped if unsent, aborted (receiver frees it) if partly sent
        let mut written = std::collections::HashMap::new();
        for e in ch.drain_events() {
            if let Event::Written { id, times } = e {
                written.insert(id.seq, times.last_write.expect("written"));
            }
        }
        ch.close(0, "bye").await;
        Ok::<_, lowtide::Error>(written)
    })?;

    let mut lat: Vec<f64> = receiver.join().expect("receiver").iter()
        .filter_map(|(seq, at)| written.get(seq).map(|w| (*at - *w).as_secs_f64() * 1e6))
        .collect();
    lat.sort_by(f64::total_cmp);
    println!("{} messages, protocol latency median {:.0} µs, max {:.0} µs",
        lat.len(), lat[lat.len() / 2], lat[lat.len() - 1]);
    Ok(())
}
