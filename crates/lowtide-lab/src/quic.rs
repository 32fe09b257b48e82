//! A clean-slate reference over UDP: the measured applications on QUIC (quinn), as Erbad and
//! Krasic compared Paceline with SST ("Sender-side Buffers and the Case for Multimedia
//! Adaptation", evaluation). Same application, same emulator, same metrics, side by side with
//! the TCP variants.
//!
//! - one unidirectional stream per message, so a lost packet delays only its own message;
//! - the stream's priority is the message's importance (`SendStream::set_priority`);
//! - a conference ADU not written by its deadline is reset (`SendStream::reset`): QUIC's
//!   counterpart of lowtide's cancellation; one superseded by a newer frame
//!   (`lowtide_media::supersede`) is dropped before it enters quinn, as lowtide cancels it;
//! - the connection's send window is clamped (`send_window_bytes`), so quinn cannot buffer
//!   seconds of data the way an unlimited TCP send buffer does: writes wait instead;
//! - the congestion controller is named per variant (`cubic`, `newreno`, `bbr`).
//!
//! TLS 1.3 with a self-signed certificate made for the run and trusted by the client. Quinn's
//! segmentation offload is off, so the emulator sees MTU-sized datagrams, as it does for TCP.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lowtide_media::conference::{importance, Conference, Viewer, ADUS_PER_FRAME};
use lowtide_media::session::ConferenceSent;
use lowtide_media::supersede::Supersede;
use lowtide_media::wire::MediaHeader;
use lowtide_traffic::Stop;
use quinn::{Endpoint, VarInt};
use serde::{Deserialize, Serialize};

use crate::conference::ConferenceRun;
use crate::stream::{self, Received, Sample, SendCost, StreamSent, MESSAGE_BYTES};
use crate::tcpinfo::TcpTimeline;
use crate::{clock, LabError};

/// How a variant's QUIC connection is set up (`quic = { congestion = "cubic" }`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct QuicConfig {
    /// `cubic`, `newreno` or `bbr` (quinn's controllers).
    #[serde(default = "cubic")]
    pub congestion: String,
    /// Bytes the connection may hold from the application, sent or not, until acknowledged.
    #[serde(default = "sixty_four_kb")]
    pub send_window_bytes: u64,
}

fn cubic() -> String {
    "cubic".into()
}
fn sixty_four_kb() -> u64 {
    64 * 1024
}

/// The controllers quinn has.
pub const CONGESTION: [&str; 3] = ["cubic", "newreno", "bbr"];

impl QuicConfig {
    /// Refuses an unknown controller or a window that cannot hold one message.
    pub fn check(&self) -> Result<(), String> {
        if !CONGESTION.contains(&self.congestion.as_str()) {
            return Err(format!(
                "quic.congestion = {:?}: one of {}",
                self.congestion,
                CONGESTION.join(", ")
            ));
        }
        if !(4096..=1 << 30).contains(&self.send_window_bytes) {
            return Err(format!(
                "quic.send_window_bytes = {} is outside 4096 to {}",
                self.send_window_bytes,
                1u64 << 30
            ));
        }
        Ok(())
    }

    fn transport(&self) -> Arc<quinn::TransportConfig> {
        use quinn::congestion::{BbrConfig, CubicConfig, NewRenoConfig};
        let mut t = quinn::TransportConfig::default();
        t.send_window(self.send_window_bytes)
            .enable_segmentation_offload(false)
            .max_concurrent_uni_streams(VarInt::from_u32(MAX_STREAMS))
            .max_idle_timeout(Some(VarInt::from_u32(30_000).into()))
            // A first Initial sent before the receiver is bound is lost; quinn's default
            // first RTT guess (333 ms) would wait about a second to resend it, longer than
            // the lab's lead-in, so the first frames would expire before the handshake.
            .initial_rtt(Duration::from_millis(100));
        match self.congestion.as_str() {
            "newreno" => t.congestion_controller_factory(Arc::new(NewRenoConfig::default())),
            "bbr" => t.congestion_controller_factory(Arc::new(BbrConfig::default())),
            _ => t.congestion_controller_factory(Arc::new(CubicConfig::default())),
        };
        Arc::new(t)
    }
}

/// Streams open at once per connection: a conference at 30 frames/s with a 10 s threshold
/// has 2,400 ADUs in flight.
const MAX_STREAMS: u32 = 4096;
/// The server name in the certificate.
const SERVER_NAME: &str = "lowtide-lab";

/// The certificate of one variant's connection, made for the run.
#[derive(Clone)]
pub struct Credentials {
    cert: rustls::pki_types::CertificateDer<'static>,
    key: Arc<Vec<u8>>,
}

