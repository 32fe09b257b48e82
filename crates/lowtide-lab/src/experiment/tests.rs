use std::path::{Path, PathBuf};

use super::registry::{self, resolve, KindError, EXPERIMENTS};
use super::{Flag, PlanError, RunRequest};

fn kind_of(text: &str) -> (&'static str, bool) {
    let r = resolve(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    (r.experiment.kind(), r.inferred)
}

fn error_of(text: &str) -> String {
    match resolve(text) {
        Ok(r) => panic!("resolved to {:?}: {text}", r.experiment.kind()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_registry_has_distinct_kinds_and_sections_and_one_default() {
    let mut kinds: Vec<&str> = EXPERIMENTS.iter().map(|e| e.kind()).collect();
    let mut sections: Vec<&str> = EXPERIMENTS.iter().filter_map(|e| e.section()).collect();
    let n = (kinds.len(), sections.len());
    kinds.sort_unstable();
    kinds.dedup();
    sections.sort_unstable();
    sections.dedup();
    assert_eq!((kinds.len(), sections.len()), n, "{kinds:?} {sections:?}");
    assert_eq!(n.0, n.1 + 1, "exactly one kind without a section");
    assert_eq!(registry::known(), r#""streams", "rdc", "bwss""#);
}

#[test]
fn an_explicit_kind_is_taken_without_a_warning() {
    for (text, want) in [
        ("kind = \"streams\"\nname = \"x\"\n[run]\n", "streams"),
        ("kind = \"rdc\"\nname = \"x\"\n[rdc]\nflows = 2\n", "rdc"),
        (
            "kind = \"bwss\"\nname = \"x\"\n[bwss]\ndownloads = 1\n",
            "bwss",
        ),
    ] {
        assert_eq!(kind_of(text), (want, false));
        assert_eq!(resolve(text).unwrap().warning(), None);
    }
}

#[test]
fn a_file_without_kind_is_inferred_once_with_a_warning() {
    assert_eq!(kind_of("name = \"x\"\n[rdc]\nflows = 2\n"), ("rdc", true));
    assert_eq!(kind_of("name = \"x\"\n[bwss]\n"), ("bwss", true));
    // Nested `kind` keys are the application's and the traffic's, not the experiment's.
    let streams = "name = \"x\"\n[application]\nkind = \"layered_video\"\n\
                   [[forward_traffic.flow]]\nkind = \"elephant\"\n";
    assert_eq!(kind_of(streams), ("streams", true));
    let w = resolve("name = \"x\"\n[rdc]\n").unwrap().warning().unwrap();
    assert!(
        w.contains("[rdc] table") && w.contains("add kind = \"rdc\""),
        "{w}"
    );
    let w = resolve(streams).unwrap().warning().unwrap();
    assert!(
        w.contains("no [rdc] or [bwss] table") && w.contains("add kind = \"streams\""),
        "{w}"
    );
}

#[test]
fn an_unknown_kind_is_an_error_listing_the_known_ones() {
    let e = error_of("kind = \"side_by_side\"\nname = \"x\"\n");
    assert!(
        e.contains("\"side_by_side\"") && e.contains(r#""streams", "rdc", "bwss""#),
        "{e}"
    );
    let e = error_of("kind = 3\nname = \"x\"\n");
    assert!(e.contains("kind = 3") && e.contains("\"rdc\""), "{e}");
    assert!(matches!(resolve("kind = "), Err(KindError::Toml(_))));
}

#[test]
fn a_kind_without_its_section_or_with_another_kinds_is_an_error() {
    let e = error_of("kind = \"rdc\"\nname = \"x\"\n[run]\n");
    assert!(e.contains("kind = \"rdc\" needs a [rdc] table"), "{e}");
    let e = error_of("kind = \"streams\"\nname = \"x\"\n[bwss]\n");
    assert!(
        e.contains("[bwss] table") && e.contains("kind = \"bwss\""),
        "{e}"
    );
    let e = error_of("kind = \"rdc\"\nname = \"x\"\n[rdc]\n[bwss]\n");
    assert!(e.contains("[bwss] table, which belongs to"), "{e}");
    // Without `kind`, two kinds' tables leave the kind open.
    let e = error_of("name = \"x\"\n[rdc]\n[bwss]\n");
    assert!(
        e.contains("[rdc], [bwss]") && e.contains("say which"),
        "{e}"
    );
}

fn scenarios_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios")
}

#[test]
fn every_shipped_scenario_declares_its_kind_and_prepares_through_the_registry() {
    let mut seen = std::collections::BTreeMap::<&str, usize>::new();
    for entry in std::fs::read_dir(scenarios_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let resolved = resolve(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            !resolved.inferred,
            "{} has no kind = \"...\" line",
            path.display()
        );
        for quick in [false, true] {
            let request = RunRequest {
                file: path.clone(),
                quick,
                ..RunRequest::default()
            };
            let prepared = resolved
                .experiment
                .prepare(&text, &request)
                .unwrap_or_else(|e| panic!("{} (quick {quick}): {e:?}", path.display()));
            let name = text.parse::<toml::Table>().unwrap()["name"]
                .as_str()
                .unwrap()
                .to_owned();
            assert!(
                prepared.headline().starts_with(&name),
                "{}",
                prepared.headline()
            );
        }
        *seen.entry(resolved.experiment.kind()).or_default() += 1;
    }
    for e in EXPERIMENTS {
        assert!(
            seen.get(e.kind()).is_some_and(|n| *n > 0),
            "no shipped scenario of kind {:?}: {seen:?}",
            e.kind()
        );
    }
}

#[test]
fn a_kind_refuses_the_flags_it_does_not_take_and_names_what_it_takes() {
    let path = scenarios_dir().join("rdc-fig3.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let rdc = resolve(&text).unwrap().experiment;
    let request = RunRequest {
        file: path,
        cc: vec!["reno".into()],
        pcap: true,
        ..RunRequest::default()
    };
    let e = match rdc.prepare(&text, &request) {
        Err(PlanError::Flag(e)) => e,
        other => panic!("{:?}", other.map(|p| p.headline())),
    };
    assert_eq!(
        e,
        "--cc and --pcap do not apply to an RDC scenario ([rdc]): it takes only --quick, \
         --variant, --out and --no-fail-on-goals"
    );
    let request = RunRequest {
        runs: Some(2),
        ..RunRequest::default()
    };
    assert!(request.refuse("x", &[Flag::Cc, Flag::Pcap]).is_ok());
    let e = request.refuse("x", &Flag::ALL).unwrap_err().to_string();
    assert!(e.starts_with("--runs does not apply to x"), "{e}");
}

#[test]
fn a_run_folder_is_of_the_kind_its_scenario_says() {
    let dir = std::env::temp_dir().join(format!("lowtide-kind-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // No scenario kept: the default kind, whose report says what is missing.
    assert_eq!(registry::of_run_folder(&dir).unwrap().kind(), "streams");
    // RDC keeps only the scenario as run; a folder from before kinds is inferred.
    std::fs::write(dir.join("scenario-as-run.toml"), "name = \"x\"\n[rdc]\n").unwrap();
    let rdc = registry::of_run_folder(&dir).unwrap();
    assert_eq!(rdc.kind(), "rdc");
    let e = rdc.report(&dir).unwrap_err().to_string();
    assert!(
        e.contains("kind \"rdc\"") && e.contains("lab report"),
        "{e}"
    );
    std::fs::write(dir.join("scenario.toml"), "kind = \"bwss\"\n[bwss]\n").unwrap();
    assert_eq!(registry::of_run_folder(&dir).unwrap().kind(), "bwss");
    std::fs::remove_dir_all(&dir).unwrap();
}
