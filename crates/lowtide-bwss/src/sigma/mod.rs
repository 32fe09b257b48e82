//! The σ rule: how much the receiver's flows may take together.
//!
//! Mehra, "Efficient Video Streaming using TCP", Sec. 3.3. σ is the sum of the flows'
//! target rates; the rule is "simply reactive" on measured throughput:
//! - at start, σ is the measured aggregate throughput;
//! - a flow measured below α·T (T its target) suffers congestion of its own: σ grows by
//!   (1 − α)·T, which the allocation gives to the other flows; when the flow exceeds α·T
//!   again, σ is set to the measured aggregate;
//! - when at least half of the flows are below α·T, the whole access link is congested: σ
//!   falls to the measured aggregate;
//! - when congestion subsides the aggregate rises, and σ is set to the new aggregate.
//!
//! Where we differ:
//! - **Settling.** After every change of σ (and of the set of flows) the rule waits one
//!   measurement window before it judges any flow again: until then the rates still cover
//!   the old targets, and a flow whose target just rose looks short of it. Without this,
//!   one interference made σ fall to the aggregate tick after tick, each time a little
//!   lower, far below what the link still carried (the lab, `docs/bwss.md`).
//! - **Probing upwards** replaces "the aggregate rises": a receiver that steers its flows
//!   exactly never measures more than σ, so the aggregate cannot rise after σ fell (the
//!   paper's window-based FCS let flows overshoot when queues drained), least of all when
//!   the top flow is application-limited (a video that sends no more than its rung). When
//!   σ has settled, no flow has newly fallen below α·T for `probe_after` and some flow is
//!   not in congestion of its own, σ grows by `probe_step` × the link's rate (× σ when the
//!   link is unknown), never above the ceiling. One window later the probe is judged: it
//!   **failed** when a judged flow measures less than (1 − (1 − α)/2) of its rate before
//!   the probe (a full link gives the extra out of the others' rates) or the aggregate did
//!   not rise by half the step (the link did not carry it; judged only when a flow that
//!   takes the step is fast enough to judge: the downloads starved at the minimums' floor
//!   read a segment now and then, and σ never climbed back). A failed probe is undone (σ
//!   back to its value before, not to the aggregate), the wait before the next doubles and
//!   the next step halves (both up to [`MAX_PROBE_BACKOFF`]), so a full link is probed
//!   ever more rarely and gently instead of oscillating. A held probe makes the next
//!   start at once with a step four times larger (up to `probe_step`); after link
//!   congestion the first step is `probe_step` / [`AFTER_CONGESTION_STEP_DIV`]. This is
//!   the probing of the authors' earlier system (INFOCOM 2003), made cautious because
//!   every failed probe is taken from the flows the user put first.
//! - **Link congestion needs two judged flows.** With only one flow judged (the others
//!   starved by the allocation, young or too slow to judge), "at least half below α·T"
//!   cannot tell the link's congestion from the flow's own, and taking it for the link let
//!   an application-limited video pull σ down to its own rate, starving the downloads for
//!   good (measured in the lab). It counts as congestion of its own.
//! - **A flow in congestion of its own is capped** at the target it had when it began
//!   ([`SigmaRule::cap`], applied by the allocation), so the (1 − α)·T it hands on reaches
//!   the other flows, as the paper intends, instead of returning to it through its minimum.
//! - **Minimums first, also when the link shrinks** (the paper's allocation gives minimum
//!   rates by strict priority, Sec. 3.1, but its σ rule only ever hands a short flow's
//!   slack on to the others). A minimum rate ([`FlowSample::guaranteed`]) is **in force**
//!   once its flow has been measured over a whole window (past slow start) and until it
//!   shows that it wants less (below), not only once it has been at its minimum: a video
//!   that starts behind the downloads' queue and meets a shrinking link before a whole
//!   window at its minimum would never get it (the namespace test `bwss_lab` failed so in
//!   a third of its runs). When a judged flow whose minimum is in force measures more than
//!   [`MIN_TOLERANCE_SEGMENTS`] below it (over the whole window once it has been at its
//!   minimum over one; before, over the recent window only, as at the onset below: its
//!   first windows still hold its slow start), σ **yields**: it falls to min(σ, aggregate) less the shortfall, never below the sum of
//!   the minimums, so the lower-priority flows give way (steered by receive window they
//!   lose nothing to the link's losses, which fall on the flow with the larger window).
//!   A window later the yield is judged: *held* (the flow is at its minimum again), *rising*
//!   (another window; at the floor only at a pace that reaches the minimum within it: a
//!   flow creeping up while another host's flow takes what the others gave never will),
//!   not rising with room left (yield again by the shortfall) or at the floor (*undone*:
//!   the flow wants less than its minimum, or an outside host's flow took what the others
//!   gave; σ goes back and the paper's per-flow rule judges the flow until
//!   it reaches its minimum again; not while the flow has been at its minimum over the
//!   recent window since the last step, within the whole window's tolerance, after it has
//!   had it over a whole window before: its losses, not an application that wants less).
//!   A short flow is not taken for congestion of its own while σ can still fall for it, so
//!   its slack is not handed on.
//! - **The onset.** Judged over the whole window a minimum lost at the onset of congestion
//!   shows diluted by the seconds before, and the yield's verdict waits a window: in the
//!   lab σ was still 830-850 kbit/s when the queue overflowed. So a flow with a minimum is
//!   also judged over the recent window (window / [`RECENT_DIV`]; [`FlowSample::recent`]):
//!   short there, σ yields at once to what the flows get now less [`ONSET_DRAIN`] times
//!   the shortfall (the queue that grew must drain to give the flow its bytes back), and
//!   again each recent window while the flow stays short and its rate does not rise; the
//!   yield is then judged as above, a window after its last step. A flow that has never
//!   been at its minimum, not even over a recent window, is *starting* (slow start, its
//!   player's first rung): what the flows get over its first windows is no measure of the
//!   link, so σ yields from itself by what the flow can take at once (its shortfall, at most
//!   its rate or TCP's initial window, [`STARTING_SEGMENTS`]), and steps again only once
//!   the others gave way (they get no more than their targets) and its rate still does
//!   not rise.
//! - **A margin under the link while a minimum is in force** ([`MIN_MARGIN`],
//!   [`SigmaRule::ceiling`]): σ at the link's full rate leaves no room for a burst of
//!   arrivals above the reads, the drop-tail queue overflows and the losses fall on the
//!   flow with the largest window, the one with the minimum.
//! - **Protecting a minimum.** After a held yield σ sits below what the link has left;
//!   until σ is back at the link, held probes grow to half of `probe_step` at most, a probe
//!   that made a flow lose its minimum steps σ back as far below its start as it went
//!   above (the queue it built drains), and the next probe waits the longest backoff. A
//!   probe that dilutes the minimum's flow over the recent window (by more than
//!   [`PROBE_DILUTION_SEGMENTS`] below its rate when the probe began and below its
//!   minimum) is undone at once with the same backoff: into a full link the step first
//!   shows as that dilution, a window before the probe's verdict, and the paper's reactive
//!   rule has no probes to hold back (ours are the earlier system's, Sec. 3.3).
//! - **Recovery from congestion of its own** takes back the (1 − α)·T the flow had handed
//!   on, instead of setting σ to the aggregate: our aggregate is measured over a window
//!   that still holds the congested seconds, and under exact pacing it is never above σ,
//!   so the paper's reset could only ratchet σ down. The slack is what σ really grew by
//!   (at the link it cannot grow), so recovery never takes back more than was handed on.
//! - **A rising aggregate** raises σ only when it is more than (1 − α) above σ: a little
//!   above is a paced reader's bucket, and taking it reset the probe timer for ever.
//! - **Flows too slow to judge.** A flow whose target is under [`JUDGED_SEGMENTS`]
//!   segments per window is not judged (reads count in whole segments, so its measured
//!   rate cannot resolve α), nor is a young flow (measured over less than a window); both
//!   count in the aggregate.
//! - **Flows starting or stopping** clear the per-flow congestion marks, undo a probe
//!   under way and restart settling (the paper resets "the BWSS state"); σ itself is kept,
//!   because the aggregate right after a change measures the old set of flows.
//! - **Flows without a minimum are judged by what arrived, not what was read** (when
//!   the reader reports `tcpi_bytes_received`; [`FlowSample::measured`]). The paper's FCS
//!   measures the flow's throughput at the receiver; ours paces reads, and a steered
//!   download reads its budget out of the backlog waiting in its receive buffer for
//!   seconds after the link stopped carrying it (the lab: σ at 912 kbit/s for 6 s after
//!   the interferer took 240 of the 960), so link congestion, a probe's carriage and the
//!   aggregate σ falls to are judged on its arrivals. A flow with a minimum is judged by
//!   its reads: the minimum is promised to its application, and an unclamped video's
//!   arrivals burst with loss recovery (judged by them, the onset yield fired on the
//!   bursts and held σ at the minimums' floor in the lab).
//! - σ never exceeds the access link's rate when it is configured (less the margin while a
//!   minimum is in force), and starts there (the paper starts from the first measured
//!   aggregate, which is what happens when it is not).
//! - **Keeping the host's share** ([`SigmaParams::keep_share`], on by default). The
//!   paper assumes the access link is the receiver's own: σ reset to the aggregate on
//!   link congestion and raised only as the aggregate rises is all the link can give. When
//!   another host's TCP flow shares the bottleneck, every kbit/s σ holds the host's flows
//!   below what they would take goes to that flow (the lab: it got 2.5 × its plain-TCP
//!   rate, `docs/bwss.md`). So a host redistributes within its share but does not shrink
//!   it: while no minimum is *in force* (its flow measured over a whole window, and not
//!   shown to want less: σ yielded for it and its rate did not rise), σ never sits below the measured aggregate and grows every
//!   tick by one segment per flow per round trip, each round trip (TCP's additive
//!   increase, at each flow's measured round trip, [`FlowSample::rtt`]; [`GROWTH_RTT`]
//!   for a flow without one), up to the ceiling; link congestion leaves σ there (the
//!   paper's reset to the aggregate set each flow's target at its mean rate, which cuts the
//!   upswing of a TCP window's sawtooth: the mean fell and another host's flow took the
//!   rest), and probes are not needed.
//!   A flow with a minimum not in force is capped at what it takes plus room to grow
//!   back, so the rest of σ goes to the others, who go on competing for the host's share:
//!   once a yield showed that it wants less (a video on a low rung, or one losing to
//!   another host's flow) at [`WANTS_LESS_HEADROOM`] times its rate; a flow whose
//!   minimum gets none of σ (higher-priority minimums took it all: target 0, so not in
//!   force) at twice its rate, when that is below its minimum; such a flow is not judged (it says
//!   nothing about the link). While a minimum *is* in force the rule above
//!   (yields, cautious probes) keeps it: every kbit/s σ holds above what the link has
//!   left is taken from the minimum, and an unresponsive interferer (the paper's UDP flow)
//!   cannot be told from a responsive one by the receiver's rates alone.
//!
//! Every transition is counted by reason ([`SigmaCounters`]).
//!
//! The parts: [`SigmaRule::on_tick`] applies the rule, probes and keeps the host's share
//! (`tick.rs`); the yields for a flow short of its minimum and the probes that dilute it are
//! in `minimum.rs`.

