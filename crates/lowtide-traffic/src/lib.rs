//! Cross traffic for the lowtide lab: the load that real Linux TCP competes with at the
//! emulated bottleneck.
//!
//! Everything here is plain blocking `std` code that takes socket addresses. The emulator
//! (`lowtide-netem`) spawns OS threads that have already `setns`-ed into a host's network
//! namespace and calls these functions inside them; threads spawned from such a thread inherit
//! its namespace, so the [`runner`] may spawn one thread per flow. Nothing here knows about
//! namespaces, and everything works over loopback, which is what the tests use.
//!
//! ```text
//! sender namespace thread                           receiver namespace thread
//!   runner::run_schedule(plan, targets, stop)         sink::TcpSink::bind(addr)?.run(&stop)
//!     ├─ elephant::run_elephant ── TCP ──────────────►  (counts, or sends in download mode)
//!     ├─ mice::run_mice ─────────── TCP ×N ──────────►
//!     └─ cbr::run_cbr ───────────── UDP ─────────────► sink::UdpSink::bind(addr)?.run(&stop)
//!   report::ScheduleReport (serde)  ◄── merge_udp_sinks(&[UdpSinkReport])
//! ```
//!
//! Layers:
//! - [`schedule`]: the typed, TOML-friendly description of cross traffic, validated into a
//!   [`schedule::Plan`] with errors that name the entry, the field, the value and what is allowed.
//! - [`elephant`], [`mice`], [`cbr`]: one flow each, blocking, bounded by a [`Stop`].
//! - [`sink`]: the servers (TCP sink that counts or sends, UDP sink that counts and detects loss).
//! - [`congestion`]: the one place that sets `TCP_CONGESTION` and explains its failures.
//! - [`window`]: a bulk sender's bound on its bytes in flight (ns-2's `window_`).
//! - [`wire`]: the tiny request header and UDP payload layout shared by clients and sinks.
//! - [`runner`]: starts and stops flows at their scheduled times.
//! - [`report`]: serde reports (goodput, flow completion times, CBR loss).
//!
//! Bounds: every loop checks a [`Stop`] (a shared flag plus a deadline) at least every
//! [`POLL_INTERVAL`]; flow counts, connections, per-flow tables and stored samples are capped.

#![deny(clippy::undocumented_unsafe_blocks)] // every unsafe block states its invariant

pub mod cbr;
pub mod congestion;
pub mod elephant;
pub mod error;
pub mod mice;
pub mod report;
pub mod runner;
pub mod schedule;
pub mod sink;
mod stop;
mod tcp_client;
pub mod window;
pub mod wire;

pub use error::TrafficError;
pub use stop::Stop;

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How often blocking loops wake up to look at their [`Stop`]: socket timeouts, poll timeouts
/// and sleep slices are at most this long, so a stop takes effect within about this time.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Which end of a TCP flow sends the data.
///
/// "Reverse" cross traffic is normally just the caller running the client on the other side.
/// `Download` exists so that traffic on the reverse path can also be started from the sender
/// side: the client connects and asks the sink to send.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// The client sends, the sink reads and counts (client → server).
    #[default]
    Upload,
    /// The client asks, the sink sends and the client counts (server → client).
    Download,
}

impl Direction {
    /// The lower-case name used in schedules and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Upload => "upload",
            Direction::Download => "download",
        }
    }
}

/// Goodput in bits per second; 0 for an empty interval.
pub(crate) fn bits_per_second(bytes: u64, duration: Duration) -> f64 {
    let secs = duration.as_secs_f64();
    if secs > 0.0 {
        bytes as f64 * 8.0 / secs
    } else {
        0.0
    }
}
