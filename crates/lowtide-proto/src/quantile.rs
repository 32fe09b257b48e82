//! Quantiles of a sample, one convention for every report lowtide writes.
//!
//! The `q` quantile of `n` sorted samples is the sample at index `round((n - 1) q)`: the
//! sample nearest to the position that linear interpolation would use (Hyndman and Fan's
//! definition 7, "(n − 1)p + 1"), without interpolating, so every percentile reported is a
//! value that was measured. `q = 0` is the minimum, `q = 1` the maximum, `q = 0.5` the middle
//! sample (of an even count, the upper of the two middle ones). With no samples there is no
//! quantile (`None`, never 0).
//!
//! Why this one: the lab's latency percentiles (`LatencySummary`) and the goals judged on
//! them, the emulator's own measurements and the RDC agent's benchmark already used it. A tail
//! quantile of few samples is one of the largest few: p99.9 of 15 samples is their maximum.
//!
//! ```
//! use lowtide_proto::quantile;
//! let mut ms = [4.0, 1.0, 3.0, 2.0];
//! assert_eq!(quantile::of(&mut ms, 0.5), Some(3.0)); // sorts: [1, 2, 3, 4], index round(1.5)
//! assert_eq!(quantile::of_sorted(&ms, 1.0), Some(4.0));
//! assert_eq!(quantile::index(1000, 0.99), Some(989));
//! assert_eq!(quantile::of(&mut [], 0.5), None);
//! ```

/// The index of the `q` quantile (`q` in `[0, 1]`, clamped) among `n` sorted samples:
/// `round((n - 1) q)`; `None` when `n` is 0.
///
/// ```
/// use lowtide_proto::quantile::index;
/// assert_eq!(index(15, 0.999), Some(14)); // the maximum
/// assert_eq!(index(100, 0.5), Some(50));
/// assert_eq!(index(0, 0.5), None);
/// ```
pub fn index(n: usize, q: f64) -> Option<usize> {
    let last = n.checked_sub(1)?;
    let q = if q.is_nan() { 0.0 } else { q.clamp(0.0, 1.0) };
    Some(((last as f64 * q).round() as usize).min(last))
}

/// The `q` quantile of samples already sorted in ascending order; `None` without samples.
///
/// ```
/// let sorted = [10u32, 20, 30];
/// assert_eq!(lowtide_proto::quantile::of_sorted(&sorted, 0.5), Some(20));
/// ```
pub fn of_sorted<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    index(sorted.len(), q).map(|i| sorted[i])
}

/// Sorts `samples` (total order: NaNs last) and returns their `q` quantile; `None` without
/// samples.
///
/// ```
/// let mut rtt = [30.0, 10.0, 20.0];
/// assert_eq!(lowtide_proto::quantile::of(&mut rtt, 0.99), Some(30.0));
/// assert_eq!(rtt, [10.0, 20.0, 30.0]);
/// ```
pub fn of(samples: &mut [f64], q: f64) -> Option<f64> {
    samples.sort_by(f64::total_cmp);
    of_sorted(samples, q)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_is_the_nearest_sample_to_the_interpolated_position() {
        // (n - 1) q = 98.01 for n = 100, q = 0.99: index 98.
        assert_eq!(index(100, 0.99), Some(98));
        assert_eq!(index(1, 0.99), Some(0));
        assert_eq!(index(2, 0.5), Some(1)); // 0.5 rounds away from zero
        assert_eq!(index(10, 1.5), Some(9));
        assert_eq!(index(10, -1.0), Some(0));
        assert_eq!(index(10, f64::NAN), Some(0));
    }
}
