//! The TCP socket behind a descriptor: whether it is one (IPv4 or IPv6), its inode (a
//! flow's identity across `dup` and `fork`), its addresses.

use std::net::SocketAddr;
use std::os::fd::RawFd;

/// The socket's inode, if `fd` is a TCP socket over IPv4 or IPv6.
pub fn tcp_inode(fd: RawFd) -> Option<u64> {
    let int_opt = |level, opt| {
        let mut v: libc::c_int = 0;
        let mut len = size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `v` and `len` are valid for writes.
        let r = unsafe {
            libc::getsockopt(
                fd,
                level,
                opt,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        (r == 0).then_some(v)
    };
    if int_opt(libc::SOL_SOCKET, libc::SO_TYPE)? != libc::SOCK_STREAM {
        return None;
    }
    let domain = int_opt(libc::SOL_SOCKET, libc::SO_DOMAIN)?;
    if domain != libc::AF_INET && domain != libc::AF_INET6 {
        return None;
    }
    if int_opt(libc::SOL_SOCKET, libc::SO_PROTOCOL)? != libc::IPPROTO_TCP {
        return None;
    }
    // SAFETY: `st` is valid for writes.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some(st.st_ino)
}

/// The local (`peer` false) or the remote address.
pub fn sockaddr(fd: RawFd, peer: bool) -> Option<SocketAddr> {
    // SAFETY: sockaddr_storage is plain data, large enough for any address.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    let p = (&mut ss as *mut libc::sockaddr_storage).cast();
    // SAFETY: `ss` and `len` are valid for writes.
    let r = unsafe {
        if peer {
            libc::getpeername(fd, p, &mut len)
        } else {
            libc::getsockname(fd, p, &mut len)
        }
    };
    if r != 0 {
        return None;
    }
    // SAFETY: the family field tells which layout the kernel wrote.
    unsafe { from_sockaddr(p, len) }
}

/// A `sockaddr` of IPv4 or IPv6 as a [`SocketAddr`].
///
/// # Safety
/// `p` must point to `len` readable bytes.
pub unsafe fn from_sockaddr(p: *const libc::sockaddr, len: libc::socklen_t) -> Option<SocketAddr> {
    if p.is_null() || (len as usize) < size_of::<libc::sa_family_t>() {
        return None;
    }
    // SAFETY: by the caller's contract and the family check.
    unsafe {
        match (*p).sa_family as libc::c_int {
            libc::AF_INET if len as usize >= size_of::<libc::sockaddr_in>() => {
                let a = &*(p as *const libc::sockaddr_in);
                Some(SocketAddr::from((
                    u32::from_be(a.sin_addr.s_addr).to_be_bytes(),
                    u16::from_be(a.sin_port),
                )))
            }
            libc::AF_INET6 if len as usize >= size_of::<libc::sockaddr_in6>() => {
                let a = &*(p as *const libc::sockaddr_in6);
                Some(SocketAddr::from((
                    a.sin6_addr.s6_addr,
                    u16::from_be(a.sin6_port),
                )))
            }
            _ => None,
        }
    }
}

/// Local and remote address.
pub fn addresses(fd: RawFd) -> Option<(SocketAddr, SocketAddr)> {
    Some((sockaddr(fd, false)?, sockaddr(fd, true)?))
}

/// `TCP_INFO` of the socket (`lowtide_sockopt::tcp_info`); `None` when the call fails.
pub fn tcp_info(fd: RawFd) -> Option<libc::tcp_info> {
    lowtide_sockopt::tcp_info(fd).ok()
}

/// The receiver's view of a connection, from one `TCP_INFO`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcvState {
    /// Its round-trip estimate (`tcpi_rcv_rtt`, `None` before it has one).
    pub rtt: Option<std::time::Duration>,
    /// The larger of the segment sizes it receives and advertises.
    pub mss: u32,
    /// Bytes that have arrived, in order, whether read or not (`tcpi_bytes_received`).
    pub bytes_received: u64,
}

/// The receiver's view of the connection on `fd`.
pub fn rcv_state(fd: RawFd) -> Option<RcvState> {
    let i = tcp_info(fd)?;
    Some(RcvState {
        rtt: (i.tcpi_rcv_rtt > 0).then(|| std::time::Duration::from_micros(i.tcpi_rcv_rtt.into())),
        mss: i.tcpi_rcv_mss.max(i.tcpi_advmss),
        bytes_received: i.tcpi_bytes_received,
    })
}

/// Sets `TCP_WINDOW_CLAMP` (errors ignored: a socket that refuses is left as it is).
pub fn set_window_clamp(fd: RawFd, bytes: u32) {
    let v = bytes.min(i32::MAX as u32) as libc::c_int;
    // SAFETY: `v` outlives the call; the length matches.
    unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_WINDOW_CLAMP,
            (&v as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}
