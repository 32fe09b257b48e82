//! The RDC agent on a real Linux receiver (a namespace of lowtide-netem's dumbbell) with the
//! RDC cell on the bottleneck and real cubic flows. Needs root; each test is a few seconds of
//! traffic and holds a lock, so the timing of one is not disturbed by another on two cores.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lowtide_netem::config::{AqmConfig, QueueLimit, RdcConfig, RdcMode, TopologyConfig};
use lowtide_netem::{Dumbbell, Host, LinkReport, Percentiles, RunOptions};
use lowtide_rdc::driver::sched::Scheduling;
use lowtide_rdc::iptables::{self, Selection};
use lowtide_rdc::{AgentConfig, AgentError, AgentHandle, AgentStatus, DriverConfig};
use socket2::{Domain, Protocol, Socket, Type};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

const PORT: u16 = 7300;

/// What one run measured.
#[derive(Debug)]
struct Outcome {
    /// RTO events at the sender (TcpExt TCPTimeouts).
    timeouts: u64,
    /// Packets the sender learned were CE-marked (TcpExt TCPDeliveredCE).
    delivered_ce: u64,
    /// Median of the senders' cwnd samples (TCP_INFO, every 20 ms after the first second).
    cwnd_p50: u32,
    /// Median smoothed RTT, ms.
    srtt_p50_ms: f64,
    goodput_mbps: f64,
    forward: LinkReport,
    agent: Option<AgentStatus>,
    /// Chains of ours left in the receiver after the agent stopped.
    chains_left: Vec<String>,
}

/// The host's TcpExt counters (per network namespace: `/proc/net` would be the main thread's).
fn tcp_ext(host: &Host) -> HashMap<String, u64> {
    let text = host
        .run(|| std::fs::read_to_string("/proc/thread-self/net/netstat").unwrap_or_default())
        .unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("TcpExt:")).collect();
    let (names, values) = (lines[0], lines[1]);
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .skip(1)
        .filter_map(|(n, v)| Some((n.to_string(), v.parse().ok()?)))
        .collect()
}

/// Chains of ours in the receiver's mangle table.
fn chains(net: &Dumbbell) -> Vec<String> {
    net.receiver(0)
        .run(|| iptables::our_chains("iptables"))
        .unwrap()
}

fn tcp_info(fd: i32) -> Option<libc::tcp_info> {
    lowtide_sockopt::tcp_info(fd).ok()
}

fn median<T: Copy + PartialOrd>(mut v: Vec<T>) -> Option<T> {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    v.get(v.len() / 2).copied()
}

/// The driver settings of these tests: the agent for the test port only.
fn driver(agent: AgentConfig) -> DriverConfig {
    DriverConfig {
        agent,
        selection: Selection {
            ports: vec![PORT],
            loopback: false,
        },
        ..DriverConfig::default()
    }
}

fn network(cfg: TopologyConfig) -> Dumbbell {
    Dumbbell::new(
        cfg,
        RunOptions {
            seed: 7,
            ..Default::default()
        },
    )
    .expect("building the dumbbell (run tests as root)")
}

/// `flows` cubic flows from sender 0 to receiver 0 for `secs`, with the agent in the receiver
/// when `agent` is given.
fn run(cfg: TopologyConfig, agent: Option<AgentConfig>, flows: usize, secs: u64) -> Outcome {
    run_on(&network(cfg), agent.map(driver), flows, secs)
}

