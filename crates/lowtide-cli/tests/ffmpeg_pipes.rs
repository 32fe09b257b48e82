//! Real encoded video through `lowtide send --input -` and `lowtide recv --output -` over
//! loopback (127.0.0.1; no namespaces, no root): ffmpeg encodes a 2 s test pattern
//! (H.264 and H.265 Annex-B from libx264 and libx265, VP8 in IVF from libvpx) into the
//! sender's stdin, the receiver's stdout goes to a file. The file must decode without a
//! single ffmpeg error, to the same number of frames as the input and to the same pictures
//! (nothing is dropped on loopback). Each case takes a few seconds; skipped when ffmpeg is
//! not installed.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const LOWTIDE: &str = env!("CARGO_BIN_EXE_lowtide");
const LIMIT: Duration = Duration::from_secs(20);

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("-version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lowtide-pipes-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// Waits for `child` at most until `deadline`; kills it after.
fn wait(mut child: Child, what: &str, deadline: Instant) -> Output {
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "{what} did not finish in time; stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("runs");
    assert!(out.status.success(), "{cmd:?}: {out:?}");
    out
}

/// Frames ffprobe counts by decoding.
fn frame_count(file: &Path) -> u64 {
    let out = run(Command::new("ffprobe")
        .args(["-v", "error", "-count_frames"])
        .args([
            "-select_streams",
            "v:0",
            "-show_entries",
            "stream=nb_read_frames",
            "-of",
            "csv=p=0",
        ])
        .arg(file));
    let s = String::from_utf8_lossy(&out.stdout);
    s.trim()
        .parse()
        .unwrap_or_else(|_| panic!("ffprobe's count {s:?}"))
}

/// The MD5 of each decoded picture.
fn picture_hashes(file: &Path) -> Vec<String> {
    let out = run(Command::new("ffmpeg")
        .args(["-v", "error", "-i"])
        .arg(file)
        .args(["-f", "framemd5", "-"]));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit(',').next().map(|h| h.trim().to_string()))
        .collect()
}

