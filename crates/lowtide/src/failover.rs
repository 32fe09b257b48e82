//! Failover's sockets: backup connections, routing them to their channel, the switch.
//!
//! The policy (when to switch, what to resend, exactly-once delivery) is in
//! [`lowtide_proto::failover`]; this module only opens, hands over and watches sockets:
//!
//! - connecting side ([`ClientPaths`]): keeps `failover.backups` connections to the peer,
//!   each opened with a hello carrying the channel's token (key 4) and its ordinal (key 5) and
//!   ready once the peer's reply hello echoes the ordinal; on a stall the driver moves the
//!   channel to the oldest ready backup, opens a new one, and keeps reading the old
//!   connection for a while for the false-positive estimate;
//! - accepting side: [`accept`] reads the hello of every new connection; a backup goes to its
//!   channel's driver ([`ServerPaths`]), which admits it (the core checks the limit), answers
//!   it and waits until its first bytes arrive: then the channel moves to it and the old
//!   connection is closed. An unknown token or one backup too many gets a hello without
//!   the ordinal and a CLOSE frame naming the error.
//! - duplicate lane (`lowtide_proto::failover::duplicate`): the connecting side opens one
//!   more backup and keeps it as the lane; the accepting side recognises it by its first
//!   frame (DATA, not SWITCH) and reads it beside the connection in use.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use lowtide_proto::failover::network_path::backup_path;
use lowtide_proto::wire::{Frame, FrameType, Hello, HelloOption, VERSION};
use lowtide_proto::{Connection, ProtocolError};

use crate::channel::{bind_local, configure, tcp_socket};
use crate::config::ChannelConfig;
use crate::error::Error;

/// How long a new connection may take to send its hello (accepting side) or to answer a
/// backup's hello (connecting side).
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the old connection is read after a switch: this many stall thresholds, at
/// least [`OLD_PATH_MIN_WATCH`].
const OLD_PATH_WATCH_THRESHOLDS: u32 = 4;
const OLD_PATH_MIN_WATCH: Duration = Duration::from_secs(1);
/// Abandoned connections kept open while the peer has not been heard since (see
/// `ClientPaths::parked`).
const PARKED_MAX: usize = 8;

/// A nonzero channel token, random per process and call.
pub(crate) fn random_token() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish().max(1)
}

fn hello_bytes(options: Vec<HelloOption>) -> Vec<u8> {
    let mut v = Vec::new();
    Hello {
        version: VERSION,
        options,
    }
    .encode(&mut v);
    v
}

fn path_of(h: &Hello) -> Option<u64> {
    h.options.iter().find_map(|o| match o {
        HelloOption::Path(p) => Some(*p),
        _ => None,
    })
}

fn token_of(h: &Hello) -> Option<u64> {
    h.options.iter().find_map(|o| match o {
        HelloOption::ChannelToken(t) => Some(*t),
        _ => None,
    })
}

/// Reads from `s` until `buf` holds a whole hello; returns it and its length.
async fn read_hello(s: &mut TcpStream, buf: &mut Vec<u8>) -> Result<(Hello, usize), Error> {
    let read = async {
        loop {
            if let Some(h) = Hello::decode(buf).map_err(ProtocolError::from)? {
                return Ok(h);
            }
            let mut tmp = [0u8; 512];
            let n = s
                .read(&mut tmp)
                .await
                .map_err(|e| Error::io("read(hello)", e))?;
            if n == 0 {
                return Err(Error::PeerGone);
            }
            buf.extend_from_slice(&tmp[..n]);
        }
    };
    tokio::time::timeout(HELLO_TIMEOUT, read)
        .await
        .map_err(|_| Error::io("read(hello)", std::io::ErrorKind::TimedOut.into()))?
}

