//! One variant's trial: a fresh dumbbell, the servers on sender 0, the daemon, the video
//! player and the downloads on receiver 0 (unmodified `curl` under the `LD_PRELOAD`
//! library), the interferer from sender 1, and the rates of every flow per second.
//!
//! The trial's clock starts when the receiver's daemon is started, so the daemon's log
//! (`t`, seconds since it started, at the end of each second) lands on the trial's seconds
//! up to the daemon's start-up (a few ms).

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use lowtide_media::ladder::Ladder;
use lowtide_netem::{Dumbbell, Host, RunOptions};
use lowtide_traffic::cbr::{run_cbr, CbrConfig};
use lowtide_traffic::Stop;

use super::procs::Tools;
use super::scenario::{
    BwssScenario, BwssVariant, VideoTransport, HTTP_PORT, INTERFERER_PORT, VIDEO_PORT,
};
use super::summary::{FlowKind, FlowSeries, VariantRecord};
use super::tfrc_video::{self, PlayerSecond};
use crate::procs::Proc;
use crate::LabError;

/// How long a server or the daemon may take to answer.
const READY_WITHIN: Duration = Duration::from_secs(10);
/// Name of the file the downloads fetch.
const BIG_FILE: &str = "big";
/// `python3 -m http.server PORT --bind ADDR --directory ROOT` with `TCP_CONGESTION` set on
/// its listener (argv: port, address, root, congestion control), which every accepted
/// connection inherits.
const HTTP_SERVER: &str = "\
import functools, http.server, socket, sys
port, addr, root, cc = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
class Server(http.server.ThreadingHTTPServer):
    def server_bind(self):
        self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
        super().server_bind()
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=root)
Server((addr, port), handler).serve_forever()
";

/// The second at which the senders' connections are checked for the scenario's congestion
/// control (the player's and the downloads' connections are up by then).
const CHECK_CONGESTION_AT_S: usize = 3;

/// Every established connection of the servers on `server` (the ladder server's and the
/// HTTP server's ports) runs `declared`, as `ss -tin` shows it: a sender on the machine's
/// default (BBR on some machines) instead of the scenario's would make every figure of the
/// run one of BBR senders, as it once did unnoticed.
fn check_congestion(server: &Host, declared: &str) -> Result<(), LabError> {
    let what = format!(
        "checking the congestion control of the servers in {}",
        server.name()
    );
    let out = server
        .command("ss")
        .args(["-Htin", "state", "established"])
        .output()
        .map_err(|e| LabError::io(&what, e))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(LabError::io(&what, format!("ss failed: {}", err.trim())));
    }
    servers_run(&String::from_utf8_lossy(&out.stdout), declared).map_err(|e| LabError::io(&what, e))
}

/// The verdict on `ss -Htin` output: every connection of the servers' ports runs
/// `declared`, and there is at least one.
fn servers_run(ss: &str, declared: &str) -> Result<(), String> {
    let ports = [HTTP_PORT, VIDEO_PORT].map(|p| format!(":{p}"));
    let mut checked = 0;
    for (local, peer, cc) in ss_congestion(ss) {
        if !ports.iter().any(|p| local.ends_with(p.as_str())) {
            continue;
        }
        if cc != declared {
            return Err(format!(
                "{local} -> {peer} runs {cc}, the scenario declares {declared}"
            ));
        }
        checked += 1;
    }
    if checked == 0 {
        return Err(format!(
            "no server connection to check at {CHECK_CONGESTION_AT_S} s"
        ));
    }
    Ok(())
}

/// (local address, peer address, congestion control) of each connection in `ss -Htin`
/// output: an address line, then an indented line that starts with the algorithm's name.
fn ss_congestion(text: &str) -> Vec<(String, String, String)> {
    let mut found = vec![];
    let mut addrs: Option<(String, String)> = None;
    for line in text.lines() {
        if line.starts_with(char::is_whitespace) {
            let cc = line.split_whitespace().next().unwrap_or("");
            if let Some((local, peer)) = addrs.take() {
                if !cc.is_empty() && !cc.contains(':') {
                    found.push((local, peer, cc.to_string()));
                }
            }
        } else {
            // Recv-Q Send-Q Local Peer [Process]
            let f: Vec<&str> = line.split_whitespace().collect();
            addrs = (f.len() >= 4).then(|| (f[2].to_string(), f[3].to_string()));
        }
    }
    found
}

