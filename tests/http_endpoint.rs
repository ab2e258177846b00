//! The read-only HTTP endpoint over real sockets: the two documents, 404/405/413/431, and the
//! bounds (a slow or idle client cannot hold the endpoint forever, garbage does not kill it).

use mergetune::http::{Limits, serve};
use mergetune::metrics::Metrics;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn start(limits: Limits) -> (mergetune::http::ServerHandle, SocketAddr) {
    let h = serve(
        "127.0.0.1:0".parse().unwrap(),
        Arc::new(Metrics::new()),
        limits,
    )
    .unwrap();
    let a = h.local_addr();
    (h, a)
}

/// Sends raw bytes, returns (status code, headers, body) of the response.
fn raw(addr: SocketAddr, request: &[u8]) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // The server may answer and close before it read everything (oversized requests).
    let _ = s.write_all(request);
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head: {:?}", String::from_utf8_lossy(&buf)));
    let head = String::from_utf8_lossy(&buf[..split]).to_string();
    let code = head.split(' ').nth(1).unwrap().parse().unwrap();
    (code, head, buf[split + 4..].to_vec())
}

fn get(addr: SocketAddr, method: &str, path: &str, extra: &str) -> (u16, String, Vec<u8>) {
    raw(
        addr,
        format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{extra}\r\n")
            .as_bytes(),
    )
}

#[test]
fn serves_metrics_and_status_and_nothing_else() {
    let (_h, a) = start(Limits::default());
    let (code, head, body) = get(a, "GET", "/metrics", "");
    assert_eq!(code, 200);
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    let text = String::from_utf8(body).unwrap();
    assert!(text.contains("mergetune_build_info{version="), "{text}");

    let (code, head, body) = get(
        a,
        "GET",
        "/metrics",
        "Accept: application/openmetrics-text;version=1.0.0,text/plain;q=0.5\r\n",
    );
    assert_eq!(code, 200);
    assert!(head.contains("application/openmetrics-text"), "{head}");
    assert!(String::from_utf8(body).unwrap().ends_with("# EOF\n"));

    let (code, head, body) = get(a, "GET", "/status", "");
    assert_eq!(code, 200);
    assert!(head.contains("application/json"), "{head}");
    let s: mergetune::status::StatusSnapshot = serde_json::from_slice(&body).unwrap();
    assert_eq!(s.version, env!("CARGO_PKG_VERSION"));

    let (code, _, body) = get(a, "HEAD", "/metrics", "");
    assert_eq!(code, 200);
    assert!(body.is_empty(), "HEAD has no body");

    for path in ["/", "/metricsx", "/status/", "/../etc/passwd", "/debug"] {
        assert_eq!(get(a, "GET", path, "").0, 404, "{path}");
    }
    for method in ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"] {
        let (code, head, _) = get(a, method, "/metrics", "Content-Length: 0\r\n");
        assert_eq!(code, 405, "{method}");
        assert!(
            head.contains("allow: GET, HEAD") || head.contains("Allow: GET, HEAD"),
            "{head}"
        );
    }
    // The client in `mergetune status` speaks to it.
    let s = mergetune::status::fetch(&a.to_string(), Duration::from_secs(5)).unwrap();
    assert_eq!(s.version, env!("CARGO_PKG_VERSION"));
}

#[test]
fn rejects_bodies_and_oversized_requests() {
    let (_h, a) = start(Limits::default());
    let (code, _, _) = get(a, "GET", "/metrics", "Content-Length: 5\r\n\r\nhello");
    assert_eq!(code, 413);
    let (code, _, _) = get(
        a,
        "GET",
        "/metrics",
        "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    );
    assert_eq!(code, 413);
    // A 64 KiB header: the head is bounded at 8 KiB.
    let big = format!("X-Big: {}\r\n", "a".repeat(64 * 1024));
    let (code, _, _) = get(a, "GET", "/metrics", &big);
    assert_eq!(code, 431);
    // Too many headers.
    let many: String = (0..200).map(|i| format!("X-{i}: y\r\n")).collect();
    let (code, _, _) = get(a, "GET", "/metrics", &many);
    assert_eq!(code, 431);
    // Garbage is answered (400) or dropped; the endpoint keeps serving.
    let mut s = TcpStream::connect(a).unwrap();
    let _ = s.write_all(b"\x00\x01\x02 not http at all\r\n\r\n");
    drop(s);
    assert_eq!(get(a, "GET", "/metrics", "").0, 200);
}

#[test]
fn idle_clients_cannot_hold_the_endpoint() {
    let limits = Limits {
        max_connections: 4,
        header_timeout: Duration::from_millis(500),
        ..Limits::default()
    };
    let (_h, a) = start(limits);
    // Fill every connection slot with clients that never send a request.
    let idle: Vec<TcpStream> = (0..8).map(|_| TcpStream::connect(a).unwrap()).collect();
    let t = Instant::now();
    let (code, _, _) = get(a, "GET", "/metrics", "");
    assert_eq!(code, 200);
    let waited = t.elapsed();
    assert!(
        waited < Duration::from_secs(5),
        "a real scraper waited {waited:?} behind idle connections"
    );
    drop(idle);
}

#[test]
fn a_busy_port_is_reported_to_the_caller() {
    let (_h, a) = start(Limits::default());
    let err = serve(a, Arc::new(Metrics::new()), Limits::default()).err();
    assert!(err.is_some(), "second bind of {a} succeeded");
}
