//! Instrumented flows that measure the emulated network from its hosts: a UDP echo for the
//! round-trip time, bulk TCP with TCP_INFO sampled every 10 ms, and a latency stream that
//! writes timestamped MSS-sized records whenever TCP_NOTSENT_LOWAT lets it. Sender and
//! receiver run as threads of this process, so one-way latency uses one clock.
//!
//! Every flow is bounded in time (deadlines on accept, connect, read and write) and talks
//! only to the hosts of the dumbbell it is given.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};

use crate::dumbbell::Dumbbell;
use crate::error::NetemError;
use crate::stats::Percentiles;

/// The size of one record of the latency stream: one MSS of a 1500-byte MTU with timestamps.
pub const RECORD: usize = 1448;

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> NetemError {
    let what = what.into();
    move |e| NetemError::setup(what, e)
}

fn join<T>(h: std::thread::JoinHandle<Result<T, NetemError>>, what: &str) -> Result<T, NetemError> {
    h.join()
        .map_err(|_| NetemError::setup(what.to_string(), "the thread panicked"))?
}

/// Minimum, median and maximum round-trip time of `count` UDP echoes, `gap` apart.
pub fn udp_rtt(net: &Dumbbell, count: usize, gap: Duration) -> Result<Percentiles, NetemError> {
    let port = 9001;
    let deadline = Instant::now() + gap * count as u32 + Duration::from_secs(3);
    let server = net
        .receiver(0)
        .spawn("udp-echo", move || -> Result<(), NetemError> {
            let sock =
                UdpSocket::bind(("0.0.0.0", port)).map_err(io_err("binding the UDP echo"))?;
            sock.set_read_timeout(Some(Duration::from_millis(50)))
                .map_err(io_err("setting a read timeout"))?;
            let mut buf = [0u8; 64];
            while Instant::now() < deadline {
                if let Ok((n, from)) = sock.recv_from(&mut buf) {
                    let _ = sock.send_to(&buf[..n], from);
                }
            }
            Ok(())
        })?;
    let dst = SocketAddr::from((net.receiver(0).addr(), port));
    let client = net
        .sender(0)
        .spawn("udp-ping", move || -> Result<Vec<u32>, NetemError> {
            let sock = UdpSocket::bind(("0.0.0.0", 0)).map_err(io_err("binding the UDP ping"))?;
            sock.set_read_timeout(Some(Duration::from_millis(5)))
                .map_err(io_err("setting a read timeout"))?;
            let mut rtts = vec![];
            let start = Instant::now();
            let mut sent = vec![];
            let mut buf = [0u8; 64];
            for seq in 0..count as u64 {
                let due = start + gap * seq as u32;
                while Instant::now() < due {
                    if let Ok(n) = sock.recv(&mut buf) {
                        collect_echo(&buf[..n], &sent, &mut rtts);
                    }
                }
                sent.push(Instant::now());
                let _ = sock.send_to(&seq.to_be_bytes(), dst);
            }
            let end = Instant::now() + Duration::from_secs(2);
            while Instant::now() < end && rtts.len() < count {
                if let Ok(n) = sock.recv(&mut buf) {
                    collect_echo(&buf[..n], &sent, &mut rtts);
                }
            }
            Ok(rtts)
        })?;
    let mut rtts = join(client, "the UDP ping")?;
    join(server, "the UDP echo")?;
    if rtts.is_empty() {
        return Err(NetemError::setup("measuring the RTT", "no echo came back"));
    }
    Ok(Percentiles::of_micros(&mut rtts))
}

fn collect_echo(reply: &[u8], sent: &[Instant], rtts: &mut Vec<u32>) {
    if let Ok(seq) = <[u8; 8]>::try_from(reply) {
        if let Some(t) = sent.get(u64::from_be_bytes(seq) as usize) {
            rtts.push(t.elapsed().as_micros() as u32);
        }
    }
}

