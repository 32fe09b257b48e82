//! The meter's implementation. Its position is read from its caps: encoded (before the
//! decoder) it reads the stamp and attaches it with the arrival instant as a custom meta;
//! raw (after the decoder) it reads that meta off the decoded frame. Either position writes a
//! CSV line per buffer when `location` is set. Buffers pass untouched (the meta aside) and at
//! once; memory is bounded (one line buffer).

use std::sync::{LazyLock, Mutex, MutexGuard};

use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::subclass::prelude::*;
use lowtide_media::encoded::{stamp, Codec};

use crate::caps;
use crate::csv_log::CsvLog;
use crate::stamp::imp::stamp_caps;
use lowtide_media::wall_clock::now_us as wall_clock_us;

static CAT: LazyLock<gst::DebugCategory> = LazyLock::new(|| {
    gst::DebugCategory::new(
        "lowtidemeter",
        gst::DebugColorFlags::empty(),
        Some("lowtide meter"),
    )
});

/// The custom meta carrying `stamp-us` (if the unit had a stamp) and `arrived-us`.
pub const META_NAME: &str = "GstLowtideStampMeta";

/// The CSV's header line.
pub const CSV_HEADER: &str = "pts_ns,stamp_us,arrived_us,decoded_us,latency_ms,corrupted";

#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    frames: u64,
    stamped: u64,
    unstamped: u64,
}

#[derive(Debug, Default)]
struct State {
    /// `Some(codec)` before the decoder, `None` after it (raw caps) or before caps.
    codec: Option<Codec>,
    out: Option<CsvLog>,
    /// Units before the decoder that did not parse (logged once).
    unparsed_logged: bool,
}

#[derive(Default)]
pub struct LowtideMeter {
    location: Mutex<Option<String>>,
    state: Mutex<State>,
    counters: Mutex<Counters>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn template_caps() -> gst::Caps {
    let mut c = stamp_caps();
    c.merge(gst::Caps::builder("video/x-raw").build());
    c.merge(gst::Caps::builder("video/x-raw").any_features().build());
    c
}

/// `a` or nothing (an empty CSV field).
fn field(a: Option<impl std::fmt::Display>) -> String {
    a.map(|a| a.to_string()).unwrap_or_default()
}

#[glib::object_subclass]
impl ObjectSubclass for LowtideMeter {
    const NAME: &'static str = "GstLowtideMeter";
    type Type = super::LowtideMeter;
    type ParentType = gst_base::BaseTransform;
}

impl ObjectImpl for LowtideMeter {
    fn properties() -> &'static [glib::ParamSpec] {
        static PROPERTIES: LazyLock<Vec<glib::ParamSpec>> = LazyLock::new(|| {
            vec![
                glib::ParamSpecString::builder("location")
                    .nick("CSV file")
                    .blurb("File to write one CSV line per buffer to (pts_ns,stamp_us,arrived_us,decoded_us,latency_ms), flushed per line; none: no file")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecBoxed::builder::<gst::Structure>("stats")
                    .nick("Statistics")
                    .blurb("Frames (buffers) seen, those with a stamp, those without")
                    .read_only()
                    .build(),
            ]
        });
        PROPERTIES.as_ref()
    }

    fn set_property(&self, _id: usize, value: &glib::Value, pspec: &glib::ParamSpec) {
        match pspec.name() {
            "location" => *lock(&self.location) = value.get().expect("type checked upstream"),
            _ => unimplemented!(),
        }
    }

    fn property(&self, _id: usize, pspec: &glib::ParamSpec) -> glib::Value {
        match pspec.name() {
            "location" => lock(&self.location).to_value(),
            "stats" => {
                let c = *lock(&self.counters);
                gst::Structure::builder("lowtide-meter-stats")
                    .field("frames", c.frames)
                    .field("stamped", c.stamped)
                    .field("unstamped", c.unstamped)
                    .build()
                    .to_value()
            }
            _ => unimplemented!(),
        }
    }
}

impl GstObjectImpl for LowtideMeter {}

impl ElementImpl for LowtideMeter {
    fn metadata() -> Option<&'static gst::subclass::ElementMetadata> {
        static META: LazyLock<gst::subclass::ElementMetadata> = LazyLock::new(|| {
            gst::subclass::ElementMetadata::new(
                "lowtide meter",
                "Filter/Video",
                "Before a decoder: reads lowtidestamp's stamp and carries it through the decoder; after it: one CSV line per frame with its latency from the stamper",
                "lowtide",
            )
        });
        Some(&*META)
    }

    fn pad_templates() -> &'static [gst::PadTemplate] {
        static TEMPLATES: LazyLock<Vec<gst::PadTemplate>> =
            LazyLock::new(|| caps::passthrough_templates(&template_caps()));
        TEMPLATES.as_ref()
    }
}

