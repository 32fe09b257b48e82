//! TLS 1.3 on the channel (rustls): certificates from PEM files, the handshake, and a record
//! layer the driver calls where it reads bytes and where it writes segments.
//!
//! The rule: the latency controller must see every byte that is not yet in the kernel. rustls
//! holds ciphertext where `SIOCOUTQ` cannot see it, so the driver never lets rustls keep any:
//! each record is drained at once into [`TlsSession`]'s own buffer, and the plaintext it carries
//! stays *staged* in the core ([`Connection::staged_len`](lowtide_proto::Connection::staged_len))
//! until the kernel has taken the record's last ciphertext byte. The controller therefore
//! counts plaintext waiting as ciphertext in user space exactly as it counts plaintext a
//! plain `writev` left behind, and `Event::Written` times mean "in the kernel", as without TLS.
//! The kernel's own counters (`outq`, `notsent`) are ciphertext, a TLS overhead per record more
//! than the plaintext the controller allowed.
//!
//! Records are sized to one TCP segment: payload = MSS − [`RECORD_OVERHEAD`], so a record
//! lost or delayed in the network holds up only its own segment's bytes at the receiver (it
//! cannot decrypt a record before all of it has arrived). This is what h2o's latency-optimised
//! writes do (`prepare_for_latency_optimized_write` and `calc_suggested_tls_payload_size` in
//! h2o's `lib/common/socket.c`: the suggested TLS payload is the MSS minus the record overhead).
//!
//! Where we differ from h2o:
//! - h2o falls back to 16 KB records when the RTT is short or the window is large; we always
//!   write MSS-sized records (a lowtide stream is latency-first; the cost is one record header,
//!   content type and tag, 22 bytes, per segment, ~1.5 % at MSS 1448, plus one AEAD call each).
//! - Records are not aligned to segment boundaries: a write that starts mid-segment (after a
//!   small message) straddles two segments, as in h2o.
//! - TLS 1.3 only, no session resumption (no tickets are sent), no client certificates.

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;

use lowtide_proto::wire::MAGIC;
use lowtide_proto::{ConfigError, TcpState};

use crate::error::Error;

/// TLS 1.3 record overhead with every TLS 1.3 cipher suite: 5 bytes of record header, 1 byte
/// of inner content type, 16 bytes of AEAD tag (RFC 8446 §5.2).
pub const RECORD_OVERHEAD: usize = 22;

/// Smallest record payload we write even with a tiny MSS.
const MIN_RECORD_PAYLOAD: usize = 64;
/// Largest TLS record payload (RFC 8446 §5.1).
const MAX_RECORD_PAYLOAD: usize = 16 << 10;

/// TLS for a channel: a client needs `ca` (and checks `server_name`), a server `cert` and
/// `key`. All files are PEM.
///
/// A self-signed certificate made on the spot, a TLS channel over loopback:
///
/// ```
/// # lowtide::current_thread_runtime()?.block_on(async {
/// use lowtide::{ChannelConfig, Message, StreamConfig, TlsConfig};
/// let dir = std::env::temp_dir().join(format!("lowtide-tls-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])?;
/// std::fs::write(dir.join("cert.pem"), made.cert.pem())?;
/// std::fs::write(dir.join("key.pem"), made.key_pair.serialize_pem())?;
///
/// let server_cfg = ChannelConfig {
///     tls: Some(TlsConfig::server(dir.join("cert.pem"), dir.join("key.pem"))),
///     ..ChannelConfig::default()
/// };
/// let client_cfg = ChannelConfig {
///     // The certificate is its own CA here.
///     tls: Some(TlsConfig::client(dir.join("cert.pem"), Some("localhost".into()))),
///     ..ChannelConfig::default()
/// };
/// let listener = lowtide::listen("127.0.0.1:0".parse().unwrap(), server_cfg).await?;
/// let (client, server) = tokio::try_join!(
///     lowtide::connect(listener.local_addr()?, client_cfg),
///     listener.accept(),
/// )?;
/// let s = client.open_stream(StreamConfig::default())?;
/// client.send(s, Message::new("encrypted"))?;
/// assert_eq!(&server.recv().await.expect("a message").data[..], b"encrypted");
/// std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// Server: the certificate chain, leaf first.
    pub cert: Option<PathBuf>,
    /// Server: the private key (PKCS#8, PKCS#1 or SEC1).
    pub key: Option<PathBuf>,
    /// Client: the CA certificate(s) the server's certificate must chain to.
    pub ca: Option<PathBuf>,
    /// Client: the name the server's certificate must carry (DNS name or IP address; `None`:
    /// the IP address connected to).
    pub server_name: Option<String>,
    /// Longest handshake, milliseconds: a peer that does not speak TLS (or nothing at all)
    /// fails `connect`/`accept` after this.
    pub handshake_timeout_ms: u64,
}

