//! Minimum rates in force: the yields of σ for a flow short of its minimum (at the onset
//! and over the whole window) and the probes undone when they dilute it.

use std::time::Instant;

use super::{
    segment_rate, FlowSample, SigmaRule, Yield, AFTER_CONGESTION_STEP_DIV, JUDGED_SEGMENTS,
    MAX_PROBE_BACKOFF, MIN_TOLERANCE_SEGMENTS, ONSET_DRAIN, PROBE_DILUTION_SEGMENTS, RECENT_DIV,
    STARTING_SEGMENTS,
};

impl SigmaRule {
    /// A flow whose minimum is in force: it has been measured over a whole window (past
    /// slow start) and has not shown that it wants less (σ yielded for it and its rate did
    /// not rise). Only such a minimum makes σ yield or the probes cautious. Not "once it
    /// has been at its minimum": a flow that starts behind the others' queue and meets a
    /// shrinking link before its first whole window at the minimum would never get it.
    pub(super) fn in_force(&self, f: &FlowSample) -> bool {
        f.guaranteed > 0.0 && f.measured.is_some() && !self.wants_less.contains(&f.id)
    }

    /// The onset of congestion: a flow whose minimum is in force ([`Self::in_force`]) and
    /// lacks it over the recent window (window / [`RECENT_DIV`]) makes σ yield at once, to what the flows get
    /// now less the shortfall (never below the minimums), and again each recent window
    /// while it stays short and its rate does not rise: the queue that took the minimum
    /// must drain. A flow that has never been at its minimum is starting: σ yields its
    /// shortfall once. The yield is judged as any other, a whole window after its last
    /// step. True when σ changed.
    pub(super) fn onset_yield(&mut self, now: Instant, flows: &[FlowSample], sigma: f64) -> bool {
        let recent = self.params.window / RECENT_DIV;
        if self
            .changed_at
            .is_some_and(|t| now.duration_since(t) < recent)
        {
            return false; // the recent rates still hold the old targets
        }
        let per_window = segment_rate(recent);
        let tolerance = MIN_TOLERANCE_SEGMENTS * per_window;
        // The flows without a minimum get no more than their targets: they gave way. Until
        // then (their receive windows close a backlog later) a further step would only
        // measure their lag.
        let gave_way = flows
            .iter()
            .filter(|f| f.guaranteed == 0.0)
            .all(|f| f.recent.is_none_or(|r| r <= f.target + tolerance));
        let short: Vec<(&FlowSample, f64)> = flows
            .iter()
            .filter(|f| f.guaranteed >= JUDGED_SEGMENTS * per_window && self.in_force(f))
            // A starting flow was given its shortfall: it steps again only once the others
            // gave way and its rate still does not rise (the link shrank under its slow
            // start); else its slow start takes round trips, and the yield's verdict a
            // window later judges whether it took it.
            .filter(|f| self.seen_at_min.contains(&f.id) || self.yielded.is_none() || gave_way)
            .filter_map(|f| {
                let r = f.recent?;
                // A further step only while its rate does not rise (it may be recovering).
                let rising = self.yielded.is_some_and(|y| r >= y.recent + tolerance);
                (r < f.guaranteed - tolerance && !rising).then_some((f, f.guaranteed - r))
            })
            .collect();
        let Some(&(shortest, _)) = short.iter().max_by(|a, b| a.1.total_cmp(&b.1)) else {
            return false;
        };
        let floor: f64 = flows.iter().map(|f| f.guaranteed).sum();
        let getting: f64 = flows
            .iter()
            .map(|f| f.recent.or(f.measured).unwrap_or(f.partial))
            .sum();
        // The others give way: to what the flows get now (at which the others give exactly
        // the short flows' shortfall) less [`ONSET_DRAIN`] times the shortfall of the flows
        // that have been at their minimum over a whole window, so the queue that took it
        // drains. A flow that has not is starting: its shortfall is its own slow start,
        // not a queue, and a drain down to the minimums' floor starved the others for
        // seconds (the namespace test `bwss_lab`: the downloads read nothing from 3 to 8 s).
        let drain: f64 = short
            .iter()
            .filter(|s| self.reached_min.contains(&s.0.id))
            .map(|s| s.1)
            .sum();
        let to = if short.iter().all(|s| !self.seen_at_min.contains(&s.0.id)) {
            // Only starting flows are short (never at their minimum, not even over a recent
            // window): their shortfall is their slow start or their player's first rung,
            // not a sign that the link has less than σ. The others give way, from σ, by
            // what each can take now: its shortfall, but no more than it gets already
            // (slow start doubles a rate per round trip) or TCP's initial window
            // ([`STARTING_SEGMENTS`]). Yielding to what the flows get over their first
            // windows (a download's arrivals pause while the video's slow start fills the
            // queue), or by the whole shortfall of a video that reads little yet, sent σ to
            // the minimums' floor, where the held yield kept it for many probes
            // (`bwss_lab`: the downloads read nothing from 2 to 8 s, 3 of 13 runs).
            let now_takes =
                |f: &FlowSample| f.recent.unwrap_or(0.0).max(STARTING_SEGMENTS * per_window);
            sigma - short.iter().map(|s| s.1.min(now_takes(s.0))).sum::<f64>()
        } else {
            sigma.min(getting) - ONSET_DRAIN * drain
        }
        .max(floor);
        if to >= sigma - tolerance {
            return false; // the others have nothing left to give
        }
        self.counters.onset_yield += 1;
        let mut before = sigma;
        if let Some(p) = self.probe.take() {
            // The probe under way is what took the minimum: failed, the next waits longest.
            self.counters.probe_failed += 1;
            self.backoff = MAX_PROBE_BACKOFF;
            self.step_div = (self.step_div * 2).min(MAX_PROBE_BACKOFF);
            before = p.before;
        }
        let recent_rate = shortest.recent.unwrap_or(0.0);
        self.yielded = Some(match self.yielded {
            Some(y) => Yield {
                recent: recent_rate,
                reached: false,
                ..y
            },
            None => Yield {
                flow: shortest.id,
                before,
                rate: shortest.measured.unwrap_or(0.0),
                recent: recent_rate,
                reached: false,
            },
        });
        self.quiet_since = None;
        self.set(now, to);
        true
    }