impl BaseTransformImpl for LowtideMeter {
    const MODE: gst_base::subclass::BaseTransformMode =
        gst_base::subclass::BaseTransformMode::AlwaysInPlace;
    const PASSTHROUGH_ON_SAME_CAPS: bool = false;
    const TRANSFORM_IP_ON_PASSTHROUGH: bool = false;

    fn start(&self) -> Result<(), gst::ErrorMessage> {
        *lock(&self.counters) = Counters::default();
        let out = CsvLog::maybe("lowtidemeter", lock(&self.location).as_deref(), CSV_HEADER)?;
        *lock(&self.state) = State {
            out,
            ..State::default()
        };
        Ok(())
    }

    fn stop(&self) -> Result<(), gst::ErrorMessage> {
        lock(&self.state).out = None;
        Ok(())
    }

    fn set_caps(&self, incaps: &gst::Caps, _outcaps: &gst::Caps) -> Result<(), gst::LoggableError> {
        let codec = match caps::codec_of(incaps) {
            Some(c @ (Codec::H264 | Codec::H265 | Codec::Av1)) => Some(c),
            Some(_) => return Err(gst::loggable_error!(CAT, "caps {} refused", incaps)),
            None => None,
        };
        gst::debug!(
            CAT,
            imp = self,
            "{} the decoder",
            if codec.is_some() { "before" } else { "after" }
        );
        lock(&self.state).codec = codec;
        Ok(())
    }

    fn transform_ip(&self, buf: &mut gst::BufferRef) -> Result<gst::FlowSuccess, gst::FlowError> {
        let now_us = wall_clock_us();
        let mut state = lock(&self.state);
        let (stamp_us, arrived_us, decoded_us) = match state.codec {
            Some(codec) => {
                let read = match buf.map_readable() {
                    Ok(map) => stamp::read_unit_bytes(codec, &map),
                    Err(_) => Ok(None),
                };
                let stamp_us = match read {
                    Ok(s) => s,
                    Err(e) => {
                        // Not fatal: the decoder decides what it makes of the unit.
                        if !std::mem::replace(&mut state.unparsed_logged, true) {
                            gst::warning!(CAT, imp = self, "a unit that does not parse: {e}");
                        }
                        None
                    }
                };
                let mut meta = gst::meta::CustomMeta::add(buf, META_NAME).map_err(|_| {
                    gst::element_imp_error!(
                        self,
                        gst::CoreError::Failed,
                        ("lowtidemeter: adding its meta to a buffer failed")
                    );
                    gst::FlowError::Error
                })?;
                let s = meta.mut_structure();
                s.set("arrived-us", now_us);
                if let Some(us) = stamp_us {
                    s.set("stamp-us", us);
                }
                (stamp_us, Some(now_us), None)
            }
            None => {
                let (stamp_us, arrived_us) = gst::meta::CustomMeta::from_buffer(buf, META_NAME)
                    .map(|m| {
                        let s = m.structure();
                        (
                            s.get::<u64>("stamp-us").ok(),
                            s.get::<u64>("arrived-us").ok(),
                        )
                    })
                    .unwrap_or((None, None));
                (stamp_us, arrived_us, Some(now_us))
            }
        };
        {
            let mut c = lock(&self.counters);
            c.frames += 1;
            if stamp_us.is_some() {
                c.stamped += 1;
            } else {
                c.unstamped += 1;
            }
        }
        if let Some(w) = state.out.as_mut() {
            // Latency: from the stamp to this element (decoded, or arrived before the decoder).
            let at = decoded_us.or(arrived_us).unwrap_or(now_us);
            let latency_ms = stamp_us.map(|s| format!("{:.3}", (at as f64 - s as f64) / 1e3));
            // The decoder marks a frame it made with a reference missing (libav's corrupt flag).
            let line = format!(
                "{},{},{},{},{},{}\n",
                field(buf.pts().map(|t| t.nseconds())),
                field(stamp_us),
                field(arrived_us),
                field(decoded_us),
                latency_ms.unwrap_or_default(),
                u8::from(buf.flags().contains(gst::BufferFlags::CORRUPTED)),
            );
            // Flushed per line: a killed process loses at most the line being written.
            if let Err(e) = w.line(&line) {
                let path = lock(&self.location).clone().unwrap_or_default();
                state.out = None;
                drop(state);
                gst::element_imp_error!(
                    self,
                    gst::ResourceError::Write,
                    ("lowtidemeter: writing {}: {}", path, e)
                );
                return Err(gst::FlowError::Error);
            }
        }
        Ok(gst::FlowSuccess::Ok)
    }
}
