//! The paper's "UDP" case: the same bit-rate ladder and the same player's switching rule
//! as `lowtide ladder`, carried over TFRC (Floyd et al., RFC 5348; `lowtide-tfrc`) instead
//! of TCP.
//!
//! The server sends the requested rung at `overdrive` × its rate (the Helix server's habit,
//! as `ladder serve`) in 100 ms chunks that expire after `CHUNK_DEADLINE` when TFRC's rate
//! cannot carry them (stale media is dropped, as a UDP streaming server does, and counted by
//! TFRC's send buffer). The player measures what arrived each second of the trial's clock,
//! feeds [`ThroughputRule`] and sends a one-byte switch request when it switches.
//!
//! Where we differ from RealPlayer over UDP (Mehra Fig. 5): the paper's client was RealOne
//! with RealNetworks' own TCP-friendly UDP rate control, of which nothing is published; ours
//! is TFRC, the standard equation-based one.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use lowtide_media::ladder::throughput_rule::{ThroughputRule, ThroughputRuleConfig};
use lowtide_media::ladder::{Ladder, SwitchPolicy, ThroughputSample};
use lowtide_tfrc::driver::Session;
use lowtide_tfrc::{BufferConfig, Message, TfrcConfig};

use crate::LabError;

/// The server's pacing period.
const TICK: Duration = Duration::from_millis(100);
/// A chunk not started by then is dropped.
const CHUNK_DEADLINE: Duration = Duration::from_secs(1);

fn config() -> TfrcConfig {
    TfrcConfig {
        buffer: BufferConfig::Fixed { bytes: 256 * 1024 },
        ..TfrcConfig::default()
    }
}

fn err(what: &str) -> impl FnOnce(lowtide_tfrc::driver::Error) -> LabError + '_ {
    move |e| LabError::io(what, e)
}

/// What the server did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ServerReport {
    pub chunks_sent: u64,
    pub chunks_refused: u64,
    pub switch_requests: u64,
    /// TFRC's send buffer at the end: chunks that expired unsent, refused, sent.
    pub buffer: lowtide_tfrc::buffer::BufferStats,
    /// Data packets TFRC sent.
    pub data_packets_sent: u64,
}

/// Serves the ladder to the first client on `listen` until `stop`.
pub fn serve(
    listen: SocketAddr,
    ladder: Ladder,
    overdrive: f64,
    stop: Arc<AtomicBool>,
) -> Result<ServerReport, LabError> {
    let rt = runtime()?;
    rt.block_on(async move {
        let accept = Session::accept(listen, config());
        let session = tokio::select! {
            s = accept => s.map_err(err("TFRC video server: accepting the player"))?,
            _ = until(&stop) => return Ok(ServerReport::default()),
        };
        let mut report = ServerReport::default();
        let mut rung = ladder.top();
        let mut tick = tokio::time::interval(TICK);
        loop {
            tokio::select! {
                m = session.recv() => match m {
                    Some(m) => {
                        if let Some(&r) = m.data.first() {
                            if (r as usize) < ladder.len() {
                                rung = r as usize;
                                report.switch_requests += 1;
                            }
                        }
                    }
                    None => break,
                },
                _ = tick.tick() => {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let bytes = (ladder.rate_bps(rung) as f64 * overdrive * TICK.as_secs_f64() / 8.0) as usize;
                    let mut data = vec![0u8; bytes.max(1)];
                    data[0] = rung as u8;
                    let msg = Message {
                        deadline: Some(Instant::now() + CHUNK_DEADLINE),
                        ..Message::new(Bytes::from(data))
                    };
                    match session.send(msg) {
                        Ok(_) => report.chunks_sent += 1,
                        Err(_) => report.chunks_refused += 1,
                    }
                }
            }
        }
        let st = session.stats();
        report.buffer = st.buffer;
        report.data_packets_sent = st.data_sent;
        session.close(0);
        Ok(report)
    })
}

/// One second of the player on the trial's clock.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PlayerSecond {
    /// The second `[k, k+1)` since the trial's start.
    pub k: usize,
    pub kbps: f64,
    /// The rung asked for after it.
    pub rung: usize,
}

/// Plays from `server` until `stop` or `t0 + secs`, one sample per second of the trial's
/// clock (`t0`).
pub fn play(
    server: SocketAddr,
    ladder: Ladder,
    rule: ThroughputRuleConfig,
    t0: Instant,
    secs: f64,
    stop: Arc<AtomicBool>,
) -> Result<Vec<PlayerSecond>, LabError> {
    let rt = runtime()?;
    rt.block_on(async move {
        let local: SocketAddr = (std::net::Ipv4Addr::UNSPECIFIED, 0).into();
        let session = Session::connect(local, server, config())
            .await
            .map_err(err("TFRC video player: connecting"))?;
        let mut rule = ThroughputRule::new(ladder.clone(), ladder.top(), rule)
            .map_err(|e| LabError::io("TFRC video player: the switching rule", e))?;
        session
            .send(Message::new(Bytes::from(vec![rule.rung() as u8])))
            .map_err(|e| LabError::io("TFRC video player: the hello", e))?;
        let end = t0 + Duration::from_secs_f64(secs);
        let first = t0 + Duration::from_secs(1 + Instant::now().saturating_duration_since(t0).as_secs());
        let mut tick = tokio::time::interval_at(first.into(), Duration::from_secs(1));
        let mut bytes = 0u64;
        let mut out = vec![];
        loop {
            tokio::select! {
                m = session.recv() => match m {
                    Some(m) => bytes += m.data.len() as u64,
                    None => break,
                },
                at = tick.tick() => {
                    let at: Instant = at.into();
                    let k = at.duration_since(t0).as_secs().saturating_sub(1) as usize;
                    let sample = ThroughputSample { end: at, duration: Duration::from_secs(1), bytes };
                    if let Some(s) = rule.on_sample(sample) {
                        let _ = session.send(Message::new(Bytes::from(vec![s.to as u8])));
                    }
                    out.push(PlayerSecond { k, kbps: bytes as f64 * 8.0 / 1e3, rung: rule.rung() });
                    bytes = 0;
                    if at >= end || stop.load(Ordering::Relaxed) {
                        break;
                    }
                }
            }
        }
        session.close(0);
        Ok(out)
    })
}

fn runtime() -> Result<tokio::runtime::Runtime, LabError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| LabError::io("starting a tokio runtime", e))
}

async fn until(stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
