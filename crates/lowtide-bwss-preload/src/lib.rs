//! `liblowtide_bwss.so`: run an unmodified program under BWSS.
//!
//! ```sh
//! lowtide bwss --rules rules.toml &          # the host's daemon
//! LD_PRELOAD=liblowtide_bwss.so curl -o /dev/null http://10.1.1.1:8000/big
//! ```
//!
//! Every TCP connection over IPv4 or IPv6 the program makes (`connect`, also non-blocking)
//! or takes (`accept`, `accept4`) is registered with the daemon, which answers with a slot
//! of shared memory holding the flow's read budget. Reads (`read`, `recv`, `recvfrom`,
//! `recvmsg`, `readv`) take at most what the budget allows, which keeps the kernel's
//! advertised window at the flow's target (see `lowtide_bwss::fcs`). Where trickle goes
//! wrong, this library:
//! - never sleeps in a non-blocking call: a non-blocking socket (or `MSG_DONTWAIT`) over
//!   budget gets `EAGAIN`, and `poll`, `ppoll` and `epoll_wait` do not report it readable
//!   until its budget is back (the readiness hooks in [`readiness`]), so neither a level-
//!   nor an edge-triggered loop spins or stalls;
//! - handles IPv6, `recvmsg`/`readv`, `dup`/`dup2`/`dup3`, `close`, `fork` (the child
//!   registers the sockets it inherited under its own connection), and threads (lock-free
//!   lookup, per-socket buckets behind a lock that `fork` handlers release);
//! - leaves UDP, Unix and every other descriptor alone (one atomic load per call);
//! - passes everything through, with one warning on stderr, when no daemon runs, and when
//!   the daemon dies (its heartbeat stops); once one is back, flows register again.

#![allow(clippy::missing_safety_doc)]
#![deny(clippy::undocumented_unsafe_blocks)] // every unsafe block states its invariant

mod readiness;
mod state;

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;
use std::time::Instant;

use libc::{c_int, c_void, iovec, msghdr, size_t, sockaddr, socklen_t, ssize_t};

/// Resolves the next definition of a libc function once (`dlsym(RTLD_NEXT)`).
macro_rules! real {
    ($name:ident : $ty:ty) => {{
        static ADDR: AtomicUsize = AtomicUsize::new(0);
        let mut a = ADDR.load(Ordering::Relaxed);
        if a == 0 {
            // SAFETY: looking up a libc symbol by its NUL-terminated name.
            a = unsafe {
                libc::dlsym(
                    libc::RTLD_NEXT,
                    concat!(stringify!($name), "\0").as_ptr().cast(),
                )
            } as usize;
            ADDR.store(a, Ordering::Relaxed);
        }
        // SAFETY: the symbol has this C signature in every libc.
        unsafe { std::mem::transmute::<usize, $ty>(a) }
    }};
}
pub(crate) use real;

static INIT: Once = Once::new();

fn init() {
    INIT.call_once(state::install_fork_handlers);
}

fn errno() -> c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn set_errno(e: c_int) {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// Whether a read on `fd` with `flags` must not block.
fn must_not_block(fd: RawFd, flags: c_int) -> bool {
    if flags & libc::MSG_DONTWAIT != 0 {
        return true;
    }
    // SAFETY: F_GETFL takes no argument.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    fl >= 0 && fl & libc::O_NONBLOCK != 0
}

/// A read of at most `len` bytes on `fd`, paced by the flow's budget. `call(n)` performs
/// the real read of at most `n` bytes.
fn paced(fd: RawFd, len: usize, flags: c_int, mut call: impl FnMut(usize) -> ssize_t) -> ssize_t {
    let Some(flow) = state::lookup(fd) else {
        return call(len);
    };
    if flags & libc::MSG_PEEK != 0 || len == 0 {
        return call(len);
    }
    loop {
        let now = Instant::now();
        let allowed = match state::allowance(fd, &flow, now) {
            None => len,
            Some(a) if a.open(len) => len.min(a.bytes as usize),
            Some(a) => {
                if must_not_block(fd, flags) {
                    set_errno(libc::EAGAIN);
                    return -1;
                }
                // A blocking read waits for its budget, as the kernel would for data.
                std::thread::sleep(a.ready.saturating_duration_since(now));
                continue;
            }
        };
        let n = call(allowed);
        if n > 0 {
            state::consumed(fd, &flow, Instant::now(), n as u64);
        }
        return n;
    }
}

#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    let f = real!(read: unsafe extern "C" fn(c_int, *mut c_void, size_t) -> ssize_t);
    // SAFETY: forwarding the caller's buffer with a length no larger than theirs.
    paced(fd, count, 0, |n| unsafe { f(fd, buf, n) })
}

