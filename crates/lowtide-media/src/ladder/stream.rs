//! The ladder over a plain TCP socket, with blocking std sockets (so an `LD_PRELOAD` agent
//! such as BWSS's library sees ordinary `read`s):
//! - [`serve`]/[`serve_connection`]: sends the manifest, waits for the client's first
//!   request, then paces the requested rung's media at `overdrive` × its rate (the Helix
//!   server's habit that Mehra notes: 350 kbit/s sent at 400), following every switch
//!   request. Stored content: when TCP holds it back the media waits, and the pacer's
//!   credit is capped at [`ServerConfig::burst`] so it does not rush afterwards.
//! - [`play`]: reads, measures one [`ThroughputSample`](super::ThroughputSample) per interval, feeds the
//!   [`SwitchPolicy`] and sends the switches it decides.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::meter::ThroughputMeter;
use super::wire::{self, LadderWireError, MediaParser, MAX_FRAME, MEDIA_HEADER};
use super::{Ladder, Switch, SwitchPolicy};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    #[error("{what}: {error}")]
    Io {
        what: &'static str,
        error: std::io::Error,
    },
    #[error(transparent)]
    Wire(#[from] LadderWireError),
    #[error("the switching policy: {0}")]
    Policy(String),
    #[error("overdrive = {0}: allowed is 1.0 to 4.0")]
    Overdrive(f64),
    #[error("the server closed the connection before its manifest")]
    NoManifest,
    #[error("refused a client: already serving {MAX_CLIENTS}")]
    Busy,
}

fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> StreamError {
    move |error| StreamError::Io { what, error }
}

/// Clients served at once, at most (a thread each); more are refused.
pub const MAX_CLIENTS: usize = 64;

/// How often blocked calls look at their stop flag.
const POLL: Duration = Duration::from_millis(100);

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub ladder: Ladder,
    /// Sending rate as a multiple of the rung's rate (1.0 to 4.0).
    pub overdrive: f64,
    /// The pacer's period.
    pub tick: Duration,
    /// Credit kept when TCP held the media back, as time at the sending rate.
    pub burst: Duration,
}

impl ServerConfig {
    /// Mehra's ladder; 1.15 × the rate, as the Helix server in the paper (400/350).
    pub fn mehra() -> ServerConfig {
        ServerConfig {
            ladder: Ladder::mehra(),
            overdrive: 1.15,
            tick: Duration::from_millis(10),
            burst: Duration::from_millis(100),
        }
    }

    pub fn check(&self) -> Result<(), StreamError> {
        if !(1.0..=4.0).contains(&self.overdrive) {
            return Err(StreamError::Overdrive(self.overdrive));
        }
        Ok(())
    }
}

/// What one connection got.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ServeReport {
    pub bytes_by_rung: Vec<u64>,
    pub switches: u64,
}

/// Accepts connections and serves each on its own thread (at most [`MAX_CLIENTS`]) until
/// `stop` is set; each connection's end (report or error) goes to `on_end`.
pub fn serve(
    listener: TcpListener,
    cfg: ServerConfig,
    stop: Arc<AtomicBool>,
    on_end: impl Fn(Result<ServeReport, StreamError>) + Send + Sync + 'static,
) -> Result<(), StreamError> {
    cfg.check()?;
    listener
        .set_nonblocking(true)
        .map_err(io("making the listener non-blocking"))?;
    let (cfg, on_end) = (Arc::new(cfg), Arc::new(on_end));
    let mut threads = vec![];
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((s, _)) if threads.len() >= MAX_CLIENTS => {
                drop(s);
                on_end(Err(StreamError::Busy));
            }
            Ok((s, _)) => {
                let (cfg, stop, on_end) = (cfg.clone(), stop.clone(), on_end.clone());
                threads.push(std::thread::spawn(move || {
                    on_end(serve_connection(s, &cfg, &stop));
                }));
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(POLL / 4),
            Err(e) => {
                return Err(StreamError::Io {
                    what: "accepting",
                    error: e,
                })
            }
        }
        threads.retain(|t| !t.is_finished());
    }
    for t in threads {
        let _ = t.join();
    }
    Ok(())
}

