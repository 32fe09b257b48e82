//! Limits and bad input: precise errors, bounded memory, a CLOSE frame to the peer.

use std::time::Instant;

use crate::wire::{CancelReason, DataFrame, FirstChunk, Frame, Hello, VERSION};
use crate::{Config, Connection, Event, ProtocolError, Side, TcpState};

fn server(cfg: Config) -> (Connection, Instant) {
    let now = Instant::now();
    (Connection::new(cfg, Side::Server, now).unwrap(), now)
}

pub(super) fn hello() -> Vec<u8> {
    let mut v = Vec::new();
    Hello {
        version: VERSION,
        options: vec![],
    }
    .encode(&mut v);
    v
}

pub(super) fn first(stream: u64, seq: u64, total: u64, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    Frame::Data(DataFrame {
        stream,
        seq,
        offset: 0,
        first: Some(FirstChunk {
            importance: 0,
            send_time_us: 0,
            total_len: total,
        }),
        payload,
    })
    .encode(&mut v);
    v
}

/// The CLOSE frame the connection staged for the peer, decoded.
fn staged_close(c: &mut Connection, now: Instant) -> (u64, String) {
    c.poll_transmit(now, &TcpState::default());
    let bytes: Vec<u8> = c.transmit_segments().flatten().copied().collect();
    let (_, mut pos) = Hello::decode(&bytes).unwrap().unwrap();
    while let Some((f, n)) = Frame::decode(&bytes[pos..], 1 << 20).unwrap() {
        if let Frame::Close { code, reason } = f {
            return (code, reason.to_owned());
        }
        pos += n;
    }
    panic!("no CLOSE staged");
}

#[test]
fn garbage_instead_of_a_handshake_is_rejected() {
    let (mut c, now) = server(Config::default());
    let e = c.handle_bytes(now, b"GET / HTTP/1.1\r\n\r\n").unwrap_err();
    assert!(
        matches!(
            e,
            ProtocolError::Decode(crate::wire::DecodeError::BadMagic(_))
        ),
        "{e}"
    );
    assert!(c.is_closed());
    let (code, reason) = staged_close(&mut c, now);
    assert_eq!(code, 1);
    assert!(reason.contains("bad magic"), "{reason}");
    assert!(c.handle_bytes(now, b"more").is_err(), "stays failed");
}

#[test]
fn oversized_message_is_refused_before_any_payload() {
    let cfg = Config {
        max_message_size: 1000,
        ..Config::default()
    };
    let (mut c, now) = server(cfg);
    let mut b = hello();
    b.extend(first(0, 0, 1001, b"x"));
    let e = c.handle_bytes(now, &b).unwrap_err();
    assert_eq!(
        e,
        ProtocolError::MessageTooLarge {
            stream: 0,
            seq: 0,
            size: 1001,
            max: 1000
        }
    );
    assert_eq!(staged_close(&mut c, now).0, 2);
}

#[test]
fn too_many_streams() {
    let cfg = Config {
        max_streams: 2,
        ..Config::default()
    };
    let (mut c, now) = server(cfg);
    let mut b = hello();
    for s in 0..3 {
        Frame::StreamOpen {
            stream: s * 2,
            weight_milli: 1000,
        }
        .encode(&mut b);
    }
    assert_eq!(
        c.handle_bytes(now, &b).unwrap_err(),
        ProtocolError::TooManyStreams { max: 2 }
    );
}

#[test]
fn partial_messages_beyond_the_memory_budget_close_the_channel() {
    let cfg = Config {
        max_reassembly_bytes: 200_000,
        max_chunk_len: 10_000,
        ..Config::default()
    };
    let (mut c, now) = server(cfg);
    c.handle_bytes(now, &hello()).unwrap();
    let chunk = vec![0u8; 10_000];
    let mut err = None;
    for seq in 0..100 {
        if let Err(e) = c.handle_bytes(now, &first(0, seq, 1 << 20, &chunk)) {
            err = Some(e);
            break;
        }
        assert!(c.recv_memory() <= 200_000);
    }
    assert!(
        matches!(err, Some(ProtocolError::ReassemblyMemoryExceeded { .. })),
        "{err:?}"
    );
    assert_eq!(staged_close(&mut c, now).0, 4);
}

