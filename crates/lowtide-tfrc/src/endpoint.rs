//! One TFRC session end, sans IO: a sender half (send buffer, rate control) and a receiver
//! half (loss history, feedback, reassembly), so both directions carry messages.
//!
//! # Call order (the driver's loop)
//! 1. [`Endpoint::new`]; the application queues messages with [`send`](Endpoint::send).
//! 2. Each datagram read from the socket goes to
//!    [`handle_datagram`](Endpoint::handle_datagram) (errors are counted and the datagram is
//!    dropped; the session goes on).
//! 3. Call [`poll_transmit`](Endpoint::poll_transmit) until it returns `None`, sending each
//!    datagram as one UDP packet.
//! 4. Sleep until [`poll_timeout`](Endpoint::poll_timeout) (or the next datagram), call
//!    [`handle_timeout`](Endpoint::handle_timeout), and go to 3.
//! 5. Drain [`poll_event`](Endpoint::poll_event) and [`poll_message`](Endpoint::poll_message).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use lowtide_proto::controller::{CongestionSignal, DbatConfig, ProbeResult};
use lowtide_proto::ConfigError;
use serde::{Deserialize, Serialize};

use crate::buffer::{
    BufferConfig, BufferStats, DropReason, Message, MessageId, SendBuffer, SendError,
};
use crate::loss::SeqJump;
use crate::packet::{self, DecodeError, Packet, MAX_DATA_HEADER};
use crate::reassembly::{Reassembly, ReassemblyStats, Received};
use crate::receiver::{FirstLossSeed, Receiver};
use crate::sender::{FeedbackError, InitialWindow, RateControl};

/// A session's configuration, typed and checked ([`TfrcConfig::validate`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TfrcConfig {
    /// `s`: the datagram size for data, bytes (headers included).
    pub segment_size: u32,
    /// The send buffer: fixed or DBAT.
    pub buffer: BufferConfig,
    /// Largest message accepted, either direction.
    pub max_message_size: u64,
    /// Receive memory: partial and unread messages.
    pub max_reassembly_bytes: u64,
    /// Send a packet-pair probe before the first data packet; an unanswered pair goes
    /// again after [`PROBE_TIMEOUT`], at most [`PROBE_TRIES`] pairs.
    pub probe_at_start: bool,
    /// TFRC-SP (Floyd, Kohler, RFC 4828) instead of standard TFRC: the equation gives a
    /// small-packet flow a TCP flow's bytes, not its packets (`crate::small_packets`). Both
    /// ends must agree: the receiver applies the variant's loss-interval rules.
    pub small_packets: bool,
    /// The rate the first loss interval is seeded for: half the receive rate (the default)
    /// or the receive rate, as RFC 5348 §6.3.1 says (`crate::receiver`). A receiver's choice.
    pub first_loss_seed: FirstLossSeed,
    /// The initial window `W_init`: RFC 5348's `"rfc3390"` (the default) or `"rfc6928"`,
    /// TCP's ten segments (`crate::sender`).
    pub initial_window: InitialWindow,
    /// Data packets per burst at the average rate (1, the default: evenly paced, as RFC 5348
    /// §4.6 schedules them; more is an experiment, `crate::sender`).
    pub send_burst: u32,
}

impl Default for TfrcConfig {
    fn default() -> Self {
        Self {
            segment_size: 1200,
            buffer: BufferConfig::default(),
            max_message_size: 16 << 20,
            max_reassembly_bytes: 64 << 20,
            probe_at_start: false,
            small_packets: false,
            first_loss_seed: FirstLossSeed::default(),
            initial_window: InitialWindow::default(),
            send_burst: 1,
        }
    }
}

impl TfrcConfig {
    /// A DBAT-tuned session with the given DBAT parameters and the RFC's initial window
    /// (`min(4s, max(2s, 4380))` bytes, in segments).
    pub fn dbat(mut dbat: DbatConfig) -> Self {
        let s = Self::default().segment_size;
        dbat.initial_window = (4 * s).min((2 * s).max(4380)).div_ceil(s);
        Self {
            buffer: BufferConfig::Dbat(dbat),
            probe_at_start: true,
            ..Self::default()
        }
    }

