//! One viewer's WebSocket connection: the hello, then units from the viewer's queue written
//! as the viewer's latency controller allows, the viewer's reports read back.
//!
//! The controller is lowtide's ([`lowtide::proto::controller`]) fed from this socket's
//! `TCP_INFO`, the same as a lowtide channel's: by default MIN_BUF(1, 3) (Goel, Krasic and
//! Walpole, "Low-Latency Adaptive Streaming over TCP", §5-6), so the kernel holds about one
//! congestion window of this viewer's bytes and the rest wait in the viewer's queue, where
//! the queue's rules can still drop them. A unit is one WebSocket frame; the connection
//! writes a frame in as many parts as the controller allows (a frame once begun must end,
//! so only whole units are ever dropped). The WebSocket framing is only bytes to the
//! controller. The wake-up when blocked is the channel driver's: `TCP_NOTSENT_LOWAT` set to
//! the blocked part, or a timer when only in-flight bytes block.
//!
//! Under TLS ([`Transport`]) the controller sees ciphertext: `written` is the ciphertext the
//! kernel took (handshake included), the allowance is turned into the plaintext whose
//! records fit in it, and ciphertext the kernel did not take is staged; no more plaintext
//! is encrypted until the kernel has taken it, so rustls and the transport hold at most one
//! allowance of this viewer's bytes.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lowtide::proto::controller::{AppProgress, LatencyController, Wake};
use lowtide::sys;
use tokio::io::Interest;

use crate::hub::{lock, HubUnit, Stream, ViewerSlot};
use crate::transport::Transport;
use crate::viewer::{ViewerConfig, ViewerStats};
use crate::viewer_wire::{self, FromViewer, UnitFields};
use crate::wall_us;
use crate::websocket::{self, FrameReader, Opcode, WsMessage};

/// How a viewer's connection ended.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ViewerEnd {
    #[error("the stream ended")]
    StreamEnded,
    #[error("the viewer closed the connection")]
    ViewerClosed,
    #[error("the viewer's socket took nothing for {0:?} (a viewer that stopped reading)")]
    Stalled(Duration),
    #[error("the viewer broke the WebSocket protocol: {0}")]
    Protocol(websocket::FrameError),
    #[error("the viewer sent a bad report: {0}")]
    BadReport(viewer_wire::ViewerWireError),
    #[error("socket: {0}")]
    Io(io::Error),
    #[error("the latency controller: {0}")]
    Controller(String),
}

// The messages above show the inner error, so `source()` does not return it again (a printer
// of the whole chain would say it twice): `From` by hand instead of `#[from]`.
impl From<websocket::FrameError> for ViewerEnd {
    fn from(e: websocket::FrameError) -> Self {
        ViewerEnd::Protocol(e)
    }
}

impl From<viewer_wire::ViewerWireError> for ViewerEnd {
    fn from(e: viewer_wire::ViewerWireError) -> Self {
        ViewerEnd::BadReport(e)
    }
}

impl From<io::Error> for ViewerEnd {
    fn from(e: io::Error) -> Self {
        ViewerEnd::Io(e)
    }
}

/// Where shown reports go besides the viewer's statistics (the lab's per-frame log).
pub trait ShownSink: Send + Sync {
    fn shown(&self, r: &ShownRecord);
}

/// One frame a viewer reported shown, with what the server knew of it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShownRecord {
    pub viewer: u64,
    /// The viewer's address (the lab tells its hosts apart by it).
    pub addr: std::net::IpAddr,
    pub index: u64,
    pub capture_us: u64,
    pub ingest_us: u64,
    pub sent_us: u64,
    pub decoded_us: u64,
    pub shown_us: u64,
    /// Part of the join's catch-up (its latency is the join's, not the stream's).
    pub catch_up: bool,
}

/// A frame being written: its head (WebSocket and unit headers) and the unit's bytes.
struct Outgoing {
    head: Vec<u8>,
    body: Option<Arc<HubUnit>>,
    at: usize,
}