/// What TCP itself saw during one or more flows, from TCP_INFO sampled every 10 ms. The
/// figures mean something only with [`TcpView::has_data`]: a sampler that got nothing leaves
/// them at 0, which must never read as "no retransmits" or "no queueing".
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct TcpView {
    /// Flows this view covers.
    pub flows: u32,
    /// Flows whose TCP_INFO gave at least one sample.
    pub flows_sampled: u32,
    /// TCP_INFO samples over all flows.
    pub samples: u64,
    pub retransmits: u32,
    /// The largest smoothed RTT sampled, ms.
    pub max_srtt_ms: f64,
    pub min_rtt_ms: f64,
}

impl TcpView {
    /// One flow that gave no sample (its sampler failed or never ran).
    pub fn unsampled() -> Self {
        TcpView {
            flows: 1,
            min_rtt_ms: f64::INFINITY,
            ..Default::default()
        }
    }

    /// Every flow gave samples.
    pub fn has_data(&self) -> bool {
        self.flows > 0 && self.flows_sampled == self.flows
    }

    /// "no data" and why, or `None` when every flow was sampled.
    pub fn no_data(&self) -> Option<String> {
        (!self.has_data()).then(|| {
            format!(
                "no data: TCP_INFO sampled {} of {} flows",
                self.flows_sampled, self.flows
            )
        })
    }

    /// The view of several flows together.
    pub fn merge(&mut self, other: &TcpView) {
        self.flows += other.flows;
        self.flows_sampled += other.flows_sampled;
        self.samples += other.samples;
        self.retransmits += other.retransmits;
        self.max_srtt_ms = self.max_srtt_ms.max(other.max_srtt_ms);
        self.min_rtt_ms = self.min_rtt_ms.min(other.min_rtt_ms);
    }
}

/// Result of [`bulk`].
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct BulkResult {
    /// Application bytes per second received after the warm-up, all flows together, in bit/s.
    pub goodput_bps: f64,
    pub tcp: TcpView,
}

/// `flows` bulk TCP flows from sender 0 to receiver 0 with congestion control `cc`, for
/// `duration`; goodput counts what arrives after `warmup`.
pub fn bulk(
    net: &Dumbbell,
    cc: &str,
    flows: usize,
    duration: Duration,
    warmup: Duration,
) -> Result<BulkResult, NetemError> {
    let port = 9002;
    let start = Instant::now();
    let end = start + duration;
    let measured_from = start + warmup;
    let server = net
        .receiver(0)
        .spawn("bulk-sink", move || -> Result<u64, NetemError> {
            let listener = listen(port)?;
            let mut readers = vec![];
            for _ in 0..flows {
                let conn = accept_until(&listener, start + Duration::from_secs(5))?;
                readers.push(std::thread::spawn(move || sink(conn, measured_from, end)));
            }
            Ok(readers.into_iter().map(|r| r.join().unwrap_or(0)).sum())
        })?;
    let dst = SocketAddr::from((net.receiver(0).addr(), port));
    let mut senders = vec![];
    for _ in 0..flows {
        let cc = cc.to_string();
        senders.push(net.sender(0).spawn(
            "bulk-source",
            move || -> Result<TcpView, NetemError> {
                let stream = connect(dst, &cc, None, start + Duration::from_secs(5))?;
                let done = Arc::new(AtomicBool::new(false));
                let sampler = sample_tcp_info(stream.as_raw_fd(), done.clone());
                let mut stream = stream;
                stream
                    .set_write_timeout(Some(Duration::from_millis(50)))
                    .map_err(io_err("setting a write timeout"))?;
                let chunk = vec![0x5au8; 64 * 1024];
                while Instant::now() < end {
                    match stream.write(&chunk) {
                        Ok(_) => {}
                        Err(e)
                            if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                        Err(_) => break,
                    }
                }
                done.store(true, Ordering::Relaxed);
                let view = sampler.join().unwrap_or_else(|_| TcpView::unsampled());
                let _ = stream.shutdown(std::net::Shutdown::Both);
                Ok(view)
            },
        )?);
    }
    let mut tcp = TcpView {
        min_rtt_ms: f64::INFINITY,
        ..Default::default()
    };
    for s in senders {
        tcp.merge(&join(s, "a bulk sender")?);
    }
    let bytes = join(server, "the bulk sink")?;
    let secs = (duration - warmup).as_secs_f64();
    Ok(BulkResult {
        goodput_bps: bytes as f64 * 8.0 / secs,
        tcp,
    })
}

