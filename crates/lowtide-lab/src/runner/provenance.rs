//! What a run folder says about how the run was made: the summary's inputs, controllers
//! and the network in words, the revision and the provenance lines.

use lowtide_netem::{AqmConfig, QueueLimit, TopologyConfig};

use super::LabOptions;
use crate::render::SCENARIO;
use crate::results::{SummaryInputs, VariantInfo, VideoInfo, Window};
use crate::scenario::{ApplicationKind, Checked, Scenario};

/// What the summary needs besides the records: the scenario as it ran, in words, and the
/// provenance (with `extra` lines such as the machine's timer noise).
pub fn summary_inputs(
    checked: &Checked,
    opts: &LabOptions,
    extra: &[(String, String)],
) -> SummaryInputs {
    let s = &checked.scenario;
    let variants = s
        .variants
        .iter()
        .enumerate()
        .map(|(i, v)| VariantInfo {
            name: v.name.clone(),
            controller: match (&v.quic, v.sndbuf) {
                (Some(q), _) => format!(
                    "QUIC (quinn), send window {} KB",
                    q.send_window_bytes / 1024
                ),
                _ if v.tfrc.is_some() => crate::pipe::tfrc::describe(v.tfrc.as_ref()),
                (None, Some(b)) => format!("{}, SO_SNDBUF {b}", controller_name(&v.controller)),
                (None, None) => controller_name(&v.controller),
            },
            congestion: match &v.quic {
                Some(q) => q.congestion.clone(),
                None => match &v.tfrc {
                    Some(t) if t.small_packets => "TFRC-SP (RFC 4828)".into(),
                    Some(_) => "TFRC (RFC 5348)".into(),
                    None => v
                        .congestion
                        .clone()
                        .unwrap_or_else(|| s.topology.hosts.congestion.clone()),
                },
            },
            ecn: s.ecn_of(v),
            paper: v.paper.clone(),
            baseline: checked.baseline_of(i).map(|b| s.variants[b].name.clone()),
            video: (s.application_of(v) == ApplicationKind::LayeredVideo).then_some(VideoInfo {
                window_frames: s.application.video.window_frames,
                tolerance_ms: s.application.video.tolerance_ms,
            }),
            conference: (s.application_of(v) == ApplicationKind::Conference)
                .then(|| s.conference_videos(v)),
            ladder: s.application_of(v) == ApplicationKind::BitrateLadder,
            live: s.application_of(v) == ApplicationKind::LiveVideo,
        })
        .collect();
    let mut provenance = provenance(s, opts);
    provenance.extend(extra.iter().cloned());
    SummaryInputs {
        scenario: s.name.clone(),
        description: s.description.clone(),
        paper: s.paper.clone(),
        quick: opts.quick,
        duration_s: s.run.duration_s,
        window: Window {
            from_s: s.run.measure_from_s,
            to_s: s.measure_to_s(),
        },
        runs: s.run.runs,
        modes: s.run.modes.clone(),
        baseline: checked.baseline.map(|i| s.variants[i].name.clone()),
        network: describe_network(&s.topology),
        outages: s.outage_marks(),
        variants,
        goals: s.goals.clone(),
        provenance,
    }
}

/// `MinBuf(1,3)`, `NotsentLowat(4344)`: how the paper and the tables name controllers.
pub fn controller_name(c: &lowtide::ControllerConfig) -> String {
    use lowtide::ControllerConfig as C;
    match *c {
        C::Unlimited => "Unlimited".into(),
        C::NotsentLowat { bytes } => format!("NotsentLowat({bytes})"),
        C::MinBuf { a, b } => format!("MinBuf({a},{b})"),
        C::PaceA { b } => format!("PaceA({b})"),
        C::Dbat(d) => format!("Dbat({}kbit/s)", d.bit_rate_kbps),
    }
}

