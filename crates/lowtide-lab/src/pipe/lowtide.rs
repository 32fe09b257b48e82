//! The pipe over lowtide's channel (TCP): one stream of the channel carries the messages;
//! importance, deadlines, cancellation and write times are lowtide's own. Also the channel
//! plumbing the lab's lowtide-only applications share (connect with retries, accept the
//! first peer that delivers, cost meter, `TCP_INFO` sampler, graceful end).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lowtide::{Channel, ChannelConfig, Event, StreamConfig};
use lowtide_traffic::Stop;

use super::{Capabilities, Delivered, MsgId, Offer, PipeEvent};
use crate::stream::{stopped, thread_cpu_s, SendCost};
use crate::tcpinfo::{self, TcpTimeline};
use crate::LabError;

pub(super) const CAPABILITIES: Capabilities = Capabilities {
    waits_for_room: true,
    deadlines: true,
    cancel: true,
    write_times: true,
};

/// The sending end: a channel and the streams the pipe writes to (the pipe's stream `i` is
/// `streams[i]`), which share the channel by its fairness.
pub struct Sender {
    ch: Channel,
    streams: Vec<u64>,
}

impl Sender {
    pub(super) async fn connect(
        dst: SocketAddr,
        cfg: ChannelConfig,
        streams: usize,
    ) -> Result<Self, LabError> {
        let ch = connect(dst, cfg).await?;
        let streams = (0..streams)
            .map(|_| ch.open_stream(StreamConfig::default()))
            .collect::<Result<_, _>>()
            .map_err(transport("opening a stream"))?;
        Ok(Self { ch, streams })
    }

    pub fn channel(&self) -> &Channel {
        &self.ch
    }

    pub(super) async fn writable(&self) -> Result<(), LabError> {
        self.ch
            .writable()
            .await
            .map_err(transport("waiting to write"))
    }

    /// Queues `msg` on the pipe's stream `stream`.
    pub(super) fn send(&self, stream: usize, msg: lowtide::Message) -> Result<Offer, LabError> {
        let stream = *self
            .streams
            .get(stream)
            .ok_or_else(|| LabError::io("sending", format!("the pipe has no stream {stream}")))?;
        let id = self.ch.send(stream, msg).map_err(transport("sending"))?;
        Ok(Offer::Taken(MsgId::Lowtide(id)))
    }

    /// The next message's fate, waiting until `until`; `None` then, or when the channel ends.
    pub(super) async fn next_event(&self, until: Instant) -> Option<PipeEvent> {
        let until = tokio::time::Instant::from_std(until);
        loop {
            let event = tokio::select! {
                e = self.ch.next_event() => e?,
                _ = tokio::time::sleep_until(until) => return None,
            };
            if let Some(e) = fate(event) {
                return Some(e);
            }
        }
    }

    /// Written and cancelled messages; the channel's other events are drained unread.
    pub(super) fn events(&self) -> Vec<PipeEvent> {
        self.ch
            .drain_events()
            .into_iter()
            .filter_map(fate)
            .collect()
    }

    pub(super) fn cancel(&self, id: MsgId) -> bool {
        match id {
            MsgId::Lowtide(id) => self.ch.cancel(id),
            _ => false,
        }
    }

    pub(super) fn one_segment_payload(&self) -> Option<usize> {
        self.ch.one_segment_payload(*self.streams.first()?, 0)
    }

    pub(super) async fn finish(self, until: Instant, stop: &Stop) -> Vec<PipeEvent> {
        finish_gracefully(&self.ch, until, stop).await;
        self.events()
    }
}

/// A message's fate among the channel's events: written whole, or cancelled (by the
/// application or at its deadline).
fn fate(e: Event) -> Option<PipeEvent> {
    match e {
        Event::Written { id, times } => Some(PipeEvent::Written {
            id: MsgId::Lowtide(id),
            last_write: times.last_write,
        }),
        Event::Cancelled { id, .. } => Some(PipeEvent::Dropped {
            id: MsgId::Lowtide(id),
        }),
        _ => None,
    }
}

/// The receiving end: the accepted channel, and its first message until it is read.
pub struct Receiver {
    ch: Channel,
    first: Option<lowtide::Received>,
}

impl Receiver {
    pub(super) async fn accept(
        addr: SocketAddr,
        cfg: ChannelConfig,
        deadline: Instant,
        stop: &Stop,
    ) -> Result<Self, LabError> {
        let listener = listen(addr, cfg).await?;
        let (ch, first) = accept_first(&listener, deadline, stop).await?;
        Ok(Self {
            ch,
            first: Some(first),
        })
    }

    pub fn channel(&self) -> &Channel {
        &self.ch
    }

    pub(super) async fn recv(&mut self) -> Option<Delivered> {
        let m = match self.first.take() {
            Some(m) => m,
            None => self.ch.recv().await?,
        };
        Some(Delivered {
            data: m.data,
            at: m.received_at,
        })
    }

