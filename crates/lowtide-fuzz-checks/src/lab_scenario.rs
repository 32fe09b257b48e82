//! Lab scenario files (lowtide-lab's `Scenario::from_toml_in`: TOML a user writes or
//! downloads, checked before anything runs).
//!
//! Input: the text of a scenario file (invalid UTF-8 replaced), read as if it sat in the
//! repository's `scenarios/` folder (so relative trace paths find `traces/`). Must hold:
//! - a checked scenario or an error, never a panic, and an error says something;
//! - a checked scenario's measurement window lies within its duration, each variant's
//!   baseline is a variant, and its `--quick` form is checked without a panic.

use std::path::Path;

use lowtide_lab::scenario::Scenario;

pub fn check(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    let c = match Scenario::from_toml_in(&text, &base) {
        Ok(c) => c,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    let s = &c.scenario;
    assert!(s.run.measure_from_s < s.measure_to_s());
    assert!(s.measure_to_s() <= s.run.duration_s);
    for i in 0..s.variants.len() {
        assert!(c.baseline_of(i).is_none_or(|b| b < s.variants.len()));
    }
    let _ = s.quick().check();
}
