//! The library's state: which descriptors are registered flows, the connection to the
//! daemon, and each flow's token bucket.
//!
//! The hot path (a read on any descriptor) costs one atomic load when the descriptor is not
//! a registered flow; a registered one adds the daemon's heartbeat check and the bucket.
//! Locks are tiny spin locks that the `fork` handlers take and release, so a child never
//! inherits one held by a thread that does not exist there.

use std::cell::UnsafeCell;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

use lowtide_bwss::client::Client;
use lowtide_bwss::pacer::{Allowance, Pacer};
use lowtide_bwss::shm::{monotonic_ns, Region, Slot};
use lowtide_bwss::tcp::{addresses, sockaddr, tcp_inode};

/// Descriptors above this are passed through (a limit named in docs/bwss.md).
pub const MAX_FDS: usize = 65536;
/// How long to wait before trying an absent or dead daemon again.
const RETRY_NS: u64 = 1_000_000_000;

/// Per descriptor: slot + 1 (0: not a flow) and the socket's inode.
static SLOT: [AtomicU32; MAX_FDS] = [const { AtomicU32::new(0) }; MAX_FDS];
static INODE: [AtomicU64; MAX_FDS] = [const { AtomicU64::new(0) }; MAX_FDS];
/// The daemon's shared memory (leaked: readers on other threads may still hold it).
static REGION: AtomicPtr<Region> = AtomicPtr::new(std::ptr::null_mut());
/// No daemon contact before this time (monotonic ns).
static RETRY_AT: AtomicU64 = AtomicU64::new(0);
static WARNED: AtomicBool = AtomicBool::new(false);
/// Set in a forked child: register again under the child's own connection.
static FORKED: AtomicBool = AtomicBool::new(false);

static CONTROL: SpinLock<Option<Client>> = SpinLock::new(None);
static PACERS: SpinLock<Vec<Pacer>> = SpinLock::new(Vec::new());

/// A minimal lock whose holder never sleeps in a system call except the daemon's bounded
/// requests; taken by `fork`'s prepare handler so the child gets it free.
pub struct SpinLock<T> {
    held: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: access to `value` is serialised by `held`.
unsafe impl<T: Send> Sync for SpinLock<T> {}

impl<T> SpinLock<T> {
    pub const fn new(v: T) -> Self {
        Self {
            held: AtomicBool::new(false),
            value: UnsafeCell::new(v),
        }
    }

    fn acquire(&self) {
        while self
            .held
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::thread::yield_now();
        }
    }

    fn release(&self) {
        self.held.store(false, Ordering::Release);
    }

    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        self.acquire();
        // SAFETY: we hold the lock.
        let r = f(unsafe { &mut *self.value.get() });
        self.release();
        r
    }
}

/// `fork` handlers: hold both locks across the fork; the child re-registers its flows.
pub fn install_fork_handlers() {
    extern "C" fn prepare() {
        CONTROL.acquire();
        PACERS.acquire();
    }
    extern "C" fn parent() {
        PACERS.release();
        CONTROL.release();
    }
    extern "C" fn child() {
        // The connection to the daemon is the parent's: close our copy, keep the memory.
        // SAFETY: we hold the lock (taken in prepare).
        let control = unsafe { &mut *CONTROL.value.get() };
        if let Some(mut c) = control.take() {
            if let Some(r) = c.take_region() {
                std::mem::forget(r);
            }
            // SAFETY: closing the child's copy of our own socket.
            unsafe { libc::close(c.socket().as_raw_fd()) };
            std::mem::forget(c);
        }
        FORKED.store(true, Ordering::Relaxed);
        PACERS.release();
        CONTROL.release();
    }
    // SAFETY: registering plain functions.
    unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
}

/// A registered flow as the hot path sees it.
pub struct Flow {
    pub slot: &'static Slot,
}

/// The flow behind `fd`, if it is registered and the daemon is alive.
#[inline]
pub fn lookup(fd: RawFd) -> Option<Flow> {
    let i = usize::try_from(fd).ok().filter(|&i| i < MAX_FDS)?;
    let s = SLOT[i].load(Ordering::Acquire);
    if s == 0 {
        return None;
    }
    lookup_registered(i, s - 1)
}

fn lookup_registered(i: usize, slot: u32) -> Option<Flow> {
    if FORKED.swap(false, Ordering::Relaxed) {
        reconnect(true);
    }
    let region = region()?;
    if !region.alive(monotonic_ns()) {
        // The daemon died or restarts: pass through, and register again once it is back.
        reconnect(false);
        return None;
    }
    let slot = region.slot(slot)?;
    (slot.inode.load(Ordering::Acquire) == INODE[i].load(Ordering::Relaxed))
        .then_some(Flow { slot })
}

fn region() -> Option<&'static Region> {
    let p = REGION.load(Ordering::Acquire);
    // SAFETY: regions are leaked, never freed.
    (!p.is_null()).then(|| unsafe { &*p })
}

fn program_name() -> String {
    let cmdline = std::fs::read("/proc/self/cmdline").unwrap_or_default();
    let argv0 = cmdline.split(|&b| b == 0).next().unwrap_or_default();
    let name = argv0.rsplit(|&b| b == b'/').next().unwrap_or_default();
    String::from_utf8_lossy(name).into_owned()
}

