//! For Rust programs that link BWSS directly: register TCP connections with the host's
//! daemon and pace their reads, as the `LD_PRELOAD` library does for unmodified programs.
//!
//! ```no_run
//! # fn demo() -> std::io::Result<()> {
//! use std::io::Read;
//! let steering = lowtide_bwss::Steering::connect("my-player")?;
//! let stream = std::net::TcpStream::connect("10.1.1.1:8000")?;
//! let mut paced = steering.paced_reader(stream)?;
//! let mut buf = vec![0; 65536];
//! let n = paced.read(&mut buf)?; // at most what the flow's target allows
//! # Ok(()) }
//! ```
//!
//! A lowtide [`Channel`](lowtide::Channel) is one TCP socket: register it with
//! [`Steering::register_channel`] and its driver reads within the flow's budget (feature
//! `channel`, on by default).

use std::io::{self, Read};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crate::client::Client;
use crate::pacer::{Allowance, Pacer};
use crate::shm::{monotonic_ns, Region, Slot};
use crate::tcp;
use crate::wire::socket_name;

/// This process's connection to the host's daemon.
#[derive(Clone)]
pub struct Steering {
    client: Arc<Mutex<Client>>,
    region: Arc<Region>,
}

impl Steering {
    /// Connects to the daemon of this network namespace (`LOWTIDE_BWSS_SOCKET` or the
    /// default); `program` is the name rules match.
    pub fn connect(program: &str) -> io::Result<Steering> {
        Steering::connect_to(&socket_name(), program)
    }

    /// Connects to the daemon at `socket` (`@name` or a path).
    pub fn connect_to(socket: &str, program: &str) -> io::Result<Steering> {
        let mut client = Client::hello(socket, std::process::id(), program)?;
        let region = client
            .take_region()
            .ok_or_else(|| io::Error::other("the daemon sent no shared memory"))?;
        Ok(Steering {
            client: Arc::new(Mutex::new(client)),
            region: Arc::new(region),
        })
    }

    fn client(&self) -> MutexGuard<'_, Client> {
        self.client.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers the TCP connection on `fd` (IPv4 or IPv6); unregistered when the returned
    /// flow is dropped.
    pub fn register(&self, fd: RawFd) -> io::Result<SteeredFlow> {
        let inode = tcp::tcp_inode(fd)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a TCP socket"))?;
        let (local, remote) = tcp::addresses(fd)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "no peer address"))?;
        let slot = self.client().register(inode, local, remote)?;
        Ok(SteeredFlow {
            steering: self.clone(),
            fd,
            slot,
            inode,
            pacer: Mutex::new(Pacer::default()),
        })
    }

    /// `stream` read through its flow's budget.
    pub fn paced_reader<R: Read + AsRawFd>(&self, stream: R) -> io::Result<PacedReader<R>> {
        let flow = self.register(stream.as_raw_fd())?;
        Ok(PacedReader { stream, flow })
    }

    /// Registers a lowtide channel's socket and gates its driver's reads by the budget.
    #[cfg(feature = "channel")]
    pub fn register_channel(&self, channel: &lowtide::Channel) -> io::Result<Arc<SteeredFlow>> {
        let flow = Arc::new(self.register(channel.raw_fd())?);
        channel.set_read_gate(Some(flow.clone()));
        Ok(flow)
    }
}

/// One registered TCP connection.
pub struct SteeredFlow {
    steering: Steering,
    /// The socket, for its window clamp (its owner keeps it open while the flow lives).
    fd: RawFd,
    slot: u32,
    inode: u64,
    pacer: Mutex<Pacer>,
}

impl std::fmt::Debug for SteeredFlow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SteeredFlow")
            .field("slot", &self.slot)
            .field("inode", &self.inode)
            .finish()
    }
}

impl SteeredFlow {
    /// The slot, if it is still ours and the daemon is alive (else: pass through).
    fn live_slot(&self) -> Option<&Slot> {
        let r = &self.steering.region;
        let s = r.slot(self.slot)?;
        (r.alive(monotonic_ns())
            && s.inode.load(std::sync::atomic::Ordering::Acquire) == self.inode)
            .then_some(s)
    }

    fn pacer(&self) -> MutexGuard<'_, Pacer> {
        self.pacer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What may be read now; `None`: unsteered (read freely).
    pub fn allowance(&self, now: Instant) -> Option<Allowance> {
        let slot = self.live_slot()?;
        let mut pacer = self.pacer();
        let a = pacer.allowance(slot, now);
        pacer.maintain(self.fd, slot, now);
        a
    }

    /// `n` bytes were delivered to the application.
    pub fn consumed(&self, now: Instant, n: usize) {
        if let Some(slot) = self.live_slot() {
            self.pacer().consumed(slot, now, n as u64);
        }
    }

    /// The flow's target now, bit/s (`None`: unsteered).
    pub fn target_bps(&self) -> Option<f64> {
        let rate = self
            .live_slot()?
            .rate
            .load(std::sync::atomic::Ordering::Relaxed);
        (rate > 0).then_some(rate as f64 * 8.0)
    }
}

impl Drop for SteeredFlow {
    fn drop(&mut self) {
        let _ = self.steering.client().unregister(self.inode);
    }
}

#[cfg(feature = "channel")]
impl lowtide::ReadGate for SteeredFlow {
    fn allowance(&self, now: Instant) -> (usize, Option<Instant>) {
        match SteeredFlow::allowance(self, now) {
            None => (usize::MAX, None),
            Some(a) if a.open(usize::MAX) => (a.bytes as usize, None),
            Some(a) => (0, Some(a.ready)),
        }
    }

    fn consumed(&self, now: Instant, n: usize) {
        SteeredFlow::consumed(self, now, n)
    }
}

/// A blocking reader paced by its flow's budget (it sleeps, as a blocking read waits for
/// data; use [`SteeredFlow::allowance`] in non-blocking code).
pub struct PacedReader<R> {
    stream: R,
    flow: SteeredFlow,
}

impl<R> PacedReader<R> {
    pub fn flow(&self) -> &SteeredFlow {
        &self.flow
    }

    pub fn get_ref(&self) -> &R {
        &self.stream
    }
}

impl<R: Read> Read for PacedReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let now = Instant::now();
            let allowed = match self.flow.allowance(now) {
                None => buf.len(),
                Some(a) if a.open(buf.len()) => buf.len().min(a.bytes as usize),
                Some(a) => {
                    std::thread::sleep(a.ready.saturating_duration_since(now));
                    continue;
                }
            };
            let n = self.stream.read(&mut buf[..allowed])?;
            self.flow.consumed(Instant::now(), n);
            return Ok(n);
        }
    }
}