impl Default for TlsConfig {
    fn default() -> Self {
        Self {
            cert: None,
            key: None,
            ca: None,
            server_name: None,
            handshake_timeout_ms: 5_000,
        }
    }
}

impl TlsConfig {
    /// A client trusting the CA certificate(s) in `ca`.
    ///
    /// ```
    /// let tls = lowtide::TlsConfig::client("ca.pem", Some("media.example".into()));
    /// assert_eq!(tls.ca.as_deref(), Some(std::path::Path::new("ca.pem")));
    /// assert_eq!(tls.server_name.as_deref(), Some("media.example"));
    /// assert!(tls.cert.is_none() && tls.key.is_none()); // a client presents no certificate
    /// ```
    pub fn client(ca: impl Into<PathBuf>, server_name: Option<String>) -> Self {
        Self {
            ca: Some(ca.into()),
            server_name,
            ..Self::default()
        }
    }

    /// A server presenting `cert` with `key`.
    ///
    /// ```
    /// let tls = lowtide::TlsConfig::server("cert.pem", "key.pem");
    /// assert_eq!(tls.cert.as_deref(), Some(std::path::Path::new("cert.pem")));
    /// assert_eq!(tls.key.as_deref(), Some(std::path::Path::new("key.pem")));
    /// assert_eq!(tls.handshake_timeout_ms, 5_000); // the default
    /// ```
    pub fn server(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        Self {
            cert: Some(cert.into()),
            key: Some(key.into()),
            ..Self::default()
        }
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=600_000).contains(&self.handshake_timeout_ms) {
            return Err(ConfigError::new(
                "tls.handshake_timeout_ms",
                self.handshake_timeout_ms,
                "1..=600000",
            ));
        }
        if self.cert.is_some() != self.key.is_some() {
            return Err(ConfigError::new(
                if self.cert.is_some() {
                    "tls.key"
                } else {
                    "tls.cert"
                },
                "none",
                "cert and key together (a server's certificate and its private key)",
            ));
        }
        Ok(())
    }

    fn handshake_timeout(&self) -> Duration {
        Duration::from_millis(self.handshake_timeout_ms)
    }

    /// The client side, loaded from the files (errors name the file and the problem).
    pub(crate) fn client_config(&self) -> Result<Arc<rustls::ClientConfig>, Error> {
        let Some(ca) = &self.ca else {
            return Err(ConfigError::new(
                "tls.ca",
                "none",
                "a PEM file of CA certificates (required to connect with TLS)",
            )
            .into());
        };
        let mut roots = rustls::RootCertStore::empty();
        for c in load_certs(ca)? {
            roots
                .add(c)
                .map_err(|e| file_error(ca, format!("not a usable CA certificate: {e}")))?;
        }
        let cfg = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| Error::Tls(format!("TLS 1.3 with ring: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Arc::new(cfg))
    }

    /// The server side, loaded from the files (errors name the file and the problem).
    pub(crate) fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, Error> {
        let (Some(cert), Some(key)) = (&self.cert, &self.key) else {
            return Err(ConfigError::new(
                "tls.cert",
                "none",
                "a PEM certificate chain and tls.key (required to listen with TLS)",
            )
            .into());
        };
        let chain = load_certs(cert)?;
        let pem = read_file(key)?;
        let der = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
            file_error(
                key,
                format!("no usable PRIVATE KEY section (PKCS#8, PKCS#1 or SEC1 PEM): {e}"),
            )
        })?;
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| Error::Tls(format!("TLS 1.3 with ring: {e}")))?
            .with_no_client_auth()
            .with_single_cert(chain, der)
            .map_err(|e| {
                Error::Tls(format!(
                    "{} with key {}: {e}",
                    cert.display(),
                    key.display()
                ))
            })?;
        // lowtide channels are long-lived; tickets would only add a post-handshake record.
        cfg.send_tls13_tickets = 0;
        Ok(Arc::new(cfg))
    }

    /// The name to verify for a connection to `addr`.
    pub(crate) fn server_name(&self, addr: SocketAddr) -> Result<ServerName<'static>, Error> {
        match &self.server_name {
            None => Ok(ServerName::IpAddress(addr.ip().into())),
            Some(n) => ServerName::try_from(n.clone()).map_err(|_| {
                ConfigError::new("tls.server_name", n, "a DNS name or an IP address").into()
            }),
        }
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn file_error(path: &Path, problem: impl std::fmt::Display) -> Error {
    Error::Tls(format!("{}: {problem}", path.display()))
}

