//! Feeds arbitrary bytes to the frame decoder and to a whole receiving connection (after a
//! valid handshake), split at a fuzzer-chosen point. Neither may panic; the connection's
//! receive memory must stay within its limit.

use std::time::Instant;

use lowtide_proto::wire::{Frame, Hello, VERSION};
use lowtide_proto::{Config, Connection, Side};

pub fn check(data: &[u8]) {
    let mut pos = 0;
    while let Ok(Some((_, n))) = Frame::decode(&data[pos..], 4096) {
        pos += n;
    }
    let _ = Hello::decode(data);

    let limit = 16 << 10;
    let cfg = Config {
        max_reassembly_bytes: limit,
        max_chunk_len: 2048,
        ..Config::default()
    };
    let now = Instant::now();
    let mut c = Connection::new(cfg, Side::Server, now).expect("valid config");
    let mut input = Vec::new();
    Hello {
        version: VERSION,
        options: vec![],
    }
    .encode(&mut input);
    input.extend_from_slice(data);
    let split = data.first().map_or(0, |&b| b as usize).min(input.len());
    for part in [&input[..split], &input[split..]] {
        if c.handle_bytes(now, part).is_err() {
            break;
        }
        assert!(c.recv_memory() <= limit);
    }
}
