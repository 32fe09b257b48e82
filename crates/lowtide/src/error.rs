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
    /// A system call failed; the message names the call.
    #[error("{what}: {source}")]
    Io {
        /// What was attempted.
        what: String,
        /// The OS error.
        #[source]
        source: Arc<io::Error>,
    },
    /// The peer violated the protocol; the channel was closed with this error.
    #[error("protocol error: {0}")]
    Protocol(#[from] ProtocolError),
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
    /// The peer went away without a CLOSE frame.
    #[error("connection closed by peer without CLOSE")]
    PeerGone,
}

impl Error {
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            what: what.into(),
            source: Arc::new(source),
        }
    }
}

impl From<SysError> for Error {
    fn from(e: SysError) -> Self {
        Error::Io {
            what: e.what,
            source: Arc::new(e.source),
        }
    }
}