    pub(super) async fn close(self) {
        self.ch.close(0, "measurement over").await;
    }
}

/// Maps a channel's error to the lab's, naming what was attempted.
pub(crate) fn transport(what: &str) -> impl FnOnce(lowtide::Error) -> LabError + '_ {
    move |error| LabError::Transport {
        what: what.to_string(),
        error,
    }
}

/// Connects to a stream receiver, retrying for 5 s while its listener comes up.
pub(crate) async fn connect(dst: SocketAddr, cfg: ChannelConfig) -> Result<Channel, LabError> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match lowtide::connect(dst, cfg.clone()).await {
            Ok(ch) => return Ok(ch),
            Err(e) if Instant::now() < deadline => {
                tracing::debug!("connect to {dst}: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => return Err(transport("connecting")(e)),
        }
    }
}

/// Accepts channels on `listener` until one delivers its first message, and returns it with
/// that message. A peer that fails before (garbage, a wrong protocol, a close) is logged and
/// the next connection accepted, so a bad peer cannot end the measurement.
pub(crate) async fn accept_first(
    listener: &lowtide::Listener,
    deadline: Instant,
    stop: &Stop,
) -> Result<(Channel, lowtide::Received), LabError> {
    let deadline_t = tokio::time::Instant::from_std(deadline);
    loop {
        let ch = tokio::select! {
            r = listener.accept() => r.map_err(transport("accepting"))?,
            _ = tokio::time::sleep_until(deadline_t) => {
                return Err(LabError::io("accepting the measured stream", "no sender within the run"));
            }
            _ = stopped(stop) => return Err(LabError::Stopped),
        };
        let first = tokio::select! {
            m = ch.recv() => m,
            _ = tokio::time::sleep_until(deadline_t) => None,
            _ = stopped(stop) => return Err(LabError::Stopped),
        };
        match first {
            Some(m) => return Ok((ch, m)),
            None => {
                let why = ch.error().map_or_else(
                    || "closed before its first message".to_string(),
                    |e| e.to_string(),
                );
                tracing::warn!(peer = %ch.peer_addr(), "a peer of the measured stream failed: {why}; accepting the next");
            }
        }
    }
}

/// Binds the measured stream's listener.
pub(crate) async fn listen(
    addr: SocketAddr,
    cfg: ChannelConfig,
) -> Result<lowtide::Listener, LabError> {
    lowtide::listen(addr, cfg)
        .await
        .map_err(transport("listening"))
}

/// Measures a sender thread's [`SendCost`] from its creation to [`CostMeter::finish`].
pub(crate) struct CostMeter(Option<(f64, f64)>);

impl CostMeter {
    pub(crate) fn start() -> Self {
        Self(thread_cpu_s())
    }

    pub(crate) fn finish(&self, ch: &Channel, messages: u64) -> SendCost {
        let stats = ch.stats();
        let cpu = thread_cpu_s()
            .zip(self.0)
            .map(|((u1, s1), (u0, s0))| (u1 - u0, s1 - s0));
        SendCost {
            messages,
            cpu_user_s: cpu.map(|c| c.0),
            cpu_system_s: cpu.map(|c| c.1),
            driver_wakeups: ch.driver_wakeups(),
            write_calls: stats.write_calls,
            bytes_written: stats.bytes_written,
            controller_blocked: stats.controller_blocked,
            failovers: stats.failovers,
            false_failovers: stats.false_failovers,
            stalls_held_by_acks: stats.stalls_held_by_acks,
            reserve_held: stats.reserve_held,
            reserve_bytes_used: stats.reserve_bytes_used,
            copies_sent: stats.lane.copies_sent,
            copy_bytes: stats.lane.copy_bytes,
            copies_first: 0,
            copies_late: 0,
            quick_acks: 0,
        }
    }
}

/// The sender's `TCP_INFO` sampler, on the sender's runtime.
pub(crate) struct Sampler {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<TcpTimeline>,
}

impl Sampler {
    pub(crate) fn start(ch: &Channel, start: Instant) -> Self {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(tcpinfo::sample_until(ch.active_fd(), start, rx));
        Self {
            stop: Some(tx),
            task,
        }
    }

    /// Stops sampling (before the channel closes) and returns what was sampled.
    pub(crate) async fn finish(mut self) -> TcpTimeline {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        self.task.await.unwrap_or_else(|e| TcpTimeline {
            errors: 1,
            first_error: Some(format!("the TCP_INFO sampler failed: {e}")),
            ..TcpTimeline::default()
        })
    }
}

/// Ends a sender's channel gracefully: what is queued keeps flowing until `until` (the
/// receiver's end) or the trial stops, so the receiver can still count it; then it closes.
pub(crate) async fn finish_gracefully(ch: &Channel, until: Instant, stop: &Stop) {
    tokio::select! {
        _ = tokio::time::timeout_at(tokio::time::Instant::from_std(until), ch.flush()) => {}
        _ = stopped(stop) => {}
    }
    ch.close(0, "measurement over").await;
}
