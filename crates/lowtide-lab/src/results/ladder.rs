//! The bit-rate ladder's numbers in `summary.json` (Hasan et al., Fig. 1-10): switches,
//! rebuffers, and how often the throughput kept up with the streamed bit rate.

use serde::{Deserialize, Serialize};

use crate::ladder_flow::{LadderRecord, PolicyKind, SwitchRecord};
use lowtide_media::ladder::server_policy::ServerSwitchReason;

/// A second in which the client received at least this share of the bit rate streamed one
/// pipeline delay before it "matches" ([`LadderSummary::rate_match_share`],
/// [`crate::ladder_seconds`]).
pub const RATE_MATCH: f64 = 0.9;
/// Rebuffers this long after play started count against "no rebuffer after the first second".
pub const FIRST_SECOND_S: f64 = 1.0;

/// Per variant, over its runs. Counts are the worst run's (a goal "at most one down-switch"
/// holds in every run); `None` when no run streamed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct LadderSummary {
    pub policy: Option<PolicyKind>,
    /// Switches after the first rung's choice (the probe), worst run.
    pub switches: Option<u64>,
    pub down_switches: Option<u64>,
    /// Times the playout buffer ran empty, worst run...
    pub rebuffers: Option<u64>,
    /// ...and of those, the ones at least a second after play started.
    pub rebuffers_after_first_s: Option<u64>,
    /// Share of the client's whole seconds of the stream (its first and last left out) in which
    /// the throughput was at least [`RATE_MATCH`] × the bit rate streamed one pipeline delay
    /// (the median one-way latency) earlier, all runs pooled; `None` without such seconds.
    pub rate_match_share: Option<f64>,
    pub rate_match_seconds: usize,
    /// The same share as first defined, with the stream's last second counted (only the first
    /// left out), all runs pooled: kept beside the share above, both judged.
    #[serde(default)]
    pub rate_match_share_with_last_second: Option<f64>,
    #[serde(default)]
    pub rate_match_seconds_with_last_second: usize,
    /// Frames made, and frames the transport could not take (dropped at the server).
    /// (Not `frames`: the video's flattened fields share this object.)
    pub frames_made: u64,
    pub frames_dropped_at_server: u64,
    /// Over TFRC: frames sent that never arrived (not in the latency numbers).
    pub frames_lost: u64,
    /// Mean over the stream's seconds, bit/s (all runs pooled).
    pub streamed_bps: Option<f64>,
    pub throughput_bps: Option<f64>,
    /// The packet pair's estimate in the first run, bit/s.
    pub probe_bps: Option<u64>,
    pub congestion_onsets: u64,
    /// The first run's switch records.
    pub switch_log: Vec<SwitchRecord>,
}

/// Switches after the first rung's choice.
fn moves(r: &LadderRecord) -> impl Iterator<Item = &SwitchRecord> {
    r.switches
        .iter()
        .filter(|s| s.reason != ServerSwitchReason::Probe)
}

impl LadderSummary {
    pub fn of(runs: &[&LadderRecord]) -> Option<Self> {
        if runs.is_empty() {
            return None;
        }
        let worst = |f: &dyn Fn(&LadderRecord) -> u64| runs.iter().map(|r| f(r)).max();
        let counted = |pick: fn(&[crate::ladder_flow::Second]) -> &[crate::ladder_flow::Second]| {
            let seconds: Vec<_> = runs
                .iter()
                .flat_map(|r| pick(&r.seconds))
                .filter(|s| s.streamed_bps > 0.0)
                .copied()
                .collect();
            let matched = seconds
                .iter()
                .filter(|s| s.throughput_bps >= RATE_MATCH * s.streamed_bps)
                .count();
            let n = seconds.len();
            (seconds, (n > 0).then(|| matched as f64 / n as f64))
        };
        let (seconds, rate_match_share) = counted(crate::ladder_seconds::whole_seconds);
        let (with_last, share_with_last) = counted(crate::ladder_seconds::seconds_after_the_first);
        let n = seconds.len();
        let mean = |f: &dyn Fn(&crate::ladder_flow::Second) -> f64| {
            (n > 0).then(|| seconds.iter().map(f).sum::<f64>() / n as f64)
        };
        Some(Self {
            policy: runs[0].policy,
            switches: worst(&|r| moves(r).count() as u64),
            down_switches: worst(&|r| moves(r).filter(|s| s.to_bps < s.from_bps).count() as u64),
            rebuffers: worst(&|r| r.rebuffers_s.len() as u64),
            rebuffers_after_first_s: worst(&|r| match r.play_start_s {
                Some(p) => r
                    .rebuffers_s
                    .iter()
                    .filter(|t| **t >= p + FIRST_SECOND_S)
                    .count() as u64,
                None => r.rebuffers_s.len() as u64,
            }),
            rate_match_share,
            rate_match_seconds: n,
            rate_match_share_with_last_second: share_with_last,
            rate_match_seconds_with_last_second: with_last.len(),
            frames_made: runs.iter().map(|r| r.frames).sum(),
            frames_dropped_at_server: runs.iter().map(|r| r.frames_dropped_at_server).sum(),
            frames_lost: runs.iter().map(|r| r.frames_lost).sum(),
            streamed_bps: mean(&|s| s.streamed_bps),
            throughput_bps: mean(&|s| s.throughput_bps),
            probe_bps: runs[0].signals.probe_bps,
            congestion_onsets: runs.iter().map(|r| r.signals.congestion_onsets).sum(),
            switch_log: runs[0].switches.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ladder_flow::Second;
    use lowtide_media::ladder::server_policy::ServerSwitchReason as R;

    fn sec(t_s: f64, streamed: f64, got: f64) -> Second {
        Second {
            t_s,
            streamed_bps: streamed,
            throughput_bps: got,
        }
    }

    #[test]
    fn counts_switches_rebuffers_and_matching_seconds() {
        let sw = |at_s, from_bps, to_bps, reason| SwitchRecord {
            at_s,
            from_bps,
            to_bps,
            reason,
        };
        let r = LadderRecord {
            seconds: vec![
                sec(30.0, 320e3, 0.0), // the first second is left out
                sec(31.0, 320e3, 300e3),
                sec(32.0, 320e3, 200e3),
                sec(33.0, 0.0, 0.0), // nothing streamed: not a second of the stream
                sec(34.0, 320e3, 0.0), // the last second is left out
            ],
            switches: vec![
                sw(30.1, 80_000, 320_000, R::Probe),
                sw(40.0, 320_000, 240_000, R::Congestion),
                sw(70.0, 240_000, 320_000, R::Quiet),
            ],
            rebuffers_s: vec![31.5, 50.0],
            play_start_s: Some(31.0),
            ..LadderRecord::default()
        };
        let s = LadderSummary::of(&[&r]).unwrap();
        assert_eq!((s.switches, s.down_switches), (Some(2), Some(1)));
        assert_eq!((s.rebuffers, s.rebuffers_after_first_s), (Some(2), Some(1)));
        assert_eq!(s.rate_match_seconds, 2);
        assert_eq!(s.rate_match_share, Some(0.5));
        // As first defined, the last second counts too (and misses).
        assert_eq!(s.rate_match_seconds_with_last_second, 3);
        assert_eq!(s.rate_match_share_with_last_second, Some(1.0 / 3.0));
        assert!(LadderSummary::of(&[]).is_none());
        let empty = LadderSummary::of(&[&LadderRecord::default()]).unwrap();
        assert_eq!(empty.rate_match_share, None, "no seconds: no data, not 0");
    }
}
