//! A connection's bytes: plain TCP, or TLS (rustls, sans-IO) over it. The HTTP request, the
//! pages and every viewer's WebSocket go through a [`Transport`], and so does the light
//! viewer ([`crate::client`]).
//!
//! Under TLS the latency controller must see what the kernel sees: ciphertext. rustls is
//! driven without I/O of its own: plaintext goes in with `writer()` only as far as the
//! caller allows ([`Transport::plaintext_within`] turns a controller's allowance of kernel
//! bytes into plaintext, less the records' overhead), and every record is drained at once
//! out of rustls into this transport's own buffer, then handed to the kernel. So
//! [`Transport::written`] counts ciphertext handed to the kernel from the first handshake
//! byte on (what `tcpi_bytes_acked` counts against), and [`Transport::pending`] is the
//! ciphertext the kernel has not taken yet, which the viewer's connection reports to the
//! controller as staged and lets no more plaintext in until the kernel has taken it. This
//! is the model of lowtide's own TLS channels (`lowtide::TlsConfig`), without their
//! segment-sized records: a WebSocket frame is one unit, usable only whole, so records of
//! up to 16 KiB hold nothing up.

use std::io::{self, IoSlice, Read, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// The largest overhead rustls adds to a record: TLS 1.2 AES-GCM's 5 bytes of header, 8 of
/// explicit nonce and 16 of tag (TLS 1.3: 5 + 1 + 16).
pub const MAX_RECORD_OVERHEAD: usize = 29;
/// Largest TLS record payload (RFC 8446 §5.1), rustls's default fragment size.
const MAX_RECORD_PAYLOAD: usize = 16 << 10;

/// The first byte of every TLS connection: a handshake record (RFC 8446 §5.1).
pub const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// A server's certificate chain and private key, PEM files (what `--tls-cert` and
/// `--tls-key` name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// The private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// A TLS configuration that cannot be used; the message names the file and the problem.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TlsConfigError(String);

impl From<String> for TlsConfigError {
    fn from(s: String) -> Self {
        Self(s)
    }
}

impl TlsFiles {
    pub fn new(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        Self {
            cert: cert.into(),
            key: key.into(),
        }
    }

    /// The server's rustls configuration: TLS 1.3 and 1.2 (browsers), HTTP/1.1 by ALPN.
    pub fn load(&self) -> Result<Arc<rustls::ServerConfig>, TlsConfigError> {
        let chain = load_certs(&self.cert)?;
        let pem = read_file(&self.key)?;
        let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
            file_error(
                &self.key,
                format!("no usable PRIVATE KEY section (PKCS#8, PKCS#1 or SEC1 PEM): {e}"),
            )
        })?;
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsConfigError(format!("TLS 1.3 and 1.2 with ring: {e}")))?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| {
                TlsConfigError(format!(
                    "the certificate {} with the key {}: {e} (is the key the certificate's?)",
                    self.cert.display(),
                    self.key.display()
                ))
            })?;
        // The server speaks HTTP/1.1 only; a browser offering h2 must not pick it.
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(cfg))
    }
}

/// A client's rustls configuration trusting `roots`, for [`Transport::connect`].
pub fn client_config(
    roots: impl IntoIterator<Item = CertificateDer<'static>>,
) -> Result<Arc<rustls::ClientConfig>, TlsConfigError> {
    let mut store = rustls::RootCertStore::empty();
    for c in roots {
        store
            .add(c)
            .map_err(|e| TlsConfigError(format!("not a usable CA certificate: {e}")))?;
    }
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsConfigError(format!("TLS 1.3 and 1.2 with ring: {e}")))?
        .with_root_certificates(store)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// The certificates in a PEM file (a CA for [`client_config`], or a chain).
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    let pem = read_file(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(path, format!("bad PEM: {e}")))?;
    if certs.is_empty() {
        return Err(file_error(
            path,
            "no CERTIFICATE section (expected a PEM certificate)",
        ));
    }
    Ok(certs)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn file_error(path: &Path, problem: impl std::fmt::Display) -> TlsConfigError {
    TlsConfigError(format!("{}: {problem}", path.display()))
}

fn read_file(path: &Path) -> Result<Vec<u8>, TlsConfigError> {
    std::fs::read(path).map_err(|e| file_error(path, format!("cannot read: {e}")))
}

