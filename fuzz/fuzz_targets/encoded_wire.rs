//! What this target feeds in and asserts: `lowtide_fuzz_checks::encoded_wire` (shared with the
//! corpus replay in `cargo test`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| lowtide_fuzz_checks::encoded_wire::check(data));