/// Runs one variant; the record holds what was measured even when the trial failed.
pub fn run_variant(
    s: &BwssScenario,
    v: &BwssVariant,
    seed: u64,
    tools: &Tools,
    dir: &Path,
    progress: &mut dyn FnMut(&str),
) -> VariantRecord {
    let mut record = VariantRecord {
        variant: v.name.clone(),
        ..Default::default()
    };
    let secs = s.run.duration_s.ceil() as usize;
    let mut trial = Trial {
        s,
        v,
        tools,
        dir,
        secs,
        stop: Arc::new(AtomicBool::new(false)),
        procs: vec![],
        threads: Threads::default(),
        link: vec![None; secs],
    };
    // A folder of an earlier run: the daemon's log appends, so start empty.
    let _ = std::fs::remove_dir_all(dir);
    let mut net = None;
    let result = std::fs::create_dir_all(dir)
        .map_err(|e| LabError::io(format!("creating {}", dir.display()), e))
        .and_then(|()| {
            let options = RunOptions {
                seed,
                ..RunOptions::default()
            };
            let net = net.insert(Dumbbell::new(s.topology.clone(), options)?);
            trial.run(net, progress)
        });
    // Stop everything (also when the trial failed), then read what was measured. The
    // network goes last: the sink's and the interferer's threads hold their hosts'
    // namespaces, and one dropped under them is removed twice (the dumbbell's fallback,
    // then rattan's own removal when the thread ends: "Failed to remove netns ... ENOENT").
    trial.stop.store(true, Ordering::Relaxed);
    for p in trial.procs.iter_mut().rev() {
        if let Some(st) = p.stop() {
            record.notes.push(format!("{}: {st}", p.name()));
        }
    }
    trial.procs.clear();
    let collected = trial.threads.collect(secs, &mut record);
    drop(net);
    record.link_kbps = trial.link;
    for (name, kind) in [
        ("daemon", FlowKind::Download),
        ("outside-daemon", FlowKind::Outside),
    ] {
        let log = dir.join(format!("{name}.jsonl"));
        if log.exists() {
            match read_daemon_log(&log, secs, kind) {
                Ok(flows) => record.flows.extend(flows),
                Err(e) => record.notes.push(format!("{}: {e}", log.display())),
            }
        }
    }
    if v.video == VideoTransport::Tcp {
        record.rungs = read_player_rungs(&dir.join("player.out"), secs);
    }
    record
        .flows
        .sort_by_key(|f| (order(f.kind), f.name.clone()));
    if let Err(e) = result.and(collected) {
        record.failed = Some(e.to_string());
    }
    record
}

fn order(k: FlowKind) -> u8 {
    match k {
        FlowKind::Video => 0,
        FlowKind::Download => 1,
        FlowKind::Interferer => 2,
        FlowKind::Outside => 3,
        FlowKind::Other => 4,
    }
}

struct Trial<'a> {
    s: &'a BwssScenario,
    v: &'a BwssVariant,
    tools: &'a Tools,
    dir: &'a Path,
    secs: usize,
    stop: Arc<AtomicBool>,
    /// Stopped in reverse order: clients before the daemon, the daemon before the servers.
    procs: Vec<Proc>,
    threads: Threads,
    link: Vec<Option<f64>>,
}

#[derive(Default)]
struct Threads {
    tfrc_server: Option<JoinHandle<Result<tfrc_video::ServerReport, LabError>>>,
    tfrc_player: Option<JoinHandle<Result<Vec<PlayerSecond>, LabError>>>,
    interferer: Option<JoinHandle<Result<(), LabError>>>,
    sink: Option<JoinHandle<Result<Vec<u64>, LabError>>>,
}

