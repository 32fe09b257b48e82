//! Bad input through the C entry points (called from Rust exactly as C calls them): NULL
//! pointers, freed and made-up handles, handles of the wrong kind, absurd sizes, bad
//! configuration, one handle used from several threads. Each gets its code and a message.

use std::ffi::{c_char, CStr};
use std::ptr::{null, null_mut};
use std::time::{Duration, Instant};

use lowtide_c::*;

fn last_error() -> String {
    // SAFETY: lowtide_last_error returns a valid NUL-terminated string.
    unsafe { CStr::from_ptr(lowtide_last_error()) }
        .to_str()
        .unwrap()
        .to_owned()
}

#[track_caller]
fn expect(status: lowtide_status, want: lowtide_status, message_has: &str) {
    assert_eq!(status, want, "last error: {}", last_error());
    let e = last_error();
    assert!(
        e.contains(message_has),
        "{e:?} should mention {message_has:?}"
    );
}

fn c(s: &str) -> std::ffi::CString {
    std::ffi::CString::new(s).unwrap()
}

fn ctx() -> lowtide_ctx {
    let mut ctx = 0;
    // SAFETY: `ctx` is writable.
    assert_eq!(unsafe { lowtide_ctx_new(1, &mut ctx) }, LOWTIDE_OK);
    ctx
}

/// A connected pair over loopback: (client, server).
fn pair(ctx: lowtide_ctx, config: Option<&str>) -> (lowtide_channel, lowtide_channel) {
    let config = config.map(c);
    let cfg = config.as_ref().map_or(null(), |s| s.as_ptr());
    let (mut l, mut client, mut server) = (0, 0, 0);
    let mut addr = [0 as c_char; 64];
    // SAFETY: every pointer is valid for the call.
    unsafe {
        assert_eq!(
            lowtide_listen(ctx, c("127.0.0.1:0").as_ptr(), cfg, &mut l),
            LOWTIDE_OK
        );
        assert_eq!(
            lowtide_listener_addr(l, addr.as_mut_ptr(), addr.len()),
            LOWTIDE_OK
        );
        let st = lowtide_connect(ctx, addr.as_ptr(), cfg, 5000, &mut client);
        assert_eq!(st, LOWTIDE_OK, "{}", last_error());
        let start = Instant::now();
        while lowtide_accept(l, &mut server) == LOWTIDE_AGAIN {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "no channel accepted"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(lowtide_listener_free(l), LOWTIDE_OK);
    }
    (client, server)
}

/// Receives until `n` messages arrived (or 20 s passed); returns them as (importance, len).
fn recv_n(ch: lowtide_channel, n: usize) -> Vec<(u8, u64)> {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 4096];
    let start = Instant::now();
    while got.len() < n && start.elapsed() < Duration::from_secs(20) {
        let mut m = lowtide_message::default();
        // SAFETY: `buf` holds `buf.len()` bytes; `m` is writable.
        match unsafe { lowtide_recv(ch, buf.as_mut_ptr(), buf.len(), &mut m) } {
            LOWTIDE_OK => got.push((m.importance, m.len)),
            LOWTIDE_AGAIN => std::thread::sleep(Duration::from_millis(1)),
            s => panic!("lowtide_recv: {s:?} {}", last_error()),
        }
    }
    got
}

/// Takes events until one of `kind` arrives (at most 10 s).
fn wait_event(ch: lowtide_channel, kind: lowtide_event_kind) {
    let mut e = std::mem::MaybeUninit::<lowtide_event>::uninit();
    let start = Instant::now();
    // SAFETY: `e` is writable and read only after LOWTIDE_OK.
    unsafe {
        loop {
            match lowtide_poll_event(ch, e.as_mut_ptr()) {
                LOWTIDE_OK if e.assume_init_ref().kind == kind => return,
                LOWTIDE_OK | LOWTIDE_AGAIN => std::thread::sleep(Duration::from_millis(1)),
                s => panic!("{s:?} {}", last_error()),
            }
            assert!(start.elapsed() < Duration::from_secs(10), "no {kind:?}");
        }
    }
}

