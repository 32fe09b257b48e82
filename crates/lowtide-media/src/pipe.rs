//! Encoded video between a byte stream and a lowtide channel (`lowtide send --input`,
//! `lowtide recv --output`): the thin async driver over [`EncodedSender`] and
//! [`EncodedReceiver`] (design: `docs/video.md`).
//!
//! The sender reads the input as it comes, turns each access unit into one message on one
//! stream with the unit's importance and deadline (capture time, the instant its bytes were
//! read, plus the latency budget), and applies the channel's events: a unit cancelled or
//! expired cancels the queued units that depend on it and is announced to the receiver. At
//! the end of the input it waits until every message is written or dropped, sends the end
//! message and waits (a bounded time) for the receiver's acknowledgements.
//!
//! The receiver writes what its gate passes, in decode order. A keyframe request goes to the
//! caller's `on_request`: with a pipe there is no encoder to ask, so the command line only
//! counts and logs it; a library user with an encoder forwards it.
//!
//! A caller that has access units rather than a byte stream (the GStreamer elements of
//! `lowtide-gst`: one buffer per unit) uses the same pieces: [`StreamSender`] for the sending
//! end (it drives the channel's events itself), [`receive_units`] for the receiving end.

use std::time::{Duration, Instant};

use lowtide::{CancelReason, Channel, Event, Message, MessageId, Received, StreamConfig};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::encoded::input::{InputError, InputFormat, UnitReader};
use crate::encoded::receiver::{EncodedReceiver, OutputUnit, ReceiveError, ReceiverCounters};
use crate::encoded::sender::{Admit, EncodedSender, Outgoing, SenderConfig, SenderCounters};
use crate::encoded::wire::StreamStart;
use crate::encoded::{
    AccessUnit, Codec, DropCounters, DropReason, KeyframeRequest, DEFAULT_MAX_NAL,
};

/// Why a pipe stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PipeError {
    /// The input is not the format named or detected, or is broken.
    #[error(transparent)]
    Input(#[from] InputError),
    /// Reading the input failed.
    #[error("reading the input: {0}")]
    Read(std::io::Error),
    /// Writing the output failed (a reader that went away).
    #[error("writing the output: {0}")]
    Write(std::io::Error),
    /// A message from the peer broke the stream.
    #[error("from the sender: {0}")]
    Receive(ReceiveError),
    /// The channel failed or closed early.
    #[error(transparent)]
    Transport(#[from] lowtide::Error),
    /// The publish message cannot carry this path or token.
    #[error("publish: {0}")]
    Publish(crate::encoded::wire::WireError),
    /// The consumer of [`receive_units`] dropped its end of the queue.
    #[error("the consumer of the received units went away")]
    ConsumerGone,
    /// The receiver closed the channel with an error code (a server that refused a publish
    /// says why here).
    #[error("the receiver closed the channel (code {code}): {reason}")]
    PeerClosed { code: u64, reason: String },
    /// The channel ended while messages were still in flight.
    #[error("the channel closed with {0} units in flight")]
    Closed(usize),
}

// The messages above show the inner error, so `source()` does not return it again (a printer
// of the whole chain would say it twice): `From` by hand instead of `#[from]`.
impl From<ReceiveError> for PipeError {
    fn from(e: ReceiveError) -> Self {
        PipeError::Receive(e)
    }
}

impl From<crate::encoded::wire::WireError> for PipeError {
    fn from(e: crate::encoded::wire::WireError) -> Self {
        PipeError::Publish(e)
    }
}

/// How [`send_encoded`] reads and schedules.
#[derive(Debug, Clone)]
pub struct SendOptions {
    /// Publish to a server (`lowtide serve`) under this stream path with this token: a
    /// publish message goes first ([`crate::encoded::wire::encode_publish`]).
    pub publish: Option<Publish>,
    /// The input's format (`None`: detect it).
    pub format: Option<InputFormat>,
    pub sender: SenderConfig,
    /// Largest NAL unit, access unit or IVF frame accepted.
    pub max_unit: usize,
    /// How long to wait at the end for the receiver to acknowledge everything.
    pub ack_wait: Duration,
}

impl Default for SendOptions {
    fn default() -> Self {
        Self {
            publish: None,
            format: None,
            sender: SenderConfig::default(),
            max_unit: DEFAULT_MAX_NAL,
            ack_wait: Duration::from_secs(5),
        }
    }
}

/// Where a stream is published on a server, and the token that allows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publish {
    pub path: String,
    pub token: String,
}

/// What [`send_encoded`] did.
#[derive(Debug, Clone, Copy)]
pub struct SendReport {
    /// `None` if the input ended before its format was known.
    pub format: Option<InputFormat>,
    pub codec: Option<Codec>,
    pub counters: SenderCounters,
    /// Units dropped, by reason.
    pub drops: DropCounters,
    /// Whether the receiver acknowledged every message written before `ack_wait` ran out.
    pub all_acked: bool,
}

