//! RDC, the router side of Receiver-based Delay Control: Hsiao, Kung and Tan, "Streaming
//! Video over TCP with Receiver-based Delay Control", Sections 2.1 and 2.3.
//!
//! Every arriving packet also puts a token into a token bucket that drains at ρ (the drain
//! ratio, 0.9) times the link rate, and keeps draining while the FIFO is empty. The bucket is
//! a FIFO on a link ρ times slower, so the excess of its level `O_tb` over the real FIFO's
//! occupancy `O_FIFO` is the extra delay the packet would have had there:
//!
//! - Eq. (1): `D_local = T_transmission · (O_tb − O_FIFO)`;
//! - Eq. (2): `D_outgoing = max(D_incoming, D_local)`, written into the packet (exact RDC;
//!   the encoding is `lowtide_rdc_wire`'s, the receiver agent delays its ACKs by it);
//! - 1-bit RDC: instead of a value, CE is set with probability `(O_tb − O_FIFO) / thresh_tb`,
//!   capped at 1; the receiver learns the delay from the share of marks;
//! - an arriving packet that finds the bucket above `size_tb` is dropped.
//!
//! With ρ < 1 a flow arriving between ρ·C and C raises the bucket but not the FIFO: the
//! receivers slow their senders before any queue builds, so the FIFO stays at a few packets.
//!
//! TCP-friendliness (Section 2.1): an exact-RDC flow "behaves the same as the traditional TCP
//! connection when the router has a large FIFO buffer and the outgoing link runs at ... ρ
//! times the original", the ACK waiting at the receiver where the data would have waited. A
//! flow whose receiver does not run the agent ignores the notification, so the cell gives it
//! that FIFO for real (`non_answering = "hold"`, the default): its packets wait `D_local` in a
//! delay line ([`crate::delay_line`], at most `size_tb` bytes, beyond it dropped as
//! `rdc_hold_full`) before they join the real FIFO, unstamped and unmarked. Both kinds of flow
//! then see the same round trip (base + D) and the same `size_tb` drops, and share as two TCP
//! flows share one FIFO. Which flows answer: the agent echoes on its ACKs ([`super::answering`]).
//!
//! Where we differ:
//! - Tokens are bytes (the paper's own suggestion for packets of unequal size), so
//!   `T_transmission · (O_tb − O_FIFO)` is `(O_tb − O_FIFO)` bytes at the link rate;
//!   `size_tb` and `thresh_tb` are given in packets of `packet_bytes` (1500 by default; the
//!   paper's packets are 1000 bytes).
//! - Both levels are taken before the arriving packet's token is added: the delay of the
//!   work ahead of it.
//! - The bucket drains at ρ times the configured rate; on a link that replays a capacity
//!   trace that is the trace's mean rate.
//! - In 1-bit mode a packet that is not ECN-capable is dropped with the marking probability
//!   (as RED does; `not_ect = "drop"`, the default); the paper only considers ECN-capable
//!   flows, and its ns-2 flows send every packet ECN-capable. Exact mode never marks. Linux
//!   sends retransmissions, pure ACKs and SYNs of an ECN connection without ECT (RFC 3168
//!   §6.1.1 and §6.1.5), and the probability stays near 1 while the bucket is far above the
//!   FIFO, so "drop" drops retransmissions again and again (the timeouts of docs/rdc.md).
//!   `not_ect = "spare_ecn_flows"` passes a non-ECT packet that belongs to an ECN connection
//!   (an ECN-setup SYN or SYN-ACK, or a segment of a flow the cell has seen send ECT
//!   packets): that connection is signalled by the marks on its ECT packets. Packets of
//!   flows that never sent ECT are still dropped, so a flow without ECN still gets the
//!   signal. `not_ect = "pass"` passes every non-ECT packet. Spared packets are counted by
//!   why (`rdc_ecn_setup`, `rdc_ecn_flow`, `rdc_not_ect`).
//! - The flows seen sending ECT are remembered by address and port, at most
//!   [`MAX_ECN_FLOWS`]; when the table is full it is emptied (bounded memory; a live flow is
//!   learned again from its next ECT packet).
//! - Exact mode writes only into atomic IPv4 datagrams, in 100 µs units up to 6.5535 s
//!   (packets that cannot carry a delay are counted as `rdc_unstamped`).
//! - An excess below zero (the FIFO above the bucket, possible only when the link is faster
//!   than its nominal rate) counts as zero.
//! - Not in the paper: the echo, the table of answering flows and the delay line for the
//!   others (the paper asserts friendliness, it has no flow without RDC). In 1-bit mode a
//!   flow that does not answer gets the same delay line and no marks: the paper's 1-bit RDC
//!   approximates exact RDC's delay, and a FIFO at ρ·C would delay a plain flow, not mark
//!   it; the bucket's excess marking a plain ECN flow halves it on every mark while the RDC
//!   flow pays a few ms (docs/rdc.md). `non_answering = "notify"` is the paper's cell: every
//!   flow is stamped or marked.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::answering::{AnsweringFlows, MAX_ANSWERING_FLOWS};
use super::{mark_or_drop, Aqm, Arrival, FlowKey, QueueState, Reason, Verdict};
use crate::config::MTU;
use crate::error::ConfigError;

