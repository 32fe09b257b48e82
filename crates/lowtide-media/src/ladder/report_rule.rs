//! The paper's baseline server (Hasan, Huang, Werstein, Section 5, after the Goddard streaming
//! server modelled on RealNetworks and Windows Media): it probes at session start and picks
//! the highest rung that fits, then "reselects the streaming bit rate in response to packet
//! loss or rebuffering events" that the client reports; over a transport with a send buffer
//! the server learns of the buffer's drops only from these reports (Section 5.1).
//!
//! The rule here:
//! - a report with a rebuffer, or with a frame loss above `loss_threshold`: down to the
//!   highest rung the reported receive rate fits, at least one rung;
//! - reports without trouble for `up_after`: one rung up, as a probe; trouble within
//!   `up_after` of it doubles the wait (up to `max_up_after`), a probe that held resets it.
//!
//! Where we differ (the paper gives no constants): the threshold, the waits and the backoff
//! are our choices, each a config field; down goes straight to the rung the receive rate
//! fits. DBAT's congestion signals are ignored (and counted): this server has none.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::server_policy::{
    check_ms, rung_down, rung_for_probe, RungState, ServerPolicy, ServerPolicyError, ServerSignal,
    ServerSwitch, ServerSwitchReason,
};
use super::Ladder;

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReportRuleConfig {
    /// A report losing more than this fraction of frames: down.
    pub loss_threshold: f64,
    /// Reports without trouble for this long: one rung up.
    pub up_after_ms: u64,
    /// The longest wait after failed up-switches.
    pub max_up_after_ms: u64,
}

impl Default for ReportRuleConfig {
    fn default() -> Self {
        ReportRuleConfig {
            loss_threshold: 0.05,
            up_after_ms: 10_000,
            max_up_after_ms: 80_000,
        }
    }
}

impl ReportRuleConfig {
    pub fn check(&self) -> Result<(), ServerPolicyError> {
        if !(self.loss_threshold >= 0.0 && self.loss_threshold < 1.0) {
            return Err(ServerPolicyError::Field {
                field: "report_rule.loss_threshold",
                value: self.loss_threshold.to_string(),
                allowed: "0 to below 1".into(),
            });
        }
        check_ms("report_rule.up_after_ms", self.up_after_ms, 100..=3_600_000)?;
        check_ms(
            "report_rule.max_up_after_ms",
            self.max_up_after_ms,
            self.up_after_ms..=3_600_000,
        )
    }
}

/// What the rule saw, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ReportRuleCounters {
    pub reports: u64,
    pub reports_with_loss: u64,
    pub reports_with_rebuffer: u64,
    /// Reports with no frames expected and no rebuffer: no data.
    pub reports_without_data: u64,
    /// DBAT and capacity signals (this server does not use them).
    pub ignored_transport_signals: u64,
}

#[derive(Debug, Clone)]
pub struct ReportRule {
    s: RungState,
    cfg: ReportRuleConfig,
    counters: ReportRuleCounters,
}

impl ReportRule {
    /// Streams rung `start` until the probe says otherwise; `now` starts the clock.
    pub fn new(
        ladder: Ladder,
        start: usize,
        cfg: ReportRuleConfig,
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
        Ok(ReportRule {
            s,
            counters: ReportRuleCounters::default(),
            cfg,
        })
    }

    pub fn counters(&self) -> ReportRuleCounters {
        self.counters
    }
}

impl ServerPolicy for ReportRule {
    fn state(&self) -> &RungState {
        &self.s
    }

