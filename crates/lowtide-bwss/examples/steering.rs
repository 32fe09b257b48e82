//! What steers a Linux receive window? One bulk cubic flow through an emulated bottleneck,
//! its receiver steered by one mechanism towards a target rate that halves half way through;
//! prints the achieved rate against the target, how fast it got there, and what the kernel
//! showed (`tcpi_rcv_wnd`, `tcpi_rcv_space`, bytes queued unread). The numbers are in
//! `docs/bwss.md`. Needs root (namespaces); run it alone:
//!
//! ```sh
//! cargo build --release -p lowtide-bwss --example steering
//! tools/lt-timing ./target/release/examples/steering --rtt 20,200 --targets 0.1,1,10
//! ```
//!
//! Mechanisms (`--mech`), with `W` = target × RTT:
//! - `none`: read everything at once, no steering (the link's rate);
//! - `rcvbuf`: `SO_RCVBUF = W` when the flow starts and when the target changes;
//! - `clamp-once`: `TCP_WINDOW_CLAMP = W` when the flow starts and when the target changes;
//! - `clamp`: the same, re-applied every 100 ms (the kernel rewrites it);
//! - `clamp-shrink`: `clamp` with `net.ipv4.tcp_shrink_window = 1` on the receiver;
//! - `paced`: reads paced by a token bucket at the target (20 ms of depth), no window option;
//! - `paced-clamp`: paced reads and `TCP_WINDOW_CLAMP = 2W` re-applied every 100 ms.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use lowtide_netem::{Dumbbell, RunOptions, TopologyConfig};

const MSS: f64 = 1448.0;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Mech {
    None,
    Rcvbuf,
    ClampOnce,
    Clamp,
    ClampShrink,
    Paced,
    PacedClamp,
}

impl Mech {
    fn parse(s: &str) -> Option<Mech> {
        Some(match s {
            "none" => Mech::None,
            "rcvbuf" => Mech::Rcvbuf,
            "clamp-once" => Mech::ClampOnce,
            "clamp" => Mech::Clamp,
            "clamp-shrink" => Mech::ClampShrink,
            "paced" => Mech::Paced,
            "paced-clamp" => Mech::PacedClamp,
            _ => return None,
        })
    }
    fn name(self) -> &'static str {
        match self {
            Mech::None => "none",
            Mech::Rcvbuf => "rcvbuf",
            Mech::ClampOnce => "clamp-once",
            Mech::Clamp => "clamp",
            Mech::ClampShrink => "clamp-shrink",
            Mech::Paced => "paced",
            Mech::PacedClamp => "paced-clamp",
        }
    }
    fn paced(self) -> bool {
        matches!(self, Mech::Paced | Mech::PacedClamp)
    }
    fn reapplies_clamp(self) -> bool {
        matches!(self, Mech::Clamp | Mech::ClampShrink | Mech::PacedClamp)
    }
}

struct Args {
    link_mbps: f64,
    rtts_ms: Vec<f64>,
    targets_mbps: Vec<f64>,
    mechs: Vec<Mech>,
    secs: f64,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        link_mbps: 20.0,
        rtts_ms: vec![20.0, 200.0],
        targets_mbps: vec![0.1, 1.0, 10.0],
        mechs: vec![
            Mech::None,
            Mech::Rcvbuf,
            Mech::ClampOnce,
            Mech::Clamp,
            Mech::ClampShrink,
            Mech::Paced,
            Mech::PacedClamp,
        ],
        secs: 8.0,
    };
    let mut it = std::env::args().skip(1);
    let list = |v: Option<String>| -> Result<Vec<f64>, String> {
        v.ok_or("missing value")?
            .split(',')
            .map(|x| x.parse::<f64>().map_err(|e| format!("{x}: {e}")))
            .collect()
    };
    while let Some(k) = it.next() {
        match k.as_str() {
            "--link" => a.link_mbps = list(it.next())?[0],
            "--rtt" => a.rtts_ms = list(it.next())?,
            "--targets" => a.targets_mbps = list(it.next())?,
            "--secs" => a.secs = list(it.next())?[0],
            "--mech" => {
                a.mechs = it
                    .next()
                    .ok_or("missing value")?
                    .split(',')
                    .map(|m| Mech::parse(m).ok_or(format!("unknown mechanism {m}")))
                    .collect::<Result<_, _>>()?
            }
            _ => return Err(format!("unknown argument {k}")),
        }
    }
    Ok(a)
}

