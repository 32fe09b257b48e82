//! `summary.json` of an RDC run: per variant the Fig. 3 numbers (settling time, oscillation),
//! the Table 1 numbers (timeouts from `TCP_INFO`, the bottleneck's loss rate), the queue it
//! kept, utilization and shares, and the agents' counters; then the goals. Every number
//! carries its samples; none is `null` ("no data"), never 0.

use std::collections::BTreeMap;

use serde::Serialize;

use super::agents::AgentReport;
use super::flows::SenderRecord;
use super::measure;
use super::rtt_groups::{self, RttGroupLayers};
use super::scenario::{RdcMetric, RdcScenario};
use super::timing::{self, LateEvent, TimingHealth, TimingInputs};
use super::trial::TrialRecord;
use crate::results::Window;
use crate::summary::Measured;
use crate::tcpinfo::{TcpTimeline, TransportSummary};

#[derive(Debug, Clone, Serialize)]
pub struct RdcSummary {
    pub scenario: String,
    pub paper_figure: String,
    pub paper_text: String,
    pub differences: String,
    pub variants: Vec<VariantSummary>,
    pub goals: Vec<GoalResult>,
    pub provenance: Vec<(String, String)>,
    /// Whatever went wrong (a flow that failed, an agent that left a rule).
    pub errors: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct QueuePackets {
    pub p50: Measured,
    pub p99: Measured,
    pub max: Measured,
}

#[derive(Debug, Clone, Serialize)]
pub struct VariantSummary {
    pub name: String,
    pub aqm: String,
    pub agent: Option<String>,
    pub ecn: bool,
    pub paper: String,
    /// Seconds after the last flow's start until every flow stayed within the band.
    /// `settled = false`: still outside it in the last bin.
    pub settling_s: Measured,
    pub settled: Option<bool>,
    /// Mean coefficient of variation of packets per bin from `oscillation_from_s`.
    pub oscillation_cv: Measured,
    /// Retransmission timeouts and retransmitted segments of all flows, in the window.
    pub timeouts: Measured,
    pub retransmitted_segments: Measured,
    pub srtt_p50_ms: Measured,
    /// Segments in flight (`tcpi_unacked`, the whole run) against the stated window.
    pub in_flight: measure::InFlight,
    /// Bottleneck drops over arrivals in the window, and drops, marks and spares (packets
    /// the law passed where it would have dropped them) by reason.
    pub loss_rate: Measured,
    pub drops: BTreeMap<String, u64>,
    pub marks: BTreeMap<String, u64>,
    pub spares: BTreeMap<String, u64>,
    /// RDC: packets of flows that do not answer put in the cell's delay line, by reason, and
    /// how long they were to wait, ms.
    pub holds: BTreeMap<String, u64>,
    pub rdc_hold_ms: Option<lowtide_netem::Percentiles>,
    /// RDC: the cell's table of flows whose receiver echoes (answers).
    pub rdc_answering: Option<lowtide_netem::aqm::AnsweringReport>,
    /// Forward queue after each dequeue in the window, packets.
    pub queue_packets: QueuePackets,
    /// Delivered IP bytes over the nominal rate, in the window.
    pub utilization: Measured,
    /// Each flow's goodput (bytes read by its receiver) in the window, Mbit/s.
    pub goodput_mbps: Vec<Measured>,
    pub share_ratio: Measured,
    /// Exact RDC: the delays the router wrote, ms.
    pub rdc_delay_ms: Option<lowtide_netem::Percentiles>,
    /// Video flows: the layers each stream sent, over the window (Fig. 6 and 8).
    pub layers: Option<LayerSummary>,
    /// Video with access delays (Fig. 9/10): `layers_by_rtt_group`, `layer_disparity`, ...
    #[serde(flatten)]
    pub rtt_groups: Option<RttGroupLayers>,
    /// How late the emulator sent packets on the forward link (is it keeping up?), ms.
    pub emulator_lateness_ms: Option<lowtide_netem::Percentiles>,
    /// How well the machine kept time (stalls of the emulator and the agents, CPU pressure),
    /// and the queue outside the stalls' shadows.
    pub timing: TimingHealth,
    pub agents: Vec<AgentReport>,
    pub errors: Vec<String>,
}

/// The video streams' layers in the window: each stream's time-weighted mean, then across
/// streams.
#[derive(Debug, Clone, Serialize)]
pub struct LayerSummary {
    /// Mean over streams of each stream's mean layers.
    pub mean: Measured,
    /// Standard deviation of the streams' means (unfairness), and the lowest and highest.
    pub spread: Measured,
    pub min_stream: Measured,
    pub max_stream: Measured,
    /// Layer changes (adds and drops) per stream per minute, over the whole run.
    pub changes_per_min: Measured,
    pub adds: u64,
    pub drops: u64,
    /// Segments the sources skipped (send buffer full), and the kernel refused.
    pub skipped_segments: u64,
    pub refused_segments: u64,
    pub per_stream: Vec<Measured>,
}

/// The layer numbers of a trial's video senders; `None` when no flow ran video.
pub fn layer_summary(senders: &[Option<SenderRecord>], window: Window) -> Option<LayerSummary> {
    let videos: Vec<Option<&lowtide_media::rdc_video::TcpSourceRecord>> = senders
        .iter()
        .map(|s| s.as_ref().and_then(|s| s.video.as_ref()))
        .collect();
    if videos.iter().all(Option::is_none) {
        return None;
    }
    let per_stream: Vec<Measured> = videos
        .iter()
        .map(|v| match v {
            Some(v) => Measured::new(
                measure::mean_layers(&v.layers, window.from_s, window.to_s),
                v.layers.len(),
            ),
            None => Measured::new(None, 0),
        })
        .collect();
    let means: Vec<f64> = per_stream.iter().filter_map(|m| m.value).collect();
    let n = means.len();
    let stats = measure::spread(&means);
    let pick = |f: fn((f64, f64, f64, f64)) -> f64| Measured::new(stats.map(f), n);
    let with: Vec<_> = videos.iter().flatten().collect();
    let duration_min = window.to_s / 60.0;
    let changes: u64 = with
        .iter()
        .map(|v| v.counters.adds + v.counters.drops)
        .sum();
    Some(LayerSummary {
        mean: pick(|s| s.0),
        spread: pick(|s| s.1),
        min_stream: pick(|s| s.2),
        max_stream: pick(|s| s.3),
        changes_per_min: Measured::new(
            (!with.is_empty()).then(|| changes as f64 / with.len() as f64 / duration_min),
            with.len(),
        ),
        adds: with.iter().map(|v| v.counters.adds).sum(),
        drops: with.iter().map(|v| v.counters.drops).sum(),
        skipped_segments: with.iter().map(|v| v.counters.skipped).sum(),
        refused_segments: with.iter().map(|v| v.refused_segments).sum(),
        per_stream,
    })
}

pub use crate::goals::ExperimentGoalResult as GoalResult;

/// The variant's numbers from its trial record.
pub fn of_trial(s: &RdcScenario, t: &TrialRecord, rate_bps: f64) -> VariantSummary {
    let r = &s.rdc;
    let v = s
        .variants
        .iter()
        .find(|v| v.name == t.variant)
        .expect("a trial of a scenario variant");
    let bin_s = r.bin_ms / 1000.0;
    let window = Window {
        from_s: r.measure_from_s,
        to_s: r.duration_s,
    };
    let sent: Vec<Vec<u64>> = t
        .senders
        .iter()
        .flatten()
        .map(|x| x.sent_packets.clone())
        .collect();
    let complete = sent.len() == t.plans.len();
    let last_start = t.plans.iter().map(|p| p.start_s).fold(0.0, f64::max);
    let settle_from = (last_start / bin_s).ceil() as usize;
    let smoothed: Vec<Vec<u64>> = sent
        .iter()
        .map(|f| measure::smooth(f, r.settle_smooth_bins))
        .collect();
    let settling = complete
        .then(|| measure::settling_s(&smoothed, settle_from, bin_s, r.settle_band))
        .flatten();
    let bins = smoothed.iter().map(Vec::len).min().unwrap_or(0);
    let settled = (complete && settle_from < bins).then_some(settling.is_some());
    let osc_from = (r.oscillation_from_s / bin_s).ceil() as usize;
    let oscillation = if complete {
        measure::oscillation(&sent, osc_from)
    } else {
        Measured::new(None, 0)
    };
    let timelines: Vec<&TcpTimeline> = t.senders.iter().flatten().map(|x| &x.timeline).collect();
    let transport = TransportSummary::of(&timelines, window);
    let max_unacked: Vec<Option<u32>> = t
        .senders
        .iter()
        .map(|x| x.as_ref()?.timeline.samples.iter().map(|s| s.unacked).max())
        .collect();
    let in_flight = measure::in_flight(&max_unacked, r.window_packets);
    let from_bin = (r.measure_from_s / bin_s).ceil() as usize;
    let goodput: Vec<Measured> = t
        .receivers
        .iter()
        .map(|x| match x {
            Some(rec) if rec.received_bytes.len() > from_bin => {
                let bytes: u64 = rec.received_bytes[from_bin..].iter().sum();
                let secs = (rec.received_bytes.len() - from_bin) as f64 * bin_s;
                Measured::new(
                    Some(bytes as f64 * 8.0 / secs / 1e6),
                    rec.received_bytes.len() - from_bin,
                )
            }
            _ => Measured::new(None, 0),
        })
        .collect();
    let totals: Vec<f64> = goodput.iter().filter_map(|g| g.value).collect();
    let share = if totals.len() == goodput.len() {
        measure::share_ratio(&totals)
    } else {
        Measured::new(None, 0)
    };
    let mut q: Vec<u32> = t.queue.iter().map(|x| x.packets).collect();
    let n = q.len();
    let queue_packets = QueuePackets {
        p50: Measured::new(measure::percentile(&mut q, 50.0), n),
        p99: Measured::new(measure::percentile(&mut q, 99.0), n),
        max: Measured::new(q.last().map(|&x| f64::from(x)), n),
    };
    let layers = layer_summary(&t.senders, window);
    let rtt_groups = layers.as_ref().filter(|_| s.has_rtt_groups()).map(|l| {
        let rtts: Vec<f64> = (0..l.per_stream.len()).map(|f| s.min_rtt_ms(f)).collect();
        rtt_groups::summarise(&rtts, &l.per_stream)
    });
    let lateness = t
        .forward
        .as_ref()
        .and_then(|f| (f.lateness_ms.count > 0).then_some(f.lateness_ms));
    let by_reason = |counts: &BTreeMap<&'static str, u64>| -> BTreeMap<String, u64> {
        counts.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    };
    let holds = t
        .forward
        .as_ref()
        .map_or_else(BTreeMap::new, |f| by_reason(&f.holds));
    let hold_ms = t
        .forward
        .as_ref()
        .and_then(|f| (f.rdc_hold_ms.count > 0).then_some(f.rdc_hold_ms));
    let answering = t.forward.as_ref().and_then(|f| f.rdc_answering);
    let (loss, utilization, drops, marks, spares, delay) = match &t.forward {
        Some(f) => {
            let arrived = f.arrived_packets as usize;
            let util = f.delivered_bytes as f64 * 8.0 / (rate_bps * t.measured_s);
            (
                Measured::new(
                    Some(f.total_drops() as f64 / arrived.max(1) as f64),
                    arrived,
                ),
                Measured::new(Some(util), f.delivered_packets as usize),
                by_reason(&f.drops),
                by_reason(&f.marks),
                by_reason(&f.spares),
                (f.rdc_delay_ms.count > 0).then_some(f.rdc_delay_ms),
            )
        }
        None => (
            Measured::new(None, 0),
            Measured::new(None, 0),
            BTreeMap::new(),
            BTreeMap::new(),
            BTreeMap::new(),
            None,
        ),
    };
    let timing = timing_of(s, t, delay.map(|d| d.p50));
    VariantSummary {
        name: v.name.clone(),
        aqm: v.aqm.name().into(),
        agent: v.agent.map(|m| m.as_str().to_string()),
        ecn: v.ecn,
        paper: v.paper.clone(),
        settling_s: Measured::new(settling, if settled.is_some() { bins } else { 0 }),
        settled,
        oscillation_cv: oscillation,
        timeouts: transport.timeouts,
        retransmitted_segments: transport.retransmitted_segments,
        srtt_p50_ms: transport.srtt_p50_ms,
        in_flight,
        loss_rate: loss,
        drops,
        marks,
        spares,
        holds,
        rdc_hold_ms: hold_ms,
        rdc_answering: answering,
        queue_packets,
        utilization,
        goodput_mbps: goodput,
        share_ratio: share,
        rdc_delay_ms: delay,
        layers,
        rtt_groups,
        emulator_lateness_ms: lateness,
        timing,
        agents: t.agents.clone(),
        errors: t.errors.clone(),
    }
}

