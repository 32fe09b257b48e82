//! The whole receiver-side system, sans-IO (Mehra, "Efficient Video Streaming using TCP",
//! Sec. 3.2 and Fig. 1): per flow a meter and an FCS; the σ calculation; the target rate
//! allocation. The driver (the daemon, or a program using [`Steering`](crate::Steering)) calls, in
//! order, at every control interval:
//!
//! 1. [`Bwss::add_flow`] / [`Bwss::remove_flow`] as flows come and go;
//! 2. [`Bwss::record_bytes`] with each flow's cumulative count of bytes read, and
//!    [`Bwss::record_arrivals`] with its count of bytes arrived when the reader reports it;
//! 3. [`Bwss::on_tick`]: σ rule, allocation, FCS;
//! 4. [`Bwss::budget`] per flow, applied to its reader; [`Bwss::status`] for display.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::allocation::allocate_capped;
use crate::config::{Class, Config, FlowInfo};
use crate::fcs::{Budget, Fcs, SHARE_DEPTH_SECS};
use crate::meter::Meter;
use crate::sigma::{FlowSample, SigmaCounters, SigmaParams, SigmaRule, RECENT_DIV};

/// Identifies a flow within one [`Bwss`].
pub type FlowId = u64;

#[derive(Debug, Clone)]
struct Flow {
    info: FlowInfo,
    class: Class,
    rule: Option<String>,
    /// Bytes read by the application: what the FCS paces.
    meter: Meter,
    /// Bytes arrived (`tcpi_bytes_received`), `None` until the reader reports them: what
    /// the σ rule judges a flow without a minimum by, since its reads lag the link by
    /// whatever waits in its receive buffer.
    arrivals: Option<Meter>,
    /// The receiver's round-trip estimate (`tcpi_rcv_rtt`) when the reader reports it.
    rtt: Option<Duration>,
    fcs: Fcs,
}

impl Flow {
    /// What of its target the allocation gave as its minimum, bit/s (0: none).
    fn guaranteed(&self) -> f64 {
        self.fcs
            .target()
            .unwrap_or(0.0)
            .min(self.class.min_kbps * 1e3)
    }
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
    /// Bytes read by the application.
    pub bytes: u64,
    /// kbit/s arrived over the last window (`tcpi_bytes_received`); `None` while unknown or
    /// the flow is younger than a window.
    #[serde(default)]
    pub arrived_kbps: Option<f64>,
    /// Bytes arrived; `None` until the reader reports them.
    #[serde(default)]
    pub bytes_arrived: Option<u64>,
    /// The receiver's round-trip estimate (`tcpi_rcv_rtt`), ms; `None` until reported.
    #[serde(default)]
    pub rtt_ms: Option<f64>,
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
            keep_share: s.keep_share,
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
                arrivals: None,
                rtt: None,
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

    /// A reading of the flow's cumulative count of bytes arrived (`tcpi_bytes_received`),
    /// taken at `at`: from the first, the σ rule judges a flow without a minimum rate by
    /// its arrivals instead of its reads.
    pub fn record_arrivals(&mut self, at: Instant, id: FlowId, bytes: u64) {
        let window = Duration::from_millis(self.config.system.window_ms);
        if let Some(f) = self.flows.get_mut(&id) {
            // Counted from the first reading: what arrived before registration is not in
            // this flow's rate.
            let m = f.arrivals.get_or_insert_with(|| Meter::new(at, window));
            m.record(at, bytes);
        }
    }