/// Which notification the cell sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum RdcMode {
    /// The delay value in every packet (Section 2.1).
    Exact,
    /// CE marks (Section 2.3).
    #[default]
    OneBit,
}

/// 1-bit RDC with `ecn`: what becomes of a packet that is not ECN-capable where an
/// ECN-capable one would be marked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum NotEct {
    /// Dropped (as RED does).
    #[default]
    Drop,
    /// Passed if it belongs to an ECN connection (an ECN-setup SYN or SYN-ACK, or a flow
    /// seen sending ECT packets), else dropped.
    SpareEcnFlows,
    /// Always passed.
    Pass,
}

/// What the cell does with a flow whose receiver does not answer RDC (no echo seen).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum NonAnswering {
    /// Its packets wait the cell's delay in a delay line (a FIFO at ρ·C), unstamped, unmarked.
    #[default]
    Hold,
    /// Stamped or marked like every other flow (the paper's cell).
    Notify,
}

/// At most this many flows are remembered as ECN-capable (`NotEct::SpareEcnFlows`): 12 bytes
/// each, under 1 MB with the hash table's slack.
pub const MAX_ECN_FLOWS: usize = 32_768;

/// `aqm = { kind = "rdc", mode = "one_bit", rho = 0.9, size_tb = 6400, thresh_tb = 500 }`.
/// Defaults are the paper's (Section 3); `packet_bytes` is the unit of `size_tb` and
/// `thresh_tb`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RdcConfig {
    #[serde(default)]
    pub mode: RdcMode,
    /// Drain ratio ρ: the bucket drains at ρ times the link rate.
    #[serde(default = "rho")]
    pub rho: f64,
    /// Bucket size, packets: above it arriving packets are dropped.
    #[serde(default = "size_tb")]
    pub size_tb: f64,
    /// 1-bit: the excess (packets) at which every packet is marked.
    #[serde(default = "thresh_tb")]
    pub thresh_tb: f64,
    /// Bytes per packet of `size_tb` and `thresh_tb`.
    #[serde(default = "packet_bytes")]
    pub packet_bytes: usize,
    /// 1-bit: mark ECN-capable packets (else drop them).
    #[serde(default = "yes")]
    pub ecn: bool,
    /// 1-bit with `ecn`: a packet that is not ECN-capable where an ECN-capable one would be
    /// marked ("drop", "spare_ecn_flows", "pass").
    #[serde(default)]
    pub not_ect: NotEct,
    /// A flow whose receiver does not echo ("hold" or "notify").
    #[serde(default)]
    pub non_answering: NonAnswering,
    /// A flow stops answering once it has sent this long (ms) without an echo; its silences
    /// do not count ([`super::answering`]).
    #[serde(default = "answer_timeout_ms")]
    pub answer_timeout_ms: f64,
}

fn rho() -> f64 {
    0.9
}
fn size_tb() -> f64 {
    6400.0
}
fn thresh_tb() -> f64 {
    500.0
}
fn packet_bytes() -> usize {
    MTU
}
fn yes() -> bool {
    true
}
fn answer_timeout_ms() -> f64 {
    10_000.0
}

