//! Readiness that agrees with the read budget: a flow over budget is not reported readable
//! by `poll`, `ppoll` or `epoll_wait` until its budget is back, and the wait is cut short
//! at that moment. So a non-blocking program that got `EAGAIN` from a paced read sleeps in
//! its own event loop, neither spinning (level-triggered) nor missing the wake-up
//! (edge-triggered: re-adding `EPOLLIN` with `EPOLL_CTL_MOD` makes the kernel report data
//! that is already there). `select` is not intercepted (a limit named in docs/bwss.md).

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use libc::{c_int, epoll_event, nfds_t, pollfd, sigset_t, timespec};

use crate::real;
use crate::state::{self, SpinLock};

const READ_EVENTS: i16 = libc::POLLIN | libc::POLLRDNORM;

/// When `fd`'s budget allows a read again, if it does not now.
fn throttled(fd: RawFd, now: Instant) -> Option<Instant> {
    let flow = state::lookup(fd)?;
    let a = state::allowance(fd, &flow, now)?;
    (!a.open(usize::MAX)).then_some(a.ready)
}

/// Milliseconds to wait: the caller's timeout (`None`: forever) cut at `wake`, rounded up.
fn wait_ms(now: Instant, deadline: Option<Instant>, wake: Option<Instant>) -> c_int {
    let until = match (deadline, wake) {
        (Some(d), Some(w)) => Some(d.min(w)),
        (d, w) => d.or(w),
    };
    match until {
        None => -1,
        Some(t) => {
            let d = t.saturating_duration_since(now);
            d.as_micros().div_ceil(1000).min(i32::MAX as u128) as c_int
        }
    }
}

fn deadline_ms(now: Instant, timeout: c_int) -> Option<Instant> {
    (timeout >= 0).then(|| now + Duration::from_millis(timeout as u64))
}

