//! mahimahi capacity traces (lowtide-netem's `trace::Trace::parse`, a file a user hands to
//! the emulator) and their replay (`link::TraceReplay`).
//!
//! Input: the text of a trace file (invalid UTF-8 replaced). Must hold:
//! - parsing gives a trace or an error naming the file, never a panic;
//! - a trace's timestamps never decrease, the last (its period) is above 0, it has one
//!   opportunity per line and no more than `MAX_OPPORTUNITIES`, and `from_times` agrees;
//! - counting opportunities: one period holds every line but those at the period itself,
//!   and counts over adjacent spans add up;
//! - replaying it to a backlog of full-size packets for ten periods (at most a minute):
//!   packets leave in order, each at an opportunity's time and no earlier than it arrived,
//!   and no more of them than there were opportunities.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lowtide_netem::link::{Backlog, TraceReplay};
use lowtide_netem::trace::{Trace, MAX_OPPORTUNITIES, OPPORTUNITY_BYTES};

pub fn check(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let trace = match Trace::parse(&text, "fuzz.trace") {
        Ok(t) => t,
        Err(e) => {
            assert!(e.to_string().contains("fuzz.trace"), "{e}");
            return;
        }
    };
    let times = trace.times_ms();
    assert_eq!(times.len(), text.lines().count());
    assert!(times.len() <= MAX_OPPORTUNITIES);
    assert!(times.windows(2).all(|w| w[0] <= w[1]));
    let period = trace.period_ms();
    assert!(period > 0 && period == *times.last().expect("not empty"));
    assert_eq!(
        Trace::from_times(times.to_vec(), "fuzz.trace"),
        Ok(trace.clone())
    );
    assert!(trace.mean_rate_bps().is_finite());

    let n = trace.opportunities() as u64;
    // (times beyond a few periods of a day-long trace are far past any run)
    let horizon = period.saturating_mul(4).min(1 << 40);
    // One period, [0, period), holds every line but those at the period itself (they fall
    // on the next loop's first millisecond).
    let at_period = times.iter().rev().take_while(|&&t| t == period).count() as u64;
    assert_eq!(trace.opportunities_between(0, period), n - at_period);
    let cuts = [
        0,
        period / 3,
        period,
        period + 1,
        2 * period + period / 2,
        horizon,
    ];
    for w in cuts.windows(2) {
        let (a, b) = (w[0].min(horizon), w[1].min(horizon));
        if a <= b {
            assert_eq!(
                trace.opportunities_between(0, b),
                trace.opportunities_between(0, a) + trace.opportunities_between(a, b)
            );
        }
    }
    replay(Arc::new(trace));
}

/// Full-size packets, all there from the start.
struct Packets {
    waiting: VecDeque<(u32, Instant)>,
}

impl Backlog for Packets {
    type Packet = (u32, Instant);
    fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
    fn head_arrival(&self) -> Option<Instant> {
        self.waiting.front().map(|p| p.1)
    }
    fn pop(&mut self, _at: Instant) -> Option<(u32, Instant)> {
        self.waiting.pop_front()
    }
    fn size(_: &(u32, Instant)) -> usize {
        OPPORTUNITY_BYTES
    }
    fn arrival(p: &(u32, Instant)) -> Instant {
        p.1
    }
}

fn replay(trace: Arc<Trace>) {
    let start = Instant::now();
    let until_ms = trace.period_ms().saturating_mul(10).min(60_000);
    let opportunities = trace.opportunities_between(0, until_ms + 1);
    let mut link = TraceReplay::new(trace.clone(), start);
    let mut backlog = Packets {
        waiting: (0..opportunities.min(10_000) as u32 + 1)
            .map(|i| (i, start))
            .collect(),
    };
    let mut left = Vec::new();
    let end = start + Duration::from_millis(until_ms);
    let mut now = start;
    while let Some(t) = link.poll_timeout(&backlog).filter(|t| *t <= end) {
        now = t.max(now);
        link.serve_until(now, &mut backlog, &mut |p, at| left.push((p, at)));
    }
    link.serve_until(end, &mut backlog, &mut |p, at| left.push((p, at)));
    assert!(left.len() as u64 <= opportunities);
    let period = trace.period_ms();
    for (i, ((id, arrived), at)) in left.iter().enumerate() {
        assert_eq!(*id as usize, i, "out of order");
        assert!(at >= arrived);
        let ms = (*at - start).as_millis() as u64;
        let in_period = ms % period;
        assert!(
            trace.times_ms().binary_search(&in_period).is_ok() || (in_period == 0 && ms > 0),
            "a departure at {ms} ms, not an opportunity"
        );
    }
}
