//! The servers at the receiving hosts: a TCP sink and a UDP sink.
//!
//! The TCP sink is one thread with a `poll(2)` loop over a nonblocking listener and its
//! connections, so it serves any mix of elephants and mice with bounded memory (one shared
//! 64 KiB buffer, at most [`SinkConfig::max_connections`] open connections; beyond that the
//! listener is not polled and clients wait in the kernel's backlog) and bounded time (poll wakes
//! at least every [`POLL_INTERVAL`] to look at the [`Stop`]). Each connection starts with the
//! [`wire`] request: uploads are read and counted until the client's FIN, then the
//! sink closes (which is how a mouse learns that its bytes arrived); downloads are sent with the
//! congestion control the client asked for.
//!
//! The UDP sink counts packets and bytes per CBR flow id and estimates loss from sequence
//! numbers (exact loss comes from [`crate::cbr::CbrReport::merge_sink`], which knows how many
//! were sent: the sink cannot see losses after the last packet it received).

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use socket2::{Domain, Protocol, SockRef, Socket, Type};

use crate::congestion::set_congestion_control;
use crate::tcp_client::ZEROS;
use crate::wire::{self, Request, REQUEST_LEN, STATUS_CC_REFUSED, STATUS_OK};
use crate::{bits_per_second, Direction, Stop, TrafficError, POLL_INTERVAL};

/// Limits and defaults of a [`TcpSink`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SinkConfig {
    /// Open connections at most; more wait in the listen backlog.
    pub max_connections: usize,
    /// Per-connection records kept (the first ones); totals stay exact.
    pub max_records: usize,
    /// A connection that has not sent its request by then is closed.
    pub request_timeout: Duration,
    /// Set on the listener, hence on accepted sockets; downloads that name their own
    /// algorithm override it.
    pub congestion_control: Option<String>,
}

impl Default for SinkConfig {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            max_records: 65_536,
            request_timeout: Duration::from_secs(10),
            congestion_control: None,
        }
    }
}

/// How a sink connection ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ConnectionEnd {
    /// Upload: the client closed after sending everything.
    Eof,
    /// Download: all requested bytes were sent.
    SentAll,
    /// The client reset or closed the connection (the normal end of an elephant).
    PeerClosed,
    /// The sink's stop came first.
    Stopped,
    /// The request was not ours.
    BadRequest,
    /// No complete request within [`SinkConfig::request_timeout`].
    RequestTimeout,
    /// The requested congestion control could not be set.
    CongestionControlRefused,
    /// Another socket error.
    Error,
}

/// One connection as the sink saw it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConnectionRecord {
    /// The client.
    pub peer: SocketAddr,
    /// Who sent (None if the request never arrived).
    pub direction: Option<Direction>,
    /// Payload bytes received (upload) or sent (download), request excluded.
    pub bytes: u64,
    /// From accept to close, in seconds.
    pub duration_s: f64,
    /// `bytes * 8 / duration_s`.
    pub goodput_bps: f64,
    /// The algorithm the client asked for.
    pub congestion_control: Option<String>,
    /// How it ended.
    pub end: ConnectionEnd,
}

/// Everything a [`TcpSink`] saw.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TcpSinkReport {
    /// Connections accepted.
    pub connections: u64,
    /// Upload payload bytes received.
    pub bytes_received: u64,
    /// Download payload bytes sent.
    pub bytes_sent: u64,
    /// Connections by how they ended, in [`ConnectionEnd`] order of first appearance.
    pub ends: Vec<(ConnectionEnd, u64)>,
    /// The first [`SinkConfig::max_records`] connections.
    pub records: Vec<ConnectionRecord>,
    /// Connections not recorded individually.
    pub records_dropped: u64,
}

impl TcpSinkReport {
    fn record(&mut self, rec: ConnectionRecord, max_records: usize) {
        match self.ends.iter_mut().find(|(e, _)| *e == rec.end) {
            Some((_, n)) => *n += 1,
            None => self.ends.push((rec.end, 1)),
        }
        if self.records.len() < max_records {
            self.records.push(rec);
        } else {
            self.records_dropped += 1;
        }
    }
}

/// A TCP sink bound and listening; [`TcpSink::run`] serves until the stop.
#[derive(Debug)]
pub struct TcpSink {
    listener: TcpListener,
    addr: SocketAddr,
    cfg: SinkConfig,
}

enum State {
    Request {
        buf: [u8; REQUEST_LEN],
        got: usize,
    },
    Upload,
    /// `status`: the status byte is still to be sent; `left`: None until the client closes.
    Download {
        status: bool,
        left: Option<u64>,
    },
}

