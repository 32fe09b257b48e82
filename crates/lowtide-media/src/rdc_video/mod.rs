//! The layered video source of Hsiao, Kung and Tan, "Streaming Video over TCP with
//! Receiver-based Delay Control" (Section 4.3): equal-rate layers added and dropped from the
//! TCP send buffer's occupancy.
//!
//! - [`source`]: the rule, pure logic with explicit time;
//! - [`tcp`]: the driver over a plain TCP socket (occupancy from `SIOCOUTQNSD`, the paper's
//!   unsent data, or `SIOCOUTQ`, plus the segments its sender-side window holds back).
//!
//! Not built: a driver over a lowtide channel (the channel's own send-buffer controller
//! would compete with the rule for the same signal).

pub mod source;
pub mod tcp;

pub use source::{Change, LayeredSource, Period, SourceConfig, SourceConfigError, SourceCounters};
pub use tcp::{LayerPoint, Occupancy, TcpSourceError, TcpSourceOptions, TcpSourceRecord};
