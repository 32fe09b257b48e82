//! The receiver's side of RFC 5348 (§6): it measures the receive rate, keeps the loss history
//! ([`crate::loss`]) and sends feedback once per RTT, or at once on a new loss event.
//!
//! - §6.1-6.2: on a data packet, update the loss history; if `p` increased, send feedback now.
//!   When the feedback timer (one RTT, the sender's estimate from the packet header) expires
//!   and data arrived since the last report, send feedback.
//! - §6.3.1: at the first loss event the history is seeded with the interval that would give
//!   `X_target` through the equation: the maximum `X_recv` so far (RFC 3448 took the last
//!   RTT's; in slow start the largest receive rate is about half the largest sending rate).
//!
//! Where we differ:
//! - By default ([`FirstLossSeed::HalfReceiveRate`]) the seed targets half `X_target`, as TCP
//!   halves its window at its first loss: the last RTT of slow start receives about the
//!   bottleneck's rate, which the sender could not keep. [`FirstLossSeed::ReceiveRate`] is
//!   the RFC's rule: for an application-limited stream, which receives exactly its bit rate,
//!   half resumed TFRC below the stream's rate after its first loss event, for tens of
//!   seconds at the lab's 0.9 s RTT (`docs/dbat.md`). It stays an option until a
//!   TCP-friendliness comparison of several runs decides the default (one run each: TFRC's
//!   share 0.56 of cubic's with it, 0.63 without, `docs/tfrc.md`).
//! - Before the first report with a rate, `X_target` is the receive rate of the interval so far.
//!   Not the larger of the last report's `X_recv` and the interval so far (as it once was):
//!   for an application-limited stream whose first loss comes while the bottleneck queue
//!   rises, that is below the stream's rate (77 kbit/s for the lab's 86 kbit/s rung), and
//!   TFRC then ran below the stream for about two seconds (`docs/dbat.md`).
//! - The seed's equation uses the mean size of the data packets received as `s`, as the
//!   sender does (`crate::sender`); with TFRC-SP it is that variant's equation
//!   ([`crate::small_packets`]), whose loss-interval rules the history then applies.
//! - `X_recv` covers the time since the previous periodic report (at least one RTT). The
//!   report the first data packet triggers carries `X_recv` = 0 (one packet has no rate; an
//!   interval of the microseconds until the driver polled gave megabytes per second, which an
//!   application-limited sender kept as its receive limit); the first interval starts at that
//!   report and leaves out the packet that marks its start (counting it put the first
//!   interval's rate one packet high, 5 % for the lab's stream), and a report brought forward by a
//!   loss event repeats the previous `X_recv` without starting a new interval, as Linux's
//!   CCID 3 does (`ccid3_hc_rx_send_feedback`: "we do not have a reliable estimate").

use std::time::{Duration, Instant};

use crate::loss::{Arrival, LossHistory, SeqJump};
use crate::packet::{DataHeader, Feedback};
use serde::{Deserialize, Serialize};

use crate::{equation, small_packets};

/// The rate the first loss interval is seeded for (RFC 5348 §6.3.1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FirstLossSeed {
    /// Half the largest receive rate reported so far (as TCP halves its window).
    #[default]
    HalfReceiveRate,
    /// The largest receive rate reported so far, as the RFC says.
    ReceiveRate,
}

/// RTT assumed before a data packet carries the sender's estimate.
const DEFAULT_RTT: Duration = Duration::from_millis(100);

/// The receiving half of a TFRC endpoint.
#[derive(Debug, Clone)]
pub struct Receiver {
    /// Mean data packet size received, bytes (starts at the segment size, never above it).
    s: f64,
    segment: f64,
    history: LossHistory,
    /// Bytes and start of the current measurement interval.
    bytes_since_report: u64,
    interval_start: Option<Instant>,
    /// The receive rate of the previous interval (repeated by a loss event's report).
    last_x_recv: f64,
    /// The largest receive rate reported so far (§6.3.1's `X_target`).
    max_x_recv: f64,
    /// The last data packet: its timestamp and our arrival time.
    last_data: Option<(u64, Instant)>,
    rtt: Duration,
    feedback_due: Option<Instant>,
    last_p: f64,
    /// The report due was brought forward by a new loss event.
    expedited: bool,
    /// TFRC-SP (RFC 4828).
    small_packets: bool,
    seed: FirstLossSeed,
    /// Reports sent.
    pub reports: u64,
}

impl Receiver {
    /// A receiver for segments of about `s` bytes; `small_packets` for TFRC-SP's rules.
    pub fn new(s: u32, small_packets: bool, seed: FirstLossSeed) -> Self {
        Self {
            s: f64::from(s.max(1)),
            segment: f64::from(s.max(1)),
            history: if small_packets {
                LossHistory::small_packets()
            } else {
                LossHistory::new()
            },
            small_packets,
            seed,
            bytes_since_report: 0,
            interval_start: None,
            last_x_recv: 0.0,
            max_x_recv: 0.0,
            last_data: None,
            rtt: DEFAULT_RTT,
            feedback_due: None,
            last_p: 0.0,
            expedited: false,
            reports: 0,
        }
    }

