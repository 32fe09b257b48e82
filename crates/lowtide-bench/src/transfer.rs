//! One transfer over loopback: lowtide through a channel, or raw TCP, with the CPU time of
//! both threads.

use std::io::{BufWriter, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::machine::{MachineUsage, Probe};
use super::BenchConfig;
use crate::io_error;
use lowtide::{sys, Channel, ChannelConfig, Config, ControllerConfig, Error, StreamConfig};

#[derive(Debug, Clone, Copy)]
pub(super) enum Pattern {
    /// Keep the queue full of messages of this size.
    Bulk(usize),
    /// Send messages of this size at this rate (bytes/s).
    Paced(usize, f64),
}

#[derive(Debug, Default, Clone)]
pub(super) struct Transfer {
    bytes: u64,
    msgs: u64,
    span: Duration,
    sender_cpu: Duration,
    /// The receiving thread from the accepted connection on.
    receiver: sys::ThreadUsage,
    /// The whole machine, from before the threads started to after both ended.
    machine: MachineUsage,
    /// Where the two threads ran.
    cpus: Placement,
}

impl Transfer {
    pub(super) fn mb_s(&self) -> f64 {
        self.bytes as f64 / self.span.as_secs_f64().max(1e-9) / 1e6
    }
    pub(super) fn msgs_s(&self) -> f64 {
        self.msgs as f64 / self.span.as_secs_f64().max(1e-9)
    }
    pub(super) fn sender_cpu_s_per_gb(&self) -> f64 {
        self.sender_cpu.as_secs_f64() / (self.bytes as f64 / 1e9).max(1e-9)
    }
    pub(super) fn receiver_cpu_s_per_gb(&self) -> f64 {
        self.receiver.cpu.as_secs_f64() / self.gb()
    }
    /// The receiving thread's wake-ups (voluntary context switches) per GB.
    pub(super) fn receiver_wakeups_per_gb(&self) -> f64 {
        self.receiver.sleeps as f64 / self.gb()
    }
    /// Sender and receiver threads together.
    pub(super) fn both_cpu_s_per_gb(&self) -> f64 {
        (self.sender_cpu + self.receiver.cpu).as_secs_f64() / self.gb()
    }
    /// Every thread of the process: both ends, whichever was charged for the kernel's work.
    pub(super) fn process_cpu_s_per_gb(&self) -> Option<f64> {
        Some(self.machine.process?.as_secs_f64() / self.gb())
    }
    /// Both ends, whoever was charged: the whole process and `ksoftirqd`.
    pub(super) fn both_ends_cpu_s_per_gb(&self) -> Option<f64> {
        let m = &self.machine;
        Some((m.process? + m.ksoftirqd?).as_secs_f64() / self.gb())
    }
    /// Every CPU's busy time (`/proc/stat`), including softirq work in any context.
    pub(super) fn machine_cpu_s_per_gb(&self) -> Option<f64> {
        Some(self.machine.busy()?.as_secs_f64() / self.gb())
    }
    /// Softirq work the kernel deferred to `ksoftirqd`.
    pub(super) fn ksoftirqd_cpu_s_per_gb(&self) -> Option<f64> {
        Some(self.machine.ksoftirqd?.as_secs_f64() / self.gb())
    }
    /// Busy time of the CPU the sender was pinned to (`None` unless the two ends ran on two
    /// different CPUs).
    pub(super) fn sender_side_cpu_s_per_gb(&self) -> Option<f64> {
        self.side(0)
    }
    /// Busy time of the CPU the receiver was pinned to.
    pub(super) fn receiver_side_cpu_s_per_gb(&self) -> Option<f64> {
        self.side(1)
    }
    fn side(&self, end: usize) -> Option<f64> {
        let cpus = self.cpus?;
        if cpus[0] == cpus[1] {
            return None;
        }
        let busy = self.machine.per_cpu.as_ref()?.get(cpus[end])?;
        Some(busy.as_secs_f64() / self.gb())
    }
    fn gb(&self) -> f64 {
        (self.bytes as f64 / 1e9).max(1e-9)
    }
    pub(super) fn sender_cpu_s_per_m_msgs(&self) -> f64 {
        self.sender_cpu.as_secs_f64() / (self.msgs as f64 / 1e6).max(1e-9)
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    lowtide::current_thread_runtime()
}

/// Where a transfer's two threads run: the sender on the first CPU, the receiver on the
/// second (`None`: wherever the scheduler puts them).
pub(super) type Placement = Option<[usize; 2]>;

/// A named thread (the name shows in `perf` and `top`), pinned to `cpu` if given.
fn spawn<T: Send + 'static>(
    name: &str,
    cpu: Option<usize>,
    f: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> thread::JoinHandle<Result<T, Error>> {
    thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            if let Some(cpu) = cpu {
                sys::pin_thread(cpu)?;
            }
            f()
        })
        .expect("spawning a bench thread")
}

