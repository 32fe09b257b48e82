//! The measured stream: the sender writes one MSS-sized message each time the transport can
//! take more (`Channel::writable`), stamped with the send time; the receiver subtracts it from
//! the time the message was read from the socket. With the `Unlimited` controller this is
//! plain TCP: the kernel's send buffer fills and the latency is what an application sees.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lowtide::Message;
use lowtide_traffic::Stop;
use serde::{Deserialize, Serialize};

use crate::pipe::{Offer, PipeEvent, RecvPipe, SendPipe, Transport};
use crate::tcpinfo::TcpTimeline;
use crate::{clock, LabError};

/// Payload of one message: one MSS of a 1500-byte MTU path. It starts with the send time
/// (8 bytes) and the message's number (8 bytes).
pub const MESSAGE_BYTES: usize = 1448;

/// One message's latency (or a probe's).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// When it was sent, seconds since the run started.
    pub sent_s: f64,
    /// Send to read, ms; for a censored sample, send to the end of the measurement.
    pub latency_ms: f64,
    /// Never delivered: `latency_ms` is only a lower bound.
    #[serde(default)]
    pub censored: bool,
    /// A message over lowtide: send to its last byte's write into the kernel, ms (the time
    /// it waited in lowtide's queue); `None` for probes, other transports and messages never
    /// written whole.
    #[serde(default)]
    pub written_ms: Option<f64>,
}

impl Sample {
    pub fn delivered(sent_s: f64, latency_ms: f64) -> Self {
        Self {
            sent_s,
            latency_ms,
            censored: false,
            written_ms: None,
        }
    }

    /// A message sent at `sent_s` and not delivered when the receiver stopped at `end_s`.
    pub fn censored(sent_s: f64, end_s: f64) -> Self {
        Self {
            sent_s,
            latency_ms: (end_s - sent_s).max(0.0) * 1e3,
            censored: true,
            written_ms: None,
        }
    }
}

/// What the receiver saw: each delivered message with its number.
#[derive(Debug, Clone, Default)]
pub struct Received {
    pub messages: Vec<(u64, Sample)>,
    pub bytes: u64,
}

/// What the sender did: the send time of message `k` is `sent_s[k]`, its last byte's write
/// into the kernel `written_s[k]` (seconds since the run started; empty or `None` where not
/// known).
#[derive(Debug, Clone, Default)]
pub struct StreamSent {
    pub cost: SendCost,
    pub sent_s: Vec<f64>,
    pub written_s: Vec<Option<f64>>,
    pub tcp: TcpTimeline,
}

/// Every message the sender sent, as a sample: delivered ones with their latency, the rest
/// censored at `end_s`. Numbers the sender never used, or delivered twice, are counted in
/// the returned [`DeliveryErrors`] (the transport promised exactly once).
pub fn join_sent_and_received(
    sent: &StreamSent,
    received: &Received,
    end_s: f64,
) -> (Vec<Sample>, DeliveryErrors) {
    let mut seen = vec![false; sent.sent_s.len()];
    let mut out = Vec::with_capacity(sent.sent_s.len());
    let mut errors = DeliveryErrors::default();
    let written_ms = |k: usize| {
        let w = sent.written_s.get(k).copied().flatten()?;
        Some((w - sent.sent_s[k]).max(0.0) * 1e3)
    };
    for (seq, sample) in &received.messages {
        match seen.get_mut(*seq as usize) {
            Some(s) if !*s => {
                *s = true;
                out.push(Sample {
                    written_ms: written_ms(*seq as usize),
                    ..*sample
                });
            }
            Some(_) => errors.duplicated += 1,
            None => errors.unknown += 1,
        }
    }
    for (k, t) in sent.sent_s.iter().enumerate() {
        if !seen[k] {
            out.push(Sample {
                written_ms: written_ms(k),
                ..Sample::censored(*t, end_s)
            });
        }
    }
    out.sort_by(|a, b| a.sent_s.total_cmp(&b.sent_s));
    (out, errors)
}

