//! Drives one viewer's queue (`viewer::queue::ViewerQueue`, the per-viewer drop rules) with
//! arbitrary sequences of pushes (any kind, temporal layer, RASL flag, size, catch-up or not,
//! ingest instant), pops at advancing instants, upstream losses of any size and reads of the
//! untold drops and breaks. Mirrors the queue's property test and adds to it:
//! - every unit the queue accepted (from the first keyframe on, parameter sets always) is
//!   popped or counted dropped exactly once, never popped twice, popped in index order;
//! - the queued bytes stay within `max_bytes` plus the queued parameter sets;
//! - the counters agree with what was popped, upstream losses are counted once started, the
//!   untold drops read back reason by reason (saturating at u32::MAX), a break is reported
//!   once;
//! - replaying the whole pushed stream through `Chain` with delivered = popped, every popped
//!   unit decodes (the queue never sends what the viewer's decoder cannot decode).
//!
//! Input: latency (10 ms steps) u8, max_bytes u16 BE, then operations, each a tag byte:
//! 0 push: flags u8 (bits 0-1 kind: parameter sets, keyframe, reference, non-reference;
//!   bits 2-3 temporal id; bit 4 skipped at random access; bit 5 catch-up), advance ms u8,
//!   ingest age ms u8, size u16 BE;
//! 1 pop one, 2 pop until empty: advance ms u8;
//! 3 upstream lost: units u32 BE;
//! 4 take the untold drops and the break.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arbitrary::{self, Arbitrary, Unstructured};
use lowtide_media::encoded::{Chain, FrameKind, UnitInfo};
use lowtide_serve::hub::HubUnit;
use lowtide_serve::viewer::queue::{QueueConfig, ViewerQueue};
use lowtide_serve::viewer_wire::DropReason;

#[derive(Debug)]
enum Op {
    Push {
        info: UnitInfo,
        catch_up: bool,
        advance_ms: u8,
        age_ms: u8,
        size: u16,
    },
    Pop {
        all: bool,
        advance_ms: u8,
    },
    UpstreamLost(u32),
    Take,
}

impl<'a> Arbitrary<'a> for Op {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(match u8::arbitrary(u)? % 5 {
            0 => {
                let flags = u8::arbitrary(u)?;
                let kind = [
                    FrameKind::ParameterSets,
                    FrameKind::Keyframe,
                    FrameKind::Reference,
                    FrameKind::NonReference,
                ][usize::from(flags & 3)];
                let mut info = UnitInfo::new(0, kind).layer((flags >> 2) & 3);
                info.skipped_at_random_access = flags & 0x10 != 0;
                Op::Push {
                    info,
                    catch_up: flags & 0x20 != 0,
                    advance_ms: u8::arbitrary(u)?,
                    age_ms: u8::arbitrary(u)?,
                    size: u16::from_be_bytes(u.arbitrary()?),
                }
            }
            t @ (1 | 2) => Op::Pop {
                all: t == 2,
                advance_ms: u8::arbitrary(u)?,
            },
            3 => Op::UpstreamLost(u32::from_be_bytes(u.arbitrary()?)),
            _ => Op::Take,
        })
    }
}

#[derive(Debug)]
struct Input {
    cfg: QueueConfig,
    ops: Vec<Op>,
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let cfg = QueueConfig {
            latency: Duration::from_millis(10 * u64::from(u8::arbitrary(u)?)),
            max_bytes: usize::from(u16::from_be_bytes(u.arbitrary()?)),
        };
        let mut ops = Vec::new();
        while !u.is_empty() && ops.len() < 4096 {
            ops.push(Op::arbitrary(u)?);
        }
        Ok(Input { cfg, ops })
    }
}

const UPSTREAM: usize = DropReason::Upstream as usize - 1;

/// What the test knows from outside the queue.
struct Model {
    max_bytes: usize,
    t0: Instant,
    now_ms: u64,
    started: bool,
    /// Every unit pushed, accepted or not (the decoder's stream).
    pushed: Vec<UnitInfo>,
    accepted: u64,
    sizes: Vec<usize>,
    popped: Vec<u64>,
    popped_set: HashSet<u64>,
    popped_bytes: u64,
    queued_param_bytes: usize,
    upstream: u64,
    /// Drops by reason already read as untold (or lost to saturation).
    told: [u64; 4],
    breaks_told: u64,
}