#[no_mangle]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t {
    let f = real!(recv: unsafe extern "C" fn(c_int, *mut c_void, size_t, c_int) -> ssize_t);
    if flags & libc::MSG_WAITALL != 0 && state::is_registered(fd) {
        // SAFETY: as for `recv`; each piece is a part of the caller's buffer.
        return wait_all(len, |off, n| unsafe {
            paced(fd, n, flags & !libc::MSG_WAITALL, |m| {
                f(
                    fd,
                    buf.cast::<u8>().add(off).cast(),
                    m,
                    flags & !libc::MSG_WAITALL,
                )
            })
        });
    }
    // SAFETY: as above.
    paced(fd, len, flags, |n| unsafe { f(fd, buf, n, flags) })
}

#[no_mangle]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    alen: *mut socklen_t,
) -> ssize_t {
    let f = real!(recvfrom: unsafe extern "C" fn(c_int, *mut c_void, size_t, c_int, *mut sockaddr, *mut socklen_t) -> ssize_t);
    if flags & libc::MSG_WAITALL != 0 && state::is_registered(fd) {
        let fl = flags & !libc::MSG_WAITALL;
        // SAFETY: each piece is a part of the caller's buffer.
        return wait_all(len, |off, n| unsafe {
            paced(fd, n, fl, |m| {
                f(fd, buf.cast::<u8>().add(off).cast(), m, fl, addr, alen)
            })
        });
    }
    // SAFETY: forwarding the caller's arguments with a length no larger than theirs.
    paced(fd, len, flags, |n| unsafe {
        f(fd, buf, n, flags, addr, alen)
    })
}

/// `MSG_WAITALL` on a paced flow: paced pieces until `len` bytes, EOF or an error.
fn wait_all(len: usize, mut piece: impl FnMut(usize, usize) -> ssize_t) -> ssize_t {
    let mut got = 0usize;
    while got < len {
        let n = piece(got, len - got);
        if n <= 0 {
            return if got > 0 { got as ssize_t } else { n };
        }
        got += n as usize;
    }
    got as ssize_t
}

/// `iov` cut to at most `limit` bytes in total.
///
/// # Safety
/// `iov` must point to `cnt` valid iovecs.
unsafe fn cut_iov(iov: *const iovec, cnt: usize, limit: usize) -> (Vec<iovec>, usize) {
    let mut out = Vec::with_capacity(cnt);
    let mut left = limit;
    let mut total = 0;
    for k in 0..cnt {
        // SAFETY: by the caller's contract.
        let v = unsafe { *iov.add(k) };
        if left == 0 {
            break;
        }
        let n = v.iov_len.min(left);
        out.push(iovec {
            iov_base: v.iov_base,
            iov_len: n,
        });
        left -= n;
        total += n;
    }
    (out, total)
}