/// The trial's [`TimingHealth`]: late events from the window's start less one shadow (a stall
/// just before the window still shapes its first samples) to its end.
fn timing_of(s: &RdcScenario, t: &TrialRecord, router_delay_ms: Option<f64>) -> TimingHealth {
    let base_rtt_ms = (0..s.rdc.flows)
        .map(|f| s.min_rtt_ms(f))
        .fold(0.0, f64::max);
    let round_trip_ms = base_rtt_ms + router_delay_ms.unwrap_or(0.0);
    let shadow_us = (timing::SHADOW_ROUND_TRIPS * round_trip_ms * 1000.0) as u64;
    let from_us = ((s.rdc.measure_from_s * 1e6) as u64).saturating_sub(shadow_us);
    let to_us = (s.rdc.duration_s * 1e6) as u64;
    let within = |e: &LateEvent| (from_us..=to_us).contains(&e.t_us);
    timing::health(TimingInputs {
        queue: &t.queue,
        emulator_late: t
            .late_deliveries
            .iter()
            .map(|(_, d)| LateEvent {
                t_us: d.t_us,
                late_us: u64::from(d.late_us),
            })
            .filter(within)
            .collect(),
        agent_late: t
            .releases
            .iter()
            .map(|(_, r)| LateEvent {
                t_us: r.left_us,
                late_us: r.left_us.saturating_sub(r.due_us),
            })
            .filter(|e| e.late_us > timing::LATE_US && within(e))
            .collect(),
        round_trip_ms,
        cpu: t.cpu,
    })
}

