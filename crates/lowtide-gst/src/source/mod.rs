//! `lowtidesrc`: listens for one `lowtidesink` (or `lowtide send --input -`) and outputs its
//! encoded video stream, one access unit per buffer, timestamped, never a unit whose
//! reference was lost. Properties and limits: `docs/video.md`.

use gst::glib;
use gst::prelude::*;

mod imp;

glib::wrapper! {
    /// The source element.
    pub struct LowtideSrc(ObjectSubclass<imp::LowtideSrc>)
        @extends gst_base::PushSrc, gst_base::BaseSrc, gst::Element, gst::Object;
}

/// Registers `lowtidesrc` with `plugin`.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    gst::Element::register(
        Some(plugin),
        "lowtidesrc",
        gst::Rank::NONE,
        LowtideSrc::static_type(),
    )
}
