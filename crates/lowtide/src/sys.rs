//! The operating-system surface of lowtide, Linux only, in one place (like quinn-udp's
//! `linux.rs`): `TCP_INFO`, `SIOCOUTQ`/`SIOCOUTQNSD`, `TCP_NOTSENT_LOWAT`, `TCP_NODELAY`,
//! `TCP_QUICKACK`, `TCP_CORK`, `TCP_CONGESTION`, a zero-timeout `poll` and `writev`.
//!
//! Every function returns [`SysError`], which names the call that was attempted.
//!
//! ```
//! use std::os::fd::AsRawFd;
//! let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
//! let socket = std::net::TcpStream::connect(listener.local_addr()?)?;
//! let fd = socket.as_raw_fd();
//! lowtide::sys::set_notsent_lowat(fd, 4096)?;
//! let tcp = lowtide::sys::tcp_state(fd, 0)?; // what a latency controller reads
//! assert_eq!((tcp.outq, tcp.notsent), (0, 0));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::io;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::RawFd;
use std::time::Duration;

use lowtide_proto::controller::CA_LOSS;
use lowtide_proto::failover::AckClock;
use lowtide_proto::TcpState;
use lowtide_sockopt::check;
/// `TCP_INFO` and `TCP_CONGESTION`: the one implementation every lowtide crate uses
/// (`lowtide-sockopt`), here as part of the driver's OS surface.
pub use lowtide_sockopt::{
    congestion, set_congestion, tcp_info, tcp_info_ext, SysError, TcpInfoExt,
};

/// `SIOCOUTQ`: bytes in the send queue not yet acknowledged (same value as `TIOCOUTQ`).
const SIOCOUTQ: libc::c_ulong = 0x5411;
/// `SIOCOUTQNSD`: bytes in the send queue not yet sent.
const SIOCOUTQNSD: libc::c_ulong = 0x894B;

fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    opt: libc::c_int,
    v: libc::c_int,
    name: &str,
) -> Result<(), SysError> {
    // SAFETY: `v` outlives the call and the length matches its type.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (&v as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    check(r, || format!("setsockopt({name}, {v}) on fd {fd}")).map(|_| ())
}

fn getsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    opt: libc::c_int,
    name: &str,
) -> Result<libc::c_int, SysError> {
    let mut v: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` and `len` are valid for writes of the given length.
    let r = unsafe {
        libc::getsockopt(
            fd,
            level,
            opt,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    check(r, || format!("getsockopt({name}) on fd {fd}"))?;
    Ok(v)
}

/// Sets `TCP_NOTSENT_LOWAT`.
///
/// ```
/// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
/// # let socket = std::net::TcpStream::connect(listener.local_addr()?)?;
/// # let (_peer, _) = listener.accept()?;
/// use std::os::fd::AsRawFd;
/// let fd = socket.as_raw_fd();
/// lowtide::sys::set_notsent_lowat(fd, 4096)?;
/// assert_eq!(lowtide::sys::notsent_lowat(fd)?, 4096);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn set_notsent_lowat(fd: RawFd, bytes: u32) -> Result<(), SysError> {
    let v = bytes.min(i32::MAX as u32) as libc::c_int;
    setsockopt_int(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_NOTSENT_LOWAT,
        v,
        "TCP_NOTSENT_LOWAT",
    )
}

/// Reads `TCP_NOTSENT_LOWAT` back.
///
/// ```
/// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
/// # let socket = std::net::TcpStream::connect(listener.local_addr()?)?;
/// # let (_peer, _) = listener.accept()?;
/// use std::os::fd::AsRawFd;
/// let fd = socket.as_raw_fd();
/// lowtide::sys::set_notsent_lowat(fd, 16_384)?;
/// assert_eq!(lowtide::sys::notsent_lowat(fd)?, 16_384);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn notsent_lowat(fd: RawFd) -> Result<u32, SysError> {
    getsockopt_int(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_NOTSENT_LOWAT,
        "TCP_NOTSENT_LOWAT",
    )
    .map(|v| v as u32)
}

/// Sets `TCP_NODELAY`.
///
/// ```
/// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
/// # let socket = std::net::TcpStream::connect(listener.local_addr()?)?;
/// # let (_peer, _) = listener.accept()?;
/// use std::os::fd::AsRawFd;
/// let fd = socket.as_raw_fd();
/// lowtide::sys::set_nodelay(fd, true)?;
/// assert!(socket.nodelay()?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn set_nodelay(fd: RawFd, on: bool) -> Result<(), SysError> {
    setsockopt_int(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_NODELAY,
        on.into(),
        "TCP_NODELAY",
    )
}

