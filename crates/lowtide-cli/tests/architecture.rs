//! ARCHITECTURE.md's table of crates says which lowtide crates each may depend on; this
//! test reads that table and every crate's `[dependencies]` and fails on an edge the table
//! does not allow, on a crate the table does not list, and on a row for a crate that is gone.
//! Dev-dependencies are not checked (a test may run the emulator).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Crate → the lowtide crates its row allows ("any library crate": every crate but the CLI).
fn allowed() -> BTreeMap<String, Option<BTreeSet<String>>> {
    let text = std::fs::read_to_string(repo().join("ARCHITECTURE.md")).unwrap();
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // | `crate` | owns | may depend on | must not |
        if cells.len() < 5 || !cells[1].starts_with("`lowtide") {
            continue;
        }
        let name = cells[1].trim_matches('`').to_string();
        let deps = if cells[3].starts_with("any library crate") {
            None
        } else {
            Some(
                cells[3]
                    .split(',')
                    .map(|d| d.trim().trim_matches('`').to_string())
                    .filter(|d| d.starts_with("lowtide"))
                    .collect(),
            )
        };
        out.insert(name, deps);
    }
    out
}

/// The lowtide crates in `[dependencies]` of `manifest` (not dev- or build-dependencies).
fn depends_on(manifest: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(manifest).unwrap();
    let mut in_deps = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if in_deps && line.starts_with("lowtide") {
            let name = line
                .split(|c: char| c == '.' || c == '=' || c.is_whitespace())
                .next()
                .unwrap();
            out.insert(name.to_string());
        }
    }
    out
}

#[test]
fn every_crate_depends_only_on_what_architecture_md_allows() {
    let allowed = allowed();
    assert!(allowed.len() >= 10, "the table was not found: {allowed:?}");
    let mut crates = BTreeSet::new();
    let mut wrong = vec![];
    for entry in std::fs::read_dir(repo().join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        let manifest = dir.join("Cargo.toml");
        if !manifest.exists() {
            continue;
        }
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        crates.insert(name.clone());
        let Some(rule) = allowed.get(&name) else {
            wrong.push(format!("{name} has no row in ARCHITECTURE.md"));
            continue;
        };
        for dep in depends_on(&manifest) {
            let ok = match rule {
                Some(list) => list.contains(&dep),
                None => dep != "lowtide-cli",
            };
            if !ok {
                wrong.push(format!(
                    "{name} depends on {dep}, which its row does not allow"
                ));
            }
        }
    }
    for name in allowed.keys() {
        if !crates.contains(name) {
            wrong.push(format!(
                "ARCHITECTURE.md has a row for {name}, which is not a crate"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_reader_finds_a_forbidden_edge() {
    // The parser itself, on this crate's manifest: the CLI depends on lowtide.
    let deps = depends_on(&repo().join("crates/lowtide-cli/Cargo.toml"));
    assert!(deps.contains("lowtide"), "{deps:?}");
    let rules = allowed();
    let proto = rules["lowtide-proto"].as_ref().expect("a list");
    assert!(
        proto.is_empty(),
        "lowtide-proto may depend on no lowtide crate"
    );
    assert!(!rules["lowtide-netem"]
        .as_ref()
        .unwrap()
        .contains("lowtide-rdc"));
}