fn message(m: Outgoing) -> Message {
    let mut msg = Message::new(m.data).importance(m.importance);
    if let Some(d) = m.deadline {
        msg = msg.deadline(d);
    }
    msg
}

/// One encoded stream's sending end on a channel: [`EncodedSender`] applied to a lowtide
/// stream. [`send_encoded`] drives it from a byte stream; a caller that has access units
/// already (a GStreamer sink, one buffer per unit) drives it itself, in this order:
/// [`Self::open`], [`Self::start`] once the codec is known, [`Self::send_units`] for each
/// batch, [`Self::handle_event`] for each of the channel's events (the caller owns
/// `next_event`), and at the end [`Self::finish`].
#[derive(Debug)]
pub struct StreamSender {
    ch: Channel,
    stream: u64,
    state: EncodedSender<MessageId>,
    started: bool,
    /// The receiver's close, when it closed with an error code.
    refused: Option<(u64, String)>,
}

impl StreamSender {
    /// Opens a stream on `ch` for an encoded stream scheduled by `cfg`.
    pub fn open(ch: &Channel, cfg: SenderConfig) -> Result<Self, lowtide::Error> {
        Ok(Self {
            ch: ch.clone(),
            stream: ch.open_stream(StreamConfig::default())?,
            state: EncodedSender::new(cfg),
            started: false,
            refused: None,
        })
    }

    /// The sans-IO state: counters, drops, whether the stream is broken (a reference was
    /// dropped: ask the encoder for a keyframe).
    pub fn state(&self) -> &EncodedSender<MessageId> {
        &self.state
    }

    /// Keeps each unit's fate from now on, for [`Self::poll_fate`].
    pub fn record_fates(&mut self) {
        self.state.record_fates();
    }

    /// The oldest unit fate not polled yet (see [`EncodedSender::record_fates`]).
    pub fn poll_fate(&mut self) -> Option<(u64, crate::encoded::sender::Fate)> {
        self.state.poll_fate()
    }

    /// The receiver's close with an error code, if it closed so ([`PipeError::PeerClosed`]).
    pub fn refused(&self) -> Option<PipeError> {
        self.refused
            .as_ref()
            .map(|(code, reason)| PipeError::PeerClosed {
                code: *code,
                reason: reason.clone(),
            })
    }

    /// Whether the start message went out.
    pub fn is_started(&self) -> bool {
        self.started
    }

    /// Applies one of the channel's events: a unit cancelled or expired cancels the queued
    /// units that depend on it, and the receiver is told.
    pub fn handle_event(&mut self, e: Event) -> Result<(), lowtide::Error> {
        match e {
            Event::Written { id, .. } => self.state.written(id),
            Event::Closed {
                by_peer: true,
                code,
                reason,
            } if code != 0 => self.refused = Some((code, reason)),
            Event::Cancelled { id, reason, .. } => {
                let reason = match reason {
                    CancelReason::Expired => DropReason::Expired,
                    _ => DropReason::Cancelled,
                };
                for dep in self.state.dropped(id, reason) {
                    // `false`: written meanwhile; the receiver's gate drops it.
                    self.ch.cancel(dep);
                }
            }
            _ => {}
        }
        self.notices()
    }

    fn notices(&mut self) -> Result<(), lowtide::Error> {
        while let Some(n) = self.state.poll_notice() {
            self.ch.send(self.stream, message(n))?;
        }
        Ok(())
    }

    /// Sends the publish message for a server (before [`Self::start`]); a path or token the
    /// message cannot carry is an error here, before anything is sent.
    pub fn publish(&mut self, p: &Publish) -> Result<(), PipeError> {
        let data = crate::encoded::wire::encode_publish(&p.path, &p.token)?;
        let m = Outgoing {
            data,
            importance: crate::encoded::MAX_IMPORTANCE,
            deadline: None,
        };
        self.ch.send(self.stream, message(m))?;
        Ok(())
    }

    /// Sends the stream's start message (once; later calls do nothing).
    pub fn start(&mut self, start: &StreamStart) -> Result<(), lowtide::Error> {
        if self.started {
            return Ok(());
        }
        let m = EncodedSender::<MessageId>::start_message(start);
        self.ch.send(self.stream, message(m))?;
        self.started = true;
        Ok(())
    }

