//! The commercial player's switching rule (Mehra, "Efficient Video Streaming using TCP",
//! Section 4, on RealNetworks' SureStream and the RealOne client): a player measures the
//! throughput of its stream, switches **down** when it falls below the rate of the rung it
//! plays, and switches **up** only after the throughput has kept headroom above that rate
//! for a while. The paper shows the behaviour, not the rule's constants: with UDP the player
//! went from 450 to 350 kbit/s under the interference and back to 450 about 10 s after it
//! ended; the Helix server sends faster than the encoded rate whenever it can (350 kbit/s
//! sent at 400), which is what lets a client see headroom at all.
//!
//! The rule here:
//! - **down**: every sample since `since` below `down_below` × rate, for at least
//!   `down_after`: go to the highest rung whose rate is at most the mean throughput of those
//!   samples (at least one rung down; the lowest if none fits);
//! - **up**: every sample since `since` at or above `up_headroom` × rate, for at least the
//!   current wait (`up_after`): one rung up;
//! - a sample in between resets both.
//!
//! Where we differ (the paper gives no rule, so these are our choices, each a config field):
//! - Up-switches are probes: the next rung's rate cannot be measured before it is asked for
//!   (the server's surplus above the rung is what shows headroom). A probe that falls back
//!   down within `up_after` is a failed probe and doubles the wait before the next one, up
//!   to `max_up_after`; a rung held for `up_after` after a probe resets the wait. Commercial
//!   and DASH players back off the same way; without it a flow whose share sits between two
//!   rungs would oscillate every `up_after`.
//! - Down goes straight to the rung the measured throughput fits, not one step: a player
//!   whose buffer drains cannot afford a step a second.
//! - No buffer model: the rule reads throughput only, as the paper's account of SureStream
//!   does.
//!
//! Counted: switches by reason, failed probes, samples ignored (empty or out of order).

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{Ladder, LadderError, Switch, SwitchPolicy, SwitchReason, ThroughputSample};

/// The rule's constants (milliseconds and fractions of the rung's rate).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ThroughputRuleConfig {
    /// Below `down_below` × rate for this long: down.
    pub down_after_ms: u64,
    /// A fraction of the rung's rate.
    pub down_below: f64,
    /// At or above `up_headroom` × rate for this long: up (the first wait, and the wait
    /// after a probe that held).
    pub up_after_ms: u64,
    /// A multiple of the rung's rate.
    pub up_headroom: f64,
    /// The longest wait after failed probes.
    pub max_up_after_ms: u64,
    /// Pre-roll: samples ending this soon after the first one began are ignored (a player
    /// buffers before it judges; the connection's slow start is no reason to switch).
    pub startup_ms: u64,
}

