//! Structured property tests of the decoder and reassembly: random *valid* frame sequences
//! (streams opened, messages cut into chunks of random sizes and interleaved across messages,
//! cancels before and after some chunks, P-ACKs in between), fed to a receiving connection
//! in random splits. Unchanged, every message not cancelled must arrive once and intact; with
//! one mutation (a bit flip, bytes inserted or deleted, a truncation, a frame replayed, a
//! field overwritten with a huge varint) the connection must fail cleanly or go on, never
//! panic and never hold more than its reassembly limit.
//!
//! Random bytes alone (see `props.rs`) rarely get past the frame type; these reach
//! reassembly, cancellation and the limits in every case.

use std::collections::BTreeMap;
use std::time::Instant;

use proptest::prelude::*;

use crate::wire::{CancelReason, DataFrame, FirstChunk, Frame, Hello, VERSION};
use crate::{Config, Connection, Side};

/// Cases per property in CI (the issue asks for 1,000 or more).
const CASES: u32 = 1024;
const LIMIT: u64 = 64 << 10;
const MAX_CHUNK: usize = 1500;

/// A message the generated sender sends.
#[derive(Debug, Clone)]
struct Msg {
    stream: u64,
    seq: u64,
    importance: u8,
    data: Vec<u8>,
    /// Chunk sizes, in order.
    chunks: Vec<usize>,
    /// Withdrawn after this many chunks (possibly 0: before any).
    cancel_after: Option<usize>,
}

/// A valid byte stream from a client, and what a receiver must deliver from it.
#[derive(Debug, Clone)]
struct Script {
    bytes: Vec<u8>,
    /// Frame boundaries in `bytes` (for replays and field overwrites).
    frames: Vec<(usize, usize)>,
    /// (stream, seq) → data of every message that is not cancelled.
    expected: BTreeMap<(u64, u64), Vec<u8>>,
}

fn script() -> impl Strategy<Value = Script> {
    let msg = (
        0..3u64,
        0..4000usize,
        any::<u8>(),
        1..MAX_CHUNK,
        any::<Option<u8>>(),
    );
    (proptest::collection::vec(msg, 1..12), any::<u64>()).prop_map(|(specs, seed)| {
        let mut rng = Lcg(seed);
        let mut next_seq = [0u64; 3];
        let msgs: Vec<Msg> = specs
            .into_iter()
            .map(|(s, len, importance, chunk, cancel)| {
                let stream = s * 2; // the connecting side's ids are even
                let seq = next_seq[s as usize];
                next_seq[s as usize] += 1;
                let data: Vec<u8> = (0..len).map(|i| (i as u64 ^ seq ^ stream) as u8).collect();
                let mut chunks = vec![];
                let mut left = len;
                while left > 0 {
                    let n = (1 + rng.below(chunk as u64) as usize).min(left);
                    chunks.push(n);
                    left -= n;
                }
                if chunks.is_empty() {
                    chunks.push(0); // an empty message is one empty first chunk
                }
                // Withdrawn before its last chunk (a message whose last byte was sent is delivered).
                let cancel_after = cancel.map(|c| c as usize % chunks.len());
                Msg {
                    stream,
                    seq,
                    importance,
                    data,
                    chunks,
                    cancel_after,
                }
            })
            .collect();
        build(&msgs, &mut rng)
    })
}

/// Encodes the messages as one interleaving of their chunks.
fn build(msgs: &[Msg], rng: &mut Lcg) -> Script {
    let mut bytes = vec![];
    let mut frames = vec![];
    let mut push = |bytes: &mut Vec<u8>, f: Frame<'_>| {
        let at = bytes.len();
        f.encode(bytes);
        frames.push((at, bytes.len()));
    };
    Hello {
        version: VERSION,
        options: vec![],
    }
    .encode(&mut bytes);
    for s in 0..3 {
        push(
            &mut bytes,
            Frame::StreamOpen {
                stream: s * 2,
                weight_milli: 1000,
            },
        );
    }
    // Per message: chunks sent so far, offset so far, done.
    let mut state: Vec<(usize, usize, bool)> = vec![(0, 0, false); msgs.len()];
    let mut acked = bytes.len() as u64;
    loop {
        let open: Vec<usize> = (0..msgs.len()).filter(|&i| !state[i].2).collect();
        let Some(&i) = open.get(rng.below(open.len().max(1) as u64) as usize) else {
            break;
        };
        let m = &msgs[i];
        let (sent, offset, _) = state[i];
        if m.cancel_after == Some(sent) {
            push(
                &mut bytes,
                Frame::Cancel {
                    stream: m.stream,
                    seq: m.seq,
                    reason: CancelReason::Application,
                },
            );
            state[i].2 = true;
            continue;
        }
        let n = m.chunks[sent];
        let payload = &m.data[offset..offset + n];
        let first = (sent == 0).then_some(FirstChunk {
            importance: m.importance,
            send_time_us: 1000 + i as u64,
            total_len: m.data.len() as u64,
        });
        push(
            &mut bytes,
            Frame::Data(DataFrame {
                stream: m.stream,
                seq: m.seq,
                offset: offset as u64,
                first,
                payload,
            }),
        );
        state[i] = (sent + 1, offset + n, sent + 1 == m.chunks.len());
        if rng.below(8) == 0 {
            acked += rng.below(2000);
            push(
                &mut bytes,
                Frame::PAck {
                    bytes: acked,
                    recv_time_us: acked,
                },
            );
        }
    }
    let expected = msgs
        .iter()
        .filter(|m| m.cancel_after.is_none())
        .map(|m| ((m.stream, m.seq), m.data.clone()))
        .collect();
    Script {
        bytes,
        frames,
        expected,
    }
}

