//! The least time between two P-ACKs sent because of `pack_every_bytes`, grown with the rate.
//!
//! Each P-ACK is a segment, and on the sender a wake-up and a read, whatever it covers; its
//! cost per byte falls only when it covers more bytes. Up to the rate at which the byte rule
//! reaches `pack_min_gap_us` (`r₀ = pack_every_bytes / pack_min_gap_us`, 33 MB/s by default)
//! nothing changes: one P-ACK per `pack_every_bytes`. Above it the gap grows in proportion to
//! the rate, `gap = pack_min_gap_us × r / r₀`, up to `pack_max_gap_us` (4 ms by default), so
//! the P-ACKs per second fall as the data rate rises (2,000/s at r₀, about 330/s at
//! 200 MB/s, 250/s from 270 MB/s on). `r` is the rate since the last P-ACK, so a quiet spell
//! shortens the gap: the first P-ACK after one still goes at once.
//!
//! What P-ACKs feed stays timely: a P-ACK is at most `pack_max_gap_us` late (at most 10 ms,
//! the least stall floor of failover, whose default is 200 ms); RTT samples (failover's
//! `srtt`, PaceA's latency) and `Acked` events come at most that much later, and only at
//! rates above r₀, which the lab's paced and emulated links stay below. PaceA keeps about
//! `rate × latency` unacknowledged, so a gap near its latency would throttle it: on a path of
//! a few ms at hundreds of MB/s, lower `pack_max_gap_us` (equal to `pack_min_gap_us`: the
//! fixed gap of before).
//!
//! Where we differ from QUIC's extension for the same end (Iyengar, Swett and Kühlewind,
//! "QUIC Acknowledgment Frequency", IETF draft: fewer acknowledgements, each delayed at most
//! a requested time): there the sender asks its peer for a threshold and a delay; here the
//! receiver chooses from the rate it sees, since lowtide's hello carries no such request.

use std::time::Duration;

use crate::config::Config;

/// The gap after the last P-ACK, `elapsed` ago, with `bytes` read since.
pub(crate) fn pack_gap(cfg: &Config, elapsed: Duration, bytes: u64) -> Duration {
    let min = cfg.pack_min_gap_us as f64 * 1e-6;
    let max = cfg.pack_max_gap_us as f64 * 1e-6;
    // gap = min × r / r₀ = min² × bytes / (elapsed × pack_every_bytes)
    let grown = min * min * bytes as f64 / (elapsed.as_secs_f64() * cfg.pack_every_bytes as f64);
    // (a zero `elapsed` makes the rate infinite: the longest gap)
    Duration::from_secs_f64(if grown.is_nan() {
        min
    } else {
        grown.clamp(min, max)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gap_at(rate: f64, elapsed_ms: f64) -> Duration {
        let cfg = Config::default();
        let elapsed = Duration::from_secs_f64(elapsed_ms * 1e-3);
        pack_gap(&cfg, elapsed, (rate * elapsed.as_secs_f64()) as u64)
    }

    #[test]
    fn the_gap_is_the_minimum_up_to_the_rate_of_the_byte_rule_then_grows_to_the_bound() {
        let us = |d: Duration| d.as_micros();
        // r₀ = 16 KiB / 500 µs = 32.8 MB/s
        assert_eq!(us(gap_at(10e6, 2.0)), 500);
        assert_eq!(us(gap_at(32e6, 1.0)), 500);
        let g = us(gap_at(65.5e6, 1.0));
        assert!((995..=1005).contains(&g), "{g}");
        let g = us(gap_at(200e6, 1.0));
        assert!((3045..=3060).contains(&g), "{g}");
        assert_eq!(us(gap_at(4e9, 1.0)), 4000);
        let cfg = Config::default();
        assert_eq!(us(pack_gap(&cfg, Duration::ZERO, 100_000)), 4000);
    }

    #[test]
    fn equal_bounds_keep_a_fixed_gap_and_no_minimum_means_no_gap() {
        let fixed = Config {
            pack_max_gap_us: 500,
            ..Config::default()
        };
        let g = pack_gap(&fixed, Duration::from_millis(1), 4 << 20);
        assert_eq!(g, Duration::from_micros(500));
        let none = Config {
            pack_min_gap_us: 0,
            ..Config::default()
        };
        assert_eq!(pack_gap(&none, Duration::ZERO, 0), Duration::ZERO);
        assert_eq!(
            pack_gap(&none, Duration::from_millis(1), 4 << 20),
            Duration::ZERO
        );
    }
}