    fn on_signal(&mut self, now: Instant, signal: &ServerSignal) -> Option<ServerSwitch> {
        if !self.s.log.in_order(now) {
            return None;
        }
        let r = match *signal {
            ServerSignal::Probed { bandwidth_bps, .. } => {
                let to = rung_for_probe(&self.s.ladder, bandwidth_bps, self.s.rung);
                self.s.up.restart_quiet(now);
                return self.s.switch(now, to, ServerSwitchReason::Probe);
            }
            ServerSignal::Congestion { .. }
            | ServerSignal::Capacity { .. }
            | ServerSignal::Queue { .. } => {
                self.counters.ignored_transport_signals += 1;
                return None;
            }
            ServerSignal::Report(r) => r,
        };
        self.counters.reports += 1;
        let loss = r.loss();
        let trouble = if r.rebuffers > 0 {
            self.counters.reports_with_rebuffer += 1;
            Some(ServerSwitchReason::Rebuffer)
        } else if loss.is_some_and(|l| l > self.cfg.loss_threshold) {
            self.counters.reports_with_loss += 1;
            Some(ServerSwitchReason::Loss)
        } else {
            None
        };
        if let Some(reason) = trouble {
            self.s.up.trouble(now);
            let to = rung_down(&self.s.ladder, self.s.rung, r.bps());
            return self.s.switch(now, to, reason);
        }
        if loss.is_none() {
            self.counters.reports_without_data += 1;
            return None;
        }
        if self.s.rung < self.s.ladder.top() && self.s.up.due(now) {
            self.s.up.switched_up(now);
            return self
                .s
                .switch(now, self.s.rung + 1, ServerSwitchReason::Quiet);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::super::server_policy::{hasan_ladder, ClientReport};
    use super::*;

    /// One report per second: frames sent at the rung's rate (20 frames a second), the path
    /// delivers at most `share_bps`; frames beyond it are lost (the send buffer drops them).
    fn report(rate_bps: u64, share_bps: f64, rebuffers: u64) -> ClientReport {
        let got = (rate_bps as f64).min(share_bps);
        ClientReport {
            frames_expected: 20,
            frames_received: (20.0 * got / rate_bps as f64).round() as u64,
            rebuffers,
            bytes: (got / 8.0) as u64,
            duration_us: 1_000_000,
        }
    }

    fn run(
        rule: &mut ReportRule,
        t0: Instant,
        secs: std::ops::Range<u64>,
        share: impl Fn(u64) -> f64,
    ) {
        for s in secs {
            let rate = rule.ladder().rate_bps(rule.rung());
            let now = t0 + Duration::from_secs(s);
            rule.on_signal(now, &ServerSignal::Report(report(rate, share(s), 0)));
        }
    }

    /// The paper's set-up in miniature: the probe sees the 500 kbit/s bottleneck and picks
    /// 320 kbit/s; the stream's share beside the FTP flow is 250 kbit/s until the FTP flow
    /// stops at 70 s.
    #[test]
    fn loss_reports_move_down_to_the_share_and_failed_probes_back_off() {
        let t0 = Instant::now();
        let mut rule = ReportRule::new(hasan_ladder(), 0, ReportRuleConfig::default(), t0).unwrap();
        let sw = rule.on_signal(
            t0,
            &ServerSignal::Probed {
                bandwidth_bps: Some(500_000),
                ramp_start_bps: None,
            },
        );
        assert_eq!(
            sw.map(|s| (s.to, s.reason)),
            Some((3, ServerSwitchReason::Probe))
        );
        run(&mut rule, t0, 1..70, |_| 250_000.0);
        let records: Vec<_> = rule
            .log()
            .records()
            .map(|s| (s.at_us / 1_000_000, s.to, s.reason))
            .collect();
        // 320 loses 4 of 20 frames: down to 240 (what 250 kbit/s fits) at the first report;
        // a probe of 320 after 10 quiet seconds fails at its first report, the next comes
        // after 20, the one after would wait 40 (73 s)
        let want = [
            (0, 3, ServerSwitchReason::Probe),
            (1, 2, ServerSwitchReason::Loss),
            (11, 3, ServerSwitchReason::Quiet),
            (12, 2, ServerSwitchReason::Loss),
            (32, 3, ServerSwitchReason::Quiet),
            (33, 2, ServerSwitchReason::Loss),
        ];
        assert_eq!(records, want);
        assert_eq!(rule.failed_probes(), 2);
        // the FTP flow stops: the probe at 73 s holds, 640 follows 10 s later
        run(&mut rule, t0, 70..200, |_| 2_000_000.0);
        assert_eq!(rule.rung(), 4);
        let last: Vec<_> = rule
            .log()
            .records()
            .skip(6)
            .map(|s| (s.at_us / 1_000_000, s.to))
            .collect();
        assert_eq!(last, [(73, 3), (83, 4)]);
        let (all, down) = rule.log().switch_counts();
        assert_eq!(
            (all, down),
            (7, 3),
            "{:?}",
            rule.log().records().collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_rebuffer_moves_down_and_reports_without_data_or_transport_signals_change_nothing() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut rule = ReportRule::new(hasan_ladder(), 4, ReportRuleConfig::default(), t0).unwrap();
        // no loss, but the playout buffer ran empty; the receive rate (130 kbit/s) fits 120
        let mut r = report(640_000, 640_000.0, 1);
        r.bytes = 130_000 / 8;
        let sw = rule.on_signal(t0 + s(1), &ServerSignal::Report(r)).unwrap();
        assert_eq!(
            (sw.from, sw.to, sw.reason),
            (4, 1, ServerSwitchReason::Rebuffer)
        );
        let empty = ClientReport {
            frames_expected: 0,
            frames_received: 0,
            rebuffers: 0,
            bytes: 0,
            duration_us: 1_000_000,
        };
        for i in 2..40 {
            assert_eq!(
                rule.on_signal(t0 + s(i), &ServerSignal::Report(empty)),
                None
            );
        }
        assert_eq!(
            rule.on_signal(t0 + s(41), &ServerSignal::congestion(true, 1)),
            None
        );
        assert_eq!(
            rule.on_signal(t0 + s(41), &ServerSignal::Capacity { bps: 1 }),
            None
        );
        // out of order
        assert_eq!(
            rule.on_signal(t0, &ServerSignal::Report(report(120_000, 0.0, 5))),
            None
        );
        let c = rule.counters();
        assert_eq!(
            (c.reports_without_data, c.ignored_transport_signals),
            (38, 2)
        );
        assert_eq!(rule.log().out_of_order, 1);
        assert_eq!(rule.rung(), 1);
    }

    #[test]
    fn config_errors_name_the_field() {
        let t0 = Instant::now();
        let bad = |cfg| {
            ReportRule::new(hasan_ladder(), 0, cfg, t0)
                .unwrap_err()
                .to_string()
        };
        let e = bad(ReportRuleConfig {
            loss_threshold: 1.0,
            ..Default::default()
        });
        assert_eq!(e, "report_rule.loss_threshold = 1: allowed is 0 to below 1");
        let e = bad(ReportRuleConfig {
            max_up_after_ms: 5_000,
            ..Default::default()
        });
        assert_eq!(
            e,
            "report_rule.max_up_after_ms = 5000: allowed is 10000 to 3600000"
        );
        let e = ReportRule::new(hasan_ladder(), 5, Default::default(), t0).unwrap_err();
        assert_eq!(e.to_string(), "rung 5: the ladder has 5 rungs (0 to 4)");
    }
}