    /// Sends `units` (read at `now`) or drops them by rule; [`Self::start`] must have been
    /// called. Returns the reasons of the units not sent, in order.
    pub fn send_units(
        &mut self,
        units: impl IntoIterator<Item = AccessUnit>,
        now: Instant,
    ) -> Result<Vec<DropReason>, lowtide::Error> {
        let mut skipped = Vec::new();
        for u in units {
            match self.state.admit(&u, now, self.ch.queued_bytes()) {
                Admit::Send(m) => {
                    let id = self.ch.send(self.stream, message(m))?;
                    self.state.queued(id);
                }
                Admit::Skip(reason) => skipped.push(reason),
            }
        }
        self.notices()?;
        Ok(skipped)
    }

    /// The end of the stream: waits until every message is written or dropped, sends the end
    /// message and waits up to `ack_wait` for the receiver's acknowledgements. Returns
    /// whether everything written was acknowledged.
    pub async fn finish(&mut self, ack_wait: Duration) -> Result<bool, PipeError> {
        loop {
            self.ch.flush().await?;
            for e in self.ch.drain_events() {
                self.handle_event(e)?;
            }
            if self.state.in_flight() == 0 && self.ch.queued_bytes() == 0 {
                break;
            }
            // Fates not published yet: wait for the next event rather than spin.
            match tokio::time::timeout(Duration::from_millis(100), self.ch.next_event()).await {
                Ok(Some(e)) => self.handle_event(e)?,
                Ok(None) => {
                    return Err(self
                        .refused()
                        .unwrap_or_else(|| closed(&self.ch, self.state.in_flight())))
                }
                Err(_) => {}
            }
        }
        let end = self.state.end_message();
        self.ch.send(self.stream, message(end))?;
        self.ch.flush().await?;
        Ok(wait_acked(&self.ch, ack_wait).await)
    }
}

/// Sends the encoded stream read from `input` on a new stream of `ch` (see the module doc),
/// until the input ends. The caller closes the channel.
pub async fn send_encoded<R: AsyncRead + Unpin>(
    ch: &Channel,
    mut input: R,
    opts: SendOptions,
) -> Result<SendReport, PipeError> {
    let mut s = StreamSender::open(ch, opts.sender)?;
    if let Some(p) = &opts.publish {
        s.publish(p)?;
    }
    let mut reader = UnitReader::new(opts.format, opts.max_unit);
    let mut buf = vec![0u8; 64 << 10];
    loop {
        tokio::select! {
            biased;
            e = ch.next_event() => match e {
                Some(e) => {
                    s.handle_event(e)?;
                    if let Some(e) = s.refused() {
                        return Err(e);
                    }
                }
                None => return Err(s.refused().unwrap_or_else(|| closed(ch, s.state.in_flight()))),
            },
            n = input.read(&mut buf) => {
                let n = n.map_err(PipeError::Read)?;
                let now = Instant::now();
                let eof = n == 0;
                let units = if eof {
                    reader.finish()?
                } else {
                    reader.push(&buf[..n], now)?
                };
                // A send fails once the receiver closed: say why it closed, if it said.
                if let Some(codec) = reader.codec() {
                    let r = s.start(&StreamStart {
                        codec,
                        ivf: reader.ivf_header(),
                    });
                    r.map_err(|e| s.refused().unwrap_or(e.into()))?;
                }
                let r = s.send_units(units, now);
                r.map_err(|e| s.refused().unwrap_or(e.into()))?;
                if eof {
                    break;
                }
            }
        }
    }
    let all_acked = s.finish(opts.ack_wait).await?;
    Ok(SendReport {
        format: reader.format(),
        codec: reader.codec(),
        counters: *s.state.counters(),
        drops: *s.state.drops(),
        all_acked,
    })
}

fn closed(ch: &Channel, in_flight: usize) -> PipeError {
    match ch.error() {
        Some(e) => PipeError::Transport(e),
        None => PipeError::Closed(in_flight),
    }
}