impl VariantSummary {
    pub fn metric(&self, m: RdcMetric) -> Measured {
        match m {
            RdcMetric::QueueP99Packets => self.queue_packets.p99,
            RdcMetric::Utilization => self.utilization,
            RdcMetric::ShareRatio => self.share_ratio,
            RdcMetric::Timeouts => self.timeouts,
            RdcMetric::LossRate => self.loss_rate,
            RdcMetric::SettlingS => self.settling_s,
            RdcMetric::LayersMean => self.layers.as_ref().map_or(Measured::default(), |l| l.mean),
            RdcMetric::LayersSpread => self
                .layers
                .as_ref()
                .map_or(Measured::default(), |l| l.spread),
            RdcMetric::LayerDisparity => self
                .rtt_groups
                .as_ref()
                .map_or(Measured::default(), |g| g.layer_disparity),
        }
    }
}

/// Each goal of the scenario against the variants' numbers, then every variant's window
/// ([`window_goal`]); no data is never met.
pub fn goals(s: &RdcScenario, variants: &[VariantSummary]) -> Vec<GoalResult> {
    let mut goals = scenario_goals(s, variants);
    goals.extend(variants.iter().map(|v| window_goal(&v.name, &v.in_flight)));
    goals
}

/// Built in, not a scenario's choice: no flow had more segments in flight than the stated
/// window. The paper's results hold for its window; a run whose flows exceeded it (as with
/// the receiver's clamp, which Linux lifted) ran another experiment, and says so here.
pub fn window_goal(variant: &str, f: &measure::InFlight) -> GoalResult {
    let largest = show(&f.max_packets, |x| format!("{x:.0}"));
    GoalResult::judge(
        variant,
        &format!("flows over {} packets in flight", f.window_packets),
        None,
        Some(0.0),
        f.flows_over,
        &format!(
            "the paper's maximum window holds (tcpi_unacked, sampled; largest {largest} packets)"
        ),
    )
}

