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

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lowtide::proto::controller::{DbatConfig, ProbeResult};
use lowtide::{Channel, ChannelConfig, StreamConfig};
use lowtide_media::ladder::dbat_rule::{DbatRule, DbatRuleConfig};
use lowtide_media::ladder::playout_buffer::{PlayState, PlayoutBuffer};
use lowtide_media::ladder::report_rule::{ReportRule, ReportRuleConfig};
use lowtide_media::ladder::server_policy::{
    hasan_ladder, ClientReport, ServerPolicy, ServerSignal, ServerSwitchReason,
};
use lowtide_tfrc::driver::Session;
use lowtide_tfrc::TfrcConfig;
use lowtide_traffic::Stop;
use serde::{Deserialize, Serialize};
use tokio::net::UdpSocket;

pub use crate::ladder_seconds::Second;
use crate::results::files::round_us;
use crate::runner::{Measured, Task};
use crate::scenario::{ApplicationKind, Scenario, Variant};
use crate::stream::{self, stopped, Sample};
use crate::tcpinfo::TcpTimeline;
use crate::{ladder_seconds, tfrc_flow, LabError};

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
}

/// Transport samples kept per variant, at most (one per report: 90 in the paper's run).
const MAX_TRANSPORT_SAMPLES: usize = 100_000;

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
}

/// A probe without an estimate (both packets in one read) is repeated this often over lowtide.
const PROBE_RETRIES: u64 = 3;

/// The server makes no frame before the probe answers, for at most this long after the
/// session starts.
const PROBE_WAIT: Duration = Duration::from_secs(3);

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

/// Frame header: send time (8), sequence number (8), rung (1).
const HEADER: usize = 17;
const REPORT_MAGIC: &[u8; 4] = b"LTR1";
const REPORT_LEN: usize = 4 + 5 * 8;

fn encode_report(r: &ClientReport) -> [u8; REPORT_LEN] {
    let mut b = [0u8; REPORT_LEN];
    b[..4].copy_from_slice(REPORT_MAGIC);
    let words = [
        r.frames_expected,
        r.frames_received,
        r.rebuffers,
        r.bytes,
        r.duration_us,
    ];
    for (k, w) in words.iter().enumerate() {
        b[4 + 8 * k..12 + 8 * k].copy_from_slice(&w.to_be_bytes());
    }
    b
}

fn decode_report(b: &[u8]) -> Option<ClientReport> {
    if b.len() != REPORT_LEN || &b[..4] != REPORT_MAGIC {
        return None;
    }
    let w = |k: usize| u64::from_be_bytes(b[4 + 8 * k..12 + 8 * k].try_into().unwrap_or_default());
    let r = ClientReport {
        frames_expected: w(0),
        frames_received: w(1),
        rebuffers: w(2),
        bytes: w(3),
        duration_us: w(4),
    };
    (r.frames_received <= r.frames_expected).then_some(r)
}

/// The server's side of the media connection.
enum ServerLink {
    Lowtide {
        ch: Channel,
        stream: u64,
        dbat: Option<DbatConfig>,
        /// `tcpi_total_retrans` at the last client report.
        retrans_seen: std::cell::Cell<u32>,
    },
    Tfrc(Session),
}

impl ServerLink {
    /// Hands a frame over now, or says it could not take it (dropped at the server).
    async fn offer(&self, data: Vec<u8>) -> Result<bool, LabError> {
        match self {
            ServerLink::Lowtide { ch, stream, .. } => {
                match tokio::time::timeout(Duration::ZERO, ch.writable()).await {
                    Err(_) => Ok(false),
                    Ok(r) => {
                        r.map_err(stream::transport("waiting to write"))?;
                        ch.send(*stream, lowtide::Message::new(data))
                            .map_err(stream::transport("sending a frame"))?;
                        Ok(true)
                    }
                }
            }
            ServerLink::Tfrc(s) => match s.send(lowtide_tfrc::Message::new(data)) {
                Ok(_) => Ok(true),
                Err(lowtide_tfrc::SendError::BufferFull { .. }) => Ok(false),
                Err(e) => Err(LabError::io("sending a frame over TFRC", e)),
            },
        }
    }

    /// Asks for another packet pair; `false` where the transport cannot (TFRC probes once).
    fn request_probe(&self) -> bool {
        match self {
            ServerLink::Lowtide { ch, .. } => ch.request_probe(),
            ServerLink::Tfrc(_) => false,
        }
    }

