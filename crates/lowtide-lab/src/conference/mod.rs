//! The measured application as Paceline's videoconference (Erbad and Krasic, "Sender-side
//! Buffers and the Case for Multimedia Adaptation", evaluation): each variant's channel
//! carries lowtide-media's conference stream ([`lowtide_media::conference`]): frames of eight
//! ADUs with importance by layer, each expiring at the sender after the latency threshold.
//! The sender ([`send`]) and the receiver ([`receive`]) run over any message pipe
//! ([`crate::pipe`]): lowtide's channel, or QUIC as the clean-slate reference.
//! Every ADU sent becomes one [`AduRecord`] (`adus.csv`), from which the summary takes the
//! frame rate a viewer saw, the layers, and the latency of each importance bucket (Fig. 5
//! and Fig. 6). Several videos share one channel, one stream each (Fig. 7, quality fairness:
//! [`crate::quality_fairness`]).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lowtide::Fairness;
use lowtide_media::conference::{importance, Conference, Viewer, ADUS_PER_FRAME};
use lowtide_media::session::{AduWritten, ConferenceSent};
use lowtide_traffic::Stop;
use serde::{Deserialize, Serialize};

use crate::pipe::{RecvPipe, SendPipe, Transport};
use crate::results::Window;
use crate::stats::MeanCi;
use crate::stream::{self, Sample, SendCost};
use crate::summary::LatencySummary;
use crate::tcpinfo::TcpTimeline;
use crate::LabError;

mod receive;
mod send;

/// One ADU as both ends saw it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AduRecord {
    /// Which video of the channel, in stream order (0 in files written before there were
    /// several).
    #[serde(default)]
    pub video: u8,
    pub frame: u32,
    /// 0 = base layer.
    pub layer: u8,
    /// Capture of its frame, seconds since the run started.
    pub capture_s: f64,
    /// Its size, header included.
    pub bytes: u32,
    /// Capture to arrival, ms; `None` if it never arrived (cancelled at its deadline, or
    /// still in flight when the measurement ended).
    pub latency_ms: Option<f64>,
    /// Capture to its last byte's write into the kernel, ms (so the latency splits into
    /// lowtide's queue, and the kernel and network after it); `None` if it was never written
    /// whole or the transport does not say (QUIC; files written before).
    #[serde(default)]
    pub written_ms: Option<f64>,
}

/// What the conference's receiver saw: one viewer per video, and the duplicate lane's
/// receiving counters (zero without a lane).
#[derive(Debug)]
pub struct ConferenceSeen {
    pub viewers: Vec<Viewer>,
    pub lane: lowtide::proto::failover::duplicate::DuplicateStats,
}

/// What the conference's sender did.
#[derive(Debug)]
pub struct ConferenceRun {
    pub cost: SendCost,
    pub sent: ConferenceSent,
    pub tcp: TcpTimeline,
}

/// Streams the frames of `videos` captured from `start` to `end` over `transport`, video `i`
/// on the pipe's stream `i`; blocking, for a thread inside a sender host. After the last
/// frame's deadline (at the latest at `end`: a threshold longer than what is left of the run
/// ends with it), what the transport holds keeps flowing until `receive_end`.
pub fn send(
    dst: SocketAddr,
    transport: Transport,
    videos: Vec<Conference>,
    start: Instant,
    end: Instant,
    receive_end: Instant,
    stop: Stop,
) -> Result<ConferenceRun, LabError> {
    let frames = videos.first().map_or(0, |c| {
        c.frames_in(end.saturating_duration_since(start).as_secs_f64())
    });
    stream::runtime()?.block_on(async move {
        let mut pipe = SendPipe::connect(dst, transport, videos.len()).await?;
        let meter = pipe.start_meter(start);
        let sent = tokio::select! {
            r = send::send_adus(&mut pipe, &videos, frames, start, end) => ConferenceSent::total(&r?),
            _ = stream::stopped(&stop) => return Err(LabError::Stopped),
        };
        let (cost, tcp) = pipe.stop_meter(meter, sent.sent.iter().sum()).await;
        pipe.finish(receive_end, &stop).await;
        Ok(ConferenceRun { cost, sent, tcp })
    })
}

