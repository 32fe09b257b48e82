//! Status codes, the thread-local last-error string, and the guard every entry point runs in:
//! no panic crosses into C, every failure sets a message naming what was wrong.

use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What a `lowtide_*` call returns: `LOWTIDE_OK` (0) or a negative code; the message is in
/// `lowtide_last_error()`.
#[allow(non_camel_case_types)]
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum lowtide_status {
    /// Success.
    LOWTIDE_OK = 0,
    /// Nothing ready now (non-blocking calls): wait for the handle's fd to become readable.
    LOWTIDE_AGAIN = -1,
    /// A pointer argument was NULL.
    LOWTIDE_ERR_NULL = -2,
    /// The handle is unknown, already freed, or of another kind.
    LOWTIDE_ERR_BAD_HANDLE = -3,
    /// An argument is out of range (size, address, string encoding).
    LOWTIDE_ERR_INVALID = -4,
    /// The configuration (JSON) is malformed or a field is out of range; the message names it.
    LOWTIDE_ERR_CONFIG = -5,
    /// A system call failed; the message names it.
    LOWTIDE_ERR_IO = -6,
    /// The channel is closed (and, for `lowtide_recv`/`lowtide_poll_event`, drained).
    LOWTIDE_ERR_CLOSED = -7,
    /// The peer violated the protocol, or went away without a CLOSE.
    LOWTIDE_ERR_PROTOCOL = -8,
    /// `lowtide_send` refused the message (too large, queue full, unknown stream).
    LOWTIDE_ERR_REFUSED = -9,
    /// The caller's buffer is too small; the needed size was written.
    LOWTIDE_ERR_BUFFER_TOO_SMALL = -10,
    /// The operation did not finish in time.
    LOWTIDE_ERR_TIMEOUT = -11,
    /// `lowtide_cancel`: the message is already completely written (or was never sent).
    LOWTIDE_ERR_TOO_LATE = -12,
    /// A bug in lowtide was caught before it could reach the caller (please report it).
    LOWTIDE_ERR_INTERNAL = -13,
}

pub use lowtide_status::*;

/// A failed call: its status and the message for `lowtide_last_error`.
#[derive(Debug)]
pub(crate) struct Fail {
    pub status: lowtide_status,
    pub message: String,
}

pub(crate) type Result<T> = std::result::Result<T, Fail>;

pub(crate) fn fail<T>(status: lowtide_status, message: impl Into<String>) -> Result<T> {
    Err(Fail {
        status,
        message: message.into(),
    })
}

impl From<lowtide::Error> for Fail {
    /// The error's message says what happened (each cause once: lowtide's errors show their
    /// cause rather than chain it); for a common set-up mistake the fix follows, in the C
    /// API's terms (`docs/errors.md`).
    fn from(e: lowtide::Error) -> Self {
        let status = match &e {
            lowtide::Error::Config(_) => LOWTIDE_ERR_CONFIG,
            lowtide::Error::Io { .. } => LOWTIDE_ERR_IO,
            lowtide::Error::Protocol(_)
            | lowtide::Error::PeerGone
            | lowtide::Error::PeerNotTls { .. } => LOWTIDE_ERR_PROTOCOL,
            lowtide::Error::Send(_) | lowtide::Error::Stream(_) => LOWTIDE_ERR_REFUSED,
            lowtide::Error::Closed => LOWTIDE_ERR_CLOSED,
            _ => LOWTIDE_ERR_INTERNAL,
        };
        let message = match e.mistake().and_then(advice) {
            Some(fix) => format!("{e}; {fix}"),
            None => e.to_string(),
        };
        Fail { status, message }
    }
}

/// The fix for a common mistake, naming the configuration's JSON fields (`ChannelConfig`).
fn advice(m: lowtide::Mistake) -> Option<&'static str> {
    use lowtide::Mistake;
    Some(match m {
        Mistake::PeerSpeaksTls => "give config_json {\"tls\": {\"ca\": \"CA.pem\"}}",
        Mistake::PeerSpeaksPlaintext => {
            "leave \"tls\" out of config_json, or give the peer's listener \
             {\"tls\": {\"cert\": ..., \"key\": ...}}"
        }
        Mistake::NothingListening => {
            "nothing listens there: start the listener (lowtide_listen) first, or check addr"
        }
        Mistake::AddressInUse => "another program holds that port: stop it, or pick another addr",
        Mistake::NotPermitted => {
            "this needs more privilege: run as root, or (for \"congestion\") pick one listed in \
             /proc/sys/net/ipv4/tcp_allowed_congestion_control"
        }
        _ => return None,
    })
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: &str) {
    // An interior NUL would cut the C string short: replace it rather than lose the message.
    let c = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

/// Runs an entry point: a panic becomes `LOWTIDE_ERR_INTERNAL`, a failure sets the last
/// error. Success leaves the last error as it was (as `errno` does).
pub(crate) fn guard(name: &str, f: impl FnOnce() -> Result<()>) -> lowtide_status {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => LOWTIDE_OK,
        Ok(Err(fail)) => {
            set_last_error(&format!("{name}: {}", fail.message));
            fail.status
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            set_last_error(&format!(
                "{name}: internal error (a bug in lowtide, please report it): {what}"
            ));
            LOWTIDE_ERR_INTERNAL
        }
    }
}

/// The message of the last failed `lowtide_*` call on this thread ("" if none). The pointer is
/// valid until the next `lowtide_*` call on the same thread; copy it to keep it.
#[no_mangle]
pub extern "C" fn lowtide_last_error() -> *const c_char {
    catch_unwind(|| LAST_ERROR.with(|e| e.borrow().as_ptr()))
        .unwrap_or(c"internal error reading the last error".as_ptr())
}

/// The library's version, e.g. "0.1.0" (static storage).
#[no_mangle]
pub extern "C" fn lowtide_version() -> *const c_char {
    static VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");
    VERSION.as_ptr().cast()
}