/// Messages the receiver got that break exactly-once delivery.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct DeliveryErrors {
    /// Delivered more than once.
    pub duplicated: u64,
    /// Carrying a number the sender never used.
    pub unknown: u64,
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, LabError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| LabError::io("building a tokio runtime", e))
}

/// What sending cost (Goel et al. Table I): the sender thread runs the application and the
/// transport's driver on one current-thread runtime, so its CPU time is the sender's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SendCost {
    pub messages: u64,
    /// User and system CPU of the sender thread while streaming, seconds; `None` where the
    /// thread's CPU time could not be read.
    pub cpu_user_s: Option<f64>,
    pub cpu_system_s: Option<f64>,
    /// Times the transport's driver woke up (epoll wake-ups and timers).
    pub driver_wakeups: u64,
    /// `writev` calls that handed bytes to the kernel.
    pub write_calls: u64,
    pub bytes_written: u64,
    /// Write opportunities the latency controller refused.
    pub controller_blocked: u64,
    /// Failover variants: switches to a backup connection, and how many of them the old
    /// connection's late P-ACKs mark as false positives.
    #[serde(default)]
    pub failovers: u64,
    #[serde(default)]
    pub false_failovers: u64,
    /// Failover variants: stall verdicts of the P-ACK rule the kernel's ACK clock held back
    /// (`lowtide_proto::failover::stall`).
    #[serde(default)]
    pub stalls_held_by_acks: u64,
    /// Importance-reserve variants: staging passes in which the reserve held less important
    /// data back, and bytes of important data staged into it (`lowtide_proto::reserve`).
    #[serde(default)]
    pub reserve_held: u64,
    #[serde(default)]
    pub reserve_bytes_used: u64,
    /// Duplicate-lane variants: copies written to the lane and their message bytes (sender),
    /// copies delivered first and copies dropped as second (receiver;
    /// `lowtide_proto::failover::duplicate`).
    #[serde(default)]
    pub copies_sent: u64,
    #[serde(default)]
    pub copy_bytes: u64,
    #[serde(default)]
    pub copies_first: u64,
    #[serde(default)]
    pub copies_late: u64,
    /// Receiver: reads of the lane that ended inside a copy, acknowledged at once.
    #[serde(default)]
    pub quick_acks: u64,
}

impl SendCost {
    /// The duplicate lane's receiving counters (`lane`, read at the receiver), beside the
    /// sender's.
    pub(crate) fn add_receiver_lane(
        &mut self,
        lane: &lowtide::proto::failover::duplicate::DuplicateStats,
    ) {
        self.copies_first = lane.copies_first;
        self.copies_late = lane.copies_late;
        self.quick_acks = lane.quick_acks;
    }
}

/// User and system CPU time of the calling thread, seconds (`/proc/thread-self/stat`, in
/// USER_HZ = 100 ticks; `None` where it cannot be read).
pub fn thread_cpu_s() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    // Fields after the command name (which may hold spaces) start at field 3, `state`.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut f = rest.split(' ').skip(11);
    let user: f64 = f.next()?.parse().ok()?;
    let system: f64 = f.next()?.parse().ok()?;
    Some((user / 100.0, system / 100.0))
}

/// How often blocking loops look at the trial's stop flag.
pub(crate) const STOP_POLL: Duration = Duration::from_millis(100);

/// Resolves once `stop` is set (or its deadline passed).
pub(crate) async fn stopped(stop: &Stop) {
    while !stop.is_stopped() {
        tokio::time::sleep(STOP_POLL).await;
    }
}

