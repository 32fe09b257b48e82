//! A channel handle: a `lowtide::Channel` plus an inbox that a pump task fills, so C can take
//! messages and events without blocking and wait on one fd.
//!
//! The pump moves complete messages and events from the channel into bounded queues
//! ([`LOWTIDE_INBOX_MESSAGES`], [`LOWTIDE_INBOX_BYTES`], [`LOWTIDE_INBOX_EVENTS`]); when a queue is full it
//! waits for the application, so the channel's own receive budget (`max_reassembly_bytes`)
//! fills and TCP flow control slows the peer: memory stays bounded and nothing is dropped
//! silently (events beyond the channel's `max_events` are counted in `events_dropped`).

use std::collections::VecDeque;
use std::ffi::c_char;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lowtide::{Channel, Message, MessageId, Received, StreamConfig};
use tokio::sync::Notify;

use crate::args::{self, non_null};
use crate::context::{lowtide_ctx, Context};
use crate::event::{lowtide_event, LOWTIDE_EVENT_FINISHED, LOWTIDE_EVENT_WRITABLE};
use crate::eventfd::Readiness;
use crate::handles::{self, Kind, Object};
use crate::status::*;

/// A channel handle (0 is never valid).
#[allow(non_camel_case_types)]
pub type lowtide_channel = u64;

/// Complete messages held for the application before the pump waits.
pub const LOWTIDE_INBOX_MESSAGES: usize = 4096;
/// Payload bytes held for the application before the pump waits.
pub const LOWTIDE_INBOX_BYTES: usize = 4 << 20;
/// Events held for the application before the pump waits.
pub const LOWTIDE_INBOX_EVENTS: usize = 4096;

/// Longest `lowtide_send` deadline, µs (one day; a real-time message with a later deadline
/// is a unit mistake).
pub const LOWTIDE_MAX_DEADLINE_US: u64 = 86_400_000_000;

/// Identifies a message we sent (for `lowtide_cancel` and events).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct lowtide_msg_id {
    /// Stream id.
    pub stream: u64,
    /// Sequence number within the stream.
    pub seq: u64,
    /// Importance it was sent with.
    pub importance: u8,
}

/// A received message's metadata (`lowtide_recv`).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct lowtide_message {
    /// Stream id.
    pub stream: u64,
    /// Sequence number within the stream.
    pub seq: u64,
    /// Payload length, bytes (also set when the buffer was too small).
    pub len: u64,
    /// Sender's enqueue time, µs since the sender's epoch.
    pub send_time_us: u64,
    /// Importance given by the sender.
    pub importance: u8,
}

/// Counters of a channel (`lowtide_get_stats`); every cancel and drop by reason.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct lowtide_stats {
    /// Messages accepted by `lowtide_send`.
    pub messages_queued: u64,
    /// Messages completely written to the kernel.
    pub messages_written: u64,
    /// Messages acknowledged by the receiver.
    pub messages_acked: u64,
    /// Cancelled by the application before any byte was staged.
    pub cancelled_unsent: u64,
    /// Cancelled by the application after some bytes were staged.
    pub cancelled_partial: u64,
    /// Deadline passed before any byte was staged.
    pub expired_unsent: u64,
    /// Deadline passed after some bytes were staged.
    pub expired_partial: u64,
    /// Bytes handed to the kernel.
    pub bytes_written: u64,
    /// Messages received complete.
    pub messages_received: u64,
    /// Messages the peer withdrew.
    pub peer_cancelled: u64,
    /// Bytes queued in lowtide, not yet handed to the kernel.
    pub queued_bytes: u64,
    /// Events dropped because the application did not take them (channel `max_events`).
    pub events_dropped: u64,
    /// Messages waiting in the inbox for `lowtide_recv`.
    pub inbox_messages: u64,
    /// Events waiting for `lowtide_poll_event`.
    pub inbox_events: u64,
}

#[derive(Default)]
struct Inbox {
    messages: VecDeque<Received>,
    message_bytes: usize,
    events: VecDeque<lowtide_event>,
    /// No more messages will come.
    messages_done: bool,
    /// The FINISHED event was taken: no more events will come.
    finished_taken: bool,
}

