//! Paceline's videoconferencing application (Erbad and Krasic, "Sender-side Buffers and the
//! Case for Multimedia Adaptation", the evaluation's "Quality and interactivity trade-off"):
//!
//! - the video is scalable: each frame is [`ADUS_PER_FRAME`] ADUs, one base spatial layer and
//!   seven progressive enhancement layers, each sent as one message;
//! - the adaptation policy is biased toward temporal quality: as the rate drops, enhancement
//!   ADUs go first, base ADUs (whole frames) last. So importance falls with the layer: every
//!   base ADU outranks every enhancement ADU ([`importance`]);
//! - each ADU expires at the sender after the *latency threshold*: it carries the deadline
//!   capture + threshold, and lowtide cancels it unless it is completely written by then;
//! - with [`Conference::drop_superseded`] (our addition, [`crate::supersede`]) the sender also
//!   cancels an unsent ADU once a newer frame's ADU of the same or higher importance is
//!   written;
//! - with [`Conference::age_cancel`] (our addition) an enhancement ADU expires at a shorter
//!   budget after capture than the threshold: one that waited that long in lowtide's queue
//!   is cancelled before it reaches the kernel, where a loss would make it wait a whole
//!   repair more (a fast retransmit costs about srtt + one floor latency). The base layer
//!   keeps the threshold: the frame rate does not pay for it;
//! - the receiver measures temporal quality: a frame is shown when its base ADU arrives
//!   within the threshold of its capture, with the enhancement layers whose whole prefix
//!   arrived by then; the frame rate is shown frames per second ([`Viewer`]).
//!
//! Pure logic with explicit time; the two ends over a transport are the lab's
//! (`lowtide_lab::conference`, over lowtide's channel or QUIC); [`crate::session`] keeps the
//! sender's counts ([`crate::session::ConferenceSent`]).
//!
//! Where we differ:
//! - the paper gives neither ADU sizes nor frame dependencies: our ADUs are equal (the
//!   frame's bytes / 8, at a constant bit rate) and frames decode independently;
//! - ADUs use lowtide-media's data header ([`crate::wire`]) with the video's index as window
//!   (several videos share one channel, one stream each: Fig. 7's quality fairness).

use std::time::{Duration, Instant};

use crate::wire::DATA_HEADER;

/// One base layer and seven enhancement layers (the paper's scalable format).
pub const ADUS_PER_FRAME: u8 = 8;

/// Importance of an ADU of `layer` (0 = base): the base highest, then each enhancement layer
/// below the one it refines, so lowtide sends base ADUs first and cancels enhancements first.
pub fn importance(layer: u8) -> u8 {
    ADUS_PER_FRAME - 1 - layer.min(ADUS_PER_FRAME - 1)
}

/// A conference stream: its bit rate, frame rate and latency threshold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Conference {
    pub rate_bps: f64,
    pub fps: f64,
    /// How long an ADU may take from capture before it expires at the sender.
    pub threshold: Duration,
    /// Cancel an unsent ADU once a newer frame's ADU of the same or higher importance is
    /// written ([`crate::supersede`]); `false`: the threshold alone, as the paper.
    pub drop_superseded: bool,
    /// Age cancellation: an enhancement ADU (layer 1 and up) not written whole to the kernel
    /// this long after capture is cancelled (its deadline, if shorter than the threshold);
    /// `None`: the threshold for every layer, as the paper.
    pub age_cancel: Option<Duration>,
}

impl Conference {
    /// The paper's set-up: 4 Mbit/s at 30 frames per second.
    pub fn paceline(threshold: Duration) -> Self {
        Self {
            rate_bps: 4e6,
            fps: 30.0,
            threshold,
            drop_superseded: true,
            age_cancel: None,
        }
    }

    /// Whether ADU `layer` expires at the age budget rather than at the threshold.
    pub fn aged_by_budget(&self, layer: u8) -> bool {
        layer > 0 && self.age_cancel.is_some_and(|b| b < self.threshold)
    }

    /// When ADU `layer` of a frame captured at `capture` expires at the sender: capture +
    /// the threshold, or + the age budget for an enhancement layer ([`Self::age_cancel`]).
    pub fn deadline(&self, capture: Instant, layer: u8) -> Instant {
        match self.age_cancel {
            Some(budget) if self.aged_by_budget(layer) => capture + budget,
            _ => capture + self.threshold,
        }
    }