#[test]
fn null_pointers_are_an_error_code() {
    // SAFETY: the calls must check their pointers; that is what is tested.
    unsafe {
        expect(
            lowtide_ctx_new(1, null_mut()),
            LOWTIDE_ERR_NULL,
            "out is NULL",
        );
        let ctx = ctx();
        let mut ch = 0;
        expect(
            lowtide_connect(ctx, null(), null(), 0, &mut ch),
            LOWTIDE_ERR_NULL,
            "addr is NULL",
        );
        expect(
            lowtide_listen(ctx, c("127.0.0.1:0").as_ptr(), null(), null_mut()),
            LOWTIDE_ERR_NULL,
            "out is NULL",
        );
        let (client, server) = pair(ctx, None);
        let mut stream = 0;
        assert_eq!(lowtide_open_stream(client, 1.0, &mut stream), LOWTIDE_OK);
        expect(
            lowtide_send(client, stream, null(), 10, 0, 0, null_mut()),
            LOWTIDE_ERR_NULL,
            "data is NULL",
        );
        // An empty message needs no buffer.
        assert_eq!(
            lowtide_send(client, stream, null(), 0, 0, 0, null_mut()),
            LOWTIDE_OK
        );
        expect(
            lowtide_recv(server, null_mut(), 10, &mut lowtide_message::default()),
            LOWTIDE_ERR_NULL,
            "buf is NULL",
        );
        expect(
            lowtide_recv(server, null_mut(), 0, null_mut()),
            LOWTIDE_ERR_NULL,
            "info is NULL",
        );
        expect(
            lowtide_poll_event(server, null_mut()),
            LOWTIDE_ERR_NULL,
            "out is NULL",
        );
        expect(
            lowtide_get_stats(server, null_mut()),
            LOWTIDE_ERR_NULL,
            "out is NULL",
        );
        expect(
            lowtide_channel_fd(server, null_mut()),
            LOWTIDE_ERR_NULL,
            "out is NULL",
        );
        assert_eq!(recv_n(server, 1), vec![(0, 0)]);
        for h in [client, server] {
            assert_eq!(lowtide_channel_free(h), LOWTIDE_OK);
        }
        assert_eq!(lowtide_ctx_free(ctx), LOWTIDE_OK);
    }
}

#[test]
fn freed_made_up_and_wrong_kind_handles_are_an_error_code() {
    let ctx = ctx();
    let (client, server) = pair(ctx, None);
    let mut stream = 0;
    // SAFETY: valid pointers; the handles are what is tested.
    unsafe {
        expect(
            lowtide_open_stream(ctx, 1.0, &mut stream),
            LOWTIDE_ERR_BAD_HANDLE,
            "is a context, not a channel",
        );
        expect(
            lowtide_accept(client, &mut stream),
            LOWTIDE_ERR_BAD_HANDLE,
            "is a channel, not a listener",
        );
        expect(
            lowtide_open_stream(0, 1.0, &mut stream),
            LOWTIDE_ERR_BAD_HANDLE,
            "not open",
        );
        expect(
            lowtide_open_stream(0xdead_beef_1234, 1.0, &mut stream),
            LOWTIDE_ERR_BAD_HANDLE,
            "not open",
        );
        assert_eq!(lowtide_channel_free(client), LOWTIDE_OK);
        // The freed handle stays an error even after its slot is reused by a new object.
        let (c2, s2) = pair(ctx, None);
        expect(
            lowtide_open_stream(client, 1.0, &mut stream),
            LOWTIDE_ERR_BAD_HANDLE,
            "already freed",
        );
        expect(
            lowtide_channel_free(client),
            LOWTIDE_ERR_BAD_HANDLE,
            "not open",
        );
        assert_eq!(lowtide_open_stream(c2, 1.0, &mut stream), LOWTIDE_OK);
        // The server sees the close as the end of its channel.
        wait_event(server, LOWTIDE_EVENT_FINISHED);
        let mut e = std::mem::MaybeUninit::<lowtide_event>::uninit();
        expect(
            lowtide_poll_event(server, e.as_mut_ptr()),
            LOWTIDE_ERR_CLOSED,
            "FINISHED was taken",
        );
        for h in [server, c2, s2] {
            assert_eq!(lowtide_channel_free(h), LOWTIDE_OK);
        }
        assert_eq!(lowtide_ctx_free(ctx), LOWTIDE_OK);
        expect(
            lowtide_ctx_free(ctx),
            LOWTIDE_ERR_BAD_HANDLE,
            "context handle",
        );
    }
}

