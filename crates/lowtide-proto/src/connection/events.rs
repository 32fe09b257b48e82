//! What the connection reports: events for the driver to drain, counters by reason, and the
//! controller's decision log.

use std::collections::VecDeque;

use super::{Connection, MessageId, MessageTimes};
use crate::controller::{AppProgress, Decision, ProbeResult, TcpState};
use crate::failover::duplicate::DuplicateStats;
use crate::failover::FailoverReport;
use crate::reassembly::PeerCancelled;
use crate::wire::CancelReason;

/// What happened to a message, stream or the channel.
///
/// ```
/// use lowtide_proto::sim::{LinkParams, Pair};
/// use lowtide_proto::{Config, Event, Message, StreamConfig};
/// let mut pair = Pair::new(Config::default(), Config::default(), LinkParams::default());
/// let s = pair.client.conn.open_stream(StreamConfig { weight: 2.0 })?;
/// pair.client.conn.send(pair.now, s, Message::new("hi"))?;
/// pair.drive_bounded(10_000);
/// assert!(pair.server.events.contains(&Event::StreamOpened { stream: s, weight: 2.0 }));
/// assert!(pair.client.events.iter().any(|e| matches!(e, Event::Written { .. })));
/// assert!(pair.client.events.iter().any(|e| matches!(e, Event::Acked { .. })));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Event {
    /// The whole message is in the kernel.
    Written {
        /// Message.
        id: MessageId,
        /// Timestamps so far.
        times: MessageTimes,
    },
    /// The receiver acknowledged the message (P-ACK).
    Acked {
        /// Message.
        id: MessageId,
        /// Timestamps.
        times: MessageTimes,
        /// Receiver clock in the P-ACK, µs since its epoch.
        peer_recv_time_us: u64,
    },
    /// We withdrew the message (application or deadline).
    Cancelled {
        /// Message.
        id: MessageId,
        /// Why.
        reason: CancelReason,
        /// Bytes that had been staged for the kernel (>0: the receiver was told to abort).
        sent: u64,
    },
    /// The peer withdrew one of its messages.
    PeerCancelled(PeerCancelled),
    /// The peer opened a stream.
    StreamOpened {
        /// Stream id.
        stream: u64,
        /// Its weight.
        weight: f64,
    },
    /// The peer closed a stream.
    StreamClosed {
        /// Stream id.
        stream: u64,
    },
    /// DBAT's smoothed send queue crossed its threshold (`onset`) or fell back below it.
    Congestion {
        /// `true` when congestion starts (or worsens: the average doubled since the last
        /// onset), `false` when it clears.
        onset: bool,
        /// Average send-queue size, bytes.
        queue: u64,
        /// The threshold (probed bandwidth × weighted RTT), bytes.
        threshold: u64,
        /// The transport's achieved-rate estimate, bytes per second.
        rate_estimate: u64,
    },
    /// A packet-pair probe finished ([`Config::probe_at_start`](crate::Config::probe_at_start)).
    Probed(ProbeResult),
    /// The channel moved to a backup connection (failover; `crate::failover`).
    Failover(FailoverReport),
    /// The channel is closed.
    Closed {
        /// Closed by the peer's CLOSE frame.
        by_peer: bool,
        /// Close code.
        code: u64,
        /// Reason.
        reason: String,
    },
}

/// Counters, by reason, for reports.
///
/// ```
/// use lowtide_proto::{Config, Connection, Message, Side, StreamConfig};
/// # let now = std::time::Instant::now();
/// let mut c = Connection::new(Config::default(), Side::Client, now)?;
/// let s = c.open_stream(StreamConfig::default())?;
/// let id = c.send(now, s, Message::new("late"))?;
/// c.cancel(id);
/// let st = c.stats();
/// assert_eq!((st.messages_queued, st.cancelled_unsent, st.messages_written), (1, 1, 0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stats {
    /// Messages accepted by `send`.
    pub messages_queued: u64,
    /// Messages completely written to the kernel.
    pub messages_written: u64,
    /// Messages acknowledged by P-ACK.
    pub messages_acked: u64,
    /// Cancelled by the application before any byte was staged.
    pub cancelled_unsent: u64,
    /// Cancelled by the application after some bytes were staged (abort sent).
    pub cancelled_partial: u64,
    /// Expired before any byte was staged.
    pub expired_unsent: u64,
    /// Expired after some bytes were staged.
    pub expired_partial: u64,
    /// Chunks staged.
    pub chunks_sent: u64,
    /// Bytes handed to the kernel.
    pub bytes_written: u64,
    /// Write system calls that handed bytes to the kernel (one per `handle_written`).
    pub write_calls: u64,
    /// Write opportunities at which the controller blocked.
    pub controller_blocked: u64,
    /// Messages delivered to the application.
    pub messages_received: u64,
    /// Packet-pair probes sent.
    pub probes_sent: u64,
    /// Probe reports ignored: unknown id, or for a probe not yet written.
    pub probe_reports_ignored: u64,
    /// Peer cancellations received.
    pub peer_cancelled: u64,
    /// P-ACKs sent.
    pub packs_sent: u64,
    /// Written messages forgotten before their P-ACK (the peer did not acknowledge).
    pub ack_tracking_dropped: u64,
    /// Switches to a backup connection, made (connecting side) or followed (accepting side).
    pub failovers: u64,
    /// Failovers after which the old connection still acknowledged bytes past the stall point
    /// (an estimate of false positives, `failover::old_path`).
    pub false_failovers: u64,
    /// Messages queued again by failovers.
    pub resent_messages: u64,
    /// Messages not P-ACKed at a failover whose deadline had passed (cancelled, not resent).
    pub failover_expired: u64,
    /// Backup connections refused (more idle ones than `failover.backups`).
    pub backups_refused: u64,
    /// Stalls detected while no backup connection was ready.
    pub stalls_without_backup: u64,
    /// Stall verdicts of the P-ACK rule held back because the kernel still received ACKs
    /// (its own loss recovery at work; once per oldest write, `failover::stall`).
    pub stalls_held_by_acks: u64,
    /// Written messages whose copy for resending was dropped (more unacknowledged than
    /// `max_queued_bytes`): a failover could not resend them.
    pub resend_tracking_dropped: u64,
    /// Received copies of messages already delivered, dropped (identical to the first copy).
    pub duplicates_dropped: u64,
    /// Received copies dropped without comparison (first copy's hash forgotten, or cancelled).
    pub duplicates_unverified: u64,
    /// Staging passes that ended because the next message was below the importance reserve's
    /// `min_importance` and only the reserve was left (`crate::reserve`).
    pub reserve_held: u64,
    /// Bytes of important messages staged into the reserve (beyond what less important data
    /// may fill).
    pub reserve_bytes_used: u64,
    /// The duplicate lane's counters (`crate::failover::duplicate`; zero when off).
    pub lane: DuplicateStats,
}

