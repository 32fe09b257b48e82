//! The caps the elements take and produce, and the codec each names.
//!
//! | codec | caps (sink takes, source produces) |
//! | --- | --- |
//! | H.264 | `video/x-h264, stream-format=byte-stream, alignment=au` |
//! | H.265 | `video/x-h265, stream-format=byte-stream, alignment=au` |
//! | VP8 | `video/x-vp8` |
//! | VP9 | `video/x-vp9` |
//! | AV1 | `video/x-av1, stream-format=obu-stream, alignment=tu` |
//!
//! One buffer is one access unit (H.264/H.265 §7.4.1.2.3 / §7.4.2.4.4), one VP8/VP9 frame
//! (a VP9 superframe counts as one), or one AV1 temporal unit: what `h264parse`/`h265parse`
//! with `alignment=au`, `vp8enc`/`vp9enc` and `av1parse` with `alignment=tu` produce, and
//! what the decoders take as it is.

use lowtide_media::encoded::Codec;

/// Everything the sink takes (its pad template), in the order of the table above.
pub fn sink_caps() -> gst::Caps {
    let mut caps = gst::Caps::new_empty();
    {
        let caps = caps.get_mut().expect("a new caps is writable");
        for codec in [Codec::H264, Codec::H265, Codec::Vp8, Codec::Vp9, Codec::Av1] {
            caps.append(caps_for(codec, None));
        }
    }
    caps
}

/// What the source produces before it knows the stream (its pad template).
pub fn src_caps() -> gst::Caps {
    sink_caps()
}

/// The caps of `codec`; `size` (width, height) when the stream's header says it.
pub fn caps_for(codec: Codec, size: Option<(u16, u16)>) -> gst::Caps {
    let mut caps = match codec {
        Codec::H264 | Codec::H265 => {
            let name = if codec == Codec::H264 {
                "video/x-h264"
            } else {
                "video/x-h265"
            };
            gst::Caps::builder(name)
                .field("stream-format", "byte-stream")
                .field("alignment", "au")
                .build()
        }
        Codec::Vp8 => gst::Caps::builder("video/x-vp8").build(),
        Codec::Vp9 => gst::Caps::builder("video/x-vp9").build(),
        _ => gst::Caps::builder("video/x-av1")
            .field("stream-format", "obu-stream")
            .field("alignment", "tu")
            .build(),
    };
    if let Some((w, h)) = size.filter(|&(w, h)| w > 0 && h > 0) {
        let caps = caps.get_mut().expect("a new caps is writable");
        caps.set("width", i32::from(w));
        caps.set("height", i32::from(h));
    }
    caps
}

/// The codec of caps the sink was given (fixed caps, as in `set_caps`), or `None` if the
/// sink does not take them.
pub fn codec_of(caps: &gst::CapsRef) -> Option<Codec> {
    let s = caps.structure(0)?;
    let codec = match s.name().as_str() {
        "video/x-h264" => Codec::H264,
        "video/x-h265" => Codec::H265,
        "video/x-vp8" => Codec::Vp8,
        "video/x-vp9" => Codec::Vp9,
        "video/x-av1" => Codec::Av1,
        _ => return None,
    };
    caps.is_subset(&caps_for(codec, None)).then_some(codec)
}

/// Width and height in fixed caps, if they fit the IVF header's 16 bits.
pub fn size_of(caps: &gst::CapsRef) -> Option<(u16, u16)> {
    let s = caps.structure(0)?;
    let w = u16::try_from(s.get::<i32>("width").ok()?).ok()?;
    let h = u16::try_from(s.get::<i32>("height").ok()?).ok()?;
    Some((w, h))
}

/// The pad templates of an element that passes buffers on as it takes them (`lowtidestamp`,
/// `lowtidemeter`): a sink and a source pad, always there, with the same caps.
pub fn passthrough_templates(caps: &gst::Caps) -> Vec<gst::PadTemplate> {
    [
        ("src", gst::PadDirection::Src),
        ("sink", gst::PadDirection::Sink),
    ]
    .into_iter()
    .map(|(name, dir)| {
        gst::PadTemplate::new(name, dir, gst::PadPresence::Always, caps)
            .expect("a valid pad template")
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_name_their_codec_and_others_are_refused() {
        gst::init().unwrap();
        for codec in [Codec::H264, Codec::H265, Codec::Vp8, Codec::Vp9, Codec::Av1] {
            let caps = caps_for(codec, Some((320, 240)));
            assert_eq!(codec_of(&caps), Some(codec), "{caps}");
            assert_eq!(size_of(&caps), Some((320, 240)));
            assert!(caps.is_subset(&sink_caps()));
        }
        let refused = [
            "video/x-raw, format=I420",
            "video/x-h264, stream-format=avc, alignment=au",
            "video/x-h264, stream-format=byte-stream, alignment=nal",
            "video/x-av1, stream-format=annexb, alignment=tu",
        ];
        for s in refused {
            let caps: gst::Caps = s.parse().unwrap();
            assert_eq!(codec_of(&caps), None, "{s}");
        }
    }
}
