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

use crate::conference::{self, Conference, Viewer, ADUS_PER_FRAME};
use crate::playout::Playout;
use crate::pps::{Ledger, PpsSender};
use crate::supersede::Supersede;
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
    /// expired at the age budget ([`Conference::age_cancel`], `aged`).
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

/// Sends `frames` frames of each conference video in `videos` from `start` (Erbad and
/// Krasic's videoconferencing application, [`crate::conference`]), each video on its own
/// stream of `ch`: at each frame's capture, its eight ADUs with importance by layer, the
/// deadline capture + threshold (enhancement layers: the age budget if shorter,
/// [`Conference::deadline`]) and a quality-fairness cost of 1 (so under
/// `Fairness::Quality` the channel shares ADUs, not bytes, among the videos; under resource
/// fairness the cost is ignored). The media header's window carries the video's index.
/// A video with [`Conference::drop_superseded`] cancels its superseded ADUs as soon as the
/// write that supersedes them is reported ([`crate::supersede`]).
/// Returns each video's counts once the last frame's deadline has passed, or at `until` if
/// that comes first (no frame is captured after it); the caller flushes or closes.
pub async fn send_conference(
    ch: &Channel,
    videos: &[Conference],
    frames: u32,
    start: Instant,
    until: Instant,
) -> Result<Vec<ConferenceSent>, SessionError> {
    if videos.is_empty() || videos.len() > MAX_VIDEOS {
        return Err(SessionError::Plan(format!(
            "{} conference videos is outside 1 to {MAX_VIDEOS}",
            videos.len()
        )));
    }
    for conf in videos {
        conf.check().map_err(SessionError::Plan)?;
    }
    let mut streams = vec![];
    for _ in videos {
        streams.push(ch.open_stream(StreamConfig::default())?);
    }
    let mut out = vec![
        ConferenceSent {
            frames,
            ..ConferenceSent::default()
        };
        videos.len()
    ];
    let mut queued = Queued::new(videos);
    let at = |s: f64| start + Duration::from_secs_f64(s);
    let mut last = start;
    for frame in 0..frames {
        for (video, (conf, &stream)) in videos.iter().zip(&streams).enumerate() {
            let capture = at(conf.capture_s(frame));
            if capture > until {
                continue;
            }
            conference_events(ch, &mut out, &mut queued, start, capture).await;
            for layer in 0..ADUS_PER_FRAME {
                let data = MediaHeader::data_message(video as u32, frame, layer, conf.adu_bytes());
                let msg = Message::new(data)
                    .importance(conference::importance(layer))
                    .deadline(conf.deadline(capture, layer))
                    .cost(1.0);
                let id = ch.send(stream, msg)?;
                queued.queue(
                    id,
                    Pending {
                        video,
                        frame,
                        layer,
                        bytes: conf.adu_bytes() as u64,
                        aged_by_budget: conf.aged_by_budget(layer),
                    },
                );
                out[video].sent[usize::from(layer)] += 1;
            }
            last = last.max(capture + conf.threshold);
        }
    }
    conference_events(ch, &mut out, &mut queued, start, last.min(until)).await;
    Ok(out)
}

/// Videos one conference channel carries at most (each is a stream and a viewer).
pub const MAX_VIDEOS: usize = 16;

/// An ADU whose fate the sender waits for.
struct Pending {
    video: usize,
    frame: u32,
    layer: u8,
    bytes: u64,
    /// Its deadline is the age budget: expiring, it counts as aged.
    aged_by_budget: bool,
}

/// The conference's ADUs in lowtide's queue, and per video the superseding rule (`None`: the
/// video keeps its ADUs until their deadline). `K` is lowtide's `MessageId` (another key in
/// tests).
struct Queued<K> {
    adus: HashMap<K, Pending>,
    rules: Vec<Option<Supersede<K>>>,
}

impl<K: Copy + Eq + std::hash::Hash> Queued<K> {
    fn new(videos: &[Conference]) -> Self {
        Self {
            adus: HashMap::new(),
            rules: videos
                .iter()
                .map(|c| c.drop_superseded.then(Supersede::default))
                .collect(),
        }
    }

    /// ADU `id` was handed to lowtide.
    fn queue(&mut self, id: K, p: Pending) {
        if let Some(rule) = &mut self.rules[p.video] {
            rule.queued(p.frame, p.layer, id);
        }
        self.adus.insert(id, p);
    }

    /// ADU `id` was written whole (`written`) or expired. A written one supersedes older
    /// ADUs: `cancel` withdraws each from lowtide (`false`: written or expired meanwhile, and
    /// its own event counts it).
    fn fate(
        &mut self,
        out: &mut [ConferenceSent],
        id: K,
        written: bool,
        mut cancel: impl FnMut(K) -> bool,
    ) {
        let Some(p) = self.adus.remove(&id) else {
            return;
        };
        let rule = &mut self.rules[p.video];
        let out = &mut out[p.video];
        let layer = usize::from(p.layer);
        if !written {
            if p.aged_by_budget {
                out.aged[layer] += 1;
            } else {
                out.cancelled[layer] += 1;
            }
            if let Some(rule) = rule {
                rule.gone(p.frame, p.layer);
            }
            return;
        }
        out.written[layer] += 1;
        out.bytes_written += p.bytes;
        let Some(rule) = rule else { return };
        for (_, old_layer, old) in rule.written(p.frame, p.layer) {
            if cancel(old) {
                self.adus.remove(&old);
                out.superseded[usize::from(old_layer)] += 1;
            }
        }
    }
}

