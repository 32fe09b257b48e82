//! The driver's other connections: failover's switch to a backup when the one in use stalls
//! (or the peer switched), and the duplicate lane's writes and reads.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::Instant;

use tokio::net::TcpStream;

use lowtide_proto::ProtocolError;

use super::driver::{log_protocol_error, Driver};
use super::shared::{Inner, Shared};
use crate::failover::{PathEvent, Paths};
use crate::sys;

/// How often the lane's writer looks again while its MIN_BUF blocks or its kernel is full
/// (the lane carries few bytes; no `TCP_NOTSENT_LOWAT` is kept on it).
const LANE_RECHECK: std::time::Duration = std::time::Duration::from_millis(1);

impl Driver {
    /// Connecting side: stages copies as the lane's MIN_BUF allows (on the lane socket's own
    /// `TCP_INFO` and `SIOCOUTQ`) and writes them. Returns when to look again, if copies wait.
    /// A lane whose socket fails is dropped (and replaced), never the channel.
    pub(super) fn lane_write_phase(&mut self) -> Option<Instant> {
        let lane = self.lane.as_ref()?;
        let mut g = self.shared.lock();
        if !g.conn.sends_copies() || !g.conn.lane_has_work() {
            return None;
        }
        let fd = lane.as_raw_fd();
        let sample = sys::tcp_state(fd, 0).and_then(|t| Ok((t, sys::outq(fd)?)));
        let Ok((mut tcp, outq)) = sample else {
            drop(g);
            tracing::warn!("duplicate lane: TCP_INFO or SIOCOUTQ failed");
            self.drop_lane();
            return None;
        };
        tcp.outq = outq;
        let now = Instant::now();
        g.conn.poll_lane(now, &tcp);
        let out = g.conn.lane_transmit();
        let lost = match lane.try_write(out) {
            Ok(n) => {
                g.conn.handle_lane_written(n);
                false
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
            Err(e) => {
                tracing::warn!(error = %e, "duplicate lane failed");
                true
            }
        };
        let again = g.conn.lane_has_work().then(|| now + LANE_RECHECK);
        drop(g);
        if lost {
            self.drop_lane();
        }
        again
    }

    /// Accepting side: the lane is readable; its whole messages go through the core's
    /// exactly-once filter.
    pub(super) fn lane_read(&mut self) {
        let Some(lane) = &self.lane else {
            return;
        };
        let mut buf = [0u8; 16 << 10];
        match lane.try_read(&mut buf) {
            Ok(0) => self.drop_lane(),
            Ok(n) => {
                let mut g = self.shared.lock();
                match g.conn.handle_lane_bytes(Instant::now(), &buf[..n]) {
                    Ok(()) if g.conn.lane_ack_now() => {
                        // the sender holds the rest of a copy until this ACK
                        if let Err(e) = sys::ack_now(lane.as_raw_fd()) {
                            tracing::debug!(error = %e, "duplicate lane: TCP_QUICKACK failed");
                        }
                    }
                    Ok(()) => {}
                    Err(e) => {
                        drop(g);
                        // the channel closes with a CLOSE frame naming the error
                        log_protocol_error(&e);
                        self.lane = None;
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => self.drop_lane(),
        }
    }

    /// The lane failed or closed: the core drops what was staged for it; the connecting side
    /// opens another.
    pub(super) fn drop_lane(&mut self) {
        self.lane = None;
        self.shared.lock().conn.lane_lost();
        if let Some(Paths::Client(p)) = &mut self.paths {
            p.lane_lost();
        }
    }

    /// Connecting side: the core detected a stall; move to the oldest ready backup.
    /// Returns whether the channel switched.
    pub(super) fn switch_if_stalled(&mut self) -> bool {
        let Some(Paths::Client(paths)) = &mut self.paths else {
            return false;
        };
        let mut g = self.shared.lock();
        if !g.conn.failover_wanted() {
            return false;
        }
        let Some((path, stream)) = paths.take_ready() else {
            g.conn.note_stall_without_backup();
            return false;
        };
        let now = Instant::now();
        let threshold = g.conn.stall_threshold().unwrap_or_default();
        g.conn.begin_path(now, path);
        Self::use_stream(&self.shared, &mut g, &stream);
        g.backups = paths.ready();
        drop(g);
        let old = std::mem::replace(&mut self.stream, stream);
        paths.watch_old(old, now, threshold);
        self.read_eof = false;
        true
    }

    fn use_stream(shared: &Shared, g: &mut Inner, stream: &TcpStream) {
        g.lowat = None;
        if let Ok(a) = stream.local_addr() {
            g.active_local = a;
        }
        shared.fd.store(stream.as_raw_fd(), Ordering::Relaxed);
    }

    pub(super) fn on_path_event(&mut self, ev: Option<PathEvent>) {
        let Some(ev) = ev else {
            return;
        };
        let mut g = self.shared.lock();
        match (ev, &mut self.paths) {
            (PathEvent::Backup, Some(Paths::Client(p))) => {
                g.backups = p.ready();
                if self.lane.is_none() {
                    self.lane = p.take_lane();
                }
            }
            (PathEvent::OldReadable, Some(Paths::Client(p))) => {
                let mut buf = [0u8; 16 << 10];
                let r = p.old().map(|s| s.try_read(&mut buf));
                match r {
                    Some(Ok(n)) if n > 0 => g.conn.handle_old_path_bytes(&buf[..n]),
                    Some(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => {}
                    _ => {
                        p.end_old();
                        g.conn.end_old_path();
                    }
                }
            }
            (PathEvent::OldDone, Some(Paths::Client(p))) => {
                p.end_old();
                g.conn.end_old_path();
            }
            (PathEvent::Arrived(path, stream), Some(Paths::Server(p))) => {
                p.admit(&mut g.conn, path, stream);
                g.backups = p.idle();
            }
            (PathEvent::Recheck(path, stream), Some(Paths::Server(p))) => {
                p.admit_now(&mut g.conn, path, stream);
                g.backups = p.idle();
            }
            (PathEvent::Lane(path, stream), Some(Paths::Server(p))) => {
                g.backups = p.idle();
                if g.conn.accepts_lane() {
                    tracing::debug!(path, "duplicate lane joined");
                    if self.lane.replace(stream).is_some() {
                        // the peer replaced a lane this side had not seen fail
                        g.conn.lane_lost();
                    }
                } else {
                    // without `duplicate` here, a backup that begins with DATA is a backup
                    // used without its SWITCH
                    let e = ProtocolError::BadSwitch {
                        expected: path,
                        got: "DATA (a duplicate lane this side did not configure)".into(),
                    };
                    log_protocol_error(&e);
                }
            }
            (PathEvent::Activate(path, stream), Some(Paths::Server(p))) => {
                g.backups = p.idle();
                if g.conn.begin_path(Instant::now(), path).is_none() {
                    // a SWITCH overtaken by a later one (the peer left that connection), or
                    // the channel is closing: the backup is closed unread
                    return;
                }
                Self::use_stream(&self.shared, &mut g, &stream);
                drop(g);
                // the old connection is closed: the peer left it
                self.stream = stream;
                self.read_eof = false;
            }
            _ => {}
        }
    }
}
