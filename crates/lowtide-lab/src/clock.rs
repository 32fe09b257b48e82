//! Every host of a lab run is a thread of this process, so a sender can put its clock into a
//! message and the receiver subtract it from its own: one-way latency without NTP.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// `t` as nanoseconds since the process's origin, for a message payload.
pub fn to_wire(t: Instant) -> u64 {
    t.saturating_duration_since(origin()).as_nanos() as u64
}

/// The instant a payload timestamp stands for.
pub fn from_wire(ns: u64) -> Instant {
    origin() + Duration::from_nanos(ns)
}

/// `t` on the wall clock, µs since the Unix epoch: what programs a trial runs (pcaps,
/// GStreamer's logs) stamp their records with, to line up with the run's own.
pub fn wall_us(t: Instant) -> i64 {
    lowtide_media::wall_clock::us_of(t) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_to_the_nanosecond() {
        let t = Instant::now() + Duration::from_millis(5);
        let back = from_wire(to_wire(t));
        assert!(back.max(t) - back.min(t) < Duration::from_micros(1));
    }
}