/// Why a TLS handshake failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    #[error("no TLS handshake within {0:?}")]
    Timeout(Duration),
    #[error("the peer closed the connection during the TLS handshake")]
    Closed,
    /// The peer broke TLS, or refused ours with an alert (a browser that does not trust
    /// the certificate). Not a `source`: the message is whole.
    #[error("TLS: {0}{hint}", hint = hint(.0))]
    Tls(rustls::Error),
    #[error("socket: {0}")]
    Io(io::Error),
}

// The messages above show the inner error, so `source()` does not return it again (a printer
// of the whole chain would say it twice): `From` by hand instead of `#[from]`.
impl From<io::Error> for HandshakeError {
    fn from(e: io::Error) -> Self {
        HandshakeError::Io(e)
    }
}

impl From<rustls::Error> for HandshakeError {
    fn from(e: rustls::Error) -> Self {
        HandshakeError::Tls(e)
    }
}

/// What to do about the errors a self-made certificate runs into.
fn hint(e: &rustls::Error) -> &'static str {
    use rustls::{CertificateError as C, Error as E};
    match e {
        E::InvalidCertificate(C::UnknownIssuer | C::BadSignature) => {
            " (trust the server's certificate, or the CA that signed it)"
        }
        E::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => {
            " (connect by a name the certificate carries)"
        }
        // webpki's own error, only as text through rustls.
        E::InvalidCertificate(C::Other(_)) if format!("{e:?}").contains("CaUsedAsEndEntity") => {
            " (the server's certificate is a CA: make a leaf, e.g. openssl req -x509 \
             -addext basicConstraints=critical,CA:FALSE, or rcgen)"
        }
        _ => "",
    }
}

impl HandshakeError {
    /// The peer sent what is not TLS (or broke it), rather than refusing our certificate,
    /// closing, or being slow.
    pub fn is_protocol_violation(&self) -> bool {
        matches!(self, HandshakeError::Tls(e) if !matches!(e, rustls::Error::AlertReceived(_)))
    }
}

/// A connection's byte stream (see the module doc).
pub struct Transport {
    tcp: TcpStream,
    tls: Option<Box<Tls>>,
    /// Bytes handed to the kernel since the connection began (ciphertext under TLS).
    written: u64,
}

struct Tls {
    conn: rustls::Connection,
    /// Ciphertext drained out of rustls, from `at` on not yet taken by the kernel.
    out: Vec<u8>,
    at: usize,
    /// Decrypted bytes rustls holds for the reader (the socket may have nothing more to
    /// wake it for them).
    plaintext: usize,
    /// The peer's `close_notify` arrived.
    peer_closed: bool,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("tls", &self.tls.is_some())
            .field("written", &self.written)
            .field("pending", &self.pending())
            .finish()
    }
}

/// The socket as `Read` for rustls, never blocking (`WouldBlock` instead).
struct TryRead<'a>(&'a TcpStream);

impl Read for TryRead<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }
}

fn would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}

impl Tls {
    /// Moves every record rustls holds into `out` (rustls keeps none of its own).
    fn drain(&mut self) -> io::Result<()> {
        if self.at == self.out.len() {
            self.out.clear();
            self.at = 0;
        }
        while self.conn.wants_write() {
            self.conn.write_tls(&mut self.out)?;
        }
        Ok(())
    }
}

impl Transport {
    /// Plain TCP.
    pub fn plain(tcp: TcpStream) -> Self {
        Self {
            tcp,
            tls: None,
            written: 0,
        }
    }

    /// The server's side of a TLS handshake on an accepted socket, within `limit`.
    pub async fn accept(
        tcp: TcpStream,
        cfg: &Arc<rustls::ServerConfig>,
        limit: Duration,
    ) -> Result<Self, HandshakeError> {
        let conn = rustls::ServerConnection::new(cfg.clone())?;
        Self::handshake(tcp, conn.into(), limit).await
    }

    /// The client's side of a TLS handshake on a connected socket, within `limit`.
    pub async fn connect(
        tcp: TcpStream,
        cfg: Arc<rustls::ClientConfig>,
        server_name: ServerName<'static>,
        limit: Duration,
    ) -> Result<Self, HandshakeError> {
        let conn = rustls::ClientConnection::new(cfg, server_name)?;
        Self::handshake(tcp, conn.into(), limit).await
    }

    async fn handshake(
        tcp: TcpStream,
        conn: rustls::Connection,
        limit: Duration,
    ) -> Result<Self, HandshakeError> {
        let mut t = Self {
            tcp,
            tls: Some(Box::new(Tls {
                conn,
                out: Vec::new(),
                at: 0,
                plaintext: 0,
                peer_closed: false,
            })),
            written: 0,
        };
        match tokio::time::timeout(limit, t.drive_handshake()).await {
            Ok(Ok(())) => Ok(t),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(HandshakeError::Timeout(limit)),
        }
    }

