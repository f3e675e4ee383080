//! The `/metrics` endpoint: an HTTP/1.1 server answering `GET /metrics`
//! with the Prometheus registry in text exposition format (version 0.0.4),
//! which the OpenTelemetry Prometheus exporter fills at each scrape.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus::{Encoder, TextEncoder};
use tokio::net::TcpListener;

/// The path Porch's OpenTelemetry setup serves metrics on.
pub const METRICS_PATH: &str = "/metrics";

/// How long a client may take to send a request's headers.
pub const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A running `/metrics` server; stops when dropped.
#[derive(Debug)]
pub struct MetricsServer {
    address: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl MetricsServer {
    /// Binds `host:port` (port 0: any free port) and serves `registry`.
    ///
    /// Errors: the host does not resolve, or the address cannot be bound
    /// (in use, not permitted).
    pub async fn start(
        host: &str,
        port: u16,
        registry: prometheus::Registry,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind((host, port)).await?;
        let address = listener.local_addr()?;
        let task = tokio::spawn(async move {
            loop {
                let (stream, _) = match listener.accept().await {
                    Ok(s) => s,
                    Err(e) => {
                        // Out of file descriptors and the like: keep serving.
                        tracing::warn!("metrics server: accept failed: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let registry = registry.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| {
                        let registry = registry.clone();
                        async move { Ok::<_, Infallible>(answer(&req, &registry)) }
                    });
                    // A client that never finishes its request does not
                    // keep the connection.
                    if let Err(e) = http1::Builder::new()
                        .timer(TokioTimer::new())
                        .header_read_timeout(HEADER_READ_TIMEOUT)
                        .serve_connection(TokioIo::new(stream), service)
                        .await
                    {
                        tracing::debug!("metrics server: connection ended: {e}");
                    }
                });
            }
        });
        Ok(Self { address, task })
    }

    /// The bound address.
    pub fn address(&self) -> SocketAddr {
        self.address
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// `GET /metrics` → the exposition; other paths 404, other methods 405.
fn answer(req: &Request<Incoming>, registry: &prometheus::Registry) -> Response<Full<Bytes>> {
    if req.uri().path() != METRICS_PATH {
        return text(
            StatusCode::NOT_FOUND,
            format!("not found: metrics are served at {METRICS_PATH}\n"),
        );
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "only GET is allowed on /metrics\n",
        );
    }
    let encoder = TextEncoder::new();
    let mut body = Vec::new();
    match encoder.encode(&registry.gather(), &mut body) {
        Ok(()) => {
            let mut r = text(StatusCode::OK, body);
            if let Ok(v) = http::HeaderValue::from_str(encoder.format_type()) {
                r.headers_mut().insert(header::CONTENT_TYPE, v);
            }
            r
        }
        Err(e) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode metrics: {e}\n"),
        ),
    }
}
