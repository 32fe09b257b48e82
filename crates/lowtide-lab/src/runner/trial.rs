//! One trial: an emulated network run, its threads watched and collected.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lowtide_netem::{Dumbbell, RunOptions};
use lowtide_traffic::Stop;

use super::start::{set_ecn, set_mptcp, set_sender_sysctls, start_trial};
use super::threads::{Sinks, StopOnDrop};
use super::{Measured, Task, GRACE, LEAD_IN};
use crate::results::{TrialNetwork, TrialRecord};
use crate::scenario::Checked;
use crate::stream::{self, DeliveryErrors, Sample};
use crate::{conference, floor, ladder_flow, live_video, video, LabError};

/// One trial's outcome: what it measured, and the error that ended it early, if one did.
pub(super) struct TrialOutcome {
    pub(super) record: TrialRecord,
    pub(super) error: Option<LabError>,
}

/// What one trial does besides measuring.
pub(super) struct TrialOptions {
    /// The forward link's rate cell fails this many seconds in (tests only).
    pub(super) fault_at_s: Option<f64>,
    /// Write the bottleneck's pcaps and the trial's start here.
    pub(super) pcap_dir: Option<PathBuf>,
}

/// One emulated network: cross traffic, floor probe and the streams of `variants`.
pub(super) fn run_trial(
    checked: &Checked,
    variants: &[usize],
    seed: u64,
    TrialOptions {
        fault_at_s,
        pcap_dir,
    }: TrialOptions,
    label: &str,
    progress: &mut impl FnMut(&str),
) -> TrialOutcome {
    let s = &checked.scenario;
    progress(&format!("{label}: building the emulated network"));
    let failed = |e: LabError| TrialOutcome {
        record: TrialRecord::default(),
        error: Some(e),
    };
    if let Some(dir) = &pcap_dir {
        if let Err(e) = std::fs::create_dir_all(dir) {
            return failed(LabError::io("creating the pcap folder", e));
        }
    }
    let net = match Dumbbell::new(
        s.topology.clone(),
        RunOptions {
            pcap_dir: pcap_dir.clone(),
            seed,
        },
    ) {
        Ok(net) => net,
        Err(e) => return failed(e.into()),
    };
    if let Err(e) = set_ecn(s, &net, variants) {
        return failed(e);
    }
    if let Err(e) = set_sender_sysctls(s, &net, variants) {
        return failed(e);
    }
    if let Err(e) = set_mptcp(s, &net, variants) {
        return failed(e);
    }
    let duration = Duration::from_secs_f64(s.run.duration_s);
    let start = Instant::now() + LEAD_IN;
    let end = start + duration;
    // A scenario's outages count from the run's start, as its other times do.
    net.start_outages_at(start);
    if let Some(dir) = &pcap_dir {
        // The pcap's timestamps are the wall clock; the records count from `start`.
        let secs = crate::clock::wall_us(start) as f64 / 1e6;
        let names: String = variants
            .iter()
            .map(|&i| format!("{}\n", s.variants[i].name))
            .collect();
        let written = std::fs::write(dir.join("start.txt"), format!("{secs:.6}\n"))
            .and_then(|()| std::fs::write(dir.join("variants.txt"), names));
        if let Err(e) = written {
            return failed(LabError::io(
                "writing the trial's start and variants for the pcap",
                e,
            ));
        }
    }
    let stop_flag = Arc::new(AtomicBool::new(false));
    // Whatever ends this trial (an error, a panic) stops its threads too.
    let _stop_on_exit = StopOnDrop(stop_flag.clone());
    let stop = Stop::new(stop_flag.clone(), end + GRACE * 2);
    let mut threads = match start_trial(checked, &net, variants, start, end, &stop) {
        Ok(t) => t,
        Err(e) => return failed(e),
    };

    let mut error = None;
    while Instant::now() < end + GRACE && error.is_none() {
        std::thread::sleep(
            Duration::from_secs(1).min((end + GRACE).saturating_duration_since(Instant::now())),
        );
        let t = Instant::now()
            .saturating_duration_since(start)
            .as_secs_f64()
            .min(s.run.duration_s);
        progress(&format!("{label}: {t:>4.0} / {:.0} s", s.run.duration_s));
        if fault_at_s.is_some_and(|at| t >= at) {
            net.inject_fault(lowtide_netem::Direction::Forward);
        }
        error = net.failure().map(LabError::from).or_else(|| threads.poll());
    }
    stop_flag.store(true, Ordering::Relaxed);
    let receive_end_s = s.run.duration_s + GRACE.as_secs_f64();
    let record = threads.collect(checked, &net, receive_end_s, &mut error);
    // An emulator failure explains the threads' errors that follow from it: it goes first.
    if let Some(e) = net.failure() {
        if !matches!(error, Some(LabError::Netem(_))) {
            error = Some(e.into());
        }
    }
    drop(net);
    TrialOutcome { record, error }
}