    /// Checks every field; errors name the field, the value and the allowed range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(64 + MAX_DATA_HEADER as u32..=65_507).contains(&self.segment_size) {
            return Err(ConfigError::new(
                "tfrc.segment_size",
                self.segment_size,
                "145..=65507",
            ));
        }
        if !(1..=1 << 32).contains(&self.max_message_size) {
            return Err(ConfigError::new(
                "tfrc.max_message_size",
                self.max_message_size,
                "1..=4294967296",
            ));
        }
        if self.max_reassembly_bytes < self.max_message_size {
            return Err(ConfigError::new(
                "tfrc.max_reassembly_bytes",
                self.max_reassembly_bytes,
                "at least max_message_size",
            ));
        }
        if !(1..=MAX_SEND_BURST).contains(&self.send_burst) {
            return Err(ConfigError::new(
                "tfrc.send_burst",
                self.send_burst,
                "1..=64",
            ));
        }
        self.buffer.validate()
    }
}

/// Largest [`TfrcConfig::send_burst`].
pub const MAX_SEND_BURST: u32 = 64;

/// What happened, for the application.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Event {
    /// The packet-pair probe finished.
    Probed(ProbeResult),
    /// DBAT's smoothed send queue crossed its threshold, or cleared.
    Congestion(CongestionSignal),
    /// A message of ours will not be sent.
    Dropped {
        /// Message.
        id: MessageId,
        /// Why.
        reason: DropReason,
    },
    /// The session closed.
    Closed {
        /// By the peer's CLOSE.
        by_peer: bool,
        /// Close code.
        code: u64,
    },
}

/// Why a datagram was refused. The endpoint counts it and goes on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum TfrcError {
    /// It could not be parsed.
    #[error("malformed datagram: {0}")]
    Decode(DecodeError),
    /// A feedback packet that cannot be true.
    #[error("bad feedback: {0}")]
    Feedback(FeedbackError),
    /// A data packet's sequence number jumped too far.
    #[error("data sequence number {} jumps more than allowed past {}", .0.seq, .0.highest)]
    SeqJump(SeqJump),
}

// The messages above show the inner error, so `source()` does not return it again (a printer
// of the whole chain would say it twice): `From` by hand instead of `#[from]`.
impl From<DecodeError> for TfrcError {
    fn from(e: DecodeError) -> Self {
        TfrcError::Decode(e)
    }
}

impl From<FeedbackError> for TfrcError {
    fn from(e: FeedbackError) -> Self {
        TfrcError::Feedback(e)
    }
}

/// Counters, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Data packets sent.
    pub data_sent: u64,
    /// Data bytes sent (datagram sizes).
    pub data_bytes_sent: u64,
    /// Data packets received (duplicates and late ones included).
    pub data_received: u64,
    /// Data packets that arrived late or twice (ignored).
    pub data_late: u64,
    /// Data packets the receiver declared lost.
    pub data_lost: u64,
    /// Loss events the receiver counted.
    pub loss_events: u64,
    /// Feedback packets sent.
    pub feedback_sent: u64,
    /// Feedback packets accepted.
    pub feedback_received: u64,
    /// Datagrams refused: malformed.
    pub refused_malformed: u64,
    /// Datagrams refused: impossible feedback.
    pub refused_feedback: u64,
    /// Datagrams refused: sequence jumps.
    pub refused_seq_jump: u64,
    /// No-feedback timer expiries.
    pub nofeedback_expiries: u64,
    /// Probe packets sent.
    pub probes_sent: u64,
    /// Send buffer counters.
    pub buffer: BufferStats,
    /// Receive counters.
    pub reassembly: ReassemblyStats,
}

/// An unanswered packet pair is sent again after this long (one of the pair lost at a full
/// queue leaves the peer nothing to time).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// Packet pairs sent at most, the first included.
pub const PROBE_TRIES: u64 = 3;