/// Sends a pending delayed ACK now (`TCP_QUICKACK`): the duplicate lane's receiver after a
/// read that ended inside a copy, whose sender waits for the ACK (Linux clears the option
/// again by itself; this is a one-shot).
///
/// ```
/// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
/// # let socket = std::net::TcpStream::connect(listener.local_addr()?)?;
/// # let (_peer, _) = listener.accept()?;
/// use std::os::fd::AsRawFd;
/// lowtide::sys::ack_now(socket.as_raw_fd())?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn ack_now(fd: RawFd) -> Result<(), SysError> {
    setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_QUICKACK, 1, "TCP_QUICKACK")
}

/// Sets `TCP_CORK`.
///
/// ```
/// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
/// # let socket = std::net::TcpStream::connect(listener.local_addr()?)?;
/// # let (_peer, _) = listener.accept()?;
/// use std::os::fd::AsRawFd;
/// let fd = socket.as_raw_fd();
/// lowtide::sys::set_cork(fd, true)?; // hold partial segments
/// lowtide::sys::set_cork(fd, false)?; // and send them now
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn set_cork(fd: RawFd, on: bool) -> Result<(), SysError> {
    setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_CORK, on.into(), "TCP_CORK")
}

/// Sets `TCP_MAXSEG` (before connect / on the listener): caps the MSS, e.g. to emulate
/// Ethernet segments over loopback.
///
/// ```
/// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
/// # let socket = std::net::TcpStream::connect(listener.local_addr()?)?;
/// # let (_peer, _) = listener.accept()?;
/// use std::os::fd::AsRawFd;
/// let fd = socket.as_raw_fd();
/// // Before connecting: an Ethernet-sized MSS on loopback.
/// let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
/// lowtide::sys::set_maxseg(s.as_raw_fd(), 1448)?;
/// s.connect(&listener.local_addr()?.into())?;
/// let tcp = lowtide::sys::tcp_state(s.as_raw_fd(), 0)?;
/// assert!(tcp.mss <= 1448);
/// # let _ = fd;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn set_maxseg(fd: RawFd, bytes: u32) -> Result<(), SysError> {
    setsockopt_int(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_MAXSEG,
        bytes.min(i32::MAX as u32) as libc::c_int,
        "TCP_MAXSEG",
    )
}

/// Sets `SO_SNDBUF` (the kernel doubles it).
///
/// ```
/// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
/// # let socket = std::net::TcpStream::connect(listener.local_addr()?)?;
/// # let (_peer, _) = listener.accept()?;
/// use std::os::fd::AsRawFd;
/// let fd = socket.as_raw_fd();
/// lowtide::sys::set_sndbuf(fd, 64 << 10)?;
/// // Linux doubles the value for its bookkeeping.
/// let got = socket2::SockRef::from(&socket).send_buffer_size()?;
/// assert_eq!(got, 128 << 10);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn set_sndbuf(fd: RawFd, bytes: u32) -> Result<(), SysError> {
    setsockopt_int(
        fd,
        libc::SOL_SOCKET,
        libc::SO_SNDBUF,
        bytes.min(i32::MAX as u32) as libc::c_int,
        "SO_SNDBUF",
    )
}

/// Sets `SO_RCVBUF` (the kernel doubles it).
///
/// ```
/// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
/// # let socket = std::net::TcpStream::connect(listener.local_addr()?)?;
/// # let (_peer, _) = listener.accept()?;
/// use std::os::fd::AsRawFd;
/// let fd = socket.as_raw_fd();
/// lowtide::sys::set_rcvbuf(fd, 64 << 10)?;
/// let got = socket2::SockRef::from(&socket).recv_buffer_size()?;
/// assert_eq!(got, 128 << 10); // doubled, as for SO_SNDBUF
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn set_rcvbuf(fd: RawFd, bytes: u32) -> Result<(), SysError> {
    setsockopt_int(
        fd,
        libc::SOL_SOCKET,
        libc::SO_RCVBUF,
        bytes.min(i32::MAX as u32) as libc::c_int,
        "SO_RCVBUF",
    )
}

fn ioctl_int(fd: RawFd, req: libc::c_ulong, name: &str) -> Result<u32, SysError> {
    let mut v: libc::c_int = 0;
    // SAFETY: both requests write one int.
    let r = unsafe { libc::ioctl(fd, req as _, &mut v as *mut libc::c_int) };
    check(r, || format!("ioctl({name}) on fd {fd}"))?;
    Ok(v.max(0) as u32)
}