impl Outgoing {
    fn small(bytes: Vec<u8>) -> Self {
        Self {
            head: bytes,
            body: None,
            at: 0,
        }
    }

    fn len(&self) -> usize {
        self.head.len() + self.body.as_ref().map_or(0, |b| b.data.len())
    }

    fn left(&self) -> usize {
        self.len() - self.at
    }

    /// The unsent bytes, at most `max`.
    fn slices(&self, max: usize) -> [IoSlice<'_>; 2] {
        let h = self.head.len();
        let body: &[u8] = self.body.as_ref().map_or(&[], |b| &b.data);
        let (a, b): (&[u8], &[u8]) = if self.at < h {
            (&self.head[self.at..], body)
        } else {
            (&[], &body[self.at - h..])
        };
        let a = &a[..a.len().min(max)];
        let b = &b[..b.len().min(max - a.len())];
        [IoSlice::new(a), IoSlice::new(b)]
    }
}

/// What was sent of a unit, to match the viewer's report with.
#[derive(Debug, Clone, Copy)]
struct SentUnit {
    index: u64,
    capture_us: u64,
    ingest_us: u64,
    sent_us: u64,
    catch_up: bool,
}

const SENT_MEMORY: usize = 1024;

/// Runs a viewer whose handshake was answered, until the stream ends, the viewer leaves or
/// fails. `early` holds bytes the viewer sent with its request.
pub async fn run(
    stream: Transport,
    early: Vec<u8>,
    source: Arc<Stream>,
    slot: Arc<ViewerSlot>,
    cfg: &ViewerConfig,
    keyframe_interval: Duration,
    sink: Option<&dyn ShownSink>,
) -> Result<ViewerEnd, ViewerEnd> {
    if let Some(cc) = &cfg.congestion {
        sys::set_congestion(stream.tcp().as_raw_fd(), cc)
            .map_err(|e| ViewerEnd::Controller(format!("TCP_CONGESTION {cc}: {e}")))?;
    }
    let mut c = Connection {
        fd: stream.tcp().as_raw_fd(),
        counted: stream.written(),
        stream,
        controller: cfg
            .controller
            .build()
            .map_err(|e| ViewerEnd::Controller(e.to_string()))?,
        current: None,
        control: VecDeque::new(),
        reader: FrameReader::new(cfg.max_message),
        sent: VecDeque::new(),
        last_progress: Instant::now(),
        dropped_at_progress: 0,
        closing: false,
    };
    c.reader.push(&early);
    lock(&slot.stats).path = source.path.clone();
    let hello = viewer_wire::encode_hello(source.codec_byte, wall_us(), &source.path);
    c.control
        .push_back(websocket::server_frame(Opcode::Binary, &hello));
    let r = c.drive(&source, &slot, cfg, keyframe_interval, sink).await;
    c.stream.try_close_with(&websocket::close_frame(
        if matches!(r, Ok(ViewerEnd::StreamEnded)) {
            1000
        } else {
            1011
        },
        "",
    ));
    r
}

struct Connection {
    /// The controller's `written` is the transport's: every byte handed to the kernel,
    /// ciphertext under TLS, from the connection's first on.
    stream: Transport,
    fd: i32,
    controller: Box<dyn LatencyController>,
    /// `stream.written()` when last added to the viewer's `bytes_written`.
    counted: u64,
    current: Option<Outgoing>,
    /// Small frames to send between units (hello, pong, drop notices, the end).
    control: VecDeque<Vec<u8>>,
    reader: FrameReader,
    sent: VecDeque<SentUnit>,
    last_progress: Instant,
    /// The viewer's drops when a byte last went out.
    dropped_at_progress: u64,
    /// The end was queued: finish writing, then stop.
    closing: bool,
}

