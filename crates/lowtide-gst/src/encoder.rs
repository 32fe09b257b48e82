//! The encoder upstream of the sink whose bit rate rate feedback sets: found by walking
//! from the sink pad's peer upstream through elements that are not encoders (parsers,
//! queues, capsfilters, tees: their first sink pad), into and out of bins by their ghost
//! pads, at most [`MAX_HOPS`] elements; recognised by factory name ([`crate::rate::ENCODERS`]).

use gst::glib;
use gst::prelude::*;

use crate::rate::{encoder_property, RateUnit};

/// Elements walked upstream at most.
pub const MAX_HOPS: usize = 16;

/// An encoder and its bit-rate property.
#[derive(Debug, Clone)]
pub struct Encoder {
    element: gst::Element,
    property: &'static str,
    unit: RateUnit,
}

/// The real pad behind ghost pads.
fn through_ghosts(mut pad: gst::Pad) -> Option<gst::Pad> {
    for _ in 0..MAX_HOPS {
        match pad.downcast_ref::<gst::GhostPad>() {
            Some(g) => pad = g.target()?,
            None => return Some(pad),
        }
    }
    None
}

impl Encoder {
    /// The nearest known encoder upstream of `sink_pad`.
    pub fn find(sink_pad: &gst::Pad) -> Option<Encoder> {
        let mut pad = sink_pad.clone();
        for _ in 0..MAX_HOPS {
            let peer = through_ghosts(pad.peer()?)?;
            let element = peer.parent_element()?;
            let factory = element.factory().map(|f| f.name().to_string());
            if let Some((property, unit)) = factory.as_deref().and_then(encoder_property) {
                if element.find_property(property).is_some() {
                    return Some(Encoder {
                        element,
                        property,
                        unit,
                    });
                }
            }
            pad = element.sink_pads().into_iter().next()?;
        }
        None
    }

    /// The element's name and factory, for messages.
    pub fn describe(&self) -> String {
        let factory = self
            .element
            .factory()
            .map_or("?".to_string(), |f| f.name().to_string());
        format!("{} ({factory}.{})", self.element.name(), self.property)
    }

    /// The encoder's bit rate now, bit/s.
    pub fn bitrate_bps(&self) -> Option<u64> {
        let v = self.element.property_value(self.property);
        let raw = if let Ok(x) = v.get::<u32>() {
            u64::from(x)
        } else if let Ok(x) = v.get::<i32>() {
            u64::try_from(x).ok()?
        } else {
            return None;
        };
        Some(self.unit.to_bps(raw))
    }

    /// Sets the bit rate to `bps` (clamped to the property's range); returns the value set,
    /// in bit/s.
    pub fn set_bitrate_bps(&self, bps: u64) -> Option<u64> {
        let pspec = self.element.find_property(self.property)?;
        let raw = self.unit.from_bps(bps);
        let value: glib::Value = if let Some(p) = pspec.downcast_ref::<glib::ParamSpecUInt>() {
            let x = u32::try_from(raw).unwrap_or(u32::MAX);
            x.clamp(p.minimum(), p.maximum()).to_value()
        } else if let Some(p) = pspec.downcast_ref::<glib::ParamSpecInt>() {
            let x = i32::try_from(raw).unwrap_or(i32::MAX);
            x.clamp(p.minimum(), p.maximum()).to_value()
        } else {
            return None;
        };
        self.element.set_property_from_value(self.property, &value);
        self.bitrate_bps()
    }
}
