//! The host daemon (`lowtide bwss`): one per host (per network namespace), it owns the
//! [`Bwss`] core and the shared memory; readers register their TCP connections over its Unix
//! socket. Threads: one accepting, one per connected reader process, one ticking the control
//! loop every `interval_ms` (read the slots' byte counters, σ rule, allocation, write the
//! budgets, beat). A flow is keyed by its socket's inode, so a socket held by several
//! processes (after `fork`) is one flow; it ends when the last holder unregisters or exits.

use std::collections::{BTreeSet, HashMap};
use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::config::{Config, FlowInfo};
use crate::shm::{monotonic_ns, Region, Slot, SLOTS};
use crate::sigma::SigmaCounters;
use crate::system::{Bwss, FlowId};
use crate::unix;
use crate::wire::{Reply, Request, MAX_LINE};

/// The daemon could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DaemonError {
    #[error("cannot listen on {socket}: {reason}")]
    Bind { socket: String, reason: String },
    #[error("another BWSS daemon already listens on {socket} (one per host)")]
    Running { socket: String },
    #[error("creating the shared memory: {0}")]
    Shm(io::Error),
    #[error("opening the rate log {path}: {reason}")]
    Log { path: PathBuf, reason: String },
}

/// How to run the daemon.
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    /// `@name` (abstract, per network namespace) or a path.
    pub socket: String,
    pub config: Config,
    /// Append one JSON line per flow and second (measured and target rates) here.
    pub log: Option<PathBuf>,
}

struct Entry {
    id: FlowId,
    slot: u32,
    holders: BTreeSet<u64>,
}

struct State {
    bwss: Bwss,
    flows: HashMap<u64, Entry>,
    free: Vec<u32>,
    log: Option<RateLog>,
}

struct Shared {
    state: Mutex<State>,
    region: Region,
    start: Instant,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A bound daemon; [`run`](Self::run) serves until `stop` is set.
pub struct Daemon {
    listener: UnixListener,
    shared: Arc<Shared>,
    socket: String,
}

impl Daemon {
    pub fn bind(opts: DaemonOptions) -> Result<Daemon, DaemonError> {
        let socket = opts.socket.clone();
        if !socket.starts_with('@') && std::path::Path::new(&socket).exists() {
            if unix::connect(&socket).is_ok() {
                return Err(DaemonError::Running { socket });
            }
            // A socket file left by a daemon that died.
            let _ = std::fs::remove_file(&socket);
        }
        let listener = unix::bind(&socket).map_err(|e| {
            if e.kind() == io::ErrorKind::AddrInUse {
                DaemonError::Running {
                    socket: socket.clone(),
                }
            } else {
                DaemonError::Bind {
                    socket: socket.clone(),
                    reason: e.to_string(),
                }
            }
        })?;
        let region = Region::create().map_err(DaemonError::Shm)?;
        let log = match &opts.log {
            Some(path) => Some(RateLog::open(path)?),
            None => None,
        };
        let start = Instant::now();
        let state = State {
            bwss: Bwss::new(opts.config),
            flows: HashMap::new(),
            free: (0..SLOTS as u32).rev().collect(),
            log,
        };
        region.beat();
        Ok(Daemon {
            listener,
            shared: Arc::new(Shared {
                state: Mutex::new(state),
                region,
                start,
            }),
            socket,
        })
    }

    pub fn socket(&self) -> &str {
        &self.socket
    }

    /// Serves on a thread of its own until the returned handle is dropped (or stopped):
    /// for programs and tests that run the daemon in-process, e.g. in an emulated host's
    /// thread, where the abstract socket lands in that host's network namespace.
    pub fn spawn(self) -> io::Result<RunningDaemon> {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let socket = self.socket.clone();
        let thread = std::thread::Builder::new()
            .name("bwss-daemon".into())
            .spawn(move || self.run(s))?;
        Ok(RunningDaemon {
            socket,
            stop,
            thread: Some(thread),
        })
    }

    /// Serves readers until `stop` is set (checked every 50 ms); then removes a path socket.
    pub fn run(self, stop: Arc<AtomicBool>) -> io::Result<()> {
        self.listener.set_nonblocking(true)?;
        let ticker = {
            let shared = self.shared.clone();
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("bwss-tick".into())
                .spawn(move || tick_loop(&shared, &stop))?
        };
        let mut conn_id = 0u64;
        while !stop.load(Ordering::Relaxed) {
            match self.listener.accept() {
                Ok((sock, _)) => {
                    conn_id += 1;
                    let shared = self.shared.clone();
                    let stop = stop.clone();
                    let id = conn_id;
                    std::thread::Builder::new()
                        .name(format!("bwss-conn-{id}"))
                        .spawn(move || serve(&shared, sock, id, &stop))?;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(e) => return Err(e),
            }
        }
        let _ = ticker.join();
        if !self.socket.starts_with('@') {
            let _ = std::fs::remove_file(&self.socket);
        }
        Ok(())
    }
}

/// A daemon serving on its own thread; dropping it stops the daemon and waits for it.
pub struct RunningDaemon {
    socket: String,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<io::Result<()>>>,
}

impl RunningDaemon {
    pub fn socket(&self) -> &str {
        &self.socket
    }