struct Conn {
    stream: TcpStream,
    peer: SocketAddr,
    since: Instant,
    state: State,
    bytes: u64,
    cc: Option<String>,
}

impl Conn {
    fn finish(self, end: ConnectionEnd, report: &mut TcpSinkReport, max: usize) {
        let direction = match self.state {
            State::Request { .. } => None,
            State::Upload => Some(Direction::Upload),
            State::Download { .. } => Some(Direction::Download),
        };
        if direction == Some(Direction::Download) && end != ConnectionEnd::SentAll {
            // Do not let queued data flow on after the flow is over.
            let _ = SockRef::from(&self.stream).set_linger(Some(Duration::ZERO));
        }
        let duration = self.since.elapsed();
        report.record(
            ConnectionRecord {
                peer: self.peer,
                direction,
                bytes: self.bytes,
                duration_s: duration.as_secs_f64(),
                goodput_bps: bits_per_second(self.bytes, duration),
                congestion_control: self.cc,
                end,
            },
            max,
        );
    }
}

/// Reads or writes per connection per wake-up, so one fast flow cannot starve the others.
const BURST: usize = 16;

impl TcpSink {
    /// Bind and listen on `addr` (port 0 picks one; see [`TcpSink::local_addr`]).
    pub fn bind(addr: SocketAddr) -> Result<Self, TrafficError> {
        Self::bind_with(addr, SinkConfig::default())
    }

