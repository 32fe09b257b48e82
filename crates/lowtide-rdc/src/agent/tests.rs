use super::*;
use crate::segment::tests::Spec;

const MS: Duration = Duration::from_millis(1);

fn one_bit() -> Agent<u32> {
    Agent::new(AgentConfig {
        default_rtt: 40 * MS,
        ..AgentConfig::default()
    })
    .unwrap()
}

fn out(a: &mut Agent<u32>, now: Instant, ip: &[u8], id: u32) {
    a.handle_outgoing(now, segment::parse(ip), id);
}

fn released(a: &mut Agent<u32>) -> Vec<u32> {
    std::iter::from_fn(|| a.poll_release()).collect()
}

fn data(seq: u32, ce: bool) -> Vec<u8> {
    let mut s = Spec::data(seq, 1000);
    if ce {
        s.ecn = wire::CE;
    }
    s.build()
}

/// Feeds `n` data packets 1 ms apart from `t`, all marked or none; returns the time after.
fn feed(a: &mut Agent<u32>, t: Instant, n: u32, ce: bool) -> Instant {
    for i in 0..n {
        let r = a.handle_incoming(t + MS * i, &data(1 + 1000 * i, ce));
        assert_eq!(r.clear_ce, ce);
    }
    t + MS * n
}

#[test]
fn whole_outgoing_packets_of_tracked_flows_are_echoed() {
    let mut a = one_bit();
    let ack = Spec::ack(1001).build();
    let parsed = segment::parse(&ack);
    assert!(
        !a.wants_echo(&parsed, &ack),
        "no flow yet: not ours to answer for"
    );
    a.handle_incoming(Instant::now(), &data(1, false));
    assert!(a.wants_echo(&parsed, &ack));
    // A header-only copy of a longer packet would be trimmed if given back: skipped.
    assert!(!a.wants_echo(&parsed, &ack[..ack.len() - 1]));
    assert_eq!((a.counters().echoed, a.counters().echo_skipped), (1, 1));
    let mut echoed = ack.clone();
    wire::set_echo(&mut echoed).unwrap();
    assert!(wire::is_echo(&echoed));
    assert_eq!(segment::parse(&echoed).map(|s| s.ack), Ok(1001));
    let mut quiet = Agent::<u32>::new(AgentConfig {
        echo: false,
        ..AgentConfig::default()
    })
    .unwrap();
    quiet.handle_incoming(Instant::now(), &data(1, false));
    assert!(!quiet.wants_echo(&parsed, &ack));
}

#[test]
fn marked_periods_raise_the_delay_and_acks_wait_for_it_in_order() {
    let mut a = one_bit();
    let t0 = Instant::now();
    // First period: 40 ms (the default RTT); the 41st packet closes it, all marked.
    let t = feed(&mut a, t0, 41, true);
    assert_eq!(a.status().flows[0].delay_ms, 40.0);
    assert_eq!(a.counters().ce_cleared, 41);
    // Three ACKs 1 ms apart: held 40 ms each, in order.
    for (i, ack) in [1001u32, 3001, 5001].iter().enumerate() {
        out(
            &mut a,
            t + MS * i as u32,
            &Spec::ack(*ack).build(),
            i as u32,
        );
    }
    assert!(released(&mut a).is_empty());
    assert_eq!(a.poll_timeout(), Some(t + 40 * MS));
    a.handle_timeout(t + 40 * MS);
    assert_eq!(released(&mut a), vec![0]);
    a.handle_timeout(t + 42 * MS);
    assert_eq!(released(&mut a), vec![1, 2]);
    assert_eq!(a.counters().released_on_time, 3);
    assert_eq!(a.held_now(), 0);
}

