//! Target rate allocation: σ shared among flows by priority, minimum rate and weight.
//!
//! Mehra, "Efficient Video Streaming using TCP", Sec. 3.1 (the model of Mehra, De
//! Vleeschouwer and Zakhor, "Receiver-Driven Bandwidth Sharing for TCP", INFOCOM 2003):
//! each connection has a priority, a minimal rate and a weight. "First, the minimal rate is
//! provided to every connection, in decreasing order of application priority. Then, the
//! remaining bandwidth is shared proportionally to the weight of the connection." A receiver
//! may so starve low-priority connections to keep a high-priority one viable.
//!
//! Where we differ:
//! - Ties in priority share what is left for their minimums in proportion to those
//!   minimums, rather than in an unspecified order, so equal flows are treated equally.
//! - A weight of 0 is allowed: the flow gets its minimum and nothing more (the paper's video
//!   in Fig. 6, whose remaining bandwidth goes to the FTP flows). If every flow has weight 0
//!   the remainder is left unallocated (the targets then sum to less than σ).

use crate::config::Class;

/// Targets (bit/s) for flows of the given classes, in the same order, summing to at most
/// `sigma` (bit/s).
pub fn allocate(sigma: f64, classes: &[Class]) -> Vec<f64> {
    let mut targets = vec![0.0; classes.len()];
    let mut left = sigma.max(0.0);
    // Minimums, highest priority first; one priority level at a time.
    let mut order: Vec<usize> = (0..classes.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(classes[i].priority));
    let mut start = 0;
    while start < order.len() {
        let prio = classes[order[start]].priority;
        let end = order[start..]
            .iter()
            .position(|&i| classes[i].priority != prio)
            .map_or(order.len(), |n| start + n);
        let level = &order[start..end];
        let want: f64 = level.iter().map(|&i| classes[i].min_kbps * 1e3).sum();
        let scale = if want > left { left / want } else { 1.0 };
        for &i in level {
            targets[i] = classes[i].min_kbps * 1e3 * scale;
        }
        left -= want.min(left);
        start = end;
    }
    let weights: f64 = classes.iter().map(|c| c.weight).sum();
    if left > 0.0 && weights > 0.0 {
        for (t, c) in targets.iter_mut().zip(classes) {
            *t += left * c.weight / weights;
        }
    }
    targets
}