/// Streams from `start` until `end` over any pipe, then lets what is queued flow until
/// `receive_end`; blocking (builds its own runtime), for a thread inside a sender host.
/// A message goes whenever the transport takes one (lowtide: `Channel::writable`; QUIC: a
/// stream of its window; TFRC: a full buffer refuses it and the sender retries after
/// 2 ms (`FULL_WAIT`), keeping the buffer full as a bulk sender does).
///
/// Each message is [`MESSAGE_BYTES`], except: with `one_segment` (lowtide), what fills exactly
/// one segment with lowtide's frame header (`Channel::one_segment_payload`); over TFRC, at most
/// one data packet (a bigger message would leave as a full packet and a tiny one).
pub fn send(
    dst: SocketAddr,
    transport: Transport,
    one_segment: bool,
    start: Instant,
    end: Instant,
    receive_end: Instant,
    stop: Stop,
) -> Result<StreamSent, LabError> {
    runtime()?.block_on(async move {
        let mut pipe = SendPipe::connect(dst, transport, 1).await?;
        tokio::time::sleep_until(tokio::time::Instant::from_std(start)).await;
        let waits = pipe.capabilities().waits_for_room;
        let meter = pipe.start_meter(start);
        let mut payload = vec![0x5a; message_bytes(&pipe, one_segment)];
        let mut sent_s = vec![];
        let mut written_s = vec![];
        let end_t = tokio::time::Instant::from_std(end);
        loop {
            if !waits && (Instant::now() >= end || stop.is_stopped()) {
                break;
            }
            tokio::select! {
                r = pipe.writable() => r?,
                _ = tokio::time::sleep_until(end_t) => break,
                _ = stopped(&stop) => break,
            }
            if one_segment {
                payload.resize(message_bytes(&pipe, true), 0x5a);
            }
            let now = Instant::now();
            stamp(&mut payload, now, sent_s.len() as u64);
            match pipe.send(Message::new(payload.clone()), end, &stop).await? {
                Offer::Taken(_) => sent_s.push(now.saturating_duration_since(start).as_secs_f64()),
                Offer::Full => tokio::time::sleep(FULL_WAIT).await,
                // Not taken whole by the end: withdrawn, so no truncated message is delivered
                // (it counts as undelivered, sent at the measurement's end).
                Offer::CutOff => {
                    sent_s.push(now.saturating_duration_since(start).as_secs_f64());
                    break;
                }
            }
            note_writes(pipe.events(), start, &mut written_s);
        }
        let (cost, tcp) = pipe.stop_meter(meter, sent_s.len() as u64).await;
        let late = pipe.finish(receive_end, &stop).await;
        note_writes(late, start, &mut written_s);
        written_s.resize(sent_s.len(), None);
        Ok(StreamSent {
            cost,
            sent_s,
            written_s,
            tcp,
        })
    })
}

/// How long a writer facing a full send buffer (TFRC) waits before it tries again.
const FULL_WAIT: Duration = Duration::from_millis(2);

/// Bytes of the next message (see [`send`]).
fn message_bytes(pipe: &SendPipe, one_segment: bool) -> usize {
    match pipe.packet_payload() {
        Some(n) if one_segment => n.max(STAMP_BYTES),
        Some(n) if matches!(pipe, SendPipe::Tfrc(_)) => n.min(MESSAGE_BYTES),
        _ => MESSAGE_BYTES,
    }
}

/// Keeps the last write into the kernel of every message the pipe reports written whole
/// (a resent copy after a failover replaces the first), as seconds since `start`, at the
/// message's number.
fn note_writes(events: Vec<PipeEvent>, start: Instant, written_s: &mut Vec<Option<f64>>) {
    for e in events {
        if let PipeEvent::Written { id, last_write } = e {
            let (Some(w), Ok(k)) = (last_write, usize::try_from(id.seq())) else {
                continue;
            };
            if written_s.len() <= k {
                written_s.resize(k + 1, None);
            }
            written_s[k] = Some(w.saturating_duration_since(start).as_secs_f64());
        }
    }
}

/// Bytes of a message's stamp ([`stamp`]).
const STAMP_BYTES: usize = 16;

/// Stamps a message: the send time `now` (lab clock) and its number `seq`, 8 bytes each.
pub(crate) fn stamp(payload: &mut [u8], now: Instant, seq: u64) {
    payload[..8].copy_from_slice(&clock::to_wire(now).to_be_bytes());
    payload[8..16].copy_from_slice(&seq.to_be_bytes());
}

