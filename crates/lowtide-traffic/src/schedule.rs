//! The cross-traffic schedule: what runs, from when to when, to which host.
//!
//! [`Schedule`] is the typed, TOML-friendly form a scenario file holds (`[[flow]]` tables);
//! [`Schedule::validate`] turns it into a [`Plan`] of flow instances with every value checked
//! once, up front, so a bad scenario fails before any namespace or socket exists, with an
//! error that names the entry, the field, the value and what is allowed. The target host
//! index is checked by the runner, which knows how many targets there are.
//!
//! ```toml
//! [[flow]]
//! kind = "elephant"
//! count = 2
//! start_s = 0.0
//! stop_s = 30.0
//! congestion_control = "cubic"
//! direction = "upload"        # or "download": the sink sends
//! window_bytes = 20000         # uploads: at most this many bytes in flight (ns-2's window_)
//! target = 0
//!
//! [[flow]]
//! kind = "mice"
//! bytes_kb = 100              # KiB per transfer
//! gap_ms = 50
//! start_s = 5.0
//! stop_s = 25.0
//! congestion_control = "reno"
//!
//! [[flow]]
//! kind = "cbr"
//! rate_bps = 8_000_000        # UDP payload bits/s
//! packet_size = 1200          # UDP payload bytes
//! stop_s = 30.0
//! ```

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::cbr::MAX_PACKET_SIZE;
use crate::congestion;
use crate::wire::DATAGRAM_HEADER_LEN;
use crate::Direction;

/// Instances per entry at most.
pub const MAX_COUNT: u32 = 64;
/// Flow instances per schedule at most (each is a thread).
pub const MAX_FLOWS: usize = 256;
/// Latest allowed stop time: one day.
pub const MAX_TIME_S: f64 = 86_400.0;
/// Largest mouse transfer: 1 GiB.
pub const MAX_BYTES_KB: u64 = 1 << 20;
/// Longest gap between mice: one hour.
pub const MAX_GAP_MS: u64 = 3_600_000;
/// CBR rate bounds (payload bits/s).
pub const MIN_RATE_BPS: u64 = 1_000;
/// CBR rate bounds (payload bits/s).
pub const MAX_RATE_BPS: u64 = 10_000_000_000;
/// CBR packets per second at most (the sender is one thread sleeping per packet).
pub const MAX_PACKETS_PER_S: u64 = 1_000_000;

/// The kind of a flow, as written in schedules and reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlowKindName {
    /// Long-lived bulk TCP.
    Elephant,
    /// Repeated short TCP transfers.
    Mice,
    /// Constant-bit-rate UDP.
    Cbr,
}

impl fmt::Display for FlowKindName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FlowKindName::Elephant => "elephant",
            FlowKindName::Mice => "mice",
            FlowKindName::Cbr => "cbr",
        })
    }
}

/// A schedule as written: a list of `[[flow]]` entries.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Schedule {
    /// The entries.
    #[serde(default, rename = "flow")]
    pub flows: Vec<FlowSpec>,
}

/// One entry as written; see the module doc for an example.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowSpec {
    /// `elephant`, `mice` or `cbr`.
    pub kind: FlowKindName,
    /// Identical instances (default 1).
    #[serde(default = "one")]
    pub count: u32,
    /// Seconds after the run starts (default 0).
    #[serde(default)]
    pub start_s: f64,
    /// Seconds after the run starts.
    pub stop_s: f64,
    /// Required for TCP kinds (the machine default is BBR, so it is always explicit).
    #[serde(default)]
    pub congestion_control: Option<String>,
    /// `upload` (default) or `download`; TCP kinds only.
    #[serde(default)]
    pub direction: Option<Direction>,
    /// Mice: KiB (1024 bytes) per transfer.
    #[serde(default)]
    pub bytes_kb: Option<u64>,
    /// Mice: milliseconds between transfers (default 0).
    #[serde(default)]
    pub gap_ms: Option<u64>,
    /// CBR: UDP payload bits per second.
    #[serde(default)]
    pub rate_bps: Option<u64>,
    /// CBR: UDP payload bytes per packet.
    #[serde(default)]
    pub packet_size: Option<usize>,
    /// Upload elephants: the most bytes in flight, as ns-2's `window_` (see
    /// [`crate::window`]); absent, only TCP's own windows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_bytes: Option<u32>,
    /// Index of the target host (default 0).
    #[serde(default)]
    pub target: usize,
}

