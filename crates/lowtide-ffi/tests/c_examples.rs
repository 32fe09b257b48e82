//! Builds `examples/c/` with `cc` against the library this test run built, through the
//! committed `lowtide.pc`, and runs the sender and receiver over loopback: every message must
//! arrive with its importance, and the message cancelled behind a backlog must not arrive.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills a child process on drop (also when an assertion fails).
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The directory holding the `liblowtide_c.so` that cargo built with this test.
fn lib_dir() -> PathBuf {
    let deps = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    assert!(
        deps.join("liblowtide_c.so").exists(),
        "{} has no liblowtide_c.so: build it with `cargo build -p lowtide-ffi`",
        deps.display()
    );
    deps
}

/// A prefix laid out as `docs/c-api.md` tells to install: include/, lib/, lib/pkgconfig/.
fn install_prefix(root: &Path) -> PathBuf {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let prefix = root.join("prefix");
    for d in ["include", "lib/pkgconfig"] {
        std::fs::create_dir_all(prefix.join(d)).unwrap();
    }
    std::fs::copy(
        crate_dir.join("include/lowtide.h"),
        prefix.join("include/lowtide.h"),
    )
    .unwrap();
    std::fs::copy(
        crate_dir.join("lowtide.pc"),
        prefix.join("lib/pkgconfig/lowtide.pc"),
    )
    .unwrap();
    std::os::unix::fs::symlink(
        lib_dir().join("liblowtide_c.so"),
        prefix.join("lib/liblowtide_c.so"),
    )
    .unwrap();
    prefix
}

fn pkg_config(prefix: &Path) -> Vec<String> {
    let out = Command::new("pkg-config")
        .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"))
        .arg(format!("--define-variable=prefix={}", prefix.display()))
        .args(["--cflags", "--libs", "lowtide"])
        .output()
        .expect("pkg-config runs (run.sh installs pkgconf)");
    assert!(
        out.status.success(),
        "pkg-config: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// More flags for cc from `LOWTIDE_TEST_CFLAGS`: `bash run.sh asan` builds the examples with
/// `-fsanitize=address` against a library built with the same.
fn extra_cflags() -> Vec<String> {
    std::env::var("LOWTIDE_TEST_CFLAGS")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

fn compile(example: &str, prefix: &Path, out: &Path) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/c")
        .join(example);
    let status = Command::new("cc")
        .args([
            "-std=c11",
            "-D_POSIX_C_SOURCE=200809L",
            "-Wall",
            "-Wextra",
            "-Werror",
        ])
        .arg(&src)
        .args(pkg_config(prefix))
        .args(extra_cflags())
        .arg(format!("-Wl,-rpath,{}", prefix.join("lib").display()))
        .arg("-o")
        .arg(out)
        .status()
        .expect("cc runs");
    assert!(status.success(), "cc {} failed", src.display());
}

/// Runs a built example: its library comes from its rpath alone (cargo's LD_LIBRARY_PATH
/// would win over the rpath and may hold an older build of the library).
fn example(path: &Path) -> Command {
    let mut c = Command::new(path);
    c.env_remove("LD_LIBRARY_PATH").stdout(Stdio::piped());
    c
}

fn wait_output(child: &mut Reaped, limit: Duration) -> (bool, String) {
    let start = Instant::now();
    loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            let mut out = String::new();
            std::io::Read::read_to_string(child.0.stdout.as_mut().unwrap(), &mut out).unwrap();
            return (status.success(), out);
        }
        assert!(
            start.elapsed() < limit,
            "process still running after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `key=value` from a line of the examples' output.
fn field(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
        .parse()
        .unwrap()
}

#[test]
fn c_sender_and_receiver_over_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = install_prefix(dir.path());
    let (sender, receiver) = (dir.path().join("sender"), dir.path().join("receiver"));
    compile("sender.c", &prefix, &sender);
    compile("receiver.c", &prefix, &receiver);

    // The receiver holds little (small receive memory and socket buffer) and waits 1.5 s
    // before reading, so 24 MiB of backlog cannot drain before the sender cancels.
    let config = r#"{"rcvbuf":65536,"transport":{"max_message_size":1048576,"max_reassembly_bytes":2097152}}"#;
    let mut rx = Reaped(
        example(&receiver)
            .args([
                "--listen",
                "127.0.0.1:0",
                "--pause-ms",
                "1500",
                "--config",
                config,
            ])
            .spawn()
            .unwrap(),
    );
    let mut first = String::new();
    BufReader::new(rx.0.stdout.as_mut().unwrap())
        .read_line(&mut first)
        .unwrap();
    let addr = first
        .trim()
        .strip_prefix("listening ")
        .expect(&first)
        .to_owned();

    let (count, blockers) = (200u64, 96u64);
    let mut tx = Reaped(
        example(&sender)
            .args(["--to", &addr, "--count", &count.to_string()])
            .args([
                "--blockers",
                &blockers.to_string(),
                "--blocker-bytes",
                "262144",
            ])
            .spawn()
            .unwrap(),
    );
    let (tx_ok, tx_out) = wait_output(&mut tx, Duration::from_secs(60));
    let (rx_ok, rx_out) = wait_output(&mut rx, Duration::from_secs(30));
    println!("sender:\n{tx_out}\nreceiver (last lines):");
    for l in rx_out.lines().rev().take(5) {
        println!("{l}");
    }
    assert!(tx_ok, "the sender failed");
    assert!(rx_ok, "the receiver failed (importance mismatch?)");

    let cancel = tx_out.lines().find(|l| l.starts_with("cancel ")).unwrap();
    assert_eq!(
        field(cancel, "status"),
        0,
        "cancel behind a backlog succeeds"
    );
    let victim = field(cancel, "seq");
    let event = tx_out
        .lines()
        .find(|l| l.starts_with("cancelled-event") && field(l, "seq") == victim)
        .expect("a CANCELLED event for the cancelled message");
    assert_eq!(field(event, "reason"), 1, "reason APPLICATION");

    let msgs: Vec<&str> = rx_out.lines().filter(|l| l.starts_with("msg ")).collect();
    assert_eq!(
        msgs.len() as u64,
        count + blockers,
        "every message but the cancelled one"
    );
    assert!(
        msgs.iter().all(|l| field(l, "seq") != victim),
        "the cancelled message arrived"
    );
    // The first `count` messages carry importance seq % 8; the tag checks it end to end.
    for l in &msgs {
        let (seq, importance) = (field(l, "seq"), field(l, "importance"));
        assert_eq!(field(l, "tag"), importance, "{l}");
        if seq < count {
            assert_eq!(importance, seq % 8, "{l}");
        }
    }
    // Higher importance preempts lower: importance-7 messages were not all last.
    let first_seven = msgs
        .iter()
        .position(|l| field(l, "importance") == 7)
        .unwrap();
    assert!(
        first_seven < msgs.len() / 2,
        "importance 7 first delivered at {first_seven}"
    );
}
