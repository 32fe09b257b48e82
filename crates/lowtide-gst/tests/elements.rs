//! The elements over loopback: a real encoder into `lowtidesink`, `lowtidesrc` into a real
//! decoder, and the errors a user sees on the bus. Each test takes a few seconds; all print
//! "skipped: <why>" and pass only when GStreamer itself is missing (`run.sh` installs it).

use std::net::TcpListener;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use gst::prelude::*;

/// GStreamer initialised and the plugin registered, or why not.
fn setup() -> Result<(), String> {
    gst::init().map_err(|e| format!("GStreamer does not initialise: {e}"))?;
    if gst::ElementFactory::find("lowtidesink").is_none() {
        gstlowtide::plugin_register_static().map_err(|e| format!("registering: {e}"))?;
    }
    Ok(())
}

macro_rules! setup_or_skip {
    () => {
        if let Err(why) = setup() {
            println!("skipped: {why}");
            return;
        }
    };
}

/// Elements a test needs beyond the plugin: their absence is a broken installation (run.sh
/// installs them), not a reason to skip.
fn require(factories: &[&str]) {
    for f in factories {
        assert!(
            gst::ElementFactory::find(f).is_some(),
            "GStreamer element {f} is missing: install gstreamer1.0-plugins-{{base,good,bad,ugly}} and gstreamer1.0-libav (run.sh does)"
        );
    }
}

/// A loopback port nobody listens on now.
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Error and warning texts (message and debug) posted on `bus` so far.
fn bus_errors(bus: &gst::Bus) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(m) = bus.pop() {
        if let gst::MessageView::Error(e) = m.view() {
            out.push(format!(
                "{}: {} ({})",
                m.src()
                    .map(|s| s.path_string().to_string())
                    .unwrap_or_default(),
                e.error(),
                e.debug().map(|d| d.to_string()).unwrap_or_default()
            ));
        }
    }
    out
}

/// Waits for the first error on `bus`, at most `limit`.
fn wait_error(bus: &gst::Bus, limit: Duration) -> Option<String> {
    let m = bus.timed_pop_filtered(
        gst::ClockTime::from_nseconds(limit.as_nanos() as u64),
        &[gst::MessageType::Error],
    )?;
    let gst::MessageView::Error(e) = m.view() else {
        return None;
    };
    Some(format!(
        "{} ({})",
        e.error(),
        e.debug().map(|d| d.to_string()).unwrap_or_default()
    ))
}

/// Encodes 60 frames with `encoder`, sends them through lowtidesink to lowtidesrc, decodes
/// them with `decoder`; returns the frames decoded and any error either pipeline posted.
/// The budget is 5 s: on a loaded machine the encoder may fall behind real time, and a unit
/// past its deadline when it reaches the sink is dropped (rightly); these tests are about
/// the data path, not the budget.
fn round_trip(encoder: &str, decoder: &str) -> (usize, Vec<String>, gst::Structure) {
    let port = free_port();
    let rx = gst::parse::launch(&format!(
        "lowtidesrc name=src address=127.0.0.1:{port} ! {decoder} ! appsink name=out sync=false"
    ))
    .unwrap()
    .downcast::<gst::Pipeline>()
    .unwrap();
    rx.set_state(gst::State::Playing).unwrap();
    let tx = gst::parse::launch(&format!(
        "videotestsrc num-buffers=60 ! video/x-raw,width=320,height=240,framerate=30/1 \
         ! {encoder} ! lowtidesink name=sink address=127.0.0.1:{port} latency-ms=5000"
    ))
    .unwrap()
    .downcast::<gst::Pipeline>()
    .unwrap();
    tx.set_state(gst::State::Playing).unwrap();
    let out = rx
        .by_name("out")
        .unwrap()
        .downcast::<gst_app::AppSink>()
        .unwrap();
    let mut frames = 0;
    let until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < until {
        match out.try_pull_sample(gst::ClockTime::from_mseconds(200)) {
            Some(_) => frames += 1,
            None if out.is_eos() => break,
            None => {}
        }
    }
    // The sender's EOS: it waits for the receiver's acknowledgements.
    let tx_bus = tx.bus().unwrap();
    let _ = tx_bus.timed_pop_filtered(
        gst::ClockTime::from_seconds(10),
        &[gst::MessageType::Eos, gst::MessageType::Error],
    );
    let stats = tx
        .by_name("sink")
        .unwrap()
        .property::<gst::Structure>("stats");
    let mut errors = bus_errors(&tx_bus);
    errors.extend(bus_errors(&rx.bus().unwrap()));
    tx.set_state(gst::State::Null).unwrap();
    rx.set_state(gst::State::Null).unwrap();
    (frames, errors, stats)
}

