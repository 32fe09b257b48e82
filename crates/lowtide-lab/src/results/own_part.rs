//! lowtide's own part of a message's latency: what the sender decides, apart from what the
//! path does to the packets.
//!
//! Goel et al. ("Low-Latency Adaptive Streaming over TCP", Section 3) put a message's latency
//! at the sender down to the data queued ahead of it: the application's queue and the kernel
//! send buffer. On a drop-tail path a third part is the path's own: every in-order byte behind
//! a lost segment waits for its repair, about one loaded round trip, however little was queued
//! (Section 5.2: each spike in Fig. 3 is a drop costing an extra RTT). This module measures the
//! first two for each message sent over lowtide:
//! - **lowtide's queue**: from the send call to its last byte's write into the kernel
//!   (`Event::Written`, [`Sample::written_ms`]);
//! - **the kernel's unsent bytes ahead of it**: `tcpi_notsent_bytes` in the last `TCP_INFO`
//!   sample at or before that write, as the time the congestion window takes to release them
//!   (one window a smoothed RTT), in segments of [`MSS_BYTES`].
//!
//! Limits: samples are 10 ms apart, so the unsent bytes are those of a sample up to 10 ms
//! before the write; the MSS is the lab's (1500-byte MTU with TCP timestamps), not read from
//! the socket. A message never written whole by the end of the measurement was held by
//! lowtide the whole time: its wait is a lower bound (censored). Messages of transports that
//! report no writes (QUIC, TFRC, probes) have no own part here.

use crate::stream::Sample;
use crate::summary::LatencySummary;
use crate::tcpinfo::TcpTimeline;

/// The lab's segment size: a 1500-byte MTU less IPv4, TCP and the timestamp option.
pub const MSS_BYTES: f64 = 1448.0;

/// lowtide's own part of each message's latency, collected over a variant's trials.
#[derive(Default)]
pub(super) struct OwnPart {
    delivered: Vec<f64>,
    censored: Vec<f64>,
}

impl OwnPart {
    /// Adds the messages of one trial's stream; nothing when the stream reported no write
    /// (another transport).
    pub(super) fn add(&mut self, samples: &[&Sample], tcp: Option<&TcpTimeline>) {
        if !samples.iter().any(|s| s.written_ms.is_some()) {
            return;
        }
        for s in samples {
            match s.written_ms {
                Some(w) => {
                    let ahead = tcp.map_or(0.0, |t| unsent_ahead_ms(t, s.sent_s + w / 1e3));
                    let own = w + ahead;
                    if s.censored {
                        self.censored.push(own);
                    } else {
                        self.delivered.push(own);
                    }
                }
                // Still in lowtide's queue when the measurement ended.
                None if s.censored => self.censored.push(s.latency_ms),
                // Delivered but its write not reported (events dropped): left out.
                None => {}
            }
        }
    }

    pub(super) fn summary(&self) -> LatencySummary {
        LatencySummary::with_censored(&self.delivered, &self.censored)
    }
}

/// The time the congestion window takes to release the kernel's unsent bytes at `t_s`, ms: the
/// last sample at or before `t_s`; 0 without one or with an empty window.
pub fn unsent_ahead_ms(tcp: &TcpTimeline, t_s: f64) -> f64 {
    let i = tcp.samples.partition_point(|x| x.t_s <= t_s);
    let Some(x) = i.checked_sub(1).map(|k| &tcp.samples[k]) else {
        return 0.0;
    };
    if x.cwnd == 0 {
        return 0.0;
    }
    f64::from(x.notsent) / MSS_BYTES / f64::from(x.cwnd) * x.srtt_ms
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tcpinfo::TcpSample;

    fn tcp_sample(t_s: f64, cwnd: u32, notsent: u32) -> TcpSample {
        TcpSample {
            t_s,
            cwnd,
            srtt_ms: 100.0,
            rttvar_ms: 5.0,
            total_retrans: 0,
            total_rto: Some(0),
            backoff: 0,
            ca_state: 0,
            lost: 0,
            unacked: cwnd,
            notsent,
            rto_ms: Some(300.0),
        }
    }

    fn written(sent_s: f64, latency_ms: f64, written_ms: f64) -> Sample {
        Sample {
            written_ms: Some(written_ms),
            ..Sample::delivered(sent_s, latency_ms)
        }
    }

    #[test]
    fn the_own_part_is_the_queue_plus_the_unsent_bytes_ahead() {
        let tcp = TcpTimeline {
            samples: vec![tcp_sample(1.0, 10, 0), tcp_sample(1.01, 10, 5 * 1448)],
            ..TcpTimeline::default()
        };
        // Written 20 ms after its send at 1.0 s: 5 segments unsent ahead of it with a window of
        // 10 and a 100 ms RTT take 50 ms more. Its 300 ms latency (a loss repair) is not ours.
        let a = written(1.0, 300.0, 20.0);
        // Written at once at 1.0 s with nothing unsent.
        let b = written(1.0, 100.0, 0.0);
        // Never written: held by lowtide until the end, a lower bound.
        let c = Sample::censored(1.0, 2.0);
        let mut own = OwnPart::default();
        own.add(&[&a, &b, &c], Some(&tcp));
        let s = own.summary();
        assert_eq!((s.count, s.censored), (3, 1));
        assert_eq!(s.p50, Some(70.0));
        assert_eq!(s.max, Some(1000.0));
        assert!(s.is_lower_bound("max"));
    }

    #[test]
    fn another_transport_has_no_own_part() {
        let mut own = OwnPart::default();
        own.add(&[&Sample::delivered(1.0, 100.0)], None);
        assert_eq!(own.summary().count, 0);
        assert_eq!(own.summary().p99, None);
    }
}
