//! Where a stream's latency tail comes from: every message over [`THRESHOLD_MS`] is put down to
//! one cause, from what the stream's `TCP_INFO` and the network-floor probe saw while it was
//! in flight.
//!
//! Erbad and Krasic ("Sender-side Buffers and the Case for Multimedia Adaptation", the
//! "Connection Manager" section) traced their tail to back-to-back losses and retransmission
//! timeouts with exponential back-off, and cut it with failover to backup connections. Before
//! building that, this measures how much of lowtide's own tail is loss recovery and how much
//! is queueing. For a message sent at `s` and read at `d` (for one never delivered: the end of
//! the measurement), the causes, first match wins:
//!
//! 1. **RTO**: between the last `TCP_INFO` sample at or before `s` and the first at or after
//!    `d`, `tcpi_total_rto` grew, or a sample showed the Loss state or a backed-off timer;
//! 2. **fast retransmit**: `tcpi_total_retrans` grew, or a sample showed the Recovery state;
//! 3. otherwise queueing: **network queue** when the floor probe's one-way latency at `s`
//!    (propagation plus the bottleneck's queue) alone was over the threshold, so the message
//!    would have been late however promptly it was sent; else **sender queue**: what the
//!    send buffer and TCP added on top of the network took it over;
//! 4. **unknown** when no sample brackets the message or no fresh probe was sent before it.
//!
//! Limits: samples are 10 ms apart, so a retransmission within 10 ms of the message's ends may
//! be counted for it; a retransmission while a message was in flight is counted even when it
//! repaired later bytes than the message's (head-of-line blocking only delays later bytes).
//! Both err towards loss recovery.

use serde::{Deserialize, Serialize};

use crate::stream::Sample;
use crate::tcpinfo::{TcpSample, TcpTimeline};

/// Goel et al.'s threshold for interactive latency, used across the lab's reports.
pub const THRESHOLD_MS: f64 = 160.0;

/// How far a message may start before the first sample, or end after the last, and still be
/// bracketed by them (two sampling intervals).
const EDGE_S: f64 = 0.02;

/// `tcpi_ca_state` values (include/uapi/linux/tcp.h).
const CA_RECOVERY: u8 = 3;
const CA_LOSS: u8 = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    Rto,
    FastRetransmit,
    SenderQueue,
    NetworkQueue,
    Unknown,
}

/// The cause of one message's latency. `floor_ms` is the floor probe at its send time, if a
/// fresh one exists; `end_s` is when the measurement ended (a censored message's `d`).
pub fn cause(m: &Sample, tcp: &TcpTimeline, floor_ms: Option<f64>) -> Cause {
    let sent = m.sent_s;
    let read = sent + m.latency_ms / 1e3;
    let samples = &tcp.samples;
    let i = samples.partition_point(|x| x.t_s <= sent);
    let first = match i.checked_sub(1) {
        Some(k) => k,
        None if samples.first().is_some_and(|x| x.t_s - sent <= EDGE_S) => 0,
        None => return Cause::Unknown,
    };
    let j = samples.partition_point(|x| x.t_s < read);
    let last = match samples.get(j) {
        Some(_) => j,
        None if samples
            .last()
            .is_some_and(|x| read - x.t_s <= EDGE_S || m.censored) =>
        {
            samples.len() - 1
        }
        None => return Cause::Unknown,
    };
    let (a, b) = (&samples[first], &samples[last.max(first)]);
    let during = &samples[first..=last.max(first)];
    if timed_out(a, b, during) {
        return Cause::Rto;
    }
    if b.total_retrans > a.total_retrans || during.iter().any(|x| x.ca_state == CA_RECOVERY) {
        return Cause::FastRetransmit;
    }
    match floor_ms {
        Some(f) if f > THRESHOLD_MS => Cause::NetworkQueue,
        Some(_) => Cause::SenderQueue,
        None => Cause::Unknown,
    }
}

fn timed_out(a: &TcpSample, b: &TcpSample, during: &[TcpSample]) -> bool {
    let counted = matches!((a.total_rto, b.total_rto), (Some(x), Some(y)) if y > x);
    counted
        || during
            .iter()
            .any(|x| x.ca_state == CA_LOSS || x.backoff > 0)
}

/// Of the messages over the threshold, how many each cause explains (`summary.json`:
/// `tail_causes`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct TailCauses {
    pub threshold_ms: f64,
    /// Messages sent in the window with latency over the threshold (censored ones included).
    pub over: usize,
    pub rto: usize,
    pub fast_retransmit: usize,
    pub sender_queue: usize,
    pub network_queue: usize,
    /// No `TCP_INFO` sample around the message, or no fresh floor probe before it.
    pub unknown: usize,
}

impl TailCauses {
    pub fn new() -> Self {
        Self {
            threshold_ms: THRESHOLD_MS,
            ..Self::default()
        }
    }

    /// Counts `m` if it is over the threshold.
    pub fn add(&mut self, m: &Sample, tcp: Option<&TcpTimeline>, floor_ms: Option<f64>) {
        if m.latency_ms <= self.threshold_ms {
            return;
        }
        self.over += 1;
        let c = tcp.map_or(Cause::Unknown, |t| cause(m, t, floor_ms));
        *match c {
            Cause::Rto => &mut self.rto,
            Cause::FastRetransmit => &mut self.fast_retransmit,
            Cause::SenderQueue => &mut self.sender_queue,
            Cause::NetworkQueue => &mut self.network_queue,
            Cause::Unknown => &mut self.unknown,
        } += 1;
    }

    /// `count`'s share of the messages over the threshold; `None` when none was.
    pub fn share(&self, count: usize) -> Option<f64> {
        (self.over > 0).then(|| count as f64 / self.over as f64)
    }

