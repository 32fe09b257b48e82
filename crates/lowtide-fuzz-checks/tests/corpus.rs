//! Every committed fuzz input replayed through its target's check (`fuzz/corpus/<target>/`),
//! on stable Rust: a known input that breaks again fails here, in seconds.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use lowtide_fuzz_checks::TARGETS;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The targets `fuzz/Cargo.toml` builds: its `[[bin]]` names.
fn fuzz_bins() -> BTreeSet<String> {
    let manifest = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).expect("fuzz/Cargo.toml");
    manifest
        .split("[[bin]]")
        .skip(1)
        .filter_map(|bin| {
            let line = bin.lines().find(|l| l.trim_start().starts_with("name"))?;
            Some(line.split('"').nth(1)?.to_string())
        })
        .collect()
}

/// Each fuzz target has a check here and a seed corpus; each corpus belongs to a target.
#[test]
fn every_fuzz_target_has_a_check_and_a_corpus() {
    let checks: BTreeSet<String> = TARGETS.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(
        fuzz_bins(),
        checks,
        "fuzz/Cargo.toml's targets and TARGETS differ"
    );
    let corpora: BTreeSet<String> = std::fs::read_dir(fuzz_dir().join("corpus"))
        .expect("fuzz/corpus")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(corpora, checks, "fuzz/corpus's folders and TARGETS differ");
}

/// Every file of every corpus, through its check; all failures are listed, not the first.
#[test]
fn every_corpus_input_replays() {
    let mut failed = Vec::new();
    let mut replayed = 0;
    for (name, check) in TARGETS {
        let dir = fuzz_dir().join("corpus").join(name);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut files: Vec<PathBuf> = entries.map(|e| e.expect("an entry").path()).collect();
        files.sort();
        for f in files {
            let data = std::fs::read(&f).expect("a corpus file");
            replayed += 1;
            if std::panic::catch_unwind(|| check(&data)).is_err() {
                failed.push(format!(
                    "{name}/{}",
                    f.file_name().unwrap_or_default().to_string_lossy()
                ));
            }
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {replayed} inputs failed: {failed:?}",
        failed.len()
    );
    assert!(replayed > 0);
}