fn scenario_goals(s: &RdcScenario, variants: &[VariantSummary]) -> Vec<GoalResult> {
    s.goals
        .iter()
        .map(|g| {
            let metric = |name: &str| {
                variants
                    .iter()
                    .find(|v| v.name == name)
                    .map_or(Measured::default(), |v| v.metric(g.metric))
            };
            let measured = metric(&g.variant);
            let mut note = None;
            let (measured, label) = match &g.relative_to {
                None => (measured, g.metric.as_str().to_string()),
                Some(other) => {
                    let base = metric(other);
                    let ratio = match (measured.value, base.value) {
                        (Some(x), Some(b)) => {
                            let r = ratio_of(x, b);
                            if r.is_none() {
                                note = Some(format!(
                                    "no comparison: {other}'s {} is 0 (this variant's: {x})",
                                    g.metric.as_str()
                                ));
                            }
                            r
                        }
                        _ => None,
                    };
                    (
                        Measured::new(ratio, measured.samples.min(base.samples)),
                        format!("{} / {other}'s", g.metric.as_str()),
                    )
                }
            };
            let mut result = GoalResult::judge(&g.variant, &label, g.min, g.max, measured, &g.why);
            result.note = note;
            if g.metric.depends_on_timing() {
                result.timing = variants
                    .iter()
                    .find(|v| v.name == g.variant)
                    .map(|v| v.timing.note());
            }
            result
        })
        .collect()
}