impl Connection {
    async fn drive(
        &mut self,
        source: &Stream,
        slot: &ViewerSlot,
        cfg: &ViewerConfig,
        keyframe_interval: Duration,
        sink: Option<&dyn ShownSink>,
    ) -> Result<ViewerEnd, ViewerEnd> {
        let mut buf = vec![0u8; 4096];
        loop {
            self.handle_messages(slot, sink)?;
            let now = Instant::now();
            let (want_write, timer) = self.write_some(source, slot, now)?;
            if lock(&slot.queue).take_break() {
                source.want_keyframe(now, keyframe_interval);
            }
            if self.closing && self.current.is_none() && self.control.is_empty() {
                return Ok(ViewerEnd::StreamEnded);
            }
            // Waiting: something to write, or units dropped since the last byte went out
            // (a viewer that stopped reading has its queue emptied by the deadlines).
            let (queued, dropped) = {
                let q = lock(&slot.queue);
                (!q.is_empty(), q.counters().dropped.iter().sum::<u64>())
            };
            let waiting = self.current.is_some() || queued || dropped > self.dropped_at_progress;
            if !waiting {
                self.last_progress = now;
            } else if now.duration_since(self.last_progress) > cfg.stall_timeout {
                return Err(ViewerEnd::Stalled(cfg.stall_timeout));
            }
            let stall_check = now + cfg.stall_timeout;
            let wake = timer.map_or(stall_check, |t| t.min(stall_check));
            tokio::select! {
                r = self.stream.readable() => {
                    r?;
                    let room = self.reader.room().min(buf.len());
                    match self.stream.try_read(&mut buf[..room]) {
                        Ok(0) => return Err(ViewerEnd::ViewerClosed),
                        Ok(n) => self.reader.push(&buf[..n]),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                r = self.stream.tcp().writable(), if want_write => r?,
                _ = slot.notify.notified() => {}
                _ = tokio::time::sleep_until(wake.into()) => {}
            }
        }
    }

    fn handle_messages(
        &mut self,
        slot: &ViewerSlot,
        sink: Option<&dyn ShownSink>,
    ) -> Result<(), ViewerEnd> {
        while let Some(m) = self.reader.next_message()? {
            match m {
                WsMessage::Binary(b) => match viewer_wire::decode_from_viewer(&b)? {
                    FromViewer::Shown {
                        index,
                        decoded_us,
                        shown_us,
                    } => self.shown(slot, sink, index, decoded_us, shown_us),
                    FromViewer::Problem(p) => {
                        tracing::warn!(viewer = slot.id, "viewer's decoder: {p}");
                        let mut st = lock(&slot.stats);
                        st.problems += 1;
                        st.last_problem = Some(p);
                    }
                },
                WsMessage::Text(_) | WsMessage::Pong => {}
                WsMessage::Ping(p) => self
                    .control
                    .push_back(websocket::server_frame(Opcode::Pong, &p)),
                WsMessage::Close(_) => return Err(ViewerEnd::ViewerClosed),
            }
        }
        Ok(())
    }

    fn shown(
        &mut self,
        slot: &ViewerSlot,
        sink: Option<&dyn ShownSink>,
        index: u64,
        decoded_us: u64,
        shown_us: u64,
    ) {
        // A report of a unit never sent (or long forgotten) is ignored: a viewer cannot
        // make up latencies.
        let Some(s) = self.sent.iter().rev().find(|s| s.index == index).copied() else {
            return;
        };
        let mut st = lock(&slot.stats);
        st.shown += 1;
        if !s.catch_up {
            if s.capture_us != 0 {
                let ms = (shown_us as f64 - s.capture_us as f64) / 1000.0;
                ViewerStats::record(&mut st.capture_to_shown_ms, ms);
            }
            let ms = (shown_us as f64 - s.ingest_us as f64) / 1000.0;
            ViewerStats::record(&mut st.server_to_shown_ms, ms);
        }
        drop(st);
        if let Some(sink) = sink {
            sink.shown(&ShownRecord {
                viewer: slot.id,
                addr: slot.addr,
                index,
                capture_us: s.capture_us,
                ingest_us: s.ingest_us,
                sent_us: s.sent_us,
                decoded_us,
                shown_us,
                catch_up: s.catch_up,
            });
        }
    }

    /// Writes what the controller allows. Returns whether to wait for writability and a
    /// time to look again.
    fn write_some(
        &mut self,
        source: &Stream,
        slot: &ViewerSlot,
        now: Instant,
    ) -> Result<(bool, Option<Instant>), ViewerEnd> {
        loop {
            // Ciphertext the kernel did not take last time goes first.
            self.stream.try_flush()?;
            self.count_written(slot, now);
            // The controller first: a unit taken from the queue is committed (a frame once
            // begun must end), so none is taken while the controller blocks; it waits in
            // the queue, where it can still expire.
            let written = self.stream.written();
            let tcp = sys::tcp_state(self.fd, written)
                .map_err(|e| ViewerEnd::Io(io::Error::other(e.to_string())))?;
            {
                let mut st = lock(&slot.stats);
                st.cwnd = tcp.cwnd;
                st.srtt_us = tcp.rtt.as_micros() as u64;
                st.notsent = tcp.notsent;
            }
            let held = self.stream.pending();
            let app = AppProgress {
                written,
                acked: 0,
                staged: held as u64,
                queued: (self.current.as_ref().map_or(0, Outgoing::left)
                    + lock(&slot.queue).bytes()) as u64,
            };
            let d = self.controller.decide(&tcp, &app, now);
            if d.blocked() {
                let (w, t) = match d.wake {
                    Wake::NotsentBelow(x) => {
                        // EPOLLOUT comes when 2·notsent < lowat (tcp_stream_memory_free).
                        sys::set_notsent_lowat(self.fd, x.saturating_mul(2))
                            .map_err(|e| ViewerEnd::Io(io::Error::other(e.to_string())))?;
                        let _ = self.stream.tcp().try_io(Interest::WRITABLE, || {
                            Err::<(), _>(io::ErrorKind::WouldBlock.into())
                        });
                        // poll(2) marks the socket as waiting for room (SOCK_NOSPACE), so the
                        // ACK that frees it raises the edge epoll reports; without it no
                        // event comes. Already writable: look again almost at once.
                        let writable = sys::poll_writable(self.fd)
                            .map_err(|e| ViewerEnd::Io(io::Error::other(e.to_string())))?;
                        let again = if writable {
                            Duration::from_micros(200)
                        } else {
                            Duration::from_millis(1)
                        };
                        (true, Some(now + again))
                    }
                    Wake::At(t) => (false, Some(t)),
                    Wake::Writable | Wake::PAck => (true, None),
                };
                // Held ciphertext also waits for the kernel's room.
                return Ok((w || held > 0, t));
            }
            if held > 0 {
                // The kernel refused ciphertext: nothing more is encrypted until it takes it.
                return Ok((true, None));
            }
            let ahead = kernel_drain(&tcp);
            if self.current.is_none() && !self.next_frame(source, slot, now, ahead) {
                return Ok((false, None));
            }
            let cur = self.current.as_ref().expect("a frame to write");
            let slices = cur.slices(self.stream.plaintext_within(d.allowance));
            let r = self.stream.try_write_vectored(&slices);
            self.count_written(slot, now);
            match r {
                Ok(n) => {
                    let cur = self.current.as_mut().expect("a frame to write");
                    cur.at += n;
                    if cur.left() == 0 {
                        self.current = None;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok((true, None)),
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Adds the bytes the kernel took since last time to the viewer's statistics; any is
    /// progress (the stall clock).
    fn count_written(&mut self, slot: &ViewerSlot, now: Instant) {
        let w = self.stream.written();
        if w > self.counted {
            lock(&slot.stats).bytes_written += w - self.counted;
            self.counted = w;
            self.last_progress = now;
            self.dropped_at_progress = lock(&slot.queue).counters().dropped.iter().sum();
        }
    }

    /// Takes the next frame to write: control frames first, then the viewer's queue.
    fn next_frame(
        &mut self,
        source: &Stream,
        slot: &ViewerSlot,
        now: Instant,
        ahead: Duration,
    ) -> bool {
        if let Some(c) = self.control.pop_front() {
            self.current = Some(Outgoing::small(c));
            return true;
        }
        let mut q = lock(&slot.queue);
        if let Some((n, reason)) = q.take_untold() {
            let m = viewer_wire::encode_dropped(n, reason);
            self.current = Some(Outgoing::small(websocket::server_frame(Opcode::Binary, &m)));
            return true;
        }
        if let Some(next) = q.pop(now, ahead) {
            drop(q);
            let u = &next.unit;
            let sent_us = wall_us();
            let fields = UnitFields {
                index: u.info.index,
                kind: u.info.kind,
                has_parameter_sets: u.has_parameter_sets,
                catch_up: next.catch_up,
                capture_us: u.capture_us,
                ingest_us: u.ingest_us,
                sent_us,
            };
            let h = viewer_wire::encode_unit_header(&fields);
            let (ws, n) =
                websocket::server_frame_header(Opcode::Binary, (h.len() + u.data.len()) as u64);
            let mut head = Vec::with_capacity(n + h.len());
            head.extend_from_slice(&ws[..n]);
            head.extend_from_slice(&h);
            if self.sent.len() == SENT_MEMORY {
                self.sent.pop_front();
            }
            self.sent.push_back(SentUnit {
                index: u.info.index,
                capture_us: u.capture_us,
                ingest_us: u.ingest_us,
                sent_us,
                catch_up: next.catch_up,
            });
            self.current = Some(Outgoing {
                head,
                body: Some(next.unit),
                at: 0,
            });
            return true;
        }
        if source.is_ended() && !self.closing {
            self.closing = true;
            let end = viewer_wire::encode_end();
            self.current = Some(Outgoing::small(websocket::server_frame(
                Opcode::Binary,
                &end,
            )));
            return true;
        }
        false
    }
}

/// How long the bytes the kernel holds take to leave: a unit written now starts on the wire
/// after them. The window's rate (cwnd segments per smoothed RTT), not the delivery rate: a
/// viewer whose units are dropped sends little, and an app-limited delivery rate would
/// predict every unit late, drop it, and keep the rate low. In slow start nothing is
/// predicted late: the window grows only if the units go.
fn kernel_drain(tcp: &lowtide::TcpState) -> Duration {
    let window = u64::from(tcp.cwnd) * u64::from(tcp.mss_or_default());
    if !tcp.left_slow_start() || window == 0 || tcp.rtt.is_zero() {
        return Duration::ZERO;
    }
    tcp.rtt.mul_f64(f64::from(tcp.outq) / window as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lowtide_media::encoded::{FrameKind, UnitInfo};

    #[test]
    fn the_kernels_queue_drains_at_the_windows_rate_once_out_of_slow_start() {
        let tcp = lowtide::TcpState {
            cwnd: 10,
            mss: 1000,
            outq: 20_000,
            rtt: Duration::from_millis(100),
            ssthresh: 8,
            ..lowtide::TcpState::default()
        };
        assert_eq!(kernel_drain(&tcp), Duration::from_millis(200));
        let slow_start = lowtide::TcpState {
            ssthresh: lowtide::proto::controller::INITIAL_SSTHRESH,
            ..tcp
        };
        assert_eq!(kernel_drain(&slow_start), Duration::ZERO);
    }

    #[test]
    fn a_frame_is_written_in_parts_that_join_up() {
        let unit = Arc::new(HubUnit {
            info: UnitInfo::new(1, FrameKind::Reference),
            has_parameter_sets: false,
            capture_us: 0,
            ingest_us: 0,
            ingest_at: Instant::now(),
            data: (0..100u8).collect(),
        });
        let mut o = Outgoing {
            head: vec![200, 201, 202],
            body: Some(unit),
            at: 0,
        };
        let mut out = Vec::new();
        for step in [2, 5, 1, 1000] {
            let s = o.slices(step);
            let n = s[0].len() + s[1].len();
            assert!(n <= step);
            out.extend_from_slice(&s[0]);
            out.extend_from_slice(&s[1]);
            o.at += n;
        }
        assert_eq!(o.left(), 0);
        let mut want = vec![200, 201, 202];
        want.extend(0..100u8);
        assert_eq!(out, want);
    }
}
