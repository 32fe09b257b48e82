//! The sender's rate control, RFC 5348 §4.
//!
//! - §4.2 initialisation: one packet per second until the first feedback, the no-feedback
//!   timer at 2 s; `X_recv_set` holds one entry, infinity.
//! - §4.3 on feedback: `R_sample = (t_now − t_recvdata) − t_delay`; `R = q·R + (1 − q)·R_sample`
//!   with `q = 0.9`; `RTO = max(4R, 2s/X)`; the receive limit from `X_recv_set` (data-limited
//!   intervals maximise it, a loss in a data-limited interval halves it); then
//!   `X = max(min(X_Bps, recv_limit), s/t_mbi)` when `p > 0`, else slow start:
//!   `X = max(min(2X, recv_limit), initial_rate)` once per RTT, `initial_rate = W_init/R`,
//!   `W_init = min(4s, max(2s, 4380))`.
//! - §4.4 the no-feedback timer halves the rate (through `X_recv_set` once `p > 0`), except
//!   while idle at a rate already low.
//! - §4.6 packets leave at intervals `t_ipi = s/X`.
//!
//! Where we differ:
//! - Scheduling (§4.6) keeps no credit: a packet may leave `t_ipi` after the previous one, or
//!   at once after an idle period, never in a burst. The gap after a packet is computed with
//!   the rate in force when the next one is due, so a higher `X` (the first feedback raises it
//!   from one packet per second) applies at once.
//! - [`RateControl::with_send_burst`] (an experiment, off by default) sends bursts of up to
//!   `n` packets at the average rate `X`, up to `n − 1` packets ahead of the schedule. §4.6
//!   lets a packet leave at most `t_delta = min(t_ipi, t_gran)/2` early, so beyond a pair
//!   this is not the RFC's rule: it measures what an ACK clock's small bursts would change at
//!   a drop-tail queue (`docs/tfrc.md`).
//! - "Data-limited" (§4.3, §8.2) is judged by the sender: an interval is data-limited unless
//!   a packet waited for the rate at some point since the previous feedback.
//! - Between slow-start doublings (less than an RTT since the last) a lower receive limit
//!   applies at once, down to the initial rate; the RFC changes `X` only once per RTT.
//! - An RTT measured before the first report (the session's packet-pair probe,
//!   [`RateControl::on_handshake_rtt`]) sets `R` and `X = W_init/R` at once, as a DCCP
//!   handshake's RTT does for CCID 3 (RFC 4342 §5; Linux's `ccid3_hc_tx_send_packet`), instead
//!   of one packet per second until the first report (§4.2 speaks of a sender "when it does
//!   not yet have a round-trip sample"). The first report's sample replaces it.
//! - `W_init` is RFC 5348's (RFC 3390's `min(4s, max(2s, 4380))`) by default; with
//!   [`InitialWindow::Rfc6928`] it is TCP's of RFC 6928, `min(10s, max(2s, 14600))`, the
//!   window the Linux TCP flows beside it start with. At the lab's 0.7 s RTT the RFC's 4,380
//!   bytes are 50 kbit/s, below the bit-rate ladder's lowest rung (86 kbit/s with headers),
//!   so the stream's first RTT queued a backlog, and a loss event then seeded TFRC's history
//!   from that start's receive rate (`docs/dbat.md`).
//! - The optional oscillation damping (§4.5) is not implemented.
//! - `s` in the equation is the average size of the data packets sent (§4.1: when the size
//!   varies with the data, the sender estimates it as an average over recent loss intervals,
//!   or uses the maximum). Ours is an exponentially weighted mean over about 64 packets
//!   ([`SIZE_WEIGHT`]), starting at the configured segment size. The receiver counts loss
//!   intervals in packets, so with the maximum a flow of half-empty packets (a message one byte
//!   longer than a packet's payload is a full packet and a tiny one) would see half the loss
//!   event rate of full-sized packets and send about `√2` times too fast, in bytes. `W_init`,
//!   `s/t_mbi` and the RTO's `2s/X` keep the configured segment size.
//! - `X` is never above what the equation allows for the reported `p` and never above
//!   `recv_limit`; property tests check this for arbitrary feedback sequences.
//! - With [`RateControl::with_small_packets`] the equation is TFRC-SP's (RFC 4828: `s` = 1460
//!   and the header penalty, [`crate::small_packets`]) and packets leave at least 10 ms apart.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::packet::Feedback;
use crate::{equation, small_packets};

/// The initial window `W_init` (RFC 5348 §4.2), bytes, for segments of `s` bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum InitialWindow {
    /// RFC 5348's (TCP's of RFC 3390): `min(4s, max(2s, 4380))`.
    #[default]
    Rfc3390,
    /// TCP's of RFC 6928 (Linux's since 2.6.39): `min(10s, max(2s, 14600))`, as the TCP
    /// flows beside this one start.
    Rfc6928,
}