    fn set_stream_rate(&self, bps: u64) {
        match self {
            ServerLink::Lowtide { ch, .. } => ch.set_stream_rate(bps / 8),
            ServerLink::Tfrc(s) => s.set_stream_rate(bps / 8),
        }
    }

    /// DBAT's configuration and the bytes of one packet of slow start's initial window.
    /// `None` without DBAT. Linux counts its window in packets, and the server writes one
    /// frame per packet (`TCP_NODELAY`): a window of `smallest_frame`-byte frames carries
    /// that many bytes per packet, not an MSS (every rung sends the same frames per second,
    /// so the lowest rung's frames bound what the window carries). TFRC's initial window is
    /// in bytes, and it packs frames into segments.
    fn dbat_ramp(&self, smallest_frame: u32) -> Option<(DbatConfig, u32)> {
        match self {
            ServerLink::Lowtide { ch, dbat, .. } => {
                dbat.map(|d| (d, ch.last_tcp_state().mss_or_default().min(smallest_frame)))
            }
            ServerLink::Tfrc(s) => s.with_endpoint(|e| match e.config().buffer {
                lowtide_tfrc::BufferConfig::Dbat(d) => Some((d, e.config().segment_size)),
                lowtide_tfrc::BufferConfig::Fixed { .. } => None,
            }),
        }
    }

    /// The transport's signals since the last call, for the policy.
    fn signals(&self, counts: &mut SignalCounts, smallest_frame: u32) -> Vec<ServerSignal> {
        let mut out = vec![];
        let ramp = self.dbat_ramp(smallest_frame);
        let mut probed = |p: &ProbeResult, out: &mut Vec<ServerSignal>| {
            let bps = p.bandwidth.map(|b| b.saturating_mul(8));
            counts.probes_answered += 1;
            counts.probe_bps = bps;
            let ramp_start_bps = ramp
                .filter(|_| !p.rtt.is_zero())
                .map(|(d, mss)| (d.ramp_start_rate(mss, p.rtt) * 8.0) as u64);
            out.push(ServerSignal::Probed {
                bandwidth_bps: bps,
                ramp_start_bps,
            });
        };
        match self {
            ServerLink::Lowtide { ch, .. } => {
                for e in ch.drain_events() {
                    match e {
                        lowtide::Event::Probed(p) => probed(&p, &mut out),
                        lowtide::Event::Congestion {
                            onset,
                            rate_estimate,
                            ..
                        } => out.push(ServerSignal::congestion(onset, rate_estimate)),
                        _ => {}
                    }
                }
            }
            ServerLink::Tfrc(s) => {
                for e in s.drain_events() {
                    match e {
                        lowtide_tfrc::Event::Probed(p) => probed(&p, &mut out),
                        lowtide_tfrc::Event::Congestion(c) => {
                            out.push(ServerSignal::congestion(c.onset, c.rate_estimate))
                        }
                        _ => {}
                    }
                }
            }
        }
        for s in &out {
            if let ServerSignal::Congestion { onset, .. } = s {
                if *onset {
                    counts.congestion_onsets += 1;
                } else {
                    counts.congestion_clears += 1;
                }
            }
        }
        out
    }

    /// The transport at a client report while streaming `rate_bps`: its capacity estimate,
    /// the one DBAT's rule goes up by (bit/s: TFRC's equation rate for its loss event rate and
    /// RTT, none before its first loss event; over TCP [`tcp_capacity_bps`]), and DBAT's queue.
    fn transport_sample(&self, t_s: f64, rate_bps: u64) -> TransportSample {
        match self {
            ServerLink::Lowtide {
                ch, retrans_seen, ..
            } => {
                let tcp = ch.last_tcp_state();
                let level = ch.controller_queue_level();
                // A failed read counts as no retransmission: the window estimate, as before.
                let retrans = lowtide::sys::tcp_info_ext(ch.raw_fd())
                    .map(|x| x.info.tcpi_total_retrans)
                    .unwrap_or(retrans_seen.get());
                let retransmitted = retrans > retrans_seen.replace(retrans);
                TransportSample {
                    t_s,
                    capacity_bps: tcp_capacity_bps(
                        tcp.cwnd,
                        tcp.mss_or_default(),
                        tcp.rtt,
                        retransmitted,
                        rate_bps,
                    ),
                    achieved_bps: Some(tcp.delivery_rate * 8),
                    queue: Some(u64::from(tcp.outq) + ch.queued_bytes()),
                    queue_average: level.map(|(avg, _)| avg),
                    threshold: level.map(|(_, thr)| thr),
                    ..TransportSample::default()
                }
            }
            ServerLink::Tfrc(s) => s.with_endpoint(|e| {
                let rc = e.rate_control();
                let bps = |bytes_per_sec: f64| (bytes_per_sec * 8.0) as u64;
                let dbat = e.buffer().dbat();
                TransportSample {
                    t_s,
                    capacity_bps: rc
                        .equation_rate()
                        .is_finite()
                        .then(|| bps(rc.equation_rate())),
                    allowed_bps: Some(bps(rc.rate())),
                    achieved_bps: Some(bps(rc.x_recv())),
                    loss_event_rate: Some(rc.loss_event_rate()),
                    queue: Some(e.buffer().len()),
                    queue_average: dbat.and_then(|d| d.queue_average()),
                    threshold: dbat.map(|d| d.last_threshold()),
                }
            }),
        }
    }
}

