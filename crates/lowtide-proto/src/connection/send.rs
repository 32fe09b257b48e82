//! Send side: staging queued messages into frames for the kernel as the latency controller
//! allows, and what the kernel took (`Written` events, the markers that map bytes to messages).

use std::collections::BTreeMap;
use std::time::Instant;

use bytes::Buf;

use super::acks::MAX_UNACKED_TRACKED;
use super::{Connection, DecisionRecord, Event, MessageId, MessageTimes, State};
use crate::config::Fairness;
use crate::controller::{AppProgress, Decision, TcpState};
use crate::stream::SendStream;
use crate::wire::{DataFrame, FirstChunk, Frame};

/// What a write opportunity has to do ([`Connection::transmit_work`]).
///
/// ```
/// use lowtide_proto::{Config, Connection, Message, Side, StreamConfig, TransmitWork};
/// # let now = std::time::Instant::now();
/// let mut c = Connection::new(Config::default(), Side::Client, now)?;
/// let s = c.open_stream(StreamConfig::default())?;
/// let id = c.send(now, s, Message::new("x"))?;
/// assert_eq!(c.transmit_work(), TransmitWork::Decide); // the hello and a message
/// c.cancel(id);
/// assert_ne!(c.transmit_work(), TransmitWork::Nothing); // the hello is still unwritten
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransmitWork {
    /// Nothing: no data or control frames to send, and the controller decides only about
    /// sending (its decision would change nothing).
    Nothing,
    /// Only control frames, which bypass the controller: the decision cannot stage data.
    ControlOnly,
    /// Data may be staged (or the controller follows the kernel while idle, or decisions are
    /// recorded): a decision on a fresh kernel sample.
    Decide,
}

#[derive(Debug)]
pub(super) struct Marker {
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) id: MessageId,
    pub(super) enqueued: Instant,
    pub(super) first: bool,
    pub(super) last: bool,
}

/// Payloads at most this long are copied into the staging buffer; longer ones are staged by
/// reference (a separate `writev` segment).
const COPY_THRESHOLD: usize = 2048;

