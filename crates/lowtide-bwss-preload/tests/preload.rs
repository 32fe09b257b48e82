//! `liblowtide_bwss.so` on loopback, with a daemon running in this test process: real
//! `curl` fetching from `python3 -m http.server`, and the `scenario` example (epoll, poll,
//! fork/dup/close, blocking reads, UDP) run under the library. Rates are measured over a
//! second or two with margins of 20-25%; each test holds a lock so two never share the
//! cores. Needs `curl` and `python3` (run.sh installs curl).
//!
//! Nothing outlives a test: the daemon is a thread of this process with an abstract socket
//! and a memfd (both gone with it), every child is killed when its test ends, also on panic
//! ([`Running`]), and by the kernel when this process is killed (`PR_SET_PDEATHSIG`); file
//! trees a killed run left in the temporary folder are removed by the next run.

use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lowtide_bwss::client::Client;
use lowtide_bwss::daemon::{Daemon, DaemonOptions, RunningDaemon};
use lowtide_bwss::{Config, Status};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
static COUNTER: AtomicUsize = AtomicUsize::new(0);

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// target/<profile>/ (the test runs from target/<profile>/deps/).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// The library under test. `cargo test` does not build a cdylib for its package's tests,
/// so `run.sh test` builds it first; a library older than its sources fails here, rather
/// than testing yesterday's code.
fn lib() -> PathBuf {
    let p = target_dir().join("liblowtide_bwss.so");
    let build = "cargo build -p lowtide-bwss-preload (run.sh test does it before the tests)";
    let built = std::fs::metadata(&p)
        .and_then(|m| m.modified())
        .unwrap_or_else(|_| panic!("{} is missing: {build}", p.display()));
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    for dir in [here.join("src"), here.join("../lowtide-bwss/src")] {
        for f in std::fs::read_dir(&dir).unwrap().flatten() {
            let changed = f.metadata().and_then(|m| m.modified()).unwrap();
            assert!(
                changed <= built,
                "{} is older than {}: {build}",
                p.display(),
                f.path().display()
            );
        }
    }
    p
}

fn scenario() -> PathBuf {
    let p = target_dir().join("examples").join("scenario");
    assert!(
        p.exists(),
        "{} not built (cargo test builds examples)",
        p.display()
    );
    p
}

const PREFIX: &str = "lowtide-bwss-test-";

fn unique(what: &str) -> String {
    format!(
        "{PREFIX}{}-{what}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Removes the temporary trees of earlier runs whose process is gone (killed before its
/// `Drop` could run).
fn remove_stale_trees() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// The kernel kills the child when the thread that spawned it (the test's) ends, so a test
/// process killed with SIGKILL leaves no curl or http.server behind.
fn dies_with_test(cmd: &mut Command) -> &mut Command {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: prctl, getppid and _exit are async-signal-safe; nothing is allocated.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died before prctl: then nobody would signal us.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        })
    }
}

/// A child killed (and reaped) when dropped: a failing assertion leaves no process behind.
struct Running(Option<Child>);

impl Running {
    fn spawn(cmd: &mut Command) -> Running {
        Running(Some(dies_with_test(cmd).spawn().expect("spawning")))
    }