fn run_on(net: &Dumbbell, agent: Option<DriverConfig>, flows: usize, secs: u64) -> Outcome {
    let handle = agent.map(|cfg| {
        net.receiver(0)
            .run(move || AgentHandle::start(cfg))
            .unwrap()
            .expect("starting the agent")
    });
    let before = tcp_ext(net.sender(0));
    let start = Instant::now();
    let end = start + Duration::from_secs(secs);
    let sink = net
        .receiver(0)
        .spawn("sink", move || {
            let l = TcpListener::bind(("0.0.0.0", PORT)).unwrap();
            let readers: Vec<_> = (0..flows)
                .map(|_| {
                    let (mut c, _) = l.accept().unwrap();
                    std::thread::spawn(move || {
                        c.set_read_timeout(Some(Duration::from_millis(100)))
                            .unwrap();
                        let mut buf = vec![0u8; 1 << 16];
                        let mut bytes = 0u64;
                        while Instant::now() < end {
                            match c.read(&mut buf) {
                                Ok(0) => break,
                                Ok(n) => bytes += n as u64,
                                Err(_) => {}
                            }
                        }
                        bytes
                    })
                })
                .collect();
            readers.into_iter().map(|r| r.join().unwrap()).sum::<u64>()
        })
        .unwrap();
    let dst = SocketAddr::from((net.receiver(0).addr(), PORT));
    let senders: Vec<_> = (0..flows)
        .map(|_| {
            net.sender(0)
                .spawn("source", move || {
                    let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
                    lowtide_sockopt::set_congestion(s.as_raw_fd(), "cubic").unwrap();
                    s.connect_timeout(&dst.into(), Duration::from_secs(3))
                        .unwrap();
                    s.set_write_timeout(Some(Duration::from_millis(20)))
                        .unwrap();
                    let mut s: std::net::TcpStream = s.into();
                    let chunk = vec![0x5au8; 1 << 16];
                    let (mut cwnd, mut srtt) = (vec![], vec![]);
                    let mut next_sample = start + Duration::from_secs(1);
                    while Instant::now() < end {
                        match s.write(&chunk) {
                            Ok(_) => {}
                            Err(e)
                                if matches!(
                                    e.kind(),
                                    ErrorKind::WouldBlock | ErrorKind::TimedOut
                                ) => {}
                            Err(_) => break,
                        }
                        if Instant::now() >= next_sample {
                            if let Some(i) = tcp_info(s.as_raw_fd()) {
                                cwnd.push(i.tcpi_snd_cwnd);
                                srtt.push(f64::from(i.tcpi_rtt) / 1000.0);
                            }
                            next_sample += Duration::from_millis(20);
                        }
                    }
                    (cwnd, srtt)
                })
                .unwrap()
        })
        .collect();
    let (mut cwnd, mut srtt) = (vec![], vec![]);
    for s in senders {
        let (c, r) = s.join().unwrap();
        cwnd.extend(c);
        srtt.extend(r);
    }
    let bytes = sink.join().unwrap();
    let after = tcp_ext(net.sender(0));
    let agent = handle.map(|h| h.stop().expect("the agent stops cleanly"));
    let chains_left = chains(net);
    let delta = |k: &str| after.get(k).copied().unwrap_or(0) - before.get(k).copied().unwrap_or(0);

    Outcome {
        timeouts: delta("TCPTimeouts"),
        delivered_ce: delta("TCPDeliveredCE"),
        cwnd_p50: median(cwnd).unwrap_or(0),
        srtt_p50_ms: median(srtt).unwrap_or(0.0),
        goodput_mbps: bytes as f64 * 8.0 / secs as f64 / 1e6,
        forward: net.forward().report(),
        agent,
        chains_left,
    }
}

/// 10 Mbit/s, 20 ms RTT, ECN hosts, a FIFO of `limit` packets with `aqm` on the forward link.
fn dumbbell(limit: usize, aqm: AqmConfig) -> TopologyConfig {
    let mut cfg = TopologyConfig::symmetric(10.0, 10.0);
    cfg.hosts.ecn = true;
    cfg.forward.queue = QueueLimit::Packets(limit);
    cfg.forward.aqm = aqm;
    cfg
}

/// RED with the paper's ECN settings (Section 5.1): thresholds 1/6 and 1/2 of the buffer.
fn red(limit: usize) -> AqmConfig {
    AqmConfig::Red {
        min_th: Some(limit as f64 / 6.0),
        max_th: Some(limit as f64 / 2.0),
        max_p: 0.1,
        weight: 0.002,
        gentle: true,
        ecn: true,
        mark_p: None,
    }
}

fn one_bit_cell() -> AqmConfig {
    AqmConfig::Rdc(RdcConfig::default())
}

