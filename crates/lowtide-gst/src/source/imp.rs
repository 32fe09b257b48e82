//! The source's implementation: a task on the shared runtime accepts one sender, checks its
//! first message, and runs [`lowtide_media::pipe::receive_units`] (reorder buffer and
//! receiver gate), sending the gate's keyframe requests back to the sender; the units reach
//! the streaming thread through a bounded queue, so a pipeline that stops pulling stops the
//! reads and TCP's flow control pushes back to the sender.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::Duration;

use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::prelude::*;
use gst_base::subclass::base_src::CreateSuccess;
use gst_base::subclass::prelude::*;
use lowtide::{ChannelConfig, Message, StreamConfig, TlsConfig};
use lowtide_media::encoded::receiver::OutputUnit;
use lowtide_media::encoded::wire::{self, StreamStart, WireMessage};
use lowtide_media::encoded::{Codec, FrameKind, KeyframeRequest, MAX_IMPORTANCE};
use lowtide_media::pipe::{self, ReceiveOptions};

use crate::caps;

static CAT: LazyLock<gst::DebugCategory> = LazyLock::new(|| {
    gst::DebugCategory::new(
        "lowtidesrc",
        gst::DebugColorFlags::empty(),
        Some("lowtide source"),
    )
});

#[derive(Debug, Clone)]
struct Settings {
    address: String,
    tls_cert: Option<String>,
    tls_key: Option<String>,
    backups: u32,
    latency_ms: u32,
    request_interval_ms: u32,
    first_message_ms: u32,
    max_buffers: u32,
    max_held_mib: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            address: "0.0.0.0:7000".into(),
            tls_cert: None,
            tls_key: None,
            backups: 0,
            latency_ms: 100,
            request_interval_ms: 1000,
            first_message_ms: 10_000,
            max_buffers: 32,
            max_held_mib: 64,
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    buffers: u64,
    keyframe_requests: u64,
    received: u64,
    announced_dropped: u64,
    gate_dropped: u64,
    ended: bool,
}

/// What the task tells the streaming thread besides the units: the stream's start (before
/// its first unit) and how it ended (before the unit queue closes).
#[derive(Debug, Default)]
struct Shared {
    start: Option<StreamStart>,
    outcome: Option<Result<(), String>>,
}

type Queue = Arc<tokio::sync::Mutex<tokio::sync::mpsc::Receiver<OutputUnit>>>;

struct Running {
    rx: Queue,
    task: tokio::task::JoinHandle<()>,
}

/// The stream as the streaming thread knows it.
#[derive(Default)]
struct Stream {
    start: Option<StreamStart>,
    caps: Option<gst::Caps>,
    /// Parameter sets waiting for the picture they go with (one buffer, one access unit).
    pending: Vec<u8>,
    /// (running time of the first unit, its PTS in ns)
    base: Option<(gst::ClockTime, u64)>,
}

#[derive(Default)]
pub struct LowtideSrc {
    settings: Mutex<Settings>,
    running: Mutex<Option<Running>>,
    stream: Mutex<Stream>,
    shared: Arc<Mutex<Shared>>,
    counters: Arc<Mutex<Counters>>,
    flushing: AtomicBool,
    wake: Arc<tokio::sync::Notify>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[glib::object_subclass]
impl ObjectSubclass for LowtideSrc {
    const NAME: &'static str = "GstLowtideSrc";
    type Type = super::LowtideSrc;
    type ParentType = gst_base::PushSrc;
}

impl ObjectImpl for LowtideSrc {
    fn constructed(&self) {
        self.parent_constructed();
        let obj = self.obj();
        obj.set_live(true);
        obj.set_format(gst::Format::Time);
    }

