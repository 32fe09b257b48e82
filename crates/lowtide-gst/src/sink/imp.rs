//! The sink's implementation: properties, the streaming thread's work (buffer → access
//! units → a command for the channel's task) and the task on the shared runtime, which owns
//! the channel: it sends units through [`lowtide_media::pipe::StreamSender`], applies the
//! channel's events (a drop cancels what depends on it), asks the encoder for a keyframe
//! when a reference was dropped here or the receiver asks for one, and runs rate feedback.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::prelude::*;
use gst_base::subclass::prelude::*;
use lowtide::{Channel, ChannelConfig, ControllerConfig, TlsConfig};
use lowtide_media::encoded::sender::SenderConfig;
use lowtide_media::encoded::wire::{self, StreamStart, WireMessage};
use lowtide_media::encoded::{
    write_ivf_frame, AccessUnit, AnnexBReader, Codec, DropReason, H264Framer, H265Framer,
    IvfFramer, IvfHeader, RequestReason, DEFAULT_MAX_NAL,
};
use lowtide_media::pipe::StreamSender;

use super::logs::SinkLogs;
use crate::caps;
use crate::encoder::Encoder;
use crate::rate::{RateConfig, RateFeedback, RateReport, RateSample};

static CAT: LazyLock<gst::DebugCategory> = LazyLock::new(|| {
    gst::DebugCategory::new(
        "lowtidesink",
        gst::DebugColorFlags::empty(),
        Some("lowtide sink"),
    )
});

/// How long `start` waits for the connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the end of stream waits for the receiver's acknowledgements.
const ACK_WAIT: Duration = Duration::from_secs(5);
/// Commands queued for the channel's task (each a buffer's units): the streaming thread
/// blocks beyond it.
const COMMANDS: usize = 64;
/// While the stream stays broken, the encoder is asked again this often.
const KEYFRAME_REPEAT: Duration = Duration::from_secs(1);
/// IVF timebase of the stream header: nanoseconds, so a buffer's PTS travels unchanged.
const NS_PER_S: u32 = 1_000_000_000;

#[derive(Debug, Clone)]
struct Settings {
    address: String,
    controller: String,
    latency_ms: u32,
    max_queued_mib: u32,
    congestion: Option<String>,
    tls_ca: Option<String>,
    tls_server_name: Option<String>,
    backups: u32,
    rate_feedback: bool,
    rate_interval_ms: u32,
    rate_log: Option<String>,
    unit_log: Option<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            address: "127.0.0.1:7000".into(),
            controller: "min-buf:1,3".into(),
            latency_ms: 200,
            max_queued_mib: 64,
            congestion: None,
            tls_ca: None,
            tls_server_name: None,
            backups: 0,
            rate_feedback: false,
            rate_interval_ms: 500,
            rate_log: None,
            unit_log: None,
        }
    }
}

/// Counters for the `stats` property.
#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    buffers: u64,
    units: u64,
    sent: u64,
    written: u64,
    expired: u64,
    cancelled: u64,
    dependency_broken: u64,
    queue_full: u64,
    late_on_arrival: u64,
    keyframe_requests_sender: u64,
    keyframe_requests_receiver: u64,
    bitrate_changes: u64,
    all_acked: bool,
}

enum Framer {
    H264(AnnexBReader<H264Framer>),
    H265(AnnexBReader<H265Framer>),
    Ivf(IvfFramer),
}

impl Framer {
    /// The framer of `codec`, and the stream's start message.
    fn new(codec: Codec, size: Option<(u16, u16)>) -> Result<(Self, StreamStart), String> {
        Ok(match codec {
            Codec::H264 => (
                Framer::H264(AnnexBReader::new(
                    H264Framer::new(DEFAULT_MAX_NAL),
                    DEFAULT_MAX_NAL,
                )),
                StreamStart { codec, ivf: None },
            ),
            Codec::H265 => (
                Framer::H265(AnnexBReader::new(
                    H265Framer::new(DEFAULT_MAX_NAL),
                    DEFAULT_MAX_NAL,
                )),
                StreamStart { codec, ivf: None },
            ),
            _ => {
                // The model reads VP8/VP9/AV1 from IVF; a buffer is one IVF frame, its PTS the
                // frame's timestamp in a nanosecond timebase.
                let (width, height) = size.unwrap_or((0, 0));
                let header = IvfHeader {
                    codec,
                    width,
                    height,
                    timebase_rate: NS_PER_S,
                    timebase_scale: 1,
                    frame_count: 0,
                };
                let mut f = IvfFramer::new(DEFAULT_MAX_NAL);
                f.push(&header.to_bytes(), Instant::now())
                    .map_err(|e| format!("the IVF header: {e}"))?;
                (
                    Framer::Ivf(f),
                    StreamStart {
                        codec,
                        ivf: Some(header),
                    },
                )
            }
        })
    }

