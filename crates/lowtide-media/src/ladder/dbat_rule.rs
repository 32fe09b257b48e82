//! DBAT's server (Hasan, Huang, Werstein, Sections 4 and 5.2): the first rung from the
//! packet-pair probe ("the highest streaming bit rate which is likely to be supported by the
//! network"), then switches on the transport's congestion signals, not on client reports,
//! so it switches early: "the streamed bit rate is chosen appropriately by the server which
//! gets feedback from the transport protocol about congestion based upon send queue
//! dynamics" (one switch over TCP in their run).
//!
//! The rule here:
//! - the first rung: the highest at most the probed bandwidth that the transport's slow start
//!   reaches within `startup_rtts` RTTs, doubling once per RTT from its initial window per
//!   probed RTT (DBAT's own slow-start plan, Section 4); without that rate, the probe alone;
//! - congestion onset: down to the highest rung that fits `down_fit` × the transport's
//!   achieved rate (the signal's rate estimate), at least one rung; that rate is also a
//!   ceiling for up-switches until a fresher capacity estimate arrives (over TCP none does:
//!   the probe's bottleneck bandwidth says nothing of the share beside other flows);
//! - a repeated onset while congested (DBAT repeats it when its queue average doubles: the
//!   last switch did not drain the queue) steps down again the same way;
//! - after the signal clears, `up_after` without a new onset and a capacity estimate (the
//!   probe, or a later [`ServerSignal::Capacity`]) of at least `up_headroom` × the next rung's
//!   rate: one rung up, as a probe; an onset within `up_after` of it doubles the wait (up to
//!   `max_up_after`), a probe that held resets it. Up-switches are checked when a client
//!   report or a capacity estimate arrives.
//!
//! Where we differ: the paper starts on the highest rung the probe allows and lets the send
//! buffer hold what slow start cannot carry yet. Every frame made before the transport
//! reaches the rung waits behind that backlog, and beside a bulk flow slow start may never
//! reach it: on the paper's path (a 0.9 s RTT with the bulk flow's queue full) TFRC starts at
//! 39 kbit/s, its share is 50-100 kbit/s, and 320 kbit/s for the five seconds until its first
//! loss queued 7 s of frames. A rung slow start reaches within one RTT keeps the start-up
//! backlog to about one RTT of the stream; the rung climbs later when the capacity allows.
//! The paper gives no rule for going up, so the capacity gate, the waits and
//! the backoff are our choices (config fields). Nor does it say which rung to go down to: a
//! rung equal to the achieved rate would never drain the backlog that made the signal (its
//! frames wait in the send buffer for as long as it lasts), so the rung must leave
//! `1 − down_fit` of the rate to drain it. Over TCP there is no capacity estimate after
//! the probe, whose bottleneck bandwidth may exceed the stream's share, so an up-switch there
//! may fail (counted). Loss and rebuffer reports are ignored (and counted): this server
//! listens to the transport.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::server_policy::{
    check_ms, rung_down, rung_for_probe, RungState, ServerPolicy, ServerPolicyError, ServerSignal,
    ServerSwitch, ServerSwitchReason,
};
use super::Ladder;

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DbatRuleConfig {
    /// No onset for this long after the last clear (or switch): one rung up, if the capacity
    /// allows.
    pub up_after_ms: u64,
    /// The longest wait after failed up-switches.
    pub max_up_after_ms: u64,
    /// The capacity estimate must be at least this multiple of the next rung's rate.
    pub up_headroom: f64,
    /// On an onset, the new rung fits this fraction of the achieved rate (the rest drains the
    /// send queue).
    pub down_fit: f64,
    /// The first rung is one the transport's slow start reaches within this many RTTs.
    pub startup_rtts: u32,
}

impl Default for DbatRuleConfig {
    fn default() -> Self {
        DbatRuleConfig {
            up_after_ms: 20_000,
            max_up_after_ms: 160_000,
            up_headroom: 1.1,
            down_fit: 0.75,
            startup_rtts: 1,
        }
    }
}

