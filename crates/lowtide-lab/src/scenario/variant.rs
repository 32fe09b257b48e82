//! One way of sending the measured stream (`[[variant]]`), the paper's numbers for it, and
//! the checks of every variant against the others and the topology.

use std::collections::BTreeMap;

use lowtide::ControllerConfig;
use serde::{Deserialize, Serialize};

use super::{
    check_range, check_tcp_sysctls, invalid, ApplicationKind, Mode, Scenario, ScenarioError,
    MAX_VARIANTS,
};

fn plain_tcp() -> ControllerConfig {
    ControllerConfig::Unlimited
}

/// One way of sending the measured stream.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Variant {
    pub name: String,
    /// lowtide's latency controller (default: `unlimited`, plain TCP).
    #[serde(default = "plain_tcp")]
    pub controller: ControllerConfig,
    /// Congestion control of this stream's socket (default: `topology.hosts.congestion`).
    #[serde(default)]
    pub congestion: Option<String>,
    /// Negotiate ECN: the stream's sender host requests it (`net.ipv4.tcp_ecn = 1`).
    /// Default: `topology.hosts.ecn`.
    #[serde(default)]
    pub ecn: Option<bool>,
    /// Sender host index (ECN is per host, so ECN and non-ECN variants need different hosts).
    #[serde(default)]
    pub sender: usize,
    /// What this variant runs (default: `application.kind`).
    #[serde(default)]
    pub application: Option<ApplicationKind>,
    /// Run the application over QUIC (quinn) instead of lowtide over TCP: the clean-slate
    /// reference (`crate::pipe::quic`); `controller`, `congestion` and `sndbuf` then do not apply.
    #[serde(default)]
    pub quic: Option<crate::pipe::quic::QuicConfig>,
    /// Failover to backup TCP connections (Paceline's connection manager), e.g.
    /// `failover = { backups = 1, floor_ms = 200 }`; both ends of the variant's channel use it.
    #[serde(default)]
    pub failover: Option<lowtide::proto::FailoverConfig>,
    /// The network paths of the variant's connections, in order (`paths = ["a", "b"]`): the
    /// primary on the first, backups and the duplicate lane on another than the one in use
    /// (`lowtide::ChannelConfig::local_addrs`). Default: path A only. Path B needs
    /// `[topology.path_b]`; lowtide's TCP variants only.
    #[serde(default)]
    pub paths: Vec<NetPath>,
    /// Multipath TCP instead of TCP under the same application (`lowtide::ChannelConfig::
    /// mptcp`), with the in-kernel path manager adding a subflow on path B: `"backup"` (path B
    /// only when path A's subflow fails: main/backup) or `"active"` (both carry data). Needs
    /// `[topology.path_b]`; not with `failover` or `paths`.
    #[serde(default)]
    pub mptcp: Option<MptcpMode>,
    /// Segments of the controller's kernel-queue limit kept for important messages, e.g.
    /// `importance_reserve = { segments = 2, min_importance = 7 }` (`lowtide_proto::reserve`).
    #[serde(default)]
    pub importance_reserve: Option<lowtide::proto::reserve::ImportanceReserve>,
    /// Duplicate lane: messages at or above an importance also sent on a warm backup
    /// connection, e.g. `duplicate = { min_importance = 7 }` (`lowtide_proto::failover::
    /// duplicate`); needs `failover`.
    #[serde(default)]
    pub duplicate: Option<lowtide::proto::DuplicateConfig>,
    /// Conference: age cancellation, ms. An enhancement ADU (not the base layer) not written
    /// whole to the kernel this long after capture is cancelled before it reaches it, so a
    /// loss cannot catch it late (`lowtide_media::conference::Conference::age_cancel`).
    /// Lowtide's TCP variants only.
    #[serde(default)]
    pub age_cancel_ms: Option<f64>,
    /// Latency stream: each message carries what fills exactly one segment with lowtide's
    /// frame header (`Channel::one_segment_payload`, about 1434 bytes) instead of a whole MSS
    /// (1448 bytes, which with the header takes two segments). Goel et al.'s application
    /// wrote one MSS-sized packet per write. Lowtide's TCP variants without TLS only.
    #[serde(default)]
    pub one_segment_messages: bool,
    /// Run the application over TFRC (`lowtide-tfrc`, RFC 5348) instead of lowtide over TCP
    /// (`crate::pipe::tfrc`; latency stream and bit-rate ladder); `controller`, `congestion` and
    /// `sndbuf` then do not apply.
    #[serde(default)]
    pub tfrc: Option<lowtide_tfrc::TfrcConfig>,
    /// `SO_SNDBUF` of the stream's socket, bytes (default: the kernel's autotuning, up to
    /// `tcp_wmem`'s 4 MB). The kernel doubles it; 65536 gives Linux 2.4's largest buffer.
    #[serde(default)]
    pub sndbuf: Option<u32>,
    /// lowtide over TLS 1.3 (a certificate made for the trial; see `docs/tls.md`). Not with
    /// `quic` (QUIC always encrypts).
    #[serde(default)]
    pub tls: bool,
    /// TCP sysctls of the variant's sender host, set before the trial starts, e.g.
    /// `sender_sysctls = { "net.ipv4.tcp_reordering" = "1" }`: loss-repair knobs that are
    /// per network namespace in Linux, so the host must not also send cross traffic.
    #[serde(default)]
    pub sender_sysctls: BTreeMap<String, String>,
    /// Live video: the transport (`live = { transport = "tcpserversink" }`, default lowtide
    /// with `controller`) and whether lowtide drives the encoder's bit rate.
    #[serde(default)]
    pub live: Option<crate::live_video::LiveVariant>,
    /// The paper's numbers for this variant, where it gives them.
    #[serde(default)]
    pub paper: Option<PaperNumbers>,
}

