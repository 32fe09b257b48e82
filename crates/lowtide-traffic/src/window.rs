//! A receiver's window bound, as ns-2's `Agent/TCP set window_` gave every flow.
//!
//! ns-2's TCP agents send at most `min(cwnd, window_)` packets in flight; `window_` defaults to
//! 20, so a simulated bulk flow of the 1990s-2000s papers may never fill a deep queue by itself.
//! Linux has no per-socket cap on the sender's window, but the receiver can bound the window it
//! advertises with `TCP_WINDOW_CLAMP`, which bounds the sender's bytes in flight the same way.
//! The receiver sets it: the sink for uploads (it reads the bound from the request), the client
//! for downloads (before its SYN).
//!
//! The bound is at most 65,535 bytes (the largest window TCP has without RFC 7323's scaling)
//! and at least [`MIN_BYTES`] (the kernel raises smaller clamps to about half its minimum
//! receive buffer, so a smaller value would not mean what it says).

use socket2::SockRef;
use std::io;
use std::os::fd::AsRawFd;

/// Smallest bound accepted (above the kernel's own floor of `SOCK_MIN_RCVBUF / 2`).
pub const MIN_BYTES: u16 = 4096;

/// Bound the window this receiving socket advertises to `bytes`.
pub fn clamp<'s>(socket: impl Into<SockRef<'s>>, bytes: u16) -> io::Result<()> {
    let sock: SockRef<'s> = socket.into();
    let value = libc::c_int::from(bytes);
    // SAFETY: a valid socket descriptor borrowed for the call, and a pointer to a c_int that
    // lives across it with its exact size.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_WINDOW_CLAMP,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The bound the kernel keeps, as `getsockopt(TCP_WINDOW_CLAMP)` reads it.
pub fn current<'s>(socket: impl Into<SockRef<'s>>) -> io::Result<u32> {
    let sock: SockRef<'s> = socket.into();
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: as in `clamp`; `len` tells the kernel the buffer's size and is read back.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_WINDOW_CLAMP,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok(value.max(0) as u32)
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn the_kernel_keeps_the_bound_on_a_connected_socket() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let before = current(&server).unwrap();
        clamp(&server, 20_000).unwrap();
        assert_eq!(current(&server).unwrap(), 20_000, "was {before}");
        // Below the kernel's floor the bound is raised: why MIN_BYTES exists.
        clamp(&server, 64).unwrap();
        let floor = current(&server).unwrap();
        assert!(floor > 64 && floor < u32::from(MIN_BYTES), "floor {floor}");
    }
}
