//! Fan-out cost of `lowtide serve`: N viewers of one live stream, the server on one thread,
//! against the same server as a plain WebSocket server (no controller, no deadlines) in the
//! same run.
//!
//! ```sh
//! cargo bench -p lowtide-serve --bench fanout -- --viewers 100,1000 --seconds 10
//! ```
//!
//! The server runs in this process on a thread of its own (a current-thread runtime, as
//! `lowtide serve` runs), its source a live x264 test pattern at `--kbps` (a `gst-launch-1.0`
//! process); the viewers are light clients (`lowtide_serve::client`, which read, check and
//! report every unit as the player page does) in a child process, so that the server's CPU
//! time (its thread's clock) and memory (this process's resident set) are its own. Memory per
//! viewer is the resident set's growth from before the viewers joined to the end of the
//! window, divided by N: user-space memory only (kernel socket buffers are not in it).
//!
//! Judged at the largest N (the issue's goals for 1000 viewers of a 1 Mbit/s stream): the
//! server thread at most 1 core, at most 128 KiB per viewer, CPU per viewer at most 1.5 times
//! the plain server's.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use lowtide::ControllerConfig;
use lowtide_serve::client::{self, WatchOptions};
use lowtide_serve::hub::HubConfig;
use lowtide_serve::source;
use lowtide_serve::viewer::queue::QueueConfig;
use lowtide_serve::viewer::ViewerConfig;
use lowtide_serve::{ServeConfig, Server};

const PATH: &str = "bench";

struct Args {
    viewers: Vec<usize>,
    seconds: f64,
    kbps: u32,
}

fn args() -> Args {
    let mut a = Args {
        viewers: vec![100, 1000],
        seconds: 10.0,
        kbps: 1000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .unwrap_or_else(|| usage(&format!("{flag} needs a value")))
        };
        match flag.as_str() {
            "--viewers" => {
                a.viewers = value()
                    .split(',')
                    .map(|n| n.parse().unwrap_or_else(|_| usage("--viewers N,N,...")))
                    .collect()
            }
            "--seconds" => a.seconds = value().parse().unwrap_or_else(|_| usage("--seconds S")),
            "--kbps" => a.kbps = value().parse().unwrap_or_else(|_| usage("--kbps K")),
            // `cargo bench` passes --bench; the child mode is below.
            "--bench" => {}
            "--clients" => clients(it.collect()),
            other => usage(&format!("unknown flag {other}")),
        }
    }
    a
}

fn usage(why: &str) -> ! {
    eprintln!("fanout: {why}\nusage: cargo bench -p lowtide-serve --bench fanout -- [--viewers N,N] [--seconds S] [--kbps K]");
    std::process::exit(2)
}

/// Raises the open-file limit to its hard limit: 1000 viewers are 1000 sockets per side.
fn more_files() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the struct passed, nothing else.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Child mode: `--clients ADDR N SECONDS`; prints "units undecodable dropped failed".
fn clients(rest: Vec<String>) -> ! {
    more_files();
    let addr: SocketAddr = rest[0].parse().expect("address");
    let n: usize = rest[1].parse().expect("count");
    let secs: f64 = rest[2].parse().expect("seconds");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (units, undecodable, dropped, failed) = rt.block_on(async move {
        let opts = WatchOptions {
            duration: Duration::from_secs_f64(secs),
            ..WatchOptions::default()
        };
        let tasks: Vec<_> = (0..n)
            .map(|_| tokio::spawn(client::watch(addr, PATH, opts)))
            .collect();
        let (mut units, mut undecodable, mut dropped, mut failed) = (0, 0, 0u64, 0);
        for t in tasks {
            match t.await {
                Ok(Ok(r)) => {
                    units += r.units.len();
                    undecodable += r.undecodable();
                    dropped += r.dropped.iter().sum::<u64>();
                }
                _ => failed += 1,
            }
        }
        (units, undecodable, dropped, failed)
    });
    println!("{units} {undecodable} {dropped} {failed}");
    std::process::exit(0)
}

/// The server thread's CPU clock and a handle that stops it.
struct ServerThread {
    addr: SocketAddr,
    cpu_clock: libc::clockid_t,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    join: Option<std::thread::JoinHandle<()>>,
}

impl ServerThread {
    fn start(plain: bool, kbps: u32, max_viewers: usize) -> Self {
        let (tx, rx) = mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let join = std::thread::spawn(move || {
            let mut clock: libc::clockid_t = 0;
            // SAFETY: writes this thread's CPU clock id into `clock`.
            unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut clock) };
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let queue = if plain {
                    QueueConfig {
                        latency: Duration::from_secs(24 * 3600),
                        max_bytes: 64 << 20,
                    }
                } else {
                    QueueConfig::default()
                };
                let cfg = ServeConfig {
                    http: SocketAddr::from(([127, 0, 0, 1], 0)),
                    ingest: SocketAddr::from(([127, 0, 0, 1], 0)),
                    hub: HubConfig {
                        queue,
                        max_viewers,
                        max_viewers_per_address: max_viewers,
                        ..HubConfig::default()
                    },
                    viewer: ViewerConfig {
                        controller: if plain {
                            ControllerConfig::Unlimited
                        } else {
                            ControllerConfig::default()
                        },
                        ..ViewerConfig::default()
                    },
                    ..ServeConfig::default()
                };
                let server = Server::start(cfg).await.expect("the server starts");
                let cmd = source::test_pattern_command(640, 360, kbps, None);
                let hub = server.hub().clone();
                let src = tokio::spawn(async move { source::run(hub, PATH, &cmd).await });
                while server.hub().get(PATH).is_none() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                tx.send((server.http_addr(), clock))
                    .expect("the bench waits");
                let _ = stopped.await;
                src.abort();
            });
        });
        let (addr, cpu_clock) = rx.recv().expect("the server thread started");
        Self {
            addr,
            cpu_clock,
            stop: Some(stop),
            join: Some(join),
        }
    }

    fn cpu(&self) -> Duration {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: reads the server thread's CPU clock (alive until `stop`) into `t`.
        unsafe { libc::clock_gettime(self.cpu_clock, &mut t) };
        Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
    }
}

