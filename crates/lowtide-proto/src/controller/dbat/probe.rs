//! What a packet-pair probe measured.

use std::time::Duration;

use serde::Serialize;

/// What a packet-pair probe measured (see `docs/dbat.md`).
///
/// ```
/// use lowtide_proto::controller::ProbeResult;
/// use std::time::Duration;
/// let ms = Duration::from_millis;
/// // The second 1000-byte packet arrived 16 ms after the first: a 62.5 kB/s bottleneck.
/// let p = ProbeResult::from_dispersion(ms(210), ms(16), 1000, Duration::from_micros(50));
/// assert_eq!(p.bandwidth, Some(62_500));
/// // Both packets in one read: too close to tell.
/// let p = ProbeResult::from_dispersion(ms(210), Duration::ZERO, 1000, Duration::from_micros(50));
/// assert_eq!(p.bandwidth, None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ProbeResult {
    /// Round-trip time: report arrival − pair sent − dispersion.
    pub rtt: Duration,
    /// Time between the arrivals of the two packets at the receiver.
    pub dispersion: Duration,
    /// Bytes of the second packet (what crossed the bottleneck during the dispersion).
    pub second_len: u32,
    /// Bottleneck estimate, bytes per second; `None` when the dispersion was below what the
    /// receiver can resolve (both packets arrived in one read).
    pub bandwidth: Option<u64>,
}

impl ProbeResult {
    /// Builds the result from a dispersion; a dispersion under `resolution` gives no estimate.
    ///
    /// ```
    /// use lowtide_proto::controller::ProbeResult;
    /// use std::time::Duration;
    /// // 1448 bytes crossed the bottleneck in 1 ms: 1.448 MB/s.
    /// let p = ProbeResult::from_dispersion(Duration::from_millis(50), Duration::from_millis(1), 1448, Duration::from_micros(50));
    /// assert_eq!(p.bandwidth, Some(1_448_000));
    /// assert_eq!((p.rtt, p.second_len), (Duration::from_millis(50), 1448));
    /// ```
    pub fn from_dispersion(
        rtt: Duration,
        dispersion: Duration,
        second_len: u32,
        resolution: Duration,
    ) -> Self {
        let bandwidth = (dispersion >= resolution && !dispersion.is_zero())
            .then(|| (f64::from(second_len) / dispersion.as_secs_f64()) as u64);
        Self {
            rtt,
            dispersion,
            second_len,
            bandwidth,
        }
    }
}