    async fn drive_handshake(&mut self) -> Result<(), HandshakeError> {
        loop {
            // What the last flight produced goes out first (the last one may end the
            // handshake: a client's Finished, a TLS 1.2 server's Finished, 1.3 tickets).
            self.flush().await?;
            let tls = self.tls.as_deref_mut().expect("a TLS transport");
            if !tls.conn.is_handshaking() {
                return Ok(());
            }
            self.tcp.readable().await?;
            match tls.conn.read_tls(&mut TryRead(&self.tcp)) {
                Ok(0) => return Err(HandshakeError::Closed),
                Ok(_) => {}
                Err(e) if would_block(&e) => continue,
                Err(e) => return Err(e.into()),
            }
            match tls.conn.process_new_packets() {
                // A request that came with the client's Finished is already decrypted.
                Ok(st) => {
                    tls.plaintext = st.plaintext_bytes_to_read();
                    tls.peer_closed = st.peer_has_closed();
                }
                Err(e) => {
                    // The alert that tells the peer why, best effort.
                    let _ = tls.drain();
                    let _ = self.try_flush();
                    return Err(e.into());
                }
            }
        }
    }

    /// The socket, for readiness and socket options.
    pub fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Bytes handed to the kernel since the connection began: ciphertext under TLS, the
    /// handshake included (the latency controller's `written`).
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Ciphertext the kernel has not taken yet (0 for plain TCP).
    pub fn pending(&self) -> usize {
        self.tls.as_ref().map_or(0, |t| t.out.len() - t.at)
    }

    /// Plaintext that fits in `allowance` kernel bytes: all of it for plain TCP, less a
    /// record's overhead per 16 KiB under TLS. At least 1 byte of a positive allowance, so
    /// that a writer the controller lets go never stands still (29 bytes over at most).
    pub fn plaintext_within(&self, allowance: u64) -> usize {
        let a = usize::try_from(allowance).unwrap_or(usize::MAX);
        if self.tls.is_none() || a == 0 {
            return a;
        }
        let records = a.div_ceil(MAX_RECORD_PAYLOAD + MAX_RECORD_OVERHEAD);
        a.saturating_sub(records.saturating_mul(MAX_RECORD_OVERHEAD))
            .max(1)
    }

    /// Hands held ciphertext to the kernel as far as it takes it now (records rustls made
    /// on its own, alerts and key updates, first drained out of it).
    pub fn try_flush(&mut self) -> io::Result<()> {
        let Some(tls) = self.tls.as_deref_mut() else {
            return Ok(());
        };
        tls.drain()?;
        while tls.at < tls.out.len() {
            match raw_write(&self.tcp, &[IoSlice::new(&tls.out[tls.at..])]) {
                Ok(n) => {
                    tls.at += n;
                    self.written += n as u64;
                }
                Err(e) if would_block(&e) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Writes `bufs` without waiting; returns the plaintext bytes taken. Under TLS all of
    /// `bufs` is encrypted (up to rustls's 64 KiB limit; the caller bounds it by
    /// [`Transport::plaintext_within`]) and the records go to the kernel as far as it takes
    /// them: the rest is [`Transport::pending`]. `WouldBlock` if nothing was taken.
    pub fn try_write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let Some(tls) = self.tls.as_deref_mut() else {
            let n = raw_write(&self.tcp, bufs)?;
            self.written += n as u64;
            return Ok(n);
        };
        let n = tls.conn.writer().write_vectored(bufs)?;
        self.try_flush()?;
        if n == 0 && bufs.iter().any(|b| !b.is_empty()) {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }

    /// Reads without waiting: decrypted bytes under TLS (`WouldBlock` until a record is
    /// whole); 0 at the end (`close_notify` or the socket's end).
    pub fn try_read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(tls) = self.tls.as_deref_mut() else {
            return self.tcp.try_read(buf);
        };
        loop {
            if tls.plaintext > 0 || tls.peer_closed {
                match tls.conn.reader().read(buf) {
                    Ok(n) => {
                        tls.plaintext = tls.plaintext.saturating_sub(n);
                        return Ok(n);
                    }
                    Err(e) if would_block(&e) => tls.plaintext = 0,
                    // The socket ended without close_notify: an end all the same (a browser
                    // tab closed), as for plain TCP.
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                    Err(e) => return Err(e),
                }
            }
            if tls.conn.read_tls(&mut TryRead(&self.tcp))? == 0 {
                return Ok(0);
            }
            let st = tls
                .conn
                .process_new_packets()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            tls.plaintext = st.plaintext_bytes_to_read();
            tls.peer_closed = st.peer_has_closed();
        }
    }

    /// Ready to read: the socket is, or rustls already holds decrypted bytes or the end.
    pub async fn readable(&self) -> io::Result<()> {
        if self
            .tls
            .as_ref()
            .is_some_and(|t| t.plaintext > 0 || t.peer_closed)
        {
            return Ok(());
        }
        self.tcp.readable().await
    }

    /// Reads at least one byte, or 0 at the end.
    pub async fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            self.readable().await?;
            match self.try_read(buf) {
                Err(e) if would_block(&e) => continue,
                r => return r,
            }
        }
    }

