//! The measured streams' TCP state over time: `TCP_INFO` of each sender's socket every
//! 10 ms, recorded beside the messages (`tcpinfo.csv`), so a report can say how many
//! segments a stream retransmitted and how many retransmission timeouts it took, and a
//! message's latency can be matched with the loss recovery around it.
//!
//! The sampler runs on the sender's own runtime (a few microseconds per sample, 100 samples a
//! second) and stops before the channel closes, so it never reads a socket it does not own.
//! It reads the socket the channel uses at each sample: after a failover, the backup's.
//! A sample that fails is counted with its error; a stream with no samples has no data.

use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::results::Window;
use crate::summary::Measured;

/// Time between two samples.
pub const INTERVAL: Duration = Duration::from_millis(10);

/// One `TCP_INFO` reading of a sender's socket.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TcpSample {
    /// Seconds since the run started.
    pub t_s: f64,
    /// Congestion window, segments.
    pub cwnd: u32,
    /// Smoothed RTT and its variation, ms.
    pub srtt_ms: f64,
    pub rttvar_ms: f64,
    /// Segments retransmitted since the connection started (`tcpi_total_retrans`).
    pub total_retrans: u32,
    /// Retransmission timeouts since the connection started (`tcpi_total_rto`, Linux ≥ 6.7).
    pub total_rto: Option<u16>,
    /// Exponential back-off of the retransmission timer (`tcpi_backoff`).
    pub backoff: u8,
    /// Congestion-avoidance state: 0 open, 1 disorder, 2 CWR, 3 recovery, 4 loss (RTO).
    pub ca_state: u8,
    /// Segments believed lost and segments in flight.
    pub lost: u32,
    pub unacked: u32,
    /// Bytes written but not yet sent.
    pub notsent: u32,
    /// The retransmission timeout in force, ms (`tcpi_rto`; None in files written before it
    /// was recorded).
    #[serde(default)]
    pub rto_ms: Option<f64>,
}

/// Every sample of one stream, and the samples that failed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TcpTimeline {
    pub samples: Vec<TcpSample>,
    pub errors: u64,
    pub first_error: Option<String>,
    /// Times the sampled socket changed (failover moved the channel to a backup).
    pub(crate) switches: u32,
    /// The socket of the last sample, and what its cumulative counters add to a later
    /// socket's (the earlier sockets' totals).
    pub(crate) socket: Option<RawFd>,
    pub(crate) carried: Carried,
}

/// The cumulative counters of the sockets sampled before the current one.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Carried {
    total_retrans: u32,
    total_rto: Option<u16>,
}

impl TcpTimeline {
    /// Reads one sample; a failure is counted, not fatal.
    pub fn sample(&mut self, fd: RawFd, start: Instant) {
        match lowtide::sys::tcp_info_ext(fd) {
            Ok(x) => {
                let i = x.info;
                self.push(
                    fd,
                    TcpSample {
                        t_s: Instant::now()
                            .saturating_duration_since(start)
                            .as_secs_f64(),
                        cwnd: i.tcpi_snd_cwnd,
                        srtt_ms: f64::from(i.tcpi_rtt) / 1e3,
                        rttvar_ms: f64::from(i.tcpi_rttvar) / 1e3,
                        total_retrans: i.tcpi_total_retrans,
                        total_rto: x.total_rto,
                        backoff: i.tcpi_backoff,
                        ca_state: i.tcpi_ca_state,
                        lost: i.tcpi_lost,
                        unacked: i.tcpi_unacked,
                        notsent: i.tcpi_notsent_bytes,
                        rto_ms: Some(f64::from(i.tcpi_rto) / 1e3),
                    },
                );
            }
            Err(e) => {
                self.errors += 1;
                self.first_error.get_or_insert_with(|| e.to_string());
            }
        }
    }

    /// Adds a reading of socket `fd`. A new socket's counters start at 0: its readings
    /// continue from the last one of the sockets before, so the timeline's counters stay
    /// cumulative over the channel and a window's differences count every socket's
    /// retransmissions and timeouts.
    fn push(&mut self, fd: RawFd, mut s: TcpSample) {
        if self.socket.is_some_and(|old| old != fd) {
            if let Some(last) = self.samples.last() {
                self.carried = Carried {
                    total_retrans: last.total_retrans,
                    total_rto: last.total_rto,
                };
            }
            self.switches += 1;
        }
        self.socket = Some(fd);
        s.total_retrans = s.total_retrans.saturating_add(self.carried.total_retrans);
        if self.switches > 0 {
            s.total_rto = match (s.total_rto, self.carried.total_rto) {
                (Some(now), Some(before)) => Some(now.saturating_add(before)),
                _ => None,
            };
        }
        self.samples.push(s);
    }

    /// Whether sampling failed outright: errors and not one sample.
    pub fn failed(&self) -> bool {
        self.samples.is_empty() && self.errors > 0
    }
}

/// Samples the channel's socket in use every [`INTERVAL`] until `stop` fires; for a task on
/// the sender's runtime.
pub async fn sample_until(
    fd: lowtide::ActiveFd,
    start: Instant,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> TcpTimeline {
    let mut timeline = TcpTimeline::default();
    let mut tick = tokio::time::interval(INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = tick.tick() => timeline.sample(fd.get(), start),
        }
    }
    timeline
}

/// What a stream's TCP did in the measurement window.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct TransportSummary {
    /// Samples in the window, and samples that failed over the whole run.
    pub samples: usize,
    pub sampling_errors: u64,
    /// Segments retransmitted in the window (fast retransmits and timeouts).
    pub retransmitted_segments: Measured,
    /// Retransmission timeouts in the window: `tcpi_total_rto` where the kernel has it, else
    /// the times `tcpi_backoff` grew between samples (a lower bound).
    pub timeouts: Measured,
    /// Smoothed RTT over the window's samples, ms.
    pub srtt_p50_ms: Measured,
    pub srtt_max_ms: Measured,
}

