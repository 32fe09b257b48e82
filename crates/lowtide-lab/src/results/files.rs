//! The raw records of a run folder, written so the summary can be recomputed from them alone:
//!
//! | file | one row per |
//! | --- | --- |
//! | `messages.csv` | message of a measured stream (or video window), and floor probe |
//! | `windows.csv` | adaptation window of a video variant |
//! | `adus.csv` | ADU of a conference variant |
//! | `tcpinfo.csv` | `TCP_INFO` sample of a measured stream's sender socket |
//! | `trials.json` | emulated network: its variants, what the bottleneck did, the floor probe's sender, costs, counters, bit-rate ladder records (rates per second, switches, rebuffers), live-video records (frames and encoder rate per second, drops) |
//!
//! Every row names its trial (the index in `trials.json`), so trials rebuild exactly.
//! Times are rounded to the microsecond when recorded ([`round_us`]), so the CSV holds the
//! very values the run summarised.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{TrialNetwork, TrialRecord, FLOOR};
use crate::conference::AduRecord;
use crate::floor::FloorSent;
use crate::scenario::Mode;
use crate::stream::{DeliveryErrors, Sample, SendCost};
use crate::tcpinfo::{TcpSample, TcpTimeline};
use crate::video::WindowRecord;
use crate::LabError;
use lowtide_media::session::ConferenceSent;

pub const MESSAGES: &str = "messages.csv";
pub const WINDOWS: &str = "windows.csv";
pub const ADUS: &str = "adus.csv";
pub const TCPINFO: &str = "tcpinfo.csv";
pub const TRIALS: &str = "trials.json";