impl Default for RdcConfig {
    fn default() -> Self {
        Self {
            mode: RdcMode::default(),
            rho: rho(),
            size_tb: size_tb(),
            thresh_tb: thresh_tb(),
            packet_bytes: packet_bytes(),
            ecn: true,
            not_ect: NotEct::Drop,
            non_answering: NonAnswering::Hold,
            answer_timeout_ms: answer_timeout_ms(),
        }
    }
}

impl RdcConfig {
    /// 1-bit: the delay `D_local` (Eq. (1)) at which every packet is marked, on a link of
    /// `rate_bps`: `thresh_tb` at the link's rate. The marking probability is `D_local` over
    /// it, so a receiver that knows it can read the delay back from the share of marks
    /// (`lowtide_rdc`'s delay estimate).
    pub fn full_mark_delay(&self, rate_bps: f64) -> Duration {
        let bytes = self.thresh_tb * self.packet_bytes as f64;
        Duration::from_secs_f64(bytes * 8.0 / rate_bps.max(1.0))
    }

    /// Checks every field; `field` is the prefix of the names in errors (`forward.aqm`).
    pub fn validate(&self, field: &str) -> Result<(), ConfigError> {
        let check = |name: &str, ok: bool, value: f64, allowed: String| {
            if ok && value.is_finite() {
                Ok(())
            } else {
                Err(ConfigError::invalid(
                    format!("{field}.{name}"),
                    value,
                    allowed,
                ))
            }
        };
        check(
            "rho",
            self.rho > 0.0 && self.rho <= 1.0,
            self.rho,
            "a drain ratio above 0, at most 1 (the paper: 0.9 or 0.95)".into(),
        )?;
        check(
            "size_tb",
            (1.0..=1e7).contains(&self.size_tb),
            self.size_tb,
            "1 to 10000000 packets".into(),
        )?;
        check(
            "thresh_tb",
            self.thresh_tb > 0.0 && self.thresh_tb <= self.size_tb,
            self.thresh_tb,
            format!("above 0, at most size_tb ({} packets)", self.size_tb),
        )?;
        check(
            "packet_bytes",
            (40..=MTU).contains(&self.packet_bytes),
            self.packet_bytes as f64,
            format!("40 to {MTU} bytes"),
        )?;
        check(
            "answer_timeout_ms",
            (10.0..=600_000.0).contains(&self.answer_timeout_ms),
            self.answer_timeout_ms,
            "10 to 600000 ms (longer than the flows' round trip with the ACK delay)".into(),
        )
    }
}

pub struct Rdc {
    mode: RdcMode,
    ecn: bool,
    not_ect: NotEct,
    /// Flows seen sending ECT packets (`NotEct::SpareEcnFlows` only).
    ecn_flows: HashSet<FlowKey>,
    /// Link rate, bytes per second.
    rate: f64,
    /// Bucket drain rate, bytes per second.
    drain: f64,
    size: f64,
    thresh: f64,
    /// Bucket level, bytes.
    level: f64,
    last: Option<Instant>,
    rng: StdRng,
    /// Flows whose receiver answers (`NonAnswering::Hold`); the others are held.
    answering: Option<Arc<Mutex<AnsweringFlows>>>,
}

impl Rdc {
    /// A cell for a link of `rate_bps` (IP bits per second).
    pub fn new(cfg: &RdcConfig, rate_bps: f64, seed: u64) -> Self {
        let rate = rate_bps.max(1.0) / 8.0;
        let unit = cfg.packet_bytes as f64;
        Rdc {
            mode: cfg.mode,
            ecn: cfg.ecn,
            not_ect: cfg.not_ect,
            ecn_flows: HashSet::new(),
            rate,
            drain: cfg.rho * rate,
            size: cfg.size_tb * unit,
            thresh: cfg.thresh_tb * unit,
            level: 0.0,
            last: None,
            rng: StdRng::seed_from_u64(seed),
            answering: (cfg.non_answering == NonAnswering::Hold).then(|| {
                Arc::new(Mutex::new(AnsweringFlows::new(
                    Duration::from_secs_f64(cfg.answer_timeout_ms / 1000.0),
                    MAX_ANSWERING_FLOWS,
                )))
            }),
        }
    }

