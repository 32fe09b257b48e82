//! The processes' CSV files read, joined into per-frame samples and a record per variant and
//! trial, and summed over runs.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::run::{LiveSeen, LiveSent};
use crate::stream::Sample;
use crate::LabError;

/// One access unit stamped at the sender (`lowtidestamp location=`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StampLine {
    pub pts_ns: Option<u64>,
    pub stamp_us: i64,
    pub bytes: u64,
}

/// One frame out of the decoder (`lowtidemeter location=` after it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FrameLine {
    /// `None`: the frame carried no stamp.
    pub stamp_us: Option<i64>,
    pub decoded_us: i64,
    /// The decoder marked the frame corrupted (a reference missing).
    pub corrupted: bool,
}

/// One interval of lowtide's rate feedback (`lowtidesink rate-log=`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLine {
    pub wall_us: i64,
    pub encoder_bps: Option<f64>,
    pub written_bps: Option<f64>,
}

/// One unit's fate at the lowtide sender (`lowtidesink unit-log=`).
#[derive(Debug, Clone, PartialEq)]
pub struct UnitLine {
    pub pts_ns: Option<u64>,
    pub fate: String,
}

/// A CSV file with a header: its rows as maps from (normalized) column name to field. A
/// missing file has no rows; a row with the wrong number of fields (a process killed
/// mid-line) is skipped.
fn read_csv(path: &Path) -> Result<Vec<HashMap<String, String>>, LabError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(LabError::io(format!("reading {}", path.display()), e)),
    };
    let mut lines = text.lines();
    let Some(header) = lines.next() else {
        return Ok(vec![]);
    };
    let names: Vec<String> = header
        .split(',')
        .map(|h| h.trim().replace('-', "_"))
        .collect();
    Ok(lines
        .filter_map(|l| {
            let fields: Vec<&str> = l.split(',').collect();
            (fields.len() == names.len()).then(|| {
                names
                    .iter()
                    .cloned()
                    .zip(fields.iter().map(|f| f.trim().to_string()))
                    .collect()
            })
        })
        .collect())
}

fn num<T: std::str::FromStr>(row: &HashMap<String, String>, names: &[&str]) -> Option<T> {
    names
        .iter()
        .find_map(|n| row.get(*n))
        .and_then(|v| v.parse().ok())
}

pub(crate) fn read_stamps(path: &Path) -> Result<Vec<StampLine>, LabError> {
    Ok(read_csv(path)?
        .iter()
        .filter_map(|r| {
            Some(StampLine {
                pts_ns: num(r, &["pts_ns"]),
                stamp_us: num(r, &["stamp_us"])?,
                bytes: num(r, &["bytes"]).unwrap_or(0),
            })
        })
        .collect())
}

pub(crate) fn read_frames(path: &Path) -> Result<Vec<FrameLine>, LabError> {
    Ok(read_csv(path)?
        .iter()
        .filter_map(|r| {
            Some(FrameLine {
                stamp_us: num(r, &["stamp_us"]),
                decoded_us: num(r, &["decoded_us"])?,
                corrupted: num::<u8>(r, &["corrupted"]).is_some_and(|c| c != 0)
                    || r.get("corrupted").is_some_and(|c| c == "true"),
            })
        })
        .collect())
}

pub(crate) fn read_rate(path: &Path) -> Result<Vec<RateLine>, LabError> {
    Ok(read_csv(path)?
        .iter()
        .filter_map(|r| {
            Some(RateLine {
                wall_us: num(r, &["wall_us", "t_us", "time_us"])?,
                encoder_bps: num(r, &["encoder_bitrate_bps"]),
                written_bps: num(r, &["written_bps"]),
            })
        })
        .collect())
}

pub(crate) fn read_units(path: &Path) -> Result<Vec<UnitLine>, LabError> {
    Ok(read_csv(path)?
        .iter()
        .filter_map(|r| {
            Some(UnitLine {
                pts_ns: num(r, &["pts_ns"]),
                fate: r.get("fate")?.clone(),
            })
        })
        .collect())
}

