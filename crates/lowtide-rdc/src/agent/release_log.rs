//! The optional log of each held packet's release, for timing analysis.

use std::time::Instant;

use super::flow::Held;
use super::Agent;
use serde::Serialize;

/// One held packet's way through the agent: when it was held, due and released (µs since
/// the origin given to [`Agent::take_release_log`]). `left_us − due_us` is its lateness;
/// `due_us − held_us` the hold the flow's delay and order gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ReleaseRecord {
    pub remote_port: u16,
    pub held_us: u64,
    pub due_us: u64,
    pub left_us: u64,
    /// Released early, ahead of a packet that had to pass at once.
    pub flushed: bool,
    /// The ACK's acknowledgement number and raw (unscaled) window.
    pub ack: u32,
    pub window: u16,
}

struct LoggedRelease {
    remote_port: u16,
    held: Instant,
    due: Instant,
    left: Instant,
    flushed: bool,
    ack: u32,
    window: u16,
}

/// Bounded: at most `limit` records, the rest counted.
#[derive(Default)]
pub(super) struct ReleaseLog {
    limit: usize,
    records: Vec<LoggedRelease>,
    dropped: u64,
}

impl ReleaseLog {
    pub(super) fn record<H>(
        &mut self,
        remote_port: u16,
        held: &Held<H>,
        left: Instant,
        flushed: bool,
    ) {
        if self.limit == 0 {
            return;
        }
        if self.records.len() >= self.limit {
            self.dropped += 1;
            return;
        }
        self.records.push(LoggedRelease {
            remote_port,
            held: held.since,
            due: held.release_at,
            left,
            flushed,
            ack: held.ack,
            window: held.window,
        });
    }
}

impl<H> Agent<H> {
    /// Keeps a record of the next `limit` held packets' release ([`ReleaseRecord`]), for
    /// timing analysis (the lab's `releases.csv`); 0 stops recording. Off by default.
    pub fn record_releases(&mut self, limit: usize) {
        self.log.limit = limit;
    }

    /// The records so far, times in µs since `origin`, and how many were not kept (over
    /// the limit); the log starts again empty.
    pub fn take_release_log(&mut self, origin: Instant) -> (Vec<ReleaseRecord>, u64) {
        let us = |t: Instant| t.saturating_duration_since(origin).as_micros() as u64;
        let records = std::mem::take(&mut self.log.records)
            .into_iter()
            .map(|r| ReleaseRecord {
                remote_port: r.remote_port,
                held_us: us(r.held),
                due_us: us(r.due),
                left_us: us(r.left),
                flushed: r.flushed,
                ack: r.ack,
                window: r.window,
            })
            .collect();
        (records, std::mem::take(&mut self.log.dropped))
    }
}
