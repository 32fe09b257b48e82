//! The TCP throughput equation of RFC 5348 §3.1 (Padhye et al.'s model, simplified):
//!
//! ```text
//!                                 s
//! X_Bps = ----------------------------------------------------------
//!         R*sqrt(2*b*p/3) + (t_RTO * (3*sqrt(3*b*p/8) * p * (1+32*p^2)))
//! ```
//!
//! `s` the segment size (bytes), `R` the round-trip time (s), `p` the loss event rate,
//! `b = 1` packets acknowledged per ACK (the RFC's recommendation), `t_RTO = 4·R` (the RFC's
//! recommendation). The result is bytes per second.
//!
//! Where we differ: nothing in the formula. [`loss_rate_for`] inverts it by bisection (the
//! RFC asks for the inverse in §6.3.1 and leaves the method open).

use std::time::Duration;

/// `b` of the equation: packets acknowledged by one TCP ACK (RFC 5348 §3.1 recommends 1).
pub const B: f64 = 1.0;

/// The allowed rate in bytes per second for segment size `s` bytes, round-trip time `rtt` and
/// loss event rate `p` (0 < p ≤ 1), with `t_RTO = 4·R`. `p = 0` gives infinity.
pub fn throughput(s: f64, rtt: Duration, p: f64) -> f64 {
    throughput_rto(s, rtt.as_secs_f64(), p, 4.0 * rtt.as_secs_f64())
}

/// The equation with an explicit `t_RTO` (seconds), `R` in seconds.
pub fn throughput_rto(s: f64, r: f64, p: f64, t_rto: f64) -> f64 {
    if p <= 0.0 {
        return f64::INFINITY;
    }
    let denom =
        r * (2.0 * B * p / 3.0).sqrt() + t_rto * (3.0 * (3.0 * B * p / 8.0).sqrt()) * p * (1.0 + 32.0 * p * p);
    s / denom
}

/// The loss event rate at which the equation allows `rate` bytes per second (bisection to a
/// relative error below 1e-9); 1 if even p = 1 allows more, a tiny rate if `rate` is beyond
/// what p = 1e-12 allows.
pub fn loss_rate_for(s: f64, rtt: Duration, rate: f64) -> f64 {
    let (mut lo, mut hi) = (1e-12f64, 1.0f64);
    if throughput(s, rtt, hi) >= rate {
        return hi;
    }
    if throughput(s, rtt, lo) <= rate {
        return lo;
    }
    // throughput falls with p: keep throughput(lo) > rate > throughput(hi); bisect in log space
    for _ in 0..200 {
        let mid = (lo * hi).sqrt();
        if throughput(s, rtt, mid) > rate {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi / lo < 1.0 + 1e-12 {
            break;
        }
    }
    (lo * hi).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference values computed independently with `bc -l` at 40 digits:
    /// `echo "scale=40; s=…; r=…; p=…; s / (r*sqrt(2*p/3) + 4*r*(3*sqrt(3*p/8))*p*(1+32*p^2))" | bc -l`
    const REFERENCE: [(f64, f64, f64, f64); 6] = [
        (1460.0, 0.1, 0.01, 164_005.062_169_969_770_527_054_995_976_778_678_311),
        (1460.0, 0.1, 0.1, 25_843.490_335_753_330_221_031_661_259_973_964_496_516),
        (1000.0, 0.2, 0.001, 191_921.815_695_627_278_412_593_743_470_883_905_790_403),
        (1200.0, 0.05, 0.5, 1_001.667_936_907_302_531_196_595_474_605_805_706_183),
        (1460.0, 0.3, 1.0, 20.001_426_311_316_778_654_183_639_536_189_046_041),
        (1000.0, 0.4, 0.000_001, 3_061_834.621_967_374_034_571_922_819_473_267_179_220),
    ];

    #[test]
    fn equation_matches_independent_reference_values_to_1e_6() {
        for (s, r, p, want) in REFERENCE {
            let got = throughput(s, Duration::from_secs_f64(r), p);
            let rel = ((got - want) / want).abs();
            assert!(rel < 1e-6, "s={s} R={r} p={p}: {got} vs {want} (rel {rel:e})");
            // absolute, too: every reference is below 1e7 B/s, so 1e-6 relative is < 10 B/s;
            // in fact f64 gets within 1e-6 B/s
            assert!((got - want).abs() < 1e-6 * want.max(1.0), "{got} vs {want}");
        }
    }

    #[test]
    fn no_loss_means_no_limit_and_the_inverse_round_trips() {
        assert!(throughput(1460.0, Duration::from_millis(100), 0.0).is_infinite());
        for (s, r, p, _) in REFERENCE {
            let rtt = Duration::from_secs_f64(r);
            let x = throughput(s, rtt, p);
            let back = loss_rate_for(s, rtt, x);
            assert!(((back - p) / p).abs() < 1e-6, "p={p} back={back}");
        }
        assert_eq!(loss_rate_for(1460.0, Duration::from_millis(100), 1.0), 1.0);
    }
}
