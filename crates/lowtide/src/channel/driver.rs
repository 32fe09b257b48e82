//! The driver task: one loop per channel that reads (within the receive budget), writes as
//! the controller allows, publishes events, and sleeps on exactly the readiness it needs.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::Instant;

use bytes::{BufMut, BytesMut};
use tokio::io::Interest;
use tokio::net::TcpStream;

use lowtide_proto::{ProtocolError, TcpState, TransmitWork, Wake};

use super::shared::{Inner, Shared};
use crate::error::Error;
use crate::failover::Paths;
use crate::read_buf;
use crate::sys;
use crate::tls::TlsSession;

pub(super) struct Driver {
    pub(super) shared: Arc<Shared>,
    pub(super) stream: TcpStream,
    /// With TLS, ciphertext reads land here (plain reads go into the core's read buffer).
    pub(super) rbuf: BytesMut,
    pub(super) read_chunk: usize,
    pub(super) read_eof: bool,
    /// Failover's other connections.
    pub(super) paths: Option<Paths>,
    /// The duplicate lane (`lowtide_proto::failover::duplicate`): written by the connecting
    /// side, read by the accepting side.
    pub(super) lane: Option<TcpStream>,
    /// The TLS record layer, if the channel is encrypted.
    pub(super) tls: Option<TlsSession>,
}

/// One read: how much was asked for, how much came, what the core made of it.
struct Read {
    want: usize,
    n: usize,
    handled: Result<(), ProtocolError>,
}

/// What the write phase found.
struct WriteOutcome {
    kernel_full: bool,
    wake: Option<Wake>,
}

impl Driver {
    pub(super) async fn run(mut self) {
        let res = self.run_inner().await;
        let mut g = self.shared.lock();
        if let Err(e) = res {
            tracing::debug!(error = %e, "channel driver ends with an error");
            g.fatal = Some(e);
        }
        g.finished = true;
        while let Some(e) = g.conn.poll_event() {
            g.events.push_back(e);
        }
        drop(g);
        self.shared.to_app.notify_waiters();
    }

    async fn run_inner(&mut self) -> Result<(), Error> {
        let mut write_shut = false;
        // Consecutive rounds in which the kernel already reported writability while the
        // controller was blocked (a stale snapshot): bounded, then we wait on a short timer.
        let mut spins = 0u32;
        loop {
            let fd = self.stream.as_raw_fd();
            let gate_wake = self.read_phase()?;
            if self.switch_if_stalled() {
                continue;
            }
            let out = self.write_phase(fd)?;
            if self.switch_if_stalled() {
                // the write phase's verdict: switch now, not at the next wake-up
                continue;
            }
            let lane_wake = self.lane_write_phase();
            let (timeout, want_read, closed, staged) = {
                let mut g = self.shared.lock();
                let max = self.shared.max_events;
                while let Some(e) = g.conn.poll_event() {
                    if g.events.len() == max {
                        g.events.pop_front();
                        g.events_dropped += 1;
                    }
                    g.events.push_back(e);
                }
                if let Some(e) = g.conn.error() {
                    if g.conn.staged_len() == 0 {
                        return Err(Error::Protocol(e.clone()));
                    }
                }
                let timeout = match (g.conn.poll_timeout(), gate_wake) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                (
                    timeout,
                    !self.read_eof && self.shared.read_budget(&g) > 0 && gate_wake.is_none(),
                    g.conn.is_closed(),
                    g.conn.staged_len(),
                )
            };
            self.shared.to_app.notify_waiters();
            if closed && staged == 0 {
                if !write_shut {
                    if let Some(t) = &mut self.tls {
                        t.close_notify(fd);
                    }
                    sys_shutdown_write(fd);
                    write_shut = true;
                }
                if self.read_eof {
                    return Ok(());
                }
            } else if self.read_eof && !closed {
                return Err(Error::PeerGone);
            }
            let mut want_write = out.kernel_full;
            let mut timer = match (timeout, lane_wake) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            match out.wake {
                Some(Wake::NotsentBelow(x)) => {
                    // The kernel raises EPOLLOUT when 2·notsent < lowat (the `wake` shift in
                    // tcp_stream_memory_free), so lowat = 2·x wakes us when notsent < x.
                    let lowat = x.saturating_mul(2);
                    self.set_lowat(fd, lowat)?;
                    let _ = self.stream.try_io(Interest::WRITABLE, || {
                        Err::<(), _>(io::ErrorKind::WouldBlock.into())
                    });
                    if sys::poll_writable(fd)? && spins < 8 {
                        spins += 1;
                        continue;
                    }
                    if spins >= 8 {
                        let t = Instant::now() + std::time::Duration::from_millis(1);
                        timer = Some(timer.map_or(t, |x| x.min(t)));
                    }
                    want_write = true;
                }
                Some(Wake::At(t)) => timer = Some(timer.map_or(t, |x| x.min(t))),
                Some(Wake::Writable) => want_write = true,
                Some(Wake::PAck) | None => {}
            }
            let sleep = async {
                match timer {
                    Some(t) => tokio::time::sleep_until(t.into()).await,
                    None => std::future::pending().await,
                }
            };
            let paths = async {
                match &mut self.paths {
                    Some(p) => p.next().await,
                    None => std::future::pending().await,
                }
            };
            let lane_read =
                want_read && self.lane.is_some() && !self.shared.lock().conn.sends_copies();
            let lane_readable = async {
                match &self.lane {
                    Some(l) if lane_read => l.readable().await,
                    _ => std::future::pending().await,
                }
            };
            tokio::select! {
                r = self.stream.readable(), if want_read => r.map_err(|e| Error::io("epoll(readable)", e))?,
                r = lane_readable => match r {
                    Ok(()) => self.lane_read(),
                    Err(_) => self.drop_lane(),
                },
                r = self.stream.writable(), if want_write => r.map_err(|e| Error::io("epoll(writable)", e))?,
                _ = self.shared.to_driver.notified() => {}
                _ = sleep => {}
                ev = paths => self.on_path_event(ev),
            }
            self.shared.lock().wakeups += 1;
            spins = 0;
        }
    }