/// [`allocate`], with some flows held at most at a cap (flows in congestion of their own,
/// whose slack must reach the others): a capped flow over its cap keeps the cap and the
/// rest of `sigma` is allocated among the others, until no flow is over its cap.
pub fn allocate_capped(sigma: f64, classes: &[Class], caps: &[Option<f64>]) -> Vec<f64> {
    let mut targets = allocate(sigma, classes);
    let mut fixed: Vec<Option<f64>> = vec![None; classes.len()];
    loop {
        let mut more = false;
        for i in 0..classes.len() {
            if let Some(cap) = caps.get(i).copied().flatten() {
                if fixed[i].is_none() && targets[i] > cap {
                    fixed[i] = Some(cap);
                    more = true;
                }
            }
        }
        if !more {
            return targets;
        }
        let free: Vec<usize> = (0..classes.len()).filter(|&i| fixed[i].is_none()).collect();
        let left = sigma - fixed.iter().flatten().sum::<f64>();
        let sub: Vec<Class> = free.iter().map(|&i| classes[i]).collect();
        let shares = allocate(left, &sub);
        for (i, t) in targets.iter_mut().enumerate() {
            if let Some(cap) = fixed[i] {
                *t = cap;
            }
        }
        for (k, &i) in free.iter().enumerate() {
            targets[i] = shares[k];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(priority: i32, min_kbps: f64, weight: f64) -> Class {
        Class {
            priority,
            min_kbps,
            weight,
        }
    }

    #[test]
    fn the_papers_fig6_allocation() {
        // Video: higher priority, 520 kbit/s minimum, weight 0; two FTP flows of weight 1.
        let c = [
            class(10, 520.0, 0.0),
            class(0, 0.0, 1.0),
            class(0, 0.0, 1.0),
        ];
        let t = allocate(960e3, &c);
        assert_eq!(t, vec![520e3, 220e3, 220e3]);
        // During the 240 kbit/s interference sigma falls to 720: the video keeps 520.
        let t = allocate(720e3, &c);
        assert_eq!(t, vec![520e3, 100e3, 100e3]);
        // Below the video's minimum, the FTP flows starve.
        let t = allocate(400e3, &c);
        assert_eq!(t, vec![400e3, 0.0, 0.0]);
    }

    #[test]
    fn a_capped_flow_hands_the_rest_to_the_others() {
        let c = [
            class(10, 520.0, 0.0),
            class(0, 0.0, 1.0),
            class(0, 0.0, 1.0),
        ];
        // The video in congestion of its own at 450: the downloads share the rest.
        let t = allocate_capped(960e3, &c, &[Some(450e3), None, None]);
        assert_eq!(t, vec![450e3, 255e3, 255e3]);
        // A cap above what it would get changes nothing.
        let t = allocate_capped(960e3, &c, &[Some(600e3), None, None]);
        assert_eq!(t, vec![520e3, 220e3, 220e3]);
    }

    #[test]
    fn higher_priority_minimums_first_ties_in_proportion() {
        let c = [
            class(1, 300.0, 0.0),
            class(5, 200.0, 0.0),
            class(1, 100.0, 0.0),
        ];
        let t = allocate(400e3, &c);
        assert_eq!(t[1], 200e3);
        assert!(
            (t[0] - 150e3).abs() < 1e-6 && (t[2] - 50e3).abs() < 1e-6,
            "{t:?}"
        );
    }

    /// Properties over random classes (proptest, which `bash run.sh miri` does not build).
    #[cfg(not(miri))]
    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn classes() -> impl Strategy<Value = Vec<Class>> {
            prop::collection::vec(
                (-3i32..3, 0.0f64..2000.0, 0.0f64..5.0).prop_map(|(p, m, w)| class(p, m, w)),
                0..12,
            )
        }

        proptest! {
            #[test]
            fn targets_sum_to_at_most_sigma(sigma in 0.0f64..1e8, c in classes()) {
                let t = allocate(sigma, &c);
                let sum: f64 = t.iter().sum();
                prop_assert!(sum <= sigma * (1.0 + 1e-9) + 1e-6, "{sum} > {sigma}");
                prop_assert!(t.iter().all(|&x| x >= 0.0));
                // With a positive weight somewhere, nothing is left over.
                if c.iter().any(|c| c.weight > 0.0) && !c.is_empty() {
                    prop_assert!((sum - sigma).abs() <= sigma * 1e-9 + 1e-6);
                }
            }

            #[test]
            fn a_flow_short_of_its_minimum_means_no_lower_priority_flow_has_any(
                sigma in 0.0f64..5e6, c in classes()
            ) {
                let t = allocate(sigma, &c);
                for (i, a) in c.iter().enumerate() {
                    if t[i] + 1e-6 < a.min_kbps * 1e3 {
                        for (j, b) in c.iter().enumerate() {
                            if b.priority < a.priority {
                                prop_assert!(t[j] <= 1e-6, "{t:?} {c:?}");
                            }
                        }
                    }
                }
            }

            #[test]
            fn above_minimums_shares_follow_weights(sigma in 0.0f64..1e8, c in classes()) {
                let t = allocate(sigma, &c);
                let mins: f64 = c.iter().map(|c| c.min_kbps * 1e3).sum();
                if sigma > mins {
                    let w: f64 = c.iter().map(|c| c.weight).sum();
                    for (i, a) in c.iter().enumerate() {
                        let extra = t[i] - a.min_kbps * 1e3;
                        let want = if w > 0.0 { (sigma - mins) * a.weight / w } else { 0.0 };
                        prop_assert!((extra - want).abs() <= 1e-6 * sigma.max(1.0), "{t:?} {c:?}");
                    }
                }
            }
        }
    }
}
