//! A viewer: its queue ([`queue`], the per-viewer drop rules without I/O) and its
//! connection ([`connection`], the WebSocket under its own latency controller).

pub mod connection;
pub mod queue;

use std::collections::VecDeque;
use std::time::Duration;

use lowtide::ControllerConfig;

/// Shown frames whose latencies a viewer's statistics keep (the metrics' quantiles).
pub const LATENCY_WINDOW: usize = 300;

/// How each viewer's connection runs.
#[derive(Debug, Clone)]
pub struct ViewerConfig {
    /// The latency controller on each viewer's socket (`Unlimited`: a plain WebSocket
    /// server that writes whatever the socket takes).
    pub controller: ControllerConfig,
    /// The congestion control of each viewer's socket (`TCP_CONGESTION`, e.g. `bbr`), if
    /// not the system's default.
    pub congestion: Option<String>,
    /// A viewer whose socket takes no byte for this long while units wait is dropped.
    pub stall_timeout: Duration,
    /// The largest message a viewer may send (reports are 25 bytes).
    pub max_message: usize,
}

impl Default for ViewerConfig {
    fn default() -> Self {
        Self {
            controller: ControllerConfig::default(),
            congestion: None,
            stall_timeout: Duration::from_secs(10),
            max_message: 4096,
        }
    }
}

/// What a viewer's connection has seen, for the metrics and the viewer log.
#[derive(Debug, Default, Clone)]
pub struct ViewerStats {
    pub path: String,
    /// Frames the viewer reported shown.
    pub shown: u64,
    /// Decoder problems the viewer reported.
    pub problems: u64,
    pub last_problem: Option<String>,
    /// Capture-to-shown latency (ms) of the last [`LATENCY_WINDOW`] stamped frames shown.
    pub capture_to_shown_ms: VecDeque<f64>,
    /// Server-to-shown latency (ms; ingest at the server to shown).
    pub server_to_shown_ms: VecDeque<f64>,
    /// Bytes the viewer's socket took after the handshake's answer (WebSocket framing
    /// included; ciphertext under TLS).
    pub bytes_written: u64,
    /// From the socket's last `TCP_INFO`.
    pub cwnd: u32,
    pub srtt_us: u64,
    pub notsent: u32,
}

impl ViewerStats {
    pub(crate) fn record(window: &mut VecDeque<f64>, v: f64) {
        if window.len() == LATENCY_WINDOW {
            window.pop_front();
        }
        window.push_back(v);
    }
}

/// The `q` quantile of `v` (`lowtide::proto::quantile`'s rule), `None` when empty (no data,
/// never 0).
pub fn quantile<'a>(v: impl IntoIterator<Item = &'a f64>, q: f64) -> Option<f64> {
    let mut s: Vec<f64> = v.into_iter().copied().collect();
    lowtide::proto::quantile::of(&mut s, q)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_the_nearest_sample_and_none_without_samples() {
        assert_eq!(quantile(&VecDeque::new(), 0.5), None);
        let v: VecDeque<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), Some(51.0)); // index round(99 * 0.5) = 50
        assert_eq!(quantile(&v, 0.99), Some(99.0));
        assert_eq!(quantile(&v, 1.0), Some(100.0));
    }
}