/// How an MPTCP variant uses path B.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum MptcpMode {
    /// Path B's subflow has the backup flag: data goes there only when path A's is stale.
    Backup,
    /// Both subflows carry data (the kernel's default scheduler).
    Active,
}

/// One of a two-path topology's network paths.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum NetPath {
    /// The dumbbell's own bottleneck (`[topology.forward]`, `[topology.reverse]`).
    A,
    /// The second path (`[topology.path_b]`).
    B,
}

/// What the paper reports for one variant; its numbers are approximate ("about 30%",
/// "under 2%"), and the report shows them so.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct PaperNumbers {
    #[serde(default)]
    pub text: Option<String>,
    /// Share of packets over 160 ms (0..1).
    #[serde(default)]
    pub share_over_160: Option<f64>,
    /// Share of packets over 500 ms (0..1).
    #[serde(default)]
    pub share_over_500: Option<f64>,
    /// Throughput relative to TCP.
    #[serde(default)]
    pub goodput_vs_baseline: Option<f64>,
    /// Video: share of windows whole within 500 ms (0..1).
    #[serde(default)]
    pub windows_within_500: Option<f64>,
    /// Video: share of windows the sender dropped (0..1).
    #[serde(default)]
    pub dropped_windows: Option<f64>,
    /// Bit-rate ladder: the largest one-way latency, ms.
    #[serde(default)]
    pub max_latency_ms: Option<f64>,
    /// Bit-rate ladder: bit-rate switches.
    #[serde(default)]
    pub switches: Option<u64>,
}