fn read_file(path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| file_error(path, format!("cannot read: {e}")))
}

fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, Error> {
    let pem = read_file(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(path, format!("bad PEM: {e}")))?;
    if certs.is_empty() {
        return Err(file_error(path, "no CERTIFICATE section (expected PEM)"));
    }
    Ok(certs)
}

/// The socket as `Read`/`Write` for rustls, never blocking (`WouldBlock` instead).
struct Socket<'a>(&'a TcpStream);

impl Read for Socket<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }
}

/// A [`Socket`] that keeps a copy of the first bytes read (up to the magic's length).
struct FirstBytes<'a, 'b> {
    socket: Socket<'a>,
    first: &'b mut Vec<u8>,
}

impl Read for FirstBytes<'_, '_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.socket.read(buf)?;
        let keep = (MAGIC.len() - self.first.len()).min(n);
        self.first.extend_from_slice(&buf[..keep]);
        Ok(n)
    }
}

impl Write for Socket<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.0.try_write_vectored(bufs)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Runs the client handshake on a connected socket.
pub(crate) async fn connect(
    stream: &TcpStream,
    cfg: &TlsConfig,
    addr: SocketAddr,
) -> Result<TlsSession, Error> {
    let client = rustls::ClientConnection::new(cfg.client_config()?, cfg.server_name(addr)?)
        .map_err(|e| Error::Tls(format!("starting the handshake with {addr}: {e}")))?;
    handshake(stream, client.into(), cfg.handshake_timeout(), addr).await
}

/// Runs the server handshake on an accepted socket.
pub(crate) async fn accept(
    stream: &TcpStream,
    server: &Arc<rustls::ServerConfig>,
    timeout: Duration,
    peer: SocketAddr,
) -> Result<TlsSession, Error> {
    let conn = rustls::ServerConnection::new(server.clone())
        .map_err(|e| Error::Tls(format!("starting the handshake with {peer}: {e}")))?;
    handshake(stream, conn.into(), timeout, peer).await
}

async fn handshake(
    stream: &TcpStream,
    mut conn: rustls::Connection,
    timeout: Duration,
    peer: SocketAddr,
) -> Result<TlsSession, Error> {
    match tokio::time::timeout(timeout, drive_handshake(stream, &mut conn, peer)).await {
        Ok(Ok(sent)) => {
            let mut s = TlsSession::new(conn);
            s.cipher_written = sent;
            s.cipher_total = sent;
            Ok(s)
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(Error::Tls(format!(
            "handshake with {peer} did not finish within {timeout:?} (does the peer speak TLS?)"
        ))),
    }
}

async fn drive_handshake(
    stream: &TcpStream,
    conn: &mut rustls::Connection,
    peer: SocketAddr,
) -> Result<u64, Error> {
    let mut sent = 0u64;
    // The peer's first bytes: the lowtide magic there means it speaks plaintext lowtide.
    let mut first = Vec::with_capacity(MAGIC.len());
    loop {
        while conn.wants_write() {
            match conn.write_tls(&mut Socket(stream)) {
                Ok(n) => sent += n as u64,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => stream
                    .writable()
                    .await
                    .map_err(|e| Error::io("epoll(writable)", e))?,
                Err(e) => return Err(Error::io(format!("TLS handshake with {peer}: write"), e)),
            }
        }
        if !conn.is_handshaking() {
            return Ok(sent);
        }
        stream
            .readable()
            .await
            .map_err(|e| Error::io("epoll(readable)", e))?;
        let mut socket = FirstBytes {
            socket: Socket(stream),
            first: &mut first,
        };
        match conn.read_tls(&mut socket) {
            Ok(0) => {
                return Err(Error::Tls(format!(
                    "{peer} closed the connection during the TLS handshake \
                     (does it expect TLS, and trust our certificate?)"
                )))
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(Error::io(format!("TLS handshake with {peer}: read"), e)),
        }
        if let Err(e) = conn.process_new_packets() {
            // Tell the peer why (an alert), best effort.
            let _ = conn.write_tls(&mut Socket(stream));
            if first.starts_with(&MAGIC) {
                return Err(Error::PeerNotTls { peer });
            }
            let hint = match e {
                rustls::Error::InvalidCertificate(_) | rustls::Error::AlertReceived(_) => "",
                _ => " (does the peer speak TLS 1.3?)",
            };
            return Err(Error::Tls(format!("handshake with {peer}: {e}{hint}")));
        }
    }
}

/// The record layer of an established TLS session, between the core and the socket.
pub(crate) struct TlsSession {
    conn: rustls::Connection,
    /// Ciphertext not yet taken by the kernel.
    out: BytesMut,
    /// Records in `out`: (end offset in the ciphertext stream, plaintext bytes carried).
    records: VecDeque<(u64, u64)>,
    /// Ciphertext bytes ever put into `out`, and bytes handed to the kernel (from the
    /// handshake on: what `tcpi_bytes_acked` counts against).
    cipher_total: u64,
    cipher_written: u64,
    /// Staged plaintext bytes already encrypted into `out` (the front of the core's staged
    /// bytes).
    encrypted: u64,
    /// Decrypted bytes for the core.
    plain: BytesMut,
}

impl std::fmt::Debug for TlsSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsSession")
            .field("pending_ciphertext", &self.out.len())
            .field("encrypted_plaintext", &self.encrypted)
            .finish()
    }
}