impl InitialWindow {
    /// `W_init` in bytes for segments of `s` bytes.
    pub fn bytes(self, s: f64) -> f64 {
        match self {
            InitialWindow::Rfc3390 => (4.0 * s).min((2.0 * s).max(4380.0)),
            InitialWindow::Rfc6928 => (10.0 * s).min((2.0 * s).max(14600.0)),
        }
    }
}

/// `t_mbi`: the longest interval between packets, 64 s (RFC 5348 §4.3).
pub const T_MBI: Duration = Duration::from_secs(64);
/// The RTT filter's `q` (RFC 5348 §4.3).
pub const RTT_FILTER_Q: f64 = 0.9;
/// Weight of one packet in the mean packet size the equation uses.
pub const SIZE_WEIGHT: f64 = 1.0 / 64.0;

/// Why a feedback packet was refused (the sender's state is unchanged).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FeedbackError {
    /// It echoes a timestamp later than any data packet we sent.
    #[error("feedback echoes t_recvdata = {echo_us} µs, later than our last data packet at {last_sent_us} µs (a report from the future)")]
    FromTheFuture {
        /// Echoed timestamp.
        echo_us: u64,
        /// Our latest data timestamp.
        last_sent_us: u64,
    },
    /// It arrived before any data packet was sent.
    #[error("feedback before any data packet was sent")]
    NothingSent,
    /// `t_delay` exceeds the time since the echoed packet: the RTT sample would be negative.
    #[error(
        "feedback t_delay = {delay_us} µs exceeds the {elapsed_us} µs since the echoed packet"
    )]
    DelayTooLong {
        /// Reported delay.
        delay_us: u64,
        /// Time since the echoed packet was sent.
        elapsed_us: u64,
    },
}

/// RFC 5348's sender state. Rates are bytes per second, `s` is the segment size.
#[derive(Debug, Clone)]
pub struct RateControl {
    s: f64,
    /// Mean data packet size, bytes (the equation's `s`).
    mean_size: f64,
    x: f64,
    r: Option<Duration>,
    p: f64,
    loss_events: u64,
    tld: Option<Instant>,
    /// (time, rate) entries; `f64::INFINITY` until the first report.
    x_recv_set: Vec<(Instant, f64)>,
    x_recv: f64,
    x_bps: f64,
    recv_limit: f64,
    nofeedback: Instant,
    got_feedback: bool,
    /// A packet waited for the rate since the last feedback (the interval was not data-limited).
    rate_limited: bool,
    /// Nothing was sent since the no-feedback timer was last set.
    idle_since_timer: bool,
    /// The slot in the schedule of the last data packet (of the last burst's first), and the
    /// bytes and packets sent from it: the next may leave `bytes / X` later, with `X` as it is
    /// then (a rate change applies at once).
    last_slot: Option<(Instant, usize, u32)>,
    /// Packets per burst ([`RateControl::with_send_burst`]; 1: evenly paced).
    burst: u32,
    /// Packets of the current burst that may still leave before their slots.
    burst_left: u32,
    last_sent_us: Option<u64>,
    /// TFRC-SP (RFC 4828).
    small_packets: bool,
    initial_window: InitialWindow,
}

impl RateControl {
    /// A sender for segments of `s` bytes, started at `now` (RFC 5348 §4.2).
    pub fn new(s: u32, now: Instant) -> Self {
        let s = f64::from(s.max(1));
        Self {
            s,
            mean_size: s,
            x: s, // one packet per second
            r: None,
            p: 0.0,
            loss_events: 0,
            tld: None,
            x_recv_set: vec![(now, f64::INFINITY)],
            x_recv: 0.0,
            x_bps: f64::INFINITY,
            recv_limit: f64::INFINITY,
            nofeedback: now + Duration::from_secs(2),
            got_feedback: false,
            rate_limited: false,
            idle_since_timer: true,
            last_slot: None,
            burst: 1,
            burst_left: 0,
            last_sent_us: None,
            small_packets: false,
            initial_window: InitialWindow::default(),
        }
    }

    /// With `W_init` from `w` (RFC 5348 §4.2's by default).
    pub fn with_initial_window(mut self, w: InitialWindow) -> Self {
        self.initial_window = w;
        self
    }

    /// Data packets leave in bursts of up to `packets` (at least 1): the first when its slot
    /// in the schedule is due, the rest of the burst at once, ahead of their slots; the next
    /// burst waits for its first packet's slot. The average rate is `X` as before; the sender
    /// is never more than `packets − 1` packets ahead of the evenly paced schedule.
    pub fn with_send_burst(mut self, packets: u32) -> Self {
        self.burst = packets.max(1);
        self
    }

    /// With TFRC-SP's equation and minimum interval (RFC 4828 §3) when `on`.
    pub fn with_small_packets(mut self, on: bool) -> Self {
        self.small_packets = on;
        self
    }