impl Scenario {
    pub(super) fn check_variants(&self) -> Result<(), ScenarioError> {
        let n = self.variants.len();
        if !(1..=MAX_VARIANTS).contains(&n) {
            return Err(invalid(
                "variant",
                format!("{n} entries"),
                format!("1 to {MAX_VARIANTS} [[variant]] entries"),
            ));
        }
        for (i, v) in self.variants.iter().enumerate() {
            let field = |f: &str| format!("variant[{i}].{f}");
            if v.name.trim().is_empty()
                || v.name.contains(['\n', '"'])
                || v.name == crate::report::FLOOR_SERIES
            {
                return Err(invalid(
                    field("name"),
                    format!("{:?}", v.name),
                    "a non-empty name without quotes or newlines, not the floor probe's (it is a CSV key)",
                ));
            }
            if self.variants[..i].iter().any(|w| w.name == v.name) {
                return Err(invalid(
                    field("name"),
                    &v.name,
                    "a name no other variant has",
                ));
            }
            if v.quic.is_some() {
                if v.tls {
                    return Err(invalid(
                        field("tls"),
                        "true",
                        "false with quic (QUIC always encrypts)",
                    ));
                }
                let app = self.application_of(v);
                let videos = self.application.conference.videos_mbps.len();
                if app == ApplicationKind::Conference && videos > 1 {
                    return Err(invalid(
                        "application.conference.videos_mbps",
                        format!("{videos} videos"),
                        format!(
                            "one video with a QUIC variant ({:?} sends each ADU on its own QUIC \
                             stream, with no channel to share among videos)",
                            v.name
                        ),
                    ));
                }
                let app = self.application_of(v);
                if matches!(
                    app,
                    ApplicationKind::LayeredVideo | ApplicationKind::BitrateLadder
                ) {
                    return Err(invalid(
                        field("application"),
                        format!("{app:?}"),
                        "latency_stream or conference for a QUIC variant",
                    ));
                }
                if v.controller != ControllerConfig::Unlimited
                    || v.congestion.is_some()
                    || v.sndbuf.is_some()
                {
                    return Err(invalid(
                        field("quic"),
                        "with controller, congestion or sndbuf",
                        "a QUIC variant without lowtide's TCP settings (its congestion control is quic.congestion)",
                    ));
                }
            }
            if v.failover.is_some() {
                if v.tls {
                    return Err(invalid(
                        field("tls"),
                        "true with failover",
                        "TLS or failover, not both (yet)",
                    ));
                }
                if v.quic.is_some() {
                    return Err(invalid(
                        field("failover"),
                        "with quic",
                        "failover on lowtide's TCP variants only",
                    ));
                }
            }
            if !v.paths.is_empty() {
                let lowtide_tcp = v.quic.is_none() && v.tfrc.is_none() && v.live.is_none();
                if !lowtide_tcp {
                    return Err(invalid(
                        field("paths"),
                        format!("{:?}", v.paths),
                        "paths on lowtide's TCP variants only",
                    ));
                }
                if v.paths.contains(&NetPath::B) && self.topology.path_b.is_none() {
                    return Err(invalid(
                        field("paths"),
                        "[\"b\"] without a second path",
                        "a [topology.path_b] to put path B's connections on",
                    ));
                }
                if v.paths.len() > 2 || (v.paths.len() == 2 && v.paths[0] == v.paths[1]) {
                    return Err(invalid(
                        field("paths"),
                        format!("{:?}", v.paths),
                        "each of \"a\" and \"b\" at most once",
                    ));
                }
            }
            if v.mptcp.is_some() {
                let lowtide_tcp = v.quic.is_none() && v.tfrc.is_none() && v.live.is_none();
                let why = if !lowtide_tcp {
                    Some("MPTCP on lowtide's TCP variants only")
                } else if self.topology.path_b.is_none() {
                    Some("a [topology.path_b] for the second subflow")
                } else if v.failover.is_some() || !v.paths.is_empty() {
                    Some("MPTCP without failover or paths (the kernel picks the paths)")
                } else if v.tls {
                    Some("MPTCP without TLS (not measured yet)")
                } else {
                    None
                };
                if let Some(why) = why {
                    return Err(invalid(field("mptcp"), format!("{:?}", v.mptcp), why));
                }
                let clash = self
                    .variants
                    .iter()
                    .any(|o| o.sender == v.sender && o.mptcp.is_some() && o.mptcp != v.mptcp);
                if clash && self.run.modes.contains(&super::Mode::SideBySide) {
                    return Err(invalid(
                        field("mptcp"),
                        format!("{:?}", v.mptcp),
                        "one MPTCP mode per sender host side by side (the endpoint is the host's)",
                    ));
                }
            }
            if let Some(ms) = v.age_cancel_ms {
                if v.quic.is_some() || self.application_of(v) != ApplicationKind::Conference {
                    return Err(invalid(
                        field("age_cancel_ms"),
                        format!("{ms}"),
                        "age cancellation on lowtide's conference variants only",
                    ));
                }
                if !(ms.is_finite() && (1.0..=600_000.0).contains(&ms)) {
                    return Err(invalid(
                        field("age_cancel_ms"),
                        format!("{ms}"),
                        "1 to 600000 ms",
                    ));
                }
            }
            if v.one_segment_messages
                && (v.quic.is_some()
                    || v.tfrc.is_some()
                    || v.tls
                    || self.application_of(v) != ApplicationKind::LatencyStream)
            {
                return Err(invalid(
                    field("one_segment_messages"),
                    "true",
                    "one-segment messages on lowtide's latency-stream variants over TCP without TLS only",
                ));
            }
            if v.duplicate.is_some() && !v.is_lowtide() {
                return Err(invalid(
                    field("duplicate"),
                    "with quic or tfrc",
                    "a duplicate lane on lowtide's TCP variants only",
                ));
            }
            if v.importance_reserve.is_some() && !v.is_lowtide() {
                return Err(invalid(
                    field("importance_reserve"),
                    "with quic or tfrc",
                    "an importance reserve on lowtide's TCP variants only",
                ));
            }
            if v.tfrc.is_some() {
                let app = self.application_of(v);
                if !matches!(
                    app,
                    ApplicationKind::LatencyStream | ApplicationKind::BitrateLadder
                ) {
                    return Err(invalid(
                        field("application"),
                        format!("{app:?}"),
                        "latency_stream or bitrate_ladder for a TFRC variant",
                    ));
                }
                if v.controller != ControllerConfig::Unlimited
                    || v.congestion.is_some()
                    || v.sndbuf.is_some()
                    || v.quic.is_some()
                    || v.failover.is_some()
                    || v.tls
                {
                    return Err(invalid(
                        field("tfrc"),
                        "with controller, congestion, sndbuf, quic, failover or tls",
                        "a TFRC variant without lowtide's TCP settings (its buffer is tfrc.buffer)",
                    ));
                }
            }
            // The transport's own settings, checked once by its library: the controller,
            // failover, duplicate lane and importance reserve of a lowtide variant, QUIC's or
            // TFRC's settings; the fields above are how they combine with the scenario.
            v.transport().validate(&format!("variant[{i}]"))?;
            if let Some(cc) = &v.congestion {
                if !lowtide_traffic::congestion::is_valid_name(cc) {
                    return Err(invalid(
                        field("congestion"),
                        cc,
                        "a kernel congestion control name such as cubic, reno or bbr",
                    ));
                }
            }
            if let Some(b) = v.sndbuf {
                if !(4096..=(64 << 20)).contains(&b) {
                    return Err(invalid(field("sndbuf"), b, "4096 to 67108864 bytes"));
                }
            }
            if v.sender >= self.topology.senders {
                return Err(invalid(
                    field("sender"),
                    v.sender,
                    format!(
                        "a sender index below topology.senders ({})",
                        self.topology.senders
                    ),
                ));
            }
            self.check_sender_sysctls(i, v)?;
            if let Some(p) = &v.paper {
                for (name, x) in [
                    ("share_over_160", p.share_over_160),
                    ("share_over_500", p.share_over_500),
                    ("windows_within_500", p.windows_within_500),
                    ("dropped_windows", p.dropped_windows),
                ] {
                    if let Some(x) = x {
                        check_range(&field(&format!("paper.{name}")), x, 0.0, 1.0)?;
                    }
                }
            }
        }
        // ECN and sysctls are host settings: side by side, variants that differ in them need
        // their own host.
        if self.run.modes.contains(&Mode::SideBySide) {
            for (i, v) in self.variants.iter().enumerate() {
                for w in &self.variants[..i] {
                    if w.sender == v.sender && w.sender_sysctls != v.sender_sysctls {
                        return Err(invalid(
                            format!("variant[{i}].sender"),
                            v.sender,
                            format!(
                                "a sender of its own: side by side, {:?} has other sender_sysctls \
                                 on the same host",
                                w.name
                            ),
                        ));
                    }
                    if w.sender == v.sender && self.ecn_of(w) != self.ecn_of(v) {
                        return Err(invalid(
                            format!("variant[{i}].sender"),
                            v.sender,
                            format!(
                                "a sender host other than {:?}'s: ECN is set per host and they differ",
                                w.name
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether a variant negotiates ECN.
    pub fn ecn_of(&self, v: &Variant) -> bool {
        v.ecn.unwrap_or(self.topology.hosts.ecn)
    }

    /// `sender_sysctls`: TCP names (`net.ipv4.tcp_*`) with numeric values, on a host that
    /// sends no cross traffic (forward flows start on sender 0), so the knob reaches only
    /// the variant's stream.
    fn check_sender_sysctls(&self, i: usize, v: &Variant) -> Result<(), ScenarioError> {
        check_tcp_sysctls(&format!("variant[{i}].sender_sysctls"), &v.sender_sysctls)?;
        if !v.sender_sysctls.is_empty() && v.sender == 0 && !self.forward_traffic.flows.is_empty() {
            return Err(invalid(
                format!("variant[{i}].sender"),
                0,
                "a sender other than 0 with sender_sysctls: the forward cross traffic runs on \
                 sender 0 and would get them too",
            ));
        }
        Ok(())
    }
}

impl Scenario {
    /// A live-video variant takes only what the GStreamer elements carry; `live` only on one.
    pub(super) fn check_live_variant(&self, i: usize, v: &Variant) -> Result<(), ScenarioError> {
        use crate::live_video::LiveTransport;
        let field = |f: &str| format!("variant[{i}].{f}");
        if self.application_of(v) != ApplicationKind::LiveVideo {
            return match v.live {
                Some(_) => Err(invalid(
                    field("live"),
                    "set",
                    "live = { ... } on live_video variants only",
                )),
                None => Ok(()),
            };
        }
        if v.quic.is_some()
            || v.tfrc.is_some()
            || v.tls
            || v.failover.is_some()
            || v.importance_reserve.is_some()
            || v.age_cancel_ms.is_some()
            || v.sndbuf.is_some()
            || (v.congestion.is_some()
                && !matches!(
                    v.live.map(|l| l.transport),
                    Some(LiveTransport::Serve | LiveTransport::ServePlain)
                ))
            || v.one_segment_messages
        {
            return Err(invalid(
                field("application"),
                "live_video with quic, tfrc, tls, failover, importance_reserve, age_cancel_ms, sndbuf, congestion or one_segment_messages",
                "a live-video variant with controller and live = { ... } only, and congestion with serve (the lab's pipelines do not pass the others to the elements yet)",
            ));
        }
        let live = v.live.unwrap_or_default();
        match live.transport {
            LiveTransport::Tcpserversink => {
                if v.controller != ControllerConfig::Unlimited || live.rate_feedback {
                    return Err(invalid(
                        field("live"),
                        "tcpserversink with a controller or rate_feedback",
                        "tcpserversink as it is (plain TCP, a fixed bit rate)",
                    ));
                }
            }
            LiveTransport::Lowtide => {
                crate::live_video::controller_property(&v.controller)
                    .map_err(|e| invalid(field("controller"), format!("{:?}", v.controller), e))?;
            }
            LiveTransport::Serve | LiveTransport::ServePlain => {
                let plain = live.transport == LiveTransport::ServePlain;
                if live.rate_feedback || (plain && v.controller != ControllerConfig::Unlimited) {
                    return Err(invalid(
                        field("live"),
                        "serve with rate_feedback, or serve_plain with a controller",
                        "serve with controller = min_buf or notsent_lowat (the viewer's socket), serve_plain alone",
                    ));
                }
                if matches!(
                    v.controller,
                    ControllerConfig::PaceA { .. } | ControllerConfig::Dbat(_)
                ) {
                    return Err(invalid(
                        field("controller"),
                        format!("{:?}", v.controller),
                        "a controller that needs no P-ACKs (a browser sends none): min_buf, notsent_lowat or unlimited",
                    ));
                }
            }
        }
        Ok(())
    }
}
