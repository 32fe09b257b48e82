//! The bit-rate-ladder stream of Hasan, Huang, Werstein, "Dynamic Send Buffer Active Tuning
//! for Low Latency Streaming Media" (Sections 3 and 5): a server that holds the paper's
//! encodings (80, 120, 240, 320, 640 kbit/s) and streams one of them, chosen by a server-side
//! switching policy (lowtide-media's `ladder::report_rule` or `ladder::dbat_rule`), to a client
//! with a playout buffer that reports once per interval. Over lowtide (TCP with a fixed
//! `SO_SNDBUF`, DBAT or MinBuf) or over TFRC (a fixed or a DBAT-tuned send buffer).
//!
//! The server cuts the rung's rate into frames of `frame_ms` (each stamped with the lab clock,
//! a sequence number and the rung) and hands each to the transport at its capture time. A
//! frame the transport cannot take then (lowtide: not writable; TFRC: `BufferFull`) is
//! dropped at the server and counted: a full send buffer loses media, and the client sees a
//! gap in the sequence numbers (Section 3). The transport's `Probed` and `Congestion` events
//! and TFRC's allowed rate `X` go to the policy; the rung's rate goes back to the transport
//! (`set_stream_rate`, DBAT's slow-start allowance).
//!
//! Where we differ:
//! - the session (and its packet-pair probe) starts at `application.ladder.start_s`; the
//!   first frame waits for the probe's answer (as the paper's server probes, then picks the
//!   rung, then streams), for at most `PROBE_WAIT`, on the lowest rung if none came; over
//!   lowtide a probe without an estimate (both packets read at once) is repeated up to
//!   `PROBE_RETRIES` times (the policy sees each);
//! - with DBAT, the probe's signal carries slow start's first rate (DBAT's initial window per
//!   probed RTT) for the DBAT rule's first rung;
//! - the client's reports travel in one UDP datagram each to the server's host (not in the
//!   media connection), so the report path is the same for TCP and TFRC; a report lost or
//!   malformed is counted, never guessed;
//! - frames are filler of the rung's rate, not an encoder's output.
//!
//! The parts: the frame header and the client's report datagram (`wire.rs`), the server
//! (`server.rs`) and the client (`client.rs`); here the configuration, what each side
//! records, and the variant started and joined.

mod client;
mod server;
#[cfg(test)]
mod tests;
pub mod wire;

use std::net::SocketAddr;
use std::time::Instant;

use lowtide::ChannelConfig;
use lowtide_media::ladder::server_policy::ServerSwitchReason;
use lowtide_tfrc::TfrcConfig;
use lowtide_traffic::Stop;
use serde::{Deserialize, Serialize};

pub use crate::ladder_seconds::Second;
use crate::runner::{Measured, Task};
use crate::scenario::{ApplicationKind, Scenario, Variant};
use crate::stream::{self, Sample};
use crate::tcpinfo::TcpTimeline;
use crate::{ladder_seconds, LabError};

pub use client::play;
pub use server::serve;

/// `[application.ladder]`: the stream's timing and the client's buffer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LadderApp {
    /// The session starts (connect, probe, stream) this many seconds into the run.
    pub start_s: f64,
    /// Media time per frame.
    pub frame_ms: u64,
    /// The client reports once per this interval.
    pub report_ms: u64,
    /// Media buffered before play starts, and before it resumes after a rebuffer.
    pub startup_ms: u64,
    pub resume_ms: u64,
}

impl Default for LadderApp {
    fn default() -> Self {
        Self {
            start_s: 0.0,
            frame_ms: 40,
            report_ms: 1000,
            startup_ms: 1000,
            resume_ms: 500,
        }
    }
}

impl LadderApp {
    /// Checks every field against the run's length.
    pub fn check(&self, duration_s: f64) -> Result<(), (String, String, String)> {
        let bad =
            |f: &str, v: String, a: &str| Err((format!("application.ladder.{f}"), v, a.into()));
        if !(self.start_s >= 0.0 && self.start_s + 1.0 <= duration_s) {
            return bad(
                "start_s",
                self.start_s.to_string(),
                "0 to 1 s before the run's end",
            );
        }
        for (f, v, lo, hi) in [
            ("frame_ms", self.frame_ms, 10, 1000),
            ("report_ms", self.report_ms, 100, 10_000),
            ("startup_ms", self.startup_ms, 0, 30_000),
            ("resume_ms", self.resume_ms, 0, 30_000),
        ] {
            if !(lo..=hi).contains(&v) {
                return bad(f, v.to_string(), &format!("{lo} to {hi}"));
            }
        }
        Ok(())
    }
}

/// The transport a ladder variant runs over.
#[derive(Debug, Clone)]
pub enum LadderTransport {
    /// lowtide over TCP (its controller and `SO_SNDBUF` in the config); the session probes.
    Lowtide(Box<ChannelConfig>),
    Tfrc(TfrcConfig),
}

