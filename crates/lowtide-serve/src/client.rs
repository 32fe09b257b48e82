//! A light viewer: a WebSocket client (over TLS with [`watch_tls`]) that reads a stream from
//! `lowtide serve`, times every unit and checks that it could be decoded, without decoding it (`lowtide watch`, the
//! lab's many viewers, the tests). It reports each unit back as shown at its arrival, so the
//! server's per-viewer latency covers light viewers too (a browser reports when it drew the
//! frame instead).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use lowtide_media::encoded::{Chain, FrameKind, UnitInfo};
use rand::Rng;
use rustls::pki_types::{CertificateDer, ServerName};

use crate::transport::{self, HandshakeError, TlsConfigError, Transport};
use crate::viewer_wire::{self, FromServer};
use crate::wall_us;
use crate::websocket::{self, FrameReader, Opcode, WsMessage};

/// How [`watch`] runs.
#[derive(Debug, Clone, Copy)]
pub struct WatchOptions {
    /// Stop after this long (the stream may go on).
    pub duration: Duration,
    /// Send a shown report for every unit (at its arrival).
    pub report: bool,
    /// Read nothing for this long after the first unit (a viewer that stalls; tests).
    pub stall_after_first: Option<Duration>,
    /// The socket's receive buffer (`SO_RCVBUF`), instead of the kernel's autotuning.
    pub recv_buffer: Option<u32>,
}

impl Default for WatchOptions {
    fn default() -> Self {
        Self {
            duration: Duration::from_secs(3600),
            report: true,
            stall_after_first: None,
            recv_buffer: None,
        }
    }
}

/// TLS for [`watch_tls`]: whom to trust, and the name the server's certificate must carry.
#[derive(Debug, Clone)]
pub struct WatchTls {
    pub config: Arc<rustls::ClientConfig>,
    pub server_name: ServerName<'static>,
}

impl WatchTls {
    /// Trusting `roots` (CA certificates, or a self-signed server certificate itself) for
    /// `server_name`, a DNS name or an IP address.
    pub fn new(
        roots: impl IntoIterator<Item = CertificateDer<'static>>,
        server_name: &str,
    ) -> Result<Self, TlsConfigError> {
        let server_name = ServerName::try_from(server_name.to_owned()).map_err(|_| {
            TlsConfigError::from(format!(
                "{server_name:?} is not a DNS name or an IP address"
            ))
        })?;
        Ok(Self {
            config: transport::client_config(roots)?,
            server_name,
        })
    }

    /// Trusting the certificates in the PEM file `ca`.
    pub fn from_ca_file(ca: &Path, server_name: &str) -> Result<Self, TlsConfigError> {
        Self::new(transport::load_certs(ca)?, server_name)
    }
}

/// One unit as the viewer got it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceivedUnit {
    pub index: u64,
    pub kind: FrameKind,
    pub bytes: usize,
    pub capture_us: u64,
    pub ingest_us: u64,
    pub sent_us: u64,
    pub received_us: u64,
    /// Part of the catch-up the server sent on joining (captured before the viewer joined).
    pub catch_up: bool,
    /// Its references had all arrived (the server's promise), counting every unit that did
    /// not arrive as a reference: exact for streams whose frames are all references (x264
    /// `zerolatency`, baseline), an over-count where non-reference frames were dropped.
    pub decodable: bool,
}

/// What [`watch`] saw.
#[derive(Debug, Clone, Default)]
pub struct WatchReport {
    pub codec: u8,
    pub path: String,
    pub units: Vec<ReceivedUnit>,
    /// Units the server said it did not send, by [`crate::viewer_wire::DropReason`] (index − 1).
    pub dropped: [u64; 4],
    /// The server's end message arrived.
    pub ended: bool,
}

impl WatchReport {
    /// Units that arrived without their references (0 unless the server broke its promise).
    pub fn undecodable(&self) -> usize {
        self.units.iter().filter(|u| !u.decodable).count()
    }
}

/// Why watching failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WatchError {
    #[error("connecting to {addr}: {error}")]
    Connect {
        addr: SocketAddr,
        error: std::io::Error,
    },
    #[error("TLS with {addr}: {error}")]
    Tls {
        addr: SocketAddr,
        error: HandshakeError,
    },
    #[error("the server answered {status}: {body}")]
    Refused { status: u16, body: String },
    #[error("the server's handshake is not RFC 6455: {0}")]
    Handshake(String),
    #[error("WebSocket: {0}")]
    Frame(websocket::FrameError),
    #[error("server message: {0}")]
    Wire(viewer_wire::ServerWireError),
    #[error("socket: {0}")]
    Io(std::io::Error),
}

// The messages above show the inner error, so `source()` does not return it again (a printer
// of the whole chain would say it twice): `From` by hand instead of `#[from]`.
impl From<websocket::FrameError> for WatchError {
    fn from(e: websocket::FrameError) -> Self {
        WatchError::Frame(e)
    }
}

impl From<viewer_wire::ServerWireError> for WatchError {
    fn from(e: viewer_wire::ServerWireError) -> Self {
        WatchError::Wire(e)
    }
}

impl From<std::io::Error> for WatchError {
    fn from(e: std::io::Error) -> Self {
        WatchError::Io(e)
    }
}

/// Watches `path` on the server at `addr` (see the module doc).
pub async fn watch(
    addr: SocketAddr,
    path: &str,
    opts: WatchOptions,
) -> Result<WatchReport, WatchError> {
    watch_with(addr, path, opts, None).await
}

/// As [`watch`], over TLS (a server with `--tls-cert`).
pub async fn watch_tls(
    addr: SocketAddr,
    path: &str,
    opts: WatchOptions,
    tls: &WatchTls,
) -> Result<WatchReport, WatchError> {
    watch_with(addr, path, opts, Some(tls)).await
}