/// What the pump and the C calls share.
struct Shared {
    inbox: Mutex<(Inbox, Readiness)>,
    /// The application took something (the pump may continue). Woken with `notify_waiters`:
    /// the message and the event halves of the pump both wait on it.
    taken: Notify,
    /// The application asked for a WRITABLE event.
    want_writable: Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, (Inbox, Readiness)> {
        self.inbox.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Changes the inbox and keeps the fd readable iff something is waiting.
    fn update<T>(&self, f: impl FnOnce(&mut Inbox) -> T) -> T {
        let mut g = self.lock();
        let (inbox, ready) = &mut *g;
        let out = f(inbox);
        ready.set(!inbox.messages.is_empty() || !inbox.events.is_empty());
        out
    }

    async fn wait_for_room(&self, room: impl Fn(&Inbox) -> bool) {
        loop {
            let taken = self.taken.notified();
            tokio::pin!(taken);
            taken.as_mut().enable();
            if room(&self.lock().0) {
                return;
            }
            taken.await;
        }
    }

    fn push_event(&self, e: lowtide_event) {
        self.update(|i| i.events.push_back(e));
    }
}

pub(crate) struct ChannelObject {
    ctx: Arc<Context>,
    channel: Channel,
    shared: Arc<Shared>,
    fd: i32,
    pump: tokio::task::JoinHandle<()>,
}

impl Kind for ChannelObject {
    const NAME: &'static str = "channel";
    fn wrap(this: Arc<Self>) -> Object {
        Object::Channel(this)
    }
    fn unwrap(object: &Object) -> Option<&Arc<Self>> {
        match object {
            Object::Channel(c) => Some(c),
            _ => None,
        }
    }
}

impl ChannelObject {
    /// Wraps an established channel and starts its pump; returns the new handle.
    pub(crate) fn register(ctx: Arc<Context>, channel: Channel) -> Result<lowtide_channel> {
        let ready = Readiness::new().or_else(|e| fail(LOWTIDE_ERR_IO, format!("eventfd: {e}")))?;
        let fd = ready.raw();
        let shared = Arc::new(Shared {
            inbox: Mutex::new((Inbox::default(), ready)),
            taken: Notify::new(),
            want_writable: Notify::new(),
        });
        let pump = ctx.handle().spawn(pump(channel.clone(), shared.clone()));
        handles::insert(Arc::new(ChannelObject {
            ctx,
            channel,
            shared,
            fd,
            pump,
        }))
    }
}

impl Drop for ChannelObject {
    fn drop(&mut self) {
        self.pump.abort();
        if !self.channel.is_finished() {
            let ch = self.channel.clone();
            self.ctx
                .handle()
                .spawn(async move { ch.close(0, "handle freed").await });
        }
    }
}

async fn pump(ch: Channel, shared: Arc<Shared>) {
    let messages = async {
        let mut batch = Vec::new();
        loop {
            shared
                .wait_for_room(|i| {
                    i.messages.len() < LOWTIDE_INBOX_MESSAGES
                        && i.message_bytes < LOWTIDE_INBOX_BYTES
                })
                .await;
            if ch.recv_many(&mut batch, 256).await == 0 {
                break;
            }
            shared.update(|i| {
                for m in batch.drain(..) {
                    i.message_bytes += m.data.len();
                    i.messages.push_back(m);
                }
            });
        }
        shared.update(|i| i.messages_done = true);
    };
    let events = async {
        loop {
            shared
                .wait_for_room(|i| i.events.len() < LOWTIDE_INBOX_EVENTS)
                .await;
            match ch.next_event().await {
                Some(e) => shared.push_event(lowtide_event::from_event(&e)),
                None => break,
            }
        }
    };
    let writable = async {
        loop {
            shared.want_writable.notified().await;
            if ch.writable().await.is_err() {
                // FINISHED follows from the other two.
                std::future::pending::<()>().await;
            }
            shared.push_event(lowtide_event::new(LOWTIDE_EVENT_WRITABLE));
        }
    };
    tokio::select! {
        _ = async { tokio::join!(messages, events) } => {}
        _ = writable => {}
    }
    let finished = match ch.error() {
        None => lowtide_event::new(LOWTIDE_EVENT_FINISHED),
        Some(e) => {
            let fail = Fail::from(e);
            lowtide_event {
                code: fail.status as i64,
                ..lowtide_event::new(LOWTIDE_EVENT_FINISHED)
            }
            .with_text(&fail.message)
        }
    };
    shared.push_event(finished);
}

/// Connects to `addr` ("host:port", numeric IP) and waits at most `timeout_ms` (0: 10 s).
/// `config_json` is a `ChannelConfig` as JSON (NULL: defaults; docs/c-api.md).
///
/// # Safety
/// `addr`, `config_json` are NULL or NUL-terminated strings; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn lowtide_connect(
    ctx: lowtide_ctx,
    addr: *const c_char,
    config_json: *const c_char,
    timeout_ms: u32,
    out: *mut lowtide_channel,
) -> lowtide_status {
    guard("lowtide_connect", || {
        non_null(out, "out")?;
        // SAFETY: forwarded contract.
        let (addr, cfg) = unsafe { parse_addr_config(addr, config_json)? };
        let ctx = handles::get::<Context>(ctx)?;
        let timeout = Duration::from_millis(if timeout_ms == 0 {
            10_000
        } else {
            timeout_ms.into()
        });
        let channel = ctx
            .run(async move { tokio::time::timeout(timeout, lowtide::connect(addr, cfg)).await })?;
        let channel = match channel {
            Ok(c) => c?,
            Err(_) => {
                return fail(
                    LOWTIDE_ERR_TIMEOUT,
                    format!("connect({addr}) took longer than {timeout:?}"),
                )
            }
        };
        let h = ChannelObject::register(ctx, channel)?;
        // SAFETY: checked non-NULL; writable per the contract.
        unsafe { args::write_out(out, h, "out") }
    })
}

