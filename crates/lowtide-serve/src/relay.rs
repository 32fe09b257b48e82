//! Relay chains: an edge server pulls a stream from an origin server over a lowtide channel
//! and serves it again (`lowtide serve --upstream lowtide://ORIGIN:7000/PATH`).
//!
//! ```text
//! publisher ─► origin ─ lowtide channel (MIN_BUF, deadlines, decodable drops) ─► edge ─► viewers
//!                    └─ lowtide channel ─────────────────────────────────────► edge ─► viewers
//! ```
//!
//! - The edge opens a channel to the origin's ingest port and sends a pull message (the
//!   stream's path and the origin's relay token, [`wire::encode_pull`]). The origin joins
//!   the stream as one more viewer of its hub (the same catch-up and queue a WebSocket viewer
//!   gets) and sends what it pops on the channel as a publisher would: each access unit one
//!   message with its importance and a deadline of `budget` after the unit reached the
//!   origin, a unit the channel's queue cannot carry in time dropped with the units that
//!   depend on it, and the drop told to the edge ([`StreamSender`]). So the hop between
//!   servers is at low tide like a viewer's: the channel's own latency controller keeps the
//!   origin's kernel send buffer near the window.
//! - The edge receives it like a publisher's stream ([`crate::ingest`]): its gate passes only
//!   decodable units into its own hub under the same path, and its viewers' keyframe wants go
//!   back up the channel as keyframe requests, which the origin passes to its publisher.
//! - Units are renumbered on the hop: the origin's hub holds only units its gate passed (a
//!   decodable sequence with gaps where the publisher dropped), so numbering what it sends
//!   contiguously leaves the edge's gate nothing to mistake for a loss. The capture stamp
//!   travels inside the unit (in band), so an edge's viewers measure glass-to-glass latency
//!   from the camera, through every hop.
//! - When the origin's stream ends or the channel fails, the edge ends its copy (its viewers
//!   get the end) and pulls again after a back-off (0.5 s, doubling to 10 s), so an edge
//!   follows an origin restart or a publisher that comes back.
//!
//! Not here: relays for VP8/VP9/AV1 (the hub serves H.264 and H.265, what browsers decode
//! from Annex-B), one channel carrying several streams (one channel per pulled path).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lowtide::{Channel, ChannelConfig, Message, StreamConfig};
use lowtide_media::encoded::sender::SenderConfig;
use lowtide_media::encoded::wire::{self, StreamStart, WireMessage};
use lowtide_media::encoded::{AccessUnit, MAX_IMPORTANCE};
use lowtide_media::pipe::{PipeError, ReceiveOptions, StreamSender};

use crate::hub::{lock, Hub, JoinError};
use crate::ingest::{close_code, IngestError};

/// What an edge pulls: `lowtide://HOST:PORT/PATH` and the origin's relay token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    pub addr: SocketAddr,
    pub path: String,
    pub token: String,
}

/// Why an upstream URL is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "upstream {url:?}: {why} (expected lowtide://HOST:PORT/PATH, e.g. lowtide://10.0.0.1:7000/cam)"
)]
pub struct UpstreamUrlError {
    pub url: String,
    pub why: String,
}

impl Upstream {
    /// Parses `lowtide://HOST:PORT/PATH` (HOST an IP address or a name resolved now).
    ///
    /// ```
    /// use lowtide_serve::relay::Upstream;
    /// let u = Upstream::parse("lowtide://127.0.0.1:7000/cam/1", "t")?;
    /// assert_eq!((u.addr.port(), u.path.as_str()), (7000, "cam/1"));
    /// assert!(Upstream::parse("http://127.0.0.1:7000/cam", "").is_err());
    /// assert!(Upstream::parse("lowtide://127.0.0.1:7000/../x", "").is_err());
    /// # Ok::<(), lowtide_serve::relay::UpstreamUrlError>(())
    /// ```
    pub fn parse(url: &str, token: &str) -> Result<Self, UpstreamUrlError> {
        let bad = |why: &str| UpstreamUrlError {
            url: url.into(),
            why: why.into(),
        };
        let rest = url
            .strip_prefix("lowtide://")
            .ok_or_else(|| bad("not a lowtide:// URL"))?;
        let (host, path) = rest.split_once('/').ok_or_else(|| bad("no stream path"))?;
        wire::check_stream_path(path).map_err(|e| bad(&e.to_string()))?;
        use std::net::ToSocketAddrs;
        let addr = host
            .to_socket_addrs()
            .map_err(|e| bad(&format!("{host}: {e}")))?
            .next()
            .ok_or_else(|| bad(&format!("{host} has no address")))?;
        Ok(Self {
            addr,
            path: path.into(),
            token: token.into(),
        })
    }
}