#[test]
fn chunk_sequence_violations() {
    let (mut c, now) = server(Config::default());
    let mut b = hello();
    b.extend(first(0, 0, 100, &[1; 10]));
    Frame::Data(DataFrame {
        stream: 0,
        seq: 0,
        offset: 20,
        first: None,
        payload: &[1; 10],
    })
    .encode(&mut b);
    let e = c.handle_bytes(now, &b).unwrap_err();
    assert_eq!(
        e,
        ProtocolError::OffsetMismatch {
            stream: 0,
            seq: 0,
            expected: 10,
            got: 20
        }
    );

    let (mut c, now) = server(Config::default());
    let mut b = hello();
    Frame::Data(DataFrame {
        stream: 0,
        seq: 5,
        offset: 3,
        first: None,
        payload: &[1; 10],
    })
    .encode(&mut b);
    assert_eq!(
        c.handle_bytes(now, &b).unwrap_err(),
        ProtocolError::UnknownMessage { stream: 0, seq: 5 }
    );

    let (mut c, now) = server(Config::default());
    let mut b = hello();
    b.extend(first(0, 0, 5, &[1; 10]));
    assert!(matches!(
        c.handle_bytes(now, &b).unwrap_err(),
        ProtocolError::ChunkBeyondEnd { .. }
    ));
}

#[test]
fn byte_by_byte_feeding_parses_the_same() {
    let (mut c, now) = server(Config::default());
    let mut b = hello();
    b.extend(first(0, 0, 20, &[7; 12]));
    Frame::Data(DataFrame {
        stream: 0,
        seq: 0,
        offset: 12,
        first: None,
        payload: &[7; 8],
    })
    .encode(&mut b);
    Frame::Cancel {
        stream: 0,
        seq: 1,
        reason: CancelReason::Expired,
    }
    .encode(&mut b);
    Frame::Close {
        code: 0,
        reason: "bye",
    }
    .encode(&mut b);
    for byte in &b {
        c.handle_bytes(now, std::slice::from_ref(byte)).unwrap();
    }
    assert_eq!(c.poll_message().unwrap().data.len(), 20);
    let evs: Vec<Event> = std::iter::from_fn(|| c.poll_event()).collect();
    assert!(
        matches!(evs[0], Event::PeerCancelled(p) if p.seq == 1 && p.reason == CancelReason::Expired)
    );
    assert!(matches!(&evs[1], Event::Closed { by_peer: true, code: 0, reason } if reason == "bye"));
}

#[test]
fn whole_messages_of_a_shared_read_arrive_without_copy_and_the_read_is_charged() {
    let (mut c, now) = server(Config {
        max_pinning_reads: 0,
        ..Config::default()
    });
    c.handle_bytes(now, &hello()).unwrap();
    let mut read = Vec::new();
    let big = vec![5u8; 3000];
    read.extend(first(0, 0, 3000, &big));
    read.extend(first(0, 1, 10, &[6u8; 10]));
    let len = read.len() as u64;
    let read = bytes::Bytes::from(read);
    let range = read.as_ptr() as usize..read.as_ptr() as usize + read.len();
    c.handle_read(now, read).unwrap();
    // the large message is a slice of the read; it carries the read's other bytes as its
    // charge (the small one is copied and charged its own 10 bytes)
    assert_eq!(c.recv_memory(), len + 10);
    let m = c.poll_message().unwrap();
    assert_eq!(m.data.len(), 3000);
    assert!(range.contains(&(m.data.as_ptr() as usize)), "zero copy");
    assert_eq!(c.recv_memory(), 10);
    let m = c.poll_message().unwrap();
    assert!(
        !range.contains(&(m.data.as_ptr() as usize)),
        "small: copied"
    );
    assert_eq!(c.recv_memory(), 0);
}

#[test]
fn without_pinning_reads_a_message_smaller_than_a_quarter_of_its_read_is_copied() {
    let (mut c, now) = server(Config {
        max_pinning_reads: 0,
        ..Config::default()
    });
    c.handle_bytes(now, &hello()).unwrap();
    let mut read = Vec::new();
    read.extend(first(0, 0, 1000, &[1u8; 1000]));
    read.extend(first(0, 1, 4000, &[2u8; 4000]));
    let read = bytes::Bytes::from(read);
    let range = read.as_ptr() as usize..read.as_ptr() as usize + read.len();
    c.handle_read(now, read).unwrap();
    let a = c.poll_message().unwrap();
    let b = c.poll_message().unwrap();
    assert!(!range.contains(&(a.data.as_ptr() as usize)));
    assert!(range.contains(&(b.data.as_ptr() as usize)));
    assert_eq!(c.recv_memory(), 0);
}

/// A read of `n` whole 1000-byte messages (each under a quarter of the read), `seq` on.
fn small_messages(seq: u64, n: u64) -> bytes::Bytes {
    let mut read = Vec::new();
    for s in seq..seq + n {
        read.extend(first(0, s, 1000, &[s as u8; 1000]));
    }
    bytes::Bytes::from(read)
}

