//! The driver's error type.

use std::io;
use std::sync::Arc;

use lowtide_proto::{ConfigError, ProtocolError, SendError, StreamError};

use crate::sys::SysError;

/// Anything a channel operation can fail with.
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