/// One second of a live-video variant, from the trial's start.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Default)]
pub struct LiveSecond {
    pub t_s: f64,
    /// Frames stamped (captured) in the second...
    pub captured: u32,
    /// ...and of them, the ones decoded (whenever).
    #[serde(default)]
    pub captured_decoded: u32,
    /// Frames decoded in the second (what a viewer sees).
    pub shown: u32,
    /// What the encoder made in the second (the stamped units' bytes), bits/s.
    pub encoded_bps: f64,
    /// The encoder's `bitrate` setting last reported in the second (lowtide's rate log), bits/s.
    #[serde(default)]
    pub encoder_setting_bps: Option<f64>,
    /// What lowtide wrote to the kernel in the second's last interval, bits/s.
    #[serde(default)]
    pub written_bps: Option<f64>,
}

/// A live-video variant in one trial.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct LiveRecord {
    pub seconds: Vec<LiveSecond>,
    /// Frames stamped, decoded (matched to a stamp), decoded without a stamp.
    pub stamped: usize,
    pub decoded: usize,
    pub unstamped_decoded: usize,
    /// Decoded frames the decoder marked corrupted.
    pub corrupted: usize,
    /// Frames not decoded by reason: lowtide's fates at the sender (expired,
    /// dependency-broken, ...), and `skipped-at-receiver` for one not decoded although a
    /// later frame was (the transport delivers in order, so it arrived: the receiver's gate
    /// dropped it, or a joining client started at a later keyframe).
    pub dropped: BTreeMap<String, usize>,
    /// Stamped frames after the last decoded one: still on their way at the receiver's end.
    pub censored: usize,
    /// Errors and warnings the receiver's GStreamer printed (the decoder's among them).
    pub bus_problems: Vec<String>,
    /// Decode instants of the frames, seconds from the trial's start (for stalls).
    pub decoded_s: Vec<f64>,
}

/// Fates of a unit lowtide did not deliver.
fn is_drop(fate: &str) -> bool {
    !matches!(fate, "written" | "sent" | "acknowledged")
}

/// Why a frame a later frame overtook was not decoded.
pub const SKIPPED_AT_RECEIVER: &str = "skipped-at-receiver";

/// The variant's samples (one per stamped frame: decoded, or censored at the receiver's end;
/// frames dropped by rule or skipped at the receiver are not latency samples) and its record.
pub(crate) fn join(
    sent: &LiveSent,
    seen: &LiveSeen,
    receive_end_s: f64,
) -> (Vec<Sample>, LiveRecord) {
    let t0 = sent.start_wall_us;
    let at = |us: i64| (us - t0) as f64 / 1e6;
    let decoded: HashMap<i64, &FrameLine> = seen
        .frames
        .iter()
        .filter_map(|f| Some((f.stamp_us?, f)))
        .collect();
    let fates: HashMap<u64, &str> = sent
        .units
        .iter()
        .filter_map(|u| Some((u.pts_ns?, u.fate.as_str())))
        .collect();
    let mut rec = LiveRecord {
        stamped: sent.stamps.len(),
        unstamped_decoded: seen.frames.iter().filter(|f| f.stamp_us.is_none()).count(),
        corrupted: seen.frames.iter().filter(|f| f.corrupted).count(),
        bus_problems: seen.bus_problems.clone(),
        ..LiveRecord::default()
    };
    let last_decoded_stamp = sent
        .stamps
        .iter()
        .filter(|s| decoded.contains_key(&s.stamp_us))
        .map(|s| s.stamp_us)
        .max();
    let mut samples = vec![];
    for s in &sent.stamps {
        let sent_s = at(s.stamp_us);
        if let Some(f) = decoded.get(&s.stamp_us) {
            rec.decoded += 1;
            samples.push(Sample::delivered(
                sent_s,
                (f.decoded_us - s.stamp_us) as f64 / 1e3,
            ));
            continue;
        }
        match s.pts_ns.and_then(|p| fates.get(&p)) {
            Some(fate) if is_drop(fate) => *rec.dropped.entry(fate.to_string()).or_default() += 1,
            _ if last_decoded_stamp.is_some_and(|l| l > s.stamp_us) => {
                *rec.dropped.entry(SKIPPED_AT_RECEIVER.into()).or_default() += 1
            }
            _ => {
                rec.censored += 1;
                samples.push(Sample {
                    sent_s,
                    latency_ms: (receive_end_s - sent_s).max(0.0) * 1e3,
                    censored: true,
                    written_ms: None,
                });
            }
        }
    }
    rec.decoded_s = seen.frames.iter().map(|f| at(f.decoded_us)).collect();
    let seconds = receive_end_s.ceil().max(0.0) as usize;
    rec.seconds = (0..seconds)
        .map(|k| LiveSecond {
            t_s: k as f64,
            ..LiveSecond::default()
        })
        .collect();
    let second = |t: f64| (t >= 0.0 && t < seconds as f64).then_some(t as usize);
    for s in &sent.stamps {
        if let Some(k) = second(at(s.stamp_us)) {
            rec.seconds[k].captured += 1;
            rec.seconds[k].captured_decoded += u32::from(decoded.contains_key(&s.stamp_us));
            rec.seconds[k].encoded_bps += s.bytes as f64 * 8.0;
        }
    }
    for &t in &rec.decoded_s {
        if let Some(k) = second(t) {
            rec.seconds[k].shown += 1;
        }
    }
    for r in &sent.rate {
        if let Some(k) = second(at(r.wall_us)) {
            let sec = &mut rec.seconds[k];
            sec.encoder_setting_bps = r.encoder_bps.or(sec.encoder_setting_bps);
            sec.written_bps = r.written_bps.or(sec.written_bps);
        }
    }
    (samples, rec)
}