/// How an origin serves pulls.
#[derive(Debug, Clone, Copy)]
pub struct PullServing {
    /// A unit's deadline on the hop: this long after it reached this server.
    pub budget: Duration,
    /// A relay's keyframe requests reach the publisher at most this often.
    pub keyframe_request_interval: Duration,
    /// How long to wait at the end for the relay's acknowledgements.
    pub ack_wait: Duration,
}

impl Default for PullServing {
    fn default() -> Self {
        Self {
            budget: Duration::from_millis(300),
            keyframe_request_interval: Duration::from_secs(1),
            ack_wait: Duration::from_secs(2),
        }
    }
}

/// Origin side: serves `path` to the relay on `ch` (its pull message already read and its
/// token checked) until the stream ends or the relay goes.
pub async fn serve_pull(
    ch: Channel,
    hub: Arc<Hub>,
    path: &str,
    cfg: PullServing,
) -> Result<(), IngestError> {
    let (stream, slot) = match hub.join(path, ch.peer_addr().ip(), Instant::now()) {
        Ok(x) => x,
        Err(e) => {
            let code = match e {
                JoinError::NoStream(_) => close_code::NO_STREAM,
                _ => close_code::FULL,
            };
            let why = e.to_string();
            ch.close(code, &why).await;
            return Err(IngestError::Refused(why));
        }
    };
    tracing::info!(path, relay = %ch.peer_addr(), "relay joined");
    let result = send_stream(&ch, &stream, &slot, cfg).await;
    hub.leave(&stream, &slot);
    ch.close(0, "stream over").await;
    tracing::info!(path, "relay left: {result:?}");
    result.map_err(IngestError::from)
}

async fn send_stream(
    ch: &Channel,
    stream: &crate::hub::Stream,
    slot: &crate::hub::ViewerSlot,
    cfg: PullServing,
) -> Result<(), PipeError> {
    let mut sender = StreamSender::open(
        ch,
        SenderConfig {
            latency: cfg.budget,
            ..SenderConfig::default()
        },
    )?;
    sender.start(&StreamStart {
        codec: stream.codec,
        ivf: None,
    })?;
    let mut next_index = 0u64;
    loop {
        // Registered before the queue is looked at, so a push in between is not missed.
        let woken = slot.notify.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let now = Instant::now();
        let units: Vec<AccessUnit> = {
            let mut q = lock(&slot.queue);
            std::iter::from_fn(|| q.pop(now, Duration::ZERO))
                .map(|n| {
                    let u = &n.unit;
                    next_index += 1;
                    AccessUnit {
                        codec: stream.codec,
                        index: next_index - 1,
                        data: u.data.clone(),
                        kind: u.info.kind,
                        temporal_id: u.info.temporal_id,
                        has_parameter_sets: u.has_parameter_sets,
                        skipped_at_random_access: u.info.skipped_at_random_access,
                        pts: None,
                        // The join's catch-up is old by nature: its deadline counts from now.
                        capture: if n.catch_up { now } else { u.ingest_at },
                    }
                })
                .collect()
        };
        if lock(&slot.queue).take_break() {
            stream.want_keyframe(now, cfg.keyframe_request_interval);
        }
        if !units.is_empty() {
            sender.send_units(units, now)?;
        }
        if stream.is_ended() && lock(&slot.queue).is_empty() {
            break;
        }
        tokio::select! {
            () = &mut woken => {}
            e = ch.next_event() => match e {
                Some(e) => sender.handle_event(e)?,
                None => return Err(sender.refused().unwrap_or(PipeError::Closed(0))),
            },
            m = ch.recv() => match m {
                Some(m) => match wire::decode(&m.data) {
                    Ok(WireMessage::KeyframeRequest(_)) => {
                        stream.want_keyframe(Instant::now(), cfg.keyframe_request_interval);
                    }
                    _ => tracing::warn!(path = stream.path, "a relay sent a message that is not a keyframe request; ignored"),
                },
                None => return Err(sender.refused().unwrap_or(PipeError::Closed(0))),
            },
        }
    }
    sender.finish(cfg.ack_wait).await.map(|_| ())
}

