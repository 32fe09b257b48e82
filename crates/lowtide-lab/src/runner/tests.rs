use lowtide_netem::QueueLimit;

use super::*;
use crate::scenario::Scenario;

#[test]
fn options_reach_the_scenario_that_runs() {
    let text = include_str!("../../../../scenarios/fig3-forward.toml");
    let checked = Scenario::from_toml(text).unwrap();
    let opts = LabOptions {
        quick: true,
        runs: Some(3),
        overrides: Overrides {
            queue_bdp: Some(0.5),
            congestion: Some("reno".into()),
            window_frames: None,
            threshold_ms: None,
        },
        ..LabOptions::default()
    };
    let s = effective(&checked, &opts).unwrap().scenario;
    assert_eq!(s.run.duration_s, 30.0);
    assert_eq!(s.run.runs, 3);
    assert_eq!(s.topology.forward.queue, QueueLimit::Bdp(0.5));
    assert_eq!(s.topology.hosts.congestion, "reno");
    assert!(describe_network(&s.topology).contains("queue of 0.5 BDP"));
}