    /// Refuses values no conference has, naming the field, the value and the range.
    pub fn check(&self) -> Result<(), String> {
        let range = |name: &str, v: f64, lo: f64, hi: f64, unit: &str| {
            if v.is_finite() && (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err(format!(
                    "{name} = {v} {unit} is outside {lo} to {hi} {unit}"
                ))
            }
        };
        range("rate", self.rate_bps / 1e3, 10.0, 1e6, "kbit/s")?;
        range("fps", self.fps, 1.0, 120.0, "frames/s")?;
        range(
            "latency threshold",
            self.threshold.as_secs_f64() * 1e3,
            1.0,
            600_000.0,
            "ms",
        )?;
        if let Some(b) = self.age_cancel {
            range(
                "age cancel budget",
                b.as_secs_f64() * 1e3,
                1.0,
                600_000.0,
                "ms",
            )?;
        }
        if self.adu_bytes() <= DATA_HEADER {
            return Err(format!(
                "rate {} kbit/s at {} frames/s leaves {} bytes per ADU, not more than its {DATA_HEADER}-byte header",
                self.rate_bps / 1e3,
                self.fps,
                self.adu_bytes()
            ));
        }
        Ok(())
    }

    /// Bytes of one ADU (header included): the frame's share of the bit rate, over 8.
    pub fn adu_bytes(&self) -> usize {
        (self.rate_bps / 8.0 / self.fps / f64::from(ADUS_PER_FRAME)).round() as usize
    }

    /// When frame `frame` is captured, seconds after the stream's start.
    pub fn capture_s(&self, frame: u32) -> f64 {
        f64::from(frame) / self.fps
    }

    /// Frames captured in `duration_s`.
    pub fn frames_in(&self, duration_s: f64) -> u32 {
        (duration_s * self.fps).floor().max(0.0) as u32
    }
}

/// What the receiver saw, frame by frame; bounded by the number of frames of the stream.
#[derive(Debug, Clone)]
pub struct Viewer {
    conf: Conference,
    /// Arrival of each ADU, seconds after the start; indexed by frame, then layer.
    arrivals: Vec<[Option<f64>; ADUS_PER_FRAME as usize]>,
    /// ADUs that named a frame or layer outside the stream, and ADUs that came twice.
    pub unknown: u64,
    pub duplicated: u64,
}

impl Viewer {
    /// A viewer for a stream of `frames` frames.
    pub fn new(conf: Conference, frames: u32) -> Self {
        Self {
            conf,
            arrivals: vec![[None; ADUS_PER_FRAME as usize]; frames as usize],
            unknown: 0,
            duplicated: 0,
        }
    }

    /// An ADU of `frame`, `layer` arrived at `at_s` seconds after the start.
    pub fn on_adu(&mut self, frame: u32, layer: u8, at_s: f64) {
        let slot = self
            .arrivals
            .get_mut(frame as usize)
            .and_then(|f| f.get_mut(layer as usize));
        match slot {
            Some(s @ None) => *s = Some(at_s),
            Some(Some(_)) => self.duplicated += 1,
            None => self.unknown += 1,
        }
    }

    /// The ADU's one-way latency (capture to arrival), ms, if it arrived.
    pub fn latency_ms(&self, frame: u32, layer: u8) -> Option<f64> {
        let at = (*self.arrivals.get(frame as usize)?.get(layer as usize)?)?;
        Some((at - self.conf.capture_s(frame)) * 1e3)
    }

    /// Layers shown for `frame`: the prefix of layers (base first) that arrived within the
    /// threshold of its capture; 0 when the base did not, and the frame is not shown.
    pub fn shown_layers(&self, frame: u32) -> u8 {
        let Some(f) = self.arrivals.get(frame as usize) else {
            return 0;
        };
        let due = self.conf.capture_s(frame) + self.conf.threshold.as_secs_f64();
        f.iter().take_while(|a| a.is_some_and(|t| t <= due)).count() as u8
    }