/// Parses an address and an optional JSON `ChannelConfig`.
///
/// # Safety
/// Both are NULL or NUL-terminated strings.
pub(crate) unsafe fn parse_addr_config(
    addr: *const c_char,
    config_json: *const c_char,
) -> Result<(std::net::SocketAddr, lowtide::ChannelConfig)> {
    // SAFETY: forwarded contract.
    let addr_s = unsafe { args::str_arg(addr, "addr")? };
    let addr = addr_s.parse().or_else(|e| {
        fail(
            LOWTIDE_ERR_INVALID,
            format!("addr {addr_s:?} is not IP:port ({e})"),
        )
    })?;
    // SAFETY: forwarded contract.
    let cfg = match unsafe { args::opt_str_arg(config_json, "config_json")? } {
        None => lowtide::ChannelConfig::default(),
        Some(j) => serde_json::from_str(j)
            .or_else(|e| fail(LOWTIDE_ERR_CONFIG, format!("config_json: {e}")))?,
    };
    cfg.validate().map_err(lowtide::Error::from)?;
    Ok((addr, cfg))
}

/// The channel's fd: readable while a message or an event is waiting. Valid until the
/// handle is freed; do not read or close it.
///
/// # Safety
/// `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn lowtide_channel_fd(
    ch: lowtide_channel,
    out: *mut std::ffi::c_int,
) -> lowtide_status {
    guard("lowtide_channel_fd", || {
        let c = handles::get::<ChannelObject>(ch)?;
        // SAFETY: forwarded contract.
        unsafe { args::write_out(out, c.fd, "out") }
    })
}

/// Opens a stream with `weight` (0.001..=1e6; its share against the channel's other streams).
///
/// # Safety
/// `out_stream` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn lowtide_open_stream(
    ch: lowtide_channel,
    weight: f64,
    out_stream: *mut u64,
) -> lowtide_status {
    guard("lowtide_open_stream", || {
        non_null(out_stream, "out_stream")?;
        let c = handles::get::<ChannelObject>(ch)?;
        let id = c.channel.open_stream(StreamConfig { weight })?;
        // SAFETY: forwarded contract.
        unsafe { args::write_out(out_stream, id, "out_stream") }
    })
}

/// Closes our direction of a stream once its queue drains.
#[no_mangle]
pub extern "C" fn lowtide_close_stream(ch: lowtide_channel, stream: u64) -> lowtide_status {
    guard("lowtide_close_stream", || {
        let c = handles::get::<ChannelObject>(ch)?;
        c.channel.close_stream(stream)?;
        Ok(())
    })
}

