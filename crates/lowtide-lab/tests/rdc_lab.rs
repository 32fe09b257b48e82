//! Short RDC lab runs (need root): one with the agent in the receiver's namespace (about 4 s of
//! traffic): the run completes, the agent saw and held the flow's ACKs, and no iptables chain
//! of the agent is left, neither in the receiver after the stop nor in this namespace, and no
//! lab namespace either; one with two video streams (8 s) of different round trips that add
//! and drop layers and are summarised per RTT group.

use lowtide_lab::rdc::{self, RdcOptions, RdcScenario};
use lowtide_netem::cleanup::leftover_namespaces;
use lowtide_rdc::iptables;

const SCENARIO: &str = r#"
kind = "rdc"
name = "rdc-agent-test"
[rdc]
duration_s = 4
measure_from_s = 1
flows = 1
window_packets = 100
starts_s = [0.0]
port = 7480
[topology]
[topology.forward]
rate_mbps = 10
delay_ms = 10
queue = { packets = 50 }
[topology.reverse]
rate_mbps = 10
delay_ms = 10
[[variant]]
name = "exact RDC"
aqm = { kind = "rdc", mode = "exact", packet_bytes = 1000 }
agent = "exact"
"#;

fn our_chains_here() -> Vec<String> {
    iptables::TOOLS
        .iter()
        .flat_map(|t| iptables::our_chains(t))
        .collect()
}

/// The tests look for namespaces and chains left behind, so they run one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `scenario` into a folder of its own; the summary (errors: none) and the folder.
fn run(scenario: &str, tag: &str) -> (rdc::RdcSummary, std::path::PathBuf) {
    let s = RdcScenario::from_toml_in(scenario, std::path::Path::new(".")).unwrap();
    let out = std::env::temp_dir().join(format!("lowtide-{tag}-{}", std::process::id()));
    let summary = rdc::run(
        &s,
        &RdcOptions {
            quick: false,
            out_dir: out.clone(),
        },
        &mut |_| {},
    )
    .expect("the run completes");
    assert!(summary.errors.is_empty(), "{:?}", summary.errors);
    (summary, out)
}

#[test]
fn a_run_with_the_agent_completes_and_leaves_no_rule_behind() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let namespaces = leftover_namespaces();
    let chains = our_chains_here();
    let (summary, out) = run(SCENARIO, "rdc-lab");
    let v = &summary.variants[0];
    let agent = &v.agents[0];
    assert!(agent.chains_left.is_empty(), "{:?}", agent.chains_left);
    let status = agent.status.as_ref().expect("the agent's final status");
    // The router's delays reached the agent, and it held ACKs by them.
    assert!(status.counters.delays_read > 100, "{:?}", status.counters);
    assert!(status.counters.held > 100, "{:?}", status.counters);
    assert_eq!(
        status.held_now, 0,
        "every held ACK was released at the stop"
    );
    assert!(
        v.goodput_mbps[0].value.is_some_and(|g| g > 1.0),
        "{:?}",
        v.goodput_mbps
    );
    assert!(out.join(rdc::SUMMARY).exists() && out.join(rdc::FLOWS_CSV).exists());
    assert_eq!(our_chains_here(), chains, "no chain of the agent here");
    let new: Vec<String> = leftover_namespaces()
        .into_iter()
        .filter(|n| !namespaces.contains(n))
        .collect();
    assert!(new.is_empty(), "namespaces left: {new:?}");
    let _ = std::fs::remove_dir_all(out);
}

/// Two of the paper's layered video streams through a drop-tail bottleneck that fits about
/// two and a half layers: each starts at one layer, adds one after a second of an empty send
/// buffer, overloads the link, and drops one when its unsent data passes T_drop. The second
/// stream's host has 20 ms of access delay each way (RTT 60 ms against 20 ms): two RTT groups.
const VIDEO: &str = r#"
kind = "rdc"
name = "rdc-video-test"
[rdc]
duration_s = 8
measure_from_s = 1
flows = 2
window_packets = 40
starts_s = [0.0, 0.2]
port = 7490
bin_ms = 500
sample_ms = 50
[rdc.video]
add_after_s = 1
initial_layers = 1
[topology]
senders = 2
receivers = 2
access_delay_ms = [0, 20]
[topology.forward]
rate_mbps = 0.4
delay_ms = 10
queue = { packets = 30 }
[topology.reverse]
rate_mbps = 10
delay_ms = 10
[[variant]]
name = "drop-tail"
aqm = { kind = "drop_tail" }
"#;

#[test]
fn video_streams_add_and_drop_layers_through_the_emulator() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let namespaces = leftover_namespaces();
    let (summary, out) = run(VIDEO, "rdc-video");
    let layers = summary.variants[0].layers.as_ref().expect("video layers");
    eprintln!(
        "adds {}, drops {}, mean {:?}",
        layers.adds, layers.drops, layers.mean
    );
    assert!(layers.adds >= 2, "each stream added a layer: {layers:?}");
    assert!(
        layers.drops >= 1,
        "the overload dropped a layer: {layers:?}"
    );
    assert!(layers.mean.value.is_some_and(|m| m > 0.5), "{layers:?}");
    assert!(out.join(rdc::LAYERS_CSV).exists());
    let groups = summary.variants[0].rtt_groups.as_ref().expect("RTT groups");
    let keys: Vec<u32> = groups.layers_by_rtt_group.keys().copied().collect();
    assert_eq!(keys, [20, 60], "{groups:?}");
    assert!(groups.layer_gap.value.is_some(), "{groups:?}");
    assert!(out.join(rdc::LAYERS_BY_RTT_PLOT).exists());
    let new: Vec<String> = leftover_namespaces()
        .into_iter()
        .filter(|n| !namespaces.contains(n))
        .collect();
    assert!(new.is_empty(), "namespaces left: {new:?}");
    let _ = std::fs::remove_dir_all(out);
}