    /// The allowed rate `X`, bytes per second.
    pub fn rate(&self) -> f64 {
        self.x
    }
    /// The RTT estimate `R`.
    pub fn rtt(&self) -> Option<Duration> {
        self.r
    }
    /// The loss event rate last reported.
    pub fn loss_event_rate(&self) -> f64 {
        self.p
    }
    /// The equation's rate for the reported `p` and `R` (infinite while `p = 0`).
    pub fn equation_rate(&self) -> f64 {
        self.x_bps
    }
    /// The receive limit in force (`2·max(X_recv_set)` or as §4.3 sets it).
    pub fn recv_limit(&self) -> f64 {
        self.recv_limit
    }
    /// The receive rate last reported.
    pub fn x_recv(&self) -> f64 {
        self.x_recv
    }
    /// Whether slow start (`p = 0`) is still on.
    pub fn in_slow_start(&self) -> bool {
        self.p == 0.0
    }
    /// The mean size of the data packets sent, bytes: the equation's `s`.
    pub fn mean_packet_size(&self) -> f64 {
        self.mean_size
    }
    /// When the no-feedback timer expires.
    pub fn nofeedback_deadline(&self) -> Instant {
        self.nofeedback
    }

    fn w_init(&self) -> f64 {
        self.initial_window.bytes(self.s)
    }

    fn min_rate(&self) -> f64 {
        self.s / T_MBI.as_secs_f64()
    }

    /// The earliest time the next data packet may leave (`now` if it may leave now).
    pub fn next_send_time(&self, now: Instant) -> Instant {
        self.due().map_or(now, |t| t.max(now))
    }

    /// When the next packet may leave: at once within a burst, else its slot.
    fn due(&self) -> Option<Instant> {
        if self.burst_left > 0 {
            return None;
        }
        self.slot_due()
    }

    /// The next packet's slot in the schedule (`t_ipi = s/X` after the last one's slot, or
    /// the whole burst's bytes over `X` after the burst's first).
    fn slot_due(&self) -> Option<Instant> {
        self.last_slot
            .map(|(t, bytes, packets)| t + self.interval(bytes, packets))
    }

    /// The time `bytes` in `packets` take at `X` (TFRC-SP: at least 10 ms per packet).
    fn interval(&self, bytes: usize, packets: u32) -> Duration {
        let ipi = Duration::from_secs_f64(bytes.max(1) as f64 / self.x);
        if self.small_packets {
            ipi.max(small_packets::MIN_INTERVAL * packets)
        } else {
            ipi
        }
    }

    /// Data is waiting and may not leave before [`next_send_time`](Self::next_send_time): the
    /// current interval is not data-limited.
    pub fn note_waiting(&mut self, now: Instant) {
        if self.next_send_time(now) > now {
            self.rate_limited = true;
        }
    }

    /// A data packet of `len` bytes with timestamp `ts_us` left at `now`.
    pub fn on_sent(&mut self, now: Instant, len: usize, ts_us: u64) {
        let ipi = self.interval(len, 1);
        match (self.slot_due(), self.last_slot.as_mut()) {
            // ahead of its slot: part of the burst the last slot opened
            (Some(due), Some(last)) if self.burst_left > 0 && now < due => {
                self.burst_left -= 1;
                last.1 += len;
                last.2 += 1;
            }
            (due, _) => {
                // A packet sent a little late keeps the schedule (timer granularity must not
                // lower the rate); after an idle period the schedule restarts from now (no
                // credit).
                let slot = match due {
                    Some(t) if now <= t + ipi => t,
                    _ => now,
                };
                self.last_slot = Some((slot, len, 1));
                self.burst_left = self.burst - 1;
            }
        }
        // (never above the segment size: the equation's rate stays within what `s` allows)
        let size = (len.max(1) as f64).min(self.s);
        self.mean_size += SIZE_WEIGHT * (size - self.mean_size);
        self.idle_since_timer = false;
        self.last_sent_us = Some(ts_us);
    }

    /// An RTT measured before any report (the packet-pair probe): `R` = `rtt` and
    /// `X = W_init/R` if that is higher. Ignored once a report has arrived, or when zero.
    pub fn on_handshake_rtt(&mut self, rtt: Duration) {
        if self.got_feedback || rtt.is_zero() {
            return;
        }
        self.r = Some(rtt);
        self.x = self.x.max(self.w_init() / rtt.as_secs_f64());
    }

