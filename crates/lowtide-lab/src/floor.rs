//! The network floor: a small UDP packet every 10 ms through the same bottleneck as the
//! measured streams. Its one-way latency is what the network alone added at that moment, so
//! a stream's latency minus the floor is what the sender side added.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use crate::clock;
use crate::stream::Sample;
use crate::LabError;

pub const INTERVAL: Duration = Duration::from_millis(10);

/// Sends probes to `dst` every 10 ms until `end` (sender host).
pub fn send(dst: SocketAddr, end: Instant) -> Result<u64, LabError> {
    let sock =
        UdpSocket::bind(("0.0.0.0", 0)).map_err(|e| LabError::io("binding the floor probe", e))?;
    let start = Instant::now();
    let mut n = 0u64;
    while Instant::now() < end {
        // Absolute schedule: sleeping late does not shift later probes.
        let due = start + INTERVAL * n as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let _ = sock.send_to(&clock::to_wire(Instant::now()).to_be_bytes(), dst);
        n += 1;
    }
    Ok(n)
}

/// Receives probes on `addr` until `end` (receiver host).
pub fn receive(addr: SocketAddr, start: Instant, end: Instant) -> Result<Vec<Sample>, LabError> {
    let sock = UdpSocket::bind(addr).map_err(|e| LabError::io("binding the floor sink", e))?;
    sock.set_read_timeout(Some(Duration::from_millis(50)))
        .map_err(|e| LabError::io("setting a read timeout", e))?;
    let mut out = vec![];
    let mut buf = [0u8; 64];
    while Instant::now() < end {
        let Ok(n) = sock.recv(&mut buf) else { continue };
        let now = Instant::now();
        let Ok(stamp) = <[u8; 8]>::try_from(&buf[..n.min(8)]) else {
            continue;
        };
        let sent = clock::from_wire(u64::from_be_bytes(stamp));
        out.push(Sample {
            sent_s: sent.saturating_duration_since(start).as_secs_f64(),
            latency_ms: now.saturating_duration_since(sent).as_secs_f64() * 1e3,
        });
    }
    Ok(out)
}

/// The floor at each sample's send time (the nearest earlier probe), for sender-side latency.
pub fn at(floor: &[Sample], sent_s: f64) -> Option<f64> {
    let i = floor.partition_point(|p| p.sent_s <= sent_s);
    floor.get(i.checked_sub(1)?).map(|p| p.latency_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_at_uses_the_latest_earlier_probe() {
        let f = [
            Sample {
                sent_s: 0.00,
                latency_ms: 25.0,
            },
            Sample {
                sent_s: 0.01,
                latency_ms: 30.0,
            },
        ];
        assert_eq!(at(&f, 0.005), Some(25.0));
        assert_eq!(at(&f, 0.5), Some(30.0));
        assert_eq!(at(&f, -1.0), None);
    }
}