/// A live-video variant over its runs, in the measurement window.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct LiveSummary {
    pub runs: usize,
    /// Frames stamped in the window and of them decoded, all runs (the shown share)...
    pub stamped: usize,
    pub decoded: usize,
    /// ...and over whole runs: frames not decoded by reason (as in [`LiveRecord`]), frames
    /// still on their way at the end.
    pub dropped: BTreeMap<String, usize>,
    pub censored: usize,
    /// Decoded frames the decoder marked corrupted, all runs.
    pub corrupted: usize,
    /// Errors and warnings the receivers' GStreamer printed, all runs.
    pub bus_problems: usize,
    /// Frames shown per second over the window's whole seconds (all runs): how many seconds,
    /// their 10th percentile (the lab's rank rule: `round((n - 1) q)` of the sorted values)
    /// and their minimum.
    pub fps_seconds: usize,
    pub fps_p10: Option<f64>,
    pub fps_min: Option<f64>,
    /// The longest time between two decoded frames in the window, ms (worst run).
    pub longest_stall_ms: Option<f64>,
    /// Mean of what the encoder made per second in the window, bits/s.
    pub encoded_bps: Option<f64>,
}

impl LiveSummary {
    /// The runs' records over `[from_s, to_s)`.
    pub fn of(runs: &[&LiveRecord], from_s: f64, to_s: f64) -> Option<Self> {
        if runs.is_empty() {
            return None;
        }
        let mut out = LiveSummary {
            runs: runs.len(),
            ..LiveSummary::default()
        };
        let mut fps = vec![];
        let mut encoded = vec![];
        for r in runs {
            out.corrupted += r.corrupted;
            out.bus_problems += r.bus_problems.len();
            for (why, n) in &r.dropped {
                *out.dropped.entry(why.clone()).or_default() += n;
            }
            out.censored += r.censored;
            for s in r
                .seconds
                .iter()
                .filter(|s| s.t_s >= from_s && s.t_s + 1.0 <= to_s)
            {
                out.stamped += s.captured as usize;
                out.decoded += s.captured_decoded as usize;
                fps.push(f64::from(s.shown));
                encoded.push(s.encoded_bps);
            }
            let inside: Vec<f64> = r
                .decoded_s
                .iter()
                .copied()
                .filter(|&t| t >= from_s && t < to_s)
                .collect();
            let stall = inside
                .windows(2)
                .map(|w| (w[1] - w[0]) * 1e3)
                .reduce(f64::max);
            out.longest_stall_ms = match (out.longest_stall_ms, stall) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
        }
        out.fps_seconds = fps.len();
        out.fps_p10 = lowtide::proto::quantile::of(&mut fps, 0.1);
        out.fps_min = fps.first().copied();
        out.encoded_bps =
            (!encoded.is_empty()).then(|| encoded.iter().sum::<f64>() / encoded.len() as f64);
        Some(out)
    }