/// Applies the channel's events to the conference's counts until `until`; cancels what a
/// written ADU supersedes; notes when each written ADU's last byte went to the kernel.
async fn conference_events(
    ch: &Channel,
    out: &mut [ConferenceSent],
    queued: &mut Queued<MessageId>,
    start: Instant,
    until: Instant,
) {
    message_fates(ch, tokio::time::Instant::from_std(until), |id, written| {
        let last_write = written.and_then(|t| t.last_write);
        if let (Some(at), Some(p)) = (last_write, queued.adus.get(&id)) {
            out[p.video].writes.push(AduWritten {
                video: p.video as u8,
                frame: p.frame,
                layer: p.layer,
                at_s: at.saturating_duration_since(start).as_secs_f64(),
            });
        }
        queued.fate(out, id, written.is_some(), |old| ch.cancel(old))
    })
    .await
}

/// Receives the conference videos sent by [`send_conference`] (`frames` frames each) until
/// `end` (or the channel closes): one viewer per video, placed by the header's window.
/// `first` is a message the caller already read from `ch`. An ADU naming no video of
/// `videos` is counted as unknown by the first viewer.
pub async fn receive_conference(
    ch: &Channel,
    first: Option<lowtide::Received>,
    videos: &[Conference],
    frames: u32,
    start: Instant,
    end: Instant,
) -> Vec<Viewer> {
    let mut viewers: Vec<Viewer> = videos.iter().map(|&c| Viewer::new(c, frames)).collect();
    let end = tokio::time::Instant::from_std(end);
    let mut next = first;
    loop {
        let msg = match next.take() {
            Some(m) => Some(m),
            None => tokio::select! {
                m = ch.recv() => m,
                _ = tokio::time::sleep_until(end) => None,
            },
        };
        let Some(msg) = msg else { break };
        let at = msg
            .received_at
            .saturating_duration_since(start)
            .as_secs_f64();
        let placed = match MediaHeader::decode(&msg.data) {
            Ok(MediaHeader::Data {
                window,
                frame,
                layer,
            }) => viewers
                .get_mut(window as usize)
                .map(|v| v.on_adu(frame, layer, at)),
            _ => None,
        };
        // Not a conference ADU of these videos: the peer's bug, counted out.
        if placed.is_none() {
            if let Some(v) = viewers.first_mut() {
                v.unknown += 1;
            }
        }
    }
    viewers
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two videos, one dropping superseded ADUs and one not; two frames of each queued.
    fn two_frames() -> (Queued<Id>, Vec<ConferenceSent>) {
        let keep = Conference {
            drop_superseded: false,
            ..Conference::paceline(Duration::from_secs(1))
        };
        let mut q = Queued::new(&[Conference::paceline(Duration::from_secs(1)), keep]);
        for video in 0..2 {
            for frame in 0..2 {
                for layer in 0..ADUS_PER_FRAME {
                    q.queue(
                        id(video, frame, layer),
                        Pending {
                            video,
                            frame,
                            layer,
                            bytes: 100,
                            aged_by_budget: video == 0 && layer > 0,
                        },
                    );
                }
            }
        }
        (q, vec![ConferenceSent::default(); 2])
    }

    /// (video, frame, layer) stands for lowtide's message id.
    type Id = (usize, u32, u8);

    fn id(video: usize, frame: u32, layer: u8) -> Id {
        (video, frame, layer)
    }

    #[test]
    fn a_written_base_cancels_the_older_frames_enhancements_and_counts_them_apart() {
        let (mut q, mut out) = two_frames();
        let mut cancelled = vec![];
        for video in 0..2 {
            // Frame 0's base and layer 1, then frame 1's base; frame 0's layer 2 was written
            // meanwhile (lowtide refuses to cancel it), layer 3 expired.
            for (frame, layer) in [(0, 0), (0, 1), (1, 0)] {
                q.fate(&mut out, id(video, frame, layer), true, |old| {
                    cancelled.push(old);
                    old != id(video, 0, 2)
                });
            }
            q.fate(&mut out, id(video, 0, 2), true, |_| unreachable!());
            q.fate(&mut out, id(video, 0, 3), false, |_| unreachable!());
        }
        let expected: Vec<_> = (2..8).map(|l| id(0, 0, l)).collect();
        assert_eq!(cancelled, expected, "video 1 keeps its ADUs");
        assert_eq!(out[0].written, [2, 1, 1, 0, 0, 0, 0, 0]);
        assert_eq!(out[0].superseded, [0, 0, 0, 1, 1, 1, 1, 1]);
        assert_eq!(out[0].cancelled, [0; 8], "layer 3 was superseded before");
        assert_eq!(out[0].bytes_written, 400);
        assert_eq!(out[1].superseded, [0; 8]);
        assert_eq!(out[1].cancelled, [0, 0, 0, 1, 0, 0, 0, 0]);
        // Video 0's enhancements expire at the age budget: counted as aged, not cancelled.
        q.fate(&mut out, id(0, 1, 5), false, |_| unreachable!());
        assert_eq!(out[0].aged, [0, 0, 0, 0, 0, 1, 0, 0]);
        assert_eq!((out[0].cancelled, out[1].aged), ([0; 8], [0; 8]));
        // Frame 1's six other enhancements of video 0 and frame 0's four and frame 1's seven
        // of video 1 wait; nothing is remembered twice.
        assert_eq!(q.adus.len(), 6 + 4 + 7);
        assert_eq!(q.rules[0].as_ref().map(Supersede::len), Some(6));
    }
}