/// Refuses a backup: a hello without the ordinal, then a CLOSE frame naming the error.
fn refuse(s: &TcpStream, e: &ProtocolError) {
    let mut out = hello_bytes(vec![]);
    Frame::Close {
        code: e.code(),
        reason: &e.to_string(),
    }
    .encode(&mut out);
    tracing::warn!(error = %e, "backup connection refused");
    // a fresh socket's buffer takes these few bytes; the socket is closed right after
    let _ = s.try_write(&out);
}

// ------------------------------------------------------------------ connecting side

/// Opens backup `path`: connect, hello with token and ordinal, wait for the echo.
async fn open_backup(
    peer: SocketAddr,
    cfg: ChannelConfig,
    token: u64,
    path: u64,
    local: Option<IpAddr>,
) -> Result<TcpStream, Error> {
    let sock = tcp_socket(peer, cfg.mptcp)?;
    bind_local(&sock, peer, local)?;
    configure(sock.as_raw_fd(), &cfg)?;
    let mut s = sock
        .connect(peer)
        .await
        .map_err(|e| Error::io(format!("connect({peer}) for backup {path}"), e))?;
    let hello = hello_bytes(vec![
        HelloOption::ChannelToken(token),
        HelloOption::Path(path),
    ]);
    s.write_all(&hello)
        .await
        .map_err(|e| Error::io("write(backup hello)", e))?;
    let mut buf = Vec::new();
    let (reply, n) = read_hello(&mut s, &mut buf).await?;
    if path_of(&reply) == Some(path) {
        return Ok(s);
    }
    // refused: the CLOSE frame says why
    let reason = async {
        loop {
            if let Ok(Some((Frame::Close { reason, .. }, _))) = Frame::decode(&buf[n..], 0) {
                return reason.to_owned();
            }
            let mut tmp = [0u8; 1100];
            match s.read(&mut tmp).await {
                Ok(0) | Err(_) => return "closed without a reason".to_owned(),
                Ok(k) => buf.extend_from_slice(&tmp[..k]),
            }
        }
    };
    let reason = tokio::time::timeout(HELLO_TIMEOUT, reason)
        .await
        .unwrap_or_else(|_| "no reason within the hello timeout".into());
    Err(Error::BackupRefused { path, reason })
}

/// The connecting side's connections besides the one in use.
#[derive(Debug)]
pub(crate) struct ClientPaths {
    peer: SocketAddr,
    cfg: ChannelConfig,
    token: u64,
    backups: usize,
    next_path: u64,
    opening: usize,
    /// Ready backups, lowest ordinal first.
    ready: VecDeque<(u64, TcpStream)>,
    /// Ordinal of the connection in use: switches go to higher ones only (the peer ignores a
    /// SWITCH to a lower one, taking it for one overtaken by a later switch).
    in_use: u64,
    /// The local address the connection in use left from (its network path).
    in_use_local: Option<IpAddr>,
    results: mpsc::UnboundedReceiver<(u64, Result<TcpStream, Error>)>,
    results_tx: mpsc::UnboundedSender<(u64, Result<TcpStream, Error>)>,
    /// The connection abandoned at the last switch and until when it is read.
    old: Option<(TcpStream, Instant)>,
    /// Connections abandoned at switches, no longer read but kept open until the peer is
    /// heard on the connection in use: closing one earlier would tell the accepting side,
    /// which follows only once the SWITCH arrives (on a path that may have been dark as long
    /// as the old one), that the peer is gone, and it would end the channel.
    parked: VecDeque<TcpStream>,
    /// Duplicate lane: one more connection is opened and handed to the driver as the lane.
    lane_wanted: bool,
    /// The lane, ready and not yet taken by the driver.
    lane: Option<TcpStream>,
    /// The driver holds a lane.
    lane_held: bool,
    /// A backup was refused: no more are opened (the peer does not accept them).
    refused: bool,
    /// Backups that failed to open in a row, and when the next may be tried: a path that
    /// fails at once (its interface gone, its address removed) is retried with back-off, not
    /// in a loop.
    failures: u32,
    retry_at: Option<Instant>,
}

