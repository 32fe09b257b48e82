//! `TCP_INFO` and `TCP_CONGESTION`, read and set in one place for every lowtide crate: the
//! driver (`lowtide::sys` re-exports this), the emulator's probes, cross traffic, BWSS and the
//! lab. Linux only.
//!
//! A crate of its own because its users sit side by side, not above one another: the
//! emulator, cross traffic and BWSS's preload library must not depend on the transport, and
//! the transport's sans-IO core (`lowtide-proto`) makes no system calls. It depends on `libc`
//! and `thiserror` only.
//!
//! Every function returns [`SysError`], which names the call that was attempted.
//!
//! ```
//! use std::os::fd::AsRawFd;
//! let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
//! let socket = std::net::TcpStream::connect(listener.local_addr()?)?;
//! let fd = socket.as_raw_fd();
//! lowtide_sockopt::set_congestion(fd, "reno")?;
//! assert_eq!(lowtide_sockopt::tcp_info(fd)?.tcpi_state, 1); // TCP_ESTABLISHED
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)] // every unsafe block states its invariant

use std::io;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::RawFd;

/// A failed system call, with what was attempted.
///
/// ```
/// let e = lowtide_sockopt::tcp_info(-1).unwrap_err();
/// assert_eq!(e.to_string(), "getsockopt(TCP_INFO) on fd -1: Bad file descriptor (os error 9)");
/// assert_eq!(e.error.raw_os_error(), Some(9)); // EBADF
/// ```
#[derive(Debug, thiserror::Error)]
#[error("{what}: {error}")]
pub struct SysError {
    /// The call, e.g. `setsockopt(TCP_CONGESTION, "cubic")`.
    pub what: String,
    /// The OS error (shown in the message, so not returned again by `source()`).
    pub error: io::Error,
}

/// A libc call's return value as a result: negative is the OS error (`errno`) with `what`
/// the call was; the driver's other socket calls (`lowtide::sys`) use it too.
pub fn check(ret: libc::c_int, what: impl FnOnce() -> String) -> Result<libc::c_int, SysError> {
    if ret < 0 {
        Err(SysError {
            what: what(),
            error: io::Error::last_os_error(),
        })
    } else {
        Ok(ret)
    }
}

/// Sets the congestion control algorithm (`TCP_CONGESTION`), e.g. `"cubic"`.
///
/// ```
/// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
/// # let socket = std::net::TcpStream::connect(listener.local_addr()?)?;
/// # let (_peer, _) = listener.accept()?;
/// use std::os::fd::AsRawFd;
/// let fd = socket.as_raw_fd();
/// lowtide_sockopt::set_congestion(fd, "reno")?;
/// assert_eq!(lowtide_sockopt::congestion(fd)?, "reno");
/// // An unknown name: the error names the call.
/// let e = lowtide_sockopt::set_congestion(fd, "no-such-cc").unwrap_err();
/// assert!(e.to_string().starts_with("setsockopt(TCP_CONGESTION, \"no-such-cc\")"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn set_congestion(fd: RawFd, name: &str) -> Result<(), SysError> {
    // SAFETY: the pointer and length describe `name`'s bytes.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    check(r, || {
        format!("setsockopt(TCP_CONGESTION, {name:?}) on fd {fd}")
    })
    .map(|_| ())
}

/// Reads the congestion control algorithm.
///
/// ```
/// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
/// # let socket = std::net::TcpStream::connect(listener.local_addr()?)?;
/// # let (_peer, _) = listener.accept()?;
/// use std::os::fd::AsRawFd;
/// let fd = socket.as_raw_fd();
/// let cc = lowtide_sockopt::congestion(fd)?; // the system default, e.g. "cubic"
/// assert!(!cc.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn congestion(fd: RawFd) -> Result<String, SysError> {
    let mut buf = [0u8; 32];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: `buf` and `len` are valid for writes of the given length.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    check(r, || format!("getsockopt(TCP_CONGESTION) on fd {fd}"))?;
    let s = &buf[..len as usize];
    let end = s.iter().position(|&b| b == 0).unwrap_or(s.len());
    Ok(String::from_utf8_lossy(&s[..end]).into_owned())
}

/// Raw `TCP_INFO`.
///
/// ```
/// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
/// # let socket = std::net::TcpStream::connect(listener.local_addr()?)?;
/// # let (_peer, _) = listener.accept()?;
/// use std::os::fd::AsRawFd;
/// let fd = socket.as_raw_fd();
/// let info = lowtide_sockopt::tcp_info(fd)?;
/// assert_eq!(info.tcpi_state, 1); // TCP_ESTABLISHED
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn tcp_info(fd: RawFd) -> Result<libc::tcp_info, SysError> {
    tcp_info_with_len(fd).map(|(i, _)| i)
}