#[test]
fn one_bit_rdc_keeps_cubic_windows_open_where_ecn_halves_them() {
    let _g = serial();
    // Eight cubic flows, 5 s, 100-packet FIFO: plain ECN (RED marks, the sender halves its
    // window) against 1-bit RDC (the cell marks, the agent clears CE and holds ACKs).
    let ecn = run(dumbbell(100, red(100)), None, 8, 5);
    let rdc = run(
        dumbbell(100, one_bit_cell()),
        Some(AgentConfig::default()),
        8,
        5,
    );
    eprintln!("plain ECN: {ecn:#?}\n1-bit RDC: {rdc:#?}");
    let a = rdc.agent.as_ref().expect("the agent ran");
    // The agent held ACKs and cleared every CE mark the cell set: the sender never heard of
    // one, while with plain ECN it did.
    assert!(
        rdc.forward.marks.get("rdc_excess").copied().unwrap_or(0) > 100,
        "{:?}",
        rdc.forward.marks
    );
    assert!(
        a.counters.ce_cleared > 100 && a.counters.held > 100,
        "{:?}",
        a.counters
    );
    assert!(a.counters.released_on_time > 0);
    assert_eq!(
        rdc.delivered_ce, 0,
        "the sender saw CE marks the agent should have cleared"
    );
    assert!(
        ecn.delivered_ce > 100,
        "plain ECN: {} CE marks delivered",
        ecn.delivered_ce
    );
    // The window does not collapse: longer round trips instead of halvings. Seen on this
    // machine (5 runs): median cwnd 14-15 against 4-5 segments.
    assert!(
        rdc.cwnd_p50 >= 2 * ecn.cwnd_p50,
        "cwnd {} vs {}",
        rdc.cwnd_p50,
        ecn.cwnd_p50
    );
    // Timeouts: plain ECN had 0-6 in 5 runs, 1-bit RDC 0-1; both can have one or two from the
    // slow-start overshoot at the start, so RDC may not exceed the larger of ECN's count and 2.
    assert!(
        rdc.timeouts <= ecn.timeouts.max(2),
        "RTOs {} vs {}",
        rdc.timeouts,
        ecn.timeouts
    );
    assert!(rdc.chains_left.is_empty(), "{:?}", rdc.chains_left);
}

#[test]
fn exact_rdc_holds_acks_by_the_stamped_delay_and_keeps_the_fifo_short() {
    let _g = serial();
    let rdc = AqmConfig::Rdc(RdcConfig {
        mode: RdcMode::Exact,
        ..RdcConfig::default()
    });
    let o = run(dumbbell(60, rdc), Some(AgentConfig::exact()), 2, 4);
    eprintln!("{o:#?}");
    let a = o.agent.as_ref().expect("the agent ran");
    assert!(
        a.counters.delays_read > 1000 && a.counters.held > 100,
        "{:?}",
        a.counters
    );
    assert_eq!(o.forward.rdc_unstamped, 0);
    // The agent's echoes told the cell both flows answer: they are stamped, not held (only
    // what a flow sent before its first echo came back may have waited in the delay line).
    let answering = o.forward.rdc_answering.expect("the cell keeps a table");
    assert!(
        answering.learned == 2 && a.counters.echoed > 1000,
        "{answering:?}, {} echoed",
        a.counters.echoed
    );
    let held: u64 = o.forward.holds.values().sum();
    assert!(held * 100 < o.forward.arrived_packets, "{held} held");
    // Root may raise the agent's thread to SCHED_FIFO, so held ACKs leave at their time.
    assert_eq!(a.driver.scheduling, Scheduling::Realtime);
    // The ACKs wait instead of the data: the senders see the stamped delay as round trip,
    // while the FIFO stays short (a run: p50 2.3 ms of a 72 ms FIFO).
    assert_round_trip_has_the_delay_and_the_fifo_is_short(&o, o.forward.rdc_delay_ms);
    assert!(o.chains_left.is_empty(), "{:?}", o.chains_left);
}

#[test]
fn without_an_agent_the_exact_cell_delays_the_data_as_a_fifo_would() {
    let _g = serial();
    let rdc = AqmConfig::Rdc(RdcConfig {
        mode: RdcMode::Exact,
        ..RdcConfig::default()
    });
    let o = run(dumbbell(60, rdc), None, 2, 3);
    eprintln!("{:#?}", o.forward);
    // No echo: no flow answers, nothing is stamped, the data waits the bucket's delay.
    assert_eq!(o.forward.rdc_answering.map(|a| a.learned), Some(0));
    assert_eq!(o.forward.rdc_delay_ms.count, 0);
    let held = o
        .forward
        .holds
        .get("rdc_not_answering")
        .copied()
        .unwrap_or(0);
    assert!(held > 1000, "{held} held");
    // The senders see it as round trip, as through a FIFO at ρ·C; the real FIFO stays short.
    assert_round_trip_has_the_delay_and_the_fifo_is_short(&o, o.forward.rdc_hold_ms);
}

/// The cell's delay (`delay`: stamped or held) is above 10 ms at the median, the senders' srtt
/// holds at least half of it above the 20 ms path, and the real FIFO's median sojourn is short.
fn assert_round_trip_has_the_delay_and_the_fifo_is_short(o: &Outcome, delay: Percentiles) {
    assert!(delay.p50 > 10.0, "{delay:?}");
    assert!(
        o.srtt_p50_ms > 20.0 + delay.p50 / 2.0,
        "srtt {}",
        o.srtt_p50_ms
    );
    assert!(
        o.forward.sojourn_ms.p50 < 15.0,
        "{:?}",
        o.forward.sojourn_ms
    );
}

