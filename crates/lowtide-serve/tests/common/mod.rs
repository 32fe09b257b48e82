//! What the stall tests over plain TCP and TLS both check.

use lowtide_serve::client::{WatchError, WatchReport};

/// The steady viewer got the whole stream, decodable, nothing dropped, every stamped unit
/// under 300 ms; the stalled one was cut off before the end.
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