mod minimum;
#[cfg(test)]
mod tests;
mod tick;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// A failed probe doubles the wait before the next, up to this many times `probe_after`,
/// and halves the next probe's step, down to `probe_step` over this many.
pub const MAX_PROBE_BACKOFF: u32 = 8;
/// After link congestion the next probe's step is `probe_step` over this.
pub const AFTER_CONGESTION_STEP_DIV: u32 = 4;
/// A flow is judged against α·T only when its target brings at least this many full-size
/// segments per window: below that, whole-segment reads cannot resolve 1 − α = 10%.
pub const JUDGED_SEGMENTS: f64 = 10.0;
/// A flow is short of its minimum when it measures more than this many full-size segments
/// per window below it: reads count in whole segments, so one segment either way is
/// rounding, and a video served at 517.5 kbit/s for a 520 minimum is not short.
pub const MIN_TOLERANCE_SEGMENTS: f64 = 2.0;
/// The onset of congestion is judged over the window divided by this (500 ms in the lab): a
/// minimum lost shows there undiluted by the seconds before, still over 20 segments of a
/// 520 kbit/s flow.
pub const RECENT_DIV: u32 = 4;
/// The onset yield takes σ this many times the short flow's shortfall below what the flows
/// get now: once for what it lacks, and again so the queue that grew at the onset drains.
/// A drop-tail FIFO gives every flow's bytes back only as its queue shrinks: a queue that
/// merely stops growing leaves the minimum's flow diluted, and full, it overflows on the
/// next burst. In `system.rs`'s FIFO model of the lab's onset: with 1, the onset's first two
/// seconds short (469, 499 kbit/s), with 2 the first only (484); but 34 of the 40
/// interference seconds at the minimum with 2 against 36 with 1 (σ drained lower climbs
/// back with more probes, and a probe into the full link costs a second or two).
pub const ONSET_DRAIN: f64 = 2.0;
/// A starting flow short of its minimum (the onset yield, module doc) is yielded at least
/// this many full-size segments per recent window at once, even when it reads less: TCP's
/// initial window (RFC 6928), what a flow can take in its first round trip.
pub const STARTING_SEGMENTS: f64 = 10.0;
/// While a probe is under way and a minimum is in force, a minimum's flow that gets this
/// many full-size segments per recent window less than when the probe began (and less
/// than its minimum) fails the probe at once: a full link shows a probe first as that
/// dilution, a window before the probe's verdict and before the queue overflows on it.
pub const PROBE_DILUTION_SEGMENTS: f64 = 1.0;
/// While a flow has a minimum rate, σ stays this fraction below the access link: a link
/// filled to the last bit by steered flows overflows its queue at any burst of arrivals
/// above the reads, and the losses fall on the flow with the largest window, the minimum's.
pub const MIN_MARGIN: f64 = 0.05;
/// The round trip [`SigmaParams::keep_share`] grows σ at for a flow that has not reported
/// its own ([`FlowSample::rtt`]): one segment per flow per round trip, each round trip
/// (TCP's additive increase). The lab's round trip with its drop-tail queue half full
/// (30 ms + 15 packets at 960 kbit/s, about 220 ms).
pub const GROWTH_RTT: Duration = Duration::from_millis(200);
/// The shortest measured round trip σ grows at: growth goes as 1 / RTT², and a loopback
/// estimate of microseconds would make the step unbounded where no link caps σ.
pub const MIN_GROWTH_RTT: Duration = Duration::from_millis(10);
/// A flow that has shown it wants less than its minimum ([`SigmaRule::cap`]) may take this
/// many times what it takes now (over the recent window or the whole, the larger): room to
/// grow back by a quarter per tick while the rest goes to the host's other flows.
pub const WANTS_LESS_HEADROOM: f64 = 1.25;
/// The full-size segment the reads count in, bytes.
const SEGMENT: f64 = 1448.0;

