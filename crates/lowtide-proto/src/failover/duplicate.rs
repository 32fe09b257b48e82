//! Duplicate lane: the most important messages also go, whole, on a warm backup connection.
//!
//! Why. On Fig. 6's congested path (Erbad and Krasic, "Sender-side Buffers and the Case for
//! Multimedia Adaptation", Fig. 6) the base layer's latency had two measured causes, both on
//! the connection in use: its tail was head-of-line blocking behind a lost segment during the
//! kernel's fast-retransmit recovery (no timeouts), and its median waited behind the previous
//! frame's enhancement layers already unsent in that connection's kernel queue. Failover
//! (Paceline's connection manager, section "Connection Manager") acts only after a stall
//! threshold of at least a round trip, when the kernel has fast-retransmitted anyway. A copy
//! sent at once on another connection avoids both: its kernel queue holds only copies, and
//! its own loss recovery is independent of the primary's.
//!
//! Rule (prior art: SRT's "broadcast" group mode, where every member link carries the same
//! packets and the receiver keeps the first copy; the MPTCP redundant scheduler, which sends
//! each segment on every subflow). A message of importance at least `min_importance` and at
//! most `max_copy_bytes` long is queued on the primary as usual *and* as a copy for the lane:
//! one DATA frame holding the whole message with the primary's stream, sequence number,
//! importance and enqueue time. The lane's kernel queue is kept at low tide by its own
//! MIN_BUF(1, `extra_segments`) on the lane socket's `TCP_INFO`; copies wait in a small queue
//! (most important, then oldest first) and are dropped, counted by reason, when the primary's
//! copy was P-ACKed before the lane could take them, when the application cancelled the
//! message, or at its deadline. The receiver passes every lane message through the same
//! exactly-once filter as the primary's ([`Delivered`](super::Delivered)): whichever copy
//! completes first is delivered, the other is dropped (and compared by hash).
//!
//! Lane life: the connecting side opens the lane like a backup (hello with the channel token
//! and a path ordinal); its first frame is a DATA frame, not a SWITCH, which tells the
//! accepting side it is a lane. The lane is never acknowledged with P-ACKs and never resent:
//! reliability stays with the primary (and failover). If the lane fails, the driver calls
//! [`DuplicateLane::reset`] and opens another; a lane stuck in its own loss recovery only
//! delays copies, which MIN_BUF then keeps in lowtide's queue where P-ACKs of the primary
//! and deadlines remove them. A failover of the primary leaves the lane as it is.
//!
//! Where we differ:
//! - SRT broadcast duplicates every packet on every link, MPTCP's redundant scheduler every
//!   segment on every subflow; we duplicate only messages at or above `min_importance` (Fig. 6:
//!   the base layer, an eighth of the bytes), so the extra flow carries little.
//! - Copies go one way, from the connecting side (the one that opens connections); the
//!   accepting side's messages are not duplicated.
//! - A copy is a whole message in one frame (no chunking: copies are small, and a whole frame
//!   needs no reassembly state per lane), at most `max_copy_bytes`.
//! - Cancelling a message whose copy was already handed to the lane's kernel cannot stop the
//!   copy: the receiver may get a message the sender cancelled (the primary's CANCEL arrives
//!   after it and changes nothing).
//! - The lane is a TCP connection of its own beside the primary: one more flow through the
//!   bottleneck, with its own congestion window (the fairness cost is measured in the lab).
//!
//! ```
//! use lowtide_proto::failover::duplicate::DuplicateConfig;
//! use lowtide_proto::failover::duplicate::CopyWhen;
//! let cfg: DuplicateConfig = toml::from_str("min_importance = 7").unwrap();
//! assert_eq!((cfg.min_importance, cfg.extra_segments, cfg.max_copy_bytes), (7, 3, 65_536));
//! let on_repair: DuplicateConfig = toml::from_str("when = \"recovery\"").unwrap();
//! assert_eq!(on_repair.when, CopyWhen::Recovery);
//! assert!(cfg.covers(7, 2000) && !cfg.covers(6, 2000) && !cfg.covers(7, 100_000));
//! ```

