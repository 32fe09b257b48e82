//! A bulk sender's window, as ns-2's `Agent/TCP set window_` gave every flow.
//!
//! ns-2's TCP agents keep at most `min(cwnd, window_)` packets in flight; `window_` defaults to
//! 20, so a simulated bulk flow of the papers of that time may never fill a deep queue by
//! itself. Linux has no per-socket cap on the sender's window, and the receiver's
//! `TCP_WINDOW_CLAMP` does not hold on this kernel: receive-buffer autotuning rewrites it
//! (measured over loopback: a 20,000-byte clamp read back as 910,791 bytes after 16 MiB, and as
//! 157,500 with `SO_RCVBUF` set as well, which the kernel turns into a clamp of its own when it
//! re-measures the buffer's overhead). So the sender bounds itself: it writes only while the
//! bytes it has handed to the kernel and not yet seen acknowledged (`SIOCOUTQ`) are under the
//! window, and looks again every [`POLL`] otherwise. The bound then holds within what one poll
//! lets through (at 500 kbit/s about 60 bytes).

use std::io::{Error, ErrorKind};
use std::time::{Duration, Instant};

/// How often a sender at its window looks again.
pub const POLL: Duration = Duration::from_millis(1);

/// Smallest window accepted: below a few segments a flow would send one packet per round
/// trip, which no schedule here means.
pub const MIN_BYTES: u32 = 4096;

/// Largest window accepted (16 MiB): far above any bandwidth-delay product in the lab.
pub const MAX_BYTES: u32 = 16 << 20;

/// Bytes a sender may write now: up to `chunk`, and with a window no more than the window
/// less the bytes not yet acknowledged (`outq`, from `SIOCOUTQ`). Zero: wait.
pub fn room(window: Option<u32>, outq: u64, chunk: usize) -> usize {
    match window {
        None => chunk,
        Some(w) => (u64::from(w).saturating_sub(outq)).min(chunk as u64) as usize,
    }
}

/// Whether a write error only says the run is over: the lab's receivers stop reading at the
/// run's end and close with data unread, so a sender that writes at or after that end (a
/// thread a little late on a loaded machine) meets their reset. Before the end it is an error.
pub fn reset_at_end(e: &Error, now: Instant, end: Instant) -> bool {
    now >= end && matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_reset_at_or_after_the_end_ends_a_run_quietly() {
        let end = Instant::now();
        let early = end - Duration::from_millis(1);
        let pipe = Error::from(ErrorKind::BrokenPipe);
        let reset = Error::from(ErrorKind::ConnectionReset);
        assert!(reset_at_end(&pipe, end, end));
        assert!(reset_at_end(&reset, end + Duration::from_millis(5), end));
        assert!(!reset_at_end(&pipe, early, end));
        assert!(!reset_at_end(&Error::from(ErrorKind::TimedOut), end, end));
    }

    #[test]
    fn the_window_bounds_what_is_written() {
        assert_eq!(room(None, 1 << 30, 65_536), 65_536);
        assert_eq!(room(Some(20_000), 0, 65_536), 20_000);
        assert_eq!(room(Some(20_000), 19_000, 65_536), 1_000);
        assert_eq!(room(Some(20_000), 20_000, 65_536), 0);
        assert_eq!(
            room(Some(20_000), 25_000, 65_536),
            0,
            "written before the bound"
        );
        assert_eq!(room(Some(1 << 20), 0, 65_536), 65_536);
    }
}