impl Default for ThroughputRuleConfig {
    fn default() -> Self {
        ThroughputRuleConfig {
            down_after_ms: 2_000,
            down_below: 1.0,
            up_after_ms: 10_000,
            up_headroom: 1.1,
            max_up_after_ms: 60_000,
            startup_ms: 0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ThroughputRuleError {
    #[error("{field} = {value}: allowed is {allowed}")]
    Field {
        field: &'static str,
        value: String,
        allowed: String,
    },
    #[error(transparent)]
    Ladder(#[from] LadderError),
}

impl ThroughputRuleConfig {
    pub fn check(&self) -> Result<(), ThroughputRuleError> {
        let field = |field, value: String, allowed: &str| {
            Err(ThroughputRuleError::Field {
                field,
                value,
                allowed: allowed.into(),
            })
        };
        if !(100..=60_000).contains(&self.down_after_ms) {
            return field(
                "down_after_ms",
                self.down_after_ms.to_string(),
                "100 to 60000",
            );
        }
        if !(self.down_below > 0.0 && self.down_below <= 1.5) {
            return field("down_below", self.down_below.to_string(), "above 0 to 1.5");
        }
        if !(100..=600_000).contains(&self.up_after_ms) {
            return field("up_after_ms", self.up_after_ms.to_string(), "100 to 600000");
        }
        if !(self.up_headroom >= 1.0 && self.up_headroom <= 4.0) {
            return field("up_headroom", self.up_headroom.to_string(), "1.0 to 4.0");
        }
        if !(self.up_after_ms..=3_600_000).contains(&self.max_up_after_ms) {
            return field(
                "max_up_after_ms",
                self.max_up_after_ms.to_string(),
                &format!("up_after_ms ({}) to 3600000", self.up_after_ms),
            );
        }
        if self.startup_ms > 60_000 {
            return field("startup_ms", self.startup_ms.to_string(), "0 to 60000");
        }
        Ok(())
    }
}

/// What the rule did, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ThroughputRuleCounters {
    pub down_below_rate: u64,
    pub up_headroom: u64,
    pub failed_probes: u64,
    pub ignored_empty: u64,
    pub ignored_out_of_order: u64,
    /// Samples inside the pre-roll (`startup_ms`).
    pub ignored_startup: u64,
}

/// Samples that kept one condition since `since`.
#[derive(Debug, Clone, Copy)]
struct Run {
    since: Instant,
    bytes: u64,
    secs: f64,
}

impl Run {
    fn start(s: &ThroughputSample) -> Run {
        Run {
            since: s.start(),
            bytes: 0,
            secs: 0.0,
        }
    }

    fn add(&mut self, s: &ThroughputSample) {
        self.bytes += s.bytes;
        self.secs += s.duration.as_secs_f64();
    }

    fn held(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.since)
    }

    fn mean_bps(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.secs
    }
}

#[derive(Debug, Clone)]
pub struct ThroughputRule {
    ladder: Ladder,
    cfg: ThroughputRuleConfig,
    rung: usize,
    below: Option<Run>,
    above: Option<Run>,
    /// The wait before the next up-switch (doubles after a failed probe).
    up_wait: Duration,
    /// When the last up-switch happened, until it has held for `up_after`.
    probe_at: Option<Instant>,
    last_end: Option<Instant>,
    /// When the first sample began (the pre-roll counts from there).
    first_start: Option<Instant>,
    counters: ThroughputRuleCounters,
}

impl ThroughputRule {
    /// Starts on rung `start`.
    pub fn new(
        ladder: Ladder,
        start: usize,
        cfg: ThroughputRuleConfig,
    ) -> Result<Self, ThroughputRuleError> {
        cfg.check()?;
        let rung = ladder.check(start)?;
        Ok(ThroughputRule {
            ladder,
            cfg,
            rung,
            below: None,
            above: None,
            up_wait: Duration::from_millis(cfg.up_after_ms),
            probe_at: None,
            last_end: None,
            first_start: None,
            counters: ThroughputRuleCounters::default(),
        })
    }

    pub fn counters(&self) -> ThroughputRuleCounters {
        self.counters
    }

    /// The wait before the next up-switch.
    pub fn up_wait(&self) -> Duration {
        self.up_wait
    }

    fn switch(&mut self, to: usize, reason: SwitchReason, now: Instant) -> Switch {
        let from = self.rung;
        self.rung = to;
        self.below = None;
        self.above = None;
        match reason {
            SwitchReason::BelowRate => {
                self.counters.down_below_rate += 1;
                if self.probe_at.take().is_some() {
                    self.counters.failed_probes += 1;
                    self.up_wait =
                        (self.up_wait * 2).min(Duration::from_millis(self.cfg.max_up_after_ms));
                }
            }
            SwitchReason::Headroom => {
                self.counters.up_headroom += 1;
                self.probe_at = Some(now);
            }
        }
        Switch { from, to, reason }
    }
}

impl SwitchPolicy for ThroughputRule {
    fn ladder(&self) -> &Ladder {
        &self.ladder
    }

    fn rung(&self) -> usize {
        self.rung
    }

    fn on_sample(&mut self, s: ThroughputSample) -> Option<Switch> {
        if self.last_end.is_some_and(|last| s.end <= last) {
            self.counters.ignored_out_of_order += 1;
            return None;
        }
        self.last_end = Some(s.end);
        let first = *self.first_start.get_or_insert(s.start());
        if s.end.saturating_duration_since(first) < Duration::from_millis(self.cfg.startup_ms) {
            self.counters.ignored_startup += 1;
            return None;
        }
        let Some(bps) = s.bps() else {
            self.counters.ignored_empty += 1;
            return None;
        };
        let up_after = Duration::from_millis(self.cfg.up_after_ms);
        if self
            .probe_at
            .is_some_and(|at| s.end.saturating_duration_since(at) >= up_after)
        {
            // The probed rung held: the next probe waits the base time again.
            self.probe_at = None;
            self.up_wait = up_after;
        }
        let rate = self.ladder.rate_bps(self.rung) as f64;
        if bps < self.cfg.down_below * rate {
            self.above = None;
            let run = self.below.get_or_insert_with(|| Run::start(&s));
            run.add(&s);
            let (held, mean) = (run.held(s.end), run.mean_bps());
            if held >= Duration::from_millis(self.cfg.down_after_ms) && self.rung > 0 {
                let fits = self.ladder.highest_at_most(mean).unwrap_or(0);
                let to = fits.min(self.rung - 1);
                return Some(self.switch(to, SwitchReason::BelowRate, s.end));
            }
        } else if bps >= self.cfg.up_headroom * rate {
            self.below = None;
            let run = self.above.get_or_insert_with(|| Run::start(&s));
            run.add(&s);
            if run.held(s.end) >= self.up_wait && self.rung < self.ladder.top() {
                return Some(self.switch(self.rung + 1, SwitchReason::Headroom, s.end));
            }
        } else {
            self.below = None;
            self.above = None;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream through a bottleneck in simulated time: the server sends the chosen rung at
    /// `overdrive` × its rate, the client gets at most `capacity(t)`; one sample a second.
    struct Sim {
        rule: ThroughputRule,
        t0: Instant,
        t: Duration,
        overdrive: f64,
        /// (second, rung after that second's sample)
        rungs: Vec<(u64, usize)>,
        switches: Vec<(u64, Switch)>,
    }

    impl Sim {
        fn new(start: usize) -> Sim {
            Sim {
                rule: ThroughputRule::new(Ladder::mehra(), start, Default::default()).unwrap(),
                t0: Instant::now(),
                t: Duration::ZERO,
                overdrive: 1.15,
                rungs: vec![],
                switches: vec![],
            }
        }

        fn run(&mut self, secs: u64, capacity_bps: f64) {
            for _ in 0..secs {
                self.t += Duration::from_secs(1);
                let sent = self.rule.ladder().rate_bps(self.rule.rung()) as f64 * self.overdrive;
                let got = sent.min(capacity_bps);
                let s = ThroughputSample {
                    end: self.t0 + self.t,
                    duration: Duration::from_secs(1),
                    bytes: (got / 8.0) as u64,
                };
                if let Some(sw) = self.rule.on_sample(s) {
                    self.switches.push((self.t.as_secs(), sw));
                }
                self.rungs.push((self.t.as_secs(), self.rule.rung()));
            }
        }

        fn rung_at(&self, sec: u64) -> usize {
            self.rungs.iter().find(|(t, _)| *t == sec).unwrap().1
        }
    }

    #[test]
    fn climbs_one_rung_per_sustained_headroom() {
        let mut sim = Sim::new(0);
        sim.run(40, 2e6);
        let ups: Vec<u64> = sim.switches.iter().map(|(t, _)| *t).collect();
        assert_eq!(ups, vec![10, 20, 30], "{:?}", sim.switches);
        assert_eq!(sim.rule.rung(), 3);
        assert!(sim
            .switches
            .iter()
            .all(|(_, s)| s.reason == SwitchReason::Headroom && s.to == s.from + 1));
    }

    #[test]
    fn goes_down_to_the_rung_that_fits_and_back_up_after_the_interference() {
        // Mehra's Fig. 5 in miniature: 450 kbit/s plays, the share falls to 400 kbit/s for
        // 40 s, then recovers.
        let mut sim = Sim::new(3);
        sim.run(60, 960e3);
        assert!(sim.switches.is_empty());
        sim.run(40, 400e3);
        assert_eq!(
            sim.switches[0],
            (
                62,
                Switch {
                    from: 3,
                    to: 2,
                    reason: SwitchReason::BelowRate
                }
            )
        );
        // 350 sent at 402.5: 400 is headroom of 1.14, so it probes 450 again and fails,
        // each time waiting twice as long.
        let probes: Vec<u64> = sim
            .switches
            .iter()
            .filter(|(_, s)| s.reason == SwitchReason::Headroom)
            .map(|(t, _)| *t)
            .collect();
        assert_eq!(probes, vec![72, 94], "{:?}", sim.switches);
        assert_eq!(sim.rule.counters().failed_probes, 2);
        assert_eq!(sim.rule.up_wait(), Duration::from_secs(40));
        sim.run(60, 960e3);
        // Back at 450 within the (backed-off) wait after the interference ended at 100 s,
        // and it stays.
        assert_eq!(sim.rule.rung(), 3);
        let back = sim.switches.last().unwrap();
        assert_eq!(back.1.reason, SwitchReason::Headroom);
        assert!(back.0 <= 100 + 40, "{:?}", sim.switches);
        assert_eq!(sim.rung_at(160), 3);
        assert_eq!(
            sim.rule.up_wait(),
            Duration::from_secs(10),
            "reset after it held"
        );
    }

    #[test]
    fn a_dip_shorter_than_down_after_does_not_switch() {
        let mut sim = Sim::new(3);
        sim.run(5, 960e3);
        sim.run(1, 200e3);
        sim.run(5, 960e3);
        assert!(sim.switches.is_empty(), "{:?}", sim.switches);
    }

    #[test]
    fn a_deep_drop_goes_straight_down_and_nothing_goes_below_the_lowest() {
        let mut sim = Sim::new(3);
        sim.run(5, 100e3);
        assert_eq!(
            sim.switches,
            vec![(
                2,
                Switch {
                    from: 3,
                    to: 0,
                    reason: SwitchReason::BelowRate
                }
            )]
        );
        sim.run(20, 10e3);
        assert_eq!(sim.rule.rung(), 0);
        assert_eq!(sim.switches.len(), 1);
    }

    #[test]
    fn a_share_between_rates_neither_climbs_nor_drops() {
        // 380 kbit/s at 350 (sent at 402.5): 1.086 x rate, between down_below and headroom.
        let mut sim = Sim::new(2);
        sim.run(60, 380e3);
        assert!(sim.switches.is_empty(), "{:?}", sim.switches);
    }

    #[test]
    fn empty_and_out_of_order_samples_are_ignored_and_counted() {
        let mut r = ThroughputRule::new(Ladder::mehra(), 3, Default::default()).unwrap();
        let t0 = Instant::now();
        let s = |end_s: u64, ms: u64, bytes: u64| ThroughputSample {
            end: t0 + Duration::from_secs(end_s),
            duration: Duration::from_millis(ms),
            bytes,
        };
        assert_eq!(r.on_sample(s(1, 0, 0)), None);
        assert_eq!(r.on_sample(s(2, 1000, 0)), None); // no bytes: 0 bit/s, below the rate
        assert_eq!(r.on_sample(s(2, 1000, 0)), None); // same end again
        let sw = r.on_sample(s(3, 1000, 0)).unwrap();
        assert_eq!((sw.to, sw.reason), (0, SwitchReason::BelowRate));
        let c = r.counters();
        assert_eq!((c.ignored_empty, c.ignored_out_of_order), (1, 1));
    }

    #[test]
    fn config_errors_name_field_value_and_range() {
        let bad = |cfg: ThroughputRuleConfig| {
            ThroughputRule::new(Ladder::mehra(), 0, cfg)
                .unwrap_err()
                .to_string()
        };
        let d = ThroughputRuleConfig::default();
        assert_eq!(
            bad(ThroughputRuleConfig {
                down_after_ms: 0,
                ..d
            }),
            "down_after_ms = 0: allowed is 100 to 60000"
        );
        assert_eq!(
            bad(ThroughputRuleConfig {
                up_headroom: f64::NAN,
                ..d
            }),
            "up_headroom = NaN: allowed is 1.0 to 4.0"
        );
        assert_eq!(
            bad(ThroughputRuleConfig {
                max_up_after_ms: 5000,
                ..d
            }),
            "max_up_after_ms = 5000: allowed is up_after_ms (10000) to 3600000"
        );
        assert!(ThroughputRule::new(Ladder::mehra(), 4, d)
            .unwrap_err()
            .to_string()
            .contains("rung 4"));
        let parsed: Result<ThroughputRuleConfig, _> =
            serde_json::from_str(r#"{"down_after_ms": 500, "typo": 1}"#);
        assert!(parsed.unwrap_err().to_string().contains("typo"));
    }

    #[test]
    fn the_pre_roll_ignores_a_slow_start_that_would_switch_down() {
        let cfg = ThroughputRuleConfig {
            startup_ms: 3_000,
            ..Default::default()
        };
        let mut with = Sim::new(3);
        with.rule = ThroughputRule::new(Ladder::mehra(), 3, cfg).unwrap();
        let mut without = Sim::new(3);
        for sim in [&mut with, &mut without] {
            sim.run(3, 100_000.0); // slow start: 100 kbit/s for 3 s
            sim.run(10, 2e6);
        }
        assert_eq!(without.rung_at(2), 0, "no pre-roll: down after 2 s");
        assert!(with.switches.is_empty(), "{:?}", with.switches);
        assert_eq!(with.rule.counters().ignored_startup, 2);
        assert!(ThroughputRuleConfig {
            startup_ms: 60_001,
            ..Default::default()
        }
        .check()
        .is_err());
    }
}