#[test]
fn h264_from_x264enc_through_lowtide_decodes_every_frame() {
    setup_or_skip!();
    require(&[
        "videotestsrc",
        "x264enc",
        "h264parse",
        "avdec_h264",
        "appsink",
    ]);
    let (frames, errors, stats) = round_trip(
        "x264enc tune=zerolatency key-int-max=30 ! h264parse",
        "h264parse ! avdec_h264",
    );
    assert!(errors.is_empty(), "errors on the bus: {errors:?}");
    assert_eq!(frames, 60, "frames decoded; sender: {stats}");
    assert_eq!(stats.get::<u64>("buffers").unwrap(), 60, "{stats}");
    assert!(stats.get::<bool>("all-acknowledged").unwrap(), "{stats}");
}

#[test]
fn vp8_from_vp8enc_through_lowtide_decodes_every_frame() {
    setup_or_skip!();
    require(&["videotestsrc", "vp8enc", "vp8dec", "appsink"]);
    let (frames, errors, stats) = round_trip("vp8enc deadline=1 keyframe-max-dist=30", "vp8dec");
    assert!(errors.is_empty(), "errors on the bus: {errors:?}");
    assert_eq!(frames, 60, "frames decoded; sender: {stats}");
}

#[test]
fn h265_vp9_and_av1_through_lowtide_decode_every_frame() {
    setup_or_skip!();
    let pairs = [
        (
            ["x265enc", "h265parse", "avdec_h265"],
            "x265enc tune=zerolatency key-int-max=30 ! h265parse",
            "h265parse ! avdec_h265",
        ),
        (
            ["vp9enc", "vp9dec", "vp9dec"],
            // libvpx's realtime settings: its defaults encode slower than real time here.
            "vp9enc deadline=1 cpu-used=8 lag-in-frames=0 keyframe-max-dist=30",
            "vp9dec",
        ),
        (
            ["av1enc", "av1parse", "av1dec"],
            "av1enc usage-profile=realtime cpu-used=10 keyframe-max-dist=30 ! av1parse",
            "av1parse ! av1dec",
        ),
    ];
    for (needs, encoder, decoder) in pairs {
        require(&needs);
        let (frames, errors, stats) = round_trip(encoder, decoder);
        assert!(
            errors.is_empty(),
            "{encoder}: errors on the bus: {errors:?}"
        );
        assert_eq!(frames, 60, "{encoder}: frames decoded; sender: {stats}");
    }
}