/// The wait before opening a backup again after `failures` failed in a row: 100 ms doubling
/// to 10 s.
fn retry_delay(failures: u32) -> Duration {
    let ms = 100u64.saturating_mul(1 << failures.saturating_sub(1).min(7));
    Duration::from_millis(ms.min(10_000))
}

/// What happened on the connections around the one in use.
pub(crate) enum PathEvent {
    /// A backup is ready, or failed to open (logged).
    Backup,
    /// The old connection is readable.
    OldReadable,
    /// Stop reading the old connection.
    OldDone,
    /// Accepting side: the peer moved to this backup.
    Activate(u64, TcpStream),
    /// Accepting side: a backup arrived from the listener.
    Arrived(u64, TcpStream),
    /// Accepting side: a backup that arrived at the limit waited; decide now, without waiting.
    Recheck(u64, TcpStream),
    /// Accepting side: a backup's first frame is not a SWITCH: it is a duplicate lane.
    Lane(u64, TcpStream),
}

impl ClientPaths {
    pub fn new(
        peer: SocketAddr,
        cfg: ChannelConfig,
        token: u64,
        backups: u32,
        lane_wanted: bool,
        in_use_local: Option<IpAddr>,
    ) -> Self {
        let (results_tx, results) = mpsc::unbounded_channel();
        let mut p = Self {
            peer,
            cfg,
            token,
            backups: backups as usize,
            next_path: 1,
            opening: 0,
            ready: VecDeque::new(),
            in_use: 0,
            in_use_local,
            results,
            results_tx,
            old: None,
            parked: VecDeque::new(),
            lane_wanted,
            lane: None,
            lane_held: false,
            refused: false,
            failures: 0,
            retry_at: None,
        };
        p.top_up();
        p
    }

    /// Opens backups until `backups` are ready or opening (and a lane, if wanted and none).
    fn top_up(&mut self) {
        if self.retry_at.is_some_and(|t| Instant::now() < t) {
            return;
        }
        let want = self.backups + usize::from(self.needs_lane());
        while !self.refused && self.ready.len() + self.opening < want {
            let path = self.next_path;
            self.next_path += 1;
            self.opening += 1;
            let local = self.local_for(path);
            let (peer, cfg, token, tx) = (
                self.peer,
                self.cfg.clone(),
                self.token,
                self.results_tx.clone(),
            );
            tokio::spawn(async move {
                let r = open_backup(peer, cfg, token, path, local).await;
                let _ = tx.send((path, r));
            });
        }
    }

    /// The local address backup `path` leaves from: another network path than the
    /// connection in use's (`lowtide_proto::failover::network_path`).
    fn local_for(&self, path: u64) -> Option<IpAddr> {
        backup_path(&self.cfg.local_addrs, self.in_use_local, path)
    }

    /// Ready backups.
    pub fn ready(&self) -> usize {
        self.ready.len()
    }

    /// Takes the ready backup with the lowest ordinal for a switch (and opens a replacement).
    pub fn take_ready(&mut self) -> Option<(u64, TcpStream)> {
        let r = self.ready.pop_front();
        if let Some((path, s)) = &r {
            self.in_use = *path;
            self.in_use_local = s.local_addr().ok().map(|a| a.ip());
            self.drop_passed();
        }
        self.top_up();
        r
    }

    /// Closes ready backups below the ordinal in use (one opened before it and ready after
    /// it): the peer would not follow a SWITCH to them.
    fn drop_passed(&mut self) {
        let before = self.ready.len();
        self.ready.retain(|(path, _)| *path > self.in_use);
        if self.ready.len() < before {
            tracing::debug!(
                closed = before - self.ready.len(),
                in_use = self.in_use,
                "backups passed by a switch closed"
            );
        }
    }

    fn needs_lane(&self) -> bool {
        self.lane_wanted && !self.lane_held && self.lane.is_none()
    }

    /// The duplicate lane, once open (the driver holds it from then on).
    pub fn take_lane(&mut self) -> Option<TcpStream> {
        let l = self.lane.take();
        self.lane_held |= l.is_some();
        l
    }