impl DbatRuleConfig {
    pub fn check(&self) -> Result<(), ServerPolicyError> {
        check_ms("dbat_rule.up_after_ms", self.up_after_ms, 100..=3_600_000)?;
        check_ms(
            "dbat_rule.max_up_after_ms",
            self.max_up_after_ms,
            self.up_after_ms..=3_600_000,
        )?;
        if !(1.0..=4.0).contains(&self.up_headroom) {
            return Err(ServerPolicyError::Field {
                field: "dbat_rule.up_headroom",
                value: self.up_headroom.to_string(),
                allowed: "1.0 to 4.0".into(),
            });
        }
        if !(0.1..=1.0).contains(&self.down_fit) {
            return Err(ServerPolicyError::Field {
                field: "dbat_rule.down_fit",
                value: self.down_fit.to_string(),
                allowed: "0.1 to 1.0".into(),
            });
        }
        if self.startup_rtts > 16 {
            return Err(ServerPolicyError::Field {
                field: "dbat_rule.startup_rtts",
                value: self.startup_rtts.to_string(),
                allowed: "0 to 16".into(),
            });
        }
        Ok(())
    }
}

/// What the rule saw, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DbatRuleCounters {
    pub onsets: u64,
    pub clears: u64,
    /// Up-switches the quiet period allowed but the capacity estimate did not.
    pub up_refused_capacity: u64,
    /// Client reports (this server does not switch on them; they only clock up-switches).
    pub reports: u64,
}

#[derive(Debug, Clone)]
pub struct DbatRule {
    s: RungState,
    cfg: DbatRuleConfig,
    congested: bool,
    capacity_bps: Option<u64>,
    /// The achieved rate at the last onset: no up-switch above it without a newer capacity.
    ceiling_bps: Option<f64>,
    counters: DbatRuleCounters,
}

impl DbatRule {
    /// Streams rung `start` until the probe says otherwise; `now` starts the clock.
    pub fn new(
        ladder: Ladder,
        start: usize,
        cfg: DbatRuleConfig,
        now: Instant,
    ) -> Result<Self, ServerPolicyError> {
        cfg.check()?;
        let ms = Duration::from_millis;
        let s = RungState::new(
            ladder,
            start,
            ms(cfg.up_after_ms),
            ms(cfg.max_up_after_ms),
            now,
        )?;
        Ok(DbatRule {
            s,
            congested: false,
            capacity_bps: None,
            ceiling_bps: None,
            counters: DbatRuleCounters::default(),
            cfg,
        })
    }

    pub fn counters(&self) -> DbatRuleCounters {
        self.counters
    }

    fn maybe_up(&mut self, now: Instant) -> Option<ServerSwitch> {
        if self.congested || self.s.rung == self.s.ladder.top() || !self.s.up.due(now) {
            return None;
        }
        let next = self.s.ladder.rate_bps(self.s.rung + 1) as f64;
        if self
            .capacity_bps
            .is_none_or(|c| (c as f64) < self.cfg.up_headroom * next)
            || self.ceiling_bps.is_some_and(|c| next > c)
        {
            self.counters.up_refused_capacity += 1;
            return None;
        }
        self.s.up.switched_up(now);
        self.s
            .switch(now, self.s.rung + 1, ServerSwitchReason::Quiet)
    }
}

impl ServerPolicy for DbatRule {
    fn state(&self) -> &RungState {
        &self.s
    }

