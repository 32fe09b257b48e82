//! Constant-bit-rate UDP: unresponsive cross traffic that takes a fixed share of the bottleneck.
//!
//! Packet `i` is due at `start + i * packet_size * 8 / rate` (computed exactly in integer
//! nanoseconds from `i`, never by adding sleeps), and we sleep until that absolute deadline.
//! Oversleeping therefore delays one packet but never the schedule: the next packets go out
//! back to back until we are on time again, and the number sent in an interval is exact (the
//! count of deadlines inside it). Lateness is reported, not hidden. The same logical-timestamp
//! idea is rattan's `delay_until`.
//!
//! `rate_bps` counts UDP payload bits (as iperf does); on the wire each packet also carries
//! 28 bytes of IPv4 and UDP headers (48 for IPv6) plus link framing.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::sink::UdpSinkReport;
use crate::wire::{encode_datagram, DATAGRAM_HEADER_LEN};
use crate::{bits_per_second, Stop, TrafficError};

/// Largest UDP payload over IPv4.
pub const MAX_PACKET_SIZE: usize = 65_507;
/// A packet this much behind its deadline counts as late.
pub const LATE_THRESHOLD: Duration = Duration::from_millis(1);

/// One CBR flow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CbrConfig {
    /// The UDP sink.
    pub server: SocketAddr,
    /// Payload bits per second (at least 1).
    pub rate_bps: u64,
    /// UDP payload bytes per packet, from [`DATAGRAM_HEADER_LEN`] to [`MAX_PACKET_SIZE`].
    pub packet_size: usize,
    /// Written into every packet so one sink can tell flows apart.
    pub flow_id: u64,
}

/// What one CBR flow sent, and (after [`CbrReport::merge_sink`]) what arrived.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CbrReport {
    /// The flow id in the packets.
    pub flow_id: u64,
    /// Configured payload rate.
    pub rate_bps: u64,
    /// Configured payload size.
    pub packet_size: usize,
    /// Packets handed to the kernel.
    pub sent: u64,
    /// Sends that failed (ENOBUFS, or ECONNREFUSED after an ICMP port unreachable).
    pub send_errors: u64,
    /// From the first deadline to the stop, in seconds.
    pub duration_s: f64,
    /// `sent * packet_size * 8 / duration_s`.
    pub sent_bps: f64,
    /// Packets sent more than [`LATE_THRESHOLD`] after their deadline.
    pub late_packets: u64,
    /// Worst lateness against the schedule, in seconds.
    pub max_lateness_s: f64,
    /// Packets the sink counted (None until merged).
    pub received: Option<u64>,
    /// `sent - received` (None until merged).
    pub lost: Option<u64>,
    /// Received payload bits per second over this flow's duration (None until merged).
    pub goodput_bps: Option<f64>,
}

impl CbrReport {
    /// Fill `received`, `lost` and `goodput_bps` from a sink that counted this flow. Returns
    /// false (and changes nothing) if the sink never saw the flow id.
    pub fn merge_sink(&mut self, sink: &UdpSinkReport) -> bool {
        let Some(f) = sink.flows.iter().find(|f| f.flow_id == self.flow_id) else {
            return false;
        };
        self.received = Some(f.packets);
        self.lost = Some(self.sent.saturating_sub(f.packets));
        self.goodput_bps = Some(bits_per_second(
            f.bytes,
            Duration::from_secs_f64(self.duration_s),
        ));
        true
    }
}

/// Check a CBR configuration (also done by [`run_cbr`]).
pub fn validate(cfg: &CbrConfig) -> Result<(), TrafficError> {
    if cfg.rate_bps == 0 {
        return Err(TrafficError::InvalidConfig {
            field: "rate_bps",
            value: "0".into(),
            allowed: "at least 1 bit/s",
        });
    }
    if !(DATAGRAM_HEADER_LEN..=MAX_PACKET_SIZE).contains(&cfg.packet_size) {
        return Err(TrafficError::InvalidConfig {
            field: "packet_size",
            value: cfg.packet_size.to_string(),
            allowed: "20 (the flow id and sequence header) to 65507 bytes of UDP payload",
        });
    }
    Ok(())
}

/// Offset of packet `i` from the start, exact in nanoseconds (saturates after ~584 years).
fn due(i: u64, packet_bits: u64, rate_bps: u64) -> Duration {
    let ns = u128::from(i) * u128::from(packet_bits) * 1_000_000_000 / u128::from(rate_bps);
    Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}

/// Send CBR until `stop`. Blocking; call it in the client's namespace thread.
pub fn run_cbr(cfg: &CbrConfig, stop: &Stop) -> Result<CbrReport, TrafficError> {
    validate(cfg)?;
    let local: SocketAddr = if cfg.server.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let sock =
        UdpSocket::bind(local).map_err(|e| TrafficError::io("binding the CBR socket", local, e))?;
    sock.connect(cfg.server)
        .map_err(|e| TrafficError::io("connecting the CBR socket", cfg.server, e))?;
    let packet_bits = cfg.packet_size as u64 * 8;
    let mut buf = vec![0u8; cfg.packet_size];
    let (mut sent, mut send_errors, mut late_packets) = (0u64, 0u64, 0u64);
    let mut max_late = Duration::ZERO;
    let start = Instant::now();
    for i in 0u64.. {
        let t = start + due(i, packet_bits, cfg.rate_bps);
        if t >= stop.deadline() || stop.flag_is_set() || !stop.sleep_until(t) {
            break;
        }
        let late = Instant::now().saturating_duration_since(t);
        if late > LATE_THRESHOLD {
            late_packets += 1;
        }
        max_late = max_late.max(late);
        encode_datagram(&mut buf, cfg.flow_id, i);
        match sock.send(&buf) {
            Ok(_) => sent += 1,
            Err(e) => {
                send_errors += 1;
                if send_errors == 1 {
                    tracing::debug!(server = %cfg.server, error = %e, "CBR send failed");
                }
            }
        }
    }
    let duration = start
        .elapsed()
        .min(stop.deadline().saturating_duration_since(start));
    Ok(CbrReport {
        flow_id: cfg.flow_id,
        rate_bps: cfg.rate_bps,
        packet_size: cfg.packet_size,
        sent,
        send_errors,
        duration_s: duration.as_secs_f64(),
        sent_bps: bits_per_second(sent * cfg.packet_size as u64, duration),
        late_packets,
        max_lateness_s: max_late.as_secs_f64(),
        received: None,
        lost: None,
        goodput_bps: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_is_exact_and_does_not_drift() {
        // 8 Mbit/s, 1000-byte packets: one packet per millisecond, exactly.
        assert_eq!(due(0, 8000, 8_000_000), Duration::ZERO);
        assert_eq!(due(1000, 8000, 8_000_000), Duration::from_secs(1));
        // 3 packets per second: 333.33 ms each; packet 3 is at exactly 1 s, no accumulated
        // rounding.
        assert_eq!(due(3, 8, 24), Duration::from_secs(1));
        assert_eq!(due(3_000_000, 8, 24), Duration::from_secs(1_000_000));
    }

    #[test]
    fn rejects_bad_config() {
        let mut cfg = CbrConfig {
            server: "127.0.0.1:9".parse().unwrap(),
            rate_bps: 1_000_000,
            packet_size: 10,
            flow_id: 1,
        };
        assert!(validate(&cfg)
            .unwrap_err()
            .to_string()
            .contains("packet_size = 10"));
        cfg.packet_size = 1000;
        cfg.rate_bps = 0;
        assert!(validate(&cfg).unwrap_err().to_string().contains("rate_bps"));
    }
}
