//! A receiving server (`lowtide recv`): serves one sender after another, several at once,
//! and survives bad peers. A peer that is not a lowtide video sender (garbage, silence, a
//! reset) is logged and dropped; the server accepts the next connection.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lowtide::{Channel, Listener};

use crate::playout::{Playout, PlayoutStats};
use crate::session::receive_video;

/// How each session is received.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub fps: f64,
    pub window_frames: u32,
    pub tolerance: Duration,
    /// A session ends this long after its stream started.
    pub max_session: Duration,
    /// A peer that sends no valid message within this long is dropped.
    pub first_message: Duration,
    /// Sessions served at once; further peers wait in the listen backlog.
    pub max_sessions: usize,
    /// Return after this many sessions that delivered video (`None`: serve until the
    /// listener fails).
    pub sessions: Option<u32>,
    /// The stream's start is taken this long after the accept (the sender's lead-in).
    pub start_delay: Duration,
}

/// How one peer's session ended.
#[derive(Debug)]
pub enum SessionEnd {
    /// The peer sent video; what a viewer saw (and the channel's error, if it failed late).
    Received {
        stats: PlayoutStats,
        error: Option<String>,
    },
    /// The peer failed before its first message and was dropped.
    Dropped { why: String },
}

/// Serves sessions on `listener`; `report` hears about each peer (its address and how its
/// session ended) and `progress` sees each session's playout once a second.
pub async fn serve(
    listener: Listener,
    opts: ServeOptions,
    report: impl Fn(std::net::SocketAddr, &SessionEnd) + Clone + Send + Sync + 'static,
    progress: impl Fn(std::net::SocketAddr, &Playout) + Clone + Send + Sync + 'static,
) -> Result<(), lowtide::Error> {
    let slots = Arc::new(tokio::sync::Semaphore::new(opts.max_sessions.max(1)));
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<bool>();
    let mut served = 0u32;
    // One accept future across iterations: with TLS, `accept` runs a handshake, and dropping
    // it when another branch fires would drop that peer's connection.
    let mut next = std::pin::pin!(listener.accept());
    loop {
        tokio::select! {
            accepted = &mut next => {
                next.set(listener.accept());
                let ch = match accepted {
                    Ok(ch) => ch,
                    // A connection that failed before it was ours (reset in the backlog,
                    // a socket option refused) is that peer's problem.
                    Err(e) => {
                        tracing::warn!("accepting a connection failed: {e}; serving on");
                        continue;
                    }
                };
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    continue;
                };
                let (done, opts) = (done_tx.clone(), opts.clone());
                let (report, progress) = (report.clone(), progress.clone());
                tokio::spawn(async move {
                    let peer = ch.peer_addr();
                    let end = session(&ch, &opts, |p| progress(peer, p)).await;
                    report(peer, &end);
                    drop(slot);
                    let _ = done.send(matches!(end, SessionEnd::Received { .. }));
                    // A dropped peer may never answer our close: it lingers here, not in the
                    // report or the session count.
                    ch.close(0, "session over").await;
                });
            }
            Some(delivered) = done_rx.recv() => {
                served += u32::from(delivered);
                if opts.sessions.is_some_and(|n| served >= n) {
                    return Ok(());
                }
            }
        }
    }
}

/// Receives one peer (the caller closes the channel).
async fn session(ch: &Channel, opts: &ServeOptions, progress: impl Fn(&Playout)) -> SessionEnd {
    let start = Instant::now() + opts.start_delay;
    let first = tokio::time::timeout(opts.first_message, ch.recv()).await;
    let Ok(Some(first)) = first else {
        let why = match (first, ch.error()) {
            (Err(_), _) => format!("no message within {:?}", opts.first_message),
            (_, Some(e)) => e.to_string(),
            _ => "closed before its first message".into(),
        };
        return SessionEnd::Dropped { why };
    };
    let playout = receive_video(
        ch,
        Some(first),
        opts.fps,
        opts.window_frames,
        opts.tolerance,
        start,
        start + opts.max_session,
        progress,
    )
    .await;
    let error = ch.error().map(|e| e.to_string());
    SessionEnd::Received {
        stats: playout.finish(playout.frames_covered()),
        error,
    }
}
