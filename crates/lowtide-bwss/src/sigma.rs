//! The σ rule: how much the receiver's flows may take together.
//!
//! Mehra, "Efficient Video Streaming using TCP", Sec. 3.3. σ is the sum of the flows'
//! target rates; the rule is "simply reactive" on measured throughput:
//! - at start, σ is the measured aggregate throughput;
//! - a flow measured below α·T (T its target) suffers congestion of its own: σ grows by
//!   (1 − α)·T, which the allocation gives to the other flows; when the flow exceeds α·T
//!   again, σ is set to the measured aggregate;
//! - when at least half of the flows are below α·T, the whole access link is congested: σ
//!   falls to the measured aggregate;
//! - when congestion subsides the aggregate rises, and σ is set to the new aggregate.
//!
//! Where we differ:
//! - **Probing upwards.** A receiver that steers its flows exactly never measures more than
//!   σ, so "the aggregate rises" cannot happen after σ fell (the paper's window-based FCS
//!   let flows overshoot when queues drained). When for `probe_after` no flow has fallen
//!   below α·T other than those already in congestion of their own (whose slack was handed
//!   on: an application that wants less than its target, such as a video below its
//!   minimum, must not stop the probe), σ grows by `probe_step`; a flow newly below α·T
//!   within `probe_after` of a probe means the probe found the link's capacity, and σ
//!   returns to the aggregate (counted as `probe_failed`) instead of growing further as
//!   per-flow congestion would. This is the probing of the authors' earlier system
//!   (INFOCOM 2003), kept gentle.
//! - **Young flows** (measured over less than a full window) count in the aggregate but are
//!   never called congested: their first, partial measurement is not a rate.
//! - **Flows starting or stopping** clear the per-flow congestion marks and restart the
//!   probe timer (the paper resets "the BWSS state"); σ itself is kept, because the
//!   aggregate right after a change measures the old set of flows.
//! - σ never exceeds the access link's rate when it is configured, and starts there (the
//!   paper starts from the first measured aggregate, which is what happens when it is not).
//!
//! Every transition is counted by reason ([`SigmaCounters`]).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// One flow as the rule sees it at a tick.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlowSample {
    pub id: u64,
    /// The target it was given, bit/s.
    pub target: f64,
    /// Its measured rate over the last window, bit/s; `None` while younger than a window.
    pub measured: Option<f64>,
    /// Bytes/s it delivered in its partial first window (counts in the aggregate).
    pub partial: f64,
}

/// Parameters of the rule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SigmaParams {
    pub alpha: f64,
    pub probe_after: Option<Duration>,
    pub probe_step: f64,
    /// bit/s; `None`: unknown.
    pub link: Option<f64>,
}

/// Transitions of the rule, counted by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SigmaCounters {
    pub flow_congested: u64,
    pub flow_recovered: u64,
    pub link_congested: u64,
    pub aggregate_rose: u64,
    pub probes: u64,
    pub probe_failed: u64,
    pub flow_set_changed: u64,
}

/// The state of the σ rule. Call [`on_tick`](Self::on_tick) once per control interval with
/// every flow; read [`sigma`](Self::sigma) for the allocation.
#[derive(Debug, Clone)]
pub struct SigmaRule {
    params: SigmaParams,
    sigma: Option<f64>,
    /// Flows in congestion of their own, with the target they had when it began.
    congested: BTreeMap<u64, f64>,
    /// Since when no flow has been below α·T.
    all_met_since: Option<Instant>,
    last_probe: Option<Instant>,
    flows: Vec<u64>,
    counters: SigmaCounters,
}

impl SigmaRule {
    pub fn new(params: SigmaParams) -> Self {
        Self {
            params,
            // A known access link is the best first guess; else the first measurement.
            sigma: params.link,
            congested: BTreeMap::new(),
            all_met_since: None,
            last_probe: None,
            flows: vec![],
            counters: SigmaCounters::default(),
        }
    }

    /// σ in bit/s; `None` until the first aggregate was measured (flows run unsteered).
    pub fn sigma(&self) -> Option<f64> {
        self.sigma
    }

    pub fn counters(&self) -> SigmaCounters {
        self.counters
    }

    /// Flows currently in congestion of their own.
    pub fn is_congested(&self, id: u64) -> bool {
        self.congested.contains_key(&id)
    }