impl TlsSession {
    fn new(conn: rustls::Connection) -> Self {
        Self {
            conn,
            out: BytesMut::new(),
            records: VecDeque::new(),
            cipher_total: 0,
            cipher_written: 0,
            encrypted: 0,
            plain: BytesMut::new(),
        }
    }

    /// Record payload for a path with this MSS (h2o's `calc_suggested_tls_payload_size`),
    /// within TLS's 16 KB record limit (loopback's MSS is ~64 KB).
    pub(crate) fn record_payload(mss: u32) -> usize {
        (mss as usize)
            .saturating_sub(RECORD_OVERHEAD)
            .clamp(MIN_RECORD_PAYLOAD, MAX_RECORD_PAYLOAD)
    }

    /// The kernel's state in plaintext units, for the core: the MSS is one record's payload
    /// and the kernel's byte counts are scaled by payload/MSS. A controller's allowance of
    /// whole segments then becomes whole MSS-sized records: without this, every write would end
    /// in a sliver segment of record overheads that costs a congestion-window slot of its own.
    pub(crate) fn plaintext_view(tcp: &TcpState) -> TcpState {
        let mss = tcp.mss_or_default();
        let payload = Self::record_payload(mss) as u64;
        let scale = |b: u32| (u64::from(b) * payload / u64::from(mss)) as u32;
        TcpState {
            mss: payload as u32,
            outq: scale(tcp.outq),
            notsent: scale(tcp.notsent),
            ..*tcp
        }
    }

