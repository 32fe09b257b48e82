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

use std::io::{ErrorKind, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use serde::Serialize;

use super::source::{LayeredSource, SourceConfig, SourceConfigError, SourceCounters};

/// What counts as the send buffer's occupancy.
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
    pub max_occupancy: u32,
    pub bytes_written: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum TcpSourceError {
    #[error(transparent)]
    Config(#[from] SourceConfigError),
    #[error("payload_bytes = {0}: allowed is 1 to 65536")]
    Payload(usize),
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        source: std::io::Error,
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
        .map_err(|source| TcpSourceError::Io {
            what: "SO_SNDBUF",
            source,
        })?;
    stream
        .set_nonblocking(true)
        .map_err(|source| TcpSourceError::Io {
            what: "non-blocking socket",
            source,
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
    while !stop.load(Ordering::Relaxed) {
        let due = source.next_period();
        if due >= end {
            break;
        }
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        let now = Instant::now();
        let occupancy = match opts.occupancy.read(fd) {
            Ok(bytes) => (bytes as usize).div_ceil(opts.payload_bytes) as u32,
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
        for seg in segments.iter().take(p.segments as usize) {
            match write_whole(stream, seg) {
                Ok(n) => {
                    record.bytes_written += n as u64;
                    if n < seg.len() {
                        record.refused_segments += 1;
                    }
                }
                Err(source) => {
                    return Err(TcpSourceError::Io {
                        what: "writing a segment",
                        source,
                    })
                }
            }
        }
    }
    record.counters = source.counters();
    Ok(record)
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

    #[test]
    fn a_bad_payload_is_refused() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut s = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let opts = TcpSourceOptions {
            source: SourceConfig::default(),
            payload_bytes: 0,
            occupancy: Occupancy::Unsent,
        };
        let t0 = Instant::now();
        let e = run(&mut s, &opts, t0, t0, &AtomicBool::new(false)).unwrap_err();
        assert!(e.to_string().contains("payload_bytes = 0"), "{e}");
    }
}