    /// Applies the rule to one interval's measurements.
    pub fn on_tick(&mut self, now: Instant, flows: &[FlowSample]) {
        let aggregate: f64 = flows.iter().map(|f| f.measured.unwrap_or(f.partial)).sum();
        let mut ids: Vec<u64> = flows.iter().map(|f| f.id).collect();
        ids.sort_unstable();
        if ids != self.flows {
            self.flows = ids;
            self.congested.clear();
            self.all_met_since = None;
            self.counters.flow_set_changed += 1;
        }
        let Some(mut sigma) = self.sigma else {
            // The first full measurement of a flow is the start of the system.
            if flows.iter().any(|f| f.measured.is_some()) && aggregate > 0.0 {
                self.set(aggregate);
            }
            return;
        };
        let alpha = self.params.alpha;
        let below =
            |f: &FlowSample| f.target > 0.0 && f.measured.is_some_and(|m| m < alpha * f.target);
        let judged = flows
            .iter()
            .filter(|f| f.measured.is_some() && f.target > 0.0)
            .count();
        let n_below = flows.iter().filter(|f| below(f)).count();
        // Flows short of their targets whose slack has not been handed on yet.
        let newly_below = flows
            .iter()
            .filter(|f| below(f) && !self.congested.contains_key(&f.id))
            .count();
        let probing = self
            .last_probe
            .zip(self.params.probe_after)
            .is_some_and(|(t, after)| now.duration_since(t) < after);
        if newly_below > 0 && probing {
            // The last probe went past the link's capacity.
            self.counters.probe_failed += 1;
            self.last_probe = None;
            self.congested.clear();
            sigma = aggregate;
        } else if n_below > 0 && 2 * n_below >= judged {
            self.counters.link_congested += 1;
            self.congested.clear();
            sigma = aggregate;
        } else {
            for f in flows {
                let was = self.congested.contains_key(&f.id);
                if below(f) && !was {
                    self.counters.flow_congested += 1;
                    self.congested.insert(f.id, f.target);
                    sigma += (1.0 - alpha) * f.target;
                } else if was && !below(f) {
                    self.counters.flow_recovered += 1;
                    self.congested.remove(&f.id);
                    sigma = aggregate;
                }
            }
            if aggregate > sigma {
                self.counters.aggregate_rose += 1;
                sigma = aggregate;
            }
        }
        if newly_below == 0 {
            let since = *self.all_met_since.get_or_insert(now);
            if let Some(after) = self.params.probe_after {
                let last = self.last_probe.map_or(since, |p| p.max(since));
                if now.duration_since(last) >= after {
                    self.counters.probes += 1;
                    self.last_probe = Some(now);
                    sigma *= 1.0 + self.params.probe_step;
                }
            }
        } else {
            self.all_met_since = None;
        }
        self.set(sigma);
    }

