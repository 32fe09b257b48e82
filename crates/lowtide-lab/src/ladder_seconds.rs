//! The bit-rate ladder's seconds: the streamed bit rate beside the achieved throughput, as
//! Hasan, Huang, Werstein, "Dynamic Send Buffer Active Tuning for Low Latency Streaming Media"
//! (Section 5, Fig. 1-4 and 7-8) compare them over time.
//!
//! The throughput of a second is what the client received in it. The bit rate it is held
//! against is what the server streamed one pipeline delay earlier: the stream's median one-way
//! latency, the time a frame of a steady rung takes to reach the client. Without that shift a
//! transport that delivers every frame at a constant latency `d` falls `d` short in the
//! stream's first whole second (its frames are still on the way), though nothing is missing.
//! Everything else still counts against the throughput: frames dropped at the server (they
//! are streamed, never received), frames lost, stalls, and a latency that grows within a
//! second (a queue building up).

use serde::{Deserialize, Serialize};

use crate::ladder_flow::FrameSent;
use crate::stream::Sample;

/// One second of the stream at the client.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Second {
    /// Start of the second, run seconds, on the client's side.
    pub t_s: f64,
    /// Bit rate the server streamed (frames made, at their rung's size, taken by the transport
    /// or not) from one pipeline delay before this second to one pipeline delay before its end.
    pub streamed_bps: f64,
    /// Bytes the client received in this second, as bits per second.
    pub throughput_bps: f64,
}

/// The pipeline delay: the median one-way latency of the delivered frames, seconds; 0 when
/// none was delivered (then no second has throughput to shift).
pub fn pipeline_delay_s(samples: &[Sample]) -> f64 {
    let mut ms: Vec<f64> = samples
        .iter()
        .filter(|s| !s.censored)
        .map(|s| s.latency_ms)
        .collect();
    lowtide::proto::quantile::of(&mut ms, 0.5).map_or(0.0, |m| m / 1e3)
}

/// The seconds the rate match counts: all but the first and the last, the stream's partial
/// seconds. In the last one the frames that arrive faster than the pipeline delay (the queue
/// gone, as after the bulk flow stops) have already arrived in the second before it.
pub fn whole_seconds(seconds: &[Second]) -> &[Second] {
    seconds
        .get(1..seconds.len().saturating_sub(1))
        .unwrap_or(&[])
}

/// The seconds the rate match first counted: all but the first. The last second was left out
/// after a miss ([`whole_seconds`]); this keeps the original measure beside it.
pub fn seconds_after_the_first(seconds: &[Second]) -> &[Second] {
    seconds.get(1..).unwrap_or(&[])
}