    /// Hands all held ciphertext to the kernel, waiting for room.
    pub async fn flush(&mut self) -> io::Result<()> {
        loop {
            self.try_flush()?;
            if self.pending() == 0 {
                return Ok(());
            }
            self.tcp.writable().await?;
        }
    }

    /// Writes all of `data` (pages and answers; each TLS write is flushed before the next,
    /// so rustls holds at most its limit).
    pub async fn write_all(&mut self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            match self.try_write_vectored(&[IoSlice::new(data)]) {
                Ok(n) => data = &data[n..],
                Err(e) if would_block(&e) => self.tcp.writable().await?,
                Err(e) => return Err(e),
            }
            self.flush().await?;
        }
        Ok(())
    }

    /// Ends the write side: `close_notify` under TLS, then the socket's FIN.
    pub async fn shutdown(&mut self) -> io::Result<()> {
        if let Some(tls) = self.tls.as_deref_mut() {
            tls.conn.send_close_notify();
            self.flush().await?;
        }
        self.tcp.shutdown().await
    }

    /// Writes `data` and `close_notify` if the kernel takes them now (a connection's last
    /// words, best effort).
    pub fn try_close_with(&mut self, data: &[u8]) {
        let _ = self.try_write_vectored(&[IoSlice::new(data)]);
        if let Some(tls) = self.tls.as_deref_mut() {
            tls.conn.send_close_notify();
            let _ = self.try_flush();
        }
    }
}

