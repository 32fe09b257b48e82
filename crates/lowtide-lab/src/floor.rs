//! The network floor: a small UDP packet every 10 ms through the same bottleneck as the
//! measured streams. Its one-way latency is what the network alone added at that moment, so
//! a stream's latency minus the floor is what the sender side added.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use lowtide_traffic::Stop;
use serde::{Deserialize, Serialize};

use crate::clock;
use crate::stream::Sample;
use crate::LabError;

pub const INTERVAL: Duration = Duration::from_millis(10);

/// A probe older than this does not stand for the network at a later message's send time:
/// such a message has no sender-side latency (counted, not guessed).
pub const MAX_AGE_S: f64 = 0.05;

/// What the probe's sender did: probes sent, and sends that failed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FloorSent {
    pub probes: u64,
    pub send_errors: u64,
    pub first_error: Option<String>,
}

/// Sends probes to `dst` every 10 ms from `start` until `end` (sender host).
pub fn send(
    dst: SocketAddr,
    start: Instant,
    end: Instant,
    stop: Stop,
) -> Result<FloorSent, LabError> {
    let sock =
        UdpSocket::bind(("0.0.0.0", 0)).map_err(|e| LabError::io("binding the floor probe", e))?;
    let mut out = FloorSent::default();
    let mut n = 0u32;
    loop {
        // Absolute schedule: sleeping late does not shift later probes.
        let due = start + INTERVAL * n;
        if due >= end || !stop.sleep_until(due) {
            break;
        }
        match sock.send_to(&clock::to_wire(Instant::now()).to_be_bytes(), dst) {
            Ok(_) => out.probes += 1,
            Err(e) => {
                out.send_errors += 1;
                out.first_error.get_or_insert_with(|| e.to_string());
            }
        }
        n += 1;
    }
    Ok(out)
}

/// Receives probes on `addr` until `end` (receiver host).
pub fn receive(
    addr: SocketAddr,
    start: Instant,
    end: Instant,
    stop: Stop,
) -> Result<Vec<Sample>, LabError> {
    let sock = UdpSocket::bind(addr).map_err(|e| LabError::io("binding the floor sink", e))?;
    sock.set_read_timeout(Some(Duration::from_millis(50)))
        .map_err(|e| LabError::io("setting a read timeout", e))?;
    let mut out = vec![];
    let mut buf = [0u8; 64];
    while Instant::now() < end && !stop.flag_is_set() {
        let Ok(n) = sock.recv(&mut buf) else { continue };
        let now = Instant::now();
        // Anything else on the port (a stray datagram) is not a probe.
        let Ok(stamp) = <[u8; 8]>::try_from(&buf[..n]) else {
            continue;
        };
        let sent = clock::from_wire(u64::from_be_bytes(stamp));
        out.push(Sample::delivered(
            sent.saturating_duration_since(start).as_secs_f64(),
            now.saturating_duration_since(sent).as_secs_f64() * 1e3,
        ));
    }
    Ok(out)
}

/// The floor at `sent_s`: the latest probe sent at or before it, if it is at most
/// [`MAX_AGE_S`] older.
pub fn at(floor: &[Sample], sent_s: f64) -> Option<f64> {
    let i = floor.partition_point(|p| p.sent_s <= sent_s);
    let p = floor.get(i.checked_sub(1)?)?;
    (sent_s - p.sent_s <= MAX_AGE_S).then_some(p.latency_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_at_uses_the_latest_earlier_probe_while_it_is_fresh() {
        let f = [Sample::delivered(0.00, 25.0), Sample::delivered(0.01, 30.0)];
        assert_eq!(at(&f, 0.005), Some(25.0));
        assert_eq!(at(&f, 0.055), Some(30.0));
        assert_eq!(at(&f, 0.5), None, "a probe 490 ms old is stale");
        assert_eq!(at(&f, -1.0), None);
    }
}