/// One run's findings.
struct Row {
    mech: Mech,
    rtt_ms: f64,
    target: f64,
    /// Arrival rate (tcpi_bytes_received) in the last 2 s of the first half, bit/s.
    first: f64,
    /// The same in the second half (target / 2).
    second: f64,
    /// What the application read in the same two windows, bit/s.
    read1: f64,
    read2: f64,
    /// From the start until the 500 ms rate is within 20% of the target (or above and falls in).
    settle_start: Option<f64>,
    /// From the step until the 500 ms rate is within 20% of the halved target.
    settle_step: Option<f64>,
    rcv_wnd_median: u32,
    rcv_space_median: u32,
    inq_max: u32,
    clamp_rewrites: u32,
    retrans: u32,
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("steering: {e}");
            std::process::exit(2);
        }
    };
    println!(
        "kernel {}; link {} Mbit/s; {} s per run, target halves at {} s",
        std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim(),
        args.link_mbps,
        args.secs,
        args.secs / 2.0
    );
    println!(
        "{:<13} {:>5} {:>7} {:>8} {:>6} {:>8} {:>6} {:>7} {:>7} {:>7} {:>7} {:>8} {:>9} {:>8} {:>6} {:>5}",
        "mechanism",
        "rtt",
        "target",
        "got1",
        "err1",
        "got2",
        "err2",
        "read1",
        "read2",
        "settle1",
        "settle2",
        "rcv_wnd",
        "rcv_space",
        "inq_max",
        "rewr",
        "retr"
    );
    let mut port = 7100u16;
    for &rtt in &args.rtts_ms {
        let mut cfg = TopologyConfig::symmetric(args.link_mbps, rtt / 2.0);
        cfg.hosts.congestion = "cubic".into();
        let net = Dumbbell::new(cfg, RunOptions::default()).expect("building the dumbbell (root?)");
        for &target in &args.targets_mbps {
            for &mech in &args.mechs {
                port += 1;
                let shrink = if mech == Mech::ClampShrink { "1" } else { "0" };
                net.receiver(0)
                    .sysctl("net.ipv4.tcp_shrink_window", shrink)
                    .expect("tcp_shrink_window");
                match run(&net, mech, rtt, target * 1e6, args.secs, port) {
                    Ok(r) => print_row(&r),
                    Err(e) => println!("{:<13} {rtt:>5} {target:>7}: {e}", mech.name()),
                }
            }
        }
    }
}

fn print_row(r: &Row) {
    let err = |got: f64, want: f64| format!("{:+.0}%", (got / want - 1.0) * 100.0);
    let secs = |s: Option<f64>| s.map_or("never".into(), |s| format!("{s:.1}s"));
    println!(
        "{:<13} {:>5} {:>7} {:>8.0} {:>6} {:>8.0} {:>6} {:>7} {:>7} {:>7} {:>7} {:>8} {:>9} {:>8} {:>6} {:>5}",
        r.mech.name(),
        r.rtt_ms,
        r.target / 1e6,
        r.first / 1e3,
        err(r.first, r.target),
        r.second / 1e3,
        err(r.second, r.target / 2.0),
        err(r.read1, r.target),
        err(r.read2, r.target / 2.0),
        secs(r.settle_start),
        secs(r.settle_step),
        r.rcv_wnd_median,
        r.rcv_space_median,
        r.inq_max,
        r.clamp_rewrites,
        r.retrans
    );
}