use std::collections::VecDeque;
use std::time::Instant;

use bytes::{Buf, Bytes, BytesMut};
use serde::{Deserialize, Serialize};

use crate::config::{check_range, ConfigError};
use crate::controller::{AppProgress, Decision, LatencyController, MinBuf, TcpState, CA_RECOVERY};
use crate::error::ProtocolError;
use crate::wire::{DataFrame, FirstChunk, Frame};
use crate::MessageId;

/// `duplicate = { min_importance = 7, ... }`, checked by [`DuplicateConfig::validate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DuplicateConfig {
    /// Messages at or above this importance are also sent on the lane.
    pub min_importance: u8,
    /// MIN_BUF's `b` on the lane socket: unsent segments allowed beyond its cwnd.
    pub extra_segments: u32,
    /// Longest message copied, bytes (longer ones go on the primary only).
    pub max_copy_bytes: u64,
    /// When messages are copied: `always`, or on `recovery` only.
    pub when: CopyWhen,
}

/// When the lane copies the messages it covers.
///
/// `recovery` is the design the lane first left untried: the base layer's tail on Fig. 6 is
/// head-of-line blocking behind a fast retransmit, so copies are only needed while the
/// primary repairs a loss. When the primary's `tcpi_ca_state` enters Recovery or Loss, every
/// covered message not yet P-ACKed (in flight, or still queued) is copied once, and so is
/// every covered message queued while the repair lasts; outside repairs the lane carries
/// nothing. It carries fewer bytes than `always`; the copies start about a round trip after
/// the lost segment left (when the kernel detects the loss), which is when the messages
/// behind it begin to wait.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CopyWhen {
    /// Every covered message, when it is queued.
    #[default]
    Always,
    /// Covered messages not yet P-ACKed while the primary repairs a loss.
    Recovery,
}

impl Default for DuplicateConfig {
    fn default() -> Self {
        Self {
            min_importance: 7,
            extra_segments: 3,
            max_copy_bytes: 65_536,
            when: CopyWhen::Always,
        }
    }
}

impl DuplicateConfig {
    /// Checks every field; errors name the field, the value and the allowed range.
    ///
    /// ```
    /// use lowtide_proto::failover::duplicate::DuplicateConfig;
    /// assert!(DuplicateConfig::default().validate().is_ok());
    /// let e = DuplicateConfig { extra_segments: 100, ..Default::default() }.validate().unwrap_err();
    /// assert_eq!((e.field, e.value.as_str(), e.allowed), ("duplicate.extra_segments", "100", "0..=16"));
    /// ```
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_range(
            "duplicate.extra_segments",
            self.extra_segments,
            0,
            16,
            "0..=16",
        )?;
        check_range(
            "duplicate.max_copy_bytes",
            self.max_copy_bytes,
            1,
            1 << 24,
            "1..=16777216",
        )
    }

    /// Whether a message of this importance and length gets a copy.
    pub fn covers(&self, importance: u8, len: usize) -> bool {
        importance >= self.min_importance && len as u64 <= self.max_copy_bytes
    }
}

/// Counters of the lane, by reason (both sides; each side fills its own).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DuplicateStats {
    /// Copies staged for the lane socket.
    pub copies_sent: u64,
    /// Message bytes staged as copies (the duplicated volume, without frame headers).
    pub copy_bytes: u64,
    /// Copies dropped before staging: the primary's copy was P-ACKed first.
    pub copies_unneeded: u64,
    /// Copies dropped before staging: the message's deadline passed.
    pub copies_expired: u64,
    /// Copies dropped before staging: the application cancelled the message.
    pub copies_cancelled: u64,
    /// Copies dropped because the lane's queue held `max_queued_bytes` (oldest first).
    pub copies_dropped_full: u64,
    /// `when = "recovery"`: loss repairs of the primary that started copying.
    pub recoveries: u64,
    /// `when = "recovery"`: copies of messages already queued or in flight when a repair
    /// began (copies of messages queued during it count only in `copies_sent`).
    pub copies_on_recovery: u64,
    /// Lanes lost (the driver reset the lane after its socket failed).
    pub lanes_lost: u64,
    /// Receiver: lane copies delivered because they arrived before the primary's copy.
    pub copies_first: u64,
    /// Receiver: lane copies dropped because the primary's copy was delivered first.
    pub copies_late: u64,
    /// Receiver: lane copies dropped because their stream was not (or no longer) open.
    pub copies_unknown_stream: u64,
    /// Receiver: reads of the lane that ended inside a copy, after which the driver
    /// acknowledged at once ([`DuplicateLane::holds_partial_copy`]).
    pub quick_acks: u64,
}