    /// Encrypts the staged plaintext not yet encrypted (`staged`: the core's staged bytes, in
    /// order, from the first one not yet written) into MSS-sized records.
    pub(crate) fn encrypt<'a>(
        &mut self,
        staged: impl Iterator<Item = &'a [u8]>,
        mss: u32,
    ) -> Result<(), Error> {
        let payload = Self::record_payload(mss);
        let mut skip = self.encrypted as usize;
        let mut record: Vec<IoSlice<'_>> = Vec::new();
        let mut len = 0;
        for mut seg in staged {
            if skip >= seg.len() {
                skip -= seg.len();
                continue;
            }
            seg = &seg[skip..];
            skip = 0;
            while !seg.is_empty() {
                let take = seg.len().min(payload - len);
                record.push(IoSlice::new(&seg[..take]));
                len += take;
                seg = &seg[take..];
                if len == payload {
                    self.seal(&record, len)?;
                    record.clear();
                    len = 0;
                }
            }
        }
        if len > 0 {
            self.seal(&record, len)?;
        }
        Ok(())
    }

    /// One record of `len` plaintext bytes, drained at once into `out`.
    fn seal(&mut self, record: &[IoSlice<'_>], len: usize) -> Result<(), Error> {
        let n = self
            .conn
            .writer()
            .write_vectored(record)
            .map_err(|e| Error::Tls(format!("encrypting: {e}")))?;
        debug_assert_eq!(n, len, "rustls's send buffer is drained after every record");
        self.drain_ciphertext()?;
        self.records.push_back((self.cipher_total, n as u64));
        self.encrypted += n as u64;
        Ok(())
    }

    fn drain_ciphertext(&mut self) -> Result<(), Error> {
        while self.conn.wants_write() {
            let n = self
                .conn
                .write_tls(&mut (&mut self.out).writer())
                .map_err(|e| Error::Tls(format!("encrypting: {e}")))?;
            self.cipher_total += n as u64;
        }
        Ok(())
    }

    /// The ciphertext for the kernel, as `writev` segments.
    pub(crate) fn segments(&self) -> impl Iterator<Item = &[u8]> {
        std::iter::once(&self.out[..]).filter(|s| !s.is_empty())
    }

    /// Bytes handed to the kernel on this connection, handshake included (the core's
    /// `written` counts plaintext; the kernel's acknowledged bytes are ciphertext).
    pub(crate) fn kernel_written(&self) -> u64 {
        self.cipher_written
    }

    /// Ciphertext bytes waiting for the kernel.
    pub(crate) fn pending(&self) -> usize {
        self.out.len()
    }

    /// The kernel took `n` ciphertext bytes; returns the plaintext bytes whose records are now
    /// wholly in the kernel (what the core may count as written).
    pub(crate) fn handle_written(&mut self, n: usize) -> usize {
        let n = n.min(self.out.len());
        self.out.advance(n);
        self.cipher_written += n as u64;
        let mut plain = 0;
        while let Some(&(end, p)) = self.records.front() {
            if end > self.cipher_written {
                break;
            }
            self.records.pop_front();
            plain += p;
        }
        self.encrypted -= plain;
        plain as usize
    }

    /// Decrypts ciphertext read from the socket; returns the plaintext for the core (empty if
    /// no record was completed). With no ciphertext: what rustls already decrypted (records
    /// that came with the handshake).
    pub(crate) fn decrypt(&mut self, mut cipher: &[u8]) -> Result<Bytes, Error> {
        loop {
            if !cipher.is_empty() {
                // rustls takes at most its own buffer's worth per call; the plaintext is
                // drained below before the next call, so its 16 KB limit is never reached.
                self.conn
                    .read_tls(&mut cipher)
                    .map_err(|e| Error::Tls(format!("reading records: {e}")))?;
            }
            let state = self
                .conn
                .process_new_packets()
                .map_err(|e| Error::Tls(format!("peer sent a bad record: {e}")))?;
            let mut left = state.plaintext_bytes_to_read();
            while left > 0 {
                let start = self.plain.len();
                self.plain.resize(start + left, 0);
                let n = match self.conn.reader().read(&mut self.plain[start..]) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
                    Err(e) => return Err(Error::Tls(format!("reading plaintext: {e}"))),
                };
                self.plain.truncate(start + n);
                if n == 0 {
                    break;
                }
                left -= n;
            }
            if cipher.is_empty() {
                return Ok(self.plain.split().freeze());
            }
        }
    }

    /// Queues `close_notify` and writes it if the kernel takes it now (best effort: the
    /// lowtide CLOSE frame before it already ended the channel).
    pub(crate) fn close_notify(&mut self, fd: RawFd) {
        self.conn.send_close_notify();
        if self.drain_ciphertext().is_ok() {
            if let Ok(n) = crate::sys::writev(fd, self.segments()) {
                self.handle_written(n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (TlsSession, TlsSession) {
        let c = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let cert = c.cert.der().clone();
        let key = PrivateKeyDer::Pkcs8(c.key_pair.serialize_der().into());
        let mut server_cfg = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.clone()], key)
            .unwrap();
        server_cfg.send_tls13_tickets = 0;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert).unwrap();
        let client_cfg = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut client: rustls::Connection = rustls::ClientConnection::new(
            Arc::new(client_cfg),
            ServerName::try_from("localhost").unwrap(),
        )
        .unwrap()
        .into();
        let mut server: rustls::Connection = rustls::ServerConnection::new(Arc::new(server_cfg))
            .unwrap()
            .into();
        // In-memory handshake.
        while client.is_handshaking() || server.is_handshaking() {
            let mut buf = Vec::new();
            while client.wants_write() {
                client.write_tls(&mut buf).unwrap();
            }
            server.read_tls(&mut &buf[..]).unwrap();
            server.process_new_packets().unwrap();
            buf.clear();
            while server.wants_write() {
                server.write_tls(&mut buf).unwrap();
            }
            client.read_tls(&mut &buf[..]).unwrap();
            client.process_new_packets().unwrap();
        }
        (TlsSession::new(client), TlsSession::new(server))
    }

    #[test]
    fn records_are_one_segment_and_plaintext_counts_written_only_with_its_whole_record() {
        let (mut c, mut s) = pair();
        let mss = 1448;
        // Staged as the core stages: small headers and large payload slices.
        let staged: Vec<Vec<u8>> = vec![vec![1; 10], vec![2; 3000], vec![3; 7], vec![4; 500]];
        let total: usize = staged.iter().map(Vec::len).sum();
        c.encrypt(staged.iter().map(|v| &v[..]), mss).unwrap();
        let payload = TlsSession::record_payload(mss);
        assert_eq!(payload, 1448 - RECORD_OVERHEAD);
        let records = total.div_ceil(payload);
        assert_eq!(c.records.len(), records);
        assert_eq!(c.pending(), total + records * RECORD_OVERHEAD);
        for w in c.records.iter().take(records - 1) {
            assert_eq!(w.1 as usize, payload);
        }
        // Calling again encrypts nothing twice.
        c.encrypt(staged.iter().map(|v| &v[..]), mss).unwrap();
        assert_eq!(c.records.len(), records);
        // The kernel takes the first record but one byte: no plaintext is written yet.
        let cipher: Vec<u8> = c.segments().flatten().copied().collect();
        assert_eq!(c.handle_written(mss as usize - 1), 0);
        assert_eq!(c.handle_written(1), payload);
        let rest = c.pending();
        assert_eq!(c.handle_written(rest), total - payload);
        assert_eq!(c.pending(), 0);
        // The peer decrypts the same bytes, also when fed byte by byte across records.
        let mut got = Vec::new();
        for chunk in cipher.chunks(700) {
            got.extend_from_slice(&s.decrypt(chunk).unwrap());
        }
        let want: Vec<u8> = staged.concat();
        assert_eq!(got, want);
    }

    #[test]
    fn a_corrupt_record_is_an_error_not_a_panic() {
        let (mut c, mut s) = pair();
        c.encrypt([&[9u8; 100][..]].into_iter(), 1448).unwrap();
        let mut cipher: Vec<u8> = c.segments().flatten().copied().collect();
        cipher[30] ^= 1;
        let e = s.decrypt(&cipher).unwrap_err();
        assert!(e.to_string().contains("bad record"), "{e}");
    }

    #[test]
    fn config_errors_name_the_file_and_the_problem() {
        let dir = std::env::temp_dir().join(format!("lowtide-tls-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing.pem");
        let e = TlsConfig::client(&missing, None)
            .client_config()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("missing.pem") && e.contains("cannot read"),
            "{e}"
        );
        let junk = dir.join("junk.pem");
        std::fs::write(&junk, "not a certificate\n").unwrap();
        let e = TlsConfig::client(&junk, None)
            .client_config()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("junk.pem") && e.contains("no CERTIFICATE"),
            "{e}"
        );
        let c = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let cert = dir.join("cert.pem");
        std::fs::write(&cert, c.cert.pem()).unwrap();
        let e = TlsConfig::server(&cert, &junk)
            .server_config()
            .unwrap_err()
            .to_string();
        assert!(e.contains("junk.pem") && e.contains("PRIVATE KEY"), "{e}");
        // A key that is not the certificate's.
        let other = rcgen::KeyPair::generate().unwrap();
        let wrong = dir.join("wrong-key.pem");
        std::fs::write(&wrong, other.serialize_pem()).unwrap();
        let e = TlsConfig::server(&cert, &wrong)
            .server_config()
            .unwrap_err()
            .to_string();
        assert!(e.contains("cert.pem") && e.contains("wrong-key.pem"), "{e}");
        let e = TlsConfig {
            cert: Some(cert.clone()),
            ..TlsConfig::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.field, "tls.key");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