    fn output_within(mut self, secs: u64) -> Output {
        wait_within(self.0.take().unwrap(), secs)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A daemon in this process; stopped on drop.
struct TestDaemon {
    socket: String,
    _running: RunningDaemon,
}

impl TestDaemon {
    fn start(rules: &str) -> TestDaemon {
        TestDaemon::start_on(format!("@{}", unique("sock")), rules)
    }

    fn start_on(socket: String, rules: &str) -> TestDaemon {
        let config = Config::from_toml(rules).expect("rules");
        let running = Daemon::bind(DaemonOptions {
            socket: socket.clone(),
            config,
            log: None,
        })
        .expect("binding the daemon")
        .spawn()
        .expect("starting the daemon");
        TestDaemon {
            socket,
            _running: running,
        }
    }

    fn status(&self) -> Status {
        Client::connect(&self.socket).unwrap().status().unwrap()
    }
}

/// A TCP server in this process (not under the library) that sends bulk data to every
/// connection until told to stop.
struct BulkServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl BulkServer {
    fn start() -> BulkServer {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        l.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((mut c, _)) => {
                        let s = s.clone();
                        std::thread::spawn(move || {
                            c.set_write_timeout(Some(Duration::from_millis(100))).ok();
                            let buf = vec![7u8; 65536];
                            while !s.load(Ordering::Relaxed) {
                                match c.write(&buf) {
                                    Ok(_) => {}
                                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                                    Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                                    Err(_) => break,
                                }
                            }
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        BulkServer { addr, stop }
    }
}

impl Drop for BulkServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// `python3 -m http.server` serving files of the given sizes; killed on drop.
struct HttpServer {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl HttpServer {
    fn start(files: &[(&str, usize)]) -> HttpServer {
        remove_stale_trees();
        let dir = std::env::temp_dir().join(unique("www"));
        std::fs::create_dir_all(&dir).unwrap();
        for (name, size) in files {
            std::fs::write(dir.join(name), vec![b'x'; *size]).unwrap();
        }
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let child = dies_with_test(&mut Command::new("python3"))
            .args([
                "-m",
                "http.server",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
            ])
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 (needed for the preload tests)");
        let give_up = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < give_up, "http.server did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        HttpServer { child, port, dir }
    }

    fn url(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}/{name}", self.port)
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `program` under the library, talking to the daemon at `socket`.
fn preloaded(program: &Path, socket: &str) -> Command {
    let mut c = Command::new(program);
    c.env("LD_PRELOAD", lib())
        .env("LOWTIDE_BWSS_SOCKET", socket);
    c
}

fn curl(socket: &str, url: &str) -> Command {
    let mut c = preloaded(Path::new("curl"), socket);
    // `bash run.sh asan` builds the library with AddressSanitizer: curl, not built with it,
    // loads the sanitizer's runtime first (the Rust programs here link their own).
    if let Some(runtime) = std::env::var_os("LOWTIDE_TEST_ASAN_RUNTIME") {
        let mut both = runtime;
        both.push(":");
        both.push(lib());
        c.env("LD_PRELOAD", both);
    }
    c.args([
        "-sS",
        "--max-time",
        "20",
        "-o",
        "/dev/null",
        "-w",
        "%{size_download} %{time_total}\n",
        url,
    ]);
    c
}

/// Runs `cmd` to its end, killing it (and failing) if it takes longer than `secs`: a test
/// must never hang on a stalled connection.
fn output_within(cmd: &mut Command, secs: u64) -> Output {
    Running::spawn(cmd.stdout(Stdio::piped()).stderr(Stdio::piped())).output_within(secs)
}

fn wait_within(mut child: Child, secs: u64) -> Output {
    let give_up = Instant::now() + Duration::from_secs(secs);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > give_up {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "still running after {secs} s (a stalled connection?): {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().unwrap_or("")).expect("a JSON line")
}

fn within(got: f64, want: f64, margin: f64) -> bool {
    (got / want - 1.0).abs() <= margin
}

#[test]
fn curl_downloads_at_its_target() {
    let _g = serial();
    // 16 Mbit/s for the one flow: 3 MB in 1.5 s.
    let d = TestDaemon::start("[system]\nlink_kbps = 16000\n");
    let www = HttpServer::start(&[("big", 3_000_000)]);
    let out = output_within(&mut curl(&d.socket, &www.url("big")), 10);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut it = text.split_whitespace();
    let size: f64 = it.next().unwrap().parse().unwrap();
    let secs: f64 = it.next().unwrap().parse().unwrap();
    assert_eq!(size, 3e6);
    let rate = size * 8.0 / secs;
    assert!(within(rate, 16e6, 0.2), "curl got {:.2} Mbit/s", rate / 1e6);
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn two_curls_get_minimum_by_priority_then_weights() {
    let _g = serial();
    let video = HttpServer::start(&[("v", 20_000_000)]);
    let bulk = HttpServer::start(&[("b", 20_000_000)]);
    // 16 Mbit/s: the "video" port has priority and 10 Mbit/s, weight 0; the bulk flow the rest
    // of σ, which keeps 5% under the link while a minimum is in force (15.2 Mbit/s) and may
    // have yielded below that at the start (the onset rule) when the video was short.
    let d = TestDaemon::start(&format!(
        "[system]\nlink_kbps = 16000\nprobe_after_ms = 0\n[[rule]]\nname = \"video\"\nremote_port = {}\npriority = 10\nmin_kbps = 10000\nweight = 0\n",
        video.port
    ));
    let a = Running::spawn(&mut curl(&d.socket, &video.url("v")));
    let b = Running::spawn(&mut curl(&d.socket, &bulk.url("b")));
    std::thread::sleep(Duration::from_millis(1800));
    let s = d.status();
    drop((a, b));
    assert_eq!(s.flows.len(), 2, "{s:?}");
    let flow = |rule: Option<&str>| s.flows.iter().find(|f| f.rule.as_deref() == rule).unwrap();
    let (v, f) = (flow(Some("video")), flow(None));
    let sigma = s.sigma_kbps.expect("σ after 1.8 s");
    assert!(
        (13_600.0..=15_200.0).contains(&sigma),
        "σ {sigma:.0} kbit/s"
    );
    assert_eq!(v.target_kbps, Some(10000.0), "{s:?}");
    let rest = f.target_kbps.expect("bulk target");
    assert!(
        (rest - (sigma - 10000.0)).abs() < 1.0,
        "bulk target {rest} of σ {sigma}"
    );
    let (vm, fm) = (v.measured_kbps.unwrap(), f.measured_kbps.unwrap());
    assert!(within(vm, 10000.0, 0.2), "video measured {vm:.0} kbit/s");
    assert!(
        within(fm, rest, 0.25),
        "bulk measured {fm:.0} kbit/s for {rest:.0}"
    );
}

#[test]
fn without_a_daemon_everything_passes_through_with_one_warning() {
    let _g = serial();
    let www = HttpServer::start(&[("a", 200_000), ("b", 200_000)]);
    let socket = format!("@{}", unique("absent"));
    // Two connections (two URLs), one warning.
    let out = output_within(
        curl(&socket, &www.url("a"))
            .arg(www.url("b"))
            .arg("-o")
            .arg("/dev/null"),
        10,
    );
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("lowtide-bwss:").count(), 1, "{err}");
    assert!(err.contains("pass through"), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 2);
}

/// A non-blocking reader over budget gets EAGAIN and sleeps in its event loop: it gets the
/// target, and neither spins (CPU) nor stalls (bytes).
fn event_loop_is_paced(mode: &[&str]) {
    let _g = serial();
    let d = TestDaemon::start("[system]\nlink_kbps = 16000\n");
    let srv = BulkServer::start();
    let out = output_within(
        preloaded(&scenario(), &d.socket)
            .arg(mode[0])
            .arg(srv.addr.to_string())
            .arg("1.5")
            .args(&mode[1..]),
        10,
    );
    let j = json(&out);
    let rate = j["bytes"].as_f64().unwrap() * 8.0 / j["secs"].as_f64().unwrap();
    assert!(
        within(rate, 16e6, 0.2),
        "{mode:?}: {:.2} Mbit/s {j}",
        rate / 1e6
    );
    let cpu = j["cpu"].as_f64().unwrap() / j["secs"].as_f64().unwrap();
    assert!(cpu < 0.3, "{mode:?}: the reader spins: {j}");
}

#[test]
fn epoll_edge_triggered_is_paced_without_spinning() {
    event_loop_is_paced(&["epoll", "et"]);
}

#[test]
fn epoll_level_triggered_is_paced_without_spinning() {
    event_loop_is_paced(&["epoll", "lt"]);
}

#[test]
fn poll_is_paced_without_spinning() {
    event_loop_is_paced(&["poll"]);
}

#[test]
fn a_dup_and_a_forked_child_stay_steered() {
    let _g = serial();
    let d = TestDaemon::start("[system]\nlink_kbps = 16000\n");
    let srv = BulkServer::start();
    let out = output_within(
        preloaded(&scenario(), &d.socket).args(["fork-dup", &srv.addr.to_string(), "0.8"]),
        10,
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let j = json(&out);
    let child: serde_json::Value =
        serde_json::from_str(text.lines().next().unwrap()).expect("the child's line");
    let want = 2e6 * 0.8; // bytes in 0.8 s at 16 Mbit/s
    for (what, got) in [
        ("after dup and close", j["after_dup"].as_f64().unwrap()),
        ("in the forked child", child["child"].as_f64().unwrap()),
        ("after the child exited", j["after_fork"].as_f64().unwrap()),
    ] {
        assert!(
            within(got, want, 0.25),
            "{what}: {got} bytes, want {want}: {text}"
        );
    }
    assert_eq!(j["child_ok"], true);
    // The parent's connection still holds the flow; it ends with the process.
    std::thread::sleep(Duration::from_millis(300));
    assert!(d.status().flows.is_empty(), "{:?}", d.status());
}

#[test]
fn udp_is_untouched() {
    let _g = serial();
    let d = TestDaemon::start("[system]\nlink_kbps = 16000\n");
    let out = output_within(preloaded(&scenario(), &d.socket).arg("udp"), 10);
    assert_eq!(json(&out)["udp_received"], 200);
    assert!(d.status().flows.is_empty());
}

#[test]
fn flows_survive_a_daemon_restart() {
    let _g = serial();
    let socket = format!("@{}", unique("restart"));
    let rules = "[system]\nlink_kbps = 8000\n";
    let d = TestDaemon::start_on(socket.clone(), rules);
    let srv = BulkServer::start();
    let child = Running::spawn(
        preloaded(&scenario(), &socket)
            .args(["blocking", &srv.addr.to_string(), "5"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    std::thread::sleep(Duration::from_millis(1000));
    drop(d); // the daemon dies under a live flow
    std::thread::sleep(Duration::from_millis(2000));
    let d = TestDaemon::start_on(socket, rules);
    std::thread::sleep(Duration::from_millis(1500));
    let registered = d.status().flows.len();
    let out = child.output_within(10);
    let j = json(&out);
    let halves: Vec<f64> = j["halves"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap() * 16.0)
        .collect();
    // Steered (8 Mbit/s), then unsteered once the heartbeat is stale, then steered again.
    assert!(within(halves[1], 8e6, 0.25), "{halves:?}");
    assert!(
        halves[4..6].iter().any(|&r| r > 16e6),
        "never passed through: {halves:?}"
    );
    assert_eq!(registered, 1, "the flow did not register again");
    assert!(within(halves[9], 8e6, 0.25), "{halves:?}");
}
