//! The read-only HTTP endpoint: `GET /metrics` (Prometheus text, or OpenMetrics when the
//! scraper asks for it) and `GET /status` (JSON). Nothing else: other paths are 404, other
//! methods 405, a request with a body 413, a request head over 8 KiB or 64 headers 431.
//!
//! It runs on a single-threaded tokio runtime in its own thread, so the daemon's synchronous
//! tick loop keeps its interval whatever the scrapers do. Connections are bounded (excess
//! connections wait in the kernel's accept queue; past half the slots, connections are not
//! kept alive), a client has a few seconds to send a request head (also between two requests
//! on a kept-alive connection), and a connection lives at most a minute. A failure here is logged and never
//! reaches the daemon.

use crate::metrics::Metrics;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Body, Incoming};
use hyper::header::{ALLOW, CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, warn};

pub const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";
pub const OPENMETRICS_FORMAT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Bounds of the endpoint.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Connections served at once; more wait in the accept queue.
    pub max_connections: usize,
    /// Largest request head (request line + headers), in bytes (hyper's minimum is 8192).
    pub max_request_head_bytes: usize,
    pub max_headers: usize,
    /// Time a client has to send a complete request head.
    pub header_timeout: Duration,
    /// Longest life of one (keep-alive) connection.
    pub connection_lifetime: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 64,
            max_request_head_bytes: 8192,
            max_headers: 64,
            header_timeout: Duration::from_secs(5),
            connection_lifetime: Duration::from_secs(60),
        }
    }
}

/// A running endpoint. Dropping it stops the server thread.
pub struct ServerHandle {
    addr: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ServerHandle {
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, and waits for the server thread to end.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Binds `addr` now (so a busy port is reported to the caller) and serves from a new thread.
pub fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    limits: Limits,
) -> std::io::Result<ServerHandle> {
    let std_listener = std::net::TcpListener::bind(addr)?;
    std_listener.set_nonblocking(true)?;
    let local = std_listener.local_addr()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("mergetune-http".into())
        .spawn(move || {
            rt.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(std_listener) {
                    Ok(l) => l,
                    Err(e) => {
                        warn!("metrics endpoint {local}: {e}");
                        return;
                    }
                };
                tokio::select! {
                    _ = accept_loop(listener, metrics, limits) => {}
                    _ = rx => {}
                }
            });
        })?;
    Ok(ServerHandle {
        addr: local,
        shutdown: Some(tx),
        thread: Some(thread),
    })
}

async fn accept_loop(listener: tokio::net::TcpListener, metrics: Arc<Metrics>, limits: Limits) {
    let permits = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    loop {
        // Take a permit before accepting: at the limit, new connections wait in the kernel.
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let (stream, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                warn!("metrics endpoint: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        // Past half the slots, new connections are served once and closed, so that
        // keep-alive clients cannot hold every slot while others wait in the accept queue.
        let keep_alive = permits.available_permits() >= limits.max_connections / 2;
        let metrics = metrics.clone();
        let limits = limits.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let service = hyper::service::service_fn(move |req| {
                let metrics = metrics.clone();
                async move { Ok::<_, Infallible>(handle(&metrics, &req)) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .max_buf_size(limits.max_request_head_bytes.max(8192))
                .max_headers(limits.max_headers)
                .keep_alive(keep_alive)
                .serve_connection(TokioIo::new(stream), service);
            match tokio::time::timeout(limits.connection_lifetime, conn).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => debug!("metrics endpoint: {peer}: {e}"),
                Err(_) => debug!("metrics endpoint: {peer}: connection lifetime reached"),
            }
        });
    }
}

fn response(status: StatusCode, content_type: &'static str, body: Bytes) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn plain(status: StatusCode, msg: &'static str) -> Response<Full<Bytes>> {
    response(
        status,
        "text/plain; charset=utf-8",
        Bytes::from_static(msg.as_bytes()),
    )
}

/// Answers one request. Pure apart from reading `metrics`.
pub fn handle(metrics: &Metrics, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    route(
        metrics,
        req.method(),
        req.uri().path(),
        req.headers()
            .get(hyper::header::ACCEPT)
            .and_then(|v| v.to_str().ok()),
        req.body().size_hint().lower() > 0 || req.body().size_hint().upper().is_none(),
    )
}

/// The routing table, separated from hyper's types for tests.
pub fn route(
    metrics: &Metrics,
    method: &Method,
    path: &str,
    accept: Option<&str>,
    has_body: bool,
) -> Response<Full<Bytes>> {
    let known = matches!(path, "/metrics" | "/status");
    if !known {
        return plain(
            StatusCode::NOT_FOUND,
            "not found: try /metrics or /status\n",
        );
    }
    if method != Method::GET && method != Method::HEAD {
        let mut r = plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed: read-only endpoint (GET, HEAD)\n",
        );
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    if has_body {
        return plain(
            StatusCode::PAYLOAD_TOO_LARGE,
            "a GET request has no body here\n",
        );
    }
    match path {
        "/metrics" => {
            let om = accept.is_some_and(|a| a.contains("application/openmetrics-text"));
            response(
                StatusCode::OK,
                if om { OPENMETRICS_FORMAT } else { TEXT_FORMAT },
                metrics.render(om),
            )
        }
        _ => response(StatusCode::OK, "application/json", metrics.status_json()),
    }
}