impl LadderTransport {
    /// DBAT rows switch on DBAT's congestion signals; the rest (a fixed buffer, MinBuf: no
    /// congestion signal) on the client's reports, as the paper's baseline server.
    pub fn policy(&self) -> PolicyKind {
        let dbat = match self {
            LadderTransport::Lowtide(c) => {
                matches!(c.transport.controller, lowtide::ControllerConfig::Dbat(_))
            }
            LadderTransport::Tfrc(t) => matches!(t.buffer, lowtide_tfrc::BufferConfig::Dbat(_)),
        };
        if dbat {
            PolicyKind::Dbat
        } else {
            PolicyKind::Report
        }
    }
}

/// Which server rule a variant runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyKind {
    /// `ladder::report_rule`: down on the client's loss or rebuffer reports.
    Report,
    /// `ladder::dbat_rule`: down on DBAT's congestion onsets.
    Dbat,
}

/// One frame the server made: when, of which rung's rate, and whether the transport took it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FrameSent {
    pub t_s: f64,
    pub rate_bps: u64,
    pub bytes: u32,
    pub accepted: bool,
}

/// A switch, in run seconds and bit rates.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SwitchRecord {
    pub at_s: f64,
    pub from_bps: u64,
    pub to_bps: u64,
    pub reason: ServerSwitchReason,
}

/// What the server did and heard.
#[derive(Debug, Clone, Default)]
pub struct LadderSent {
    pub policy: Option<PolicyKind>,
    /// Over TFRC a frame lost in the network is never resent: one that never arrived is lost,
    /// not late (it is no latency sample). Over TCP it was still in flight: censored.
    pub unreliable: bool,
    /// Frames accepted by the transport: their send times, by sequence number.
    pub sent_s: Vec<f64>,
    pub frames: Vec<FrameSent>,
    pub switches: Vec<SwitchRecord>,
    pub signals: SignalCounts,
    pub tcp: TcpTimeline,
    /// The transport at each client report.
    pub transport: Vec<TransportSample>,
    /// Over lowtide: the sender's cost and its duplicate lane's counters.
    pub cost: Option<crate::stream::SendCost>,
}

/// The transport when a client report arrived: what the server's rule could see. Rates in
/// bit/s, queues in bytes; `None`: the transport does not expose it (or no estimate yet).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct TransportSample {
    pub t_s: f64,
    /// The capacity estimate DBAT's rule goes up by (TFRC's equation rate; TCP's window per
    /// smoothed RTT).
    pub capacity_bps: Option<u64>,
    /// TFRC's allowed rate `X`.
    pub allowed_bps: Option<u64>,
    /// TFRC's `X_recv`; TCP's delivery rate.
    pub achieved_bps: Option<u64>,
    /// TFRC's loss event rate `p`.
    pub loss_event_rate: Option<f64>,
    /// The send buffer, DBAT's average of it and its threshold (over TFRC).
    pub queue: Option<u64>,
    pub queue_average: Option<u64>,
    pub threshold: Option<u64>,
}

/// What the server heard, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SignalCounts {
    /// Probe results the transport delivered, and the packet pair's bottleneck estimate, bit/s
    /// (`None`: no answer, or both packets in one read).
    pub probes_answered: u64,
    /// Probes asked for again after one gave no estimate (at most `PROBE_RETRIES`).
    #[serde(default)]
    pub probe_retries: u64,
    pub probe_bps: Option<u64>,
    pub congestion_onsets: u64,
    pub congestion_clears: u64,
    pub reports: u64,
    /// Report datagrams that did not parse.
    pub bad_reports: u64,
    /// Frame times the server was too late for (a loaded machine): skipped, not sent late.
    pub frames_skipped: u64,
}

/// What the client saw.
#[derive(Debug, Clone, Default)]
pub struct LadderSeen {
    pub received: stream::Received,
    /// Every arrival: run seconds and payload bytes.
    pub arrivals: Vec<(f64, u32)>,
    pub rebuffers_s: Vec<f64>,
    pub play_start_s: Option<f64>,
    pub reports_sent: u64,
    /// Over lowtide: the duplicate lane's receiving counters (zero without a lane).
    pub lane: lowtide::proto::failover::duplicate::DuplicateStats,
}

/// Port of the server's report socket on its host: this plus the variant's index.
const REPORT_PORT: u16 = 6200;