/// Receives the conference's videos on `addr` over `transport` until `end`, one viewer per
/// video; blocking, for a receiver host.
pub fn receive(
    addr: SocketAddr,
    transport: Transport,
    videos: Vec<Conference>,
    frames: u32,
    start: Instant,
    end: Instant,
    stop: Stop,
) -> Result<ConferenceSeen, LabError> {
    stream::runtime()?.block_on(async move {
        let largest = videos.iter().map(Conference::adu_bytes).max().unwrap_or(0);
        let mut pipe = RecvPipe::accept(addr, transport, largest, end, &stop).await?;
        let viewers = tokio::select! {
            v = receive::receive_adus(&mut pipe, &videos, frames, start, end) => v,
            _ = stream::stopped(&stop) => return Err(LabError::Stopped),
        };
        let lane = pipe.lane();
        pipe.close().await;
        Ok(ConferenceSeen { viewers, lane })
    })
}

/// Every ADU of every video, with its latency where it arrived.
pub fn records(viewers: &[Viewer]) -> Vec<AduRecord> {
    viewers
        .iter()
        .enumerate()
        .flat_map(|(video, viewer)| {
            let conf = viewer.conference();
            (0..viewer.frames()).flat_map(move |frame| {
                (0..ADUS_PER_FRAME).map(move |layer| AduRecord {
                    video: video as u8,
                    frame,
                    layer,
                    capture_s: conf.capture_s(frame),
                    bytes: conf.adu_bytes() as u32,
                    latency_ms: viewer.latency_ms(frame, layer),
                    written_ms: None,
                })
            })
        })
        .collect()
}

/// Puts the sender's write times beside the records (`at_s` since the run's start, as
/// `capture_s`).
pub fn add_writes(adus: &mut [AduRecord], writes: &[AduWritten]) {
    let at: HashMap<(u8, u32, u8), f64> = writes
        .iter()
        .map(|w| ((w.video, w.frame, w.layer), w.at_s))
        .collect();
    for a in adus {
        if let Some(t) = at.get(&(a.video, a.frame, a.layer)) {
            a.written_ms = Some((t - a.capture_s) * 1e3);
        }
    }
}

/// The ADUs that arrived, as latency samples (sent = capture of their frame).
pub fn samples(adus: &[AduRecord]) -> Vec<Sample> {
    adus.iter()
        .filter_map(|a| Some(Sample::delivered(a.capture_s, a.latency_ms?)))
        .collect()
}

/// The viewer of video `video` rebuilt from records (for `lab report`, which has only the
/// files).
pub(crate) fn viewer_of(conf: Conference, video: u8, adus: &[AduRecord]) -> Viewer {
    let adus = || adus.iter().filter(|a| a.video == video);
    let frames = adus().map(|a| a.frame + 1).max().unwrap_or(0);
    let mut v = Viewer::new(conf, frames);
    for a in adus() {
        if let Some(l) = a.latency_ms {
            v.on_adu(a.frame, a.layer, a.capture_s + l / 1e3);
        }
    }
    v
}

/// A conference variant over every run (`summary.json`: `conference`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ConferenceSummary {
    pub threshold_ms: f64,
    /// The bit rate of every video together.
    pub rate_bps: f64,
    /// Frames shown per second of those captured in the window (with several videos, their
    /// mean): mean and 95% CI over runs.
    pub fps: Option<MeanCi>,
    /// Several videos on one channel: each one's frame rate and share of the bytes
    /// (Erbad and Krasic, Fig. 7); empty for one video.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub videos: Vec<crate::quality_fairness::VideoShare>,
    /// Several videos: second by second, the highest frame rate minus the lowest, mean over
    /// the seconds of the window and the runs (0 = equal quality); `None` without data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fps_spread: Option<f64>,
    /// Layers per shown frame, pooled.
    pub mean_layers: Option<f64>,
    /// Capture-to-arrival latency of the ADUs that arrived, per importance (7 = base layer),
    /// pooled over runs (Fig. 6).
    pub latency_by_importance_ms: BTreeMap<String, LatencySummary>,
    /// Each run's highest p99.9 of any importance bucket, ms (`None`: the run had no ADU
    /// arrive), so a goal can hold in every run or as the median over runs.
    #[serde(default)]
    pub worst_bucket_p999_by_run_ms: Vec<Option<f64>>,
    /// ADUs captured in the window, and those of them that arrived.
    pub adus: usize,
    pub adus_arrived: usize,
    /// The sender's counts over the whole run: ADUs handed to lowtide, cancelled at their
    /// deadline, cancelled as superseded by a newer frame, and cancelled at the age budget
    /// (the variant's `age_cancel_ms`).
    pub adus_sent: u64,
    pub adus_cancelled: u64,
    #[serde(default)]
    pub adus_superseded: u64,
    #[serde(default)]
    pub adus_aged: u64,
}