    /// One buffer (one access unit) captured at `capture`, PTS `pts_ns`.
    fn push(
        &mut self,
        data: &[u8],
        pts_ns: Option<u64>,
        capture: Instant,
    ) -> Result<Vec<AccessUnit>, String> {
        let mut units = match self {
            Framer::H264(r) => {
                let mut u = r.push(data, capture).map_err(|e| e.to_string())?;
                u.extend(r.end_access_unit().map_err(|e| e.to_string())?);
                u
            }
            Framer::H265(r) => {
                let mut u = r.push(data, capture).map_err(|e| e.to_string())?;
                u.extend(r.end_access_unit().map_err(|e| e.to_string())?);
                u
            }
            Framer::Ivf(f) => {
                let mut frame = Vec::with_capacity(data.len() + 12);
                write_ivf_frame(&mut frame, pts_ns.unwrap_or(0), data);
                f.push(&frame, capture).map_err(|e| e.to_string())?
            }
        };
        for u in &mut units {
            u.pts = pts_ns.or(u.pts);
        }
        Ok(units)
    }
}

enum Cmd {
    Start(StreamStart),
    Units(Vec<AccessUnit>, Instant),
    /// End of stream: finish and answer whether everything was acknowledged.
    Eos(std::sync::mpsc::SyncSender<Result<bool, String>>),
}

struct Running {
    tx: tokio::sync::mpsc::Sender<Cmd>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct State {
    running: Option<Running>,
    framer: Option<Framer>,
    codec: Option<Codec>,
    /// Caps refused by accept-caps, reported once each.
    refused: Vec<gst::Caps>,
}

#[derive(Default)]
pub struct LowtideSink {
    settings: Mutex<Settings>,
    state: Mutex<State>,
    counters: Arc<Mutex<Counters>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[glib::object_subclass]
impl ObjectSubclass for LowtideSink {
    const NAME: &'static str = "GstLowtideSink";
    type Type = super::LowtideSink;
    type ParentType = gst_base::BaseSink;
}

impl ObjectImpl for LowtideSink {
    fn constructed(&self) {
        self.parent_constructed();
        // Send each unit the moment it arrives: waiting for the clock (BaseSink's default)
        // spends the pipeline's latency (about 100 ms behind x264enc) of the budget before
        // lowtide sees the unit. A non-live source (a file) wants `sync=true` to go at the
        // stream's pace.
        self.obj().set_sync(false);
    }

