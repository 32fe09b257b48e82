//! The driver's error type.

use std::io;
use std::sync::Arc;

use lowtide_proto::{ConfigError, ProtocolError, SendError, StreamError};

use crate::sys::SysError;

/// Anything a channel operation can fail with.
///
/// Errors of the core convert into it (`?` works on them), and each names what failed:
///
/// ```
/// # lowtide::current_thread_runtime()?.block_on(async {
/// use lowtide::{ChannelConfig, Error, Message, StreamConfig};
/// use lowtide::proto::SendError;
/// // Nobody listens on this port (bound, then closed): the error names the call.
/// let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
/// let e = lowtide::connect(port, ChannelConfig::default()).await.unwrap_err();
/// assert!(matches!(e, Error::Io { .. }));
/// assert!(e.to_string().starts_with(&format!("connect({port})")), "{e}");
///
/// let listener = lowtide::listen("127.0.0.1:0".parse().unwrap(), ChannelConfig::default()).await?;
/// let (client, _server) = tokio::try_join!(
///     lowtide::connect(listener.local_addr()?, ChannelConfig::default()),
///     listener.accept(),
/// )?;
/// let e = client.send(99, Message::new("x")).unwrap_err();
/// assert!(matches!(e, Error::Send(SendError::UnknownStream(99))));
/// client.close(0, "done").await;
/// assert!(matches!(client.open_stream(StreamConfig::default()), Err(Error::Closed)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Invalid configuration (names the field and its range).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A system call failed; the message names the call and shows the OS error.
    #[error("{what}: {error}")]
    Io {
        /// What was attempted.
        what: String,
        /// The OS error (shown in the message, so not returned again by `source()`).
        error: Arc<io::Error>,
    },
    /// The peer violated the protocol; the channel was closed with this error (shown in the
    /// message, so not returned again by `source()`).
    #[error("protocol error: {0}")]
    Protocol(ProtocolError),
    /// `send` refused the message.
    #[error(transparent)]
    Send(#[from] SendError),
    /// Stream operation failed.
    #[error(transparent)]
    Stream(#[from] StreamError),
    /// The channel is closed.
    #[error("channel closed")]
    Closed,
    /// Failover: the peer refused a backup connection (its CLOSE frame's reason).
    #[error("peer refused backup connection {path}: {reason}")]
    BackupRefused {
        /// The backup's ordinal.
        path: u64,
        /// The reason the peer gave.
        reason: String,
    },
    /// TLS failed: a certificate or key file (named) could not be used, the handshake failed
    /// or timed out (an untrusted certificate, a peer that does not speak TLS), or the peer
    /// sent a corrupt record.
    #[error("TLS: {0}")]
    Tls(String),
    /// TLS on this side only: the peer answered the TLS handshake in plaintext lowtide.
    #[error("TLS handshake with {peer}: the peer speaks plaintext lowtide, not TLS")]
    PeerNotTls {
        /// The peer's address.
        peer: std::net::SocketAddr,
    },
    /// The peer went away without a CLOSE frame.
    #[error("connection closed by peer without CLOSE")]
    PeerGone,
}

/// A common set-up mistake an [`Error`] points to ([`Error::mistake`]). The error's message
/// says what happened; a front end turns the mistake into advice in its own terms (the
/// command line names its flags, the C API its calls): `docs/errors.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mistake {
    /// This side speaks plaintext lowtide, the peer TLS (it answered with a TLS record).
    PeerSpeaksTls,
    /// This side speaks TLS, the peer plaintext lowtide.
    PeerSpeaksPlaintext,
    /// Nothing listens at the address connected to (connection refused).
    NothingListening,
    /// Another socket holds the address to listen on.
    AddressInUse,
    /// The system refused the call to an unprivileged process (`EPERM`, `EACCES`): a port
    /// below 1024, a congestion control outside `net.ipv4.tcp_allowed_congestion_control`.
    NotPermitted,
}

impl Mistake {
    /// The mistake an OS error from connecting or listening points to.
    ///
    /// ```
    /// use lowtide::Mistake;
    /// use std::io::{Error, ErrorKind};
    /// assert_eq!(Mistake::of_io(&ErrorKind::AddrInUse.into()), Some(Mistake::AddressInUse));
    /// assert_eq!(Mistake::of_io(&Error::from_raw_os_error(1)), Some(Mistake::NotPermitted)); // EPERM
    /// assert_eq!(Mistake::of_io(&ErrorKind::TimedOut.into()), None);
    /// ```
    pub fn of_io(error: &io::Error) -> Option<Mistake> {
        match error.kind() {
            io::ErrorKind::ConnectionRefused => Some(Mistake::NothingListening),
            io::ErrorKind::AddrInUse => Some(Mistake::AddressInUse),
            io::ErrorKind::PermissionDenied => Some(Mistake::NotPermitted),
            _ => None,
        }
    }
}

impl Error {
    pub(crate) fn io(what: impl Into<String>, error: io::Error) -> Self {
        Error::Io {
            what: what.into(),
            error: Arc::new(error),
        }
    }

    /// The set-up mistake this error most likely comes from, if it is one of the common ones.
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// use lowtide::{ChannelConfig, Mistake};
    /// let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    /// let e = lowtide::connect(port, ChannelConfig::default()).await.unwrap_err();
    /// assert_eq!(e.mistake(), Some(Mistake::NothingListening));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn mistake(&self) -> Option<Mistake> {
        match self {
            Error::Io { error, .. } => Mistake::of_io(error),
            Error::Protocol(ProtocolError::Decode(d)) if d.peer_speaks_tls() => {
                Some(Mistake::PeerSpeaksTls)
            }
            Error::PeerNotTls { .. } => Some(Mistake::PeerSpeaksPlaintext),
            _ => None,
        }
    }
}

impl From<ProtocolError> for Error {
    fn from(e: ProtocolError) -> Self {
        Error::Protocol(e)
    }
}

impl From<SysError> for Error {
    fn from(e: SysError) -> Self {
        Error::Io {
            what: e.what,
            error: Arc::new(e.error),
        }
    }
}
