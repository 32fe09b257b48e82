//! Events as C sees them: one flat struct, `kind` saying which fields mean something.

use std::ffi::c_char;

use lowtide::{CancelReason, Event, MessageTimes};

/// What happened (`lowtide_event.kind`).
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum lowtide_event_kind {
    /// A message is completely in the kernel: `stream`, `seq`, `importance`, `latency_us`
    /// (enqueue to last byte written).
    LOWTIDE_EVENT_WRITTEN = 1,
    /// The receiver acknowledged a message: `stream`, `seq`, `importance`, `latency_us`
    /// (enqueue to acknowledgement).
    LOWTIDE_EVENT_ACKED = 2,
    /// We withdrew a message: `stream`, `seq`, `importance`, `cancel_reason`, `bytes` (bytes
    /// already staged; > 0: the receiver was told to drop the partial message).
    LOWTIDE_EVENT_CANCELLED = 3,
    /// The peer withdrew one of its messages: `stream`, `seq`, `cancel_reason`, `bytes` (bytes
    /// of it freed here).
    LOWTIDE_EVENT_PEER_CANCELLED = 4,
    /// The peer opened a stream: `stream`.
    LOWTIDE_EVENT_STREAM_OPENED = 5,
    /// The peer closed a stream: `stream`.
    LOWTIDE_EVENT_STREAM_CLOSED = 6,
    /// DBAT's congestion signal: `flag` (1: onset, 0: cleared), `bytes` (average send queue).
    LOWTIDE_EVENT_CONGESTION = 7,
    /// The channel was closed: `flag` (1: by the peer), `code`, `text` (reason).
    LOWTIDE_EVENT_CLOSED = 8,
    /// The transport can take a message now (once per `lowtide_want_writable`).
    LOWTIDE_EVENT_WRITABLE = 9,
    /// The channel's driver has finished; the last event. `code` is 0 after a clean close,
    /// else the `lowtide_status` of the error, which `text` describes.
    LOWTIDE_EVENT_FINISHED = 10,
    /// An event this version of the C API does not describe (e.g. a probe result).
    LOWTIDE_EVENT_OTHER = 11,
}

/// Why a message was withdrawn.
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum lowtide_cancel_reason {
    /// Not a cancellation event.
    LOWTIDE_CANCEL_NONE = 0,
    /// The application cancelled it (`lowtide_cancel`).
    LOWTIDE_CANCEL_APPLICATION = 1,
    /// Its deadline passed before it was completely written.
    LOWTIDE_CANCEL_EXPIRED = 2,
}

/// Bytes of `lowtide_event.text`, including the NUL.
pub const LOWTIDE_EVENT_TEXT: usize = 128;

/// One event (`lowtide_poll_event`). Fields a kind does not use are 0.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct lowtide_event {
    /// What happened.
    pub kind: lowtide_event_kind,
    /// Why a message was withdrawn (CANCELLED, PEER_CANCELLED).
    pub cancel_reason: lowtide_cancel_reason,
    /// Stream id.
    pub stream: u64,
    /// Message sequence number within the stream.
    pub seq: u64,
    /// Byte count (see the kind).
    pub bytes: u64,
    /// Microseconds (see the kind); -1: no data.
    pub latency_us: i64,
    /// Close code or status (CLOSED, FINISHED).
    pub code: i64,
    /// Importance the message was sent with.
    pub importance: u8,
    /// Yes/no (see the kind).
    pub flag: u8,
    /// Reason or error text, NUL-terminated, truncated to fit.
    pub text: [c_char; LOWTIDE_EVENT_TEXT],
}

pub use lowtide_cancel_reason::*;
pub use lowtide_event_kind::*;

impl lowtide_event {
    pub(crate) fn new(kind: lowtide_event_kind) -> Self {
        Self {
            kind,
            cancel_reason: LOWTIDE_CANCEL_NONE,
            stream: 0,
            seq: 0,
            bytes: 0,
            latency_us: -1,
            code: 0,
            importance: 0,
            flag: 0,
            text: [0; LOWTIDE_EVENT_TEXT],
        }
    }

    pub(crate) fn with_text(mut self, s: &str) -> Self {
        // Truncate on a character boundary so the C side gets valid UTF-8.
        let mut end = s.len().min(LOWTIDE_EVENT_TEXT - 1);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        for (dst, src) in self.text.iter_mut().zip(&s.as_bytes()[..end]) {
            *dst = *src as c_char;
        }
        self.text[end] = 0;
        self
    }

    pub(crate) fn from_event(e: &Event) -> Self {
        let message = |kind, id: &lowtide::MessageId| Self {
            stream: id.stream,
            seq: id.seq,
            importance: id.importance(),
            ..Self::new(kind)
        };
        match e {
            Event::Written { id, times } => Self {
                latency_us: since_enqueue(times, times.last_write),
                ..message(LOWTIDE_EVENT_WRITTEN, id)
            },
            Event::Acked { id, times, .. } => Self {
                latency_us: since_enqueue(times, times.acked),
                ..message(LOWTIDE_EVENT_ACKED, id)
            },
            Event::Cancelled { id, reason, sent } => Self {
                cancel_reason: reason_code(*reason),
                bytes: *sent,
                ..message(LOWTIDE_EVENT_CANCELLED, id)
            },
            Event::PeerCancelled(p) => Self {
                stream: p.stream,
                seq: p.seq,
                cancel_reason: reason_code(p.reason),
                bytes: p.freed,
                ..Self::new(LOWTIDE_EVENT_PEER_CANCELLED)
            },
            Event::StreamOpened { stream, .. } => Self {
                stream: *stream,
                ..Self::new(LOWTIDE_EVENT_STREAM_OPENED)
            },
            Event::StreamClosed { stream } => Self {
                stream: *stream,
                ..Self::new(LOWTIDE_EVENT_STREAM_CLOSED)
            },
            Event::Congestion { onset, queue, .. } => Self {
                flag: u8::from(*onset),
                bytes: *queue,
                ..Self::new(LOWTIDE_EVENT_CONGESTION)
            },
            Event::Closed {
                by_peer,
                code,
                reason,
            } => Self {
                flag: u8::from(*by_peer),
                code: i64::try_from(*code).unwrap_or(i64::MAX),
                ..Self::new(LOWTIDE_EVENT_CLOSED)
            }
            .with_text(reason),
            _ => Self::new(LOWTIDE_EVENT_OTHER),
        }
    }
}

fn since_enqueue(times: &MessageTimes, at: Option<std::time::Instant>) -> i64 {
    at.map_or(-1, |t| {
        i64::try_from(t.saturating_duration_since(times.enqueued).as_micros()).unwrap_or(i64::MAX)
    })
}

fn reason_code(r: CancelReason) -> lowtide_cancel_reason {
    match r {
        CancelReason::Application => LOWTIDE_CANCEL_APPLICATION,
        CancelReason::Expired => LOWTIDE_CANCEL_EXPIRED,
    }
}