/// Says hello to the daemon if there is none yet; `None` (pass through) if it is absent.
fn connected(control: &mut Option<Client>) -> Option<&mut Client> {
    if control.is_none() {
        let now = monotonic_ns();
        if now < RETRY_AT.load(Ordering::Relaxed) {
            return None;
        }
        let name = lowtide_bwss::wire::socket_name();
        match Client::hello(&name, std::process::id(), &program_name()) {
            Ok(mut c) => {
                if let Some(r) = c.take_region() {
                    REGION.store(Box::into_raw(Box::new(r)), Ordering::Release);
                }
                *control = Some(c);
            }
            Err(e) => {
                RETRY_AT.store(now + RETRY_NS, Ordering::Relaxed);
                if !WARNED.swap(true, Ordering::Relaxed) {
                    eprintln!(
                        "lowtide-bwss: no BWSS daemon at {name} ({e}); TCP connections pass through unsteered"
                    );
                }
                return None;
            }
        }
    }
    control.as_mut()
}

/// After a fork or a daemon restart: a new connection, and every flow registered again.
fn reconnect(forked: bool) {
    if forked {
        RETRY_AT.store(0, Ordering::Relaxed);
    } else if monotonic_ns() < RETRY_AT.load(Ordering::Relaxed) {
        // `connected` sets the time of the next try when the daemon does not answer.
        return;
    }
    CONTROL.with(|control| {
        if !forked {
            // The old daemon is gone; its memory stays mapped (leaked) for racing readers.
            if let Some(mut c) = control.take() {
                if let Some(r) = c.take_region() {
                    std::mem::forget(r);
                }
            }
        }
        *control = None;
        let Some(c) = connected(control) else { return };
        for i in 0..MAX_FDS {
            if SLOT[i].load(Ordering::Relaxed) != 0 {
                let inode = INODE[i].load(Ordering::Relaxed);
                match addresses(i as RawFd).and_then(|(l, r)| c.register(inode, l, r).ok()) {
                    Some(slot) => SLOT[i].store(slot + 1, Ordering::Release),
                    None => SLOT[i].store(0, Ordering::Release),
                }
            }
        }
    });
}

/// Registers a new TCP connection on `fd` (`remote` when the peer is not known yet, as
/// during a non-blocking connect).
pub fn register(fd: RawFd, remote: Option<SocketAddr>) {
    let Some(i) = usize::try_from(fd).ok().filter(|&i| i < MAX_FDS) else {
        return;
    };
    let Some(inode) = tcp_inode(fd) else { return };
    let Some(local) = sockaddr(fd, false) else {
        return;
    };
    let Some(remote) = remote.or_else(|| sockaddr(fd, true)) else {
        return;
    };
    FORKED.store(false, Ordering::Relaxed);
    CONTROL.with(|control| {
        let Some(c) = connected(control) else { return };
        if let Ok(slot) = c.register(inode, local, remote) {
            INODE[i].store(inode, Ordering::Relaxed);
            SLOT[i].store(slot + 1, Ordering::Release);
        }
    });
    PACERS.with(|p| {
        if let Some(x) = p.get_mut(i) {
            *x = Pacer::default();
        }
    });
}

/// `fd` is being closed (or replaced by `dup2`): forget it; the daemon hears of it when no
/// other descriptor of this process holds the socket.
pub fn forget(fd: RawFd) {
    let Some(i) = usize::try_from(fd).ok().filter(|&i| i < MAX_FDS) else {
        return;
    };
    if SLOT[i].swap(0, Ordering::AcqRel) == 0 {
        return;
    }
    let inode = INODE[i].swap(0, Ordering::Relaxed);
    PACERS.with(|p| {
        if let Some(x) = p.get_mut(i) {
            *x = Pacer::default();
        }
    });
    let still_held = (0..MAX_FDS)
        .any(|j| SLOT[j].load(Ordering::Relaxed) != 0 && INODE[j].load(Ordering::Relaxed) == inode);
    if !still_held {
        CONTROL.with(|control| {
            if let Some(c) = control.as_mut() {
                let _ = c.unregister(inode);
            }
        });
    }
}

/// `new` now refers to the same socket as `old` (`dup`).
pub fn duplicate(old: RawFd, new: RawFd) {
    let (Some(o), Some(n)) = (
        usize::try_from(old).ok().filter(|&i| i < MAX_FDS),
        usize::try_from(new).ok().filter(|&i| i < MAX_FDS),
    ) else {
        return;
    };
    let s = SLOT[o].load(Ordering::Acquire);
    if s != 0 {
        INODE[n].store(INODE[o].load(Ordering::Relaxed), Ordering::Relaxed);
        SLOT[n].store(s, Ordering::Release);
    }
}

/// Whether `fd` is registered (steered or not).
pub fn is_registered(fd: RawFd) -> bool {
    usize::try_from(fd)
        .ok()
        .filter(|&i| i < MAX_FDS)
        .is_some_and(|i| SLOT[i].load(Ordering::Relaxed) != 0)
}

/// The flow's allowance now (and its window clamp kept up); `None` when unsteered.
pub fn allowance(fd: RawFd, flow: &Flow, now: Instant) -> Option<Allowance> {
    let i = fd as usize;
    PACERS.with(|p| {
        if p.len() <= i {
            p.resize(i + 1, Pacer::default());
        }
        let a = p[i].allowance(flow.slot, now);
        p[i].maintain(fd, flow.slot, now);
        a
    })
}

/// `n` bytes of `fd` were delivered to the application.
pub fn consumed(fd: RawFd, flow: &Flow, now: Instant, n: u64) {
    PACERS.with(|p| match p.get_mut(fd as usize) {
        Some(pacer) => pacer.consumed(flow.slot, now, n),
        None => Pacer::default().consumed(flow.slot, now, n),
    });
}