/// Why a queued copy is withdrawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Withdraw {
    /// The primary's copy was P-ACKed.
    Acked,
    /// The application cancelled the message.
    Cancelled,
    /// The message's deadline passed.
    Expired,
}

#[derive(Debug)]
struct Copy {
    id: MessageId,
    send_time_us: u64,
    deadline: Option<Instant>,
    data: Bytes,
}

/// A whole message read from the lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneMessage {
    /// Stream id.
    pub stream: u64,
    /// Sequence number.
    pub seq: u64,
    /// Importance.
    pub importance: u8,
    /// Sender's enqueue time, µs since its epoch.
    pub send_time_us: u64,
    /// The message.
    pub data: Bytes,
}

/// The lane's state on both sides: the copy queue and staging (connecting side), the frame
/// parser (accepting side).
///
/// ```
/// use lowtide_proto::failover::duplicate::{DuplicateConfig, DuplicateLane};
/// use lowtide_proto::{MessageId, TcpState};
/// # let now = std::time::Instant::now();
/// let mut tx = DuplicateLane::new(DuplicateConfig::default(), 1 << 20);
/// tx.offer(MessageId::from_parts(0, 5, 7), 1_000, None, vec![7u8; 2000].into());
/// let tcp = TcpState { cwnd: 10, mss: 1448, ..TcpState::default() };
/// tx.poll_transmit(now, &tcp);
/// let wire = tx.transmit().to_vec();
/// tx.handle_written(wire.len());
/// let mut rx = DuplicateLane::new(DuplicateConfig::default(), 1 << 20);
/// let got = rx.on_bytes(&wire, 1 << 20)?;
/// assert_eq!((got[0].stream, got[0].seq, got[0].importance, got[0].data.len()), (0, 5, 7, 2000));
/// assert_eq!(tx.stats.copies_sent, 1);
/// # Ok::<(), lowtide_proto::ProtocolError>(())
/// ```
#[derive(Debug)]
pub struct DuplicateLane {
    cfg: DuplicateConfig,
    controller: MinBuf,
    queue: VecDeque<Copy>,
    queued_bytes: u64,
    max_queued_bytes: u64,
    out: Vec<u8>,
    written: u64,
    inbuf: BytesMut,
    /// The primary's last sampled `tcpi_ca_state` was Recovery or Loss.
    repairing: bool,
    /// Counters.
    pub stats: DuplicateStats,
}