    /// A feedback packet arrived at `now` (`now_us` on our wire clock).
    pub fn on_feedback(
        &mut self,
        now: Instant,
        now_us: u64,
        fb: &Feedback,
    ) -> Result<(), FeedbackError> {
        let last_sent_us = self.last_sent_us.ok_or(FeedbackError::NothingSent)?;
        if fb.echo_us > last_sent_us {
            return Err(FeedbackError::FromTheFuture {
                echo_us: fb.echo_us,
                last_sent_us,
            });
        }
        let elapsed_us = now_us.saturating_sub(fb.echo_us);
        if fb.delay_us > elapsed_us {
            return Err(FeedbackError::DelayTooLong {
                delay_us: fb.delay_us,
                elapsed_us,
            });
        }
        // 1-2: RTT sample and filter
        let sample = Duration::from_micros((elapsed_us - fb.delay_us).max(1));
        // (the first report's sample replaces a handshake's RTT)
        let r = match self.r.filter(|_| self.got_feedback) {
            None => sample,
            Some(r) => r.mul_f64(RTT_FILTER_Q) + sample.mul_f64(1.0 - RTT_FILTER_Q),
        };
        self.r = Some(r);
        let x_recv = fb.x_recv as f64;
        self.x_recv = x_recv;
        // 4: the receive limit
        let new_loss = fb.loss_events > self.loss_events || fb.p > self.p;
        if !self.rate_limited {
            if new_loss {
                for e in &mut self.x_recv_set {
                    e.1 /= 2.0;
                }
                self.maximize_x_recv_set(now, 0.85 * x_recv);
                self.recv_limit = self.max_x_recv_set();
            } else {
                self.maximize_x_recv_set(now, x_recv);
                self.recv_limit = 2.0 * self.max_x_recv_set();
            }
        } else {
            self.x_recv_set.push((now, x_recv));
            let horizon = r * 2;
            self.x_recv_set
                .retain(|&(t, _)| now.saturating_duration_since(t) <= horizon);
            self.recv_limit = 2.0 * self.max_x_recv_set();
        }
        self.p = fb.p;
        self.loss_events = self.loss_events.max(fb.loss_events);
        self.update_rate(now, r);
        // 5: restart the no-feedback timer
        self.nofeedback = now + self.rto(r);
        self.idle_since_timer = true;
        self.rate_limited = false;
        self.got_feedback = true;
        Ok(())
    }

    fn rto(&self, r: Duration) -> Duration {
        (r * 4).max(Duration::from_secs_f64(2.0 * self.s / self.x))
    }

    fn max_x_recv_set(&self) -> f64 {
        self.x_recv_set.iter().map(|e| e.1).fold(0.0, f64::max)
    }

    /// Maximize_X_recv_set(): keep one entry, the largest of the set and `x_recv`.
    fn maximize_x_recv_set(&mut self, now: Instant, x_recv: f64) {
        let m = self.max_x_recv_set().max(x_recv);
        // the initial infinity stands only until a real report arrives
        let m = if m.is_finite() { m } else { x_recv };
        self.x_recv_set = vec![(now, m)];
    }

    fn update_rate(&mut self, now: Instant, r: Duration) {
        let initial_rate = self.w_init() / r.as_secs_f64();
        if self.p > 0.0 {
            self.x_bps = if self.small_packets {
                small_packets::allowed_rate(self.mean_size, r, self.p)
            } else {
                equation::throughput(self.mean_size, r, self.p)
            };
            self.x = self.x_bps.min(self.recv_limit).max(self.min_rate());
        } else {
            self.x_bps = f64::INFINITY;
            if self
                .tld
                .is_none_or(|t| now.saturating_duration_since(t) >= r)
            {
                self.x = (2.0 * self.x).min(self.recv_limit).max(initial_rate);
                self.tld = Some(now);
            } else {
                // not yet an RTT since the last doubling: X does not grow, but a lower receive
                // limit applies at once (down to the initial rate)
                self.x = self.x.min(self.recv_limit).max(self.x.min(initial_rate));
            }
        }
    }

