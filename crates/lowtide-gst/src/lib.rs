//! GStreamer elements for lowtide (in the style of gst-plugins-rs): `lowtidesink` sends an
//! encoded video stream over a lowtide channel, `lowtidesrc` receives it; `lowtidestamp` and
//! `lowtidemeter` measure glass-to-glass latency over it or any other transport.
//!
//! ```text
//!  encoder ─ parser ─ lowtidesink ══ lowtide channel (TCP) ══ lowtidesrc ─ parser ─ decoder
//!     ▲                 │  one access unit per buffer:          │  reorder, gate (never a
//!     │                 │  importance, deadline, dependencies   │  frame whose reference
//!     │                 │  (lowtide_media::encoded)             │  was lost), AU-aligned,
//!     └─ force-key-unit ┤  drops take their dependents along    │  timestamped buffers
//!        bitrate        │                                       │
//!                       ◄───────── keyframe requests ───────────┘
//! ```
//!
//! - [`caps`]: which caps the elements take and produce, and their codec;
//! - [`rate`]: the rate feedback law (sans-IO, unit-tested) and the encoders whose bit rate
//!   it knows how to set ([`encoder`] finds them upstream);
//! - [`sink`], [`source`]: the elements; each a `mod.rs` (the GObject wrapper and
//!   `register`) and an `imp.rs` (properties, state, the streaming thread's work);
//! - [`stamp`], [`meter`]: the in-band stamp (`lowtide_media::encoded::stamp`) put into each
//!   H.264/H.265 unit after the encoder, and read back and carried through the decoder as a
//!   custom meta, one CSV line per decoded frame.
//!
//! The elements reuse `lowtide_media::pipe` (the driver behind `lowtide send --input -` and
//! `lowtide recv --output -`) and its sans-IO model; the channels run on one shared tokio
//! runtime ([`runtime`]). Errors reach the bus as element errors naming what failed; no
//! panic crosses the FFI. Design and limits: `docs/video.md`.

use gst::glib;

pub mod caps;
pub mod csv_log;
pub mod encoder;
pub mod meter;
pub mod rate;
pub mod sink;
pub mod source;
pub mod stamp;

/// The tokio runtime every element's channel runs on (two worker threads: the channel
/// drivers are light, and the machine's cores belong to the encoder and decoder).
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: std::sync::LazyLock<tokio::runtime::Runtime> = std::sync::LazyLock::new(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("lowtide-gst")
            .enable_all()
            .build()
            .expect("a tokio runtime (threads and an epoll instance)")
    });
    &RUNTIME
}

fn plugin_init(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    sink::register(plugin)?;
    source::register(plugin)?;
    stamp::register(plugin)?;
    meter::register(plugin)?;
    Ok(())
}

gst::plugin_define!(
    lowtide,
    env!("CARGO_PKG_DESCRIPTION"),
    plugin_init,
    env!("CARGO_PKG_VERSION"),
    // GStreamer's license names: "MIT/X11" stands for MIT; the crate is MIT OR Apache-2.0.
    "MIT/X11",
    env!("CARGO_PKG_NAME"),
    env!("CARGO_PKG_NAME"),
    "lowtide"
);
