//! The whole receiver-side system, sans-IO (Mehra, "Efficient Video Streaming using TCP",
//! Sec. 3.2 and Fig. 1): per flow a meter and an FCS; the σ calculation; the target rate
//! allocation. The driver (the daemon, or a program using [`Steering`](crate::Steering)) calls, in
//! order, at every control interval:
//!
//! 1. [`Bwss::add_flow`] / [`Bwss::remove_flow`] as flows come and go;
//! 2. [`Bwss::record_bytes`] with each flow's cumulative byte counter;
//! 3. [`Bwss::on_tick`]: σ rule, allocation, FCS;
//! 4. [`Bwss::budget`] per flow, applied to its reader; [`Bwss::status`] for display.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::allocation::allocate_capped;
use crate::config::{Class, Config, FlowInfo};
use crate::fcs::{Budget, Fcs};
use crate::meter::Meter;
use crate::sigma::{FlowSample, SigmaCounters, SigmaParams, SigmaRule, RECENT_DIV};

/// Identifies a flow within one [`Bwss`].
pub type FlowId = u64;

#[derive(Debug, Clone)]
struct Flow {
    info: FlowInfo,
    class: Class,
    rule: Option<String>,
    meter: Meter,
    fcs: Fcs,
}

/// The allocation state of one receiver.
#[derive(Debug, Clone)]
pub struct Bwss {
    config: Config,
    sigma: SigmaRule,
    flows: BTreeMap<FlowId, Flow>,
    next_id: FlowId,
    last_tick: Option<Instant>,
}

/// One flow in [`Status`].
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FlowStatus {
    pub id: FlowId,
    pub program: String,
    pub local: String,
    pub remote: String,
    /// The rule that classified it (`None`: the default class).
    pub rule: Option<String>,
    pub priority: i32,
    pub min_kbps: f64,
    pub weight: f64,
    /// kbit/s; `None` while unsteered (before σ is known, or observing).
    pub target_kbps: Option<f64>,
    /// kbit/s over the last window; `None` while the flow is younger than a window.
    pub measured_kbps: Option<f64>,
    pub congested: bool,
    pub bytes: u64,
}

/// Everything the daemon shows.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Status {
    /// kbit/s; `None` until the first measurement.
    pub sigma_kbps: Option<f64>,
    /// kbit/s, sum of the flows measured.
    pub aggregate_kbps: f64,
    pub flows: Vec<FlowStatus>,
    pub counters: SigmaCounters,
}

impl Bwss {
    pub fn new(config: Config) -> Self {
        let s = &config.system;
        let sigma = SigmaRule::new(SigmaParams {
            alpha: s.alpha,
            window: Duration::from_millis(s.window_ms),
            probe_after: (s.probe_after_ms > 0).then(|| Duration::from_millis(s.probe_after_ms)),
            probe_step: s.probe_step,
            link: (s.link_kbps > 0.0).then_some(s.link_kbps * 1e3),
        });
        Self {
            config,
            sigma,
            flows: BTreeMap::new(),
            next_id: 1,
            last_tick: None,
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The control interval.
    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.config.system.interval_ms)
    }

    /// A new flow, classified by the rules; steered at once when σ is known (every flow's
    /// target changes), else from the first tick that knows σ.
    pub fn add_flow(&mut self, now: Instant, info: FlowInfo) -> FlowId {
        let (class, rule) = self.config.classify(&info);
        let id = self.next_id;
        self.next_id += 1;
        let window = Duration::from_millis(self.config.system.window_ms);
        self.flows.insert(
            id,
            Flow {
                info,
                class,
                rule,
                meter: Meter::new(now, window),
                fcs: Fcs::new(),
            },
        );
        self.allocate();
        id
    }

    /// A flow ended; its share goes to the others at once.
    pub fn remove_flow(&mut self, id: FlowId) {
        self.flows.remove(&id);
        self.allocate();
    }