/// `buf` written whole, unless `stop` comes first (checked every [`POLL`]).
fn write_all_until(s: &mut TcpStream, buf: &[u8], stop: &AtomicBool) -> std::io::Result<()> {
    let mut off = 0;
    while off < buf.len() {
        match s.write(&buf[off..]) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => off += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if stop.load(Ordering::Relaxed) {
                    return Err(ErrorKind::Interrupted.into());
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The requested rung (`usize::MAX` before the first request) and how the requests ended.
struct Requests {
    rung: AtomicUsize,
    switches: AtomicUsize,
    ended: AtomicBool,
    error: Mutex<Option<LadderWireError>>,
}

fn read_requests(mut s: TcpStream, ladder: &Ladder, req: &Requests) {
    let (mut msg, mut have) = ([0u8; 2], 0);
    while !req.ended.load(Ordering::Relaxed) {
        match s.read(&mut msg[have..]) {
            Ok(0) => break,
            Ok(n) => have += n,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(_) => break,
        }
        if have < msg.len() {
            continue;
        }
        have = 0;
        match wire::decode_switch(msg, ladder) {
            Ok(rung) => {
                req.rung.store(rung, Ordering::Relaxed);
                req.switches.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                *req.error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                let _ = s.shutdown(std::net::Shutdown::Both);
                break;
            }
        }
    }
    req.ended.store(true, Ordering::Relaxed);
}

/// Serves one client until it closes, sends a bad request, or `stop`.
pub fn serve_connection(
    mut s: TcpStream,
    cfg: &ServerConfig,
    stop: &AtomicBool,
) -> Result<ServeReport, StreamError> {
    cfg.check()?;
    s.set_nodelay(true).map_err(io("setting TCP_NODELAY"))?;
    s.set_write_timeout(Some(POLL))
        .map_err(io("setting the write timeout"))?;
    let reader = s.try_clone().map_err(io("cloning the socket"))?;
    reader
        .set_read_timeout(Some(POLL))
        .map_err(io("setting the read timeout"))?;
    let req = Arc::new(Requests {
        rung: AtomicUsize::new(usize::MAX),
        switches: AtomicUsize::new(0),
        ended: AtomicBool::new(false),
        error: Mutex::new(None),
    });
    let requests = {
        let (req, ladder) = (req.clone(), cfg.ladder.clone());
        std::thread::spawn(move || read_requests(reader, &ladder, &req))
    };
    let result = pace(&mut s, cfg, stop, &req);
    req.ended.store(true, Ordering::Relaxed);
    let _ = s.shutdown(std::net::Shutdown::Both);
    let _ = requests.join();
    if let Some(e) = req.error.lock().unwrap_or_else(|p| p.into_inner()).take() {
        return Err(e.into());
    }
    result
}

fn pace(
    s: &mut TcpStream,
    cfg: &ServerConfig,
    stop: &AtomicBool,
    req: &Requests,
) -> Result<ServeReport, StreamError> {
    let mut report = ServeReport {
        bytes_by_rung: vec![0; cfg.ladder.len()],
        switches: 0,
    };
    write_all_until(s, &wire::manifest(&cfg.ladder), stop).map_err(io("sending the manifest"))?;
    let mut frame = vec![0u8; MEDIA_HEADER + MAX_FRAME];
    let mut credit = 0.0f64; // bytes
    let mut last = Instant::now();
    while !stop.load(Ordering::Relaxed) && !req.ended.load(Ordering::Relaxed) {
        std::thread::sleep(cfg.tick);
        let rung = req.rung.load(Ordering::Relaxed);
        let now = Instant::now();
        let dt = now - std::mem::replace(&mut last, now);
        if rung == usize::MAX {
            continue; // no request yet
        }
        let bytes_per_s = cfg.ladder.rate_bps(rung) as f64 * cfg.overdrive / 8.0;
        let cap = bytes_per_s * cfg.burst.as_secs_f64().max(cfg.tick.as_secs_f64());
        credit = (credit + bytes_per_s * dt.as_secs_f64()).min(cap);
        while credit >= 1.0 {
            let len = (credit as usize).min(MAX_FRAME);
            frame[..MEDIA_HEADER].copy_from_slice(&wire::media_header(rung, len));
            match write_all_until(s, &frame[..MEDIA_HEADER + len], stop) {
                Ok(()) => {}
                // The client went away, or we were stopped: the end of this stream.
                Err(_) => return Ok(finish(report, req)),
            }
            credit -= len as f64;
            report.bytes_by_rung[rung] += len as u64;
        }
    }
    Ok(finish(report, req))
}

fn finish(mut report: ServeReport, req: &Requests) -> ServeReport {
    report.switches = req.switches.load(Ordering::Relaxed).saturating_sub(1) as u64;
    report
}

/// One measurement interval as the client saw it.
#[derive(Debug, Clone, Serialize)]
pub struct SampleRecord {
    /// End of the interval, seconds since the first request.
    pub t_s: f64,
    /// Throughput of the interval (every byte read), kbit/s.
    pub kbps: f64,
    /// The rung of the last media received in it.
    pub media_rung: Option<usize>,
    /// The rung asked for after it.
    pub rung: usize,
    pub switch: Option<Switch>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PlayReport {
    pub rates_bps: Vec<u64>,
    pub samples: Vec<SampleRecord>,
    pub bytes_by_rung: Vec<u64>,
    /// Every byte read over the whole play time, kbit/s.
    pub mean_kbps: f64,
    pub secs: f64,
    /// Why the play ended before `duration`, if it did.
    pub ended_early: Option<String>,
}

#[derive(Debug, Clone)]
pub struct PlayConfig {
    pub sample_interval: Duration,
    pub duration: Duration,
}

/// Plays for `cfg.duration`: the policy is built from the server's manifest and starts on
/// its [`SwitchPolicy::rung`]. Each sample goes to `on_sample` as it is taken.
pub fn play<P: SwitchPolicy>(
    mut s: TcpStream,
    cfg: &PlayConfig,
    make_policy: impl FnOnce(Ladder) -> Result<P, String>,
    mut on_sample: impl FnMut(&SampleRecord),
) -> Result<PlayReport, StreamError> {
    s.set_nodelay(true).map_err(io("setting TCP_NODELAY"))?;
    let mut parser = MediaParser::default();
    let mut buf = vec![0u8; 64 * 1024];
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(io("setting the read timeout"))?;
    while parser.ladder().is_none() {
        let n = s.read(&mut buf).map_err(io("reading the manifest"))?;
        if n == 0 {
            return Err(StreamError::NoManifest);
        }
        parser.feed(&buf[..n])?;
    }
    let ladder = parser.ladder().expect("the manifest").clone();
    let mut policy = make_policy(ladder.clone()).map_err(StreamError::Policy)?;
    s.write_all(&wire::switch_request(policy.rung()))
        .map_err(io("sending the first request"))?;
    let start = Instant::now();
    let mut meter = ThroughputMeter::new(start, cfg.sample_interval);
    let mut report = PlayReport {
        rates_bps: ladder.rates_bps().to_vec(),
        samples: vec![],
        bytes_by_rung: vec![],
        mean_kbps: 0.0,
        secs: 0.0,
        ended_early: None,
    };
    let mut total = 0u64;
    let end = start + cfg.duration;
    // The last sample is partial (cut at `end`), and so is one cut short by the server.
    loop {
        let now = Instant::now();
        let last = now >= end || report.ended_early.is_some();
        let sample = if last {
            meter.finish(now)
        } else {
            meter.poll_sample(now)
        };
        if let Some(sample) = sample {
            let media_rung = parser.last_rung();
            let switch = policy.on_sample(sample);
            if let (Some(sw), false) = (switch, last) {
                s.write_all(&wire::switch_request(sw.to))
                    .map_err(io("sending a switch request"))?;
            }
            let rec = SampleRecord {
                t_s: (sample.end - start).as_secs_f64(),
                // Samples always span time (the meter's interval, or up to `now`).
                kbps: sample.bps().unwrap_or(0.0) / 1e3,
                media_rung,
                rung: policy.rung(),
                switch,
            };
            on_sample(&rec);
            report.samples.push(rec);
        }
        if last {
            break;
        }
        let wait = meter.poll_timeout().min(end).saturating_duration_since(now);
        s.set_read_timeout(Some(wait.max(Duration::from_millis(1))))
            .map_err(io("setting the read timeout"))?;
        match s.read(&mut buf) {
            Ok(0) => {
                report.ended_early = Some("the server closed the connection".into());
            }
            Ok(n) => {
                parser.feed(&buf[..n])?;
                meter.on_bytes(n);
                total += n as u64;
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => {
                report.ended_early = Some(format!("reading: {e}"));
            }
        }
    }
    report.secs = start.elapsed().as_secs_f64();
    report.mean_kbps = total as f64 * 8.0 / report.secs / 1e3;
    report.bytes_by_rung = parser.bytes_by_rung().to_vec();
    Ok(report)
}