/// The server: connects at `start + app.start_s`, streams the policy's rung until `end`,
/// then lets what is queued flow until `receive_end`; blocking, for a sender host thread.
#[allow(clippy::too_many_arguments)]
pub fn serve(
    dst: SocketAddr,
    report_addr: SocketAddr,
    transport: LadderTransport,
    app: LadderApp,
    start: Instant,
    end: Instant,
    receive_end: Instant,
    stop: Stop,
) -> Result<LadderSent, LabError> {
    stream::runtime()?.block_on(async move {
        let reports = UdpSocket::bind(report_addr)
            .await
            .map_err(|e| LabError::io(format!("binding the report socket {report_addr}"), e))?;
        let session_start = start + Duration::from_secs_f64(app.start_s);
        tokio::select! {
            _ = tokio::time::sleep_until(session_start.into()) => {}
            _ = stopped(&stop) => return Err(LabError::Stopped),
        }
        let kind = transport.policy();
        let (link, sampler) = match &transport {
            LadderTransport::Lowtide(cfg) => {
                let mut cfg = cfg.clone();
                cfg.transport.probe_at_start = true;
                let dbat = match cfg.transport.controller {
                    lowtide::ControllerConfig::Dbat(d) => Some(d),
                    _ => None,
                };
                let ch = stream::connect(dst, *cfg).await?;
                let stream = ch
                    .open_stream(StreamConfig::default())
                    .map_err(stream::transport("opening a stream"))?;
                let sampler = stream::Sampler::start(&ch, start);
                (
                    ServerLink::Lowtide {
                        ch,
                        stream,
                        dbat,
                        retrans_seen: std::cell::Cell::new(0),
                    },
                    Some(sampler),
                )
            }
            LadderTransport::Tfrc(cfg) => {
                (ServerLink::Tfrc(tfrc_flow::connect(dst, *cfg).await?), None)
            }
        };
        let now = Instant::now();
        let ladder = hasan_ladder();
        let mut policy: Box<dyn ServerPolicy> = match kind {
            PolicyKind::Report => Box::new(
                ReportRule::new(ladder.clone(), 0, ReportRuleConfig::default(), now)
                    .map_err(|e| LabError::io("the report rule", e))?,
            ),
            PolicyKind::Dbat => Box::new(
                DbatRule::new(ladder.clone(), 0, DbatRuleConfig::default(), now)
                    .map_err(|e| LabError::io("the DBAT rule", e))?,
            ),
        };
        let t_s = |t: Instant| round_us(t.saturating_duration_since(start).as_secs_f64());
        let mut out = LadderSent {
            policy: Some(kind),
            unreliable: matches!(transport, LadderTransport::Tfrc(_)),
            ..LadderSent::default()
        };
        let frame = Duration::from_millis(app.frame_ms);
        let mut next = Instant::now();
        let mut probed = false;
        let smallest_frame = frame_bytes(ladder.rate_bps(0), frame) as u32;
        let mut rate = ladder.rate_bps(policy.rung());
        link.set_stream_rate(rate);
        let mut buf = [0u8; 256];
        let end_t = tokio::time::Instant::from_std(end);
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(next.into()) => {}
                r = reports.recv(&mut buf) => {
                    let n = r.map_err(|e| LabError::io("reading a client report", e))?;
                    match decode_report(&buf[..n]) {
                        Some(rep) => {
                            out.signals.reports += 1;
                            let ts = link.transport_sample(t_s(Instant::now()), rate);
                            let mut sigs = vec![];
                            if let (Some(average), Some(threshold)) = (ts.queue_average, ts.threshold) {
                                sigs.push(ServerSignal::Queue { average, threshold });
                            }
                            if let Some(bps) = ts.capacity_bps {
                                sigs.push(ServerSignal::Capacity { bps });
                            }
                            sigs.push(ServerSignal::Report(rep));
                            apply(&mut *policy, &sigs, start, &mut out);
                            if out.transport.len() < MAX_TRANSPORT_SAMPLES {
                                out.transport.push(ts);
                            }
                        }
                        None => out.signals.bad_reports += 1,
                    }
                    continue;
                }
                _ = tokio::time::sleep_until(end_t) => break,
                _ = stopped(&stop) => break,
            }
            let sigs = link.signals(&mut out.signals, smallest_frame);
            for s in &sigs {
                if let ServerSignal::Probed { bandwidth_bps, .. } = s {
                    let retry = bandwidth_bps.is_none()
                        && out.signals.probe_retries < PROBE_RETRIES
                        && link.request_probe();
                    if retry {
                        out.signals.probe_retries += 1;
                    } else {
                        probed = true;
                    }
                }
            }
            apply(&mut *policy, &sigs, start, &mut out);
            // The paper's server probes, picks the rung, then streams: no frame before the
            // probe has answered (or given up), for at most PROBE_WAIT.
            if !probed && Instant::now() < session_start + PROBE_WAIT {
                next = Instant::now() + frame;
                continue;
            }
            let r = ladder.rate_bps(policy.rung());
            if r != rate {
                rate = r;
                link.set_stream_rate(rate);
            }
            let now = Instant::now();
            let bytes = frame_bytes(rate, frame);
            let mut data = vec![0u8; bytes];
            stream::stamp(&mut data, now, out.sent_s.len() as u64);
            data[16] = policy.rung() as u8;
            let accepted = link.offer(data).await?;
            if accepted {
                out.sent_s.push(t_s(now));
            }
            out.frames.push(FrameSent {
                t_s: t_s(now),
                rate_bps: rate,
                bytes: bytes as u32,
                accepted,
            });
            next += frame;
            // Late by more than a frame (the machine was busy): skip, never a burst.
            while next + frame < Instant::now() {
                next += frame;
                out.signals.frames_skipped += 1;
            }
        }
        if let Some(s) = sampler {
            out.tcp = s.finish().await;
        }
        match &link {
            ServerLink::Lowtide { ch, .. } => {
                stream::finish_gracefully(ch, receive_end, &stop).await
            }
            ServerLink::Tfrc(s) => tfrc_flow::finish(s, receive_end, &stop).await,
        }
        Ok(out)
    })
}

