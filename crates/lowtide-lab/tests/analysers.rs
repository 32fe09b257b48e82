//! The analysers in `crates/lowtide-lab/analysis/` read a run folder's CSV files by column
//! name. Here each runs on a folder written by the lab's own writers (`write_records` for the
//! streams kind, `rdc::write_analysis_files` for RDC), on records made so that every column
//! an analyser reads is read, and its output is checked: a column renamed or dropped in the
//! lab makes the script fail here, not months later on a real run.
//!
//! Not covered: `conference-split.py` and `stream-split.py` also read a pcap of the run
//! (`--pcap`), which no writer here makes; their CSV side is the one `lowtide_pcap.py` shares
//! with the tail scripts (`messages.csv`'s floor rows), checked below through them.

use std::path::{Path, PathBuf};
use std::process::Command;

use lowtide_lab::conference::AduRecord;
use lowtide_lab::rdc::flows::SenderRecord;
use lowtide_lab::rdc::trial::TrialRecord as RdcTrial;
use lowtide_lab::results::files::write_records;
use lowtide_lab::results::TrialRecord;
use lowtide_lab::scenario::Mode;
use lowtide_lab::stream::Sample;
use lowtide_lab::tcpinfo::{TcpSample, TcpTimeline};
use lowtide_netem::stats::{DroppedSegment, LateDelivery, QueueSample};
use lowtide_rdc::agent::ReleaseRecord;

/// A folder of its own under the system's temporary folder, removed when dropped.
struct Folder(PathBuf);