#[test]
fn caps_the_sink_does_not_take_are_an_error_naming_them() {
    setup_or_skip!();
    require(&["appsrc"]);
    // Something to connect to: the caps are refused before anything is sent.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let pipeline = gst::Pipeline::new();
    let src = gst::ElementFactory::make("appsrc")
        .property(
            "caps",
            "video/x-raw,format=I420,width=64,height=64,framerate=30/1"
                .parse::<gst::Caps>()
                .unwrap(),
        )
        .property_from_str("format", "time")
        .build()
        .unwrap();
    let sink = gst::ElementFactory::make("lowtidesink")
        .property("address", format!("127.0.0.1:{port}"))
        .build()
        .unwrap();
    pipeline.add_many([&src, &sink]).unwrap();
    src.link(&sink).unwrap();
    pipeline.set_state(gst::State::Playing).unwrap();
    let appsrc = src.downcast::<gst_app::AppSrc>().unwrap();
    let _ = appsrc.push_buffer(gst::Buffer::from_slice(vec![0u8; 64 * 64 * 3 / 2]));
    let err = wait_error(&pipeline.bus().unwrap(), Duration::from_secs(10));
    pipeline.set_state(gst::State::Null).unwrap();
    let err = err.expect("an error on the bus");
    assert!(
        err.contains("does not take caps video/x-raw"),
        "the error names the caps: {err}"
    );
}

#[test]
fn a_refused_connection_is_an_error_naming_the_address() {
    setup_or_skip!();
    require(&["videotestsrc", "vp8enc"]);
    let port = free_port();
    let pipeline = gst::parse::launch(&format!(
        "videotestsrc num-buffers=5 ! vp8enc ! lowtidesink address=127.0.0.1:{port}"
    ))
    .unwrap();
    let _ = pipeline.set_state(gst::State::Playing);
    let err = wait_error(&pipeline.bus().unwrap(), Duration::from_secs(10));
    pipeline.set_state(gst::State::Null).unwrap();
    let err = err.expect("an error on the bus");
    assert!(
        err.contains(&format!("connecting to 127.0.0.1:{port}")) && err.contains("refused"),
        "the error names the address and the cause: {err}"
    );
}

#[test]
fn a_peer_that_is_not_lowtide_is_an_error() {
    setup_or_skip!();
    require(&["videotestsrc", "vp8enc"]);
    // A server that answers with an HTTP response.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        use std::io::{Read, Write};
        if let Ok((mut s, _)) = listener.accept() {
            let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
            let mut sink = [0u8; 4096];
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
        }
    });
    let pipeline = gst::parse::launch(&format!(
        "videotestsrc num-buffers=100 ! video/x-raw,framerate=30/1 ! vp8enc deadline=1 ! lowtidesink address=127.0.0.1:{port}"
    ))
    .unwrap();
    let _ = pipeline.set_state(gst::State::Playing);
    let err = wait_error(&pipeline.bus().unwrap(), Duration::from_secs(10));
    pipeline.set_state(gst::State::Null).unwrap();
    let _ = server.join();
    let err = err.expect("an error on the bus");
    assert!(
        err.contains(&format!("127.0.0.1:{port}")) && err.contains("lowtide"),
        "the error says the peer is not lowtide: {err}"
    );
}

/// The directory holding `libgstlowtide.so`: `deps/` beside the test executable, where the
/// test build puts the library (`cargo build` copies it one level up, but `cargo test` does
/// not, so the copy there may be older).
fn plugin_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let deps = exe.parent()?;
    let found = [deps, deps.parent()?]
        .into_iter()
        .find(|d| d.join("libgstlowtide.so").exists())
        .map(PathBuf::from);
    found
}

