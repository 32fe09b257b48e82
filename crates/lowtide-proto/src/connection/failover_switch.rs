//! The switch between connections, inside [`Connection`]: what the channel keeps for
//! resending, the stall clock, and [`Connection::begin_path`].
//!
//! It lives in `connection` because it rewinds the send and receive state; the standalone
//! parts (stall rule, exactly-once filter, old-path estimate) and where we differ from
//! Paceline are in [`crate::failover`].

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::{Connection, Event, MessageId, Side, State};
use crate::error::ProtocolError;
use crate::failover::duplicate::Withdraw;
use crate::failover::{
    AckClock, FailoverConfig, FailoverReport, OldPath, StallDetector, StallVerdict,
};
use crate::stream::{Pending, SendStream};
use crate::wire::{CancelReason, Frame};

/// Per-channel failover state.
#[derive(Debug)]
pub(crate) struct PathState {
    pub stall: StallDetector,
    /// Messages completely staged and not yet P-ACKed: (channel offset of their end, id, the
    /// message), in staging order.
    retained: VecDeque<(u64, MessageId, Pending)>,
    retained_bytes: u64,
    /// Ordinal of the connection in use.
    path: u64,
    /// Channel offsets (written, consumed) where the connection in use began.
    out_base: u64,
    in_base: u64,
    /// A stall was detected and the switch has not happened yet.
    wanted: bool,
    /// The stall was counted as one without a backup.
    counted_without_backup: bool,
    /// The accepting side waits for the SWITCH frame of this ordinal.
    expect: Option<u64>,
    old: Option<OldPath>,
}

impl PathState {
    pub fn new(cfg: &FailoverConfig) -> Self {
        Self {
            stall: StallDetector::new(cfg),
            retained: VecDeque::new(),
            retained_bytes: 0,
            path: 0,
            out_base: 0,
            in_base: 0,
            wanted: false,
            counted_without_backup: false,
            expect: None,
            old: None,
        }
    }
}

impl Connection {
    pub(super) fn path_out_base(&self) -> u64 {
        self.failover.as_ref().map_or(0, |f| f.out_base)
    }

    pub(super) fn path_in_base(&self) -> u64 {
        self.failover.as_ref().map_or(0, |f| f.in_base)
    }

