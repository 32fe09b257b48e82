//! The HTTP/1.1 side of the server: one request per connection (`Connection: close`), read
//! with a bound on size and time and parsed by `httparse`, then a page, a JSON list, the
//! metrics, or a WebSocket upgrade. Keep-alive is left out: a viewer makes three requests
//! (the page, the script, the WebSocket) and the WebSocket lives for the whole stream.

use std::time::Duration;

use crate::transport::Transport;

/// The largest request head accepted.
pub const MAX_HEAD: usize = 8 << 10;
/// Headers parsed at most.
const MAX_HEADERS: usize = 32;

/// A request, as far as the server looks at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    /// The path without the query.
    pub path: String,
    /// `Upgrade: websocket` with `Connection: upgrade`, version 13 and this key.
    pub websocket_key: Option<String>,
    /// Bytes after the head that arrived with it (a client that does not wait for the
    /// handshake's answer; kept for the WebSocket reader).
    pub rest: Vec<u8>,
}

/// Why a request is refused, with the status to answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    #[error("no complete request head within {0:?}")]
    Timeout(Duration),
    #[error("request head over {MAX_HEAD} bytes")]
    TooLarge,
    #[error("malformed request: {0}")]
    Malformed(String),
    #[error("the client closed before a request")]
    Closed,
    #[error("reading the request: {0}")]
    Io(std::io::Error),
}

// The messages above show the inner error, so `source()` does not return it again (a printer
// of the whole chain would say it twice): `From` by hand instead of `#[from]`.
impl From<std::io::Error> for RequestError {
    fn from(e: std::io::Error) -> Self {
        RequestError::Io(e)
    }
}

impl RequestError {
    /// The status line's code to answer with, if an answer can still be sent.
    pub fn status(&self) -> Option<u16> {
        match self {
            RequestError::Timeout(_) => Some(408),
            RequestError::TooLarge => Some(431),
            RequestError::Malformed(_) => Some(400),
            _ => None,
        }
    }
}

/// Reads one request head within `limit`.
pub async fn read_request(
    stream: &mut Transport,
    limit: Duration,
) -> Result<Request, RequestError> {
    let mut buf = Vec::with_capacity(1024);
    let read = async {
        loop {
            let mut chunk = [0u8; 2048];
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Err(RequestError::Closed);
            }
            buf.extend_from_slice(&chunk[..n]);
            if let Some(r) = parse_head(&buf)? {
                return Ok(r);
            }
            if buf.len() > MAX_HEAD {
                return Err(RequestError::TooLarge);
            }
        }
    };
    tokio::time::timeout(limit, read)
        .await
        .map_err(|_| RequestError::Timeout(limit))?
}

/// Parses a request head from `buf`; `Ok(None)` if incomplete.
pub fn parse_head(buf: &[u8]) -> Result<Option<Request>, RequestError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let used = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(RequestError::Malformed(e.to_string())),
    };
    if used > MAX_HEAD {
        return Err(RequestError::TooLarge);
    }
    let method = req.method.unwrap_or_default().to_owned();
    let target = req.path.unwrap_or_default();
    let path = target
        .split(['?', '#'])
        .next()
        .unwrap_or_default()
        .to_owned();
    if !path.starts_with('/') {
        return Err(RequestError::Malformed(format!(
            "request target {target:?} is not an absolute path"
        )));
    }
    let header = |name: &str| {
        req.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .and_then(|h| std::str::from_utf8(h.value).ok())
    };
    let has_token = |name: &str, token: &str| {
        header(name).is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    };
    let websocket_key = (has_token("upgrade", "websocket")
        && has_token("connection", "upgrade")
        && header("sec-websocket-version").map(str::trim) == Some("13"))
    .then(|| header("sec-websocket-key").map(|k| k.trim().to_owned()))
    .flatten();
    Ok(Some(Request {
        method,
        path,
        websocket_key,
        rest: buf[used..].to_vec(),
    }))
}

/// Writes a whole response and closes the write side.
pub async fn respond(
    stream: &mut Transport,
    status: u16,
    content_type: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n",
        reason(status),
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    stream.shutdown().await
}

/// A plain-text error response.
pub async fn respond_error(stream: &mut Transport, status: u16, why: &str) -> std::io::Result<()> {
    respond(
        stream,
        status,
        "text/plain; charset=utf-8",
        format!("{why}\n").as_bytes(),
    )
    .await
}

/// The handshake's answer (RFC 6455 §4.2.2).
pub fn switching_protocols(accept: &str) -> String {
    format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {accept}\r\n\r\n"
    )
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        426 => "Upgrade Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_browser_upgrade_is_recognised() {
        let head = b"GET /live/cam?x=1 HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n\
            Connection: keep-alive, Upgrade\r\nSec-WebSocket-Version: 13\r\n\
            Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\nXY";
        let r = parse_head(head).unwrap().unwrap();
        assert_eq!(r.path, "/live/cam");
        assert_eq!(r.websocket_key.as_deref(), Some("dGhlIHNhbXBsZSBub25jZQ=="));
        assert_eq!(r.rest, b"XY");
    }

    #[test]
    fn a_plain_get_has_no_key_and_a_partial_head_waits() {
        let r = parse_head(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!((r.method.as_str(), r.websocket_key), ("GET", None));
        assert!(parse_head(b"GET / HTTP/1.1\r\nHo").unwrap().is_none());
        // Version 8 of the handshake is not RFC 6455.
        let old = b"GET /live/a HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
            Sec-WebSocket-Version: 8\r\nSec-WebSocket-Key: k\r\n\r\n";
        assert_eq!(parse_head(old).unwrap().unwrap().websocket_key, None);
    }

    #[test]
    fn garbage_is_malformed_not_a_panic() {
        for bad in [
            &b"\x16\x03\x01\x02\x00\r\n\r\n"[..],
            b"GET http://x/ HTTP/1.1\r\n\r\n",
        ] {
            let e = parse_head(bad).unwrap_err();
            assert_eq!(e.status(), Some(400), "{e}");
        }
    }
}