    /// Every flow's target from σ (Sec. 3.1); a flow in congestion of its own is held at
    /// its target when that began, so its slack reaches the others.
    fn allocate(&mut self) {
        let classes: Vec<Class> = self.flows.values().map(|f| f.class).collect();
        let caps: Vec<Option<f64>> = self.flows.keys().map(|&id| self.sigma.cap(id)).collect();
        let targets = self
            .sigma
            .sigma()
            .map(|s| allocate_capped(s, &classes, &caps));
        for (i, f) in self.flows.values_mut().enumerate() {
            f.fcs.set_target(targets.as_ref().map(|t| t[i]));
        }
    }

    /// A reading of the flow's cumulative count of bytes delivered to the application.
    pub fn record_bytes(&mut self, now: Instant, id: FlowId, bytes: u64) {
        if let Some(f) = self.flows.get_mut(&id) {
            f.meter.record(now, bytes);
        }
    }

    /// Runs the σ rule, the allocation and every FCS.
    pub fn on_tick(&mut self, now: Instant) {
        self.last_tick = Some(now);
        let recent = Duration::from_millis(self.config.system.window_ms) / RECENT_DIV;
        let samples: Vec<FlowSample> = self
            .flows
            .iter()
            .map(|(&id, f)| {
                let target = f.fcs.target().unwrap_or(0.0);
                FlowSample {
                    id,
                    target,
                    measured: f.meter.rate(now),
                    recent: f.meter.recent_rate(now, recent),
                    partial: f.meter.rate_since_start(now),
                    // The allocation gives minimums first: this much of the target is one.
                    guaranteed: target.min(f.class.min_kbps * 1e3),
                }
            })
            .collect();
        self.sigma.on_tick(now, &samples);
        self.allocate();
        for f in self.flows.values_mut() {
            if let Some(m) = f.meter.rate(now) {
                f.fcs.on_measurement(now, m);
            }
        }
    }

    /// The flow's read budget (`None`: unsteered, observing, or no such flow).
    pub fn budget(&self, id: FlowId) -> Option<Budget> {
        if self.config.system.observe {
            return None;
        }
        let f = self.flows.get(&id)?;
        let b = f.fcs.budget()?;
        // A flow held at (or below) its minimum is not clamped (see `Budget::clamp`).
        let at_min = f.fcs.target().is_some_and(|t| t <= f.class.min_kbps * 1e3);
        Some(Budget {
            clamp: !at_min,
            ..b
        })
    }

