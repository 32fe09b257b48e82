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
    let denom = r * (2.0 * B * p / 3.0).sqrt()
        + t_rto * (3.0 * (3.0 * B * p / 8.0).sqrt()) * p * (1.0 + 32.0 * p * p);
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

    /// Reference values computed independently of this code with `bc -l` at 40 digits, kept
    /// as `bc` printed them:
    /// `echo "scale=40; s=…; r=…; p=…; s / (r*sqrt(2*p/3) + 4*r*(3*sqrt(3*p/8))*p*(1+32*p^2))" | bc -l`
    /// (`s` bytes, `r` seconds, `b = 1`, `t_RTO = 4r`).
    const REFERENCE: [(f64, f64, f64, &str); 6] = [
        (
            1460.0,
            0.1,
            0.01,
            "164005.0621699697705270549959767786783111006909",
        ),
        (
            1460.0,
            0.1,
            0.1,
            "25843.4903357533302210316612599739644965160294",
        ),
        (
            1000.0,
            0.2,
            0.001,
            "191921.8156956272784125937434708839057904039464",
        ),
        (
            1200.0,
            0.05,
            0.5,
            "1001.6679369073025311965954746058057061839361",
        ),
        (
            1460.0,
            0.3,
            1.0,
            "20.0014263113167786541836395361890460417833",
        ),
        (
            1000.0,
            0.4,
            0.000001,
            "3061834.6219673740345719228194732671792205117866",
        ),
    ];

    #[test]
    fn equation_matches_independent_reference_values_to_1e_6() {
        for (s, r, p, want) in REFERENCE {
            let want: f64 = want.parse().expect("a decimal number");
            let got = throughput(s, Duration::from_secs_f64(r), p);
            let rel = ((got - want) / want).abs();
            assert!(
                rel < 1e-6,
                "s={s} R={r} p={p}: {got} vs {want} (rel {rel:e})"
            );
            // and absolute: within 1e-6 B/s of the 40-digit value
            assert!((got - want).abs() < 1e-6, "{got} vs {want}");
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
