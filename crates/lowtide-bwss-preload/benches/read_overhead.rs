//! What an intercepted `read` costs: 64-byte reads from a loopback TCP connection that is
//! always full, through libc's `read` (the library's hook when preloaded) and through the
//! raw system call, alternating in blocks, in three processes of the same run:
//! - `plain`: no library;
//! - `no daemon`: under the library, the connection unregistered (the daemon is absent);
//! - `steered`: under the library, the connection a steered flow with a budget it never
//!   reaches (the whole path: lookup, heartbeat, bucket, byte counter).
//!
//! The hook's overhead is (read − syscall) under the library minus the same in `plain`.
//! Goal: ≤ 1 µs (issue 12). Run: `cargo bench -p lowtide-bwss-preload --bench read_overhead`.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::time::Instant;

use lowtide_bwss::daemon::{Daemon, DaemonOptions};
use lowtide_bwss::Config;

const BLOCK: usize = 20_000;
const BLOCKS: usize = 15;
const READ: usize = 64;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// In a child: reads through `read` and through `syscall(SYS_read)`, alternating blocks;
/// prints the medians in ns per read.
fn child(addr: &str) {
    let s = TcpStream::connect(addr).expect("connect");
    let fd = s.as_raw_fd();
    let mut buf = [0u8; READ];
    let mut hooked = vec![];
    let mut raw = vec![];
    for block in 0..2 * BLOCKS + 2 {
        let t = Instant::now();
        for _ in 0..BLOCK {
            // SAFETY: reading into our buffer.
            let n = unsafe {
                if block % 2 == 0 {
                    libc::read(fd, buf.as_mut_ptr().cast(), READ)
                } else {
                    libc::syscall(libc::SYS_read, fd, buf.as_mut_ptr(), READ) as isize
                }
            };
            assert!(n > 0, "read {n}");
        }
        let ns = t.elapsed().as_nanos() as f64 / BLOCK as f64;
        if block >= 2 {
            if block % 2 == 0 {
                hooked.push(ns)
            } else {
                raw.push(ns)
            }
        }
    }
    println!("{} {}", median(hooked), median(raw));
}

fn main() {
    if let Ok(addr) = std::env::var("BWSS_BENCH_CHILD") {
        child(&addr);
        return;
    }
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            std::thread::spawn(move || {
                let buf = vec![1u8; 1 << 16];
                while c.write_all(&buf).is_ok() {}
            });
        }
    });
    let socket = format!("@lowtide-bwss-bench-{}", std::process::id());
    // A budget of 100 Gbit/s: steered, never limited.
    let config = Config::from_toml("[system]\nlink_kbps = 100000000\n").unwrap();
    let daemon = Daemon::bind(DaemonOptions {
        socket: socket.clone(),
        config,
        log: None,
    })
    .unwrap()
    .spawn()
    .unwrap();
    let exe = std::env::current_exe().unwrap();
    let lib = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("liblowtide_bwss.so");
    assert!(lib.exists(), "{} not built", lib.display());
    let run = |preload: bool, sock: &str| -> (f64, f64) {
        let mut c = Command::new(&exe);
        c.env("BWSS_BENCH_CHILD", &addr)
            .env("LOWTIDE_BWSS_SOCKET", sock);
        if preload {
            c.env("LD_PRELOAD", &lib);
        }
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let mut it = text.split_whitespace().map(|x| x.parse::<f64>().unwrap());
        (it.next().unwrap(), it.next().unwrap())
    };
    let absent = format!("{socket}-absent");
    let mut rows: Vec<(&str, Vec<f64>, Vec<f64>)> = vec![
        ("plain", vec![], vec![]),
        ("no daemon", vec![], vec![]),
        ("steered", vec![], vec![]),
    ];
    for _ in 0..3 {
        for (k, (preload, sock)) in [(false, &socket), (true, &absent), (true, &socket)]
            .into_iter()
            .enumerate()
        {
            let (r, s) = run(preload, sock);
            rows[k].1.push(r);
            rows[k].2.push(s);
        }
    }
    daemon.stop().unwrap();
    println!("read_overhead: {READ}-byte reads on loopback, medians of 3 processes x {BLOCKS} blocks of {BLOCK}");
    println!(
        "{:<10} {:>10} {:>12} {:>10}",
        "process", "read ns", "syscall ns", "read-sys"
    );
    let base = median(rows[0].1.clone()) - median(rows[0].2.clone());
    for (name, r, s) in &rows {
        let (r, s) = (median(r.clone()), median(s.clone()));
        println!("{name:<10} {r:>10.0} {s:>12.0} {:>10.0}", r - s);
    }
    for (name, r, s) in &rows[1..] {
        let over = median(r.clone()) - median(s.clone()) - base;
        let plain = median(rows[0].1.clone());
        println!(
            "{name}: overhead {over:.0} ns per read ({:.1}% of a plain read of {plain:.0} ns); goal <= 1000 ns: {}",
            over / plain * 100.0,
            if over <= 1000.0 { "met" } else { "MISSED" }
        );
    }
}
