//! The tokio driver: one [`Endpoint`] on one connected UDP socket.
//!
//! A task owns the socket and loops: read datagrams, run timers, send what
//! [`Endpoint::poll_transmit`] yields, wake the application. The application side
//! ([`Session`]) shares the endpoint behind a mutex and never blocks on the network.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tokio::net::UdpSocket;
use tokio::sync::Notify;

use crate::buffer::{Message, MessageId, SendError};
use crate::endpoint::{Endpoint, Event, Stats, TfrcConfig};
use crate::reassembly::Received;

/// Largest datagram read.
const MAX_DATAGRAM: usize = 65_536;
/// Receive buffer asked for (the kernel caps it at `net.core.rmem_max`): TFRC paces, but a
/// receiver that is not scheduled for a while must not lose what the pacing let through.
const RECV_BUFFER: usize = 1 << 20;

/// Why a session could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] lowtide_proto::ConfigError),
    /// A socket call failed.
    #[error("{what}: {error}")]
    Io {
        /// What was attempted.
        what: &'static str,
        /// The system's error (shown in the message, so not a `source()` too).
        error: std::io::Error,
    },
}

fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> Error {
    move |error| Error::Io { what, error }
}

#[derive(Debug)]
struct Shared {
    ep: Mutex<Endpoint>,
    to_driver: Notify,
    to_app: Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Endpoint> {
        self.ep.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A running TFRC session. Cheap to clone; dropping the last clone closes it (code 0), so the
/// driver task sends CLOSE and ends.
#[derive(Debug, Clone)]
pub struct Session {
    shared: Arc<Shared>,
    _close_on_drop: Arc<CloseOnDrop>,
    local: SocketAddr,
    peer: SocketAddr,
}

#[derive(Debug)]
struct CloseOnDrop(Arc<Shared>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.lock().close(0);
        self.0.to_driver.notify_one();
    }
}

impl Session {
    /// Binds `local` and talks to `peer`.
    pub async fn connect(
        local: SocketAddr,
        peer: SocketAddr,
        cfg: TfrcConfig,
    ) -> Result<Self, Error> {
        let sock = UdpSocket::bind(local)
            .await
            .map_err(io("bind UDP socket"))?;
        sock.connect(peer).await.map_err(io("connect UDP socket"))?;
        Self::start(sock, cfg, None)
    }

    /// Binds `local`, waits for the first datagram and talks to its sender.
    pub async fn accept(local: SocketAddr, cfg: TfrcConfig) -> Result<Self, Error> {
        let sock = UdpSocket::bind(local)
            .await
            .map_err(io("bind UDP socket"))?;
        Self::accept_on(sock, cfg).await
    }

    /// Like [`accept`](Self::accept) on a socket already bound (so the caller can learn its
    /// port first).
    pub async fn accept_on(sock: UdpSocket, cfg: TfrcConfig) -> Result<Self, Error> {
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let (n, from) = sock
            .recv_from(&mut buf)
            .await
            .map_err(io("receive first datagram"))?;
        let at = Instant::now();
        sock.connect(from).await.map_err(io("connect UDP socket"))?;
        buf.truncate(n);
        Self::start(sock, cfg, Some((at, buf)))
    }

    fn start(
        sock: UdpSocket,
        cfg: TfrcConfig,
        first: Option<(Instant, Vec<u8>)>,
    ) -> Result<Self, Error> {
        if let Err(e) = socket2::SockRef::from(&sock).set_recv_buffer_size(RECV_BUFFER) {
            tracing::warn!(error = %e, "TFRC: could not enlarge the UDP receive buffer");
        }
        let local = sock.local_addr().map_err(io("read local address"))?;
        let peer = sock.peer_addr().map_err(io("read peer address"))?;
        let mut ep = Endpoint::new(cfg, Instant::now())?;
        if let Some((at, d)) = first {
            // a bad first datagram is counted like any other
            let _ = ep.handle_datagram(at, &d);
        }
        let shared = Arc::new(Shared {
            ep: Mutex::new(ep),
            to_driver: Notify::new(),
            to_app: Notify::new(),
        });
        tokio::spawn(drive(sock, shared.clone()));
        Ok(Self {
            _close_on_drop: Arc::new(CloseOnDrop(shared.clone())),
            shared,
            local,
            peer,
        })
    }