    fn properties() -> &'static [glib::ParamSpec] {
        static PROPERTIES: LazyLock<Vec<glib::ParamSpec>> = LazyLock::new(|| {
            let d = Settings::default();
            vec![
                glib::ParamSpecString::builder("address")
                    .nick("Address")
                    .blurb("host:port of the lowtidesrc (or lowtide recv) to connect to")
                    .default_value(Some(d.address.as_str()))
                    .mutable_ready()
                    .build(),
                glib::ParamSpecString::builder("controller")
                    .nick("Latency controller")
                    .blurb("tcp|unlimited, min-buf[:A,B] (minbuf), notsent-lowat[:BYTES], pace-a[:B]")
                    .default_value(Some(d.controller.as_str()))
                    .mutable_ready()
                    .build(),
                glib::ParamSpecUInt::builder("latency-ms")
                    .nick("Latency budget")
                    .blurb("A unit's deadline is its capture time (from the buffer's running time) plus this; a unit not written by then is dropped with what depends on it")
                    .minimum(1)
                    .maximum(60_000)
                    .default_value(d.latency_ms)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecUInt::builder("max-queued-mib")
                    .nick("Queue limit")
                    .blurb("A unit that would take lowtide's queue over this many MiB is dropped (parameter sets never)")
                    .minimum(1)
                    .maximum(4096)
                    .default_value(d.max_queued_mib)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecString::builder("congestion")
                    .nick("TCP congestion control")
                    .blurb("TCP_CONGESTION for the socket, e.g. cubic, bbr (none: the system's default)")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecString::builder("tls-ca")
                    .nick("TLS CA file")
                    .blurb("PEM file of the CA certificate(s) the receiver's certificate must chain to; set: TLS 1.3")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecString::builder("tls-server-name")
                    .nick("TLS server name")
                    .blurb("Name the receiver's certificate must carry (none: the IP address connected to)")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecUInt::builder("backups")
                    .nick("Backup connections")
                    .blurb("Pre-established backup connections for failover (0: off; the source needs backups > 0 too; not with TLS)")
                    .maximum(8)
                    .default_value(d.backups)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecBoolean::builder("rate-feedback")
                    .nick("Rate feedback")
                    .blurb("Set the upstream encoder's bit rate from the rate estimate (x264enc, x265enc, openh264enc, vp8enc, vp9enc, av1enc)")
                    .default_value(d.rate_feedback)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecUInt::builder("rate-interval-ms")
                    .nick("Rate interval")
                    .blurb("How often the rate estimate is taken and posted (lowtide-rate element message)")
                    .minimum(50)
                    .maximum(10_000)
                    .default_value(d.rate_interval_ms)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecString::builder("rate-log")
                    .nick("Rate log")
                    .blurb("CSV file: one line per rate-interval-ms with the wall clock (us) and the lowtide-rate message's fields, flushed per line (none: no file)")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecString::builder("unit-log")
                    .nick("Unit log")
                    .blurb("CSV file: one line per access unit once its fate is known (index, pts_ns, capture_us, fate, decided_us), flushed per line (none: no file)")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecBoxed::builder::<gst::Structure>("stats")
                    .nick("Statistics")
                    .blurb("Units by fate, drops by reason, keyframe requests, bit-rate changes")
                    .read_only()
                    .build(),
            ]
        });
        PROPERTIES.as_ref()
    }

    fn set_property(&self, _id: usize, value: &glib::Value, pspec: &glib::ParamSpec) {
        let mut s = lock(&self.settings);
        let string = || {
            value
                .get::<Option<String>>()
                .expect("type checked upstream")
        };
        match pspec.name() {
            "address" => s.address = string().unwrap_or_default(),
            "controller" => s.controller = string().unwrap_or_default(),
            "latency-ms" => s.latency_ms = value.get().expect("type checked upstream"),
            "max-queued-mib" => s.max_queued_mib = value.get().expect("type checked upstream"),
            "congestion" => s.congestion = string(),
            "tls-ca" => s.tls_ca = string(),
            "tls-server-name" => s.tls_server_name = string(),
            "backups" => s.backups = value.get().expect("type checked upstream"),
            "rate-feedback" => s.rate_feedback = value.get().expect("type checked upstream"),
            "rate-interval-ms" => s.rate_interval_ms = value.get().expect("type checked upstream"),
            "rate-log" => s.rate_log = string(),
            "unit-log" => s.unit_log = string(),
            _ => unimplemented!(),
        }
    }

    fn property(&self, _id: usize, pspec: &glib::ParamSpec) -> glib::Value {
        let s = lock(&self.settings);
        match pspec.name() {
            "address" => s.address.to_value(),
            "controller" => s.controller.to_value(),
            "latency-ms" => s.latency_ms.to_value(),
            "max-queued-mib" => s.max_queued_mib.to_value(),
            "congestion" => s.congestion.to_value(),
            "tls-ca" => s.tls_ca.to_value(),
            "tls-server-name" => s.tls_server_name.to_value(),
            "backups" => s.backups.to_value(),
            "rate-feedback" => s.rate_feedback.to_value(),
            "rate-interval-ms" => s.rate_interval_ms.to_value(),
            "rate-log" => s.rate_log.to_value(),
            "unit-log" => s.unit_log.to_value(),
            "stats" => stats(&lock(&self.counters)).to_value(),
            _ => unimplemented!(),
        }
    }
}

fn stats(c: &Counters) -> gst::Structure {
    gst::Structure::builder("lowtide-sink-stats")
        .field("buffers", c.buffers)
        .field("units", c.units)
        .field("units-sent", c.sent)
        .field("units-written", c.written)
        .field("dropped-expired", c.expired)
        .field("dropped-cancelled", c.cancelled)
        .field("dropped-dependency-broken", c.dependency_broken)
        .field("dropped-queue-full", c.queue_full)
        .field("dropped-late-on-arrival", c.late_on_arrival)
        .field("keyframe-requests-sender", c.keyframe_requests_sender)
        .field("keyframe-requests-receiver", c.keyframe_requests_receiver)
        .field("bitrate-changes", c.bitrate_changes)
        .field("all-acknowledged", c.all_acked)
        .build()
}

impl GstObjectImpl for LowtideSink {}

impl ElementImpl for LowtideSink {
    fn metadata() -> Option<&'static gst::subclass::ElementMetadata> {
        static META: LazyLock<gst::subclass::ElementMetadata> = LazyLock::new(|| {
            gst::subclass::ElementMetadata::new(
                "lowtide sink",
                "Sink/Network",
                "Sends encoded video over a lowtide channel: frames dropped at the sender by deadline and importance without breaking the decoder",
                "lowtide",
            )
        });
        Some(&*META)
    }