/// Queues a message (copied) without waiting. Higher `importance` preempts lower within the
/// stream; with `deadline_us` > 0 the message is withdrawn if not completely written to the
/// kernel within that many µs (a CANCELLED event with reason EXPIRED). `out_id` may be NULL.
///
/// # Safety
/// `data` points to `len` readable bytes (may be NULL when `len` is 0); `out_id` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn lowtide_send(
    ch: lowtide_channel,
    stream: u64,
    data: *const u8,
    len: usize,
    importance: u8,
    deadline_us: u64,
    out_id: *mut lowtide_msg_id,
) -> lowtide_status {
    guard("lowtide_send", || {
        // SAFETY: forwarded contract.
        let payload = unsafe { args::bytes_arg(data, len, "data")? };
        let c = handles::get::<ChannelObject>(ch)?;
        let mut msg = Message::new(bytes::Bytes::copy_from_slice(payload)).importance(importance);
        if deadline_us > LOWTIDE_MAX_DEADLINE_US {
            return fail(
                LOWTIDE_ERR_INVALID,
                format!("deadline_us = {deadline_us} is outside 0..={LOWTIDE_MAX_DEADLINE_US} (0: none)"),
            );
        }
        if deadline_us > 0 {
            msg = msg.deadline(Instant::now() + Duration::from_micros(deadline_us));
        }
        let id = c.channel.send(stream, msg)?;
        if !out_id.is_null() {
            let id = lowtide_msg_id {
                stream: id.stream,
                seq: id.seq,
                importance: id.importance(),
            };
            // SAFETY: non-NULL and writable per the contract.
            unsafe { out_id.write(id) };
        }
        Ok(())
    })
}

/// Withdraws a message not yet completely written: `LOWTIDE_OK` (a CANCELLED event follows;
/// a partly written message is aborted at the receiver) or `LOWTIDE_ERR_TOO_LATE`.
#[no_mangle]
pub extern "C" fn lowtide_cancel(ch: lowtide_channel, id: lowtide_msg_id) -> lowtide_status {
    guard("lowtide_cancel", || {
        let c = handles::get::<ChannelObject>(ch)?;
        if c.channel
            .cancel(MessageId::from_parts(id.stream, id.seq, id.importance))
        {
            Ok(())
        } else {
            fail(
                LOWTIDE_ERR_TOO_LATE,
                format!(
                    "message {}/{} is already written, withdrawn, or was never sent",
                    id.stream, id.seq
                ),
            )
        }
    })
}

/// Asks for one WRITABLE event when the transport can take a message now (the lowest-latency
/// way to send: one message per WRITABLE).
#[no_mangle]
pub extern "C" fn lowtide_want_writable(ch: lowtide_channel) -> lowtide_status {
    guard("lowtide_want_writable", || {
        let c = handles::get::<ChannelObject>(ch)?;
        c.shared.want_writable.notify_one();
        Ok(())
    })
}

/// Takes the next received message without waiting, copying its payload into `buf` (`cap`
/// bytes) and its metadata into `info`. `LOWTIDE_AGAIN`: none now; `LOWTIDE_ERR_CLOSED`: none
/// will come; `LOWTIDE_ERR_BUFFER_TOO_SMALL`: `info->len` says what is needed and the message
/// stays first in line.
///
/// # Safety
/// `buf` points to `cap` writable bytes (may be NULL when `cap` is 0); `info` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn lowtide_recv(
    ch: lowtide_channel,
    buf: *mut u8,
    cap: usize,
    info: *mut lowtide_message,
) -> lowtide_status {
    guard("lowtide_recv", || {
        non_null(info, "info")?;
        args::check_len(cap, "buf")?;
        if cap > 0 {
            non_null(buf, "buf")?;
        }
        let c = handles::get::<ChannelObject>(ch)?;
        let r = c.shared.update(|inbox| {
            let Some(m) = inbox.messages.front() else {
                return if inbox.messages_done {
                    fail(LOWTIDE_ERR_CLOSED, "the channel is closed and drained")
                } else {
                    fail(LOWTIDE_AGAIN, "no message ready")
                };
            };
            let meta = lowtide_message {
                stream: m.stream,
                seq: m.seq,
                len: m.data.len() as u64,
                send_time_us: m.send_time_us,
                importance: m.importance,
            };
            // SAFETY: `info` checked non-NULL, writable per the contract.
            unsafe { info.write(meta) };
            if m.data.len() > cap {
                return fail(
                    LOWTIDE_ERR_BUFFER_TOO_SMALL,
                    format!("the message has {} bytes, buf {cap}", m.data.len()),
                );
            }
            let m = inbox.messages.pop_front().expect("front exists");
            inbox.message_bytes -= m.data.len();
            if !m.data.is_empty() {
                // SAFETY: `buf` holds `cap` >= len writable bytes.
                unsafe { std::ptr::copy_nonoverlapping(m.data.as_ptr(), buf, m.data.len()) };
            }
            Ok(())
        });
        if r.is_ok() {
            c.shared.taken.notify_waiters();
        }
        r
    })
}

