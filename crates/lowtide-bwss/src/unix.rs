//! The daemon's Unix socket: addresses (a path or an abstract `@name`), and messages that
//! carry a descriptor (`SCM_RIGHTS`).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};

/// `@name` is an abstract name (per network namespace); anything else a path.
pub fn address(name: &str) -> io::Result<SocketAddr> {
    match name.strip_prefix('@') {
        Some(abs) => SocketAddr::from_abstract_name(abs.as_bytes()),
        None => SocketAddr::from_pathname(name),
    }
}

pub fn connect(name: &str) -> io::Result<UnixStream> {
    UnixStream::connect_addr(&address(name)?)
}

pub fn bind(name: &str) -> io::Result<UnixListener> {
    UnixListener::bind_addr(&address(name)?)
}

/// Sends all of `data`, the first part with `fd` attached.
pub fn send_with_fd(sock: &UnixStream, data: &[u8], fd: RawFd) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(size_of::<RawFd>() as u32) } as usize;
    let mut cbuf = vec![0u8; space];
    // SAFETY: msghdr is plain data; every pointer set below outlives the sendmsg call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = space;
    // SAFETY: the control buffer has room for one header and one descriptor.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(size_of::<RawFd>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut RawFd, fd);
    }
    // SAFETY: msg is fully initialised.
    let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = n as usize;
    if n < data.len() {
        use std::io::Write;
        (&*sock).write_all(&data[n..])?;
    }
    Ok(())
}

/// Reads into `buf` once, keeping a descriptor that came along.
pub fn recv_with_fd(
    sock: &UnixStream,
    buf: &mut [u8],
    fd: &mut Option<OwnedFd>,
) -> io::Result<usize> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: pure computation.
    let space = unsafe { libc::CMSG_SPACE(size_of::<RawFd>() as u32 * 4) } as usize;
    let mut cbuf = vec![0u8; space];
    // SAFETY: plain data; the pointers outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = space;
    // SAFETY: msg describes valid buffers.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: walking the control messages the kernel wrote into `cbuf`.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c) as *const RawFd;
                let count = ((*c).cmsg_len - libc::CMSG_LEN(0) as usize) / size_of::<RawFd>();
                for k in 0..count {
                    let got = OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(k)));
                    if fd.is_none() {
                        *fd = Some(got);
                    }
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok(n as usize)
}
