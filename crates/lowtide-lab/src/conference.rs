//! The measured application as Paceline's videoconference (Erbad and Krasic, "Sender-side
//! Buffers and the Case for Multimedia Adaptation", evaluation): each variant's channel
//! carries lowtide-media's conference stream ([`lowtide_media::conference`]): frames of eight
//! ADUs with importance by layer, each expiring at the sender after the latency threshold.
//! Every ADU sent becomes one [`AduRecord`] (`adus.csv`), from which the summary takes the
//! frame rate a viewer saw, the layers, and the latency of each importance bucket (Fig. 5
//! and Fig. 6).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lowtide::ChannelConfig;
use lowtide_media::conference::{importance, Conference, Viewer, ADUS_PER_FRAME};
use lowtide_media::session::{receive_conference, send_conference, ConferenceSent};
use lowtide_traffic::Stop;
use serde::{Deserialize, Serialize};

use crate::results::Window;
use crate::stats::MeanCi;
use crate::stream::{self, CostMeter, Sample, Sampler, SendCost};
use crate::summary::LatencySummary;
use crate::tcpinfo::TcpTimeline;
use crate::LabError;

/// One ADU as both ends saw it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AduRecord {
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
}

/// What the conference's sender did.
#[derive(Debug)]
pub struct ConferenceRun {
    pub cost: SendCost,
    pub sent: ConferenceSent,
    pub tcp: TcpTimeline,
}

/// Streams the frames of `conf` captured from `start` to `end`; blocking, for a thread inside
/// a sender host. After the last frame's deadline (at the latest at `end`: a threshold longer
/// than what is left of the run ends with it), queued ADUs keep flowing until `receive_end`.
pub fn send(
    dst: SocketAddr,
    cfg: ChannelConfig,
    conf: Conference,
    start: Instant,
    end: Instant,
    receive_end: Instant,
    stop: Stop,
) -> Result<ConferenceRun, LabError> {
    let frames = conf.frames_in(end.saturating_duration_since(start).as_secs_f64());
    stream::runtime()?.block_on(async move {
        let ch = stream::connect(dst, cfg).await?;
        let meter = CostMeter::start();
        let sampler = Sampler::start(&ch, start);
        let sent = tokio::select! {
            r = send_conference(&ch, conf, frames, start, end) => {
                r.map_err(|e| LabError::io("streaming the conference", e))?
            }
            _ = stream::stopped(&stop) => return Err(LabError::Stopped),
        };
        let cost = meter.finish(&ch, sent.sent.iter().sum());
        let tcp = sampler.finish().await;
        stream::finish_gracefully(&ch, receive_end, &stop).await;
        Ok(ConferenceRun { cost, sent, tcp })
    })
}

/// Receives a conference stream on `addr` until `end`; blocking, for a receiver host.
pub fn receive(
    addr: SocketAddr,
    cfg: ChannelConfig,
    conf: Conference,
    frames: u32,
    start: Instant,
    end: Instant,
    stop: Stop,
) -> Result<Viewer, LabError> {
    stream::runtime()?.block_on(async move {
        let listener = stream::listen(addr, cfg).await?;
        let (ch, first) = stream::accept_first(&listener, end, &stop).await?;
        let viewer = tokio::select! {
            v = receive_conference(&ch, Some(first), conf, frames, start, end) => v,
            _ = stream::stopped(&stop) => return Err(LabError::Stopped),
        };
        ch.close(0, "measurement over").await;
        Ok(viewer)
    })
}

/// Every ADU of the stream, with its latency where it arrived.
pub fn records(viewer: &Viewer) -> Vec<AduRecord> {
    let conf = viewer.conference();
    (0..viewer.frames())
        .flat_map(|frame| {
            (0..ADUS_PER_FRAME).map(move |layer| AduRecord {
                frame,
                layer,
                capture_s: conf.capture_s(frame),
                bytes: conf.adu_bytes() as u32,
                latency_ms: viewer.latency_ms(frame, layer),
            })
        })
        .collect()
}

/// The ADUs that arrived, as latency samples (sent = capture of their frame).
pub fn samples(adus: &[AduRecord]) -> Vec<Sample> {
    adus.iter()
        .filter_map(|a| Some(Sample::delivered(a.capture_s, a.latency_ms?)))
        .collect()
}