    /// The reasons frames were not decoded, for a table cell ("none" without any).
    pub fn dropped_text(&self) -> String {
        if self.dropped.is_empty() {
            return "none".into();
        }
        self.dropped
            .iter()
            .map(|(why, n)| format!("{why} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Share of the stamped frames that were decoded.
    pub fn shown_share(&self) -> Option<f64> {
        (self.stamped > 0).then(|| self.decoded as f64 / self.stamped as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(us: i64, pts: u64) -> StampLine {
        StampLine {
            pts_ns: Some(pts),
            stamp_us: us,
            bytes: 10_000,
        }
    }

    #[test]
    fn a_frame_is_decoded_dropped_by_rule_or_censored_never_lost() {
        let t0 = 1_000_000_000;
        let sent = LiveSent {
            stamps: vec![
                stamp(t0 + 100_000, 1),
                stamp(t0 + 133_000, 2),
                stamp(t0 + 166_000, 3),
                stamp(t0 + 200_000, 4),
                stamp(t0 + 233_000, 5),
            ],
            units: vec![UnitLine {
                pts_ns: Some(2),
                fate: "expired".into(),
            }],
            rate: vec![],
            start_wall_us: t0,
        };
        let seen = LiveSeen {
            frames: vec![
                FrameLine {
                    stamp_us: Some(t0 + 100_000),
                    decoded_us: t0 + 150_000,
                    corrupted: false,
                },
                FrameLine {
                    stamp_us: Some(t0 + 200_000),
                    decoded_us: t0 + 260_000,
                    corrupted: false,
                },
            ],
            bus_problems: vec![],
        };
        let (samples, rec) = join(&sent, &seen, 2.0);
        assert_eq!((rec.stamped, rec.decoded, rec.censored), (5, 2, 1));
        assert_eq!(rec.dropped.get("expired"), Some(&1));
        // frame 3 was overtaken by the decoded frame 4: it arrived and was not decoded
        assert_eq!(rec.dropped.get(SKIPPED_AT_RECEIVER), Some(&1));
        assert_eq!(samples.len(), 3, "dropped frames are not latency samples");
        assert!((samples[0].latency_ms - 50.0).abs() < 1e-9);
        assert!((samples[1].latency_ms - 60.0).abs() < 1e-9);
        assert!(samples[2].censored, "frame 5, after the last decoded one");
        assert!((samples[2].latency_ms - (2.0 - 0.233) * 1e3).abs() < 1e-6);
        assert_eq!(rec.seconds[0].captured, 5);
        assert_eq!(rec.seconds[0].shown, 2);
        assert!((rec.seconds[0].encoded_bps - 400_000.0).abs() < 1e-9);
    }

    #[test]
    fn no_frames_is_no_data_not_zero() {
        let s = LiveSummary::of(&[&LiveRecord::default()], 0.0, 10.0).unwrap();
        assert_eq!(s.shown_share(), None);
        assert_eq!((s.fps_seconds, s.fps_p10), (0, None));
        assert_eq!(s.longest_stall_ms, None);
        assert!(LiveSummary::of(&[], 0.0, 1.0).is_none());
    }

    #[test]
    fn a_stall_is_the_longest_gap_between_decoded_frames_in_the_window() {
        let rec = LiveRecord {
            decoded_s: vec![1.0, 1.033, 1.5, 1.533, 9.0],
            seconds: (0..10)
                .map(|k| LiveSecond {
                    t_s: k as f64,
                    shown: 30,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let s = LiveSummary::of(&[&rec], 0.0, 5.0).unwrap();
        assert!((s.longest_stall_ms.unwrap() - 467.0).abs() < 1e-6);
        assert_eq!((s.fps_seconds, s.fps_p10), (5, Some(30.0)));
    }

    #[test]
    fn a_line_cut_short_is_skipped_and_names_are_normalized() {
        let dir = std::env::temp_dir().join(format!("lt-live-csv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("rate.csv");
        std::fs::write(
            &p,
            "wall_us,encoder-bitrate-bps,written-bps\n5,4000000,3900000\n6,40",
        )
        .unwrap();
        let r = read_rate(&p).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].encoder_bps, Some(4e6));
        assert!(read_frames(&dir.join("missing.csv")).unwrap().is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
