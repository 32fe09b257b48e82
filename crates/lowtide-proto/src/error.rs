//! Error enums, one per operation. Public ones are `#[non_exhaustive]`.

use crate::wire::DecodeError;

/// The peer violated the protocol or a configured limit; the channel closes with a CLOSE
/// frame carrying [`ProtocolError::code`] and the message.
///
/// ```
/// use lowtide_proto::wire::DecodeError;
/// use lowtide_proto::{Config, Connection, ProtocolError, Side};
/// # let now = std::time::Instant::now();
/// let mut server = Connection::new(Config::default(), Side::Server, now)?;
/// // A web browser on the lowtide port.
/// let e = server.handle_bytes(now, b"GET / HTTP/1.1\r\n").unwrap_err();
/// assert_eq!(e, ProtocolError::Decode(DecodeError::BadMagic(*b"GET ")));
/// assert_eq!(e.code(), 1);
/// assert!(server.is_closed()); // a CLOSE frame naming the error is staged for the peer
/// # Ok::<(), lowtide_proto::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// Bytes that do not parse. (The message shows the decode error; `source()` does not
    /// return it again, so a printer of the whole chain says it once.)
    #[error("malformed input: {0}")]
    Decode(DecodeError),
    /// A message longer than `max_message_size`.
    #[error("message {stream}/{seq} declares {size} bytes, limit is {max}")]
    MessageTooLarge {
        /// Stream id.
        stream: u64,
        /// Sequence number.
        seq: u64,
        /// Declared size.
        size: u64,
        /// Our limit.
        max: u64,
    },
    /// More streams than `max_streams`.
    #[error("peer opened more than {max} streams")]
    TooManyStreams {
        /// Our limit.
        max: u32,
    },
    /// Partial reassemblies would exceed the receive memory budget.
    #[error("partial messages would use {needed} bytes, reassembly limit is {limit}")]
    ReassemblyMemoryExceeded {
        /// Bytes that would be held.
        needed: u64,
        /// Budget for partial messages.
        limit: u64,
    },
    /// A chunk did not continue its message where the previous one ended.
    #[error("chunk of {stream}/{seq} at offset {got}, expected {expected}")]
    OffsetMismatch {
        /// Stream id.
        stream: u64,
        /// Sequence number.
        seq: u64,
        /// Offset expected.
        expected: u64,
        /// Offset received.
        got: u64,
    },
    /// A chunk runs past the message's declared length.
    #[error("chunk of {stream}/{seq} ends at {end}, message length is {total}")]
    ChunkBeyondEnd {
        /// Stream id.
        stream: u64,
        /// Sequence number.
        seq: u64,
        /// End offset of the chunk.
        end: u64,
        /// Declared length.
        total: u64,
    },
    /// A continuation chunk for a message that was never started (or already finished).
    #[error("chunk for unknown message {stream}/{seq}")]
    UnknownMessage {
        /// Stream id.
        stream: u64,
        /// Sequence number.
        seq: u64,
    },
    /// A first chunk for a message that is already being reassembled.
    #[error("message {stream}/{seq} started twice")]
    DuplicateMessage {
        /// Stream id.
        stream: u64,
        /// Sequence number.
        seq: u64,
    },
    /// A message whose sequence number was already delivered (or cancelled), on a channel
    /// without failover, where no sender repeats a number.
    #[error("message {stream}/{seq} was already delivered")]
    DuplicateDelivery {
        /// Stream id.
        stream: u64,
        /// Sequence number.
        seq: u64,
    },
    /// Failover: a resent message whose bytes differ from the copy delivered first.
    #[error("resent message {stream}/{seq} differs from the copy delivered first")]
    ResentMessageDiffers {
        /// Stream id.
        stream: u64,
        /// Sequence number.
        seq: u64,
    },
    /// Failover: a backup connection named a channel this side does not know.
    #[error("backup connection names unknown channel token {token:#x}")]
    UnknownChannelToken {
        /// The token in its hello.
        token: u64,
    },
    /// Failover: the peer opened more idle backup connections than this side accepts.
    #[error("peer opened backup connection {path}, more than the {max} idle backups accepted")]
    TooManyBackups {
        /// The backup's ordinal.
        path: u64,
        /// Idle backups accepted per channel (`failover.backups`; 0: failover off).
        max: u32,
    },
    /// Failover: a backup connection was used without a SWITCH for its ordinal first.
    #[error("backup connection {expected} began without its SWITCH frame (got {got})")]
    BadSwitch {
        /// The ordinal the connection announced in its hello.
        expected: u64,
        /// What its first frame was instead.
        got: String,
    },
    /// Duplicate lane: a frame other than a whole-message DATA frame arrived on the lane.
    #[error("duplicate lane carried {got}; only whole-message DATA frames are allowed")]
    BadLaneFrame {
        /// What arrived.
        got: String,
    },
}