impl TransportSummary {
    /// Pools runs: counts add up, RTT percentiles come from all samples together.
    pub fn of(timelines: &[&TcpTimeline], w: Window) -> Self {
        let mut retrans = 0u64;
        let mut timeouts = 0u64;
        let mut srtt = vec![];
        let mut samples = 0;
        let mut with_data = 0;
        for t in timelines {
            let inside: Vec<&TcpSample> = t.samples.iter().filter(|s| w.contains(s.t_s)).collect();
            samples += inside.len();
            srtt.extend(inside.iter().map(|s| s.srtt_ms));
            // Counters are cumulative: the window's share is the last reading in it minus the
            // last reading before it (or its first reading).
            let before = t.samples.iter().rev().find(|s| s.t_s < w.from_s);
            let (Some(first), Some(last)) = (before.or(inside.first().copied()), inside.last())
            else {
                continue;
            };
            with_data += 1;
            retrans += u64::from(last.total_retrans.saturating_sub(first.total_retrans));
            timeouts += match (first.total_rto, last.total_rto) {
                (Some(a), Some(b)) => u64::from(b.saturating_sub(a)),
                _ => backoff_rises(&inside),
            };
        }
        srtt.sort_by(f64::total_cmp);
        let median = srtt.get(srtt.len() / 2).copied();
        Self {
            samples,
            sampling_errors: timelines.iter().map(|t| t.errors).sum(),
            retransmitted_segments: Measured::new(Some(retrans as f64), with_data),
            timeouts: Measured::new(Some(timeouts as f64), with_data),
            srtt_p50_ms: Measured::new(median, srtt.len()),
            srtt_max_ms: Measured::new(srtt.last().copied(), srtt.len()),
        }
    }
}

fn backoff_rises(samples: &[&TcpSample]) -> u64 {
    samples
        .windows(2)
        .filter(|p| p[1].backoff > p[0].backoff)
        .count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t_s: f64, total_retrans: u32, total_rto: Option<u16>, backoff: u8) -> TcpSample {
        TcpSample {
            t_s,
            cwnd: 10,
            srtt_ms: 50.0 + t_s,
            rttvar_ms: 5.0,
            total_retrans,
            total_rto,
            backoff,
            ca_state: 0,
            lost: 0,
            unacked: 0,
            notsent: 0,
            rto_ms: Some(250.0),
        }
    }

    #[test]
    fn window_counts_are_differences_of_cumulative_counters() {
        let w = Window {
            from_s: 1.0,
            to_s: 3.0,
        };
        let t = TcpTimeline {
            samples: vec![
                at(0.5, 4, Some(1), 0),
                at(1.5, 10, Some(2), 1),
                at(2.5, 30, Some(5), 0),
                at(3.5, 90, Some(9), 0),
            ],
            ..TcpTimeline::default()
        };
        let s = TransportSummary::of(&[&t], w);
        assert_eq!(s.samples, 2);
        assert_eq!(s.retransmitted_segments.value, Some(26.0));
        assert_eq!(s.timeouts.value, Some(4.0));
        assert_eq!(s.srtt_max_ms.value, Some(52.5));
        // Without tcpi_total_rto: rises of the back-off, a lower bound.
        let old = TcpTimeline {
            samples: vec![
                at(1.2, 0, None, 0),
                at(1.4, 1, None, 1),
                at(1.6, 2, None, 2),
            ],
            ..TcpTimeline::default()
        };
        assert_eq!(TransportSummary::of(&[&old], w).timeouts.value, Some(2.0));
    }

    #[test]
    fn counters_stay_cumulative_across_a_switch_to_another_socket() {
        let mut t = TcpTimeline::default();
        t.push(5, at(0.5, 4, Some(1), 0));
        t.push(5, at(1.5, 10, Some(2), 0));
        // Failover: the backup's socket counts from 0 again.
        t.push(7, at(2.0, 0, Some(0), 0));
        t.push(7, at(2.5, 3, Some(1), 0));
        let retrans: Vec<u32> = t.samples.iter().map(|s| s.total_retrans).collect();
        let rto: Vec<Option<u16>> = t.samples.iter().map(|s| s.total_rto).collect();
        assert_eq!(retrans, vec![4, 10, 10, 13]);
        assert_eq!(rto, vec![Some(1), Some(2), Some(2), Some(3)]);
        assert_eq!(t.switches, 1);
        let w = Window {
            from_s: 1.0,
            to_s: 3.0,
        };
        let s = TransportSummary::of(&[&t], w);
        assert_eq!(s.retransmitted_segments.value, Some(9.0), "10 - 4 + 3");
        assert_eq!(s.timeouts.value, Some(2.0));
        // A kernel without tcpi_total_rto on one socket: no count across the switch.
        t.push(9, at(2.8, 1, None, 0));
        assert_eq!(
            (t.samples[4].total_retrans, t.samples[4].total_rto),
            (14, None)
        );
    }

    #[test]
    fn a_failed_sampler_is_no_data() {
        let mut t = TcpTimeline::default();
        t.sample(-1, Instant::now());
        assert!(t.failed() && t.first_error.as_deref().unwrap().contains("TCP_INFO"));
        let s = TransportSummary::of(
            &[&t],
            Window {
                from_s: 0.0,
                to_s: 1.0,
            },
        );
        assert_eq!(s.sampling_errors, 1);
        assert_eq!(s.timeouts.value, None);
        assert_eq!(s.retransmitted_segments.samples, 0);
        assert_eq!(s.srtt_p50_ms.value, None);
    }
}