/// `SIOCOUTQ`: unacknowledged bytes in the send queue.
///
/// ```
/// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
/// # let socket = std::net::TcpStream::connect(listener.local_addr()?)?;
/// # let (_peer, _) = listener.accept()?;
/// use std::os::fd::AsRawFd;
/// let fd = socket.as_raw_fd();
/// use std::io::Write;
/// (&socket).write_all(&[0u8; 1000])?;
/// // Sent at once over loopback; unacknowledged at most until the peer's ACK.
/// assert!(lowtide::sys::outq(fd)? <= 1000);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn outq(fd: RawFd) -> Result<u32, SysError> {
    ioctl_int(fd, SIOCOUTQ, "SIOCOUTQ")
}

/// `SIOCOUTQNSD`: unsent bytes in the send queue.
///
/// ```
/// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
/// # let socket = std::net::TcpStream::connect(listener.local_addr()?)?;
/// # let (_peer, _) = listener.accept()?;
/// use std::os::fd::AsRawFd;
/// let fd = socket.as_raw_fd();
/// assert_eq!(lowtide::sys::outq_notsent(fd)?, 0); // nothing written yet
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn outq_notsent(fd: RawFd) -> Result<u32, SysError> {
    ioctl_int(fd, SIOCOUTQNSD, "SIOCOUTQNSD")
}

/// Bytes the send buffer takes before it is full: `SO_MEMINFO`'s `SNDBUF − WMEM_QUEUED`.
/// The kernel counts buffer memory (payload plus a little per packet), so the payload it
/// accepts is at least this.
///
/// ```
/// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
/// # let socket = std::net::TcpStream::connect(listener.local_addr()?)?;
/// # let (_peer, _) = listener.accept()?;
/// use std::os::fd::AsRawFd;
/// let fd = socket.as_raw_fd();
/// let room = lowtide::sys::send_room(fd)?;
/// assert!(room > 0); // an empty send buffer
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn send_room(fd: RawFd) -> Result<u32, SysError> {
    let mut mem = [0u32; libc::SK_MEMINFO_DROPS as usize + 1];
    let mut len = size_of_val(&mem) as libc::socklen_t;
    // SAFETY: `mem` is valid for `len` bytes; the kernel writes at most `len`.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            mem.as_mut_ptr().cast(),
            &mut len,
        )
    };
    check(r, || format!("getsockopt(SO_MEMINFO) on fd {fd}"))?;
    let sndbuf = mem[libc::SK_MEMINFO_SNDBUF as usize];
    let queued = mem[libc::SK_MEMINFO_WMEM_QUEUED as usize];
    Ok(sndbuf.saturating_sub(queued))
}

/// The controller's snapshot from one `getsockopt(TCP_INFO)`.
///
/// `written` is the number of bytes the application has written to the socket. The send
/// queue (`SIOCOUTQ` = `write_seq − snd_una`) is then `written − tcpi_bytes_acked` exactly,
/// which saves the `ioctl`; the loopback tests compare it with [`outq`].
///
/// ```
/// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
/// # let socket = std::net::TcpStream::connect(listener.local_addr()?)?;
/// # let (_peer, _) = listener.accept()?;
/// use std::os::fd::AsRawFd;
/// let fd = socket.as_raw_fd();
/// use std::io::Write;
/// (&socket).write_all(&[0u8; 5000])?;
/// let tcp = lowtide::sys::tcp_state(fd, 5000)?; // 5000 bytes written so far
/// assert!(tcp.cwnd >= 1 && tcp.mss > 0);
/// assert!(tcp.outq <= 5000);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn tcp_state(fd: RawFd, written: u64) -> Result<TcpState, SysError> {
    let i = tcp_info(fd)?;
    let outq = written
        .saturating_sub(i.tcpi_bytes_acked)
        .min(u64::from(u32::MAX)) as u32;
    Ok(TcpState {
        cwnd: i.tcpi_snd_cwnd,
        mss: i.tcpi_snd_mss,
        sacked: i.tcpi_sacked,
        unacked: i.tcpi_unacked,
        rtt: Duration::from_micros(u64::from(i.tcpi_rtt)),
        min_rtt: Duration::from_micros(u64::from(i.tcpi_min_rtt)),
        notsent: i.tcpi_notsent_bytes,
        outq,
        delivery_rate: i.tcpi_delivery_rate,
        ssthresh: i.tcpi_snd_ssthresh,
        ca_state: i.tcpi_ca_state,
    })
}