    /// The flow's round-trip estimate as its reader last reported it (`tcpi_rcv_rtt`):
    /// what `keep_share` grows σ at.
    pub fn record_rtt(&mut self, id: FlowId, rtt: Duration) {
        if let Some(f) = self.flows.get_mut(&id) {
            f.rtt = Some(rtt);
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
                // With `judge_arrivals`, a flow without a minimum is judged by what the
                // link delivered when known (its reads lag it by the backlog); a flow with
                // a minimum always by what its application gets (the minimum is promised
                // to it; an unclamped video's reads are smooth, its arrivals burst with
                // loss recovery: 407-637 kbit/s a second in the lab around a 520 read
                // rate, and the onset yield fired on them).
                let by_arrivals = self.config.system.judge_arrivals && f.class.min_kbps == 0.0;
                let m = f
                    .arrivals
                    .as_ref()
                    .filter(|_| by_arrivals)
                    .unwrap_or(&f.meter);
                FlowSample {
                    id,
                    target,
                    measured: m.rate(now),
                    recent: m.recent_rate(now, recent),
                    partial: f.meter.rate_since_start(now),
                    // The allocation gives minimums first: this much of the target is one.
                    guaranteed: f.guaranteed(),
                    min: f.class.min_kbps * 1e3,
                    rtt: f.rtt,
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
        // A flow held at (or below) its minimum is not clamped (see `Budget::clamp_rtts`).
        let at_min = f.fcs.target().is_some_and(|t| t <= f.class.min_kbps * 1e3);
        let keeping_share = self.config.system.keep_share && !self.minimum_promised();
        Some(Budget {
            clamp_rtts: if at_min || keeping_share {
                0.0
            } else {
                self.config.system.clamp_rtts
            },
            depth: if keeping_share && f.fcs.under() {
                b.depth.max(b.rate * SHARE_DEPTH_SECS)
            } else {
                b.depth
            },
            ..b
        })
    }

    /// Some flow is given a minimum rate (its target has one) and has not shown that it
    /// wants less. Only then, when `keep_share` is on, are the others' windows clamped and
    /// their reads paced from a bucket of [`DEPTH_SECS`](crate::fcs::DEPTH_SECS): the
    /// clamp and the shallow bucket keep their arrivals from overflowing the queue the
    /// minimum's flow shares, and with no minimum to protect they only give the host's
    /// share away. A clamp of two estimated round trips holds a flow near its target
    /// whether or not the link would give it more, and a burst waiting for the bucket
    /// delays its ACKs ([`SHARE_DEPTH_SECS`], for a flow under its target); beside another
    /// host's TCP flow, that flow took the difference (the lab: 1.31-1.62 × its plain-TCP
    /// rate pooled over three trials, `docs/bwss.md`).
    fn minimum_promised(&self) -> bool {
        self.flows
            .iter()
            .any(|(&id, f)| f.guaranteed() > 0.0 && !self.sigma.wants_less(id))
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
                arrived_kbps: f
                    .arrivals
                    .as_ref()
                    .and_then(|m| m.rate(now))
                    .map(|r| r / 1e3),
                bytes_arrived: f.arrivals.as_ref().map(Meter::total),
                rtt_ms: f.rtt.map(|r| r.as_secs_f64() * 1e3),
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

    /// How the simulated access link of Fig. 6 serves the video (never more than
    /// 517.5 kbit/s, its 450 kbit/s rung at 1.15 x; its rate at most doubles per 200 ms:
    /// TCP cannot jump) and the two downloads.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Link {
        /// In proportion to what each flow may read (the downloads' rates also at most
        /// double per 200 ms); arrivals are reads.
        Proportional,
        /// The lab's onset in one set of runs (docs/notes/bwss.md): the downloads' windows keep their
        /// arrivals at what they read, so they lose nothing to the drop-tail queue; the
        /// video gets what the link leaves. Arrivals are reads.
        VideoLoses,
        /// The lab's onset in a later run (docs/notes/bwss.md): the video keeps its
        /// rate and the losses fall on the downloads, which go on reading their budgets out of the
        /// [`BACKLOG`] waiting in their receive buffers until it is gone (while it is not
        /// full their windows let twice their budget arrive). The daemon hears their
        /// arrivals too.
        DownloadsLose,
        /// A download of another host through the same bottleneck, unsteered, with the
        /// video wanting `video_kbps` (69: the lab's player on its 60 kbit/s rung, where
        /// it sat in both "+ outside" variants): TCP's sharing, modelled as max-min fair
        /// among the four flows (equal round trips), each flow's demand what its budget
        /// allows, at most doubling per 200 ms. Arrivals are reads.
        Outside { video_kbps: f64 },
    }

    /// Max-min fair shares of `cap` for the `demands` (bit/s): TCP flows of equal round
    /// trips through one bottleneck.
    fn max_min(cap: f64, demands: &[f64]) -> Vec<f64> {
        let mut got = vec![0.0; demands.len()];
        let mut open: Vec<usize> = (0..demands.len()).collect();
        let mut left = cap;
        while !open.is_empty() {
            let fair = left / open.len() as f64;
            let (sated, hungry): (Vec<usize>, Vec<usize>) =
                open.iter().partition(|&&i| demands[i] <= fair);
            if sated.is_empty() {
                hungry.iter().for_each(|&i| got[i] = fair);
                break;
            }
            for &i in &sated {
                got[i] = demands[i];
                left -= demands[i];
            }
            open = hungry;
        }
        got
    }

    /// What waits unread in a steered download's receive buffer, bytes (about 5 s of a
    /// 100 kbit/s shortfall: the lab's reads hid the onset for 6 s).
    const BACKLOG: f64 = 64e3;

    /// One simulated run.
    struct Trace {
        /// The video's kbit/s per second.
        video: Vec<f64>,
        /// σ in kbit/s per 200 ms tick.
        sigma: Vec<f64>,
        /// What the link carried over what it offered, from 10 s.
        utilization: f64,
        /// The other host's download, mean kbit/s from 10 s ([`Link::Outside`]).
        outside_kbps: f64,
    }

    impl Trace {
        /// A run of `secs` seconds, nothing measured yet.
        fn new(secs: usize) -> Self {
            Trace {
                video: vec![0.0; secs],
                sigma: vec![],
                utilization: 0.0,
                outside_kbps: 0.0,
            }
        }
    }

    /// The paper's Fig. 6 set-up in simulated time with the lab's rules for `secs`
    /// seconds, the link's capacity in bit/s at each second given by `capacity`.
    fn fig6_run(b: &mut Bwss, secs: usize, capacity: impl Fn(f64) -> f64, link: Link) -> Trace {
        let t0 = Instant::now();
        let ids = fig6_flows(b, t0);
        let step = 0.2;
        let (mut read, mut arrived) = ([0f64; 3], [0f64; 3]);
        let mut rate = [0f64; 3];
        let (mut outside, mut outside_sum) = (0.0, 0.0);
        let mut backlog = [0.0, BACKLOG, BACKLOG];
        let (mut carried, mut offered) = (0.0, 0.0);
        let mut trace = Trace::new(secs);
        for k in 0..(secs as f64 / step) as u64 {
            let t = k as f64 * step;
            let now = t0 + Duration::from_secs_f64(t);
            let cap = capacity(t);
            let allowed = |i: usize| b.budget(ids[i]).map_or(cap, |x| x.rate * 8.0);
            let wants = match link {
                Link::Outside { video_kbps } => video_kbps * 1e3,
                _ => 517.5e3,
            };
            let video = allowed(0).min(wants).min(2.0 * rate[0] + 20e3);
            // Bit/s read and arrived per flow.
            let mut arrive = [0f64; 3];
            match link {
                Link::Proportional => {
                    rate[0] = video;
                    for (i, r) in rate.iter_mut().enumerate().skip(1) {
                        *r = allowed(i).min(2.0 * *r + 20e3);
                    }
                    let total: f64 = rate.iter().sum();
                    if total > cap {
                        rate.iter_mut().for_each(|r| *r *= cap / total);
                    }
                    arrive = rate;
                }
                Link::VideoLoses => {
                    let bulk = allowed(1).min(cap / 2.0);
                    rate = [video.min(cap - 2.0 * bulk), bulk, bulk];
                    arrive = rate;
                }
                Link::Outside { .. } => {
                    let grow = |r: f64| 2.0 * r + 20e3;
                    let want = [
                        video,
                        allowed(1).min(grow(rate[1])),
                        allowed(2).min(grow(rate[2])),
                    ];
                    let got = max_min(cap, &[want[0], want[1], want[2], grow(outside)]);
                    rate = [got[0], got[1], got[2]];
                    outside = got[3];
                    arrive = rate;
                }
                Link::DownloadsLose => {
                    rate[0] = video.min(cap);
                    arrive[0] = rate[0];
                    for i in 1..3 {
                        let window = if backlog[i] >= BACKLOG { 1.0 } else { 2.0 };
                        arrive[i] = ((cap - rate[0]) / 2.0).min(window * allowed(i));
                        rate[i] = allowed(i).min(backlog[i] * 8.0 / step + arrive[i]);
                        backlog[i] =
                            (backlog[i] + (arrive[i] - rate[i]) * step / 8.0).clamp(0.0, BACKLOG);
                    }
                }
            }
            for i in 0..3 {
                read[i] += rate[i] * step / 8.0;
                arrived[i] += arrive[i] * step / 8.0;
                b.record_bytes(now, ids[i], read[i] as u64);
                if link == Link::DownloadsLose {
                    b.record_arrivals(now, ids[i], arrived[i] as u64);
                }
            }
            b.on_tick(now);
            trace.video[t as usize] += rate[0] * step / 1e3;
            if t >= 10.0 {
                outside_sum += outside * step;
                carried += arrive.iter().sum::<f64>().min(cap);
                offered += cap;
            }
            trace.sigma.push(b.status(now).sigma_kbps.unwrap());
        }
        trace.utilization = carried / offered;
        trace.outside_kbps = outside_sum / (secs as f64 - 10.0) / 1e3;
        trace
    }

    /// 960 kbit/s, and 720 while the interferer takes 240 in `during`.
    fn interfered(during: std::ops::Range<f64>) -> impl Fn(f64) -> f64 {
        move |t| if during.contains(&t) { 720e3 } else { 960e3 }
    }

    /// The lab's "at the minimum": 517.5 kbit/s less one segment a second.
    const AT_MIN_KBPS: f64 = 505.9;

    fn seconds_at_min(video: &[f64]) -> usize {
        video.iter().filter(|&&r| r >= AT_MIN_KBPS).count()
    }

    /// The interferer takes 240 kbit/s from 60 to 100 s.
    #[test]
    fn fig6_in_simulated_time_keeps_the_video_at_its_minimum_and_the_link_full() {
        let mut b = Bwss::new(fig6_rules());
        let run = fig6_run(&mut b, 150, interfered(60.0..100.0), Link::Proportional);
        // The onset (until a 2 s window shows the shortfall and the yield has taken
        // effect) and two failed probes into the full link cost seconds: 33 of 40 here (in
        // this model a link over σ scales every flow alike; the onset tests below have the
        // lab's cases, where one side alone loses).
        let at_min = seconds_at_min(&run.video[60..100]);
        assert!(at_min >= 32, "{at_min} of 40 s: {:?}", &run.video[55..105]);
        let mean = run.video[10..150].iter().sum::<f64>() / 140.0;
        assert!(mean >= 500.0, "{mean}");
        assert!(run.utilization >= 0.9, "utilization {}", run.utilization);
        // After the interference sigma climbs back to the link (less the margin kept under
        // a minimum) within 25 s (22 s today: the last probe of the interference failed,
        // and the next waits the longest backoff).
        let back = run.sigma[500..]
            .iter()
            .position(|&s| s >= 0.95 * 960.0 - 0.001);
        assert!(
            back.is_some_and(|k| k as f64 * 0.2 <= 25.0),
            "{:?}",
            &run.sigma[490..]
        );
    }

    #[test]
    fn the_video_keeps_its_minimum_through_the_onset_when_only_it_loses() {
        let mut b = Bwss::new(fig6_rules());
        let run = fig6_run(&mut b, 100, interfered(30.0..70.0), Link::VideoLoses);
        let (video, sigma) = (&run.video, &run.sigma);
        // The onset yield: σ under what the link has left within 2 s of the onset (ticks
        // 150-160), and the video short in one of the onset's two seconds at most (without
        // it, judged over the whole window: 907 for 3 s, then 532, and three seconds
        // short; before the drain the onset second read 445, now 480). The drain's yield
        // holds sooner, so the gentle probes start sooner: in this model, where a probe
        // takes its step straight out of the video, the first costs seconds 33-34.
        assert!(sigma[160] <= 720.0, "{:?}", &sigma[145..175]);
        let onset_short = video[30..32].iter().filter(|&&r| r < AT_MIN_KBPS).count();
        assert!(onset_short <= 1, "{:?}", &video[28..40]);
        assert!(b.status(Instant::now()).counters.onset_yield >= 1);
        // Later, probes into the full link cost about two seconds each in this model
        // (the lab's video kept its minimum through them): 33 of 40 today.
        let at_min = seconds_at_min(&video[30..70]);
        assert!(at_min >= 31, "{at_min} of 40 s: {:?}", &video[25..75]);
    }

    /// Judged by their reads, downloads that lose at the onset look carried for as long as
    /// their receive buffers' backlog lasts, and σ stays above what the link has left (the
    /// lab: σ 912 for 6 s after the onset, `docs/bwss.md`); judged by their arrivals, σ
    /// falls to it about a window after the onset.
    #[test]
    fn judged_by_arrivals_sigma_follows_the_link_at_the_onset_not_the_backlog() {
        let onset = |judge_arrivals| {
            let mut rules = fig6_rules();
            rules.system.judge_arrivals = judge_arrivals;
            let mut b = Bwss::new(rules);
            let run = fig6_run(&mut b, 60, interfered(30.0..60.0), Link::DownloadsLose);
            // The first tick (200 ms) after the onset at which σ ≤ the 720 kbit/s left
            // (within rounding).
            let under = run.sigma[150..].iter().position(|&s| s <= 721.0);
            (under.map(|k| k as f64 * 0.2), run)
        };
        let (by_arrivals, run) = onset(true);
        assert!(
            by_arrivals.is_some_and(|s| s <= 3.0), // 2.4 s today
            "{by_arrivals:?}: {:?}",
            &run.sigma[145..180]
        );
        // It stays there: no probe the link cannot carry is kept.
        let over = run.sigma[175..].iter().filter(|&&s| s > 760.0).count();
        assert!(over <= 10, "{over} ticks over 760: {:?}", &run.sigma[170..]);
        assert_eq!(seconds_at_min(&run.video[30..60]), 30);
        let (by_reads, run) = onset(false);
        assert!(
            by_reads.is_none_or(|s| s >= 5.0), // 7.8 s today
            "{by_reads:?}: {:?}",
            &run.sigma[145..180]
        );
    }

    /// No harm outside: another host's download through the same bottleneck gets the same
    /// share whether this host steers (BWSS) or not (its daemon only observes), whether
    /// the video wants its minimum or sits on the lowest rung. The paper's rule (no
    /// `keep_share`) gives it 1.6 × as much when the video sits on its lowest rung: the
    /// video's unused minimum and σ reset to the aggregate throttle the downloads, and the
    /// outside flow takes what they leave.
    #[test]
    fn another_hosts_download_gets_the_same_share_with_and_without_bwss() {
        for video_kbps in [69.0, 517.5] {
            let (plain, _) = outside(video_kbps, false, true);
            let (kept, c) = outside(video_kbps, true, true);
            let (paper, _) = outside(video_kbps, true, false);
            let ratio = kept / plain;

            let msg = format!("video {video_kbps}: outside {kept:.0} with BWSS, {plain:.0} without, {paper:.0} with the paper's rule ({c:?})");
            if video_kbps < 100.0 {
                // 274 / 274 = 1.00 today (one yield at the start, undone a window later);
                // the paper's rule 427 (1.56).
                assert!((0.9..=1.1).contains(&ratio), "{msg}");
                assert!(paper / plain >= 1.25, "{msg}");
            } else {
                // The price of the video's priority while it does not get its minimum: the
                // downloads give way (its minimum is in force from its first window) and the
                // video, one TCP flow, shares what they leave with the outside flow (480
                // each: not its minimum, so the yield is undone a window later; 250 / 223 =
                // 1.12 today; the paper's rule 309 / 223).
                assert!(ratio <= 1.2, "{msg}");
            }
        }
    }

    /// The other host's download in kbit/s from 10 s ([`Link::Outside`], 150 s, the
    /// interferer from 60 to 100 s) and the counters, with this host steering or only
    /// observing, with or without `keep_share`.
    fn outside(video_kbps: f64, steer: bool, keep_share: bool) -> (f64, SigmaCounters) {
        let mut rules = fig6_rules();
        rules.system.observe = !steer;
        rules.system.keep_share = keep_share;
        let mut b = Bwss::new(rules);
        let run = fig6_run(
            &mut b,
            150,
            interfered(60.0..100.0),
            Link::Outside { video_kbps },
        );
        (run.outside_kbps, b.status(Instant::now()).counters)
    }

    /// The lab's "BWSS + outside" (`docs/bwss.md`): the video's
    /// player on its 262 kbit/s rung (301 with the 1.15 × the lab's player asks) beside
    /// another host's download cannot reach its 520 kbit/s minimum even when the
    /// downloads give way; the yield is undone, and the video is capped at what it takes
    /// plus a quarter ([`crate::sigma::WANTS_LESS_HEADROOM`]) so the downloads keep the
    /// rest of the host's share. Without that cap (it takes more than half its minimum)
    /// it kept the 520 and the other host's flow took what it left (252 against 223
    /// kbit/s in this model, 1.13 ×; the lab's runs 1.64 and 2.99 ×); with it 223, 1.00 ×.
    #[test]
    fn a_video_that_cannot_reach_its_minimum_leaves_the_hosts_share_to_its_downloads() {
        let (plain, _) = outside(301.0, false, true);
        let (kept, c) = outside(301.0, true, true);
        let msg = format!("outside {kept:.0} with BWSS, {plain:.0} without ({c:?})");
        assert!(c.yield_undone >= 1, "{msg}");
        assert!(c.demand_capped >= 1, "{msg}");
        assert!((0.9..=1.05).contains(&(kept / plain)), "{msg}");
    }

    /// The lab's access link as a drop-tail FIFO in 10 ms steps: 960 kbit/s, a queue of 30
    /// segments, the interferer's 240 kbit/s CBR in `during`. The video's server produces
    /// 517.5 kbit/s and sends what is waiting up to twice that; a segment of it dropped is
    /// sent again, and its window shrinks to 0.7 of the rate for 500 ms (cubic's β, about
    /// two round trips). The downloads send at the rate they were allowed at the last tick
    /// (their reads, which their windows follow). Every flow gets its bytes in the order
    /// they entered the queue: while the queue grows each is diluted, the interferer's
    /// share included; only a queue that shrinks gives the bytes back.
    fn fifo_run(b: &mut Bwss, secs: usize, during: std::ops::Range<f64>) -> Trace {
        const DT: f64 = 0.01;
        const QUEUE_BYTES: f64 = 30.0 * 1448.0;
        const VIDEO: f64 = 517.5e3 / 8.0;
        let t0 = Instant::now();
        let ids = fig6_flows(b, t0);
        let mut queue: std::collections::VecDeque<(usize, f64)> = Default::default();
        let mut queued = 0.0;
        let (mut waiting, mut slow_until) = (0.0, -1.0);
        let mut send = [0.0; 3];
        let (mut read, mut arrived, mut buffered) = ([0f64; 3], [0f64; 3], 0.0);
        let (mut carried, mut offered) = (0.0, 0.0);
        let mut trace = Trace::new(secs);
        for k in 0..(secs as f64 / DT).round() as u64 {
            let t = k as f64 * DT;
            let now = t0 + Duration::from_secs_f64(t);
            if k % 20 == 0 {
                for i in 0..3 {
                    b.record_bytes(now, ids[i], read[i] as u64);
                    if i > 0 {
                        b.record_arrivals(now, ids[i], arrived[i] as u64);
                    }
                }
                b.on_tick(now);
                trace.sigma.push(b.status(now).sigma_kbps.unwrap());
                for (i, s) in send.iter_mut().enumerate() {
                    *s = b.budget(ids[i]).map_or(120e3, |x| x.rate);
                }
            }
            // What enters the queue this step, bytes: video, downloads, interferer.
            waiting += VIDEO * DT;
            let cap = if t < slow_until {
                0.7 * VIDEO
            } else {
                2.0 * VIDEO
            };
            let udp = if during.contains(&t) { 30e3 * DT } else { 0.0 };
            let input = [waiting.min(cap * DT), send[1] * DT, send[2] * DT, udp];
            let total: f64 = input.iter().sum();
            let admit = ((QUEUE_BYTES - queued) / total).min(1.0);
            for (i, &n) in input.iter().enumerate() {
                queue.push_back((i, n * admit));
                queued += n * admit;
            }
            waiting -= input[0] * admit;
            if admit < 1.0 && input[0] > 0.0 {
                slow_until = t + 0.5;
            }
            // The link serves the queue's head.
            let mut room = 120e3 * DT;
            let mut out = [0f64; 4];
            while room > 0.0 {
                let Some(head) = queue.front_mut() else { break };
                let n = head.1.min(room);
                out[head.0] += n;
                head.1 -= n;
                room -= n;
                queued -= n;
                if head.1 <= 0.0 {
                    queue.pop_front();
                }
            }
            // The video reads what arrived, within its budget; the downloads what arrived.
            buffered += out[0];
            let v = buffered.min(send[0] * DT + 1448.0);
            buffered -= v;
            read[0] += v;
            for i in 1..3 {
                read[i] += out[i];
                arrived[i] += out[i];
            }
            trace.video[t as usize] += v * 8.0 / 1e3;
            if t >= 10.0 {
                carried += out.iter().sum::<f64>();
                offered += 120e3 * DT;
            }
        }
        trace.utilization = carried / offered;
        trace
    }

    /// The lab's onset through a drop-tail FIFO: the interferer dilutes every flow while
    /// the queue grows, before anything is lost, and the video's minimum is back only when
    /// the queue shrinks. The onset yield drains it ([`crate::sigma::ONSET_DRAIN`]).
    #[test]
    fn through_a_fifo_the_onset_costs_the_video_at_most_one_second() {
        let mut b = Bwss::new(fig6_rules());
        let run = fifo_run(&mut b, 100, 30.0..70.0);
        let c = b.status(Instant::now()).counters;
        let short: Vec<usize> = (30..70).filter(|&s| run.video[s] < AT_MIN_KBPS).collect();
        let msg = format!(
            "short {short:?}; video {:?}; sigma {:?}; {c:?}",
            &run.video[28..40],
            &run.sigma[145..175]
        );
        // The onset second itself is diluted before any rule can see it (484 kbit/s today);
        // the next is whole (with a yield of the shortfall alone, `ONSET_DRAIN` = 1: 469
        // and 499, two seconds short). Later, gentle probes into the full link cost a
        // second or two each in this model: 34 of 40 seconds at the minimum today (36 with
        // `ONSET_DRAIN` = 1: σ drained lower climbs back with more probes).
        assert!(run.video[31] >= AT_MIN_KBPS, "{msg}");
        assert!(short.len() <= 7, "{msg}");
        assert!(run.utilization >= 0.9, "{} {msg}", run.utilization);
    }

    /// The namespace test's failing run (`bwss_lab`, a third of its runs): the two
    /// downloads start first and fill the link; the video connects a second later, behind
    /// their queue, and its rate grows by half every 200 ms (slow start at a 400 ms round
    /// trip); at 3 s, before it has measured a whole window at its minimum, an interferer
    /// takes 240 of the 960 kbit/s. The downloads, held to their targets by their receive
    /// windows, lose nothing; the video gets what the link leaves (`Link::VideoLoses`).
    /// Returns the video's kbit/s per second and its target and σ (kbit/s) per tick.
    fn late_video_run(b: &mut Bwss, secs: usize) -> (Vec<f64>, Vec<(f64, f64)>) {
        let t0 = Instant::now();
        let flow = |p: &str, port| info(p, &format!("10.2.1.1:{port}"));
        let downloads = [
            b.add_flow(t0, flow("curl", 2)),
            b.add_flow(t0, flow("curl", 3)),
        ];
        let mut video = None;
        let (mut rate, mut read) = (0.0f64, [0f64; 3]);
        let mut per_second = vec![0.0; secs];
        let mut ticks = vec![];
        for k in 0..secs * 5 {
            let t = k as f64 * 0.2;
            let now = t0 + Duration::from_secs_f64(t);
            let cap = if t < 3.0 { 960e3 } else { 720e3 };
            if video.is_none() && t >= 1.0 {
                video = Some(b.add_flow(now, flow("video", 1)));
            }
            let allowed = |id| b.budget(id).map_or(cap, |x| x.rate * 8.0);
            let bulk = allowed(downloads[0]).min(cap / 2.0);
            if let Some(v) = video {
                rate = (1.5 * rate).max(20e3);
                rate = rate.min(allowed(v)).min(517.5e3).min(cap - 2.0 * bulk);
                read[0] += rate * 0.2 / 8.0;
                b.record_bytes(now, v, read[0] as u64);
            }
            for (i, &d) in downloads.iter().enumerate() {
                read[i + 1] += bulk * 0.2 / 8.0;
                b.record_bytes(now, d, read[i + 1] as u64);
                b.record_arrivals(now, d, read[i + 1] as u64);
            }
            b.on_tick(now);
            per_second[t as usize] += rate * 0.2 / 1e3;
            let s = b.status(now);
            let target = s.flows.iter().find(|f| f.program == "video");
            ticks.push((
                target.and_then(|f| f.target_kbps).unwrap_or(0.0),
                s.sigma_kbps.unwrap(),
            ));
        }
        (per_second, ticks)
    }

    /// Main's rule never put the minimum in force (the video had not been at it over a
    /// whole window when the link shrank): σ stayed at the ceiling, the video got the
    /// 328 kbit/s the downloads left (in the lab it was also capped at twice that, 465,
    /// and fell further). A minimum in force from the video's first whole window makes σ
    /// yield to what the flows get (no drain: the video is starting), and the video has
    /// its minimum from the second after the onset's.
    #[test]
    fn a_video_that_starts_behind_the_downloads_gets_its_minimum_when_the_link_shrinks() {
        let mut b = Bwss::new(fig6_rules());
        let (video, ticks) = late_video_run(&mut b, 20);
        let c = b.status(Instant::now()).counters;
        let msg = format!("video {video:?}; (target, σ) {ticks:?}; {c:?}");
        assert!(c.onset_yield + c.min_short >= 1, "{msg}");
        assert_eq!(c.yield_undone, 0, "{msg}");
        // σ yields to what the link has left (720 kbit/s) and stays above the minimum.
        assert!(ticks[15..].iter().any(|&(_, s)| s <= 720.0), "{msg}");
        assert!(ticks[15..].iter().all(|&(_, s)| s >= 520.0), "{msg}");
        // From the second after the onset's, the video's target is its minimum and it reads
        // its 517.5 kbit/s; a probe into the full link costs seconds, as in the other
        // `VideoLoses` runs (6-8 today: the probe failed, the next waits the longest).
        assert!(
            ticks[20..].iter().all(|&(t, _)| (t - 520.0).abs() < 1.0),
            "{msg}"
        );
        assert!(video[4] >= AT_MIN_KBPS, "{msg}");
        assert!(seconds_at_min(&video[4..]) >= 12, "{msg}");
        assert_eq!(seconds_at_min(&video[15..]), 5, "{msg}");
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
        assert_eq!((v.clamp_rtts, c.clamp_rtts), (0.0, 2.0));
    }

    /// With `keep_share` the downloads' windows are clamped, and their reads paced from the
    /// shallow bucket, only while the video's minimum is promised: beside its minimum (the
    /// lab's "BWSS"), not once it showed that it wants less (the lab's "BWSS + outside", its
    /// player on a low rung), nor on a host whose rules give no flow a minimum; the paper's
    /// rule clamps throughout.
    #[test]
    fn the_downloads_are_clamped_and_shallow_paced_only_while_a_minimum_is_promised() {
        let clamps = |b: &Bwss| [1, 2, 3].map(|id| b.budget(id).map(|x| x.clamp_rtts));
        let mut alone = Bwss::new(fig6_rules());
        fig6_run(&mut alone, 30, interfered(10.0..20.0), Link::Proportional);
        assert_eq!(clamps(&alone), [Some(0.0), Some(2.0), Some(2.0)]);

        let full = |_| 960e3;
        let low_rung = Link::Outside { video_kbps: 69.0 };
        let mut beside = Bwss::new(fig6_rules());
        fig6_run(&mut beside, 30, full, low_rung);
        let c = beside.status(Instant::now()).counters;
        assert!(c.yield_undone >= 1, "{c:?}");
        assert_eq!(clamps(&beside), [Some(0.0), Some(0.0), Some(0.0)], "{c:?}");

        let mut paper = fig6_rules();
        paper.system.keep_share = false;
        let mut paper = Bwss::new(paper);
        fig6_run(&mut paper, 30, full, low_rung);
        assert_eq!(clamps(&paper)[1..], [Some(2.0), Some(2.0)]);

        let mut plain = fig6_rules();
        plain.rules.clear();
        let mut plain = Bwss::new(plain);
        let t0 = Instant::now();
        let curl = plain.add_flow(t0, info("curl", "10.2.1.1:2"));
        assert_eq!(plain.budget(curl).map(|x| x.clamp_rtts), Some(0.0));

        // Unclamped, a download the link holds under its target reads a burst at once (a
        // bucket of a second of it); beside a promised minimum, or before it was measured
        // under its target, from the shallow bucket.
        let depth_secs = |b: &Bwss, id| b.budget(id).map(|x| x.depth / x.rate);
        assert_eq!(depth_secs(&beside, 2), Some(SHARE_DEPTH_SECS));
        assert!(depth_secs(&plain, curl).is_some_and(|d| d < SHARE_DEPTH_SECS));
        assert!(depth_secs(&alone, 2).is_some_and(|d| d < SHARE_DEPTH_SECS));
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