#[test]
fn sack_and_duplicate_acks_pass_at_once_behind_what_was_held() {
    let mut a = one_bit();
    let t = feed(&mut a, Instant::now(), 41, true);
    out(&mut a, t, &Spec::ack(1001).build(), 1);
    out(&mut a, t, &Spec::ack(2001).build(), 2);
    // Data 3001.. was lost: the kernel acks 2001 again with a SACK block.
    let mut dup = Spec::ack(2001);
    dup.sack = Some((4001, 5001));
    out(&mut a, t + MS, &dup.build(), 3);
    assert_eq!(
        released(&mut a),
        vec![1, 2, 3],
        "flushed in order, then the dup"
    );
    // Without SACK: the same ack and window twice is a duplicate.
    out(&mut a, t + 2 * MS, &Spec::ack(2001).build(), 4);
    assert_eq!(released(&mut a), vec![4]);
    let c = a.counters();
    assert_eq!((c.flushed, c.passed.sack, c.passed.dup_ack), (2, 1, 1));
    assert_eq!(c.held, 2);
}

#[test]
fn unmarked_periods_bring_the_delay_back_to_zero() {
    let mut a = one_bit();
    let mut t = feed(&mut a, Instant::now(), 41, true);
    assert_eq!(a.status().flows[0].delay_ms, 40.0);
    // Unmarked periods shrink it by cwnd/(cwnd+1) each; it ends at zero.
    for _ in 0..200 {
        t = feed(&mut a, t, 90, false);
    }
    let f = &a.status().flows[0];
    assert_eq!(f.delay_ms, 0.0, "{f:?}");
    assert!(f.decreases > 5 && f.increases == 1, "{f:?}");
    // With no delay and nothing held, ACKs pass at once.
    out(&mut a, t, &Spec::ack(1001).build(), 9);
    assert_eq!(released(&mut a), vec![9]);
    assert_eq!(a.counters().passed.no_delay, 1);
}

#[test]
fn exact_mode_reads_the_stamp_removes_it_and_holds_by_it() {
    let mut a: Agent<u32> = Agent::new(AgentConfig {
        max_delay: Duration::from_secs(1),
        ..AgentConfig::exact()
    })
    .unwrap();
    let t = Instant::now();
    let mut p = data(1, false);
    wire::stamp_delay(&mut p, 25 * MS).unwrap();
    let r = a.handle_incoming(t, &p);
    assert_eq!(
        r,
        Rewrite {
            clear_ce: false,
            clear_delay: true
        }
    );
    r.apply(&mut p).unwrap();
    assert_eq!(wire::delay(&p), Ok(None));
    out(&mut a, t, &Spec::ack(1001).build(), 1);
    a.handle_timeout(t + 24 * MS);
    assert!(released(&mut a).is_empty());
    a.handle_timeout(t + 25 * MS);
    assert_eq!(released(&mut a), vec![1]);
    // Too large: clamped to max_delay. Without DF the flag is garbage: counted, kept.
    let mut p = data(1001, false);
    wire::stamp_delay(&mut p, Duration::from_secs(5)).unwrap();
    a.handle_incoming(t, &p);
    assert_eq!(a.status().flows[0].delay_ms, 1000.0);
    p[6] = 0x80; // the flag without DF: the ID may be a fragment ID
    assert_eq!(a.handle_incoming(t, &p), Rewrite::default());
    let c = a.counters();
    assert_eq!(
        (c.delays_read, c.delays_clamped, c.delays_invalid),
        (2, 1, 1)
    );
}