    /// A probe under way that dilutes a minimum's flow (its recent rate more than
    /// [`PROBE_DILUTION_SEGMENTS`] below both its minimum and its rate when the probe
    /// began) found a full link: undone at once, a window before its verdict, and the next
    /// waits the longest backoff, as for a probe that took the minimum. True when σ changed.
    pub(super) fn probe_diluted(&mut self, now: Instant, flows: &[FlowSample]) -> bool {
        let recent = self.params.window / RECENT_DIV;
        let Some(p) = self.probe.as_ref() else {
            return false;
        };
        if self
            .changed_at
            .is_some_and(|t| now.duration_since(t) < recent)
        {
            return false; // the recent rates still hold the targets before the probe
        }
        let margin = PROBE_DILUTION_SEGMENTS * segment_rate(recent);
        let diluted = flows.iter().any(|f| {
            let (Some(before), Some(r)) = (p.recent.get(&f.id), f.recent) else {
                return false;
            };
            self.in_force(f) && r < before.min(f.guaranteed) - margin
        });
        if !diluted {
            return false;
        }
        let before = p.before;
        self.probe = None;
        self.counters.probe_failed += 1;
        self.counters.probe_backed_off += 1;
        self.backoff = MAX_PROBE_BACKOFF;
        self.step_div = (self.step_div * 2).min(MAX_PROBE_BACKOFF);
        self.quiet_since = None;
        self.set(now, before);
        true
    }

    /// The verdict on a yield a window after it (`f`: the flow it was for). True when it
    /// changed σ or waits another window: no other verdict this tick.
    pub(super) fn judge_yield(
        &mut self,
        now: Instant,
        y: Yield,
        f: &FlowSample,
        aggregate: f64,
        floor: f64,
        tolerance: f64,
    ) -> bool {
        let sigma = self.sigma.unwrap_or(0.0);
        let m = f.measured.unwrap_or(0.0);
        if m >= f.guaranteed - tolerance {
            self.counters.yield_held += 1;
            // σ sits a little below what the link has left: probe it gently (a probe that
            // took the flow's minimum is what usually made it short).
            self.protecting = true;
            self.step_div = self.step_div.max(AFTER_CONGESTION_STEP_DIV);
            self.quiet_since = None;
            return false;
        }
        let at_floor = sigma <= floor + tolerance;
        let gained = m - y.rate;
        // At the floor the others have nothing left to give: rising counts only at a pace
        // that reaches the minimum within another window. A flow that creeps up while
        // another host's flow takes most of what the others gave (the lab's "BWSS +
        // outside" start: 290 to 390 of 520 kbit/s in a window, the downloads at 0 for
        // 6 s, the other host's download at 560-660) never will.
        let rising = gained >= tolerance && (!at_floor || m + gained >= f.guaranteed - tolerance);
        // At its minimum now and then counts only for a flow that has had it over a whole
        // window: a starting flow's recent rate touches it in the sawtooth it shares with
        // another host's flow.
        let oscillating = y.reached && at_floor && self.reached_min.contains(&y.flow);
        if rising || oscillating {
            // Rising (a window growing back after losses), or at the floor and at its
            // minimum now and then (losses of its own, an oscillating window: it does not
            // want less): give it another window.
            self.yielded = Some(Yield {
                rate: m,
                recent: f.recent.unwrap_or(m),
                reached: false,
                ..y
            });
            self.changed_at = Some(now);
            return true;
        }
        if sigma > floor + tolerance {
            // Not rising yet: the first window still held the others' old targets, or the
            // yield was smaller than what the link lost.
            self.counters.min_short += 1;
            self.yielded = Some(Yield {
                rate: m,
                recent: f.recent.unwrap_or(m),
                reached: false,
                ..y
            });
            self.set(now, (sigma.min(aggregate) - (f.guaranteed - m)).max(floor));
            return true;
        }
        // The others have nothing left and it still took none of it: it wants less than its
        // minimum (an application-limited video), or what the others gave went to another
        // host's flows. Undone; the paper's per-flow rule applies to it until it reaches
        // its minimum again.
        self.counters.yield_undone += 1;
        self.wants_less.insert(y.flow);
        self.quiet_since = None;
        self.set(now, y.before);
        true
    }
}