    /// The no-feedback timer expired (RFC 5348 §4.4).
    pub fn on_nofeedback_timeout(&mut self, now: Instant) {
        let min = self.min_rate();
        match self.r {
            None => {
                // no RTT sample yet: halve
                self.x = (self.x / 2.0).max(min);
            }
            Some(r) => {
                let recover_rate = self.w_init() / r.as_secs_f64();
                let low = if self.p > 0.0 {
                    self.x_recv < recover_rate
                } else {
                    self.x < 2.0 * recover_rate
                };
                if low && self.idle_since_timer {
                    // idle at a low rate: keep it
                } else if self.p == 0.0 {
                    self.x = (self.x / 2.0).max(min);
                } else {
                    let limit = if self.x_bps > 2.0 * self.x_recv {
                        self.x_recv
                    } else {
                        self.x_bps / 2.0
                    };
                    // Update_Limits(timer_limit)
                    let limit = limit.max(min);
                    self.x_recv_set = vec![(now, limit / 2.0)];
                    self.recv_limit = limit;
                    self.update_rate(now, r);
                }
            }
        }
        let r = self.r.unwrap_or(Duration::ZERO);
        self.nofeedback = now
            + self.rto(r).max(if self.got_feedback {
                Duration::ZERO
            } else {
                Duration::from_secs(2)
            });
        self.idle_since_timer = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fb(echo_us: u64, x_recv: u64, p: f64, loss_events: u64) -> Feedback {
        Feedback {
            echo_us,
            delay_us: 0,
            x_recv,
            p,
            loss_events,
        }
    }

    #[test]
    fn starts_at_one_packet_per_second_then_w_init_over_r_and_doubles_per_rtt() {
        let t0 = Instant::now();
        let mut rc = RateControl::new(1000, t0);
        assert_eq!(rc.rate(), 1000.0);
        rc.on_sent(t0, 1000, 0);
        // feedback after 100 ms: R = 100 ms, X = W_init/R = 4000/0.1
        let t = t0 + Duration::from_millis(100);
        rc.on_feedback(t, 100_000, &fb(0, 1000, 0.0, 0)).unwrap();
        assert_eq!(rc.rtt(), Some(Duration::from_millis(100)));
        assert!((rc.rate() - 40_000.0).abs() < 1e-6, "{}", rc.rate());
        // one RTT later, receiving 40 kB/s: doubles (limit 2·X_recv = 80 kB/s)
        rc.on_sent(t, 1000, 100_000);
        let t = t0 + Duration::from_millis(200);
        rc.on_feedback(t, 200_000, &fb(100_000, 40_000, 0.0, 0))
            .unwrap();
        assert!((rc.rate() - 80_000.0).abs() < 1e-6, "{}", rc.rate());
        // the receive rate caps slow start: receiving only 30 kB/s gives at most 60 kB/s
        rc.on_sent(t, 1000, 200_000);
        let t = t0 + Duration::from_millis(300);
        rc.on_feedback(t, 300_000, &fb(200_000, 30_000, 0.0, 0))
            .unwrap();
        assert!(rc.rate() <= 80_000.0 + 1e-6);
    }

    /// RFC 6928's window: ten 1200-byte segments (12,000 B, under the 14,600-byte cap), and
    /// the 14,600-byte cap for 1460-byte segments; at the lab's 0.7 s probe RTT the first rate
    /// is 137 kbit/s, above the ladder's 80 kbit/s rung (86 kbit/s with headers), where RFC
    /// 5348's 4,380 bytes give 50 kbit/s and a backlog in the stream's first RTT.
    #[test]
    fn rfc6928_starts_at_ten_segments_per_rtt() {
        assert_eq!(InitialWindow::Rfc6928.bytes(1200.0), 12_000.0);
        assert_eq!(InitialWindow::Rfc6928.bytes(1460.0), 14_600.0);
        assert_eq!(InitialWindow::Rfc6928.bytes(9000.0), 18_000.0);
        assert_eq!(InitialWindow::Rfc3390.bytes(1200.0), 4380.0);
        let t0 = Instant::now();
        let rtt = Duration::from_millis(700);
        let mut rc = RateControl::new(1200, t0).with_initial_window(InitialWindow::Rfc6928);
        rc.on_handshake_rtt(rtt);
        assert!(
            (rc.rate() * 8.0 - 137_142.857).abs() < 0.01,
            "{}",
            rc.rate()
        );
        let mut std = RateControl::new(1200, t0);
        std.on_handshake_rtt(rtt);
        assert!(
            (std.rate() * 8.0 - 50_057.142).abs() < 0.01,
            "{}",
            std.rate()
        );
        // the first report (no receive rate yet: `X_recv` = 0) keeps `W_init/R`
        rc.on_sent(t0, 1200, 0);
        let t = t0 + rtt;
        rc.on_feedback(t, 700_000, &fb(0, 0, 0.0, 0)).unwrap();
        assert!((rc.rate() - 12_000.0 / 0.7).abs() < 1e-6, "{}", rc.rate());
        assert_eq!(rc.recv_limit(), 0.0);
    }

    /// The probe's 900 ms RTT: `X = W_init/R` = 4380/0.9 B/s before any report, not one
    /// packet per second; the first report's sample (800 ms) replaces it, not filtered with it.
    #[test]
    fn a_handshake_rtt_starts_at_w_init_over_r() {
        let t0 = Instant::now();
        let mut rc = RateControl::new(1200, t0);
        rc.on_handshake_rtt(Duration::ZERO);
        assert_eq!((rc.rate(), rc.rtt()), (1200.0, None));
        rc.on_handshake_rtt(Duration::from_millis(900));
        assert!((rc.rate() - 4380.0 / 0.9).abs() < 1e-6, "{}", rc.rate());
        assert_eq!(rc.rtt(), Some(Duration::from_millis(900)));
        rc.on_sent(t0, 1200, 0);
        let t = t0 + Duration::from_millis(800);
        rc.on_feedback(t, 800_000, &fb(0, 4800, 0.0, 0)).unwrap();
        assert_eq!(rc.rtt(), Some(Duration::from_millis(800)));
        // a later handshake RTT changes nothing
        let x = rc.rate();
        rc.on_handshake_rtt(Duration::from_millis(50));
        assert_eq!((rc.rate(), rc.rtt()), (x, Some(Duration::from_millis(800))));
    }

    #[test]
    fn with_loss_the_rate_follows_the_equation() {
        let t0 = Instant::now();
        let mut rc = RateControl::new(1460, t0);
        rc.on_sent(t0, 1460, 0);
        let t = t0 + Duration::from_millis(100);
        rc.note_waiting(t);
        rc.on_sent(t, 1460, 100_000);
        rc.note_waiting(t);
        rc.on_feedback(t, 100_000, &fb(0, 10_000_000, 0.01, 1))
            .unwrap();
        // R = 100 ms, p = 0.01: the equation's 164005.06 B/s (see equation.rs)
        assert!((rc.equation_rate() - 164_005.062_169_97).abs() < 1e-3);
        assert!((rc.rate() - 164_005.062_169_97).abs() < 1e-3);
    }

    /// A 1448-byte message over 1472-byte segments leaves as a full packet and a tiny one.
    /// The receiver counts loss intervals in packets, so the equation's `s` must be their mean
    /// (here 750 B): with the segment size the rate was `√(1472/750)` ≈ 1.4 times too high in
    /// bytes, which the TCP-friendliness lab run showed (TFRC 2.4 times cubic's share).
    #[test]
    fn the_equation_uses_the_mean_packet_size() {
        let t0 = Instant::now();
        let mut rc = RateControl::new(1472, t0);
        let mut t = t0;
        for i in 0..2000u64 {
            rc.on_sent(t, if i % 2 == 0 { 1400 } else { 100 }, i + 1);
            t += Duration::from_micros(50);
        }
        assert!((rc.mean_packet_size() - 750.0).abs() < 750.0 * 0.01);
        rc.note_waiting(t);
        rc.on_feedback(t, 100_000 + 2000, &fb(2000, 10_000_000, 0.01, 1))
            .unwrap();
        let r = rc.rtt().unwrap();
        let expect = equation::throughput(rc.mean_packet_size(), r, 0.01);
        assert!((rc.equation_rate() - expect).abs() < 1e-6);
        assert!((rc.rate() - expect).abs() < 1e-6);
        let with_segment = equation::throughput(1472.0, r, 0.01);
        assert!(
            rc.rate() < with_segment / 1.35,
            "{} vs {with_segment}",
            rc.rate()
        );
    }

    /// TFRC-SP (RFC 4828 §3) for a flow of 400-byte packets: the equation with `s` = 1460
    /// times `400 / 440`, about 3.3 times the standard equation's bytes per second at the same
    /// `p` and `R`; packets at least 10 ms apart however high `X` is.
    #[test]
    fn small_packets_get_the_nominal_segments_rate_less_the_header_penalty() {
        let t0 = Instant::now();
        let mut rc = RateControl::new(1200, t0).with_small_packets(true);
        let mut t = t0;
        for _ in 0..2000 {
            rc.on_sent(t, 400, t.duration_since(t0).as_micros() as u64);
            t += Duration::from_millis(10);
        }
        assert!((rc.mean_packet_size() - 400.0).abs() < 1e-6);
        rc.note_waiting(t);
        let now_us = t.duration_since(t0).as_micros() as u64;
        rc.on_feedback(t, now_us, &fb(now_us - 900_000, 10_000_000, 0.01, 1))
            .unwrap();
        assert_eq!(rc.rtt(), Some(Duration::from_millis(900)));
        // bc -l: s=1460, R=0.9, p=0.01, times 400/440 (see small_packets.rs)
        let want = 16_566.167_895_956_542;
        assert!(
            (rc.equation_rate() - want).abs() < 1e-6,
            "{}",
            rc.equation_rate()
        );
        assert!((rc.rate() - want).abs() < 1e-6);
        let standard = equation::throughput(400.0, Duration::from_millis(900), 0.01);
        assert!((rc.rate() / standard - 1460.0 / 440.0).abs() < 1e-9);
        // 100 packets a second at most: X allows a 100-byte packet every 6 ms
        let mut rc = RateControl::new(1200, t0).with_small_packets(true);
        rc.on_handshake_rtt(Duration::from_millis(100));
        assert!(100.0 / rc.rate() < 0.01);
        rc.on_sent(t0, 100, 1);
        assert_eq!(rc.next_send_time(t0), t0 + Duration::from_millis(10));
        let mut standard = RateControl::new(1200, t0);
        standard.on_handshake_rtt(Duration::from_millis(100));
        standard.on_sent(t0, 100, 1);
        assert!(standard.next_send_time(t0) < t0 + Duration::from_millis(10));
    }

    #[test]
    fn reports_from_the_future_and_impossible_delays_are_refused() {
        let t0 = Instant::now();
        let mut rc = RateControl::new(1000, t0);
        assert_eq!(
            rc.on_feedback(t0, 0, &fb(0, 1, 0.0, 0)),
            Err(FeedbackError::NothingSent)
        );
        rc.on_sent(t0, 1000, 500);
        assert!(matches!(
            rc.on_feedback(t0, 600, &fb(501, 1, 0.0, 0)),
            Err(FeedbackError::FromTheFuture { .. })
        ));
        let mut bad = fb(500, 1, 0.0, 0);
        bad.delay_us = 1_000_000;
        assert!(matches!(
            rc.on_feedback(t0, 600, &bad),
            Err(FeedbackError::DelayTooLong { .. })
        ));
        assert_eq!(rc.rate(), 1000.0, "refused feedback changes nothing");
    }

    #[test]
    fn the_nofeedback_timer_halves_the_rate() {
        let t0 = Instant::now();
        let mut rc = RateControl::new(1000, t0);
        rc.on_sent(t0, 1000, 0);
        let t = t0 + Duration::from_millis(100);
        rc.on_feedback(t, 100_000, &fb(0, 1000, 0.0, 0)).unwrap();
        let x = rc.rate();
        rc.on_sent(t, 1000, 100_000);
        let deadline = rc.nofeedback_deadline();
        assert_eq!(deadline, t + Duration::from_millis(400));
        rc.on_nofeedback_timeout(deadline);
        assert!((rc.rate() - x / 2.0).abs() < 1e-6);
        // never below s/t_mbi
        for _ in 0..100 {
            rc.on_sent(rc.nofeedback_deadline(), 1000, 100_000);
            rc.on_nofeedback_timeout(rc.nofeedback_deadline());
        }
        assert!((rc.rate() - 1000.0 / 64.0).abs() < 1e-9);
    }

    /// What a peer may do to the sender, in any order and with any values.
    #[derive(Debug, Clone)]
    enum Op {
        /// A data packet leaves after `gap_us`.
        Send { gap_us: u64, len: usize },
        /// A report arrives after `gap_us`, echoing a timestamp `back_us` before our latest
        /// one (or after it: `future`), with arbitrary fields.
        Report {
            gap_us: u64,
            back_us: u64,
            future: bool,
            delay_us: u64,
            x_recv: u64,
            p_ppb: u64,
            loss_events: u64,
        },
        /// The no-feedback timer fires.
        Timeout,
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            (0..500_000u64, 1..1500usize).prop_map(|(gap_us, len)| Op::Send { gap_us, len }),
            (
                0..2_000_000u64,
                0..3_000_000u64,
                proptest::bool::weighted(0.1),
                prop_oneof![Just(0u64), 0..1_000_000u64, Just(u64::MAX)],
                prop_oneof![
                    Just(0u64),
                    0..10_000_000u64,
                    Just(crate::packet::MAX_REPORTED_RATE)
                ],
                prop_oneof![Just(0u64), 0..1_000_000_000u64, 1..1000u64],
                0..20u64,
            )
                .prop_map(
                    |(gap_us, back_us, future, delay_us, x_recv, p_ppb, loss_events)| {
                        Op::Report {
                            gap_us,
                            back_us,
                            future,
                            delay_us,
                            x_recv,
                            p_ppb,
                            loss_events,
                        }
                    }
                ),
            Just(Op::Timeout),
        ]
    }