async fn watch_with(
    addr: SocketAddr,
    path: &str,
    opts: WatchOptions,
    tls: Option<&WatchTls>,
) -> Result<WatchReport, WatchError> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()
    } else {
        tokio::net::TcpSocket::new_v6()
    }?;
    if let Some(b) = opts.recv_buffer {
        socket.set_recv_buffer_size(b)?;
    }
    let tcp = socket
        .connect(addr)
        .await
        .map_err(|error| WatchError::Connect { addr, error })?;
    tcp.set_nodelay(true)?;
    let mut s = match tls {
        None => Transport::plain(tcp),
        Some(t) => Transport::connect(
            tcp,
            t.config.clone(),
            t.server_name.clone(),
            Duration::from_secs(5),
        )
        .await
        .map_err(|error| WatchError::Tls { addr, error })?,
    };
    let key =
        base64::engine::general_purpose::STANDARD.encode(rand::thread_rng().gen::<[u8; 16]>());
    let req = format!(
        "GET /live/{path} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {key}\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await?;
    let early = handshake(&mut s, &key).await?;
    let mut reader = FrameReader::of_server(64 << 20);
    reader.push(&early);
    let mut report = WatchReport::default();
    let mut gate = Gaps::default();
    let until = Instant::now() + opts.duration;
    let mut buf = vec![0u8; 64 << 10];
    let mut stalled = false;
    loop {
        while let Some(m) = reader.next_message()? {
            let b = match m {
                WsMessage::Binary(b) => b,
                WsMessage::Close(_) => return Ok(report),
                WsMessage::Ping(p) => {
                    s.write_all(&mask(Opcode::Pong, &p)).await?;
                    continue;
                }
                _ => continue,
            };
            match viewer_wire::decode_from_server(&b)? {
                FromServer::Hello { codec, path, .. } => {
                    report.codec = codec;
                    report.path = path.into();
                }
                FromServer::Unit(f, data) => {
                    let received_us = wall_us();
                    let decodable = gate.step(f.index, f.kind);
                    report.units.push(ReceivedUnit {
                        index: f.index,
                        kind: f.kind,
                        bytes: data.len(),
                        capture_us: f.capture_us,
                        ingest_us: f.ingest_us,
                        sent_us: f.sent_us,
                        received_us,
                        catch_up: f.catch_up,
                        decodable,
                    });
                    if opts.report && f.kind != FrameKind::ParameterSets {
                        let r = viewer_wire::encode_shown(f.index, received_us, received_us);
                        s.write_all(&mask(Opcode::Binary, &r)).await?;
                    }
                    if let (Some(pause), false) = (opts.stall_after_first, stalled) {
                        stalled = true;
                        tokio::time::sleep(
                            pause.min(until.saturating_duration_since(Instant::now())),
                        )
                        .await;
                    }
                }
                FromServer::Dropped { units, reason } => {
                    report.dropped[reason as usize - 1] += u64::from(units);
                }
                FromServer::End => report.ended = true,
            }
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(report);
        }
        let room = reader.room().min(buf.len());
        match tokio::time::timeout(left, s.read(&mut buf[..room])).await {
            Ok(Ok(0)) => return Ok(report),
            Ok(Ok(n)) => reader.push(&buf[..n]),
            Ok(Err(e)) => return Err(e.into()),
            Err(_) => return Ok(report),
        }
    }
}

/// The decoder's view over index gaps (see [`ReceivedUnit::decodable`]).
#[derive(Debug, Default)]
struct Gaps {
    chain: Chain,
    next: Option<u64>,
}

impl Gaps {
    fn step(&mut self, index: u64, kind: FrameKind) -> bool {
        let missing = self.next.map_or(0, |n| index.saturating_sub(n));
        if missing > 0 {
            self.chain
                .step(&UnitInfo::new(index - 1, FrameKind::Reference), false);
        }
        self.next = Some(index + 1);
        self.chain.step(&UnitInfo::new(index, kind), true)
    }
}

fn mask(op: Opcode, payload: &[u8]) -> Vec<u8> {
    websocket::client_frame(op, true, payload, rand::thread_rng().gen())
}

/// Reads the handshake's answer; returns bytes that came after it.
async fn handshake(s: &mut Transport, key: &str) -> Result<Vec<u8>, WatchError> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut chunk))
            .await
            .map_err(|_| WatchError::Handshake("no answer within 5 s".into()))??;
        if n == 0 {
            return Err(WatchError::Handshake("closed before answering".into()));
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut resp = httparse::Response::new(&mut headers);
        let used = match resp.parse(&buf) {
            Ok(httparse::Status::Complete(u)) => u,
            Ok(httparse::Status::Partial) if buf.len() < 16 << 10 => continue,
            Ok(httparse::Status::Partial) => {
                return Err(WatchError::Handshake("answer head over 16 KiB".into()))
            }
            Err(e) => return Err(WatchError::Handshake(e.to_string())),
        };
        let status = resp.code.unwrap_or(0);
        if status != 101 {
            let mut body = buf[used..].to_vec();
            let _ = tokio::time::timeout(Duration::from_secs(1), async {
                while let Ok(n @ 1..) = s.read(&mut chunk).await {
                    body.extend_from_slice(&chunk[..n]);
                }
            })
            .await;
            return Err(WatchError::Refused {
                status,
                body: String::from_utf8_lossy(&body).trim().to_owned(),
            });
        }
        let accept = resp
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("sec-websocket-accept"))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_owned());
        if accept.as_deref() != Some(websocket::accept_key(key).as_str()) {
            return Err(WatchError::Handshake(format!(
                "Sec-WebSocket-Accept {accept:?} does not match the key"
            )));
        }
        return Ok(buf[used..].to_vec());
    }
}
