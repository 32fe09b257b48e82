//! The server: the HTTP listener (page, stream list, metrics, viewers' WebSockets; HTTPS and
//! WSS with [`ServeConfig::tls`]) and the lowtide listener for publishers, both on one tokio
//! runtime, sharing the [`Hub`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lowtide::ChannelConfig;
use lowtide_media::pipe::ReceiveOptions;
use tokio::net::{TcpListener, TcpStream};

use crate::http::{self, Request};
use crate::hub::{Hub, HubConfig, JoinError};
use crate::ingest::{self, IngestConfig};
use crate::metrics::{self, ServerCounters};
use crate::relay::{PullServing, Upstream};
use crate::transport::{self, TlsConfigError, TlsFiles, Transport};
use crate::viewer::connection::{self, ShownRecord, ShownSink, ViewerEnd};
use crate::viewer::ViewerConfig;
use crate::websocket;

/// The player page and its script, embedded so the binary is the whole server.
const INDEX_HTML: &str = include_str!("../assets/index.html");
const PLAYER_JS: &str = include_str!("../assets/player.js");

/// Everything `lowtide serve` is told.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Where viewers connect (HTTP and WebSocket).
    pub http: SocketAddr,
    /// HTTPS and WSS on [`ServeConfig::http`] instead (browsers give WebCodecs only to
    /// secure contexts: a viewer on another machine needs this).
    pub tls: Option<TlsFiles>,
    /// Where publishers connect (lowtide).
    pub ingest: SocketAddr,
    /// The publishers' channels (TLS, congestion control).
    pub ingest_channel: ChannelConfig,
    /// The token publishers must present.
    pub publish_token: String,
    /// The token relays pulling from this server must present (empty: anyone may pull, as
    /// anyone may watch).
    pub relay_token: String,
    /// How streams are served to relays that pull them.
    pub pull: PullServing,
    /// Streams this server pulls from other servers and serves again (an edge).
    pub upstreams: Vec<Upstream>,
    /// The channels to upstream servers.
    pub upstream_channel: ChannelConfig,
    pub hub: HubConfig,
    pub viewer: ViewerConfig,
    /// A client that sends no complete request head within this is dropped (and, with TLS,
    /// one that does not finish its handshake within this).
    pub request_timeout: Duration,
    /// A publisher that sends no publish message and stream start within this is dropped.
    pub first_message_timeout: Duration,
    /// Every frame a viewer reports shown, as CSV (the lab reads it).
    pub shown_log: Option<PathBuf>,
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            http: SocketAddr::from(([127, 0, 0, 1], 8080)),
            tls: None,
            ingest: SocketAddr::from(([127, 0, 0, 1], 7000)),
            ingest_channel: ChannelConfig::default(),
            publish_token: String::new(),
            relay_token: String::new(),
            pull: PullServing::default(),
            upstreams: Vec::new(),
            upstream_channel: ChannelConfig::default(),
            hub: HubConfig::default(),
            viewer: ViewerConfig::default(),
            request_timeout: Duration::from_secs(5),
            first_message_timeout: Duration::from_secs(5),
            shown_log: None,
        }
    }
}

/// Why the server did not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    // Here and below the messages show the inner error, so it is not a `source` either.
    #[error("listening for viewers on {addr}: {error}")]
    Http {
        addr: SocketAddr,
        error: std::io::Error,
    },
    #[error("listening for publishers on {addr}: {error}")]
    Ingest {
        addr: SocketAddr,
        error: lowtide::Error,
    },
    // Not a `source`: the message is whole (an error chain would print it twice).
    #[error("HTTPS: {0}")]
    Tls(TlsConfigError),
    #[error("the shown log {path}: {error}")]
    Log {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error(
        "the viewers' controller {0}: a browser sends no P-ACKs; use min-buf, notsent-lowat or tcp"
    )]
    Controller(String),
}

