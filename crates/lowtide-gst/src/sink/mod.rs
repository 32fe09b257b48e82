//! `lowtidesink`: an encoded video stream (one access unit per buffer) over a lowtide
//! channel to a `lowtidesrc` or `lowtide recv --output -`. Properties, rate feedback and
//! keyframe requests: `docs/video.md`.

use gst::glib;
use gst::prelude::*;

mod imp;
mod logs;

glib::wrapper! {
    /// The sink element.
    pub struct LowtideSink(ObjectSubclass<imp::LowtideSink>)
        @extends gst_base::BaseSink, gst::Element, gst::Object;
}

/// Registers `lowtidesink` with `plugin`.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    gst::Element::register(
        Some(plugin),
        "lowtidesink",
        gst::Rank::NONE,
        LowtideSink::static_type(),
    )
}
