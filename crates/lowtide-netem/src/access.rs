//! Per-host access delay: an extra one-way delay between one sender host and the bottleneck,
//! applied both ways, so flows through one bottleneck can have different round trips (Hsiao,
//! Kung and Tan, Fig. 9: five groups of RTTs from 220 to 260 ms).
//!
//! `access_delay_ms = [0, 5, 10]` gives sender i a delay cell `s{i}_up` (ours, in its guard, like
//! the bottleneck's propagation delay) between its veth
//! and the bottleneck queue and `s{i}_down` between the reverse router and its veth, so its
//! minimum RTT is the bottleneck's base RTT plus twice its entry. The access links have no
//! rate limit and no queue: only the bottleneck queues. Hosts with 0 get no cell.

use std::sync::Arc;
use std::time::Duration;

use crate::cells::delay::DelayCell;
use crate::cells::guard::{Guarded, Watch};
use crate::dumbbell::{veth_cell_id, Core};
use crate::error::{ConfigError, NetemError};
use crate::failure::{Direction, FailureSlot, Site};
use crate::timer::WakeTail;

pub(crate) fn validate(delays_ms: &[f64], senders: usize) -> Result<(), ConfigError> {
    if !delays_ms.is_empty() && delays_ms.len() != senders {
        return Err(ConfigError::invalid(
            "access_delay_ms",
            format!("{} entries", delays_ms.len()),
            format!("one entry per sender ({senders}), or none"),
        ));
    }
    for (i, d) in delays_ms.iter().enumerate() {
        if !(d.is_finite() && (0.0..=10_000.0).contains(d)) {
            return Err(ConfigError::invalid(
                format!("access_delay_ms[{i}]"),
                d,
                "a one-way delay from 0 to 10000 ms",
            ));
        }
    }
    Ok(())
}

fn delayed(delays_ms: &[f64], i: usize) -> Option<Duration> {
    let d = *delays_ms.get(i.checked_sub(1)?)?;
    (d > 0.0).then(|| Duration::from_secs_f64(d / 1000.0))
}

/// Builds the access cells of every sender with a delay and links them to its veth.
pub(crate) fn build(
    core: &mut Core,
    delays_ms: &[f64],
    tail: WakeTail,
    failures: &Arc<FailureSlot>,
) -> Result<(), NetemError> {
    for i in 1..=delays_ms.len() {
        let Some(delay) = delayed(delays_ms, i) else {
            continue;
        };
        let what = || format!("building the access delay of sender {i}");
        for (cell, link) in [
            (format!("s{i}_up"), Direction::Forward),
            (format!("s{i}_down"), Direction::Reverse),
        ] {
            let watch = Watch::inside(
                Site::new(link, format!("access delay of sender {i}")),
                failures,
            );
            core.build_cell(cell, move |rt: &tokio::runtime::Handle| {
                let _rt = rt.enter();
                Ok(Guarded::new(DelayCell::new(delay, tail)?, watch))
            })
            .map_err(|e| NetemError::setup(what(), e))?;
        }
        core.link_cell(veth_cell_id(1, i), format!("s{i}_up"));
        core.link_cell(format!("s{i}_down"), veth_cell_id(1, i));
    }
    Ok(())
}

/// The cell whose output host `i` of `side` (1: senders) sends into the bottleneck.
pub(crate) fn entry(side: u8, i: usize, delays_ms: &[f64]) -> String {
    match (side, delayed(delays_ms, i)) {
        (1, Some(_)) => format!("s{i}_up"),
        _ => veth_cell_id(side, i),
    }
}

/// The cell the reverse router hands host `j` of `side` its packets through.
pub(crate) fn exit(side: u8, j: usize, delays_ms: &[f64]) -> String {
    match (side, delayed(delays_ms, j)) {
        (1, Some(_)) => format!("s{j}_down"),
        _ => veth_cell_id(side, j),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_entry_per_sender_in_range() {
        assert!(validate(&[], 3).is_ok());
        assert!(validate(&[0.0, 5.0, 10.0], 3).is_ok());
        let e = validate(&[1.0, 2.0], 3).unwrap_err().to_string();
        assert!(
            e.contains("access_delay_ms") && e.contains("2 entries") && e.contains("(3)"),
            "{e}"
        );
        let e = validate(&[1.0, -2.0], 2).unwrap_err().to_string();
        assert!(e.contains("access_delay_ms[1]") && e.contains("-2"), "{e}");
    }

    #[test]
    fn only_delayed_senders_get_cells() {
        let d = [0.0, 5.0];
        assert_eq!(entry(1, 1, &d), veth_cell_id(1, 1));
        assert_eq!(entry(1, 2, &d), "s2_up");
        assert_eq!(exit(1, 2, &d), "s2_down");
        assert_eq!(exit(2, 2, &d), veth_cell_id(2, 2), "receivers have none");
    }
}