    /// The driver's lane failed: open another.
    pub fn lane_lost(&mut self) {
        self.lane_held = false;
        self.top_up();
    }

    /// Keeps reading the connection just abandoned, for a while.
    pub fn watch_old(&mut self, old: TcpStream, now: Instant, threshold: Duration) {
        let watch = (threshold * OLD_PATH_WATCH_THRESHOLDS).max(OLD_PATH_MIN_WATCH);
        self.end_old();
        self.old = Some((old, now + watch));
    }

    pub fn old(&self) -> Option<&TcpStream> {
        self.old.as_ref().map(|(s, _)| s)
    }

    /// Stops reading the old connection; it stays open until the peer is heard on the
    /// connection in use ([`Self::peer_heard`]; at most `PARKED_MAX` are kept).
    pub fn end_old(&mut self) {
        if let Some((s, _)) = self.old.take() {
            if self.parked.len() == PARKED_MAX {
                self.parked.pop_front();
            }
            self.parked.push_back(s);
        }
    }

    /// Bytes arrived on the connection in use: the accepting side follows it (before a
    /// SWITCH it writes nothing there but the hello's answer), so the abandoned ones close.
    pub fn peer_heard(&mut self) {
        self.parked.clear();
    }

    /// Waits for the next event (cancel-safe).
    pub async fn next(&mut self) -> PathEvent {
        let old = async {
            match &self.old {
                Some((s, until)) => tokio::select! {
                    r = s.readable() => if r.is_ok() { PathEvent::OldReadable } else { PathEvent::OldDone },
                    _ = tokio::time::sleep_until((*until).into()) => PathEvent::OldDone,
                },
                None => std::future::pending().await,
            }
        };
        let retry = self.retry_at;
        tokio::select! {
            _ = tokio::time::sleep_until(retry.unwrap_or_else(Instant::now).into()), if retry.is_some() => {
                self.retry_at = None;
                self.top_up();
                PathEvent::Backup
            }
            r = self.results.recv() => {
                if let Some((path, r)) = r {
                    self.opening -= 1;
                    if r.is_ok() {
                        self.failures = 0;
                    }
                    match r {
                        Ok(s) if self.needs_lane() => {
                            tracing::debug!(path, "duplicate lane ready");
                            self.lane = Some(s);
                        }
                        Ok(s) => {
                            let at = self.ready.partition_point(|(p, _)| *p < path);
                            self.ready.insert(at, (path, s));
                            self.drop_passed();
                            self.top_up();
                        }
                        Err(e) => {
                            self.failures += 1;
                            let wait = retry_delay(self.failures);
                            tracing::warn!(error = %e, path, retry_in_ms = wait.as_millis() as u64, "backup connection failed");
                            if matches!(e, Error::BackupRefused { .. }) {
                                self.refused = true;
                            } else {
                                self.retry_at = Some(Instant::now() + wait);
                            }
                        }
                    }
                }
                PathEvent::Backup
            }
            ev = old => ev,
        }
    }
}

// ------------------------------------------------------------------ accepting side

type Registry = Arc<Mutex<HashMap<u64, mpsc::UnboundedSender<(u64, TcpStream)>>>>;

/// The accepting side's routing of backups to channels, shared by a listener's channels.
#[derive(Debug, Clone, Default)]
pub(crate) struct Router {
    channels: Registry,
}

/// A connection the listener accepted and read the hello of.
#[derive(Debug)]
pub(crate) struct Accepted {
    pub stream: TcpStream,
    /// Its bytes so far (the hello and whatever followed).
    pub bytes: Vec<u8>,
    /// The channel token in its hello, if any.
    pub token: Option<u64>,
}

/// With failover on, a task owns the listening socket: it reads every new connection's hello,
/// routes backups to their channels and queues primaries for `Listener::accept`
/// (`crate::Listener`), so backups are routed even while the application is not accepting.
/// Aborted when the listener is dropped.
#[derive(Debug)]
pub(crate) struct Acceptor {
    task: tokio::task::JoinHandle<()>,
    primaries: tokio::sync::Mutex<mpsc::Receiver<Result<Accepted, Error>>>,
    pub router: Router,
    pub local: SocketAddr,
}

