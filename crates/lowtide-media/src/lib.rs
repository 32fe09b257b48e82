//! Adaptive media for lowtide: the application that turns the transport's timeliness into
//! picture quality (Goel et al. 2008, Section 7: Qstream's priority-progress streaming).
//!
//! All but [`session`], [`pipe`], [`ladder::stream`] and [`rdc_video::tcp`] is pure logic with
//! explicit time:
//! - [`video`]: layered video (a base layer plus enhancement layers, each needing all lower
//!   ones), from a synthetic model or from real per-frame encoder traces (`traces/`);
//! - [`wire`]: the header each media message carries;
//! - [`pps`]: the priority-progress sender: windows of frames, sent in priority order,
//!   whatever is unsent at the window's end is cancelled;
//! - [`playout`]: the receiver: collects windows, shows each frame at its deadline, measures
//!   shown layers, frame rate and windows that arrived whole within the latency tolerance;
//! - [`conference`]: Paceline's videoconferencing application (Erbad and Krasic): frames of
//!   eight ADUs with importance by layer, expiring at the sender after a latency threshold;
//!   the receiver measures frames shown per second;
//! - [`supersede`]: which queued conference ADUs a newer frame has made useless (the window of
//!   frames advancing per layer, as in priority-progress streaming);
//! - [`session`]: the two ends over a lowtide channel (the transport's events keep the
//!   sender's ledger; no sockets of its own);
//! - [`server`]: the receiving server of `lowtide recv`, which survives bad peers;
//! - [`rdc_video`]: the layered source of Hsiao, Kung and Tan (RDC): equal-rate layers added
//!   and dropped from the TCP send buffer's occupancy, and its plain-TCP driver;
//! - [`ladder`]: a bit-rate ladder (rungs, switching policies, a plain-TCP driver), the
//!   commercial player of Mehra's BWSS experiments;
//! - [`encoded`]: real encoded video (H.264, H.265, VP8, VP9, AV1): access units from
//!   Annex-B and IVF byte streams, their importance and deadline, and which units a drop
//!   makes undecodable at the sender and the receiver; the messages that carry them;
//! - [`pipe`]: encoded video between a byte stream (a pipe from or to ffmpeg) and a lowtide
//!   channel, the driver of `lowtide send --input` and `lowtide recv --output`.

pub mod conference;
pub mod encoded;
pub mod ladder;
pub mod pipe;
pub mod playout;
pub mod pps;
pub mod rdc_video;
pub mod server;
pub mod session;
pub mod supersede;
pub mod video;
pub mod wall_clock;
pub mod wire;