    /// Bytes handed to the kernel, in the kernel's units (ciphertext under TLS).
    pub(super) fn kernel_written(&self, g: &Inner) -> u64 {
        match &self.tls {
            Some(t) => t.kernel_written(),
            None => g.conn.path_written(),
        }
    }

    fn set_lowat(&self, fd: RawFd, lowat: u32) -> Result<(), Error> {
        let mut g = self.shared.lock();
        if g.lowat != Some(lowat) {
            sys::set_notsent_lowat(fd, lowat)?;
            g.lowat = Some(lowat);
        }
        Ok(())
    }

    /// Reads what the protocol's budget and the gate allow, at most 16 times; `Some(t)`: the
    /// gate is closed until `t` (do not wait for readability, wake then). Reads go into the
    /// core's read buffer ([`Self::read_in_place`]); with TLS into `rbuf`, decrypted and handed
    /// over as `Bytes`.
    fn read_phase(&mut self) -> Result<Option<Instant>, Error> {
        for _ in 0..16 {
            if self.read_eof {
                return Ok(None);
            }
            let (mut budget, gate) = {
                let g = self.shared.lock();
                (self.shared.read_budget(&g) as usize, g.gate.clone())
            };
            if budget == 0 {
                return Ok(None);
            }
            if let Some(gate) = &gate {
                let (allowed, again) = gate.allowance(Instant::now());
                if allowed == 0 {
                    return Ok(Some(again.unwrap_or_else(Instant::now)));
                }
                budget = budget.min(allowed);
            }
            let read = self.read_once(budget)?;
            let Some(Read { want, n, handled }) = read else {
                return Ok(None);
            };
            if let (Some(gate), true) = (&gate, n > 0) {
                gate.consumed(Instant::now(), n);
            }
            if let (Some(Paths::Client(p)), true) = (&mut self.paths, n > 0) {
                p.peer_heard();
            }
            if let Err(e) = handled {
                log_protocol_error(&e);
                // keep going: the CLOSE frame is staged and flushed by the write phase
                return Ok(None);
            }
            if n < want {
                return Ok(None);
            }
        }
        Ok(None)
    }