/// A rate of one full-size segment per `span`, bit/s.
fn segment_rate(span: Duration) -> f64 {
    SEGMENT * 8.0 / span.as_secs_f64()
}

/// One flow as the rule sees it at a tick.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlowSample {
    pub id: u64,
    /// The target it was given, bit/s.
    pub target: f64,
    /// Its measured rate over the last window, bit/s: for a flow without a minimum what
    /// arrived (`tcpi_bytes_received`) when the reader reports it, else what was read;
    /// `None` while younger than a window.
    pub measured: Option<f64>,
    /// Its rate over the last window / [`RECENT_DIV`], bit/s (`None` as `measured`): what
    /// it gets now, for a minimum lost at the onset of congestion.
    pub recent: Option<f64>,
    /// Bytes/s it delivered in its partial first window (counts in the aggregate).
    pub partial: f64,
    /// The part of its target that is its minimum rate, given before any weighted share
    /// (strict priority), bit/s; 0 for a flow without a minimum.
    pub guaranteed: f64,
    /// Its configured minimum rate, bit/s (0: none): what its demand cap is measured
    /// against ([`SigmaRule::cap`]).
    pub min: f64,
    /// Its round trip as the receiver estimates it (`tcpi_rcv_rtt`), when reported: what
    /// `keep_share` grows σ at ([`GROWTH_RTT`] otherwise).
    pub rtt: Option<Duration>,
}

