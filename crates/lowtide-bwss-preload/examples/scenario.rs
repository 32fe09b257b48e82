//! Small programs that the preload tests run under `liblowtide_bwss.so`: each reads from a
//! TCP server the way some real program does and prints one JSON line of what it saw.
//!
//! ```text
//! scenario epoll ADDR SECS et|lt   non-blocking socket in an epoll loop (edge/level)
//! scenario poll ADDR SECS          non-blocking socket in a poll loop
//! scenario fork-dup ADDR SECS      dup + close the original, then fork: both sides read
//! scenario blocking ADDR SECS      blocking reads; bytes per half second
//! scenario udp                     UDP on loopback (must be untouched)
//! ```

use std::io::Read;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd};
use std::time::{Duration, Instant};

fn cpu_secs() -> f64 {
    // SAFETY: `u` is valid for writes.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable rusage for the kernel to fill.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let addr = |i: usize| -> SocketAddr { args[i].parse().expect("ADDR") };
    let secs = |i: usize| -> f64 { args[i].parse().expect("SECS") };
    match args.first().map(String::as_str) {
        Some("epoll") => event_loop(addr(1), secs(2), Some(args[3] == "et")),
        Some("poll") => event_loop(addr(1), secs(2), None),
        Some("fork-dup") => fork_dup(addr(1), secs(2)),
        Some("blocking") => blocking(addr(1), secs(2)),
        Some("udp") => udp(),
        _ => {
            eprintln!("usage: scenario epoll|poll|fork-dup|blocking|udp ...");
            std::process::exit(2);
        }
    }
}

/// Reads for `secs` with a non-blocking socket: epoll (edge or level) or poll.
fn event_loop(addr: SocketAddr, secs: f64, epoll_edge: Option<bool>) {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_nonblocking(true).unwrap();
    let fd = s.as_raw_fd();
    let ep = if let Some(edge) = epoll_edge {
        // SAFETY: plain system calls on our own descriptors.
        unsafe {
            let ep = libc::epoll_create1(0);
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32 | if edge { libc::EPOLLET as u32 } else { 0 },
                u64: 7,
            };
            assert_eq!(libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev), 0);
            ep
        }
    } else {
        -1
    };
    let start = Instant::now();
    let cpu0 = cpu_secs();
    let end = start + Duration::from_secs_f64(secs);
    let (mut bytes, mut waits, mut eagain, mut reads) = (0u64, 0u64, 0u64, 0u64);
    let mut buf = vec![0u8; 65536];
    while Instant::now() < end {
        let left = (end - Instant::now()).as_millis() as i32 + 1;
        waits += 1;
        // SAFETY: valid buffers for the calls.
        let ready = unsafe {
            if ep >= 0 {
                let mut out = [libc::epoll_event { events: 0, u64: 0 }; 4];
                libc::epoll_wait(ep, out.as_mut_ptr(), 4, left)
            } else {
                let mut p = libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                };
                libc::poll(&mut p, 1, left)
            }
        };
        if ready <= 0 {
            continue;
        }
        // Drain until EAGAIN, as an edge-triggered loop must.
        loop {
            // SAFETY: reading into our buffer.
            let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n > 0 {
                bytes += n as u64;
                reads += 1;
            } else if n == 0 {
                break;
            } else {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::WouldBlock {
                    eagain += 1;
                    break;
                }
                panic!("recv: {e}");
            }
        }
    }
    let wall = start.elapsed().as_secs_f64();
    println!(
        "{{\"bytes\":{bytes},\"secs\":{wall:.3},\"waits\":{waits},\"reads\":{reads},\"eagain\":{eagain},\"cpu\":{:.3}}}",
        cpu_secs() - cpu0
    );
}

fn read_for(s: &mut TcpStream, secs: f64) -> u64 {
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut buf = vec![0u8; 65536];
    let mut bytes = 0;
    while Instant::now() < end {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => bytes += n as u64,
            Err(e) => panic!("read: {e}"),
        }
    }
    bytes
}

/// dup, close the original, read; fork: the child reads, exits; the parent reads again.
fn fork_dup(addr: SocketAddr, secs: f64) {
    let s = TcpStream::connect(addr).expect("connect");
    let orig = s.into_raw_fd();
    // SAFETY: plain dup/close of our own descriptor.
    let copy = unsafe { libc::dup(orig) };
    assert!(copy >= 0);
    // SAFETY: `orig` came from `into_raw_fd` and nothing else owns or uses it.
    unsafe { libc::close(orig) };
    // SAFETY: `copy` is ours from here on.
    let mut s = unsafe { TcpStream::from_raw_fd(copy) };
    let after_dup = read_for(&mut s, secs);
    // SAFETY: fork in a single-threaded program.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let child = read_for(&mut s, secs);
        println!("{{\"child\":{child}}}");
        std::process::exit(0);
    }
    let mut status = 0;
    // SAFETY: waiting for our child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    let after_fork = read_for(&mut s, secs);
    println!(
        "{{\"after_dup\":{after_dup},\"after_fork\":{after_fork},\"child_ok\":{}}}",
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
    );
}

/// Blocking reads for `secs`; bytes in each half second.
fn blocking(addr: SocketAddr, secs: f64) {
    let mut s = TcpStream::connect(addr).expect("connect");
    let halves: Vec<u64> = (0..(secs * 2.0) as usize)
        .map(|_| read_for(&mut s, 0.5))
        .collect();
    println!("{{\"halves\":{halves:?}}}");
}

fn udp() {
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let b = UdpSocket::bind("127.0.0.1:0").unwrap();
    b.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let mut got = 0;
    let mut buf = [0u8; 2048];
    for _ in 0..200 {
        a.send_to(&[1u8; 1400], b.local_addr().unwrap()).unwrap();
        if b.recv(&mut buf).is_ok() {
            got += 1;
        }
    }
    println!("{{\"udp_received\":{got}}}");
}
