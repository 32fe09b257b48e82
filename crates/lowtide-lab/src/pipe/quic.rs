//! The pipe over QUIC (quinn), the clean-slate reference over UDP, as Erbad and Krasic
//! compared Paceline with SST ("Sender-side Buffers and the Case for Multimedia Adaptation",
//! evaluation). Same applications, same emulator, same metrics, side by side with the TCP
//! variants.
//!
//! - one unidirectional stream per message, so a lost packet delays only its own message;
//!   [`SendPipe::writable`](super::SendPipe::writable) waits for a stream, then [`SendPipe::send`](super::SendPipe::send) for room in the window;
//! - the stream's priority is the message's importance (`SendStream::set_priority`);
//! - quinn knows no deadline and cannot withdraw a message it has taken whole; a message not
//!   taken whole by its deadline or the cut-off is reset (`SendStream::reset`), so no
//!   truncated message is delivered;
//! - queued messages ([`SendPipe::queue`](super::SendPipe::queue), the conference) wait above quinn, so the send window
//!   is never filled with less important messages while a more important one waits: the
//!   most important (then the oldest) is written next, one at a time, while the caller waits
//!   for its fate ([`SendPipe::next_event`](super::SendPipe::next_event)); one not written whole by its deadline is reset,
//!   and one still waiting can be cancelled: QUIC's counterpart of lowtide's cancellation;
//! - the connection's send window is clamped (`send_window_bytes`), so quinn cannot buffer
//!   seconds of data the way an unlimited TCP send buffer does: writes wait instead;
//! - the congestion controller is named per variant (`cubic`, `newreno`, `bbr`).
//!
//! TLS 1.3 with a self-signed certificate made for the run and trusted by the client. Quinn's
//! segmentation offload is off, so the emulator sees MTU-sized datagrams, as it does for TCP.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lowtide_traffic::Stop;
use quinn::{Endpoint, VarInt};
use serde::{Deserialize, Serialize};

use super::{Capabilities, Delivered, MsgId, Offer, PipeEvent};
use crate::stream::stopped;
use crate::LabError;

pub(super) const CAPABILITIES: Capabilities = Capabilities {
    waits_for_room: true,
    deadlines: true,
    cancel: true,
    write_times: false,
};

/// The sending end: the connection, and the stream [`SendPipe::writable`](super::SendPipe::writable) opened for the next
/// message.
pub struct Sender {
    endpoint: Endpoint,
    conn: quinn::Connection,
    next: Option<quinn::SendStream>,
    /// Messages numbered so far, sent or queued.
    sent: u64,
    queue: std::collections::BinaryHeap<Queued>,
}

impl Sender {
    pub(super) async fn connect(
        dst: SocketAddr,
        q: &QuicConfig,
        creds: &Credentials,
    ) -> Result<Self, LabError> {
        let (endpoint, conn) = connect(dst, q, creds).await?;
        Ok(Self {
            endpoint,
            conn,
            next: None,
            sent: 0,
            queue: std::collections::BinaryHeap::new(),
        })
    }

    /// Waits until the peer allows one more stream.
    pub(super) async fn writable(&mut self) -> Result<(), LabError> {
        if self.next.is_none() {
            let s = self.conn.open_uni().await;
            self.next = Some(s.map_err(|e| setup("opening a stream")(e.to_string()))?);
        }
        Ok(())
    }

    /// Writes `msg` on its own stream with its importance as priority, waiting for room until
    /// its deadline, `cutoff` or the stop.
    pub(super) async fn send(
        &mut self,
        msg: lowtide::Message,
        cutoff: Instant,
        stop: &Stop,
    ) -> Result<Offer, LabError> {
        self.writable().await?;
        let Some(mut s) = self.next.take() else {
            return Ok(Offer::CutOff);
        };
        let _ = s.set_priority(i32::from(msg.importance));
        let by = msg.deadline.map_or(cutoff, |d| d.min(cutoff));
        let written = tokio::select! {
            r = s.write_all(&msg.data) => Some(r),
            _ = tokio::time::sleep_until(tokio::time::Instant::from_std(by)) => None,
            _ = stopped(stop) => None,
        };
        match written {
            Some(r) => {
                r.map_err(|e| setup("sending")(e.to_string()))?;
                s.finish().map_err(|e| setup("sending")(e.to_string()))?;
                self.sent += 1;
                Ok(Offer::Taken(MsgId::Quic(self.sent - 1)))
            }
            None => {
                let _ = s.reset(VarInt::from_u32(1));
                Ok(Offer::CutOff)
            }
        }
    }

    /// Queues `msg` above quinn; [`Self::next_event`] writes it, by `cutoff` at the latest.
    pub(super) fn queue(&mut self, msg: lowtide::Message, cutoff: Instant) -> MsgId {
        let seq = self.sent;
        self.sent += 1;
        self.queue.push(Queued { seq, msg, cutoff });
        MsgId::Quic(seq)
    }

    /// Withdraws a queued message not yet taken for writing.
    pub(super) fn cancel(&mut self, id: MsgId) -> bool {
        let MsgId::Quic(seq) = id else { return false };
        let before = self.queue.len();
        self.queue.retain(|q| q.seq != seq);
        self.queue.len() < before
    }