/// A tiny deterministic generator for the choices inside one case.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        if n == 0 {
            0
        } else {
            (self.0 >> 33) % n
        }
    }
}

/// What feeding bytes to a fresh receiver gave.
struct Fed {
    delivered: Vec<((u64, u64), Vec<u8>)>,
    failed: bool,
    conn: Connection,
}

/// Feeds `bytes` in pieces of the given sizes; checks the memory bound after every piece.
fn feed(bytes: &[u8], splits: &[usize]) -> Result<Fed, TestCaseError> {
    let cfg = Config {
        max_reassembly_bytes: LIMIT,
        max_chunk_len: MAX_CHUNK as u64 * 2,
        ..Config::default()
    };
    let now = Instant::now();
    let mut conn = Connection::new(cfg, Side::Server, now).expect("valid config");
    let mut delivered = vec![];
    let mut rest = bytes;
    let mut i = 0;
    let mut failed = false;
    while !rest.is_empty() {
        let n = splits[i % splits.len()].min(rest.len());
        let r = conn.handle_bytes(now, &rest[..n]);
        prop_assert!(
            conn.recv_memory() <= LIMIT,
            "{} > {LIMIT}",
            conn.recv_memory()
        );
        while let Some(m) = conn.poll_message() {
            delivered.push(((m.stream, m.seq), m.data.to_vec()));
        }
        if r.is_err() {
            prop_assert!(conn.is_closed(), "an error must close the connection");
            failed = true;
            break;
        }
        rest = &rest[n..];
        i += 1;
    }
    Ok(Fed {
        delivered,
        failed,
        conn,
    })
}

#[derive(Debug, Clone)]
enum Mutation {
    FlipBit(usize, u8),
    Delete(usize, usize),
    Insert(usize, Vec<u8>),
    Truncate(usize),
    /// Replays frame k right after itself.
    Replay(usize),
    /// Overwrites the byte after frame k's type with a 10-byte varint near 2^64.
    HugeVarint(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 0..8u8).prop_map(|(a, b)| Mutation::FlipBit(a, b)),
        (any::<usize>(), 1..16usize).prop_map(|(a, n)| Mutation::Delete(a, n)),
        (
            any::<usize>(),
            proptest::collection::vec(any::<u8>(), 1..16)
        )
            .prop_map(|(a, b)| Mutation::Insert(a, b)),
        any::<usize>().prop_map(Mutation::Truncate),
        any::<usize>().prop_map(Mutation::Replay),
        any::<usize>().prop_map(Mutation::HugeVarint),
    ]
}

fn apply(s: &Script, m: &Mutation) -> Vec<u8> {
    let mut b = s.bytes.clone();
    let len = b.len();
    let frame = |k: usize| s.frames[k % s.frames.len()];
    match m {
        Mutation::FlipBit(at, bit) => b[at % len] ^= 1 << bit,
        Mutation::Delete(at, n) => {
            let at = at % len;
            b.drain(at..(at + n).min(len));
        }
        Mutation::Insert(at, x) => {
            let at = at % (len + 1);
            b.splice(at..at, x.iter().copied());
        }
        Mutation::Truncate(at) => b.truncate(at % len),
        Mutation::Replay(k) => {
            let (a, e) = frame(*k);
            let copy = b[a..e].to_vec();
            b.splice(e..e, copy);
        }
        Mutation::HugeVarint(k) => {
            let (a, e) = frame(*k);
            let huge = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
            let at = (a + 1).min(e);
            b.splice(at..(at + 1).min(e), huge);
        }
    }
    b
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    #[test]
    fn a_valid_sequence_delivers_every_message_once_intact(
        s in script(),
        splits in proptest::collection::vec(1..3000usize, 1..8),
    ) {
        let fed = feed(&s.bytes, &splits)?;
        prop_assert!(!fed.failed, "a valid sequence failed: {:?}", fed.conn.error());
        let mut got = BTreeMap::new();
        for (key, data) in fed.delivered {
            prop_assert!(got.insert(key, data).is_none(), "{:?} delivered twice", key);
        }
        prop_assert_eq!(got.len(), s.expected.len());
        for (key, data) in &s.expected {
            prop_assert_eq!(got.get(key), Some(data), "{:?}", key);
        }
        prop_assert_eq!(fed.conn.recv_memory(), 0, "a cancelled or finished message left memory");
    }

    #[test]
    fn a_mutated_sequence_fails_cleanly_or_goes_on(
        s in script(),
        m in mutation(),
        splits in proptest::collection::vec(1..3000usize, 1..8),
    ) {
        let bytes = apply(&s, &m);
        let fed = feed(&bytes, &splits)?;
        // Whatever was delivered is a message of the script, intact or not (a flipped
        // payload bit is not the transport's to detect: TCP's checksum is).
        for (key, data) in &fed.delivered {
            prop_assert!(data.len() <= 4000, "{:?}: {} bytes", key, data.len());
        }
    }
}
