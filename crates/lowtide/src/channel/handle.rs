//! The application's handle, [`Channel`]: addresses and sockets, waiting on the driver,
//! counters and state, closing. Sending is in `send`, receiving in `recv`.

use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Instant;

use lowtide_proto::{DecisionRecord, Stats, TcpState};

use super::shared::{Inner, ReadGate, Shared};
use crate::error::Error;

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
    pub(super) shared: Arc<Shared>,
    pub(super) local: SocketAddr,
    pub(super) peer: SocketAddr,
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

impl Channel {
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

    pub(super) fn check_open(&self, inner: &Inner) -> Result<(), Error> {
        if let Some(e) = &inner.fatal {
            return Err(e.clone());
        }
        if inner.finished {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// Waits until `poll` returns something, checking it under the lock after every wake-up
    /// of the application side. The notification is armed before the check, so a wake-up
    /// between the check and the wait is not lost.
    pub(super) async fn wait_until<T>(&self, mut poll: impl FnMut(&mut Inner) -> Option<T>) -> T {
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
    pub(super) async fn wait_open(&self, ready: impl Fn(&Inner) -> bool) -> Result<(), Error> {
        self.wait_until(|g| match self.check_open(g) {
            Err(e) => Some(Err(e)),
            Ok(()) => ready(g).then_some(Ok(())),
        })
        .await
    }

    /// Tells the driver to read again if taking messages reopened a read budget of 0
    /// ([`Shared::read_budget`]).
    pub(super) fn reopened_budget(&self, budget_was_zero: bool) {
        if budget_was_zero {
            self.shared.to_driver.notify_one();
        }
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

    /// Recorded controller decisions (see
    /// [`ChannelConfig::record_decisions`](crate::ChannelConfig::record_decisions)).
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
