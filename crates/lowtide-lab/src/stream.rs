//! The measured stream: the sender writes one MSS-sized message each time the transport can
//! take more (`Channel::writable`), stamped with the send time; the receiver subtracts it from
//! the time the message was read from the socket. With the `Unlimited` controller this is
//! plain TCP: the kernel's send buffer fills and the latency is what an application sees.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lowtide::{Channel, ChannelConfig, Message, StreamConfig};
use serde::{Deserialize, Serialize};

use crate::clock;
use crate::LabError;

/// Payload of one message: one MSS of a 1500-byte MTU path.
pub const MESSAGE_BYTES: usize = 1448;

/// One delivered message.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sample {
    /// When it was sent, seconds since the run started.
    pub sent_s: f64,
    /// Send to read, ms.
    pub latency_ms: f64,
}

/// What the receiver saw.
#[derive(Debug, Clone, Default)]
pub struct Received {
    pub samples: Vec<Sample>,
    pub bytes: u64,
}

impl Received {
    /// Latencies of the messages sent in `[from_s, to_s)`.
    pub fn latencies(&self, from_s: f64, to_s: f64) -> Vec<f64> {
        self.samples
            .iter()
            .filter(|s| s.sent_s >= from_s && s.sent_s < to_s)
            .map(|s| s.latency_ms)
            .collect()
    }
}

pub(crate) fn transport(what: &str) -> impl FnOnce(lowtide::Error) -> LabError + '_ {
    move |source| LabError::Transport {
        what: what.to_string(),
        source,
    }
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, LabError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| LabError::io("building a tokio runtime", e))
}

/// What sending cost (Goel et al. Table I): the sender thread runs the application and the
/// transport's driver on one current-thread runtime, so its CPU time is the sender's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SendCost {
    pub messages: u64,
    /// User and system CPU of the sender thread while streaming, seconds.
    pub cpu_user_s: f64,
    pub cpu_system_s: f64,
    /// Times the transport's driver woke up (epoll wake-ups and timers).
    pub driver_wakeups: u64,
    /// `writev` calls that handed bytes to the kernel.
    pub write_calls: u64,
    pub bytes_written: u64,
    /// Write opportunities the latency controller refused.
    pub controller_blocked: u64,
}

/// User and system CPU time of the calling thread, seconds (`/proc/thread-self/stat`, in
/// USER_HZ = 100 ticks; `None` where it cannot be read).
pub fn thread_cpu_s() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    // Fields after the command name (which may hold spaces) start at field 3, `state`.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut f = rest.split(' ').skip(11);
    let user: f64 = f.next()?.parse().ok()?;
    let system: f64 = f.next()?.parse().ok()?;
    Some((user / 100.0, system / 100.0))
}

/// Connects to a stream receiver, retrying for 5 s while its listener comes up.
pub(crate) async fn connect(dst: SocketAddr, cfg: ChannelConfig) -> Result<Channel, LabError> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match lowtide::connect(dst, cfg.clone()).await {
            Ok(ch) => return Ok(ch),
            Err(e) if Instant::now() < deadline => {
                tracing::debug!("connect to {dst}: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => return Err(transport("connecting")(e)),
        }
    }
}

/// Accepts the one channel of a measured stream on `addr`.
pub(crate) async fn accept(addr: SocketAddr, cfg: ChannelConfig) -> Result<Channel, LabError> {
    let listener = lowtide::listen(addr, cfg)
        .await
        .map_err(transport("listening"))?;
    tokio::time::timeout(Duration::from_secs(10), listener.accept())
        .await
        .map_err(|_| LabError::io("accepting the measured stream", "no connection within 10 s"))?
        .map_err(transport("accepting"))
}

/// Measures a sender thread's [`SendCost`] from its creation to [`CostMeter::finish`].
pub(crate) struct CostMeter(Option<(f64, f64)>);

impl CostMeter {
    pub(crate) fn start() -> Self {
        Self(thread_cpu_s())
    }

    pub(crate) fn finish(&self, ch: &Channel, messages: u64) -> SendCost {
        let stats = ch.stats();
        let cpu = thread_cpu_s()
            .zip(self.0)
            .map_or((0.0, 0.0), |((u1, s1), (u0, s0))| (u1 - u0, s1 - s0));
        SendCost {
            messages,
            cpu_user_s: cpu.0,
            cpu_system_s: cpu.1,
            driver_wakeups: ch.driver_wakeups(),
            write_calls: stats.write_calls,
            bytes_written: stats.bytes_written,
            controller_blocked: stats.controller_blocked,
        }
    }
}

/// Sends until `end`; blocking (builds its own runtime), for a thread inside a sender host.
pub fn send(dst: SocketAddr, cfg: ChannelConfig, end: Instant) -> Result<SendCost, LabError> {
    runtime()?.block_on(async move {
        let ch = connect(dst, cfg).await?;
        let stream = ch
            .open_stream(StreamConfig::default())
            .map_err(transport("opening a stream"))?;
        let mut payload = vec![0x5a; MESSAGE_BYTES];
        let mut sent = 0u64;
        let meter = CostMeter::start();
        let end_t = tokio::time::Instant::from_std(end);
        loop {
            tokio::select! {
                r = ch.writable() => r.map_err(transport("waiting to write"))?,
                _ = tokio::time::sleep_until(end_t) => break,
            }
            payload[..8].copy_from_slice(&clock::to_wire(Instant::now()).to_be_bytes());
            ch.send(stream, Message::new(payload.clone()))
                .map_err(transport("sending"))?;
            sent += 1;
        }
        let cost = meter.finish(&ch, sent);
        // Plain TCP still has seconds of data queued: do not wait for it.
        ch.close(0, "measurement over").await;
        Ok(cost)
    })
}

/// Accepts one channel on `addr` and reads until `end`; blocking, for a receiver host.
pub fn receive(
    addr: SocketAddr,
    cfg: ChannelConfig,
    start: Instant,
    end: Instant,
) -> Result<Received, LabError> {
    runtime()?.block_on(async move {
        let ch = accept(addr, cfg).await?;
        let mut out = Received::default();
        let end_t = tokio::time::Instant::from_std(end);
        loop {
            let msg = tokio::select! {
                m = ch.recv() => m,
                _ = tokio::time::sleep_until(end_t) => None,
            };
            let Some(msg) = msg else { break };
            let Some(stamp) = msg.data.get(..8) else {
                continue;
            };
            let sent = clock::from_wire(u64::from_be_bytes(stamp.try_into().unwrap_or_default()));
            out.bytes += msg.data.len() as u64;
            out.samples.push(Sample {
                sent_s: sent.saturating_duration_since(start).as_secs_f64(),
                latency_ms: msg
                    .received_at
                    .saturating_duration_since(sent)
                    .as_secs_f64()
                    * 1e3,
            });
        }
        Ok(out)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_cpu_time_grows_with_work() {
        let (u0, s0) = thread_cpu_s().expect("/proc/thread-self/stat is readable");
        let t = Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(300) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let (u1, s1) = thread_cpu_s().unwrap();
        assert!(u1 + s1 - u0 - s0 >= 0.1, "{u0} {s0} -> {u1} {s1}");
    }
}
