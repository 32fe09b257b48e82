//! The conference's sender over any pipe: at each frame's capture, its eight ADUs with
//! importance by layer, the deadline capture + threshold (enhancement layers: the age budget
//! if shorter, [`Conference::deadline`]) and a quality-fairness cost of 1 (so under lowtide's
//! `Fairness::Quality` the channel shares ADUs, not bytes, among the videos). The media
//! header's window carries the video's index. A video with [`Conference::drop_superseded`]
//! cancels its superseded ADUs as soon as the write that supersedes them is reported
//! ([`lowtide_media::supersede`]).
//!
//! Over lowtide the channel queues every ADU and schedules them; over QUIC the pipe queues them
//! above quinn and writes one at a time, the most important first, while the sender waits for
//! the next capture ([`crate::pipe::quic`]).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use lowtide::Message;
use lowtide_media::conference::{self, Conference, ADUS_PER_FRAME};
use lowtide_media::session::{AduWritten, ConferenceSent, MAX_VIDEOS};
use lowtide_media::supersede::Supersede;
use lowtide_media::wire::MediaHeader;

use crate::pipe::{MsgId, Offer, PipeEvent, SendPipe};
use crate::LabError;

/// Sends `frames` frames of each video in `videos` from `start`, video `i` on the pipe's
/// stream `i`. Returns each video's counts once the last frame's deadline has passed, or at
/// `until` if that comes first (no frame is captured after it); what the transport then
/// still holds and will never send (QUIC's queue above quinn) counts as cancelled; the
/// caller finishes the pipe.
pub(crate) async fn send_adus(
    pipe: &mut SendPipe,
    videos: &[Conference],
    frames: u32,
    start: Instant,
    until: Instant,
) -> Result<Vec<ConferenceSent>, LabError> {
    let plan = |e: String| LabError::io("planning the conference", e);
    if videos.is_empty() || videos.len() > MAX_VIDEOS {
        return Err(plan(format!(
            "{} conference videos is outside 1 to {MAX_VIDEOS}",
            videos.len()
        )));
    }
    for conf in videos {
        conf.check().map_err(plan)?;
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
        for (video, conf) in videos.iter().enumerate() {
            let capture = at(conf.capture_s(frame));
            if capture > until {
                continue;
            }
            fates(pipe, &mut out, &mut queued, start, capture).await;
            for layer in 0..ADUS_PER_FRAME {
                let data = MediaHeader::data_message(video as u32, frame, layer, conf.adu_bytes());
                let msg = Message::new(data)
                    .importance(conference::importance(layer))
                    .deadline(conf.deadline(capture, layer))
                    .cost(1.0);
                let pending = Pending {
                    video,
                    frame,
                    layer,
                    bytes: conf.adu_bytes() as u64,
                    aged_by_budget: conf.aged_by_budget(layer),
                };
                out[video].sent[usize::from(layer)] += 1;
                match pipe.queue(video, msg, until)? {
                    Offer::Taken(id) => queued.queue(id, pending),
                    // Refused (a full TFRC buffer): it never entered the transport.
                    Offer::Full | Offer::CutOff => {
                        out[video].cancelled[usize::from(layer)] += 1;
                    }
                }
            }
            last = last.max(capture + conf.threshold);
        }
    }
    fates(pipe, &mut out, &mut queued, start, last.min(until)).await;
    for e in pipe.abandon_queued() {
        apply(pipe, &mut out, &mut queued, start, e);
    }
    Ok(out)
}

/// Applies the pipe's fates to the counts until `until`.
async fn fates(
    pipe: &mut SendPipe,
    out: &mut [ConferenceSent],
    queued: &mut Queued<MsgId>,
    start: Instant,
    until: Instant,
) {
    while let Some(e) = pipe.next_event(until).await {
        apply(pipe, out, queued, start, e);
    }
}

/// One ADU's fate: counted; a written one notes when its last byte went to the kernel and
/// cancels what it supersedes.
fn apply(
    pipe: &mut SendPipe,
    out: &mut [ConferenceSent],
    queued: &mut Queued<MsgId>,
    start: Instant,
    e: PipeEvent,
) {
    let (id, written, last_write) = match e {
        PipeEvent::Written { id, last_write } => (id, true, last_write),
        PipeEvent::Dropped { id } => (id, false, None),
    };
    if let (Some(at), Some(p)) = (last_write, queued.adus.get(&id)) {
        out[p.video].writes.push(AduWritten {
            video: p.video as u8,
            frame: p.frame,
            layer: p.layer,
            at_s: at.saturating_duration_since(start).as_secs_f64(),
        });
    }
    queued.fate(out, id, written, |old| pipe.cancel(old));
}

/// An ADU whose fate the sender waits for.
struct Pending {
    video: usize,
    frame: u32,
    layer: u8,
    bytes: u64,
    /// Its deadline is the age budget: expiring, it counts as aged.
    aged_by_budget: bool,
}

/// The conference's ADUs in the transport, and per video the superseding rule (`None`: the
/// video keeps its ADUs until their deadline). `K` is the pipe's [`MsgId`] (another key in
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

    /// ADU `id` was handed to the transport.
    fn queue(&mut self, id: K, p: Pending) {
        if let Some(rule) = &mut self.rules[p.video] {
            rule.queued(p.frame, p.layer, id);
        }
        self.adus.insert(id, p);
    }

    /// ADU `id` was written whole (`written`) or dropped. A written one supersedes older
    /// ADUs: `cancel` withdraws each from the transport (`false`: written or dropped
    /// meanwhile, and its own event counts it).
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
