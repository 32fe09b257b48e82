//! `lowtidestamp`: stamps each H.264/H.265 access unit or AV1 temporal unit with the wall-clock instant it
//! reached the element, in band (`lowtide_media::encoded::stamp`), for `lowtidemeter` to read
//! after the transport. Properties: `docs/video.md`.

use gst::glib;
use gst::prelude::*;

pub(crate) mod imp;

glib::wrapper! {
    /// The stamping element.
    pub struct LowtideStamp(ObjectSubclass<imp::LowtideStamp>)
        @extends gst_base::BaseTransform, gst::Element, gst::Object;
}

/// Registers `lowtidestamp` with `plugin`.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    gst::Element::register(
        Some(plugin),
        "lowtidestamp",
        gst::Rank::NONE,
        LowtideStamp::static_type(),
    )
}