    proptest::proptest! {
        /// Whatever the peer reports, `X` never exceeds what the equation allows for the
        /// reported `p` (when `p > 0`), nor the receive limit (or the initial rate, or the
        /// floor `s/t_mbi`); refused reports change nothing.
        #[test]
        fn the_rate_never_exceeds_what_the_equation_allows(
            ops in proptest::collection::vec(op(), 1..200),
            small in proptest::bool::ANY,
        ) {
            let s = 1200u32;
            let t0 = Instant::now();
            let mut rc = RateControl::new(s, t0).with_small_packets(small);
            let mut now_us = 0u64;
            let at = |us: u64| t0 + Duration::from_micros(us);
            for op in ops {
                match op {
                    Op::Send { gap_us, len } => {
                        now_us += gap_us;
                        rc.on_sent(at(now_us), len, now_us.max(1));
                    }
                    Op::Report { gap_us, back_us, future, delay_us, x_recv, p_ppb, loss_events } => {
                        now_us += gap_us;
                        let last = rc.last_sent_us.unwrap_or(0);
                        let echo_us = if future { last + 1 + back_us } else { last.saturating_sub(back_us) };
                        let fb = Feedback {
                            echo_us,
                            delay_us,
                            x_recv,
                            p: (p_ppb.min(1_000_000_000)) as f64 / 1e9,
                            loss_events,
                        };
                        let before = (rc.rate(), rc.rtt(), rc.loss_event_rate());
                        match rc.on_feedback(at(now_us), now_us, &fb) {
                            Ok(()) => {}
                            Err(e) => {
                                proptest::prop_assert!(
                                    future || rc.last_sent_us.is_none() || delay_us > now_us.saturating_sub(echo_us),
                                    "refused {e} without cause"
                                );
                                proptest::prop_assert_eq!(before, (rc.rate(), rc.rtt(), rc.loss_event_rate()));
                            }
                        }
                    }
                    Op::Timeout => {
                        let deadline = rc.nofeedback_deadline();
                        now_us = now_us.max(deadline.duration_since(t0).as_micros() as u64);
                        rc.on_nofeedback_timeout(at(now_us));
                    }
                }
                let x = rc.rate();
                let floor = f64::from(s) / T_MBI.as_secs_f64();
                // (no floor in slow start: W_init/R falls below s/t_mbi when R is minutes long)
                proptest::prop_assert!(x.is_finite() && x > 0.0, "X = {x}");
                if let Some(r) = rc.rtt() {
                    let p = rc.loss_event_rate();
                    let slack = 1.0 + 1e-9;
                    if p > 0.0 {
                        // TFRC-SP: s = 1460 and a header penalty at most s/(s + 40)
                        let allowed = if small {
                            let s = f64::from(s);
                            equation::throughput(1460.0, r, p) * s / (s + 40.0)
                        } else {
                            equation::throughput(f64::from(s), r, p)
                        }
                        .max(floor);
                        proptest::prop_assert!(x <= allowed * slack, "X {x} > equation {allowed} (p {p}, R {r:?})");
                    }
                    let initial = rc.w_init() / r.as_secs_f64();
                    let cap = rc.recv_limit().max(initial).max(floor);
                    proptest::prop_assert!(x <= cap * slack, "X {x} > limit {cap}");
                }
            }
        }
    }