impl Threads {
    /// Joins every thread; the TFRC player's and the sink's seconds become flows.
    fn collect(&mut self, secs: usize, record: &mut VariantRecord) -> Result<(), LabError> {
        let mut first_error = Ok(());
        let mut keep = |r: Result<(), LabError>| {
            if first_error.is_ok() {
                first_error = r;
            }
        };
        if let Some(h) = self.tfrc_player.take() {
            match join(h, "TFRC video player") {
                Ok(seconds) => {
                    let mut kbps = vec![None; secs];
                    let mut rungs = vec![None; secs];
                    for p in seconds.iter().filter(|p| p.k < secs) {
                        kbps[p.k] = Some(p.kbps);
                        rungs[p.k] = Some(p.rung);
                    }
                    record.flows.push(FlowSeries {
                        name: "video (TFRC)".into(),
                        kind: FlowKind::Video,
                        target_kbps: vec![None; secs],
                        kbps,
                    });
                    record.rungs = rungs;
                }
                Err(e) => keep(Err(e)),
            }
        }
        if let Some(h) = self.tfrc_server.take() {
            match join(h, "TFRC video server") {
                Ok(r) => record.notes.push(format!(
                    "TFRC server: {} chunks queued, {} refused, {} switch requests; send buffer {:?}",
                    r.chunks_sent, r.chunks_refused, r.switch_requests, r.buffer
                )),
                Err(e) => keep(Err(e)),
            }
        }
        if let Some(h) = self.interferer.take() {
            keep(join(h, "interferer"));
        }
        if let Some(h) = self.sink.take() {
            match join(h, "interferer sink") {
                Ok(bytes) => record.flows.push(FlowSeries {
                    name: "interferer (UDP)".into(),
                    kind: FlowKind::Interferer,
                    kbps: bytes.iter().map(|&b| Some(b as f64 * 8.0 / 1e3)).collect(),
                    target_kbps: vec![None; secs],
                }),
                Err(e) => keep(Err(e)),
            }
        }
        first_error
    }
}

fn join<T>(h: JoinHandle<Result<T, LabError>>, what: &str) -> Result<T, LabError> {
    h.join().map_err(|p| {
        LabError::io(
            what,
            format!("panicked: {}", lowtide_netem::failure::panic_message(&*p)),
        )
    })?
}