impl FlowSample {
    /// How far its measured rate is below its minimum, bit/s (no measurement: all of it).
    fn shortfall(&self) -> f64 {
        self.guaranteed - self.measured.unwrap_or(0.0)
    }
}

/// Parameters of the rule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SigmaParams {
    pub alpha: f64,
    /// The window the flows' rates are measured over.
    pub window: Duration,
    pub probe_after: Option<Duration>,
    pub probe_step: f64,
    /// bit/s; `None`: unknown.
    pub link: Option<f64>,
    /// While no minimum is in force, σ grows as TCP would and a minimum its flow does not
    /// take goes to the others (module doc, "Keeping the host's share"); false: the
    /// paper's rule (with the changes above) throughout.
    pub keep_share: bool,
}

/// Transitions of the rule, counted by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SigmaCounters {
    pub flow_congested: u64,
    pub flow_recovered: u64,
    pub link_congested: u64,
    pub aggregate_rose: u64,
    pub probes: u64,
    pub probe_held: u64,
    pub probe_failed: u64,
    pub flow_set_changed: u64,
    /// A flow short of its minimum made σ yield (fall below the aggregate).
    pub min_short: u64,
    /// A yield let the short flow reach its minimum again.
    pub yield_held: u64,
    /// A yield did not raise the short flow's rate: undone, the flow wants less.
    pub yield_undone: u64,
    /// A flow short of its minimum over the recent window made σ yield (or yield further)
    /// without waiting for the whole window: the onset of congestion.
    pub onset_yield: u64,
    /// A flow with a minimum not in force was capped below it at what it takes plus room
    /// to grow back ([`WANTS_LESS_HEADROOM`] × after a yield for it was undone, twice it
    /// while its target is 0), the rest went to the others (counted when the cap begins).
    pub demand_capped: u64,
    /// A probe failed before its verdict: a minimum's flow was diluted by it (also
    /// counted in `probe_failed`).
    pub probe_backed_off: u64,
}

