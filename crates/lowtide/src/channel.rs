//! A channel: one TCP connection driven by a tokio task around a [`Connection`].
//!
//! The application's handle ([`Channel`]) and the driver task share the connection behind a
//! mutex; the driver owns the socket. The driver loop is: read (within the receive budget) →
//! `handle_bytes`; sample the kernel → `poll_transmit` → `writev` → `handle_written`, repeated
//! while the controller allows (skipped, or on the last sample, when nothing can be staged);
//! publish events; then sleep on exactly the readiness the decision asks for (readable,
//! writable with `TCP_NOTSENT_LOWAT`, a timer, or the app).
//!
//! ```
//! # lowtide::current_thread_runtime()?.block_on(async {
//! # let any = "127.0.0.1:0".parse().unwrap();
//! # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
//! # let (client, server) = tokio::try_join!(
//! #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
//! #     listener.accept(),
//! # )?;
//! use lowtide::{Message, StreamConfig};
//! let video = client.open_stream(StreamConfig::default())?;
//! client.send_when_writable(video, Message::new("frame 1").importance(2)).await?;
//! let m = server.recv().await.expect("a message");
//! assert_eq!((m.stream, m.importance, &m.data[..]), (video, 2, &b"frame 1"[..]));
//! # Ok::<(), lowtide::Error>(())
//! # })?;
//! # Ok::<(), lowtide::Error>(())
//! ```

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use bytes::{BufMut, Bytes, BytesMut};
use tokio::io::Interest;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::Notify;

use lowtide_proto::{
    Connection, DecisionRecord, Event, Message, MessageId, ProtocolError, Received, Side, Stats,
    StreamConfig, TcpState, TransmitWork, Wake,
};

use crate::config::ChannelConfig;
use crate::error::Error;
use crate::failover::{self, Acceptor, ClientPaths, PathEvent, Paths, ServerPaths};
use crate::read_buf;
use crate::sys;
use crate::tls::{self, TlsSession};

#[derive(Debug)]
struct Inner {
    conn: Connection,
    events: VecDeque<Event>,
    events_dropped: u64,
    /// The transport can take more now: nothing queued, nothing staged, controller open.
    can_write: bool,
    /// The driver has exited; `fatal` says why if it was not a clean close.
    finished: bool,
    fatal: Option<Error>,
    lowat: Option<u32>,
    last_tcp: TcpState,
    /// Times the driver woke up (readiness, timer or application).
    wakeups: u64,
    /// An outside limit on reading (see [`ReadGate`]).
    gate: Option<Arc<dyn ReadGate>>,
    /// Failover: the local address of the connection in use, and backups ready (connecting
    /// side) or idle (accepting side).
    active_local: SocketAddr,
    backups: usize,
}

/// An outside limit on how fast a channel reads from its socket, e.g. a receiver's
/// bandwidth sharing (`lowtide-bwss`), which steers the peer's rate through the receive
/// window by reading no faster than a flow's target.
///
/// ```
/// # lowtide::current_thread_runtime()?.block_on(async {
/// # let any = "127.0.0.1:0".parse().unwrap();
/// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
/// # let (client, server) = tokio::try_join!(
/// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
/// #     listener.accept(),
/// # )?;
/// use lowtide::{Message, ReadGate, StreamConfig};
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::sync::Arc;
/// use std::time::Instant;
///
/// /// Reads at most 64 KB at a time and counts what was read.
/// #[derive(Debug, Default)]
/// struct Counting(AtomicUsize);
///
/// impl ReadGate for Counting {
///     fn allowance(&self, _now: Instant) -> (usize, Option<Instant>) {
///         (64 << 10, None)
///     }
///     fn consumed(&self, _now: Instant, n: usize) {
///         self.0.fetch_add(n, Ordering::Relaxed);
///     }
/// }
///
/// let gate = Arc::new(Counting::default());
/// server.set_read_gate(Some(gate.clone()));
/// let s = client.open_stream(StreamConfig::default())?;
/// client.send(s, Message::new(vec![0u8; 10_000]))?;
/// server.recv().await.expect("a message");
/// assert!(gate.0.load(Ordering::Relaxed) >= 10_000);
/// # Ok::<(), lowtide::Error>(())
/// # })?;
/// # Ok::<(), lowtide::Error>(())
/// ```
pub trait ReadGate: Send + Sync + std::fmt::Debug {
    /// Bytes the channel may read now; with 0, when to ask again.
    ///
    /// ```
    /// use lowtide::ReadGate;
    /// use std::time::{Duration, Instant};
    /// /// Allows `0` bytes until `open_at`, then anything.
    /// #[derive(Debug)]
    /// struct OpensAt(Instant);
    /// impl ReadGate for OpensAt {
    ///     fn allowance(&self, now: Instant) -> (usize, Option<Instant>) {
    ///         if now < self.0 { (0, Some(self.0)) } else { (usize::MAX, None) }
    ///     }
    ///     fn consumed(&self, _: Instant, _: usize) {}
    /// }
    /// let t0 = Instant::now();
    /// let gate = OpensAt(t0 + Duration::from_secs(1));
    /// assert_eq!(gate.allowance(t0), (0, Some(t0 + Duration::from_secs(1))));
    /// assert_eq!(gate.allowance(t0 + Duration::from_secs(2)).0, usize::MAX);
    /// ```
    fn allowance(&self, now: Instant) -> (usize, Option<Instant>);
    /// The channel read `n` bytes.
    ///
    /// ```
    /// use lowtide::ReadGate;
    /// use std::sync::Mutex;
    /// use std::time::Instant;
    /// /// A byte budget the channel spends as it reads.
    /// #[derive(Debug)]
    /// struct Budget(Mutex<usize>);
    /// impl ReadGate for Budget {
    ///     fn allowance(&self, _: Instant) -> (usize, Option<Instant>) {
    ///         (*self.0.lock().unwrap(), None)
    ///     }
    ///     fn consumed(&self, _: Instant, n: usize) {
    ///         *self.0.lock().unwrap() -= n;
    ///     }
    /// }
    /// let gate = Budget(Mutex::new(10_000));
    /// gate.consumed(Instant::now(), 4_000);
    /// assert_eq!(gate.allowance(Instant::now()).0, 6_000);
    /// ```
    fn consumed(&self, now: Instant, n: usize);
}

#[derive(Debug)]
struct Shared {
    inner: Mutex<Inner>,
    /// The socket in use (failover replaces it); shared with [`ActiveFd`]s.
    fd: Arc<AtomicI32>,
    /// Wakes the driver (app queued data, read messages, closed).
    to_driver: Notify,
    /// Wakes the application (messages, events, writability, end).
    to_app: Notify,
    max_events: usize,
    /// The driver reads no further ahead of the application than this many bytes of whole
    /// messages ([`READ_AHEAD_CHUNKS`] reads).
    read_ahead: u64,
}