impl Folder {
    fn new(tag: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("lowtide-analysers-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn analyser(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("analysis")
        .join(name)
}

/// Runs `script` with `args`; its stdout, or a failure with its stderr.
fn run(script: &str, args: &[&str]) -> String {
    let out = Command::new("python3")
        .arg(analyser(script))
        .args(args)
        .output()
        .expect("python3 runs (run.sh installs it)");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{script} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A TCP_INFO timeline every 10 ms over `secs`, in Recovery from 4 to 4.5 s (so that the loss
/// episodes, and the messages behind them, have something to find), one timeout at 6 s.
fn timeline(secs: f64) -> TcpTimeline {
    let mut t = TcpTimeline::default();
    let n = (secs * 100.0) as usize;
    t.samples = (0..n)
        .map(|i| {
            let t_s = i as f64 / 100.0;
            TcpSample {
                t_s,
                cwnd: 10 + (i % 7) as u32,
                srtt_ms: 50.0 + (i % 5) as f64,
                rttvar_ms: 5.0,
                total_retrans: (t_s >= 4.0) as u32,
                total_rto: Some((t_s >= 6.0) as u16),
                backoff: 0,
                ca_state: if (4.0..4.5).contains(&t_s) { 3 } else { 0 },
                lost: 0,
                unacked: 8,
                notsent: (i % 3) as u32 * 1448,
                rto_ms: Some(250.0),
            }
        })
        .collect();
    t
}

#[test]
fn the_tail_analysers_read_a_streams_run_folder() {
    let dir = Folder::new("streams");
    let secs = 10.0;
    let messages: Vec<Sample> = (0..1000)
        .map(|i| {
            let sent = i as f64 / 100.0;
            // Messages arriving during the Recovery episode are late.
            let late = if (3.9..4.5).contains(&sent) {
                300.0
            } else {
                0.0
            };
            Sample {
                written_ms: Some(1.0),
                ..Sample::delivered(sent, 30.0 + late)
            }
        })
        .collect();
    let floor: Vec<Sample> = (0..1000)
        .map(|i| Sample::delivered(i as f64 / 100.0, 25.0))
        .collect();
    let adus: Vec<AduRecord> = (0..300u32)
        .flat_map(|frame| {
            (0..3u8).map(move |layer| {
                let capture_s = frame as f64 / 30.0;
                let late = if (3.9..4.5).contains(&capture_s) {
                    400.0
                } else {
                    0.0
                };
                AduRecord {
                    video: 0,
                    frame,
                    layer,
                    capture_s,
                    bytes: 1200,
                    latency_ms: (layer < 2 || frame % 2 == 0).then_some(40.0 + late),
                    written_ms: Some(2.0),
                }
            })
        })
        .collect();
    let record = TrialRecord {
        mode: Some(Mode::SideBySide),
        run: 1,
        variants: vec!["stream".into(), "conf".into()],
        streams: vec![("stream".into(), messages)],
        floor,
        adus: vec![("conf".into(), adus)],
        tcp: vec![
            ("stream".into(), timeline(secs)),
            ("conf".into(), timeline(secs)),
        ],
        ..TrialRecord::default()
    };
    write_records(dir.path(), &[record]).unwrap();
    let d = dir.path().to_str().unwrap();

    let out = run(
        "stream-tail.py",
        &[d, "--variant", "stream", "--from-s", "0", "--to-s", "10"],
    );
    assert!(
        out.starts_with("stream: 1000 messages;"),
        "every message has a floor probe within 50 ms: {out}"
    );
    assert!(
        !out.contains("behind a repair in all: 0 "),
        "the Recovery episode is found from tcpinfo.csv's ca_state: {out}"
    );

    let out = run(
        "conference-tail.py",
        &[d, "--variant", "conf", "--from-s", "0", "--to-s", "10"],
    );
    assert!(
        out.contains("== conf: 900 ADUs captured") && out.contains("1 Recovery/Loss episodes"),
        "{out}"
    );
    assert!(
        out.contains("cwnd "),
        "the late ADUs are shown with the TCP_INFO sample of their time: {out}"
    );
}

#[test]
fn the_rdc_analysers_read_an_rdc_run_folder() {
    let dir = Folder::new("rdc");
    let port = 5001;
    let sender = SenderRecord {
        sent_packets: vec![10; 10],
        timeline: timeline(10.0),
        bytes_written: 1 << 20,
        local_port: Some(port),
        video: None,
    };
    // The queue above 5 packets around 4 s, a drop of one segment twice (a lost
    // retransmission) before the timeout at 6 s, and held ACKs released on time.
    let queue = (0..10_000u64)
        .map(|i| QueueSample {
            t_us: i * 1000,
            packets: if (4000..4100).contains(&i) { 9 } else { 2 },
            bytes: 3000,
            sojourn_us: 800,
        })
        .collect();
    let drop = |t_us| DroppedSegment {
        t_us,
        reason: "queue_full",
        src_port: port,
        dst_port: 80,
        seq: 7777,
        payload: 1448,
    };
    let releases = (0..1000u64)
        .map(|i| {
            (
                0,
                ReleaseRecord {
                    remote_port: port,
                    held_us: i * 10_000,
                    due_us: i * 10_000 + 2000,
                    left_us: i * 10_000 + 2100,
                    flushed: i % 100 == 0,
                    ack: (i as u32) * 2896,
                    window: 500,
                },
            )
        })
        .collect();
    let trial = RdcTrial {
        variant: "exact RDC".into(),
        plans: vec![],
        senders: vec![Some(sender)],
        receivers: vec![],
        forward: None,
        queue,
        measured_s: 10.0,
        agents: vec![],
        agent_delays: (0..20)
            .map(|i| lowtide_lab::rdc::trial::AgentDelaySample {
                t_s: i as f64 * 0.5,
                receiver: 0,
                remote_port: port,
                delay_ms: 3.0,
                mark_share: 0.1,
            })
            .collect(),
        releases,
        late_deliveries: vec![(
            "forward",
            LateDelivery {
                t_us: 3_999_000,
                late_us: 2000,
            },
        )],
        drops: vec![drop(5_000_000), drop(5_500_000)],
        cpu: None,
        errors: vec![],
    };
    lowtide_lab::rdc::write_analysis_files(dir.path(), &[trial]).unwrap();
    let d = dir.path().to_str().unwrap();

    let out = run("rdc-queue-causes.py", &[d, "--variant", "exact RDC"]);
    assert!(
        out.contains("10000 samples") && out.contains("100 above 5"),
        "{out}"
    );
    assert!(out.contains("agent: 1000 held ACKs released"), "{out}");
    assert!(out.contains("deliveries > 1 ms late: forward 1"), "{out}");

    let out = run("rdc-timeouts.py", &[d, "--variant", "exact RDC"]);
    assert!(
        out.contains("1 timeouts in 1 flows: 1 lost retransmission"),
        "{out}"
    );

    let out = run("rdc-overflow.py", &[d, "--variant", "exact RDC"]);
    assert!(
        out.starts_with(
            "exact RDC: 2 queue_full drops in 1 episode(s); 10 of 1000 held ACKs flushed"
        ),
        "drops.csv's drops and releases.csv's flushed ACKs are found: {out}"
    );
}
