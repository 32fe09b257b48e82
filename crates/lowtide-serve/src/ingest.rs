//! Publishers in: a lowtide channel whose first message is a publish message (stream path and
//! token, [`lowtide_media::encoded::wire::encode_publish`]), then an encoded stream as
//! `lowtide send --input --publish` and `lowtidesink publish=` send it. The units the
//! server's own gate passes (a unit the publisher dropped takes what depends on it) go to the
//! hub; viewers' keyframe wants go back to the publisher as keyframe requests. A channel
//! whose first message is a pull message is a relay ([`crate::relay`]): it gets the stream.
//!
//! A peer is refused with the channel's close reason, which its error shows: no publish
//! message within the first-message timeout, a wrong token, a path already published, a
//! codec browsers cannot decode; for a relay, a wrong relay token, no such stream, or the
//! server's viewer limits.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lowtide::{Channel, Message, StreamConfig};
use lowtide_media::encoded::receiver::OutputUnit;
use lowtide_media::encoded::wire::{self, WireMessage};
use lowtide_media::encoded::{stamp, Codec, KeyframeRequest, RequestReason, MAX_IMPORTANCE};
use lowtide_media::pipe::{self, ReceiveOptions};

use crate::hub::{Hub, HubUnit, Stream};
use crate::wall_us;

/// How publishers are admitted.
#[derive(Debug, Clone)]
pub struct IngestConfig {
    /// The token a publish message must carry.
    pub token: String,
    /// The token a relay's pull message must carry (empty: relays are as open as viewers).
    pub relay_token: String,
    pub pull: crate::relay::PullServing,
    /// A peer that sends no publish message and stream start within this is dropped.
    pub first_message_timeout: Duration,
    pub receive: ReceiveOptions,
}

/// Close codes a refused publisher sees.
pub mod close_code {
    pub const NOT_A_PUBLISHER: u64 = 10;
    pub const BAD_TOKEN: u64 = 11;
    pub const PATH_TAKEN: u64 = 12;
    pub const CODEC: u64 = 13;
    /// A relay pulled a path no one publishes.
    pub const NO_STREAM: u64 = 14;
    /// A relay met the server's viewer limits.
    pub const FULL: u64 = 15;
}

/// Why a publisher's session ended.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IngestError {
    #[error("refused: {0}")]
    Refused(String),
    #[error(transparent)]
    Pipe(#[from] pipe::PipeError),
}

/// Serves one publisher's channel until its stream ends.
pub async fn publisher(ch: Channel, hub: Arc<Hub>, cfg: IngestConfig) -> Result<(), IngestError> {
    let refuse = |code, why: String| {
        let ch = ch.clone();
        async move {
            ch.close(code, &why).await;
            Err(IngestError::Refused(why))
        }
    };
    let first = tokio::time::timeout(cfg.first_message_timeout, ch.recv()).await;
    let Ok(Some(first)) = first else {
        return refuse(
            close_code::NOT_A_PUBLISHER,
            format!(
                "no publish message within {:?} (publish with lowtide send --publish PATH)",
                cfg.first_message_timeout
            ),
        )
        .await;
    };
    let path = match wire::decode(&first.data) {
        Ok(WireMessage::Publish { path, token }) => {
            if !same_secret(token.as_bytes(), cfg.token.as_bytes()) {
                return refuse(close_code::BAD_TOKEN, "wrong publish token".into()).await;
            }
            path.to_owned()
        }
        Ok(WireMessage::Pull { path, token }) => {
            if !same_secret(token.as_bytes(), cfg.relay_token.as_bytes()) {
                return refuse(
                    close_code::BAD_TOKEN,
                    "wrong relay token (an edge's --upstream-token must be this server's --relay-token)".into(),
                )
                .await;
            }
            let path = path.to_owned();
            return crate::relay::serve_pull(ch, hub, &path, cfg.pull).await;
        }
        Ok(_) => {
            return refuse(
                close_code::NOT_A_PUBLISHER,
                "the first message is not a publish message (lowtide send --publish PATH)".into(),
            )
            .await
        }
        Err(e) => return refuse(close_code::NOT_A_PUBLISHER, format!("first message: {e}")).await,
    };
    let start = tokio::time::timeout(cfg.first_message_timeout, ch.recv()).await;
    let Ok(Some(start)) = start else {
        return refuse(
            close_code::NOT_A_PUBLISHER,
            "no stream start after the publish message".into(),
        )
        .await;
    };
    let codec = match wire::decode(&start.data) {
        Ok(WireMessage::Start(s)) => s.codec,
        _ => {
            return refuse(
                close_code::NOT_A_PUBLISHER,
                "the message after publish is not a stream start".into(),
            )
            .await
        }
    };
    let stream = match hub.publish(&path, codec) {
        Ok(s) => s,
        Err(e) => {
            let code = match e {
                crate::hub::PublishError::Taken(_) => close_code::PATH_TAKEN,
                _ => close_code::CODEC,
            };
            return refuse(code, e.to_string()).await;
        }
    };
    tracing::info!(path, peer = %ch.peer_addr(), "publisher started");
    let result = relay(&ch, start, codec, &hub, &stream, cfg.receive).await;
    hub.end(&stream);
    ch.close(0, "stream over").await;
    tracing::info!(path, "publisher ended: {result:?}");
    result.map_err(IngestError::from)
}

