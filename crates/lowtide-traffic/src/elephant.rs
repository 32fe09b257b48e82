//! Elephants: long-lived bulk TCP flows, the classic cross traffic that fills a bottleneck queue.
//!
//! Upload: the client writes as fast as the kernel takes data until the stop. Goodput counts
//! only bytes the receiver acknowledged by then (bytes written minus `SIOCOUTQ`), not bytes
//! sitting in our send buffer, which can be megabytes. Then the flow either drains (FIN, and
//! wait up to [`ElephantConfig::drain`] for the sink to close, so both sides agree on the byte
//! count) or aborts with RST so that no queued data keeps loading the bottleneck after the
//! scheduled stop time. Download: the sink sends and the client counts what it read.

use std::net::{Shutdown, SocketAddr};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::tcp_client::{self, ZEROS};
use crate::wire::Request;
use crate::{bits_per_second, window, Direction, Stop, TrafficError};

/// One bulk TCP flow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElephantConfig {
    /// The TCP sink.
    pub server: SocketAddr,
    /// Congestion control of the sending side (ours for uploads, the sink's for downloads).
    pub congestion_control: String,
    /// Who sends.
    pub direction: Direction,
    /// Uploads only: after the stop, how long to wait for the sink to read everything before
    /// aborting. Zero (the default for cross traffic) aborts at once.
    pub drain: Duration,
    /// Uploads: the most bytes in flight (ns-2's `window_`; see [`crate::window`]); None:
    /// only TCP's own windows.
    pub window: Option<u32>,
}

impl ElephantConfig {
    /// An upload with the given congestion control and no drain.
    pub fn new(server: SocketAddr, congestion_control: impl Into<String>) -> Self {
        Self {
            server,
            congestion_control: congestion_control.into(),
            direction: Direction::Upload,
            drain: Duration::ZERO,
            window: None,
        }
    }
}

/// What one elephant achieved.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ElephantReport {
    /// Application bytes that reached the receiver while the flow ran (upload: acknowledged;
    /// download: read by us).
    pub bytes: u64,
    /// From the first data byte to the stop, in seconds.
    pub duration_s: f64,
    /// `bytes * 8 / duration_s`.
    pub goodput_bps: f64,
    /// Upload: bytes handed to the kernel (≥ `bytes`). Download: equal to `bytes`.
    pub bytes_written: u64,
    /// Upload: the sink confirmed reading all `bytes_written` within the drain time.
    pub drained: bool,
}

/// Run one elephant until `stop`. Blocking; call it in the client's namespace thread.
pub fn run_elephant(cfg: &ElephantConfig, stop: &Stop) -> Result<ElephantReport, TrafficError> {
    let request = Request {
        direction: cfg.direction,
        download_bytes: 0,
        congestion_control: Some(cfg.congestion_control.clone()),
    };
    let mut stream = tcp_client::open(cfg.server, &cfg.congestion_control, &request, stop)?;
    let start = Instant::now();
    match cfg.direction {
        Direction::Download => {
            let (bytes, _eof) = tcp_client::read_to_eof_until(&mut stream, stop)
                .map_err(|e| TrafficError::io("reading elephant data", cfg.server, e))?;
            let duration = start.elapsed();
            tcp_client::abort(stream);
            Ok(ElephantReport {
                bytes,
                duration_s: duration.as_secs_f64(),
                goodput_bps: bits_per_second(bytes, duration),
                bytes_written: bytes,
                drained: false,
            })
        }
        Direction::Upload => {
            let mut written = 0u64;
            while !stop.is_stopped() {
                let outq = match cfg.window {
                    None => 0,
                    Some(_) => tcp_client::unacked_bytes(&stream)
                        .map_err(|e| TrafficError::io("reading SIOCOUTQ", cfg.server, e))?,
                };
                let n = window::room(cfg.window, outq, ZEROS.len());
                if n == 0 {
                    std::thread::sleep(window::POLL);
                    continue;
                }
                match std::io::Write::write(&mut stream, &ZEROS[..n]) {
                    Ok(n) => written += n as u64,
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock
                                | std::io::ErrorKind::TimedOut
                                | std::io::ErrorKind::Interrupted
                        ) => {}
                    Err(e) => return Err(TrafficError::io("writing elephant data", cfg.server, e)),
                }
            }
            let duration = start.elapsed();
            let unacked = tcp_client::unacked_bytes(&stream)
                .map_err(|e| TrafficError::io("reading SIOCOUTQ", cfg.server, e))?;
            let bytes = written.saturating_sub(unacked);
            let drained = !cfg.drain.is_zero() && drain(&mut stream, stop, cfg.drain);
            tcp_client::abort(stream);
            Ok(ElephantReport {
                bytes,
                duration_s: duration.as_secs_f64(),
                goodput_bps: bits_per_second(bytes, duration),
                bytes_written: written,
                drained,
            })
        }
    }
}

/// FIN, then wait for the sink's close (it closes after reading everything).
fn drain(stream: &mut std::net::TcpStream, stop: &Stop, drain: Duration) -> bool {
    if stream.shutdown(Shutdown::Write).is_err() {
        return false;
    }
    // The flow's own stop has passed; only the shared flag may cut the drain short.
    let drain_stop = Stop::new(stop.flag().clone(), Instant::now() + drain);
    matches!(
        tcp_client::read_to_eof_until(stream, &drain_stop),
        Ok((_, true))
    )
}