    pub fn flow_ids(&self) -> impl Iterator<Item = FlowId> + '_ {
        self.flows.keys().copied()
    }

    /// σ, the flows' targets and measured rates.
    pub fn status(&self, now: Instant) -> Status {
        let flows: Vec<FlowStatus> = self
            .flows
            .iter()
            .map(|(&id, f)| FlowStatus {
                id,
                program: f.info.program.clone(),
                local: f.info.local.to_string(),
                remote: f.info.remote.to_string(),
                rule: f.rule.clone(),
                priority: f.class.priority,
                min_kbps: f.class.min_kbps,
                weight: f.class.weight,
                target_kbps: f
                    .fcs
                    .target()
                    .filter(|_| !self.config.system.observe)
                    .map(|t| t / 1e3),
                measured_kbps: f.meter.rate(now).map(|r| r / 1e3),
                congested: self.sigma.is_congested(id),
                bytes: f.meter.total(),
            })
            .collect();
        Status {
            sigma_kbps: self.sigma.sigma().map(|s| s / 1e3),
            aggregate_kbps: flows.iter().filter_map(|f| f.measured_kbps).sum(),
            flows,
            counters: self.sigma.counters(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The paper's Fig. 6 set-up in simulated time with the lab's rules: a video that never
    /// sends more than 517.5 kbit/s (its 450 kbit/s rung at 1.15 x) and two bulk flows
    /// share a 960 kbit/s link in proportion to what each may read; a flow's rate at most
    /// doubles per 200 ms (TCP cannot jump); the interferer takes 240 kbit/s from 60 to
    /// 100 s.
    #[test]
    fn fig6_in_simulated_time_keeps_the_video_at_its_minimum_and_the_link_full() {
        let mut b = Bwss::new(fig6_rules());
        let t0 = Instant::now();
        let ids = fig6_flows(&mut b, t0);
        let app_limit = [517.5e3, f64::INFINITY, f64::INFINITY];
        let mut bytes = [0f64; 3];
        let mut rate = [0f64; 3];
        let step = 0.2;
        let (mut video_secs, mut carried, mut offered) = (vec![0.0; 150], 0.0, 0.0);
        let mut sigma = vec![];
        for k in 0..(150.0 / step) as u64 {
            let t = k as f64 * step;
            let now = t0 + Duration::from_secs_f64(t);
            let capacity = if (60.0..100.0).contains(&t) {
                720e3
            } else {
                960e3
            };
            for i in 0..3 {
                let allowed = b.budget(ids[i]).map_or(capacity, |x| x.rate * 8.0);
                rate[i] = allowed.min(app_limit[i]).min(2.0 * rate[i] + 20e3);
            }
            let total: f64 = rate.iter().sum();
            if total > capacity {
                rate.iter_mut().for_each(|r| *r *= capacity / total);
            }
            for i in 0..3 {
                bytes[i] += rate[i] * step / 8.0;
                b.record_bytes(now, ids[i], bytes[i] as u64);
            }
            b.on_tick(now);
            video_secs[t as usize] += rate[0] * step;
            if t >= 10.0 {
                carried += rate.iter().sum::<f64>().min(capacity);
                offered += capacity;
            }
            sigma.push(b.status(now).sigma_kbps.unwrap());
        }
        // The lab's "at the minimum": 517.5 less one segment a second. The onset (until a
        // 2 s window shows the shortfall and the yield has taken effect) and two failed
        // probes into the full link cost seconds: 33 of 40 here (in this model a link over
        // σ scales every flow alike; `sigma.rs` tests the lab's case, where the video alone
        // loses).
        let at_min = video_secs[60..100]
            .iter()
            .filter(|&&r| r >= 505.9e3)
            .count();
        assert!(at_min >= 32, "{at_min} of 40 s: {:?}", &video_secs[55..105]);
        let mean = video_secs[10..150].iter().sum::<f64>() / 140.0;
        assert!(mean >= 500e3, "{mean}");
        assert!(
            carried / offered >= 0.9,
            "utilization {}",
            carried / offered
        );
        // After the interference sigma climbs back to the link (less the margin kept under
        // a minimum) within 25 s (22 s today: the last probe of the interference failed,
        // and the next waits the longest backoff).
        let back = sigma[500..].iter().position(|&s| s >= 0.95 * 960.0 - 0.001);
        assert!(
            back.is_some_and(|k| k as f64 * step <= 25.0),
            "{:?}",
            &sigma[490..]
        );
    }

    /// The lab's onset (`docs/bwss.md`): the downloads read their budgets out of the
    /// backlog in their receive buffers and their windows keep their arrivals at what they
    /// read, so they lose nothing to the drop-tail queue; the video (never more than
    /// 517.5 kbit/s, its rate at most doubling per 200 ms) gets what the link has left.
    /// Returns the video's kbit/s per second and σ per tick.
    fn fig6_lab_onset(b: &mut Bwss) -> (Vec<f64>, Vec<f64>) {
        let t0 = Instant::now();
        let ids = fig6_flows(b, t0);
        let (mut bytes, mut video) = ([0f64; 3], 0f64);
        let step = 0.2;
        let (mut video_secs, mut sigma) = (vec![0.0; 100], vec![]);
        for k in 0..(100.0 / step) as u64 {
            let t = k as f64 * step;
            let now = t0 + Duration::from_secs_f64(t);
            let capacity = if (30.0..70.0).contains(&t) {
                720e3
            } else {
                960e3
            };
            let allowed = |i: usize| b.budget(ids[i]).map_or(capacity, |x| x.rate * 8.0);
            let bulk = allowed(1).min(capacity / 2.0);
            video = allowed(0)
                .min(517.5e3)
                .min(2.0 * video + 20e3)
                .min(capacity - 2.0 * bulk);
            for (i, r) in [video, bulk, bulk].into_iter().enumerate() {
                bytes[i] += r * step / 8.0;
                b.record_bytes(now, ids[i], bytes[i] as u64);
            }
            b.on_tick(now);
            video_secs[t as usize] += video * step / 1e3;
            sigma.push(b.status(now).sigma_kbps.unwrap());
        }
        (video_secs, sigma)
    }

    /// The video and the two downloads of Fig. 6.
    fn fig6_flows(b: &mut Bwss, t0: Instant) -> [FlowId; 3] {
        let flow = |p: &str, port| info(p, &format!("10.2.1.1:{port}"));
        [
            b.add_flow(t0, flow("video", 1)),
            b.add_flow(t0, flow("curl", 2)),
            b.add_flow(t0, flow("curl", 3)),
        ]
    }

    /// The lab's rules (scenarios/bwss-fig6.toml).
    fn fig6_rules() -> Config {
        Config::from_toml(
            r#"
            [system]
            link_kbps = 960
            window_ms = 2000
            probe_after_ms = 1000
            probe_step = 0.1
            [[rule]]
            program = "video"
            priority = 10
            min_kbps = 520
            weight = 0
            "#,
        )
        .unwrap()
    }

    #[test]
    fn the_video_keeps_its_minimum_through_the_onset_when_only_it_loses() {
        let mut b = Bwss::new(fig6_rules());
        let (video, sigma) = fig6_lab_onset(&mut b);
        // The onset yield: σ under what the link has left within 2 s of the onset (ticks
        // 150-160), and the video short in one second of it at most (without it, judged
        // over the whole window: 907 for 3 s, then 532, and three seconds short).
        assert!(sigma[160] <= 720.0, "{:?}", &sigma[145..175]);
        let onset_short = video[30..35].iter().filter(|&&r| r < 505.9).count();
        assert!(onset_short <= 1, "{:?}", &video[28..40]);
        assert!(b.status(Instant::now()).counters.onset_yield >= 1);
        // Later, probes into the full link cost about two seconds each in this model
        // (the lab's video kept its minimum through them): 33 of 40 today.
        let at_min = video[30..70].iter().filter(|&&r| r >= 505.9).count();
        assert!(at_min >= 31, "{at_min} of 40 s: {:?}", &video[25..75]);
    }

    #[test]
    fn a_flow_held_at_its_minimum_is_not_clamped() {
        let cfg = Config::from_toml(
            "[system]\nlink_kbps = 960\n[[rule]]\nprogram = \"video\"\npriority = 10\nmin_kbps = 520\nweight = 0\n",
        )
        .unwrap();
        let mut b = Bwss::new(cfg);
        let t0 = Instant::now();
        let video = b.add_flow(t0, info("video", "10.2.1.1:1"));
        let curl = b.add_flow(t0, info("curl", "10.2.1.1:2"));
        let (v, c) = (b.budget(video).unwrap(), b.budget(curl).unwrap());
        assert_eq!((v.rate * 8.0, c.rate * 8.0), (520e3, 440e3));
        assert!(!v.clamp && c.clamp);
    }

    fn info(program: &str, local: &str) -> FlowInfo {
        FlowInfo {
            program: program.into(),
            local: local.parse().unwrap(),
            remote: "10.1.1.1:80".parse().unwrap(),
        }
    }

    #[test]
    fn a_rule_for_an_absent_program_reserves_nothing_and_observing_steers_nothing() {
        let cfg = Config::from_toml(
            "[system]\nlink_kbps = 1000\n[[rule]]\nprogram = \"never-runs\"\npriority = 9\nmin_kbps = 900\n",
        )
        .unwrap();
        let mut b = Bwss::new(cfg);
        let t0 = Instant::now();
        let id = b.add_flow(t0, info("curl", "[::1]:4000"));
        // Steered from its first byte, with the whole link.
        assert_eq!(b.budget(id).unwrap().rate * 8.0, 1000e3);
        b.remove_flow(id);
        assert!(b.budget(id).is_none());
        // Observing: measured, never steered.
        let mut cfg = b.config().clone();
        cfg.system.observe = true;
        let mut o = Bwss::new(cfg);
        let id = o.add_flow(t0, info("curl", "10.2.1.1:4000"));
        assert!(o.budget(id).is_none());
        assert_eq!(o.status(t0).flows[0].target_kbps, None);
        assert!(b.status(t0).flows.is_empty());
    }
}