    /// Whether the packet's receiver answers RDC (always, with `NonAnswering::Notify`); the
    /// packet counts toward its flow's time sent without an echo.
    fn answers(&self, packet: Arrival, now: Instant) -> bool {
        let Some(table) = &self.answering else {
            return true;
        };
        let Some(tcp) = packet.tcp else { return false };
        let mut table = table.lock().unwrap_or_else(|p| p.into_inner());
        table.on_packet(&tcp.key, now)
    }

    /// The bucket level in bytes, drained up to `now`.
    fn drain_to(&mut self, now: Instant) {
        if let Some(last) = self.last {
            let dt = now.saturating_duration_since(last).as_secs_f64();
            self.level = (self.level - dt * self.drain).max(0.0);
        }
        self.last = Some(self.last.map_or(now, |l| l.max(now)));
    }

    /// Bytes the bucket holds above the FIFO.
    fn excess(&self, queue: QueueState) -> f64 {
        (self.level - queue.bytes as f64).max(0.0)
    }

    /// Eq. (1): the delay the packet would have had in the slower FIFO.
    pub fn local_delay(&self, queue: QueueState) -> Duration {
        Duration::from_secs_f64(self.excess(queue) / self.rate)
    }

    /// 1-bit: the marking probability, linear from 0 to 1 at `thresh_tb`.
    pub fn mark_probability(&self, queue: QueueState) -> f64 {
        (self.excess(queue) / self.thresh).min(1.0)
    }

    /// The bucket level, bytes.
    pub fn level_bytes(&self) -> f64 {
        self.level
    }

    /// Remembers the flow of an ECN-capable TCP packet (`NotEct::SpareEcnFlows`).
    fn learn_ecn_flow(&mut self, packet: Arrival) {
        let Some(tcp) = packet.tcp else { return };
        if self.not_ect != NotEct::SpareEcnFlows || !packet.ecn_capable {
            return;
        }
        if self.ecn_flows.len() >= MAX_ECN_FLOWS && !self.ecn_flows.contains(&tcp.key) {
            self.ecn_flows.clear();
        }
        self.ecn_flows.insert(tcp.key);
    }

    /// 1-bit: the verdict for a packet the marking law picked.
    fn mark_drop_or_spare(&self, packet: Arrival) -> Verdict {
        if !self.ecn || packet.ecn_capable {
            return mark_or_drop(self.ecn, packet.ecn_capable, Reason::RdcExcess);
        }
        match (self.not_ect, packet.tcp) {
            (NotEct::Pass, _) => Verdict::Spare(Reason::RdcNotEct),
            (NotEct::SpareEcnFlows, Some(tcp)) if tcp.ecn_setup => {
                Verdict::Spare(Reason::RdcEcnSetup)
            }
            (NotEct::SpareEcnFlows, Some(tcp)) if self.ecn_flows.contains(&tcp.key) => {
                Verdict::Spare(Reason::RdcEcnFlow)
            }
            _ => Verdict::Drop(Reason::RdcExcess),
        }
    }
}

impl Aqm for Rdc {
    fn on_arrival(&mut self, queue: QueueState, packet: Arrival, now: Instant) -> Verdict {
        self.drain_to(now);
        if self.level + packet.bytes as f64 > self.size {
            return Verdict::Drop(Reason::RdcBucketFull);
        }
        let verdict = match self.mode {
            _ if !self.answers(packet, now) => match self.local_delay(queue) {
                d if d.is_zero() => Verdict::Pass,
                d => Verdict::Hold(d, Reason::RdcNotAnswering),
            },
            RdcMode::Exact => Verdict::Stamp(self.local_delay(queue)),
            RdcMode::OneBit => {
                self.learn_ecn_flow(packet);
                let p = self.mark_probability(queue);
                if p > 0.0 && self.rng.gen::<f64>() < p {
                    self.mark_drop_or_spare(packet)
                } else {
                    Verdict::Pass
                }
            }
        };
        self.level += packet.bytes as f64;
        verdict
    }