impl From<DecodeError> for ProtocolError {
    fn from(e: DecodeError) -> Self {
        ProtocolError::Decode(e)
    }
}

impl ProtocolError {
    /// The close code sent to the peer (see `docs/wire.md`).
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, Side};
    /// # let now = std::time::Instant::now();
    /// let mut c = Connection::new(Config::default(), Side::Server, now)?;
    /// let e = c.handle_bytes(now, b"SSH-2.0-OpenSSH\r\n").unwrap_err();
    /// assert_eq!(e.code(), 1); // a decode error; the CLOSE frame carries this code
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn code(&self) -> u64 {
        match self {
            ProtocolError::Decode(_) => 1,
            ProtocolError::MessageTooLarge { .. } => 2,
            ProtocolError::TooManyStreams { .. } => 3,
            ProtocolError::ReassemblyMemoryExceeded { .. } => 4,
            ProtocolError::OffsetMismatch { .. }
            | ProtocolError::ChunkBeyondEnd { .. }
            | ProtocolError::UnknownMessage { .. }
            | ProtocolError::DuplicateMessage { .. }
            | ProtocolError::DuplicateDelivery { .. } => 5,
            ProtocolError::ResentMessageDiffers { .. }
            | ProtocolError::UnknownChannelToken { .. }
            | ProtocolError::TooManyBackups { .. }
            | ProtocolError::BadSwitch { .. }
            | ProtocolError::BadLaneFrame { .. } => 6,
        }
    }
}

/// Why `send` refused a message.
///
/// ```
/// use lowtide_proto::{Config, Connection, Message, SendError, Side};
/// # let now = std::time::Instant::now();
/// let cfg = Config { max_message_size: 1000, ..Config::default() };
/// let mut c = Connection::new(cfg, Side::Client, now)?;
/// let s = c.open_stream(Default::default())?;
/// let e = c.send(now, s, Message::new(vec![0u8; 1001])).unwrap_err();
/// assert_eq!(e, SendError::MessageTooLarge { size: 1001, max: 1000 });
/// assert_eq!(c.send(now, 99, Message::new("x")), Err(SendError::UnknownStream(99)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// The channel is closed.
    #[error("channel closed")]
    Closed,
    /// No such stream (never opened, or closed).
    #[error("unknown stream {0}")]
    UnknownStream(u64),
    /// The stream is closing.
    #[error("stream {0} is closing")]
    StreamClosing(u64),
    /// Larger than our or the peer's `max_message_size`.
    #[error("message of {size} bytes exceeds the limit of {max}")]
    MessageTooLarge {
        /// Message size.
        size: u64,
        /// Effective limit.
        max: u64,
    },
    /// All send queues together hold `max_queued_bytes`.
    #[error("send queues hold {queued} bytes, limit {max}")]
    QueueFull {
        /// Bytes queued.
        queued: u64,
        /// `max_queued_bytes`.
        max: u64,
    },
}

/// Why a stream could not be opened.
///
/// ```
/// use lowtide_proto::{Config, Connection, Side, StreamConfig, StreamError};
/// # let now = std::time::Instant::now();
/// let cfg = Config { max_streams: 1, ..Config::default() };
/// let mut c = Connection::new(cfg, Side::Client, now)?;
/// c.open_stream(StreamConfig::default())?;
/// let e = c.open_stream(StreamConfig::default()).unwrap_err();
/// assert_eq!(e, StreamError::TooManyStreams { max: 1 });
/// assert!(matches!(c.open_stream(StreamConfig { weight: -1.0 }), Err(StreamError::Config(_))));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// The channel is closed.
    #[error("channel closed")]
    Closed,
    /// Already `max_streams` streams (ours or the peer's limit).
    #[error("stream limit of {max} reached")]
    TooManyStreams {
        /// Effective limit.
        max: u64,
    },
    /// Invalid stream configuration.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// No such stream.
    #[error("unknown stream {0}")]
    UnknownStream(u64),
}
