//! [`SigmaRule::on_tick`]: the paper's rule, the probes, and keeping the host's share.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::{
    segment_rate, FlowSample, Probe, SigmaRule, Yield, AFTER_CONGESTION_STEP_DIV, GROWTH_RTT,
    JUDGED_SEGMENTS, MAX_PROBE_BACKOFF, MIN_GROWTH_RTT, MIN_TOLERANCE_SEGMENTS, SEGMENT,
    WANTS_LESS_HEADROOM,
};

impl SigmaRule {
    /// `keep_share`: a flow with a minimum not in force is capped below its minimum at
    /// what it takes with room to grow back, so the rest of σ goes to the others and they
    /// go on competing for the host's share. A minimum is not in force before a whole
    /// window (then the flow has no measured rate, and no cap), while the allocation gives
    /// it nothing (target 0: capped at twice its rate, doubling per recent window), or
    /// once the flow has shown it wants less (a yield for it was undone): capped at
    /// [`WANTS_LESS_HEADROOM`] times what it takes, whatever share of its minimum that is:
    /// a video held at 300 of its 520 kbit/s by another host's flow kept the 220 it did
    /// not take from the downloads, and the other host's flow took them (the lab: 3 ×
    /// its plain-TCP rate).
    fn update_demand_caps(&mut self, flows: &[FlowSample]) {
        let floor = JUDGED_SEGMENTS * segment_rate(self.params.window);
        let caps: BTreeMap<u64, f64> = flows
            .iter()
            .filter(|f| f.min > 0.0 && !self.in_force(f))
            .filter_map(|f| {
                let m = f.measured?;
                let headroom = if self.wants_less.contains(&f.id) {
                    WANTS_LESS_HEADROOM
                } else {
                    2.0
                };
                let cap = (headroom * m.max(f.recent.unwrap_or(0.0))).max(floor);
                (cap < f.min).then_some((f.id, cap))
            })
            .collect();
        let new = caps.keys().filter(|id| !self.demand_caps.contains_key(id));
        self.counters.demand_capped += new.count() as u64;
        self.demand_caps = caps;
    }

    /// What the demand caps hold above what their flows take, bit/s: σ at the aggregate
    /// plus this leaves the others what they obtain.
    fn demand_room(&self, flows: &[FlowSample]) -> f64 {
        flows
            .iter()
            .filter_map(|f| Some(self.demand_caps.get(&f.id)? - f.measured?))
            .map(|r| r.max(0.0))
            .sum()
    }

    /// `keep_share` while no minimum is in force: σ grows by one segment per flow per its
    /// round trip each round trip (TCP's additive increase: 8·MSS / RTT² bit/s per second;
    /// the receiver's estimate, [`GROWTH_RTT`] while a flow has none), from at least the
    /// measured aggregate, up to the ceiling. Not a change the rates must settle after: the
    /// flows that can take it do, as TCP would.
    fn grow(&mut self, dt: Duration, flows: &[FlowSample], aggregate: f64) {
        let Some(sigma) = self.sigma else { return };
        let per_second: f64 = flows
            .iter()
            .map(|f| {
                let rtt = f.rtt.unwrap_or(GROWTH_RTT).max(MIN_GROWTH_RTT);
                segment_rate(rtt) / rtt.as_secs_f64()
            })
            .sum();
        let step = per_second * dt.as_secs_f64();
        let grown = sigma.max(aggregate + self.demand_room(flows)) + step;
        self.sigma = Some(self.ceiling().map_or(grown, |c| grown.min(c)));
    }