    /// Stops the daemon and returns how its loop ended.
    pub fn stop(mut self) -> io::Result<()> {
        self.finish()
    }

    fn finish(&mut self) -> io::Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("the daemon thread panicked"))),
            None => Ok(()),
        }
    }
}

impl Drop for RunningDaemon {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

fn tick_loop(shared: &Shared, stop: &AtomicBool) {
    let interval = shared.lock().bwss.interval();
    let mut next = Instant::now() + interval;
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now < next {
            std::thread::sleep((next - now).min(Duration::from_millis(50)));
            continue;
        }
        next += interval;
        if next < now {
            next = now + interval;
        }
        tick(shared, now);
    }
}

fn tick(shared: &Shared, now: Instant) {
    let mut g = shared.lock();
    let st = &mut *g;
    for e in st.flows.values() {
        if let Some(slot) = shared.region.slot(e.slot) {
            record_slot(&mut st.bwss, e.id, slot, now, monotonic_ns());
        }
    }
    st.bwss.on_tick(now);
    publish(shared, st);
    shared.region.beat();
    if let Some(log) = &mut st.log {
        log.maybe_write(now, shared.start, &st.bwss);
    }
}

/// What a reader wrote into flow `id`'s slot, into the core at `now` (`now_ns`: [`monotonic_ns`]
/// then). Any process that maps the region can write any slot, so every value may be hostile.
pub fn record_slot(bwss: &mut Bwss, id: FlowId, slot: &Slot, now: Instant, now_ns: u64) {
    let bytes = slot.bytes_read.load(Ordering::Relaxed);
    bwss.record_bytes(now, id, bytes);
    let at_ns = slot.arrived_at_ns.load(Ordering::Acquire);
    let arrived = slot.bytes_arrived.load(Ordering::Relaxed);
    if arrived > 0 && at_ns > 0 {
        // Recorded when the reader took it, not now: a rare reader's count is old.
        let age = Duration::from_nanos(now_ns.saturating_sub(at_ns));
        let at = now.checked_sub(age).unwrap_or(now);
        bwss.record_arrivals(at, id, arrived);
    }
    let rtt_us = slot.rtt_us.load(Ordering::Relaxed);
    if rtt_us > 0 {
        bwss.record_rtt(id, Duration::from_micros(rtt_us));
    }
}

/// Every flow's budget into its slot.
fn publish(shared: &Shared, st: &State) {
    for e in st.flows.values() {
        if let Some(slot) = shared.region.slot(e.slot) {
            let (rate, depth, clamp_rtts) = match st.bwss.budget(e.id) {
                Some(b) => (
                    (b.rate.round() as u64).max(1),
                    b.depth.round() as u64,
                    b.clamp_rtts,
                ),
                None => (0, 0, 0.0),
            };
            slot.depth.store(depth, Ordering::Relaxed);
            slot.clamp_milli_rtts
                .store((clamp_rtts * 1e3).round() as u64, Ordering::Relaxed);
            slot.rate.store(rate, Ordering::Release);
        }
    }
}

/// One reader process.
fn serve(shared: &Shared, sock: UnixStream, conn: u64, stop: &AtomicBool) {
    let _ = sock.set_read_timeout(Some(Duration::from_millis(200)));
    let mut program = String::from("?");
    let mut reader = BufReader::new(match sock.try_clone() {
        Ok(s) => s,
        Err(_) => return,
    });
    let mut line = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        match reader.read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) if line.ends_with(b"\n") => {
                let reply = match serde_json::from_slice::<Request>(&line) {
                    Ok(req) => handle(shared, conn, &mut program, req),
                    Err(e) => Reply::Error {
                        message: format!("bad request: {e}"),
                    },
                };
                line.clear();
                let mut out = match serde_json::to_vec(&reply) {
                    Ok(v) => v,
                    Err(_) => break,
                };
                out.push(b'\n');
                let sent = if matches!(reply, Reply::Hello { .. }) {
                    unix::send_with_fd(&sock, &out, shared.region.fd().as_raw_fd())
                } else {
                    (&sock).write_all(&out)
                };
                if sent.is_err() {
                    break;
                }
            }
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
        if line.len() > MAX_LINE {
            break;
        }
    }
    // The process exited or closed the socket: it holds none of its flows any more.
    let mut g = shared.lock();
    let inodes: Vec<u64> = g
        .flows
        .iter()
        .filter(|(_, e)| e.holders.contains(&conn))
        .map(|(&i, _)| i)
        .collect();
    for inode in inodes {
        release(shared, &mut g, inode, conn);
    }
}