impl ConferenceSummary {
    /// `runs` holds each run's ADUs (of every video in `videos`) and its sender's counts.
    pub fn of(
        videos: &[Conference],
        runs: &[(&[AduRecord], Option<&ConferenceSent>)],
        w: Window,
    ) -> Self {
        let mut fps = vec![];
        let mut layers = vec![];
        let mut by_importance: BTreeMap<u8, Vec<f64>> = BTreeMap::new();
        let (mut adus, mut arrived) = (0, 0);
        let mut worst_by_run = vec![];
        for (records, _) in runs {
            let mut run_buckets: BTreeMap<u8, Vec<f64>> = BTreeMap::new();
            let mut run_fps = vec![];
            for (video, &conf) in videos.iter().enumerate() {
                let viewer = viewer_of(conf, video as u8, records);
                run_fps.extend(viewer.fps(w.from_s, w.to_s));
                for frame in 0..viewer.frames() {
                    if w.contains(conf.capture_s(frame)) && viewer.shown_layers(frame) > 0 {
                        layers.push(f64::from(viewer.shown_layers(frame)));
                    }
                }
            }
            if !run_fps.is_empty() {
                fps.push(run_fps.iter().sum::<f64>() / run_fps.len() as f64);
            }
            for a in records.iter().filter(|a| w.contains(a.capture_s)) {
                adus += 1;
                if let Some(l) = a.latency_ms {
                    arrived += 1;
                    by_importance
                        .entry(importance(a.layer))
                        .or_default()
                        .push(l);
                    run_buckets.entry(importance(a.layer)).or_default().push(l);
                }
            }
            worst_by_run.push(
                run_buckets
                    .values()
                    .filter_map(|l| LatencySummary::of(l).p999)
                    .reduce(f64::max),
            );
        }
        let sender = runs.iter().filter_map(|(_, s)| *s);
        let (adus_sent, adus_cancelled, adus_superseded, adus_aged) =
            sender.fold((0, 0, 0, 0), |(s, c, o, a), x| {
                (
                    s + x.sent.iter().sum::<u64>(),
                    c + x.cancelled.iter().sum::<u64>(),
                    o + x.superseded.iter().sum::<u64>(),
                    a + x.aged.iter().sum::<u64>(),
                )
            });
        Self {
            threshold_ms: videos
                .first()
                .map_or(0.0, |c| c.threshold.as_secs_f64() * 1e3),
            rate_bps: videos.iter().map(|c| c.rate_bps).sum(),
            fps: MeanCi::of(&fps),
            videos: if videos.len() > 1 {
                crate::quality_fairness::VideoShare::of(videos, runs, w)
            } else {
                vec![]
            },
            fps_spread: if videos.len() > 1 {
                let seconds: Vec<_> = runs
                    .iter()
                    .flat_map(|(r, _)| crate::quality_fairness::timeline(videos, r, w))
                    .collect();
                crate::quality_fairness::fps_spread(&seconds)
            } else {
                None
            },
            mean_layers: (!layers.is_empty())
                .then(|| layers.iter().sum::<f64>() / layers.len() as f64),
            latency_by_importance_ms: by_importance
                .into_iter()
                .rev()
                .map(|(i, l)| (i.to_string(), LatencySummary::of(&l)))
                .collect(),
            worst_bucket_p999_by_run_ms: worst_by_run,
            adus,
            adus_arrived: arrived,
            adus_sent,
            adus_cancelled,
            adus_superseded,
            adus_aged,
        }
    }
}

/// The conference of a scenario (`[application.conference]`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ConferenceApp {
    /// The stream's bit rate (the paper: 4 Mbit/s).
    #[serde(default = "four_mbps")]
    pub rate_mbps: f64,
    /// Several videos on one channel, one stream each, at these bit rates (Fig. 7); empty:
    /// one video at `rate_mbps`.
    #[serde(default)]
    pub videos_mbps: Vec<f64>,
    /// How the channel shares itself among the videos: `resource` (bytes) or `quality`
    /// (ADUs: every ADU costs 1, so every video gets the same ADU rate).
    #[serde(default)]
    pub fairness: Fairness,
    /// How long an ADU may take from capture before the sender cancels it (Fig. 5's x axis).
    #[serde(default = "two_hundred")]
    pub threshold_ms: f64,
    /// Cancel an unsent ADU once a newer frame's ADU of the same or higher importance is
    /// written (`lowtide_media::supersede`); `false`: ADUs wait until the threshold, as the
    /// paper's application.
    #[serde(default = "yes")]
    pub drop_superseded: bool,
}

