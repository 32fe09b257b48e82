//! Superseded ADUs of a videoconference: which queued ADUs no viewer can use any more.
//!
//! Erbad and Krasic ("Sender-side Buffers and the Case for Multimedia Adaptation", the service
//! model and Fig. 3) let the application cancel a queued message "when its utility has
//! expired", and give the videoconference one utility limit, the latency threshold after
//! capture. Under persistent overload that alone keeps each importance level's queue a
//! threshold deep: messages of equal importance go out oldest first, so an enhancement layer
//! that waits at all waits nearly the whole threshold and then goes out, useless, ahead of
//! fresher ones (the lab measured exactly that: in Fig. 6 at a 1 s threshold, enhancement
//! ADUs spread evenly from 100 ms to 1.1 s while base ADUs stayed under 250 ms).
//!
//! Priority-progress streaming (Krasic's Qstream, in Goel et al., "Low-Latency Adaptive
//! Streaming over TCP", Section 7), the adaptation Paceline's application inherits, drops what
//! is unsent when the window of frames advances. Here the window advances per layer: an
//! unsent ADU of frame `f`, layer `l` is **superseded** once an ADU of a newer frame `g > f`
//! with the same or higher importance (layer `≤ l`) has been written whole to the transport.
//! It could then only reach the viewer after a newer frame of at least its quality, which a
//! live viewer has already shown; sending it would only delay the newer frame's own layers.
//! Base ADUs are never superseded while the transport sends equal importance oldest first
//! (a newer base cannot be written before an older one), so the frame rate does not pay for
//! the rule; enhancement layers get the capacity their stale copies held.
//!
//! [`Supersede`] is the rule with its bookkeeping; the code that owns the transport cancels
//! what [`Supersede::written`] returns and counts it as superseded, apart from ADUs that
//! expired at the latency threshold.
//!
//! Where we differ:
//! - Paceline's application cancels by the threshold alone (Fig. 3: one timer per frame);
//!   the superseding rule is ours, from priority-progress streaming's window advance;
//! - priority-progress drops a whole window at once at its deadline; here each layer's window
//!   advances on its own, when a newer ADU of that layer or a more important one is written;
//! - frames are taken to decode independently (as [`crate::conference`] does): a codec whose
//!   enhancement layers predict from older frames' layers would keep those.

use std::collections::BTreeMap;

use crate::conference::ADUS_PER_FRAME;

const LAYERS: usize = ADUS_PER_FRAME as usize;

/// The queued (not yet written) ADUs of one video, each with the caller's handle `H`, and for
/// each layer the newest frame that supersedes it. Memory: one entry per queued ADU, and the
/// caller removes every ADU whose fate is known ([`Self::written`], [`Self::gone`]).
#[derive(Debug, Clone)]
pub struct Supersede<H> {
    /// `newest[l]`: the newest frame with an ADU of layer `l` or lower written.
    newest: [Option<u32>; LAYERS],
    /// Frame → its queued ADUs by layer.
    queued: BTreeMap<u32, [Option<H>; LAYERS]>,
}

impl<H> Default for Supersede<H> {
    fn default() -> Self {
        Self {
            newest: [None; LAYERS],
            queued: BTreeMap::new(),
        }
    }
}

impl<H> Supersede<H> {
    /// ADU (`frame`, `layer`) was handed to the transport. A layer beyond the frame's ADUs is
    /// ignored (no handle kept).
    pub fn queued(&mut self, frame: u32, layer: u8, handle: H) {
        if usize::from(layer) < LAYERS {
            self.queued
                .entry(frame)
                .or_insert_with(|| std::array::from_fn(|_| None))[usize::from(layer)] =
                Some(handle);
        }
    }

    /// Whether an ADU of `frame`, `layer` is superseded by what was written so far.
    pub fn is_superseded(&self, frame: u32, layer: u8) -> bool {
        self.newest
            .get(usize::from(layer))
            .copied()
            .flatten()
            .is_some_and(|g| g > frame)
    }