/// Exact mode, path RTT 100 ms (the default, no timestamps): 200 ACKs held by
/// `steady`, then `sacks` ACKs with SACK blocks pass at once, then the stamp becomes
/// `then` and one pure ACK is held. Its hold, and the agent's counters.
fn hold_after(
    guard: Option<Duration>,
    steady: Duration,
    sacks: u32,
    then: Duration,
) -> (Duration, Counters) {
    let mut a: Agent<u32> = Agent::new(AgentConfig {
        rto_guard: guard,
        ..AgentConfig::exact()
    })
    .unwrap();
    let stamped = |seq: u32, d: Duration| {
        let mut p = data(seq, false);
        wire::stamp_delay(&mut p, d).unwrap();
        p
    };
    let mut t = Instant::now();
    let mut ack = 1001;
    a.handle_incoming(t, &stamped(1, steady));
    for i in 0..200 {
        out(&mut a, t, &Spec::ack(ack).build(), i);
        ack += 1000;
        t += 10 * MS;
        a.handle_timeout(t);
    }
    // The rest leave at their times too.
    for _ in 0..steady.as_millis() / 10 {
        t += 10 * MS;
        a.handle_timeout(t);
    }
    assert_eq!(a.held_now(), 0);
    released(&mut a);
    for i in 0..sacks {
        let mut dup = Spec::ack(ack);
        dup.sack = Some((ack + 1000 * (i + 1), ack + 1000 * (i + 2)));
        out(&mut a, t, &dup.build(), 1000 + i);
        t += MS;
    }
    released(&mut a);
    a.handle_incoming(t, &stamped(ack, then));
    out(
        &mut a,
        t,
        &Spec::ack(ack + 1000 * (sacks + 2)).build(),
        9999,
    );
    let due = a.poll_timeout().expect("held");
    (due - t, *a.counters())
}

#[test]
fn the_rto_guard_shortens_a_hold_the_senders_rto_would_not_wait_for() {
    let off = |steady, sacks, then| hold_after(None, steady, sacks, then).0;
    let on = |steady, sacks, then| hold_after(Some(50 * MS), steady, sacks, then);
    // Steady: the sender's SRTT is 400 ms, its RTO at least 600 ms; 300 ms is allowed.
    let (hold, c) = on(300 * MS, 0, 300 * MS);
    assert_eq!((hold, c.rto_bounded), (300 * MS, 0));
    // After a loss, eight SACK ACKs passed at once pull the sender's SRTT to about
    // 203 ms: the ACK that ends the recovery may wait about 253 ms (203 + 200 − 100 −
    // 50), not the delay's 300 ms, which would reach the sender after its RTO.
    assert_eq!(off(300 * MS, 8, 300 * MS), 300 * MS);
    let (hold, c) = on(300 * MS, 8, 300 * MS);
    assert!(hold > 250 * MS && hold < 255 * MS, "{hold:?}");
    assert_eq!(c.rto_bounded, 1);
    // A jump of the delay from 100 to 400 ms: the first ACK waits 250 ms (an SRTT of
    // 200 ms + 200 − 100 − 50), later ones follow the sender's SRTT up.
    assert_eq!(off(100 * MS, 0, 400 * MS), 400 * MS);
    assert_eq!(on(100 * MS, 0, 400 * MS).0, 250 * MS);
}

#[test]
fn a_release_after_its_time_is_counted_late() {
    let mut a: Agent<u32> = Agent::new(AgentConfig::exact()).unwrap();
    let t = Instant::now();
    for seq in [1, 1001, 2001] {
        let mut p = data(seq, false);
        wire::stamp_delay(&mut p, 10 * MS).unwrap();
        a.handle_incoming(t, &p);
    }
    out(&mut a, t, &Spec::ack(1001).build(), 1);
    out(&mut a, t + MS / 2, &Spec::ack(2001).build(), 2);
    a.handle_timeout(t + 11 * MS); // 1 ms and 0.5 ms after their times
    assert_eq!(released(&mut a), vec![1, 2]);
    let c = a.counters();
    assert_eq!((c.released_on_time, c.released_late), (2, 0));
    assert_eq!(c.max_release_lateness_us, 1000);
    out(&mut a, t + 11 * MS, &Spec::ack(3001).build(), 3);
    a.handle_timeout(t + 25 * MS);
    assert_eq!(released(&mut a), vec![3]);
    let c = a.counters();
    assert_eq!((c.released_late, c.max_release_lateness_us), (1, 4000));
}

