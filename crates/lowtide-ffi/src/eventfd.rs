//! The pollable fd of a handle: an `eventfd` kept readable exactly while the handle has
//! something to take (level-triggered, so `poll`, `epoll` in either mode, libuv and libevent
//! all work). Its owner updates it under the lock that guards its queues.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

pub(crate) struct Readiness {
    fd: OwnedFd,
    ready: bool,
}

impl Readiness {
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: plain system call; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            // SAFETY: a fresh fd we own.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            ready: false,
        })
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Makes the fd readable iff `ready`.
    pub(crate) fn set(&mut self, ready: bool) {
        if ready == self.ready {
            return;
        }
        let fd = self.fd.as_raw_fd();
        // Neither call can block (EFD_NONBLOCK) nor fail on a valid eventfd short of counter
        // overflow, which one pending increment cannot reach.
        if ready {
            let one = 1u64;
            // SAFETY: writes 8 bytes from a live u64.
            unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
        } else {
            let mut v = 0u64;
            // SAFETY: reads 8 bytes into a live u64.
            unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
        }
        self.ready = ready;
    }
}