/// TCP's capacity estimate for the DBAT rule's up-switch gate, bit/s: the congestion window
/// per smoothed RTT (`None` before an RTT sample), except over a report interval in which TCP
/// retransmitted: then the stream's rate `rate_bps`, so no up-switch follows within the rule's
/// wait. The window of a stream the application limits does not see the bulk flow's share
/// (it stays open, 25 segments at 120 kbit/s in the lab); a segment of ours lost at the
/// shared queue says the path had no room above the rung. In the lab (branch dbat-loss, full
/// run 1) the window estimate took 120 → 240 kbit/s at 88.7 s with the bulk flow still on,
/// 6.4 s after the last repair; six retransmissions followed within 4 s, the onset took it
/// back at 93.0 s, and three seconds went unmatched. Over TFRC the equation rate carries the
/// loss event rate itself.
fn tcp_capacity_bps(
    cwnd: u32,
    mss: u32,
    srtt: Duration,
    retransmitted: bool,
    rate_bps: u64,
) -> Option<u64> {
    if srtt.is_zero() {
        None
    } else if retransmitted {
        Some(rate_bps)
    } else {
        Some((f64::from(cwnd) * f64::from(mss) * 8.0 / srtt.as_secs_f64()) as u64)
    }
}

/// Bytes of one frame of a `rate_bps` rung, at least the header.
fn frame_bytes(rate_bps: u64, frame: Duration) -> usize {
    ((rate_bps as u128 * frame.as_micros()) / 8_000_000).max(HEADER as u128) as usize
}

