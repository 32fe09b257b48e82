//! A lab run whose emulator fails mid-run (needs root): the forward link's rate cell fails
//! 3 s into `scenarios/demo.toml --quick`, as a bug in a cell would. The run must end with one
//! error naming the link and the cell, keep what was measured in a run folder marked as
//! failed, and leave no network namespace behind.

use lowtide_lab::runner::{self, LabOptions};
use lowtide_lab::scenario::Scenario;
use lowtide_lab::LabError;

fn lab_namespaces() -> Vec<String> {
    let out = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("lt-"))
        .map(str::to_string)
        .collect()
}

#[test]
fn an_emulator_cell_that_fails_mid_run_ends_the_run_with_a_partial_report() {
    let before = lab_namespaces();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/demo.toml");
    let text = std::fs::read_to_string(path).unwrap();
    let checked = Scenario::from_toml(&text).unwrap();
    let out = std::env::temp_dir().join(format!("lowtide-lab-failure-{}", std::process::id()));
    let opts = LabOptions {
        scenario_text: text,
        quick: true,
        out_dir: out.clone(),
        emulator_fault_at_s: Some(3.0),
        ..LabOptions::default()
    };
    let started = std::time::Instant::now();
    let err = runner::run(&checked, &opts, |_| {}).expect_err("the emulator failed");
    let took = started.elapsed().as_secs_f64();
    let LabError::Partial { error, dir } = &err else {
        panic!("expected a partial run, got {err}");
    };
    assert_eq!(dir, &out);
    let text = error.to_string();
    assert!(
        matches!(**error, LabError::Netem(_))
            && text.contains("forward link")
            && text.contains("rate cell")
            && text.contains("injected fault"),
        "the error names the link, the cell and the cause: {text}"
    );
    // Ended at the failure (polled each second), not at the trial's end (24 s and more).
    assert!(
        took < 15.0,
        "the run took {took:.1} s after a failure at 3 s"
    );

    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let failed = summary["failed"]
        .as_str()
        .expect("the summary is marked as failed");
    assert!(failed.contains("forward link"), "{failed}");
    assert!(
        out.join("report.html").exists(),
        "the partial run has a report"
    );
    let messages = std::fs::read_to_string(out.join("messages.csv")).unwrap();
    assert!(
        messages.lines().count() > 10,
        "what was measured before the failure is kept:\n{messages}"
    );
    let report = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(report.contains("forward link"), "the report says why");

    let left: Vec<String> = lab_namespaces()
        .into_iter()
        .filter(|n| !before.contains(n))
        .collect();
    assert!(left.is_empty(), "namespaces left behind: {left:?}");
    let _ = std::fs::remove_dir_all(&out);
}