    /// The loss history.
    pub fn history(&self) -> &LossHistory {
        &self.history
    }

    /// A data packet of `len` bytes arrived at `now`.
    pub fn on_data(
        &mut self,
        now: Instant,
        h: &DataHeader,
        len: usize,
    ) -> Result<Arrival, SeqJump> {
        if h.rtt_us > 0 {
            self.rtt = Duration::from_micros(h.rtt_us);
        }
        self.s += crate::sender::SIZE_WEIGHT * ((len.max(1) as f64).min(self.segment) - self.s);
        let (s, rtt, small_packets) = (self.s, self.rtt, self.small_packets);
        let x_target = if self.max_x_recv > 0.0 {
            self.max_x_recv
        } else {
            self.current_rate(now)
        };
        let recent = match self.seed {
            FirstLossSeed::HalfReceiveRate => x_target / 2.0,
            FirstLossSeed::ReceiveRate => x_target,
        };
        let arrival = self.history.on_packet(h.seq, now, self.rtt, || {
            // §6.3.1: the interval whose equation rate is the receive rate (or half of it)
            let target = recent.max(s / 64.0);
            let p = if small_packets {
                small_packets::loss_rate_for(s, rtt, target)
            } else {
                equation::loss_rate_for(s, rtt, target)
            };
            (1.0 / p).round().max(1.0) as u64
        })?;
        if arrival.late {
            return Ok(arrival);
        }
        self.interval_start.get_or_insert(now);
        self.bytes_since_report += len as u64;
        self.last_data = Some((h.timestamp_us, now));
        if self.feedback_due.is_none() {
            // the first packet: report at once, so the sender learns the RTT
            self.feedback_due = Some(now);
        }
        if self.history.loss_event_rate(now, self.rtt) > self.last_p {
            self.feedback_due = Some(now);
            self.expedited = true;
        }
        Ok(arrival)
    }

    fn current_rate(&self, now: Instant) -> f64 {
        match self.interval_start {
            Some(t) => {
                let dt = now.saturating_duration_since(t).as_secs_f64();
                if dt > 0.0 {
                    self.bytes_since_report as f64 / dt
                } else {
                    0.0
                }
            }
            None => 0.0,
        }
    }