/// Waits until the peer acknowledged every message written, at most `limit`.
async fn wait_acked(ch: &Channel, limit: Duration) -> bool {
    let until = tokio::time::Instant::now() + limit;
    loop {
        let st = ch.stats();
        if st.messages_acked >= st.messages_written {
            return true;
        }
        if tokio::time::Instant::now() >= until || ch.is_finished() {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// How [`receive_encoded`] holds and asks.
#[derive(Debug, Clone, Copy)]
pub struct ReceiveOptions {
    /// Bytes of units held out of order at most ([`EncodedReceiver::new`]).
    pub max_held_bytes: usize,
    /// Keyframe requests at most this often while the stream is broken.
    pub request_interval: Duration,
}

impl Default for ReceiveOptions {
    fn default() -> Self {
        Self {
            max_held_bytes: 64 << 20,
            request_interval: Duration::from_secs(1),
        }
    }
}

/// How long [`receive_encoded`] waits, after the end message, for the sender to close.
pub const SENDER_CLOSE_WAIT: Duration = Duration::from_secs(2);

/// What [`receive_encoded`] did.
#[derive(Debug, Clone, Copy)]
pub struct ReceiveReport {
    pub stream: Option<StreamStart>,
    pub counters: ReceiverCounters,
    /// Units the gate dropped, by reason.
    pub drops: DropCounters,
    /// The sender's end message arrived (the stream is complete).
    pub ended: bool,
}

/// Receives an encoded stream from `ch` and writes it to `output` (see the module doc), until
/// the sender's end message (then it waits up to [`SENDER_CLOSE_WAIT`] for the sender to
/// close) or the channel's end. `first` is a message the caller already
/// read (a server checks a peer's first message before it commits to it). `on_request` hears
/// each keyframe request.
pub async fn receive_encoded<W: AsyncWrite + Unpin>(
    ch: &Channel,
    first: Option<Received>,
    mut output: W,
    opts: ReceiveOptions,
    on_request: impl FnMut(KeyframeRequest),
) -> Result<ReceiveReport, PipeError> {
    let r = EncodedReceiver::new(opts.max_held_bytes, opts.request_interval);
    let report = receive_with(ch, first, r, on_request, Output::Bytes(&mut output)).await?;
    output.flush().await.map_err(PipeError::Write)?;
    Ok(report)
}

/// [`receive_encoded`] for a consumer that takes units, not bytes: each unit the gate
/// passes goes to `units` in decode order ([`EncodedReceiver::unit_output`]). While `units`
/// is full nothing more is read from the channel, so a consumer that stops taking units
/// stops the reads and TCP's flow control pushes back to the sender. A closed `units` ends
/// the stream with [`PipeError::ConsumerGone`].
pub async fn receive_units(
    ch: &Channel,
    first: Option<Received>,
    opts: ReceiveOptions,
    on_request: impl FnMut(KeyframeRequest),
    units: &tokio::sync::mpsc::Sender<OutputUnit>,
) -> Result<ReceiveReport, PipeError> {
    let r = EncodedReceiver::new(opts.max_held_bytes, opts.request_interval).unit_output();
    receive_with(
        ch,
        first,
        r,
        on_request,
        Output::<tokio::io::Sink>::Units(units),
    )
    .await
}

/// Where a receiver's output goes.
enum Output<'a, W> {
    Bytes(&'a mut W),
    Units(&'a tokio::sync::mpsc::Sender<OutputUnit>),
}

impl<W: AsyncWrite + Unpin> Output<'_, W> {
    async fn drain(&mut self, r: &mut EncodedReceiver) -> Result<(), PipeError> {
        match self {
            Output::Bytes(w) => write(w, r.take_output()).await,
            Output::Units(tx) => {
                for u in r.take_units() {
                    tx.send(u).await.map_err(|_| PipeError::ConsumerGone)?;
                }
                Ok(())
            }
        }
    }
}

async fn receive_with<W: AsyncWrite + Unpin>(
    ch: &Channel,
    first: Option<Received>,
    mut r: EncodedReceiver,
    mut on_request: impl FnMut(KeyframeRequest),
    mut out: Output<'_, W>,
) -> Result<ReceiveReport, PipeError> {
    let mut next = first;
    loop {
        let wake = r.poll_timeout().map(tokio::time::Instant::from_std);
        let msg = match next.take() {
            Some(m) => Some(Some(m)),
            None => tokio::select! {
                m = ch.recv() => Some(m),
                _ = tokio::time::sleep_until(wake.unwrap_or_else(tokio::time::Instant::now)), if wake.is_some() => None,
            },
        };
        let now = Instant::now();
        match msg {
            Some(Some(m)) => r.handle(m.received_at.min(now), &m.data)?,
            Some(None) => {
                r.finish(now);
                out.drain(&mut r).await?;
                break;
            }
            None => {}
        }
        if let Some(req) = r.poll_keyframe_request(now) {
            on_request(req);
        }
        out.drain(&mut r).await?;
        if r.is_done() {
            break;
        }
    }
    if r.is_done() {
        // The sender closes once it has our acknowledgements of the last messages; closing
        // first could cut them off. Wait for it, a bounded time.
        let _ = tokio::time::timeout(SENDER_CLOSE_WAIT, ch.finished()).await;
    }
    Ok(ReceiveReport {
        stream: r.stream().copied(),
        counters: *r.counters(),
        drops: *r.drops(),
        ended: r.is_done(),
    })
}

async fn write<W: AsyncWrite + Unpin>(w: &mut W, bytes: Vec<u8>) -> Result<(), PipeError> {
    if bytes.is_empty() {
        return Ok(());
    }
    w.write_all(&bytes).await.map_err(PipeError::Write)?;
    // A player reads as units come: nothing waits in a buffer.
    w.flush().await.map_err(PipeError::Write)
}