impl Connection {
    /// How many bytes a message sent on `stream` at `now` with `importance` may carry so
    /// that its frame fills exactly `mss` bytes: one segment. Goel, Krasic and Walpole,
    /// "Low-Latency Adaptive Streaming over TCP", Section 6.2: applications align their data
    /// with packets by writing MSS-sized packets; over lowtide a message of `mss` bytes takes
    /// its frame header into a second segment and waits for a second opening of the window.
    /// While every write is a whole number of such frames, the kernel's segments stay
    /// aligned with the messages. `None` for a stream we cannot send on or an `mss` that
    /// leaves no payload. (The header's send-time field grows by a byte at 2^21 µs, 2^28 µs
    /// ...: a message sent later than `now` may come out a byte longer at those moments.)
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, Message, Side, StreamConfig, TcpState};
    /// # let now = std::time::Instant::now();
    /// let mut c = Connection::new(Config::default(), Side::Client, now)?;
    /// let s = c.open_stream(StreamConfig::default())?;
    /// let tcp = TcpState { cwnd: 10, mss: 1448, ..TcpState::default() };
    /// c.poll_transmit(now, &tcp); // the stream's STREAM_OPEN
    /// let n = c.staged_len() as usize;
    /// c.handle_written(now, n);
    /// let p = c.one_segment_payload(now, s, 0, 1448).unwrap();
    /// c.send(now, s, Message::new(vec![0u8; p]))?;
    /// c.poll_transmit(now, &tcp);
    /// assert_eq!(c.staged_len(), 1448); // header and payload: one segment
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn one_segment_payload(
        &self,
        now: Instant,
        stream: u64,
        importance: u8,
        mss: u32,
    ) -> Option<usize> {
        let seq = match self.streams.get(&stream) {
            Some(s) if !s.closing => s.next_seq,
            Some(_) => return None,
            None if self.peer_streams.contains(&stream) => 0,
            None => return None,
        };
        let send_time_us = self.us_since_epoch(now);
        let frame = |len: u64| {
            let first = FirstChunk {
                importance,
                send_time_us,
                total_len: len,
            };
            len + Frame::data_header_len(stream, seq, Some(first), 0, len) as u64
        };
        let mss = u64::from(mss);
        // The header holds the payload's length twice: a shorter payload may need shorter
        // varints, so step down until the frame fits, then up while it still does.
        let mut len = mss.saturating_sub(frame(0));
        while len > 0 && frame(len) > mss {
            len -= 1;
        }
        while frame(len + 1) <= mss {
            len += 1;
        }
        let max = self.config.max_message_size.min(self.peer_max_message);
        (len > 0 && frame(len) <= mss).then_some(len.min(max) as usize)
    }

    /// What a write opportunity has to do now, so that a driver can spare the kernel sample
    /// where the decision cannot matter (call [`handle_timeout`](Self::handle_timeout) first:
    /// it may stage a P-ACK or CANCEL).
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, ControllerConfig, Message, Side, StreamConfig};
    /// use lowtide_proto::{TcpState, TransmitWork};
    /// # let now = std::time::Instant::now();
    /// let cfg = Config { controller: ControllerConfig::Unlimited, ..Config::default() };
    /// let mut c = Connection::new(cfg, Side::Client, now)?;
    /// let s = c.open_stream(StreamConfig::default())?;
    /// c.send(now, s, Message::new("frame"))?;
    /// assert_eq!(c.transmit_work(), TransmitWork::Decide);
    /// // Stage and write everything: a wake-up now has nothing to decide.
    /// c.poll_transmit(now, &TcpState::default());
    /// let n: usize = c.transmit_segments().map(|seg| seg.len()).sum();
    /// c.handle_written(now, n);
    /// assert_eq!(c.transmit_work(), TransmitWork::Nothing);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn transmit_work(&self) -> TransmitWork {
        if self.has_queued()
            || self.staged_len > 0
            || !self.small.is_empty()
            || self.probing.wanted
            || self.decisions.is_some()
            || self.controller.watches_idle()
        {
            TransmitWork::Decide
        } else if !self.control.is_empty() {
            TransmitWork::ControlOnly
        } else {
            TransmitWork::Nothing
        }
    }

    /// What the kernel's send buffer takes now, bytes (`None`: unknown). Staging stops there
    /// (at least one MSS, and nothing while bytes the kernel refused are still staged): bytes
    /// staged beyond what the kernel takes wait in user space where a deadline can no longer
    /// withdraw them, a hidden send buffer. The driver sets it before each
    /// [`poll_transmit`](Self::poll_transmit).
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, ControllerConfig, Message, Side, StreamConfig, TcpState};
    /// # let now = std::time::Instant::now();
    /// let cfg = Config { controller: ControllerConfig::Unlimited, ..Config::default() };
    /// let mut c = Connection::new(cfg, Side::Client, now)?;
    /// let s = c.open_stream(StreamConfig::default())?;
    /// c.send(now, s, Message::new(vec![0u8; 100_000]))?;
    /// c.set_kernel_room(Some(8000)); // what the send buffer takes now
    /// c.poll_transmit(now, &TcpState::default());
    /// assert!(c.staged_len() <= 8000 + 1448); // the rest stays queued, still cancellable
    /// assert!(c.queued_bytes() > 90_000);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_kernel_room(&mut self, bytes: Option<u64>) {
        self.kernel_room = bytes;
    }

    /// Stages bytes for the kernel as far as the controller allows and returns its decision.
    /// The bytes are in [`transmit_segments`](Self::transmit_segments).
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, Message, Side, StreamConfig, TcpState};
    /// # let now = std::time::Instant::now();
    /// let mut c = Connection::new(Config::default(), Side::Client, now)?; // MIN_BUF(1, 3)
    /// let s = c.open_stream(StreamConfig::default())?;
    /// c.send(now, s, Message::new(vec![0u8; 100_000]))?;
    /// let tcp = TcpState { cwnd: 10, mss: 1000, ..TcpState::default() };
    /// let d = c.poll_transmit(now, &tcp);
    /// assert_eq!(d.limit, 13_000);
    /// assert!(c.staged_len() <= 13_000 && c.queued_bytes() > 87_000);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn poll_transmit(&mut self, now: Instant, tcp: &TcpState) -> Decision {
        // Bytes still staged now are bytes the kernel refused.
        let refused = self.staged_len;
        self.copy_on_repair(tcp);
        self.handle_timeout(now);
        self.stage_probe(tcp);
        self.flush_control();
        let app = AppProgress {
            written: self.written,
            acked: self.acked,
            staged: self.staged_len,
            queued: self.queued_bytes,
        };
        let mut d = self.controller.decide(tcp, &app, now);
        while let Some(sig) = self.controller.poll_signal() {
            self.events.push_back(Event::Congestion {
                onset: sig.onset,
                queue: sig.queue,
                threshold: sig.threshold,
                rate_estimate: sig.rate_estimate,
            });
        }
        if let Some((cap, rec)) = &mut self.decisions {
            if rec.len() == *cap {
                rec.pop_front();
            }
            rec.push_back(DecisionRecord {
                at_us: now.saturating_duration_since(self.epoch).as_micros() as u64,
                tcp: *tcp,
                app,
                decision: d,
            });
        }
        if self.state == State::Open {
            if d.blocked() {
                if self.has_queued() {
                    self.stats.controller_blocked += 1;
                }
            } else {
                let mss = tcp.mss_or_default();
                let kernel = match self.kernel_room {
                    None => u64::MAX,
                    // What the kernel refused last time goes first; nothing joins it.
                    Some(_) if refused > 0 => 0,
                    Some(r) => r.max(u64::from(mss)),
                };
                let room = self
                    .config
                    .max_batch
                    .saturating_sub(self.staged_len)
                    .min(kernel);
                let reserve = self.config.importance_reserve;
                let held = self.stage_data(d.allowance, room, mss);
                if let (true, Some(r)) = (held, reserve) {
                    // What applies now is the limit without the reserve: block (and wake)
                    // for the less important data waiting, not for the reserve's free room.
                    let app = AppProgress {
                        staged: self.staged_len,
                        queued: self.queued_bytes,
                        ..app
                    };
                    let low = d.limit.saturating_sub(r.bytes(mss));
                    d = crate::controller::decide_for_limit(low, tcp, &app, now);
                }
            }
        }
        self.seal_small();
        self.last_decision = Some(d);
        d
    }

    fn flush_control(&mut self) {
        if self.control.is_empty() {
            return;
        }
        let n = self.control.len() as u64;
        self.small.extend_from_slice(&self.control);
        self.control.clear();
        self.staged_len += n;
    }

    fn seal_small(&mut self) {
        if !self.small.is_empty() {
            self.staged.push_back(self.small.split().freeze());
        }
    }

    /// Stages frames up to the controller's `allowance` and the pass's `room`. The scheduler
    /// works in quanta of `chunk_len(mss)` (the fairness step between streams), but consecutive
    /// quanta of one message that the scheduler would pick anyway go out as one frame, up to
    /// `max_chunk_len`: the byte order on the wire is the same as with one frame per quantum (a
    /// message that arrives later can only preempt at the next staging pass either way), with
    /// one header instead of many.
    ///
    /// A frame is cut to fill the `allowance` exactly. `room` (the batch and the kernel's
    /// free space) only bounds how much one pass stages, so a pass that already staged a frame
    /// ends before the next one that does not fit instead of cutting it: a message cut into
    /// two frames costs the receiver a copy, and with 64 KB messages in 256 KB batches every
    /// fourth message was cut.
    ///
    /// With an importance reserve, a message below its `min_importance` may use the budget
    /// only beyond the reserve's bytes; returns whether the reserve held one back.
    fn stage_data(&mut self, allowance: u64, room: u64, mss: u32) -> bool {
        let reserve = self.config.importance_reserve;
        let reserve_bytes = reserve.map_or(0, |r| r.bytes(mss));
        let mut held = false;
        let mut budget = allowance.min(room);
        let mut room_left = room;
        if budget > 0 && self.sched.pick().is_some() {
            // Headers and small payloads are copied here: one allocation for the whole pass
            // rather than regrowth copies (the buffer's last allocation is usually still
            // shared with bytes the kernel has not taken yet).
            self.small
                .reserve(budget.min(self.config.max_batch) as usize);
        }
        let quantum = (self.config.chunk_len(mss) as u64).min(self.peer_max_chunk) as usize;
        let max_frame = self.config.max_chunk_len.min(self.peer_max_chunk) as usize;
        while let Some(sid) = self.sched.pick() {
            let lead = self.sched.lead(sid) * self.sched.weight(sid).unwrap_or(1.0);
            let s = self
                .streams
                .get_mut(&sid)
                .expect("scheduler lists only live streams");
            let (importance, seq, p) = s.queue.front_mut().expect("active streams have data");
            let total = p.data.len();
            let remaining = total - p.sent;
            let first = (p.sent == 0).then_some(FirstChunk {
                importance,
                send_time_us: p.send_time_us,
                total_len: total as u64,
            });
            // Bytes this stream may send before another one's virtual time is lower.
            let per_byte = match self.config.fairness {
                Fairness::Resource => 1.0,
                Fairness::Quality => p.cost / total.max(1) as f64,
            };
            let fair = lead / per_byte;
            let fair = if fair.is_finite() {
                (fair as usize).max(quantum)
            } else {
                usize::MAX
            };
            let want = remaining.min(fair).min(max_frame);
            let important = reserve.is_none_or(|r| r.covers(importance));
            // The part of the budget this message may use: all of it, or what lies beyond
            // the reserve.
            let usable = if important {
                budget
            } else {
                budget.saturating_sub(reserve_bytes)
            };
            let hdr = Frame::data_header_len(sid, seq, first, p.sent as u64, want as u64) as u64;
            let len = if hdr + want as u64 <= usable {
                want
            } else if room_left < room && hdr + want as u64 > room_left {
                // only the pass's room is short: the frame goes whole in the next pass
                break;
            } else if usable > hdr && (usable - hdr) as usize >= want.min(64) {
                // Fill the budget exactly, but do not cut a message into slivers.
                (usable - hdr) as usize
            } else {
                // Held back by the reserve if the whole budget would have taken a frame.
                held = !important && budget > hdr && (budget - hdr) as usize >= want.min(64);
                break;
            };
            let hdr = Frame::data_header_len(sid, seq, first, p.sent as u64, len as u64) as u64;
            let payload = p.data.slice(p.sent..p.sent + len);
            let start = self.written + self.staged_len;
            let df = DataFrame {
                stream: sid,
                seq,
                offset: p.sent as u64,
                first,
                payload: &payload,
            };
            self.scratch.clear();
            Frame::encode_data_header(&mut self.scratch, &df);
            debug_assert_eq!(self.scratch.len() as u64, hdr);
            self.small.extend_from_slice(&self.scratch);
            if len <= COPY_THRESHOLD {
                self.small.extend_from_slice(&payload);
            } else {
                if !self.small.is_empty() {
                    self.staged.push_back(self.small.split().freeze());
                }
                self.staged.push_back(payload);
            }
            let frame_len = hdr + len as u64;
            if reserve.is_some() && important {
                self.stats.reserve_bytes_used +=
                    frame_len.saturating_sub(budget.saturating_sub(reserve_bytes));
            }
            self.staged_len += frame_len;
            budget -= frame_len;
            room_left -= frame_len;
            p.sent += len;
            let done = p.sent == total;
            let cost_share = p.cost * len as f64 / total.max(1) as f64;
            let (enqueued, deadline) = (p.enqueued, p.deadline);
            let id = MessageId {
                stream: sid,
                seq,
                importance,
            };
            self.markers.push_back(Marker {
                start,
                end: start + frame_len,
                id,
                enqueued,
                first: first.is_some(),
                last: done,
            });
            self.queued_bytes -= len as u64;
            self.stats.chunks_sent += 1;
            if done {
                let p = self
                    .streams
                    .get_mut(&sid)
                    .and_then(|s| s.queue.pop_front())
                    .expect("front exists");
                self.retain_for_resend(id, start + frame_len, p);
                if let Some(d) = deadline {
                    self.deadlines.remove(&(d, id));
                }
            }
            let charge = match self.config.fairness {
                Fairness::Resource => len as f64,
                Fairness::Quality => cost_share,
            };
            self.sched.charge(sid, charge);
            if s_is_empty(&self.streams, sid) {
                self.sched.set_active(sid, false);
                if self.streams[&sid].closing {
                    self.finish_stream(sid);
                    self.flush_control();
                }
            }
        }
        if held {
            self.stats.reserve_held += 1;
        }
        held
    }

    /// The staged bytes, in order, for one `writev`.
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, Message, Side, StreamConfig, TcpState};
    /// # let now = std::time::Instant::now();
    /// let mut c = Connection::new(Config::default(), Side::Client, now)?;
    /// let s = c.open_stream(StreamConfig::default())?;
    /// c.send(now, s, Message::new("payload"))?;
    /// c.poll_transmit(now, &TcpState::default());
    /// // The hello, the stream's announcement and the data frame, ready for one writev.
    /// let bytes: Vec<u8> = c.transmit_segments().flatten().copied().collect();
    /// assert_eq!(bytes.len() as u64, c.staged_len());
    /// assert!(bytes.windows(7).any(|w| w == b"payload"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn transmit_segments(&self) -> impl Iterator<Item = &[u8]> {
        self.staged.iter().map(|b| &b[..])
    }

    /// Number of staged bytes.
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, Side, TcpState};
    /// # let now = std::time::Instant::now();
    /// let mut c = Connection::new(Config::default(), Side::Client, now)?;
    /// assert_eq!(c.staged_len(), 0);
    /// c.poll_transmit(now, &TcpState::default()); // stages the hello
    /// let hello = c.staged_len();
    /// assert!(hello > 0);
    /// c.handle_written(now, 3); // a short write
    /// assert_eq!(c.staged_len(), hello - 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn staged_len(&self) -> u64 {
        self.staged_len
    }

    /// Bytes handed to the kernel so far.
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, Side, TcpState};
    /// # let now = std::time::Instant::now();
    /// let mut c = Connection::new(Config::default(), Side::Client, now)?;
    /// c.poll_transmit(now, &TcpState::default());
    /// let staged = c.staged_len();
    /// c.handle_written(now, staged as usize);
    /// assert_eq!((c.written(), c.staged_len()), (staged, 0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The kernel accepted the first `n` staged bytes at `now`.
    ///
    /// ```
    /// use lowtide_proto::{Config, Connection, Event, Message, Side, StreamConfig, TcpState};
    /// # let now = std::time::Instant::now();
    /// let mut c = Connection::new(Config::default(), Side::Client, now)?;
    /// let s = c.open_stream(StreamConfig::default())?;
    /// let id = c.send(now, s, Message::new("x"))?;
    /// c.poll_transmit(now, &TcpState::default());
    /// c.handle_written(now, c.staged_len() as usize); // the kernel took everything
    /// let written = std::iter::from_fn(|| c.poll_event()).any(|e| matches!(e, Event::Written { id: w, .. } if w == id));
    /// assert!(written);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn handle_written(&mut self, now: Instant, n: usize) {
        let n = (n as u64).min(self.staged_len);
        self.staged_len -= n;
        self.written += n;
        self.note_data_written(now);
        self.stats.bytes_written += n;
        self.stats.write_calls += 1;
        if let Some((_, end, at @ None)) = &mut self.probing.sent {
            if self.written >= *end {
                *at = Some(now);
            }
        }
        let mut left = n as usize;
        while left > 0 {
            let front = self
                .staged
                .front_mut()
                .expect("staged_len counts these bytes");
            if front.len() <= left {
                left -= front.len();
                self.staged.pop_front();
            } else {
                front.advance(left);
                left = 0;
            }
        }
        while let Some(m) = self.markers.front() {
            if m.start >= self.written {
                break;
            }
            if m.first
                && !(m.last && m.end <= self.written)
                && !self.first_writes.contains_key(&m.id)
            {
                self.first_writes.insert(m.id, now);
            }
            if m.end > self.written {
                break;
            }
            let m = self.markers.pop_front().expect("front exists");
            if m.last {
                let first = if m.first {
                    now
                } else {
                    self.first_writes.remove(&m.id).unwrap_or(now)
                };
                self.stats.messages_written += 1;
                if self.config.written_events {
                    self.events.push_back(Event::Written {
                        id: m.id,
                        times: MessageTimes {
                            enqueued: m.enqueued,
                            first_write: Some(first),
                            last_write: Some(now),
                            acked: None,
                        },
                    });
                }
                if self.config.ack_events {
                    if self.unacked.len() == MAX_UNACKED_TRACKED {
                        // a peer that never acknowledges must not grow our memory
                        self.unacked.pop_front();
                        self.stats.ack_tracking_dropped += 1;
                    }
                    self.unacked
                        .push_back((m.end, m.id, m.enqueued, first, now));
                }
            }
        }
    }
}

fn s_is_empty(streams: &BTreeMap<u64, SendStream>, sid: u64) -> bool {
    streams.get(&sid).is_none_or(|s| s.queue.is_empty())
}