    /// One read into the core's read buffer ([`Connection::take_read_buf`]), appended to the
    /// incomplete frame an earlier read left there, so that frame is completed in place. A
    /// read leaves room for the longest frame after it (up to `read_chunk`), so the frame it
    /// ends in is completed by the next read without moving; a read that cannot also fill
    /// `read_chunk` completes just that frame. `None`: nothing to read.
    fn read_in_place(&mut self, budget: usize) -> Result<Option<Read>, Error> {
        let (mut buf, need, slack) = {
            let mut g = self.shared.lock();
            let slack = g.conn.max_frame_len().min(self.read_chunk);
            let (buf, need) = g.conn.take_read_buf();
            (buf, need, slack)
        };
        // The frame's rest; with its header incomplete (a few bytes, or the handshake), room
        // for a full read after it.
        let need = need.filter(|&k| k > 0);
        let need_room = match need {
            Some(k) => k,
            None if buf.is_empty() => 0,
            None => self.read_chunk + slack,
        };
        read_buf::make_room(&mut buf, need_room, self.read_chunk + slack);
        let room = buf.capacity() - buf.len();
        let fill = room.saturating_sub(slack).min(self.read_chunk);
        let want = budget.min(fill.max(need.unwrap_or(0)));
        debug_assert!(want > 0, "room {room}, slack {slack}, need {need:?}");
        // (a read of 0 bytes would look like the end of the stream)
        let res = match want {
            0 => Err(io::ErrorKind::WouldBlock.into()),
            _ => read_now(&mut self.stream, &mut (&mut buf).limit(want)),
        };
        let n = match read_result(res, &mut self.read_eof) {
            Ok(Some(n)) => n,
            other => {
                // nothing read: the buffer goes back as it was
                let _ = self
                    .shared
                    .lock()
                    .conn
                    .handle_read_buf(Instant::now(), buf, 0);
                return other.map(|_| None);
            }
        };
        let handled = self
            .shared
            .lock()
            .conn
            .handle_read_buf(Instant::now(), buf, n);
        Ok(Some(Read { want, n, handled }))
    }

    /// One read: in place without TLS; with TLS, of ciphertext into `rbuf`, the record layer
    /// returning plaintext in buffers of its own, handed to the core as `Bytes`.
    fn read_once(&mut self, budget: usize) -> Result<Option<Read>, Error> {
        let Some(tls) = self.tls.as_mut() else {
            return self.read_in_place(budget);
        };
        let want = budget.min(self.read_chunk);
        read_buf::prepare(&mut self.rbuf, self.read_chunk);
        let res = read_now(&mut self.stream, &mut (&mut self.rbuf).limit(want));
        let Some(n) = read_result(res, &mut self.read_eof)? else {
            return Ok(None);
        };
        let data = tls.decrypt(&self.rbuf.split().freeze())?;
        let handled = self.shared.lock().conn.handle_read(Instant::now(), data);
        Ok(Some(Read { want, n, handled }))
    }

