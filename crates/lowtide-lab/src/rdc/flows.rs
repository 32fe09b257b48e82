//! The TCP flows of an RDC run: plain Linux TCP sockets with the paper's packet size
//! (`TCP_MAXSEG`) and window cap (the receiver's `TCP_WINDOW_CLAMP`, which bounds what the
//! sender may have in flight), each starting at its own time.
//!
//! A bulk sender writes whenever the socket takes data; a video sender runs the paper's
//! layered source (`lowtide_media::rdc_video`) on the socket. A sampler thread beside it reads the
//! socket's `TCP_INFO` on a fixed grid from the trial's start: every sample goes into a
//! [`TcpTimeline`] (timeouts, retransmissions, RTT), and at every bin boundary the count of
//! data segments sent (`tcpi_data_segs_out`, retransmissions included) is kept, so packets
//! per bin are exact differences of a kernel counter read within a timer's lateness of the
//! boundary. The receiver counts the bytes it reads per bin (goodput and shares).

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lowtide_media::rdc_video::{self, TcpSourceOptions, TcpSourceRecord};
use socket2::{Domain, Protocol, Socket, Type};

use crate::tcpinfo::TcpTimeline;

/// Long enough for a SYN dropped twice at a busy bottleneck (retried at 1 s and 3 s).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// IPv4 and TCP headers without options.
const HEADERS: usize = 40;
/// The TCP timestamp option as Linux sends it on data segments (10 bytes, padded to 12).
const TIMESTAMPS: usize = 12;

/// Payload bytes of a full data segment in a packet of `packet_bytes` (with timestamps).
pub fn payload_of(packet_bytes: usize) -> usize {
    packet_bytes - HEADERS - TIMESTAMPS
}

/// What one flow does.
#[derive(Debug, Clone)]
pub struct FlowPlan {
    pub index: usize,
    pub start_s: f64,
    pub port: u16,
    pub packet_bytes: usize,
    pub window_packets: u32,
    pub congestion: String,
    pub bin: Duration,
    /// How often the sampler reads `TCP_INFO` (at least once per bin).
    pub sample: Duration,
    pub duration: Duration,
    /// `None`: bulk (writes whenever the socket takes data); `Some`: the paper's layered
    /// video source.
    pub video: Option<TcpSourceOptions>,
}

impl FlowPlan {
    /// `TCP_MAXSEG`: the segment size the handshake announces; Linux takes the timestamp
    /// option out of it, so a full data packet is `packet_bytes` long.
    pub fn mss_option(&self) -> usize {
        self.packet_bytes - HEADERS
    }

    /// Payload bytes of a full data segment.
    pub fn payload(&self) -> usize {
        payload_of(self.packet_bytes)
    }

    /// The receiver's window clamp, bytes.
    pub fn window_bytes(&self) -> usize {
        self.window_packets as usize * self.payload()
    }

    /// Bins that end within the run.
    pub fn bins(&self) -> usize {
        (self.duration.as_secs_f64() / self.bin.as_secs_f64()).floor() as usize
    }

    fn bin_of(&self, t0: Instant, now: Instant) -> usize {
        (now.saturating_duration_since(t0).as_secs_f64() / self.bin.as_secs_f64()) as usize
    }
}

/// What the sender of one flow measured.
#[derive(Debug, Clone, Default)]
pub struct SenderRecord {
    /// Data segments sent per bin (0 before the flow started).
    pub sent_packets: Vec<u64>,
    pub timeline: TcpTimeline,
    pub bytes_written: u64,
    /// The sender's own port: the name the agent's records (`releases.csv`,
    /// `agent-delays.csv`) and the bottleneck's drop log give the flow.
    pub local_port: Option<u16>,
    /// The video source's layers and counters (video flows only).
    pub video: Option<TcpSourceRecord>,
}

/// Bytes the receiver of one flow read per bin.
#[derive(Debug, Clone, Default)]
pub struct ReceiverRecord {
    pub received_bytes: Vec<u64>,
}

fn set_int(fd: RawFd, opt: libc::c_int, v: libc::c_int, what: &str) -> Result<(), String> {
    // SAFETY: passes a c_int of the size given.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            opt,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(format!("{what}: {}", std::io::Error::last_os_error()))
    }
}

/// The receiving end, in the receiver's namespace: accepts one connection on the plan's
/// port (until the run ends) and reads until the sender closes or the run ends.
pub fn receive(
    plan: &FlowPlan,
    t0: Instant,
    ready: impl FnOnce(),
) -> Result<ReceiverRecord, String> {
    let end = t0 + plan.duration;
    let listener = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))
        .map_err(|e| format!("receiver socket: {e}"))?;
    listener
        .set_reuse_address(true)
        .map_err(|e| format!("SO_REUSEADDR: {e}"))?;
    let fd = listener.as_raw_fd();
    set_int(fd, libc::TCP_MAXSEG, plan.mss_option() as i32, "TCP_MAXSEG")?;
    set_int(
        fd,
        libc::TCP_WINDOW_CLAMP,
        plan.window_bytes() as i32,
        "TCP_WINDOW_CLAMP",
    )?;
    let addr = SocketAddr::from(([0, 0, 0, 0], plan.port));
    listener
        .bind(&addr.into())
        .map_err(|e| format!("binding port {}: {e}", plan.port))?;
    listener.listen(4).map_err(|e| format!("listen: {e}"))?;
    let listener: TcpListener = listener.into();
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("nonblocking accept: {e}"))?;
    ready();
    let mut conn = loop {
        match listener.accept() {
            Ok((c, _)) => break c,
            Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < end => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                return Err(format!(
                    "no connection on port {} before the run ended",
                    plan.port
                ));
            }
            Err(e) => return Err(format!("accept: {e}")),
        }
    };
    conn.set_nonblocking(false)
        .and_then(|()| conn.set_read_timeout(Some(Duration::from_millis(50))))
        .map_err(|e| format!("receiver socket options: {e}"))?;
    set_int(
        conn.as_raw_fd(),
        libc::TCP_WINDOW_CLAMP,
        plan.window_bytes() as i32,
        "TCP_WINDOW_CLAMP",
    )?;
    let mut record = ReceiverRecord {
        received_bytes: vec![0; plan.bins() + 1],
    };
    let mut buf = vec![0u8; 1 << 16];
    while Instant::now() < end {
        match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let bin = plan.bin_of(t0, Instant::now()).min(plan.bins());
                record.received_bytes[bin] += n as u64;
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("reading flow {}: {e}", plan.index)),
        }
    }
    record.received_bytes.truncate(plan.bins());
    Ok(record)
}