impl Trial<'_> {
    fn run(&mut self, net: &Dumbbell, progress: &mut dyn FnMut(&str)) -> Result<(), LabError> {
        let (s, v, tools, dir) = (self.s, self.v, self.tools, self.dir);
        let (server, receiver) = (net.sender(0), net.receiver(0));
        let http = SocketAddr::from((server.addr(), HTTP_PORT));
        let video = SocketAddr::from((server.addr(), VIDEO_PORT));
        let ladder = ladder(s)?;

        // Servers on sender 0.
        let root = dir.join("http");
        std::fs::create_dir_all(&root)
            .and_then(|()| std::fs::File::create(root.join(BIG_FILE)))
            .and_then(|f| f.set_len(s.bwss.file_mb * 1_000_000))
            .map_err(|e| {
                LabError::io(format!("making the download file in {}", root.display()), e)
            })?;
        // The senders run the scenario's congestion control, set on each listener: a
        // namespace's default is the machine's (BBR here), and only the initial namespace
        // may make a restricted algorithm such as cubic the default.
        let cc = &s.topology.hosts.congestion;
        let mut cmd = server.command(&tools.python3.to_string_lossy());
        cmd.args(["-c", HTTP_SERVER, &HTTP_PORT.to_string()])
            .arg(server.addr().to_string())
            .arg(&root)
            .arg(cc);
        self.procs.push(Proc::spawn("http-server", cmd, dir)?);
        match v.video {
            VideoTransport::Tcp => {
                let mut cmd = server.command(&tools.lowtide.to_string_lossy());
                cmd.args([
                    "ladder",
                    "serve",
                    "--listen",
                    &video.to_string(),
                    "--congestion",
                    cc,
                    "--overdrive",
                    &s.bwss.server_overdrive.to_string(),
                    "--rungs-kbps",
                ])
                .arg(join_kbps(&s.bwss.rungs_kbps));
                self.procs.push(Proc::spawn("ladder-server", cmd, dir)?);
                wait_tcp(receiver, video, "the ladder server")?;
            }
            VideoTransport::Tfrc => {
                let (l, stop) = (ladder.clone(), self.stop.clone());
                let overdrive = s.bwss.server_overdrive;
                self.threads.tfrc_server = Some(server.spawn("tfrc-video-server", move || {
                    tfrc_video::serve(video, l, overdrive, stop)
                })?);
            }
        }
        wait_tcp(receiver, http, "python3 -m http.server")?;

        // The daemons; the trial's clock starts with the receiver's.
        progress("starting the BWSS daemon");
        let rules = dir.join("rules.toml");
        let text = toml::to_string(&s.bwss.rules)
            .map_err(|e| LabError::io("writing the daemon's rules", e))?;
        std::fs::write(&rules, text)
            .map_err(|e| LabError::io(format!("writing {}", rules.display()), e))?;
        let t0 = Instant::now();
        self.procs
            .push(self.daemon(receiver, "daemon", &rules, !v.steer)?);
        wait_daemon(receiver)?;
        if v.outside_download {
            self.procs
                .push(self.daemon(net.receiver(1), "outside-daemon", &rules, true)?);
            wait_daemon(net.receiver(1))?;
        }

        // The interferer, sender 1 to receiver 0.
        let end = t0 + Duration::from_secs_f64(s.run.duration_s);
        let i = &s.bwss.interference;
        let sink_addr = SocketAddr::from((receiver.addr(), INTERFERER_PORT));
        let (secs, stop) = (self.secs, self.stop.clone());
        let sink = receiver
            .run(move || UdpSocket::bind(sink_addr))?
            .map_err(|e| LabError::io(format!("binding the interferer's sink {sink_addr}"), e))?;
        self.threads.sink = Some(receiver.spawn("interferer-sink", move || {
            count_per_second(sink, t0, secs, end + Duration::from_secs(1), &stop)
        })?);
        let cbr = CbrConfig {
            server: sink_addr,
            rate_bps: i.rate_kbps * 1000,
            packet_size: i.packet_bytes,
            flow_id: 1,
        };
        let (from, to) = (
            t0 + Duration::from_secs_f64(i.start_s),
            t0 + Duration::from_secs_f64(i.stop_s),
        );
        let stop = self.stop.clone();
        self.threads.interferer = Some(net.sender(1).spawn("interferer", move || {
            let stop = Stop::new(stop, to);
            if stop.sleep_until(from) {
                run_cbr(&cbr, &stop).map_err(|e| LabError::Traffic(e.to_string()))?;
            }
            Ok(())
        })?);

        // The video player and the downloads.
        let left = end.saturating_duration_since(Instant::now()).as_secs_f64();
        match v.video {
            VideoTransport::Tcp => {
                let rule = dir.join("player-rule.toml");
                let text = toml::to_string(&s.bwss.player_rule)
                    .map_err(|e| LabError::io("writing the player's rule", e))?;
                std::fs::write(&rule, text)
                    .map_err(|e| LabError::io(format!("writing {}", rule.display()), e))?;
                let mut cmd = self.exec(receiver);
                cmd.args(["ladder", "play", "--to", &video.to_string(), "--secs"])
                    .arg(format!("{left:.3}"))
                    .arg("--rule")
                    .arg(&rule);
                self.procs.push(Proc::spawn("player", cmd, dir)?);
            }
            VideoTransport::Tfrc => {
                let (stop, rule) = (self.stop.clone(), s.bwss.player_rule);
                self.threads.tfrc_player =
                    Some(receiver.spawn("tfrc-video-player", move || {
                        tfrc_video::play(
                            video,
                            ladder,
                            rule,
                            t0,
                            left + t0.elapsed().as_secs_f64(),
                            stop,
                        )
                    })?);
            }
        }
        let url = format!("http://{http}/{BIG_FILE}");
        for k in 1..=s.bwss.downloads {
            let cmd = self.curl(receiver, &url, left);
            self.procs
                .push(Proc::spawn(&format!("curl-{k}"), cmd, dir)?);
        }
        if v.outside_download {
            let cmd = self.curl(net.receiver(1), &url, left);
            self.procs.push(Proc::spawn("curl-outside", cmd, dir)?);
        }

        // Every second: the link's delivered bytes, and every part still alive.
        let mut last = net.forward().report().delivered_bytes;
        for k in 1..=self.secs {
            let at = t0 + Duration::from_secs(k as u64);
            if at > end + Duration::from_millis(500) {
                break;
            }
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
            let now = net.forward().report().delivered_bytes;
            self.link[k - 1] = Some(now.saturating_sub(last) as f64 * 8.0 / 1e3);
            last = now;
            progress(&format!("{}: {k} of {} s", v.name, self.secs));
            if k == CHECK_CONGESTION_AT_S {
                check_congestion(server, &s.topology.hosts.congestion)?;
            }
            net.check_alive()?;
            self.check_procs(at >= end - Duration::from_secs(2))?;
        }
        Ok(())
    }

    fn daemon(
        &self,
        host: &Host,
        name: &str,
        rules: &Path,
        observe: bool,
    ) -> Result<Proc, LabError> {
        let mut cmd = host.command(&self.tools.lowtide.to_string_lossy());
        cmd.args(["bwss", "daemon", "--rules"])
            .arg(rules)
            .arg("--log")
            .arg(self.dir.join(format!("{name}.jsonl")));
        if observe {
            cmd.arg("--observe");
        }
        Proc::spawn(name, cmd, self.dir)
    }

    /// `lowtide bwss exec --lib … --` in `host`.
    fn exec(&self, host: &Host) -> std::process::Command {
        let mut cmd = host.command(&self.tools.lowtide.to_string_lossy());
        cmd.args(["bwss", "exec", "--lib"])
            .arg(&self.tools.preload)
            .arg("--")
            .arg(&self.tools.lowtide);
        cmd
    }

    fn curl(&self, host: &Host, url: &str, secs: f64) -> std::process::Command {
        let mut cmd = host.command(&self.tools.lowtide.to_string_lossy());
        cmd.args(["bwss", "exec", "--lib"])
            .arg(&self.tools.preload)
            .arg("--")
            .arg(&self.tools.curl)
            .args(["-sS", "-o", "/dev/null", "--max-time"])
            .arg(format!("{:.0}", secs.ceil() + 5.0))
            .arg(url);
        cmd
    }

    /// A program that ended before the trial did is an error (the player and the downloads
    /// may end in the last seconds).
    fn check_procs(&mut self, near_end: bool) -> Result<(), LabError> {
        for p in &mut self.procs {
            let client = p.name() == "player" || p.name().starts_with("curl");
            if let Some(st) = p.exited() {
                if !(near_end && client && st.success()) {
                    let err = std::fs::read_to_string(self.dir.join(format!("{}.err", p.name())))
                        .unwrap_or_default();
                    let tail: String = err.lines().rev().take(3).collect::<Vec<_>>().join(" | ");
                    return Err(LabError::io(
                        format!("{} ended during the trial ({st})", p.name()),
                        if tail.is_empty() {
                            "no message".into()
                        } else {
                            tail
                        },
                    ));
                }
            }
        }
        Ok(())
    }
}

