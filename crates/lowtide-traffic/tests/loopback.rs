//! Loopback tests: real kernel TCP/UDP between threads of this process, each a few seconds at
//! most. Assertions are on byte counts and packet counts, never on timing, so a loaded 2-core
//! machine cannot make them flake.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use lowtide_traffic::cbr::{run_cbr, CbrConfig};
use lowtide_traffic::congestion;
use lowtide_traffic::elephant::{run_elephant, ElephantConfig};
use lowtide_traffic::mice::{run_mice, MiceConfig};
use lowtide_traffic::report::FlowOutcome;
use lowtide_traffic::runner::{run_schedule, Target};
use lowtide_traffic::schedule::{FlowKindName, Schedule, ScheduleError};
use lowtide_traffic::sink::{
    ConnectionEnd, SinkConfig, TcpSink, TcpSinkReport, UdpSink, UdpSinkReport,
};
use lowtide_traffic::{Direction, Stop, TrafficError};

const LOOPBACK: &str = "127.0.0.1:0";
/// Safety net: no sink outlives this even if a test forgets to stop it.
const SINK_LIMIT: Duration = Duration::from_secs(30);

fn tcp_sink_with(cfg: SinkConfig) -> (SocketAddr, Stop, JoinHandle<TcpSinkReport>) {
    let sink = TcpSink::bind_with(LOOPBACK.parse().unwrap(), cfg).unwrap();
    let addr = sink.local_addr();
    let stop = Stop::after(SINK_LIMIT);
    let s = stop.clone();
    (addr, stop, thread::spawn(move || sink.run(&s).unwrap()))
}

fn tcp_sink() -> (SocketAddr, Stop, JoinHandle<TcpSinkReport>) {
    tcp_sink_with(SinkConfig::default())
}

fn udp_sink() -> (SocketAddr, Stop, JoinHandle<UdpSinkReport>) {
    let sink = UdpSink::bind(LOOPBACK.parse().unwrap()).unwrap();
    let addr = sink.local_addr();
    let stop = Stop::after(SINK_LIMIT);
    let s = stop.clone();
    (addr, stop, thread::spawn(move || sink.run(&s).unwrap()))
}

#[test]
fn congestion_control_is_set_and_read_back() {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    congestion::set_congestion_control(&s, "cubic").unwrap();
    assert_eq!(congestion::congestion_control(&s).unwrap(), "cubic");
    congestion::set_congestion_control(&s, "reno").unwrap();
    assert_eq!(congestion::congestion_control(&s).unwrap(), "reno");
}

#[test]
fn an_elephant_with_a_window_never_has_more_unacknowledged_than_it() {
    let (addr, sink_stop, sink) = tcp_sink();
    let cfg = ElephantConfig {
        window: Some(8192),
        ..ElephantConfig::new(addr, "cubic")
    };
    let r = run_elephant(&cfg, &Stop::after(Duration::from_millis(300))).unwrap();
    sink_stop.stop_all();
    sink.join().unwrap();
    // Loopback acknowledges at once, so the flow still moves; what it wrote and what was
    // acknowledged at the stop differ by at most the window.
    assert!(r.bytes > 0, "{r:?}");
    assert!(r.bytes_written - r.bytes <= 8192, "{r:?}");
}

#[test]
fn elephant_cubic_upload_counts_match_the_sink() {
    let (addr, sink_stop, sink) = tcp_sink();
    let cfg = ElephantConfig {
        drain: Duration::from_secs(5),
        ..ElephantConfig::new(addr, "cubic")
    };
    let r = run_elephant(&cfg, &Stop::after(Duration::from_millis(800))).unwrap();
    sink_stop.stop_all();
    let s = sink.join().unwrap();

    assert!(r.bytes > 0 && r.goodput_bps > 0.0, "{r:?}");
    assert!(r.bytes <= r.bytes_written, "{r:?}");
    assert!(
        r.drained,
        "the sink should confirm within 5 s on loopback: {r:?}"
    );
    assert_eq!(s.bytes_received, r.bytes_written, "{s:?}");
    assert_eq!(s.records.len(), 1);
    let rec = &s.records[0];
    assert_eq!(rec.direction, Some(Direction::Upload));
    assert_eq!(rec.congestion_control.as_deref(), Some("cubic"));
    assert_eq!(rec.end, ConnectionEnd::Eof);
    assert_eq!(rec.bytes, r.bytes_written);
}

#[test]
fn elephant_download_the_sink_sends() {
    let (addr, sink_stop, sink) = tcp_sink();
    let cfg = ElephantConfig {
        direction: Direction::Download,
        ..ElephantConfig::new(addr, "reno")
    };
    let r = run_elephant(&cfg, &Stop::after(Duration::from_millis(500))).unwrap();
    // Give the sink time to see the reset, then stop it.
    thread::sleep(Duration::from_millis(200));
    sink_stop.stop_all();
    let s = sink.join().unwrap();
    assert!(r.bytes > 0 && r.goodput_bps > 0.0, "{r:?}");
    assert!(
        s.bytes_sent >= r.bytes,
        "sink sent {} < client read {}",
        s.bytes_sent,
        r.bytes
    );
    let rec = &s.records[0];
    assert_eq!(rec.direction, Some(Direction::Download));
    assert_eq!(rec.congestion_control.as_deref(), Some("reno"));
    assert!(
        matches!(rec.end, ConnectionEnd::PeerClosed | ConnectionEnd::Stopped),
        "{rec:?}"
    );
}

