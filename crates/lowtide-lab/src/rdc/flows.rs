//! The TCP flows of an RDC run: plain Linux TCP sockets with the paper's packet size
//! (`TCP_MAXSEG`) and maximum window, each starting at its own time.
//!
//! The window (ns-2's `window_`, 40 packets in the paper) is bounded at the sender: it writes
//! only while its unacknowledged bytes (`SIOCOUTQ`) are under `window_packets × payload`
//! ([`lowtide_traffic::window`]). The receiver's `TCP_WINDOW_CLAMP` used to cap it, but
//! receive-buffer autotuning rewrites that clamp during the run (see that module), so the
//! receiver sets none: a cap that holds only until autotuning lifts it would be a second,
//! time-varying window, and one that looks like the bound while it is not.
//!
//! A bulk sender writes whenever the window has room; a video sender runs the paper's
//! layered source (`lowtide_media::rdc_video`) on the socket, bounded the same way. A sampler thread beside it reads the
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
use lowtide_traffic::window;
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

/// `window_packets` full segments of payload, bytes (saturating; the scenario allows at most
/// 100,000 packets, about 95 MB).
pub fn window_bytes(window_packets: u32, packet_bytes: usize) -> u32 {
    u32::try_from(window_packets as usize * payload_of(packet_bytes)).unwrap_or(u32::MAX)
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

    /// The maximum window, bytes: what the sender may have unacknowledged.
    pub fn window_bytes(&self) -> u32 {
        window_bytes(self.window_packets, self.packet_bytes)
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
    lowtide::sys::set_congestion(s.as_raw_fd(), &plan.congestion)
        .map_err(|e| format!("congestion control `{}`: {}", plan.congestion, e.error))?;
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
            None => bulk(&mut stream, plan.window_bytes(), end).map(|n| (n, None)),
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

/// Writes until `end` whenever fewer than `window` bytes are unacknowledged, never more than
/// the room left, so `SIOCOUTQ` stays at most `window`; the bytes written.
fn bulk(stream: &mut std::net::TcpStream, window: u32, end: Instant) -> Result<u64, String> {
    stream
        .set_write_timeout(Some(Duration::from_millis(20)))
        .map_err(|e| format!("SO_SNDTIMEO: {e}"))?;
    let fd = stream.as_raw_fd();
    let chunk = vec![0x5au8; 1 << 16];
    let mut written = 0u64;
    while Instant::now() < end {
        let outq = lowtide::sys::outq(fd).map_err(|e| e.to_string())?;
        let n = window::room(Some(window), u64::from(outq), chunk.len());
        if n == 0 {
            std::thread::sleep(window::POLL);
            continue;
        }
        match stream.write(&chunk[..n]) {
            Ok(n) => written += n as u64,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(e) if window::reset_at_end(&e, Instant::now(), end) => break,
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use std::sync::atomic::AtomicU32;

    /// Loopback, a reader that keeps up and a 4 MiB send buffer, so nothing but the window
    /// holds the sender back (a slow reader would bound it by itself). A thread samples the
    /// sender's `SIOCOUTQ` while it writes: it never exceeds the window, because each write
    /// is at most the room read just before it and only acknowledgements change the queue in
    /// between. The old sender (writing whenever the socket took data) reached 4.4 MB here.
    #[test]
    fn a_bulk_sender_never_has_more_than_its_window_unacknowledged() {
        let window = 10 * payload_of(1000) as u32;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let reader = std::thread::spawn(move || {
            let (mut c, _) = listener.accept().unwrap();
            let mut buf = vec![0u8; 1 << 16];
            let mut total = 0u64;
            loop {
                match c.read(&mut buf) {
                    Ok(0) | Err(_) => return total,
                    Ok(n) => total += n as u64,
                }
            }
        });
        let mut s = TcpStream::connect(addr).unwrap();
        socket2::SockRef::from(&s)
            .set_send_buffer_size(4 << 20)
            .unwrap();
        let fd = s.as_raw_fd();
        let done = AtomicBool::new(false);
        let max_outq = AtomicU32::new(0);
        let written = std::thread::scope(|scope| {
            scope.spawn(|| {
                while !done.load(Ordering::Relaxed) {
                    let q = lowtide::sys::outq(fd).unwrap();
                    max_outq.fetch_max(q, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_micros(50));
                }
            });
            let n = bulk(&mut s, window, Instant::now() + Duration::from_millis(300)).unwrap();
            done.store(true, Ordering::Relaxed);
            n
        });
        drop(s);
        let read = reader.join().unwrap();
        let max_outq = max_outq.into_inner();
        assert_eq!(read, written);
        // It moved (loopback acknowledges at once), and never past the window.
        assert!(written > 20 * u64::from(window), "{written}");
        assert!(max_outq > 0, "the sampler saw the queue");
        assert!(max_outq <= window, "SIOCOUTQ {max_outq} > window {window}");
    }

    #[test]
    fn the_window_is_packets_of_payload() {
        let plan = FlowPlan {
            index: 0,
            start_s: 0.0,
            port: 1,
            packet_bytes: 1000,
            window_packets: 40,
            congestion: "reno".into(),
            bin: Duration::from_millis(84),
            sample: Duration::from_millis(10),
            duration: Duration::from_secs(1),
            video: None,
        };
        assert_eq!(plan.payload(), 948);
        assert_eq!(plan.window_bytes(), 40 * 948);
    }
}