/// A controller decision with the state it was taken on, for plots.
///
/// ```
/// use lowtide_proto::sim::{LinkParams, Pair};
/// use lowtide_proto::{Config, Message, StreamConfig};
/// let mut pair = Pair::new(Config::default(), Config::default(), LinkParams::default());
/// pair.client.conn.record_decisions(1000);
/// let s = pair.client.conn.open_stream(StreamConfig::default())?;
/// pair.client.conn.send(pair.now, s, Message::new(vec![0u8; 100_000]))?;
/// pair.drive_bounded(100_000);
/// let log = pair.client.conn.drain_decisions();
/// // MIN_BUF(1, 3) at cwnd 20: the kernel queue never exceeds 23 segments.
/// assert!(log.iter().all(|r| r.decision.limit == 23 * 1000));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct DecisionRecord {
    /// µs since the connection's epoch.
    pub at_us: u64,
    /// Kernel snapshot.
    pub tcp: TcpState,
    /// Application progress.
    pub app: AppProgress,
    /// Decision.
    pub decision: Decision,
}

impl Connection {
    /// Counters.
    ///
    /// ```
    /// use lowtide_proto::sim::{LinkParams, Pair};
    /// use lowtide_proto::{Config, Message, StreamConfig};
    /// let mut pair = Pair::new(Config::default(), Config::default(), LinkParams::default());
    /// let s = pair.client.conn.open_stream(StreamConfig::default())?;
    /// for _ in 0..3 {
    ///     pair.client.conn.send(pair.now, s, Message::new("x"))?;
    /// }
    /// pair.drive_bounded(10_000);
    /// let (c, r) = (pair.client.conn.stats(), pair.server.conn.stats());
    /// assert_eq!((c.messages_queued, c.messages_written, r.messages_received), (3, 3, 3));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Keep the last `capacity` controller decisions (0 disables).
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, Side, TcpState};
    /// # let now = std::time::Instant::now();
    /// let mut c = Connection::new(Config::default(), Side::Client, now)?;
    /// c.record_decisions(4); // a ring of the last 4
    /// for _ in 0..10 {
    ///     c.poll_transmit(now, &TcpState::default());
    /// }
    /// assert_eq!(c.drain_decisions().len(), 4);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn record_decisions(&mut self, capacity: usize) {
        self.decisions = (capacity > 0).then(|| (capacity, VecDeque::new()));
    }

    /// Takes the recorded decisions.
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, Side, TcpState};
    /// # let now = std::time::Instant::now();
    /// let mut c = Connection::new(Config::default(), Side::Client, now)?;
    /// assert!(c.drain_decisions().is_empty()); // recording is off by default
    /// c.record_decisions(16);
    /// c.poll_transmit(now, &TcpState { cwnd: 10, mss: 1000, ..TcpState::default() });
    /// let log = c.drain_decisions();
    /// assert_eq!((log.len(), log[0].tcp.cwnd, log[0].decision.limit), (1, 10, 13_000));
    /// assert!(c.drain_decisions().is_empty()); // taken
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn drain_decisions(&mut self) -> Vec<DecisionRecord> {
        match &mut self.decisions {
            Some((_, d)) => d.drain(..).collect(),
            None => Vec::new(),
        }
    }

    /// Next event, if any.
    ///
    /// ```
    /// use lowtide_proto::sim::{LinkParams, Pair};
    /// use lowtide_proto::{Config, Event, Message, StreamConfig};
    /// let mut pair = Pair::new(Config::default(), Config::default(), LinkParams::default());
    /// let s = pair.client.conn.open_stream(StreamConfig::default())?;
    /// let id = pair.client.conn.send(pair.now, s, Message::new("x"))?;
    /// pair.drive_bounded(10_000);
    /// // `Pair` collects each side's events; a driver calls poll_event until `None`.
    /// let acked = pair.client.events.iter().any(|e| matches!(e, Event::Acked { id: a, .. } if *a == id));
    /// assert!(acked);
    /// assert_eq!(pair.client.conn.poll_event(), None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }
}
