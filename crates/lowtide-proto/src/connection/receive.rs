//! Receive side: bytes read from the socket parsed into frames (copied, or in place in the
//! driver's read buffer), the peer's handshake, and frames dispatched to reassembly.

use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};

use super::{Connection, Event, State};
use crate::error::ProtocolError;
use crate::reassembly::{PeerCancelled, Received};
use crate::wire::{
    Frame, FrameType, Hello, HelloOption, MAX_CLOSE_REASON, MAX_HEADER_LEN, MAX_PROBE_PAD,
};

impl Connection {
    /// Bytes of whole messages waiting for [`poll_message`](Self::poll_message), as charged to
    /// the receive budget (a message kept as a slice of a larger read may be charged more than
    /// its length). A driver stops reading ahead of the application when this grows.
    ///
    /// ```
    /// # use lowtide_proto::{Config, Connection, Message, Side, StreamConfig, TcpState};
    /// # let now = std::time::Instant::now();
    /// # let mut client = Connection::new(Config::default(), Side::Client, now)?;
    /// let mut server = Connection::new(Config::default(), Side::Server, now)?;
    /// # let s = client.open_stream(StreamConfig::default())?;
    /// client.send(now, s, Message::new(vec![7u8; 5000]))?;
    /// # client.poll_transmit(now, &TcpState::default());
    /// let wire: Vec<u8> = client.transmit_segments().flatten().copied().collect();
    /// server.handle_bytes(now, &wire[..wire.len() - 1])?;
    /// assert_eq!(server.ready_bytes(), 0); // the message is not whole yet
    /// server.handle_bytes(now, &wire[wire.len() - 1..])?;
    /// assert!(server.ready_bytes() >= 5000);
    /// server.poll_message().expect("a message");
    /// assert_eq!(server.ready_bytes(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn ready_bytes(&self) -> u64 {
        self.reasm.delivered_bytes
    }

    /// Memory held for the receive side: unparsed bytes, partial and unread messages.
    ///
    /// ```
    /// # use lowtide_proto::{Config, Connection, Message, Side, StreamConfig, TcpState};
    /// # let now = std::time::Instant::now();
    /// # let mut client = Connection::new(Config::default(), Side::Client, now)?;
    /// let mut server = Connection::new(Config::default(), Side::Server, now)?;
    /// # let s = client.open_stream(StreamConfig::default())?;
    /// client.send(now, s, Message::new(vec![7u8; 5000]))?;
    /// # client.poll_transmit(now, &TcpState::default());
    /// let wire: Vec<u8> = client.transmit_segments().flatten().copied().collect();
    /// server.handle_bytes(now, &wire)?;
    /// assert!(server.recv_memory() >= 5000); // a whole message, not taken yet
    /// server.poll_message().expect("a message");
    /// assert_eq!(server.recv_memory(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn recv_memory(&self) -> u64 {
        self.inbuf.len() as u64 + self.reasm.partial_bytes() + self.reasm.delivered_bytes
    }

    /// How many bytes the driver may read from the socket now without exceeding
    /// `max_reassembly_bytes`. Zero means: wait until the application reads messages.
    ///
    /// Half of what is left: a read handed over as `Bytes` ([`handle_read`](Self::handle_read))
    /// may cost twice its length while a message delivered as a slice of it keeps it alive
    /// (the read itself, plus the bytes copied out of it into other messages).
    ///
    /// ```
    /// # use lowtide_proto::{Config, Connection, Message, Side, StreamConfig, TcpState};
    /// # let now = std::time::Instant::now();
    /// # let mut client = Connection::new(Config::default(), Side::Client, now)?;
    /// let cfg = Config { max_reassembly_bytes: 100_000, ..Config::default() };
    /// let mut server = Connection::new(cfg, Side::Server, now)?;
    /// assert_eq!(server.recv_budget(), 50_000); // half of what is left
    /// # let s = client.open_stream(StreamConfig::default())?;
    /// client.send(now, s, Message::new(vec![7u8; 20_000]))?;
    /// # client.poll_transmit(now, &TcpState { cwnd: 100, ..TcpState::default() });
    /// let wire: Vec<u8> = client.transmit_segments().flatten().copied().collect();
    /// server.handle_bytes(now, &wire)?;
    /// assert!(server.recv_budget() <= 40_000); // the unread message is held
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn recv_budget(&self) -> u64 {
        let left = self
            .config
            .max_reassembly_bytes
            .saturating_sub(self.recv_memory());
        if left == 1 {
            1
        } else {
            left / 2
        }
    }

    /// Reads that delivered messages smaller than a quarter of their read's buffer still pin
    /// ([`Config::max_pinning_reads`](crate::Config::max_pinning_reads) at most).
    #[cfg(test)]
    pub(crate) fn pinned_reads(&mut self) -> usize {
        self.reasm.pinned_reads()
    }

    /// Number of partial messages being reassembled.
    ///
    /// ```
    /// # use lowtide_proto::{Config, Connection, ControllerConfig, Message, Side, StreamConfig, TcpState};
    /// # let now = std::time::Instant::now();
    /// # let cfg = Config { controller: ControllerConfig::Unlimited, ..Config::default() };
    /// # let mut client = Connection::new(cfg, Side::Client, now)?;
    /// let mut server = Connection::new(Config::default(), Side::Server, now)?;
    /// # let s = client.open_stream(StreamConfig::default())?;
    /// client.send(now, s, Message::new(vec![7u8; 100_000]))?; // two frames of at most 64 KB
    /// # client.poll_transmit(now, &TcpState::default());
    /// let wire: Vec<u8> = client.transmit_segments().flatten().copied().collect();
    /// server.handle_bytes(now, &wire[..wire.len() - 100])?; // all but the last 100 bytes
    /// assert_eq!(server.partial_messages(), 1);
    /// server.handle_bytes(now, &wire[wire.len() - 100..])?;
    /// assert_eq!((server.partial_messages(), server.poll_message().map(|m| m.data.len())), (0, Some(100_000)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn partial_messages(&self) -> usize {
        self.reasm.partial_count()
    }

    /// Feeds bytes read from the socket (copied where they are kept). On a protocol violation
    /// the channel closes (a CLOSE frame naming the violation is staged) and the error is
    /// returned.
    ///
    /// ```
    /// # use lowtide_proto::{Config, Connection, Message, Side, StreamConfig, TcpState};
    /// # let now = std::time::Instant::now();
    /// # let mut client = Connection::new(Config::default(), Side::Client, now)?;
    /// let mut server = Connection::new(Config::default(), Side::Server, now)?;
    /// # let s = client.open_stream(StreamConfig::default())?;
    /// client.send(now, s, Message::new("byte by byte"))?;
    /// # client.poll_transmit(now, &TcpState::default());
    /// let wire: Vec<u8> = client.transmit_segments().flatten().copied().collect();
    /// // TCP may split the stream anywhere: one byte per read still parses.
    /// for b in &wire {
    ///     server.handle_bytes(now, std::slice::from_ref(b))?;
    /// }
    /// assert_eq!(&server.poll_message().expect("a message").data[..], b"byte by byte");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn handle_bytes(&mut self, now: Instant, data: &[u8]) -> Result<(), ProtocolError> {
        self.handle_input(now, data, None, data.len())
    }

    /// [`handle_bytes`](Self::handle_bytes) for a read the driver owns as [`Bytes`]: a message
    /// that arrives whole in it is delivered as a slice of it, without a copy (see the
    /// reassembly notes on what that keeps alive and how it is charged).
    ///
    /// ```
    /// # use lowtide_proto::wire::Hello;
    /// # use lowtide_proto::{Config, Connection, Message, Side, StreamConfig, TcpState};
    /// # let now = std::time::Instant::now();
    /// # let mut client = Connection::new(Config::default(), Side::Client, now)?;
    /// let mut server = Connection::new(Config::default(), Side::Server, now)?;
    /// # let s = client.open_stream(StreamConfig::default())?;
    /// client.send(now, s, Message::new(vec![9u8; 3000]))?;
    /// # client.poll_transmit(now, &TcpState::default());
    /// let wire: Vec<u8> = client.transmit_segments().flatten().copied().collect();
    /// let (_, hello_len) = Hello::decode(&wire)?.expect("the hello first");
    /// server.handle_bytes(now, &wire[..hello_len])?;
    /// // The driver's next read, owned as `Bytes`.
    /// let read = bytes::Bytes::copy_from_slice(&wire[hello_len..]);
    /// server.handle_read(now, read.clone())?;
    /// let m = server.poll_message().expect("a message");
    /// // Delivered as a slice of the read: same memory, no copy.
    /// assert!(read.as_ptr_range().contains(&m.data.as_ptr()));
    /// assert_eq!(m.data.len(), 3000);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn handle_read(&mut self, now: Instant, data: Bytes) -> Result<(), ProtocolError> {
        self.handle_input(now, &data, Some(&data), data.len())
    }

    /// Lends the read buffer for the driver's next read: the incomplete frame an earlier read
    /// left (at its front, counted as held), and how many bytes complete that frame (`None`
    /// when there is none or its header is still incomplete). The driver appends what it reads
    /// (making room first if it must: only then is the frame's head copied) and hands the
    /// buffer back with [`handle_read_buf`](Self::handle_read_buf), also when it read nothing.
    /// The frame is completed where it is, so a message arriving in it is never copied.
    ///
    /// ```
    /// # use lowtide_proto::{Config, Connection, ControllerConfig, Message, Side, StreamConfig, TcpState};
    /// # let now = std::time::Instant::now();
    /// # let cfg = Config { controller: ControllerConfig::Unlimited, ..Config::default() };
    /// # let mut client = Connection::new(cfg, Side::Client, now)?;
    /// let mut server = Connection::new(Config::default(), Side::Server, now)?;
    /// # let s = client.open_stream(StreamConfig::default())?;
    /// client.send(now, s, Message::new(vec![1u8; 60_000]))?;
    /// # client.poll_transmit(now, &TcpState::default());
    /// let wire: Vec<u8> = client.transmit_segments().flatten().copied().collect();
    /// let mut at = 0;
    /// for read in [2000, 30_000, 100_000] {
    ///     let (mut buf, _need) = server.take_read_buf();
    ///     // The driver's read(2) appends to the buffer; here a copy of the wire.
    ///     let n = read.min(wire.len() - at);
    ///     buf.extend_from_slice(&wire[at..at + n]);
    ///     at += n;
    ///     server.handle_read_buf(now, buf, n)?;
    /// }
    /// let (buf, need) = server.take_read_buf();
    /// assert_eq!((buf.len(), need), (0, None)); // nothing left incomplete
    /// server.handle_read_buf(now, buf, 0)?;
    /// assert_eq!(server.poll_message().map(|m| m.data.len()), Some(60_000));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn take_read_buf(&mut self) -> (BytesMut, Option<usize>) {
        let buf = std::mem::take(&mut self.inbuf);
        let need = if self.peer_hello && self.error.is_none() {
            Frame::frame_len(&buf, self.config.max_chunk_len)
                .ok()
                .flatten()
                .map(|total| total.saturating_sub(buf.len()))
        } else {
            None
        };
        (buf, need)
    }

    /// The longest frame the peer may send us (a data frame of `max_chunk_len`, a probe or a
    /// close frame, with the longest header): room that lets any frame starting in a read be
    /// completed in place.
    pub fn max_frame_len(&self) -> usize {
        let payload = self
            .config
            .max_chunk_len
            .max(MAX_PROBE_PAD)
            .max(MAX_CLOSE_REASON as u64);
        usize::try_from(payload)
            .unwrap_or(usize::MAX)
            .saturating_add(MAX_HEADER_LEN)
    }

    /// Takes back the buffer [`take_read_buf`](Self::take_read_buf) lent, with `n` bytes the
    /// driver read appended. The incomplete frame at its front, once complete, is parsed on
    /// its own; the whole frames after it are split off and parsed in place. Whole messages of
    /// at least a quarter of the buffer's allocation (which a slice keeps alive) are slices,
    /// smaller ones while [`Config::max_pinning_reads`](crate::Config::max_pinning_reads)
    /// allows, else copies; an incomplete frame at the end stays in the buffer for the next
    /// read.
    pub fn handle_read_buf(
        &mut self,
        now: Instant,
        mut buf: BytesMut,
        n: usize,
    ) -> Result<(), ProtocolError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        if n == 0 {
            self.inbuf = buf;
            return Ok(());
        }
        self.note_read_alloc(&buf);
        let res = self.parse_in_place(now, &mut buf, n);
        self.inbuf = buf;
        self.after_input(now, res, n)
    }

    /// Tells reassembly how much memory a slice of `buf` keeps alive: its allocation from the
    /// start, which `BytesMut` does not show once reads were split off its front. A buffer
    /// ending where the last one ended continues that allocation (the frame a read ended in,
    /// completed in place); any other is a buffer of its own, seen from its start.
    fn note_read_alloc(&mut self, buf: &BytesMut) {
        let start = buf.as_ptr() as usize;
        let end = start + buf.capacity();
        self.read_alloc = match self.read_alloc {
            (s, e) if e == end => (s.min(start), end),
            _ => (start, end),
        };
        self.reasm
            .set_read_buffer((self.read_alloc.1 - self.read_alloc.0) as u64);
    }

    /// [`handle_read_buf`](Self::handle_read_buf)'s parsing: `buf` ends with `fresh` bytes just
    /// read; what it held before is the head of one incomplete frame (or of the handshake).
    fn parse_in_place(
        &mut self,
        now: Instant,
        buf: &mut BytesMut,
        fresh: usize,
    ) -> Result<(), ProtocolError> {
        let max = self.config.max_chunk_len;
        if !self.peer_hello {
            let used = self.parse(now, buf, 0, None)?;
            buf.advance(used);
            return Ok(());
        }
        if buf.len() > fresh {
            match Frame::frame_len(buf, max)? {
                Some(total) if total <= buf.len() => {
                    let frame = buf.split_to(total).freeze();
                    let res = self.parse(now, &frame, buf.len() as u64, Some(&frame));
                    self.reasm.end_read(frame.len() as u64);
                    res?;
                }
                _ => return Ok(()),
            }
        }
        let mut whole = 0;
        while let Some(len) = Frame::frame_len(&buf[whole..], max)? {
            if whole + len > buf.len() {
                break;
            }
            whole += len;
        }
        if whole > 0 {
            let data = buf.split_to(whole).freeze();
            let res = self.parse(now, &data, buf.len() as u64, Some(&data));
            self.reasm.end_read(data.len() as u64);
            res?;
        }
        Ok(())
    }

    fn handle_input(
        &mut self,
        now: Instant,
        data: &[u8],
        read: Option<&Bytes>,
        n_read: usize,
    ) -> Result<(), ProtocolError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let mut buf = std::mem::take(&mut self.inbuf);
        // the caller's allocation is not known: each read counts as its own buffer
        self.reasm.set_read_buffer(0);
        let res = self.feed(now, &mut buf, data, read);
        self.reasm.end_read(data.len() as u64);
        self.inbuf = buf;
        self.after_input(now, res, n_read)
    }

    /// After a read was parsed: count it for P-ACKs, or close the channel on a protocol error.
    fn after_input(
        &mut self,
        now: Instant,
        res: Result<(), ProtocolError>,
        n_read: usize,
    ) -> Result<(), ProtocolError> {
        match res {
            Ok(_) => {
                // P-ACKs count bytes read, not frames parsed, so their granularity does not
                // depend on frame sizes; a data frame still arriving needs acknowledging too.
                self.consumed += n_read as u64;
                self.pack_needed |= self.peer_hello
                    && self
                        .inbuf
                        .first()
                        .is_some_and(|&t| t != FrameType::PAck as u8);
                if !self.pack_needed {
                    // only P-ACKs arrived: acknowledging them would ping-pong forever
                } else if self.consumed - self.last_pack_bytes >= self.config.pack_every_bytes {
                    self.pack_by_bytes(now);
                } else if self.pack_due.is_none() {
                    self.pack_due = Some(now + Duration::from_micros(self.config.pack_interval_us));
                }
                Ok(())
            }
            Err(e) => {
                self.inbuf = BytesMut::new();
                Err(self.fail(e))
            }
        }
    }

    /// Closes the channel on a protocol error: a CLOSE frame naming it goes to the peer.
    pub(super) fn fail(&mut self, e: ProtocolError) -> ProtocolError {
        tracing::debug!(error = %e, "protocol error, closing channel");
        {
            {
                if self.state == State::Open {
                    Frame::Close {
                        code: e.code(),
                        reason: &e.to_string(),
                    }
                    .encode(&mut self.control);
                    self.state = State::Closed;
                    self.events.push_back(Event::Closed {
                        by_peer: false,
                        code: e.code(),
                        reason: e.to_string(),
                    });
                }
                self.error = Some(e.clone());
                e
            }
        }
    }

    /// Parses `data` after the bytes already `pending` (an incomplete frame). Only the bytes
    /// that complete the pending frame are copied; the rest is parsed in place and its
    /// incomplete tail kept in `pending`.
    fn feed(
        &mut self,
        now: Instant,
        pending: &mut BytesMut,
        mut data: &[u8],
        read: Option<&Bytes>,
    ) -> Result<(), ProtocolError> {
        if !self.peer_hello {
            pending.extend_from_slice(data);
            let used = self.parse(now, pending, 0, None)?;
            pending.advance(used);
            return Ok(());
        }
        while !pending.is_empty() {
            let want =
                Frame::frame_len(pending, self.config.max_chunk_len)?.unwrap_or(pending.len() + 1);
            let take = want.saturating_sub(pending.len()).min(data.len());
            pending.extend_from_slice(&data[..take]);
            data = &data[take..];
            if pending.len() < want {
                return Ok(());
            }
            if Frame::frame_len(pending, self.config.max_chunk_len)? == Some(pending.len()) {
                // One whole frame: it becomes the owner of its message (no second copy).
                let frame = std::mem::take(pending).freeze();
                let res = self.parse(now, &frame, data.len() as u64, Some(&frame));
                self.reasm.end_read(frame.len() as u64);
                res?;
            }
        }
        let used = self.parse(now, data, 0, read)?;
        let tail = &data[used..];
        // Room for the whole frame at once, so completing it by the next read does not copy
        // its head a second time on regrowth. The
        // length is bounded by `max_chunk_len`; the budget leaves room for one frame.
        if let Ok(Some(frame)) = Frame::frame_len(tail, self.config.max_chunk_len) {
            pending.reserve(frame);
        }
        pending.extend_from_slice(tail);
        Ok(())
    }

    /// Parses as many whole frames as `buf` holds; returns the bytes used.
    /// `beyond` counts bytes of the current read that follow `buf` (not parsed yet); they are
    /// already inside the read budget, so reservations must leave room for them.
    /// `read` owns `buf` when it is parsed in place from a read handed over as [`Bytes`].
    fn parse(
        &mut self,
        now: Instant,
        buf: &[u8],
        beyond: u64,
        read: Option<&Bytes>,
    ) -> Result<usize, ProtocolError> {
        let mut pos = 0;
        if !self.peer_hello {
            let Some((hello, n)) = Hello::decode(buf)? else {
                return Ok(0);
            };
            for o in hello.options {
                match o {
                    HelloOption::MaxMessageSize(v) => self.peer_max_message = v,
                    HelloOption::MaxChunkLen(v) => self.peer_max_chunk = v.max(64),
                    HelloOption::MaxStreams(v) => self.peer_max_streams = v,
                    HelloOption::AnswersProbes(v) => self.probing.peer_answers = v == 1,
                    _ => {}
                }
            }
            self.peer_hello = true;
            self.pack_needed = true;
            if self.config.probe_at_start {
                self.request_probe();
            }
            pos = n;
        }
        while pos < buf.len() && self.peer_hello {
            if self.peer_closed {
                // nothing after CLOSE is meaningful
                return Ok(buf.len());
            }
            let Some((frame, n)) = Frame::decode(&buf[pos..], self.config.max_chunk_len)? else {
                break;
            };
            self.pack_needed |= !matches!(frame, Frame::PAck { .. });
            self.expect_switch(&frame)?;
            // Room for reserving a partial message beyond its received bytes: the budget minus
            // what is held, minus the rest of this read (this frame included).
            let unparsed = (buf.len() - pos) as u64 + beyond;
            let held =
                self.reasm.partial_bytes() + self.reasm.delivered_bytes + self.inbuf.len() as u64;
            self.spare = self
                .config
                .max_reassembly_bytes
                .saturating_sub(held + unparsed);
            self.on_frame(now, frame, read)?;
            pos += n;
        }
        Ok(pos)
    }

    fn note_peer_stream(&mut self, stream: u64) -> Result<bool, ProtocolError> {
        if self.peer_streams.contains(&stream) || self.streams.contains_key(&stream) {
            return Ok(false);
        }
        if self.peer_streams.len() as u64 >= u64::from(self.config.max_streams) {
            return Err(ProtocolError::TooManyStreams {
                max: self.config.max_streams,
            });
        }
        self.peer_streams.insert(stream);
        Ok(true)
    }

    fn on_frame(
        &mut self,
        now: Instant,
        frame: Frame<'_>,
        read: Option<&Bytes>,
    ) -> Result<(), ProtocolError> {
        match frame {
            Frame::StreamOpen {
                stream,
                weight_milli,
            } => {
                if self.note_peer_stream(stream)? {
                    self.events.push_back(Event::StreamOpened {
                        stream,
                        weight: weight_milli as f64 / 1000.0,
                    });
                }
            }
            Frame::StreamClose { stream } => {
                self.peer_streams.remove(&stream);
                self.reasm.drop_stream(stream);
                self.events.push_back(Event::StreamClosed { stream });
            }
            Frame::Data(d) => {
                self.note_peer_stream(d.stream)?;
                let before = self.reasm.delivered_count();
                self.reasm.on_data(&d, now, self.spare, read)?;
                self.stats.messages_received += (self.reasm.delivered_count() - before) as u64;
                self.sync_duplicate_stats();
            }
            Frame::Cancel {
                stream,
                seq,
                reason,
            } => {
                let freed = self.reasm.on_cancel(stream, seq);
                self.stats.peer_cancelled += 1;
                self.events.push_back(Event::PeerCancelled(PeerCancelled {
                    stream,
                    seq,
                    reason,
                    freed,
                }));
            }
            Frame::PAck {
                bytes,
                recv_time_us,
            } => self.on_pack(now, bytes, recv_time_us),
            // checked by `expect_switch` before
            Frame::Switch { .. } => {}
            Frame::Probe { id, index, pad_len } => self.on_probe(now, id, index, pad_len),
            Frame::ProbeReport {
                id,
                dispersion_us,
                second_len,
            } => self.on_probe_report(now, id, dispersion_us, second_len),
            Frame::Close { code, reason } => {
                self.state = State::Closed;
                self.peer_closed = true;
                self.events.push_back(Event::Closed {
                    by_peer: true,
                    code,
                    reason: reason.to_owned(),
                });
            }
        }
        Ok(())
    }

    /// Next complete message, in arrival order.
    ///
    /// ```
    /// # use lowtide_proto::{Config, Connection, Message, Side, StreamConfig, TcpState};
    /// # let now = std::time::Instant::now();
    /// # let mut client = Connection::new(Config::default(), Side::Client, now)?;
    /// let mut server = Connection::new(Config::default(), Side::Server, now)?;
    /// # let s = client.open_stream(StreamConfig::default())?;
    /// client.send(now, s, Message::new("one"))?;
    /// client.send(now, s, Message::new("two"))?;
    /// # client.poll_transmit(now, &TcpState::default());
    /// let wire: Vec<u8> = client.transmit_segments().flatten().copied().collect();
    /// server.handle_bytes(now, &wire)?;
    /// let got: Vec<_> = std::iter::from_fn(|| server.poll_message()).map(|m| m.data).collect();
    /// assert_eq!(got, ["one", "two"]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn poll_message(&mut self) -> Option<Received> {
        self.reasm.pop()
    }
}