/// Result of [`latency_stream`].
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct LatencyResult {
    /// Write-to-read one-way latency of every record after the warm-up.
    pub latency_ms: Percentiles,
    pub goodput_bps: f64,
    pub tcp: TcpView,
}

/// One always-backlogged stream of [`RECORD`]-byte writes, limited by TCP_NOTSENT_LOWAT
/// (`lowat` bytes): the latency an application sees when the kernel holds little unsent.
pub fn latency_stream(
    net: &Dumbbell,
    cc: &str,
    lowat: u32,
    duration: Duration,
    warmup: Duration,
) -> Result<LatencyResult, NetemError> {
    let port = 9003;
    let start = Instant::now();
    let end = start + duration;
    let measured_from = start + warmup;
    let server = net.receiver(0).spawn(
        "latency-sink",
        move || -> Result<(Vec<u32>, u64), NetemError> {
            let listener = listen(port)?;
            let mut conn = accept_until(&listener, start + Duration::from_secs(5))?;
            conn.set_read_timeout(Some(Duration::from_millis(100)))
                .map_err(io_err("setting a read timeout"))?;
            let mut record = [0u8; RECORD];
            let mut filled = 0;
            let (mut lat, mut bytes) = (vec![], 0u64);
            while Instant::now() < end + Duration::from_secs(1) {
                match conn.read(&mut record[filled..]) {
                    Ok(0) => break,
                    Ok(n) => filled += n,
                    Err(_) => continue,
                }
                if filled == RECORD {
                    filled = 0;
                    let now = Instant::now();
                    let sent = from_clock(u64::from_be_bytes(
                        record[..8].try_into().unwrap_or_default(),
                    ));
                    if sent >= measured_from && sent < end {
                        lat.push(now.saturating_duration_since(sent).as_micros() as u32);
                        bytes += RECORD as u64;
                    }
                }
            }
            Ok((lat, bytes))
        },
    )?;
    let dst = SocketAddr::from((net.receiver(0).addr(), port));
    let cc = cc.to_string();
    let sender =
        net.sender(0)
            .spawn("latency-source", move || -> Result<TcpView, NetemError> {
                let mut stream = connect(dst, &cc, Some(lowat), start + Duration::from_secs(5))?;
                let done = Arc::new(AtomicBool::new(false));
                let sampler = sample_tcp_info(stream.as_raw_fd(), done.clone());
                stream
                    .set_write_timeout(Some(Duration::from_millis(50)))
                    .map_err(io_err("setting a write timeout"))?;
                let mut record = [0x5au8; RECORD];
                while Instant::now() < end {
                    if !wait_writable(stream.as_raw_fd(), 50) {
                        continue;
                    }
                    record[..8].copy_from_slice(&to_clock(Instant::now()).to_be_bytes());
                    if stream.write_all(&record).is_err() {
                        break;
                    }
                }
                done.store(true, Ordering::Relaxed);
                let view = sampler.join().unwrap_or_else(|_| TcpView::unsampled());
                Ok(view)
            })?;
    let tcp = join(sender, "the latency sender")?;
    let (mut lat, bytes) = join(server, "the latency sink")?;
    Ok(LatencyResult {
        latency_ms: Percentiles::of_micros(&mut lat),
        goodput_bps: bytes as f64 * 8.0 / (duration - warmup).as_secs_f64(),
        tcp,
    })
}