/// The sending end, in the sender's namespace: waits for its start, connects to `dst`, and
/// writes until the run ends.
pub fn send(plan: &FlowPlan, dst: SocketAddr, t0: Instant) -> Result<SenderRecord, String> {
    let end = t0 + plan.duration;
    let start = t0 + Duration::from_secs_f64(plan.start_s);
    std::thread::sleep(start.saturating_duration_since(Instant::now()));
    let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))
        .map_err(|e| format!("sender socket: {e}"))?;
    s.set_tcp_congestion(plan.congestion.as_bytes())
        .map_err(|e| format!("congestion control `{}`: {e}", plan.congestion))?;
    set_int(
        s.as_raw_fd(),
        libc::TCP_MAXSEG,
        plan.mss_option() as i32,
        "TCP_MAXSEG",
    )?;
    s.connect_timeout(&dst.into(), CONNECT_TIMEOUT)
        .map_err(|e| format!("flow {} connecting to {dst}: {e}", plan.index))?;
    let mut stream: std::net::TcpStream = s.into();
    let local_port = stream.local_addr().ok().map(|a| a.port());
    let fd = stream.as_raw_fd();
    let stop = AtomicBool::new(false);
    // The sampler reads the socket's fd; the scope ends (and joins it) before the socket
    // closes.
    let (mut record, outcome) = std::thread::scope(|scope| {
        let sampler = scope.spawn(|| sample(plan, fd, t0, &stop));
        let outcome = match &plan.video {
            None => bulk(&mut stream, end).map(|n| (n, None)),
            Some(opts) => rdc_video::tcp::run(&mut stream, opts, t0, end, &stop)
                .map(|r| (r.bytes_written, Some(r)))
                .map_err(|e| e.to_string()),
        };
        stop.store(true, Ordering::Relaxed);
        let record = sampler.join().unwrap_or_default();
        (record, outcome)
    });
    let _ = stream.shutdown(std::net::Shutdown::Both);
    let (written, video) = outcome.map_err(|e| format!("flow {} writing: {e}", plan.index))?;
    record.bytes_written = written;
    record.local_port = local_port;
    record.video = video;
    Ok(record)
}

/// Writes whenever the socket takes data, until `end`; the bytes written.
fn bulk(stream: &mut std::net::TcpStream, end: Instant) -> Result<u64, String> {
    stream
        .set_write_timeout(Some(Duration::from_millis(20)))
        .map_err(|e| format!("SO_SNDTIMEO: {e}"))?;
    let chunk = vec![0x5au8; 1 << 16];
    let mut written = 0u64;
    while Instant::now() < end {
        match stream.write(&chunk) {
            Ok(n) => written += n as u64,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            // the receiver stops at `end` too and closes with data unread: a write that began
            // before then may meet its reset
            Err(e)
                if Instant::now() >= end
                    && matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset) =>
            {
                break
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(written)
}

/// `TCP_INFO` on a grid of `bin / k` (about `plan.sample`) from `t0`; the segment counter at every
/// bin boundary.
fn sample(plan: &FlowPlan, fd: RawFd, t0: Instant, stop: &AtomicBool) -> SenderRecord {
    let per_bin = (plan.bin.as_secs_f64() / plan.sample.as_secs_f64())
        .ceil()
        .max(1.0) as u32;
    let tick = plan.bin / per_bin;
    let bins = plan.bins();
    let mut at_boundary: Vec<Option<u64>> = vec![None; bins + 1];
    let mut timeline = TcpTimeline::default();
    let mut k = (Instant::now().saturating_duration_since(t0).as_secs_f64() / tick.as_secs_f64())
        .ceil() as u32;
    while !stop.load(Ordering::Relaxed) {
        let due = t0 + tick * k;
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        timeline.sample(fd, t0);
        if k.is_multiple_of(per_bin) {
            let b = (k / per_bin) as usize;
            if b > bins {
                break;
            }
            at_boundary[b] = lowtide::sys::tcp_info_ext(fd)
                .ok()
                .map(|x| u64::from(x.info.tcpi_data_segs_out));
        }
        k += 1;
    }
    // Before the flow connected its counter was 0; a boundary with no reading (a failed
    // sample) takes the previous one, so its packets land in the next bin.
    let mut last = 0;
    let cumulative: Vec<u64> = at_boundary
        .iter()
        .map(|c| {
            last = c.unwrap_or(last).max(last);
            last
        })
        .collect();
    SenderRecord {
        sent_packets: cumulative.windows(2).map(|w| w[1] - w[0]).collect(),
        timeline,
        bytes_written: 0,
        local_port: None,
        video: None,
    }
}
