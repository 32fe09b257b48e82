//! State shared by the application's handles and the driver task (the core behind a mutex,
//! the wake-ups both ways), and the outside limit on reading ([`ReadGate`]).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::AtomicI32;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tokio::sync::Notify;

use lowtide_proto::{Connection, Event, TcpState};

use crate::error::Error;

#[derive(Debug)]
pub(super) struct Inner {
    pub(super) conn: Connection,
    pub(super) events: VecDeque<Event>,
    pub(super) events_dropped: u64,
    /// The transport can take more now: nothing queued, nothing staged, controller open.
    pub(super) can_write: bool,
    /// The driver has exited; `fatal` says why if it was not a clean close.
    pub(super) finished: bool,
    pub(super) fatal: Option<Error>,
    pub(super) lowat: Option<u32>,
    pub(super) last_tcp: TcpState,
    /// Times the driver woke up (readiness, timer or application).
    pub(super) wakeups: u64,
    /// An outside limit on reading (see [`ReadGate`]).
    pub(super) gate: Option<Arc<dyn ReadGate>>,
    /// Failover: the local address of the connection in use, and backups ready (connecting
    /// side) or idle (accepting side).
    pub(super) active_local: SocketAddr,
    pub(super) backups: usize,
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
pub(super) struct Shared {
    pub(super) inner: Mutex<Inner>,
    /// The socket in use (failover replaces it); shared with [`ActiveFd`]s.
    pub(super) fd: Arc<AtomicI32>,
    /// Wakes the driver (app queued data, read messages, closed).
    pub(super) to_driver: Notify,
    /// Wakes the application (messages, events, writability, end).
    pub(super) to_app: Notify,
    pub(super) max_events: usize,
    /// The driver reads no further ahead of the application than this many bytes of whole
    /// messages ([`READ_AHEAD_CHUNKS`] reads).
    pub(super) read_ahead: u64,
}

/// How far, in reads of `read_chunk`, the driver reads ahead of an application that has not
/// taken its messages yet. Without a bound it read until the receive budget (half of
/// `max_reassembly_bytes`) ran out: at bulk rates the driver's loop found the socket readable
/// again and again without yielding, so the application (on the same runtime) took tens of MB
/// at once, up to two thirds of all reads went into a fresh buffer (the buffer pool holds 16,
/// all still held) that had to be faulted in, and the bytes were cold in the cache when the
/// application got them. The kernel
/// holds what we do not read yet, and its window slows the sender, as for any TCP reader.
pub(super) const READ_AHEAD_CHUNKS: u64 = 4;

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes the driver may read now: the core's receive budget, or 0 while at least
    /// `read_ahead` bytes of whole messages wait for the application, unless our sending
    /// direction waits for the peer ([`Connection::awaits_peer`]): its P-ACKs and probe
    /// reports come behind the peer's data, and the controllers and stall detection need
    /// them however slowly the application reads. Then only the receive budget stops us.
    pub(super) fn read_budget(&self, g: &Inner) -> u64 {
        if g.conn.ready_bytes() >= self.read_ahead && !g.conn.awaits_peer() {
            0
        } else {
            g.conn.recv_budget()
        }
    }
}