/// Edge side: pulls `up` into `hub` under the same path, again after each end or failure
/// (back-off 0.5 s doubling to 10 s, back to 0.5 s after a pull that delivered a stream).
/// Runs until the task is dropped.
pub async fn pull_forever(up: Upstream, hub: Arc<Hub>, channel: ChannelConfig) {
    let first = Duration::from_millis(500);
    let mut backoff = first;
    loop {
        match pull_once(&up, &hub, &channel).await {
            Ok(()) => {
                tracing::info!(path = up.path, upstream = %up.addr, "upstream stream ended");
                backoff = first;
            }
            Err(e) => {
                tracing::warn!(path = up.path, upstream = %up.addr, "pulling: {e}; again in {backoff:?}");
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(10));
    }
}

/// Why one pull ended.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PullError {
    #[error("connecting to {addr}: {error}")]
    Connect {
        addr: SocketAddr,
        error: lowtide::Error,
    },
    #[error("the upstream refused: {0}")]
    Refused(String),
    #[error("the local hub: {0}")]
    Hub(crate::hub::PublishError),
    #[error(transparent)]
    Pipe(#[from] PipeError),
}

/// One pull: connect, ask, relay the stream into the hub until it ends.
pub async fn pull_once(up: &Upstream, hub: &Hub, channel: &ChannelConfig) -> Result<(), PullError> {
    let ch = lowtide::connect(up.addr, channel.clone())
        .await
        .map_err(|error| PullError::Connect {
            addr: up.addr,
            error,
        })?;
    let ask = ch
        .open_stream(StreamConfig::default())
        .map_err(PipeError::from)?;
    let pull = wire::encode_pull(&up.path, &up.token).map_err(PipeError::from)?;
    ch.send(ask, Message::new(pull).importance(MAX_IMPORTANCE))
        .map_err(PipeError::from)?;
    let start = tokio::time::timeout(Duration::from_secs(10), ch.recv()).await;
    let start = match start {
        Ok(Some(m)) => m,
        Ok(None) => {
            let why = closed_reason(&ch).await;
            return Err(PullError::Refused(why));
        }
        Err(_) => return Err(PullError::Refused("no stream start within 10 s".into())),
    };
    let codec = match wire::decode(&start.data) {
        Ok(WireMessage::Start(s)) => s.codec,
        _ => {
            return Err(PullError::Refused(
                "the first message is not a stream start".into(),
            ))
        }
    };
    let stream = hub.publish(&up.path, codec).map_err(PullError::Hub)?;
    tracing::info!(path = up.path, upstream = %up.addr, "pulling");
    let result =
        crate::ingest::relay(&ch, start, codec, hub, &stream, ReceiveOptions::default()).await;
    hub.end(&stream);
    ch.close(0, "relay over").await;
    result.map_err(PullError::from)
}

/// The reason the upstream gave when it closed the channel (it refuses by closing).
async fn closed_reason(ch: &Channel) -> String {
    while let Some(e) = ch.next_event().await {
        if let lowtide::Event::Closed { code, reason, .. } = e {
            return format!("{reason} (code {code})");
        }
    }
    "the channel closed".into()
}