/// Takes the next event without waiting. `LOWTIDE_AGAIN`: none now; `LOWTIDE_ERR_CLOSED`: the
/// FINISHED event was already taken.
///
/// # Safety
/// `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn lowtide_poll_event(
    ch: lowtide_channel,
    out: *mut lowtide_event,
) -> lowtide_status {
    guard("lowtide_poll_event", || {
        non_null(out, "out")?;
        let c = handles::get::<ChannelObject>(ch)?;
        let e = c.shared.update(|inbox| match inbox.events.pop_front() {
            Some(e) => {
                inbox.finished_taken |= e.kind == LOWTIDE_EVENT_FINISHED;
                Ok(e)
            }
            None if inbox.finished_taken => fail(
                LOWTIDE_ERR_CLOSED,
                "the channel has finished (FINISHED was taken)",
            ),
            None => fail(LOWTIDE_AGAIN, "no event ready"),
        })?;
        c.shared.taken.notify_waiters();
        // SAFETY: forwarded contract.
        unsafe { args::write_out(out, e, "out") }
    })
}

/// The channel's counters.
///
/// # Safety
/// `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn lowtide_get_stats(
    ch: lowtide_channel,
    out: *mut lowtide_stats,
) -> lowtide_status {
    guard("lowtide_get_stats", || {
        non_null(out, "out")?;
        let c = handles::get::<ChannelObject>(ch)?;
        let s = c.channel.stats();
        let (inbox_messages, inbox_events) = {
            let g = c.shared.lock();
            (g.0.messages.len() as u64, g.0.events.len() as u64)
        };
        let stats = lowtide_stats {
            messages_queued: s.messages_queued,
            messages_written: s.messages_written,
            messages_acked: s.messages_acked,
            cancelled_unsent: s.cancelled_unsent,
            cancelled_partial: s.cancelled_partial,
            expired_unsent: s.expired_unsent,
            expired_partial: s.expired_partial,
            bytes_written: s.bytes_written,
            messages_received: s.messages_received,
            peer_cancelled: s.peer_cancelled,
            queued_bytes: c.channel.queued_bytes(),
            events_dropped: c.channel.events_dropped(),
            inbox_messages,
            inbox_events,
        };
        // SAFETY: forwarded contract.
        unsafe { args::write_out(out, stats, "out") }
    })
}

/// Starts closing the channel without waiting: queued messages are dropped, a CLOSE with
/// `code` and `reason` (NULL: "") is sent; FINISHED follows when the peer has closed too (at
/// most 5 s).
///
/// # Safety
/// `reason` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn lowtide_close(
    ch: lowtide_channel,
    code: u64,
    reason: *const c_char,
) -> lowtide_status {
    guard("lowtide_close", || {
        // SAFETY: forwarded contract.
        let reason = unsafe { args::opt_str_arg(reason, "reason")? }
            .unwrap_or("")
            .to_owned();
        let c = handles::get::<ChannelObject>(ch)?;
        let channel = c.channel.clone();
        c.ctx
            .handle()
            .spawn(async move { channel.close(code, &reason).await });
        Ok(())
    })
}

/// Releases the handle; an open channel is closed (code 0, "handle freed") in the background.
/// Calls in flight on other threads finish; later calls get `LOWTIDE_ERR_BAD_HANDLE`.
#[no_mangle]
pub extern "C" fn lowtide_channel_free(ch: lowtide_channel) -> lowtide_status {
    guard("lowtide_channel_free", || {
        handles::remove::<ChannelObject>(ch).map(drop)
    })
}