#[test]
fn mice_upload_transfer_exactly_n_kib_each() {
    let (addr, sink_stop, sink) = tcp_sink();
    let cfg = MiceConfig {
        max_transfers: Some(8),
        gap: Duration::from_millis(5),
        ..MiceConfig::new(addr, "cubic", 20 * 1024)
    };
    let r = run_mice(&cfg, &Stop::after(Duration::from_secs(20))).unwrap();
    sink_stop.stop_all();
    let s = sink.join().unwrap();

    assert_eq!((r.completed, r.failed, r.aborted), (8, 0, 0), "{r:?}");
    assert_eq!(r.bytes, 8 * 20 * 1024);
    let fct = r.completion_s.unwrap();
    assert_eq!(fct.count, 8);
    assert!(
        fct.min > 0.0 && fct.p50 <= fct.p99 && fct.p99 <= fct.max,
        "{fct:?}"
    );
    assert_eq!(s.connections, 8);
    assert_eq!(s.records.len(), 8);
    for rec in &s.records {
        assert_eq!(rec.bytes, 20 * 1024, "{rec:?}");
        assert_eq!(rec.end, ConnectionEnd::Eof, "{rec:?}");
    }
    assert_eq!(s.bytes_received, 8 * 20 * 1024);
}

#[test]
fn mice_download_transfer_exactly_n_kib_each() {
    let (addr, sink_stop, sink) = tcp_sink();
    let cfg = MiceConfig {
        direction: Direction::Download,
        max_transfers: Some(5),
        ..MiceConfig::new(addr, "reno", 50 * 1024)
    };
    let r = run_mice(&cfg, &Stop::after(Duration::from_secs(20))).unwrap();
    sink_stop.stop_all();
    let s = sink.join().unwrap();
    assert_eq!((r.completed, r.failed), (5, 0), "{r:?}");
    assert_eq!(s.records.len(), 5);
    for rec in &s.records {
        assert_eq!(
            (rec.bytes, rec.end),
            (50 * 1024, ConnectionEnd::SentAll),
            "{rec:?}"
        );
    }
}

#[test]
fn mice_stop_on_time_and_count_failures_against_a_dead_sink() {
    // Nothing listens on the port of a dropped sink: every transfer fails, none hangs.
    let addr = TcpSink::bind(LOOPBACK.parse().unwrap())
        .unwrap()
        .local_addr();
    let t = Instant::now();
    let r = run_mice(
        &MiceConfig::new(addr, "cubic", 1024),
        &Stop::after(Duration::from_millis(300)),
    )
    .unwrap();
    assert!(t.elapsed() < Duration::from_secs(5));
    assert_eq!(r.completed, 0);
    assert!(r.failed > 0 && r.last_error.is_some(), "{r:?}");
    assert!(r.completion_s.is_none());
}

#[test]
fn cbr_8_mbit_for_1_s_sends_the_scheduled_packets() {
    let (addr, sink_stop, sink) = udp_sink();
    let cfg = CbrConfig {
        server: addr,
        rate_bps: 8_000_000,
        packet_size: 1000,
        flow_id: 42,
    };
    let mut r = run_cbr(&cfg, &Stop::after(Duration::from_secs(1))).unwrap();
    thread::sleep(Duration::from_millis(100));
    sink_stop.stop_all();
    let s = sink.join().unwrap();

    // One packet per millisecond: 1000 expected; the logical schedule makes it exact unless
    // the machine stalls for the whole second.
    assert!((950..=1050).contains(&r.sent), "{r:?}");
    assert_eq!(r.send_errors, 0);
    assert!(r.merge_sink(&s));
    let received = r.received.unwrap();
    assert!(
        received * 100 >= r.sent * 95,
        "received {received} of {}",
        r.sent
    );
    assert_eq!(r.lost, Some(r.sent - received));
    assert_eq!(s.flows.len(), 1);
    assert_eq!(s.flows[0].flow_id, 42);
    assert_eq!(s.malformed, 0);
}

