//! What the server's test files share: a loopback address, waiting for a stream, and what
//! the stall tests over plain TCP and TLS both check.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lowtide_serve::client::{WatchError, WatchReport};
use lowtide_serve::Server;

/// Loopback, any port.
pub fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// Waits until `server` has a stream at `path`; fails the test after `within`.
#[allow(dead_code)] // not every test file waits for a stream
pub async fn wait_for_stream(server: &Server, path: &str, within: Duration) {
    let until = Instant::now() + within;
    while server.hub().get(path).is_none() {
        assert!(
            Instant::now() < until,
            "no stream at {path} within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The steady viewer got the whole stream, decodable, nothing dropped, every stamped unit
/// under 300 ms; the stalled one was cut off before the end.
#[allow(dead_code)] // the relay tests have no stalled viewer
pub fn steady_kept_up_and_stalled_cut_off(
    steady: Result<WatchReport, WatchError>,
    stalled: Result<WatchReport, WatchError>,
) {
    let a = steady.unwrap();
    assert!(a.ended);
    assert_eq!(a.undecodable(), 0);
    assert_eq!(a.dropped, [0; 4], "the steady viewer lost nothing");
    let worst = a
        .units
        .iter()
        .filter(|u| u.capture_us != 0)
        .map(|u| u.received_us.saturating_sub(u.capture_us))
        .max()
        .unwrap();
    assert!(
        worst < 300_000,
        "the steady viewer's worst unit took {worst} µs"
    );
    match stalled {
        Ok(r) => assert!(!r.ended, "a stalled viewer must not get the whole stream"),
        Err(e) => assert!(matches!(e, WatchError::Io(_)), "{e}"),
    }
}