impl Acceptor {
    pub fn spawn(listener: TcpListener, cfg: ChannelConfig) -> Result<Self, Error> {
        let local = listener
            .local_addr()
            .map_err(|e| Error::io("getsockname", e))?;
        let router = Router::default();
        let (tx, primaries) = mpsc::channel(128);
        let r = router.clone();
        let task = tokio::spawn(async move {
            loop {
                let a = accept(&listener, &cfg, &r).await;
                let fatal = a.is_err();
                if tx.send(a).await.is_err() || fatal {
                    return;
                }
            }
        });
        Ok(Self {
            task,
            primaries: tokio::sync::Mutex::new(primaries),
            router,
            local,
        })
    }

    /// The next primary connection.
    pub async fn next(&self) -> Result<Accepted, Error> {
        self.primaries
            .lock()
            .await
            .recv()
            .await
            .unwrap_or(Err(Error::Closed))
    }
}

impl Drop for Acceptor {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Accepts the next primary connection; backups that arrive meanwhile go to their channels.
async fn accept(
    listener: &TcpListener,
    cfg: &ChannelConfig,
    router: &Router,
) -> Result<Accepted, Error> {
    loop {
        let (mut stream, _) = listener
            .accept()
            .await
            .map_err(|e| Error::io("accept", e))?;
        configure(stream.as_raw_fd(), cfg)?;
        let mut bytes = Vec::new();
        let hello = match read_hello(&mut stream, &mut bytes).await {
            Ok((h, _)) => h,
            // a connection that never says hello is not a channel: drop it, keep accepting
            Err(Error::Protocol(e)) => {
                tracing::warn!(error = %e, "connection without a valid hello");
                // the channel would have answered with CLOSE; this connection gets it too
                refuse(&stream, &e);
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, "connection closed before its hello");
                continue;
            }
        };
        let token = token_of(&hello);
        let Some(path) = path_of(&hello) else {
            return Ok(Accepted {
                stream,
                bytes,
                token,
            });
        };
        let token = token.unwrap_or(0);
        let tx = router
            .channels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&token)
            .cloned();
        let unrouted = match tx {
            Some(tx) => tx.send((path, stream)).err().map(|e| e.0 .1),
            None => Some(stream),
        };
        if let Some(stream) = unrouted {
            // no such channel (or it just ended)
            refuse(&stream, &ProtocolError::UnknownChannelToken { token });
        }
    }
}

/// The accepting side's backups of one channel.
#[derive(Debug)]
pub(crate) struct ServerPaths {
    router: Router,
    token: u64,
    arrivals: mpsc::UnboundedReceiver<(u64, TcpStream)>,
    /// Backups answered and waiting for their first bytes (their waits report here, with
    /// whether that byte begins a SWITCH).
    active_tx: mpsc::UnboundedSender<(u64, Option<(TcpStream, bool)>)>,
    active: mpsc::UnboundedReceiver<(u64, Option<(TcpStream, bool)>)>,
    idle: usize,
    /// Backups that arrived with the idle ones at the limit, until `ADMIT_GRACE` ends or an
    /// idle one turns out to be in use (at most the limit of them).
    waiting: VecDeque<(u64, TcpStream, tokio::time::Instant)>,
}

/// How long a backup arriving at the limit waits before it is refused. The peer opens a
/// replacement right after it writes SWITCH on the backup it moved to; the replacement's
/// handshake can reach this side before the SWITCH's first byte is seen, and the used backup
/// still counts as idle until then.
const ADMIT_GRACE: Duration = Duration::from_secs(2);

