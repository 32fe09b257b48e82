//! The BWSS daemon's control protocol (lowtide-bwss's `wire`: one JSON object per line on a
//! Unix socket any local process can reach), the socket names it accepts (`unix::address`)
//! and its rule file (`Config::from_toml`).
//!
//! Input: lines. Must hold:
//! - a line the daemon reads as a request reads back the same from its own JSON; a reply the
//!   client reads (whatever answers on the socket may be a stranger) does not panic, and
//!   re-encodes to itself unless it carries a status (floats);
//! - any text as a socket name gives an address or an error;
//! - any text as a rule file gives a checked configuration or an error, and a checked
//!   configuration classifies any flow to a class with a finite, non-negative weight and
//!   minimum.

use lowtide_bwss::wire::{Reply, Request};
use lowtide_bwss::{unix, Config, FlowInfo};

pub fn check(data: &[u8]) {
    for line in data.split_inclusive(|&b| b == b'\n') {
        if let Ok(req) = serde_json::from_slice::<Request>(line) {
            let again = serde_json::to_vec(&req).expect("a request encodes");
            let back: Request = serde_json::from_slice(&again).expect("its own encoding");
            assert_eq!(back, req);
        }
        if let Ok(reply) = serde_json::from_slice::<Reply>(line) {
            let again = serde_json::to_vec(&reply).expect("a reply encodes");
            let back = serde_json::from_slice::<Reply>(&again);
            if !matches!(reply, Reply::Status(_)) {
                assert_eq!(back.expect("its own encoding"), reply);
            }
        }
    }
    let text = String::from_utf8_lossy(data);
    let _ = unix::address(&text);
    if let Ok(cfg) = Config::from_toml(&text) {
        assert_eq!(cfg.validate(), Ok(()));
        for (program, local, remote) in [
            ("vlc", "10.2.1.1:5000", "10.1.1.1:8000"),
            ("curl", "[::1]:1", "[::ffff:10.1.1.1]:443"),
            ("", "[2001:db8::1]:0", "0.0.0.0:65535"),
        ] {
            let info = FlowInfo {
                program: program.into(),
                local: local.parse().expect("an address"),
                remote: remote.parse().expect("an address"),
            };
            let (class, _) = cfg.classify(&info);
            assert!(class.weight.is_finite() && class.weight >= 0.0, "{class:?}");
            assert!(
                class.min_kbps.is_finite() && class.min_kbps >= 0.0,
                "{class:?}"
            );
        }
    }
}
