//! The duplicate lane inside [`Connection`]: copies out to the lane socket (connecting side),
//! copies in through the exactly-once filter (accepting side).
//!
//! It lives in `connection` because it delivers into the receive state; the lane itself, the
//! rule and where we differ are in [`crate::failover::duplicate`]. The driver's call order for
//! the lane socket mirrors the primary's: sample the lane's `TCP_INFO`,
//! [`Connection::poll_lane`], write [`Connection::lane_transmit`], report
//! [`Connection::handle_lane_written`]; bytes read from a lane go to
//! [`Connection::handle_lane_bytes`].

use std::time::Instant;

use super::{Connection, Side};
use crate::controller::{Decision, TcpState};
use crate::error::ProtocolError;
use crate::failover::Verdict;
use crate::reassembly::Received;
use crate::stream::Pending;
use crate::MessageId;

impl Connection {
    /// Whether this side sends copies on a duplicate lane (`duplicate` configured, connecting
    /// side): the driver opens and keeps one lane connection.
    ///
    /// ```
    /// use lowtide_proto::failover::duplicate::DuplicateConfig;
    /// use lowtide_proto::{Config, Connection, FailoverConfig, Side};
    /// # let now = std::time::Instant::now();
    /// let cfg = Config {
    ///     failover: Some(FailoverConfig::default()),
    ///     duplicate: Some(DuplicateConfig::default()),
    ///     ..Config::default()
    /// };
    /// assert!(Connection::new(cfg.clone(), Side::Client, now)?.sends_copies());
    /// assert!(!Connection::new(cfg, Side::Server, now)?.sends_copies());
    /// // A lane is a backup connection: without failover the configuration is refused.
    /// let e = Connection::new(Config { duplicate: Some(DuplicateConfig::default()), ..Config::default() }, Side::Client, now).unwrap_err();
    /// assert_eq!(e.field, "duplicate");
    /// # Ok::<(), lowtide_proto::ConfigError>(())
    /// ```
    pub fn sends_copies(&self) -> bool {
        self.lane.is_some() && self.side == Side::Client
    }

    /// Whether this side accepts a duplicate lane from the peer (`duplicate` configured,
    /// accepting side).
    pub fn accepts_lane(&self) -> bool {
        self.lane.is_some() && self.side == Side::Server
    }

    /// Copies wait to be staged or written on the lane.
    pub fn lane_has_work(&self) -> bool {
        self.lane.as_ref().is_some_and(|l| l.has_work())
    }

    /// Bytes written to the lane socket so far (its `SIOCOUTQ` arithmetic).
    pub fn lane_written(&self) -> u64 {
        self.lane.as_ref().map_or(0, |l| l.written())
    }

    /// Stages copies for the lane socket as its MIN_BUF allows (`tcp`: the lane socket's
    /// snapshot). `None`: no lane. A blocked decision's `wake` says how to wait.
    pub fn poll_lane(&mut self, now: Instant, tcp: &TcpState) -> Option<Decision> {
        let lane = self.lane.as_mut()?;
        let d = lane.poll_transmit(now, tcp);
        self.stats.lane = lane.stats;
        Some(d)
    }

    /// `when = "recovery"`: called with the primary's snapshot before its decision. When a
    /// loss repair begins, every covered message not yet P-ACKed (staged whole and retained,
    /// or still queued, partly staged ones included) is copied, each at most once.
    pub(super) fn copy_on_repair(&mut self, tcp: &TcpState) {
        if self.side != Side::Client
            || !self
                .lane
                .as_mut()
                .is_some_and(|l| l.on_primary_state(tcp.ca_state))
        {
            return;
        }
        let mut lane = self.lane.take().expect("checked above");
        let mut n = 0;
        let mut offer = |id: MessageId, p: &mut Pending| {
            if !p.copied && lane.offer(id, p.send_time_us, p.deadline, p.data.clone()) {
                p.copied = true;
                n += 1;
            }
        };
        for (id, p) in self.retained_mut() {
            offer(id, p);
        }
        for (&stream, s) in &mut self.streams {
            for (importance, seq, p) in s.queue.iter_mut() {
                offer(
                    MessageId {
                        stream,
                        seq,
                        importance,
                    },
                    p,
                );
            }
        }
        lane.stats.copies_on_recovery += n;
        self.stats.lane = lane.stats;
        self.lane = Some(lane);
    }

    /// Staged bytes for the lane socket.
    pub fn lane_transmit(&self) -> &[u8] {
        self.lane.as_ref().map_or(&[], |l| l.transmit())
    }

    /// The lane socket took `n` staged bytes.
    pub fn handle_lane_written(&mut self, n: usize) {
        if let Some(l) = &mut self.lane {
            l.handle_written(n);
        }
    }

    /// The lane connection failed or closed: its staged copies are dropped (the primary still
    /// carries every message); the next lane starts afresh.
    pub fn lane_lost(&mut self) {
        if let Some(l) = &mut self.lane {
            l.reset();
            self.stats.lane = l.stats;
        }
    }