impl Credentials {
    pub fn generate() -> Result<Self, LabError> {
        let c = rcgen::generate_simple_self_signed(vec![SERVER_NAME.to_string()])
            .map_err(|e| LabError::io("making the QUIC variant's certificate", e))?;
        Ok(Self {
            cert: c.cert.der().clone(),
            key: Arc::new(c.key_pair.serialize_der()),
        })
    }
}

fn setup(what: &str) -> impl FnOnce(String) -> LabError + '_ {
    move |e| LabError::io(format!("QUIC: {what}"), e)
}

async fn server(
    addr: SocketAddr,
    q: &QuicConfig,
    creds: &Credentials,
) -> Result<Endpoint, LabError> {
    let key = rustls::pki_types::PrivatePkcs8KeyDer::from(creds.key.as_ref().clone());
    let mut cfg = quinn::ServerConfig::with_single_cert(vec![creds.cert.clone()], key.into())
        .map_err(|e| setup("the server's TLS configuration")(e.to_string()))?;
    cfg.transport_config(q.transport());
    Endpoint::server(cfg, addr).map_err(|e| setup("binding the server")(e.to_string()))
}

async fn connect(
    dst: SocketAddr,
    q: &QuicConfig,
    creds: &Credentials,
) -> Result<(Endpoint, quinn::Connection), LabError> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(creds.cert.clone())
        .map_err(|e| setup("trusting the run's certificate")(e.to_string()))?;
    let mut cfg = quinn::ClientConfig::with_root_certificates(Arc::new(roots))
        .map_err(|e| setup("the client's TLS configuration")(e.to_string()))?;
    cfg.transport_config(q.transport());
    let mut endpoint = Endpoint::client(SocketAddr::from(([0, 0, 0, 0], 0)))
        .map_err(|e| setup("binding the client")(e.to_string()))?;
    endpoint.set_default_client_config(cfg);
    // The server may not be up yet: retry for 5 s, as the TCP variants do.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let attempt = match endpoint.connect(dst, SERVER_NAME) {
            Ok(c) => c.await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match attempt {
            Ok(conn) => return Ok((endpoint, conn)),
            Err(e) if Instant::now() >= deadline => return Err(setup("connecting")(e)),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

async fn accept(
    endpoint: &Endpoint,
    end: Instant,
    stop: &Stop,
) -> Result<quinn::Connection, LabError> {
    let end = tokio::time::Instant::from_std(end);
    loop {
        let incoming = tokio::select! {
            i = endpoint.accept() => i.ok_or_else(|| setup("accepting")("the endpoint closed".into()))?,
            _ = tokio::time::sleep_until(end) => return Err(setup("accepting")("no sender within the run".into())),
            _ = stream::stopped(stop) => return Err(LabError::Stopped),
        };
        match incoming.await {
            Ok(conn) => return Ok(conn),
            // A peer that fails its handshake does not end the measurement.
            Err(e) => tracing::warn!("a QUIC peer failed its handshake: {e}; accepting the next"),
        }
    }
}

/// The latency stream over QUIC: a 1448-byte message on its own stream whenever quinn takes
/// one (writes wait while the send window is full), from `start` to `end`.
#[allow(clippy::too_many_arguments)]
pub fn send_stream(
    dst: SocketAddr,
    q: QuicConfig,
    creds: Credentials,
    start: Instant,
    end: Instant,
    receive_end: Instant,
    stop: Stop,
) -> Result<StreamSent, LabError> {
    stream::runtime()?.block_on(async move {
        let (endpoint, conn) = connect(dst, &q, &creds).await?;
        tokio::time::sleep_until(tokio::time::Instant::from_std(start)).await;
        let cpu = stream::thread_cpu_s();
        let mut payload = vec![0x5a; MESSAGE_BYTES];
        let mut sent_s = vec![];
        let end_t = tokio::time::Instant::from_std(end);
        loop {
            let opened = tokio::select! {
                r = conn.open_uni() => Some(r),
                _ = tokio::time::sleep_until(end_t) => None,
                _ = stream::stopped(&stop) => None,
            };
            let Some(opened) = opened else { break };
            let mut s = opened.map_err(|e| setup("opening a stream")(e.to_string()))?;
            let now = Instant::now();
            stream::stamp(&mut payload, now, sent_s.len() as u64);
            sent_s.push(now.saturating_duration_since(start).as_secs_f64());
            let written = tokio::select! {
                r = s.write_all(&payload) => Some(r),
                _ = tokio::time::sleep_until(end_t) => None,
                _ = stream::stopped(&stop) => None,
            };
            match written {
                Some(r) => {
                    r.map_err(|e| setup("sending")(e.to_string()))?;
                    s.finish().map_err(|e| setup("sending")(e.to_string()))?;
                }
                // Not written by the end: withdrawn, so no truncated message is delivered
                // (it counts as undelivered, sent after the measurement window).
                None => {
                    let _ = s.reset(VarInt::from_u32(1));
                    break;
                }
            }
        }
        let cost = quic_cost(cpu, sent_s.len() as u64);
        finish(&endpoint, &conn, receive_end, &stop).await;
        Ok(StreamSent {
            cost,
            sent_s,
            ..StreamSent::default()
        })
    })
}

/// What a QUIC sender spent: its thread's CPU; the driver counters are lowtide's and stay 0.
fn quic_cost(cpu_before: Option<(f64, f64)>, messages: u64) -> SendCost {
    let cpu = stream::thread_cpu_s()
        .zip(cpu_before)
        .map(|((u1, s1), (u0, s0))| (u1 - u0, s1 - s0));
    SendCost {
        messages,
        cpu_user_s: cpu.map(|c| c.0),
        cpu_system_s: cpu.map(|c| c.1),
        ..SendCost::default()
    }
}

/// Lets what quinn holds flow until `until` (or the trial stops), then closes.
async fn finish(endpoint: &Endpoint, conn: &quinn::Connection, until: Instant, stop: &Stop) {
    let until = tokio::time::Instant::from_std(until);
    tokio::select! {
        _ = conn.closed() => {}
        _ = tokio::time::sleep_until(until) => {}
        _ = stream::stopped(stop) => {}
    }
    conn.close(VarInt::from_u32(0), b"measurement over");
    endpoint.close(VarInt::from_u32(0), b"measurement over");
}

/// Accepts the latency stream on `addr` and reads every message until `end`.
pub fn receive_stream(
    addr: SocketAddr,
    q: QuicConfig,
    creds: Credentials,
    start: Instant,
    end: Instant,
    stop: Stop,
) -> Result<Received, LabError> {
    stream::runtime()?.block_on(async move {
        let endpoint = server(addr, &q, &creds).await?;
        let conn = accept(&endpoint, end, &stop).await?;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let end_t = tokio::time::Instant::from_std(end);
        let reader = read_streams(conn.clone(), MESSAGE_BYTES, tx);
        tokio::select! {
            _ = reader => {}
            _ = tokio::time::sleep_until(end_t) => {}
            _ = stream::stopped(&stop) => {}
        }
        let mut out = Received::default();
        while let Ok((data, at)) = rx.try_recv() {
            let word = |b: &[u8]| u64::from_be_bytes(b.try_into().unwrap_or_default());
            // A stream that is not a whole message is the peer's bug: not a message.
            if data.len() != MESSAGE_BYTES {
                continue;
            }
            let sent = clock::from_wire(word(&data[..8]));
            out.bytes += data.len() as u64;
            out.messages.push((
                word(&data[8..16]),
                Sample::delivered(
                    sent.saturating_duration_since(start).as_secs_f64(),
                    at.saturating_duration_since(sent).as_secs_f64() * 1e3,
                ),
            ));
        }
        conn.close(VarInt::from_u32(0), b"measurement over");
        endpoint.close(VarInt::from_u32(0), b"measurement over");
        Ok(out)
    })
}

/// Reads every unidirectional stream of `conn` whole (at most `limit` bytes each) and sends
/// each with the time its last byte was read; ends when the connection does.
async fn read_streams(
    conn: quinn::Connection,
    limit: usize,
    tx: tokio::sync::mpsc::UnboundedSender<(Vec<u8>, Instant)>,
) {
    while let Ok(mut s) = conn.accept_uni().await {
        let tx = tx.clone();
        tokio::spawn(async move {
            // A reset stream (an expired ADU) or an oversized one is simply not delivered.
            if let Ok(data) = s.read_to_end(limit).await {
                let _ = tx.send((data, Instant::now()));
            }
        });
    }
}

/// Paceline's conference over QUIC: each ADU on its own stream with its importance as the
/// stream's priority, reset if not written by its deadline.
#[allow(clippy::too_many_arguments)]
pub fn send_conference(
    dst: SocketAddr,
    q: QuicConfig,
    creds: Credentials,
    conf: Conference,
    start: Instant,
    end: Instant,
    receive_end: Instant,
    stop: Stop,
) -> Result<ConferenceRun, LabError> {
    stream::runtime()?.block_on(async move {
        let (endpoint, conn) = connect(dst, &q, &creds).await?;
        let cpu = stream::thread_cpu_s();
        let frames = conf.frames_in(end.saturating_duration_since(start).as_secs_f64());
        // The application decides what enters quinn's buffer: the most important ADU not yet
        // expired (then the oldest), one at a time, so the send window is never filled with
        // enhancement layers while a base layer waits.
        let mut sent = ConferenceSent {
            frames,
            ..ConferenceSent::default()
        };
        let mut queue = std::collections::BinaryHeap::new();
        // Only the rule's frames per layer are used: the queue here is the heap.
        let mut rule = conf.drop_superseded.then(Supersede::<()>::default);
        let mut next = 0u32;
        let capture = |f: u32| start + Duration::from_secs_f64(conf.capture_s(f));
        let produce = async {
            loop {
                let now = Instant::now();
                // Deadlines past the run's end are not waited for (the measurement is over).
                if now >= end {
                    return;
                }
                while next < frames && capture(next) <= now.min(end) {
                    for layer in 0..ADUS_PER_FRAME {
                        queue.push((importance(layer), std::cmp::Reverse(next), layer));
                        sent.sent[usize::from(layer)] += 1;
                    }
                    next += 1;
                }
                let Some((_, std::cmp::Reverse(frame), layer)) = queue.pop() else {
                    if next >= frames || capture(next) > end {
                        return;
                    }
                    tokio::time::sleep_until(tokio::time::Instant::from_std(capture(next))).await;
                    continue;
                };
                let deadline = capture(frame) + conf.threshold;
                let written = Instant::now() < deadline
                    && write_adu(&conn, frame, layer, conf.adu_bytes(), deadline.min(end)).await;
                count(&mut sent, layer, written, conf.adu_bytes());
                if let Some(rule) = rule.as_mut().filter(|_| written) {
                    rule.written(frame, layer);
                    queue.retain(|&(_, std::cmp::Reverse(f), l)| {
                        let old = rule.is_superseded(f, l);
                        if old {
                            sent.superseded[usize::from(l)] += 1;
                        }
                        !old
                    });
                }
            }
        };
        tokio::select! {
            _ = produce => {}
            _ = stream::stopped(&stop) => return Err(LabError::Stopped),
        }
        // What is still queued at the end was never written.
        for (_, _, layer) in queue.drain() {
            count(&mut sent, layer, false, conf.adu_bytes());
        }
        let cost = quic_cost(cpu, sent.sent.iter().sum());
        finish(&endpoint, &conn, receive_end, &stop).await;
        Ok(ConferenceRun {
            cost,
            sent,
            tcp: TcpTimeline::default(),
        })
    })
}

/// Writes one ADU on its own stream with its importance as priority; resets the stream if it
/// is not written by `deadline`, so no truncated ADU is delivered. Whether it was written.
async fn write_adu(
    conn: &quinn::Connection,
    frame: u32,
    layer: u8,
    bytes: usize,
    deadline: Instant,
) -> bool {
    let deadline = tokio::time::Instant::from_std(deadline);
    let Ok(Ok(mut s)) = tokio::time::timeout_at(deadline, conn.open_uni()).await else {
        return false;
    };
    let _ = s.set_priority(i32::from(importance(layer)));
    let data = MediaHeader::data_message(frame, frame, layer, bytes);
    match tokio::time::timeout_at(deadline, s.write_all(&data)).await {
        Ok(Ok(())) => s.finish().is_ok(),
        _ => {
            let _ = s.reset(VarInt::from_u32(1));
            false
        }
    }
}

fn count(sent: &mut ConferenceSent, layer: u8, written: bool, bytes: usize) {
    let l = usize::from(layer);
    if written {
        sent.written[l] += 1;
        sent.bytes_written += bytes as u64;
    } else {
        sent.cancelled[l] += 1;
    }
}

/// Receives a conference over QUIC until `end`.
pub fn receive_conference(
    addr: SocketAddr,
    q: QuicConfig,
    creds: Credentials,
    conf: Conference,
    start: Instant,
    end: Instant,
    stop: Stop,
) -> Result<Viewer, LabError> {
    stream::runtime()?.block_on(async move {
        let endpoint = server(addr, &q, &creds).await?;
        let conn = accept(&endpoint, end, &stop).await?;
        let frames = conf.frames_in(end.saturating_duration_since(start).as_secs_f64());
        let mut viewer = Viewer::new(conf, frames);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let reader = tokio::spawn(read_streams(conn.clone(), conf.adu_bytes(), tx));
        let end_t = tokio::time::Instant::from_std(end);
        loop {
            let next = tokio::select! {
                m = rx.recv() => m,
                _ = tokio::time::sleep_until(end_t) => None,
                _ = stream::stopped(&stop) => None,
            };
            let Some((data, at)) = next else { break };
            let at_s = at.saturating_duration_since(start).as_secs_f64();
            match MediaHeader::decode(&data) {
                Ok(MediaHeader::Data { frame, layer, .. }) if data.len() == conf.adu_bytes() => {
                    viewer.on_adu(frame, layer, at_s)
                }
                _ => viewer.unknown += 1,
            }
        }
        reader.abort();
        conn.close(VarInt::from_u32(0), b"measurement over");
        endpoint.close(VarInt::from_u32(0), b"measurement over");
        Ok(viewer)
    })
}
