//! The layered source over a plain, connected TCP socket: once a period it reads the send
//! buffer's occupancy (in segments of the payload size, rounded up), lets [`LayeredSource`]
//! decide, and writes that many segments (segment k of a period carries layer k: every byte
//! is k). A thin driver; the decisions are the source's.
//!
//! Occupancy, [`Occupancy`]: the paper's ns-2 buffer "changes whenever the application writes
//! data to the agent or the agent sends a data segment" (Section 4.3), so it holds data not
//! yet sent: `SIOCOUTQNSD` ([`Occupancy::Unsent`], our default). [`Occupancy::Unacked`] is
//! `SIOCOUTQ` (sent and unacknowledged too), which Linux's send buffer really holds; with it,
//! T_add = 0 asks for nothing in flight at every observation, which an RTT near the period
//! (or an RDC receiver holding ACKs) rarely allows.
//!
//! The socket's `SO_SNDBUF` is set well above the source's buffer bound, so the bound the
//! paper describes (buffer size minus occupancy) is the source's, not the kernel's; a write
//! the kernel still refuses is counted (`refused_segments`), never retried later.
//!
//! The maximum window ([`TcpSourceOptions::window_bytes`], ns-2's `window_`) is kept by the
//! sender ([`lowtide_traffic::window`]; a receiver's `TCP_WINDOW_CLAMP` does not hold on
//! Linux): segments are handed to the kernel only while its unacknowledged bytes are under
//! the window, the rest wait here and go out as acknowledgements make room (looked at every
//! [`window::POLL`]). Before, the kernel held them as unsent data; now the driver does, so
//! held segments count in the occupancy the source sees, as ns-2's agent buffer held them.

use std::collections::VecDeque;
use std::io::{ErrorKind, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use lowtide_traffic::window;
use serde::Serialize;

use super::source::{LayeredSource, SourceConfig, SourceConfigError, SourceCounters};

/// What counts as the send buffer's occupancy, besides the segments the window holds back
/// in the driver (always counted: they are unsent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Occupancy {
    /// Written, not yet sent (`SIOCOUTQNSD`): the paper's ns-2 definition.
    #[default]
    Unsent,
    /// Written, not yet acknowledged (`SIOCOUTQ`).
    Unacked,
}

impl Occupancy {
    fn read(self, fd: std::os::fd::RawFd) -> Result<u32, lowtide::sys::SysError> {
        match self {
            Occupancy::Unsent => lowtide::sys::outq_notsent(fd),
            Occupancy::Unacked => lowtide::sys::outq(fd),
        }
    }
}

/// How the driver writes.
#[derive(Debug, Clone)]
pub struct TcpSourceOptions {
    pub source: SourceConfig,
    pub occupancy: Occupancy,
    /// Bytes written per segment (the connection's MSS payload, so a segment is a packet).
    pub payload_bytes: usize,
    /// The most bytes unacknowledged (`SIOCOUTQ`) the driver lets the kernel have; `None`:
    /// only TCP's own windows.
    pub window_bytes: Option<u32>,
}

/// The layer count from a time on (seconds from the caller's `t0`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LayerPoint {
    pub t_s: f64,
    pub layers: u32,
}

/// What one stream did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TcpSourceRecord {
    /// The layer count at the start and after every change.
    pub layers: Vec<LayerPoint>,
    pub counters: SourceCounters,
    /// Segments the kernel did not take (the socket's buffer was full after all).
    pub refused_segments: u64,
    /// Periods whose occupancy read failed (the source observed nothing and wrote nothing).
    pub failed_reads: u64,
    /// The largest occupancy seen, segments (held ones included).
    pub max_occupancy: u32,
    pub bytes_written: u64,
}