/// `x / base`; over a base of 0 (ECN with no timeout at all) there is no comparison (`None`,
/// never met): 0 against 0 shows nothing about the variant.
fn ratio_of(x: f64, base: f64) -> Option<f64> {
    (base > 0.0).then(|| x / base)
}

/// A number, or "no data" when it has no samples.
pub(super) fn show(m: &Measured, f: impl Fn(f64) -> String) -> String {
    m.value
        .map_or_else(|| crate::summary::NO_DATA.to_string(), f)
}

/// A variant's main numbers as the printed table and the report show them: settling time,
/// oscillation, RTOs, loss, queue p50 and p99, utilization, share ratio.
pub fn main_cells(v: &VariantSummary) -> [String; 8] {
    let settling = match v.settled {
        Some(false) => "not settled".to_string(),
        _ => show(&v.settling_s, |x| format!("{x:.2}")),
    };
    [
        settling,
        show(&v.oscillation_cv, |x| format!("{x:.3}")),
        show(&v.timeouts, |x| format!("{x:.0}")),
        show(&v.loss_rate, |x| format!("{:.3}%", x * 100.0)),
        show(&v.queue_packets.p50, |x| format!("{x:.0}")),
        show(&v.queue_packets.p99, |x| format!("{x:.0}")),
        show(&v.utilization, |x| format!("{:.1}%", x * 100.0)),
        show(&v.share_ratio, |x| format!("{x:.2}")),
    ]
}