/// How far, in reads of `read_chunk`, the driver reads ahead of an application that has not
/// taken its messages yet. Without a bound it read until the receive budget (half of
/// `max_reassembly_bytes`) ran out: at bulk rates the driver's loop found the socket readable
/// again and again without yielding, so the application (on the same runtime) took tens of MB
/// at once, up to two thirds of all reads went into a fresh buffer (the buffer pool holds 16,
/// all still held) that had to be faulted in, and the bytes were cold in the cache when the
/// application got them. The kernel
/// holds what we do not read yet, and its window slows the sender, as for any TCP reader.
const READ_AHEAD_CHUNKS: u64 = 4;

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes the driver may read now: the core's receive budget, or 0 while at least
    /// `read_ahead` bytes of whole messages wait for the application, unless our sending
    /// direction waits for the peer ([`Connection::awaits_peer`]): its P-ACKs and probe
    /// reports come behind the peer's data, and the controllers and stall detection need
    /// them however slowly the application reads. Then only the receive budget stops us.
    fn read_budget(&self, g: &Inner) -> u64 {
        if g.conn.ready_bytes() >= self.read_ahead && !g.conn.awaits_peer() {
            0
        } else {
            g.conn.recv_budget()
        }
    }
}

/// How long [`Channel::close`] waits for the peer to close too.
pub const CLOSE_LINGER: std::time::Duration = std::time::Duration::from_secs(5);

/// An established lowtide channel. Cheap to clone; all clones drive the same connection.
///
/// ```
/// # lowtide::current_thread_runtime()?.block_on(async {
/// # let any = "127.0.0.1:0".parse().unwrap();
/// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
/// # let (client, server) = tokio::try_join!(
/// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
/// #     listener.accept(),
/// # )?;
/// use lowtide::{Message, StreamConfig};
/// // Clones share the channel: one task sends, another receives.
/// let sender = client.clone();
/// let s = client.open_stream(StreamConfig::default())?;
/// tokio::spawn(async move { sender.send_when_writable(s, Message::new("from a task")).await });
/// let m = server.recv().await.expect("a message");
/// assert_eq!(&m.data[..], b"from a task");
/// assert_eq!(server.peer_addr(), client.local_addr());
/// # Ok::<(), lowtide::Error>(())
/// # })?;
/// # Ok::<(), lowtide::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Channel {
    shared: Arc<Shared>,
    local: SocketAddr,
    peer: SocketAddr,
}

/// The file descriptor of the socket a [`Channel`] uses now ([`Channel::active_fd`]).
#[derive(Debug, Clone)]
pub struct ActiveFd(Arc<AtomicI32>);

impl ActiveFd {
    /// The socket in use at this moment.
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// let fd = client.active_fd();
    /// assert!(lowtide::sys::tcp_info(fd.get()).is_ok());
    /// # let _ = server;
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn get(&self) -> RawFd {
        self.0.load(Ordering::Relaxed)
    }
}

/// Connects to `addr` and starts the driver on the current tokio runtime.
///
/// ```
/// # lowtide::current_thread_runtime()?.block_on(async {
/// use lowtide::{ChannelConfig, Message, StreamConfig};
/// let listener = lowtide::listen("127.0.0.1:0".parse().unwrap(), ChannelConfig::default()).await?;
/// let cfg = ChannelConfig { congestion: Some("cubic".into()), ..ChannelConfig::default() };
/// let (client, server) = tokio::try_join!(
///     lowtide::connect(listener.local_addr()?, cfg),
///     listener.accept(),
/// )?;
/// let s = client.open_stream(StreamConfig::default())?;
/// client.send(s, Message::new("hello"))?;
/// assert_eq!(&server.recv().await.expect("a message").data[..], b"hello");
/// # Ok::<(), lowtide::Error>(())
/// # })?;
/// # Ok::<(), lowtide::Error>(())
/// ```
pub async fn connect(addr: SocketAddr, cfg: ChannelConfig) -> Result<Channel, Error> {
    cfg.validate()?;
    let sock = tcp_socket(addr)?;
    configure(sock.as_raw_fd(), &cfg)?;
    let stream = sock
        .connect(addr)
        .await
        .map_err(|e| Error::io(format!("connect({addr})"), e))?;
    let session = match &cfg.tls {
        Some(t) => Some(tls::connect(&stream, t, addr).await?),
        None => None,
    };
    let (token, paths) = match cfg.transport.failover {
        Some(f) => {
            let token = failover::random_token();
            let lane = cfg.transport.duplicate.is_some();
            let paths = ClientPaths::new(addr, cfg.clone(), token, f.backups, lane);
            (token, Some(Paths::Client(Box::new(paths))))
        }
        None => (0, None),
    };
    Channel::start(stream, cfg, Side::Client, token, paths, &[], session)
}

pub(crate) fn tcp_socket(addr: SocketAddr) -> Result<TcpSocket, Error> {
    if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(|e| Error::io("socket(AF_INET, SOCK_STREAM)", e))
}

/// A listening socket that accepts lowtide channels.
///
/// ```
/// # lowtide::current_thread_runtime()?.block_on(async {
/// use lowtide::{ChannelConfig, Message, StreamConfig};
/// let listener = lowtide::listen("127.0.0.1:0".parse().unwrap(), ChannelConfig::default()).await?;
/// let addr = listener.local_addr()?;
/// // A server: one task per channel, answering every message on a stream of its own.
/// tokio::spawn(async move {
///     while let Ok(ch) = listener.accept().await {
///         tokio::spawn(async move {
///             let answers = ch.open_stream(StreamConfig::default())?;
///             while let Some(m) = ch.recv().await {
///                 ch.send_when_writable(answers, Message::new(m.data)).await?;
///             }
///             Ok::<(), lowtide::Error>(())
///         });
///     }
/// });
/// let client = lowtide::connect(addr, ChannelConfig::default()).await?;
/// let s = client.open_stream(StreamConfig::default())?;
/// client.send(s, Message::new("echo?"))?;
/// assert_eq!(&client.recv().await.expect("the answer").data[..], b"echo?");
/// # Ok::<(), lowtide::Error>(())
/// # })?;
/// # Ok::<(), lowtide::Error>(())
/// ```
#[derive(Debug)]
pub struct Listener {
    inner: ListenerKind,
    cfg: ChannelConfig,
    /// Loaded once from the certificate and key files.
    tls: Option<Arc<rustls::ServerConfig>>,
}