    fn on_signal(&mut self, now: Instant, signal: &ServerSignal) -> Option<ServerSwitch> {
        if !self.s.log.in_order(now) {
            return None;
        }
        match *signal {
            ServerSignal::Probed {
                bandwidth_bps,
                ramp_start_bps,
            } => {
                if bandwidth_bps.is_some() {
                    self.capacity_bps = bandwidth_bps;
                }
                let reach = ramp_start_bps
                    .map(|r| (r as f64 * 2f64.powi(self.cfg.startup_rtts as i32)) as u64);
                let bound = match (bandwidth_bps, reach) {
                    (Some(bw), Some(reach)) => Some(bw.min(reach)),
                    (bw, _) => bw,
                };
                let to = rung_for_probe(&self.s.ladder, bound, self.s.rung);
                self.s.up.restart_quiet(now);
                self.s.switch(now, to, ServerSwitchReason::Probe)
            }
            ServerSignal::Capacity { bps } => {
                self.capacity_bps = Some(bps);
                self.ceiling_bps = None;
                self.maybe_up(now)
            }
            ServerSignal::Congestion {
                onset: true,
                rate_estimate_bps,
            } => {
                self.counters.onsets += 1;
                self.congested = true;
                self.s.up.trouble(now);
                let achieved = (rate_estimate_bps > 0).then_some(rate_estimate_bps as f64);
                if achieved.is_some() {
                    self.ceiling_bps = achieved;
                }
                let fits = achieved.map(|r| r * self.cfg.down_fit);
                let to = rung_down(&self.s.ladder, self.s.rung, fits);
                self.s.switch(now, to, ServerSwitchReason::Congestion)
            }
            ServerSignal::Congestion { onset: false, .. } => {
                self.counters.clears += 1;
                self.congested = false;
                self.s.up.restart_quiet(now);
                None
            }
            ServerSignal::Report(_) => {
                self.counters.reports += 1;
                self.maybe_up(now)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::server_policy::{hasan_ladder, ClientReport};
    use super::*;

    const TICK: ClientReport = ClientReport {
        frames_expected: 20,
        frames_received: 20,
        rebuffers: 0,
        bytes: 30_000,
        duration_us: 1_000_000,
    };

    /// A path model in simulated time, one step a second: the stream's share is `share(t)`;
    /// while the rung's rate exceeds it the send queue grows and DBAT's onset comes
    /// `onset_after` seconds later (the average's lag); below it, the clear comes after
    /// `clear_after` seconds. A capacity estimate (TFRC's `X`, about the share) every second
    /// when `capacity` is set.
    fn run(
        rule: &mut DbatRule,
        t0: Instant,
        secs: std::ops::Range<u64>,
        share: impl Fn(u64) -> u64,
        capacity: bool,
    ) {
        let (onset_after, clear_after) = (3, 4);
        let mut over_since: Option<u64> = None;
        let mut under_since: Option<u64> = None;
        for s in secs {
            let now = t0 + Duration::from_secs(s);
            let rate = rule.ladder().rate_bps(rule.rung());
            if rate > share(s) {
                under_since = None;
                let since = *over_since.get_or_insert(s);
                if s - since == onset_after && !rule.congested {
                    rule.on_signal(now, &ServerSignal::congestion(true, share(s) / 8));
                }
            } else {
                over_since = None;
                let since = *under_since.get_or_insert(s);
                if s - since == clear_after && rule.congested {
                    rule.on_signal(now, &ServerSignal::congestion(false, rate / 8));
                }
            }
            if capacity {
                rule.on_signal(now, &ServerSignal::Capacity { bps: share(s) });
            }
            rule.on_signal(now, &ServerSignal::Report(TICK));
        }
    }

    fn paper_share(s: u64) -> u64 {
        // beside the FTP flow until 70 s, then the whole 500 kbit/s
        if s < 70 {
            250_000
        } else {
            500_000
        }
    }

    /// The paper's set-up with a capacity estimate (DBAT over TFRC): 320 from the probe, one
    /// down-switch when congestion starts, to 120 (240 would fit the 250 kbit/s share but
    /// leave no rate to drain the queue), no up-probe while the share is 250 kbit/s, back to
    /// 320 once the FTP flow has gone.
    #[test]
    fn with_a_capacity_estimate_one_down_switch_and_up_only_when_the_share_allows() {
        let t0 = Instant::now();
        let mut rule = DbatRule::new(hasan_ladder(), 0, DbatRuleConfig::default(), t0).unwrap();
        rule.on_signal(
            t0,
            &ServerSignal::Probed {
                bandwidth_bps: Some(500_000),
                ramp_start_bps: None,
            },
        );
        assert_eq!(rule.rung(), 3);
        run(&mut rule, t0, 1..70, paper_share, true);
        let records: Vec<_> = rule
            .log()
            .records()
            .map(|s| (s.at_us / 1_000_000, s.from, s.to, s.reason))
            .collect();
        assert_eq!(
            records[1..],
            [(4, 3, 1, ServerSwitchReason::Congestion)],
            "{records:?}"
        );
        assert!(rule.counters().up_refused_capacity > 0);
        run(&mut rule, t0, 70..200, paper_share, true);
        // 320 × 1.1 fits 500 kbit/s; 640 does not
        assert_eq!(rule.rung(), 3);
        assert_eq!(rule.log().switch_counts(), (3, 1));
        assert_eq!(rule.failed_probes(), 0);
    }

    /// Over TCP the only capacity estimate is the probe's bottleneck bandwidth (500 kbit/s),
    /// but the achieved rate at the onset (250 kbit/s) caps the up-switches: 320 → 120 at the
    /// onset, 240 after 20 s quiet, never 320 again: one down-switch.
    #[test]
    fn without_fresh_estimates_the_onsets_rate_caps_up_switches() {
        let t0 = Instant::now();
        let mut rule = DbatRule::new(hasan_ladder(), 0, DbatRuleConfig::default(), t0).unwrap();
        rule.on_signal(
            t0,
            &ServerSignal::Probed {
                bandwidth_bps: Some(500_000),
                ramp_start_bps: None,
            },
        );
        run(&mut rule, t0, 1..120, paper_share_long, false);
        let ups: Vec<u64> = rule
            .log()
            .records()
            .filter(|s| s.reason == ServerSwitchReason::Quiet)
            .map(|s| s.at_us / 1_000_000)
            .collect();
        // onset at 4 s, clear at 9 s; 240 20 s after the clear (29 s), which holds
        assert_eq!(ups, [29], "{:?}", rule.log().records().collect::<Vec<_>>());
        assert_eq!(rule.failed_probes(), 0);
        assert_eq!(rule.log().switch_counts(), (2, 1));
        assert_eq!(rule.rung(), 2);
        assert!(rule.counters().up_refused_capacity > 0);
    }

    fn paper_share_long(_: u64) -> u64 {
        250_000
    }

    /// The paper's path: a 488 kbit/s packet pair with a 0.9 s RTT. TFRC's slow start begins
    /// at 4380 B per RTT (39 kbit/s) and reaches 78 kbit/s in one RTT: the lowest rung (no rung
    /// fits), where a 100 kbit/s share (TFRC's `X`) never lets it up to 120 (that needs 132).
    /// Linux TCP's ten 1448-byte
    /// segments per RTT (129 kbit/s) reach 257 kbit/s: 240, not the probe's 320.
    #[test]
    fn the_first_rung_is_one_slow_start_reaches_within_an_rtt() {
        let t0 = Instant::now();
        let first = |ramp_start_bps| {
            let mut rule = DbatRule::new(hasan_ladder(), 0, DbatRuleConfig::default(), t0).unwrap();
            rule.on_signal(
                t0,
                &ServerSignal::Probed {
                    bandwidth_bps: Some(488_000),
                    ramp_start_bps,
                },
            );
            rule
        };
        assert_eq!(first(Some(38_933)).rung(), 0);
        assert_eq!(first(Some(128_711)).rung(), 2);
        assert_eq!(first(None).rung(), 3);
        let mut rule = first(Some(38_933));
        run(&mut rule, t0, 1..90, |_| 100_000, true);
        assert_eq!(rule.log().switch_counts(), (0, 0));
        assert!(rule.counters().up_refused_capacity > 0);
        // two RTTs: 156 kbit/s, 120
        let cfg = DbatRuleConfig {
            startup_rtts: 2,
            ..Default::default()
        };
        let mut rule = DbatRule::new(hasan_ladder(), 0, cfg, t0).unwrap();
        rule.on_signal(
            t0,
            &ServerSignal::Probed {
                bandwidth_bps: Some(488_000),
                ramp_start_bps: Some(38_933),
            },
        );
        assert_eq!(rule.rung(), 1);
        let e = DbatRuleConfig {
            startup_rtts: 17,
            ..Default::default()
        }
        .check()
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "dbat_rule.startup_rtts = 17: allowed is 0 to 16"
        );
    }

    #[test]
    fn reports_do_not_switch_and_config_errors_name_the_field() {
        let t0 = Instant::now();
        let mut rule = DbatRule::new(hasan_ladder(), 2, DbatRuleConfig::default(), t0).unwrap();
        let lossy = ClientReport {
            frames_received: 0,
            rebuffers: 3,
            ..TICK
        };
        for s in 1..10 {
            assert_eq!(
                rule.on_signal(t0 + Duration::from_secs(s), &ServerSignal::Report(lossy)),
                None
            );
        }
        assert_eq!(rule.counters().reports, 9);
        // a probe without an estimate keeps the rung; an onset without a rate goes one down
        assert_eq!(
            rule.on_signal(
                t0 + Duration::from_secs(10),
                &ServerSignal::Probed {
                    bandwidth_bps: None,
                    ramp_start_bps: Some(100_000),
                }
            ),
            None
        );
        let sw = rule
            .on_signal(
                t0 + Duration::from_secs(11),
                &ServerSignal::congestion(true, 0),
            )
            .unwrap();
        assert_eq!((sw.from, sw.to), (2, 1));
        let e = DbatRule::new(
            hasan_ladder(),
            0,
            DbatRuleConfig {
                up_headroom: 0.5,
                ..Default::default()
            },
            t0,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "dbat_rule.up_headroom = 0.5: allowed is 1.0 to 4.0"
        );
    }
}