fn one() -> u32 {
    1
}

/// A schedule that cannot run, with the place and the rule.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// Not valid TOML, or a field of the wrong type or an unknown field/kind.
    #[error("cannot parse the cross-traffic schedule: {0}")]
    Parse(String),
    /// A value out of range.
    #[error("flow[{entry}].{field} = {value}: {allowed}")]
    Invalid {
        /// Entry index.
        entry: usize,
        /// Field name.
        field: &'static str,
        /// The value, formatted.
        value: String,
        /// What is allowed.
        allowed: String,
    },
    /// A field the kind needs is missing.
    #[error("flow[{entry}] ({kind}): {field} is required: {allowed}")]
    Missing {
        /// Entry index.
        entry: usize,
        /// The entry's kind.
        kind: FlowKindName,
        /// Field name.
        field: &'static str,
        /// What is allowed.
        allowed: String,
    },
    /// A field that means nothing for this kind (likely a mistake).
    #[error("flow[{entry}] ({kind}): {field} does not apply to {kind} flows; remove it")]
    NotApplicable {
        /// Entry index.
        entry: usize,
        /// The entry's kind.
        kind: FlowKindName,
        /// Field name.
        field: &'static str,
    },
    /// Too many flow instances in total.
    #[error("the schedule has {total} flow instances (sum of count); at most {max} are allowed")]
    TooManyFlows {
        /// Sum of counts.
        total: usize,
        /// [`MAX_FLOWS`].
        max: usize,
    },
}

/// What a validated flow does.
#[derive(Clone, Debug, PartialEq)]
pub enum FlowKind {
    /// Bulk TCP.
    Elephant {
        /// Algorithm of the sending side.
        congestion_control: String,
        /// Who sends.
        direction: Direction,
        /// The most bytes in flight (uploads; None: only TCP's own windows).
        window: Option<u32>,
    },
    /// Repeated TCP transfers.
    Mice {
        /// Algorithm of the sending side.
        congestion_control: String,
        /// Who sends.
        direction: Direction,
        /// Bytes per transfer.
        bytes: u64,
        /// Pause between transfers.
        gap: Duration,
    },
    /// Constant-bit-rate UDP, client to sink.
    Cbr {
        /// Payload bits per second.
        rate_bps: u64,
        /// Payload bytes per packet.
        packet_size: usize,
    },
}

impl FlowKind {
    /// The kind's name.
    pub fn name(&self) -> FlowKindName {
        match self {
            FlowKind::Elephant { .. } => FlowKindName::Elephant,
            FlowKind::Mice { .. } => FlowKindName::Mice,
            FlowKind::Cbr { .. } => FlowKindName::Cbr,
        }
    }
}

/// One flow instance to run.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedFlow {
    /// Index of the schedule entry.
    pub entry: usize,
    /// Instance within the entry.
    pub instance: u32,
    /// Start, after the run starts.
    pub start: Duration,
    /// Stop, after the run starts.
    pub stop: Duration,
    /// Target host index.
    pub target: usize,
    /// What it does.
    pub kind: FlowKind,
}

/// A validated schedule: every instance, in entry order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// The flow instances.
    pub flows: Vec<PlannedFlow>,
}

impl Plan {
    /// When the last flow stops, after the run starts.
    pub fn duration(&self) -> Duration {
        self.flows.iter().map(|f| f.stop).max().unwrap_or_default()
    }

    /// Largest target index used (None for an empty plan).
    pub fn max_target(&self) -> Option<usize> {
        self.flows.iter().map(|f| f.target).max()
    }
}

impl Schedule {
    /// Parse TOML (`[[flow]]` tables) without validating.
    pub fn from_toml_str(s: &str) -> Result<Self, ScheduleError> {
        toml::from_str(s).map_err(|e| ScheduleError::Parse(e.to_string().trim_end().to_owned()))
    }

    /// Parse and validate in one step.
    pub fn plan_from_toml_str(s: &str) -> Result<Plan, ScheduleError> {
        Self::from_toml_str(s)?.validate()
    }

