//! TFRC's datagrams (lowtide-tfrc's `packet`: data, feedback, probes, close; UDP from anyone)
//! and the receiver's reassembly of the pieces they carry.
//!
//! Input: byte 0 picks `max_message` (bits 0-1) and the reassembly memory (bits 2-3); the
//! rest is one datagram, then, split at length bytes, a stream of datagrams. Must hold:
//! - `decode` never panics; a decoded datagram re-encodes (minimal varints) to no more bytes
//!   than it was read from and decodes again to the same packet;
//! - a data packet's pieces each lie within their message (`offset + len ≤ total_len ≤
//!   max_message`), the first piece's packet exists (`frag_index ≤ seq`), and header and
//!   pieces account for every byte;
//! - the pieces of the stream, fed to a `Reassembly`: its memory never above its limit, and
//!   a message it delivers is `total_len` long with every byte sent by some piece (never a
//!   message with holes);
//! - a whole receiving `Endpoint` fed the same datagrams does not panic and delivers no
//!   message above `max_message_size`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use lowtide_tfrc::packet::{encode_data_header, DataHeader, Packet, Piece};
use lowtide_tfrc::reassembly::Reassembly;
use lowtide_tfrc::{Endpoint, TfrcConfig};

pub fn check(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let max_message = [1, 64, 4096, 16 << 20][usize::from(pick & 3)];
    let memory = [0, 100, 4096, 1 << 20][usize::from(pick >> 2 & 3)];
    check_datagram(rest, max_message);

    // The stream: each datagram behind its length byte.
    let mut datagrams = Vec::new();
    let mut tail = rest;
    while let Some((&len, after)) = tail.split_first() {
        let (d, after) = after.split_at(usize::from(len).min(after.len()));
        datagrams.push(d);
        tail = after;
    }
    // Coverage is tracked per byte, so messages stay small here.
    reassemble(&datagrams, max_message.min(4096), memory);

    let now = Instant::now();
    let cfg = TfrcConfig {
        max_message_size: max_message.max(1),
        max_reassembly_bytes: memory.max(max_message.max(1)),
        ..TfrcConfig::default()
    };
    let mut e = Endpoint::new(cfg, now).expect("a valid config");
    for (i, d) in datagrams.iter().enumerate() {
        let at = now + Duration::from_millis(i as u64 * 7);
        let _ = e.handle_datagram(at, d);
        while let Some(m) = e.poll_message() {
            assert!(m.data.len() as u64 <= cfg.max_message_size);
        }
        while e.poll_transmit(at).is_some() {}
        while e.poll_event().is_some() {}
        if let Some(t) = e.poll_timeout().filter(|t| *t <= at) {
            e.handle_timeout(t);
        }
    }
}

fn check_datagram(buf: &[u8], max_message: u64) {
    let Ok(p) = Packet::decode(buf, max_message) else {
        return;
    };
    let mut out = Vec::new();
    p.encode(&mut out);
    assert!(out.len() <= buf.len(), "{p:?} grew re-encoded");
    assert_eq!(Packet::decode(&out, max_message), Ok(p), "round trip");
    if let Packet::Data(h, pieces) = p {
        let mut len = header_len(&h);
        let mut n = 0;
        for piece in pieces {
            n += 1;
            let end = piece.offset + piece.payload.len() as u64;
            assert!(end <= piece.total_len && piece.total_len <= max_message);
            assert!(piece.frag_index < piece.frag_count && piece.frag_index <= h.seq);
            len += piece.encoded_len();
        }
        assert!(n > 0, "a data packet without a piece");
        assert_eq!(len, out.len(), "bytes outside the header and pieces");
    }
}

fn header_len(h: &DataHeader) -> usize {
    let mut v = Vec::new();
    encode_data_header(&mut v, h);
    v.len()
}

/// What was sent of one message: its length and which bytes came.
struct Sent {
    total: usize,
    bytes: HashMap<usize, u8>,
}

fn reassemble(datagrams: &[&[u8]], max_message: u64, memory: u64) {
    let now = Instant::now();
    let mut r = Reassembly::new(memory);
    let mut sent: HashMap<u64, Sent> = HashMap::new();
    for d in datagrams {
        let Ok(Packet::Data(h, pieces)) = Packet::decode(d, max_message) else {
            continue;
        };
        for piece in pieces {
            record(&mut sent, &piece);
            r.on_piece(now, h.seq, &piece);
            assert!(
                r.memory() <= memory,
                "{} bytes held, limit {memory}",
                r.memory()
            );
        }
        while let Some(m) = r.pop() {
            let s = &sent[&m.msg];
            assert_eq!(m.data.len(), s.total);
            for (i, b) in m.data.iter().enumerate() {
                assert_eq!(
                    s.bytes.get(&i),
                    Some(b),
                    "message {} delivered with byte {i} never sent",
                    m.msg
                );
            }
        }
    }
}

/// Bytes a piece sends; a message's later pieces may overwrite earlier ones' bytes.
fn record(sent: &mut HashMap<u64, Sent>, piece: &Piece<'_>) {
    let s = sent.entry(piece.msg).or_insert_with(|| Sent {
        total: piece.total_len as usize,
        bytes: HashMap::new(),
    });
    s.total = piece.total_len as usize;
    for (i, &b) in piece.payload.iter().enumerate() {
        s.bytes.insert(piece.offset as usize + i, b);
    }
}