/// What a receiving thread reports: bytes, messages, span, and its usage from the accepted
/// connection on.
type Received = (u64, u64, Duration, sys::ThreadUsage);

/// Where a transfer ran and how the machine was read: `start` was read before its threads
/// were spawned.
pub(super) struct Run<'a> {
    pub(super) probe: &'a Probe,
    pub(super) cpus: Placement,
}

/// Joins a transfer's threads: the sender's CPU time; the receiver's bytes, messages, span
/// and usage; the machine's usage since `start`.
fn finish(
    run: &Run<'_>,
    start: super::machine::Reading,
    sender: thread::JoinHandle<Result<Duration, Error>>,
    receiver: thread::JoinHandle<Result<Received, Error>>,
) -> Result<Transfer, Error> {
    let sender_cpu = join(sender)?;
    let (bytes, msgs, span, receiver) = join(receiver)?;
    let machine = run.probe.since(&start, &run.probe.read());
    Ok(Transfer {
        bytes,
        msgs,
        span,
        sender_cpu,
        receiver,
        machine,
        cpus: run.cpus,
    })
}

pub(super) fn join<T>(h: thread::JoinHandle<Result<T, Error>>) -> Result<T, Error> {
    h.join()
        .unwrap_or_else(|_| Err(io_error("bench thread", std::io::Error::other("panicked"))))
}

pub(super) fn lowtide_transfer(
    bench: &BenchConfig,
    controller: ControllerConfig,
    mss: Option<u32>,
    pattern: Pattern,
    secs: f64,
    run: &Run<'_>,
) -> Result<Transfer, Error> {
    let cpus = run.cpus;
    let start = run.probe.read();
    let cfg = channel_cfg(bench, controller, mss);
    let (tx, rx) = mpsc::channel::<SocketAddr>();
    let server_cfg = cfg.clone();
    let receiver = spawn(
        "lt-recv",
        cpus.map(|c| c[1]),
        move || -> Result<Received, Error> {
            runtime()?.block_on(async move {
                let l =
                    lowtide::listen("127.0.0.1:0".parse().expect("literal"), server_cfg).await?;
                let _ = tx.send(l.local_addr()?);
                let ch = l.accept().await?;
                let usage0 = sys::thread_usage()?;
                let (mut bytes, mut msgs, mut first, mut last) = (0u64, 0u64, None, Instant::now());
                let mut buf = Vec::with_capacity(4096);
                loop {
                    buf.clear();
                    if ch.recv_many(&mut buf, 4096).await == 0 {
                        break;
                    }
                    for m in &buf {
                        first.get_or_insert(m.received_at);
                        last = m.received_at;
                        bytes += m.data.len() as u64;
                    }
                    msgs += buf.len() as u64;
                }
                Ok((
                    bytes,
                    msgs,
                    last.saturating_duration_since(first.unwrap_or(last)),
                    sys::thread_usage()?.since(&usage0),
                ))
            })
        },
    );
    let addr = rx.recv().map_err(|_| Error::Closed)?;
    let sender = spawn(
        "lt-send",
        cpus.map(|c| c[0]),
        move || -> Result<Duration, Error> {
            runtime()?.block_on(async move {
                let ch = lowtide::connect(addr, cfg).await?;
                let cpu0 = sys::thread_cpu_time()?;
                drive_sender(&ch, pattern, secs).await?;
                let cpu = sys::thread_cpu_time()? - cpu0;
                ch.close(0, "bench done").await;
                Ok(cpu)
            })
        },
    );
    finish(run, start, sender, receiver)
}