    /// ADU (`frame`, `layer`) was written whole. Returns the queued ADUs it supersedes (frame,
    /// layer, handle), oldest first, and forgets them: the caller cancels them.
    pub fn written(&mut self, frame: u32, layer: u8) -> Vec<(u32, u8, H)> {
        self.gone(frame, layer);
        let from = usize::from(layer);
        if from >= LAYERS {
            return vec![];
        }
        for newest in &mut self.newest[from..] {
            *newest = Some(newest.map_or(frame, |g| g.max(frame)));
        }
        let mut out = vec![];
        let older: Vec<u32> = self.queued.range(..frame).map(|(&f, _)| f).collect();
        for f in older {
            let Some(adus) = self.queued.get_mut(&f) else {
                continue;
            };
            for (l, slot) in adus.iter_mut().enumerate().skip(from) {
                if let Some(h) = slot.take() {
                    out.push((f, l as u8, h));
                }
            }
            if adus.iter().all(Option::is_none) {
                self.queued.remove(&f);
            }
        }
        out
    }

    /// ADU (`frame`, `layer`) left the queue otherwise (expired, cancelled): forget it.
    pub fn gone(&mut self, frame: u32, layer: u8) -> Option<H> {
        let adus = self.queued.get_mut(&frame)?;
        let h = adus.get_mut(usize::from(layer))?.take();
        if adus.iter().all(Option::is_none) {
            self.queued.remove(&frame);
        }
        h
    }

    /// Queued ADUs the rule keeps track of.
    pub fn len(&self) -> usize {
        self.queued
            .values()
            .map(|a| a.iter().filter(|h| h.is_some()).count())
            .sum()
    }

    /// Whether no ADU is queued.
    pub fn is_empty(&self) -> bool {
        self.queued.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Queues every ADU of frames `0..frames`, each with the handle (frame, layer).
    fn queued(frames: u32) -> Supersede<(u32, u8)> {
        let mut s = Supersede::default();
        for f in 0..frames {
            for l in 0..ADUS_PER_FRAME {
                s.queued(f, l, (f, l));
            }
        }
        s
    }

    #[test]
    fn a_newer_base_supersedes_every_older_unsent_adu() {
        let mut s = queued(3);
        assert!(s.written(0, 0).is_empty(), "nothing older than frame 0");
        assert!(s.written(1, 0).len() == 7, "frame 0's seven enhancements");
        assert!(s.is_superseded(0, 7) && !s.is_superseded(1, 1));
        assert_eq!(s.len(), 7 + 8, "frame 1's enhancements and frame 2");
    }

    #[test]
    fn an_enhancement_supersedes_its_layer_and_less_important_ones_only() {
        let mut s = queued(2);
        // The rule alone, whatever order a transport writes in: frame 0's base and layer 1
        // are out, then frame 1's layer 3 supersedes frame 0's layers 3 to 7, not layer 2.
        for (f, l) in [(0, 0), (0, 1)] {
            assert!(s.written(f, l).is_empty());
        }
        let gone: Vec<_> = s
            .written(1, 3)
            .into_iter()
            .map(|(f, l, _)| (f, l))
            .collect();
        assert_eq!(gone, vec![(0, 3), (0, 4), (0, 5), (0, 6), (0, 7)]);
        assert!(!s.is_superseded(0, 2), "layer 2 is more important than 3");
        assert!(s.is_superseded(0, 3));
        // The base of frame 1 then supersedes frame 0's layer 2 as well.
        let gone: Vec<_> = s
            .written(1, 0)
            .into_iter()
            .map(|(f, l, _)| (f, l))
            .collect();
        assert_eq!(gone, vec![(0, 2)]);
        assert_eq!(s.gone(0, 2), None, "already handed back");
    }

    #[test]
    fn an_old_write_never_supersedes_a_newer_frame() {
        let mut s = queued(3);
        assert!(s.written(2, 0).len() == 16, "frames 0 and 1 whole");
        // A late write of an older frame (an ADU partly written before it was superseded)
        // changes nothing.
        assert!(s.written(1, 0).is_empty());
        assert!(!s.is_superseded(2, 1) && s.is_superseded(1, 1));
        assert_eq!(s.len(), 7);
    }

    #[test]
    fn forgotten_adus_free_their_memory() {
        let mut s = queued(4);
        for f in 0..4 {
            for l in 0..ADUS_PER_FRAME {
                assert_eq!(s.gone(f, l), Some((f, l)));
            }
        }
        assert!(s.is_empty());
        assert_eq!(s.gone(9, 0), None);
        // A layer outside the frame is neither kept nor a panic.
        s.queued(0, ADUS_PER_FRAME, (0, ADUS_PER_FRAME));
        assert!(s.written(1, ADUS_PER_FRAME).is_empty());
        assert!(!s.is_superseded(0, ADUS_PER_FRAME));
        assert!(s.is_empty());
    }
}
