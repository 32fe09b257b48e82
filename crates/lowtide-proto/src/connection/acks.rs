//! ACK accounting: P-ACKs we send for bytes consumed (the interval and byte rules) and P-ACKs
//! we receive, which turn written messages into `Acked` events and feed the controller.

use std::time::{Duration, Instant};

use super::{Connection, Event, MessageTimes, State};
use crate::controller::PAckSample;
use crate::pack_gap::pack_gap;
use crate::wire::Frame;

/// Written messages remembered for `Acked` events; beyond this the oldest are forgotten.
pub(super) const MAX_UNACKED_TRACKED: usize = 1 << 20;

impl Connection {
    /// Bytes the peer acknowledged by P-ACK.
    ///
    /// ```
    /// use lowtide_proto::sim::{LinkParams, Pair};
    /// use lowtide_proto::{Config, Message, StreamConfig};
    /// let mut pair = Pair::new(Config::default(), Config::default(), LinkParams::default());
    /// let s = pair.client.conn.open_stream(StreamConfig::default())?;
    /// pair.client.conn.send(pair.now, s, Message::new(vec![0u8; 50_000]))?;
    /// pair.drive_bounded(100_000);
    /// // The receiver consumed everything and said so with P-ACKs.
    /// let c = &pair.client.conn;
    /// assert!(c.acked() > 50_000);
    /// assert_eq!(c.acked(), c.written());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn acked(&self) -> u64 {
        self.acked
    }

    /// Our sending direction waits for the peer: message bytes written and not yet covered by
    /// a P-ACK, or a probe without its report. Those answers come in the peer's byte stream,
    /// behind its data, so a driver that stops reading ahead of a slow application must read
    /// on while this holds, or the controllers and stall detection would go without them.
    ///
    /// ```
    /// use lowtide_proto::sim::{LinkParams, Pair};
    /// use lowtide_proto::{Config, Connection, Message, Side, StreamConfig, TcpState};
    /// # let now = std::time::Instant::now();
    /// let mut c = Connection::new(Config::default(), Side::Client, now)?;
    /// c.poll_transmit(now, &TcpState::default());
    /// c.handle_written(now, c.staged_len() as usize);
    /// assert!(!c.awaits_peer()); // the handshake alone is never P-ACKed
    /// let s = c.open_stream(StreamConfig::default())?;
    /// c.send(now, s, Message::new("x"))?;
    /// c.poll_transmit(now, &TcpState::default());
    /// c.handle_written(now, c.staged_len() as usize);
    /// assert!(c.awaits_peer()); // a message in the kernel, no P-ACK yet
    ///
    /// let mut pair = Pair::new(Config::default(), Config::default(), LinkParams::default());
    /// let s = pair.client.conn.open_stream(StreamConfig::default())?;
    /// pair.client.conn.send(pair.now, s, Message::new(vec![0u8; 50_000]))?;
    /// pair.drive_bounded(100_000);
    /// // every byte P-ACKed; the server, which sent only P-ACKs, waits for nothing either
    /// assert!(!pair.client.conn.awaits_peer() && !pair.server.conn.awaits_peer());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn awaits_peer(&self) -> bool {
        self.data_written > self.acked || self.probing.sent.is_some()
    }

    /// The byte rule's P-ACK: now, unless the last one was sent less than the gap ago
    /// (`pack_gap`). A P-ACK held back goes with a later read once the gap has passed (a
    /// read wakes the driver anyway; a timer would wake it once more), by timer only when no
    /// read came within `pack_interval_us`, and at most `pack_max_gap_us` after the last.
    pub(super) fn pack_by_bytes(&mut self, now: Instant) {
        let Some(last) = self.last_pack_at else {
            return self.send_pack(now);
        };
        let gap = pack_gap(
            &self.config,
            now.saturating_duration_since(last),
            self.consumed - self.last_pack_bytes,
        );
        if now >= last + gap {
            return self.send_pack(now);
        }
        let interval = Duration::from_micros(self.config.pack_interval_us);
        let max_gap = Duration::from_micros(self.config.pack_max_gap_us);
        self.pack_due = Some((last + gap).max(now + interval).min(last + max_gap));
    }

    pub(super) fn send_pack(&mut self, now: Instant) {
        self.pack_due = None;
        if !self.pack_needed || self.state != State::Open {
            return;
        }
        self.pack_needed = false;
        self.last_pack_bytes = self.consumed;
        self.last_pack_at = Some(now);
        self.stats.packs_sent += 1;
        Frame::PAck {
            bytes: self.consumed - self.path_in_base(),
            recv_time_us: self.us_since_epoch(now),
        }
        .encode(&mut self.control);
    }

    pub(super) fn on_pack(&mut self, now: Instant, bytes: u64, recv_time_us: u64) {
        // P-ACKs count the bytes of the connection in use
        let bytes = bytes.saturating_add(self.path_out_base());
        if bytes <= self.acked {
            return;
        }
        self.acked = bytes.min(self.written);
        self.release_acked(now);
        let mut covered = None;
        while let Some(&(end, id, enqueued, first, last)) = self.unacked.front() {
            if end > self.acked {
                break;
            }
            self.unacked.pop_front();
            covered = Some(last);
            self.stats.messages_acked += 1;
            self.events.push_back(Event::Acked {
                id,
                times: MessageTimes {
                    enqueued,
                    first_write: Some(first),
                    last_write: Some(last),
                    acked: Some(now),
                },
                peer_recv_time_us: recv_time_us,
            });
        }
        self.controller.on_pack(&PAckSample {
            now,
            bytes: self.acked,
            recv_time_us,
            covered_write_time: covered,
        });
    }
}
