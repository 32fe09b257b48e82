//! Feeds arbitrary bytes to both decoders of the messages between `lowtide serve` and a
//! viewer (`viewer_wire`): nothing may panic, and a decoded message re-encodes to the bytes it
//! was read from (the fixed part of a shown report, hello, dropped notice or end; a unit's
//! header and its payload; a problem's whole text). Then the other way: a hello with any path
//! decodes to that path cut to 255 bytes at a character boundary.

use lowtide_serve::viewer_wire::{
    decode_from_server, decode_from_viewer, encode_dropped, encode_end, encode_hello, encode_shown,
    encode_unit_header, FromServer, FromViewer, MAX_PROBLEM_LEN, TAG_PROBLEM, UNIT_HEADER_LEN,
};

pub fn check(data: &[u8]) {
    match decode_from_viewer(data) {
        Ok(FromViewer::Shown {
            index,
            decoded_us,
            shown_us,
        }) => {
            let m = encode_shown(index, decoded_us, shown_us);
            assert_eq!(&data[..m.len()], &m[..]);
        }
        Ok(FromViewer::Problem(text)) => {
            assert!(text.len() <= MAX_PROBLEM_LEN);
            assert_eq!(data[0], TAG_PROBLEM);
            assert_eq!(&data[1..], text.as_bytes());
        }
        Err(_) => {}
    }

    match decode_from_server(data) {
        Ok(FromServer::Hello {
            codec,
            server_us,
            path,
        }) => {
            assert!(path.len() <= 255);
            let m = encode_hello(codec, server_us, path);
            assert_eq!(&data[..m.len()], &m[..]);
        }
        Ok(FromServer::Unit(fields, payload)) => {
            let mut m = encode_unit_header(&fields).to_vec();
            assert_eq!(m.len(), UNIT_HEADER_LEN);
            m.extend_from_slice(payload);
            assert_eq!(m, data);
        }
        Ok(FromServer::Dropped { units, reason }) => {
            let m = encode_dropped(units, reason);
            assert_eq!(&data[..m.len()], &m[..]);
        }
        Ok(FromServer::End) => {
            let m = encode_end();
            assert_eq!(&data[..m.len()], &m[..]);
        }
        Err(_) => {}
    }

    // Any text as a hello's path: it reads back cut to 255 bytes at a character boundary.
    if let (Some((&codec, rest)), true) = (data.split_first(), data.len() >= 9) {
        let server_us = u64::from_be_bytes(rest[..8].try_into().expect("8 bytes"));
        let path = String::from_utf8_lossy(&rest[8..]);
        let m = encode_hello(codec, server_us, &path);
        match decode_from_server(&m) {
            Ok(FromServer::Hello {
                codec: c,
                server_us: s,
                path: p,
            }) => {
                assert_eq!((c, s), (codec, server_us));
                assert!(path.starts_with(p));
                assert!(p.len() <= 255);
                if p.len() < path.len() {
                    // Cut only as much as 255 bytes forces: the next character does not fit.
                    let next = path[p.len()..].chars().next().map_or(0, char::len_utf8);
                    assert!(p.len() + next > 255, "cut at {} of {}", p.len(), path.len());
                }
                assert_eq!(m.len(), 12 + p.len());
            }
            other => panic!("hello read back as {other:?}"),
        }
    }
}
