//! The common mistakes of `docs/errors.md`, provoked with the real `lowtide` binary over
//! loopback: for every row of the doc's table that names a case, the printed `error:` line
//! matches the row (`…` stands for anything) and no clause of it repeats an earlier one. The
//! table is read from the doc, so the doc and what the command prints cannot drift apart.
//! A few seconds, no root needed.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const LOWTIDE: &str = env!("CARGO_BIN_EXE_lowtide");

/// The table's rows that name a case: (case, expected line).
fn documented() -> Vec<(String, String)> {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/errors.md");
    let text = std::fs::read_to_string(&doc).expect("docs/errors.md");
    let mut rows = Vec::new();
    for line in text.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        assert_eq!(cells.len(), 3, "a row of three cells: {line}");
        let case = cells[0].trim_matches('`').to_owned();
        let printed = cells[2]
            .strip_prefix("``")
            .and_then(|c| c.strip_suffix("``"))
            .unwrap_or_else(|| panic!("the printed line in `` ``: {line}"))
            .trim()
            .to_owned();
        rows.push((case, printed));
    }
    rows
}

/// Whether `line` matches `pattern`, where `…` in the pattern stands for anything.
fn matches(pattern: &str, line: &str) -> bool {
    let pieces: Vec<&str> = pattern.split('…').collect();
    let (first, last) = (pieces[0], pieces[pieces.len() - 1]);
    if pieces.len() == 1 {
        return pattern == line;
    }
    if !line.starts_with(first) || !line.ends_with(last) || line.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &line[first.len()..line.len() - last.len()];
    for piece in &pieces[1..pieces.len() - 1] {
        match rest.find(piece) {
            Some(i) => rest = &rest[i + piece.len()..],
            None => return false,
        }
    }
    true
}

/// A clause (the line split at `: ` and `; `) that repeats an earlier one, or is contained in
/// a later one: the sign of an error printed by its wrapper and again as its source.
fn repeated_clause(line: &str) -> Option<String> {
    let clauses: Vec<&str> = line
        .split(": ")
        .flat_map(|c| c.split("; "))
        .map(str::trim)
        .filter(|c| c.len() >= 6)
        .collect();
    for (i, a) in clauses.iter().enumerate() {
        for b in &clauses[i + 1..] {
            if b.contains(a) || a.contains(b) {
                return Some(format!("{a:?} and {b:?}"));
            }
        }
    }
    None
}

#[test]
fn the_repeated_clause_check_catches_a_cause_printed_twice() {
    let twice = "error: protocol error: malformed input: bad magic [15, 03, 03, 00]: peer does \
                 not speak lowtide: malformed input: bad magic [15, 03, 03, 00]: peer does not \
                 speak lowtide";
    assert!(repeated_clause(twice).is_some());
    let twice = "error: connecting to 127.0.0.1:9: connect(127.0.0.1:9): Connection refused \
                 (os error 111): Connection refused (os error 111)";
    assert!(repeated_clause(twice).is_some());
    let once = "error: connect(127.0.0.1:9): Connection refused (os error 111); nothing \
                listens there";
    assert_eq!(repeated_clause(once), None);
    assert!(matches("error: a …: b", "error: a 127.0.0.1:9: b"));
    assert!(!matches("error: a …: b", "error: a 127.0.0.1:9: c"));
    assert!(matches("x", "x") && !matches("x", "xy"));
}

/// A free loopback port (bound, then closed: nothing listens on it).
fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// A self-signed certificate for 127.0.0.1 and its key, in a fresh directory.
fn certs() -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("lowtide-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let c = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, c.cert.pem()).unwrap();
    std::fs::write(&key, c.key_pair.serialize_pem()).unwrap();
    (cert, key)
}

/// A `lowtide recv` that listens until dropped.
struct Receiver(Child);

impl Receiver {
    fn start(listen: SocketAddr, tls: Option<&(PathBuf, PathBuf)>) -> Receiver {
        let mut cmd = Command::new(LOWTIDE);
        cmd.args([
            "recv",
            "--listen",
            &listen.to_string(),
            "--max-seconds",
            "10",
        ]);
        if let Some((cert, key)) = tls {
            cmd.arg("--tls-cert").arg(cert).arg("--tls-key").arg(key);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("lowtide recv starts");
        // It prints its first line once it listens.
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        assert!(first.contains("waiting for senders"), "{first}");
        Receiver(child)
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `lowtide ARGS` to its end (at most 20 s) and returns its `error:` line.
fn error_line(args: &[&str]) -> String {
    let started = Instant::now();
    let out = Command::new(LOWTIDE)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("lowtide runs");
    assert!(started.elapsed() < Duration::from_secs(20), "{args:?} hung");
    assert_eq!(out.status.code(), Some(2), "{args:?} should fail");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(lines.len(), 1, "one error line from {args:?}: {stderr}");
    lines[0].to_owned()
}

/// Provokes `case` and returns the line `lowtide` printed.
fn provoke(case: &str, certs: &(PathBuf, PathBuf)) -> String {
    let ca = certs.0.to_str().unwrap();
    match case {
        "plaintext-to-tls" => {
            let addr = free_port();
            let _recv = Receiver::start(addr, Some(certs));
            error_line(&["send", "--to", &addr.to_string(), "--seconds", "2"])
        }
        "tls-to-plaintext" => {
            let addr = free_port();
            let _recv = Receiver::start(addr, None);
            error_line(&[
                "send",
                "--to",
                &addr.to_string(),
                "--seconds",
                "2",
                "--tls-ca",
                ca,
            ])
        }
        "refused" => error_line(&["send", "--to", &free_port().to_string(), "--seconds", "1"]),
        "watch-refused" => error_line(&["watch", "--server", &free_port().to_string()]),
        "port-in-use" => {
            let held = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = held.local_addr().unwrap().to_string();
            error_line(&["recv", "--listen", &addr])
        }
        "serve-port-in-use" => {
            let held = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = held.local_addr().unwrap().to_string();
            let ingest = free_port().to_string();
            error_line(&["serve", "--listen", &addr, "--ingest", &ingest])
        }
        "missing-trace" => error_line(&[
            "send",
            "--to",
            "127.0.0.1:9",
            "--trace",
            "/nonexistent/trace.csv",
        ]),
        "missing-ca" => {
            // Something must accept the connection before the CA file is read.
            let open = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = open.local_addr().unwrap().to_string();
            error_line(&["send", "--to", &addr, "--tls-ca", "/nonexistent/ca.pem"])
        }
        other => panic!("docs/errors.md names case {other:?}, which this test does not provoke"),
    }
}

#[test]
fn every_documented_mistake_prints_its_line_once() {
    let rows = documented();
    assert!(rows.len() >= 6, "the table has its rows: {rows:?}");
    let certs = certs();
    let mut failures = Vec::new();
    for (case, pattern) in &rows {
        let line = provoke(case, &certs);
        // `cargo test -p lowtide-cli --test errors -- --nocapture` shows every line.
        eprintln!("{case}: {line}");
        if !matches(pattern, &line) {
            failures.push(format!(
                "{case}:\n  documented {pattern}\n  printed    {line}"
            ));
        }
        if let Some(r) = repeated_clause(&line) {
            failures.push(format!("{case}: {line}\n  repeats {r}"));
        }
    }
    let _ = std::fs::remove_dir_all(certs.0.parent().unwrap());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
