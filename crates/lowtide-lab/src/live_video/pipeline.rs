//! The two `gst-launch-1.0` command lines of a live-video variant, and the files they write.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use lowtide::proto::ControllerConfig;

use super::{LiveApp, LiveTransport, LiveVariant};

/// The files a variant's two processes write, in one folder of the trial.
#[derive(Debug, Clone)]
pub(crate) struct Files {
    pub dir: PathBuf,
}

impl Files {
    /// One line per access unit stamped at the sender.
    pub fn stamps(&self) -> PathBuf {
        self.dir.join("stamps.csv")
    }
    /// One line per frame out of the decoder.
    pub fn frames(&self) -> PathBuf {
        self.dir.join("frames.csv")
    }
    /// lowtide's rate feedback, one line per interval.
    pub fn rate(&self) -> PathBuf {
        self.dir.join("rate.csv")
    }
    /// lowtide's fate of each unit.
    pub fn units(&self) -> PathBuf {
        self.dir.join("units.csv")
    }
}

/// The name `lowtidesink`'s `controller` property takes for a controller, or why it has none.
pub(crate) fn controller_property(c: &ControllerConfig) -> Result<String, String> {
    Ok(match *c {
        ControllerConfig::Unlimited => "unlimited".into(),
        ControllerConfig::MinBuf { a, b } => format!("min-buf:{a},{b}"),
        ControllerConfig::NotsentLowat { bytes } => format!("notsent-lowat:{bytes}"),
        ControllerConfig::PaceA { b } => format!("pace-a:{b}"),
        ControllerConfig::Dbat(_) => {
            return Err(
                "DBAT needs a stream rate; lowtidesink takes tcp, min-buf, notsent-lowat or pace-a"
                    .into(),
            )
        }
    })
}

/// A path as a property value gst-launch parses back whole.
fn path_value(p: &Path) -> String {
    format!("\"{}\"", p.display())
}

/// The sender: live test video, x264, whole access units, the stamp, the transport.
/// `to` is the receiver's address (lowtide) or the port to listen on (tcpserversink).
pub(crate) fn sender_args(
    app: &LiveApp,
    v: &LiveVariant,
    controller: &str,
    to: SocketAddr,
    files: &Files,
) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "-q".into(),
        "-e".into(),
        "videotestsrc".into(),
        "is-live=true".into(),
        format!("pattern={}", app.pattern),
        format!("horizontal-speed={}", app.horizontal_speed),
        "!".into(),
        format!(
            "video/x-raw,width={},height={},framerate={}/1",
            app.width, app.height, app.fps
        ),
        "!".into(),
        "timeoverlay".into(),
        "!".into(),
        "x264enc".into(),
        "tune=zerolatency".into(),
        "speed-preset=ultrafast".into(),
        format!("bitrate={}", app.bitrate_kbps),
        format!("key-int-max={}", app.key_int_frames),
        "!".into(),
        "h264parse".into(),
        "config-interval=-1".into(),
        "!".into(),
        "video/x-h264,stream-format=byte-stream,alignment=au".into(),
        "!".into(),
        "lowtidestamp".into(),
        format!("location={}", path_value(&files.stamps())),
        "!".into(),
    ];
    match v.transport {
        LiveTransport::Lowtide => a.extend([
            "lowtidesink".into(),
            format!("address={to}"),
            format!("controller={controller}"),
            format!("latency-ms={}", app.latency_ms),
            format!("rate-feedback={}", v.rate_feedback),
            format!("rate-log={}", path_value(&files.rate())),
            format!("unit-log={}", path_value(&files.units())),
        ]),
        // RTP over TCP (RFC 4571), as RTSP's interleaved mode: the marker bit ends each
        // access unit, so the receiver waits for no next unit. A client joining waits for the
        // next keyframe, so it never starts mid-GOP.
        LiveTransport::Tcpserversink => a.extend([
            "rtph264pay".into(),
            "config-interval=-1".into(),
            "pt=96".into(),
            "!".into(),
            "rtpstreampay".into(),
            "!".into(),
            "tcpserversink".into(),
            "host=0.0.0.0".into(),
            format!("port={}", to.port()),
            "sync=false".into(),
            "sync-method=next-keyframe".into(),
        ]),
        // `lowtide serve --source`: the server reads the stream from the encoder's stdout.
        LiveTransport::Serve | LiveTransport::ServePlain => {
            a.extend(["fdsink".into(), "fd=1".into()])
        }
    }
    a
}