#[test]
fn small_messages_kept_by_the_application_pin_at_most_max_pinning_reads_reads() {
    let (mut c, now) = server(Config {
        max_pinning_reads: 3,
        ..Config::default()
    });
    c.handle_bytes(now, &hello()).unwrap();
    let mut kept: Vec<Vec<crate::Received>> = Vec::new();
    let mut pinned_bytes = 0;
    for i in 0..6u64 {
        let read = small_messages(i * 8, 8);
        let range = read.as_ptr() as usize..read.as_ptr() as usize + read.len();
        c.handle_read(now, read.clone()).unwrap();
        let msgs: Vec<_> = std::iter::from_fn(|| c.poll_message()).collect();
        assert_eq!(msgs.len(), 8);
        let sliced = msgs
            .iter()
            .filter(|m| range.contains(&(m.data.as_ptr() as usize)))
            .count();
        if i < 3 {
            assert_eq!(
                sliced, 8,
                "read {i}: within the bound, every message is a slice"
            );
            pinned_bytes += read.len();
        } else {
            assert_eq!(
                sliced, 0,
                "read {i}: beyond the bound, every message is a copy"
            );
        }
        assert!(msgs
            .iter()
            .enumerate()
            .all(|(k, m)| m.seq == i * 8 + k as u64 && m.data.iter().all(|&b| b == m.seq as u8)));
        assert_eq!(c.pinned_reads(), (i as usize + 1).min(3));
        assert_eq!(c.recv_memory(), 0, "taken messages are not charged");
        kept.push(msgs);
    }
    // what the kept messages pin beyond their own bytes: three reads, whatever else is kept
    assert!(pinned_bytes <= 3 * small_messages(0, 8).len());
    // the application drops the messages of the first read: its buffer is free, and the next
    // read's small messages are slices again
    drop(kept.remove(0));
    assert_eq!(c.pinned_reads(), 2);
    let read = small_messages(48, 8);
    let range = read.as_ptr() as usize..read.as_ptr() as usize + read.len();
    c.handle_read(now, read.clone()).unwrap();
    assert!(std::iter::from_fn(|| c.poll_message())
        .all(|m| range.contains(&(m.data.as_ptr() as usize))));
    drop(read);
    assert_eq!(
        c.pinned_reads(),
        2,
        "the read's messages were dropped at once"
    );
}

#[test]
fn small_messages_waiting_for_the_application_count_as_pinning_and_are_charged() {
    let (mut c, now) = server(Config {
        max_pinning_reads: 2,
        ..Config::default()
    });
    c.handle_bytes(now, &hello()).unwrap();
    let reads: Vec<_> = (0..3).map(|i| small_messages(i * 8, 8)).collect();
    for r in &reads {
        c.handle_read(now, r.clone()).unwrap();
    }
    assert_eq!(c.pinned_reads(), 2);
    // the two pinned reads are charged whole (headers too), the copied messages by their bytes
    let charged = (reads[0].len() + reads[1].len() + 8 * 1000) as u64;
    assert_eq!(c.recv_memory(), charged);
    let msgs: Vec<_> = std::iter::from_fn(|| c.poll_message()).collect();
    assert_eq!(msgs.len(), 24);
    assert_eq!(c.recv_memory(), 0);
    drop(msgs);
    assert_eq!(c.pinned_reads(), 0);
}

