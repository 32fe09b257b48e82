//! Packet-pair probes: ours (two one-segment frames into an empty kernel queue, timed by the
//! peer) and the peer's (timed here, answered with a report).

use std::time::{Duration, Instant};

use super::{Connection, Event, State};
use crate::controller::{ProbeResult, TcpState};
use crate::wire::Frame;

/// Packet-pair probing state (`docs/dbat.md`): at most one probe of ours in flight and one of
/// the peer's being timed, so a peer cannot grow it.
#[derive(Debug, Default)]
pub(super) struct Probing {
    /// The peer announced that it answers probes.
    pub(super) peer_answers: bool,
    /// A probe should go out at the next aligned write opportunity.
    pub(super) wanted: bool,
    pub(super) next_id: u64,
    /// Our probe in flight: id, channel offset of its end, when the kernel took its end.
    pub(super) sent: Option<(u64, u64, Option<Instant>)>,
    /// The peer's probe: id and arrival of its first packet.
    pub(super) first_arrival: Option<(u64, Instant)>,
}

impl Connection {
    /// Asks for a packet-pair probe at the next write opportunity where nothing is staged or
    /// unsent (so each probe frame fills one segment). Ignored if the peer does not answer
    /// probes or one is in flight; returns whether it was requested.
    ///
    /// ```
    /// use lowtide_proto::sim::{LinkParams, Pair};
    /// use lowtide_proto::Config;
    /// let mut pair = Pair::new(Config::default(), Config::default(), LinkParams::default());
    /// assert!(!pair.client.conn.request_probe()); // the peer has not said it answers probes
    /// pair.drive_bounded(10_000); // the hellos cross
    /// assert!(pair.client.conn.request_probe());
    /// pair.drive_bounded(10_000);
    /// assert_eq!(pair.client.conn.stats().probes_sent, 1);
    /// ```
    pub fn request_probe(&mut self) -> bool {
        if !self.probing.peer_answers || self.probing.sent.is_some() {
            return false;
        }
        self.probing.wanted = true;
        true
    }

    /// Stages a wanted probe pair: two frames of one MSS each, first in an empty kernel queue,
    /// so each fills one segment and their dispersion at the receiver is one segment's time at
    /// the bottleneck.
    pub(super) fn stage_probe(&mut self, tcp: &TcpState) {
        if !self.probing.wanted
            || self.staged_len > 0
            || tcp.notsent > 0
            || self.state != State::Open
        {
            return;
        }
        self.probing.wanted = false;
        let id = self.probing.next_id;
        self.probing.next_id += 1;
        let mss = u64::from(tcp.mss_or_default());
        for index in 0..2 {
            self.scratch.clear();
            Frame::probe_of_len(id, index, mss).encode(&mut self.scratch);
            self.small.extend_from_slice(&self.scratch);
            self.staged_len += self.scratch.len() as u64;
        }
        self.probing.sent = Some((id, self.written + self.staged_len, None));
        self.stats.probes_sent += 1;
    }

    /// The peer's probe: time the pair and answer at once (the report leaves with the next
    /// write, which the driver makes right after this read).
    pub(super) fn on_probe(&mut self, now: Instant, id: u64, index: u8, pad_len: u64) {
        match (index, self.probing.first_arrival) {
            (0, _) => self.probing.first_arrival = Some((id, now)),
            (_, Some((first, t0))) if first == id => {
                self.probing.first_arrival = None;
                let mut frame = Vec::new();
                Frame::Probe { id, index, pad_len }.encode(&mut frame);
                Frame::ProbeReport {
                    id,
                    dispersion_us: now.saturating_duration_since(t0).as_micros() as u64,
                    second_len: frame.len() as u64,
                }
                .encode(&mut self.control);
            }
            // a second packet without its first: nothing to time
            _ => {}
        }
    }

    pub(super) fn on_probe_report(
        &mut self,
        now: Instant,
        id: u64,
        dispersion_us: u64,
        second_len: u64,
    ) {
        let Some((sent_id, _, Some(written_at))) = self.probing.sent else {
            self.stats.probe_reports_ignored += 1;
            return;
        };
        if sent_id != id {
            self.stats.probe_reports_ignored += 1;
            return;
        }
        self.probing.sent = None;
        let dispersion = Duration::from_micros(dispersion_us);
        let rtt = now
            .saturating_duration_since(written_at)
            .saturating_sub(dispersion);
        let result = ProbeResult::from_dispersion(
            rtt,
            dispersion,
            second_len.min(u64::from(u32::MAX)) as u32,
            Duration::from_micros(1),
        );
        self.controller.on_probe(&result);
        self.events.push_back(Event::Probed(result));
    }
}