#[derive(Debug, Default)]
struct Probing {
    /// Probe packets still to send now (0, 1 or 2).
    to_send: u8,
    /// The pair being sent; pair `k` has id `k`.
    id: u64,
    /// When the second packet of each pair sent left, by id; cleared by the first report.
    sent_at: Vec<Instant>,
    answered: bool,
    /// The peer's first probe packet: id and arrival.
    first_arrival: Option<(u64, Instant)>,
}

impl Probing {
    /// When the last pair goes unanswered: a retry is due then, if any is left.
    fn retry_due(&self) -> Option<Instant> {
        let tries = self.sent_at.len() as u64;
        let last = self.sent_at.last()?;
        (!self.answered && self.to_send == 0 && tries < PROBE_TRIES).then(|| *last + PROBE_TIMEOUT)
    }
}

/// One end of a TFRC session.
#[derive(Debug)]
pub struct Endpoint {
    cfg: TfrcConfig,
    epoch: Instant,
    rc: RateControl,
    buffer: SendBuffer,
    receiver: Receiver,
    reasm: Reassembly,
    probing: Probing,
    control: VecDeque<Vec<u8>>,
    next_seq: u64,
    sent_any: bool,
    events: VecDeque<Event>,
    stats: Stats,
    closed: bool,
    next_deadline: Option<Instant>,
}

/// Events kept before the oldest are dropped.
const MAX_EVENTS: usize = 1 << 16;

impl Endpoint {
    /// A session end started at `now` (its wire clock's epoch).
    pub fn new(cfg: TfrcConfig, now: Instant) -> Result<Self, ConfigError> {
        cfg.validate()?;
        Ok(Self {
            rc: RateControl::new(cfg.segment_size, now)
                .with_small_packets(cfg.small_packets)
                .with_initial_window(cfg.initial_window)
                .with_send_burst(cfg.send_burst),
            buffer: SendBuffer::new(cfg.buffer)?,
            receiver: Receiver::new(cfg.segment_size, cfg.small_packets, cfg.first_loss_seed),
            reasm: Reassembly::new(cfg.max_reassembly_bytes),
            probing: Probing {
                to_send: if cfg.probe_at_start { 2 } else { 0 },
                ..Probing::default()
            },
            control: VecDeque::new(),
            next_seq: 0,
            sent_any: false,
            events: VecDeque::new(),
            stats: Stats::default(),
            closed: false,
            next_deadline: None,
            epoch: now,
            cfg,
        })
    }