#[test]
fn gst_inspect_finds_both_elements_on_gst_plugin_path() {
    if std::process::Command::new("gst-inspect-1.0")
        .arg("--version")
        .output()
        .is_err()
    {
        println!("skipped: gst-inspect-1.0 is not installed (gstreamer1.0-tools)");
        return;
    }
    let dir = plugin_dir().expect("libgstlowtide.so beside the test executable");
    for element in ["lowtidesink", "lowtidesrc"] {
        let out = std::process::Command::new("gst-inspect-1.0")
            .arg(element)
            .env("GST_PLUGIN_PATH", &dir)
            // A registry of its own: the user's cache may hold an older build.
            .env("GST_REGISTRY", dir.join("gst-registry-test.bin"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "gst-inspect-1.0 {element}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains("libgstlowtide.so") && text.contains("address"),
            "{text}"
        );
    }
}

/// lowtide's side of the loopback tests that play the other end themselves.
mod peer {
    use lowtide::{Channel, ChannelConfig, Message, StreamConfig};
    use lowtide_media::encoded::wire::{self, StreamStart, UnitHeader, WireMessage};
    use lowtide_media::encoded::{Codec, FrameKind, KeyframeRequest, UnitInfo};

    pub fn unit(index: u64, kind: FrameKind, bytes: &[u8]) -> Vec<u8> {
        let h = UnitHeader {
            codec: Codec::H264,
            info: UnitInfo::new(index, kind),
            has_parameter_sets: kind == FrameKind::ParameterSets,
            capture_us: index * 33_333,
            pts: Some(index * 33_333_333),
        };
        wire::encode_unit(&h, bytes)
    }

    pub fn start() -> Vec<u8> {
        wire::encode_start(&StreamStart {
            codec: Codec::H264,
            ivf: None,
        })
    }

    pub fn send(ch: &Channel, stream: u64, data: Vec<u8>) {
        ch.send(stream, Message::new(data).importance(15)).unwrap();
    }

    pub async fn connect(port: u16) -> Channel {
        let addr = format!("127.0.0.1:{port}").parse().unwrap();
        for _ in 0..50 {
            if let Ok(ch) = lowtide::connect(addr, ChannelConfig::default()).await {
                return ch;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("lowtidesrc does not listen on {addr}");
    }

    pub fn open(ch: &Channel) -> u64 {
        ch.open_stream(StreamConfig::default()).unwrap()
    }

    pub fn as_request(data: &[u8]) -> Option<KeyframeRequest> {
        match wire::decode(data) {
            Ok(WireMessage::KeyframeRequest(r)) => Some(r),
            _ => None,
        }
    }

    pub fn as_unit_kind(data: &[u8]) -> Option<FrameKind> {
        match wire::decode(data) {
            Ok(WireMessage::Unit(h, _)) => Some(h.info.kind),
            _ => None,
        }
    }
}

#[test]
fn the_source_never_outputs_a_unit_whose_reference_was_lost_and_asks_for_a_keyframe() {
    use lowtide_media::encoded::{FrameKind::*, RequestReason};
    setup_or_skip!();
    require(&["appsink"]);
    let port = free_port();
    let rx = gst::parse::launch(&format!(
        "lowtidesrc name=src address=127.0.0.1:{port} request-interval-ms=100 ! appsink name=out sync=false"
    ))
    .unwrap()
    .downcast::<gst::Pipeline>()
    .unwrap();
    rx.set_state(gst::State::Playing).unwrap();
    let (sps_pps, idr, p) = (
        [0u8, 0, 0, 1, 0x67, 0x42, 0, 0, 0, 1, 0x68, 0xce],
        [0u8, 0, 0, 1, 0x65, 0x88],
        [0u8, 0, 0, 1, 0x41, 0x9a],
    );
    let sender = std::thread::spawn(move || {
        lowtide::current_thread_runtime()
            .unwrap()
            .block_on(async move {
                let ch = peer::connect(port).await;
                let s = peer::open(&ch);
                peer::send(&ch, s, peer::start());
                peer::send(&ch, s, peer::unit(0, ParameterSets, &sps_pps));
                peer::send(&ch, s, peer::unit(1, Keyframe, &idr));
                peer::send(&ch, s, peer::unit(2, Reference, &p));
                // Unit 3, a reference, was dropped at the sender: 4 cannot be decoded.
                let notice = [lowtide_media::encoded::UnitInfo::new(3, Reference)];
                peer::send(
                    &ch,
                    s,
                    lowtide_media::encoded::wire::encode_dropped(&notice),
                );
                peer::send(&ch, s, peer::unit(4, Reference, &p));
                let request = tokio::time::timeout(std::time::Duration::from_secs(5), async {
                    while let Some(m) = ch.recv().await {
                        if let Some(r) = peer::as_request(&m.data) {
                            return Some(r);
                        }
                    }
                    None
                })
                .await
                .ok()
                .flatten();
                peer::send(&ch, s, peer::unit(5, Keyframe, &idr));
                peer::send(&ch, s, peer::unit(6, Reference, &p));
                peer::send(&ch, s, lowtide_media::encoded::wire::encode_end(7));
                ch.flush().await.unwrap();
                let _ = tokio::time::timeout(std::time::Duration::from_secs(3), async {
                    while ch.recv().await.is_some() {}
                })
                .await;
                ch.close(0, "done").await;
                request
            })
    });
    let out = rx
        .by_name("out")
        .unwrap()
        .downcast::<gst_app::AppSink>()
        .unwrap();
    let mut buffers = Vec::new();
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        match out.try_pull_sample(gst::ClockTime::from_mseconds(200)) {
            Some(s) => {
                let caps = s.caps().unwrap().to_string();
                let b = s.buffer().unwrap();
                let data = b.map_readable().unwrap().to_vec();
                let delta = b.flags().contains(gst::BufferFlags::DELTA_UNIT);
                buffers.push((caps, data, delta, b.pts().is_some()));
            }
            None if out.is_eos() => break,
            None => {}
        }
    }
    let request = sender.join().unwrap();
    let errors = bus_errors(&rx.bus().unwrap());
    let stats = rx
        .by_name("src")
        .unwrap()
        .property::<gst::Structure>("stats");
    rx.set_state(gst::State::Null).unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    let got: Vec<(Vec<u8>, bool)> = buffers.iter().map(|b| (b.1.clone(), b.2)).collect();
    let first = [&sps_pps[..], &idr[..]].concat();
    assert_eq!(
        got,
        [
            (first, false),
            (p.to_vec(), true),
            (idr.to_vec(), false),
            (p.to_vec(), true)
        ],
        "parameter sets with their keyframe, unit 4 gated, the stream resumed at the keyframe"
    );
    assert!(buffers[0].0.contains("video/x-h264") && buffers[0].0.contains("alignment=(string)au"));
    assert!(buffers.iter().all(|b| b.3), "every buffer timestamped");
    let request = request.expect("a keyframe request reached the sender");
    assert_eq!(request.reason, RequestReason::ReferenceLost { index: 3 });
    assert!(
        stats.get::<u64>("keyframe-requests").unwrap() >= 1,
        "{stats}"
    );
    assert_eq!(
        stats.get::<u64>("units-dropped-by-gate").unwrap(),
        2,
        "{stats}"
    );
}

#[test]
fn a_keyframe_request_from_the_receiver_reaches_the_encoder_as_force_key_unit() {
    use lowtide_media::encoded::{FrameKind, KeyframeRequest, RequestReason};
    setup_or_skip!();
    require(&["videotestsrc", "x264enc", "h264parse", "identity"]);
    let rt = lowtide::current_thread_runtime().unwrap();
    let listener = rt
        .block_on(lowtide::listen(
            "127.0.0.1:0".parse().unwrap(),
            lowtide::ChannelConfig::default(),
        ))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    // The receiver: after 10 units it asks for a keyframe, then counts keyframes.
    let receiver = std::thread::spawn(move || {
        rt.block_on(async move {
            let ch = listener.accept().await.unwrap();
            let (mut units, mut keyframes, mut asked) = (0, 0, false);
            let until = tokio::time::Instant::now() + std::time::Duration::from_secs(15);
            while let Ok(Some(m)) = tokio::time::timeout_at(until, ch.recv()).await {
                let Some(kind) = peer::as_unit_kind(&m.data) else {
                    continue;
                };
                units += 1;
                if kind == FrameKind::Keyframe {
                    keyframes += 1;
                }
                if units == 10 && !asked {
                    asked = true;
                    let s = peer::open(&ch);
                    let r = KeyframeRequest {
                        reason: RequestReason::ReferenceLost { index: 5 },
                        dropped_since: 1,
                    };
                    peer::send(
                        &ch,
                        s,
                        lowtide_media::encoded::wire::encode_keyframe_request(&r),
                    );
                }
            }
            (units, keyframes)
        })
    });
    let pipeline = gst::parse::launch(&format!(
        "videotestsrc is-live=true num-buffers=60 ! video/x-raw,width=320,height=240,framerate=30/1 \
         ! x264enc tune=zerolatency key-int-max=1000 ! h264parse ! identity name=probe \
         ! lowtidesink name=sink address=127.0.0.1:{port}"
    ))
    .unwrap()
    .downcast::<gst::Pipeline>()
    .unwrap();
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counter = seen.clone();
    pipeline
        .by_name("probe")
        .unwrap()
        .static_pad("src")
        .unwrap()
        .add_probe(gst::PadProbeType::EVENT_UPSTREAM, move |_, info| {
            if let Some(ev) = info.event() {
                if gst_video::UpstreamForceKeyUnitEvent::parse(ev).is_ok() {
                    counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            }
            gst::PadProbeReturn::Ok
        })
        .unwrap();
    pipeline.set_state(gst::State::Playing).unwrap();
    let bus = pipeline.bus().unwrap();
    let _ = bus.timed_pop_filtered(
        gst::ClockTime::from_seconds(20),
        &[gst::MessageType::Eos, gst::MessageType::Error],
    );
    let stats = pipeline
        .by_name("sink")
        .unwrap()
        .property::<gst::Structure>("stats");
    let errors = bus_errors(&bus);
    pipeline.set_state(gst::State::Null).unwrap();
    let (units, keyframes) = receiver.join().unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(
        stats.get::<u64>("keyframe-requests-receiver").unwrap(),
        1,
        "{stats}"
    );
    assert!(
        seen.load(std::sync::atomic::Ordering::SeqCst) >= 1,
        "no force-key-unit upstream"
    );
    assert!(units >= 60, "{units} units");
    assert!(
        keyframes >= 2,
        "x264enc made a keyframe on request: {keyframes} keyframes"
    );
}

#[test]
fn rate_feedback_lowers_x264enc_bitrate_while_the_receiver_stalls() {
    setup_or_skip!();
    require(&["videotestsrc", "x264enc", "h264parse"]);
    let rt = lowtide::current_thread_runtime().unwrap();
    // A receiver that reads little ahead of its application, so a stalled application
    // stops the reads and the sender's queue grows.
    let cfg = lowtide::ChannelConfig {
        rcvbuf: Some(4096),
        read_chunk: 4096,
        ..lowtide::ChannelConfig::default()
    };
    let listener = rt
        .block_on(lowtide::listen("127.0.0.1:0".parse().unwrap(), cfg))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    let receiver = std::thread::spawn(move || {
        rt.block_on(async move {
            let ch = listener.accept().await.unwrap();
            let mut n = 0;
            let until = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
            while let Ok(Some(_)) = tokio::time::timeout_at(until, ch.recv()).await {
                n += 1;
                if n == 20 {
                    // The application stalls for 2 s.
                    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
                }
            }
        })
    });
    let pipeline = gst::parse::launch(&format!(
        "videotestsrc is-live=true num-buffers=150 ! video/x-raw,width=640,height=360,framerate=30/1 \
         ! x264enc tune=zerolatency key-int-max=30 bitrate=2000 ! h264parse \
         ! lowtidesink name=sink address=127.0.0.1:{port} latency-ms=200 rate-feedback=true rate-interval-ms=200"
    ))
    .unwrap()
    .downcast::<gst::Pipeline>()
    .unwrap();
    pipeline.set_state(gst::State::Playing).unwrap();
    let bus = pipeline.bus().unwrap();
    let (mut reports, mut congested, mut lowest) = (0, 0, u64::MAX);
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        let Some(m) = bus.timed_pop(gst::ClockTime::from_mseconds(100)) else {
            continue;
        };
        match m.view() {
            gst::MessageView::Element(e) => {
                let s = e.structure().unwrap();
                if s.name() == "lowtide-rate" {
                    reports += 1;
                    if s.get::<bool>("congested").unwrap() {
                        congested += 1;
                    }
                    if let Ok(bps) = s.get::<u64>("encoder-bitrate-bps") {
                        lowest = lowest.min(bps);
                    }
                    assert!(s.get::<u64>("estimate-bps").is_ok());
                }
            }
            gst::MessageView::Eos(_) => break,
            gst::MessageView::Error(e) => panic!("{} ({:?})", e.error(), e.debug()),
            _ => {}
        }
    }
    let stats = pipeline
        .by_name("sink")
        .unwrap()
        .property::<gst::Structure>("stats");
    pipeline.set_state(gst::State::Null).unwrap();
    receiver.join().unwrap();
    println!("{reports} reports, {congested} congested, lowest {lowest} bit/s; {stats}");
    assert!(reports >= 10, "{reports} lowtide-rate messages");
    assert!(congested >= 1, "the stall was seen as congestion; {stats}");
    assert!(
        lowest < 2_000_000,
        "x264enc's bit rate went down from 2000 kbit/s: lowest {lowest}; {stats}"
    );
    assert!(stats.get::<u64>("bitrate-changes").unwrap() >= 1, "{stats}");
}

#[test]
fn a_receiver_that_stops_pulling_pushes_back_to_the_sender_which_drops() {
    setup_or_skip!();
    require(&["videotestsrc", "x264enc", "h264parse", "appsink"]);
    let port = free_port();
    // The application never pulls: appsink holds one buffer, the source two units.
    let rx = gst::parse::launch(&format!(
        "lowtidesrc name=src address=127.0.0.1:{port} max-buffers=2 \
         ! appsink name=out sync=false max-buffers=1 drop=false"
    ))
    .unwrap()
    .downcast::<gst::Pipeline>()
    .unwrap();
    rx.set_state(gst::State::Playing).unwrap();
    // About 20 Mbit/s of noise: in 6 s more than the kernel's and lowtide's receive buffers.
    // No end of stream: the sink's end waits for acknowledgements a stalled receiver does
    // not send (up to 15 s).
    let tx = gst::parse::launch(&format!(
        "videotestsrc is-live=true pattern=snow \
         ! video/x-raw,width=640,height=360,framerate=30/1 \
         ! x264enc tune=zerolatency speed-preset=ultrafast key-int-max=30 bitrate=20000 ! h264parse \
         ! lowtidesink name=sink address=127.0.0.1:{port} latency-ms=200"
    ))
    .unwrap()
    .downcast::<gst::Pipeline>()
    .unwrap();
    tx.set_state(gst::State::Playing).unwrap();
    let bus = tx.bus().unwrap();
    let _ = bus.timed_pop_filtered(gst::ClockTime::from_seconds(6), &[gst::MessageType::Error]);
    let stats = tx
        .by_name("sink")
        .unwrap()
        .property::<gst::Structure>("stats");
    let errors = bus_errors(&bus);
    let held = rx
        .by_name("src")
        .unwrap()
        .property::<gst::Structure>("stats");
    tx.set_state(gst::State::Null).unwrap();
    rx.set_state(gst::State::Null).unwrap();
    println!("{stats}\n{held}");
    assert!(errors.is_empty(), "{errors:?}");
    let get = |f: &str| stats.get::<u64>(f).unwrap();
    let expired_in_queue = get("dropped-expired") - get("dropped-late-on-arrival");
    assert!(
        expired_in_queue > 0,
        "the stalled receiver's back-pressure made units expire at the sender: {stats}"
    );
    // The source pushed what appsink took (one buffer, and the one it blocks on).
    assert!(held.get::<u64>("buffers").unwrap() <= 2, "{held}");
}
