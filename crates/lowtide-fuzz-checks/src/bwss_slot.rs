//! BWSS's shared-memory slots (lowtide-bwss's `shm::Slot`) written by a hostile process: every
//! process that maps the region can write every slot, so the daemon reads whatever a reader
//! left there (`daemon::record_slot`: bytes read, bytes arrived and when, round-trip time)
//! and a reader paces its reads by whatever the daemon, or another reader, wrote (rate,
//! depth, clamp: `pacer::Pacer::allowance`, `fcs::window_clamp`).
//!
//! Input: the daemon's system flags (keep the share, judge arrivals, a known link, a video
//! flow with a minimum), then steps: advance ms u16, a slot u8, a field u8 and a value u64
//! written to it, and a read of some bytes. After each step the daemon ticks (every slot
//! read, σ, the allocation) and every reader asks for its allowance. Must hold:
//! - nothing panics; every budget is finite and non-negative;
//! - an allowance allows no more than the bucket's depth, waits for no more than that
//!   (`chunk ≤ depth`), and is ready no earlier than now;
//! - the window clamp from any rate, RTT and clamp is at least two segments and at most the
//!   largest window (`NO_CLAMP`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arbitrary::{Result, Unstructured};
use lowtide_bwss::config::Rule;
use lowtide_bwss::daemon::record_slot;
use lowtide_bwss::fcs::{window_clamp, CLAMP_MIN_SEGMENTS, NO_CLAMP};
use lowtide_bwss::pacer::Pacer;
use lowtide_bwss::shm::Slot;
use lowtide_bwss::{Bwss, Config, FlowInfo};

const FLOWS: usize = 3;

pub fn check(data: &[u8]) {
    let _ = run(&mut Unstructured::new(data));
}

fn slot() -> Slot {
    let z = || AtomicU64::new(0);
    Slot {
        inode: z(),
        rate: z(),
        depth: z(),
        bytes_read: z(),
        bytes_arrived: z(),
        arrived_at_ns: z(),
        clamp_milli_rtts: z(),
        rtt_us: z(),
    }
}

fn field(s: &Slot, i: u8) -> &AtomicU64 {
    match i % 8 {
        0 => &s.inode,
        1 => &s.rate,
        2 => &s.depth,
        3 => &s.bytes_read,
        4 => &s.bytes_arrived,
        5 => &s.arrived_at_ns,
        6 => &s.clamp_milli_rtts,
        _ => &s.rtt_us,
    }
}

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let flags: u8 = u.arbitrary()?;
    let mut cfg = Config::default();
    cfg.system.keep_share = flags & 1 != 0;
    cfg.system.judge_arrivals = flags & 2 != 0;
    if flags & 4 != 0 {
        cfg.system.link_kbps = 1000.0;
    }
    if flags & 8 != 0 {
        cfg.rules.push(Rule {
            name: None,
            program: Some("video".into()),
            local_port: None,
            remote_port: None,
            address: None,
            priority: 10,
            min_kbps: 520.0,
            weight: 0.0,
        });
    }
    cfg.validate().expect("a valid configuration");
    let t0 = Instant::now();
    // The monotonic clock's reading at t0, as the daemon would take it.
    let t0_ns = 1_000_000_000_000u64;
    let mut bwss = Bwss::new(cfg);
    let addr = |s: &str| s.parse::<SocketAddr>().expect("an address");
    let ids: Vec<_> = (0..FLOWS)
        .map(|i| {
            bwss.add_flow(
                t0,
                FlowInfo {
                    program: if i == 0 { "video" } else { "curl" }.into(),
                    local: addr("10.2.1.1:5000"),
                    remote: addr(&format!("10.1.1.1:{}", 8000 + i)),
                },
            )
        })
        .collect();
    let slots: Vec<Slot> = (0..FLOWS).map(|_| slot()).collect();
    let mut pacers: Vec<Pacer> = (0..FLOWS).map(|_| Pacer::default()).collect();
    let mut now = t0;
    let mut steps = 0;
    while !u.is_empty() && steps < 500 {
        steps += 1;
        now += Duration::from_millis(u64::from(u.arbitrary::<u16>()?));
        let now_ns = t0_ns + (now - t0).as_nanos() as u64;
        let s = &slots[usize::from(u.arbitrary::<u8>()?) % FLOWS];
        let (f, v): (u8, u64) = (u.arbitrary()?, u.arbitrary()?);
        field(s, f).store(v, Ordering::Relaxed);
        // The daemon's tick: every slot read, then σ and the budgets published.
        for (id, s) in ids.iter().zip(&slots) {
            record_slot(&mut bwss, *id, s, now, now_ns);
        }
        bwss.on_tick(now);
        for (id, s) in ids.iter().zip(&slots) {
            let Some(b) = bwss.budget(*id) else {
                continue;
            };
            assert!(b.rate.is_finite() && b.rate >= 0.0, "{b:?}");
            assert!(b.depth.is_finite() && b.depth >= 0.0, "{b:?}");
            assert!(b.clamp_rtts.is_finite() && b.clamp_rtts >= 0.0, "{b:?}");
            // What the daemon writes (as `daemon::publish` does), unless the input overwrites
            // it next.
            if u.ratio(3, 4)? {
                s.depth.store(b.depth.round() as u64, Ordering::Relaxed);
                s.clamp_milli_rtts
                    .store((b.clamp_rtts * 1e3).round() as u64, Ordering::Relaxed);
                s.rate
                    .store((b.rate.round() as u64).max(1), Ordering::Release);
            }
        }
        // Every reader: its allowance, then a read of some bytes.
        let read = u64::from(u.arbitrary::<u16>()?);
        for (p, s) in pacers.iter_mut().zip(&slots) {
            if let Some(a) = p.allowance(s, now) {
                let depth = s.depth.load(Ordering::Relaxed).max(1);
                assert!(a.bytes <= depth, "{a:?} from depth {depth}");
                assert!(a.chunk <= depth, "{a:?} from depth {depth}");
                assert!(a.ready >= now);
            }
            p.consumed(s, now, read);
        }
        let rate = s.rate.load(Ordering::Relaxed) as f64;
        let rtt = Duration::from_micros(s.rtt_us.load(Ordering::Relaxed));
        let rtts = s.clamp_milli_rtts.load(Ordering::Relaxed) as f64 / 1e3;
        let mss = u32::from(u.arbitrary::<u16>()?);
        let w = window_clamp(rate, rtt, mss, rtts);
        assert!(w >= CLAMP_MIN_SEGMENTS * mss.max(536));
        assert!(w <= NO_CLAMP.max(CLAMP_MIN_SEGMENTS * mss.max(536)));
    }
    Ok(())
}
