//! A request head parsed from bytes, and the routing table: pure functions, so every rule
//! of the endpoint (what is 400, 404, 405, 413, 431) is tested without a socket. The
//! request line and the header lines are httparse's; what they mean here (framing, the
//! connection's keep-alive, the routes) is this module's.

use super::{Documents, TEXT_FORMAT};
use bytes::Bytes;

/// Headers parsed without an allocation; a larger configured limit takes a vector.
const STACK_HEADERS: usize = 64;

/// The parts of a request head the endpoint uses.
#[derive(Debug, PartialEq, Eq)]
pub struct Head<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub http10: bool,
    pub has_body: bool,
    pub close: bool,
}

/// What the front of a connection's buffer holds.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// A whole head, `len` bytes long (what follows is the next request).
    Complete { head: Head<'a>, len: usize },
    /// Not yet a whole head, and nothing wrong so far.
    Partial,
}

/// Parses the request head at the front of `raw` (request line, header lines, the empty
/// line). Errors are the reply.
pub fn parse_head(raw: &[u8], max_headers: usize) -> Result<Parsed<'_>, Reply> {
    let mut stack = [httparse::EMPTY_HEADER; STACK_HEADERS];
    let mut heap = Vec::new();
    let headers: &mut [httparse::Header<'_>] = if max_headers <= STACK_HEADERS {
        &mut stack[..max_headers]
    } else {
        heap.resize(max_headers, httparse::EMPTY_HEADER);
        &mut heap
    };
    let mut req = httparse::Request::new(headers);
    let len = match req.parse(raw) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(Parsed::Partial),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(Reply::plain(431, "too many request headers\n"));
        }
        Err(_) => return Err(bad()),
    };
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return Err(bad());
    };
    let http10 = match version {
        1 => false,
        0 => true,
        _ => return Err(bad()),
    };
    // Origin form, or absolute form (`http://host/metrics`); the query is ignored.
    let path = if let Some(rest) = target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("https://"))
    {
        rest.find('/').map_or("/", |i| &rest[i..])
    } else if target.starts_with('/') {
        target
    } else {
        return Err(bad());
    };
    let path = path.split(['?', '#']).next().unwrap_or(path);
    let mut head = Head {
        method,
        path,
        http10,
        has_body: false,
        close: http10,
    };
    let mut length: Option<u64> = None;
    for h in req.headers.iter() {
        // httparse lets obs-text through in values; the endpoint reads them as text.
        let value = std::str::from_utf8(h.value).map_err(|_| bad())?;
        let value = value.trim_matches([' ', '\t']);
        if h.name.eq_ignore_ascii_case("content-length") {
            let n: u64 = value.parse().map_err(|_| bad())?;
            if length.is_some_and(|l| l != n) {
                return Err(bad());
            }
            length = Some(n);
            head.has_body |= n > 0;
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            head.has_body = true;
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in value.split(',').map(str::trim) {
                if token.eq_ignore_ascii_case("close") {
                    head.close = true;
                } else if token.eq_ignore_ascii_case("keep-alive") && http10 {
                    head.close = false;
                }
            }
        }
    }
    Ok(Parsed::Complete { head, len })
}

fn bad() -> Reply {
    Reply::plain(400, "bad request\n")
}

pub(super) fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        _ => "Error",
    }
}

/// A response before it is framed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Bytes,
}

impl Reply {
    pub(super) fn plain(status: u16, msg: &'static str) -> Reply {
        Reply {
            status,
            content_type: "text/plain; charset=utf-8",
            body: Bytes::from_static(msg.as_bytes()),
        }
    }
}

/// The routing table. Pure apart from reading the documents.
pub fn route(docs: &dyn Documents, method: &str, path: &str, has_body: bool) -> Reply {
    // The method first: every method but GET and HEAD is refused alike, whatever the path
    // (DELETE and TRACE got 404 on a path where POST got 405).
    if method != "GET" && method != "HEAD" {
        return Reply::plain(405, "method not allowed: read-only endpoint (GET, HEAD)\n");
    }
    if !matches!(path, "/metrics" | "/status") {
        return Reply::plain(404, "not found: try /metrics or /status\n");
    }
    if has_body {
        return Reply::plain(413, "a GET request has no body here\n");
    }
    match path {
        "/metrics" => Reply {
            status: 200,
            content_type: TEXT_FORMAT,
            body: docs.render(),
        },
        _ => Reply {
            status: 200,
            content_type: "application/json",
            body: docs.status_json(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(raw: &[u8], max_headers: usize) -> Result<Head<'_>, Reply> {
        match parse_head(raw, max_headers)? {
            Parsed::Complete { head, len } => {
                assert_eq!(len, raw.len(), "{:?}", String::from_utf8_lossy(raw));
                Ok(head)
            }
            Parsed::Partial => panic!("partial: {:?}", String::from_utf8_lossy(raw)),
        }
    }

    #[test]
    fn heads_parse_and_bad_ones_are_400() {
        let h = head(
            b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nAccept: text/plain\r\nConnection: keep-alive, close\r\n\r\n",
            64,
        )
        .unwrap();
        assert_eq!(h.path, "/metrics");
        assert!(h.close && !h.has_body && !h.http10);
        let h = head(b"GET http://x:9725/status HTTP/1.0\r\n\r\n", 64).unwrap();
        assert_eq!((h.path, h.http10, h.close), ("/status", true, true));
        let h = head(
            b"HEAD /status HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n",
            64,
        )
        .unwrap();
        assert!(!h.close);
        for bad in [
            &b"GET /metrics\r\n\r\n"[..],
            b"GET /metrics HTTP/2.0\r\n\r\n",
            b"GET metrics HTTP/1.1\r\n\r\n",
            b"G@T /metrics HTTP/1.1\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\nNo colon\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\n folded: x\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\nContent-Length: x\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            b"GET /\xff HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nX: \xff\r\n\r\n",
        ] {
            assert_eq!(
                parse_head(bad, 64).unwrap_err().status,
                400,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let many: String = (0..5).map(|i| format!("X-{i}: y\r\n")).collect();
        let raw = format!("GET / HTTP/1.1\r\n{many}\r\n");
        assert_eq!(parse_head(raw.as_bytes(), 4).unwrap_err().status, 431);
        // Past the stack's 64 headers, a larger configured limit still holds.
        let many: String = (0..100).map(|i| format!("X-{i}: y\r\n")).collect();
        let raw = format!("GET / HTTP/1.1\r\n{many}\r\n");
        assert!(head(raw.as_bytes(), 128).is_ok());
        assert_eq!(parse_head(raw.as_bytes(), 99).unwrap_err().status, 431);
        let h = head(b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 4).unwrap();
        assert!(h.has_body);
    }

    #[test]
    fn an_unfinished_head_waits_and_a_pipelined_one_ends_at_its_empty_line() {
        assert_eq!(
            parse_head(b"GET /metrics HTTP/1.1\r\nHost: a\r\n", 64),
            Ok(Parsed::Partial)
        );
        assert_eq!(parse_head(b"GET /met", 64), Ok(Parsed::Partial));
        let two = b"GET /metrics HTTP/1.1\r\n\r\nGET /status HTTP/1.1\r\n\r\n";
        match parse_head(two, 64) {
            Ok(Parsed::Complete { head, len }) => {
                assert_eq!(head.path, "/metrics");
                assert_eq!(len, 25);
            }
            other => panic!("{other:?}"),
        }
    }
}
