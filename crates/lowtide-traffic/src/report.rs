//! What the lab puts into its JSON: one [`FlowReport`] per flow instance of a schedule, with
//! goodput for every kind, flow completion times for mice and sent/received/lost for CBR.
//! Reports start with provenance (the kernel's congestion-control settings) so a result can be
//! read without the run's log.

use serde::{Deserialize, Serialize};

use crate::cbr::CbrReport;
use crate::elephant::ElephantReport;
use crate::mice::MiceReport;
use crate::schedule::FlowKindName;
use crate::sink::UdpSinkReport;
use crate::Direction;

/// Summary of a sample (seconds for completion times). Percentiles by
/// `lowtide_proto::quantile`'s rule (`round((n - 1) q)` of the sorted samples).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Number of samples summarised.
    pub count: u64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Smallest.
    pub min: f64,
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Percentiles {
    /// Summarise (sorts `samples` in place); None for an empty sample. NaNs sort last.
    pub fn of(samples: &mut [f64]) -> Option<Self> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_by(f64::total_cmp);
        let n = samples.len();
        let rank = |p: f64| lowtide_proto::quantile::of_sorted(samples, p).expect("n > 0");
        Some(Self {
            count: n as u64,
            mean: samples.iter().sum::<f64>() / n as f64,
            min: samples[0],
            p50: rank(0.50),
            p99: rank(0.99),
            max: samples[n - 1],
        })
    }
}

/// The kind-specific part of a flow's report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FlowOutcome {
    /// A bulk TCP flow.
    Elephant(ElephantReport),
    /// Repeated short TCP transfers.
    Mice(MiceReport),
    /// Constant-bit-rate UDP.
    Cbr(CbrReport),
    /// The flow could not run (the message says why, e.g. a refused congestion control).
    Failed {
        /// The error, as a sentence.
        error: String,
    },
    /// The stop came before the flow's start time.
    NotStarted,
}

/// One flow instance of a schedule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FlowReport {
    /// Index of the schedule entry.
    pub entry: usize,
    /// Instance within the entry's `count`.
    pub instance: u32,
    /// Unique within a run (the CBR flow id in packets).
    pub flow_id: u64,
    /// Elephant, mice or CBR.
    pub kind: FlowKindName,
    /// Who sent.
    pub direction: Direction,
    /// The congestion control requested (None for CBR).
    pub congestion_control: Option<String>,
    /// Target host index.
    pub target: usize,
    /// Scheduled start, seconds after the run started.
    pub start_s: f64,
    /// Scheduled stop, seconds after the run started.
    pub stop_s: f64,
    /// Actual start, seconds after the run started.
    pub started_at_s: Option<f64>,
    /// Payload bytes that reached the receiver (CBR: received if merged, else sent).
    pub bytes: u64,
    /// Goodput in bits per second over the flow's active time (CBR: as for `bytes`).
    pub goodput_bps: f64,
    /// Kind-specific details.
    pub outcome: FlowOutcome,
}

/// A whole schedule's results.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScheduleReport {
    /// The kernel default congestion control where the runner ran (BBR here), for provenance.
    pub kernel_default_congestion_control: Option<String>,
    /// `tcp_available_congestion_control`, for provenance.
    pub available_congestion_control: Option<Vec<String>>,
    /// Wall time of the run in seconds.
    pub duration_s: f64,
    /// Every flow instance, in schedule order.
    pub flows: Vec<FlowReport>,
}

impl ScheduleReport {
    /// Fill CBR `received`/`lost`/goodput from the UDP sinks' reports (any order, any number).
    /// Returns how many CBR flows were matched.
    pub fn merge_udp_sinks(&mut self, sinks: &[UdpSinkReport]) -> usize {
        let mut matched = 0;
        for f in &mut self.flows {
            if let FlowOutcome::Cbr(c) = &mut f.outcome {
                if sinks.iter().any(|s| c.merge_sink(s)) {
                    matched += 1;
                    f.bytes = c.received.unwrap_or(0) * c.packet_size as u64;
                    f.goodput_bps = c.goodput_bps.unwrap_or(0.0);
                }
            }
        }
        matched
    }

    /// Sum of goodput over flows of one kind.
    pub fn total_goodput_bps(&self, kind: FlowKindName) -> f64 {
        self.flows
            .iter()
            .filter(|f| f.kind == kind)
            .map(|f| f.goodput_bps)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_the_nearest_sample() {
        let mut v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let p = Percentiles::of(&mut v).unwrap();
        // Index round(99 q): p50 is the 51st value, p99 the 99th.
        assert_eq!((p.min, p.p50, p.p99, p.max), (1.0, 51.0, 99.0, 100.0));
        assert_eq!(p.mean, 50.5);
        let p = Percentiles::of(&mut [3.0]).unwrap();
        assert_eq!((p.p50, p.p99), (3.0, 3.0));
        assert!(Percentiles::of(&mut []).is_none());
    }
}