    fn properties() -> &'static [glib::ParamSpec] {
        static PROPERTIES: LazyLock<Vec<glib::ParamSpec>> = LazyLock::new(|| {
            let d = Settings::default();
            vec![
                glib::ParamSpecString::builder("address")
                    .nick("Address")
                    .blurb("host:port to listen on for one lowtidesink (or lowtide send --input -)")
                    .default_value(Some(d.address.as_str()))
                    .mutable_ready()
                    .build(),
                glib::ParamSpecString::builder("tls-cert")
                    .nick("TLS certificate")
                    .blurb("PEM certificate chain (leaf first) to present; with tls-key: TLS 1.3")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecString::builder("tls-key")
                    .nick("TLS key")
                    .blurb("PEM private key of tls-cert")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecUInt::builder("backups")
                    .nick("Backup connections")
                    .blurb("Backup connections accepted for failover (0: off; the sink's backups > 0 needs this; not with TLS)")
                    .maximum(8)
                    .default_value(d.backups)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecUInt::builder("latency-ms")
                    .nick("Latency")
                    .blurb("Latency reported downstream: how much later than the first unit a unit may arrive and still be on time")
                    .maximum(60_000)
                    .default_value(d.latency_ms)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecUInt::builder("request-interval-ms")
                    .nick("Keyframe request interval")
                    .blurb("While the stream is broken, a keyframe request goes to the sender at most this often")
                    .minimum(10)
                    .maximum(60_000)
                    .default_value(d.request_interval_ms)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecUInt::builder("first-message-ms")
                    .nick("First message timeout")
                    .blurb("A peer that sends no encoded-video start message within this is dropped, and the next one awaited")
                    .minimum(100)
                    .maximum(600_000)
                    .default_value(d.first_message_ms)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecUInt::builder("max-buffers")
                    .nick("Queued buffers")
                    .blurb("Units waiting for the streaming thread at most; beyond it the channel is not read")
                    .minimum(1)
                    .maximum(4096)
                    .default_value(d.max_buffers)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecUInt::builder("max-held-mib")
                    .nick("Reorder limit")
                    .blurb("Bytes of units held out of order at most, MiB (beyond it the oldest gap is given up)")
                    .minimum(1)
                    .maximum(4096)
                    .default_value(d.max_held_mib)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecBoxed::builder::<gst::Structure>("stats")
                    .nick("Statistics")
                    .blurb("Buffers pushed, keyframe requests sent; at the end: units received, announced dropped, dropped by the gate")
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
        let uint = || value.get::<u32>().expect("type checked upstream");
        match pspec.name() {
            "address" => s.address = string().unwrap_or_default(),
            "tls-cert" => s.tls_cert = string(),
            "tls-key" => s.tls_key = string(),
            "backups" => s.backups = uint(),
            "latency-ms" => s.latency_ms = uint(),
            "request-interval-ms" => s.request_interval_ms = uint(),
            "first-message-ms" => s.first_message_ms = uint(),
            "max-buffers" => s.max_buffers = uint(),
            "max-held-mib" => s.max_held_mib = uint(),
            _ => unimplemented!(),
        }
    }

    fn property(&self, _id: usize, pspec: &glib::ParamSpec) -> glib::Value {
        let s = lock(&self.settings);
        match pspec.name() {
            "address" => s.address.to_value(),
            "tls-cert" => s.tls_cert.to_value(),
            "tls-key" => s.tls_key.to_value(),
            "backups" => s.backups.to_value(),
            "latency-ms" => s.latency_ms.to_value(),
            "request-interval-ms" => s.request_interval_ms.to_value(),
            "first-message-ms" => s.first_message_ms.to_value(),
            "max-buffers" => s.max_buffers.to_value(),
            "max-held-mib" => s.max_held_mib.to_value(),
            "stats" => {
                let c = *lock(&self.counters);
                gst::Structure::builder("lowtide-src-stats")
                    .field("buffers", c.buffers)
                    .field("keyframe-requests", c.keyframe_requests)
                    .field("units-received", c.received)
                    .field("units-announced-dropped", c.announced_dropped)
                    .field("units-dropped-by-gate", c.gate_dropped)
                    .field("ended", c.ended)
                    .build()
                    .to_value()
            }
            _ => unimplemented!(),
        }
    }
}

impl GstObjectImpl for LowtideSrc {}

impl ElementImpl for LowtideSrc {
    fn metadata() -> Option<&'static gst::subclass::ElementMetadata> {
        static META: LazyLock<gst::subclass::ElementMetadata> = LazyLock::new(|| {
            gst::subclass::ElementMetadata::new(
                "lowtide source",
                "Source/Network",
                "Receives encoded video from a lowtide channel: decode order, never a frame whose reference was lost, keyframe requests back to the sender",
                "lowtide",
            )
        });
        Some(&*META)
    }

    fn pad_templates() -> &'static [gst::PadTemplate] {
        static TEMPLATES: LazyLock<Vec<gst::PadTemplate>> = LazyLock::new(|| {
            vec![gst::PadTemplate::new(
                "src",
                gst::PadDirection::Src,
                gst::PadPresence::Always,
                &caps::src_caps(),
            )
            .expect("a valid pad template")]
        });
        TEMPLATES.as_ref()
    }
}

fn channel_config(s: &Settings) -> Result<ChannelConfig, String> {
    let mut cfg = ChannelConfig::default();
    match (&s.tls_cert, &s.tls_key) {
        (Some(c), Some(k)) => cfg.tls = Some(TlsConfig::server(c, k)),
        (None, None) => {}
        _ => return Err("properties tls-cert and tls-key go together".into()),
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

fn resolve(address: &str) -> Result<SocketAddr, String> {
    address
        .to_socket_addrs()
        .map_err(|e| format!("address {address:?} is not host:port ({e})"))?
        .next()
        .ok_or_else(|| format!("address {address:?} resolves to nothing"))
}

impl BaseSrcImpl for LowtideSrc {
    fn start(&self) -> Result<(), gst::ErrorMessage> {
        let s = lock(&self.settings).clone();
        let cfg = channel_config(&s)
            .map_err(|e| gst::error_msg!(gst::ResourceError::Settings, ("{}", e)))?;
        let addr = resolve(&s.address)
            .map_err(|e| gst::error_msg!(gst::ResourceError::NotFound, ("{}", e)))?;
        let rt = crate::runtime();
        let listener = rt.block_on(lowtide::listen(addr, cfg)).map_err(|e| {
            gst::error_msg!(
                gst::ResourceError::OpenRead,
                ("listening on {} ({}): {}", s.address, addr, e)
            )
        })?;
        if let Ok(a) = listener.local_addr() {
            gst::info!(CAT, imp = self, "listening on {a}");
        }
        *lock(&self.counters) = Counters::default();
        *lock(&self.stream) = Stream::default();
        *lock(&self.shared) = Shared::default();
        let (tx, rx) = tokio::sync::mpsc::channel(s.max_buffers as usize);
        let task = Accept {
            listener,
            tx,
            shared: self.shared.clone(),
            settings: s,
            element: self.obj().downgrade(),
            counters: self.counters.clone(),
        };
        let task = rt.spawn(task.run());
        *lock(&self.running) = Some(Running {
            rx: Arc::new(tokio::sync::Mutex::new(rx)),
            task,
        });
        Ok(())
    }

    fn stop(&self) -> Result<(), gst::ErrorMessage> {
        if let Some(r) = lock(&self.running).take() {
            r.task.abort();
        }
        *lock(&self.stream) = Stream::default();
        Ok(())
    }

    fn is_seekable(&self) -> bool {
        false
    }

    fn negotiate(&self) -> Result<(), gst::LoggableError> {
        // The caps come with the sender's start message (`create` sets them).
        Ok(())
    }

    fn caps(&self, filter: Option<&gst::Caps>) -> Option<gst::Caps> {
        let caps = lock(&self.stream)
            .caps
            .clone()
            .unwrap_or_else(caps::src_caps);
        Some(match filter {
            Some(f) => f.intersect_with_mode(&caps, gst::CapsIntersectMode::First),
            None => caps,
        })
    }

    fn query(&self, query: &mut gst::QueryRef) -> bool {
        if let gst::QueryViewMut::Latency(q) = query.view_mut() {
            let ms = lock(&self.settings).latency_ms;
            q.set(true, gst::ClockTime::from_mseconds(u64::from(ms)), None);
            return true;
        }
        BaseSrcImplExt::parent_query(self, query)
    }

    fn unlock(&self) -> Result<(), gst::ErrorMessage> {
        self.flushing.store(true, Ordering::SeqCst);
        self.wake.notify_one();
        Ok(())
    }

    fn unlock_stop(&self) -> Result<(), gst::ErrorMessage> {
        self.flushing.store(false, Ordering::SeqCst);
        Ok(())
    }
}

impl PushSrcImpl for LowtideSrc {
    fn create(
        &self,
        _buffer: Option<&mut gst::BufferRef>,
    ) -> Result<CreateSuccess, gst::FlowError> {
        let rx = lock(&self.running)
            .as_ref()
            .map(|r| r.rx.clone())
            .ok_or(gst::FlowError::Flushing)?;
        loop {
            let Some(u) = self.next_unit(&rx)? else {
                // The queue closed: the task said how the stream ended.
                return match lock(&self.shared).outcome.take() {
                    Some(Ok(())) => Err(gst::FlowError::Eos),
                    Some(Err(e)) => {
                        gst::element_imp_error!(self, gst::ResourceError::Read, ("{}", e));
                        Err(gst::FlowError::Error)
                    }
                    None => Err(gst::FlowError::Flushing),
                };
            };
            if lock(&self.stream).start.is_none() {
                let start = lock(&self.shared).start.ok_or(gst::FlowError::Error)?;
                self.begin(start)?;
            }
            if let Some(buffer) = self.buffer(u) {
                lock(&self.counters).buffers += 1;
                return Ok(CreateSuccess::NewBuffer(buffer));
            }
        }
    }
}

impl LowtideSrc {
    /// The next unit from the task (`None`: the queue closed); `Flushing` when unlocked.
    fn next_unit(&self, rx: &Queue) -> Result<Option<OutputUnit>, gst::FlowError> {
        loop {
            if self.flushing.load(Ordering::SeqCst) {
                return Err(gst::FlowError::Flushing);
            }
            let wake = self.wake.clone();
            let got = crate::runtime().block_on(async {
                let mut rx = rx.lock().await;
                tokio::select! {
                    item = rx.recv() => Some(item),
                    _ = wake.notified() => None,
                }
            });
            match got {
                Some(item) => return Ok(item),
                // Woken: flushing, or a stale wake-up.
                None => continue,
            }
        }
    }

    fn begin(&self, start: StreamStart) -> Result<(), gst::FlowError> {
        let caps = caps::caps_for(start.codec, start.ivf.map(|h| (h.width, h.height)));
        gst::info!(CAT, imp = self, "stream {:?}: caps {}", start.codec, caps);
        {
            let mut s = lock(&self.stream);
            s.start = Some(start);
            s.caps = Some(caps.clone());
        }
        if self.obj().set_caps(&caps).is_err() {
            gst::element_imp_error!(
                self,
                gst::CoreError::Negotiation,
                (
                    "downstream does not take the sender's stream, caps {}",
                    caps
                )
            );
            return Err(gst::FlowError::NotNegotiated);
        }
        Ok(())
    }

    /// A unit as a buffer, or `None` for parameter sets (they go with the next picture).
    fn buffer(&self, u: OutputUnit) -> Option<gst::Buffer> {
        let mut s = lock(&self.stream);
        let start = s.start?;
        if u.header.info.kind == FrameKind::ParameterSets
            && matches!(start.codec, Codec::H264 | Codec::H265)
        {
            s.pending.extend_from_slice(&u.data);
            return None;
        }
        let pts_ns = sender_pts_ns(&start, &u);
        let data = if s.pending.is_empty() {
            u.data
        } else {
            let mut d = std::mem::take(&mut s.pending);
            d.extend_from_slice(&u.data);
            d
        };
        let obj = self.obj();
        let now_rt = obj
            .clock()
            .zip(obj.base_time())
            .and_then(|(c, b)| c.time().checked_sub(b))
            .unwrap_or(gst::ClockTime::ZERO);
        let (base_rt, base_pts) = *s.base.get_or_insert((now_rt, pts_ns));
        let offset = i128::from(pts_ns) - i128::from(base_pts);
        let pts = (i128::from(base_rt.nseconds()) + offset).max(0) as u64;
        let mut buffer = gst::Buffer::from_mut_slice(data);
        {
            let b = buffer.get_mut().expect("a new buffer is writable");
            b.set_pts(gst::ClockTime::from_nseconds(pts));
            if u.header.info.kind != FrameKind::Keyframe {
                b.set_flags(gst::BufferFlags::DELTA_UNIT);
            }
        }
        Some(buffer)
    }
}

/// The sender's timestamp of `u` in ns: the IVF timestamp in the stream header's timebase,
/// else the unit's PTS (a lowtidesink sends ns), else its capture time.
fn sender_pts_ns(start: &StreamStart, u: &OutputUnit) -> u64 {
    match (start.ivf, u.header.pts) {
        (Some(h), Some(pts)) => {
            let ns = u128::from(pts) * u128::from(h.timebase_scale) * 1_000_000_000
                / u128::from(h.timebase_rate.max(1));
            u64::try_from(ns).unwrap_or(u64::MAX)
        }
        (None, Some(pts)) => pts,
        (_, None) => u.header.capture_us.saturating_mul(1000),
    }
}

/// The task: accept one sender and receive its stream.
struct Accept {
    listener: lowtide::Listener,
    tx: tokio::sync::mpsc::Sender<OutputUnit>,
    shared: Arc<Mutex<Shared>>,
    settings: Settings,
    element: glib::WeakRef<super::LowtideSrc>,
    counters: Arc<Mutex<Counters>>,
}

impl Accept {
    fn warn(&self, msg: String) {
        if let Some(el) = self.element.upgrade() {
            gst::element_warning!(el, gst::ResourceError::Read, ("{}", msg));
        }
    }

    async fn run(self) {
        let first_message = Duration::from_millis(u64::from(self.settings.first_message_ms));
        loop {
            let ch = match self.listener.accept().await {
                Ok(ch) => ch,
                Err(e) => {
                    self.warn(format!("accepting a connection failed: {e}; waiting on"));
                    continue;
                }
            };
            let peer = ch.peer_addr();
            let first = tokio::time::timeout(first_message, ch.recv()).await;
            let start = match &first {
                Ok(Some(m)) => match wire::decode(&m.data) {
                    Ok(WireMessage::Start(s)) => Ok(s),
                    Ok(_) => Err("its first message is not an encoded-video start".to_string()),
                    Err(e) => Err(format!(
                        "its first message is not lowtide encoded video: {e}"
                    )),
                },
                Ok(None) => Err(match ch.error() {
                    Some(e) => format!("the channel failed before a message: {e}"),
                    None => "it closed before a message".into(),
                }),
                Err(_) => Err(format!("no message within {first_message:?}")),
            };
            let (Ok(start), Ok(Some(first))) = (start.clone(), first) else {
                let why = start.err().unwrap_or_else(|| "no first message".into());
                self.warn(format!(
                    "peer {peer} is not a lowtide encoded-video sender: {why}; dropped, waiting for another"
                ));
                ch.close(1, "not an encoded-video sender").await;
                continue;
            };
            gst::info!(CAT, "peer {peer}: {:?} stream", start.codec);
            lock(&self.shared).start = Some(start);
            let requests = ch.open_stream(StreamConfig::default()).ok();
            let opts = ReceiveOptions {
                max_held_bytes: (self.settings.max_held_mib as usize) << 20,
                request_interval: Duration::from_millis(u64::from(
                    self.settings.request_interval_ms,
                )),
            };
            let counters = self.counters.clone();
            let on_request = |r: KeyframeRequest| {
                lock(&counters).keyframe_requests += 1;
                if let Some(s) = requests {
                    let m =
                        Message::new(wire::encode_keyframe_request(&r)).importance(MAX_IMPORTANCE);
                    let _ = ch.send(s, m);
                }
            };
            let result = pipe::receive_units(&ch, Some(first), opts, on_request, &self.tx).await;
            ch.close(0, "session over").await;
            let outcome = match result {
                Ok(r) => {
                    {
                        let mut c = lock(&self.counters);
                        c.received = r.counters.received;
                        c.announced_dropped = r.counters.announced_dropped;
                        c.gate_dropped = r.drops.total();
                        c.ended = r.ended;
                    }
                    if r.ended {
                        Ok(())
                    } else {
                        Err(format!(
                            "the sender at {peer} went away before the end of its stream ({} units received)",
                            r.counters.received
                        ))
                    }
                }
                Err(e) => Err(format!("receiving from {peer}: {e}")),
            };
            // Dropping `self` (and the queue's sender) after this tells the streaming thread.
            lock(&self.shared).outcome = Some(outcome);
            return;
        }
    }
}
