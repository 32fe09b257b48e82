//! `lowtide bench`: loopback measurements, each against raw TCP in the same run.
//!
//! - **goodput**: bulk 64 KB messages through a channel (default controller, MinBuf(1,3)) vs a
//!   raw TCP socket writing the same bytes in 64 KB writes;
//! - **small messages**: 100-byte messages per second through one channel vs raw TCP with a
//!   4-byte length prefix per message behind a 64 KB `BufWriter`;
//! - **CPU per GB**: sender-thread CPU (`getrusage(RUSAGE_THREAD)`, user + system) per GB at
//!   the same paced rate, MinBuf(1,3) vs Unlimited (and raw TCP for reference). Goel et al.'s
//!   MIN_BUF(1,0) cost 2.7x TCP (`/work/shared/papers/000_b6e6729ee79515f7.txt`, §5.2, Table I).
//!
//! Sender and receiver run as two OS threads, each with its own current-thread tokio runtime,
//! as the lab does. Receiver goodput is measured from the first to the last message received.

use std::io::{BufWriter, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::{sys, Channel, ChannelConfig, Config, ControllerConfig, Error, StreamConfig};

/// What to measure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BenchConfig {
    /// Total duration of each of the seven measurements, seconds.
    pub seconds: f64,
    /// Each measurement is split into this many rounds; the variants of a comparison alternate
    /// round by round (so background load hits both alike) and medians are reported.
    pub rounds: usize,
    /// Bulk message size, bytes.
    pub bulk_message: usize,
    /// Small message size, bytes.
    pub small_message: usize,
    /// Paced rate for the CPU comparison, bytes per second.
    pub paced_rate: f64,
    /// Message size for the CPU comparison, bytes.
    pub paced_message: usize,
    /// MSS (`TCP_MAXSEG`) for the CPU comparison; 1448 emulates Ethernet so that MinBuf's
    /// limit is in realistic segments rather than 64 KB loopback ones.
    pub paced_mss: Option<u32>,
    /// Congestion control for every socket (`None`: system default).
    pub congestion: Option<String>,
}

impl Default for BenchConfig {
    fn default() -> Self {
        Self {
            seconds: 2.0,
            rounds: 3,
            bulk_message: 64 << 10,
            small_message: 100,
            paced_rate: 200e6,
            paced_message: 8 << 10,
            paced_mss: Some(1448),
            congestion: Some("cubic".into()),
        }
    }
}

/// Where and how the numbers were produced.
#[derive(Debug, Clone, Serialize)]
pub struct Provenance {
    /// lowtide version.
    pub version: &'static str,
    /// `uname -r`.
    pub kernel: String,
    /// The configuration used.
    pub config: BenchConfig,
}

/// Goodput with bulk messages.
#[derive(Debug, Clone, Serialize)]
pub struct Goodput {
    /// lowtide, MB/s (10^6 bytes).
    pub lowtide_mb_s: f64,
    /// Raw TCP, MB/s.
    pub raw_tcp_mb_s: f64,
    /// lowtide / raw TCP (goal ≥ 0.9).
    pub ratio: f64,
}

/// Small-message rate.
#[derive(Debug, Clone, Serialize)]
pub struct SmallMessages {
    /// lowtide, messages per second.
    pub lowtide_msgs_s: f64,
    /// Raw TCP with length prefixes, messages per second.
    pub raw_tcp_msgs_s: f64,
    /// lowtide / raw TCP.
    pub ratio: f64,
}

/// Sender CPU per GB at a paced rate.
#[derive(Debug, Clone, Serialize)]
pub struct CpuCost {
    /// MinBuf(1,3): CPU seconds per GB.
    pub min_buf_cpu_s_per_gb: f64,
    /// Unlimited: CPU seconds per GB.
    pub unlimited_cpu_s_per_gb: f64,
    /// Raw TCP: CPU seconds per GB.
    pub raw_tcp_cpu_s_per_gb: f64,
    /// MinBuf / Unlimited (goal ≤ 1.3).
    pub ratio: f64,
    /// Rates actually received, MB/s: MinBuf, Unlimited, raw TCP.
    pub achieved_mb_s: [f64; 3],
}

/// The whole report (`lowtide bench --json`).
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// Provenance.
    pub provenance: Provenance,
    /// Goodput.
    pub goodput: Goodput,
    /// Small messages.
    pub small_messages: SmallMessages,
    /// CPU cost.
    pub cpu: CpuCost,
}

#[derive(Debug, Clone, Copy)]
enum Pattern {
    /// Keep the queue full of messages of this size.
    Bulk(usize),
    /// Send messages of this size at this rate (bytes/s).
    Paced(usize, f64),
}

#[derive(Debug, Default, Clone, Copy)]
struct Transfer {
    bytes: u64,
    msgs: u64,
    span: Duration,
    sender_cpu: Duration,
}