    /// Before `until`: writes the next queued message (the most important, then the oldest)
    /// on its own stream and returns its fate; the write may run past `until`, up to the
    /// message's deadline or cut-off. With nothing queued, waits until `until`; `None` then.
    pub(super) async fn next_event(&mut self, until: Instant) -> Option<PipeEvent> {
        if Instant::now() >= until {
            return None;
        }
        let Some(q) = self.queue.pop() else {
            tokio::time::sleep_until(tokio::time::Instant::from_std(until)).await;
            return None;
        };
        let id = MsgId::Quic(q.seq);
        let deadline = q.msg.deadline.unwrap_or(q.cutoff);
        let written = Instant::now() < deadline
            && write_whole(&self.conn, &q.msg, deadline.min(q.cutoff)).await;
        Some(if written {
            PipeEvent::Written {
                id,
                last_write: None,
            }
        } else {
            PipeEvent::Dropped { id }
        })
    }

    /// Drops what is still queued (never written), as fates.
    pub(super) fn abandon_queued(&mut self) -> Vec<PipeEvent> {
        self.queue
            .drain()
            .map(|q| PipeEvent::Dropped {
                id: MsgId::Quic(q.seq),
            })
            .collect()
    }

    pub(super) async fn finish(self, until: Instant, stop: &Stop) {
        finish(&self.endpoint, &self.conn, until, stop).await;
    }
}

/// Writes one message on its own stream with its importance as priority; resets the stream
/// if it is not written by `by`, so no truncated message is delivered. Whether it was written.
async fn write_whole(conn: &quinn::Connection, msg: &lowtide::Message, by: Instant) -> bool {
    let by = tokio::time::Instant::from_std(by);
    let Ok(Ok(mut s)) = tokio::time::timeout_at(by, conn.open_uni()).await else {
        return false;
    };
    let _ = s.set_priority(i32::from(msg.importance));
    match tokio::time::timeout_at(by, s.write_all(&msg.data)).await {
        Ok(Ok(())) => s.finish().is_ok(),
        _ => {
            let _ = s.reset(VarInt::from_u32(1));
            false
        }
    }
}

/// A message queued above quinn ([`SendPipe::queue`](super::SendPipe::queue)): the most important first, then the
/// oldest.
struct Queued {
    seq: u64,
    msg: lowtide::Message,
    cutoff: Instant,
}

impl Queued {
    fn key(&self) -> (u8, std::cmp::Reverse<u64>) {
        (self.msg.importance, std::cmp::Reverse(self.seq))
    }
}

impl PartialEq for Queued {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Queued {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

/// The receiving end: every stream is read whole by a task of its own, in arrival order.
pub struct Receiver {
    endpoint: Endpoint,
    conn: quinn::Connection,
    rx: tokio::sync::mpsc::UnboundedReceiver<(Vec<u8>, Instant)>,
    reader: tokio::task::JoinHandle<()>,
}

impl Receiver {
    pub(super) async fn accept(
        addr: SocketAddr,
        q: &QuicConfig,
        creds: &Credentials,
        max_message: usize,
        deadline: Instant,
        stop: &Stop,
    ) -> Result<Self, LabError> {
        let endpoint = server(addr, q, creds).await?;
        let conn = accept(&endpoint, deadline, stop).await?;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let reader = tokio::spawn(read_streams(conn.clone(), max_message, tx));
        Ok(Self {
            endpoint,
            conn,
            rx,
            reader,
        })
    }

    pub(super) async fn recv(&mut self) -> Option<Delivered> {
        let (data, at) = self.rx.recv().await?;
        Some(Delivered {
            data: data.into(),
            at,
        })
    }

    pub(super) fn close(self) {
        self.reader.abort();
        self.conn.close(VarInt::from_u32(0), b"measurement over");
        self.endpoint
            .close(VarInt::from_u32(0), b"measurement over");
    }
}

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

pub(crate) fn setup(what: &str) -> impl FnOnce(String) -> LabError + '_ {
    move |e| LabError::io(format!("QUIC: {what}"), e)
}

pub(crate) async fn server(
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

pub(crate) async fn connect(
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

pub(crate) async fn accept(
    endpoint: &Endpoint,
    end: Instant,
    stop: &Stop,
) -> Result<quinn::Connection, LabError> {
    let end = tokio::time::Instant::from_std(end);
    loop {
        let incoming = tokio::select! {
            i = endpoint.accept() => i.ok_or_else(|| setup("accepting")("the endpoint closed".into()))?,
            _ = tokio::time::sleep_until(end) => return Err(setup("accepting")("no sender within the run".into())),
            _ = stopped(stop) => return Err(LabError::Stopped),
        };
        match incoming.await {
            Ok(conn) => return Ok(conn),
            // A peer that fails its handshake does not end the measurement.
            Err(e) => tracing::warn!("a QUIC peer failed its handshake: {e}; accepting the next"),
        }
    }
}

/// Lets what quinn holds flow until `until` (or the trial stops), then closes.
pub(crate) async fn finish(
    endpoint: &Endpoint,
    conn: &quinn::Connection,
    until: Instant,
    stop: &Stop,
) {
    let until = tokio::time::Instant::from_std(until);
    tokio::select! {
        _ = conn.closed() => {}
        _ = tokio::time::sleep_until(until) => {}
        _ = stopped(stop) => {}
    }
    conn.close(VarInt::from_u32(0), b"measurement over");
    endpoint.close(VarInt::from_u32(0), b"measurement over");
}

/// Reads every unidirectional stream of `conn` whole (at most `limit` bytes each) and sends
/// each with the time its last byte was read; ends when the connection does.
pub(crate) async fn read_streams(
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