/// A running server.
pub struct Server {
    ctx: Arc<Ctx>,
    http_addr: SocketAddr,
    ingest_addr: SocketAddr,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

struct Ctx {
    cfg: ServeConfig,
    /// Loaded from [`ServeConfig::tls`].
    tls: Option<Arc<rustls::ServerConfig>>,
    hub: Arc<Hub>,
    counters: ServerCounters,
    shown_log: Option<CsvShown>,
}

impl Server {
    /// Binds both listeners and starts serving on the current tokio runtime.
    pub async fn start(cfg: ServeConfig) -> Result<Self, ServeError> {
        use lowtide::ControllerConfig as C;
        if matches!(cfg.viewer.controller, C::PaceA { .. } | C::Dbat(_)) {
            return Err(ServeError::Controller(format!(
                "{:?}",
                cfg.viewer.controller
            )));
        }
        // The certificate first: a bad file fails before anything listens.
        let tls = cfg
            .tls
            .as_ref()
            .map(TlsFiles::load)
            .transpose()
            .map_err(ServeError::Tls)?;
        let http_listener =
            TcpListener::bind(cfg.http)
                .await
                .map_err(|error| ServeError::Http {
                    addr: cfg.http,
                    error,
                })?;
        let ingest_listener = lowtide::listen(cfg.ingest, cfg.ingest_channel.clone())
            .await
            .map_err(|error| ServeError::Ingest {
                addr: cfg.ingest,
                error,
            })?;
        let shown_log = match &cfg.shown_log {
            Some(p) => Some(CsvShown::create(p).map_err(|error| ServeError::Log {
                path: p.clone(),
                error,
            })?),
            None => None,
        };
        let http_addr = http_listener
            .local_addr()
            .map_err(|error| ServeError::Http {
                addr: cfg.http,
                error,
            })?;
        let ingest_addr = ingest_listener
            .local_addr()
            .map_err(|error| ServeError::Ingest {
                addr: cfg.ingest,
                error,
            })?;
        let ctx = Arc::new(Ctx {
            hub: Arc::new(Hub::new(cfg.hub)),
            cfg,
            tls,
            counters: ServerCounters::default(),
            shown_log,
        });
        let c = ctx.clone();
        let http_task = tokio::spawn(async move {
            loop {
                match http_listener.accept().await {
                    Ok((s, peer)) => {
                        tokio::spawn(http_connection(s, peer, c.clone()));
                    }
                    // Out of descriptors: wait instead of spinning.
                    Err(e) => {
                        tracing::warn!("accepting a viewer: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        });
        let c = ctx.clone();
        let ingest_task = tokio::spawn(async move {
            loop {
                match ingest_listener.accept().await {
                    Ok(ch) => {
                        let c = c.clone();
                        tokio::spawn(async move {
                            let icfg = IngestConfig {
                                token: c.cfg.publish_token.clone(),
                                relay_token: c.cfg.relay_token.clone(),
                                pull: c.cfg.pull,
                                first_message_timeout: c.cfg.first_message_timeout,
                                receive: ReceiveOptions::default(),
                            };
                            if let Err(e) = ingest::publisher(ch, c.hub.clone(), icfg).await {
                                if matches!(e, ingest::IngestError::Refused(_)) {
                                    c.counters
                                        .publishers_refused
                                        .fetch_add(1, Ordering::Relaxed);
                                }
                                tracing::warn!("publisher: {e}");
                            }
                        });
                    }
                    Err(e) => {
                        tracing::warn!("accepting a publisher: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        });
        let mut tasks = vec![http_task, ingest_task];
        for up in &ctx.cfg.upstreams {
            let pull = crate::relay::pull_forever(
                up.clone(),
                ctx.hub.clone(),
                ctx.cfg.upstream_channel.clone(),
            );
            tasks.push(tokio::spawn(pull));
        }
        Ok(Self {
            ctx,
            http_addr,
            ingest_addr,
            tasks,
        })
    }

    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    /// `https` with TLS, else `http` (for the URLs to show).
    pub fn scheme(&self) -> &'static str {
        if self.ctx.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    pub fn ingest_addr(&self) -> SocketAddr {
        self.ingest_addr
    }

    pub fn hub(&self) -> &Arc<Hub> {
        &self.ctx.hub
    }

    /// The metrics page now.
    pub fn metrics(&self) -> String {
        metrics::render(&self.ctx.hub, &self.ctx.counters)
    }
}

/// The connection's transport: plain, or TLS after its handshake. `None` if the client
/// went away, was too slow, or does not speak TLS to the TLS port (answered in plain HTTP:
/// a browser shows why).
async fn open(s: TcpStream, peer: SocketAddr, ctx: &Ctx) -> Option<Transport> {
    let Some(tls) = &ctx.tls else {
        return Some(Transport::plain(s));
    };
    let limit = ctx.cfg.request_timeout;
    let bad = || ctx.counters.bad_requests.fetch_add(1, Ordering::Relaxed);
    let mut first = [0u8; 1];
    match tokio::time::timeout(limit, s.peek(&mut first)).await {
        Ok(Ok(1..)) => {}
        Ok(_) => return None,
        Err(_) => {
            bad();
            tracing::debug!(%peer, "no TLS handshake within {limit:?}");
            return None;
        }
    }
    if first[0] != transport::TLS_HANDSHAKE_RECORD {
        bad();
        let mut t = Transport::plain(s);
        // The request is read first: closing with it unread would reset the connection
        // before the client reads the answer.
        let _ = http::read_request(&mut t, limit).await;
        let _ = http::respond_error(
            &mut t,
            400,
            "this port speaks HTTPS: open the same address with https://",
        )
        .await;
        tracing::debug!(%peer, "plain HTTP (or not TLS) to the HTTPS port");
        return None;
    }
    match Transport::accept(s, tls, limit).await {
        Ok(t) => Some(t),
        Err(e) => {
            if e.is_protocol_violation() || matches!(e, transport::HandshakeError::Timeout(_)) {
                bad();
            }
            tracing::debug!(%peer, "TLS handshake: {e}");
            None
        }
    }
}

async fn http_connection(s: TcpStream, peer: SocketAddr, ctx: Arc<Ctx>) {
    let _ = s.set_nodelay(true);
    let Some(mut s) = open(s, peer, &ctx).await else {
        return;
    };
    let req = match http::read_request(&mut s, ctx.cfg.request_timeout).await {
        Ok(r) => r,
        Err(e) => {
            if let Some(status) = e.status() {
                ctx.counters.bad_requests.fetch_add(1, Ordering::Relaxed);
                let _ = http::respond_error(&mut s, status, &e.to_string()).await;
            }
            return;
        }
    };
    if req.method != "GET" && req.method != "HEAD" {
        let _ = http::respond_error(&mut s, 405, "only GET is served").await;
        return;
    }
    let path = req.path.clone();
    let r = if path == "/" || path.starts_with("/watch/") {
        http::respond(
            &mut s,
            200,
            "text/html; charset=utf-8",
            INDEX_HTML.as_bytes(),
        )
        .await
    } else if path == "/player.js" {
        http::respond(
            &mut s,
            200,
            "text/javascript; charset=utf-8",
            PLAYER_JS.as_bytes(),
        )
        .await
    } else if path == "/streams" {
        let list: Vec<_> = ctx
            .hub
            .list()
            .iter()
            .map(|st| {
                serde_json::json!({
                    "path": st.path,
                    "codec": if st.codec_byte == 2 { "h265" } else { "h264" },
                    "viewers": st.viewers().len(),
                    "units": st.units_in.load(Ordering::Relaxed),
                })
            })
            .collect();
        let body = serde_json::to_vec(&list).unwrap_or_default();
        http::respond(&mut s, 200, "application/json", &body).await
    } else if path == "/metrics" {
        let page = metrics::render(&ctx.hub, &ctx.counters);
        http::respond(&mut s, 200, "text/plain; version=0.0.4", page.as_bytes()).await
    } else if let Some(stream_path) = path.strip_prefix("/live/") {
        return viewer(s, peer, req.clone(), stream_path.to_owned(), ctx).await;
    } else {
        http::respond_error(&mut s, 404, &format!("nothing at {path}")).await
    };
    if let Err(e) = r {
        tracing::debug!(%peer, "answering {path}: {e}");
    }
}

async fn viewer(mut s: Transport, peer: SocketAddr, req: Request, path: String, ctx: Arc<Ctx>) {
    let Some(key) = req.websocket_key.clone() else {
        let _ = http::respond_error(
            &mut s,
            426,
            &format!("/live/{path} is a WebSocket; open /watch/{path} in a browser"),
        )
        .await;
        return;
    };
    let (stream, slot) = match ctx.hub.join(&path, peer.ip(), Instant::now()) {
        Ok(j) => j,
        Err(e) => {
            ctx.counters.viewers_refused.fetch_add(1, Ordering::Relaxed);
            let status = match e {
                JoinError::NoStream(_) => 404,
                JoinError::PerAddress(_) => 429,
                JoinError::Full(_) => 503,
            };
            let _ = http::respond_error(&mut s, status, &e.to_string()).await;
            return;
        }
    };
    ctx.counters
        .viewers_accepted
        .fetch_add(1, Ordering::Relaxed);
    let accept = websocket::accept_key(&key);
    let r = match s
        .write_all(http::switching_protocols(&accept).as_bytes())
        .await
    {
        Ok(()) => {
            connection::run(
                s,
                req.rest,
                stream.clone(),
                slot.clone(),
                &ctx.cfg.viewer,
                ctx.cfg.hub.keyframe_request_interval,
                ctx.shown_log.as_ref().map(|l| l as &dyn ShownSink),
            )
            .await
        }
        Err(e) => Err(ViewerEnd::Io(e)),
    };
    ctx.hub.leave(&stream, &slot);
    match r {
        Ok(end) => tracing::info!(viewer = slot.id, %peer, "viewer done: {end}"),
        Err(ViewerEnd::Stalled(t)) => {
            ctx.counters.viewers_stalled.fetch_add(1, Ordering::Relaxed);
            tracing::info!(viewer = slot.id, %peer, "viewer dropped: no progress for {t:?}");
        }
        Err(e @ (ViewerEnd::Protocol(_) | ViewerEnd::BadReport(_))) => {
            ctx.counters.bad_requests.fetch_add(1, Ordering::Relaxed);
            tracing::info!(viewer = slot.id, %peer, "viewer dropped: {e}");
        }
        Err(e) => tracing::info!(viewer = slot.id, %peer, "viewer gone: {e}"),
    }
}

/// The shown log: one CSV line per frame a viewer reported shown.
struct CsvShown(Mutex<std::io::BufWriter<std::fs::File>>);

impl CsvShown {
    const HEADER: &'static str =
        "viewer,addr,index,capture_us,ingest_us,sent_us,decoded_us,shown_us,catch_up\n";

    fn create(p: &std::path::Path) -> std::io::Result<Self> {
        use std::io::Write;
        let mut f = std::io::BufWriter::new(std::fs::File::create(p)?);
        f.write_all(Self::HEADER.as_bytes())?;
        f.flush()?;
        Ok(Self(Mutex::new(f)))
    }
}

impl ShownSink for CsvShown {
    fn shown(&self, r: &ShownRecord) {
        use std::io::Write;
        let mut f = crate::hub::lock(&self.0);
        // Flushed per line: the lab reads the file while the server runs, and a server
        // killed at the end of a run loses nothing.
        let w = writeln!(
            f,
            "{},{},{},{},{},{},{},{},{}",
            r.viewer,
            r.addr,
            r.index,
            r.capture_us,
            r.ingest_us,
            r.sent_us,
            r.decoded_us,
            r.shown_us,
            u8::from(r.catch_up)
        )
        .and_then(|()| f.flush());
        if let Err(e) = w {
            tracing::warn!("writing the shown log: {e}");
        }
    }
}