/// The bottleneck in words, queue included: the paper does not give its router queue, so the
/// report must say which one we used.
pub fn describe_network(t: &TopologyConfig) -> String {
    let link = |name: &str, l: &lowtide_netem::LinkConfig, rtt: std::time::Duration| {
        let queue = match l.queue {
            QueueLimit::Bdp(m) => format!("{m} BDP ({:.0} bytes)", m * l.bdp_bytes(rtt)),
            QueueLimit::Packets(p) => format!("{p} packets"),
            QueueLimit::Bytes(b) => format!("{b} bytes"),
        };
        let aqm = match &l.aqm {
            AqmConfig::DropTail => "drop-tail".to_string(),
            AqmConfig::Drd {
                min_bdp,
                max_bdp,
                congest_bdp,
                ecn,
            } => format!(
                "DRD (drdmin {min_bdp}, drdmax {max_bdp}, drdcongest {congest_bdp} BDP{})",
                if *ecn { ", ECN marking" } else { "" }
            ),
            other => other.name().to_string(),
        };
        let outages: String = l
            .outages
            .iter()
            .map(|o| format!(", {} from {} s for {} s", o.describe(), o.at_s, o.for_s))
            .collect();
        format!(
            "{name} {:.1} Mbit/s, {} ms one way, {aqm} queue of {queue}{outages}",
            l.nominal_rate_bps() / 1e6,
            l.delay_ms
        )
    };
    let rtt = t.base_rtt();
    let path_b = t.path_b.as_ref().map_or(String::new(), |b| {
        format!(
            "; path B (base RTT {:.0} ms): {}; {}",
            b.base_rtt().as_secs_f64() * 1e3,
            link("forward", &b.forward, b.base_rtt()),
            link("reverse", &b.reverse, b.base_rtt())
        )
    });
    format!(
        "{} sender(s), {} receiver(s), base RTT {:.0} ms; {}; {}{path_b}; hosts: {}{}",
        t.senders,
        t.receivers,
        rtt.as_secs_f64() * 1e3,
        link("forward", &t.forward, rtt),
        link("reverse", &t.reverse, rtt),
        t.hosts.congestion,
        if t.hosts.ecn { ", ECN" } else { "" }
    )
}

/// `git rev-parse HEAD`, or "unknown".
pub(crate) fn git_revision() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// Command line, revision, kernel, congestion control, seed.
pub(super) fn provenance(s: &Scenario, opts: &LabOptions) -> Vec<(String, String)> {
    let git = git_revision();
    let dirty = std::process::Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .ok()
        .is_some_and(|o| !o.stdout.is_empty());
    let proc = |p: &str| {
        std::fs::read_to_string(p)
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    let mut lines: Vec<(String, String)> = vec![
        (
            "command".into(),
            std::env::args().collect::<Vec<_>>().join(" "),
        ),
        (
            "scenario".into(),
            format!("{} ({SCENARIO} in this folder)", s.name),
        ),
        (
            "git revision".into(),
            format!("{git}{}", if dirty { " (with local changes)" } else { "" }),
        ),
        ("kernel".into(), proc("/proc/sys/kernel/osrelease")),
        (
            "congestion control".into(),
            format!(
                "hosts: {}; variants: {}; kernel default: {}",
                s.topology.hosts.congestion,
                s.variants
                    .iter()
                    .map(|v| format!(
                        "{}={}",
                        v.name,
                        v.congestion
                            .as_deref()
                            .unwrap_or(&s.topology.hosts.congestion)
                    ))
                    .collect::<Vec<_>>()
                    .join(", "),
                proc("/proc/sys/net/ipv4/tcp_congestion_control")
            ),
        ),
        (
            "seed".into(),
            format!("{} (run k uses seed + k - 1)", s.run.seed),
        ),
        (
            "topology".into(),
            toml::to_string(&s.topology).unwrap_or_default(),
        ),
    ];
    if opts.quick || opts.runs.is_some() || !opts.overrides.is_empty() {
        let change = format!(
            "quick: {}, runs: {:?}, {:?} (the topology above is the one that ran)",
            opts.quick, opts.runs, opts.overrides
        );
        lines.push(("changes to the scenario".into(), change));
    }
    lines
}