impl Transfer {
    fn mb_s(&self) -> f64 {
        self.bytes as f64 / self.span.as_secs_f64().max(1e-9) / 1e6
    }
    fn msgs_s(&self) -> f64 {
        self.msgs as f64 / self.span.as_secs_f64().max(1e-9)
    }
    fn cpu_s_per_gb(&self) -> f64 {
        self.sender_cpu.as_secs_f64() / (self.bytes as f64 / 1e9).max(1e-9)
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    crate::current_thread_runtime()
}

fn join<T>(h: thread::JoinHandle<Result<T, Error>>) -> Result<T, Error> {
    h.join()
        .unwrap_or_else(|_| Err(Error::io("bench thread", std::io::Error::other("panicked"))))
}

fn lowtide_transfer(cfg: ChannelConfig, pattern: Pattern, secs: f64) -> Result<Transfer, Error> {
    let (tx, rx) = mpsc::channel::<SocketAddr>();
    let server_cfg = cfg.clone();
    let receiver = thread::spawn(move || -> Result<(u64, u64, Duration), Error> {
        runtime()?.block_on(async move {
            let l = crate::listen("127.0.0.1:0".parse().expect("literal"), server_cfg).await?;
            let _ = tx.send(l.local_addr()?);
            let ch = l.accept().await?;
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
            ))
        })
    });
    let addr = rx.recv().map_err(|_| Error::Closed)?;
    let sender = thread::spawn(move || -> Result<Duration, Error> {
        runtime()?.block_on(async move {
            let ch = crate::connect(addr, cfg).await?;
            let cpu0 = sys::thread_cpu_time()?;
            drive_sender(&ch, pattern, secs).await?;
            let cpu = sys::thread_cpu_time()? - cpu0;
            ch.close(0, "bench done").await;
            Ok(cpu)
        })
    });
    let sender_cpu = join(sender)?;
    let (bytes, msgs, span) = join(receiver)?;
    Ok(Transfer {
        bytes,
        msgs,
        span,
        sender_cpu,
    })
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
fn raw_transfer(
    congestion: Option<String>,
    mss: Option<u32>,
    pattern: Pattern,
    framed: bool,
    secs: f64,
) -> Result<Transfer, Error> {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
        .map_err(|e| Error::io("socket(AF_INET, SOCK_STREAM)", e))?;
    if let Some(m) = mss {
        sys::set_maxseg(sock.as_raw_fd(), m)?;
    }
    let any: SocketAddr = "127.0.0.1:0".parse().expect("literal");
    sock.bind(&any.into())
        .map_err(|e| Error::io("bind(127.0.0.1:0)", e))?;
    sock.listen(16).map_err(|e| Error::io("listen", e))?;
    let l: TcpListener = sock.into();
    let addr = l.local_addr().map_err(|e| Error::io("getsockname", e))?;
    let cc = congestion.clone();
    let receiver = thread::spawn(move || -> Result<(u64, u64, Duration), Error> {
        let (mut s, _) = l.accept().map_err(|e| Error::io("accept", e))?;
        if let Some(cc) = &cc {
            sys::set_congestion(s.as_raw_fd(), cc)?;
        }
        let mut buf = vec![0u8; 256 << 10];
        let (mut bytes, mut msgs, mut first, mut last) = (0u64, 0u64, None, Instant::now());
        // framing state: bytes left in the current record (header or payload)
        let (mut hdr, mut hdr_len, mut left) = ([0u8; 4], 0usize, 0usize);
        loop {
            let n = s.read(&mut buf).map_err(|e| Error::io("read", e))?;
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
        ))
    });
    let sender = thread::spawn(move || -> Result<Duration, Error> {
        let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .map_err(|e| Error::io("socket(AF_INET, SOCK_STREAM)", e))?;
        if let Some(cc) = &congestion {
            sys::set_congestion(sock.as_raw_fd(), cc)?;
        }
        if let Some(m) = mss {
            sys::set_maxseg(sock.as_raw_fd(), m)?;
        }
        sock.connect(&addr.into())
            .map_err(|e| Error::io(format!("connect({addr})"), e))?;
        let s: TcpStream = sock.into();
        s.set_nodelay(true)
            .map_err(|e| Error::io("setsockopt(TCP_NODELAY)", e))?;
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
                    .map_err(|e| Error::io("write", e))?;
            }
            w.write_all(&payload).map_err(|e| Error::io("write", e))
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
                    w.flush().map_err(|e| Error::io("write", e))?;
                    thread::sleep(Duration::from_millis(1));
                }
            }
        }
        w.flush().map_err(|e| Error::io("write", e))?;
        drop(w);
        let cpu = sys::thread_cpu_time()? - cpu0;
        s.shutdown(std::net::Shutdown::Write)
            .map_err(|e| Error::io("shutdown(SHUT_WR)", e))?;
        Ok(cpu)
    });
    let sender_cpu = join(sender)?;
    let (bytes, msgs, span) = join(receiver)?;
    Ok(Transfer {
        bytes,
        msgs,
        span,
        sender_cpu,
    })
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