/// Every thread of a trial.
pub(super) struct TrialThreads {
    pub(super) sinks: Sinks,
    pub(super) measured: Vec<(usize, Measured)>,
    pub(super) floor_tx: Task<floor::FloorSent>,
    pub(super) floor_rx: Task<Vec<Sample>>,
    pub(super) cross: Vec<Task<lowtide_traffic::report::ScheduleReport>>,
    pub(super) clip: Option<lowtide_media::video::Video>,
    /// The TLS variants' certificate files, kept until the trial's threads are done.
    pub(super) _tls_files: Option<crate::tls::TlsFiles>,
}

impl TrialThreads {
    /// The first failure among the threads, if one failed.
    fn poll(&mut self) -> Option<LabError> {
        self.sinks
            .poll()
            .or_else(|| self.measured.iter_mut().find_map(|(_, m)| m.poll()))
            .or_else(|| self.floor_tx.poll())
            .or_else(|| self.floor_rx.poll())
            .or_else(|| self.cross.iter_mut().find_map(Task::poll))
    }

    /// Waits for every thread and keeps what each measured. The first error not yet reported
    /// goes to `failure` (a thread that failed while the others stopped).
    fn collect(
        self,
        checked: &Checked,
        net: &Dumbbell,
        receive_end_s: f64,
        failure: &mut Option<LabError>,
    ) -> TrialRecord {
        let s = &checked.scenario;
        // A part stopped by the trial's end without another failure lost what it measured:
        // that is a failure too, never a variant silently missing from the summary.
        let mut stopped: Option<String> = None;
        let mut note = |what: &str, r: Result<(), LabError>| match r {
            Err(LabError::Stopped) => {
                stopped.get_or_insert_with(|| what.to_string());
            }
            Err(e) if failure.is_none() => *failure = Some(e),
            _ => {}
        };
        let mut record = TrialRecord::default();
        for (i, m) in self.measured {
            let name = s.variants[i].name.clone();
            // A QUIC or TFRC sender has no lowtide driver to count (Table I's columns): no
            // cost row.
            let quic = s.variants[i].quic.is_some() || s.variants[i].tfrc.is_some();
            match m {
                Measured::Stream { tx, rx } => match (tx.wait(), rx.wait()) {
                    (Ok(sent), Ok(received)) => {
                        let (samples, errors) =
                            stream::join_sent_and_received(&sent, &received, receive_end_s);
                        record.streams.push((name.clone(), samples));
                        record.delivery_errors.push((name.clone(), errors));
                        if !quic {
                            record.costs.push((name.clone(), sent.cost));
                        }
                        record.tcp.push((name, sent.tcp));
                    }
                    (a, b) => note(&name, a.map(drop).and(b.map(drop))),
                },
                Measured::Video { tx, rx } => match (tx.wait(), rx.wait(), &self.clip) {
                    (Ok(sent), Ok(seen), Some(clip)) => {
                        let app = &s.application.video;
                        let w = video::windows(
                            clip,
                            app.window_frames,
                            &sent.ledger,
                            &seen,
                            receive_end_s,
                        );
                        record
                            .streams
                            .push((name.clone(), w.iter().filter_map(|x| x.sample()).collect()));
                        record.windows.push((name.clone(), w));
                        record.costs.push((name.clone(), sent.cost));
                        record.tcp.push((name, sent.tcp));
                    }
                    (a, b, _) => note(&name, a.map(drop).and(b.map(drop))),
                },
                Measured::Conference { tx, rx } => match (tx.wait(), rx.wait()) {
                    (Ok(mut run), Ok(seen)) => {
                        let viewers = seen.viewers;
                        run.cost.add_receiver_lane(&seen.lane);
                        let mut adus = conference::records(&viewers);
                        conference::add_writes(&mut adus, &run.sent.writes);
                        record
                            .streams
                            .push((name.clone(), conference::samples(&adus)));
                        record.adus.push((name.clone(), adus));
                        record.conference_sent.push((name.clone(), run.sent));
                        record.delivery_errors.push((
                            name.clone(),
                            DeliveryErrors {
                                duplicated: viewers.iter().map(|v| v.duplicated).sum(),
                                unknown: viewers.iter().map(|v| v.unknown).sum(),
                            },
                        ));
                        if !quic {
                            record.costs.push((name.clone(), run.cost));
                        }
                        record.tcp.push((name, run.tcp));
                    }
                    (a, b) => note(&name, a.map(drop).and(b.map(drop))),
                },
                Measured::Live { tx, rx } => match (tx.wait(), rx.wait()) {
                    (Ok(sent), Ok(seen)) => {
                        let (samples, live) = live_video::join(&sent, &seen, receive_end_s);
                        record.streams.push((name.clone(), samples));
                        record.live.push((name, live));
                    }
                    (a, b) => note(&name, a.map(drop).and(b.map(drop))),
                },
                Measured::Ladder { tx, rx } => match (tx.wait(), rx.wait()) {
                    (Ok(mut sent), Ok(seen)) => {
                        if let Some(mut cost) = sent.cost.take() {
                            cost.add_receiver_lane(&seen.lane);
                            record.costs.push((name.clone(), cost));
                        }
                        let (samples, errors, ladder) =
                            ladder_flow::join(&sent, &seen, receive_end_s);
                        record.streams.push((name.clone(), samples));
                        record.delivery_errors.push((name.clone(), errors));
                        record.ladder.push((name.clone(), ladder));
                        record.tcp.push((name, sent.tcp));
                    }
                    (a, b) => note(&name, a.map(drop).and(b.map(drop))),
                },
            }
        }
        match (self.floor_tx.wait(), self.floor_rx.wait()) {
            (Ok(sent), Ok(mut probes)) => {
                probes.sort_by(|a, b| a.sent_s.total_cmp(&b.sent_s));
                record.floor = probes;
                record.floor_sent = sent;
            }
            (a, b) => note("the floor probe", a.map(drop).and(b.map(drop))),
        }
        for t in self.cross {
            note("cross traffic", t.wait().map(drop));
        }
        let cross_bytes = self.sinks.join();
        let fwd = net.forward().report();
        let rev = net.reverse().report();
        record.network = TrialNetwork {
            forward_drops: fwd.total_drops(),
            forward_marks: fwd.total_marks(),
            reverse_drops: rev.total_drops(),
            forward_max_queue_packets: fwd.max_queue_packets,
            forward_sojourn_p99_ms: (fwd.sojourn_ms.count > 0).then_some(fwd.sojourn_ms.p99),
            cross_traffic_bps: cross_bytes
                .as_ref()
                .map_or(f64::NAN, |b| *b as f64 * 8.0 / s.run.duration_s),
            path_b_forward_packets: net.path_b().map(|[f, _]| f.report().delivered_packets),
            path_b_drops: net
                .path_b()
                .map(|[f, r]| f.report().total_drops() + r.report().total_drops()),
            ..TrialNetwork::default()
        };
        note("the cross traffic's sinks", cross_bytes.map(drop));
        if let (None, Some(what)) = (&failure, stopped) {
            *failure = Some(LabError::io(
                format!("measuring {what}"),
                "it had not finished when the trial ended, so it was stopped and what it measured is lost",
            ));
        }
        record
    }
}