    fn us(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.epoch).as_micros() as u64
    }

    fn push_event(&mut self, e: Event) {
        if self.events.len() == MAX_EVENTS {
            self.events.pop_front();
        }
        self.events.push_back(e);
    }

    /// The configuration.
    pub fn config(&self) -> &TfrcConfig {
        &self.cfg
    }
    /// The largest message that leaves in one data packet when it starts one. Small messages
    /// share packets: each packet is filled up to the segment size with what is queued when
    /// it leaves ([`SendBuffer::pack`]), so the mean packet size, and with it the rate in bytes the
    /// equation allows (`crate::sender`), stays near the segment size while the queue holds
    /// a packet's worth.
    pub fn single_packet_payload(&self) -> usize {
        self.cfg.segment_size as usize - MAX_DATA_HEADER
    }
    /// The rate control (allowed rate, RTT, `p`, limits).
    pub fn rate_control(&self) -> &RateControl {
        &self.rc
    }
    /// The send buffer.
    pub fn buffer(&self) -> &SendBuffer {
        &self.buffer
    }
    /// The receive half.
    pub fn receiver(&self) -> &Receiver {
        &self.receiver
    }
    /// Counters.
    pub fn stats(&self) -> Stats {
        let mut s = self.stats;
        s.buffer = self.buffer.stats;
        s.reassembly = self.reasm.stats;
        s.data_lost = self.receiver.history().lost_packets;
        s.loss_events = self.receiver.history().loss_events;
        s
    }
    /// Whether the session is closed.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// The stream's bit rate changed, bytes per second (DBAT's slow-start sizing).
    pub fn set_stream_rate(&mut self, bytes_per_sec: u64) {
        if let Some(d) = self.buffer.dbat_mut() {
            d.set_stream_rate(bytes_per_sec);
        }
    }

    /// Queues a message.
    pub fn send(&mut self, now: Instant, msg: Message) -> Result<MessageId, SendError> {
        if self.closed {
            return Err(SendError::Closed);
        }
        let size = msg.data.len() as u64;
        if size > self.cfg.max_message_size {
            return Err(SendError::TooLarge {
                size,
                max: self.cfg.max_message_size,
            });
        }
        if let Some(d) = msg.deadline {
            self.next_deadline = Some(self.next_deadline.map_or(d, |n| n.min(d)));
        }
        self.tune(now);
        let r = self.buffer.push(msg, self.us(now));
        self.collect_drops();
        r
    }

    /// Withdraws a message that has not started; `false` if too late or unknown.
    pub fn cancel(&mut self, id: MessageId) -> bool {
        let done = self.buffer.cancel(id);
        self.collect_drops();
        done
    }

    /// Closes the session: a CLOSE datagram is queued (sent three times: it may be lost).
    pub fn close(&mut self, code: u64) {
        if self.closed {
            return;
        }
        self.closed = true;
        for _ in 0..3 {
            let mut out = Vec::new();
            Packet::Close { code }.encode(&mut out);
            self.control.push_back(out);
        }
        self.push_event(Event::Closed {
            by_peer: false,
            code,
        });
    }

    fn collect_drops(&mut self) {
        for (id, reason) in self.buffer.take_dropped() {
            self.push_event(Event::Dropped { id, reason });
        }
    }

    fn tune(&mut self, now: Instant) {
        let rate = self.rc.x_recv().max(0.0) as u64;
        let ramping = self.rc.in_slow_start();
        self.buffer
            .tune(now, self.rc.rtt(), rate, self.cfg.segment_size, ramping);
        if let Some(d) = self.buffer.dbat_mut() {
            let mut signals = Vec::new();
            while let Some(s) = d.poll_signal() {
                signals.push(s);
            }
            for s in signals {
                self.push_event(Event::Congestion(s));
            }
        }
    }

    /// A datagram arrived at `now`.
    pub fn handle_datagram(&mut self, now: Instant, buf: &[u8]) -> Result<(), TfrcError> {
        let packet = match Packet::decode(buf, self.cfg.max_message_size) {
            Ok(p) => p,
            Err(e) => {
                self.stats.refused_malformed += 1;
                return Err(e.into());
            }
        };
        match packet {
            Packet::Data(h, pieces) => {
                self.stats.data_received += 1;
                let arrival = match self.receiver.on_data(now, &h, buf.len()) {
                    Ok(a) => a,
                    Err(j) => {
                        self.stats.refused_seq_jump += 1;
                        return Err(TfrcError::SeqJump(j));
                    }
                };
                if arrival.late {
                    self.stats.data_late += 1;
                    return Ok(());
                }
                for piece in pieces {
                    self.reasm.on_piece(now, h.seq, &piece);
                }
                self.reasm
                    .drop_incomplete_below(self.receiver.history().classified_below());
            }
            Packet::Feedback(fb) => {
                let now_us = self.us(now);
                if let Err(e) = self.rc.on_feedback(now, now_us, &fb) {
                    self.stats.refused_feedback += 1;
                    return Err(e.into());
                }
                self.stats.feedback_received += 1;
                self.tune(now);
            }
            Packet::Probe { id, index, .. } => match (index, self.probing.first_arrival) {
                (0, _) => self.probing.first_arrival = Some((id, now)),
                (_, Some((first, t0))) if first == id => {
                    self.probing.first_arrival = None;
                    let mut out = Vec::new();
                    Packet::ProbeReport {
                        id,
                        dispersion_us: now.saturating_duration_since(t0).as_micros() as u64,
                        second_len: buf.len() as u64,
                    }
                    .encode(&mut out);
                    self.control.push_back(out);
                }
                _ => {}
            },
            Packet::ProbeReport {
                id,
                dispersion_us,
                second_len,
            } => {
                // (a report for any pair of ours: a late answer to an earlier try counts)
                let sent = usize::try_from(id)
                    .ok()
                    .and_then(|i| self.probing.sent_at.get(i).copied())
                    .filter(|_| !self.probing.answered);
                if let Some(sent) = sent {
                    self.probing.answered = true;
                    let dispersion = Duration::from_micros(dispersion_us);
                    let rtt = now
                        .saturating_duration_since(sent)
                        .saturating_sub(dispersion);
                    let result = ProbeResult::from_dispersion(
                        rtt,
                        dispersion,
                        second_len as u32,
                        Duration::from_micros(1),
                    );
                    self.rc.on_handshake_rtt(result.rtt);
                    if let Some(d) = self.buffer.dbat_mut() {
                        d.on_probe(result);
                    }
                    self.push_event(Event::Probed(result));
                }
            }
            Packet::Close { code } => {
                if !self.closed {
                    self.closed = true;
                    self.push_event(Event::Closed {
                        by_peer: true,
                        code,
                    });
                }
            }
        }
        Ok(())
    }

    /// The next datagram to send now, if any: control packets first (feedback, probe
    /// reports, close), then the probe pair, then data as the rate allows.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Vec<u8>> {
        if let Some(fb) = self.receiver.poll_feedback(now) {
            self.stats.feedback_sent += 1;
            let mut out = Vec::new();
            Packet::Feedback(fb).encode(&mut out);
            return Some(out);
        }
        if let Some(p) = self.control.pop_front() {
            return Some(p);
        }
        if self.closed {
            return None;
        }
        if self.probing.to_send > 0 {
            let index = 2 - self.probing.to_send;
            self.probing.to_send -= 1;
            let mut out = Vec::new();
            Packet::probe_of_len(self.probing.id, index, self.cfg.segment_size as usize)
                .encode(&mut out);
            if index == 1 {
                self.probing.sent_at.push(now);
            }
            self.stats.probes_sent += 1;
            return Some(out);
        }
        if self.next_deadline.is_some_and(|d| d <= now) {
            self.next_deadline = self.buffer.expire(now);
            self.collect_drops();
        }
        if self.buffer.is_empty() {
            return None;
        }
        if self.rc.next_send_time(now) > now {
            self.rc.note_waiting(now);
            return None;
        }
        let h = packet::DataHeader {
            seq: self.next_seq,
            timestamp_us: self.us(now).max(1),
            rtt_us: self.rc.rtt().map_or(0, |r| r.as_micros() as u64),
        };
        let segment = self.cfg.segment_size as usize;
        let mut out = Vec::with_capacity(segment);
        packet::encode_data_header(&mut out, &h);
        if self.buffer.pack(&mut out, segment) == 0 {
            return None;
        }
        self.next_seq += 1;
        self.sent_any = true;
        self.rc.on_sent(now, out.len(), h.timestamp_us);
        self.stats.data_sent += 1;
        self.stats.data_bytes_sent += out.len() as u64;
        self.tune(now);
        Some(out)
    }

    /// The earliest time [`handle_timeout`](Self::handle_timeout) or
    /// [`poll_transmit`](Self::poll_transmit) has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let send =
            (!self.buffer.is_empty() && !self.closed).then(|| self.rc.next_send_time(self.epoch));
        let nofeedback = (self.sent_any && !self.closed).then(|| self.rc.nofeedback_deadline());
        [
            send,
            nofeedback,
            self.receiver.poll_timeout(),
            self.next_deadline,
            self.probing.retry_due().filter(|_| !self.closed),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Runs the timers due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.probing.retry_due().is_some_and(|t| t <= now) {
            self.probing.id += 1;
            self.probing.to_send = 2;
        }
        if self.sent_any && !self.closed && self.rc.nofeedback_deadline() <= now {
            self.stats.nofeedback_expiries += 1;
            self.rc.on_nofeedback_timeout(now);
        }
        if self.next_deadline.is_some_and(|d| d <= now) {
            self.next_deadline = self.buffer.expire(now);
            self.collect_drops();
        }
        self.tune(now);
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The next complete message from the peer.
    pub fn poll_message(&mut self) -> Option<Received> {
        self.reasm.pop()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sender::FeedbackError;
    use proptest::prelude::*;

    #[test]
    fn config_reads_from_toml() {
        let c: TfrcConfig = toml::from_str("buffer = { fixed = { bytes = 16384 } }").unwrap();
        assert_eq!(c.buffer, BufferConfig::Fixed { bytes: 16384 });
        let c: TfrcConfig = toml::from_str(
            "segment_size = 1000\nprobe_at_start = true\nbuffer = { dbat = { bit_rate_kbps = 640 } }",
        )
        .unwrap();
        assert!(c.probe_at_start && c.segment_size == 1000);
        assert!(matches!(c.buffer, BufferConfig::Dbat(d) if d.bit_rate_kbps == 640));
        c.validate().unwrap();
        assert!(toml::from_str::<TfrcConfig>("buffer = { fixed = { size = 1 } }").is_err());
    }

    #[test]
    fn config_is_checked_with_field_names() {
        let e = Endpoint::new(
            TfrcConfig {
                segment_size: 10,
                ..TfrcConfig::default()
            },
            Instant::now(),
        )
        .unwrap_err();
        assert_eq!(e.field, "tfrc.segment_size");
        let e = Endpoint::new(
            TfrcConfig {
                buffer: BufferConfig::Fixed { bytes: 0 },
                ..TfrcConfig::default()
            },
            Instant::now(),
        )
        .unwrap_err();
        assert_eq!(e.field, "buffer.fixed.bytes");
    }

    /// A valid data packet of message `msg` (one fragment).
    fn data(seq: u64, msg: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        packet::encode_data(
            &mut out,
            &packet::DataHeader {
                seq,
                timestamp_us: 1 + seq,
                rtt_us: 100_000,
            },
            &[packet::Piece {
                msg,
                importance: 0,
                msg_time_us: 0,
                total_len: payload.len() as u64,
                offset: 0,
                frag_index: 0,
                frag_count: 1,
                payload,
            }],
        );
        out
    }

    /// A packet pair with one packet lost at a full queue leaves the peer nothing to time
    /// (the lab's quick runs: no answer in any of three, so TFRC sent one packet per second
    /// until its first report). The pair goes again after `PROBE_TIMEOUT`, at most
    /// `PROBE_TRIES` pairs in all; a late answer to an earlier pair counts, once.
    #[test]
    fn an_unanswered_probe_is_sent_again() {
        let t0 = Instant::now();
        let cfg = TfrcConfig {
            probe_at_start: true,
            ..TfrcConfig::default()
        };
        let mut a = Endpoint::new(cfg, t0).unwrap();
        let mut b = Endpoint::new(TfrcConfig::default(), t0).unwrap();
        let pair = |a: &mut Endpoint, t: Instant| {
            let p: Vec<_> = std::iter::from_fn(|| a.poll_transmit(t)).collect();
            assert_eq!(p.len(), 2);
            p
        };
        let first = pair(&mut a, t0);
        // the first pair's second packet is lost: no report
        b.handle_datagram(t0, &first[0]).unwrap();
        assert!(b.poll_transmit(t0).is_none());
        assert_eq!(a.poll_timeout(), Some(t0 + PROBE_TIMEOUT));
        let t1 = t0 + PROBE_TIMEOUT;
        a.handle_timeout(t1);
        let second = pair(&mut a, t1);
        let arrive = t1 + Duration::from_millis(300);
        b.handle_datagram(arrive, &second[0]).unwrap();
        b.handle_datagram(arrive + Duration::from_millis(20), &second[1])
            .unwrap();
        let report = b.poll_transmit(arrive).unwrap();
        a.handle_datagram(t1 + Duration::from_millis(620), &report)
            .unwrap();
        let probed: Vec<_> = std::iter::from_fn(|| a.poll_event())
            .filter_map(|e| match e {
                Event::Probed(r) => Some(r),
                _ => None,
            })
            .collect();
        assert_eq!(probed.len(), 1);
        assert_eq!(probed[0].rtt, Duration::from_millis(600));
        assert_eq!(probed[0].bandwidth, Some(60_000));
        // answered: no further pair; a repeated report is ignored
        a.handle_datagram(t1 + Duration::from_millis(700), &report)
            .unwrap();
        assert!(a.poll_event().is_none());
        assert_eq!(a.poll_timeout(), None);
        assert_eq!(a.stats().probes_sent, 4);

        // never answered: PROBE_TRIES pairs, then none
        let mut c = Endpoint::new(cfg, t0).unwrap();
        let mut t = t0;
        pair(&mut c, t);
        for _ in 1..PROBE_TRIES {
            assert_eq!(c.poll_timeout(), Some(t + PROBE_TIMEOUT));
            t += PROBE_TIMEOUT;
            c.handle_timeout(t);
            pair(&mut c, t);
        }
        c.handle_timeout(t + PROBE_TIMEOUT);
        assert!(c.poll_transmit(t + PROBE_TIMEOUT).is_none());
        assert_eq!(c.poll_timeout(), None);
        assert_eq!(c.stats().probes_sent, 2 * PROBE_TRIES);
    }

    #[test]
    fn bad_feedback_is_a_named_error_and_counted() {
        let t0 = Instant::now();
        let mut ep = Endpoint::new(TfrcConfig::default(), t0).unwrap();
        ep.send(t0, Message::new(vec![0; 100])).unwrap();
        assert!(ep.poll_transmit(t0).is_some());
        let report = |echo_us, delay_us, x_recv| {
            let mut out = Vec::new();
            Packet::Feedback(packet::Feedback {
                echo_us,
                delay_us,
                x_recv,
                p: 0.0,
                loss_events: 0,
            })
            .encode(&mut out);
            out
        };
        let t = t0 + Duration::from_millis(100);
        // from the future: echoes a timestamp we never sent
        let e = ep
            .handle_datagram(t, &report(10_000_000, 0, 1000))
            .unwrap_err();
        assert!(
            matches!(e, TfrcError::Feedback(FeedbackError::FromTheFuture { .. })),
            "{e}"
        );
        assert!(e.to_string().contains("from the future"), "{e}");
        // a delay longer than the time since the echoed packet
        let e = ep
            .handle_datagram(t, &report(1, 5_000_000, 1000))
            .unwrap_err();
        assert!(
            matches!(e, TfrcError::Feedback(FeedbackError::DelayTooLong { .. })),
            "{e}"
        );
        // an absurd receive rate (above 100 Gbit/s)
        let e = ep
            .handle_datagram(t, &report(1, 0, packet::MAX_REPORTED_RATE + 1))
            .unwrap_err();
        assert!(e.to_string().contains("feedback.x_recv"), "{e}");
        let st = ep.stats();
        assert_eq!((st.refused_feedback, st.refused_malformed), (2, 1));
        assert_eq!(
            ep.rate_control().rate(),
            1200.0,
            "nothing refused changed the rate"
        );
    }

    /// Small messages share full datagrams; one lost datagram loses exactly the messages
    /// with a piece in it (each partial one counted at the receiver), and every other
    /// message is delivered once, intact.
    #[test]
    fn packed_datagrams_lose_exactly_their_pieces() {
        let t0 = Instant::now();
        let cfg = TfrcConfig {
            buffer: BufferConfig::Fixed { bytes: 1 << 20 },
            ..TfrcConfig::default()
        };
        let (mut a, mut b) = (
            Endpoint::new(cfg, t0).unwrap(),
            Endpoint::new(cfg, t0).unwrap(),
        );
        let sizes = [400usize, 600, 1600, 400, 1600, 500, 400, 1600, 600, 400];
        let messages: Vec<Vec<u8>> = (0..40)
            .map(|i| {
                let mut m = vec![i as u8; sizes[i % sizes.len()]];
                m[0] = i as u8;
                m
            })
            .collect();
        for m in &messages {
            a.send(t0, Message::new(m.clone())).unwrap();
        }
        const LOST_SEQ: u64 = 4;
        let mut in_packet: Vec<Vec<(u64, u64)>> = Vec::new(); // (msg, frag_count) per seq
        let mut data_sizes = Vec::new();
        let mut delivered = Vec::new();
        for step in 0..3000u32 {
            let now = t0 + Duration::from_millis(10) * step;
            a.handle_timeout(now);
            b.handle_timeout(now);
            while let Some(d) = a.poll_transmit(now) {
                if let Ok(Packet::Data(h, pieces)) = Packet::decode(&d, 1 << 20) {
                    assert_eq!(h.seq as usize, in_packet.len());
                    in_packet.push(pieces.map(|p| (p.msg, p.frag_count)).collect());
                    data_sizes.push(d.len());
                    if h.seq == LOST_SEQ {
                        continue;
                    }
                }
                b.handle_datagram(now, &d).unwrap();
            }
            while let Some(d) = b.poll_transmit(now) {
                a.handle_datagram(now, &d).unwrap();
            }
            while let Some(m) = b.poll_message() {
                delivered.push(m);
            }
        }
        assert!(a.buffer().is_empty());
        // full datagrams while the queue held enough (all but the last)
        let (_, full) = data_sizes.split_last().unwrap();
        let mean = full.iter().sum::<usize>() as f64 / full.len() as f64;
        assert!(mean > 0.97 * 1200.0, "mean {mean:.0} B: {data_sizes:?}");
        assert!(data_sizes.iter().all(|&s| s <= 1200));
        let total: usize = messages.iter().map(Vec::len).sum();
        assert!(data_sizes.len() <= total.div_ceil(1100), "{data_sizes:?}");
        // the lost datagram's messages, and no other, are missing; none twice or altered
        let lost: Vec<u64> = in_packet[LOST_SEQ as usize].iter().map(|p| p.0).collect();
        assert!(
            lost.len() >= 2,
            "the lost datagram carried several pieces: {lost:?}"
        );
        let got: Vec<u64> = delivered.iter().map(|r| r.msg).collect();
        let expect: Vec<u64> = (0..40).filter(|m| !lost.contains(m)).collect();
        let mut sorted = got.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, expect);
        for r in &delivered {
            assert_eq!(r.data, messages[r.msg as usize]);
        }
        // the partial ones (with a piece in another datagram) are counted as lost fragments
        let partial = in_packet[LOST_SEQ as usize]
            .iter()
            .filter(|p| p.1 > 1)
            .count() as u64;
        let st = b.stats();
        assert!(partial >= 1);
        assert_eq!(st.reassembly.lost_fragment, partial);
        assert_eq!(st.reassembly.delivered, expect.len() as u64);
        assert_eq!((st.data_lost, st.reassembly.inconsistent), (1, 0));
    }

    proptest::proptest! {
        /// Garbage and mutated packets: never a panic, every refusal counted, memory bounded.
        #[test]
        fn garbage_datagrams_are_refused_and_counted(
            datagrams in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::collection::vec(proptest::num::u8::ANY, 0..64),
                    (0..1000u64, 0..5u64, 0..40usize, proptest::num::u8::ANY).prop_map(
                        |(seq, msg, cut, byte)| {
                            let mut d = data(seq, msg, &[7; 40]);
                            let at = cut % d.len();
                            d[at] = byte;
                            d
                        }
                    ),
                ],
                1..100,
            )
        ) {
            let t0 = Instant::now();
            let cfg = TfrcConfig {
                max_message_size: 1000,
                max_reassembly_bytes: 4000,
                ..TfrcConfig::default()
            };
            let mut ep = Endpoint::new(cfg, t0).unwrap();
            let mut refused = 0u64;
            for (i, d) in datagrams.iter().enumerate() {
                let now = t0 + Duration::from_millis(i as u64);
                if ep.handle_datagram(now, d).is_err() {
                    refused += 1;
                }
                while ep.poll_transmit(now).is_some() {}
                while ep.poll_message().is_some() {}
                prop_assert!(ep.reasm.memory() <= 4000);
            }
            let st = ep.stats();
            prop_assert_eq!(refused, st.refused_malformed + st.refused_feedback + st.refused_seq_jump);
        }
    }
}