#[test]
fn unknown_congestion_control_is_a_clear_error() {
    let (addr, sink_stop, sink) = tcp_sink();
    let err = run_elephant(
        &ElephantConfig::new(addr, "nosuchcc"),
        &Stop::after(Duration::from_secs(2)),
    )
    .unwrap_err();
    assert!(
        matches!(err, TrafficError::CongestionControl { .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    for needle in [
        "\"nosuchcc\"",
        "/proc/sys/net/ipv4/tcp_available_congestion_control",
        "CAP_NET_ADMIN",
    ] {
        assert!(msg.contains(needle), "{needle} missing from: {msg}");
    }
    let err = run_mice(
        &MiceConfig::new(addr, "nosuchcc", 1024),
        &Stop::after(Duration::from_secs(2)),
    )
    .unwrap_err();
    assert!(
        matches!(err, TrafficError::CongestionControl { .. }),
        "{err:?}"
    );
    let err = run_elephant(
        &ElephantConfig::new(addr, "No Such"),
        &Stop::after(Duration::from_secs(2)),
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("invalid TCP congestion control name"),
        "{err}"
    );
    sink_stop.stop_all();
    assert_eq!(sink.join().unwrap().connections, 0);
}

#[test]
fn sink_stops_promptly_and_drops_bad_or_silent_clients() {
    let (addr, sink_stop, sink) = tcp_sink_with(SinkConfig {
        request_timeout: Duration::from_millis(200),
        ..SinkConfig::default()
    });
    let mut bad = TcpStream::connect(addr).unwrap();
    bad.write_all(&[0xAB; 32]).unwrap();
    let _silent = TcpStream::connect(addr).unwrap();
    let _open = TcpStream::connect(addr).unwrap();
    thread::sleep(Duration::from_millis(600));
    let t = Instant::now();
    sink_stop.stop_all();
    let s = sink.join().unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "sink took {:?} to stop",
        t.elapsed()
    );
    assert_eq!(s.connections, 3);
    let ends: Vec<_> = s.records.iter().map(|r| r.end).collect();
    assert!(ends.contains(&ConnectionEnd::BadRequest), "{ends:?}");
    assert!(ends.contains(&ConnectionEnd::RequestTimeout), "{ends:?}");
}

#[test]
fn schedule_runs_all_kinds_and_reports_json() {
    let (tcp, tcp_stop, tcp_sink) = tcp_sink();
    let (udp, udp_stop, udp_sink) = udp_sink();
    let plan = Schedule::plan_from_toml_str(
        r#"
        [[flow]]
        kind = "elephant"
        stop_s = 0.8
        congestion_control = "cubic"

        [[flow]]
        kind = "mice"
        count = 2
        start_s = 0.2
        stop_s = 0.8
        bytes_kb = 10
        gap_ms = 10
        congestion_control = "reno"

        [[flow]]
        kind = "cbr"
        rate_bps = 1_000_000
        packet_size = 500
        stop_s = 0.8
        "#,
    )
    .unwrap();
    let flag = tcp_stop.flag().clone();
    let targets = [Target { tcp, udp }];
    let mut report = run_schedule(&plan, &targets, flag).unwrap();
    thread::sleep(Duration::from_millis(100));
    tcp_stop.stop_all();
    udp_stop.stop_all();
    tcp_sink.join().unwrap();
    let udp_report = udp_sink.join().unwrap();
    assert_eq!(report.merge_udp_sinks(&[udp_report]), 1);

    assert_eq!(report.flows.len(), 4);
    for f in &report.flows {
        assert!(f.started_at_s.is_some(), "{f:?}");
        assert!(f.bytes > 0 && f.goodput_bps > 0.0, "{f:?}");
    }
    match &report.flows[1].outcome {
        FlowOutcome::Mice(m) => assert!(m.completed > 0 && m.completion_s.is_some(), "{m:?}"),
        other => panic!("expected mice, got {other:?}"),
    }
    match &report.flows[3].outcome {
        FlowOutcome::Cbr(c) => assert!(c.received.unwrap() > 0, "{c:?}"),
        other => panic!("expected cbr, got {other:?}"),
    }
    assert!(report.total_goodput_bps(FlowKindName::Elephant) > 0.0);
    let json = serde_json::to_string(&report).unwrap();
    assert!(
        json.contains("\"kind\":\"mice\"") && json.contains("\"p99\""),
        "{json}"
    );
}

#[test]
fn schedule_rejects_a_missing_target_and_stops_early() {
    let plan = Schedule::plan_from_toml_str(
        "[[flow]]\nkind = \"elephant\"\nstart_s = 5.0\nstop_s = 20.0\ncongestion_control = \"cubic\"\ntarget = 1",
    )
    .unwrap();
    let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let one = [Target {
        tcp: addr,
        udp: addr,
    }];
    let flag = Stop::after(SINK_LIMIT).flag().clone();
    let err = run_schedule(&plan, &one, flag.clone()).unwrap_err();
    assert!(
        matches!(
            err,
            ScheduleError::Invalid {
                field: "target",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "flow[0].target = 1: a host index below 1 (the number of targets given)"
    );

    // A flow waiting for its start time ends as soon as the shared flag is set.
    let two = [one[0], one[0]];
    let f2 = flag.clone();
    let setter = thread::spawn(move || {
        thread::sleep(Duration::from_millis(200));
        f2.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let t = Instant::now();
    let report = run_schedule(&plan, &two, flag).unwrap();
    setter.join().unwrap();
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert_eq!(report.flows[0].outcome, FlowOutcome::NotStarted);
}
