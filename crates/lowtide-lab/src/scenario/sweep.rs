//! What a run varies: the scenario's own `[sweep]` and the command line's overrides.

use serde::{Deserialize, Serialize};

use super::{check_range, invalid, ApplicationKind, Scenario, ScenarioError};

/// Values a scenario sweeps (`[sweep]`): one full run per combination, one index page.
///
/// ```toml
/// [sweep]
/// threshold_ms = [100, 200, 500, 1000, 2000, 5000, 20000]
/// fps_goal = { reference = "QUIC", variants = ["MinBuf(1,3)"], within = 0.1 }
/// ```
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct SweepConfig {
    /// The conference's latency thresholds, ms (Erbad and Krasic, Fig. 5).
    #[serde(default)]
    pub threshold_ms: Vec<f64>,
    /// Queue limits of both bottleneck directions, in BDP.
    #[serde(default)]
    pub queue_bdp: Vec<f64>,
    /// Congestion controls of every TCP flow.
    #[serde(default)]
    pub congestion: Vec<String>,
    /// A frame-rate goal held at every combination ([`crate::fps_sweep`]).
    #[serde(default)]
    pub fps_goal: Option<FpsGoal>,
}

/// Most values in one `[sweep]` list.
pub const MAX_SWEEP_VALUES: usize = 16;

/// At every combination of a sweep, each of `variants` shows at least `1 - within` times the
/// frame rate of `reference` (issue 10: "fps within 10% of QUIC's at every threshold").
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FpsGoal {
    pub reference: String,
    pub variants: Vec<String>,
    #[serde(default = "a_tenth")]
    pub within: f64,
}

fn a_tenth() -> f64 {
    0.1
}

/// Changes `lowtide lab run` makes to a scenario (see [`Scenario::with_overrides`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    /// Queue limit of both bottleneck directions, in BDP.
    pub queue_bdp: Option<f64>,
    /// Congestion control of every TCP flow: the hosts, every variant, the cross traffic.
    pub congestion: Option<String>,
    /// Frames per adaptation window of the video (Fig. 8: 4, Fig. 9: 2).
    pub window_frames: Option<u32>,
    /// The conference's latency threshold, ms (Erbad and Krasic, Fig. 5).
    pub threshold_ms: Option<f64>,
}

impl Overrides {
    pub fn is_empty(&self) -> bool {
        *self == Overrides::default()
    }

    /// A suffix for the output folder, e.g. `-q0.5-reno-w2`.
    pub fn suffix(&self) -> String {
        let mut out = String::new();
        if let Some(q) = self.queue_bdp {
            out.push_str(&format!("-q{q}"));
        }
        if let Some(cc) = &self.congestion {
            out.push_str(&format!("-{cc}"));
        }
        if let Some(w) = self.window_frames {
            out.push_str(&format!("-w{w}"));
        }
        if let Some(t) = self.threshold_ms {
            out.push_str(&format!("-t{t}"));
        }
        out
    }
}

impl Scenario {
    /// The scenario with one parameter changed everywhere it appears, for sensitivity runs
    /// (`--queue-bdp 0.5`, `--cc reno`): the paper's queue is unknown and its TCP is not ours.
    pub fn with_overrides(&self, o: &Overrides) -> Scenario {
        let mut s = self.clone();
        if let Some(bdp) = o.queue_bdp {
            s.topology.forward.queue = lowtide_netem::QueueLimit::Bdp(bdp);
            s.topology.reverse.queue = lowtide_netem::QueueLimit::Bdp(bdp);
        }
        if let Some(cc) = &o.congestion {
            s.topology.hosts.congestion = cc.clone();
            for v in &mut s.variants {
                v.congestion = None;
            }
            for f in s
                .forward_traffic
                .flows
                .iter_mut()
                .chain(s.reverse_traffic.flows.iter_mut())
            {
                if f.congestion_control.is_some() {
                    f.congestion_control = Some(cc.clone());
                }
            }
        }
        if let Some(w) = o.window_frames {
            s.application.video.window_frames = w;
        }
        if let Some(t) = o.threshold_ms {
            s.application.conference.threshold_ms = t;
        }
        s
    }

    pub(super) fn check_sweep(&self, sw: &SweepConfig) -> Result<(), ScenarioError> {
        let lists = [
            ("sweep.threshold_ms", sw.threshold_ms.len()),
            ("sweep.queue_bdp", sw.queue_bdp.len()),
            ("sweep.congestion", sw.congestion.len()),
        ];
        for (field, n) in lists {
            if n > MAX_SWEEP_VALUES {
                return Err(invalid(
                    field,
                    format!("{n} values"),
                    format!("at most {MAX_SWEEP_VALUES} values"),
                ));
            }
        }
        if lists.iter().all(|(_, n)| *n == 0) {
            return Err(invalid(
                "sweep",
                "no values",
                "at least one of threshold_ms, queue_bdp, congestion with values",
            ));
        }
        let conference = |name: &str| {
            self.variants
                .iter()
                .any(|v| v.name == name && self.application_of(v) == ApplicationKind::Conference)
        };
        if !sw.threshold_ms.is_empty() && !self.variants.iter().any(|v| conference(&v.name)) {
            return Err(invalid(
                "sweep.threshold_ms",
                format!("{:?}", sw.threshold_ms),
                "a sweep of a scenario with a conference variant (the threshold is the conference's)",
            ));
        }
        for (k, &t) in sw.threshold_ms.iter().enumerate() {
            check_range(&format!("sweep.threshold_ms[{k}]"), t, 1.0, 600e3)?;
            if sw.threshold_ms[..k].contains(&t) {
                return Err(invalid(
                    format!("sweep.threshold_ms[{k}]"),
                    t,
                    "a threshold not already in the list",
                ));
            }
        }
        for (k, &q) in sw.queue_bdp.iter().enumerate() {
            check_range(&format!("sweep.queue_bdp[{k}]"), q, 0.01, 100.0)?;
        }
        for (k, cc) in sw.congestion.iter().enumerate() {
            if !lowtide_traffic::congestion::is_valid_name(cc) {
                return Err(invalid(
                    format!("sweep.congestion[{k}]"),
                    cc,
                    "a kernel congestion control name such as cubic, reno or bbr",
                ));
            }
        }
        if let Some(g) = &sw.fps_goal {
            for (field, name) in std::iter::once(("sweep.fps_goal.reference", &g.reference))
                .chain(g.variants.iter().map(|n| ("sweep.fps_goal.variants", n)))
            {
                if !conference(name) {
                    return Err(invalid(
                        field,
                        format!("{name:?}"),
                        "the name of a conference variant of this scenario",
                    ));
                }
            }
            if g.variants.is_empty() {
                return Err(invalid(
                    "sweep.fps_goal.variants",
                    "[]",
                    "at least one variant held to the reference",
                ));
            }
            check_range("sweep.fps_goal.within", g.within, 0.0, 1.0)?;
        }
        Ok(())
    }
}