    /// Frames captured in `[from_s, to_s)`.
    fn frames_between(&self, from_s: f64, to_s: f64) -> impl Iterator<Item = u32> + '_ {
        (0..self.arrivals.len() as u32).filter(move |&f| {
            let c = self.conf.capture_s(f);
            c >= from_s && c < to_s
        })
    }

    /// Shown frames per second of the frames captured in `[from_s, to_s)`; `None` for an
    /// empty interval.
    pub fn fps(&self, from_s: f64, to_s: f64) -> Option<f64> {
        let captured = self.frames_between(from_s, to_s).count();
        (captured > 0).then(|| {
            let shown = self
                .frames_between(from_s, to_s)
                .filter(|&f| self.shown_layers(f) > 0)
                .count();
            self.conf.fps * shown as f64 / captured as f64
        })
    }

    /// Mean layers of the frames shown among those captured in `[from_s, to_s)`; `None`
    /// when none was shown.
    pub fn mean_layers(&self, from_s: f64, to_s: f64) -> Option<f64> {
        let shown: Vec<u8> = self
            .frames_between(from_s, to_s)
            .map(|f| self.shown_layers(f))
            .filter(|&l| l > 0)
            .collect();
        (!shown.is_empty())
            .then(|| shown.iter().map(|&l| f64::from(l)).sum::<f64>() / shown.len() as f64)
    }

    /// The stream as it was configured.
    pub fn conference(&self) -> Conference {
        self.conf
    }

    /// Frames of the stream.
    pub fn frames(&self) -> u32 {
        self.arrivals.len() as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(threshold_ms: u64) -> Conference {
        Conference::paceline(Duration::from_millis(threshold_ms))
    }

    #[test]
    fn the_papers_stream_has_eight_equal_adus_and_base_first_importance() {
        let c = conf(200);
        c.check().unwrap();
        // 4 Mbit/s at 30 fps: 16,667 bytes a frame, 2,083 an ADU.
        assert_eq!(c.adu_bytes(), 2083);
        assert_eq!(importance(0), 7);
        assert_eq!(importance(7), 0);
        assert!((1..8).all(|l| importance(l) < importance(l - 1)));
        assert_eq!(c.frames_in(10.0), 300);
    }

    #[test]
    fn bad_settings_name_the_field() {
        let mut c = conf(200);
        c.fps = 0.0;
        assert!(c.check().unwrap_err().starts_with("fps = 0"));
        let mut c = conf(200);
        c.rate_bps = f64::NAN;
        assert!(c.check().unwrap_err().starts_with("rate"));
        let c = Conference {
            rate_bps: 10e3,
            fps: 120.0,
            threshold: Duration::from_millis(100),
            drop_superseded: true,
            age_cancel: None,
        };
        assert!(c.check().unwrap_err().contains("header"), "{:?}", c.check());
        assert!(conf(0)
            .check()
            .unwrap_err()
            .starts_with("latency threshold"));
    }

    #[test]
    fn the_age_budget_shortens_enhancement_deadlines_only() {
        let capture = Instant::now();
        let plain = conf(1000);
        assert_eq!(plain.deadline(capture, 3), capture + plain.threshold);
        let aged = Conference {
            age_cancel: Some(Duration::from_millis(40)),
            ..plain
        };
        assert_eq!(aged.deadline(capture, 0), capture + aged.threshold, "base");
        for layer in 1..ADUS_PER_FRAME {
            assert!(aged.aged_by_budget(layer));
            assert_eq!(
                aged.deadline(capture, layer),
                capture + Duration::from_millis(40)
            );
        }
        // A budget past the threshold changes nothing.
        let long = Conference {
            age_cancel: Some(Duration::from_secs(2)),
            ..plain
        };
        assert!(!long.aged_by_budget(5));
        assert_eq!(long.deadline(capture, 5), capture + long.threshold);
        let bad = Conference {
            age_cancel: Some(Duration::ZERO),
            ..plain
        };
        assert!(bad.check().unwrap_err().starts_with("age cancel budget"));
    }

    #[test]
    fn a_frame_is_shown_with_the_prefix_of_layers_in_time() {
        let c = conf(200);
        let mut v = Viewer::new(c, 3);
        // Frame 0 (captured at 0): base and layers 1, 2 in time, layer 3 late, 4 in time.
        for (layer, at) in [(0, 0.05), (1, 0.1), (2, 0.2), (3, 0.25), (4, 0.1)] {
            v.on_adu(0, layer, at);
        }
        assert_eq!(v.shown_layers(0), 3, "layer 3 came late; 4 needs 3");
        // Frame 1: every enhancement but no base: not shown.
        for layer in 1..8 {
            v.on_adu(1, layer, 0.1);
        }
        assert_eq!(v.shown_layers(1), 0);
        // Frame 2: the base only.
        v.on_adu(2, 0, 0.1);
        assert_eq!(v.shown_layers(2), 1);
        assert!(
            (v.fps(0.0, 0.1).unwrap() - 20.0).abs() < 1e-9,
            "2 of 3 frames"
        );
        assert_eq!(v.mean_layers(0.0, 0.1), Some(2.0));
        assert!((v.latency_ms(0, 3).unwrap() - 250.0).abs() < 1e-9);
        assert_eq!(v.latency_ms(1, 0), None);
        assert_eq!(v.fps(5.0, 6.0), None, "no frame captured then: no data");
        assert_eq!(
            v.mean_layers(0.04, 0.05),
            None,
            "frame 1 alone was not shown"
        );
    }

    #[test]
    fn duplicates_and_strangers_are_counted_not_stored() {
        let mut v = Viewer::new(conf(200), 2);
        v.on_adu(0, 0, 0.01);
        v.on_adu(0, 0, 0.02);
        v.on_adu(2, 0, 0.1);
        v.on_adu(0, 8, 0.1);
        assert_eq!((v.duplicated, v.unknown), (1, 2));
        assert!(
            (v.latency_ms(0, 0).unwrap() - 10.0).abs() < 1e-9,
            "the first copy counts"
        );
    }
}