async fn drive_sender(ch: &Channel, pattern: Pattern, secs: f64) -> Result<(), Error> {
    let s = ch.open_stream(StreamConfig::default())?;
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs_f64(secs);
    match pattern {
        Pattern::Bulk(size) => {
            let payload = Bytes::from(vec![0xa5u8; size]);
            let batch = (1 << 20) / size.max(1) + 1;
            let high_water = ((4 << 20) as u64).max(2 * (batch * size) as u64);
            while Instant::now() < end {
                ch.queue_below(high_water).await?;
                ch.send_batch(s, std::iter::repeat_n(payload.clone(), batch))?;
                ch.drain_events();
            }
        }
        Pattern::Paced(size, rate) => {
            let payload = Bytes::from(vec![0x5au8; size]);
            let mut sent = 0u64;
            let mut tick = tokio::time::interval(Duration::from_millis(1));
            while Instant::now() < end {
                tick.tick().await;
                let due = (t0.elapsed().as_secs_f64() * rate) as u64;
                let n = due.saturating_sub(sent) / size as u64;
                if n > 0 {
                    ch.send_batch(s, std::iter::repeat_n(payload.clone(), n as usize))?;
                    sent += n * size as u64;
                }
                ch.drain_events();
            }
            // let the queue drain so both controllers are charged for the same bytes
            while ch.queued_bytes() > 0 && t0.elapsed().as_secs_f64() < secs * 2.0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }
    Ok(())
}

/// Raw TCP: `framed` adds a 4-byte length per message (counted on the receiver).
pub(super) fn raw_transfer(
    congestion: Option<String>,
    mss: Option<u32>,
    pattern: Pattern,
    framed: bool,
    secs: f64,
    run: &Run<'_>,
) -> Result<Transfer, Error> {
    let cpus = run.cpus;
    let start = run.probe.read();
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
        .map_err(|e| io_error("socket(AF_INET, SOCK_STREAM)", e))?;
    if let Some(m) = mss {
        sys::set_maxseg(sock.as_raw_fd(), m)?;
    }
    let any: SocketAddr = "127.0.0.1:0".parse().expect("literal");
    sock.bind(&any.into())
        .map_err(|e| io_error("bind(127.0.0.1:0)", e))?;
    sock.listen(16).map_err(|e| io_error("listen", e))?;
    let l: TcpListener = sock.into();
    let addr = l.local_addr().map_err(|e| io_error("getsockname", e))?;
    let cc = congestion.clone();
    let receiver = spawn(
        "raw-recv",
        cpus.map(|c| c[1]),
        move || -> Result<Received, Error> {
            let (mut s, _) = l.accept().map_err(|e| io_error("accept", e))?;
            let usage0 = sys::thread_usage()?;
            if let Some(cc) = &cc {
                sys::set_congestion(s.as_raw_fd(), cc)?;
            }
            let mut buf = vec![0u8; 256 << 10];
            let (mut bytes, mut msgs, mut first, mut last) = (0u64, 0u64, None, Instant::now());
            // framing state: bytes left in the current record (header or payload)
            let (mut hdr, mut hdr_len, mut left) = ([0u8; 4], 0usize, 0usize);
            loop {
                let n = s.read(&mut buf).map_err(|e| io_error("read", e))?;
                if n == 0 {
                    break;
                }
                let now = Instant::now();
                first.get_or_insert(now);
                last = now;
                if !framed {
                    bytes += n as u64;
                    continue;
                }
                let mut p = &buf[..n];
                while !p.is_empty() {
                    if left == 0 {
                        let take = (4 - hdr_len).min(p.len());
                        hdr[hdr_len..hdr_len + take].copy_from_slice(&p[..take]);
                        hdr_len += take;
                        p = &p[take..];
                        if hdr_len == 4 {
                            left = u32::from_le_bytes(hdr) as usize;
                            hdr_len = 0;
                            if left == 0 {
                                msgs += 1;
                            }
                        }
                    } else {
                        let take = left.min(p.len());
                        left -= take;
                        bytes += take as u64;
                        p = &p[take..];
                        if left == 0 {
                            msgs += 1;
                        }
                    }
                }
            }
            Ok((
                bytes,
                msgs,
                last.saturating_duration_since(first.unwrap_or(last)),
                sys::thread_usage()?.since(&usage0),
            ))
        },
    );
    let sender = spawn(
        "raw-send",
        cpus.map(|c| c[0]),
        move || -> Result<Duration, Error> {
            let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
                .map_err(|e| io_error("socket(AF_INET, SOCK_STREAM)", e))?;
            if let Some(cc) = &congestion {
                sys::set_congestion(sock.as_raw_fd(), cc)?;
            }
            if let Some(m) = mss {
                sys::set_maxseg(sock.as_raw_fd(), m)?;
            }
            sock.connect(&addr.into())
                .map_err(|e| io_error(format!("connect({addr})"), e))?;
            let s: TcpStream = sock.into();
            s.set_nodelay(true)
                .map_err(|e| io_error("setsockopt(TCP_NODELAY)", e))?;
            let cpu0 = sys::thread_cpu_time()?;
            let t0 = Instant::now();
            let end = t0 + Duration::from_secs_f64(secs);
            let mut w = BufWriter::with_capacity(64 << 10, &s);
            let (size, rate) = match pattern {
                Pattern::Bulk(size) => (size, None),
                Pattern::Paced(size, rate) => (size, Some(rate)),
            };
            let payload = vec![0x77u8; size];
            let mut sent = 0u64;
            let write_one = |w: &mut BufWriter<&TcpStream>| -> Result<(), Error> {
                if framed {
                    w.write_all(&(size as u32).to_le_bytes())
                        .map_err(|e| io_error("write", e))?;
                }
                w.write_all(&payload).map_err(|e| io_error("write", e))
            };
            while Instant::now() < end {
                match rate {
                    None => {
                        for _ in 0..64 {
                            write_one(&mut w)?;
                        }
                    }
                    Some(rate) => {
                        let due = (t0.elapsed().as_secs_f64() * rate) as u64;
                        while sent + size as u64 <= due {
                            write_one(&mut w)?;
                            sent += size as u64;
                        }
                        w.flush().map_err(|e| io_error("write", e))?;
                        thread::sleep(Duration::from_millis(1));
                    }
                }
            }
            w.flush().map_err(|e| io_error("write", e))?;
            drop(w);
            let cpu = sys::thread_cpu_time()? - cpu0;
            s.shutdown(std::net::Shutdown::Write)
                .map_err(|e| io_error("shutdown(SHUT_WR)", e))?;
            Ok(cpu)
        },
    );
    finish(run, start, sender, receiver)
}

fn channel_cfg(cfg: &BenchConfig, controller: ControllerConfig, mss: Option<u32>) -> ChannelConfig {
    ChannelConfig {
        mss,
        transport: Config {
            controller,
            ack_events: false,
            written_events: false,
            ..Config::default()
        },
        congestion: cfg.congestion.clone(),
        max_events: 4096,
        ..ChannelConfig::default()
    }
}