    /// Bind with explicit limits.
    pub fn bind_with(addr: SocketAddr, cfg: SinkConfig) -> Result<Self, TrafficError> {
        if cfg.max_connections == 0 {
            return Err(TrafficError::InvalidConfig {
                field: "max_connections",
                value: "0".into(),
                allowed: "at least 1",
            });
        }
        let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
            .map_err(|e| TrafficError::io("creating the sink socket", addr, e))?;
        if let Some(cc) = &cfg.congestion_control {
            set_congestion_control(&sock, cc)?;
        }
        sock.set_reuse_address(true)
            .and_then(|()| sock.bind(&addr.into()))
            .map_err(|e| TrafficError::io("binding the TCP sink", addr, e))?;
        sock.listen(1024)
            .and_then(|()| sock.set_nonblocking(true))
            .map_err(|e| TrafficError::io("listening", addr, e))?;
        let listener: TcpListener = sock.into();
        let addr = listener
            .local_addr()
            .map_err(|e| TrafficError::io("reading the sink address", addr, e))?;
        Ok(Self {
            listener,
            addr,
            cfg,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serve until `stop`. Blocking; call it in the receiver's namespace thread.
    pub fn run(self, stop: &Stop) -> Result<TcpSinkReport, TrafficError> {
        let mut report = TcpSinkReport::default();
        let mut conns: Vec<Conn> = Vec::new();
        let mut pfds: Vec<libc::pollfd> = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        let max_rec = self.cfg.max_records;
        while !stop.is_stopped() {
            pfds.clear();
            pfds.push(libc::pollfd {
                fd: self.listener.as_raw_fd(),
                events: if conns.len() < self.cfg.max_connections {
                    libc::POLLIN
                } else {
                    0
                },
                revents: 0,
            });
            for c in &conns {
                let events = match c.state {
                    State::Request { .. } | State::Upload => libc::POLLIN,
                    State::Download { .. } => libc::POLLOUT,
                };
                pfds.push(libc::pollfd {
                    fd: c.stream.as_raw_fd(),
                    events,
                    revents: 0,
                });
            }
            let timeout = stop.remaining().min(POLL_INTERVAL).as_millis().max(1) as libc::c_int;
            // SAFETY: `pfds` is a live, initialised slice of `pollfd` of the length passed; the
            // fds belong to `self.listener` and `conns`, which outlive the call.
            let rc = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout) };
            if rc < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(TrafficError::io("polling the sink", self.addr, e));
            }
            // Serve existing connections first (their pollfds are at 1..), newest last.
            let mut i = conns.len();
            while i > 0 {
                i -= 1;
                let revents = pfds[i + 1].revents;
                let timed_out = matches!(conns[i].state, State::Request { .. })
                    && conns[i].since.elapsed() > self.cfg.request_timeout;
                let end = if revents != 0 {
                    serve(&mut conns[i], &mut buf, &mut report)
                } else if timed_out {
                    Some(ConnectionEnd::RequestTimeout)
                } else {
                    None
                };
                if let Some(end) = end {
                    conns.swap_remove(i).finish(end, &mut report, max_rec);
                }
            }
            if pfds[0].revents != 0 {
                while conns.len() < self.cfg.max_connections {
                    match self.listener.accept() {
                        Ok((stream, peer)) => {
                            report.connections += 1;
                            if let Err(e) = stream.set_nonblocking(true) {
                                tracing::debug!(%peer, error = %e, "sink: set_nonblocking");
                                continue;
                            }
                            conns.push(Conn {
                                stream,
                                peer,
                                since: Instant::now(),
                                state: State::Request {
                                    buf: [0; REQUEST_LEN],
                                    got: 0,
                                },
                                bytes: 0,
                                cc: None,
                            });
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        // ECONNABORTED and friends concern one client, not the sink.
                        Err(e) => {
                            tracing::debug!(error = %e, "sink: accept");
                            break;
                        }
                    }
                }
            }
        }
        for c in conns {
            c.finish(ConnectionEnd::Stopped, &mut report, max_rec);
        }
        Ok(report)
    }
}

/// Make progress on one connection; Some(end) when it is finished.
fn serve(c: &mut Conn, buf: &mut [u8], report: &mut TcpSinkReport) -> Option<ConnectionEnd> {
    for _ in 0..BURST {
        match &mut c.state {
            State::Request { buf: req, got } => match c.stream.read(&mut req[*got..]) {
                Ok(0) => return Some(ConnectionEnd::BadRequest),
                Ok(n) => {
                    *got += n;
                    if *got == REQUEST_LEN {
                        let req = match Request::decode(req) {
                            Ok(r) => r,
                            Err(what) => {
                                tracing::debug!(peer = %c.peer, %what, "sink: bad request");
                                return Some(ConnectionEnd::BadRequest);
                            }
                        };
                        c.cc = req.congestion_control.clone();
                        match req.direction {
                            Direction::Upload => c.state = State::Upload,
                            Direction::Download => {
                                if let Some(cc) = &req.congestion_control {
                                    if let Err(e) = set_congestion_control(&c.stream, cc) {
                                        tracing::warn!(peer = %c.peer, error = %e, "sink");
                                        let _ = c.stream.write(&[STATUS_CC_REFUSED]);
                                        return Some(ConnectionEnd::CongestionControlRefused);
                                    }
                                }
                                c.state = State::Download {
                                    status: true,
                                    left: (req.download_bytes > 0).then_some(req.download_bytes),
                                };
                            }
                        }
                    }
                }
                Err(e) => return io_end(e),
            },
            State::Upload => match c.stream.read(buf) {
                Ok(0) => return Some(ConnectionEnd::Eof),
                Ok(n) => {
                    c.bytes += n as u64;
                    report.bytes_received += n as u64;
                }
                Err(e) => return io_end(e),
            },
            State::Download { status, left } => {
                if *status {
                    match c.stream.write(&[STATUS_OK]) {
                        Ok(1) => *status = false,
                        Ok(_) => return None,
                        Err(e) => return io_end(e),
                    }
                }
                let n = left.map_or(ZEROS.len() as u64, |l| l.min(ZEROS.len() as u64)) as usize;
                if n == 0 {
                    return Some(ConnectionEnd::SentAll);
                }
                match c.stream.write(&ZEROS[..n]) {
                    Ok(w) => {
                        c.bytes += w as u64;
                        report.bytes_sent += w as u64;
                        if let Some(l) = left {
                            *l -= w as u64;
                            if *l == 0 {
                                return Some(ConnectionEnd::SentAll);
                            }
                        }
                    }
                    Err(e) => return io_end(e),
                }
            }
        }
    }
    None
}

fn io_end(e: io::Error) -> Option<ConnectionEnd> {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => None,
        io::ErrorKind::ConnectionReset
        | io::ErrorKind::BrokenPipe
        | io::ErrorKind::ConnectionAborted => Some(ConnectionEnd::PeerClosed),
        _ => Some(ConnectionEnd::Error),
    }
}

/// Limits of a [`UdpSink`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UdpSinkConfig {
    /// Distinct flow ids tracked; packets of further flows count only as `untracked`.
    pub max_flows: usize,
    /// Receive buffer requested (capped by `net.core.rmem_max`).
    pub recv_buffer: usize,
}

impl Default for UdpSinkConfig {
    fn default() -> Self {
        Self {
            max_flows: 1024,
            recv_buffer: 4 << 20,
        }
    }
}