fn ladder(s: &BwssScenario) -> Result<Ladder, LabError> {
    let bps: Vec<u64> = s.bwss.rungs_kbps.iter().map(|k| k * 1000).collect();
    Ladder::new(&bps).map_err(|e| LabError::io("bwss.rungs_kbps", e))
}

fn join_kbps(k: &[u64]) -> String {
    k.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

/// Waits until `addr` accepts a TCP connection from `from`.
fn wait_tcp(from: &Host, addr: SocketAddr, what: &str) -> Result<(), LabError> {
    let until = Instant::now() + READY_WITHIN;
    loop {
        let ok = from
            .run(move || TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok())?;
        if ok {
            return Ok(());
        }
        if Instant::now() > until {
            return Err(LabError::io(
                format!("waiting for {what} on {addr}"),
                format!(
                    "no answer within {} s (see its .err file in the run folder)",
                    READY_WITHIN.as_secs()
                ),
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until the host's daemon answers on its socket.
fn wait_daemon(host: &Host) -> Result<(), LabError> {
    let until = Instant::now() + READY_WITHIN;
    loop {
        let name = lowtide_bwss::wire::socket_name();
        if host.run(move || lowtide_bwss::client::Client::connect(&name).is_ok())? {
            return Ok(());
        }
        if Instant::now() > until {
            return Err(LabError::io(
                format!("waiting for the BWSS daemon in {}", host.name()),
                "it did not answer (see daemon.err in the run folder)",
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// UDP bytes received per second of the trial, until `until` or the trial stops.
fn count_per_second(
    sock: UdpSocket,
    t0: Instant,
    secs: usize,
    until: Instant,
    stop: &AtomicBool,
) -> Result<Vec<u64>, LabError> {
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .map_err(|e| LabError::io("the interferer's sink", e))?;
    let mut bytes = vec![0u64; secs];
    let mut buf = vec![0u8; 65_536];
    while Instant::now() < until && !stop.load(Ordering::Relaxed) {
        match sock.recv(&mut buf) {
            Ok(n) => {
                let k = t0.elapsed().as_secs() as usize;
                if let Some(b) = bytes.get_mut(k) {
                    *b += n as u64;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(LabError::io("the interferer's sink", e)),
        }
    }
    Ok(bytes)
}

/// The daemon's log as flows: the `video` rule's flow (or the ladder's port) is the video,
/// `curl`'s flows are downloads (`kind` names them: receiver 0's or the outside host's).
fn read_daemon_log(path: &Path, secs: usize, kind: FlowKind) -> Result<Vec<FlowSeries>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let mut flows: BTreeMap<u64, FlowSeries> = BTreeMap::new();
    let mut downloads = 0;
    for (n, line) in text.lines().enumerate() {
        let j: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("line {}: {e}", n + 1))?;
        let (Some(t), Some(id)) = (j["t"].as_f64(), j["flow"].as_u64()) else {
            return Err(format!("line {}: no t or flow", n + 1));
        };
        let f = flows.entry(id).or_insert_with(|| {
            let program = j["program"].as_str().unwrap_or("?");
            let remote = j["remote"].as_str().unwrap_or("");
            let (name, k) = if j["rule"].as_str() == Some("video")
                || remote.ends_with(&format!(":{VIDEO_PORT}"))
            {
                ("video (TCP)".to_string(), FlowKind::Video)
            } else if program == "curl" {
                downloads += 1;
                match kind {
                    FlowKind::Outside => ("outside download".to_string(), kind),
                    _ => (format!("download {downloads}"), FlowKind::Download),
                }
            } else {
                (format!("{program} {remote}"), FlowKind::Other)
            };
            FlowSeries {
                name,
                kind: k,
                kbps: vec![None; secs],
                target_kbps: vec![None; secs],
            }
        });
        // The line at `t` covers the second before it.
        let k = (t.round() as usize).saturating_sub(1);
        if k < secs {
            f.kbps[k] = j["kbps"].as_f64();
            f.target_kbps[k] = j["target_kbps"].as_f64();
        }
    }
    Ok(flows.into_values().collect())
}

/// The rung the TCP player asked for after each of its samples (its JSON lines).
fn read_player_rungs(path: &Path, secs: usize) -> Vec<Option<usize>> {
    let mut rungs = vec![None; secs];
    let text = std::fs::read_to_string(path).unwrap_or_default();
    for line in text.lines() {
        let Ok(j) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if let (Some(t), Some(r)) = (j["t_s"].as_f64(), j["rung"].as_u64()) {
            let k = (t.round() as usize).saturating_sub(1);
            if k < secs {
                rungs[k] = Some(r as usize);
            }
        }
    }
    rungs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ss_output_gives_each_connections_congestion_control() {
        // `ss -Htin state established` on the lab's sender (iproute2 6.1), trimmed.
        let text = "\
0      102808      10.1.1.1:8000     10.2.1.1:51878
\t bbr wscale:10,10 rto:424 rtt:221.067/7.244 ato:40 mss:1448 cwnd:11
0      5977        10.1.1.1:8450     10.2.1.1:45906
\t cubic wscale:10,10 rto:412 rtt:209.493/3.292 ato:40 mss:1448 cwnd:46
0      0           10.1.1.1:8000     10.2.2.1:60908
\t wscale:10,10 rto:200 mss:1448
";
        let got = ss_congestion(text);
        assert_eq!(
            got,
            vec![
                (
                    "10.1.1.1:8000".into(),
                    "10.2.1.1:51878".into(),
                    "bbr".into()
                ),
                (
                    "10.1.1.1:8450".into(),
                    "10.2.1.1:45906".into(),
                    "cubic".into()
                ),
            ]
        );
        assert!(ss_congestion("").is_empty());
    }

    #[test]
    fn a_server_connection_on_another_algorithm_or_none_at_all_fails_the_check() {
        let line = |port: u16, cc: &str| {
            format!("0 0 10.1.1.1:{port} 10.2.1.1:5000\n\t {cc} wscale:10,10 mss:1448\n")
        };
        let ok = format!("{}{}", line(HTTP_PORT, "cubic"), line(VIDEO_PORT, "cubic"));
        assert_eq!(servers_run(&ok, "cubic"), Ok(()));
        let bbr = format!("{}{}", line(HTTP_PORT, "cubic"), line(VIDEO_PORT, "bbr"));
        let e = servers_run(&bbr, "cubic").unwrap_err();
        assert!(
            e.contains(&format!(":{VIDEO_PORT}")) && e.contains("runs bbr"),
            "{e}"
        );
        // connections of other ports are not the servers'
        let e = servers_run(&line(9999, "bbr"), "cubic").unwrap_err();
        assert!(e.contains("no server connection"), "{e}");
        assert!(servers_run("", "cubic").is_err());
    }
}
