//! Priority-progress streaming over a lowtide channel: the sender releases each window at
//! its time, sends its plan with importance and the window's deadline (lowtide cancels what
//! is not written by then), keeps the ledger from the channel's events and tells the receiver
//! how many messages of each window it wrote; the receiver feeds a [`Playout`].
//!
//! Both ends take the stream's start instant; in the lab both run in one process with one
//! clock, so window latency is exact. Between two machines the receiver's start must be
//! aligned by the caller (the `lowtide recv` tool uses the arrival of the first message).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use lowtide::{Channel, Event, Message, MessageId, MessageTimes, StreamConfig};
use serde::{Deserialize, Serialize};

use crate::conference::ADUS_PER_FRAME;
use crate::playout::Playout;
use crate::pps::{Ledger, PpsSender};
use crate::video::Video;
use crate::wire::{MediaHeader, DATA_HEADER};

/// Why a media session stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The stream cannot be planned (e.g. a bad window size).
    #[error("{0}")]
    Plan(String),
    #[error(transparent)]
    Transport(#[from] lowtide::Error),
}

/// What the sender did.
#[derive(Debug, Clone, Serialize)]
pub struct SenderReport {
    pub windows: u32,
    pub dropped_windows: f64,
    pub bytes_written: u64,
    pub throughput_bps: f64,
    /// Per window: planned, written, cancelled.
    #[serde(skip)]
    pub ledger: Ledger,
}

/// Streams `video` in windows of `window_frames` frames, starting at `start`; `progress`
/// sees the ledger at each window's release. Returns once the last window's deadline has
/// passed, without waiting for the kernel to drain: the caller flushes (a tool that wants
/// every byte delivered) or closes (a measurement that is over).
pub async fn send_video(
    ch: &Channel,
    video: &Video,
    window_frames: u32,
    start: Instant,
    mut progress: impl FnMut(u32, &Ledger),
) -> Result<SenderReport, SessionError> {
    let sender = PpsSender::new(video, window_frames).map_err(SessionError::Plan)?;
    let stream = ch.open_stream(StreamConfig::default())?;
    let mut ledger = Ledger::default();
    let mut pending: HashMap<MessageId, (u32, u64)> = HashMap::new();
    let windows = sender.window_count();
    let at = |s: f64| tokio::time::Instant::from_std(start + Duration::from_secs_f64(s));
    for w in 0..windows {
        let plan = sender.plan(w);
        collect_until(ch, &mut ledger, &mut pending, at(plan.release_s)).await;
        // Window w-2 passed its deadline a whole period ago: its count is final.
        if let Some(done) = w.checked_sub(2) {
            announce(ch, stream, done, &ledger)?;
        }
        progress(w, &ledger);
        let deadline = start + Duration::from_secs_f64(plan.deadline_s);
        ledger.planned(w, plan.messages.len() as u32);
        for m in &plan.messages {
            let bytes = m.bytes as usize + DATA_HEADER;
            let data = MediaHeader::data_message(w, m.frame, m.layer, bytes);
            let msg = Message::new(data)
                .importance(m.importance)
                .deadline(deadline);
            let id = ch.send(stream, msg)?;
            pending.insert(id, (w, bytes as u64));
        }
    }
    let last = sender.plan(windows.saturating_sub(1));
    let settle = last.deadline_s + sender.period_s();
    collect_until(ch, &mut ledger, &mut pending, at(settle)).await;
    for w in windows.saturating_sub(2)..windows {
        announce(ch, stream, w, &ledger)?;
    }
    let seconds = settle.max(1e-9);
    Ok(SenderReport {
        windows,
        dropped_windows: ledger.dropped_share(),
        bytes_written: ledger.bytes_written(),
        throughput_bps: ledger.bytes_written() as f64 * 8.0 / seconds,
        ledger,
    })
}

fn announce(ch: &Channel, stream: u64, window: u32, ledger: &Ledger) -> Result<(), lowtide::Error> {
    let sent = ledger.get(window).written;
    let msg = Message::new(MediaHeader::window_end_message(window, sent)).importance(u8::MAX);
    ch.send(stream, msg).map(|_| ())
}

/// Applies the channel's events to the ledger until `until`.
async fn collect_until(
    ch: &Channel,
    ledger: &mut Ledger,
    pending: &mut HashMap<MessageId, (u32, u64)>,
    until: tokio::time::Instant,
) {
    message_fates(ch, until, |id, written| {
        if let Some((w, bytes)) = pending.remove(&id) {
            if written.is_some() {
                ledger.written(w, bytes);
            } else {
                ledger.cancelled(w);
            }
        }
    })
    .await
}