/// Segments the window holds back: (layer, bytes not yet written), oldest first.
#[derive(Debug, Default)]
struct Held {
    segments: VecDeque<(usize, usize)>,
    bytes: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum TcpSourceError {
    #[error(transparent)]
    Config(#[from] SourceConfigError),
    #[error("payload_bytes = {0}: allowed is 1 to 65536")]
    Payload(usize),
    #[error("{what}: {error}")]
    Io {
        what: &'static str,
        error: std::io::Error,
    },
}

/// Streams until `end` or `stop`, from a source whose clock starts now; layer times are
/// seconds from `t0`.
pub fn run(
    stream: &mut TcpStream,
    opts: &TcpSourceOptions,
    t0: Instant,
    end: Instant,
    stop: &AtomicBool,
) -> Result<TcpSourceRecord, TcpSourceError> {
    if !(1..=65_536).contains(&opts.payload_bytes) {
        return Err(TcpSourceError::Payload(opts.payload_bytes));
    }
    let fd = stream.as_raw_fd();
    let room = opts.source.buffer_packets as usize * opts.payload_bytes;
    socket2::SockRef::from(&*stream)
        .set_send_buffer_size(4 * room)
        .map_err(|error| TcpSourceError::Io {
            what: "SO_SNDBUF",
            error,
        })?;
    stream
        .set_nonblocking(true)
        .map_err(|error| TcpSourceError::Io {
            what: "non-blocking socket",
            error,
        })?;
    let mut source = LayeredSource::new(opts.source.clone(), Instant::now())?;
    let at = |t: Instant| t.saturating_duration_since(t0).as_secs_f64();
    let mut record = TcpSourceRecord {
        layers: vec![LayerPoint {
            t_s: at(Instant::now()),
            layers: source.layers(),
        }],
        ..TcpSourceRecord::default()
    };
    let max_layers = opts.source.max_layers as usize;
    let segments: Vec<Vec<u8>> = (0..max_layers)
        .map(|k| vec![k as u8; opts.payload_bytes])
        .collect();
    let mut held = Held::default();
    let mut flush_now = |held: &mut Held, record: &mut TcpSourceRecord| {
        flush_until(end, stream, opts.window_bytes, &segments, held, record)
    };
    'periods: while !stop.load(Ordering::Relaxed) {
        let due = source.next_period();
        if due >= end {
            break;
        }
        // Until the period is due, send what the window held back as it makes room.
        loop {
            if flush_now(&mut held, &mut record)? {
                break 'periods;
            }
            let left = due.saturating_duration_since(Instant::now());
            if held.bytes == 0 || left.is_zero() {
                std::thread::sleep(left);
                break;
            }
            std::thread::sleep(left.min(window::POLL));
        }
        let now = Instant::now();
        let occupancy = match opts.occupancy.read(fd) {
            Ok(bytes) => (bytes as usize + held.bytes).div_ceil(opts.payload_bytes) as u32,
            Err(_) => {
                record.failed_reads += 1;
                // Skip this period; the next is due a period on.
                source.poll(now, opts.source.buffer_packets);
                continue;
            }
        };
        record.max_occupancy = record.max_occupancy.max(occupancy);
        let Some(p) = source.poll(now, occupancy) else {
            continue;
        };
        if p.change.is_some() {
            record.layers.push(LayerPoint {
                t_s: at(now),
                layers: p.layers,
            });
        }
        for layer in 0..(p.segments as usize).min(max_layers) {
            held.segments.push_back((layer, opts.payload_bytes));
            held.bytes += opts.payload_bytes;
        }
        if flush_now(&mut held, &mut record)? {
            break;
        }
    }
    record.counters = source.counters();
    Ok(record)
}

/// [`flush`], and whether the run is over: a reset met at or after `end` ends it
/// (`window::reset_at_end`) rather than failing it.
fn flush_until(
    end: Instant,
    stream: &mut TcpStream,
    window_bytes: Option<u32>,
    segments: &[Vec<u8>],
    held: &mut Held,
    record: &mut TcpSourceRecord,
) -> Result<bool, TcpSourceError> {
    match flush(stream, window_bytes, segments, held, record) {
        Err(TcpSourceError::Io { error, .. })
            if window::reset_at_end(&error, Instant::now(), end) =>
        {
            Ok(true)
        }
        r => r.map(|()| false),
    }
}

/// Writes held segments, oldest first, while the window has room; a segment the kernel
/// refuses (part of it) is counted and given up.
fn flush(
    stream: &mut TcpStream,
    window_bytes: Option<u32>,
    segments: &[Vec<u8>],
    held: &mut Held,
    record: &mut TcpSourceRecord,
) -> Result<(), TcpSourceError> {
    while let Some(&(layer, left)) = held.segments.front() {
        let outq = match window_bytes {
            None => 0,
            Some(_) => lowtide::sys::outq(stream.as_raw_fd()).map_err(|e| TcpSourceError::Io {
                what: "reading SIOCOUTQ",
                error: e.error,
            })?,
        };
        let n = window::room(window_bytes, u64::from(outq), left);
        if n == 0 {
            return Ok(());
        }
        let done =
            write_whole(stream, &segments[layer][..n]).map_err(|error| TcpSourceError::Io {
                what: "writing a segment",
                error,
            })?;
        record.bytes_written += done as u64;
        if done < n {
            record.refused_segments += 1;
            held.bytes -= left;
            held.segments.pop_front();
        } else if n == left {
            held.bytes -= left;
            held.segments.pop_front();
        } else {
            held.bytes -= n;
            held.segments[0].1 -= n;
        }
    }
    Ok(())
}

/// Writes what the socket takes of `buf` without waiting; the bytes taken.
fn write_whole(stream: &mut TcpStream, buf: &[u8]) -> std::io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match stream.write(&buf[done..]) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::TcpListener;
    use std::time::Duration;