#[no_mangle]
pub unsafe extern "C" fn poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int {
    let f = real!(poll: unsafe extern "C" fn(*mut pollfd, nfds_t, c_int) -> c_int);
    let start = Instant::now();
    let deadline = deadline_ms(start, timeout);
    loop {
        let now = Instant::now();
        // SAFETY: the caller's array of `n` pollfds.
        let (saved, wake) = unsafe { hold_back(fds, n, now) };
        if saved.is_empty() {
            let t = if now == start {
                timeout
            } else {
                wait_ms(now, deadline, None)
            };
            // SAFETY: forwarding the caller's array.
            return unsafe { f(fds, n, t) };
        }
        // SAFETY: as above; the events we changed are restored right after.
        let r = unsafe { f(fds, n, wait_ms(now, deadline, wake)) };
        // SAFETY: `fds` is the caller's array of `n` entries, which `saved` indexes into.
        unsafe { restore(fds, &saved) };
        if r != 0 || deadline.is_some_and(|d| Instant::now() >= d) {
            return r;
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn ppoll(
    fds: *mut pollfd,
    n: nfds_t,
    ts: *const timespec,
    mask: *const sigset_t,
) -> c_int {
    let f = real!(ppoll: unsafe extern "C" fn(*mut pollfd, nfds_t, *const timespec, *const sigset_t) -> c_int);
    let start = Instant::now();
    // SAFETY: the caller's timespec, if any.
    let deadline = (!ts.is_null()).then(|| unsafe {
        start
            + Duration::new(
                (*ts).tv_sec.max(0) as u64,
                (*ts).tv_nsec.clamp(0, 999_999_999) as u32,
            )
    });
    loop {
        let now = Instant::now();
        // SAFETY: the caller's array of `n` pollfds.
        let (saved, wake) = unsafe { hold_back(fds, n, now) };
        if saved.is_empty() && now == start {
            // SAFETY: forwarding unchanged.
            return unsafe { f(fds, n, ts, mask) };
        }
        let until = match (deadline, wake) {
            (Some(d), Some(w)) => Some(d.min(w)),
            (d, w) => d.or(w),
        };
        let t = until.map(|u| {
            let d = u.saturating_duration_since(now);
            timespec {
                tv_sec: d.as_secs() as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            }
        });
        let tp = t
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const timespec);
        // SAFETY: as for poll.
        let r = unsafe { f(fds, n, tp, mask) };
        // SAFETY: `fds` is the caller's array of `n` entries, which `saved` indexes into.
        unsafe { restore(fds, &saved) };
        if r != 0 || saved.is_empty() || deadline.is_some_and(|d| Instant::now() >= d) {
            return r;
        }
    }
}

/// Clears the read events of throttled flows; returns what to restore and when the first
/// budget is back.
///
/// # Safety
/// `fds` must point to `n` pollfds.
unsafe fn hold_back(
    fds: *mut pollfd,
    n: nfds_t,
    now: Instant,
) -> (Vec<(usize, i16)>, Option<Instant>) {
    let mut saved = Vec::new();
    let mut wake: Option<Instant> = None;
    if fds.is_null() {
        return (saved, wake);
    }
    for k in 0..n as usize {
        // SAFETY: by the contract.
        let p = unsafe { &mut *fds.add(k) };
        if p.events & READ_EVENTS != 0 {
            if let Some(ready) = throttled(p.fd, now) {
                saved.push((k, p.events));
                p.events &= !READ_EVENTS;
                wake = Some(wake.map_or(ready, |w| w.min(ready)));
            }
        }
    }
    (saved, wake)
}

/// # Safety
/// `fds` must point to the pollfds `hold_back` saw.
unsafe fn restore(fds: *mut pollfd, saved: &[(usize, i16)]) {
    for &(k, ev) in saved {
        // SAFETY: by the contract.
        unsafe { (*fds.add(k)).events = ev };
    }
}

/// A registered flow in an epoll set, with the caller's event.
struct Tracked {
    epfd: RawFd,
    fd: RawFd,
    event: epoll_event,
    /// We removed EPOLLIN from the kernel's copy.
    held: bool,
}

static TRACKED: SpinLock<Vec<Tracked>> = SpinLock::new(Vec::new());
static TRACKED_LEN: AtomicUsize = AtomicUsize::new(0);
const EPOLLIN: u32 = libc::EPOLLIN as u32 | libc::EPOLLRDNORM as u32;

fn real_ctl(epfd: c_int, op: c_int, fd: c_int, ev: *mut epoll_event) -> c_int {
    let f = real!(epoll_ctl: unsafe extern "C" fn(c_int, c_int, c_int, *mut epoll_event) -> c_int);
    // SAFETY: forwarding to libc.
    unsafe { f(epfd, op, fd, ev) }
}

#[no_mangle]
pub unsafe extern "C" fn epoll_ctl(
    epfd: c_int,
    op: c_int,
    fd: c_int,
    ev: *mut epoll_event,
) -> c_int {
    if !state::is_registered(fd) && TRACKED_LEN.load(Ordering::Relaxed) == 0 {
        return real_ctl(epfd, op, fd, ev);
    }
    TRACKED.with(|t| {
        let pos = t.iter().position(|x| x.epfd == epfd && x.fd == fd);
        // SAFETY: the caller's event, if any.
        let event = (!ev.is_null()).then(|| unsafe { *ev });
        let r = match (op, pos, event) {
            (libc::EPOLL_CTL_MOD, Some(k), Some(mut e)) if t[k].held => {
                e.events &= !EPOLLIN;
                real_ctl(epfd, op, fd, &mut e)
            }
            _ => real_ctl(epfd, op, fd, ev),
        };
        if r == 0 {
            match (op, pos, event) {
                (libc::EPOLL_CTL_ADD, _, Some(event)) if state::is_registered(fd) => {
                    t.push(Tracked {
                        epfd,
                        fd,
                        event,
                        held: false,
                    })
                }
                (libc::EPOLL_CTL_MOD, Some(k), Some(event)) => t[k].event = event,
                (libc::EPOLL_CTL_DEL, Some(k), _) => {
                    t.swap_remove(k);
                }
                _ => {}
            }
            TRACKED_LEN.store(t.len(), Ordering::Relaxed);
        }
        r
    })
}

/// Re-arms flows whose budget is back, holds back those over budget; returns when the
/// first held one is due and whether any is held.
fn adjust(epfd: RawFd, now: Instant) -> (bool, Option<Instant>) {
    if TRACKED_LEN.load(Ordering::Relaxed) == 0 {
        return (false, None);
    }
    TRACKED.with(|t| {
        let mut wake: Option<Instant> = None;
        let mut any = false;
        for x in t
            .iter_mut()
            .filter(|x| x.epfd == epfd && x.event.events & EPOLLIN != 0)
        {
            let due = throttled(x.fd, now);
            match (x.held, due) {
                (true, None) => {
                    let mut e = x.event;
                    if real_ctl(epfd, libc::EPOLL_CTL_MOD, x.fd, &mut e) == 0 {
                        x.held = false;
                    }
                }
                (false, Some(_)) => {
                    let mut e = x.event;
                    e.events &= !EPOLLIN;
                    if real_ctl(epfd, libc::EPOLL_CTL_MOD, x.fd, &mut e) == 0 {
                        x.held = true;
                    }
                }
                _ => {}
            }
            if x.held {
                any = true;
                if let Some(d) = due {
                    wake = Some(wake.map_or(d, |w| w.min(d)));
                }
            }
        }
        (any, wake)
    })
}

#[no_mangle]
pub unsafe extern "C" fn epoll_wait(
    epfd: c_int,
    events: *mut epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    // SAFETY: forwarding the caller's arguments.
    unsafe { epoll_pwait(epfd, events, max, timeout, std::ptr::null()) }
}

#[no_mangle]
pub unsafe extern "C" fn epoll_pwait(
    epfd: c_int,
    events: *mut epoll_event,
    max: c_int,
    timeout: c_int,
    mask: *const sigset_t,
) -> c_int {
    let f = real!(epoll_pwait: unsafe extern "C" fn(c_int, *mut epoll_event, c_int, c_int, *const sigset_t) -> c_int);
    let start = Instant::now();
    let deadline = deadline_ms(start, timeout);
    loop {
        let now = Instant::now();
        let (held, wake) = adjust(epfd, now);
        if !held {
            let t = if now == start {
                timeout
            } else {
                wait_ms(now, deadline, None)
            };
            // SAFETY: forwarding the caller's arguments.
            return unsafe { f(epfd, events, max, t, mask) };
        }
        // SAFETY: as above, with a shorter timeout.
        let r = unsafe { f(epfd, events, max, wait_ms(now, deadline, wake), mask) };
        if r != 0 || deadline.is_some_and(|d| Instant::now() >= d) {
            return r;
        }
    }
}

/// `fd` is being closed: drop it from the epoll sets we track (and the set, if it is one).
pub fn forget(fd: RawFd) {
    if TRACKED_LEN.load(Ordering::Relaxed) == 0 {
        return;
    }
    TRACKED.with(|t| {
        t.retain(|x| x.fd != fd && x.epfd != fd);
        TRACKED_LEN.store(t.len(), Ordering::Relaxed);
    });
}
