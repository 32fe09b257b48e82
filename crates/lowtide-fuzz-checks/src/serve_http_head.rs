//! Feeds arbitrary bytes to `lowtide serve`'s request-head parser (`http::parse_head`, the
//! first parser of a stranger's bytes): nothing may panic; a parsed request's path is absolute
//! with its query and fragment cut off, its head within `MAX_HEAD` and its `rest` exactly the
//! bytes after the head; the head alone parses the same, and a prefix of it (cut one byte
//! short, at half, at one byte) waits for more rather than failing (the reader parses after
//! each read); a websocket key only when `Upgrade: websocket`, `Connection: upgrade`
//! and version 13 are all there (checked against httparse's headers directly); the same head
//! padded past `MAX_HEAD` is refused.

use lowtide_serve::http::{parse_head, Request, RequestError, MAX_HEAD};

/// What the headers say about an upgrade, read straight from httparse (the oracle).
fn expected_key(head: &[u8]) -> Option<String> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    req.parse(head).ok()?;
    let first = |name: &str| {
        req.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    };
    let lists = |name: &str, token: &str| {
        first(name)
            .and_then(|v| std::str::from_utf8(v).ok())
            .is_some_and(|v| v.to_ascii_lowercase().split(',').any(|t| t.trim() == token))
    };
    let version = first("Sec-WebSocket-Version").and_then(|v| std::str::from_utf8(v).ok());
    if !(lists("Upgrade", "websocket")
        && lists("Connection", "upgrade")
        && version.map(str::trim) == Some("13"))
    {
        return None;
    }
    let key = std::str::from_utf8(first("Sec-WebSocket-Key")?).ok()?;
    Some(key.trim().to_owned())
}

fn check_request(data: &[u8], r: &Request) {
    assert!(r.path.starts_with('/'), "path {:?}", r.path);
    assert!(!r.path.contains(['?', '#']), "path {:?}", r.path);
    assert!(!r.method.is_empty());
    let used = data.len() - r.rest.len();
    assert!(used <= MAX_HEAD);
    assert_eq!(&data[used..], &r.rest[..]);
    assert_eq!(r.websocket_key, expected_key(&data[..used]));
    if let Some(k) = &r.websocket_key {
        assert_eq!(k.trim(), k);
    }
}

pub fn check(data: &[u8]) {
    let Ok(Some(r)) = parse_head(data) else {
        return;
    };
    check_request(data, &r);
    let used = data.len() - r.rest.len();
    // The head alone is the same request with nothing after it.
    let alone = parse_head(&data[..used])
        .expect("the head alone")
        .expect("complete");
    assert_eq!(
        alone,
        Request {
            rest: Vec::new(),
            ..r.clone()
        }
    );
    // Every shorter prefix is incomplete, never an error: the server parses after each read.
    for cut in [used - 1, used / 2, 1] {
        assert!(
            matches!(parse_head(&data[..cut.min(used - 1)]), Ok(None)),
            "prefix of {cut} bytes of a {used}-byte head"
        );
    }
    // The same head with a header padding it past MAX_HEAD is refused (too large, or too
    // many headers when it already had the most httparse takes here).
    let line_end = data[..used]
        .iter()
        .position(|&b| b == b'\n')
        .expect("a request line")
        + 1;
    let mut big = data[..line_end].to_vec();
    big.extend_from_slice(b"X-Pad: ");
    big.resize(big.len() + MAX_HEAD, b'a');
    big.extend_from_slice(b"\r\n");
    big.extend_from_slice(&data[line_end..]);
    assert!(
        matches!(
            parse_head(&big),
            Err(RequestError::TooLarge | RequestError::Malformed(_))
        ),
        "a head of {} bytes was accepted",
        big.len()
    );
}