    fn pad_templates() -> &'static [gst::PadTemplate] {
        static TEMPLATES: LazyLock<Vec<gst::PadTemplate>> = LazyLock::new(|| {
            vec![gst::PadTemplate::new(
                "sink",
                gst::PadDirection::Sink,
                gst::PadPresence::Always,
                &caps::sink_caps(),
            )
            .expect("a valid pad template")]
        });
        TEMPLATES.as_ref()
    }
}

/// Resolves `host:port`.
fn resolve(address: &str) -> Result<SocketAddr, String> {
    address
        .to_socket_addrs()
        .map_err(|e| format!("address {address:?} is not host:port ({e})"))?
        .next()
        .ok_or_else(|| format!("address {address:?} resolves to nothing"))
}

fn channel_config(s: &Settings) -> Result<ChannelConfig, String> {
    let controller: ControllerConfig = s
        .controller
        .parse()
        .map_err(|e| format!("property controller: {e}"))?;
    let mut cfg = ChannelConfig::with_controller(controller);
    cfg.congestion = s.congestion.clone();
    if let Some(ca) = &s.tls_ca {
        cfg.tls = Some(TlsConfig::client(ca, s.tls_server_name.clone()));
    } else if s.tls_server_name.is_some() {
        return Err("property tls-server-name needs tls-ca (the CA file to check the receiver's certificate against)".into());
    }
    if s.backups > 0 {
        cfg.transport.failover = Some(lowtide::proto::FailoverConfig {
            backups: s.backups,
            ..Default::default()
        });
    }
    cfg.validate().map_err(|e| format!("configuration: {e}"))?;
    Ok(cfg)
}

impl BaseSinkImpl for LowtideSink {
    fn start(&self) -> Result<(), gst::ErrorMessage> {
        let settings = lock(&self.settings).clone();
        let cfg = channel_config(&settings)
            .map_err(|e| gst::error_msg!(gst::ResourceError::Settings, ("{}", e)))?;
        let addr = resolve(&settings.address)
            .map_err(|e| gst::error_msg!(gst::ResourceError::NotFound, ("{}", e)))?;
        gst::info!(CAT, imp = self, "connecting to {addr}");
        let rt = crate::runtime();
        let ch = rt
            .block_on(async {
                tokio::time::timeout(CONNECT_TIMEOUT, lowtide::connect(addr, cfg)).await
            })
            .map_err(|_| {
                gst::error_msg!(
                    gst::ResourceError::OpenWrite,
                    (
                        "connecting to {} ({}): no answer within {:?}",
                        settings.address,
                        addr,
                        CONNECT_TIMEOUT
                    )
                )
            })?
            .map_err(|e| {
                gst::error_msg!(
                    gst::ResourceError::OpenWrite,
                    ("connecting to {} ({}): {}", settings.address, addr, e)
                )
            })?;
        let sender_cfg = SenderConfig {
            latency: Duration::from_millis(u64::from(settings.latency_ms)),
            max_queued_bytes: u64::from(settings.max_queued_mib) << 20,
            ..SenderConfig::default()
        };
        let mut sender = {
            let _guard = rt.enter();
            StreamSender::open(&ch, sender_cfg)
        }
        .map_err(|e| {
            gst::error_msg!(
                gst::ResourceError::OpenWrite,
                (
                    "{}",
                    channel_failure(&settings.address, "opening a stream", &e)
                )
            )
        })?;
        let logs = SinkLogs::open(
            settings.rate_log.as_deref(),
            settings.unit_log.as_deref(),
            &mut sender,
            self.obj().downgrade(),
        )?;
        *lock(&self.counters) = Counters::default();
        let (tx, rx) = tokio::sync::mpsc::channel(COMMANDS);
        let task = Task {
            ch,
            sender,
            element: self.obj().downgrade(),
            counters: self.counters.clone(),
            address: settings.address.clone(),
            rate_feedback: settings.rate_feedback,
            rate_interval: Duration::from_millis(u64::from(settings.rate_interval_ms)),
            budget: sender_cfg.latency,
            last_keyframe_request: None,
            logs,
        };
        let task = rt.spawn(task.run(rx));
        let mut state = lock(&self.state);
        *state = State {
            running: Some(Running { tx, task }),
            ..State::default()
        };
        Ok(())
    }