/// The driver's reads into buffers of `read_chunk` plus one frame (320 KB by default): each
/// read is appended to the buffer `take_read_buf` lends, which is the rest of the last read's
/// allocation while that has room; a message kept as a slice keeps the whole allocation alive.
#[test]
fn a_kept_message_pins_at_most_four_times_its_size_also_in_a_small_read() {
    let (mut c, now) = server(Config {
        max_pinning_reads: 0,
        max_chunk_len: 128 << 10,
        ..Config::default()
    });
    c.handle_bytes(now, &hello()).unwrap();
    let alloc_len = 320 << 10;
    let (mut buf, _) = c.take_read_buf();
    buf.reserve(alloc_len);
    let alloc = buf.as_ptr() as usize..buf.as_ptr() as usize + buf.capacity();
    // a large message, then reads that continue in the rest of its allocation: two 8 KB
    // messages (each half of its read, a fortieth of the buffer), then 60 KB (over a quarter
    // of what is left of the buffer, under a quarter of the whole)
    let reads: [&[usize]; 3] = [&[100_000], &[8192, 8192], &[60_000]];
    let mut kept = Vec::new();
    let mut seq = 0;
    for sizes in reads {
        let mut read = Vec::new();
        for &n in sizes {
            read.extend(first(0, seq, n as u64, &vec![seq as u8; n]));
            seq += 1;
        }
        if kept.is_empty() {
            assert_eq!(buf.capacity(), alloc.len());
        } else {
            buf = c.take_read_buf().0;
            assert!(
                alloc.contains(&(buf.as_ptr() as usize)),
                "the same allocation"
            );
        }
        buf.extend_from_slice(&read);
        c.handle_read_buf(now, buf, read.len()).unwrap();
        kept.extend(std::iter::from_fn(|| c.poll_message()));
        buf = bytes::BytesMut::new();
    }
    assert_eq!(kept.len(), 4);
    for m in &kept {
        assert!(m.data.iter().all(|&b| b == m.seq as u8));
        let sliced = alloc.contains(&(m.data.as_ptr() as usize));
        assert_eq!(sliced, m.seq == 0, "message {} sliced: {sliced}", m.seq);
        if sliced {
            assert!(4 * m.data.len() >= alloc.len(), "pins at most 4x its size");
        }
    }
    assert_eq!(c.pinned_reads(), 0);
}

#[test]
fn a_large_frame_split_across_reads_is_completed_in_place_and_delivered_without_copy() {
    let (mut c, now) = server(Config::default());
    c.handle_bytes(now, &hello()).unwrap();
    let frame = first(0, 0, 50_000, &[3u8; 50_000]);
    let (mut buf, need) = c.take_read_buf();
    assert_eq!((buf.len(), need), (0, None));
    buf.reserve(frame.len());
    let ptr = buf.as_ptr() as usize;
    buf.extend_from_slice(&frame[..1000]);
    c.handle_read_buf(now, buf, 1000).unwrap();
    assert_eq!(c.recv_memory(), 1000, "the incomplete frame is held");
    let (mut buf, need) = c.take_read_buf();
    assert_eq!(need, Some(frame.len() - 1000));
    buf.extend_from_slice(&frame[1000..]);
    c.handle_read_buf(now, buf, frame.len() - 1000).unwrap();
    let m = c.poll_message().unwrap();
    assert_eq!(m.data.len(), 50_000);
    assert!(
        (ptr..ptr + frame.len()).contains(&(m.data.as_ptr() as usize)),
        "the message is a slice of the read buffer"
    );
    assert_eq!(c.recv_memory(), 0);
}

#[test]
fn a_completed_frame_is_parsed_alone_so_a_large_read_after_it_stays_zero_copy() {
    let (mut c, now) = server(Config::default());
    c.handle_bytes(now, &hello()).unwrap();
    let a = first(0, 0, 40_000, &[1u8; 40_000]);
    let b = first(0, 1, 40_000, &[2u8; 40_000]);
    let (mut buf, _) = c.take_read_buf();
    buf.reserve(4 * a.len());
    buf.extend_from_slice(&a[..30_000]);
    c.handle_read_buf(now, buf, 30_000).unwrap();
    // the next read brings the rest of `a` and all of `b`: together over four times `a`'s
    // rest, but `a` is a frame of its own and `b` is more than a quarter of its part
    let (mut buf, _) = c.take_read_buf();
    let range = buf.as_ptr() as usize..buf.as_ptr() as usize + buf.capacity();
    buf.extend_from_slice(&a[30_000..]);
    buf.extend_from_slice(&b);
    c.handle_read_buf(now, buf, a.len() - 30_000 + b.len())
        .unwrap();
    for (fill, m) in [1u8, 2]
        .into_iter()
        .zip(std::iter::from_fn(|| c.poll_message()))
    {
        assert!(m.data.iter().all(|&x| x == fill));
        assert!(range.contains(&(m.data.as_ptr() as usize)), "zero copy");
    }
    assert_eq!(c.recv_memory(), 0);
}

#[test]
fn a_bad_frame_in_the_read_buffer_closes_with_a_precise_error() {
    let cfg = Config {
        max_chunk_len: 1024,
        ..Config::default()
    };
    let (mut c, now) = server(cfg);
    c.handle_bytes(now, &hello()).unwrap();
    let frame = first(0, 0, 5000, &[3u8; 5000]);
    let (mut buf, _) = c.take_read_buf();
    buf.extend_from_slice(&frame[..100]);
    let e = c.handle_read_buf(now, buf, 100).unwrap_err();
    assert!(c.is_closed(), "{e}");
    assert!(
        c.take_read_buf().0.is_empty(),
        "nothing held after the error"
    );
}