/// Encodes with `encode` (ffmpeg output options, writing to stdout), pipes the stream through
/// lowtide and checks the received file.
fn through_lowtide(name: &str, encode: &[&str], ext: &str) {
    if !have("ffmpeg") || !have("ffprobe") {
        println!("skipped: ffmpeg not installed");
        return;
    }
    let dir = scratch(name);
    let (input, output) = (
        dir.join(format!("in.{ext}")),
        dir.join(format!("out.{ext}")),
    );
    let deadline = Instant::now() + LIMIT;

    let mut recv = Command::new(LOWTIDE)
        .args(["recv", "--listen", "127.0.0.1:0", "--output", "-"])
        .stdout(std::fs::File::create(&output).expect("the output file"))
        .stderr(Stdio::piped())
        .spawn()
        .expect("lowtide recv starts");
    // The receiver names its port on stderr; the rest of its stderr is kept for the end.
    let mut lines = BufReader::new(recv.stderr.take().expect("stderr")).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("lowtide recv says where it listens")
            .expect("a line");
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest
                .split_whitespace()
                .next()
                .expect("an address")
                .to_string();
        }
    };
    let recv_log = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());

    let mut send = Command::new(LOWTIDE)
        .args(["send", "--to", &addr, "--input", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("lowtide send starts");
    let mut ffmpeg = Command::new("ffmpeg")
        .args(TEST_PATTERN)
        .args(encode)
        .arg("-")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("ffmpeg starts");
    // The encoder's stdout into the sender's stdin, and into a copy of the input.
    let mut from = ffmpeg.stdout.take().expect("ffmpeg's stdout");
    let mut to = send.stdin.take().expect("the sender's stdin");
    let copy_path = input.clone();
    let tee = std::thread::spawn(move || {
        let mut copy = std::fs::File::create(copy_path).expect("the input copy");
        let mut buf = [0u8; 8192];
        loop {
            let n = from.read(&mut buf).expect("reading ffmpeg");
            if n == 0 {
                break;
            }
            copy.write_all(&buf[..n]).expect("the copy");
            to.write_all(&buf[..n]).expect("the sender's stdin");
        }
        // Dropping `to` closes the sender's stdin: end of stream.
    });
    assert!(wait(ffmpeg, "ffmpeg", deadline).status.success());
    tee.join().expect("the copy thread");
    let sent = wait(send, "lowtide send", deadline);
    let send_log = String::from_utf8_lossy(&sent.stderr).to_string();
    let received = wait(recv, "lowtide recv", deadline);
    let recv_log = recv_log.join().expect("the receiver's log").join("\n");
    println!("sender:\n{send_log}\nreceiver:\n{recv_log}");
    assert!(sent.status.success(), "lowtide send failed:\n{send_log}");
    assert!(
        received.status.success(),
        "lowtide recv failed:\n{recv_log}"
    );
    assert!(send_log.contains("dropped 0"), "{send_log}");
    assert!(recv_log.contains("the gate dropped 0"), "{recv_log}");

    // Decodes without an error message ...
    let check = run(Command::new("ffmpeg")
        .args(["-v", "error", "-i"])
        .arg(&output)
        .args(["-f", "null", "-"]));
    let errors = String::from_utf8_lossy(&check.stderr);
    assert!(errors.trim().is_empty(), "ffmpeg reports: {errors}");
    // ... to every frame of the input, picture for picture.
    let frames = frame_count(&input);
    assert_eq!(frames, 60, "2 s at 30 frames per second");
    assert_eq!(frame_count(&output), frames);
    assert_eq!(picture_hashes(&output), picture_hashes(&input));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn h264_annex_b_from_x264() {
    through_lowtide(
        "h264",
        &[
            "-c:v",
            "libx264",
            "-tune",
            "zerolatency",
            "-g",
            "15",
            "-f",
            "h264",
        ],
        "h264",
    );
}

#[test]
fn h265_annex_b_from_x265() {
    let encoders = Command::new("ffmpeg")
        .args(["-hide_banner", "-encoders"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("libx265"))
        .unwrap_or(false);
    if !encoders {
        println!("skipped: ffmpeg without libx265");
        return;
    }
    through_lowtide(
        "h265",
        &[
            "-c:v",
            "libx265",
            "-tune",
            "zerolatency",
            "-g",
            "15",
            "-f",
            "hevc",
        ],
        "hevc",
    );
}

#[test]
fn vp8_ivf_from_libvpx() {
    through_lowtide(
        "vp8",
        &[
            "-c:v",
            "libvpx",
            "-g",
            "15",
            "-deadline",
            "realtime",
            "-f",
            "ivf",
        ],
        "ivf",
    );
}

#[test]
fn input_of_no_known_format_is_refused_naming_the_flag() {
    let mut recv = Command::new(LOWTIDE)
        .args(["recv", "--listen", "127.0.0.1:0", "--output", "-"])
        .args(["--first-message-s", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("lowtide recv starts");
    let mut lines = BufReader::new(recv.stderr.take().expect("stderr")).lines();
    let addr = loop {
        let line = lines.next().expect("a line").expect("a line");
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest
                .split_whitespace()
                .next()
                .expect("an address")
                .to_string();
        }
    };
    let mut send = Command::new(LOWTIDE)
        .args(["send", "--to", &addr, "--input", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("lowtide send starts");
    let mut stdin = send.stdin.take().expect("stdin");
    stdin
        .write_all(b"RIFF\x24\x00\x00\x00WAVEfmt ")
        .expect("writes");
    drop(stdin);
    let out = wait(send, "lowtide send", Instant::now() + LIMIT);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("[52 49 46 46"),
        "shows the bytes it saw: {err}"
    );
    assert!(err.contains("--format"), "names the flag: {err}");
    let _ = recv.kill();
    let _ = recv.wait();
}

/// ffmpeg's input options for two seconds of its 160x90 test pattern at 30 fps.
const TEST_PATTERN: [&str; 8] = [
    "-v",
    "error",
    "-f",
    "lavfi",
    "-i",
    "testsrc=size=160x90:rate=30",
    "-t",
    "2",
];

/// [`TEST_PATTERN`] encoded by `codec` (output options up to the format) into `out`.
fn two_seconds_of(codec: &[&str], out: &Path) {
    run(Command::new("ffmpeg")
        .args(TEST_PATTERN)
        .args(codec)
        .arg("-y")
        .arg(out));
}

/// `lowtide stamp ARGS < from > to`; what it said on standard error.
fn stamp(args: &[&str], from: &Path, to: &Path) -> String {
    let out = run(Command::new(LOWTIDE)
        .arg("stamp")
        .args(args)
        .stdin(std::fs::File::open(from).expect("input"))
        .stdout(std::fs::File::create(to).expect("output")));
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// `lowtide stamp` puts an SEI stamp in every picture of an x264 stream; the stamped stream
/// decodes to the same pictures, and `lowtide stamp --measure` passes it through byte for
/// byte and reads one stamp per picture, each in the past and recent.
#[test]
fn a_stamped_stream_decodes_to_the_same_pictures() {
    if !have("ffmpeg") || !have("ffprobe") {
        println!("skipped: ffmpeg not installed");
        return;
    }
    let dir = scratch("stamp");
    let (plain, stamped, measured, csv) = (
        dir.join("plain.h264"),
        dir.join("stamped.h264"),
        dir.join("measured.h264"),
        dir.join("latency.csv"),
    );
    two_seconds_of(
        &[
            "-c:v",
            "libx264",
            "-tune",
            "zerolatency",
            "-g",
            "15",
            "-f",
            "h264",
        ],
        &plain,
    );
    let said = stamp(&[], &plain, &stamped);
    assert!(said.contains("60 of"), "{said}");
    let said = stamp(
        &["--measure", csv.to_str().expect("a UTF-8 path")],
        &stamped,
        &measured,
    );
    assert!(said.contains("60 of") && said.contains("p99"), "{said}");
    assert_eq!(
        std::fs::read(&measured).expect("measured"),
        std::fs::read(&stamped).expect("stamped"),
        "measuring changes no byte"
    );
    assert!(
        std::fs::metadata(&stamped).expect("stamped").len()
            > std::fs::metadata(&plain).expect("plain").len()
    );
    let check = run(Command::new("ffmpeg")
        .args(["-v", "error", "-i"])
        .arg(&stamped)
        .args(["-f", "null", "-"]));
    assert!(String::from_utf8_lossy(&check.stderr).trim().is_empty());
    assert_eq!(picture_hashes(&stamped), picture_hashes(&plain));
    let lines = std::fs::read_to_string(&csv).expect("the CSV");
    let latencies: Vec<f64> = lines
        .lines()
        .skip(1)
        .map(|l| l.rsplit(',').next().expect("a field").parse().expect("ms"))
        .collect();
    assert_eq!(latencies.len(), 60);
    // Stamped a moment ago on this host: never negative, and within the test's time.
    assert!(
        latencies.iter().all(|&ms| (0.0..20_000.0).contains(&ms)),
        "{latencies:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// AV1 in IVF: the stamp is a metadata OBU of a private type before each frame; dav1d (ffmpeg's
/// default AV1 decoder) and libaom decode the stamped stream to the same pictures, and
/// `--measure` reads one stamp per frame.
#[test]
fn a_stamped_av1_stream_decodes_to_the_same_pictures() {
    if !have("ffmpeg") {
        println!("skipped: ffmpeg not installed");
        return;
    }
    let dir = scratch("stamp-av1");
    let (plain, stamped, csv) = (
        dir.join("plain.ivf"),
        dir.join("stamped.ivf"),
        dir.join("latency.csv"),
    );
    two_seconds_of(
        &[
            "-c:v",
            "libaom-av1",
            "-cpu-used",
            "8",
            "-usage",
            "realtime",
            "-g",
            "15",
            "-f",
            "ivf",
        ],
        &plain,
    );
    let said = stamp(&[], &plain, &stamped);
    assert!(said.contains("60 of 60 units stamped"), "{said}");
    let measured = dir.join("measured.ivf");
    let said = stamp(
        &["--measure", csv.to_str().expect("a UTF-8 path")],
        &stamped,
        &measured,
    );
    assert!(said.contains("60 of 60 units stamped; latency"), "{said}");
    let hashes = |decoder: &str, file: &Path| {
        let out = run(Command::new("ffmpeg")
            .args(["-v", "error", "-c:v", decoder, "-i"])
            .arg(file)
            .args(["-f", "framemd5", "-"]));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    for decoder in ["libdav1d", "libaom-av1"] {
        let plain_pictures = hashes(decoder, &plain);
        assert_eq!(plain_pictures.len(), 60, "{decoder}");
        assert_eq!(hashes(decoder, &stamped), plain_pictures, "{decoder}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// VP8 has no place for user data: `lowtide stamp` refuses it with an error naming the codec,
/// exit status 1.
#[test]
fn a_stream_without_sei_is_refused_by_stamp() {
    if !have("ffmpeg") {
        println!("skipped: ffmpeg not installed");
        return;
    }
    let dir = scratch("stamp-vp8");
    let ivf = dir.join("in.ivf");
    two_seconds_of(&["-c:v", "libvpx", "-f", "ivf"], &ivf);
    let out = Command::new(LOWTIDE)
        .arg("stamp")
        .stdin(std::fs::File::open(&ivf).expect("input"))
        .stdout(Stdio::null())
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("Vp8 has no place for user data"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
