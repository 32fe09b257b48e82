//! What every fuzz target of lowtide asserts, as plain functions of the fuzzer's bytes: the
//! libFuzzer targets in `fuzz/fuzz_targets/` call them, and this crate's test
//! (`tests/corpus.rs`) calls them on every file of `fuzz/corpus/<target>/` on stable Rust,
//! so `cargo test` replays every committed input in seconds and a regression on a known
//! input fails CI without a fuzzer. A check panics when what must hold does not.
//!
//! Each module's doc says what its target feeds in and what must hold.

pub mod annexb_framers;
pub mod bwss_control;
pub mod bwss_slot;
pub mod encoded_wire;
pub mod frame_decoder;
pub mod ivf_framer;
pub mod lab_scenario;
pub mod media_wire;
pub mod netem_trace;
pub mod rdc_segment;
pub mod serve_http_head;
pub mod serve_viewer_queue;
pub mod serve_viewer_wire;
pub mod serve_websocket;
pub mod stamp;
pub mod tfrc_packet;
pub mod tfrc_sender;

/// A target's check.
pub type Check = fn(&[u8]);

/// Every fuzz target by name (its `[[bin]]` in `fuzz/Cargo.toml` and its corpus folder).
pub const TARGETS: &[(&str, Check)] = &[
    ("annexb_framers", annexb_framers::check),
    ("bwss_control", bwss_control::check),
    ("bwss_slot", bwss_slot::check),
    ("encoded_wire", encoded_wire::check),
    ("frame_decoder", frame_decoder::check),
    ("ivf_framer", ivf_framer::check),
    ("lab_scenario", lab_scenario::check),
    ("media_wire", media_wire::check),
    ("netem_trace", netem_trace::check),
    ("rdc_segment", rdc_segment::check),
    ("serve_http_head", serve_http_head::check),
    ("serve_viewer_queue", serve_viewer_queue::check),
    ("serve_viewer_wire", serve_viewer_wire::check),
    ("serve_websocket", serve_websocket::check),
    ("stamp", stamp::check),
    ("tfrc_packet", tfrc_packet::check),
    ("tfrc_sender", tfrc_sender::check),
];
