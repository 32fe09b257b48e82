//! The system calls around the nfq crate's queues: finding a queue's netlink socket (nfq 0.2.5
//! does not expose it, and the driver needs it to wait in `ppoll` with a timer), the kernel's
//! per-queue counters, the receive buffer, the stop signal and the wait itself.

use std::collections::HashSet;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// The open descriptors of this process.
pub fn open_fds() -> HashSet<RawFd> {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// One line of `/proc/thread-self/net/netfilter/nfnetlink_queue` (this thread's network
/// namespace: `/proc/net` is the process's first thread's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueLine {
    pub queue: u16,
    pub portid: u32,
    pub total: u32,
    pub dropped: u64,
    pub user_dropped: u64,
}

/// The kernel's view of queue `queue` in this network namespace, if it is bound.
pub fn queue_line(queue: u16) -> Option<QueueLine> {
    let text = std::fs::read_to_string("/proc/thread-self/net/netfilter/nfnetlink_queue").ok()?;
    text.lines().find_map(|l| {
        let f: Vec<u64> = l
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        (f.len() >= 7 && f[0] == u64::from(queue)).then(|| QueueLine {
            queue,
            portid: f[1] as u32,
            total: f[2] as u32,
            dropped: f[5],
            user_dropped: f[6],
        })
    })
}

fn sockopt_int(fd: RawFd, opt: libc::c_int) -> Option<libc::c_int> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` and `len` are valid for writes of the sizes given.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some(v)
}

fn netlink_portid(fd: RawFd) -> Option<u32> {
    // SAFETY: a zeroed sockaddr_nl is valid; getsockname writes at most `len` bytes.
    let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t;
    // SAFETY: `addr` is writable for `len` bytes, and `len` is writable.
    let rc =
        unsafe { libc::getsockname(fd, (&mut addr as *mut libc::sockaddr_nl).cast(), &mut len) };
    (rc == 0 && i32::from(addr.nl_family) == libc::AF_NETLINK).then_some(addr.nl_pid)
}

/// `SIOCGSKNS`: a descriptor of the network namespace a socket lives in.
const SIOCGSKNS: libc::c_ulong = 0x894C;

/// Whether socket `fd` lives in this thread's network namespace.
fn in_this_namespace(fd: RawFd) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: SIOCGSKNS takes no argument and returns a new descriptor we own.
    let ns = unsafe { libc::ioctl(fd, SIOCGSKNS as _) };
    if ns < 0 {
        return false;
    }
    // SAFETY: `ns` is a new descriptor (checked non-negative) that nothing else owns.
    let ns = unsafe { OwnedFd::from_raw_fd(ns) };
    let theirs = std::fs::metadata(format!("/proc/self/fd/{}", ns.as_raw_fd()));
    let ours = std::fs::metadata("/proc/thread-self/ns/net");
    matches!((theirs, ours), (Ok(a), Ok(b)) if a.ino() == b.ino() && a.dev() == b.dev())
}

/// The socket bound to `queue`: the netfilter netlink socket of this process, in this
/// namespace, whose port id the kernel lists for the queue (a port id is unique per
/// namespace).
pub fn queue_socket(queue: u16) -> Option<RawFd> {
    let portid = queue_line(queue)?.portid;
    open_fds().into_iter().find(|&fd| {
        sockopt_int(fd, libc::SO_DOMAIN) == Some(libc::AF_NETLINK)
            && sockopt_int(fd, libc::SO_PROTOCOL) == Some(libc::NETLINK_NETFILTER)
            && netlink_portid(fd) == Some(portid)
            && in_this_namespace(fd)
    })
}

/// A larger receive buffer than the default, so a burst waits in the socket rather than
/// being passed unseen (root may exceed `rmem_max`).
pub fn set_rcvbuf(fd: RawFd, bytes: libc::c_int) -> io::Result<()> {
    // SAFETY: passes a c_int of the size given.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&bytes as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// An eventfd that wakes the agent's wait: [`Stopper::stop`] makes it readable.
#[derive(Debug)]
pub struct StopFd(OwnedFd);

impl StopFd {
    pub fn new() -> io::Result<Self> {
        // SAFETY: eventfd has no memory arguments; the fd is owned from here on.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor (checked non-negative) that nothing else owns.
        Ok(StopFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to an eventfd.
        let _ = unsafe { libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    pub fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// Waits until one of `fds` or `stop` is readable, or `timeout` passes (None: forever);
/// returns whether `stop` is.
pub fn wait(fds: &[RawFd], stop: RawFd, timeout: Option<Duration>) -> io::Result<bool> {
    let mut polls: Vec<libc::pollfd> = fds
        .iter()
        .chain(std::iter::once(&stop))
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(t.subsec_nanos() as i32),
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `polls` is a live array of the length given; `ts_ptr` is null or a live timespec.
    let rc = unsafe {
        libc::ppoll(
            polls.as_mut_ptr(),
            polls.len() as libc::nfds_t,
            ts_ptr,
            std::ptr::null(),
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(polls[fds.len()].revents & libc::POLLIN != 0)
}

/// CPU time of the calling thread.
pub fn thread_cpu_time() -> Duration {
    // SAFETY: a zeroed timespec is valid; clock_gettime writes into it.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: `ts` is a valid, writable timespec.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