    /// A backlogged sender at `X` = 100 packets of 1000 B a second (`W_init` = 4,000 B over
    /// a 40 ms handshake RTT): evenly paced by default, in bursts of four
    /// with `with_send_burst(4)`, at the same average rate and never more than three packets
    /// ahead of the even schedule; after an idle second the burst starts again at once.
    #[test]
    fn bursts_keep_the_average_rate() {
        let t0 = Instant::now();
        // drive a backlogged sender for 1 s, polled every 100 µs: the send times
        let send_times = |burst: u32| {
            let mut rc = RateControl::new(1000, t0).with_send_burst(burst);
            rc.on_handshake_rtt(Duration::from_millis(40));
            assert!((rc.rate() - 100_000.0).abs() < 1e-6, "{}", rc.rate());
            let mut out = vec![];
            let mut t = t0;
            while t < t0 + Duration::from_secs(1) {
                if rc.next_send_time(t) <= t {
                    rc.on_sent(t, 1000, t.duration_since(t0).as_micros() as u64);
                    out.push(t.duration_since(t0).as_secs_f64());
                } else {
                    t += Duration::from_micros(100);
                }
            }
            (rc, out)
        };
        let (_, even) = send_times(1);
        let (mut rc, bursty) = send_times(4);
        // the same number of packets in the second (the even schedule's 100, the bursts'
        // three more at most)
        assert_eq!(even.len(), 100);
        assert!((100..=103).contains(&bursty.len()), "{}", bursty.len());
        // even: 10 ms apart; bursts: four at once, then 40 ms to the next four
        assert!(even.windows(2).all(|w| (w[1] - w[0] - 0.01).abs() < 2e-4));
        for (k, group) in bursty.chunks(4).enumerate() {
            let start = k as f64 * 0.04;
            assert!(
                group.iter().all(|&t| (t - start).abs() < 2e-4),
                "burst {k}: {group:?}"
            );
        }
        // never more than three packets ahead of the even schedule
        for (i, &t) in bursty.iter().enumerate() {
            assert!(t >= (i as f64 - 3.0) * 0.01 - 2e-4, "packet {i} at {t}");
        }
        // after an idle second, a whole burst leaves at once
        let t = t0 + Duration::from_secs(2);
        for i in 0..4 {
            assert_eq!(rc.next_send_time(t), t, "packet {i}");
            rc.on_sent(t, 1000, 2_000_000 + i);
        }
        assert!(rc.next_send_time(t) >= t + Duration::from_millis(39));
        // a burst at one packet a second, then a higher rate: the next burst waits for the
        // burst's bytes at the new rate (40 ms), not for the slow schedule's slots (4 s)
        let mut rc = RateControl::new(1000, t0).with_send_burst(4);
        for i in 0..4 {
            assert_eq!(rc.next_send_time(t0), t0, "packet {i}");
            rc.on_sent(t0, 1000, i + 1);
        }
        rc.on_handshake_rtt(Duration::from_millis(40));
        assert_eq!(rc.next_send_time(t0), t0 + Duration::from_millis(40));
    }
}
