//! The sink's CSV logs: `rate-log` (one line per rate interval) and `unit-log` (one line per
//! access unit once its fate is known), on the wall clock.

use std::collections::BTreeMap;
use std::time::Duration;

use gst::glib;
use lowtide_media::encoded::sender::Fate;
use lowtide_media::encoded::{AccessUnit, DropReason};
use lowtide_media::pipe::StreamSender;

use crate::csv_log::CsvLog;
use crate::rate::RateReport;
use lowtide_media::wall_clock::{now_us as wall_clock_us, us_of as wall_us_of};

/// The rate log's header.
const RATE_HEADER: &str = "wall_us,estimate_bps,written_bps,delivery_rate_bps,queued_bytes,queue_delay_ms,rtt_ms,congested,encoder_bitrate_bps,target_bitrate_bps";
/// The unit log's header.
const UNIT_HEADER: &str = "index,pts_ns,capture_us,fate,decided_us";
/// Units whose fate the unit log may wait for at once (the oldest goes first past this).
const PENDING: usize = 1 << 16;

/// The logs of one stream.
pub(super) struct SinkLogs {
    rate: Option<CsvLog>,
    units: Option<CsvLog>,
    /// PTS and capture wall-clock µs of the units whose fate the unit log waits for.
    pending: BTreeMap<u64, (Option<u64>, u64)>,
    element: glib::WeakRef<super::LowtideSink>,
}

impl SinkLogs {
    /// The logs asked for (`None` paths: no file); the sender keeps fates for the unit log.
    pub(super) fn open(
        rate: Option<&str>,
        units: Option<&str>,
        sender: &mut StreamSender,
        element: glib::WeakRef<super::LowtideSink>,
    ) -> Result<Self, gst::ErrorMessage> {
        let rate = CsvLog::maybe("lowtidesink", rate, RATE_HEADER)?;
        let units = CsvLog::maybe("lowtidesink", units, UNIT_HEADER)?;
        if units.is_some() {
            sender.record_fates();
        }
        Ok(Self {
            rate,
            units,
            pending: BTreeMap::new(),
            element,
        })
    }

    /// Units handed to the sender: what their fate's line will need.
    pub(super) fn queued(&mut self, units: &[AccessUnit]) {
        if self.units.is_none() {
            return;
        }
        for u in units {
            if self.pending.len() >= PENDING {
                self.pending.pop_first();
            }
            self.pending.insert(u.index, (u.pts, wall_us_of(u.capture)));
        }
    }

    /// One rate-log line for an interval.
    pub(super) fn rate(&mut self, report: &RateReport, encoder_bps: Option<u64>) {
        if self.rate.is_none() {
            return;
        }
        let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
        let line = format!(
            "{},{},{},{},{},{:.3},{:.3},{},{},{}\n",
            wall_clock_us(),
            report.estimate_bps,
            report.written_bps,
            report.delivery_rate_bps,
            report.queued_bytes,
            report
                .queue_delay
                .min(Duration::from_secs(3600))
                .as_secs_f64()
                * 1e3,
            report.rtt.as_secs_f64() * 1e3,
            report.congested,
            opt(encoder_bps),
            opt(report.target_bps)
        );
        let mut log = self.rate.take();
        self.write(&mut log, &line);
        self.rate = log;
    }

    /// One unit-log line per fate the sender decided since the last call.
    pub(super) fn fates(&mut self, sender: &mut StreamSender) {
        if self.units.is_none() {
            return;
        }
        let decided = wall_clock_us();
        let mut log = self.units.take();
        while let Some((index, fate)) = sender.poll_fate() {
            let (pts, capture) = self.pending.remove(&index).unzip();
            let line = format!(
                "{index},{},{},{},{decided}\n",
                pts.flatten().map(|p| p.to_string()).unwrap_or_default(),
                capture.map(|c| c.to_string()).unwrap_or_default(),
                fate_name(fate)
            );
            self.write(&mut log, &line);
        }
        self.units = log;
    }

    /// Writes a line; a failed write closes that log with a warning, the stream goes on.
    fn write(&self, log: &mut Option<CsvLog>, line: &str) {
        let Some(w) = log.as_mut() else {
            return;
        };
        if let Err(e) = w.line(line) {
            *log = None;
            if let Some(el) = self.element.upgrade() {
                gst::element_warning!(
                    el,
                    gst::ResourceError::Write,
                    ("lowtidesink: writing a log: {}", e)
                );
            }
        }
    }
}

/// A fate's name in the unit log.
fn fate_name(f: Fate) -> &'static str {
    match f {
        Fate::Written => "written",
        Fate::Skipped(DropReason::Expired) => "late-on-arrival",
        Fate::Skipped(DropReason::QueueFull) | Fate::Dropped(DropReason::QueueFull) => "queue-full",
        Fate::Dropped(DropReason::Expired) => "expired",
        Fate::Skipped(DropReason::DependencyBroken)
        | Fate::Dropped(DropReason::DependencyBroken) => "dependency-broken",
        _ => "cancelled",
    }
}