    /// Loopback, a reader that keeps up: the buffer is empty at every period, so the source
    /// adds layers on schedule and every segment arrives.
    #[test]
    fn over_loopback_layers_are_added_and_every_segment_arrives() {
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
        let opts = TcpSourceOptions {
            source: SourceConfig {
                segment_bytes: 1000,
                layer_bytes_per_s: 100_000.0, // a 10 ms period
                add_after: Duration::from_millis(200),
                ..SourceConfig::default()
            },
            payload_bytes: 1000,
            occupancy: Occupancy::Unacked,
            window_bytes: Some(40_000),
        };
        let t0 = Instant::now();
        let stop = AtomicBool::new(false);
        let rec = run(&mut s, &opts, t0, t0 + Duration::from_millis(700), &stop).unwrap();
        drop(s);
        let got = reader.join().unwrap();
        assert_eq!(got, rec.bytes_written);
        assert_eq!(rec.bytes_written, rec.counters.segments * 1000);
        assert_eq!(rec.refused_segments, 0);
        // Added about every 200 ms of an empty buffer (a busy loopback sample may delay one).
        assert!(rec.counters.adds >= 1, "{rec:?}");
        assert_eq!(
            rec.layers.last().unwrap().layers,
            1 + rec.counters.adds as u32
        );
    }

    /// A receiver that never reads: its window closes, the kernel keeps at most the window
    /// (`SIOCOUTQ` sampled throughout), and the segments held back count as occupancy, so
    /// the source sees its buffer fill past T_drop and drops layers (with only the kernel's
    /// bytes counted it would see at most 4 segments and never drop).
    #[test]
    fn segments_the_window_holds_back_count_as_occupancy() {
        let listener =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        listener.set_recv_buffer_size(4096).unwrap();
        listener
            .bind(
                &"127.0.0.1:0"
                    .parse::<std::net::SocketAddr>()
                    .unwrap()
                    .into(),
            )
            .unwrap();
        listener.listen(1).unwrap();
        let addr = listener.local_addr().unwrap().as_socket().unwrap();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let receiver = std::thread::spawn(move || {
            let (c, _) = listener.accept().unwrap();
            let _ = done_rx.recv();
            drop(c);
        });
        let mut s = TcpStream::connect(addr).unwrap();
        let opts = TcpSourceOptions {
            source: SourceConfig {
                segment_bytes: 1000,
                layer_bytes_per_s: 100_000.0, // a 10 ms period
                initial_layers: 8,
                ..SourceConfig::default()
            },
            payload_bytes: 1000,
            occupancy: Occupancy::Unsent,
            window_bytes: Some(4000),
        };
        let fd = s.as_raw_fd();
        let stop = AtomicBool::new(false);
        let sampling = AtomicBool::new(true);
        let max_outq = std::sync::atomic::AtomicU32::new(0);
        let rec = std::thread::scope(|scope| {
            scope.spawn(|| {
                while sampling.load(Ordering::Relaxed) {
                    max_outq.fetch_max(lowtide::sys::outq(fd).unwrap(), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_micros(100));
                }
            });
            let t0 = Instant::now();
            let rec = run(&mut s, &opts, t0, t0 + Duration::from_millis(600), &stop).unwrap();
            sampling.store(false, Ordering::Relaxed);
            rec
        });
        done_tx.send(()).unwrap();
        receiver.join().unwrap();
        let max_outq = max_outq.into_inner();
        assert!(max_outq <= 4000, "SIOCOUTQ {max_outq} > the window");
        assert!(rec.max_occupancy > 20, "{rec:?}");
        assert!(rec.counters.drops >= 1, "{rec:?}");
        assert_eq!(rec.refused_segments, 0, "{rec:?}");
    }

    #[test]
    fn a_bad_payload_is_refused() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut s = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let opts = TcpSourceOptions {
            source: SourceConfig::default(),
            payload_bytes: 0,
            occupancy: Occupancy::Unsent,
            window_bytes: None,
        };
        let t0 = Instant::now();
        let e = run(&mut s, &opts, t0, t0, &AtomicBool::new(false)).unwrap_err();
        assert!(e.to_string().contains("payload_bytes = 0"), "{e}");
    }
}