    /// When feedback is due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.feedback_due
    }

    /// The report to send at `now`, if one is due and data arrived since the last one.
    pub fn poll_feedback(&mut self, now: Instant) -> Option<Feedback> {
        let due = self.feedback_due?;
        if due > now {
            return None;
        }
        let Some((echo_us, arrived)) = self.last_data else {
            self.feedback_due = None;
            return None;
        };
        if self.bytes_since_report == 0 {
            // nothing new: wait for data (the next packet re-arms the timer)
            self.feedback_due = None;
            return None;
        }
        let x_recv = if self.reports == 0 {
            // the first packet's report: one packet has no rate yet; the first interval starts
            // here, without that packet (it only marks the start)
            self.bytes_since_report = 0;
            self.interval_start = Some(now);
            0.0
        } else if self.expedited && self.last_x_recv > 0.0 {
            // a loss event's report: the interval so far may be a few packets long
            self.last_x_recv
        } else {
            let x = self.current_rate(now);
            self.bytes_since_report = 0;
            self.interval_start = Some(now);
            x
        };
        let p = self.history.loss_event_rate(now, self.rtt);
        self.last_x_recv = x_recv;
        self.max_x_recv = self.max_x_recv.max(x_recv);
        self.last_p = p;
        self.expedited = false;
        self.feedback_due = Some(now + self.rtt);
        self.reports += 1;
        Some(Feedback {
            echo_us,
            delay_us: now.saturating_duration_since(arrived).as_micros() as u64,
            x_recv: x_recv.min(crate::packet::MAX_REPORTED_RATE as f64) as u64,
            p,
            loss_events: self.history.loss_events,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lab's ladder stream: 440-byte datagrams every 40 ms (11 kB/s), 0.7 s RTT. The
    /// report the first packet triggers carries no receive rate (before: 440 B over the 100 µs
    /// until the driver polled, 4.4 MB/s, which the sender kept as its receive limit while
    /// application-limited); a loss event's report 600 ms after a periodic one repeats that
    /// one's rate (as Linux's CCID 3 does) and restarts the feedback timer, and the next
    /// periodic report measures from the last periodic one.
    #[test]
    fn reports_measure_the_receive_rate_over_whole_intervals() {
        let t0 = Instant::now();
        let mut rx = Receiver::new(1200, true, FirstLossSeed::ReceiveRate);
        let h = |seq: u64| DataHeader {
            seq,
            timestamp_us: 40_000 * seq,
            rtt_us: 700_000,
        };
        let at = |seq: u64| t0 + Duration::from_millis(40 * seq);
        rx.on_data(at(0), &h(0), 440).unwrap();
        let first = rx
            .poll_feedback(at(0) + Duration::from_micros(100))
            .unwrap();
        assert_eq!(first.x_recv, 0);
        let mut reports = vec![];
        for seq in 1..60u64 {
            if seq != 30 {
                rx.on_data(at(seq), &h(seq), 440).unwrap();
            }
            if let Some(fb) = rx.poll_feedback(at(seq)) {
                reports.push((seq, fb));
            }
        }
        // periodic at 0.72 s (packet 18), packet 30's loss known at 33 (three later
        // packets), then one RTT after that report (51)
        let seqs: Vec<u64> = reports.iter().map(|r| r.0).collect();
        assert_eq!(seqs, [18, 33, 51]);
        let rate = |i: usize| reports[i].1.x_recv as f64;
        // packets 1-18 over the 0.72 s since the first arrival (the first packet marks the
        // start: counting it too gave 19 packets, 5 % above the stream's 11 kB/s)
        assert!(
            (rate(0) / (18.0 * 440.0 / 0.72) - 1.0).abs() < 1e-3,
            "{}",
            rate(0)
        );
        assert!(reports[1].1.p > 0.0);
        assert_eq!(reports[1].1.x_recv, reports[0].1.x_recv);
        // 32 packets (one lost) over the 1.32 s since the report at packet 18
        assert!(
            (rate(2) / (32.0 * 440.0 / 1.32) - 1.0).abs() < 1e-3,
            "{}",
            rate(2)
        );
    }

    /// RFC 5348 §6.3.1 with a rising bottleneck queue (the lab's first loss event at full
    /// scale): 440-byte packets sent every 40 ms (11 kB/s) at a 0.7 s RTT; from 9 s each
    /// arrives 8 ms later than the one before it, so the last intervals receive 9.2 kB/s, and
    /// packet 250 is lost. The seed targets the largest receive rate so far, the stream's;
    /// the last interval's (the rule before) would put TFRC 16 % below the stream.
    #[test]
    fn the_first_interval_targets_the_largest_receive_rate_so_far() {
        let rtt = Duration::from_millis(700);
        let t0 = Instant::now();
        let mut rx = Receiver::new(1200, true, FirstLossSeed::ReceiveRate);
        let mut last_report = 0.0;
        for seq in 0..260u64 {
            let sent_ms = 40 * seq;
            let queued_ms = (seq.saturating_sub(225)) * 8;
            let t = t0 + Duration::from_millis(sent_ms + queued_ms);
            if seq != 250 {
                let h = DataHeader {
                    seq,
                    timestamp_us: 1_000 * sent_ms,
                    rtt_us: 700_000,
                };
                rx.on_data(t, &h, 440).unwrap();
            }
            if let Some(fb) = rx.poll_feedback(t) {
                if fb.p == 0.0 {
                    last_report = fb.x_recv as f64;
                }
            }
        }
        assert_eq!(rx.history().loss_events, 1);
        // the last report before the loss measured the slower arrivals
        assert!(last_report < 0.9 * 11_000.0, "{last_report}");
        let p = 1.0 / rx.history().intervals().next().unwrap() as f64;
        let rate = small_packets::allowed_rate(440.0, rtt, p);
        assert!(
            (0.95..1.05).contains(&(rate / 11_000.0)),
            "the seed's rate {rate} B/s, want the stream's 11,000"
        );
    }

    /// RFC 5348 §6.3.1: an application-limited stream of 400-byte packets every 40 ms
    /// (10 kB/s, the lab ladder's 80 kbit/s rung) at a 900 ms RTT loses one packet. The first
    /// loss interval is the one whose equation rate is that receive rate (or half of it, the
    /// default), through TFRC-SP's equation when the variant is on.
    #[test]
    fn the_first_interval_is_seeded_from_the_receive_rate() {
        let rtt = Duration::from_millis(900);
        let cases = [
            (false, FirstLossSeed::ReceiveRate, 10_000.0),
            (true, FirstLossSeed::ReceiveRate, 10_000.0),
            (false, FirstLossSeed::HalfReceiveRate, 5_000.0),
            (true, FirstLossSeed::HalfReceiveRate, 5_000.0),
        ];
        for (small, seed, want) in cases {
            let t0 = Instant::now();
            let mut rx = Receiver::new(1200, small, seed);
            for seq in 0..400u64 {
                let t = t0 + Duration::from_millis(40 * seq);
                if seq != 380 {
                    let h = DataHeader {
                        seq,
                        timestamp_us: 40_000 * seq,
                        rtt_us: 900_000,
                    };
                    rx.on_data(t, &h, 400).unwrap();
                }
                rx.poll_feedback(t);
            }
            assert_eq!(rx.history().loss_events, 1);
            let p = 1.0 / rx.history().intervals().next().unwrap() as f64;
            // (the receiver's mean size is within 1 % of 400 B after 380 packets)
            let rate = if small {
                small_packets::allowed_rate(400.0, rtt, p)
            } else {
                equation::throughput(400.0, rtt, p)
            };
            // within the rounding of the interval to whole packets and the mean size
            assert!(
                (0.95..1.03).contains(&(rate / want)),
                "small_packets {small}, {seed:?}: the seed's rate {rate} B/s, want {want}"
            );
        }
    }
}