    fn stop(&self) -> Result<(), gst::ErrorMessage> {
        let running = lock(&self.state).running.take();
        if let Some(r) = running {
            // The task closes the channel when its commands end.
            drop(r.tx);
            let _ = crate::runtime()
                .block_on(async { tokio::time::timeout(Duration::from_secs(2), r.task).await });
        }
        *lock(&self.state) = State::default();
        Ok(())
    }

    fn query(&self, query: &mut gst::QueryRef) -> bool {
        if let gst::QueryViewMut::AcceptCaps(q) = query.view_mut() {
            let offered = q.caps_owned();
            if offered.is_fixed() && caps::codec_of(&offered).is_none() {
                // Fixed caps from upstream that the template does not take: negotiation
                // would fail with a bare not-negotiated; say what was offered, once.
                let mut state = lock(&self.state);
                if !state.refused.contains(&offered) {
                    state.refused.push(offered.clone());
                    drop(state);
                    gst::element_imp_error!(
                        self,
                        gst::StreamError::Format,
                        ("lowtidesink does not take caps {}", offered),
                        ["it takes {}", caps::sink_caps()]
                    );
                }
            }
        }
        BaseSinkImplExt::parent_query(self, query)
    }

    fn set_caps(&self, caps: &gst::Caps) -> Result<(), gst::LoggableError> {
        let Some(codec) = caps::codec_of(caps) else {
            gst::element_imp_error!(
                self,
                gst::StreamError::Format,
                ("lowtidesink does not take caps {}", caps)
            );
            return Err(gst::loggable_error!(CAT, "caps {} refused", caps));
        };
        let mut state = lock(&self.state);
        match state.codec {
            Some(c) if c == codec => return Ok(()),
            Some(c) => {
                drop(state);
                gst::element_imp_error!(
                    self,
                    gst::StreamError::Format,
                    ("the stream's codec changed from {:?} to {:?} (caps {}): one stream per lowtidesink run", c, codec, caps)
                );
                return Err(gst::loggable_error!(CAT, "codec changed"));
            }
            None => {}
        }
        let (framer, start) = Framer::new(codec, caps::size_of(caps))
            .map_err(|e| gst::loggable_error!(CAT, "{}", e))?;
        state.codec = Some(codec);
        state.framer = Some(framer);
        let tx = state.running.as_ref().map(|r| r.tx.clone());
        drop(state);
        let Some(tx) = tx else {
            return Err(gst::loggable_error!(CAT, "caps before start"));
        };
        if tx.blocking_send(Cmd::Start(start)).is_err() {
            return Err(gst::loggable_error!(CAT, "the channel's task ended"));
        }
        Ok(())
    }

