//! TFRC's sender (lowtide-tfrc's `RateControl`, RFC 5348 §4) under any feedback a peer can
//! send: reports echoing timestamps from the future or from long ago, delays longer than the
//! round trip, absurd receive rates and loss event rates, in any order with data packets,
//! handshake RTTs and no-feedback timeouts. The property test of `sender.rs` on the full
//! ranges of every field. Must hold after every step:
//! - `X` finite and above 0; the next send time not in the past;
//! - with an RTT estimate: `X` never above the equation's rate for the reported `p` (when
//!   `p > 0`, TFRC-SP's with its header penalty when on) nor above the receive limit (or the
//!   initial rate `W_init/R`, or the floor `s/t_mbi`);
//! - a refused report has a cause (from the future, nothing sent, a delay longer than the
//!   time since the echoed packet) and changes nothing.
//!
//! Input: flags (TFRC-SP, burst, RFC 6928's window), then operations of a tag byte each:
//! 0 send: gap µs u32, length u16; 1 report: gap µs u32, how far back (or ahead) it echoes
//! u32, a flag byte, delay u64, receive rate u64, `p` in parts per billion u32, loss events
//! u8; 2 the no-feedback timer; 3 a handshake RTT µs u32; 4 data waiting.

use std::time::{Duration, Instant};

use arbitrary::{Result, Unstructured};
use lowtide_tfrc::packet::{Feedback, MAX_REPORTED_RATE};
use lowtide_tfrc::sender::{RateControl, T_MBI};
use lowtide_tfrc::{equation, InitialWindow};

const S: u32 = 1200;

pub fn check(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let _ = run(&mut u);
}

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let flags: u8 = u.arbitrary()?;
    let small = flags & 1 != 0;
    let window = if flags & 2 != 0 {
        InitialWindow::Rfc6928
    } else {
        InitialWindow::Rfc3390
    };
    let t0 = Instant::now();
    let mut rc = RateControl::new(S, t0)
        .with_small_packets(small)
        .with_send_burst(u32::from(flags >> 2 & 3) + 1)
        .with_initial_window(window);
    let at = |us: u64| t0 + Duration::from_micros(us);
    let mut now_us = 0u64;
    // The timestamp of our latest data packet (our wire clock: µs since t0, at least 1).
    let mut last_sent_us = None;
    let mut steps = 0;
    while !u.is_empty() && steps < 1000 {
        steps += 1;
        match u.arbitrary::<u8>()? % 5 {
            0 => {
                now_us += u64::from(u.arbitrary::<u32>()?);
                let len = usize::from(u.arbitrary::<u16>()?);
                rc.on_sent(at(now_us), len, now_us.max(1));
                last_sent_us = Some(now_us.max(1));
            }
            1 => {
                now_us += u64::from(u.arbitrary::<u32>()?);
                let back = u64::from(u.arbitrary::<u32>()?);
                let how: u8 = u.arbitrary()?;
                let last = last_sent_us.unwrap_or(0);
                let echo_us = match how & 3 {
                    // from the future
                    0 => last.saturating_add(back + 1),
                    1 => u.arbitrary()?,
                    _ => last.saturating_sub(back),
                };
                let delay_us = match how >> 2 & 3 {
                    0 => u.arbitrary()?,
                    1 => now_us.saturating_sub(echo_us),
                    _ => u64::from(u.arbitrary::<u32>()?),
                };
                let x_recv = match how >> 4 & 3 {
                    0 => MAX_REPORTED_RATE,
                    1 => 0,
                    _ => u.arbitrary::<u64>()? % (MAX_REPORTED_RATE + 1),
                };
                let p = match how >> 6 {
                    0 => 0.0,
                    1 => 1e-9,
                    _ => f64::from(u.arbitrary::<u32>()? % 1_000_000_001) / 1e9,
                };
                let fb = Feedback {
                    echo_us,
                    delay_us,
                    x_recv,
                    p,
                    loss_events: u64::from(u.arbitrary::<u8>()?),
                };
                let before = snapshot(&rc);
                if rc.on_feedback(at(now_us), now_us, &fb).is_err() {
                    assert!(
                        last_sent_us.is_none_or(|l| echo_us > l)
                            || fb.delay_us > now_us.saturating_sub(echo_us),
                        "{fb:?} refused without cause"
                    );
                    assert_eq!(before, snapshot(&rc), "a refused report changed the sender");
                }
            }
            2 => {
                let deadline = rc.nofeedback_deadline();
                now_us = now_us.max(deadline.duration_since(t0).as_micros() as u64);
                rc.on_nofeedback_timeout(at(now_us));
            }
            3 => rc.on_handshake_rtt(Duration::from_micros(u64::from(u.arbitrary::<u32>()?))),
            _ => rc.note_waiting(at(now_us)),
        }
        check_rate(&rc, small, window, at(now_us));
    }
    Ok(())
}

type Snapshot = (f64, Option<Duration>, f64, f64, Instant);

fn snapshot(rc: &RateControl) -> Snapshot {
    (
        rc.rate(),
        rc.rtt(),
        rc.loss_event_rate(),
        rc.recv_limit(),
        rc.nofeedback_deadline(),
    )
}

fn check_rate(rc: &RateControl, small: bool, window: InitialWindow, now: Instant) {
    let x = rc.rate();
    assert!(x.is_finite() && x > 0.0, "X = {x}");
    assert!(rc.next_send_time(now) >= now);
    let floor = f64::from(S) / T_MBI.as_secs_f64();
    let Some(r) = rc.rtt() else {
        return;
    };
    let slack = 1.0 + 1e-9;
    let p = rc.loss_event_rate();
    if p > 0.0 {
        let s = f64::from(S);
        let allowed = if small {
            // TFRC-SP: s = 1460 and a header penalty of at most s/(s + 40)
            equation::throughput(1460.0, r, p) * s / (s + 40.0)
        } else {
            equation::throughput(s, r, p)
        }
        .max(floor);
        assert!(
            x <= allowed * slack,
            "X {x} > equation {allowed} (p {p}, R {r:?})"
        );
    }
    let initial = window.bytes(f64::from(S)) / r.as_secs_f64();
    let cap = rc.recv_limit().max(initial).max(floor);
    assert!(x <= cap * slack, "X {x} > limit {cap}");
}