    /// Check every entry and expand counts into instances.
    pub fn validate(&self) -> Result<Plan, ScheduleError> {
        let total: usize = self.flows.iter().map(|f| f.count as usize).sum();
        if total > MAX_FLOWS {
            return Err(ScheduleError::TooManyFlows {
                total,
                max: MAX_FLOWS,
            });
        }
        let mut plan = Plan::default();
        for (entry, spec) in self.flows.iter().enumerate() {
            let kind = spec.validate(entry)?;
            for instance in 0..spec.count {
                plan.flows.push(PlannedFlow {
                    entry,
                    instance,
                    start: Duration::from_secs_f64(spec.start_s),
                    stop: Duration::from_secs_f64(spec.stop_s),
                    target: spec.target,
                    kind: kind.clone(),
                });
            }
        }
        Ok(plan)
    }
}

impl FlowSpec {
    fn validate(&self, entry: usize) -> Result<FlowKind, ScheduleError> {
        let kind = self.kind;
        let invalid = |field, value: String, allowed: String| ScheduleError::Invalid {
            entry,
            field,
            value,
            allowed,
        };
        let missing = |field, allowed: &str| ScheduleError::Missing {
            entry,
            kind,
            field,
            allowed: allowed.to_owned(),
        };
        let not_applicable = |field| ScheduleError::NotApplicable { entry, kind, field };

        if !(1..=MAX_COUNT).contains(&self.count) {
            return Err(invalid(
                "count",
                self.count.to_string(),
                format!("an integer from 1 to {MAX_COUNT}"),
            ));
        }
        if !(self.start_s.is_finite() && (0.0..MAX_TIME_S).contains(&self.start_s)) {
            return Err(invalid(
                "start_s",
                self.start_s.to_string(),
                format!("seconds from 0 to below {MAX_TIME_S}"),
            ));
        }
        if !(self.stop_s.is_finite() && self.stop_s > self.start_s && self.stop_s <= MAX_TIME_S) {
            return Err(invalid(
                "stop_s",
                self.stop_s.to_string(),
                format!(
                    "seconds after start_s ({}) and at most {MAX_TIME_S}",
                    self.start_s
                ),
            ));
        }
        let tcp = |this: &Self| -> Result<(String, Direction), ScheduleError> {
            let cc = this.congestion_control.clone().ok_or_else(|| {
                missing(
                    "congestion_control",
                    "a name from /proc/sys/net/ipv4/tcp_available_congestion_control, e.g. \
                     \"cubic\", \"reno\" or \"bbr\" (the machine default is BBR, so TCP flows \
                     name theirs explicitly)",
                )
            })?;
            if !congestion::is_valid_name(&cc) {
                return Err(invalid(
                    "congestion_control",
                    format!("{cc:?}"),
                    "1 to 15 characters of a-z, 0-9 and '_', e.g. \"cubic\"".to_owned(),
                ));
            }
            Ok((cc, this.direction.unwrap_or_default()))
        };
        match kind {
            FlowKindName::Elephant | FlowKindName::Mice => {
                if self.rate_bps.is_some() {
                    return Err(not_applicable("rate_bps"));
                }
                if self.packet_size.is_some() {
                    return Err(not_applicable("packet_size"));
                }
            }
            FlowKindName::Cbr => {
                if self.congestion_control.is_some() {
                    return Err(not_applicable("congestion_control"));
                }
                if self.bytes_kb.is_some() {
                    return Err(not_applicable("bytes_kb"));
                }
                if self.gap_ms.is_some() {
                    return Err(not_applicable("gap_ms"));
                }
                if self.direction == Some(Direction::Download) {
                    return Err(invalid(
                        "direction",
                        "\"download\"".to_owned(),
                        "only \"upload\" for cbr (for reverse CBR run the client on the \
                         other host)"
                            .to_owned(),
                    ));
                }
            }
        }
        if kind != FlowKindName::Elephant && self.window_bytes.is_some() {
            return Err(not_applicable("window_bytes"));
        }
        Ok(match kind {
            FlowKindName::Elephant => {
                if self.bytes_kb.is_some() {
                    return Err(not_applicable("bytes_kb"));
                }
                if self.gap_ms.is_some() {
                    return Err(not_applicable("gap_ms"));
                }
                let (congestion_control, direction) = tcp(self)?;
                let window = match self.window_bytes {
                    None => None,
                    Some(w) if direction == Direction::Download => {
                        return Err(invalid(
                            "window_bytes",
                            w.to_string(),
                            "only for uploads: the sender bounds itself (run a download's \
                             flow from the other host as an upload)"
                                .to_owned(),
                        ))
                    }
                    Some(w)
                        if (crate::window::MIN_BYTES..=crate::window::MAX_BYTES).contains(&w) =>
                    {
                        Some(w)
                    }
                    Some(w) => {
                        return Err(invalid(
                            "window_bytes",
                            w.to_string(),
                            format!(
                                "bytes from {} to {} (ns-2's window_ of 20 packets of 1000 B \
                                 is 20000)",
                                crate::window::MIN_BYTES,
                                crate::window::MAX_BYTES
                            ),
                        ))
                    }
                };
                FlowKind::Elephant {
                    congestion_control,
                    direction,
                    window,
                }
            }
            FlowKindName::Mice => {
                let (congestion_control, direction) = tcp(self)?;
                let kb = self.bytes_kb.ok_or_else(|| {
                    missing(
                        "bytes_kb",
                        &format!("KiB per transfer, from 1 to {MAX_BYTES_KB}"),
                    )
                })?;
                if !(1..=MAX_BYTES_KB).contains(&kb) {
                    return Err(invalid(
                        "bytes_kb",
                        kb.to_string(),
                        format!("KiB per transfer, from 1 to {MAX_BYTES_KB}"),
                    ));
                }
                let gap_ms = self.gap_ms.unwrap_or(0);
                if gap_ms > MAX_GAP_MS {
                    return Err(invalid(
                        "gap_ms",
                        gap_ms.to_string(),
                        format!("milliseconds from 0 to {MAX_GAP_MS}"),
                    ));
                }
                FlowKind::Mice {
                    congestion_control,
                    direction,
                    bytes: kb * 1024,
                    gap: Duration::from_millis(gap_ms),
                }
            }
            FlowKindName::Cbr => {
                let rate_allowed = format!("payload bits/s from {MIN_RATE_BPS} to {MAX_RATE_BPS}");
                let size_allowed =
                    format!("UDP payload bytes from {DATAGRAM_HEADER_LEN} to {MAX_PACKET_SIZE}");
                let rate_bps = self
                    .rate_bps
                    .ok_or_else(|| missing("rate_bps", &rate_allowed))?;
                if !(MIN_RATE_BPS..=MAX_RATE_BPS).contains(&rate_bps) {
                    return Err(invalid("rate_bps", rate_bps.to_string(), rate_allowed));
                }
                let packet_size = self
                    .packet_size
                    .ok_or_else(|| missing("packet_size", &size_allowed))?;
                if !(DATAGRAM_HEADER_LEN..=MAX_PACKET_SIZE).contains(&packet_size) {
                    return Err(invalid(
                        "packet_size",
                        packet_size.to_string(),
                        size_allowed,
                    ));
                }
                let pps = rate_bps / (packet_size as u64 * 8);
                if pps > MAX_PACKETS_PER_S {
                    return Err(invalid(
                        "rate_bps",
                        rate_bps.to_string(),
                        format!(
                            "at most {MAX_PACKETS_PER_S} packets/s, i.e. {} bits/s with \
                             packet_size {packet_size} (use bigger packets)",
                            MAX_PACKETS_PER_S * packet_size as u64 * 8
                        ),
                    ));
                }
                FlowKind::Cbr {
                    rate_bps,
                    packet_size,
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = r#"
        [[flow]]
        kind = "elephant"
        count = 2
        start_s = 0.0
        stop_s = 30.0
        congestion_control = "cubic"
        direction = "download"
        target = 1

        [[flow]]
        kind = "mice"
        bytes_kb = 100
        gap_ms = 50
        start_s = 5.0
        stop_s = 25.0
        congestion_control = "reno"

        [[flow]]
        kind = "cbr"
        rate_bps = 8_000_000
        packet_size = 1200
        stop_s = 30.0
    "#;

    fn err(toml: &str) -> ScheduleError {
        Schedule::plan_from_toml_str(toml).unwrap_err()
    }

    #[test]
    fn parses_and_expands_a_full_schedule() {
        let plan = Schedule::plan_from_toml_str(FULL).unwrap();
        assert_eq!(plan.flows.len(), 4);
        assert_eq!(plan.duration(), Duration::from_secs(30));
        assert_eq!(plan.max_target(), Some(1));
        assert_eq!(
            plan.flows[1].kind,
            FlowKind::Elephant {
                congestion_control: "cubic".into(),
                direction: Direction::Download,
                window: None,
            }
        );
        assert_eq!(plan.flows[1].instance, 1);
        assert_eq!(
            plan.flows[2].kind,
            FlowKind::Mice {
                congestion_control: "reno".into(),
                direction: Direction::Upload,
                bytes: 100 * 1024,
                gap: Duration::from_millis(50)
            }
        );
        assert_eq!(plan.flows[2].start, Duration::from_secs(5));
        assert_eq!(
            plan.flows[3].kind,
            FlowKind::Cbr {
                rate_bps: 8_000_000,
                packet_size: 1200
            }
        );
        assert_eq!(plan.flows[3].start, Duration::ZERO);
        assert_eq!(plan.flows[3].target, 0);
    }

    #[test]
    fn empty_schedule_is_an_empty_plan() {
        assert_eq!(Schedule::plan_from_toml_str("").unwrap(), Plan::default());
    }

    #[test]
    fn errors_name_entry_field_value_and_rule() {
        let e = err("[[flow]]\nkind = \"elephant\"\nstop_s = 5.0\ncongestion_control = \"cubic\"\ncount = 0");
        assert_eq!(e.to_string(), "flow[0].count = 0: an integer from 1 to 64");

        let e = err("[[flow]]\nkind = \"elephant\"\nstart_s = 5.0\nstop_s = 2.0\ncongestion_control = \"cubic\"");
        assert_eq!(
            e.to_string(),
            "flow[0].stop_s = 2: seconds after start_s (5) and at most 86400"
        );

        let e = err("[[flow]]\nkind = \"elephant\"\nstart_s = -1.0\nstop_s = 2.0\ncongestion_control = \"cubic\"");
        assert!(
            matches!(
                e,
                ScheduleError::Invalid {
                    field: "start_s",
                    ..
                }
            ),
            "{e}"
        );

        let e = err("[[flow]]\nkind = \"elephant\"\nstop_s = 2.0");
        assert!(
            matches!(
                e,
                ScheduleError::Missing {
                    entry: 0,
                    field: "congestion_control",
                    ..
                }
            ),
            "{e}"
        );
        assert!(
            e.to_string().contains("tcp_available_congestion_control"),
            "{e}"
        );

        let e = err("[[flow]]\nkind = \"elephant\"\nstop_s = 2.0\ncongestion_control = \"CUBIC!\"");
        assert_eq!(
            e.to_string(),
            "flow[0].congestion_control = \"CUBIC!\": 1 to 15 characters of a-z, 0-9 and '_', e.g. \"cubic\""
        );

        let mice = "[[flow]]\nkind = \"elephant\"\nstop_s = 1.0\ncongestion_control = \"bbr\"\n\
                    [[flow]]\nkind = \"mice\"\nstop_s = 2.0\ncongestion_control = \"reno\"\n";
        let e = err(mice);
        assert_eq!(
            e.to_string(),
            "flow[1] (mice): bytes_kb is required: KiB per transfer, from 1 to 1048576"
        );
        let e = err(&format!("{mice}bytes_kb = 0"));
        assert!(e.to_string().starts_with("flow[1].bytes_kb = 0: "), "{e}");
        let e = err(&format!("{mice}bytes_kb = 10\ngap_ms = 3600001"));
        assert!(
            e.to_string().starts_with("flow[1].gap_ms = 3600001: "),
            "{e}"
        );
        let e = err(&format!("{mice}bytes_kb = 10\nrate_bps = 1000"));
        assert_eq!(
            e.to_string(),
            "flow[1] (mice): rate_bps does not apply to mice flows; remove it"
        );
    }

    #[test]
    fn an_elephant_takes_a_window_bound_and_nothing_else_does() {
        let elephant = |w: &str| {
            format!("[[flow]]\nkind = \"elephant\"\nstop_s = 5.0\ncongestion_control = \"cubic\"\nwindow_bytes = {w}")
        };
        let plan = Schedule::plan_from_toml_str(&elephant("20000")).unwrap();
        assert!(matches!(
            plan.flows[0].kind,
            FlowKind::Elephant {
                window: Some(20_000),
                ..
            }
        ));
        for bad in ["100", "16777217", "0"] {
            let e = err(&elephant(bad)).to_string();
            assert!(
                e.starts_with(&format!(
                    "flow[0].window_bytes = {bad}: bytes from 4096 to 16777216"
                )),
                "{e}"
            );
        }
        let download = format!("{}\ndirection = \"download\"", elephant("20000"));
        assert!(err(&download).to_string().contains("only for uploads"));
        let mice = "[[flow]]\nkind = \"mice\"\nstop_s = 5.0\ncongestion_control = \"cubic\"\nbytes_kb = 10\nwindow_bytes = 20000";
        assert_eq!(
            err(mice).to_string(),
            "flow[0] (mice): window_bytes does not apply to mice flows; remove it"
        );
    }

    #[test]
    fn cbr_errors() {
        let cbr = "[[flow]]\nkind = \"cbr\"\nstop_s = 2.0\n";
        let e = err(cbr);
        assert!(
            matches!(
                e,
                ScheduleError::Missing {
                    field: "rate_bps",
                    ..
                }
            ),
            "{e}"
        );
        let e = err(&format!("{cbr}rate_bps = 10\npacket_size = 100"));
        assert_eq!(
            e.to_string(),
            "flow[0].rate_bps = 10: payload bits/s from 1000 to 10000000000"
        );
        let e = err(&format!("{cbr}rate_bps = 1000000\npacket_size = 19"));
        assert_eq!(
            e.to_string(),
            "flow[0].packet_size = 19: UDP payload bytes from 20 to 65507"
        );
        let e = err(&format!("{cbr}rate_bps = 10000000000\npacket_size = 20"));
        assert!(e.to_string().contains("at most 1000000 packets/s"), "{e}");
        let e = err(&format!(
            "{cbr}rate_bps = 1000000\npacket_size = 100\ncongestion_control = \"cubic\""
        ));
        assert!(matches!(
            e,
            ScheduleError::NotApplicable {
                field: "congestion_control",
                ..
            }
        ));
        let e = err(&format!(
            "{cbr}rate_bps = 1000000\npacket_size = 100\ndirection = \"download\""
        ));
        assert!(
            e.to_string()
                .starts_with("flow[0].direction = \"download\": "),
            "{e}"
        );
    }

    #[test]
    fn parse_errors_name_the_bad_token() {
        let e = err("[[flow]]\nkind = \"whale\"\nstop_s = 1.0");
        assert!(matches!(e, ScheduleError::Parse(_)));
        let s = e.to_string();
        assert!(
            s.contains("whale") && s.contains("elephant") && s.contains("cbr"),
            "{s}"
        );

        let s = err("[[flow]]\nkind = \"mice\"\nstop_s = 1.0\nbytes = 5").to_string();
        assert!(s.contains("bytes") && s.contains("bytes_kb"), "{s}");

        let s =
            err("[[flow]]\nkind = \"mice\"\nstop_s = 1.0\ndirection = \"sideways\"").to_string();
        assert!(s.contains("sideways") && s.contains("download"), "{s}");
    }

    #[test]
    fn too_many_flows() {
        let entry = "[[flow]]\nkind = \"elephant\"\ncount = 64\nstop_s = 1.0\ncongestion_control = \"cubic\"\n";
        assert!(Schedule::plan_from_toml_str(&entry.repeat(4)).is_ok());
        assert_eq!(
            err(&entry.repeat(5)).to_string(),
            "the schedule has 320 flow instances (sum of count); at most 256 are allowed"
        );
    }

    #[test]
    fn round_trips_through_serde() {
        let s = Schedule::from_toml_str(FULL).unwrap();
        let again: Schedule = toml::from_str(&toml::to_string(&s).unwrap()).unwrap();
        assert_eq!(again, s);
    }
}