/// A message stamped by a sender of this lab (send time, then number, 8 bytes each) that
/// arrived at `at`: its number and latency sample; `None` when it is too short to be one.
pub(crate) fn stamped_sample(data: &[u8], at: Instant, start: Instant) -> Option<(u64, Sample)> {
    let word = |b: &[u8]| u64::from_be_bytes(b.try_into().unwrap_or_default());
    let (stamp, seq) = (data.get(..8)?, data.get(8..16)?);
    let sent = clock::from_wire(word(stamp));
    Some((
        word(seq),
        Sample::delivered(
            sent.saturating_duration_since(start).as_secs_f64(),
            at.saturating_duration_since(sent).as_secs_f64() * 1e3,
        ),
    ))
}

/// Accepts the stream on `addr` over any pipe and reads until `end`; blocking, for a
/// receiver host.
pub fn receive(
    addr: SocketAddr,
    transport: Transport,
    start: Instant,
    end: Instant,
    stop: Stop,
) -> Result<Received, LabError> {
    runtime()?.block_on(async move {
        let mut pipe = RecvPipe::accept(addr, transport, MESSAGE_BYTES, end, &stop).await?;
        let mut out = Received::default();
        pipe.recv_until(end, &stop, |m| {
            if let Some(x) = stamped_sample(&m.data, m.at, start) {
                out.bytes += m.data.len() as u64;
                out.messages.push(x);
            }
        })
        .await;
        pipe.close().await;
        Ok(out)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_cpu_time_grows_with_work() {
        // Spin until the kernel's own count (getrusage) says 300 ms of CPU were spent, however
        // long a loaded machine takes, then compare /proc's 10 ms ticks with it.
        let (u0, s0) = thread_cpu_s().expect("/proc/thread-self/stat is readable");
        let c0 = lowtide::sys::thread_cpu_time().unwrap();
        let t = Instant::now();
        let mut x = 0u64;
        while lowtide::sys::thread_cpu_time().unwrap() - c0 < Duration::from_millis(300)
            && t.elapsed() < Duration::from_secs(60)
        {
            for _ in 0..10_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
        }
        std::hint::black_box(x);
        let (u1, s1) = thread_cpu_s().unwrap();
        assert!(u1 + s1 - u0 - s0 >= 0.25, "{u0} {s0} -> {u1} {s1}");
    }

    #[test]
    fn a_message_carries_its_write_into_the_kernel_after_its_send() {
        let sent = StreamSent {
            sent_s: vec![1.0, 2.0, 3.0],
            written_s: vec![Some(1.004), None, Some(3.5)],
            ..StreamSent::default()
        };
        let received = Received {
            messages: vec![
                (0, Sample::delivered(1.0, 50.0)),
                (1, Sample::delivered(2.0, 60.0)),
            ],
            bytes: 0,
        };
        let (samples, _) = join_sent_and_received(&sent, &received, 10.0);
        let written: Vec<Option<f64>> = samples.iter().map(|s| s.written_ms).collect();
        assert!((written[0].unwrap() - 4.0).abs() < 1e-9, "{written:?}");
        assert_eq!(written[1], None, "never reported written");
        assert!(
            (written[2].unwrap() - 500.0).abs() < 1e-9,
            "censored, written"
        );
        assert!(samples[2].censored);
    }

    #[test]
    fn every_message_sent_is_delivered_or_censored_once() {
        let sent = StreamSent {
            sent_s: vec![1.0, 2.0, 3.0, 4.0],
            ..StreamSent::default()
        };
        let received = Received {
            messages: vec![
                (0, Sample::delivered(1.0, 50.0)),
                (2, Sample::delivered(3.0, 70.0)),
                (2, Sample::delivered(3.0, 80.0)),
                (9, Sample::delivered(3.5, 10.0)),
            ],
            bytes: 0,
        };
        let (samples, errors) = join_sent_and_received(&sent, &received, 10.0);
        assert_eq!(
            samples,
            vec![
                Sample::delivered(1.0, 50.0),
                Sample::censored(2.0, 10.0),
                Sample::delivered(3.0, 70.0),
                Sample::censored(4.0, 10.0),
            ]
        );
        assert_eq!(samples[1].latency_ms, 8000.0);
        assert_eq!(
            errors,
            DeliveryErrors {
                duplicated: 1,
                unknown: 1
            }
        );
    }
}