/// Compares plain ECN with 1-bit RDC for a chosen setting: `FLOWS`, `SECS`, `LIMIT` (FIFO
/// packets), `THRESH` (thresh_tb packets). Prints, asserts nothing.
#[test]
#[ignore]
fn compare_ecn_and_one_bit_rdc() {
    let _g = serial();
    let env = |k: &str, d: f64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let (flows, secs, limit) = (
        env("FLOWS", 8.0) as usize,
        env("SECS", 5.0) as u64,
        env("LIMIT", 100.0) as usize,
    );
    let rdc = AqmConfig::Rdc(RdcConfig {
        thresh_tb: env("THRESH", 500.0),
        ..RdcConfig::default()
    });
    for (name, aqm, agent) in [
        ("ecn", red(limit), None),
        ("rdc1", rdc, Some(AgentConfig::default())),
    ] {
        let o = run(dumbbell(limit, aqm), agent, flows, secs);
        eprintln!(
            "{name}: timeouts {} ce {} cwnd {} srtt {:.1} ms goodput {:.2} Mbit/s drops {:?} marks {:?} sojourn p50 {:.1} p99 {:.1} ms",
            o.timeouts, o.delivered_ce, o.cwnd_p50, o.srtt_p50_ms, o.goodput_mbps, o.forward.drops, o.forward.marks,
            o.forward.sojourn_ms.p50, o.forward.sojourn_ms.p99
        );
    }
}

#[test]
fn a_full_kernel_queue_and_flows_without_timestamps_fail_open() {
    let _g = serial();
    let rdc = AqmConfig::Rdc(RdcConfig {
        mode: RdcMode::Exact,
        ..RdcConfig::default()
    });
    let net = network(dumbbell(60, rdc));
    net.sender(0)
        .sysctl("net.ipv4.tcp_timestamps", "0")
        .unwrap();
    // Room for 4 packets in each kernel queue: held ACKs fill it, later packets pass unseen.
    let cfg = DriverConfig {
        kernel_queue_len: 4,
        ..driver(AgentConfig::exact())
    };
    let o = run_on(&net, Some(cfg), 1, 4);
    let a = o.agent.as_ref().expect("the agent ran");
    assert!(
        o.goodput_mbps > 5.0,
        "the connection kept going: {} Mbit/s",
        o.goodput_mbps
    );
    assert!(a.counters.held > 0, "{:?}", a.counters);
    let f = &a.flows[0];
    assert_eq!(
        f.rtt_source,
        lowtide_rdc::rtt::RttSource::Handshake,
        "{f:?}"
    );
    assert_eq!(f.data_without_timestamps, f.data_packets);
    assert!(o.chains_left.is_empty(), "{:?}", o.chains_left);
}

#[test]
fn bad_input_gives_clear_errors_and_leaves_no_rule() {
    let _g = serial();
    let net = network(TopologyConfig::symmetric(10.0, 1.0));
    let start = |cfg: DriverConfig| {
        net.receiver(0)
            .run(move || AgentHandle::start(cfg))
            .unwrap()
    };
    let err = |r: Result<AgentHandle, AgentError>| r.err().expect("refused").to_string();
    let e = err(start(DriverConfig {
        iptables: Some("/nonexistent/iptables".into()),
        ..driver(AgentConfig::default())
    }));
    assert!(
        e.contains("iptables is missing") && e.contains("apt-get install iptables"),
        "{e}"
    );
    let e = err(start(driver(AgentConfig {
        decrease_below: 0.95,
        ..AgentConfig::default()
    })));
    assert!(e.contains("decrease_below") && e.contains("0.95"), "{e}");
    // A second agent on the same queue is refused and leaves the first one's rules alone.
    let first = start(driver(AgentConfig::default())).expect("the first agent starts");
    let e = err(start(driver(AgentConfig::default())));
    assert!(e.contains("in use") && e.contains("7100"), "{e}");
    assert_eq!(chains(&net).len(), 2, "the first agent's two chains");
    first.stop().unwrap();
    assert!(chains(&net).is_empty());
    // A panic in the code that owns the agent still removes its rules.
    let cfg = driver(AgentConfig::default());
    let panicked = net
        .receiver(0)
        .run(move || {
            std::panic::catch_unwind(move || {
                let _agent = AgentHandle::start(cfg).unwrap();
                assert_eq!(iptables::our_chains("iptables").len(), 2);
                panic!("the owner failed");
            })
            .is_err()
        })
        .unwrap();
    assert!(panicked);
    assert!(chains(&net).is_empty(), "{:?}", chains(&net));
}