/// Feeds signals to the policy and records the switches it made.
fn apply(
    policy: &mut dyn ServerPolicy,
    sigs: &[ServerSignal],
    start: Instant,
    out: &mut LadderSent,
) {
    for s in sigs {
        let now = Instant::now();
        if let Some(sw) = policy.on_signal(now, s) {
            let ladder = policy.ladder();
            out.switches.push(SwitchRecord {
                at_s: round_us(now.saturating_duration_since(start).as_secs_f64()),
                from_bps: ladder.rate_bps(sw.from),
                to_bps: ladder.rate_bps(sw.to),
                reason: sw.reason,
            });
        }
    }
}

/// The client's side of the media connection.
enum ClientLink {
    Lowtide(Channel),
    Tfrc(Session),
}

impl ClientLink {
    async fn recv(&self) -> Option<(bytes::Bytes, Instant)> {
        match self {
            ClientLink::Lowtide(ch) => ch.recv().await.map(|m| (m.data, m.received_at)),
            ClientLink::Tfrc(s) => s.recv().await.map(|m| (m.data, m.arrived)),
        }
    }
}

/// The client: accepts the media on `addr`, plays it into a playout buffer and reports to
/// `report_to` every `app.report_ms` until `end`; blocking, for a receiver host thread.
pub fn play(
    addr: SocketAddr,
    report_to: SocketAddr,
    transport: LadderTransport,
    app: LadderApp,
    start: Instant,
    end: Instant,
    stop: Stop,
) -> Result<LadderSeen, LabError> {
    stream::runtime()?.block_on(async move {
        // Over lowtide the listener stays open for the run: a failover variant's backup
        // connections and duplicate lane are accepted on it.
        let (link, first, _listener) = match transport {
            LadderTransport::Lowtide(cfg) => {
                let listener = stream::listen(addr, *cfg).await?;
                let (ch, m) = stream::accept_first(&listener, end, &stop).await?;
                (
                    ClientLink::Lowtide(ch),
                    Some((m.data, m.received_at)),
                    Some(listener),
                )
            }
            LadderTransport::Tfrc(cfg) => (
                ClientLink::Tfrc(tfrc_flow::accept(addr, cfg, end, &stop).await?),
                None,
                None,
            ),
        };
        let reports = UdpSocket::bind(SocketAddr::from((addr.ip(), 0)))
            .await
            .map_err(|e| LabError::io("binding the client's report socket", e))?;
        let t_s = |t: Instant| round_us(t.saturating_duration_since(start).as_secs_f64());
        let frame = Duration::from_millis(app.frame_ms);
        let now = Instant::now();
        let mut buffer = PlayoutBuffer::new(
            Duration::from_millis(app.startup_ms),
            Duration::from_millis(app.resume_ms),
            now,
        );
        let mut out = LadderSeen::default();
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        let report_every = Duration::from_millis(app.report_ms);
        let mut next_report = now + report_every;
        let end_t = tokio::time::Instant::from_std(end);
        let mut pending = first;
        loop {
            let msg = match pending.take() {
                Some(m) => Some(m),
                None => tokio::select! {
                    m = link.recv() => match m { Some(m) => Some(m), None => break },
                    _ = tick.tick() => None,
                    _ = tokio::time::sleep_until(end_t) => break,
                    _ = stopped(&stop) => break,
                },
            };
            let rebuffers = buffer.rebuffers;
            let now = Instant::now();
            if let Some((data, at)) = msg {
                if let Some((seq, sample)) = stream::stamped_sample(&data, at, start) {
                    out.received.bytes += data.len() as u64;
                    out.received.messages.push((seq, sample));
                    out.arrivals.push((t_s(at), data.len() as u32));
                    let was = buffer.state();
                    buffer.on_frame(at, seq, frame, data.len() as u64);
                    if was == PlayState::Starting && buffer.state() == PlayState::Playing {
                        out.play_start_s = Some(t_s(at));
                    }
                }
            } else {
                buffer.advance(now);
            }
            if buffer.rebuffers > rebuffers {
                out.rebuffers_s.push(t_s(now));
            }
            if now >= next_report {
                next_report = now + report_every;
                let r = buffer.report(now);
                // A report the network loses is the server's loss, as over a real path.
                if reports.send_to(&encode_report(&r), report_to).await.is_ok() {
                    out.reports_sent += 1;
                }
            }
        }
        Ok(out)
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repair_in_the_interval_keeps_the_dbat_rule_from_going_up_for_its_wait() {
        let srtt = Duration::from_millis(780);
        // the lab's DBAT TCP at 120 kbit/s: a window of 25 segments, 371 kbit/s by the window
        assert_eq!(
            tcp_capacity_bps(25, 1448, srtt, false, 120_000),
            Some(371_282)
        );
        assert_eq!(
            tcp_capacity_bps(25, 1448, srtt, true, 120_000),
            Some(120_000)
        );
        assert_eq!(
            tcp_capacity_bps(25, 1448, Duration::ZERO, false, 120_000),
            None
        );
        // Reports every second at 120 kbit/s (rung 1), the window's estimate 371 kbit/s, one
        // repair at 10 s: the rule goes up to 240 only a wait after the repair, not before.
        let t0 = Instant::now();
        let cfg = DbatRuleConfig::default();
        let mut rule = DbatRule::new(hasan_ladder(), 1, cfg, t0).unwrap();
        let mut up_at = None;
        for s in 1..=60u64 {
            let bps = tcp_capacity_bps(25, 1448, srtt, s == 10, 120_000).unwrap();
            let at = t0 + Duration::from_secs(s);
            if rule
                .on_signal(at, &ServerSignal::Capacity { bps })
                .is_some()
            {
                up_at.get_or_insert(s);
            }
        }
        let without = {
            let mut rule = DbatRule::new(hasan_ladder(), 1, cfg, t0).unwrap();
            (1..=60u64).find(|&s| {
                let at = t0 + Duration::from_secs(s);
                let bps = tcp_capacity_bps(25, 1448, srtt, false, 120_000).unwrap();
                rule.on_signal(at, &ServerSignal::Capacity { bps })
                    .is_some()
            })
        };
        let (with, without) = (up_at.expect("up after the wait"), without.expect("up"));
        assert!(
            with > 10 + 19 && with > without,
            "with {with}, without {without}"
        );
    }

    #[test]
    fn reports_round_trip_and_garbage_is_refused() {
        let r = ClientReport {
            frames_expected: 25,
            frames_received: 20,
            rebuffers: 1,
            bytes: 40_000,
            duration_us: 1_000_000,
        };
        assert_eq!(decode_report(&encode_report(&r)), Some(r));
        assert_eq!(decode_report(b"LTR1"), None);
        let mut bad = encode_report(&r);
        bad[0] = b'X';
        assert_eq!(decode_report(&bad), None);
        // more received than expected cannot be true
        let mut lie = r;
        lie.frames_received = 30;
        assert_eq!(decode_report(&encode_report(&lie)), None);
    }

    #[test]
    fn running_dry_after_the_last_frame_is_the_end_not_a_rebuffer() {
        let f = |t_s| FrameSent {
            t_s,
            rate_bps: 320_000,
            bytes: 1600,
            accepted: true,
        };
        let sent = LadderSent {
            frames: vec![f(30.0), f(60.0), f(120.0)],
            ..LadderSent::default()
        };
        let seen = LadderSeen {
            arrivals: vec![(30.3, 1600), (60.4, 1600), (120.2, 1600)],
            ..LadderSeen::default()
        };
        let record = |rebuffers_s: Vec<f64>| LadderRecord {
            rebuffers_s,
            ..LadderRecord::default()
        };
        // a stall mid-stream stays; emptying after the last frame arrived is the end
        let r = split_stream_end(record(vec![45.0, 120.9]), &sent, &seen);
        assert_eq!(
            (r.rebuffers_s, r.ran_dry_at_end_s),
            (vec![45.0], Some(120.9))
        );
        // emptying after the last frame was made, while it was still on its way, is a stall
        let r = split_stream_end(record(vec![120.1]), &sent, &seen);
        assert_eq!((r.rebuffers_s, r.ran_dry_at_end_s), (vec![120.1], None));
        // frames that never arrived: emptying before the last one was made is a stall
        let lost = LadderSeen {
            arrivals: vec![(30.3, 1600)],
            ..LadderSeen::default()
        };
        let r = split_stream_end(record(vec![40.0]), &sent, &lost);
        assert_eq!((r.rebuffers_s, r.ran_dry_at_end_s), (vec![40.0], None));
    }
}