fn yes() -> bool {
    true
}
fn four_mbps() -> f64 {
    4.0
}
fn two_hundred() -> f64 {
    200.0
}

impl Default for ConferenceApp {
    fn default() -> Self {
        Self {
            rate_mbps: four_mbps(),
            videos_mbps: vec![],
            fairness: Fairness::default(),
            threshold_ms: two_hundred(),
            drop_superseded: yes(),
        }
    }
}

impl ConferenceApp {
    /// The first (or only) video.
    pub fn conference(&self) -> Conference {
        self.video(self.videos_mbps.first().copied().unwrap_or(self.rate_mbps))
    }

    /// Every video of the channel, in stream order.
    pub fn videos(&self) -> Vec<Conference> {
        if self.videos_mbps.is_empty() {
            vec![self.conference()]
        } else {
            self.videos_mbps.iter().map(|&r| self.video(r)).collect()
        }
    }

    fn video(&self, rate_mbps: f64) -> Conference {
        Conference {
            rate_bps: rate_mbps * 1e6,
            fps: crate::video::FPS,
            threshold: Duration::from_secs_f64(self.threshold_ms.max(0.0) / 1e3),
            drop_superseded: self.drop_superseded,
            age_cancel: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_give_fps_layers_and_latency_by_importance() {
        let conf = ConferenceApp {
            rate_mbps: 4.0,
            threshold_ms: 200.0,
            ..ConferenceApp::default()
        }
        .conference();
        let mut v = Viewer::new(conf, 60);
        // Every frame's base arrives in 50 ms; even frames also get layer 1 in 100 ms.
        for f in 0..60 {
            let c = conf.capture_s(f);
            v.on_adu(f, 0, c + 0.05);
            if f % 2 == 0 {
                v.on_adu(f, 1, c + 0.1);
            }
        }
        let adus = records(&[v]);
        assert_eq!(adus.len(), 480);
        assert_eq!(samples(&adus).len(), 90);
        let w = Window {
            from_s: 0.0,
            to_s: 2.0,
        };
        let s = ConferenceSummary::of(&[conf], &[(&adus, None)], w);
        assert!((s.fps.unwrap().mean - 30.0).abs() < 1e-9);
        assert!((s.mean_layers.unwrap() - 1.5).abs() < 1e-9);
        let base = &s.latency_by_importance_ms["7"];
        assert_eq!(base.count, 60);
        assert!((base.p50.unwrap() - 50.0).abs() < 1e-6);
        assert_eq!(s.latency_by_importance_ms["6"].count, 30);
        assert!(
            !s.latency_by_importance_ms.contains_key("0"),
            "no sample: no bucket"
        );
        assert_eq!((s.adus, s.adus_arrived), (480, 90));
        // Nothing captured in the window: no data, not zero.
        let empty = ConferenceSummary::of(
            &[conf],
            &[(&adus, None)],
            Window {
                from_s: 10.0,
                to_s: 12.0,
            },
        );
        assert_eq!((empty.fps, empty.mean_layers), (None, None));
    }

    #[test]
    fn write_times_join_their_adu_by_video_frame_and_layer() {
        let conf = ConferenceApp::default().conference();
        let mut adus = records(&[Viewer::new(conf, 2), Viewer::new(conf, 2)]);
        let w = |video, frame, layer, at_s| AduWritten {
            video,
            frame,
            layer,
            at_s,
        };
        let at = conf.capture_s(1) + 0.012;
        add_writes(
            &mut adus,
            &[w(1, 1, 0, at), w(0, 0, 3, 0.5), w(5, 0, 0, 1.0)],
        );
        let got = |video, frame, layer| {
            adus.iter()
                .find(|a| (a.video, a.frame, a.layer) == (video, frame, layer))
                .unwrap()
                .written_ms
        };
        assert!((got(1, 1, 0).unwrap() - 12.0).abs() < 1e-9);
        assert!((got(0, 0, 3).unwrap() - 500.0).abs() < 1e-9);
        // Never written (or a video the run did not have): no data.
        assert_eq!((got(0, 1, 0), got(1, 0, 0)), (None, None));
        assert_eq!(adus.iter().filter(|a| a.written_ms.is_some()).count(), 2);
    }
}