/// The kernel's ACK clock for failover's stall verdict: time since the last ACK arrived
/// (`tcpi_last_ack_recv`, duplicate and SACK ones included), and whether a retransmission
/// timeout is being recovered from (`tcpi_ca_state` = `TCP_CA_Loss`, or `tcpi_backoff` > 0).
///
/// ```
/// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
/// # let socket = std::net::TcpStream::connect(listener.local_addr()?)?;
/// # let (_peer, _) = listener.accept()?;
/// use std::os::fd::AsRawFd;
/// let k = lowtide::sys::ack_clock(socket.as_raw_fd())?;
/// assert!(!k.timeout_recovery); // a fresh connection: the handshake's ACK, no timeout
/// assert!(k.since_last_ack < std::time::Duration::from_secs(60));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn ack_clock(fd: RawFd) -> Result<AckClock, SysError> {
    let i = tcp_info(fd)?;
    Ok(AckClock {
        since_last_ack: Duration::from_millis(u64::from(i.tcpi_last_ack_recv)),
        timeout_recovery: i.tcpi_ca_state == CA_LOSS || i.tcpi_backoff > 0,
    })
}

/// A zero-timeout `poll(POLLOUT)`: whether the socket is writable now. Besides answering, it
/// makes the kernel note that a writer waits (`SOCK_NOSPACE`), so the next ACK that frees
/// space (or drops the unsent bytes below `TCP_NOTSENT_LOWAT`) raises `EPOLLOUT`.
///
/// ```
/// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
/// # let socket = std::net::TcpStream::connect(listener.local_addr()?)?;
/// # let (_peer, _) = listener.accept()?;
/// use std::os::fd::AsRawFd;
/// let fd = socket.as_raw_fd();
/// assert!(lowtide::sys::poll_writable(fd)?); // an empty send buffer
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn poll_writable(fd: RawFd) -> Result<bool, SysError> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let r = unsafe { libc::poll(&mut p, 1, 0) };
    check(r, || format!("poll(POLLOUT) on fd {fd}"))?;
    Ok(p.revents & libc::POLLOUT != 0)
}

/// Most slices one [`writev`] passes (the rest waits for the next call).
pub const MAX_IOV: usize = 64;

/// `writev` of up to [`MAX_IOV`] slices; returns the bytes written (`WouldBlock` as an error).
///
/// ```
/// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
/// # let socket = std::net::TcpStream::connect(listener.local_addr()?)?;
/// # let (_peer, _) = listener.accept()?;
/// use std::os::fd::AsRawFd;
/// let fd = socket.as_raw_fd();
/// let n = lowtide::sys::writev(fd, [&b"head"[..], &b"er"[..], &b" and body"[..]].into_iter())?;
/// assert_eq!(n, 15);
/// # use std::io::Read;
/// # let mut got = [0u8; 15];
/// # (&_peer).read_exact(&mut got)?;
/// # assert_eq!(&got, b"header and body");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn writev<'a>(fd: RawFd, bufs: impl Iterator<Item = &'a [u8]>) -> io::Result<usize> {
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; MAX_IOV];
    let mut n = 0;
    for b in bufs.take(MAX_IOV) {
        iov[n] = libc::iovec {
            iov_base: b.as_ptr() as *mut libc::c_void,
            iov_len: b.len(),
        };
        n += 1;
    }
    // SAFETY: the first `n` iovecs point into live slices borrowed for the call.
    let r = unsafe { libc::writev(fd, iov.as_ptr(), n as libc::c_int) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// CPU time (user + system) of the calling thread, `getrusage(RUSAGE_THREAD)`.
///
/// ```
/// let before = lowtide::sys::thread_cpu_time()?;
/// let mut x = 0u64;
/// for i in 0..1_000_000u64 { x = x.wrapping_add(std::hint::black_box(i)); }
/// assert!(lowtide::sys::thread_cpu_time()? >= before);
/// # let _ = x;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn thread_cpu_time() -> Result<Duration, SysError> {
    Ok(thread_usage()?.cpu)
}

/// CPU time (user + system) of the process, `getrusage(RUSAGE_SELF)`.
///
/// ```
/// let t = lowtide::sys::cpu_time()?; // user + system of the whole process
/// assert!(t > std::time::Duration::ZERO);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn cpu_time() -> Result<Duration, SysError> {
    Ok(rusage(libc::RUSAGE_SELF, "getrusage(RUSAGE_SELF)")?.cpu)
}