/// Nanoseconds since a process-wide origin: timestamps that travel inside records.
fn to_clock(t: Instant) -> u64 {
    t.saturating_duration_since(*origin()).as_nanos() as u64
}

fn from_clock(ns: u64) -> Instant {
    *origin() + Duration::from_nanos(ns)
}

fn origin() -> &'static Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    ORIGIN.get_or_init(Instant::now)
}

fn listen(port: u16) -> Result<TcpListener, NetemError> {
    let l = TcpListener::bind(("0.0.0.0", port))
        .map_err(io_err(format!("listening on port {port}")))?;
    l.set_nonblocking(true)
        .map_err(io_err("making the listener non-blocking"))?;
    Ok(l)
}

fn accept_until(listener: &TcpListener, deadline: Instant) -> Result<TcpStream, NetemError> {
    loop {
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false)
                    .map_err(io_err("making a connection blocking"))?;
                return Ok(s);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(NetemError::setup("accepting a measurement connection", e)),
        }
    }
}

fn sink(mut conn: TcpStream, measured_from: Instant, end: Instant) -> u64 {
    let _ = conn.set_read_timeout(Some(Duration::from_millis(100)));
    let mut buf = vec![0u8; 256 * 1024];
    let mut counted = 0u64;
    while Instant::now() < end {
        match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) if Instant::now() >= measured_from => counted += n as u64,
            Ok(_) => {}
            Err(_) => continue,
        }
    }
    counted
}

/// A TCP connection with an explicit congestion control (the machine's default is BBR).
fn connect(
    dst: SocketAddr,
    cc: &str,
    lowat: Option<u32>,
    deadline: Instant,
) -> Result<TcpStream, NetemError> {
    loop {
        let sock = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))
            .map_err(io_err("creating a TCP socket"))?;
        lowtide_sockopt::set_congestion(sock.as_raw_fd(), cc).map_err(|e| {
            NetemError::Congestion {
                name: format!("{cc} ({})", e.error),
                available: crate::dumbbell::available_congestion(),
            }
        })?;
        if let Some(bytes) = lowat {
            set_notsent_lowat(sock.as_raw_fd(), bytes)?;
        }
        match sock.connect_timeout(&dst.into(), Duration::from_secs(2)) {
            Ok(()) => return Ok(sock.into()),
            Err(e) if Instant::now() < deadline => {
                tracing::debug!("connect to {dst}: {e}; retrying");
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(NetemError::setup(format!("connecting to {dst}"), e)),
        }
    }
}

fn set_notsent_lowat(fd: RawFd, bytes: u32) -> Result<(), NetemError> {
    let v = bytes as libc::c_int;
    // SAFETY: fd is a live socket; the option value is a c_int of the size given.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            &v as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(NetemError::setup(
            "setting TCP_NOTSENT_LOWAT",
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Waits until the socket is writable (with NOTSENT_LOWAT: until unsent bytes fall below it).
fn wait_writable(fd: RawFd, timeout_ms: i32) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    let rc = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    rc > 0 && pfd.revents & libc::POLLOUT != 0
}

/// Samples TCP_INFO every 10 ms until `done`; the fd must outlive the sampler.
fn sample_tcp_info(fd: RawFd, done: Arc<AtomicBool>) -> std::thread::JoinHandle<TcpView> {
    std::thread::spawn(move || {
        let mut view = TcpView::unsampled();
        while !done.load(Ordering::Relaxed) {
            if let Ok(info) = lowtide_sockopt::tcp_info(fd) {
                view.samples += 1;
                view.flows_sampled = 1;
                view.retransmits = info.tcpi_total_retrans;
                view.max_srtt_ms = view.max_srtt_ms.max(info.tcpi_rtt as f64 / 1000.0);
                if info.tcpi_rtt > 0 {
                    view.min_rtt_ms = view.min_rtt_ms.min(info.tcpi_rtt as f64 / 1000.0);
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        view
    })
}