impl Drop for ServerThread {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|x| x.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64
}

struct Measured {
    cores: f64,
    cpu_per_viewer_us: f64,
    kib_per_viewer: f64,
    units_per_viewer_s: f64,
    undecodable: u64,
    dropped: u64,
    failed: u64,
}

fn measure(plain: bool, n: usize, a: &Args) -> Measured {
    let server = ServerThread::start(plain, a.kbps, n + 16);
    // Let the encoder settle before the baseline.
    std::thread::sleep(Duration::from_secs(2));
    let rss0 = resident_bytes();
    let join_s = 2.0 + n as f64 / 500.0;
    let child = Command::new(std::env::current_exe().expect("this program"))
        .args([
            "--clients",
            &server.addr.to_string(),
            &n.to_string(),
            &(join_s + a.seconds + 1.0).to_string(),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("the clients' process starts");
    std::thread::sleep(Duration::from_secs_f64(join_s));
    let (cpu0, t0) = (server.cpu(), Instant::now());
    std::thread::sleep(Duration::from_secs_f64(a.seconds));
    let (cpu1, t1) = (server.cpu(), Instant::now());
    let rss1 = resident_bytes();
    let out = child.wait_with_output().expect("the clients end");
    drop(server);
    let text = String::from_utf8_lossy(&out.stdout);
    let v: Vec<u64> = text
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let (units, undecodable, dropped, failed) = (v[0], v[1], v[2], v[3]);
    let cores = (cpu1 - cpu0).as_secs_f64() / (t1 - t0).as_secs_f64();
    Measured {
        cores,
        cpu_per_viewer_us: cores * 1e6 / n as f64,
        kib_per_viewer: rss1.saturating_sub(rss0) as f64 / 1024.0 / n as f64,
        units_per_viewer_s: units as f64 / n as f64 / (join_s + a.seconds + 1.0),
        undecodable,
        dropped,
        failed,
    }
}

fn main() {
    let a = args();
    more_files();
    println!(
        "fan-out: one live stream (640x360 x264, {} kbit/s, 30 fps) to N light viewers over loopback, server on one thread, {} s per measurement",
        a.kbps, a.seconds
    );
    println!(
        "{:<28} {:>6} {:>12} {:>16} {:>13} {:>14} {:>22}",
        "server",
        "N",
        "server cores",
        "CPU µs/s/viewer",
        "KiB/viewer",
        "units/s/viewer",
        "undecodable/dropped/failed"
    );
    let mut last = None;
    for &n in &a.viewers {
        let lt = measure(false, n, &a);
        let plain = measure(true, n, &a);
        for (name, m) in [
            ("lowtide serve (MIN_BUF)", &lt),
            ("plain WebSocket", &plain),
        ] {
            println!(
                "{:<28} {:>6} {:>12.3} {:>16.1} {:>13.1} {:>14.1} {:>22}",
                name,
                n,
                m.cores,
                m.cpu_per_viewer_us,
                m.kib_per_viewer,
                m.units_per_viewer_s,
                format!("{}/{}/{}", m.undecodable, m.dropped, m.failed)
            );
        }
        let ratio = lt.cpu_per_viewer_us / plain.cpu_per_viewer_us;
        println!("  N = {n}: CPU per viewer, lowtide / plain = {ratio:.2}");
        last = Some((n, lt, ratio));
    }
    if let Some((n, lt, ratio)) = last {
        let verdict = |ok: bool| if ok { "met" } else { "NOT met" };
        println!("goals at N = {n} (the issue's: 1000 viewers of a 1 Mbit/s stream):");
        println!(
            "  server thread <= 1 core: {:.3} {}",
            lt.cores,
            verdict(lt.cores <= 1.0)
        );
        println!(
            "  <= 128 KiB per viewer beyond kernel buffers: {:.1} {}",
            lt.kib_per_viewer,
            verdict(lt.kib_per_viewer <= 128.0)
        );
        println!(
            "  CPU per viewer <= 1.5 x plain: {:.2} {}",
            ratio,
            verdict(ratio <= 1.5)
        );
        println!(
            "  every viewer served, every unit decodable: {} failed, {} undecodable {}",
            lt.failed,
            lt.undecodable,
            verdict(lt.failed == 0 && lt.undecodable == 0)
        );
    }
}