/// A probe waiting for its verdict.
#[derive(Debug, Clone)]
struct Probe {
    /// σ before the probe.
    before: f64,
    /// The aggregate when it began.
    aggregate: f64,
    /// The judged flows' measured rates when it began.
    rates: BTreeMap<u64, f64>,
    /// The recent rates ([`FlowSample::recent`]) of the flows whose minimum was in force
    /// when it began: a dilution below them fails it early ([`PROBE_DILUTION_SEGMENTS`]).
    recent: BTreeMap<u64, f64>,
}

/// σ lowered for a flow short of its minimum, waiting for its verdict.
#[derive(Debug, Clone, Copy)]
struct Yield {
    flow: u64,
    /// σ before the yield.
    before: f64,
    /// The short flow's measured rate when it began (or at the last verdict).
    rate: f64,
    /// Its recent rate ([`FlowSample::recent`]) at the last step of σ.
    recent: f64,
    /// Its recent rate was at its minimum at some tick since the last step, within the
    /// whole window's tolerance ([`MIN_TOLERANCE_SEGMENTS`] per window, not per recent
    /// window: a video that another host's flow holds at 480 of its 520 kbit/s is not at
    /// it): it can have it (losses, not an application that wants less).
    reached: bool,
}

/// The state of the σ rule. Call [`on_tick`](Self::on_tick) once per control interval with
/// every flow; read [`sigma`](Self::sigma) for the allocation.
#[derive(Debug, Clone)]
pub struct SigmaRule {
    params: SigmaParams,
    sigma: Option<f64>,
    /// Flows in congestion of their own: (the target they had then, the slack handed on),
    /// bit/s.
    congested: BTreeMap<u64, (f64, f64)>,
    /// When σ or the set of flows last changed: rates are stale for a window after.
    changed_at: Option<Instant>,
    /// Since when no flow has newly fallen below α·T (after settling).
    quiet_since: Option<Instant>,
    probe: Option<Probe>,
    yielded: Option<Yield>,
    /// A yield held: until σ is back at the link (or the flows change), probes stay small,
    /// for every failed probe may take a flow's minimum.
    protecting: bool,
    /// Flows whose rate did not rise when σ yielded for them: they want less than their
    /// minimum (application-limited), and the paper's per-flow rule applies to them.
    wants_less: BTreeSet<u64>,
    /// Flows that have measured at their minimum over a whole window: only these are
    /// judged short of it over the whole window (a flow's first windows still hold its
    /// slow start); the others over the recent window only ([`Self::onset_yield`]).
    reached_min: BTreeSet<u64>,
    /// Flows whose recent rate has been at their minimum at some tick (within the whole
    /// window's tolerance): a flow with a minimum that is not in here is starting
    /// ([`Self::onset_yield`]).
    seen_at_min: BTreeSet<u64>,
    /// The wait before the next probe, in units of `probe_after` (doubles on a failed
    /// probe, back to 1 after a held one), and the divisor of `probe_step` (doubles on a
    /// failed probe, a quarter after a held one).
    backoff: u32,
    step_div: u32,
    flows: Vec<u64>,
    /// Some flow has a minimum rate: σ keeps [`MIN_MARGIN`] below the link.
    minimums: bool,
    /// Flows with a minimum not in force that take less than half of it: their caps, bit/s
    /// (recomputed every tick).
    demand_caps: BTreeMap<u64, f64>,
    last_tick: Option<Instant>,
    counters: SigmaCounters,
}