    /// Bytes written to the connection in use (the driver's `SIOCOUTQ` arithmetic needs the
    /// socket's own count).
    ///
    /// ```
    /// # use lowtide_proto::failover::FailoverConfig;
    /// # use lowtide_proto::sim::{LinkParams, Pair};
    /// # use lowtide_proto::{Config, Message, StreamConfig};
    /// # let cfg = Config { failover: Some(FailoverConfig::default()), ..Config::default() };
    /// let mut pair = Pair::new(cfg.clone(), cfg, LinkParams::default());
    /// let s = pair.client.conn.open_stream(StreamConfig::default())?;
    /// pair.client.conn.send(pair.now, s, Message::new(vec![0u8; 5000]))?;
    /// pair.drive_bounded(10_000);
    /// assert_eq!(pair.client.conn.path_written(), pair.client.conn.written());
    /// pair.switch_paths();
    /// pair.client.conn.send(pair.now, s, Message::new(vec![0u8; 1000]))?;
    /// pair.drive_bounded(10_000);
    /// // The new socket has seen only what was written after the switch.
    /// let c = &pair.client.conn;
    /// assert!(c.path_written() > 1000 && c.path_written() < 2000 && c.written() > 6000);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn path_written(&self) -> u64 {
        self.written - self.path_out_base()
    }

    /// Ordinal of the connection in use (0: the primary).
    ///
    /// ```
    /// # use lowtide_proto::failover::FailoverConfig;
    /// # use lowtide_proto::sim::{LinkParams, Pair};
    /// # use lowtide_proto::Config;
    /// # let cfg = Config { failover: Some(FailoverConfig::default()), ..Config::default() };
    /// let mut pair = Pair::new(cfg.clone(), cfg, LinkParams::default());
    /// pair.drive_bounded(10_000);
    /// assert_eq!(pair.client.conn.path(), 0); // the primary
    /// pair.switch_paths();
    /// pair.drive_bounded(10_000);
    /// assert_eq!((pair.client.conn.path(), pair.server.conn.path()), (1, 1));
    /// ```
    pub fn path(&self) -> u64 {
        self.failover.as_ref().map_or(0, |f| f.path)
    }

    /// The stall threshold now (`None`: failover off).
    ///
    /// ```
    /// use lowtide_proto::failover::FailoverConfig;
    /// use lowtide_proto::{Config, Connection, Side};
    /// use std::time::Duration;
    /// # let now = std::time::Instant::now();
    /// let plain = Connection::new(Config::default(), Side::Client, now)?;
    /// assert_eq!(plain.stall_threshold(), None);
    /// let cfg = Config { failover: Some(FailoverConfig { floor_ms: 150, ..Default::default() }), ..Config::default() };
    /// let c = Connection::new(cfg, Side::Client, now)?;
    /// assert_eq!(c.stall_threshold(), Some(Duration::from_millis(150))); // no RTT sample yet
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stall_threshold(&self) -> Option<Duration> {
        self.failover.as_ref().map(|f| f.stall.threshold())
    }

    /// When the connection in use counts as stalled unless a P-ACK arrives first.
    pub(super) fn stall_at(&self) -> Option<Instant> {
        if !self.detects_stalls() {
            return None;
        }
        self.failover.as_ref()?.stall.stall_at()
    }

    pub(super) fn check_stall(&mut self, now: Instant) {
        if !self.detects_stalls() {
            return;
        }
        let f = self
            .failover
            .as_mut()
            .expect("detects_stalls needs failover");
        match f.stall.verdict(now) {
            StallVerdict::Clear => {}
            StallVerdict::HeldByAcks { first } => {
                if first {
                    self.stats.stalls_held_by_acks += 1;
                    tracing::debug!(
                        threshold = ?f.stall.threshold(),
                        oldest = ?f.stall.oldest_age(now),
                        last_ack = ?f.stall.last_ack().map(|a| now.saturating_duration_since(a)),
                        "P-ACKs late, but the kernel still receives ACKs: not a stall yet"
                    );
                }
            }
            StallVerdict::Stalled => {
                f.wanted = true;
                f.counted_without_backup = false;
                tracing::debug!(
                    threshold = ?f.stall.threshold(),
                    oldest = ?f.stall.oldest_age(now),
                    last_ack = ?f.stall.last_ack().map(|a| now.saturating_duration_since(a)),
                    "connection stalled"
                );
            }
        }
    }

    /// Connecting side, open, no switch pending: the side whose stalls count.
    fn detects_stalls(&self) -> bool {
        self.side == Side::Client
            && self.state == State::Open
            && self.failover.as_ref().is_some_and(|f| !f.wanted)
    }

    /// Whether the stall verdict at `now` needs the kernel's ACK clock: the P-ACK rule is due
    /// (connecting side, failover on). The driver then samples `TCP_INFO` of the connection
    /// in use and passes it to [`handle_ack_clock`](Self::handle_ack_clock) before the next
    /// [`handle_timeout`](Self::handle_timeout) or [`poll_transmit`](Self::poll_transmit).
    ///
    /// ```
    /// # use lowtide_proto::failover::{AckClock, FailoverConfig};
    /// # use lowtide_proto::sim::{LinkParams, Pair};
    /// # use lowtide_proto::{Config, Message, StreamConfig};
    /// # use std::time::Duration;
    /// # let cfg = Config { failover: Some(FailoverConfig { floor_ms: 100, ..Default::default() }), ..Config::default() };
    /// let mut pair = Pair::new(cfg.clone(), cfg, LinkParams::default());
    /// pair.ack_clock = false; // this test plays the driver's part below
    /// pair.drive_bounded(10_000);
    /// pair.c2s.blackholed = true;
    /// let s = pair.client.conn.open_stream(StreamConfig::default())?;
    /// pair.client.conn.send(pair.now, s, Message::new("held up"))?;
    /// let written = pair.now;
    /// pair.step(); // written now
    /// let due = written + pair.client.conn.stall_threshold().unwrap();
    /// assert!(!pair.client.conn.wants_ack_clock(due - Duration::from_millis(1)));
    /// assert!(pair.client.conn.wants_ack_clock(due));
    /// // The kernel received a (duplicate) ACK 5 ms ago: TCP is still repairing; no verdict yet.
    /// let k = AckClock { since_last_ack: Duration::from_millis(5), timeout_recovery: false };
    /// pair.client.conn.handle_ack_clock(due, k);
    /// pair.client.conn.handle_timeout(due);
    /// assert!(!pair.client.conn.failover_wanted());
    /// assert_eq!(pair.client.conn.stats().stalls_held_by_acks, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn wants_ack_clock(&self, now: Instant) -> bool {
        self.detects_stalls()
            && self
                .failover
                .as_ref()
                .is_some_and(|f| f.stall.wants_ack_clock(now))
    }

    /// The kernel's ACK clock of the connection in use, sampled at `sampled_at`
    /// (see [`wants_ack_clock`](Self::wants_ack_clock)).
    pub fn handle_ack_clock(&mut self, sampled_at: Instant, k: AckClock) {
        if let Some(f) = &mut self.failover {
            f.stall.on_ack_clock(sampled_at, k);
        }
    }

    /// The connection in use stalled (connecting side): the driver should switch to a backup
    /// with [`begin_path`](Self::begin_path).
    ///
    /// ```
    /// # use lowtide_proto::failover::FailoverConfig;
    /// # use lowtide_proto::sim::{LinkParams, Pair};
    /// # use lowtide_proto::{Config, Message, StreamConfig};
    /// # use std::time::Duration;
    /// # let cfg = Config { failover: Some(FailoverConfig::default()), ..Config::default() };
    /// let mut pair = Pair::new(cfg.clone(), cfg, LinkParams::default());
    /// pair.drive_bounded(10_000);
    /// pair.c2s.blackholed = true; // the path fails
    /// let s = pair.client.conn.open_stream(StreamConfig::default())?;
    /// pair.client.conn.send(pair.now, s, Message::new("lost"))?;
    /// assert!(!pair.client.conn.failover_wanted());
    /// pair.drive_until(pair.now + Duration::from_secs(1), 100_000);
    /// assert!(pair.client.conn.failover_wanted()); // no P-ACK within the threshold
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn failover_wanted(&self) -> bool {
        self.failover.as_ref().is_some_and(|f| f.wanted)
    }

    /// The driver had no backup ready for a wanted failover (counted once per stall).
    ///
    /// ```
    /// # use lowtide_proto::failover::FailoverConfig;
    /// # use lowtide_proto::sim::{LinkParams, Pair};
    /// # use lowtide_proto::{Config, Message, StreamConfig};
    /// # use std::time::Duration;
    /// # let cfg = Config { failover: Some(FailoverConfig::default()), ..Config::default() };
    /// let mut pair = Pair::new(cfg.clone(), cfg, LinkParams::default());
    /// pair.drive_bounded(10_000);
    /// pair.c2s.blackholed = true;
    /// let s = pair.client.conn.open_stream(StreamConfig::default())?;
    /// pair.client.conn.send(pair.now, s, Message::new("lost"))?;
    /// pair.drive_until(pair.now + Duration::from_secs(1), 100_000);
    /// assert!(pair.client.conn.failover_wanted());
    /// // The driver has no backup connection ready: it says so, once per stall.
    /// pair.client.conn.note_stall_without_backup();
    /// pair.client.conn.note_stall_without_backup();
    /// assert_eq!(pair.client.conn.stats().stalls_without_backup, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn note_stall_without_backup(&mut self) {
        if let Some(f) = &mut self.failover {
            if f.wanted && !f.counted_without_backup {
                f.counted_without_backup = true;
                self.stats.stalls_without_backup += 1;
            }
        }
    }

    /// Notes the end of the data bytes of a write (markers not yet popped) and starts the
    /// stall clock for them: control bytes do not count, since a write of P-ACKs alone is
    /// never acknowledged.
    pub(super) fn note_data_written(&mut self, now: Instant) {
        let written = self.written;
        let end = self
            .markers
            .iter()
            .take_while(|m| m.start < written)
            .last()
            .map(|m| m.end.min(written));
        let Some(end) = end else {
            return;
        };
        self.data_written = self.data_written.max(end);
        if let Some(f) = &mut self.failover {
            f.stall.on_written(end, now);
        }
    }

    /// Accepting side: may another idle backup connection (ordinal `path`) join the channel,
    /// with `idle` already held? At most `failover.backups` (none without failover), one more
    /// with `duplicate` (the lane is opened like a backup).
    ///
    /// ```
    /// use lowtide_proto::failover::FailoverConfig;
    /// use lowtide_proto::{Config, Connection, Side};
    /// # let now = std::time::Instant::now();
    /// let cfg = Config { failover: Some(FailoverConfig { backups: 2, ..Default::default() }), ..Config::default() };
    /// let mut server = Connection::new(cfg, Side::Server, now)?;
    /// assert!(server.admit_backup(1, 0).is_ok());
    /// assert!(server.admit_backup(2, 1).is_ok());
    /// assert!(server.admit_backup(3, 2).is_err()); // two idle backups already held
    /// assert_eq!(server.stats().backups_refused, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn admit_backup(&mut self, path: u64, idle: usize) -> Result<(), ProtocolError> {
        let max = self.backup_limit();
        if idle >= max {
            self.stats.backups_refused += 1;
            return Err(ProtocolError::TooManyBackups {
                path,
                max: max as u32,
            });
        }
        Ok(())
    }

    /// Accepting side: the most idle backups held at once: `failover.backups` (none without
    /// failover), one more with `duplicate` (the lane arrives as an idle backup).
    pub fn backup_limit(&self) -> usize {
        let lane = u32::from(self.config.duplicate.is_some());
        self.config.failover.map_or(0, |f| f.backups + lane) as usize
    }

    /// Messages staged whole and not yet P-ACKed, oldest first.
    pub(super) fn retained_mut(&mut self) -> impl Iterator<Item = (MessageId, &mut Pending)> {
        self.failover
            .iter_mut()
            .flat_map(|f| f.retained.iter_mut().map(|(_, id, p)| (*id, p)))
    }

    /// A message's last byte was staged: keep it for resending until a P-ACK covers `end`.
    pub(super) fn retain_for_resend(&mut self, id: MessageId, end: u64, p: Pending) {
        let Some(f) = &mut self.failover else {
            return;
        };
        f.retained_bytes += p.data.len() as u64;
        f.retained.push_back((end, id, p));
        while f.retained_bytes > self.config.max_queued_bytes {
            let (_, _, old) = f.retained.pop_front().expect("bytes counted");
            f.retained_bytes -= old.data.len() as u64;
            self.stats.resend_tracking_dropped += 1;
        }
    }

    /// A P-ACK advanced `acked`: forget what it covers, sample the round trip.
    pub(super) fn release_acked(&mut self, now: Instant) {
        let Some(f) = &mut self.failover else {
            return;
        };
        while f
            .retained
            .front()
            .is_some_and(|(end, _, _)| *end <= self.acked)
        {
            let (_, id, p) = f.retained.pop_front().expect("front exists");
            f.retained_bytes -= p.data.len() as u64;
            if let Some(lane) = &mut self.lane {
                lane.withdraw(id, Withdraw::Acked);
            }
        }
        f.stall.on_acked(self.acked, now);
    }

    /// The accepting side's first frame on a backup must be its SWITCH; SWITCH anywhere else
    /// is an error.
    pub(super) fn expect_switch(&mut self, frame: &Frame<'_>) -> Result<(), ProtocolError> {
        let expect = self.failover.as_ref().and_then(|f| f.expect);
        match (expect, frame) {
            (Some(e), Frame::Switch { path }) if *path == e => {
                if let Some(f) = &mut self.failover {
                    f.expect = None;
                }
                Ok(())
            }
            (Some(e), other) => Err(ProtocolError::BadSwitch {
                expected: e,
                got: match other {
                    Frame::Switch { path } => format!("SWITCH to {path}"),
                    o => o.name().to_owned(),
                },
            }),
            (None, Frame::Switch { path }) => Err(ProtocolError::BadSwitch {
                expected: self.path(),
                got: format!("SWITCH to {path} on a connection already in use"),
            }),
            (None, _) => Ok(()),
        }
    }

    pub(super) fn sync_duplicate_stats(&mut self) {
        let d = self.reasm.done.stats;
        self.stats.duplicates_dropped = d.duplicates_dropped;
        self.stats.duplicates_unverified = d.duplicates_unverified;
    }

    /// Continues the channel on the connection with ordinal `path` (failover on only). The
    /// connecting side calls it when it switches (a SWITCH frame goes first on the new
    /// connection); the accepting side when a backup connection first becomes readable (its
    /// first frame must be that SWITCH). Either way: staged bytes of the old connection are
    /// dropped, every message not yet P-ACKed and not expired is queued again with its
    /// sequence number (expired ones are cancelled on the new connection), partly staged
    /// messages start again, own streams are announced again, partial reassemblies are
    /// dropped (the peer resends them whole), and byte counts start from the new connection.
    ///
    /// The connecting side switches to ever higher ordinals; the accepting side follows only
    /// a higher ordinal than the one in use and returns `None` for a lower one (a SWITCH
    /// overtaken by a later one: the connection it names was left already; close it unread).
    ///
    /// ```
    /// # use lowtide_proto::failover::FailoverConfig;
    /// # use lowtide_proto::sim::{LinkParams, Pair};
    /// # use lowtide_proto::{Config, Message, StreamConfig};
    /// # use std::time::Duration;
    /// # let cfg = Config { failover: Some(FailoverConfig::default()), ..Config::default() };
    /// let mut pair = Pair::new(cfg.clone(), cfg, LinkParams::default());
    /// pair.drive_bounded(10_000);
    /// pair.c2s.blackholed = true;
    /// let s = pair.client.conn.open_stream(StreamConfig::default())?;
    /// pair.client.conn.send(pair.now, s, Message::new("lost"))?;
    /// pair.drive_until(pair.now + Duration::from_millis(50), 100_000); // written, never P-ACKed
    /// let report = pair.client.conn.begin_path(pair.now, 1).expect("failover is on");
    /// assert_eq!((report.path, report.resent, report.expired), (1, 1, 0));
    /// assert_eq!(pair.client.conn.stats().failovers, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn begin_path(&mut self, now: Instant, path: u64) -> Option<FailoverReport> {
        if self.state != State::Open {
            return None;
        }
        let max_chunk = self.config.max_chunk_len;
        let f = self.failover.as_mut()?;
        if self.side == Side::Server && path <= f.path {
            // The peer switches to ever higher ordinals: this SWITCH was overtaken by a later
            // one (its first bytes were lost and retransmitted, say) and names a connection
            // the peer has left already.
            tracing::debug!(
                path,
                current = f.path,
                "SWITCH to a connection already left"
            );
            return None;
        }
        let threshold = if self.side == Side::Client {
            f.stall.threshold()
        } else {
            f.expect = Some(path);
            Duration::ZERO
        };
        // What was read but not parsed belongs to the old connection: late P-ACKs in it
        // measure false positives.
        let pending = std::mem::take(&mut self.inbuf);
        f.old = (self.side == Side::Client && self.peer_hello)
            .then(|| OldPath::new(&pending, self.acked - f.out_base, max_chunk));
        self.acked = self.written;
        f.out_base = self.written;
        f.in_base = self.consumed;
        f.path = path;
        f.wanted = false;
        f.stall.new_path();
        let retained = std::mem::take(&mut f.retained);
        f.retained_bytes = 0;
        // send side: nothing staged for the old connection goes anywhere
        self.staged.clear();
        self.small.clear();
        self.staged_len = 0;
        self.kernel_room = None;
        self.markers.clear();
        self.first_writes.clear();
        self.unacked.clear();
        self.probing.sent = None;
        self.probing.first_arrival = None;
        // receive side
        self.reasm.drop_partials();
        self.last_pack_bytes = self.consumed;
        self.pack_needed = false;
        self.pack_due = None;
        // the new connection's first frames
        let mut head = Vec::new();
        if self.side == Side::Client {
            Frame::Switch { path }.encode(&mut head);
        }
        let ours = u64::from(self.side == Side::Server);
        for (&sid, s) in &mut self.streams {
            if sid % 2 == ours && !s.closing {
                Frame::StreamOpen {
                    stream: sid,
                    weight_milli: (self.sched.weight(sid).unwrap_or(1.0) * 1000.0).round() as u64,
                }
                .encode(&mut head);
            }
            self.queued_bytes += s.queue.rewind_partial();
        }
        let (mut resent, mut expired) = (0, 0);
        for (_, id, mut p) in retained {
            if p.deadline.is_some_and(|d| d <= now) {
                expired += 1;
                Frame::Cancel {
                    stream: id.stream,
                    seq: id.seq,
                    reason: CancelReason::Expired,
                }
                .encode(&mut head);
                self.events.push_back(Event::Cancelled {
                    id,
                    reason: CancelReason::Expired,
                    sent: p.data.len() as u64,
                });
                continue;
            }
            resent += 1;
            p.sent = 0;
            self.queued_bytes += p.data.len() as u64;
            if let Some(d) = p.deadline {
                self.deadlines.insert((d, id));
            }
            let s = self.streams.entry(id.stream).or_insert_with(|| {
                // the stream finished meanwhile: it closes again once resent
                self.sched.add(id.stream, 1.0);
                let mut s = SendStream::new();
                s.closing = true;
                s
            });
            s.queue.push_resend(id.importance, id.seq, p);
            self.sched.set_active(id.stream, true);
        }
        // A SWITCH of an earlier begin_path not written yet belongs to a connection that was
        // never used: drop it.
        if let Ok(Some((Frame::Switch { .. }, n))) = Frame::decode(&self.control, 0) {
            self.control.drain(..n);
        }
        head.append(&mut self.control);
        self.control = head;
        self.stats.failovers += 1;
        self.stats.resent_messages += resent;
        self.stats.failover_expired += expired;
        let report = FailoverReport {
            path,
            resent,
            expired,
            threshold,
        };
        tracing::debug!(?report, "failover");
        self.events.push_back(Event::Failover(report));
        Some(report)
    }

    /// Bytes read from the connection abandoned at the last switch (connecting side, for a
    /// while after it): P-ACKs in them past the stall point count a false failover.
    ///
    /// ```
    /// # use lowtide_proto::failover::FailoverConfig;
    /// # use lowtide_proto::sim::{LinkParams, Pair};
    /// # use lowtide_proto::wire::Frame;
    /// # use lowtide_proto::Config;
    /// # let cfg = Config { failover: Some(FailoverConfig::default()), ..Config::default() };
    /// let mut pair = Pair::new(cfg.clone(), cfg, LinkParams::default());
    /// pair.drive_bounded(10_000);
    /// pair.client.conn.begin_path(pair.now, 1).expect("failover is on");
    /// // A P-ACK on the abandoned connection past the switch: the old path still delivered.
    /// let mut late = Vec::new();
    /// Frame::PAck { bytes: 1 << 20, recv_time_us: 0 }.encode(&mut late);
    /// pair.client.conn.handle_old_path_bytes(&late);
    /// assert_eq!(pair.client.conn.stats().false_failovers, 1);
    /// ```
    pub fn handle_old_path_bytes(&mut self, data: &[u8]) {
        let Some(f) = &mut self.failover else {
            return;
        };
        let Some(old) = &mut f.old else {
            return;
        };
        match old.on_bytes(data) {
            Ok(true) => self.stats.false_failovers += 1,
            Ok(false) => {}
            Err(_) => f.old = None,
        }
    }

    /// The driver stopped reading the old connection.
    ///
    /// ```
    /// # use lowtide_proto::failover::FailoverConfig;
    /// # use lowtide_proto::sim::{LinkParams, Pair};
    /// # use lowtide_proto::wire::Frame;
    /// # use lowtide_proto::Config;
    /// # let cfg = Config { failover: Some(FailoverConfig::default()), ..Config::default() };
    /// let mut pair = Pair::new(cfg.clone(), cfg, LinkParams::default());
    /// pair.drive_bounded(10_000);
    /// pair.client.conn.begin_path(pair.now, 1).expect("failover is on");
    /// pair.client.conn.end_old_path(); // the driver closed the old socket
    /// let mut late = Vec::new();
    /// Frame::PAck { bytes: 1 << 20, recv_time_us: 0 }.encode(&mut late);
    /// pair.client.conn.handle_old_path_bytes(&late); // ignored now
    /// assert_eq!(pair.client.conn.stats().false_failovers, 0);
    /// ```
    pub fn end_old_path(&mut self) {
        if let Some(f) = &mut self.failover {
            f.old = None;
        }
    }
}
