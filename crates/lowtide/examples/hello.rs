//! The lowtide API in one screen: a receiver and a latency-stream sender on two OS threads,
//! each with its own runtime (as the lab runs them); protocol latency is the receiver's
//! receive time minus the sender's write-to-kernel time, both on one monotonic clock.
use lowtide::{
    current_thread_runtime as rt, ChannelConfig, ControllerConfig, Error, Event, Message,
};
use std::{collections::HashMap, sync::mpsc, thread, time::Instant};

fn main() -> Result<(), Error> {
    let cfg = ChannelConfig {
        congestion: Some("cubic".into()),
        mss: Some(1448), // Ethernet-sized segments even over loopback
        ..ChannelConfig::with_controller(ControllerConfig::MinBuf { a: 1, b: 3 })
    };
    let (tx, rx) = mpsc::channel();
    let server_cfg = cfg.clone();
    let receiver = thread::spawn(move || -> Result<Vec<(u64, Instant)>, Error> {
        rt()?.block_on(async move {
            let listener = lowtide::listen("127.0.0.1:0".parse().unwrap(), server_cfg).await?;
            tx.send(listener.local_addr()?).unwrap();
            let (ch, mut got) = (listener.accept().await?, Vec::new());
            while let Some(m) = ch.recv().await {
                got.push((m.seq, m.received_at)); // also m.stream, m.importance, m.data
            }
            Ok(got)
        })
    });
    let written: HashMap<u64, Instant> = rt()?.block_on(async move {
        let ch = lowtide::connect(rx.recv().unwrap(), cfg).await?;
        let s = ch.open_stream(Default::default())?;
        let mss = ch.last_tcp_state().mss as usize;
        for i in 0..1000u32 {
            // waits until the controller lets one more write into the kernel
            let msg = Message::new(vec![0u8; mss]).importance((i % 4) as u8);
            ch.send_when_writable(s, msg).await?;
        }
        let stale = ch.send(s, Message::new(vec![0u8; 100 * mss]))?;
        ch.cancel(stale); // dropped if unsent; aborted (receiver frees it) if partly sent
        ch.flush().await?;
        ch.close(0, "bye").await;
        let written = ch.drain_events().into_iter().filter_map(|e| match e {
            Event::Written { id, times } => Some((id.seq, times.last_write?)),
            _ => None,
        });
        Ok::<_, Error>(written.collect())
    })?;
    let mut lat: Vec<f64> = (receiver.join().unwrap()?.iter())
        .map(|(s, t)| (*t - written[s]).as_secs_f64() * 1e6)
        .collect();
    let median = lowtide::proto::quantile::of(&mut lat, 0.5).unwrap_or(f64::NAN);
    let (n, max) = (lat.len(), lat.last().copied().unwrap_or(f64::NAN));
    println!("{n} messages, protocol latency median {median:.0} µs, max {max:.0} µs");
    Ok(())
}