/// The seconds from the one the first frame reaches at `delay_s` to the one the last frame
/// reaches; `arrivals` are (run seconds, payload bytes).
pub fn per_second(frames: &[FrameSent], arrivals: &[(f64, u32)], delay_s: f64) -> Vec<Second> {
    let (Some(first), Some(last)) = (frames.first(), frames.last()) else {
        return vec![];
    };
    let from = (first.t_s + delay_s).floor() as i64;
    let to = (last.t_s + delay_s).floor() as i64;
    let n = (to - from + 1).max(0) as usize;
    let mut streamed = vec![0u64; n];
    let mut received = vec![0u64; n];
    let slot = |t: f64| {
        let k = t.floor() as i64 - from;
        (0..n as i64).contains(&k).then_some(k as usize)
    };
    for f in frames {
        if let Some(k) = slot(f.t_s + delay_s) {
            streamed[k] += u64::from(f.bytes);
        }
    }
    for (t, b) in arrivals {
        if let Some(k) = slot(*t) {
            received[k] += u64::from(*b);
        }
    }
    (0..n)
        .map(|k| Second {
            t_s: (from + k as i64) as f64,
            streamed_bps: streamed[k] as f64 * 8.0,
            throughput_bps: received[k] as f64 * 8.0,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::ladder::RATE_MATCH;

    /// 25 frames a second of 600 bytes (120 kbit/s) made from `start_s` for `secs` seconds.
    fn frames(start_s: f64, secs: usize) -> Vec<FrameSent> {
        (0..secs * 25)
            .map(|i| FrameSent {
                t_s: start_s + i as f64 * 0.04,
                rate_bps: 120_000,
                bytes: 600,
                accepted: true,
            })
            .collect()
    }

    /// Each delivered frame's arrival, `latency(i)` seconds after it was made.
    fn deliver(frames: &[FrameSent], latency: impl Fn(usize) -> Option<f64>) -> Vec<(f64, u32)> {
        frames
            .iter()
            .enumerate()
            .filter(|(_, f)| f.accepted)
            .filter_map(|(i, f)| latency(i).map(|l| (f.t_s + l, f.bytes)))
            .collect()
    }

    /// The whole seconds whose throughput fell short (the summary's rule).
    fn unmatched(s: &[Second]) -> Vec<f64> {
        whole_seconds(s)
            .iter()
            .filter(|s| s.streamed_bps > 0.0)
            .filter(|s| s.throughput_bps < RATE_MATCH * s.streamed_bps)
            .map(|s| s.t_s)
            .collect()
    }

    fn samples(f: &[FrameSent], latency: impl Fn(usize) -> f64) -> Vec<Sample> {
        (0..f.len())
            .map(|i| Sample::delivered(f[i].t_s, latency(i) * 1e3))
            .collect()
    }

    #[test]
    fn a_constant_latency_is_no_shortfall_but_the_unshifted_seconds_say_it_is() {
        let f = frames(31.9, 60);
        let at = deliver(&f, |_| Some(0.73));
        let d = pipeline_delay_s(&samples(&f, |_| 0.73));
        assert!((d - 0.73).abs() < 1e-9);
        let s = per_second(&f, &at, d);
        assert_eq!(s.len(), 61);
        assert!(unmatched(&s).is_empty(), "{s:?}");
        // the same stream against the bit rate of the same second (before): the first whole
        // second received 10 of its 25 frames while the rest were on their way
        let unshifted = per_second(&f, &at, 0.0);
        assert_eq!(unshifted[1].throughput_bps, 10.0 * 600.0 * 8.0);
        assert_eq!(unmatched(&unshifted), vec![32.0]);
    }

    #[test]
    fn jitter_of_a_frame_either_side_of_a_second_matches() {
        let f = frames(30.0, 30);
        // ±30 ms around 0.5 s: frames cross the seconds' edges both ways
        let at = deliver(&f, |i| Some(0.5 + if i % 2 == 0 { 0.03 } else { -0.03 }));
        let s = per_second(&f, &at, 0.5);
        assert!(unmatched(&s).is_empty(), "{s:?}");
    }

    #[test]
    fn real_shortfalls_still_count() {
        let f = frames(30.0, 30);
        let base = 0.5;
        let t = |i: usize| 30.0 + i as f64 * 0.04;
        // a queue building up: the latency grows 150 ms per second of frames made at 40-43 s,
        // then falls as fast; the seconds it grew in received 21-22 of 25 frames
        let queue = |i: usize| {
            let grown = (t(i) - 40.0).clamp(0.0, 3.0) - (t(i) - 43.0).clamp(0.0, 3.0);
            Some(base + 0.15 * grown)
        };
        let s = per_second(&f, &deliver(&f, queue), base);
        assert_eq!(unmatched(&s), vec![41.0, 42.0, 43.0], "{s:?}");
        // a stall (loss recovery): the frames made at 49.5-51.5 s all arrive at 52.2 s
        let stall = |i: usize| {
            Some(if (49.5..51.5).contains(&t(i)) {
                52.2 - t(i)
            } else {
                base
            })
        };
        let s = per_second(&f, &deliver(&f, stall), base);
        assert_eq!(unmatched(&s), vec![50.0, 51.0], "{s:?}");
        // every fifth frame dropped at the server: streamed, never received
        let mut dropped = f.clone();
        for x in dropped.iter_mut().step_by(5) {
            x.accepted = false;
        }
        let s = per_second(&dropped, &deliver(&dropped, |_| Some(base)), base);
        assert_eq!(unmatched(&s).len(), s.len() - 2, "{s:?}");
        // the frames made at 40-41 s lost (TFRC does not retransmit)
        let lost = |i: usize| (!(250..275).contains(&i)).then_some(base);
        let s = per_second(&f, &deliver(&f, lost), base);
        assert_eq!(unmatched(&s), vec![40.0, 41.0], "{s:?}");
    }

    #[test]
    fn frames_arriving_early_at_the_end_leave_the_partial_last_second_out() {
        // the queue gone for the last 20 s: 0.21 s instead of the median 0.49 s
        let f = frames(30.0, 60);
        let lat = |i: usize| if i < 1000 { 0.49 } else { 0.21 };
        let d = pipeline_delay_s(&samples(&f, lat));
        assert!((d - 0.49).abs() < 1e-9);
        let s = per_second(&f, &deliver(&f, |i| Some(lat(i))), d);
        let last = s.last().unwrap();
        assert_eq!(last.t_s, 90.0);
        assert!(last.throughput_bps < 0.5 * last.streamed_bps, "{last:?}");
        // the second the latency fell in got more than the bit rate, none fell short
        assert!(unmatched(&s).is_empty(), "{s:?}");
        assert_eq!(whole_seconds(&s).len(), s.len() - 2);
        assert!(whole_seconds(&s[..1]).is_empty());
    }

    #[test]
    fn no_frames_no_seconds_and_no_deliveries_no_delay() {
        assert!(per_second(&[], &[(30.0, 600)], 0.5).is_empty());
        assert_eq!(pipeline_delay_s(&[]), 0.0);
        let censored = [Sample::censored(30.0, 40.0)];
        assert_eq!(pipeline_delay_s(&censored), 0.0);
    }
}