fn run(
    net: &Dumbbell,
    mech: Mech,
    rtt_ms: f64,
    target: f64,
    secs: f64,
    port: u16,
) -> Result<Row, String> {
    let duration = Duration::from_secs_f64(secs);
    let recv = net
        .receiver(0)
        .spawn("steer-recv", move || {
            receive(mech, rtt_ms, target, duration, port)
        })
        .map_err(|e| e.to_string())?;
    std::thread::sleep(Duration::from_millis(100));
    let to = SocketAddr::from((net.receiver(0).addr(), port));
    let send = net
        .sender(0)
        .spawn("steer-send", move || send_bulk(to, duration))
        .map_err(|e| e.to_string())?;
    let row = recv.join().map_err(|_| "receiver panicked")??;
    let _ = send.join();
    Ok(row)
}

fn send_bulk(to: SocketAddr, duration: Duration) -> Result<(), String> {
    let s = TcpStream::connect_timeout(&to, Duration::from_secs(2)).map_err(|e| e.to_string())?;
    // Errors ignored, as before: the system default then.
    let _ = lowtide_sockopt::set_congestion(s.as_raw_fd(), "cubic");
    s.set_write_timeout(Some(Duration::from_millis(200)))
        .map_err(|e| e.to_string())?;
    let buf = vec![0u8; 64 << 10];
    let end = Instant::now() + duration + Duration::from_millis(300);
    let mut s = s;
    while Instant::now() < end {
        match s.write(&buf) {
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    Ok(())
}

fn setsockopt(fd: RawFd, level: i32, opt: i32, v: i32) {
    // SAFETY: `v` outlives the call; the length matches.
    unsafe {
        libc::setsockopt(fd, level, opt, (&v as *const i32).cast(), 4);
    }
}

fn getsockopt(fd: RawFd, level: i32, opt: i32) -> i32 {
    let mut v = 0i32;
    let mut len = 4u32;
    // SAFETY: `v` and `len` are valid for writes.
    unsafe {
        libc::getsockopt(fd, level, opt, (&mut v as *mut i32).cast(), &mut len);
    }
    v
}

fn tcp_info(fd: RawFd) -> libc::tcp_info {
    lowtide_bwss::tcp::tcp_info(fd).expect("TCP_INFO")
}

fn inq(fd: RawFd) -> u32 {
    let mut v = 0i32;
    // SAFETY: FIONREAD writes one int.
    unsafe { libc::ioctl(fd, libc::FIONREAD, &mut v) };
    v.max(0) as u32
}

fn apply_window(fd: RawFd, mech: Mech, window: f64) {
    let w = window.round().max(1.0) as i32;
    match mech {
        Mech::Rcvbuf => setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, w),
        Mech::ClampOnce | Mech::Clamp | Mech::ClampShrink => {
            setsockopt(fd, libc::IPPROTO_TCP, libc::TCP_WINDOW_CLAMP, w)
        }
        Mech::PacedClamp => setsockopt(fd, libc::IPPROTO_TCP, libc::TCP_WINDOW_CLAMP, 2 * w),
        Mech::None | Mech::Paced => {}
    }
}

fn receive(
    mech: Mech,
    rtt_ms: f64,
    target: f64,
    duration: Duration,
    port: u16,
) -> Result<Row, String> {
    let l = TcpListener::bind(("0.0.0.0", port)).map_err(|e| e.to_string())?;
    l.set_nonblocking(true).map_err(|e| e.to_string())?;
    let give_up = Instant::now() + Duration::from_secs(3);
    let mut s = loop {
        match l.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < give_up => {
                std::thread::sleep(Duration::from_millis(2))
            }
            Err(e) => return Err(format!("accept: {e}")),
        }
    };
    s.set_nonblocking(true).map_err(|e| e.to_string())?;
    let fd = s.as_raw_fd();
    let start = Instant::now();
    let half = duration / 2;
    let rtt = rtt_ms / 1000.0;
    let mut rate = target / 8.0; // bytes/s
    let mut window = rate * rtt;
    apply_window(fd, mech, window);
    let mut stepped = false;
    let mut buf = vec![0u8; 256 << 10];
    let depth = (rate * 0.02).max(MSS);
    let mut tokens = depth;
    let mut last = start;
    let mut next_sample = start;
    let mut next_reapply = start + Duration::from_millis(100);
    let mut samples: Vec<(f64, u64)> = vec![];
    let mut reads: Vec<(f64, u64)> = vec![];
    let mut read_total = 0u64;
    let (mut wnds, mut spaces) = (vec![], vec![]);
    let mut inq_max = 0;
    let mut rewrites = 0;
    loop {
        let now = Instant::now();
        let t = now - start;
        if t >= duration {
            break;
        }
        if !stepped && t >= half {
            stepped = true;
            rate /= 2.0;
            window /= 2.0;
            tokens = tokens.min((rate * 0.02).max(MSS));
            apply_window(fd, mech, window);
        }
        if mech.reapplies_clamp() && now >= next_reapply {
            next_reapply += Duration::from_millis(100);
            let want = if mech == Mech::PacedClamp {
                2.0 * window
            } else {
                window
            };
            let have = getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_WINDOW_CLAMP);
            if (have as f64 - want.round().max(2304.0)).abs() > 1.0 {
                rewrites += 1;
            }
            apply_window(fd, mech, window);
        }
        if now >= next_sample {
            next_sample += Duration::from_millis(50);
            let i = tcp_info(fd);
            samples.push((t.as_secs_f64(), i.tcpi_bytes_received));
            reads.push((t.as_secs_f64(), read_total));
            wnds.push(i.tcpi_rcv_wnd);
            spaces.push(i.tcpi_rcv_space);
            inq_max = inq_max.max(inq(fd));
        }
        let want = if mech.paced() {
            tokens = (tokens + (now - last).as_secs_f64() * rate).min((rate * 0.02).max(MSS));
            last = now;
            if tokens < 1.0 {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            (tokens as usize).min(buf.len())
        } else {
            buf.len()
        };
        match s.read(&mut buf[..want]) {
            Ok(0) => break,
            Ok(n) => {
                read_total += n as u64;
                if mech.paced() {
                    tokens -= n as f64;
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(1))
            }
            Err(e) => return Err(format!("read: {e}")),
        }
    }
    let retrans = tcp_info(fd).tcpi_total_retrans;
    let secs = duration.as_secs_f64();
    let rate_in = |samples: &[(f64, u64)], a: f64, b: f64| -> f64 {
        let first = samples.iter().find(|s| s.0 >= a);
        let last = samples.iter().rev().find(|s| s.0 <= b);
        match (first, last) {
            (Some(x), Some(y)) if y.0 > x.0 => (y.1 - x.1) as f64 * 8.0 / (y.0 - x.0),
            _ => f64::NAN,
        }
    };
    let rate_between = |a: f64, b: f64| rate_in(&samples, a, b);
    let settle = |from: f64, to: f64, want: f64| -> Option<f64> {
        let mut t = from;
        while t + 0.5 <= to {
            let r = rate_between(t, t + 0.5);
            if (r / want - 1.0).abs() <= 0.2 {
                return Some(t + 0.5 - from);
            }
            t += 0.05;
        }
        None
    };
    let median = |v: &mut Vec<u32>| {
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or(0)
    };
    Ok(Row {
        mech,
        rtt_ms,
        target,
        first: rate_between(secs / 2.0 - 2.0, secs / 2.0),
        second: rate_between(secs - 2.0, secs),
        read1: rate_in(&reads, secs / 2.0 - 2.0, secs / 2.0),
        read2: rate_in(&reads, secs - 2.0, secs),
        settle_start: settle(0.0, secs / 2.0, target),
        settle_step: settle(secs / 2.0, secs, target / 2.0),
        rcv_wnd_median: median(&mut wnds),
        rcv_space_median: median(&mut spaces),
        inq_max,
        clamp_rewrites: rewrites,
        retrans,
    })
}