    fn render(&self, buffer: &gst::Buffer) -> Result<gst::FlowSuccess, gst::FlowError> {
        let now = Instant::now();
        let capture = self.capture_time(buffer, now);
        gst::trace!(
            CAT,
            imp = self,
            "buffer PTS {}: captured {:?} ago",
            buffer.pts().display(),
            now.saturating_duration_since(capture)
        );
        let pts_ns = buffer.pts().or(buffer.dts()).map(|t| t.nseconds());
        let map = buffer.map_readable().map_err(|_| {
            gst::element_imp_error!(self, gst::StreamError::Failed, ("buffer not readable"));
            gst::FlowError::Error
        })?;
        let mut state = lock(&self.state);
        let Some(framer) = state.framer.as_mut() else {
            drop(state);
            gst::element_imp_error!(
                self,
                gst::CoreError::Negotiation,
                ("a buffer before caps: lowtidesink needs caps to know the codec")
            );
            return Err(gst::FlowError::NotNegotiated);
        };
        let units = match framer.push(&map, pts_ns, capture) {
            Ok(u) => u,
            Err(e) => {
                drop(state);
                gst::element_imp_error!(
                    self,
                    gst::StreamError::Decode,
                    (
                        "the buffer at PTS {} is not a valid access unit: {}",
                        buffer.pts().display(),
                        e
                    )
                );
                return Err(gst::FlowError::Error);
            }
        };
        let tx = state.running.as_ref().map(|r| r.tx.clone());
        drop(state);
        {
            let mut c = lock(&self.counters);
            c.buffers += 1;
            c.units += units.len() as u64;
        }
        let Some(tx) = tx else {
            return Err(gst::FlowError::Flushing);
        };
        if units.is_empty() {
            return Ok(gst::FlowSuccess::Ok);
        }
        if tx.blocking_send(Cmd::Units(units, now)).is_err() {
            // The task ended: it posted the error (a failed channel).
            return Err(gst::FlowError::Error);
        }
        Ok(gst::FlowSuccess::Ok)
    }

    fn event(&self, event: gst::Event) -> bool {
        if let gst::EventView::Eos(_) = event.view() {
            let tx = lock(&self.state).running.as_ref().map(|r| r.tx.clone());
            if let Some(tx) = tx {
                let (reply, answer) = std::sync::mpsc::sync_channel(1);
                if tx.blocking_send(Cmd::Eos(reply)).is_ok() {
                    match answer.recv_timeout(ACK_WAIT + Duration::from_secs(10)) {
                        Ok(Ok(all)) => {
                            lock(&self.counters).all_acked = all;
                            gst::info!(
                                CAT,
                                imp = self,
                                "end of stream: {}",
                                stats(&lock(&self.counters))
                            );
                            if !all {
                                gst::warning!(CAT, imp = self, "end of stream: not every unit was acknowledged within {ACK_WAIT:?}");
                            }
                        }
                        Ok(Err(e)) => {
                            gst::element_imp_error!(
                                self,
                                gst::ResourceError::Write,
                                ("finishing the stream: {}", e)
                            );
                            return false;
                        }
                        Err(_) => {
                            gst::warning!(
                                CAT,
                                imp = self,
                                "end of stream: the channel's task did not answer"
                            );
                        }
                    }
                }
            }
        }
        self.parent_event(event)
    }
}

impl LowtideSink {
    /// The buffer's capture instant: its running time placed on the pipeline clock, so a
    /// buffer that waited upstream (in the encoder) has that wait counted against its
    /// budget. `now` without a clock or PTS.
    fn capture_time(&self, buffer: &gst::Buffer, now: Instant) -> Instant {
        let obj = self.obj();
        let placed = (|| {
            let pts = buffer.pts()?;
            let segment = obj.segment();
            let segment = segment.downcast_ref::<gst::ClockTime>()?;
            let rt = segment.to_running_time(pts)?;
            let clock_rt = obj.clock()?.time().checked_sub(obj.base_time()?)?;
            Some(if rt <= clock_rt {
                now.checked_sub(Duration::from_nanos((clock_rt - rt).nseconds()))?
            } else {
                now + Duration::from_nanos((rt - clock_rt).nseconds())
            })
        })();
        placed.unwrap_or(now)
    }
}

/// What went wrong with the channel to `address`, saying so when the peer is not lowtide.
fn channel_failure(address: &str, what: &str, e: &lowtide::Error) -> String {
    match e {
        lowtide::Error::Protocol(p) => {
            format!("{what}: the peer at {address} does not speak lowtide ({p})")
        }
        e => format!("{what}: the channel to {address} failed: {e}"),
    }
}

/// The channel's task (see the module doc).
struct Task {
    ch: Channel,
    sender: StreamSender,
    element: glib::WeakRef<super::LowtideSink>,
    counters: Arc<Mutex<Counters>>,
    address: String,
    rate_feedback: bool,
    rate_interval: Duration,
    budget: Duration,
    last_keyframe_request: Option<Instant>,
    logs: SinkLogs,
}

