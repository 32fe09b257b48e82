//! Every host of a lab run is a thread of this process, so a sender can put its clock into a
//! message and the receiver subtract it from its own: one-way latency without NTP.

use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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
    let (wall, now) = (SystemTime::now(), Instant::now());
    let wall = if t >= now {
        wall + (t - now)
    } else {
        wall - (now - t)
    };
    wall.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instant_lands_on_the_wall_clock_where_it_is() {
        let now = Instant::now();
        let (a, b) = (wall_us(now), wall_us(now + Duration::from_secs(1)));
        assert!((b - a - 1_000_000).abs() < 1_000, "{a} {b}");
        let c = wall_us(now - Duration::from_secs(2));
        assert!((a - c - 2_000_000).abs() < 1_000, "{a} {c}");
    }

    #[test]
    fn round_trips_to_the_nanosecond() {
        let t = Instant::now() + Duration::from_millis(5);
        let back = from_wire(to_wire(t));
        assert!(back.max(t) - back.min(t) < Duration::from_micros(1));
    }
}