/// What a thread has cost so far: CPU time and how often it slept.
///
/// ```
/// let before = lowtide::sys::thread_usage()?;
/// std::thread::sleep(std::time::Duration::from_millis(1)); // blocks: one voluntary switch
/// let spent = lowtide::sys::thread_usage()?.since(&before);
/// assert!(spent.sleeps >= 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ThreadUsage {
    /// User + system CPU time.
    pub cpu: Duration,
    /// Voluntary context switches (`ru_nvcsw`): the thread blocked and was woken again, so
    /// each is one wake-up.
    pub sleeps: u64,
    /// Involuntary context switches (`ru_nivcsw`): the scheduler preempted the thread.
    pub preempted: u64,
}

impl ThreadUsage {
    /// What was spent since `earlier` (a reading of the same thread).
    ///
    /// ```
    /// use lowtide::sys::ThreadUsage;
    /// let a = ThreadUsage { sleeps: 3, ..ThreadUsage::default() };
    /// let b = ThreadUsage { sleeps: 10, ..ThreadUsage::default() };
    /// assert_eq!(b.since(&a).sleeps, 7);
    /// ```
    pub fn since(&self, earlier: &ThreadUsage) -> ThreadUsage {
        ThreadUsage {
            cpu: self.cpu.saturating_sub(earlier.cpu),
            sleeps: self.sleeps.saturating_sub(earlier.sleeps),
            preempted: self.preempted.saturating_sub(earlier.preempted),
        }
    }
}

/// The calling thread's [`ThreadUsage`], `getrusage(RUSAGE_THREAD)`.
///
/// ```
/// let u = lowtide::sys::thread_usage()?;
/// println!("{:?} CPU, {} wake-ups, {} preemptions", u.cpu, u.sleeps, u.preempted);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn thread_usage() -> Result<ThreadUsage, SysError> {
    rusage(libc::RUSAGE_THREAD, "getrusage(RUSAGE_THREAD)")
}

/// The CPUs this thread may run on (`sched_getaffinity`), in ascending order.
///
/// ```
/// let cpus = lowtide::sys::allowed_cpus()?;
/// assert!(!cpus.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn allowed_cpus() -> Result<Vec<usize>, SysError> {
    let mut set = MaybeUninit::<libc::cpu_set_t>::zeroed();
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: `set` is valid for writes of `size` bytes.
    let r = unsafe { libc::sched_getaffinity(0, size, set.as_mut_ptr()) };
    check(r, || "sched_getaffinity".to_owned())?;
    // SAFETY: written by the kernel.
    let set = unsafe { set.assume_init() };
    let max = libc::CPU_SETSIZE as usize;
    Ok((0..max)
        // SAFETY: `c` < CPU_SETSIZE, so `CPU_ISSET` reads within the set.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// Pins the calling thread to one CPU (`sched_setaffinity`).
///
/// ```
/// let first = lowtide::sys::allowed_cpus()?[0];
/// std::thread::spawn(move || lowtide::sys::pin_thread(first)).join().unwrap()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn pin_thread(cpu: usize) -> Result<(), SysError> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(SysError {
            what: format!("sched_setaffinity(cpu {cpu})"),
            error: io::ErrorKind::InvalidInput.into(),
        });
    }
    let mut set = MaybeUninit::<libc::cpu_set_t>::zeroed();
    // SAFETY: a zeroed `cpu_set_t` is an empty set; `CPU_SET` writes within it.
    let set = unsafe {
        libc::CPU_SET(cpu, &mut *set.as_mut_ptr());
        set.assume_init()
    };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: `set` is a valid `cpu_set_t` of `size` bytes.
    let r = unsafe { libc::sched_setaffinity(0, size, &set) };
    check(r, || format!("sched_setaffinity(cpu {cpu})")).map(|_| ())
}

fn rusage(who: libc::c_int, what: &str) -> Result<ThreadUsage, SysError> {
    let mut u = MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `u` is valid for writes.
    let r = unsafe { libc::getrusage(who, u.as_mut_ptr()) };
    check(r, || what.to_owned())?;
    // SAFETY: written by the kernel.
    let u = unsafe { u.assume_init() };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
    Ok(ThreadUsage {
        cpu: tv(u.ru_utime) + tv(u.ru_stime),
        sleeps: u.ru_nvcsw as u64,
        preempted: u.ru_nivcsw as u64,
    })
}