fn handle(shared: &Shared, conn: u64, program: &mut String, req: Request) -> Reply {
    match req {
        Request::Hello { program: p, .. } => {
            *program = p;
            Reply::Hello { slots: SLOTS }
        }
        Request::Register {
            inode,
            local,
            remote,
        } => {
            let mut g = shared.lock();
            let st = &mut *g;
            if let Some(e) = st.flows.get_mut(&inode) {
                e.holders.insert(conn);
                return Reply::Registered { slot: e.slot };
            }
            let Some(slot) = st.free.pop() else {
                return Reply::Error {
                    message: format!("all {SLOTS} flow slots are in use"),
                };
            };
            let info = FlowInfo {
                program: program.clone(),
                local,
                remote,
            };
            let id = st.bwss.add_flow(Instant::now(), info);
            if let Some(s) = shared.region.slot(slot) {
                s.rate.store(0, Ordering::Relaxed);
                s.bytes_read.store(0, Ordering::Relaxed);
                s.bytes_arrived.store(0, Ordering::Relaxed);
                s.rtt_us.store(0, Ordering::Relaxed);
                s.arrived_at_ns.store(0, Ordering::Relaxed);
                s.inode.store(inode, Ordering::Release);
            }
            st.flows.insert(
                inode,
                Entry {
                    id,
                    slot,
                    holders: BTreeSet::from([conn]),
                },
            );
            publish(shared, st);
            Reply::Registered { slot }
        }
        Request::Unregister { inode } => {
            let mut g = shared.lock();
            release(shared, &mut g, inode, conn);
            Reply::Unregistered
        }
        Request::Status => Reply::Status(shared.lock().bwss.status(Instant::now())),
    }
}

fn release(shared: &Shared, st: &mut State, inode: u64, conn: u64) {
    let Some(e) = st.flows.get_mut(&inode) else {
        return;
    };
    e.holders.remove(&conn);
    if e.holders.is_empty() {
        let (id, slot) = (e.id, e.slot);
        st.flows.remove(&inode);
        st.bwss.remove_flow(id);
        if let Some(s) = shared.region.slot(slot) {
            s.inode.store(0, Ordering::Release);
            s.rate.store(0, Ordering::Relaxed);
        }
        st.free.push(slot);
        publish(shared, st);
    }
}

/// One line per flow and second: what the lab plots as the paper's Fig. 4-6.
#[derive(Debug, Serialize)]
struct RateLine<'a> {
    /// Seconds since the daemon started, at the end of the second.
    t: f64,
    flow: FlowId,
    program: &'a str,
    local: &'a str,
    remote: &'a str,
    rule: Option<&'a str>,
    /// Bytes delivered to the application in this second, as kbit/s.
    kbps: f64,
    /// Bytes that arrived in this second (`tcpi_bytes_received`), as kbit/s; `None` until
    /// the reader has reported them for a whole second.
    arrived_kbps: Option<f64>,
    target_kbps: Option<f64>,
    sigma_kbps: Option<f64>,
    /// The receiver's round-trip estimate, ms; `None` until the reader reports one.
    #[serde(skip_serializing_if = "Option::is_none")]
    rtt_ms: Option<f64>,
    /// The σ rule's transitions so far, by reason: why σ moved in this second.
    sigma_counters: SigmaCounters,
}

struct RateLog {
    out: std::io::BufWriter<std::fs::File>,
    /// When the last line was written, and when the next is due (whole seconds of the
    /// daemon's clock, so lines do not drift by a tick each second).
    last: Option<Instant>,
    due: Option<Instant>,
    /// Per flow: bytes read and bytes arrived at the last line.
    bytes: HashMap<FlowId, (u64, Option<u64>)>,
}

impl RateLog {
    fn open(path: &std::path::Path) -> Result<RateLog, DaemonError> {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| DaemonError::Log {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })?;
        Ok(RateLog {
            out: std::io::BufWriter::new(f),
            last: None,
            due: None,
            bytes: HashMap::new(),
        })
    }

    fn maybe_write(&mut self, now: Instant, start: Instant, bwss: &Bwss) {
        let last = *self.last.get_or_insert(start);
        let due = self.due.get_or_insert(start + Duration::from_secs(1));
        if now < *due {
            return;
        }
        *due += Duration::from_secs(1);
        if *due <= now {
            *due = now + Duration::from_secs(1);
        }
        let dt = now.duration_since(last).as_secs_f64();
        self.last = Some(now);
        let status = bwss.status(now);
        let mut seen = HashMap::new();
        for f in &status.flows {
            let (before, arrived_before) = self.bytes.get(&f.id).copied().unwrap_or((0, None));
            seen.insert(f.id, (f.bytes, f.bytes_arrived));
            let kbps = |now: u64, before: u64| now.saturating_sub(before) as f64 * 8.0 / dt / 1e3;
            let line = RateLine {
                t: now.duration_since(start).as_secs_f64(),
                flow: f.id,
                program: &f.program,
                local: &f.local,
                remote: &f.remote,
                rule: f.rule.as_deref(),
                kbps: kbps(f.bytes, before),
                arrived_kbps: f.bytes_arrived.zip(arrived_before).map(|(a, b)| kbps(a, b)),
                target_kbps: f.target_kbps,
                sigma_kbps: status.sigma_kbps,
                rtt_ms: f.rtt_ms,
                sigma_counters: status.counters,
            };
            if let Ok(s) = serde_json::to_string(&line) {
                let _ = writeln!(self.out, "{s}");
            }
        }
        self.bytes = seen;
        let _ = self.out.flush();
    }
}