impl DuplicateLane {
    /// A lane with `cfg` (already validated) whose copy queue holds at most
    /// `max_queued_bytes` (the channel's `max_queued_bytes`).
    pub fn new(cfg: DuplicateConfig, max_queued_bytes: u64) -> Self {
        Self {
            cfg,
            controller: MinBuf::new(1, cfg.extra_segments),
            queue: VecDeque::new(),
            queued_bytes: 0,
            max_queued_bytes,
            out: Vec::new(),
            written: 0,
            inbuf: BytesMut::new(),
            repairing: false,
            stats: DuplicateStats::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &DuplicateConfig {
        &self.cfg
    }

    /// Whether a message queued now gets a copy: always, or with `when = "recovery"` while
    /// the primary repairs a loss.
    pub fn copies_new(&self) -> bool {
        self.cfg.when == CopyWhen::Always || self.repairing
    }

    /// The primary's `tcpi_ca_state`, as sampled for its own decision. True when a loss
    /// repair has just begun and this lane copies on recovery: the caller then offers every
    /// message not yet P-ACKed.
    ///
    /// ```
    /// use lowtide_proto::controller::CA_RECOVERY;
    /// use lowtide_proto::failover::duplicate::{CopyWhen, DuplicateConfig, DuplicateLane};
    /// let cfg = DuplicateConfig { when: CopyWhen::Recovery, ..Default::default() };
    /// let mut lane = DuplicateLane::new(cfg, 1 << 20);
    /// assert!(!lane.copies_new());
    /// assert!(lane.on_primary_state(CA_RECOVERY)); // the repair begins
    /// assert!(!lane.on_primary_state(CA_RECOVERY) && lane.copies_new()); // and lasts
    /// assert!(!lane.on_primary_state(0) && !lane.copies_new());
    /// assert_eq!(lane.stats.recoveries, 1);
    /// ```
    pub fn on_primary_state(&mut self, ca_state: u8) -> bool {
        let repairing = ca_state >= CA_RECOVERY;
        let began = repairing && !self.repairing;
        self.repairing = repairing;
        let copies = began && self.cfg.when == CopyWhen::Recovery;
        self.stats.recoveries += u64::from(copies);
        copies
    }

    /// A message was queued on the primary: keep a copy if it qualifies. Returns whether it
    /// did.
    pub fn offer(
        &mut self,
        id: MessageId,
        send_time_us: u64,
        deadline: Option<Instant>,
        data: Bytes,
    ) -> bool {
        if !self.cfg.covers(id.importance(), data.len()) {
            return false;
        }
        self.queued_bytes += data.len() as u64;
        self.queue.push_back(Copy {
            id,
            send_time_us,
            deadline,
            data,
        });
        while self.queued_bytes > self.max_queued_bytes {
            let old = self.queue.pop_front().expect("bytes counted");
            self.queued_bytes -= old.data.len() as u64;
            self.stats.copies_dropped_full += 1;
        }
        true
    }

    /// Drops the queued copy of `id`, if any (its primary copy was P-ACKed, or the message was
    /// cancelled or expired). Returns whether one was queued.
    pub fn withdraw(&mut self, id: MessageId, why: Withdraw) -> bool {
        let Some(i) = self.queue.iter().position(|c| c.id == id) else {
            return false;
        };
        let c = self.queue.remove(i).expect("position found");
        self.queued_bytes -= c.data.len() as u64;
        match why {
            Withdraw::Acked => self.stats.copies_unneeded += 1,
            Withdraw::Cancelled => self.stats.copies_cancelled += 1,
            Withdraw::Expired => self.stats.copies_expired += 1,
        }
        true
    }

    /// Copies waiting for the lane.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Whether anything waits to be staged or written.
    pub fn has_work(&self) -> bool {
        !self.queue.is_empty() || !self.out.is_empty()
    }

    /// Bytes handed to the lane socket so far (for `SIOCOUTQ` arithmetic).
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Stages copies while MIN_BUF(1, `extra_segments`) on the lane socket's snapshot allows,
    /// most important first, then oldest; drops expired copies. Returns the decision (blocked:
    /// its `wake` says how to wait for the lane).
    pub fn poll_transmit(&mut self, now: Instant, tcp: &TcpState) -> Decision {
        loop {
            let app = AppProgress {
                written: self.written,
                acked: 0,
                staged: self.out.len() as u64,
                queued: self.queued_bytes,
            };
            let d = self.controller.decide(tcp, &app, now);
            if d.blocked() {
                return d;
            }
            let Some(i) = self.next_copy(now) else {
                return d;
            };
            let c = self.queue.remove(i).expect("index found");
            self.queued_bytes -= c.data.len() as u64;
            Frame::Data(DataFrame {
                stream: c.id.stream,
                seq: c.id.seq,
                offset: 0,
                first: Some(FirstChunk {
                    importance: c.id.importance(),
                    send_time_us: c.send_time_us,
                    total_len: c.data.len() as u64,
                }),
                payload: &c.data,
            })
            .encode(&mut self.out);
            self.stats.copies_sent += 1;
            self.stats.copy_bytes += c.data.len() as u64;
        }
    }

    /// The most important, then oldest, copy not expired (expired ones are dropped).
    fn next_copy(&mut self, now: Instant) -> Option<usize> {
        while let Some(i) = self
            .queue
            .iter()
            .position(|c| c.deadline.is_some_and(|d| d <= now))
        {
            let c = self.queue.remove(i).expect("position found");
            self.queued_bytes -= c.data.len() as u64;
            self.stats.copies_expired += 1;
        }
        let best = self.queue.iter().map(|c| c.id.importance()).max()?;
        self.queue.iter().position(|c| c.id.importance() == best)
    }

    /// Staged bytes for the lane socket.
    pub fn transmit(&self) -> &[u8] {
        &self.out
    }

    /// The lane socket took `n` of the staged bytes.
    pub fn handle_written(&mut self, n: usize) {
        let n = n.min(self.out.len());
        self.out.drain(..n);
        self.written += n as u64;
    }

    /// The lane socket failed: what was staged for it is dropped (the primary still carries
    /// every message), the next lane starts from zero bytes; on the receiving side the
    /// partial frame is dropped.
    pub fn reset(&mut self) {
        self.out.clear();
        self.written = 0;
        self.inbuf.clear();
        self.stats.lanes_lost += 1;
    }

    /// Receiving side: whether the bytes read so far end inside a copy, so the receiver
    /// should acknowledge the lane at once (`TCP_QUICKACK`).
    ///
    /// Why: a copy of Fig. 6's base layer is 1.45 segments. When the lane's congestion window
    /// has room for its first segment only, the sender holds the rest until an ACK frees the
    /// window, and the receiver's TCP delays the ACK of a lone full segment, waiting for a
    /// second (Linux: its delayed-ACK timer, at least 40 ms). Both wait for each other; in
    /// a full-scale run of Fig. 6 (docs/failover.md, "The duplicate lane's median, per
    /// packet") 102 of the lane's 1624 ACKs came about 40 ms late for a lone full segment,
    /// none with this rule in four runs after it. A read that ends at a frame's end
    /// needs nothing: the sender is not waiting for that ACK, and a copy's last segment
    /// completes more than one full segment, which the receiver acknowledges at once anyway.
    ///
    /// ```
    /// use lowtide_proto::failover::duplicate::{DuplicateConfig, DuplicateLane};
    /// use lowtide_proto::{MessageId, TcpState};
    /// # let now = std::time::Instant::now();
    /// let mut tx = DuplicateLane::new(DuplicateConfig::default(), 1 << 20);
    /// tx.offer(MessageId::from_parts(0, 1, 7), 0, None, vec![7u8; 2083].into());
    /// tx.poll_transmit(now, &TcpState { cwnd: 10, mss: 1448, ..TcpState::default() });
    /// let wire = tx.transmit().to_vec();
    /// let mut rx = DuplicateLane::new(DuplicateConfig::default(), 1 << 20);
    /// assert!(rx.on_bytes(&wire[..1448], 1 << 20)?.is_empty()); // the first segment alone
    /// assert!(rx.holds_partial_copy());
    /// assert_eq!(rx.on_bytes(&wire[1448..], 1 << 20)?.len(), 1); // the rest
    /// assert!(!rx.holds_partial_copy());
    /// # Ok::<(), lowtide_proto::ProtocolError>(())
    /// ```
    pub fn holds_partial_copy(&self) -> bool {
        !self.inbuf.is_empty()
    }

    /// Receiving side: bytes read from the lane. Returns the whole messages they complete.
    /// Only whole-message DATA frames may appear on a lane; anything else, or a message
    /// longer than `max_message_size`, is a protocol error. Memory: at most one incomplete
    /// frame (bounded by `max_message_size` plus its header).
    pub fn on_bytes(
        &mut self,
        data: &[u8],
        max_message_size: u64,
    ) -> Result<Vec<LaneMessage>, ProtocolError> {
        self.inbuf.extend_from_slice(data);
        let mut got = Vec::new();
        while let Some((frame, n)) = Frame::decode(&self.inbuf, max_message_size)? {
            let m = match frame {
                Frame::Data(DataFrame {
                    stream,
                    seq,
                    offset: 0,
                    first: Some(f),
                    payload,
                }) if f.total_len == payload.len() as u64 => LaneMessage {
                    stream,
                    seq,
                    importance: f.importance,
                    send_time_us: f.send_time_us,
                    data: Bytes::copy_from_slice(payload),
                },
                Frame::Data(d) => {
                    return Err(ProtocolError::BadLaneFrame {
                        got: format!(
                            "DATA {}/{} at offset {}, not a whole message",
                            d.stream, d.seq, d.offset
                        ),
                    })
                }
                other => {
                    return Err(ProtocolError::BadLaneFrame {
                        got: other.name().to_owned(),
                    })
                }
            };
            self.inbuf.advance(n);
            got.push(m);
        }
        Ok(got)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn id(seq: u64, importance: u8) -> MessageId {
        MessageId::from_parts(0, seq, importance)
    }

    fn tcp() -> TcpState {
        TcpState {
            cwnd: 10,
            mss: 1000,
            ..TcpState::default()
        }
    }

    #[test]
    fn config_errors_name_field_value_and_range() {
        let e = DuplicateConfig {
            max_copy_bytes: 0,
            ..Default::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(
            (e.field, e.value.as_str(), e.allowed),
            ("duplicate.max_copy_bytes", "0", "1..=16777216")
        );
        assert!(toml::from_str::<DuplicateConfig>("bogus = 1").is_err());
    }

    #[test]
    fn only_important_short_messages_are_copied() {
        let mut l = DuplicateLane::new(DuplicateConfig::default(), 1 << 20);
        assert!(!l.offer(id(0, 6), 0, None, vec![0u8; 10].into()));
        assert!(!l.offer(id(1, 7), 0, None, vec![0u8; 70_000].into()));
        assert!(l.offer(id(2, 7), 0, None, vec![0u8; 10].into()));
        assert_eq!(l.queued(), 1);
    }

    #[test]
    fn min_buf_keeps_the_lane_at_low_tide() {
        let now = Instant::now();
        let mut l = DuplicateLane::new(DuplicateConfig::default(), 1 << 20);
        for s in 0..20 {
            l.offer(id(s, 7), 0, None, vec![0u8; 2000].into());
        }
        // cwnd 10 + 3 segments of 1000 bytes, 12 000 already in the kernel: one copy more at
        // most (a copy is staged whole once the allowance reaches an MSS).
        let full = TcpState {
            outq: 12_500,
            ..tcp()
        };
        assert!(l.poll_transmit(now, &full).blocked());
        assert_eq!(
            l.stats.copies_sent, 0,
            "500 bytes left: less than a segment"
        );
        // An empty kernel: copies (2008 bytes framed) are staged while a whole segment of the
        // 13 000 bytes is left; the sixth ends at 12 048.
        let d = l.poll_transmit(now, &tcp());
        assert!(d.blocked());
        assert_eq!((l.stats.copies_sent, l.queued()), (6, 14));
    }

    #[test]
    fn copies_are_withdrawn_by_reason_and_expire() {
        let now = Instant::now();
        let mut l = DuplicateLane::new(DuplicateConfig::default(), 1 << 20);
        let soon = Some(now + Duration::from_millis(10));
        l.offer(id(0, 7), 0, None, vec![0u8; 10].into());
        l.offer(id(1, 7), 0, None, vec![0u8; 10].into());
        l.offer(id(2, 7), 0, soon, vec![0u8; 10].into());
        l.offer(id(3, 7), 0, None, vec![0u8; 10].into());
        assert!(l.withdraw(id(0, 7), Withdraw::Acked));
        assert!(!l.withdraw(id(0, 7), Withdraw::Acked));
        assert!(l.withdraw(id(1, 7), Withdraw::Cancelled));
        l.poll_transmit(now + Duration::from_millis(10), &tcp());
        let s = l.stats;
        assert_eq!(
            (
                s.copies_unneeded,
                s.copies_cancelled,
                s.copies_expired,
                s.copies_sent
            ),
            (1, 1, 1, 1)
        );
    }

    #[test]
    fn most_important_first_then_oldest_and_bounded() {
        let now = Instant::now();
        let cfg = DuplicateConfig {
            min_importance: 5,
            ..Default::default()
        };
        let mut l = DuplicateLane::new(cfg, 30);
        l.offer(id(0, 5), 0, None, vec![0u8; 10].into());
        l.offer(id(1, 6), 0, None, vec![0u8; 10].into());
        l.offer(id(2, 5), 0, None, vec![0u8; 10].into());
        l.offer(id(3, 6), 0, None, vec![0u8; 10].into()); // 40 bytes: the oldest goes
        assert_eq!(l.stats.copies_dropped_full, 1);
        l.poll_transmit(now, &tcp());
        let wire = l.transmit().to_vec();
        let mut rx = DuplicateLane::new(cfg, 1 << 20);
        let seqs: Vec<u64> = rx
            .on_bytes(&wire, 1 << 20)
            .unwrap()
            .iter()
            .map(|m| m.seq)
            .collect();
        assert_eq!(seqs, [1, 3, 2]);
    }

    #[test]
    fn receiver_reassembles_split_reads_and_refuses_other_frames() {
        let now = Instant::now();
        let mut tx = DuplicateLane::new(DuplicateConfig::default(), 1 << 20);
        for s in 0..3 {
            tx.offer(id(s, 7), 9, None, vec![s as u8; 3000].into());
        }
        tx.poll_transmit(now, &tcp());
        let wire = tx.transmit().to_vec();
        let mut rx = DuplicateLane::new(DuplicateConfig::default(), 1 << 20);
        let mut got = Vec::new();
        for part in wire.chunks(7) {
            got.extend(rx.on_bytes(part, 1 << 20).unwrap());
        }
        assert_eq!(got.len(), 3);
        assert!(got
            .iter()
            .all(|m| m.data.len() == 3000 && m.send_time_us == 9));
        // a message over the receiver's limit
        let mut rx = DuplicateLane::new(DuplicateConfig::default(), 1 << 20);
        assert!(rx.on_bytes(&wire, 1000).is_err());
        // a chunk that is not a whole message, and a frame of another type
        let mut part = Vec::new();
        Frame::Data(DataFrame {
            stream: 0,
            seq: 0,
            offset: 10,
            first: None,
            payload: b"x",
        })
        .encode(&mut part);
        let e = DuplicateLane::new(DuplicateConfig::default(), 1 << 20)
            .on_bytes(&part, 1 << 20)
            .unwrap_err();
        assert!(e.to_string().contains("not a whole message"), "{e}");
        let mut sw = Vec::new();
        Frame::Switch { path: 1 }.encode(&mut sw);
        let e = DuplicateLane::new(DuplicateConfig::default(), 1 << 20)
            .on_bytes(&sw, 1 << 20)
            .unwrap_err();
        assert!(e.to_string().contains("SWITCH"), "{e}");
    }

    #[test]
    fn the_receiver_asks_for_an_ack_at_once_only_inside_a_copy() {
        let now = Instant::now();
        let mut tx = DuplicateLane::new(DuplicateConfig::default(), 1 << 20);
        for s in 0..3 {
            tx.offer(id(s, 7), 9, None, vec![s as u8; 2083].into());
        }
        tx.poll_transmit(now, &tcp());
        let wire = tx.transmit().to_vec();
        let frame = wire.len() / 3;
        assert_eq!(frame * 3, wire.len(), "three frames of one length");
        // read as segments of 1448 bytes arrive: every read that ends inside a frame asks
        // for an ACK, a read that ends at a frame's end does not
        let mut rx = DuplicateLane::new(DuplicateConfig::default(), 1 << 20);
        let (mut got, mut at) = (0, 0);
        for part in wire.chunks(1448) {
            got += rx.on_bytes(part, 1 << 20).unwrap().len();
            at += part.len();
            assert_eq!(rx.holds_partial_copy(), at % frame != 0, "after {at} bytes");
        }
        assert_eq!((got, at), (3, wire.len()));
        // a whole copy in one read: nothing for the sender to wait for
        let mut rx = DuplicateLane::new(DuplicateConfig::default(), 1 << 20);
        rx.on_bytes(&wire[..frame], 1 << 20).unwrap();
        assert!(!rx.holds_partial_copy());
    }
}