/// Starts a ladder variant's server and client; `None` when `v` runs another application.
/// `cfg` is the variant's lowtide config (used unless it runs over TFRC).
#[allow(clippy::too_many_arguments)]
pub(crate) fn start(
    s: &Scenario,
    v: &Variant,
    index: usize,
    cfg: &ChannelConfig,
    addr: SocketAddr,
    (tx_host, rx_host): (&lowtide_netem::Host, &lowtide_netem::Host),
    start: Instant,
    end: Instant,
    stop: &Stop,
) -> Result<Option<Measured>, LabError> {
    if s.application_of(v) != ApplicationKind::BitrateLadder {
        return Ok(None);
    }
    let transport = match v.tfrc {
        Some(t) => LadderTransport::Tfrc(t),
        None => LadderTransport::Lowtide(Box::new(cfg.clone())),
    };
    let report_addr = SocketAddr::from((tx_host.addr(), REPORT_PORT + index as u16));
    let receive_end = end + crate::runner::GRACE;
    let (app, rtransport) = (s.application.ladder.clone(), transport.clone());
    let rapp = app.clone();
    let (rstop, tstop) = (stop.clone(), stop.clone());
    Ok(Some(Measured::Ladder {
        rx: Task::spawn(rx_host, "ladder client", move || {
            play(
                addr,
                report_addr,
                rtransport,
                rapp,
                start,
                receive_end,
                rstop,
            )
        })?,
        tx: Task::spawn(tx_host, "ladder server", move || {
            serve(
                addr,
                report_addr,
                transport,
                app,
                start,
                end,
                receive_end,
                tstop,
            )
        })?,
    }))
}

/// The variant's messages (frames the transport took: delivered, or censored at `end_s`),
/// the delivery errors, and the record for the summary.
pub fn join(
    sent: &LadderSent,
    seen: &LadderSeen,
    end_s: f64,
) -> (Vec<Sample>, stream::DeliveryErrors, LadderRecord) {
    let as_stream = stream::StreamSent {
        sent_s: sent.sent_s.clone(),
        ..stream::StreamSent::default()
    };
    let (mut samples, errors) = stream::join_sent_and_received(&as_stream, &seen.received, end_s);
    let before = samples.len();
    if sent.unreliable {
        samples.retain(|s| !s.censored);
    }
    let pipeline_delay_s = ladder_seconds::pipeline_delay_s(&samples);
    let record = LadderRecord {
        frames_lost: (before - samples.len()) as u64,
        policy: sent.policy,
        seconds: ladder_seconds::per_second(&sent.frames, &seen.arrivals, pipeline_delay_s),
        pipeline_delay_s,
        switches: sent.switches.clone(),
        rebuffers_s: seen.rebuffers_s.clone(),
        ran_dry_at_end_s: None,
        play_start_s: seen.play_start_s,
        frames: sent.frames.len() as u64,
        frames_dropped_at_server: sent.frames.iter().filter(|f| !f.accepted).count() as u64,
        reports_sent: seen.reports_sent,
        signals: sent.signals,
        transport: sent.transport.clone(),
    };
    (samples, errors, split_stream_end(record, sent, seen))
}

/// The playout buffer cannot tell a stall from the stream's end: both leave it empty. A
/// rebuffer after the server's last frame was made and after the last frame arrived is the
/// end of the stream (the viewer saw it all), so it goes to `ran_dry_at_end_s`, not to the
/// rebuffers; a stall while frames were still coming stays a rebuffer.
fn split_stream_end(
    mut record: LadderRecord,
    sent: &LadderSent,
    seen: &LadderSeen,
) -> LadderRecord {
    let Some(last_made) = sent.frames.last().map(|f| f.t_s) else {
        return record;
    };
    let last_arrival = seen
        .arrivals
        .iter()
        .map(|(t, _)| *t)
        .fold(f64::MIN, f64::max);
    let after_the_end = |t: f64| t >= last_made && t >= last_arrival;
    if let Some(&t) = record.rebuffers_s.last().filter(|t| after_the_end(**t)) {
        record.rebuffers_s.pop();
        record.ran_dry_at_end_s = Some(t);
    }
    record
}

/// What the summary and the plots need of one ladder variant in one trial.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct LadderRecord {
    pub policy: Option<PolicyKind>,
    /// The client's seconds from the one the first frame reaches at the pipeline delay to the
    /// one the last frame reaches (`crate::ladder_seconds`).
    pub seconds: Vec<Second>,
    /// The stream's median one-way latency, s: the shift between the bit rate streamed and
    /// the throughput it is held against.
    #[serde(default)]
    pub pipeline_delay_s: f64,
    pub switches: Vec<SwitchRecord>,
    /// Rebuffers while the stream went on, run seconds.
    pub rebuffers_s: Vec<f64>,
    /// When the buffer ran empty after the stream's last frame had arrived: its end, not a
    /// rebuffer.
    #[serde(default)]
    pub ran_dry_at_end_s: Option<f64>,
    pub play_start_s: Option<f64>,
    pub frames: u64,
    pub frames_dropped_at_server: u64,
    /// Over TFRC: frames the transport took that never arrived.
    pub frames_lost: u64,
    pub reports_sent: u64,
    pub signals: SignalCounts,
    /// The transport at each client report (what the server's rule saw).
    #[serde(default)]
    pub transport: Vec<TransportSample>,
}