/// An exact agent holding 10 ms, with `pacing`: 40 ACKs 1 ms apart, then a bunch of 8
/// generated at once (as after a stall); returns when each of the bunch left, driving
/// the timer as a driver would.
fn bunch_leaves(pacing: Option<f64>) -> (Vec<Duration>, Counters) {
    let mut a: Agent<u32> = Agent::new(AgentConfig {
        release_pacing: pacing,
        ..AgentConfig::exact()
    })
    .unwrap();
    a.record_releases(1000);
    let t0 = Instant::now();
    let mut p = data(1, false);
    wire::stamp_delay(&mut p, 10 * MS).unwrap();
    a.handle_incoming(t0, &p);
    let mut id = 0;
    let mut ack = |a: &mut Agent<u32>, at: Instant| {
        id += 1;
        out(a, at, &Spec::ack(1 + 1000 * id).build(), id);
    };
    for i in 0..40 {
        ack(&mut a, t0 + MS * i);
    }
    let bunch = t0 + MS * 48;
    for _ in 0..8 {
        ack(&mut a, bunch);
    }
    let mut now = t0;
    while let Some(at) = a.poll_timeout() {
        now = now.max(at);
        a.handle_timeout(now);
        released(&mut a);
        if a.held_now() == 0 {
            break;
        }
    }
    let (log, lost) = a.take_release_log(t0);
    assert_eq!((log.len(), lost), (48, 0));
    let left = log[40..]
        .iter()
        .map(|r| Duration::from_micros(r.left_us) - 58 * MS)
        .collect();
    (left, *a.counters())
}

#[test]
fn a_bunch_of_held_acks_leaves_at_once_unless_paced() {
    let (left, c) = bunch_leaves(None);
    assert!(left.iter().all(|d| d.is_zero()), "{left:?}");
    assert_eq!(c.paced, 0);
    // Paced at 1.25 x the flow's rate (mean gap 1 ms before the bunch, about 0.75 ms
    // after it: the bunch's 9 ms gap counts as 4): two leave at once, then one about
    // every 0.6 ms.
    let (left, c) = bunch_leaves(Some(1.25));
    let gaps: Vec<f64> = left
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64() * 1000.0)
        .collect();
    assert_eq!(gaps[0], 0.0, "{gaps:?}");
    assert!(
        gaps[1..].iter().all(|g| (0.55..=0.85).contains(g)),
        "{gaps:?}"
    );
    assert_eq!(c.paced, 6);
    assert_eq!(c.released_late, 0, "a paced wait is not lateness");
    assert!(c.max_pace_wait_us > 3000, "{}", c.max_pace_wait_us);
}

#[test]
fn garbage_unknown_flows_and_a_full_hold_pass_at_once() {
    let mut a: Agent<u32> = Agent::new(AgentConfig {
        max_held: 2,
        max_flows: 1,
        default_rtt: 40 * MS,
        ..AgentConfig::default()
    })
    .unwrap();
    let t0 = Instant::now();
    out(&mut a, t0, &[0xde, 0xad], 1);
    out(&mut a, t0, &Spec::ack(5).build(), 2);
    assert_eq!(a.handle_incoming(t0, &[0x45; 10]), Rewrite::default());
    let t = feed(&mut a, t0, 41, true);
    // A second flow does not fit the table: CE is left for the kernel.
    let mut other = Spec::data(1, 1000);
    other.src.1 = 40001;
    other.ecn = wire::CE;
    assert_eq!(a.handle_incoming(t, &other.build()), Rewrite::default());
    for i in 0..3 {
        out(&mut a, t, &Spec::ack(1001 + 1000 * i).build(), 10 + i);
    }
    // The third found the hold full: it passes behind the two held before it.
    assert_eq!(released(&mut a), vec![1, 2, 10, 11, 12]);
    let c = a.counters();
    assert_eq!(
        (
            c.passed.malformed,
            c.passed.untracked,
            c.passed.hold_full,
            c.incoming_untracked,
            c.incoming_malformed
        ),
        (1, 1, 1, 1, 1)
    );
}