/// A write straight to the kernel (`writev`), not through tokio's readiness cache: the viewer's
/// connection clears that cache itself when its controller blocks (to wait for the
/// `TCP_NOTSENT_LOWAT` wake-up), and a write gated by the cache would then see `WouldBlock`
/// with room in the kernel and wait for an event that never comes. A real `EAGAIN` clears the
/// cache, so the next `writable()` waits for the kernel's next wake-up.
fn raw_write(tcp: &TcpStream, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    match lowtide::sys::writev(tcp.as_raw_fd(), bufs.iter().map(|b| &**b)) {
        Err(e) if would_block(&e) => {
            let _ = tcp.try_io(tokio::io::Interest::WRITABLE, || {
                Err::<(), _>(io::ErrorKind::WouldBlock.into())
            });
            Err(e)
        }
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// A server and a client over loopback, after their handshake.
    async fn pair() -> (Transport, Transport) {
        let c = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let key = PrivateKeyDer::Pkcs8(c.key_pair.serialize_der().into());
        let server_cfg = Arc::new(
            rustls::ServerConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(vec![c.cert.der().clone()], key)
                .unwrap(),
        );
        let client_cfg = client_config([c.cert.der().clone()]).unwrap();
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let connect = async {
            let tcp = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
            let name = ServerName::try_from("localhost").unwrap();
            Transport::connect(tcp, client_cfg, name, Duration::from_secs(5)).await
        };
        let accept = async {
            let (tcp, _) = l.accept().await.unwrap();
            Transport::accept(tcp, &server_cfg, Duration::from_secs(5)).await
        };
        let (c, s) = tokio::join!(connect, accept);
        (s.unwrap(), c.unwrap())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn written_is_the_ciphertext_the_kernel_took_handshake_included() {
        let (mut server, mut client) = pair().await;
        let handshake = server.written();
        assert!(handshake > 200, "the handshake's {handshake} bytes count");
        let data: Vec<u8> = (0..300_000u32).map(|i| i as u8).collect();
        let send = async { server.write_all(&data).await.unwrap() };
        let recv = async {
            let mut got = Vec::new();
            let mut buf = [0u8; 8192];
            while got.len() < data.len() {
                let n = client.read(&mut buf).await.unwrap();
                assert!(n > 0, "the end after {} bytes", got.len());
                got.extend_from_slice(&buf[..n]);
            }
            got
        };
        let ((), got) = tokio::join!(send, recv);
        assert!(got == data, "the client decrypted {} bytes", got.len());
        let w = server.written();
        // The records' overhead on top of the plaintext.
        assert!(w > handshake + data.len() as u64 + 18 * 22, "{w}");
        // The kernel acknowledged exactly what `written` says it was handed (no FIN yet: it
        // would count one more).
        let fd = server.tcp().as_raw_fd();
        let mut acked = 0;
        for _ in 0..200 {
            acked = lowtide::sys::tcp_info(fd).unwrap().tcpi_bytes_acked;
            if acked >= w {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(acked, w);
        // The end: close_notify, and the client reads the end.
        server.shutdown().await.unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(client.read(&mut buf).await.unwrap(), 0);
        assert!(server.written() > w, "close_notify is ciphertext too");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn ciphertext_the_kernel_refuses_stays_in_view_not_in_rustls() {
        let (mut server, _client) = pair().await;
        let chunk = vec![7u8; 10_000];
        // The client reads nothing: the kernel's buffers fill, then it refuses.
        let mut rounds = 0;
        while server.pending() == 0 {
            let p = server.plaintext_within(10_000);
            let n = server
                .try_write_vectored(&[IoSlice::new(&chunk[..p])])
                .unwrap();
            assert_eq!(n, p, "rustls takes all of a bounded write");
            rounds += 1;
            assert!(rounds < 100_000, "the kernel never refused");
        }
        let tls = server.tls.as_deref().unwrap();
        assert!(
            !tls.conn.wants_write(),
            "rustls holds no records of its own"
        );
        assert!(
            server.pending() <= 10_000,
            "held: {} bytes, one allowance at most",
            server.pending()
        );
        // Nothing taken now: WouldBlock, and the held ciphertext is still there.
        let before = (server.written(), server.pending());
        server.try_flush().unwrap();
        assert_eq!((server.written(), server.pending()), before);
    }

    #[test]
    fn the_plaintext_within_an_allowance_leaves_room_for_the_records() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (tls, client) = pair().await;
            let plain = Transport::plain(client.tcp);
            assert_eq!(plain.plaintext_within(5000), 5000);
            assert_eq!(tls.plaintext_within(0), 0);
            assert_eq!(
                tls.plaintext_within(10),
                1,
                "never stuck on a tiny allowance"
            );
            assert_eq!(tls.plaintext_within(1448), 1448 - MAX_RECORD_OVERHEAD);
            // 40 000 bytes are three records at most: three overheads.
            assert_eq!(
                tls.plaintext_within(40_000),
                40_000 - 3 * MAX_RECORD_OVERHEAD
            );
            for a in [30u64, 1000, 16_413, 16_414, 100_000] {
                let p = tls.plaintext_within(a);
                let cipher = p + p.div_ceil(MAX_RECORD_PAYLOAD) * MAX_RECORD_OVERHEAD;
                assert!(cipher as u64 <= a, "{p} plaintext is {cipher} > {a}");
            }
            assert!(tls.plaintext_within(u64::MAX) > 0);
        });
    }

    #[test]
    fn config_errors_name_the_file_and_the_problem() {
        let dir = std::env::temp_dir().join(format!("lowtide-serve-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let c = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let cert = dir.join("cert.pem");
        let key = dir.join("key.pem");
        std::fs::write(&cert, c.cert.pem()).unwrap();
        std::fs::write(&key, c.key_pair.serialize_pem()).unwrap();
        TlsFiles::new(&cert, &key)
            .load()
            .expect("a good pair loads");
        let e = TlsFiles::new(dir.join("missing.pem"), &key)
            .load()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("missing.pem") && e.contains("cannot read"),
            "{e}"
        );
        let e = TlsFiles::new(&key, &key).load().unwrap_err().to_string();
        assert!(e.contains("key.pem") && e.contains("no CERTIFICATE"), "{e}");
        let e = TlsFiles::new(&cert, &cert).load().unwrap_err().to_string();
        assert!(e.contains("cert.pem") && e.contains("PRIVATE KEY"), "{e}");
        let other = dir.join("other-key.pem");
        std::fs::write(&other, rcgen::KeyPair::generate().unwrap().serialize_pem()).unwrap();
        let e = TlsFiles::new(&cert, &other).load().unwrap_err().to_string();
        assert!(e.contains("cert.pem") && e.contains("other-key.pem"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