#[derive(Debug)]
enum ListenerKind {
    Plain(TcpListener),
    /// Failover: a task accepts and routes backups to their channels.
    Routed(Acceptor),
}

/// Binds a listener on `addr` (with `SO_REUSEADDR`; for `SO_REUSEPORT` or a socket handed
/// over by a service manager, bind it yourself and use [`Listener::from_std`]).
///
/// ```
/// # lowtide::current_thread_runtime()?.block_on(async {
/// use lowtide::ChannelConfig;
/// // Port 0: the kernel picks one.
/// let listener = lowtide::listen("127.0.0.1:0".parse().unwrap(), ChannelConfig::default()).await?;
/// let addr = listener.local_addr()?;
/// assert_ne!(addr.port(), 0);
/// // An invalid configuration fails before any socket exists; the error names the field.
/// let bad = ChannelConfig { read_chunk: 0, ..ChannelConfig::default() };
/// let e = lowtide::listen(addr, bad).await.unwrap_err();
/// assert!(e.to_string().contains("read_chunk"), "{e}");
/// # Ok::<(), lowtide::Error>(())
/// # })?;
/// # Ok::<(), lowtide::Error>(())
/// ```
pub async fn listen(addr: SocketAddr, cfg: ChannelConfig) -> Result<Listener, Error> {
    cfg.validate()?;
    let tls = cfg.tls.as_ref().map(|t| t.server_config()).transpose()?;
    let sock = tcp_socket(addr)?;
    sock.set_reuseaddr(true)
        .map_err(|e| Error::io("setsockopt(SO_REUSEADDR)", e))?;
    configure(sock.as_raw_fd(), &cfg)?;
    sock.bind(addr)
        .map_err(|e| Error::io(format!("bind({addr})"), e))?;
    let inner = sock
        .listen(128)
        .map_err(|e| Error::io(format!("listen({addr})"), e))?;
    Listener::start(inner, cfg, tls)
}

impl Listener {
    /// Accepts channels on a listening socket the caller bound, in the manner of tokio's
    /// `TcpListener::from_std` and quinn's `Endpoint::new` (which takes a bound UDP socket):
    /// the caller chooses the socket options. One process per core on one port is the case in
    /// point: each binds its own socket with `SO_REUSEPORT` and the kernel spreads incoming
    /// connections over them (`docs/scaling.md`). The socket is made non-blocking and gets the
    /// options of `cfg` (congestion control, `TCP_NODELAY`, buffer sizes) as in
    /// [`listen`]. Call it inside a tokio runtime with I/O enabled.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use socket2::{Domain, Socket, Type};
    /// let addr: std::net::SocketAddr = "0.0.0.0:4000".parse()?;
    /// let sock = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    /// sock.set_reuse_port(true)?;
    /// sock.bind(&addr.into())?;
    /// sock.listen(1024)?;
    /// let l = lowtide::Listener::from_std(sock.into(), lowtide::ChannelConfig::default())?;
    /// let ch = l.accept().await?;
    /// # Ok(()) }
    /// ```
    pub fn from_std(listener: std::net::TcpListener, cfg: ChannelConfig) -> Result<Self, Error> {
        cfg.validate()?;
        let tls = cfg.tls.as_ref().map(|t| t.server_config()).transpose()?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::io(
                "Listener::from_std",
                io::Error::other("called outside a tokio runtime; call it inside one"),
            ));
        }
        listener
            .set_nonblocking(true)
            .map_err(|e| Error::io("fcntl(O_NONBLOCK) on the listener", e))?;
        configure(listener.as_raw_fd(), &cfg)?;
        let inner = TcpListener::from_std(listener)
            .map_err(|e| Error::io("registering the listener with tokio", e))?;
        Self::start(inner, cfg, tls)
    }

    fn start(
        inner: TcpListener,
        cfg: ChannelConfig,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> Result<Self, Error> {
        let inner = if cfg.transport.failover.is_some() {
            ListenerKind::Routed(Acceptor::spawn(inner, cfg.clone())?)
        } else {
            ListenerKind::Plain(inner)
        };
        Ok(Listener { inner, cfg, tls })
    }

    /// The bound address.
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// let any = "127.0.0.1:0".parse().unwrap();
    /// let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// let addr = listener.local_addr()?;
    /// assert!(addr.ip().is_loopback());
    /// assert_ne!(addr.port(), 0); // the kernel picked a port
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn local_addr(&self) -> Result<SocketAddr, Error> {
        match &self.inner {
            ListenerKind::Plain(l) => l.local_addr().map_err(|e| Error::io("getsockname", e)),
            ListenerKind::Routed(a) => Ok(a.local),
        }
    }

    /// Accepts the next channel. With failover on, a task reads the hello of every
    /// connection (at most 5 s each, one after the other) and hands backup connections to
    /// their channels. With TLS: after its handshake, which takes at most
    /// [`TlsConfig::handshake_timeout_ms`](crate::TlsConfig::handshake_timeout_ms). Without
    /// TLS cancel-safe; with TLS, dropping the future mid-handshake drops that connection
    /// (keep one accept future across `select!` iterations).
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// use lowtide::ChannelConfig;
    /// use std::time::Duration;
    /// let listener = lowtide::listen("127.0.0.1:0".parse().unwrap(), ChannelConfig::default()).await?;
    /// // Nobody connects: without TLS, accept is cancel-safe, so a timeout around it is fine.
    /// let waited = tokio::time::timeout(Duration::from_millis(50), listener.accept()).await;
    /// assert!(waited.is_err());
    /// let (client, server) = tokio::try_join!(
    ///     lowtide::connect(listener.local_addr()?, ChannelConfig::default()),
    ///     listener.accept(),
    /// )?;
    /// assert_eq!(server.peer_addr(), client.local_addr());
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub async fn accept(&self) -> Result<Channel, Error> {
        let l = match &self.inner {
            ListenerKind::Routed(acceptor) => {
                let a = acceptor.next().await?;
                let paths = a
                    .token
                    .map(|t| Paths::Server(ServerPaths::new(&acceptor.router, t)));
                return Channel::start(
                    a.stream,
                    self.cfg.clone(),
                    Side::Server,
                    0,
                    paths,
                    &a.bytes,
                    None,
                );
            }
            ListenerKind::Plain(l) => l,
        };
        let (stream, peer) = l.accept().await.map_err(|e| Error::io("accept", e))?;
        configure(stream.as_raw_fd(), &self.cfg)?;
        let session = match (&self.tls, &self.cfg.tls) {
            (Some(server), Some(t)) => {
                let timeout = std::time::Duration::from_millis(t.handshake_timeout_ms);
                Some(tls::accept(&stream, server, timeout, peer).await?)
            }
            _ => None,
        };
        Channel::start(
            stream,
            self.cfg.clone(),
            Side::Server,
            0,
            None,
            &[],
            session,
        )
    }
}