#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    let f = real!(readv: unsafe extern "C" fn(c_int, *const iovec, c_int) -> ssize_t);
    if cnt <= 0 || iov.is_null() || !state::is_registered(fd) {
        // SAFETY: forwarding unchanged.
        return unsafe { f(fd, iov, cnt) };
    }
    // SAFETY: the caller passes `cnt` iovecs.
    let (_, total) = unsafe { cut_iov(iov, cnt as usize, usize::MAX) };
    paced(fd, total, 0, |n| {
        // SAFETY: a prefix of the caller's iovecs.
        let (v, _) = unsafe { cut_iov(iov, cnt as usize, n) };
        // SAFETY: `v` is that prefix, in our own array, alive for the call; its buffers are
        // the caller's, valid for writes.
        unsafe { f(fd, v.as_ptr(), v.len() as c_int) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    let f = real!(recvmsg: unsafe extern "C" fn(c_int, *mut msghdr, c_int) -> ssize_t);
    if msg.is_null() || !state::is_registered(fd) || flags & libc::MSG_WAITALL != 0 {
        // SAFETY: forwarding unchanged.
        return unsafe { f(fd, msg, flags) };
    }
    // SAFETY: the caller's msghdr and its iovecs are valid.
    let (iov, cnt) = unsafe { ((*msg).msg_iov, (*msg).msg_iovlen) };
    // SAFETY: the caller's msghdr holds `cnt` valid iovecs at `iov`.
    let (_, total) = unsafe { cut_iov(iov, cnt, usize::MAX) };
    paced(fd, total, flags, |n| {
        // SAFETY: a prefix of the caller's iovecs, restored before returning.
        unsafe {
            let (v, _) = cut_iov(iov, cnt, n);
            (*msg).msg_iov = v.as_ptr() as *mut iovec;
            (*msg).msg_iovlen = v.len();
            let r = f(fd, msg, flags);
            (*msg).msg_iov = iov;
            (*msg).msg_iovlen = cnt;
            r
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    init();
    let f = real!(connect: unsafe extern "C" fn(c_int, *const sockaddr, socklen_t) -> c_int);
    // SAFETY: forwarding unchanged.
    let r = unsafe { f(fd, addr, len) };
    let e = errno();
    if r == 0 || e == libc::EINPROGRESS {
        // SAFETY: the caller's address of `len` bytes.
        if let Some(remote) = unsafe { lowtide_bwss::tcp::from_sockaddr(addr, len) } {
            state::register(fd, Some(remote));
        }
        set_errno(e);
    }
    r
}

fn accepted(fd: c_int) -> c_int {
    if fd >= 0 {
        let e = errno();
        state::register(fd, None);
        set_errno(e);
    }
    fd
}

#[no_mangle]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    init();
    let f = real!(accept: unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int);
    // SAFETY: forwarding unchanged.
    accepted(unsafe { f(fd, addr, len) })
}

#[no_mangle]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
) -> c_int {
    init();
    let f =
        real!(accept4: unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t, c_int) -> c_int);
    // SAFETY: forwarding unchanged.
    accepted(unsafe { f(fd, addr, len, flags) })
}

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    let f = real!(close: unsafe extern "C" fn(c_int) -> c_int);
    state::forget(fd);
    readiness::forget(fd);
    // SAFETY: forwarding unchanged.
    unsafe { f(fd) }
}

#[no_mangle]
pub unsafe extern "C" fn dup(old: c_int) -> c_int {
    let f = real!(dup: unsafe extern "C" fn(c_int) -> c_int);
    // SAFETY: forwarding unchanged.
    let new = unsafe { f(old) };
    if new >= 0 {
        state::duplicate(old, new);
    }
    new
}

#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    let f = real!(dup2: unsafe extern "C" fn(c_int, c_int) -> c_int);
    if old != new {
        state::forget(new);
        readiness::forget(new);
    }
    // SAFETY: forwarding unchanged.
    let r = unsafe { f(old, new) };
    if r >= 0 && old != new {
        state::duplicate(old, new);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    let f = real!(dup3: unsafe extern "C" fn(c_int, c_int, c_int) -> c_int);
    if old != new {
        state::forget(new);
        readiness::forget(new);
    }
    // SAFETY: forwarding unchanged.
    let r = unsafe { f(old, new, flags) };
    if r >= 0 {
        state::duplicate(old, new);
    }
    r
}

pub use readiness::{epoll_ctl, epoll_pwait, epoll_wait, poll, ppoll};
