//! The whole scenario checked: run, quick form, cross traffic, applications and goals.

use lowtide::ControllerConfig;
use lowtide_traffic::schedule::{Plan, Schedule};

use super::{
    check_name_and_topology, check_range, invalid, ApplicationKind, Scenario, ScenarioError,
    DURATION_RANGE_S, MAX_RUNS,
};

/// A scenario that passed every check, with its cross traffic expanded into plans.
#[derive(Debug, Clone)]
pub struct Checked {
    pub scenario: Scenario,
    pub forward_plan: Plan,
    pub reverse_plan: Plan,
    /// Index of the first plain-TCP variant, if there is one.
    pub baseline: Option<usize>,
}

impl Checked {
    /// The plain-TCP variant a variant's goodput is compared with: the first `unlimited`
    /// one that runs the same application.
    pub fn baseline_of(&self, variant: usize) -> Option<usize> {
        let s = &self.scenario;
        let kind = s.application_of(&s.variants[variant]);
        s.variants.iter().position(|v| {
            v.controller == ControllerConfig::Unlimited && s.application_of(v) == kind
        })
    }
}

impl Scenario {
    /// Checks every field; the error names the first bad one.
    pub fn check(self) -> Result<Checked, ScenarioError> {
        check_name_and_topology(&self.name, &self.topology)?;
        let r = &self.run;
        if r.modes.is_empty() {
            return Err(invalid(
                "run.modes",
                "[]",
                "one or both of \"side_by_side\", \"sequential\"",
            ));
        }
        let (lo, hi) = DURATION_RANGE_S;
        check_range("run.duration_s", r.duration_s, lo, hi)?;
        check_range(
            "run.measure_from_s",
            r.measure_from_s,
            0.0,
            r.duration_s - 1.0,
        )?;
        check_range(
            "run.measure_to_s",
            self.measure_to_s(),
            r.measure_from_s + 1.0,
            r.duration_s,
        )?;
        if !(1..=MAX_RUNS).contains(&r.runs) {
            return Err(invalid("run.runs", r.runs, format!("1 to {MAX_RUNS}")));
        }
        check_range("quick.time_scale", self.quick.time_scale, 0.01, 1.0)?;
        if !(1..=MAX_RUNS).contains(&self.quick.runs) {
            return Err(invalid(
                "quick.runs",
                self.quick.runs,
                format!("1 to {MAX_RUNS}"),
            ));
        }
        self.check_variants()?;
        if let Some(sw) = &self.sweep {
            self.check_sweep(sw)?;
        }
        let forward_plan = self.check_schedule(
            "forward_traffic",
            &self.forward_traffic,
            self.topology.receivers,
            "receivers",
        )?;
        let reverse_plan = self.check_schedule(
            "reverse_traffic",
            &self.reverse_traffic.schedule(),
            self.topology.senders,
            "senders",
        )?;
        if let Some(h) = self.reverse_traffic.host {
            if h >= self.topology.receivers {
                return Err(invalid(
                    "reverse_traffic.host",
                    h,
                    format!(
                        "a receiver index below topology.receivers ({})",
                        self.topology.receivers
                    ),
                ));
            }
        }
        if self.application.receiver >= self.topology.receivers {
            return Err(invalid(
                "application.receiver",
                self.application.receiver,
                format!(
                    "a receiver index below topology.receivers ({})",
                    self.topology.receivers
                ),
            ));
        }
        if self
            .variants
            .iter()
            .any(|v| self.application_of(v) == ApplicationKind::LayeredVideo)
        {
            let v = &self.application.video;
            if !(1..=30).contains(&v.window_frames) {
                return Err(invalid(
                    "application.video.window_frames",
                    v.window_frames,
                    "1 to 30 frames",
                ));
            }
            check_range("application.video.tolerance_ms", v.tolerance_ms, 1.0, 60e3)?;
            v.video(1.0)?;
        }
        if self
            .variants
            .iter()
            .any(|v| self.application_of(v) == ApplicationKind::Conference)
        {
            let c = &self.application.conference;
            check_range(
                "application.conference.rate_mbps",
                c.rate_mbps,
                0.01,
                1000.0,
            )?;
            check_range(
                "application.conference.threshold_ms",
                c.threshold_ms,
                1.0,
                600e3,
            )?;
            let most = lowtide_media::session::MAX_VIDEOS;
            if c.videos_mbps.len() > most {
                return Err(invalid(
                    "application.conference.videos_mbps",
                    format!("{} videos", c.videos_mbps.len()),
                    format!("at most {most} videos"),
                ));
            }
            for (k, &r) in c.videos_mbps.iter().enumerate() {
                check_range(
                    &format!("application.conference.videos_mbps[{k}]"),
                    r,
                    0.01,
                    1000.0,
                )?;
            }
            for conf in c.videos() {
                conf.check()
                    .map_err(|e| invalid("application.conference", "", e))?;
            }
        }
        if self
            .variants
            .iter()
            .any(|v| self.application_of(v) == ApplicationKind::BitrateLadder)
        {
            self.application
                .ladder
                .check(self.run.duration_s)
                .map_err(|(f, v, a)| invalid(f, v, a))?;
        }
        if self
            .variants
            .iter()
            .any(|v| self.application_of(v) == ApplicationKind::LiveVideo)
        {
            self.application
                .live
                .check()
                .map_err(|(f, v, a)| invalid(f, v, a))?;
        }
        for (i, v) in self.variants.iter().enumerate() {
            self.check_live_variant(i, v)?;
        }
        for (i, g) in self.goals.iter().enumerate() {
            if !self.variants.iter().any(|v| v.name == g.variant) {
                return Err(invalid(
                    format!("goal[{i}].variant"),
                    format!("{:?}", g.variant),
                    "the name of a variant of this scenario",
                ));
            }
            if g.min.is_none() && g.max.is_none() {
                return Err(invalid(
                    format!("goal[{i}]"),
                    "no bound",
                    "min, max or both",
                ));
            }
            if g.against.is_some() && g.vs_baseline.is_none() {
                return Err(invalid(
                    format!("goal[{i}].against"),
                    "without vs_baseline",
                    "vs_baseline = \"ratio\" or \"difference\" to say how to compare",
                ));
            }
            if g.vs_baseline.is_some() {
                if g.metric.is_relative() {
                    return Err(invalid(
                        format!("goal[{i}].vs_baseline"),
                        g.metric.as_str(),
                        "a metric that is not already relative to the baseline",
                    ));
                }
                if let Some(other) = &g.against {
                    if !self.variants.iter().any(|v| v.name == *other) || *other == g.variant {
                        return Err(invalid(
                            format!("goal[{i}].against"),
                            format!("{other:?}"),
                            "the name of another variant of this scenario",
                        ));
                    }
                    continue;
                }
                let v = self.variants.iter().find(|v| v.name == g.variant);
                let has_baseline = v.is_some_and(|v| {
                    v.controller != ControllerConfig::Unlimited
                        && self.variants.iter().any(|b| {
                            b.controller == ControllerConfig::Unlimited
                                && self.application_of(b) == self.application_of(v)
                        })
                });
                if !has_baseline {
                    return Err(invalid(
                        format!("goal[{i}].vs_baseline"),
                        &g.variant,
                        "a variant with a plain-TCP baseline of its application (and not that baseline)",
                    ));
                }
            }
        }
        let baseline = self
            .variants
            .iter()
            .position(|v| v.controller == ControllerConfig::Unlimited);
        Ok(Checked {
            scenario: self,
            forward_plan,
            reverse_plan,
            baseline,
        })
    }

    fn check_schedule(
        &self,
        which: &'static str,
        schedule: &Schedule,
        hosts: usize,
        side: &str,
    ) -> Result<Plan, ScenarioError> {
        let plan = schedule
            .validate()
            .map_err(|error| ScenarioError::Schedule { which, error })?;
        for f in &plan.flows {
            if f.target >= hosts {
                return Err(invalid(
                    format!("{which}.flow[{}].target", f.entry),
                    f.target,
                    format!("a host index below topology.{side} ({hosts})"),
                ));
            }
            if f.stop.as_secs_f64() > self.run.duration_s + 1e-9 {
                return Err(invalid(
                    format!("{which}.flow[{}].stop_s", f.entry),
                    f.stop.as_secs_f64(),
                    format!("at most run.duration_s ({})", self.run.duration_s),
                ));
            }
        }
        Ok(plan)
    }
}
