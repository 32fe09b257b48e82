//! The server: the media connection over lowtide or TFRC, the policy it feeds, the frames it
//! makes.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lowtide::proto::controller::{DbatConfig, ProbeResult};
use lowtide::{Channel, StreamConfig};
use lowtide_media::ladder::dbat_rule::{DbatRule, DbatRuleConfig};
use lowtide_media::ladder::report_rule::{ReportRule, ReportRuleConfig};
use lowtide_media::ladder::server_policy::{hasan_ladder, ServerPolicy, ServerSignal};
use lowtide_tfrc::driver::Session;
use lowtide_traffic::Stop;
use tokio::net::UdpSocket;

use super::wire::{decode_report, HEADER};
use super::{
    FrameSent, LadderApp, LadderSent, LadderTransport, PolicyKind, SignalCounts, SwitchRecord,
    TransportSample,
};
use crate::pipe::{lowtide as channel, tfrc};
use crate::results::files::round_us;
use crate::stream::{self, stopped};
use crate::LabError;

/// Transport samples kept per variant, at most (one per report: 90 in the paper's run).
const MAX_TRANSPORT_SAMPLES: usize = 100_000;

/// A probe without an estimate (both packets in one read) is repeated this often over lowtide.
const PROBE_RETRIES: u64 = 3;

/// The server makes no frame before the probe answers, for at most this long after the
/// session starts.
const PROBE_WAIT: Duration = Duration::from_secs(3);

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
                        r.map_err(channel::transport("waiting to write"))?;
                        ch.send(*stream, lowtide::Message::new(data))
                            .map_err(channel::transport("sending a frame"))?;
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
        let meter = channel::CostMeter::start();
        let kind = transport.policy();
        let (link, sampler) = match &transport {
            LadderTransport::Lowtide(cfg) => {
                let mut cfg = cfg.clone();
                cfg.transport.probe_at_start = true;
                let dbat = match cfg.transport.controller {
                    lowtide::ControllerConfig::Dbat(d) => Some(d),
                    _ => None,
                };
                let ch = channel::connect(dst, *cfg).await?;
                let stream = ch
                    .open_stream(StreamConfig::default())
                    .map_err(channel::transport("opening a stream"))?;
                let sampler = channel::Sampler::start(&ch, start);
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
                (ServerLink::Tfrc(tfrc::connect(dst, *cfg).await?), None)
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
        if let ServerLink::Lowtide { ch, .. } = &link {
            out.cost = Some(meter.finish(ch, out.sent_s.len() as u64));
        }
        match &link {
            ServerLink::Lowtide { ch, .. } => {
                channel::finish_gracefully(ch, receive_end, &stop).await
            }
            ServerLink::Tfrc(s) => tfrc::finish(s, receive_end, &stop).await,
        }
        Ok(out)
    })
}

/// TCP's capacity estimate for the DBAT rule's up-switch gate, bit/s: the congestion window
/// per smoothed RTT (`None` before an RTT sample), except over a report interval in which TCP
/// retransmitted: then the stream's rate `rate_bps`, so no up-switch follows within the rule's
/// wait. The window of a stream the application limits does not see the bulk flow's share
/// (it stays open, 25 segments at 120 kbit/s in the lab); a segment of ours lost at the
/// shared queue says the path had no room above the rung. In a full lab run the window
/// estimate took 120 → 240 kbit/s at 88.7 s with the bulk flow still on,
/// 6.4 s after the last repair; six retransmissions followed within 4 s, the onset took it
/// back at 93.0 s, and three seconds went unmatched. Over TFRC the equation rate carries the
/// loss event rate itself.
pub(super) fn tcp_capacity_bps(
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