#[test]
fn idle_flows_are_forgotten_but_not_while_they_hold_packets() {
    let mut a = one_bit();
    let t = feed(&mut a, Instant::now(), 41, true);
    out(&mut a, t, &Spec::ack(1001).build(), 1);
    let later = t + Duration::from_secs(61);
    a.expire_idle(later);
    assert_eq!(a.status().flows.len(), 1, "it still holds an ACK");
    a.handle_timeout(later);
    assert_eq!(released(&mut a), vec![1]);
    a.handle_timeout(later + 2 * EXPIRY_SCAN);
    assert!(a.status().flows.is_empty());
    assert_eq!(a.counters().flows_expired, 1);
}

#[test]
fn timestamps_give_the_path_rtt_without_the_hold() {
    let mut a = one_bit();
    let t0 = Instant::now();
    let t = feed(&mut a, t0, 41, true); // delay 40 ms from here
    let mut ack = Spec::ack(1001);
    ack.ts = Some((500, 1));
    out(&mut a, t, &ack.build(), 1);
    a.handle_timeout(t + 40 * MS);
    assert_eq!(released(&mut a), vec![1]);
    // The sender echoes TSval 500 in data arriving 30 ms after the release.
    let mut d = Spec::data(50_000, 1000);
    d.ts = Some((9, 500));
    a.handle_incoming(t + 70 * MS, &d.build());
    let f = &a.status().flows[0];
    assert_eq!(
        (f.rtt_ms, f.rtt_source),
        (30.0, crate::rtt::RttSource::Timestamps)
    );
    assert_eq!(f.data_without_timestamps, 41);
}

#[test]
fn shutting_down_releases_everything() {
    let mut a = one_bit();
    let t = feed(&mut a, Instant::now(), 41, true);
    for i in 0..5 {
        out(&mut a, t, &Spec::ack(1001 + i * 1000).build(), i);
    }
    a.release_all(t);
    assert_eq!(released(&mut a), vec![0, 1, 2, 3, 4]);
    assert_eq!(a.held_now(), 0);
}

mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever the traffic, every outgoing packet leaves exactly once, each flow's in
        /// the order it was sent, and none leaves after its release time plus the step.
        #[test]
        fn every_packet_leaves_once_in_order(
            events in proptest::collection::vec((0u8..4, 0u16..3, any::<bool>(), 0u64..30), 1..300)
        ) {
            let mut a = one_bit();
            let t0 = Instant::now();
            let mut t = t0;
            let mut sent: Vec<(u16, u32)> = vec![];
            let mut left: Vec<u32> = vec![];
            for (kind, flow, flag, step) in events {
                t += MS * step as u32;
                let port = 40000 + flow;
                match kind {
                    0 | 1 => {
                        let mut d = Spec::data(1, 1000);
                        d.src.1 = port;
                        d.ecn = if flag { wire::CE } else { wire::ECT0 };
                        a.handle_incoming(t, &d.build());
                    }
                    _ => {
                        let mut ack = Spec::ack(sent.len() as u32);
                        ack.dst.1 = port;
                        if flag && kind == 3 {
                            ack.sack = Some((1, 2));
                        }
                        let id = sent.len() as u32;
                        sent.push((flow, id));
                        out(&mut a, t, &ack.build(), id);
                    }
                }
                a.handle_timeout(t);
                left.extend(std::iter::from_fn(|| a.poll_release()));
            }
            a.release_all(t);
            left.extend(std::iter::from_fn(|| a.poll_release()));
            let mut sorted = left.clone();
            sorted.sort();
            prop_assert_eq!(sorted, (0..sent.len() as u32).collect::<Vec<_>>());
            for f in 0..3 {
                let order: Vec<u32> = left.iter().copied().filter(|id| sent[*id as usize].0 == f).collect();
                prop_assert!(order.windows(2).all(|w| w[0] < w[1]), "flow {} out of order: {:?}", f, order);
            }
            prop_assert_eq!(a.held_now(), 0);
        }
    }
}
