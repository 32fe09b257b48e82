//! Socket set-up: connecting, listening and accepting, the socket options of a
//! [`ChannelConfig`], and starting a channel's driver task on an established connection.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::AtomicI32;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::BytesMut;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::Notify;

use lowtide_proto::{Connection, Side};

use super::driver::Driver;
use super::shared::{Inner, Shared, READ_AHEAD_CHUNKS};
use super::Channel;
use crate::config::ChannelConfig;
use crate::error::Error;
use crate::failover::{self, Acceptor, ClientPaths, Paths, ServerPaths};
use crate::sys;
use crate::tls::{self, TlsSession};

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
    let sock = tcp_socket(addr, cfg.mptcp)?;
    bind_local(&sock, addr, cfg.local_addrs.first().copied())?;
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
            let local = stream.local_addr().ok().map(|a| a.ip());
            let paths = ClientPaths::new(addr, cfg.clone(), token, f.backups, lane, local);
            (token, Some(Paths::Client(Box::new(paths))))
        }
        None => (0, None),
    };
    Channel::start(stream, cfg, Side::Client, token, paths, &[], session)
}

/// A TCP socket for `addr`'s family; with `mptcp`, an MPTCP one (RFC 8684: the kernel's
/// path manager adds subflows on the host's other addresses, `ip mptcp endpoint`).
pub(crate) fn tcp_socket(addr: SocketAddr, mptcp: bool) -> Result<TcpSocket, Error> {
    if mptcp {
        let domain = if addr.is_ipv4() {
            socket2::Domain::IPV4
        } else {
            socket2::Domain::IPV6
        };
        let s = socket2::Socket::new(
            domain,
            socket2::Type::STREAM,
            Some(socket2::Protocol::MPTCP),
        )
        .map_err(|e| {
            let hint = match e.raw_os_error() {
                Some(libc::EPROTONOSUPPORT) | Some(libc::ENOPROTOOPT) => {
                    " (MPTCP is off or not built into this kernel: sysctl net.mptcp.enabled=1)"
                }
                _ => "",
            };
            Error::io(format!("socket(IPPROTO_MPTCP){hint}"), e)
        })?;
        s.set_nonblocking(true)
            .map_err(|e| Error::io("fcntl(O_NONBLOCK)", e))?;
        return Ok(TcpSocket::from_std_stream(s.into()));
    }
    if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(|e| Error::io("socket(AF_INET, SOCK_STREAM)", e))
}

/// Makes `sock` leave from `local` (a network path's address; any port), if given.
pub(crate) fn bind_local(
    sock: &TcpSocket,
    peer: SocketAddr,
    local: Option<std::net::IpAddr>,
) -> Result<(), Error> {
    let Some(local) = local else { return Ok(()) };
    if local.is_ipv4() != peer.is_ipv4() {
        return Err(Error::Config(lowtide_proto::ConfigError::new(
            "local_addrs",
            local,
            "addresses of the peer's family (IPv4 or IPv6)",
        )));
    }
    sock.bind(SocketAddr::new(local, 0)).map_err(|e| {
        let hint = if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) {
            " (no interface of this host has that address: check local_addrs)"
        } else {
            ""
        };
        Error::io(format!("bind({local}){hint}"), e)
    })
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
    let sock = tcp_socket(addr, cfg.mptcp)?;
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
}
