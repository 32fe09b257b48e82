//! The agent measured on real packets: TCP over the loopback device of a network namespace,
//! with the agent's rules including loopback for the benchmark's port, against the same
//! traffic without the agent in the same run.
//!
//! - Latency: a TCP_NODELAY ping-pong of 64-byte messages. Each round trip crosses the agent
//!   twice (the request enters the server, the reply leaves it), and nothing is held (no
//!   router marks on loopback, so every flow's delay is 0): the added latency per packet is
//!   half the difference of the round-trip percentiles with and without the agent.
//! - Throughput: a bulk transfer with 1448-byte segments for a few seconds; the agent handles
//!   every data packet entering the server and every ACK leaving it. Packets per second of
//!   wall time, and per second of the agent thread's CPU time (its capacity on one core).
//!
//! Call [`run`] from a thread inside a network namespace of its own (the CLI's
//! `lowtide rdc bench` builds one with lowtide-netem); it brings `lo` up there.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::config::AgentConfig;
use crate::driver::{AgentError, AgentHandle, DriverConfig};
use crate::iptables::Selection;

const PORT: u16 = 7390;
const MSS: libc::c_int = 1448;

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub round_trips: usize,
    pub flood: Duration,
    pub queue: u16,
}

impl Default for BenchOptions {
    fn default() -> Self {
        Self {
            round_trips: 20_000,
            flood: Duration::from_secs(3),
            queue: 7390,
        }
    }
}

/// Percentiles of a sample, microseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Micros {
    pub count: usize,
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
}

impl Micros {
    fn of(samples: &mut [f64]) -> Self {
        samples.sort_by(f64::total_cmp);
        let at = |q: f64| lowtide_proto::quantile::of_sorted(samples, q).unwrap_or(0.0);
        Micros {
            count: samples.len(),
            p50: at(0.5),
            p99: at(0.99),
            p999: at(0.999),
        }
    }
}

/// A bulk transfer through the agent.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Flood {
    pub seconds: f64,
    /// Packets the agent handled (both directions).
    pub packets: u64,
    pub packets_per_second: f64,
    pub agent_cpu_seconds: f64,
    /// Packets per second of the agent thread's CPU time: its capacity on one core.
    pub packets_per_cpu_second: f64,
    pub goodput_mbps: f64,
    /// Packets the agent held (0 expected: nothing is marked on loopback).
    pub held: u64,
}

/// The benchmark's result.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub rtt_without_agent_us: Micros,
    pub rtt_with_agent_us: Micros,
    /// Per packet: half the round-trip difference, at the median and the 99th percentile.
    pub added_latency_p50_us: f64,
    pub added_latency_p99_us: f64,
    pub flood: Flood,
    pub flood_without_agent_mbps: f64,
}

fn io(what: &str) -> impl FnOnce(std::io::Error) -> AgentError + '_ {
    move |error| AgentError::System {
        what: what.to_string(),
        error,
    }
}

/// Runs the benchmark in the calling thread's network namespace.
pub fn run(opts: &BenchOptions) -> Result<BenchReport, AgentError> {
    let up = Command::new("ip")
        .args(["link", "set", "lo", "up"])
        .status()
        .map_err(io("running ip link set lo up"))?;
    if !up.success() {
        return Err(io("bringing lo up")(std::io::Error::other(
            "ip link set lo up failed",
        )));
    }
    let without = ping_pong(opts.round_trips)?;
    let plain_flood = flood(opts.flood)?;
    let agent = AgentHandle::start(DriverConfig {
        agent: AgentConfig::default(),
        queue: opts.queue,
        selection: Selection {
            ports: vec![PORT],
            loopback: true,
        },
        ..DriverConfig::default()
    })?;
    let with = ping_pong(opts.round_trips)?;
    let before = agent.status();
    let agent_flood = flood(opts.flood)?;
    let after = agent.stop()?;
    let packets = (after.counters.incoming + after.counters.outgoing)
        - (before.counters.incoming + before.counters.outgoing);
    let cpu = after.driver.cpu_seconds - before.driver.cpu_seconds;
    Ok(BenchReport {
        added_latency_p50_us: (with.p50 - without.p50) / 2.0,
        added_latency_p99_us: (with.p99 - without.p99) / 2.0,
        rtt_without_agent_us: without,
        rtt_with_agent_us: with,
        flood: Flood {
            seconds: agent_flood.seconds,
            packets,
            packets_per_second: packets as f64 / agent_flood.seconds,
            agent_cpu_seconds: cpu,
            packets_per_cpu_second: packets as f64 / cpu.max(1e-9),
            goodput_mbps: agent_flood.goodput_mbps,
            held: after.counters.held - before.counters.held,
        },
        flood_without_agent_mbps: plain_flood.goodput_mbps,
    })
}

fn listener() -> Result<TcpListener, AgentError> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, PORT)).map_err(io("listening on loopback"))
}

fn set_maxseg(s: &socket2::Socket) {
    // SAFETY: passes a c_int of the size given.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_MAXSEG,
            (&MSS as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// A client connection with 1448-byte segments (loopback's own MSS is 64 KB).
fn connect() -> Result<TcpStream, AgentError> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
        .map_err(io("creating a socket"))?;
    set_maxseg(&s);
    s.connect(&SocketAddr::from((Ipv4Addr::LOCALHOST, PORT)).into())
        .map_err(io("connecting over loopback"))?;
    Ok(s.into())
}

/// Round-trip times of `n` 64-byte ping-pongs, microseconds.
fn ping_pong(n: usize) -> Result<Micros, AgentError> {
    let l = listener()?;
    let server = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut c, _) = l.accept()?;
        c.set_nodelay(true)?;
        let mut buf = [0u8; 64];
        loop {
            match c.read_exact(&mut buf) {
                Ok(()) => c.write_all(&buf)?,
                Err(_) => return Ok(()),
            }
        }
    });
    let mut c = connect()?;
    c.set_nodelay(true).map_err(io("setting TCP_NODELAY"))?;
    let mut buf = [7u8; 64];
    let mut rtts = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        c.write_all(&buf).map_err(io("sending a ping"))?;
        c.read_exact(&mut buf).map_err(io("reading a pong"))?;
        rtts.push(t.elapsed().as_secs_f64() * 1e6);
    }
    drop(c);
    let _ = server.join();
    Ok(Micros::of(&mut rtts))
}

struct FloodResult {
    seconds: f64,
    goodput_mbps: f64,
}

/// A bulk transfer over loopback for `length`.
fn flood(length: Duration) -> Result<FloodResult, AgentError> {
    let l = listener()?;
    let server = std::thread::spawn(move || -> std::io::Result<u64> {
        let (mut c, _) = l.accept()?;
        let mut buf = vec![0u8; 1 << 16];
        let mut total = 0u64;
        loop {
            match c.read(&mut buf)? {
                0 => return Ok(total),
                n => total += n as u64,
            }
        }
    });
    let mut c = connect()?;
    let chunk = vec![0x5au8; 1 << 16];
    let start = Instant::now();
    while start.elapsed() < length {
        c.write_all(&chunk)
            .map_err(io("writing the bulk transfer"))?;
    }
    drop(c);
    let bytes = server
        .join()
        .map_err(|_| AgentError::Panicked)?
        .map_err(io("reading the bulk transfer"))?;
    let seconds = start.elapsed().as_secs_f64();
    Ok(FloodResult {
        seconds,
        goodput_mbps: bytes as f64 * 8.0 / seconds / 1e6,
    })
}