/// `TCP_INFO` and the number of bytes the kernel wrote (older kernels write fewer).
fn tcp_info_with_len(fd: RawFd) -> Result<(libc::tcp_info, usize), SysError> {
    let mut info = MaybeUninit::<libc::tcp_info>::zeroed();
    let mut len = size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` is valid for `len` bytes; the kernel writes at most `len` and zeroed
    // memory is a valid `tcp_info` for fields an older kernel does not fill.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    check(r, || format!("getsockopt(TCP_INFO) on fd {fd}"))?;
    // SAFETY: zero-initialised, then (partly) written by the kernel.
    Ok((unsafe { info.assume_init() }, len as usize))
}

/// `TCP_INFO` with the fields that only newer kernels fill (receive window since 6.2, RTO
/// counters since 6.7): `None` where the kernel wrote fewer bytes than the field needs.
///
/// ```
/// use std::os::fd::AsRawFd;
/// let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
/// let socket = std::net::TcpStream::connect(listener.local_addr()?)?;
/// let ext = lowtide_sockopt::tcp_info_ext(socket.as_raw_fd())?;
/// // `None` on kernels older than 6.7, which do not count timeouts yet.
/// if let Some(rtos) = ext.total_rto {
///     assert_eq!(rtos, 0);
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct TcpInfoExt {
    /// The raw `TCP_INFO`, zeros where the kernel wrote nothing.
    pub info: libc::tcp_info,
    /// `tcpi_rcv_wnd`: the receive window we advertise, after scaling, bytes.
    pub rcv_wnd: Option<u32>,
    /// `tcpi_total_rto`: retransmission timeouts so far, SYN and repeated ones included.
    pub total_rto: Option<u16>,
    /// `tcpi_total_rto_recoveries`: recoveries from a timeout, an unfinished one included.
    pub total_rto_recoveries: Option<u16>,
    /// `tcpi_total_rto_time`: time spent recovering from timeouts, ms.
    pub total_rto_time_ms: Option<u32>,
}

/// [`tcp_info`] and which of its later fields the kernel filled ([`TcpInfoExt`]).
///
/// ```
/// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
/// # let socket = std::net::TcpStream::connect(listener.local_addr()?)?;
/// # let (_peer, _) = listener.accept()?;
/// use std::os::fd::AsRawFd;
/// let fd = socket.as_raw_fd();
/// let ext = lowtide_sockopt::tcp_info_ext(fd)?;
/// assert_eq!(ext.info.tcpi_state, 1);
/// if let Some(w) = ext.rcv_wnd {
///     assert!(w > 0); // Linux 6.2 and later report the window we advertise
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn tcp_info_ext(fd: RawFd) -> Result<TcpInfoExt, SysError> {
    use std::mem::offset_of;
    let (i, len) = tcp_info_with_len(fd)?;
    let filled = |offset: usize, size: usize| len >= offset + size;
    Ok(TcpInfoExt {
        rcv_wnd: filled(offset_of!(libc::tcp_info, tcpi_rcv_wnd), 4).then_some(i.tcpi_rcv_wnd),
        total_rto: filled(offset_of!(libc::tcp_info, tcpi_total_rto), 2)
            .then_some(i.tcpi_total_rto),
        total_rto_recoveries: filled(offset_of!(libc::tcp_info, tcpi_total_rto_recoveries), 2)
            .then_some(i.tcpi_total_rto_recoveries),
        total_rto_time_ms: filled(offset_of!(libc::tcp_info, tcpi_total_rto_time), 4)
            .then_some(i.tcpi_total_rto_time),
        info: i,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn extended_tcp_info_reports_what_the_kernel_filled() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_server, _) = listener.accept().unwrap();
        let i = tcp_info_ext(client.as_raw_fd()).unwrap();
        assert_eq!(i.info.tcpi_state, 1, "ESTABLISHED");
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let version: Vec<u32> = release
            .split(|c: char| !c.is_ascii_digit())
            .take(2)
            .filter_map(|x| x.parse().ok())
            .collect();
        if version >= vec![6, 7] {
            assert_eq!(i.total_rto, Some(0));
            assert!(i.rcv_wnd.is_some_and(|w| w > 0));
        }
        assert!(tcp_info_ext(-1).is_err());
    }
}