    /// Accepting side: the lane's last read ended inside a copy, whose sender waits for this
    /// side's ACK to send the rest: the driver acknowledges the lane at once
    /// (`TCP_QUICKACK`; why: [`DuplicateLane::holds_partial_copy`]).
    ///
    /// ```
    /// use lowtide_proto::failover::duplicate::{DuplicateConfig, DuplicateLane};
    /// use lowtide_proto::{Config, Connection, FailoverConfig, MessageId, Side, TcpState};
    /// # let now = std::time::Instant::now();
    /// let cfg = Config {
    ///     failover: Some(FailoverConfig::default()),
    ///     duplicate: Some(DuplicateConfig::default()),
    ///     ..Config::default()
    /// };
    /// let mut server = Connection::new(cfg, Side::Server, now)?;
    /// // the connecting side's copy of a 2083-byte base ADU, as the lane carries it
    /// let mut tx = DuplicateLane::new(DuplicateConfig::default(), 1 << 20);
    /// tx.offer(MessageId::from_parts(0, 1, 7), 0, None, vec![7u8; 2083].into());
    /// tx.poll_transmit(now, &TcpState { cwnd: 10, mss: 1448, ..TcpState::default() });
    /// let wire = tx.transmit().to_vec();
    /// server.handle_lane_bytes(now, &wire[..1448])?; // its first segment alone
    /// assert!(server.lane_ack_now());
    /// assert_eq!(server.stats().lane.quick_acks, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// [`DuplicateLane::holds_partial_copy`]: crate::failover::duplicate::DuplicateLane::holds_partial_copy
    pub fn lane_ack_now(&self) -> bool {
        self.side == Side::Server && self.lane.as_ref().is_some_and(|l| l.holds_partial_copy())
    }

    /// Bytes read from the lane connection (accepting side). Every whole message passes the
    /// same exactly-once filter as the primary's: the first copy of a (stream, seq) is
    /// delivered (counted `lane.copies_first` when it is the lane's), the other dropped
    /// (`lane.copies_late`, or `duplicates_dropped` when the primary's copy comes second; a
    /// copy with other bytes is [`ProtocolError::ResentMessageDiffers`]). A copy for a stream
    /// the peer has not opened (its STREAM_OPEN travels on the primary) is dropped and counted
    /// (`lane.copies_unknown_stream`). Errors close the channel, as on the primary.
    ///
    /// ```
    /// use lowtide_proto::failover::duplicate::DuplicateConfig;
    /// use lowtide_proto::sim::{LinkParams, Pair};
    /// use lowtide_proto::{Config, FailoverConfig, Message, StreamConfig};
    /// use std::time::Duration;
    /// let cfg = Config {
    ///     failover: Some(FailoverConfig::default()),
    ///     duplicate: Some(DuplicateConfig { min_importance: 7, ..Default::default() }),
    ///     ..Config::default()
    /// };
    /// let mut pair = Pair::new(cfg.clone(), cfg, LinkParams::default());
    /// pair.add_lane(Duration::from_millis(2)); // the lane is faster than the 10 ms primary
    /// let s = pair.client.conn.open_stream(StreamConfig::default())?;
    /// pair.drive_bounded(10_000);
    /// pair.client.conn.send(pair.now, s, Message::new("base").importance(7))?;
    /// pair.client.conn.send(pair.now, s, Message::new("enhancement").importance(6))?;
    /// pair.drive_bounded(10_000);
    /// assert_eq!(pair.server.received.len(), 2); // each once
    /// let st = pair.server.conn.stats();
    /// assert_eq!((st.lane.copies_first, st.duplicates_dropped), (1, 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn handle_lane_bytes(&mut self, now: Instant, data: &[u8]) -> Result<(), ProtocolError> {
        let max = self.config.max_message_size;
        let got = match &mut self.lane {
            Some(l) if self.side == Side::Server => l.on_bytes(data, max),
            _ => Err(ProtocolError::BadLaneFrame {
                got: "bytes on a duplicate lane this side did not configure".into(),
            }),
        };
        let got = match got {
            Ok(g) => g,
            Err(e) => return Err(self.fail(e)),
        };
        let mut counts = (0, 0, 0); // first, late, unknown stream
        let mut res = Ok(());
        for m in got {
            if !self.peer_streams.contains(&m.stream) {
                counts.2 += 1;
                continue;
            }
            let verdict = self.reasm.deliver(Received {
                stream: m.stream,
                seq: m.seq,
                importance: m.importance,
                send_time_us: m.send_time_us,
                received_at: now,
                data: m.data,
            });
            match verdict {
                Ok(Verdict::New) => {
                    counts.0 += 1;
                    self.stats.messages_received += 1;
                }
                Ok(Verdict::Duplicate) => counts.1 += 1,
                Err(e) => {
                    res = Err(e);
                    break;
                }
            }
        }
        if let Some(l) = &mut self.lane {
            l.stats.copies_first += counts.0;
            l.stats.copies_late += counts.1;
            l.stats.copies_unknown_stream += counts.2;
            l.stats.quick_acks += u64::from(l.holds_partial_copy());
            self.stats.lane = l.stats;
        }
        // the lane's copies that came second were counted as duplicates by the filter too
        self.sync_duplicate_stats();
        res.map_err(|e| self.fail(e))
    }
}
