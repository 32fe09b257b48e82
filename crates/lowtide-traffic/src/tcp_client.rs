//! The TCP client steps elephants and mice share: connect with the congestion control set
//! before the SYN, socket timeouts so blocking calls wake up for the [`Stop`], and I/O loops
//! that end at the stop instead of hanging.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

use crate::congestion::set_congestion_control;
use crate::wire::{Request, STATUS_CC_REFUSED, STATUS_OK};
use crate::{Stop, TrafficError, POLL_INTERVAL};

/// Longest a single connect may take, even if the stop is further away.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Zeros to send; the content does not matter.
pub(crate) static ZEROS: [u8; 64 * 1024] = [0u8; 64 * 1024];

/// Connect to `addr` with `cc` set before the SYN, and send `request`.
/// Download requests also read the sink's status byte.
pub(crate) fn open(
    addr: SocketAddr,
    cc: &str,
    request: &Request,
    stop: &Stop,
) -> Result<TcpStream, TrafficError> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
        .map_err(|e| TrafficError::io("creating a TCP socket", addr, e))?;
    set_congestion_control(&sock, cc)?;
    let timeout = stop
        .remaining()
        .min(CONNECT_TIMEOUT)
        .max(Duration::from_millis(1));
    sock.connect_timeout(&addr.into(), timeout)
        .map_err(|e| TrafficError::io("connecting", addr, e))?;
    let mut stream: TcpStream = sock.into();
    stream
        .set_read_timeout(Some(POLL_INTERVAL))
        .and_then(|()| stream.set_write_timeout(Some(POLL_INTERVAL)))
        .map_err(|e| TrafficError::io("setting socket timeouts", addr, e))?;
    let header = request.encode();
    if !write_all_until(&mut stream, &header, stop)
        .map_err(|e| TrafficError::io("sending the request", addr, e))?
    {
        return Err(TrafficError::io(
            "sending the request",
            addr,
            io::Error::new(
                io::ErrorKind::TimedOut,
                "stopped before the request was sent",
            ),
        ));
    }
    if request.direction == crate::Direction::Download {
        let mut status = [0u8; 1];
        let got = read_exact_until(&mut stream, &mut status, stop)
            .map_err(|e| TrafficError::io("reading the download status", addr, e))?;
        match (got, status[0]) {
            (false, _) => {
                return Err(TrafficError::io(
                    "reading the download status",
                    addr,
                    io::Error::new(io::ErrorKind::TimedOut, "stopped before the sink answered"),
                ))
            }
            (true, STATUS_OK) => {}
            (true, STATUS_CC_REFUSED) => {
                return Err(TrafficError::RemoteCongestionControl {
                    addr,
                    algorithm: cc.to_owned(),
                })
            }
            (true, other) => {
                return Err(TrafficError::Protocol {
                    addr,
                    what: format!("unknown download status {other}"),
                })
            }
        }
    }
    Ok(stream)
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Write all of `buf` unless stopped first; Ok(false) means stopped.
pub(crate) fn write_all_until(s: &mut TcpStream, mut buf: &[u8], stop: &Stop) -> io::Result<bool> {
    while !buf.is_empty() {
        if stop.is_stopped() {
            return Ok(false);
        }
        match s.write(buf) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(e) if is_timeout(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Fill `buf` unless stopped first; Ok(false) means stopped, EOF is an error.
pub(crate) fn read_exact_until(
    s: &mut TcpStream,
    mut buf: &mut [u8],
    stop: &Stop,
) -> io::Result<bool> {
    while !buf.is_empty() {
        if stop.is_stopped() {
            return Ok(false);
        }
        match s.read(buf) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => buf = &mut buf[n..],
            Err(e) if is_timeout(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Read and count until EOF or the stop: `(bytes, reached_eof)`.
pub(crate) fn read_to_eof_until(s: &mut TcpStream, stop: &Stop) -> io::Result<(u64, bool)> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        if stop.is_stopped() {
            return Ok((total, false));
        }
        match s.read(&mut buf) {
            Ok(0) => return Ok((total, true)),
            Ok(n) => total += n as u64,
            Err(e) if is_timeout(&e) => {}
            Err(e) => return Err(e),
        }
    }
}

/// Bytes written but not yet acknowledged by the peer (`SIOCOUTQ`).
pub(crate) fn unacked_bytes(s: &TcpStream) -> io::Result<u64> {
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQ (== TIOCOUTQ) on a TCP socket writes one c_int to the pointer, which
    // points at a live local of that type; the fd is owned by `s` and open.
    let rc = unsafe { libc::ioctl(s.as_raw_fd(), libc::TIOCOUTQ, &mut n as *mut libc::c_int) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Close with RST so nothing queued keeps flowing after the flow's stop time.
pub(crate) fn abort(s: TcpStream) {
    let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
    drop(s);
}