    /// Applies the rule to one interval's measurements.
    pub fn on_tick(&mut self, now: Instant, flows: &[FlowSample]) {
        let aggregate: f64 = flows.iter().map(|f| f.measured.unwrap_or(f.partial)).sum();
        let dt = self
            .last_tick
            .replace(now)
            .map(|t| now.saturating_duration_since(t));
        let mut ids: Vec<u64> = flows.iter().map(|f| f.id).collect();
        ids.sort_unstable();
        if ids != self.flows {
            self.flows = ids;
            self.congested.clear();
            self.wants_less.clear();
            self.reached_min.retain(|id| self.flows.contains(id));
            self.seen_at_min.retain(|id| self.flows.contains(id));
            self.yielded = None;
            self.protecting = false;
            self.backoff = 1;
            self.quiet_since = None;
            self.counters.flow_set_changed += 1;
            match self.probe.take() {
                // A probe cannot be judged over a different set of flows: undone.
                Some(p) => self.set(now, p.before),
                None => self.changed_at = Some(now),
            }
        }
        self.minimums = flows.iter().any(|f| f.guaranteed > 0.0);
        if let (Some(s), Some(ceiling)) = (self.sigma, self.ceiling()) {
            if s > ceiling {
                self.set(now, ceiling);
            }
        }
        let Some(sigma) = self.sigma else {
            // The first full measurement of a flow is the start of the system.
            if flows.iter().any(|f| f.measured.is_some()) && aggregate > 0.0 {
                self.set(now, aggregate);
            }
            return;
        };
        let in_force = flows.iter().any(|f| self.in_force(f));
        if self.params.keep_share {
            self.update_demand_caps(flows);
            if !in_force {
                self.grow(dt.unwrap_or_default(), flows, aggregate);
            }
        }
        let sigma = self.sigma.unwrap_or(sigma);
        // The whole window's tolerance: "at its minimum" means the same everywhere.
        let tolerance = MIN_TOLERANCE_SEGMENTS * segment_rate(self.params.window);
        let recent_at_min = |f: &FlowSample| {
            f.guaranteed > 0.0 && f.recent.is_some_and(|r| r >= f.guaranteed - tolerance)
        };
        self.seen_at_min
            .extend(flows.iter().filter(|f| recent_at_min(f)).map(|f| f.id));
        if let Some(y) = self.yielded.as_mut() {
            y.reached |= flows.iter().any(|f| f.id == y.flow && recent_at_min(f));
        }
        if self.onset_yield(now, flows, sigma) || self.probe_diluted(now, flows) {
            return;
        }
        if self
            .changed_at
            .is_some_and(|t| now.duration_since(t) < self.params.window)
        {
            return; // the rates still measure the old targets
        }
        let alpha = self.params.alpha;
        let min_judged = JUDGED_SEGMENTS * SEGMENT * 8.0 / self.params.window.as_secs_f64();
        // A demand-capped flow takes less than it is given by choice or by loss: it tells
        // nothing about the link, nor about its own congestion (its rest goes on already).
        let capped = self.demand_caps.clone();
        let judged = |f: &FlowSample| {
            f.target >= min_judged && f.measured.is_some() && !capped.contains_key(&f.id)
        };
        let below = |f: &FlowSample| judged(f) && f.measured.is_some_and(|m| m < alpha * f.target);
        let n_judged = flows.iter().filter(|f| judged(f)).count();
        let n_below = flows.iter().filter(|f| below(f)).count();
        let tolerance = MIN_TOLERANCE_SEGMENTS * SEGMENT * 8.0 / self.params.window.as_secs_f64();
        let at_min = |f: &FlowSample| f.measured.is_some_and(|m| m >= f.guaranteed - tolerance);
        // Flows back at their minimum may be judged by it again.
        for f in flows
            .iter()
            .filter(|f| f.guaranteed > 0.0 && at_min(f) && !self.demand_caps.contains_key(&f.id))
        {
            self.wants_less.remove(&f.id);
            self.reached_min.insert(f.id);
        }

        let floor: f64 = flows.iter().map(|f| f.guaranteed).sum();
        if let Some(y) = self.yielded.take() {
            if let Some(f) = flows.iter().find(|f| f.id == y.flow) {
                if self.judge_yield(now, y, f, aggregate, floor, tolerance) {
                    return;
                }
            }
        }

        let short_of_min = |f: &FlowSample| {
            judged(f)
                && f.guaranteed > 0.0
                && !at_min(f)
                && self.reached_min.contains(&f.id)
                && !self.wants_less.contains(&f.id)
        };

        let mut held = false;
        if let Some(p) = self.probe.take() {
            // A window after the probe: did it take from anyone? A full link shares the
            // extra out of the others' rates; a flow that merely does not want its new
            // target loses nothing.
            let kept = 1.0 - (1.0 - alpha) / 2.0;
            let lost_min = flows.iter().any(|f| {
                let before = p.rates.get(&f.id).copied().unwrap_or(0.0);
                before >= f.guaranteed - tolerance && short_of_min(f)
            });
            let hurt = flows.iter().any(|f| {
                let before = p.rates.get(&f.id).copied().unwrap_or(0.0);
                judged(f) && f.measured.is_some_and(|m| m < kept * before)
            });
            // Carried: judged only when a flow that takes the step is fast enough to judge
            // (the downloads starved at the minimums' floor read a segment now and then).
            let takers_judged = flows
                .iter()
                .any(|f| judged(f) && f.target > f.guaranteed + tolerance);
            let carried = !takers_judged || aggregate >= p.aggregate + 0.5 * (sigma - p.before);
            if lost_min || hurt || !carried {
                self.counters.probe_failed += 1;
                // A minimum lost is the dearest failure: the next probe waits longest.
                self.backoff = if lost_min {
                    MAX_PROBE_BACKOFF
                } else {
                    (self.backoff * 2).min(MAX_PROBE_BACKOFF)
                };
                self.step_div = (self.step_div * 2).min(MAX_PROBE_BACKOFF);
                self.quiet_since = None;
                // A probe that took a flow's minimum found a full link from below: σ
                // before it was already at the edge, so it steps back as far again and the
                // queue the probe built can drain.
                let back = if lost_min {
                    (2.0 * p.before - sigma).max(floor)
                } else {
                    p.before
                };
                self.set(now, back);
                return;
            }
            self.counters.probe_held += 1;
            self.backoff = 1;
            // While protecting a minimum the steps grow to half of `probe_step` at most.
            let min_div = if self.protecting { 2 } else { 1 };
            self.step_div = (self.step_div / 4).max(min_div);
            held = true;
        }

        // One judged flow alone (the others starved, young or slow) cannot tell the link's
        // congestion from its own.
        if n_judged >= 2 && n_below > 0 && 2 * n_below >= n_judged {
            self.counters.link_congested += 1;
            self.congested.clear();
            // The link just carried less than σ: probe it again gently.
            self.backoff = 1;
            self.step_div = AFTER_CONGESTION_STEP_DIV;
            self.quiet_since = None;
            // Keeping the share with no minimum to protect: TCP shares the link, σ stays.
            // A reset to what the flows obtain capped each window's upswing at its mean,
            // and the other hosts' flows took the rest (the lab: 1.6 × their plain-TCP
            // rate, pooled over three trials, `docs/bwss.md`).
            if !self.params.keep_share || in_force {
                self.set(now, aggregate);
            }
            return;
        }
        // A flow short of its minimum: the lower-priority flows must give way, not take its
        // slack. σ falls below the aggregate by the shortfall, never below the minimums.
        let short: Vec<&FlowSample> = flows.iter().filter(|f| short_of_min(f)).collect();
        let shortfall: f64 = short.iter().map(|f| f.shortfall()).sum();
        let yielded_to = (sigma.min(aggregate) - shortfall).max(floor);
        let shortest = short
            .iter()
            .max_by(|a, b| a.shortfall().total_cmp(&b.shortfall()));
        if let Some(f) = shortest {
            // Only when the others have something to give (else: the paper's rule below).
            if yielded_to < sigma - tolerance {
                self.counters.min_short += 1;
                self.yielded = Some(Yield {
                    flow: f.id,
                    before: sigma,
                    rate: f.measured.unwrap_or(0.0),
                    recent: f.recent.or(f.measured).unwrap_or(0.0),
                    reached: false,
                });
                self.quiet_since = None;
                self.set(now, yielded_to);
                return;
            }
        }
        let mut next = sigma;
        for f in flows {
            match (below(f), self.congested.get(&f.id).copied()) {
                (true, None) => {
                    self.counters.flow_congested += 1;
                    // What σ can really grow by: at the link it cannot, and recovery must
                    // not take back more than was handed on.
                    let room = self
                        .ceiling()
                        .map_or(f64::INFINITY, |c| (c - next).max(0.0));
                    let slack = ((1.0 - alpha) * f.target).min(room);
                    self.congested.insert(f.id, (f.target, slack));
                    next += slack;
                }
                (false, Some((_, slack))) => {
                    self.counters.flow_recovered += 1;
                    self.congested.remove(&f.id);
                    next -= slack;
                }
                _ => {}
            }
        }
        // A rise within the band α allows below a target is pacing's noise, not a rise.
        if aggregate > next * (2.0 - alpha) {
            self.counters.aggregate_rose += 1;
            next = aggregate;
        }
        if next != sigma {
            self.quiet_since = None;
            self.set(now, next);
            return;
        }
        if self.params.keep_share && !in_force {
            return; // σ grows as TCP's flows would: no probe needed
        }
        // Quiet and settled: probe upwards when it is time (at once after a held probe:
        // its window was quiet).
        let since = *self.quiet_since.get_or_insert(now);
        let wait = self.params.probe_after.map(|a| a * self.backoff);
        let waited = wait.is_some_and(|w| held || now.duration_since(since) >= w);
        let room = self.ceiling().is_none_or(|c| sigma < c)
            && flows.iter().any(|f| !self.congested.contains_key(&f.id));
        if room && waited {
            self.counters.probes += 1;
            let rates = flows
                .iter()
                .filter(|f| judged(f))
                .filter_map(|f| Some((f.id, f.measured?)))
                .collect();
            let recent = flows
                .iter()
                .filter(|f| self.in_force(f))
                .filter_map(|f| Some((f.id, f.recent?)))
                .collect();
            self.probe = Some(Probe {
                before: sigma,
                aggregate,
                rates,
                recent,
            });
            self.quiet_since = None;
            let base = self.params.link.unwrap_or(sigma);
            let step = self.params.probe_step / self.step_div as f64;
            self.set(now, sigma + step * base);
        }
    }
}
