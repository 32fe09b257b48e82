//! A listener handle: accepts channels in a task; C takes them with `lowtide_accept` when
//! the listener's fd is readable.

use std::collections::VecDeque;
use std::ffi::c_char;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lowtide::Channel;
use tokio::sync::Notify;

use crate::args::{self, non_null};
use crate::channel::{lowtide_channel, parse_addr_config, ChannelObject};
use crate::context::{lowtide_ctx, Context};
use crate::eventfd::Readiness;
use crate::handles::{self, Kind, Object};
use crate::status::*;

/// A listener handle (0 is never valid).
#[allow(non_camel_case_types)]
pub type lowtide_listener = u64;

/// Accepted channels (or accept errors) held for `lowtide_accept` before the task waits.
pub const LOWTIDE_ACCEPT_QUEUE: usize = 64;

type Accepted = std::result::Result<Channel, lowtide::Error>;

struct Queue {
    accepted: VecDeque<Accepted>,
    ready: Readiness,
}

pub(crate) struct ListenerObject {
    ctx: Arc<Context>,
    local: std::net::SocketAddr,
    queue: Arc<(Mutex<Queue>, Notify)>,
    fd: i32,
    task: tokio::task::JoinHandle<()>,
}

impl Kind for ListenerObject {
    const NAME: &'static str = "listener";
    fn wrap(this: Arc<Self>) -> Object {
        Object::Listener(this)
    }
    fn unwrap(object: &Object) -> Option<&Arc<Self>> {
        match object {
            Object::Listener(l) => Some(l),
            _ => None,
        }
    }
}

impl Drop for ListenerObject {
    fn drop(&mut self) {
        // Dropping the task drops the socket: the port is closed.
        self.task.abort();
    }
}

fn lock(q: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    q.lock().unwrap_or_else(|p| p.into_inner())
}

async fn accept_loop(listener: lowtide::Listener, queue: Arc<(Mutex<Queue>, Notify)>) {
    loop {
        loop {
            let taken = queue.1.notified();
            tokio::pin!(taken);
            taken.as_mut().enable();
            if lock(&queue.0).accepted.len() < LOWTIDE_ACCEPT_QUEUE {
                break;
            }
            taken.await;
        }
        let r = listener.accept().await;
        let failed = r.is_err();
        {
            let mut q = lock(&queue.0);
            q.accepted.push_back(r);
            q.ready.set(true);
        }
        if failed {
            // E.g. EMFILE: report it, then give the process a moment rather than spin.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Listens on `addr` ("IP:port"; port 0 picks one, see `lowtide_listener_addr`), with
/// `config_json` for the channels it accepts (NULL: defaults).
///
/// # Safety
/// `addr`, `config_json` are NULL or NUL-terminated strings; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn lowtide_listen(
    ctx: lowtide_ctx,
    addr: *const c_char,
    config_json: *const c_char,
    out: *mut lowtide_listener,
) -> lowtide_status {
    guard("lowtide_listen", || {
        non_null(out, "out")?;
        // SAFETY: forwarded contract.
        let (addr, cfg) = unsafe { parse_addr_config(addr, config_json)? };
        let ctx = handles::get::<Context>(ctx)?;
        let listener = ctx.run(lowtide::listen(addr, cfg))??;
        let local = listener.local_addr()?;
        let ready = Readiness::new().or_else(|e| fail(LOWTIDE_ERR_IO, format!("eventfd: {e}")))?;
        let fd = ready.raw();
        let queue = Arc::new((
            Mutex::new(Queue {
                accepted: VecDeque::new(),
                ready,
            }),
            Notify::new(),
        ));
        let task = ctx.handle().spawn(accept_loop(listener, queue.clone()));
        let h = handles::insert(Arc::new(ListenerObject {
            ctx,
            local,
            queue,
            fd,
            task,
        }))?;
        // SAFETY: checked non-NULL; writable per the contract.
        unsafe { args::write_out(out, h, "out") }
    })
}

/// The bound address as "IP:port" into `buf` (`cap` bytes, NUL included).
///
/// # Safety
/// `buf` is NULL or points to `cap` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn lowtide_listener_addr(
    l: lowtide_listener,
    buf: *mut c_char,
    cap: usize,
) -> lowtide_status {
    guard("lowtide_listener_addr", || {
        let l = handles::get::<ListenerObject>(l)?;
        // SAFETY: forwarded contract.
        unsafe { args::write_str(buf, cap, &l.local.to_string(), "buf") }
    })
}

/// The listener's fd: readable while an accepted channel waits for `lowtide_accept`.
///
/// # Safety
/// `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn lowtide_listener_fd(
    l: lowtide_listener,
    out: *mut std::ffi::c_int,
) -> lowtide_status {
    guard("lowtide_listener_fd", || {
        let l = handles::get::<ListenerObject>(l)?;
        // SAFETY: forwarded contract.
        unsafe { args::write_out(out, l.fd, "out") }
    })
}

/// Takes the next accepted channel without waiting (`LOWTIDE_AGAIN`: none yet). An accept
/// that failed is reported once, by its error code.
///
/// # Safety
/// `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn lowtide_accept(
    l: lowtide_listener,
    out: *mut lowtide_channel,
) -> lowtide_status {
    guard("lowtide_accept", || {
        non_null(out, "out")?;
        let l = handles::get::<ListenerObject>(l)?;
        let next = {
            let mut q = lock(&l.queue.0);
            let next = q.accepted.pop_front();
            let more = !q.accepted.is_empty();
            q.ready.set(more);
            next
        };
        l.queue.1.notify_one();
        let channel = match next {
            None => return fail(LOWTIDE_AGAIN, "no channel accepted yet"),
            Some(r) => r?,
        };
        let h = ChannelObject::register(l.ctx.clone(), channel)?;
        // SAFETY: forwarded contract.
        unsafe { args::write_out(out, h, "out") }
    })
}

/// Releases the listener and closes its port; channels already accepted stay open.
#[no_mangle]
pub extern "C" fn lowtide_listener_free(l: lowtide_listener) -> lowtide_status {
    guard("lowtide_listener_free", || {
        handles::remove::<ListenerObject>(l).map(drop)
    })
}