fn channel_cfg(cfg: &BenchConfig, controller: ControllerConfig, mss: Option<u32>) -> ChannelConfig {
    ChannelConfig {
        mss,
        transport: Config {
            controller,
            ack_events: false,
            ..Config::default()
        },
        congestion: cfg.congestion.clone(),
        max_events: 4096,
        ..ChannelConfig::default()
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs the variants round-robin (order rotated each round); returns, per variant, the
/// transfers of every round.
fn rounds(
    n: usize,
    variants: &[&dyn Fn() -> Result<Transfer, Error>],
) -> Result<Vec<Vec<Transfer>>, Error> {
    let mut out = vec![Vec::new(); variants.len()];
    for r in 0..n {
        for k in 0..variants.len() {
            let i = (k + r) % variants.len();
            out[i].push(variants[i]()?);
        }
    }
    Ok(out)
}

/// Median of `f` over rounds, and median of the per-round ratio `f(a) / f(b)`.
fn compare(a: &[Transfer], b: &[Transfer], f: impl Fn(&Transfer) -> f64) -> (f64, f64, f64) {
    let ratios = a.iter().zip(b).map(|(x, y)| f(x) / f(y)).collect();
    (
        median(a.iter().map(&f).collect()),
        median(b.iter().map(&f).collect()),
        median(ratios),
    )
}

/// Runs the three comparisons.
pub fn run(cfg: &BenchConfig) -> Result<BenchReport, Error> {
    if !(cfg.seconds > 0.0 && cfg.seconds <= 600.0) {
        return Err(
            lowtide_proto::ConfigError::new("bench.seconds", cfg.seconds, "(0, 600]").into(),
        );
    }
    if !(1..=100).contains(&cfg.rounds) {
        return Err(lowtide_proto::ConfigError::new("bench.rounds", cfg.rounds, "1..=100").into());
    }
    let n = cfg.rounds;
    let secs = cfg.seconds / n as f64;
    let default_ctl = ControllerConfig::default();
    let cc = || cfg.congestion.clone();

    let bulk = Pattern::Bulk(cfg.bulk_message);
    let r = rounds(
        n,
        &[
            &|| lowtide_transfer(channel_cfg(cfg, default_ctl, None), bulk, secs),
            &|| raw_transfer(cc(), None, bulk, false, secs),
        ],
    )?;
    let (lt, raw, ratio) = compare(&r[0], &r[1], Transfer::mb_s);
    let goodput = Goodput {
        lowtide_mb_s: lt,
        raw_tcp_mb_s: raw,
        ratio,
    };

    let small = Pattern::Bulk(cfg.small_message);
    let r = rounds(
        n,
        &[
            &|| lowtide_transfer(channel_cfg(cfg, default_ctl, None), small, secs),
            &|| raw_transfer(cc(), None, small, true, secs),
        ],
    )?;
    let (lt, raw, ratio) = compare(&r[0], &r[1], Transfer::msgs_s);
    let small_messages = SmallMessages {
        lowtide_msgs_s: lt,
        raw_tcp_msgs_s: raw,
        ratio,
    };

    let paced = Pattern::Paced(cfg.paced_message, cfg.paced_rate);
    let r = rounds(
        n,
        &[
            &|| {
                lowtide_transfer(
                    channel_cfg(cfg, ControllerConfig::MinBuf { a: 1, b: 3 }, cfg.paced_mss),
                    paced,
                    secs,
                )
            },
            &|| {
                lowtide_transfer(
                    channel_cfg(cfg, ControllerConfig::Unlimited, cfg.paced_mss),
                    paced,
                    secs,
                )
            },
            &|| raw_transfer(cc(), cfg.paced_mss, paced, false, secs),
        ],
    )?;
    let (mb, un, ratio) = compare(&r[0], &r[1], Transfer::cpu_s_per_gb);
    let raw_cpu = median(r[2].iter().map(Transfer::cpu_s_per_gb).collect());
    let rate = |v: &[Transfer]| median(v.iter().map(Transfer::mb_s).collect());
    let cpu = CpuCost {
        min_buf_cpu_s_per_gb: mb,
        unlimited_cpu_s_per_gb: un,
        raw_tcp_cpu_s_per_gb: raw_cpu,
        ratio,
        achieved_mb_s: [rate(&r[0]), rate(&r[1]), rate(&r[2])],
    };
    Ok(BenchReport {
        provenance: Provenance {
            version: env!("CARGO_PKG_VERSION"),
            kernel: kernel_release(),
            config: cfg.clone(),
        },
        goodput,
        small_messages,
        cpu,
    })
}