    fn set(&mut self, sigma: f64) {
        let capped = match self.params.link {
            Some(link) => sigma.min(link),
            None => sigma,
        };
        self.sigma = Some(capped.max(0.0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> SigmaParams {
        SigmaParams {
            alpha: 0.9,
            probe_after: Some(Duration::from_secs(2)),
            probe_step: 0.05,
            link: None,
        }
    }

    fn f(id: u64, target: f64, measured: f64) -> FlowSample {
        FlowSample {
            id,
            target,
            measured: Some(measured),
            partial: 0.0,
        }
    }

    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    #[test]
    fn starts_at_the_first_measured_aggregate() {
        let t0 = Instant::now();
        let mut r = SigmaRule::new(params());
        let young = FlowSample {
            measured: None,
            partial: 300e3,
            ..f(1, 0.0, 0.0)
        };
        r.on_tick(t0, &[young]);
        assert_eq!(r.sigma(), None);
        r.on_tick(at(t0, 200), &[f(1, 0.0, 900e3), f(2, 0.0, 60e3)]);
        assert_eq!(r.sigma(), Some(960e3));
    }

    #[test]
    fn one_flow_below_alpha_gives_its_slack_to_the_others_then_recovers() {
        let t0 = Instant::now();
        let mut r = SigmaRule::new(params());
        let flows = |m1: f64| [f(1, 500e3, m1), f(2, 230e3, 230e3), f(3, 230e3, 230e3)];
        r.on_tick(t0, &flows(500e3));
        assert_eq!(r.sigma(), Some(960e3));
        r.on_tick(at(t0, 200), &flows(300e3));
        assert!(r.is_congested(1));
        assert!((r.sigma().unwrap() - 1010e3).abs() < 1e-6);
        // Still congested: no second increase.
        r.on_tick(at(t0, 400), &flows(300e3));
        assert!((r.sigma().unwrap() - 1010e3).abs() < 1e-6);
        // Recovered: sigma is the measured aggregate.
        r.on_tick(at(t0, 600), &flows(480e3));
        assert!(!r.is_congested(1));
        assert_eq!(r.sigma(), Some(940e3));
        let c = r.counters();
        assert_eq!(
            (c.flow_congested, c.flow_recovered, c.link_congested),
            (1, 1, 0)
        );
    }

    #[test]
    fn half_the_flows_below_alpha_is_link_congestion() {
        let t0 = Instant::now();
        let mut r = SigmaRule::new(params());
        r.on_tick(t0, &[f(1, 0.0, 520e3), f(2, 0.0, 220e3), f(3, 0.0, 220e3)]);
        // A 240 kbit/s interferer: two of three flows fall short.
        r.on_tick(
            at(t0, 200),
            &[f(1, 520e3, 500e3), f(2, 220e3, 110e3), f(3, 220e3, 110e3)],
        );
        assert_eq!(r.sigma(), Some(720e3));
        assert_eq!(r.counters().link_congested, 1);
        assert!(!r.is_congested(2));
    }

    #[test]
    fn a_rising_aggregate_raises_sigma() {
        let t0 = Instant::now();
        let mut r = SigmaRule::new(params());
        r.on_tick(t0, &[f(1, 0.0, 700e3)]);
        r.on_tick(at(t0, 200), &[f(1, 700e3, 900e3)]);
        assert_eq!(r.sigma(), Some(900e3));
        assert_eq!(r.counters().aggregate_rose, 1);
    }

    #[test]
    fn probes_after_quiet_time_and_undoes_a_failed_probe() {
        let t0 = Instant::now();
        let mut r = SigmaRule::new(params());
        r.on_tick(t0, &[f(1, 0.0, 500e3), f(2, 0.0, 220e3)]);
        let mut t = 200;
        while r.counters().probes == 0 {
            r.on_tick(at(t0, t), &[f(1, 500e3, 500e3), f(2, 220e3, 220e3)]);
            t += 200;
            assert!(t <= 2400, "no probe after 2 s of met targets");
        }
        assert!((r.sigma().unwrap() - 756e3).abs() < 1e-6);
        // The link was full: one flow falls short right after the probe.
        r.on_tick(at(t0, t), &[f(1, 500e3, 430e3), f(2, 256e3, 290e3)]);
        assert_eq!(r.counters().probe_failed, 1);
        assert_eq!(r.sigma(), Some(720e3));
        assert!(!r.is_congested(1));
    }

    #[test]
    fn a_flow_that_wants_less_than_its_target_does_not_stop_the_probe() {
        let t0 = Instant::now();
        let mut r = SigmaRule::new(params());
        // Sigma fell to 720 during congestion; the video only ever wants 450 of its 520.
        r.on_tick(t0, &[f(1, 0.0, 450e3), f(2, 0.0, 135e3), f(3, 0.0, 135e3)]);
        assert_eq!(r.sigma(), Some(720e3));
        let mut t = 0;
        let mut sigma: f64 = 720e3;
        while t < 20_000 {
            t += 200;
            // The link has 960: the bulk flows get what they are given up to the rest.
            let bulk = ((sigma - 520e3) / 2.0).min((960e3 - 450e3) / 2.0);
            r.on_tick(
                at(t0, t),
                &[f(1, 520e3, 450e3), f(2, bulk, bulk), f(3, bulk, bulk)],
            );
            sigma = r.sigma().unwrap();
        }
        assert!(r.is_congested(1));
        assert!(r.counters().probes >= 3, "{:?}", r.counters());
        assert!(sigma >= 900e3, "sigma stuck at {sigma}");
    }

    #[test]
    fn young_flows_are_not_congested_and_changes_clear_marks() {
        let t0 = Instant::now();
        let mut r = SigmaRule::new(SigmaParams {
            probe_after: None,
            ..params()
        });
        r.on_tick(t0, &[f(1, 0.0, 900e3), f(2, 0.0, 60e3), f(3, 0.0, 0.0)]);
        r.on_tick(
            at(t0, 200),
            &[f(1, 800e3, 900e3), f(2, 100e3, 10e3), f(3, 100e3, 100e3)],
        );
        assert!(r.is_congested(2));
        let young = FlowSample {
            measured: None,
            partial: 1e3,
            ..f(4, 200e3, 0.0)
        };
        r.on_tick(at(t0, 400), &[f(1, 700e3, 900e3), f(2, 100e3, 10e3), young]);
        assert!(!r.is_congested(4));
        assert_eq!(r.counters().flow_set_changed, 2);
    }

    #[test]
    fn sigma_never_exceeds_the_link() {
        let t0 = Instant::now();
        let mut r = SigmaRule::new(SigmaParams {
            link: Some(960e3),
            ..params()
        });
        assert_eq!(r.sigma(), Some(960e3), "a known link is the first sigma");
        r.on_tick(t0, &[f(1, 0.0, 2e6)]);
        assert_eq!(r.sigma(), Some(960e3));
    }
}