/// The receiver: the transport's source, the meter around the decoder, no display clock
/// (`fakesink sync=false`: a frame counts as shown when it is decoded). `addr` is where the
/// lowtide source listens, or the tcpserversink's address to connect to.
pub(crate) fn receiver_args(
    app: &LiveApp,
    v: &LiveVariant,
    addr: SocketAddr,
    files: &Files,
) -> Vec<String> {
    let mut a: Vec<String> = vec!["-q".into()];
    match v.transport {
        // The receiver is a browser (serve.rs), not a pipeline.
        LiveTransport::Serve | LiveTransport::ServePlain => return vec![],
        LiveTransport::Lowtide => a.extend([
            "lowtidesrc".into(),
            format!("address={addr}"),
            format!("latency-ms={}", app.latency_ms),
        ]),
        LiveTransport::Tcpserversink => a.extend([
            "tcpclientsrc".into(),
            format!("host={}", addr.ip()),
            format!("port={}", addr.port()),
            "!".into(),
            "application/x-rtp-stream,media=video,clock-rate=90000,encoding-name=H264,payload=96"
                .into(),
            "!".into(),
            "rtpstreamdepay".into(),
            "!".into(),
            "rtph264depay".into(),
            "!".into(),
            "video/x-h264,stream-format=byte-stream,alignment=au".into(),
        ]),
    }
    a.extend([
        "!".into(),
        "lowtidemeter".into(),
        "!".into(),
        // One thread: frame threading would hold each frame for the others in flight.
        "avdec_h264".into(),
        "max-threads=1".into(),
        "!".into(),
        "lowtidemeter".into(),
        format!("location={}", path_value(&files.frames())),
        "!".into(),
        "fakesink".into(),
        "sync=false".into(),
    ]);
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> Files {
        Files {
            dir: PathBuf::from("run/x"),
        }
    }

    #[test]
    fn a_lowtide_variant_names_its_controller_budget_and_logs() {
        let v = LiveVariant {
            transport: LiveTransport::Lowtide,
            rate_feedback: true,
        };
        let a = sender_args(
            &LiveApp::default(),
            &v,
            "min-buf:1,3",
            "10.0.0.2:7000".parse().unwrap(),
            &files(),
        )
        .join(" ");
        assert!(
            a.contains(
                "x264enc tune=zerolatency speed-preset=ultrafast bitrate=4000 key-int-max=60"
            ),
            "{a}"
        );
        assert!(a.contains("lowtidestamp location=\"run/x/stamps.csv\" ! lowtidesink address=10.0.0.2:7000 controller=min-buf:1,3 latency-ms=200 rate-feedback=true"), "{a}");
        let r = receiver_args(
            &LiveApp::default(),
            &v,
            "0.0.0.0:7000".parse().unwrap(),
            &files(),
        )
        .join(" ");
        assert!(
            r.starts_with(
                "-q lowtidesrc address=0.0.0.0:7000 latency-ms=200 ! lowtidemeter ! avdec_h264"
            ),
            "{r}"
        );
        assert!(
            r.ends_with("lowtidemeter location=\"run/x/frames.csv\" ! fakesink sync=false"),
            "{r}"
        );
    }

    #[test]
    fn the_baseline_keeps_buffers_whole_and_joins_at_a_keyframe() {
        let v = LiveVariant {
            transport: LiveTransport::Tcpserversink,
            rate_feedback: false,
        };
        let a = sender_args(
            &LiveApp::default(),
            &v,
            "",
            "0.0.0.0:7001".parse().unwrap(),
            &files(),
        )
        .join(" ");
        assert!(a.ends_with("rtph264pay config-interval=-1 pt=96 ! rtpstreampay ! tcpserversink host=0.0.0.0 port=7001 sync=false sync-method=next-keyframe"), "{a}");
        let r = receiver_args(
            &LiveApp::default(),
            &v,
            "10.0.0.1:7001".parse().unwrap(),
            &files(),
        )
        .join(" ");
        assert!(
            r.starts_with("-q tcpclientsrc host=10.0.0.1 port=7001 ! application/x-rtp-stream"),
            "{r}"
        );
        assert!(r.contains("rtpstreamdepay ! rtph264depay ! video/x-h264,stream-format=byte-stream,alignment=au ! lowtidemeter"), "{r}");
    }

    #[test]
    fn dbat_is_refused_by_name() {
        let e = controller_property(&ControllerConfig::Dbat(Default::default())).unwrap_err();
        assert!(e.contains("DBAT"), "{e}");
        assert_eq!(
            controller_property(&ControllerConfig::MinBuf { a: 1, b: 3 }).unwrap(),
            "min-buf:1,3"
        );
    }
}