#[test]
fn absurd_sizes_and_bad_config_name_what_is_wrong() {
    let ctx = ctx();
    let mut out = 0;
    // SAFETY: valid pointers; sizes and strings are what is tested.
    unsafe {
        expect(
            lowtide_ctx_new(1000, &mut out),
            LOWTIDE_ERR_INVALID,
            "threads = 1000",
        );
        expect(
            lowtide_listen(ctx, c("localhost").as_ptr(), null(), &mut out),
            LOWTIDE_ERR_INVALID,
            "not IP:port",
        );
        expect(
            lowtide_listen(
                ctx,
                c("127.0.0.1:0").as_ptr(),
                c("{nope").as_ptr(),
                &mut out,
            ),
            LOWTIDE_ERR_CONFIG,
            "config_json",
        );
        expect(
            lowtide_listen(
                ctx,
                c("127.0.0.1:0").as_ptr(),
                c(r#"{"read_chunk":1}"#).as_ptr(),
                &mut out,
            ),
            LOWTIDE_ERR_CONFIG,
            "read_chunk",
        );
        let bad_utf8 = [0xffu8 as c_char, 0];
        expect(
            lowtide_listen(ctx, bad_utf8.as_ptr(), null(), &mut out),
            LOWTIDE_ERR_INVALID,
            "UTF-8",
        );

        let (client, server) = pair(ctx, Some(r#"{"transport":{"max_message_size":65536}}"#));
        let mut stream = 0;
        assert_eq!(lowtide_open_stream(client, 1.0, &mut stream), LOWTIDE_OK);
        expect(
            lowtide_open_stream(client, -1.0, &mut stream),
            LOWTIDE_ERR_REFUSED,
            "weight",
        );
        let byte = 0u8;
        expect(
            lowtide_send(client, stream, &byte, usize::MAX, 0, 0, null_mut()),
            LOWTIDE_ERR_INVALID,
            "absurd",
        );
        let big = vec![0u8; 65537];
        let st = lowtide_send(client, stream, big.as_ptr(), big.len(), 0, 0, null_mut());
        assert_eq!(st, LOWTIDE_ERR_REFUSED, "{}", last_error());
        expect(
            lowtide_send(client, 999, &byte, 1, 0, 0, null_mut()),
            LOWTIDE_ERR_REFUSED,
            "",
        );
        expect(
            lowtide_send(client, stream, &byte, 1, 0, u64::MAX, null_mut()),
            LOWTIDE_ERR_INVALID,
            "deadline_us",
        );
        let mut m = lowtide_message::default();
        let mut buf = [0u8; 8];
        expect(
            lowtide_recv(server, buf.as_mut_ptr(), usize::MAX, &mut m),
            LOWTIDE_ERR_INVALID,
            "absurd",
        );
        expect(
            lowtide_recv(server, buf.as_mut_ptr(), buf.len(), &mut m),
            LOWTIDE_AGAIN,
            "no message",
        );
        // A buffer too small: the size needed, and the message stays first in line.
        assert_eq!(
            lowtide_send(client, stream, big.as_ptr(), 100, 5, 0, null_mut()),
            LOWTIDE_OK
        );
        let start = Instant::now();
        let mut st;
        loop {
            st = lowtide_recv(server, buf.as_mut_ptr(), buf.len(), &mut m);
            if st != LOWTIDE_AGAIN || start.elapsed() > Duration::from_secs(10) {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        expect(st, LOWTIDE_ERR_BUFFER_TOO_SMALL, "100 bytes");
        assert_eq!((m.len, m.importance), (100, 5));
        assert_eq!(recv_n(server, 1), vec![(5, 100)]);
        let mut small_addr = [0 as c_char; 4];
        let mut l = 0;
        assert_eq!(
            lowtide_listen(ctx, c("127.0.0.1:0").as_ptr(), null(), &mut l),
            LOWTIDE_OK
        );
        expect(
            lowtide_listener_addr(l, small_addr.as_mut_ptr(), small_addr.len()),
            LOWTIDE_ERR_BUFFER_TOO_SMALL,
            "needs",
        );
        assert_eq!(lowtide_listener_free(l), LOWTIDE_OK);
        for h in [client, server] {
            assert_eq!(lowtide_channel_free(h), LOWTIDE_OK);
        }
        assert_eq!(lowtide_ctx_free(ctx), LOWTIDE_OK);
    }
}

/// Two threads send on one handle while a third frees it: every message sent before the free
/// arrives, calls after it get BAD_HANDLE, nothing crashes.
#[test]
fn one_handle_from_several_threads() {
    let ctx = ctx();
    let (client, server) = pair(ctx, None);
    let mut stream = 0;
    // SAFETY: valid pointer.
    assert_eq!(
        unsafe { lowtide_open_stream(client, 1.0, &mut stream) },
        LOWTIDE_OK
    );
    let senders: Vec<_> = (0..2u8)
        .map(|t| {
            std::thread::spawn(move || {
                let payload = [t; 100];
                for _ in 0..500 {
                    // SAFETY: `payload` is readable.
                    let st = unsafe {
                        lowtide_send(
                            client,
                            stream,
                            payload.as_ptr(),
                            payload.len(),
                            t,
                            0,
                            null_mut(),
                        )
                    };
                    assert_eq!(st, LOWTIDE_OK, "{}", last_error());
                }
            })
        })
        .collect();
    for s in senders {
        s.join().unwrap();
    }
    let got = recv_n(server, 1000);
    assert_eq!(got.len(), 1000);
    assert_eq!(got.iter().filter(|m| m.0 == 1).count(), 500);

    // Racing a free: the sender stops at BAD_HANDLE (or CLOSED), never worse.
    let racer = std::thread::spawn(move || {
        let byte = 0u8;
        loop {
            // SAFETY: `byte` is readable.
            match unsafe { lowtide_send(client, stream, &byte, 1, 0, 0, null_mut()) } {
                LOWTIDE_OK => {}
                st => return st,
            }
        }
    });
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(lowtide_channel_free(client), LOWTIDE_OK);
    let st = racer.join().unwrap();
    assert!(
        matches!(st, LOWTIDE_ERR_BAD_HANDLE | LOWTIDE_ERR_CLOSED),
        "{st:?}"
    );
    assert_eq!(lowtide_channel_free(server), LOWTIDE_OK);
    assert_eq!(lowtide_ctx_free(ctx), LOWTIDE_OK);
}

/// `lowtide_want_writable` yields one WRITABLE event through the fd's queue.
#[test]
fn writable_event_on_request() {
    let ctx = ctx();
    let (client, server) = pair(ctx, None);
    assert_eq!(lowtide_want_writable(client), LOWTIDE_OK);
    wait_event(client, LOWTIDE_EVENT_WRITABLE);
    for h in [client, server] {
        assert_eq!(lowtide_channel_free(h), LOWTIDE_OK);
    }
    assert_eq!(lowtide_ctx_free(ctx), LOWTIDE_OK);
}

/// The last error says once what happened, then what to do (`docs/errors.md`): no clause of
/// the message repeats an earlier one.
#[track_caller]
fn says_once_then_fix(status: lowtide_status, want: lowtide_status, fix: &str) {
    expect(status, want, fix);
    let e = last_error();
    let clauses: Vec<&str> = e.split([':', ';']).map(str::trim).collect();
    for (i, a) in clauses.iter().enumerate() {
        for b in &clauses[i + 1..] {
            assert!(
                a.len() < 8 || !b.contains(a),
                "{e:?} repeats {a:?} in {b:?}"
            );
        }
    }
}

#[test]
fn common_mistakes_are_named_with_their_fix() {
    let ctx = ctx();
    // A port nobody listens on (bound, then closed).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let addr = c(&port.to_string());
    let mut ch = 0;
    // SAFETY: every pointer is valid for the call.
    unsafe {
        says_once_then_fix(
            lowtide_connect(ctx, addr.as_ptr(), null(), 2000, &mut ch),
            LOWTIDE_ERR_IO,
            "nothing listens there: start the listener (lowtide_listen) first",
        );
    }
    // A port another socket holds.
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = c(&held.local_addr().unwrap().to_string());
    let mut l = 0;
    // SAFETY: every pointer is valid for the call.
    unsafe {
        says_once_then_fix(
            lowtide_listen(ctx, addr.as_ptr(), null(), &mut l),
            LOWTIDE_ERR_IO,
            "another program holds that port",
        );
    }
}