/// A viewer rebuilt from records (for `lab report`, which has only the files).
fn viewer_of(conf: Conference, adus: &[AduRecord]) -> Viewer {
    let frames = adus.iter().map(|a| a.frame + 1).max().unwrap_or(0);
    let mut v = Viewer::new(conf, frames);
    for a in adus {
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
    pub rate_bps: f64,
    /// Frames shown per second of those captured in the window: mean and 95% CI over runs.
    pub fps: Option<MeanCi>,
    /// Layers per shown frame, pooled.
    pub mean_layers: Option<f64>,
    /// Capture-to-arrival latency of the ADUs that arrived, per importance (7 = base layer),
    /// pooled over runs (Fig. 6).
    pub latency_by_importance_ms: BTreeMap<String, LatencySummary>,
    /// ADUs captured in the window, and those of them that arrived.
    pub adus: usize,
    pub adus_arrived: usize,
    /// The sender's counts over the whole run: ADUs handed to lowtide, and cancelled at
    /// their deadline.
    pub adus_sent: u64,
    pub adus_cancelled: u64,
}

impl ConferenceSummary {
    /// `runs` holds each run's ADUs and its sender's counts.
    pub fn of(
        conf: Conference,
        runs: &[(&[AduRecord], Option<&ConferenceSent>)],
        w: Window,
    ) -> Self {
        let mut fps = vec![];
        let mut layers = vec![];
        let mut by_importance: BTreeMap<u8, Vec<f64>> = BTreeMap::new();
        let (mut adus, mut arrived) = (0, 0);
        for (records, _) in runs {
            let viewer = viewer_of(conf, records);
            if let Some(f) = viewer.fps(w.from_s, w.to_s) {
                fps.push(f);
            }
            for frame in 0..viewer.frames() {
                if w.contains(conf.capture_s(frame)) && viewer.shown_layers(frame) > 0 {
                    layers.push(f64::from(viewer.shown_layers(frame)));
                }
            }
            for a in records.iter().filter(|a| w.contains(a.capture_s)) {
                adus += 1;
                if let Some(l) = a.latency_ms {
                    arrived += 1;
                    by_importance
                        .entry(importance(a.layer))
                        .or_default()
                        .push(l);
                }
            }
        }
        let sender = runs.iter().filter_map(|(_, s)| *s);
        let (adus_sent, adus_cancelled) = sender.fold((0, 0), |(s, c), x| {
            (
                s + x.sent.iter().sum::<u64>(),
                c + x.cancelled.iter().sum::<u64>(),
            )
        });
        Self {
            threshold_ms: conf.threshold.as_secs_f64() * 1e3,
            rate_bps: conf.rate_bps,
            fps: MeanCi::of(&fps),
            mean_layers: (!layers.is_empty())
                .then(|| layers.iter().sum::<f64>() / layers.len() as f64),
            latency_by_importance_ms: by_importance
                .into_iter()
                .rev()
                .map(|(i, l)| (i.to_string(), LatencySummary::of(&l)))
                .collect(),
            adus,
            adus_arrived: arrived,
            adus_sent,
            adus_cancelled,
        }
    }
}

/// The conference of a scenario (`[application.conference]`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ConferenceApp {
    /// The stream's bit rate (the paper: 4 Mbit/s).
    #[serde(default = "four_mbps")]
    pub rate_mbps: f64,
    /// How long an ADU may take from capture before the sender cancels it (Fig. 5's x axis).
    #[serde(default = "two_hundred")]
    pub threshold_ms: f64,
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
            threshold_ms: two_hundred(),
        }
    }
}

impl ConferenceApp {
    pub fn conference(&self) -> Conference {
        Conference {
            rate_bps: self.rate_mbps * 1e6,
            fps: crate::video::FPS,
            threshold: Duration::from_secs_f64(self.threshold_ms.max(0.0) / 1e3),
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
        let adus = records(&v);
        assert_eq!(adus.len(), 480);
        assert_eq!(samples(&adus).len(), 90);
        let w = Window {
            from_s: 0.0,
            to_s: 2.0,
        };
        let s = ConferenceSummary::of(conf, &[(&adus, None)], w);
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
            conf,
            &[(&adus, None)],
            Window {
                from_s: 10.0,
                to_s: 12.0,
            },
        );
        assert_eq!((empty.fps, empty.mean_layers), (None, None));
    }
}
