//! Encoded video as lowtide carries it: access units from real encoders, what each is to the
//! decoder, and which may be dropped without breaking the decoder. Pure logic: bytes and
//! `now` in, units and decisions out; no clock reads, no sockets.
//!
//! ```text
//!  Annex-B bytes ─ AnnexBSplitter ─ NAL units ─ H264Framer / H265Framer ─┐
//!  IVF bytes ───── IvfReader ─ frames ─ VP8 / VP9 / AV1 classification ──┴─ AccessUnit
//!  AccessUnit ─ importance, deadline ─ lowtide message      (sender)
//!             ─ SenderTracker: a drop → the units that depend on it, to cancel
//!  received units ─ ReceiverGate ─ decodable units to the decoder          (receiver)
//!                               └─ KeyframeRequest to the encoder
//! ```
//!
//! - [`annexb`]: the Annex-B start-code splitter (ITU-T H.264 / H.265 Annex B), incremental
//!   and bounded;
//! - [`h264`], [`h265`]: NAL headers and access-unit boundaries (H.264 §7.3, §7.4; H.265
//!   §7.4.2.2, §7.4.2.4.4), keyframe / reference / non-reference, temporal id, parameter
//!   sets split into their own unit ([`nal`]);
//! - [`ivf`], [`vpx`], [`av1`]: the IVF container and VP8 (RFC 6386), VP9 (bitstream spec
//!   §6.2) and AV1 (spec §5) frame headers, as far as keyframes and references go;
//! - [`access_unit`]: the unit, its importance for [`lowtide::Message::importance`] and its
//!   deadline;
//! - [`dependency`]: the drop rule and the sender's tracker; [`gate`]: the receiver's;
//! - [`stamp`]: the capture instant in band (an SEI message), for glass-to-glass latency;
//! - [`input`]: a byte stream of a named or detected format into access units;
//! - [`wire`]: the messages of an encoded stream on a lowtide channel; [`sender`] and
//!   [`receiver`]: the two ends of that stream without the I/O (the driver is
//!   [`crate::pipe`]).
//!
//! Every parser refuses bad input with a precise error, holds at most one NAL unit, access
//! unit or frame (each under a limit the caller sets) and never panics (property tests here,
//! fuzz targets in `fuzz/`). Each module's doc lists what it does not parse.

pub mod access_unit;
pub mod annexb;
pub mod av1;
mod bits;
pub mod dependency;
pub mod gate;
pub mod h264;
pub mod h265;
pub mod input;
pub mod ivf;
pub mod nal;
pub mod receiver;
pub mod sender;
pub mod stamp;
pub mod vpx;
pub mod wire;

pub use access_unit::{importance, AccessUnit, FrameKind, UnitInfo, MAX_IMPORTANCE};
pub use annexb::{write_nal, AnnexBError, AnnexBSplitter, DEFAULT_MAX_NAL};
pub use dependency::{Chain, DropCounters, DropReason, SenderTracker};
pub use gate::{KeyframeRequest, ReceiverGate, RequestReason, Verdict};
pub use h264::{H264Framer, H264NalHeader};
pub use h265::{H265Framer, H265NalHeader};
pub use ivf::{write_ivf_frame, IvfError, IvfFrame, IvfFramer, IvfHeader, IvfReader};
pub use nal::{AnnexBReader, NalError, NalFramer, ReadError};

/// The codecs the model reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Codec {
    H264,
    H265,
    Vp8,
    Vp9,
    Av1,
}

/// Why a VP8, VP9 or AV1 frame's payload cannot be classified.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// A frame of 0 bytes.
    #[error("empty frame")]
    Empty,
    /// The frame ends inside the named header.
    #[error("frame ends inside the {what}")]
    Truncated { what: &'static str },
    /// A VP8 key frame without `9d 01 2a`, or a VP9 intra-only frame without `49 83 42`.
    #[error("key frame start code missing")]
    BadStartCode,
    /// VP9 `frame_marker` is not 2.
    #[error("VP9 frame_marker is not 2")]
    BadFrameMarker,
    /// A VP9 superframe index whose frame sizes exceed the data.
    #[error("VP9 superframe index sizes exceed the frame")]
    BadSuperframeIndex,
    /// AV1 `obu_forbidden_bit` is 1.
    #[error("AV1 OBU with obu_forbidden_bit set")]
    ObuForbiddenBit,
    /// An AV1 temporal unit without a frame header or frame OBU.
    #[error("AV1 temporal unit without a frame")]
    NoFrame,
}

/// What classifying a frame found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameFacts {
    pub kind: FrameKind,
    pub temporal_id: u8,
    pub has_parameter_sets: bool,
}

impl FrameFacts {
    pub(crate) fn of(kind: FrameKind) -> Self {
        Self {
            kind,
            temporal_id: 0,
            has_parameter_sets: false,
        }
    }
}