/// Counts of one CBR flow at the sink.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UdpFlowCounts {
    /// The flow id from the packets.
    pub flow_id: u64,
    /// Packets received (duplicates included).
    pub packets: u64,
    /// Payload bytes received.
    pub bytes: u64,
    /// Highest sequence number seen.
    pub highest_seq: u64,
    /// Packets that arrived with a lower sequence number than one before them.
    pub reordered: u64,
    /// `highest_seq + 1 - packets`: losses the sink can see (not those after the last packet).
    pub lost_seen: u64,
    /// Payload bits per second between the first and the last arrival.
    pub goodput_bps: f64,
    #[serde(skip)]
    first: Option<Instant>,
    #[serde(skip)]
    last: Option<Instant>,
}

/// Everything a [`UdpSink`] saw.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UdpSinkReport {
    /// Datagrams received, ours or not.
    pub packets: u64,
    /// Bytes of all datagrams.
    pub bytes: u64,
    /// Datagrams without our header.
    pub malformed: u64,
    /// Ours, but from flows beyond [`UdpSinkConfig::max_flows`].
    pub untracked: u64,
    /// Per flow, in order of first arrival.
    pub flows: Vec<UdpFlowCounts>,
}

/// A bound UDP sink; [`UdpSink::run`] counts until the stop.
#[derive(Debug)]
pub struct UdpSink {
    sock: UdpSocket,
    addr: SocketAddr,
    cfg: UdpSinkConfig,
}

impl UdpSink {
    /// Bind on `addr` (port 0 picks one; see [`UdpSink::local_addr`]).
    pub fn bind(addr: SocketAddr) -> Result<Self, TrafficError> {
        Self::bind_with(addr, UdpSinkConfig::default())
    }

    /// Bind with explicit limits.
    pub fn bind_with(addr: SocketAddr, cfg: UdpSinkConfig) -> Result<Self, TrafficError> {
        let sock =
            UdpSocket::bind(addr).map_err(|e| TrafficError::io("binding the UDP sink", addr, e))?;
        // Best effort: a small buffer only means drops we will count as loss.
        let _ = SockRef::from(&sock).set_recv_buffer_size(cfg.recv_buffer);
        sock.set_read_timeout(Some(POLL_INTERVAL))
            .map_err(|e| TrafficError::io("setting the UDP sink timeout", addr, e))?;
        let addr = sock
            .local_addr()
            .map_err(|e| TrafficError::io("reading the UDP sink address", addr, e))?;
        Ok(Self { sock, addr, cfg })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Count until `stop`. Blocking; call it in the receiver's namespace thread.
    pub fn run(self, stop: &Stop) -> Result<UdpSinkReport, TrafficError> {
        let mut report = UdpSinkReport::default();
        let mut index: HashMap<u64, usize> = HashMap::new();
        let mut buf = vec![0u8; 65_536];
        while !stop.is_stopped() {
            let n = match self.sock.recv(&mut buf) {
                Ok(n) => n,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) =>
                {
                    continue
                }
                Err(e) => return Err(TrafficError::io("receiving on the UDP sink", self.addr, e)),
            };
            let now = Instant::now();
            report.packets += 1;
            report.bytes += n as u64;
            let Some((flow_id, seq)) = wire::decode_datagram(&buf[..n]) else {
                report.malformed += 1;
                continue;
            };
            let i = match index.get(&flow_id) {
                Some(&i) => i,
                None if index.len() < self.cfg.max_flows => {
                    index.insert(flow_id, report.flows.len());
                    report.flows.push(UdpFlowCounts {
                        flow_id,
                        packets: 0,
                        bytes: 0,
                        highest_seq: seq,
                        reordered: 0,
                        lost_seen: 0,
                        goodput_bps: 0.0,
                        first: Some(now),
                        last: None,
                    });
                    report.flows.len() - 1
                }
                None => {
                    report.untracked += 1;
                    continue;
                }
            };
            let f = &mut report.flows[i];
            f.packets += 1;
            f.bytes += n as u64;
            if seq < f.highest_seq {
                f.reordered += 1;
            }
            f.highest_seq = f.highest_seq.max(seq);
            f.last = Some(now);
        }
        for f in &mut report.flows {
            f.lost_seen = (f.highest_seq + 1).saturating_sub(f.packets);
            if let (Some(a), Some(b)) = (f.first, f.last) {
                f.goodput_bps = bits_per_second(f.bytes, b - a);
            }
        }
        Ok(report)
    }
}