impl ServerPaths {
    /// Registers the channel's token with the listener's router.
    pub fn new(router: &Router, token: u64) -> Self {
        let (tx, arrivals) = mpsc::unbounded_channel();
        router
            .channels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(token, tx);
        let (active_tx, active) = mpsc::unbounded_channel();
        Self {
            router: router.clone(),
            token,
            arrivals,
            active_tx,
            active,
            idle: 0,
            waiting: VecDeque::new(),
        }
    }

    /// Idle backups held.
    pub fn idle(&self) -> usize {
        self.idle
    }

    /// Admits (the core decides) and answers a backup, then waits for its first bytes. At the
    /// limit, the backup first waits (see [`ADMIT_GRACE`]), then comes back as
    /// [`PathEvent::Recheck`] for [`Self::admit_now`].
    pub fn admit(&mut self, conn: &mut Connection, path: u64, stream: TcpStream) {
        let limit = conn.backup_limit();
        if self.idle >= limit && self.waiting.len() < limit {
            let until = tokio::time::Instant::now() + ADMIT_GRACE;
            self.waiting.push_back((path, stream, until));
            return;
        }
        self.admit_now(conn, path, stream);
    }

    /// Admits or refuses a backup now (the core decides).
    pub fn admit_now(&mut self, conn: &mut Connection, path: u64, stream: TcpStream) {
        if let Err(e) = conn.admit_backup(path, self.idle) {
            refuse(&stream, &e);
            return;
        }
        let reply = hello_bytes(vec![HelloOption::Path(path)]);
        if stream.try_write(&reply).ok() != Some(reply.len()) {
            tracing::warn!(path, "could not answer a backup connection");
            return;
        }
        self.idle += 1;
        let tx = self.active_tx.clone();
        tokio::spawn(async move {
            // its first bytes make it the connection in use (a SWITCH) or the duplicate lane
            // (a DATA frame); EOF: the peer dropped it
            let mut b = [0u8; 1];
            let used = matches!(stream.peek(&mut b).await, Ok(n) if n > 0);
            let switch = b[0] == FrameType::Switch as u8;
            let _ = tx.send((path, used.then_some((stream, switch))));
        });
    }

    /// Waits for the next event (cancel-safe).
    pub async fn next(&mut self) -> Option<PathEvent> {
        let recheck = self.waiting.front().map(|w| w.2);
        tokio::select! {
            Some((path, s)) = self.arrivals.recv() => Some(PathEvent::Arrived(path, s)),
            _ = tokio::time::sleep_until(recheck.unwrap_or_else(tokio::time::Instant::now)),
                if recheck.is_some() =>
            {
                let (path, s, _) = self.waiting.pop_front()?;
                Some(PathEvent::Recheck(path, s))
            }
            Some((path, s)) = self.active.recv() => {
                self.idle -= 1;
                // a place is free: the longest waiting backup is decided at once
                if let Some(w) = self.waiting.front_mut() {
                    w.2 = tokio::time::Instant::now();
                }
                s.map(|(s, switch)| match switch {
                    true => PathEvent::Activate(path, s),
                    false => PathEvent::Lane(path, s),
                })
            }
        }
    }
}

impl Drop for ServerPaths {
    fn drop(&mut self) {
        self.router
            .channels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.token);
    }
}

/// The connections around the one in use, by side.
#[derive(Debug)]
pub(crate) enum Paths {
    Client(Box<ClientPaths>),
    Server(ServerPaths),
}

impl Paths {
    /// Waits for the next event (cancel-safe); `None`: nothing to act on.
    pub async fn next(&mut self) -> Option<PathEvent> {
        match self {
            Paths::Client(c) => Some(c.next().await),
            Paths::Server(s) => s.next().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::retry_delay;
    use std::time::Duration;

    #[test]
    fn failed_backups_are_retried_with_back_off_up_to_ten_seconds() {
        let ms = |n| retry_delay(n).as_millis();
        assert_eq!((ms(1), ms(2), ms(3), ms(7)), (100, 200, 400, 6400));
        assert_eq!(retry_delay(8), Duration::from_secs(10));
        assert_eq!(retry_delay(u32::MAX), Duration::from_secs(10));
    }
}