impl Task {
    async fn run(mut self, mut rx: tokio::sync::mpsc::Receiver<Cmd>) {
        let result = self.serve(&mut rx).await;
        let (code, reason) = match &result {
            Ok(()) => (0, "stream over"),
            Err(_) => (1, "sender failed"),
        };
        self.ch.close(code, reason).await;
        if let Err(e) = result {
            if let Some(el) = self.element.upgrade() {
                gst::element_error!(el, gst::ResourceError::Write, ("{}", e));
            }
        }
    }

    fn failed(&self, what: &str) -> String {
        match self.ch.error() {
            Some(e) => channel_failure(&self.address, what, &e),
            None => format!(
                "{what}: the receiver at {} closed the channel",
                self.address
            ),
        }
    }

    async fn serve(&mut self, rx: &mut tokio::sync::mpsc::Receiver<Cmd>) -> Result<(), String> {
        let mut tick = tokio::time::interval(self.rate_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut rate = RateFeedback::new(RateConfig {
            budget: self.budget,
            ..RateConfig::default()
        });
        let mut encoder: Option<Option<Encoder>> = None;
        let ch = self.ch.clone();
        loop {
            tokio::select! {
                biased;
                e = ch.next_event() => match e {
                    Some(e) => {
                        self.sender.handle_event(e).map_err(|e| self.failed(&format!("sending ({e})")))?;
                        self.after_change();
                    }
                    None => return Err(self.failed("sending")),
                },
                m = ch.recv() => match m {
                    Some(m) => self.handle_receiver_message(&m.data)?,
                    None => return Err(self.failed("sending")),
                },
                cmd = rx.recv() => match cmd {
                    Some(Cmd::Start(start)) => {
                        self.sender.start(&start).map_err(|e| self.failed(&format!("starting the stream ({e})")))?;
                    }
                    Some(Cmd::Units(units, now)) => {
                        if !self.sender.is_started() {
                            return Err("units before the stream's caps".into());
                        }
                        self.logs.queued(&units);
                        let skipped = self.sender.send_units(units, now).map_err(|e| self.failed(&format!("sending ({e})")))?;
                        // Past its deadline before lowtide saw it: upstream (the encoder) is
                        // late, not the path.
                        let late = skipped.iter().filter(|&&r| r == DropReason::Expired).count();
                        lock(&self.counters).late_on_arrival += late as u64;
                        self.after_change();
                    }
                    Some(Cmd::Eos(reply)) => {
                        let r = self.sender.finish(ACK_WAIT).await.map_err(|e| self.failed(&format!("finishing ({e})")));
                        self.after_change();
                        let _ = reply.send(r);
                        return Ok(());
                    }
                    None => return Ok(()),
                },
                _ = tick.tick() => {
                    if self.rate_feedback && encoder.is_none() {
                        encoder = Some(self.find_encoder(&mut rate));
                    }
                    self.rate_tick(&mut rate, encoder.as_ref().and_then(|e| e.as_ref()));
                }
            }
        }
    }

    fn find_encoder(&self, rate: &mut RateFeedback) -> Option<Encoder> {
        let el = self.element.upgrade()?;
        let pad = el.static_pad("sink")?;
        let Some(enc) = Encoder::find(&pad) else {
            gst::element_warning!(
                el,
                gst::CoreError::Failed,
                ("rate-feedback: no encoder upstream whose bit rate lowtidesink can set (it knows {})",
                 crate::rate::ENCODERS.iter().map(|e| e.0).collect::<Vec<_>>().join(", "))
            );
            return None;
        };
        if let Some(bps) = enc.bitrate_bps() {
            rate.set_encoder_rate(bps);
        }
        gst::info!(CAT, obj = el, "rate feedback drives {}", enc.describe());
        Some(enc)
    }

    fn rate_tick(&mut self, rate: &mut RateFeedback, encoder: Option<&Encoder>) {
        let stats = self.ch.stats();
        let tcp =
            lowtide::sys::tcp_state(self.ch.raw_fd(), stats.bytes_written).unwrap_or_default();
        let drops = *self.sender.state().drops();
        let sample = RateSample {
            now: Instant::now(),
            bytes_written: stats.bytes_written,
            queued_bytes: self.ch.queued_bytes(),
            deadline_drops: (drops.expired + drops.queue_full)
                .saturating_sub(lock(&self.counters).late_on_arrival),
            tcp,
        };
        let Some(report) = rate.on_sample(sample) else {
            return;
        };
        let mut encoder_bps = encoder.and_then(|e| e.bitrate_bps());
        if let (Some(enc), Some(target)) = (encoder, report.target_bps) {
            encoder_bps = enc.set_bitrate_bps(target);
            lock(&self.counters).bitrate_changes += 1;
        }
        self.logs.rate(&report, encoder_bps);
        if let Some(el) = self.element.upgrade() {
            let s = rate_structure(&report, encoder_bps);
            let _ = el.post_message(gst::message::Element::builder(s).src(&el).build());
        }
    }

    /// Handles a message from the receiver: a keyframe request, or an error.
    fn handle_receiver_message(&mut self, data: &[u8]) -> Result<(), String> {
        match wire::decode(data) {
            Ok(WireMessage::KeyframeRequest(r)) => {
                lock(&self.counters).keyframe_requests_receiver += 1;
                let why = match r.reason {
                    RequestReason::ReferenceLost { index } => {
                        format!("the receiver lost reference unit {index}")
                    }
                    _ => "the receiver has not seen a keyframe".into(),
                };
                self.request_keyframe(&why, true);
                Ok(())
            }
            Ok(_) => Err(format!(
                "the peer at {} sent an encoded-video message a receiver does not send",
                self.address
            )),
            Err(e) => Err(format!(
                "the peer at {} is not a lowtide encoded-video receiver: {e}",
                self.address
            )),
        }
    }

    /// After units were sent or dropped: counters, and a keyframe request while a
    /// reference is missing.
    fn after_change(&mut self) {
        self.logs.fates(&mut self.sender);
        let st = self.sender.state();
        {
            let d = st.drops();
            let c = st.counters();
            let mut k = lock(&self.counters);
            k.sent = c.sent;
            k.written = c.written;
            k.expired = d.expired;
            k.cancelled = d.cancelled;
            k.dependency_broken = d.dependency_broken;
            k.queue_full = d.queue_full;
        }
        // Before the first unit the tracker waits for a keyframe too: not a drop.
        if st.is_broken() && st.counters().units > 0 {
            self.request_keyframe("a reference unit was dropped at the sender", false);
        }
    }

    /// Sends an upstream force-key-unit event: at once when the receiver asks (its gate
    /// already spaces its requests), else at most once per [`KEYFRAME_REPEAT`].
    fn request_keyframe(&mut self, why: &str, from_receiver: bool) {
        let now = Instant::now();
        let recent = self
            .last_keyframe_request
            .is_some_and(|t| now.duration_since(t) < KEYFRAME_REPEAT);
        if recent && !from_receiver {
            return;
        }
        self.last_keyframe_request = Some(now);
        if !from_receiver {
            lock(&self.counters).keyframe_requests_sender += 1;
        }
        let Some(el) = self.element.upgrade() else {
            return;
        };
        gst::debug!(CAT, obj = el, "asking upstream for a keyframe: {why}");
        let event = gst_video::UpstreamForceKeyUnitEvent::builder()
            .all_headers(true)
            .build();
        if let Some(pad) = el.static_pad("sink") {
            if !pad.push_event(event) {
                gst::debug!(CAT, obj = el, "no element upstream handled force-key-unit");
            }
        }
    }
}

fn rate_structure(r: &RateReport, encoder_bps: Option<u64>) -> gst::Structure {
    let mut b = gst::Structure::builder("lowtide-rate")
        .field("estimate-bps", r.estimate_bps)
        .field("written-bps", r.written_bps)
        .field("delivery-rate-bps", r.delivery_rate_bps)
        .field("queued-bytes", r.queued_bytes)
        .field(
            "queue-delay-ms",
            r.queue_delay.min(Duration::from_secs(3600)).as_secs_f64() * 1e3,
        )
        .field("rtt-ms", r.rtt.as_secs_f64() * 1e3)
        .field("congested", r.congested);
    if let Some(bps) = encoder_bps {
        b = b.field("encoder-bitrate-bps", bps);
    }
    if let Some(t) = r.target_bps {
        b = b.field("target-bitrate-bps", t);
    }
    b.build()
}
