//! A request head parsed from bytes, and the routing table: pure functions, so every rule
//! of the endpoint (what is 400, 404, 405, 413, 431) is tested without a socket.

use super::{Documents, OPENMETRICS_FORMAT, TEXT_FORMAT};
use bytes::Bytes;

/// IMF-fixdate (RFC 9110 5.6.7) of a Unix time.
pub fn http_date(unix_secs: u64) -> String {
    let days = unix_secs / 86_400;
    let rem = unix_secs % 86_400;
    // 1970-01-01 was a Thursday.
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(days % 7) as usize];
    // Civil date from days since the epoch (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let mon = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ][(month - 1) as usize];
    format!(
        "{weekday}, {day:02} {mon} {year} {:02}:{:02}:{:02} GMT",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

pub(super) fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

/// The parts of a request head the endpoint uses.
#[derive(Debug, PartialEq, Eq)]
pub struct Head<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub http10: bool,
    pub accept: Option<String>,
    pub has_body: bool,
    pub close: bool,
}

/// Parses a request head (request line, header lines, the empty line). Errors are the reply.
pub fn parse_head(raw: &[u8], max_headers: usize) -> Result<Head<'_>, Reply> {
    let bad = || Reply::plain(400, "bad request\n");
    let text = std::str::from_utf8(raw).map_err(|_| bad())?;
    let mut lines = text.split("\r\n");
    let request_line = lines.next().ok_or_else(bad)?;
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    if method.is_empty() || !method.bytes().all(is_token) {
        return Err(bad());
    }
    let http10 = match version {
        "HTTP/1.1" => false,
        "HTTP/1.0" => true,
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
        accept: None,
        has_body: false,
        close: http10,
    };
    let mut count = 0;
    let mut length: Option<u64> = None;
    for line in lines {
        if line.is_empty() {
            continue;
        }
        count += 1;
        if count > max_headers {
            return Err(Reply::plain(431, "too many request headers\n"));
        }
        let (name, value) = line.split_once(':').ok_or_else(bad)?;
        if name.is_empty() || !name.bytes().all(is_token) {
            // Includes obsolete line folding (a line starting with white space).
            return Err(bad());
        }
        let value = value.trim_matches([' ', '\t']);
        if name.eq_ignore_ascii_case("content-length") {
            let n: u64 = value.parse().map_err(|_| bad())?;
            if length.is_some_and(|l| l != n) {
                return Err(bad());
            }
            length = Some(n);
            head.has_body |= n > 0;
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            head.has_body = true;
        } else if name.eq_ignore_ascii_case("connection") {
            for token in value.split(',').map(str::trim) {
                if token.eq_ignore_ascii_case("close") {
                    head.close = true;
                } else if token.eq_ignore_ascii_case("keep-alive") && http10 {
                    head.close = false;
                }
            }
        } else if name.eq_ignore_ascii_case("accept") {
            head.accept = Some(value.to_string());
        }
    }
    Ok(head)
}

fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
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
pub fn route(
    metrics: &dyn Documents,
    method: &str,
    path: &str,
    accept: Option<&str>,
    has_body: bool,
) -> Reply {
    if !matches!(path, "/metrics" | "/status") {
        return Reply::plain(404, "not found: try /metrics or /status\n");
    }
    if method != "GET" && method != "HEAD" {
        return Reply::plain(405, "method not allowed: read-only endpoint (GET, HEAD)\n");
    }
    if has_body {
        return Reply::plain(413, "a GET request has no body here\n");
    }
    match path {
        "/metrics" => {
            let om = accept.is_some_and(|a| a.contains("application/openmetrics-text"));
            Reply {
                status: 200,
                content_type: if om { OPENMETRICS_FORMAT } else { TEXT_FORMAT },
                body: metrics.render(om),
            }
        }
        _ => Reply {
            status: 200,
            content_type: "application/json",
            body: metrics.status_json(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_imf_fixdate() {
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(http_date(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(http_date(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
    }

    #[test]
    fn heads_parse_and_bad_ones_are_400() {
        let h = parse_head(
            b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nAccept: text/plain\r\nConnection: keep-alive, close\r\n\r\n",
            64,
        )
        .unwrap();
        assert_eq!(h.path, "/metrics");
        assert!(h.close && !h.has_body && !h.http10);
        assert_eq!(h.accept.as_deref(), Some("text/plain"));
        let h = parse_head(b"GET http://x:9725/status HTTP/1.0\r\n\r\n", 64).unwrap();
        assert_eq!((h.path, h.http10, h.close), ("/status", true, true));
        let h = parse_head(
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
        let h = parse_head(b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 4).unwrap();
        assert!(h.has_body);
    }
}
