//! Protocol tests in simulated time ([`crate::sim::Pair`]).

mod bulk_path;
mod dbat;
mod duplicate;
mod failover;
mod limits;
mod one_segment;
mod props;
mod reserve;
mod service;
mod structured;
mod transmit_work;

/// Enqueue-to-delivery latencies of the messages of `importance` the server received, sorted,
/// ms (both ends of a [`crate::sim::Pair`] share the epoch).
pub(super) fn latencies_ms(p: &crate::sim::Pair, importance: u8) -> Vec<f64> {
    let epoch = p.client.conn.epoch();
    let mut v: Vec<f64> = p
        .server
        .received
        .iter()
        .filter(|m| m.importance == importance)
        .map(|m| {
            let sent = epoch + std::time::Duration::from_micros(m.send_time_us);
            (m.received_at - sent).as_secs_f64() * 1e3
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v
}

/// The `q` quantile of sorted values ([`crate::quantile`]'s convention).
pub(super) fn quantile(v: &[f64], q: f64) -> f64 {
    crate::quantile::of_sorted(v, q).expect("samples")
}