impl Model {
    fn pop(&mut self, q: &mut ViewerQueue) -> bool {
        let now = self.t0 + Duration::from_millis(self.now_ms);
        // The kernel's queue ahead varies with the input's clock (0 to 400 ms): the
        // invariants hold whatever the connection measures.
        let ahead = Duration::from_millis(self.now_ms.wrapping_mul(7) % 400);
        let Some(n) = q.pop(now, ahead) else {
            assert!(q.is_empty());
            assert_eq!(q.bytes(), 0);
            return false;
        };
        let i = n.unit.info.index;
        assert!(self.popped_set.insert(i), "unit {i} popped twice");
        assert!(
            self.popped.last().is_none_or(|&l| l < i),
            "unit {i} out of order"
        );
        assert_eq!(n.unit.info, self.pushed[i as usize]);
        assert_eq!(n.unit.data.len(), self.sizes[i as usize]);
        if n.unit.info.kind == FrameKind::ParameterSets {
            self.queued_param_bytes -= n.unit.data.len();
        }
        self.popped.push(i);
        self.popped_bytes += n.unit.data.len() as u64;
        true
    }

    fn check(&self, q: &ViewerQueue) {
        let c = q.counters();
        assert_eq!(c.sent, self.popped.len() as u64);
        assert_eq!(c.sent_bytes, self.popped_bytes);
        assert_eq!(c.dropped[UPSTREAM], self.upstream);
        let own_drops: u64 = c.dropped.iter().sum::<u64>() - c.dropped[UPSTREAM];
        assert!(c.sent + own_drops <= self.accepted);
        if q.is_empty() {
            assert_eq!(
                c.sent + own_drops,
                self.accepted,
                "a unit neither sent nor dropped"
            );
        }
        assert!(
            q.bytes() <= self.max_bytes + self.queued_param_bytes,
            "{} bytes queued",
            q.bytes()
        );
        assert!(self.told.iter().zip(c.dropped).all(|(t, d)| *t <= d));
    }

    fn take(&mut self, q: &mut ViewerQueue) {
        while let Some((n, reason)) = q.take_untold() {
            let i = reason as usize - 1;
            let d = q.counters().dropped;
            // Reasons come in wire order: none before this one has anything untold.
            assert!(
                (0..i).all(|j| self.told[j] == d[j]),
                "{reason:?} before an earlier reason"
            );
            assert!(n > 0);
            assert_eq!(u64::from(n), (d[i] - self.told[i]).min(u64::from(u32::MAX)));
            self.told[i] = d[i];
        }
        assert_eq!(self.told, q.counters().dropped, "drops left untold");
        let breaks = q.counters().breaks;
        assert_eq!(q.take_break(), breaks > self.breaks_told);
        assert!(!q.take_break());
        self.breaks_told = breaks;
    }
}

pub fn check(data: &[u8]) {
    // As libfuzzer-sys reads a typed input: all of the bytes, or nothing.
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let mut q = ViewerQueue::new(input.cfg);
    let mut m = Model {
        max_bytes: input.cfg.max_bytes,
        t0: Instant::now(),
        now_ms: 0,
        started: false,
        pushed: Vec::new(),
        accepted: 0,
        sizes: Vec::new(),
        popped: Vec::new(),
        popped_set: HashSet::new(),
        popped_bytes: 0,
        queued_param_bytes: 0,
        upstream: 0,
        told: [0; 4],
        breaks_told: 0,
    };
    for op in input.ops {
        match op {
            Op::Push {
                mut info,
                catch_up,
                advance_ms,
                age_ms,
                size,
            } => {
                m.now_ms += u64::from(advance_ms);
                info.index = m.pushed.len() as u64;
                let ingest_ms = m.now_ms.saturating_sub(u64::from(age_ms));
                let size = usize::from(size);
                let unit = Arc::new(HubUnit {
                    info,
                    has_parameter_sets: info.kind == FrameKind::ParameterSets,
                    capture_us: 0,
                    ingest_us: ingest_ms * 1000,
                    ingest_at: m.t0 + Duration::from_millis(ingest_ms),
                    data: vec![0; size],
                });
                m.started |= info.kind == FrameKind::Keyframe;
                if m.started || info.kind == FrameKind::ParameterSets {
                    m.accepted += 1;
                }
                if info.kind == FrameKind::ParameterSets {
                    m.queued_param_bytes += size;
                }
                m.pushed.push(info);
                m.sizes.push(size);
                q.push(unit, catch_up);
            }
            Op::Pop { all, advance_ms } => {
                m.now_ms += u64::from(advance_ms);
                while m.pop(&mut q) && all {}
            }
            Op::UpstreamLost(units) => {
                q.upstream_lost(units);
                if m.started {
                    m.upstream += u64::from(units);
                }
            }
            Op::Take => m.take(&mut q),
        }
        m.check(&q);
    }
    // Long after: everything left is popped or dropped.
    m.now_ms += 3_600_000;
    while m.pop(&mut q) {}
    m.check(&q);
    m.take(&mut q);
    // The decoder's view: every unit of the stream in order, delivered or missing.
    let mut decoder = Chain::default();
    for u in &m.pushed {
        let delivered = m.popped_set.contains(&u.index);
        assert_eq!(
            decoder.step(u, delivered),
            delivered,
            "unit {} ({:?}) sent undecodable",
            u.index,
            u.kind
        );
    }
}