    /// Our address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }
    /// The peer's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// Queues a message (never waits: a full buffer refuses it, as DBAT's paper assumes).
    pub fn send(&self, msg: Message) -> Result<MessageId, SendError> {
        let r = self.shared.lock().send(Instant::now(), msg);
        self.shared.to_driver.notify_one();
        r
    }

    /// Withdraws a message that has not started.
    pub fn cancel(&self, id: MessageId) -> bool {
        self.shared.lock().cancel(id)
    }

    /// The stream's bit rate changed, bytes per second (DBAT).
    pub fn set_stream_rate(&self, bytes_per_sec: u64) {
        self.shared.lock().set_stream_rate(bytes_per_sec);
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.shared.lock().stats()
    }

    /// Runs `f` on the endpoint (rates, RTT, buffer state for reports).
    pub fn with_endpoint<T>(&self, f: impl FnOnce(&Endpoint) -> T) -> T {
        f(&self.shared.lock())
    }

    /// The next message; `None` once the session is closed and drained.
    pub async fn recv(&self) -> Option<Received> {
        self.wait(|ep| {
            ep.poll_message()
                .map(Some)
                .or(ep.is_closed().then_some(None))
        })
        .await
    }

    /// The next event; `None` once the session is closed and drained.
    pub async fn next_event(&self) -> Option<Event> {
        self.wait(|ep| ep.poll_event().map(Some).or(ep.is_closed().then_some(None)))
            .await
    }

    /// Events so far, without waiting.
    pub fn drain_events(&self) -> Vec<Event> {
        let mut g = self.shared.lock();
        std::iter::from_fn(|| g.poll_event()).collect()
    }

    /// Closes the session (CLOSE is sent; the driver stops shortly after).
    pub fn close(&self, code: u64) {
        self.shared.lock().close(code);
        self.shared.to_driver.notify_one();
    }

    async fn wait<T>(&self, mut poll: impl FnMut(&mut Endpoint) -> Option<T>) -> T {
        loop {
            let notified = self.shared.to_app.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(v) = poll(&mut self.shared.lock()) {
                return v;
            }
            notified.await;
        }
    }
}

async fn drive(sock: UdpSocket, shared: Arc<Shared>) {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut out = Vec::new();
    loop {
        let (deadline, closed) = {
            let mut ep = shared.lock();
            let now = Instant::now();
            if ep.poll_timeout().is_some_and(|t| t <= now) {
                ep.handle_timeout(now);
            }
            while let Some(d) = ep.poll_transmit(now) {
                out.push(d);
            }
            (ep.poll_timeout(), ep.is_closed())
        };
        for d in out.drain(..) {
            // UDP: a refused send (no route, buffer full) is a lost packet, as on the wire
            if let Err(e) = sock.send(&d).await {
                tracing::debug!(error = %e, "TFRC datagram not sent");
            }
        }
        shared.to_app.notify_waiters();
        if closed {
            return;
        }
        let sleep = async {
            match deadline {
                Some(t) => tokio::time::sleep_until(t.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = sock.recv(&mut buf) => {
                let now = Instant::now();
                match r {
                    Ok(n) => {
                        let mut ep = shared.lock();
                        if let Err(e) = ep.handle_datagram(now, &buf[..n]) {
                            tracing::debug!(error = %e, "TFRC datagram refused");
                        }
                    }
                    // ICMP port unreachable and the like: the peer is not there (yet)
                    Err(e) => tracing::debug!(error = %e, "TFRC receive failed"),
                }
            }
            _ = sleep => {}
            _ = shared.to_driver.notified() => {}
        }
    }
}
