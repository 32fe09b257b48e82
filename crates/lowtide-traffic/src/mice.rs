//! Mice: repeating short TCP transfers, the web-like cross traffic whose completion times
//! suffer most from a standing queue.
//!
//! Each transfer is a fresh connection (congestion control set before the SYN, so every mouse
//! goes through slow start): upload sends N bytes then FIN and waits for the sink to close,
//! which it does only after reading everything; download asks the sink for N bytes and reads
//! them to EOF. The completion time runs from before `connect` to that EOF, so it includes the
//! handshake, as a user would see it. An optional gap separates transfers.

use std::net::{Shutdown, SocketAddr};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::report::Percentiles;
use crate::tcp_client::{self, ZEROS};
use crate::wire::Request;
use crate::{bits_per_second, Direction, Stop, TrafficError};

/// At most this many completion times are kept per flow (the first ones); counts stay exact.
pub const MAX_SAMPLES: usize = 100_000;
/// After a failed transfer, wait at least this long before the next (no hot loop against a
/// sink that is down).
pub const RETRY_BACKOFF: Duration = Duration::from_millis(20);

/// One mouse flow: a sequence of transfers of `bytes` each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MiceConfig {
    /// The TCP sink.
    pub server: SocketAddr,
    /// Congestion control of the sending side.
    pub congestion_control: String,
    /// Who sends.
    pub direction: Direction,
    /// Bytes per transfer (at least 1).
    pub bytes: u64,
    /// Pause between the end of one transfer and the start of the next.
    pub gap: Duration,
    /// Stop after this many completed transfers (None: until the stop).
    pub max_transfers: Option<u64>,
}

impl MiceConfig {
    /// Uploads of `bytes` each, back to back.
    pub fn new(server: SocketAddr, congestion_control: impl Into<String>, bytes: u64) -> Self {
        Self {
            server,
            congestion_control: congestion_control.into(),
            direction: Direction::Upload,
            bytes,
            gap: Duration::ZERO,
            max_transfers: None,
        }
    }
}

/// What one mouse flow achieved.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MiceReport {
    /// Bytes per transfer.
    pub bytes_per_transfer: u64,
    /// Transfers that completed (all bytes confirmed).
    pub completed: u64,
    /// Transfers cut by the stop.
    pub aborted: u64,
    /// Transfers that failed (connect refused, reset, short download).
    pub failed: u64,
    /// The last failure, for the log.
    pub last_error: Option<String>,
    /// `completed * bytes_per_transfer`.
    pub bytes: u64,
    /// From the first connect to the end, in seconds.
    pub duration_s: f64,
    /// `bytes * 8 / duration_s`, gaps included.
    pub goodput_bps: f64,
    /// Flow completion times in seconds (None without completed transfers).
    pub completion_s: Option<Percentiles>,
}

enum Outcome {
    Done(Duration),
    Stopped,
}

/// Run mice until `stop` (or `max_transfers`). Blocking; call it in the client's thread.
///
/// Configuration errors (a congestion control the kernel refuses) end the flow with an error;
/// per-transfer failures are counted and retried after the gap (at least [`RETRY_BACKOFF`]).
pub fn run_mice(cfg: &MiceConfig, stop: &Stop) -> Result<MiceReport, TrafficError> {
    if cfg.bytes == 0 {
        return Err(TrafficError::InvalidConfig {
            field: "bytes",
            value: "0".into(),
            allowed: "at least 1 byte per transfer",
        });
    }
    crate::congestion::check_name(&cfg.congestion_control)?;
    let start = Instant::now();
    let mut samples: Vec<f64> = Vec::new();
    let (mut completed, mut aborted, mut failed) = (0u64, 0u64, 0u64);
    let mut last_error = None;
    while !stop.is_stopped() && cfg.max_transfers.is_none_or(|m| completed < m) {
        let pause = match transfer(cfg, stop) {
            Ok(Outcome::Done(fct)) => {
                completed += 1;
                if samples.len() < MAX_SAMPLES {
                    samples.push(fct.as_secs_f64());
                }
                cfg.gap
            }
            Ok(Outcome::Stopped) => {
                aborted += 1;
                break;
            }
            Err(
                e @ (TrafficError::CongestionControl { .. }
                | TrafficError::CongestionControlName { .. }
                | TrafficError::RemoteCongestionControl { .. }),
            ) => return Err(e),
            Err(e) => {
                failed += 1;
                tracing::debug!(server = %cfg.server, error = %e, "mouse transfer failed");
                last_error = Some(e.to_string());
                cfg.gap.max(RETRY_BACKOFF)
            }
        };
        if !pause.is_zero() && !stop.sleep_until(Instant::now() + pause) {
            break;
        }
    }
    let duration = start.elapsed();
    let bytes = completed * cfg.bytes;
    Ok(MiceReport {
        bytes_per_transfer: cfg.bytes,
        completed,
        aborted,
        failed,
        last_error,
        bytes,
        duration_s: duration.as_secs_f64(),
        goodput_bps: bits_per_second(bytes, duration),
        completion_s: Percentiles::of(&mut samples),
    })
}

fn transfer(cfg: &MiceConfig, stop: &Stop) -> Result<Outcome, TrafficError> {
    let t0 = Instant::now();
    let request = Request {
        direction: cfg.direction,
        download_bytes: cfg.bytes,
        congestion_control: Some(cfg.congestion_control.clone()),
    };
    let mut s = tcp_client::open(cfg.server, &cfg.congestion_control, &request, stop)?;
    let io = |what, e| TrafficError::io(what, cfg.server, e);
    match cfg.direction {
        Direction::Upload => {
            let mut left = cfg.bytes;
            while left > 0 {
                let n = left.min(ZEROS.len() as u64) as usize;
                if !tcp_client::write_all_until(&mut s, &ZEROS[..n], stop)
                    .map_err(|e| io("writing mouse data", e))?
                {
                    tcp_client::abort(s);
                    return Ok(Outcome::Stopped);
                }
                left -= n as u64;
            }
            s.shutdown(Shutdown::Write)
                .map_err(|e| io("closing the mouse's sending side", e))?;
            let (extra, eof) = tcp_client::read_to_eof_until(&mut s, stop)
                .map_err(|e| io("waiting for the sink to confirm", e))?;
            if !eof {
                tcp_client::abort(s);
                return Ok(Outcome::Stopped);
            }
            if extra != 0 {
                return Err(TrafficError::Protocol {
                    addr: cfg.server,
                    what: format!("sink sent {extra} bytes on an upload"),
                });
            }
        }
        Direction::Download => {
            let (got, eof) = tcp_client::read_to_eof_until(&mut s, stop)
                .map_err(|e| io("reading mouse data", e))?;
            if !eof {
                tcp_client::abort(s);
                return Ok(Outcome::Stopped);
            }
            if got != cfg.bytes {
                return Err(TrafficError::Protocol {
                    addr: cfg.server,
                    what: format!("download of {} bytes ended after {got}", cfg.bytes),
                });
            }
        }
    }
    Ok(Outcome::Done(t0.elapsed()))
}