/// `x` rounded to a millionth (seconds → µs, ms → ns): what the files keep.
pub fn round_us(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

#[derive(Serialize, Deserialize)]
struct MessageRow {
    sent_s: f64,
    latency_ms: f64,
    censored: u8,
    /// Send to the last byte's write into the kernel (messages over lowtide; empty for the
    /// rest and in files written before this column).
    #[serde(default)]
    written_ms: Option<f64>,
}

/// Where a row belongs: the first four columns of every CSV.
#[derive(Serialize, Deserialize)]
struct Key {
    trial: usize,
    mode: Option<Mode>,
    run: u32,
    series: String,
}

impl Key {
    fn of(trial: usize, r: &TrialRecord, series: &str) -> Self {
        Self {
            trial,
            mode: r.mode,
            run: r.run,
            series: series.to_string(),
        }
    }
}

/// A CSV row: its key's columns, then the record's (the csv crate writes a tuple of two
/// structs as one row; [`csv_rows`] reads it back in two parts, as it cannot flatten).
type Row<T> = (Key, T);
/// What `trials.json` keeps of a trial besides the CSV rows.
#[derive(Serialize, Deserialize)]
struct TrialMeta {
    mode: Option<Mode>,
    run: u32,
    variants: Vec<String>,
    network: TrialNetwork,
    floor_sent: FloorSent,
    costs: Vec<(String, SendCost)>,
    delivery_errors: Vec<(String, DeliveryErrors)>,
    /// Per variant: failed `TCP_INFO` samples and the first error.
    tcp_errors: Vec<(String, u64, Option<String>)>,
    #[serde(default)]
    conference_sent: Vec<(String, ConferenceSent)>,
    #[serde(default)]
    ladder: Vec<(String, crate::ladder_flow::LadderRecord)>,
    #[serde(default)]
    live: Vec<(String, crate::live_video::LiveRecord)>,
}

fn io(what: String) -> impl FnOnce(csv::Error) -> LabError {
    move |e| LabError::io(what, e)
}

/// Writes the records' files into `dir` (`windows.csv` only when there is video, `adus.csv`
/// only when there is a conference).
pub fn write_records(dir: &Path, records: &[TrialRecord]) -> Result<(), LabError> {
    let path = |name: &str| dir.join(name);
    let mut messages = csv_writer(&path(MESSAGES))?;
    let mut windows = None;
    let mut adus = None;
    let mut tcp = csv_writer(&path(TCPINFO))?;
    let mut metas = vec![];
    for (trial, r) in records.iter().enumerate() {
        let streams = r
            .streams
            .iter()
            .map(|(n, s)| (n.as_str(), s))
            .chain([(FLOOR, &r.floor)]);
        for (series, samples) in streams {
            for s in samples {
                let row = MessageRow {
                    sent_s: s.sent_s,
                    latency_ms: s.latency_ms,
                    censored: u8::from(s.censored),
                    written_ms: s.written_ms.map(round_us),
                };
                messages
                    .serialize((Key::of(trial, r, series), row))
                    .map_err(io(format!("writing {MESSAGES}")))?;
            }
        }
        for (series, list) in &r.windows {
            if windows.is_none() {
                windows = Some(csv_writer(&path(WINDOWS))?);
            }
            let out = windows.as_mut().expect("opened above");
            for w in list {
                out.serialize((Key::of(trial, r, series), w))
                    .map_err(io(format!("writing {WINDOWS}")))?;
            }
        }
        for (series, list) in &r.adus {
            if adus.is_none() {
                adus = Some(csv_writer(&path(ADUS))?);
            }
            let out = adus.as_mut().expect("opened above");
            for a in list {
                out.serialize((Key::of(trial, r, series), a))
                    .map_err(io(format!("writing {ADUS}")))?;
            }
        }
        for (series, t) in &r.tcp {
            for s in &t.samples {
                tcp.serialize((Key::of(trial, r, series), s))
                    .map_err(io(format!("writing {TCPINFO}")))?;
            }
        }
        metas.push(TrialMeta {
            mode: r.mode,
            run: r.run,
            variants: r.variants.clone(),
            network: r.network.clone(),
            floor_sent: r.floor_sent.clone(),
            costs: r.costs.clone(),
            delivery_errors: r.delivery_errors.clone(),
            tcp_errors: r
                .tcp
                .iter()
                .map(|(n, t)| (n.clone(), t.errors, t.first_error.clone()))
                .collect(),
            conference_sent: r.conference_sent.clone(),
            ladder: r.ladder.clone(),
            live: r.live.clone(),
        });
    }
    let flushed = |w: &mut csv::Writer<std::fs::File>, name: &str| {
        w.flush()
            .map_err(|e| LabError::io(format!("writing {name}"), e))
    };
    flushed(&mut messages, MESSAGES)?;
    flushed(&mut tcp, TCPINFO)?;
    if let Some(w) = windows.as_mut() {
        flushed(w, WINDOWS)?;
    }
    if let Some(w) = adus.as_mut() {
        flushed(w, ADUS)?;
    }
    let text = serde_json::to_string_pretty(&metas)
        .map_err(|e| LabError::io(format!("encoding {TRIALS}"), e))?;
    let p = path(TRIALS);
    std::fs::write(&p, text).map_err(|e| LabError::io(format!("writing {}", p.display()), e))
}

fn csv_writer(path: &Path) -> Result<csv::Writer<std::fs::File>, LabError> {
    csv::Writer::from_path(path).map_err(io(format!("creating {}", path.display())))
}

/// Reads the records [`write_records`] wrote in `dir`.
pub fn read_records(dir: &Path) -> Result<Vec<TrialRecord>, LabError> {
    let p = dir.join(TRIALS);
    let text = std::fs::read_to_string(&p).map_err(|e| {
        LabError::io(
            format!(
                "reading {} (a run folder of this lowtide version?)",
                p.display()
            ),
            e,
        )
    })?;
    let metas: Vec<TrialMeta> = serde_json::from_str(&text)
        .map_err(|e| LabError::io(format!("decoding {}", p.display()), e))?;
    let mut records: Vec<TrialRecord> = metas
        .into_iter()
        .map(|m| TrialRecord {
            mode: m.mode,
            run: m.run,
            variants: m.variants,
            floor_sent: m.floor_sent,
            costs: m.costs,
            delivery_errors: m.delivery_errors,
            tcp: m
                .tcp_errors
                .into_iter()
                .map(|(n, errors, first_error)| {
                    let t = TcpTimeline {
                        errors,
                        first_error,
                        ..TcpTimeline::default()
                    };
                    (n, t)
                })
                .collect(),
            network: m.network,
            conference_sent: m.conference_sent,
            ladder: m.ladder,
            live: m.live,
            ..TrialRecord::default()
        })
        .collect();
    let n = records.len();
    let check = |k: usize, file: &str, line: usize| {
        if k < n {
            Ok(k)
        } else {
            Err(LabError::io(
                format!("reading {file} line {line}"),
                format!("trial {k} is not in {TRIALS} ({n} trials)"),
            ))
        }
    };
    for (line, (key, row)) in csv_rows::<MessageRow>(&dir.join(MESSAGES))?
        .into_iter()
        .enumerate()
    {
        let r = &mut records[check(key.trial, MESSAGES, line + 2)?];
        let s = Sample {
            sent_s: row.sent_s,
            latency_ms: row.latency_ms,
            censored: row.censored != 0,
            written_ms: row.written_ms,
        };
        if key.series == FLOOR {
            r.floor.push(s);
        } else {
            push(&mut r.streams, &key.series, s);
        }
    }
    let windows = dir.join(WINDOWS);
    if windows.exists() {
        for (line, (key, w)) in csv_rows::<WindowRecord>(&windows)?.into_iter().enumerate() {
            let k = check(key.trial, WINDOWS, line + 2)?;
            push(&mut records[k].windows, &key.series, w);
        }
    }
    let adus = dir.join(ADUS);
    if adus.exists() {
        for (line, (key, a)) in csv_rows::<AduRecord>(&adus)?.into_iter().enumerate() {
            let k = check(key.trial, ADUS, line + 2)?;
            push(&mut records[k].adus, &key.series, a);
        }
    }
    for (line, (key, sample)) in csv_rows::<TcpSample>(&dir.join(TCPINFO))?
        .into_iter()
        .enumerate()
    {
        let r = &mut records[check(key.trial, TCPINFO, line + 2)?];
        match r.tcp.iter_mut().find(|(n, _)| *n == key.series) {
            Some((_, t)) => t.samples.push(sample),
            None => r.tcp.push((
                key.series,
                TcpTimeline {
                    samples: vec![sample],
                    ..TcpTimeline::default()
                },
            )),
        }
    }
    Ok(records)
}

fn push<T>(list: &mut Vec<(String, Vec<T>)>, name: &str, x: T) {
    match list.iter_mut().find(|(n, _)| n == name) {
        Some((_, v)) => v.push(x),
        None => list.push((name.to_string(), vec![x])),
    }
}

/// Reads a CSV whose first four columns are a [`Key`] and the rest a `T`.
fn csv_rows<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Vec<Row<T>>, LabError> {
    let mut r = csv::Reader::from_path(path).map_err(io(format!("opening {}", path.display())))?;
    let headers = r
        .headers()
        .map_err(io(format!("reading {}", path.display())))?
        .clone();
    let rest_headers: csv::StringRecord = headers.iter().skip(4).collect();
    r.records()
        .enumerate()
        .map(|(i, row)| {
            let bad =
                |e: String| LabError::io(format!("reading {} line {}", path.display(), i + 2), e);
            let row = row.map_err(|e| bad(e.to_string()))?;
            let key_row: csv::StringRecord = row.iter().take(4).collect();
            let rest: csv::StringRecord = row.iter().skip(4).collect();
            let key: Key = key_row
                .deserialize(None)
                .map_err(|e| bad(format!("trial, mode, run, series: {e}")))?;
            let value: T = rest
                .deserialize(Some(&rest_headers))
                .map_err(|e| bad(e.to_string()))?;
            Ok((key, value))
        })
        .collect()
}