pub(crate) fn configure(fd: RawFd, cfg: &ChannelConfig) -> Result<(), Error> {
    if let Some(cc) = &cfg.congestion {
        sys::set_congestion(fd, cc)?;
    }
    sys::set_nodelay(fd, cfg.nodelay)?;
    if let Some(m) = cfg.mss {
        sys::set_maxseg(fd, m)?;
    }
    if cfg.cork {
        sys::set_cork(fd, true)?;
    }
    if let Some(b) = cfg.sndbuf {
        sys::set_sndbuf(fd, b)?;
    }
    if let Some(b) = cfg.rcvbuf {
        sys::set_rcvbuf(fd, b)?;
    }
    Ok(())
}

impl Channel {
    fn start(
        stream: TcpStream,
        cfg: ChannelConfig,
        side: Side,
        token: u64,
        paths: Option<Paths>,
        read: &[u8],
        mut tls: Option<TlsSession>,
    ) -> Result<Channel, Error> {
        let now = Instant::now();
        let mut conn = Connection::with_token(cfg.transport.clone(), side, now, token)?;
        conn.record_decisions(cfg.record_decisions);
        if !read.is_empty() {
            // the listener read the hello (failover); an error is staged as a CLOSE frame
            let _ = conn.handle_bytes(now, read);
        }
        if let Some(t) = &mut tls {
            // Records that arrived with the handshake's last flight.
            let early = t.decrypt(&[])?;
            if !early.is_empty() {
                conn.handle_read(now, early)?;
            }
        }
        let fd = stream.as_raw_fd();
        let last_tcp = sys::tcp_state(fd, 0)?;
        let local = stream
            .local_addr()
            .map_err(|e| Error::io("getsockname", e))?;
        let peer = stream
            .peer_addr()
            .map_err(|e| Error::io("getpeername", e))?;
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                conn,
                events: VecDeque::new(),
                events_dropped: 0,
                can_write: false,
                finished: false,
                fatal: None,
                lowat: None,
                last_tcp,
                wakeups: 0,
                gate: None,
                active_local: local,
                backups: 0,
            }),
            fd: Arc::new(AtomicI32::new(fd)),
            to_driver: Notify::new(),
            to_app: Notify::new(),
            max_events: cfg.max_events,
            read_ahead: READ_AHEAD_CHUNKS * cfg.read_chunk as u64,
        });
        let span = tracing::debug_span!("lowtide_channel", ?side, %local, %peer);
        let driver = Driver {
            shared: shared.clone(),
            stream,
            rbuf: BytesMut::new(),
            read_chunk: cfg.read_chunk,
            read_eof: false,
            paths,
            lane: None,
            tls,
        };
        tokio::spawn(tracing::Instrument::instrument(driver.run(), span));
        Ok(Channel {
            shared,
            local,
            peer,
        })
    }

    /// Limits reading by `gate` (`None`: read as fast as the protocol's budget allows).
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::{Message, StreamConfig};
    /// // A gate that allows nothing: the server stops reading.
    /// #[derive(Debug)]
    /// struct Closed;
    /// impl lowtide::ReadGate for Closed {
    ///     fn allowance(&self, now: std::time::Instant) -> (usize, Option<std::time::Instant>) {
    ///         (0, Some(now + std::time::Duration::from_millis(50)))
    ///     }
    ///     fn consumed(&self, _: std::time::Instant, _: usize) {}
    /// }
    /// server.set_read_gate(Some(std::sync::Arc::new(Closed)));
    /// let s = client.open_stream(StreamConfig::default())?;
    /// client.send(s, Message::new("held back"))?;
    /// let held = tokio::time::timeout(std::time::Duration::from_millis(200), server.recv()).await;
    /// assert!(held.is_err(), "nothing is read while the gate is closed");
    /// server.set_read_gate(None); // open again
    /// assert_eq!(server.recv().await.expect("a message").data, "held back");
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn set_read_gate(&self, gate: Option<Arc<dyn ReadGate>>) {
        self.shared.lock().gate = gate;
        self.shared.to_driver.notify_one();
    }

    /// Local address.
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// assert_eq!(server.local_addr(), listener.local_addr()?);
    /// assert_eq!(client.local_addr(), server.peer_addr());
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Peer address.
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// assert_eq!(client.peer_addr(), listener.local_addr()?);
    /// assert_eq!(server.peer_addr(), client.local_addr());
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// The socket's file descriptor (for inspection: `TCP_INFO`, `SIOCOUTQ`).
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// // Inspect the kernel's view of the connection.
    /// let info = lowtide::sys::tcp_info(client.raw_fd())?;
    /// assert_eq!(info.tcpi_state, 1); // ESTABLISHED
    /// assert_eq!(client.local_addr(), server.peer_addr());
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn raw_fd(&self) -> RawFd {
        self.shared.fd.load(Ordering::Relaxed)
    }

    /// The socket in use, readable from another task: a `TCP_INFO` sampler that must follow
    /// the channel to a backup connection after a failover (a number read once from
    /// [`raw_fd`](Self::raw_fd) would keep naming the old socket, and once that is closed,
    /// whatever reuses its number). Read it only while the channel is open.
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// let fd = client.active_fd();
    /// let sampler = tokio::spawn(async move { lowtide::sys::tcp_info(fd.get()).map(|i| i.tcpi_state) });
    /// assert_eq!(sampler.await.unwrap()?, 1); // ESTABLISHED
    /// assert_eq!(client.active_fd().get(), client.raw_fd());
    /// # let _ = server;
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn active_fd(&self) -> ActiveFd {
        ActiveFd(self.shared.fd.clone())
    }

    /// Local address of the connection in use (failover moves the channel to backups).
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// // Without failover the channel keeps the connection it started on.
    /// assert_eq!(client.active_local_addr(), client.local_addr());
    /// # let _ = server;
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn active_local_addr(&self) -> SocketAddr {
        self.shared.lock().active_local
    }

    /// Failover: backup connections ready (connecting side) or idle (accepting side).
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// // Backups exist only with `transport.failover` set.
    /// assert_eq!(client.backups(), 0);
    /// assert_eq!(server.backups(), 0);
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn backups(&self) -> usize {
        self.shared.lock().backups
    }

    fn check_open(&self, inner: &Inner) -> Result<(), Error> {
        if let Some(e) = &inner.fatal {
            return Err(e.clone());
        }
        if inner.finished {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// Opens a stream.
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::{Event, StreamConfig};
    /// let audio = client.open_stream(StreamConfig::default())?;
    /// let video = client.open_stream(StreamConfig::default())?;
    /// assert_ne!(audio, video);
    /// // The peer learns of a stream when it is opened.
    /// let mut opened = Vec::new();
    /// while opened.len() < 2 {
    ///     if let Some(Event::StreamOpened { stream, .. }) = server.next_event().await {
    ///         opened.push(stream);
    ///     }
    /// }
    /// assert_eq!(opened, [audio, video]);
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn open_stream(&self, cfg: StreamConfig) -> Result<u64, Error> {
        let mut g = self.shared.lock();
        self.check_open(&g)?;
        let id = g.conn.open_stream(cfg)?;
        g.can_write = false;
        drop(g);
        self.shared.to_driver.notify_one();
        Ok(id)
    }

    /// Queues a message without waiting (see [`writable`](Self::writable)).
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::{Message, StreamConfig};
    /// let s = client.open_stream(StreamConfig::default())?;
    /// let first = client.send(s, Message::new("key frame").importance(3))?;
    /// let second = client.send(s, Message::new("delta"))?;
    /// assert_eq!((first.stream, first.seq, second.seq), (s, 0, 1));
    /// let m = server.recv().await.expect("a message");
    /// assert_eq!((m.seq, m.importance, &m.data[..]), (0, 3, &b"key frame"[..]));
    /// // An unknown stream is an error, not a panic.
    /// assert!(client.send(s + 100, Message::new("lost")).is_err());
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn send(&self, stream: u64, msg: Message) -> Result<MessageId, Error> {
        let mut g = self.shared.lock();
        self.check_open(&g)?;
        let id = g.conn.send(Instant::now(), stream, msg)?;
        g.can_write = false;
        drop(g);
        self.shared.to_driver.notify_one();
        Ok(id)
    }

    /// Queues several messages under one lock (cheaper for small messages).
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::{Message, StreamConfig};
    /// let s = client.open_stream(StreamConfig::default())?;
    /// let ticks = (0..100u32).map(|i| bytes::Bytes::from(i.to_be_bytes().to_vec()));
    /// assert_eq!(client.send_batch(s, ticks)?, 100);
    /// let mut got = Vec::new();
    /// while got.len() < 100 {
    ///     server.recv_many(&mut got, 100).await;
    /// }
    /// assert_eq!(got[99].seq, 99);
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn send_batch(
        &self,
        stream: u64,
        msgs: impl IntoIterator<Item = Bytes>,
    ) -> Result<usize, Error> {
        let mut g = self.shared.lock();
        self.check_open(&g)?;
        let now = Instant::now();
        let mut n = 0;
        for data in msgs {
            g.conn.send(now, stream, Message::new(data))?;
            n += 1;
        }
        g.can_write = false;
        drop(g);
        self.shared.to_driver.notify_one();
        Ok(n)
    }

    /// Waits until the transport can take more now: nothing of ours is queued or staged and
    /// the latency controller allows a write. A sender that wants the lowest latency writes one
    /// message each time this returns.
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::{Message, StreamConfig};
    /// let s = client.open_stream(StreamConfig::default())?;
    /// // The lowest-latency sender: build each message only when the transport can take it, so
    /// // it carries the freshest data.
    /// for i in 0..10u8 {
    ///     client.writable().await?;
    ///     client.send(s, Message::new(vec![i; 1000]))?;
    /// }
    /// # for _ in 0..10 { server.recv().await.expect("a message"); }
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub async fn writable(&self) -> Result<(), Error> {
        self.wait_open(|g| g.can_write).await
    }

    /// [`writable`](Self::writable), then [`send`](Self::send).
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::{Message, StreamConfig};
    /// let s = client.open_stream(StreamConfig::default())?;
    /// for i in 0..3u8 {
    ///     let id = client.send_when_writable(s, Message::new(vec![i; 500])).await?;
    ///     assert_eq!(id.seq, u64::from(i));
    /// }
    /// for i in 0..3u8 {
    ///     assert_eq!(server.recv().await.expect("a message").data[0], i);
    /// }
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub async fn send_when_writable(&self, stream: u64, msg: Message) -> Result<MessageId, Error> {
        self.writable().await?;
        self.send(stream, msg)
    }

    /// Waits until fewer than `bytes` are queued in lowtide (for bulk senders that keep the
    /// queue topped up rather than writing one message per [`writable`](Self::writable)).
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::{Message, StreamConfig};
    /// // The receiver reads as the data comes (a receiver that does not read pushes back).
    /// let reader = tokio::spawn(async move {
    ///     let mut n = 0;
    ///     while n < 64 && server.recv().await.is_some() {
    ///         n += 1;
    ///     }
    ///     n
    /// });
    /// let s = client.open_stream(StreamConfig::default())?;
    /// // A bulk sender keeps about 256 KB queued in lowtide.
    /// for _ in 0..64 {
    ///     client.queue_below(256 << 10).await?;
    ///     client.send(s, Message::new(vec![0u8; 64 << 10]))?;
    /// }
    /// client.flush().await?;
    /// assert_eq!(client.queued_bytes(), 0);
    /// assert_eq!(reader.await.expect("the reader"), 64);
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub async fn queue_below(&self, bytes: u64) -> Result<(), Error> {
        self.wait_open(|g| g.conn.queued_bytes() < bytes).await
    }

    /// Waits until everything queued has been handed to the kernel (or cancelled).
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::{Message, StreamConfig};
    /// let s = client.open_stream(StreamConfig::default())?;
    /// client.send(s, Message::new(vec![0u8; 200_000]))?;
    /// assert!(client.queued_bytes() > 0); // the driver has not run yet
    /// client.flush().await?;
    /// assert_eq!(client.queued_bytes(), 0); // all handed to the kernel
    /// # server.recv().await.expect("a message");
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub async fn flush(&self) -> Result<(), Error> {
        self.wait_open(|g| !g.conn.has_queued() && g.conn.staged_len() == 0)
            .await
    }

    /// Waits until `poll` returns something, checking it under the lock after every wake-up
    /// of the application side. The notification is armed before the check, so a wake-up
    /// between the check and the wait is not lost.
    async fn wait_until<T>(&self, mut poll: impl FnMut(&mut Inner) -> Option<T>) -> T {
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

    /// [`wait_until`](Self::wait_until) `ready`, failing as soon as the channel is not open.
    async fn wait_open(&self, ready: impl Fn(&Inner) -> bool) -> Result<(), Error> {
        self.wait_until(|g| match self.check_open(g) {
            Err(e) => Some(Err(e)),
            Ok(()) => ready(g).then_some(Ok(())),
        })
        .await
    }

    /// Tells the driver to read again if taking messages reopened a read budget of 0
    /// ([`Shared::read_budget`]).
    fn reopened_budget(&self, budget_was_zero: bool) {
        if budget_was_zero {
            self.shared.to_driver.notify_one();
        }
    }

    /// The stream's bit rate changed, bytes per second (DBAT sizes its slow-start buffer from
    /// it; other controllers ignore it).
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// use lowtide::proto::controller::DbatConfig;
    /// use lowtide::{ChannelConfig, ControllerConfig, Message, StreamConfig};
    /// let any = "127.0.0.1:0".parse().unwrap();
    /// let listener = lowtide::listen(any, ChannelConfig::default()).await?;
    /// let dbat = ChannelConfig::with_controller(ControllerConfig::Dbat(DbatConfig::default()));
    /// let (client, server) = tokio::try_join!(
    ///     lowtide::connect(listener.local_addr()?, dbat),
    ///     listener.accept(),
    /// )?;
    /// // The encoder moved from 320 to 640 kbit/s: DBAT plans its slow start for the new rate
    /// // (the effect on the buffer: `lowtide::proto::Connection::set_stream_rate`).
    /// client.set_stream_rate(80_000);
    /// let s = client.open_stream(StreamConfig::default())?;
    /// client.send(s, Message::new(vec![0u8; 10_000]))?;
    /// assert_eq!(server.recv().await.expect("a message").data.len(), 10_000);
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn set_stream_rate(&self, bytes_per_sec: u64) {
        self.shared.lock().conn.set_stream_rate(bytes_per_sec);
    }

    /// Asks for a packet-pair probe (`Event::Probed` carries the result); `false` if the peer
    /// does not answer probes or one is in flight.
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::{Event, Message, StreamConfig};
    /// assert!(!client.request_probe()); // the server's hello (it answers probes) is not read yet
    /// let s = server.open_stream(StreamConfig::default())?;
    /// server.send(s, Message::new("hello"))?;
    /// client.recv().await.expect("a message"); // now it is
    /// assert!(client.request_probe());
    /// while let Some(e) = client.next_event().await {
    ///     if let Event::Probed(p) = e {
    ///         assert!(p.second_len > 0); // two packets crossed loopback and were timed
    ///         break;
    ///     }
    /// }
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn request_probe(&self) -> bool {
        let requested = self.shared.lock().conn.request_probe();
        self.shared.to_driver.notify_one();
        requested
    }

    /// Bytes queued in lowtide (not yet staged for the kernel).
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::{Message, StreamConfig};
    /// let s = client.open_stream(StreamConfig::default())?;
    /// assert_eq!(client.queued_bytes(), 0);
    /// client.send(s, Message::new(vec![0u8; 3000]))?;
    /// assert!(client.queued_bytes() >= 3000); // payload plus frame headers
    /// client.flush().await?;
    /// assert_eq!(client.queued_bytes(), 0);
    /// # server.recv().await.expect("a message");
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn queued_bytes(&self) -> u64 {
        self.shared.lock().conn.queued_bytes()
    }

    /// Withdraws a message not yet completely written; `false` if too late.
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::{Event, Message, StreamConfig};
    /// let s = client.open_stream(StreamConfig::default())?;
    /// // On a current-thread runtime the driver has not run yet: the message is still queued.
    /// let id = client.send(s, Message::new(vec![0u8; 4000]))?;
    /// assert!(client.cancel(id));
    /// assert_eq!(client.stats().cancelled_unsent, 1);
    /// // The driver publishes the event.
    /// while let Some(e) = client.next_event().await {
    ///     if let Event::Cancelled { id: gone, sent, .. } = e {
    ///         assert_eq!((gone, sent), (id, 0));
    ///         break;
    ///     }
    /// }
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn cancel(&self, id: MessageId) -> bool {
        let done = self.shared.lock().conn.cancel(id);
        self.shared.to_driver.notify_one();
        done
    }

    /// Closes our direction of a stream once its queue drains.
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::{Event, StreamConfig};
    /// let s = client.open_stream(StreamConfig::default())?;
    /// client.close_stream(s)?;
    /// loop {
    ///     match server.next_event().await {
    ///         Some(Event::StreamClosed { stream }) if stream == s => break,
    ///         Some(_) => continue,
    ///         None => panic!("channel ended first"),
    ///     }
    /// }
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn close_stream(&self, stream: u64) -> Result<(), Error> {
        self.shared.lock().conn.close_stream(stream)?;
        self.shared.to_driver.notify_one();
        Ok(())
    }

    /// Next complete message; `None` once the channel is closed and drained.
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::{Message, StreamConfig};
    /// let s = client.open_stream(StreamConfig::default())?;
    /// client.send(s, Message::new("hello"))?;
    /// let m = server.recv().await.expect("a message");
    /// assert_eq!((m.stream, m.seq, &m.data[..]), (s, 0, &b"hello"[..]));
    /// client.close(0, "done").await;
    /// assert!(server.recv().await.is_none()); // closed and drained
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub async fn recv(&self) -> Option<Received> {
        let (m, budget_was_zero) = self
            .wait_until(|g| {
                let budget_was_zero = self.shared.read_budget(g) == 0;
                match g.conn.poll_message() {
                    Some(m) => Some(Some((m, budget_was_zero))),
                    None => g.finished.then_some(None),
                }
            })
            .await?;
        self.reopened_budget(budget_was_zero);
        Some(m)
    }

    /// Waits for at least one message and moves up to `max` ready ones into `out` under one
    /// lock; returns how many (0 once the channel is finished and drained).
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::{Message, StreamConfig};
    /// let s = client.open_stream(StreamConfig::default())?;
    /// for i in 0..5u8 {
    ///     client.send(s, Message::new(vec![i]))?;
    /// }
    /// let mut got = Vec::new();
    /// while got.len() < 5 {
    ///     let n = server.recv_many(&mut got, 2).await;
    ///     assert!((1..=2).contains(&n)); // never more than `max`
    /// }
    /// assert_eq!(got.iter().map(|m| m.data[0]).collect::<Vec<_>>(), [0, 1, 2, 3, 4]);
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub async fn recv_many(&self, out: &mut Vec<Received>, max: usize) -> usize {
        let (n, budget_was_zero) = self
            .wait_until(|g| {
                let budget_was_zero = self.shared.read_budget(g) == 0;
                let mut n = 0;
                while n < max {
                    match g.conn.poll_message() {
                        Some(m) => out.push(m),
                        None => break,
                    }
                    n += 1;
                }
                (n > 0 || g.finished).then_some((n, budget_was_zero))
            })
            .await;
        if n > 0 {
            self.reopened_budget(budget_was_zero);
        }
        n
    }

    /// A message if one is ready.
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::{Message, StreamConfig};
    /// assert!(server.try_recv().is_none()); // nothing sent yet
    /// let s = client.open_stream(StreamConfig::default())?;
    /// client.send(s, Message::new("x"))?;
    /// let first = server.recv().await.expect("a message");
    /// assert_eq!(&first.data[..], b"x");
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn try_recv(&self) -> Option<Received> {
        let mut g = self.shared.lock();
        let budget_was_zero = self.shared.read_budget(&g) == 0;
        let m = g.conn.poll_message();
        drop(g);
        self.reopened_budget(m.is_some() && budget_was_zero);
        m
    }

    /// Next event; `None` once the channel is finished and no events are left.
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::{Event, Message, StreamConfig};
    /// let s = client.open_stream(StreamConfig::default())?;
    /// let id = client.send(s, Message::new(vec![0u8; 1000]))?;
    /// // Written (in the kernel), then Acked (the receiver's P-ACK covers it).
    /// loop {
    ///     match client.next_event().await {
    ///         Some(Event::Acked { id: acked, times, .. }) if acked == id => {
    ///             assert!(times.acked.is_some());
    ///             break;
    ///         }
    ///         Some(_) => continue,
    ///         None => panic!("channel ended first"),
    ///     }
    /// }
    /// # let _ = server;
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub async fn next_event(&self) -> Option<Event> {
        self.wait_until(|g| match g.events.pop_front() {
            Some(e) => Some(Some(e)),
            None => g.finished.then_some(None),
        })
        .await
    }

    /// All events available now.
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::{Event, Message, StreamConfig};
    /// let s = client.open_stream(StreamConfig::default())?;
    /// let id = client.send(s, Message::new("x"))?;
    /// client.flush().await?;
    /// let events = client.drain_events();
    /// assert!(events.iter().any(|e| matches!(e, Event::Written { id: w, .. } if *w == id)));
    /// assert!(client.drain_events().is_empty()); // drained
    /// # server.recv().await.expect("a message");
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn drain_events(&self) -> Vec<Event> {
        self.shared.lock().events.drain(..).collect()
    }

    /// Events dropped because the application did not keep up (`max_events`).
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// use lowtide::{ChannelConfig, Message, StreamConfig};
    /// let any = "127.0.0.1:0".parse().unwrap();
    /// let listener = lowtide::listen(any, ChannelConfig::default()).await?;
    /// // Keep at most 16 events (the smallest allowed): the application never reads them here.
    /// let cfg = ChannelConfig { max_events: 16, ..ChannelConfig::default() };
    /// let (client, server) = tokio::try_join!(
    ///     lowtide::connect(listener.local_addr()?, cfg),
    ///     listener.accept(),
    /// )?;
    /// let s = client.open_stream(StreamConfig::default())?;
    /// for _ in 0..30 {
    ///     client.send(s, Message::new("x"))?;
    /// }
    /// client.flush().await?; // thirty `Written` events, only sixteen kept
    /// assert!(client.events_dropped() >= 14);
    /// assert!(client.drain_events().len() <= 16);
    /// # let _ = server;
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn events_dropped(&self) -> u64 {
        self.shared.lock().events_dropped
    }

    /// Protocol counters.
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::{Message, StreamConfig};
    /// let s = client.open_stream(StreamConfig::default())?;
    /// client.send(s, Message::new("counted"))?;
    /// client.flush().await?;
    /// server.recv().await.expect("a message");
    /// assert_eq!(client.stats().messages_written, 1);
    /// assert_eq!(server.stats().messages_received, 1);
    /// assert_eq!(client.events_dropped(), 0);
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn stats(&self) -> Stats {
        *self.shared.lock().conn.stats()
    }

    /// Receive-side memory held now (unparsed bytes, partial and unread messages).
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::{Message, StreamConfig};
    /// let s = client.open_stream(StreamConfig::default())?;
    /// client.send(s, Message::new(vec![0u8; 50_000]))?;
    /// client.send(s, Message::new("last"))?;
    /// let first = server.recv().await.expect("a message");
    /// assert_eq!(first.data.len(), 50_000);
    /// while server.recv().await.expect("a message").data != "last" {}
    /// assert_eq!(server.recv_memory(), 0); // everything read was taken
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn recv_memory(&self) -> u64 {
        self.shared.lock().conn.recv_memory()
    }

    /// The last kernel snapshot the driver took.
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::{Message, StreamConfig};
    /// let s = client.open_stream(StreamConfig::default())?;
    /// client.send(s, Message::new(vec![0u8; 100_000]))?;
    /// client.flush().await?;
    /// let tcp = client.last_tcp_state(); // MinBuf samples TCP_INFO before each write
    /// assert!(tcp.cwnd > 0 && tcp.mss > 0);
    /// assert!(client.driver_wakeups() > 0);
    /// # let _ = server;
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn last_tcp_state(&self) -> TcpState {
        self.shared.lock().last_tcp
    }

    /// How many bytes a message sent now on `stream` with `importance` may carry so that,
    /// framed, it fills exactly one segment of the connection's MSS (the last `TCP_INFO`
    /// sample's): Goel et al.'s application-level framing, one message per packet
    /// ([`lowtide_proto::Connection::one_segment_payload`]). Without TLS (a record adds its
    /// own overhead).
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::{Message, StreamConfig};
    /// let s = client.open_stream(StreamConfig::default())?;
    /// let n = client.one_segment_payload(s, 0).expect("an open stream");
    /// assert!(n < client.last_tcp_state().mss_or_default() as usize);
    /// client.send(s, Message::new(vec![0u8; n]))?;
    /// assert_eq!(server.recv().await.expect("a message").data.len(), n);
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn one_segment_payload(&self, stream: u64, importance: u8) -> Option<usize> {
        let g = self.shared.lock();
        let mss = g.last_tcp.mss_or_default();
        g.conn
            .one_segment_payload(Instant::now(), stream, importance, mss)
    }

    /// The latency controller's queue average and threshold, bytes, if it keeps them (DBAT,
    /// docs/dbat.md); `None` for the others.
    pub fn controller_queue_level(&self) -> Option<(u64, u64)> {
        self.shared.lock().conn.controller_queue_level()
    }

    /// How often the driver task woke up: a measure of system-call and scheduling overhead
    /// (and evidence that blocked controllers wait on events, not on a polling loop).
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::{Message, StreamConfig};
    /// let before = client.driver_wakeups();
    /// let s = client.open_stream(StreamConfig::default())?;
    /// client.send(s, Message::new("wake up"))?;
    /// client.flush().await?;
    /// assert!(client.driver_wakeups() > before);
    /// # server.recv().await.expect("a message");
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn driver_wakeups(&self) -> u64 {
        self.shared.lock().wakeups
    }

    /// `TCP_NOTSENT_LOWAT` the driver last set, if any.
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::{Message, StreamConfig};
    /// let s = client.open_stream(StreamConfig::default())?;
    /// client.send(s, Message::new("small"))?;
    /// client.flush().await?;
    /// // MinBuf sets TCP_NOTSENT_LOWAT only while it blocks writes; a small message never blocks.
    /// assert_eq!(client.notsent_lowat_set(), None);
    /// # server.recv().await.expect("a message");
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn notsent_lowat_set(&self) -> Option<u32> {
        self.shared.lock().lowat
    }

    /// Recorded controller decisions (see [`ChannelConfig::record_decisions`]).
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// use lowtide::{ChannelConfig, Message, StreamConfig};
    /// let listener = lowtide::listen("127.0.0.1:0".parse().unwrap(), ChannelConfig::default()).await?;
    /// let cfg = ChannelConfig { record_decisions: 10_000, ..ChannelConfig::default() };
    /// let (client, _server) = tokio::try_join!(lowtide::connect(listener.local_addr()?, cfg), listener.accept())?;
    /// let s = client.open_stream(StreamConfig::default())?;
    /// client.send(s, Message::new(vec![0u8; 200_000]))?;
    /// client.flush().await?;
    /// let log = client.drain_decisions();
    /// assert!(!log.is_empty());
    /// // MIN_BUF(1, 3): the limit is (cwnd + 3) segments.
    /// let r = &log[0];
    /// assert_eq!(r.decision.limit, u64::from(r.tcp.cwnd + 3) * u64::from(r.tcp.mss));
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn drain_decisions(&self) -> Vec<DecisionRecord> {
        self.shared.lock().conn.drain_decisions()
    }

    /// The error that ended the channel, if any.
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// use lowtide::proto::ProtocolError;
    /// use lowtide::{ChannelConfig, Error};
    /// use std::io::Write;
    /// // A "server" that answers in HTTP: the channel ends with a protocol error.
    /// let http = std::net::TcpListener::bind("127.0.0.1:0")?;
    /// let addr = http.local_addr()?;
    /// std::thread::spawn(move || {
    ///     let (mut s, _) = http.accept()?;
    ///     s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n")?;
    ///     std::thread::sleep(std::time::Duration::from_millis(200));
    ///     Ok::<(), std::io::Error>(())
    /// });
    /// let ch = lowtide::connect(addr, ChannelConfig::default()).await?;
    /// ch.finished().await;
    /// assert!(ch.is_finished());
    /// let e = ch.error().expect("ended with an error");
    /// assert!(matches!(e, Error::Protocol(ProtocolError::Decode(_))), "{e}");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn error(&self) -> Option<Error> {
        self.shared.lock().fatal.clone()
    }

    /// Whether the driver has finished.
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// assert!(!client.is_finished());
    /// server.close(0, "bye").await;
    /// client.finished().await;
    /// assert!(client.is_finished());
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn is_finished(&self) -> bool {
        self.shared.lock().finished
    }

    /// Closes the channel: queued data is dropped (call [`flush`](Self::flush) first to send
    /// it), a CLOSE frame is sent, the write side shut down. Waits until the driver has
    /// finished (the peer closed too, or EOF), at most [`CLOSE_LINGER`]; after that the driver
    /// finishes in the background.
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// client.close(0, "bye").await;
    /// assert!(client.is_finished());
    /// assert!(client.error().is_none()); // a clean close
    /// server.finished().await; // the peer's driver ends too
    /// assert!(server.recv().await.is_none());
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub async fn close(&self, code: u64, reason: &str) {
        self.shared.lock().conn.close(code, reason);
        self.shared.to_driver.notify_one();
        let _ = tokio::time::timeout(CLOSE_LINGER, self.finished()).await;
    }

    /// Waits until the driver has finished.
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// // The client's driver ends once the server closes.
    /// server.close(7, "shutting down").await;
    /// client.finished().await;
    /// assert!(client.is_finished() && client.recv().await.is_none());
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub async fn finished(&self) {
        self.wait_until(|g| g.finished.then_some(())).await
    }
}

struct Driver {
    shared: Arc<Shared>,
    stream: TcpStream,
    /// With TLS, ciphertext reads land here (plain reads go into the core's read buffer).
    rbuf: BytesMut,
    read_chunk: usize,
    read_eof: bool,
    /// Failover's other connections.
    paths: Option<Paths>,
    /// The duplicate lane (`lowtide_proto::failover::duplicate`): written by the connecting
    /// side, read by the accepting side.
    lane: Option<TcpStream>,
    /// The TLS record layer, if the channel is encrypted.
    tls: Option<TlsSession>,
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
    async fn run(mut self) {
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
    fn kernel_written(&self, g: &Inner) -> u64 {
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

/// How often the lane's writer looks again while its MIN_BUF blocks or its kernel is full
/// (the lane carries few bytes; no `TCP_NOTSENT_LOWAT` is kept on it).
const LANE_RECHECK: std::time::Duration = std::time::Duration::from_millis(1);

impl Driver {
    /// Connecting side: stages copies as the lane's MIN_BUF allows (on the lane socket's own
    /// `TCP_INFO` and `SIOCOUTQ`) and writes them. Returns when to look again, if copies wait.
    /// A lane whose socket fails is dropped (and replaced), never the channel.
    fn lane_write_phase(&mut self) -> Option<Instant> {
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
    fn lane_read(&mut self) {
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
    fn drop_lane(&mut self) {
        self.lane = None;
        self.shared.lock().conn.lane_lost();
        if let Some(Paths::Client(p)) = &mut self.paths {
            p.lane_lost();
        }
    }

    /// Connecting side: the core detected a stall; move to the oldest ready backup.
    /// Returns whether the channel switched.
    fn switch_if_stalled(&mut self) -> bool {
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

    fn on_path_event(&mut self, ev: Option<PathEvent>) {
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

fn log_protocol_error(e: &ProtocolError) {
    tracing::warn!(error = %e, code = e.code(), "peer violated the protocol; closing");
}