impl SigmaRule {
    pub fn new(params: SigmaParams) -> Self {
        Self {
            params,
            // A known access link is the best first guess; else the first measurement.
            sigma: params.link,
            congested: BTreeMap::new(),
            changed_at: None,
            quiet_since: None,
            probe: None,
            yielded: None,
            protecting: false,
            wants_less: BTreeSet::new(),
            reached_min: BTreeSet::new(),
            seen_at_min: BTreeSet::new(),
            backoff: 1,
            step_div: 1,
            flows: vec![],
            minimums: false,
            demand_caps: BTreeMap::new(),
            last_tick: None,
            counters: SigmaCounters::default(),
        }
    }

    /// σ in bit/s; `None` until the first aggregate was measured (flows run unsteered).
    pub fn sigma(&self) -> Option<f64> {
        self.sigma
    }

    pub fn counters(&self) -> SigmaCounters {
        self.counters
    }

    /// A flow that showed it wants less than its minimum (σ yielded for it and its rate
    /// did not rise): its minimum is not in force until it is at it again.
    pub fn wants_less(&self, id: u64) -> bool {
        self.wants_less.contains(&id)
    }

    /// Flows currently in congestion of their own.
    pub fn is_congested(&self, id: u64) -> bool {
        self.congested.contains_key(&id)
    }

    /// The most a flow may be given: in congestion of its own, its target when the
    /// congestion began (the slack it hands on must reach the others); with a minimum not in
    /// force, what it takes with room to grow back when that is below its minimum
    /// (`keep_share`; [`WANTS_LESS_HEADROOM`] after a yield for it was undone).
    pub fn cap(&self, id: u64) -> Option<f64> {
        let own = self.congested.get(&id).map(|c| c.0);
        let demand = self.demand_caps.get(&id).copied();
        match (own, demand) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The most σ may be: the link, less [`MIN_MARGIN`] while a flow has a minimum.
    pub fn ceiling(&self) -> Option<f64> {
        let margin = if self.minimums { MIN_MARGIN } else { 0.0 };
        self.params.link.map(|l| l * (1.0 - margin))
    }

    fn set(&mut self, now: Instant, sigma: f64) {
        let capped = self.ceiling().map_or(sigma, |c| sigma.min(c));
        if self.ceiling().is_some_and(|c| capped >= c) {
            self.protecting = false; // back at the ceiling: nothing left to protect from
        }
        self.sigma = Some(capped.max(0.0));
        self.changed_at = Some(now);
    }
}