    fn write_phase(&mut self, fd: RawFd) -> Result<WriteOutcome, Error> {
        let mut g = self.shared.lock();
        // Failover's stall verdict is due by the P-ACK rule: it asks the kernel whether ACKs
        // still arrive (TCP repairing a loss itself) before the switch.
        let now = Instant::now();
        if g.conn.wants_ack_clock(now) {
            g.conn.handle_ack_clock(now, sys::ack_clock(fd)?);
        }
        // A fresh kernel sample per write phase, except where the decision cannot matter: the
        // controller was open at the last pass and only decides about sending (`watches_idle`
        // false), and nothing of ours can be staged. With nothing to send at all (a wake-up for
        // a P-ACK that arrived, say) the phase is skipped; with only control frames (our own
        // P-ACK, a CANCEL), which bypass the controller, the last snapshot stands in. Not while
        // blocked: then the passes are what notice the kernel draining.
        let mut work = TransmitWork::Decide;
        if g.can_write {
            g.conn.handle_timeout(Instant::now());
            work = g.conn.transmit_work();
            if work == TransmitWork::Nothing {
                return Ok(WriteOutcome {
                    kernel_full: false,
                    wake: None,
                });
            }
        }
        let mut wake = None;
        let mut kernel_full = false;
        let needs = g.conn.needs_tcp_state();
        // After each write the snapshot is advanced by the bytes written (outq and notsent
        // grow, nothing else can make the allowance larger than it really is), and re-sampled
        // only when that stale view blocks.
        let (mut tcp, mut fresh) = if needs && work == TransmitWork::Decide {
            let tcp = sys::tcp_state(fd, self.kernel_written(&g))?;
            g.last_tcp = tcp;
            (tcp, true)
        } else if needs {
            // control frames only: a blocked view is re-sampled below, as after a write
            (g.last_tcp, false)
        } else {
            // chunk sizing still wants the MSS
            let tcp = TcpState {
                mss: g.last_tcp.mss,
                ..TcpState::default()
            };
            (tcp, true)
        };
        // Stage no more than the kernel takes: the rest stays queued, where deadlines and
        // cancellation still reach it. The core stages at least one MSS whatever the room, so
        // when everything queued fits in one MSS once framed the room cannot limit staging
        // and its `getsockopt` is saved (the common case of one small message per wake-up).
        let fits_one_mss = self.tls.is_none()
            && g.conn.staged_len() == 0
            && g.conn.queued_wire_bound() <= u64::from(tcp.mss_or_default());
        let mut room = if g.conn.has_queued() && !fits_one_mss {
            Some(u64::from(sys::send_room(fd)?))
        } else {
            None
        };
        for _ in 0..64 {
            g.conn.set_kernel_room(room);
            let view = match &self.tls {
                Some(_) => TlsSession::plaintext_view(&tcp),
                None => tcp,
            };
            let d = g.conn.poll_transmit(Instant::now(), &view);
            if let Some(l) = d.fixed_lowat {
                if g.lowat != Some(l) {
                    sys::set_notsent_lowat(fd, l)?;
                    g.lowat = Some(l);
                }
            }
            wake = d.blocked().then_some(d.wake);
            let staged = g.conn.staged_len();
            if staged == 0 {
                if d.blocked() && needs && !fresh {
                    tcp = sys::tcp_state(fd, self.kernel_written(&g))?;
                    g.last_tcp = tcp;
                    fresh = true;
                    continue;
                }
                break;
            }
            let conn = &g.conn;
            // With TLS the kernel gets the records of the staged bytes; staged plaintext counts
            // as written once its whole record is in the kernel (see `tls`).
            if let Some(t) = &mut self.tls {
                t.encrypt(conn.transmit_segments(), tcp.mss_or_default())?;
            }
            let requested: usize = match &self.tls {
                Some(t) => t.pending(),
                None => conn
                    .transmit_segments()
                    .take(sys::MAX_IOV)
                    .map(<[u8]>::len)
                    .sum(),
            };
            // Bytes count as handed to the kernel when the system call starts: on loopback the
            // peer may read them before `writev` returns.
            let t_write = Instant::now();
            let r = self.stream.try_io(Interest::WRITABLE, || match &self.tls {
                Some(t) => sys::writev(fd, t.segments()),
                None => sys::writev(fd, conn.transmit_segments()),
            });
            match r {
                Ok(n) => {
                    let plain = match &mut self.tls {
                        Some(t) => t.handle_written(n),
                        None => n,
                    };
                    g.conn.handle_written(t_write, plain);
                    room = room.map(|r| r.saturating_sub(n as u64));
                    if needs {
                        tcp.outq = tcp.outq.saturating_add(n as u32);
                        tcp.notsent = tcp.notsent.saturating_add(n as u32);
                        fresh = false;
                    }
                    if n < requested {
                        kernel_full = true;
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    kernel_full = true;
                    break;
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
                    ) =>
                {
                    return Err(Error::PeerGone);
                }
                Err(e) => return Err(Error::io("writev", e)),
            }
        }
        g.can_write =
            !kernel_full && wake.is_none() && g.conn.staged_len() == 0 && !g.conn.has_queued();
        if wake.is_none() && !kernel_full && g.conn.has_queued() {
            // loop budget exhausted with data left: come back immediately
            wake = Some(Wake::At(Instant::now()));
        }
        Ok(WriteOutcome { kernel_full, wake })
    }
}

fn sys_shutdown_write(fd: RawFd) {
    // SAFETY: shutting down the write half of a socket we own; errors (already shut) are fine.
    unsafe {
        libc::shutdown(fd, libc::SHUT_WR);
    }
}

/// Reads what the socket holds now into `buf` (`WouldBlock` if nothing). Unlike
/// `try_read_buf` this goes through tokio's `poll_read`, which takes a short read as proof
/// that the socket is drained (epoll is edge-triggered) and clears the readiness without a
/// race: the next wake-up does not spend a `recv` only to learn `EAGAIN` (one per P-ACK on a
/// sending channel, one per read on a receiving one).
fn read_now(stream: &mut TcpStream, buf: &mut impl BufMut) -> io::Result<usize> {
    use futures_util::FutureExt;
    use tokio::io::AsyncReadExt;
    stream
        .read_buf(buf)
        .now_or_never()
        .unwrap_or_else(|| Err(io::ErrorKind::WouldBlock.into()))
}

/// A read's outcome: `Some(n)` bytes (0 at EOF, which is noted), `None` when nothing is
/// there (would block, or reset, which counts as EOF).
fn read_result(res: io::Result<usize>, eof: &mut bool) -> Result<Option<usize>, Error> {
    match res {
        Ok(n) => {
            *eof |= n == 0;
            Ok(Some(n))
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
            *eof = true;
            Ok(None)
        }
        Err(e) => Err(Error::io("read", e)),
    }
}

pub(super) fn log_protocol_error(e: &ProtocolError) {
    tracing::warn!(error = %e, code = e.code(), "peer violated the protocol; closing");
}