/// The table `lowtide lab run` prints.
pub fn text_table(s: &RdcSummary) -> String {
    let mut out = format!(
        "{:<12} {:>12} {:>8} {:>8} {:>10} {:>9} {:>9} {:>7} {:>7}  paper\n",
        "variant", "settling s", "cv", "RTOs", "loss", "queue p50", "queue p99", "util", "share"
    );
    for v in &s.variants {
        let c = main_cells(v);
        out += &format!(
            "{:<12} {:>12} {:>8} {:>8} {:>10} {:>9} {:>9} {:>7} {:>7}  {}\n",
            v.name, c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], v.paper
        );
    }
    for v in &s.variants {
        if let Some(l) = &v.layers {
            out += &format!(
                "{:<12} layers mean {} spread {} (streams {} to {}), {} changes/stream/min, {} skipped segments\n",
                v.name,
                show(&l.mean, |x| format!("{x:.2}")),
                show(&l.spread, |x| format!("{x:.2}")),
                show(&l.min_stream, |x| format!("{x:.2}")),
                show(&l.max_stream, |x| format!("{x:.2}")),
                show(&l.changes_per_min, |x| format!("{x:.2}")),
                l.skipped_segments,
            );
        }
        if let Some(g) = &v.rtt_groups {
            let groups: Vec<String> = g
                .layers_by_rtt_group
                .iter()
                .map(|(rtt, l)| {
                    format!(
                        "{rtt} ms {} ± {}",
                        show(&l.mean, |x| format!("{x:.2}")),
                        show(&l.spread, |x| format!("{x:.2}"))
                    )
                })
                .collect();
            out += &format!(
                "{:<12} layers by RTT: {}; disparity (max/min) {}, gap {}, shortest/longest RTT {}\n",
                v.name,
                groups.join(", "),
                show(&g.layer_disparity, |x| format!("{x:.2}")),
                show(&g.layer_gap, |x| format!("{x:.2}")),
                show(&g.shortest_over_longest_rtt, |x| format!("{x:.2}")),
            );
        }
        if let Some(late) = &v.emulator_lateness_ms {
            out += &format!(
                "{:<12} emulator lateness p99 {:.3} ms, max {:.1} ms over {} packets\n",
                v.name, late.p99, late.max, late.count
            );
        }
        out += &format!("{:<12} {}\n", v.name, v.timing.note());
    }
    for g in &s.goals {
        out += &format!(
            "goal {} {} {}{}{}: {} ({})\n",
            g.variant,
            g.metric,
            g.min.map_or(String::new(), |m| format!("≥ {m} ")),
            g.max.map_or(String::new(), |m| format!("≤ {m} ")),
            g.shown(),
            if g.met { "met" } else { "NOT met" },
            g.why
        );
        if let Some(note) = &g.timing {
            out += &format!("  {note}\n");
        }
    }
    for e in &s.errors {
        out += &format!("error: {e}\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_goal_fails_when_a_flow_went_past_the_window() {
        // The last run with the receiver's clamp: a flow at 70 packets against 40.
        let g = window_goal("1-bit RDC", &measure::in_flight(&[Some(40), Some(70)], 40));
        assert!(!g.met);
        assert_eq!(g.metric, "flows over 40 packets in flight");
        assert!(g.why.contains("largest 70 packets"), "{}", g.why);
        assert!(window_goal("ECN", &measure::in_flight(&[Some(40), Some(19)], 40)).met);
        // No samples: not met.
        assert!(!window_goal("ECN", &measure::in_flight(&[None], 40)).met);
    }

    #[test]
    fn a_ratio_over_a_zero_base_is_no_comparison() {
        assert_eq!(ratio_of(2.0, 675.0), Some(2.0 / 675.0));
        // It used to be 0 (met) for 0 against 0.
        assert_eq!(ratio_of(0.0, 0.0), None);
        assert_eq!(ratio_of(84.0, 0.0), None);
    }
}