    /// "of the 120 messages over 160 ms: 40% RTO, 10% fast retransmit, …", or no data.
    pub fn describe(&self) -> String {
        if self.over == 0 {
            return format!("no message over {:.0} ms", self.threshold_ms);
        }
        let pct = |n| format!("{:.0}%", self.share(n).unwrap_or(0.0) * 100.0);
        let mut text = format!(
            "of the {} messages over {:.0} ms: {} RTO, {} fast retransmit, {} sender queue, {} network queue",
            self.over,
            self.threshold_ms,
            pct(self.rto),
            pct(self.fast_retransmit),
            pct(self.sender_queue),
            pct(self.network_queue),
        );
        if self.unknown > 0 {
            text.push_str(&format!(", {} unknown", pct(self.unknown)));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(t_s: f64, total_retrans: u32, total_rto: u16, backoff: u8, ca_state: u8) -> TcpSample {
        TcpSample {
            t_s,
            cwnd: 10,
            srtt_ms: 100.0,
            rttvar_ms: 5.0,
            total_retrans,
            total_rto: Some(total_rto),
            backoff,
            ca_state,
            lost: 0,
            unacked: 10,
            notsent: 0,
            rto_ms: None,
        }
    }

    /// 10 ms samples from 0 to 2 s; `f` sets each one's loss state.
    fn timeline(f: impl Fn(f64) -> (u32, u16, u8, u8)) -> TcpTimeline {
        TcpTimeline {
            samples: (0..=200)
                .map(|k| {
                    let t = k as f64 * 0.01;
                    let (r, rto, b, ca) = f(t);
                    tcp(t, r, rto, b, ca)
                })
                .collect(),
            ..TcpTimeline::default()
        }
    }

    #[test]
    fn a_timeout_while_in_flight_is_an_rto_even_with_retransmissions() {
        let t = timeline(|t| if t > 1.0 { (5, 1, 0, 0) } else { (0, 0, 0, 0) });
        assert_eq!(
            cause(&Sample::delivered(0.9, 300.0), &t, Some(50.0)),
            Cause::Rto
        );
        // The Loss state or a backed-off timer alone also counts (kernels without total_rto).
        let t = timeline(|t| {
            if (1.0..1.1).contains(&t) {
                (0, 0, 1, 4)
            } else {
                (0, 0, 0, 0)
            }
        });
        assert_eq!(
            cause(&Sample::delivered(0.9, 300.0), &t, Some(50.0)),
            Cause::Rto
        );
    }

    #[test]
    fn retransmissions_without_a_timeout_are_fast_retransmit() {
        let t = timeline(|t| if t > 1.0 { (3, 0, 0, 0) } else { (0, 0, 0, 0) });
        assert_eq!(
            cause(&Sample::delivered(0.9, 300.0), &t, Some(50.0)),
            Cause::FastRetransmit
        );
        // A retransmission after the message was read is not its cause.
        assert_eq!(
            cause(&Sample::delivered(0.5, 200.0), &t, Some(50.0)),
            Cause::SenderQueue
        );
    }

    #[test]
    fn without_loss_a_floor_over_the_threshold_makes_it_the_network() {
        let t = timeline(|_| (0, 0, 0, 0));
        let m = Sample::delivered(0.5, 200.0);
        assert_eq!(cause(&m, &t, Some(170.0)), Cause::NetworkQueue);
        assert_eq!(
            cause(&m, &t, Some(150.0)),
            Cause::SenderQueue,
            "the network alone was on time: the sender's 50 ms took it over"
        );
        assert_eq!(cause(&m, &t, None), Cause::Unknown, "no fresh probe");
    }

    #[test]
    fn messages_outside_the_samples_are_unknown_and_censored_ones_use_the_last() {
        let t = timeline(|t| if t > 1.95 { (1, 0, 0, 0) } else { (0, 0, 0, 0) });
        assert_eq!(
            cause(&Sample::delivered(3.0, 200.0), &t, Some(50.0)),
            Cause::Unknown
        );
        assert_eq!(
            cause(&Sample::delivered(1.9, 500.0), &t, Some(50.0)),
            Cause::Unknown,
            "read 0.4 s after the last sample"
        );
        assert_eq!(
            cause(&Sample::censored(1.5, 2.5), &t, Some(50.0)),
            Cause::FastRetransmit
        );
        assert_eq!(
            cause(
                &Sample::delivered(0.5, 200.0),
                &TcpTimeline::default(),
                Some(50.0)
            ),
            Cause::Unknown
        );
    }

    #[test]
    fn only_messages_over_the_threshold_are_counted_and_shares_have_no_data_when_none_is() {
        let t = timeline(|t| if t > 1.0 { (3, 0, 0, 0) } else { (0, 0, 0, 0) });
        let mut c = TailCauses::new();
        assert_eq!(c.share(0), None);
        assert_eq!(c.describe(), "no message over 160 ms");
        c.add(&Sample::delivered(0.2, 100.0), Some(&t), Some(50.0));
        c.add(&Sample::delivered(0.9, 300.0), Some(&t), Some(50.0));
        c.add(&Sample::delivered(0.2, 170.0), Some(&t), Some(165.0));
        c.add(&Sample::delivered(0.2, 170.0), None, Some(165.0));
        assert_eq!(
            (c.over, c.fast_retransmit, c.network_queue, c.unknown),
            (3, 1, 1, 1)
        );
        assert_eq!(c.share(c.fast_retransmit), Some(1.0 / 3.0));
        assert_eq!(
            c.describe(),
            "of the 3 messages over 160 ms: 0% RTO, 33% fast retransmit, 0% sender queue, 33% network queue, 33% unknown"
        );
    }
}