    fn name(&self) -> &'static str {
        "rdc"
    }

    fn delay_line_bytes(&self) -> usize {
        if self.answering.is_some() {
            self.size as usize
        } else {
            0
        }
    }

    fn answering_flows(&self) -> Option<Arc<Mutex<AnsweringFlows>>> {
        self.answering.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aqm::TcpFlow;
    use std::net::SocketAddrV4;

    /// The paper's cell: every flow is notified.
    fn paper() -> RdcConfig {
        RdcConfig {
            non_answering: NonAnswering::Notify,
            ..RdcConfig::default()
        }
    }

    /// 10 Mbit/s: a 1500-byte packet every 1.2 ms.
    const RATE: f64 = 10e6;
    const GAP: Duration = Duration::from_micros(1200);

    fn cell(mode: RdcMode) -> Rdc {
        Rdc::new(
            &RdcConfig {
                mode,
                thresh_tb: 100.0,
                size_tb: 1000.0,
                ..paper()
            },
            RATE,
            1,
        )
    }

    /// `n` MTU packets, `gap` apart, to a FIFO held at `queue` packets; the verdicts.
    fn feed(c: &mut Rdc, t0: Instant, n: u32, gap: Duration, queue: usize) -> Vec<Verdict> {
        (0..n)
            .map(|i| {
                c.on_arrival(
                    QueueState::of_packets(queue),
                    Arrival::mtu(true),
                    t0 + gap * i,
                )
            })
            .collect()
    }

    fn ms(v: &Verdict) -> f64 {
        match v {
            Verdict::Stamp(d) => d.as_secs_f64() * 1000.0,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn at_the_link_rate_the_bucket_grows_by_one_minus_rho() {
        // One second at exactly the link rate into an empty FIFO: the bucket keeps 10% of
        // 1.25 MB, and Eq. (1) turns that into 100 ms at the link rate.
        let mut c = cell(RdcMode::Exact);
        let v = feed(&mut c, Instant::now(), 834, GAP, 0);
        let last = ms(v.last().unwrap());
        assert!((last - 100.0).abs() < 1.5, "{last} ms");
        assert!(
            (c.level_bytes() - 125_000.0).abs() < 2_000.0,
            "{}",
            c.level_bytes()
        );
        // The delay grows steadily: each packet adds 0.1 packet times.
        assert!((ms(&v[101]) - ms(&v[100]) - 0.12).abs() < 1e-3);
    }

    #[test]
    fn below_rho_the_bucket_stays_empty_and_a_queue_is_subtracted() {
        let mut c = cell(RdcMode::Exact);
        // 85% of the link rate drains fully between packets: no delay.
        let v = feed(&mut c, Instant::now(), 1000, GAP.mul_f64(1.0 / 0.85), 0);
        assert!(
            v.iter().all(|v| ms(v) <= 1.3),
            "at most the packet's own token"
        );
        // A FIFO as long as the bucket means no extra delay: it is already delayed there.
        let mut c = cell(RdcMode::Exact);
        let t = Instant::now();
        feed(&mut c, t, 100, Duration::ZERO, 0);
        assert_eq!(
            c.on_arrival(QueueState::of_packets(100), Arrival::mtu(true), t),
            Verdict::Stamp(Duration::ZERO)
        );
        let d = c.on_arrival(QueueState::of_packets(40), Arrival::mtu(true), t);
        assert!((ms(&d) - 1.2 * 61.0).abs() < 1e-6, "{d:?}");
    }

    #[test]
    fn beyond_size_tb_packets_are_dropped_until_the_bucket_drains() {
        let mut c = cell(RdcMode::Exact);
        let t = Instant::now();
        let v = feed(&mut c, t, 1010, Duration::ZERO, 0);
        let drops = v
            .iter()
            .filter(|v| **v == Verdict::Drop(Reason::RdcBucketFull))
            .count();
        assert_eq!(drops, 10, "1000 packets fit");
        // 12 packet times later, ρ·12 = 10.8 packets have drained: 10 more fit.
        let v = feed(&mut c, t + GAP * 12, 11, Duration::ZERO, 0);
        assert_eq!(
            v.iter().filter(|v| matches!(v, Verdict::Drop(_))).count(),
            1
        );
    }

    #[test]
    fn one_bit_marks_linearly_in_the_excess() {
        let t = Instant::now();
        for (excess, want) in [(0usize, 0.0), (25, 0.25), (50, 0.5), (100, 1.0), (300, 1.0)] {
            let cfg = RdcConfig {
                thresh_tb: 100.0,
                size_tb: 10_000.0,
                ..paper()
            };
            let mut c = Rdc::new(&cfg, RATE, 1);
            feed(&mut c, t, excess as u32, Duration::ZERO, 0);
            let empty = QueueState::of_packets(0);
            assert!((c.mark_probability(empty) - want).abs() < 1e-9);
            // The probability is the delay over the delay of thresh_tb (1500 bytes, 1.2 ms each).
            assert_eq!(cfg.full_mark_delay(RATE), Duration::from_millis(120));
            let by_delay = c.local_delay(empty).as_secs_f64() / 0.120;
            assert!((by_delay.min(1.0) - want).abs() < 1e-9, "{by_delay}");
            // At that level (no time passes, the FIFO holds what the bucket gained since),
            // the share of marks follows the probability.
            let n = 4000;
            let marks = (0..n)
                .filter(|i| {
                    c.on_arrival(QueueState::of_packets(*i as usize), Arrival::mtu(true), t)
                        == Verdict::Mark(Reason::RdcExcess)
                })
                .count();
            let share = marks as f64 / f64::from(n);
            assert!(
                (share - want).abs() < 0.03,
                "excess {excess}: share {share}"
            );
        }
    }

    /// A 1-bit cell with `not_ect`, its bucket filled far above `thresh_tb` (every packet is
    /// picked by the marking law).
    fn saturated(not_ect: NotEct, t: Instant) -> Rdc {
        let mut c = Rdc::new(
            &RdcConfig {
                not_ect,
                thresh_tb: 100.0,
                size_tb: 1000.0,
                ..paper()
            },
            RATE,
            1,
        );
        feed(&mut c, t, 200, Duration::ZERO, 0);
        c
    }

    /// An MTU-sized TCP segment from port `from` to 10.2.1.1:5000.
    fn segment(ecn_capable: bool, from: u16, ecn_setup: bool) -> Arrival {
        Arrival {
            tcp: Some(TcpFlow {
                key: FlowKey {
                    src: SocketAddrV4::new([10, 1, 1, 1].into(), from),
                    dst: SocketAddrV4::new([10, 2, 1, 1].into(), 5000),
                },
                ecn_setup,
            }),
            ..Arrival::mtu(ecn_capable)
        }
    }

    #[test]
    fn one_bit_drops_what_cannot_be_marked() {
        let t = Instant::now();
        let q = QueueState::of_packets(0);
        let mut c = saturated(NotEct::Drop, t);
        assert_eq!(
            c.on_arrival(q, segment(true, 1, false), t),
            Verdict::Mark(Reason::RdcExcess)
        );
        for not_ect in [segment(false, 1, false), segment(false, 2, true)] {
            assert_eq!(
                c.on_arrival(q, not_ect, t),
                Verdict::Drop(Reason::RdcExcess)
            );
        }
        // "pass": every non-ECT packet is spared, while ECN-capable ones are still marked.
        let mut c = saturated(NotEct::Pass, t);
        for not_ect in [Arrival::mtu(false), segment(false, 2, false)] {
            assert_eq!(
                c.on_arrival(q, not_ect, t),
                Verdict::Spare(Reason::RdcNotEct)
            );
        }
        assert_eq!(
            c.on_arrival(q, Arrival::mtu(true), t),
            Verdict::Mark(Reason::RdcExcess)
        );
        // Without ECN in the cell nothing is spared: every picked packet is dropped.
        let mut c = Rdc::new(
            &RdcConfig {
                ecn: false,
                not_ect: NotEct::Pass,
                thresh_tb: 100.0,
                ..paper()
            },
            RATE,
            1,
        );
        feed(&mut c, t, 200, Duration::ZERO, 0);
        assert_eq!(
            c.on_arrival(q, segment(false, 1, false), t),
            Verdict::Drop(Reason::RdcExcess)
        );
    }

    #[test]
    fn spare_ecn_flows_passes_only_the_non_ect_packets_of_ecn_connections() {
        let t = Instant::now();
        let mut c = saturated(NotEct::SpareEcnFlows, t);
        let mut reverse = segment(false, 1, false);
        let key = &mut reverse.tcp.as_mut().unwrap().key;
        std::mem::swap(&mut key.src, &mut key.dst);
        let drop = Verdict::Drop(Reason::RdcExcess);
        // In order: each packet, what the cell does with it, why.
        let steps = [
            (
                segment(false, 1, true),
                Verdict::Spare(Reason::RdcEcnSetup),
                "ECN-setup SYN",
            ),
            (segment(false, 2, false), drop, "a SYN without ECN"),
            (
                segment(true, 1, false),
                Verdict::Mark(Reason::RdcExcess),
                "flow 1's ECT data",
            ),
            (
                segment(false, 1, false),
                Verdict::Spare(Reason::RdcEcnFlow),
                "its retransmission",
            ),
            (
                segment(false, 2, false),
                drop,
                "flow 2 never sent ECT: it gets the signal",
            ),
            (
                reverse,
                drop,
                "the other direction of flow 1 is a flow of its own",
            ),
            (Arrival::mtu(false), drop, "not TCP: nothing to know it by"),
        ];
        for (packet, want, what) in steps {
            let got = c.on_arrival(QueueState::of_packets(0), packet, t);
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn the_ecn_flow_table_is_bounded() {
        let mut c = saturated(NotEct::SpareEcnFlows, Instant::now());
        for i in 0..MAX_ECN_FLOWS as u32 + 10 {
            let mut a = segment(true, 1, false);
            a.tcp.as_mut().unwrap().key.src = SocketAddrV4::new(i.into(), 1);
            c.learn_ecn_flow(a);
            assert!(c.ecn_flows.len() <= MAX_ECN_FLOWS);
        }
        // Emptied once, when it was full, then the last 10 flows learned again.
        assert_eq!(c.ecn_flows.len(), 10);
    }

    /// The ACK flow of `segment(_, from, _)`'s data flow, as the receiver's agent sends it.
    fn ack_of(from: u16) -> FlowKey {
        FlowKey {
            src: SocketAddrV4::new([10, 2, 1, 1].into(), 5000),
            dst: SocketAddrV4::new([10, 1, 1, 1].into(), from),
        }
    }

    fn echo(c: &Rdc, from: u16, t: Instant) {
        let table = c.answering_flows().expect("a holding cell has a table");
        table.lock().unwrap().on_echo(ack_of(from), t);
    }

    #[test]
    fn flows_that_do_not_answer_wait_the_bucket_delay_unstamped() {
        let t = Instant::now();
        let mut c = Rdc::new(
            &RdcConfig {
                mode: RdcMode::Exact,
                ..RdcConfig::default()
            },
            RATE,
            1,
        );
        assert_eq!(c.delay_line_bytes(), 6400 * 1500, "size_tb of packet_bytes");
        // An empty bucket delays nobody.
        assert_eq!(
            c.on_arrival(QueueState::of_packets(0), segment(false, 1, false), t),
            Verdict::Pass
        );
        feed(&mut c, t, 100, Duration::ZERO, 0);
        let q = QueueState::of_packets(40);
        let d = c.local_delay(q);
        assert!(
            (d.as_secs_f64() * 1000.0 - 1.2 * 61.0).abs() < 1e-6,
            "{d:?}"
        );
        let held = |d| Verdict::Hold(d, Reason::RdcNotAnswering);
        assert_eq!(c.on_arrival(q, segment(false, 1, false), t), held(d));
        let d = c.local_delay(q);
        assert_eq!(c.on_arrival(q, Arrival::mtu(false), t), held(d), "not TCP");
        // Its receiver echoes: from then on the flow is told, not held; flow 2 still is.
        echo(&c, 1, t);
        let d = c.local_delay(q);
        assert_eq!(
            c.on_arrival(q, segment(false, 1, false), t),
            Verdict::Stamp(d)
        );
        let d = c.local_delay(q);
        assert_eq!(c.on_arrival(q, segment(false, 2, false), t), held(d));
        // Silent for 15.7 s, then restarting: still told, not held (docs/rdc.md, a video
        // stream at 0 layers).
        let restart = t + Duration::from_millis(15_700);
        assert!(matches!(
            c.on_arrival(q, segment(false, 1, false), restart),
            Verdict::Stamp(_)
        ));
        // Sending for ten seconds without an echo: held again.
        let mut at = restart;
        while at < restart + Duration::from_secs(10) {
            at += Duration::from_millis(100);
            c.on_arrival(q, segment(false, 1, false), at);
        }
        feed(&mut c, at, 100, Duration::ZERO, 0);
        assert!(matches!(
            c.on_arrival(q, segment(false, 1, false), at),
            Verdict::Hold(..)
        ));
    }

    #[test]
    fn one_bit_marks_only_flows_that_answer() {
        let t = Instant::now();
        let mut c = Rdc::new(
            &RdcConfig {
                thresh_tb: 100.0,
                size_tb: 1000.0,
                ..RdcConfig::default()
            },
            RATE,
            1,
        );
        feed(&mut c, t, 200, Duration::ZERO, 0);
        let q = QueueState::of_packets(0);
        assert_eq!(c.mark_probability(q), 1.0);
        // A plain ECN flow: delayed as by the FIFO, never marked (nor dropped if not ECT).
        for ect in [true, false] {
            assert!(matches!(
                c.on_arrival(q, segment(ect, 1, false), t),
                Verdict::Hold(_, Reason::RdcNotAnswering)
            ));
        }
        echo(&c, 1, t);
        assert_eq!(
            c.on_arrival(q, segment(true, 1, false), t),
            Verdict::Mark(Reason::RdcExcess)
        );
        // The paper's cell has no table and no delay line.
        let paper_cell = Rdc::new(&paper(), RATE, 1);
        assert!(paper_cell.answering_flows().is_none());
        assert_eq!(paper_cell.delay_line_bytes(), 0);
    }

    #[test]
    fn not_ect_is_read_from_the_scenario_file() {
        let cfg: RdcConfig = toml::from_str(r#"not_ect = "spare_ecn_flows""#).unwrap();
        assert_eq!(cfg.not_ect, NotEct::SpareEcnFlows);
        assert_eq!(RdcConfig::default().not_ect, NotEct::Drop);
        let e = toml::from_str::<RdcConfig>(r#"not_ect = "sometimes""#).unwrap_err();
        assert!(e.to_string().contains("spare_ecn_flows"), "{e}");
        let cfg: RdcConfig = toml::from_str(r#"non_answering = "notify""#).unwrap();
        assert_eq!(cfg.non_answering, NonAnswering::Notify);
        assert_eq!(RdcConfig::default().non_answering, NonAnswering::Hold);
    }

    #[test]
    fn config_errors_name_field_value_and_range() {
        let bad = RdcConfig {
            rho: 1.5,
            ..RdcConfig::default()
        };
        let e = bad.validate("forward.aqm").unwrap_err().to_string();
        assert!(
            e.contains("forward.aqm.rho") && e.contains("1.5") && e.contains("at most 1"),
            "{e}"
        );
        let bad = RdcConfig {
            thresh_tb: 7000.0,
            ..RdcConfig::default()
        };
        let e = bad.validate("forward.aqm").unwrap_err().to_string();
        assert!(e.contains("thresh_tb") && e.contains("6400"), "{e}");
        let bad = RdcConfig {
            packet_bytes: 9000,
            ..RdcConfig::default()
        };
        assert!(bad
            .validate("x")
            .unwrap_err()
            .to_string()
            .contains("x.packet_bytes"));
        let bad = RdcConfig {
            answer_timeout_ms: 0.0,
            ..RdcConfig::default()
        };
        let e = bad.validate("x").unwrap_err().to_string();
        assert!(
            e.contains("x.answer_timeout_ms") && e.contains("600000"),
            "{e}"
        );
    }
}