/// Tells `fate` of every message the channel finished with until `until` (or the channel
/// ends): written whole to the kernel (its times), or cancelled (`None`).
async fn message_fates(
    ch: &Channel,
    until: tokio::time::Instant,
    mut fate: impl FnMut(MessageId, Option<MessageTimes>),
) {
    loop {
        let event = tokio::select! {
            e = ch.next_event() => e,
            _ = tokio::time::sleep_until(until) => return,
        };
        match event {
            Some(Event::Written { id, times }) => fate(id, Some(times)),
            Some(Event::Cancelled { id, .. }) => fate(id, None),
            Some(_) => {}
            None => return,
        }
    }
}

/// Receives a stream sent by [`send_video`] until `end` (or the channel closes); the playout
/// says what a viewer saw ([`Playout::finish`]). `first` is a message the caller already
/// read from `ch` (a server that waits for a peer's first message before it commits to it).
/// `progress` sees the playout once a second.
#[allow(clippy::too_many_arguments)]
pub async fn receive_video(
    ch: &Channel,
    first: Option<lowtide::Received>,
    fps: f64,
    window_frames: u32,
    tolerance: Duration,
    start: Instant,
    end: Instant,
    mut progress: impl FnMut(&Playout),
) -> Playout {
    let mut playout = Playout::new(fps, window_frames, tolerance.as_secs_f64());
    let end = tokio::time::Instant::from_std(end);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut next = first;
    loop {
        let msg = match next.take() {
            Some(m) => Some(m),
            None => tokio::select! {
                m = ch.recv() => m,
                _ = tick.tick() => {
                    progress(&playout);
                    continue;
                }
                _ = tokio::time::sleep_until(end) => None,
            },
        };
        let Some(msg) = msg else { break };
        // A malformed message is the peer's bug; it is counted out, not fatal.
        if let Ok(h) = MediaHeader::decode(&msg.data) {
            let at = msg
                .received_at
                .saturating_duration_since(start)
                .as_secs_f64();
            playout.on_message(h, msg.data.len(), at);
        }
    }
    playout
}

/// What the sender of a conference stream did with its ADUs, per layer (0 = base).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConferenceSent {
    pub frames: u32,
    /// ADUs handed to lowtide, written whole to the kernel, and cancelled: expired at their
    /// deadline (`cancelled`), superseded by a newer frame ([`crate::supersede`]), or
    /// expired at the age budget ([`crate::conference::Conference::age_cancel`], `aged`).
    pub sent: [u64; ADUS_PER_FRAME as usize],
    pub written: [u64; ADUS_PER_FRAME as usize],
    pub cancelled: [u64; ADUS_PER_FRAME as usize],
    #[serde(default)]
    pub superseded: [u64; ADUS_PER_FRAME as usize],
    #[serde(default)]
    pub aged: [u64; ADUS_PER_FRAME as usize],
    pub bytes_written: u64,
    /// When each ADU written whole had its last byte handed to the kernel (the lab puts it
    /// beside the ADU's arrival in `adus.csv`; not kept in `summary.json`).
    #[serde(skip)]
    pub writes: Vec<AduWritten>,
}

/// One ADU's last byte in the kernel: its video, frame and layer, seconds since the stream's
/// start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AduWritten {
    pub video: u8,
    pub frame: u32,
    pub layer: u8,
    pub at_s: f64,
}

impl ConferenceSent {
    /// The counts of several videos of one channel, added up.
    pub fn total(videos: &[ConferenceSent]) -> ConferenceSent {
        let mut t = ConferenceSent::default();
        for v in videos {
            t.frames += v.frames;
            for l in 0..usize::from(ADUS_PER_FRAME) {
                t.sent[l] += v.sent[l];
                t.written[l] += v.written[l];
                t.cancelled[l] += v.cancelled[l];
                t.superseded[l] += v.superseded[l];
                t.aged[l] += v.aged[l];
            }
            t.bytes_written += v.bytes_written;
            t.writes.extend_from_slice(&v.writes);
        }
        t
    }
}

/// Videos one conference channel carries at most (each is a stream and a viewer).
pub const MAX_VIDEOS: usize = 16;