/// The stream's units into the hub; keyframe wants out to the publisher (or, for a relay,
/// to the server it pulls from).
pub(crate) async fn relay(
    ch: &Channel,
    start: lowtide::Received,
    codec: Codec,
    hub: &Hub,
    stream: &Arc<Stream>,
    opts: ReceiveOptions,
) -> Result<(), pipe::PipeError> {
    let requests = ch.open_stream(StreamConfig::default())?;
    let ask = |r: KeyframeRequest| {
        let m = Message::new(wire::encode_keyframe_request(&r)).importance(MAX_IMPORTANCE);
        let _ = ch.send(requests, m);
    };
    let (tx, mut rx) = tokio::sync::mpsc::channel::<OutputUnit>(64);
    let receive = pipe::receive_units(ch, Some(start), opts, ask, &tx);
    let result = {
        let feed = async {
            loop {
                tokio::select! {
                    u = rx.recv() => match u {
                        Some(u) => hub.push(stream, hub_unit(u, codec)),
                        None => break,
                    },
                    () = stream.keyframe_wanted() => ask(KeyframeRequest {
                        reason: RequestReason::NoKeyframeYet,
                        dropped_since: 0,
                    }),
                }
            }
        };
        tokio::pin!(feed);
        tokio::select! {
            r = receive => r,
            // Only when the receiver's queue closed, which `tx` (held here) prevents.
            () = &mut feed => Err(pipe::PipeError::ConsumerGone),
        }
    };
    drop(tx);
    // Units the receiver passed before it returned.
    while let Ok(u) = rx.try_recv() {
        hub.push(stream, hub_unit(u, codec));
    }
    result.map(|_| ())
}

/// A received unit as the hub holds it: its in-band capture stamp read once here.
pub fn hub_unit(u: OutputUnit, codec: Codec) -> HubUnit {
    let capture_us = stamp::read_unit_bytes(codec, &u.data)
        .ok()
        .flatten()
        .unwrap_or(0);
    HubUnit {
        info: u.header.info,
        has_parameter_sets: u.header.has_parameter_sets,
        capture_us,
        ingest_us: wall_us(),
        ingest_at: Instant::now(),
        data: u.data,
    }
}

/// Compares secrets in time independent of where they differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    let diff = a
        .iter()
        .zip(b)
        .fold(a.len() ^ b.len(), |d, (x, y)| d | usize::from(x ^ y));
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_by_every_byte_and_the_length() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"abc", b"abcd"));
        assert!(!same_secret(b"", b"a"));
        assert!(same_secret(b"", b""));
    }
}
