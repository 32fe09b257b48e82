//! The wall clock (CLOCK_REALTIME) in µs since the Unix epoch: the clock of the in-band
//! capture stamp and of every `_us` field the elements, the server and the lab write, because
//! hosts (and network namespaces) share it, where each process's `Instant` is its own.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Now, µs since the Unix epoch (0 on a clock set before 1970).
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// `t` on the wall clock, µs since the Unix epoch, from one reading of both clocks.
pub fn us_of(t: Instant) -> u64 {
    let (wall, now) = (now_us(), Instant::now());
    if t <= now {
        wall.saturating_sub(now.duration_since(t).as_micros() as u64)
    } else {
        wall.saturating_add(t.duration_since(now).as_micros() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn an_instant_lands_on_the_wall_clock_where_it_is() {
        let now = Instant::now();
        let (a, b) = (
            us_of(now) as i64,
            us_of(now + Duration::from_secs(1)) as i64,
        );
        assert!((b - a - 1_000_000).abs() < 1_000, "{a} {b}");
        let c = us_of(now - Duration::from_secs(2)) as i64;
        assert!((a - c - 2_000_000).abs() < 1_000, "{a} {c}");
        assert!(now_us() >= a as u64);
    }
}
