//! The stamper's implementation: in place (the buffer keeps its timestamps and flags; its
//! memory is replaced by the stamped bytes), no buffering; one CSV line per stamped unit when
//! `location` is set (what was sent, for units that never arrive).

use std::sync::{LazyLock, Mutex};

use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::subclass::prelude::*;
use lowtide_media::encoded::{stamp, Codec};

use crate::caps;
use crate::csv_log::CsvLog;
use lowtide_media::wall_clock::now_us as wall_clock_us;

static CAT: LazyLock<gst::DebugCategory> = LazyLock::new(|| {
    gst::DebugCategory::new(
        "lowtidestamp",
        gst::DebugColorFlags::empty(),
        Some("lowtide stamp"),
    )
});

/// Counters for the `stats` property.
#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    buffers: u64,
    stamped: u64,
}

/// The CSV's header line.
pub const CSV_HEADER: &str = "pts_ns,stamp_us,bytes,keyframe";

#[derive(Default)]
pub struct LowtideStamp {
    codec: Mutex<Option<Codec>>,
    counters: Mutex<Counters>,
    location: Mutex<Option<String>>,
    out: Mutex<Option<CsvLog>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The caps both stamp elements take on encoded video: H.264/H.265 AU-aligned Annex-B.
pub fn stamp_caps() -> gst::Caps {
    let mut c = caps::caps_for(Codec::H264, None);
    c.merge(caps::caps_for(Codec::H265, None));
    c.merge(caps::caps_for(Codec::Av1, None));
    c
}

#[glib::object_subclass]
impl ObjectSubclass for LowtideStamp {
    const NAME: &'static str = "GstLowtideStamp";
    type Type = super::LowtideStamp;
    type ParentType = gst_base::BaseTransform;
}

impl ObjectImpl for LowtideStamp {
    fn properties() -> &'static [glib::ParamSpec] {
        static PROPERTIES: LazyLock<Vec<glib::ParamSpec>> = LazyLock::new(|| {
            vec![
                glib::ParamSpecString::builder("location")
                    .nick("CSV file")
                    .blurb("One line per stamped access unit: pts_ns,stamp_us,bytes,keyframe (none: no file)")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecBoxed::builder::<gst::Structure>("stats")
                    .nick("Statistics")
                    .blurb("Buffers seen, access units stamped")
                    .read_only()
                    .build(),
            ]
        });
        PROPERTIES.as_ref()
    }

    fn set_property(&self, _id: usize, value: &glib::Value, pspec: &glib::ParamSpec) {
        if pspec.name() == "location" {
            *lock(&self.location) = value.get().expect("type checked upstream");
        }
    }

    fn property(&self, _id: usize, pspec: &glib::ParamSpec) -> glib::Value {
        match pspec.name() {
            "location" => lock(&self.location).to_value(),
            "stats" => {
                let c = *lock(&self.counters);
                gst::Structure::builder("lowtide-stamp-stats")
                    .field("buffers", c.buffers)
                    .field("stamped", c.stamped)
                    .build()
                    .to_value()
            }
            _ => unimplemented!(),
        }
    }
}

impl GstObjectImpl for LowtideStamp {}

impl ElementImpl for LowtideStamp {
    fn metadata() -> Option<&'static gst::subclass::ElementMetadata> {
        static META: LazyLock<gst::subclass::ElementMetadata> = LazyLock::new(|| {
            gst::subclass::ElementMetadata::new(
                "lowtide stamp",
                "Filter/Video",
                "Stamps each H.264/H.265 access unit with the wall-clock instant it arrived (an SEI message lowtidemeter reads after the transport)",
                "lowtide",
            )
        });
        Some(&*META)
    }

    fn pad_templates() -> &'static [gst::PadTemplate] {
        static TEMPLATES: LazyLock<Vec<gst::PadTemplate>> =
            LazyLock::new(|| caps::passthrough_templates(&stamp_caps()));
        TEMPLATES.as_ref()
    }
}

impl BaseTransformImpl for LowtideStamp {
    const MODE: gst_base::subclass::BaseTransformMode =
        gst_base::subclass::BaseTransformMode::AlwaysInPlace;
    const PASSTHROUGH_ON_SAME_CAPS: bool = false;
    const TRANSFORM_IP_ON_PASSTHROUGH: bool = false;

    fn start(&self) -> Result<(), gst::ErrorMessage> {
        *lock(&self.counters) = Counters::default();
        *lock(&self.codec) = None;
        *lock(&self.out) =
            CsvLog::maybe("lowtidestamp", lock(&self.location).as_deref(), CSV_HEADER)?;
        Ok(())
    }

    fn stop(&self) -> Result<(), gst::ErrorMessage> {
        *lock(&self.out) = None;
        Ok(())
    }

    fn set_caps(&self, incaps: &gst::Caps, _outcaps: &gst::Caps) -> Result<(), gst::LoggableError> {
        match caps::codec_of(incaps) {
            Some(c @ (Codec::H264 | Codec::H265 | Codec::Av1)) => {
                *lock(&self.codec) = Some(c);
                Ok(())
            }
            _ => Err(gst::loggable_error!(CAT, "caps {} refused", incaps)),
        }
    }

    fn transform_ip(&self, buf: &mut gst::BufferRef) -> Result<gst::FlowSuccess, gst::FlowError> {
        // The instant the buffer reached the element: before any work on it.
        let now_us = wall_clock_us();
        let Some(codec) = *lock(&self.codec) else {
            gst::element_imp_error!(
                self,
                gst::CoreError::Negotiation,
                ("a buffer before caps: lowtidestamp needs caps to know the codec")
            );
            return Err(gst::FlowError::NotNegotiated);
        };
        let stamped = {
            let map = buf.map_readable().map_err(|_| {
                gst::element_imp_error!(self, gst::StreamError::Failed, ("buffer not readable"));
                gst::FlowError::Error
            })?;
            stamp::stamp_unit_bytes(codec, &map, now_us)
        };
        let stamped = match stamped {
            Ok(s) => s,
            Err(e) => {
                gst::element_imp_error!(
                    self,
                    gst::StreamError::Decode,
                    (
                        "lowtidestamp: the buffer at PTS {} is not {}: {}",
                        buf.pts().display(),
                        if codec == Codec::Av1 {
                            "an AV1 temporal unit of OBUs with sizes".to_owned()
                        } else {
                            format!("an Annex-B {codec:?} access unit")
                        },
                        e
                    ),
                    ["lowtidestamp takes {}", stamp_caps()]
                );
                return Err(gst::FlowError::Error);
            }
        };
        let mut c = lock(&self.counters);
        c.buffers += 1;
        if let Some(data) = stamped {
            c.stamped += 1;
            drop(c);
            let line = format!(
                "{},{now_us},{},{}\n",
                buf.pts()
                    .map(|t| t.nseconds().to_string())
                    .unwrap_or_default(),
                data.len(),
                u8::from(!buf.flags().contains(gst::BufferFlags::DELTA_UNIT)),
            );
            buf.replace_all_memory(gst::Memory::from_mut_slice(data));
            let mut out = lock(&self.out);
            if let Some(w) = out.as_mut() {
                // Flushed per line: a killed process loses at most the line being written.
                if let Err(e) = w.line(&line) {
                    *out = None;
                    drop(out);
                    let path = lock(&self.location).clone().unwrap_or_default();
                    gst::element_imp_error!(
                        self,
                        gst::ResourceError::Write,
                        ("lowtidestamp: writing {}: {}", path, e)
                    );
                    return Err(gst::FlowError::Error);
                }
            }
        }
        Ok(gst::FlowSuccess::Ok)
    }
}
