//! `lowtidemeter`: before the decoder, reads each access unit's stamp and attaches it (and
//! the arrival instant) to the buffer as a custom meta the decoder copies to its frame;
//! after the decoder, writes one CSV line per frame. Design and properties: `docs/video.md`.

use gst::glib;
use gst::prelude::*;

mod imp;

pub use imp::META_NAME;

glib::wrapper! {
    /// The metering element.
    pub struct LowtideMeter(ObjectSubclass<imp::LowtideMeter>)
        @extends gst_base::BaseTransform, gst::Element, gst::Object;
}

/// Registers `lowtidemeter` (and its meta) with `plugin`.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    if !gst::meta::CustomMeta::is_registered(META_NAME) {
        // No tags: GstVideoDecoder's default transform_meta copies tagless metas from the
        // input frame to the decoded one.
        gst::meta::CustomMeta::register(META_NAME, &[]);
    }
    gst::Element::register(
        Some(plugin),
        "lowtidemeter",
        gst::Rank::NONE,
        LowtideMeter::static_type(),
    )
}
