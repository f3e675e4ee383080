//! The function runner's gRPC server: `evaluator.FunctionEvaluator` plus
//! `grpc.health.v1.Health`, over TCP or a Unix socket, with graceful
//! shutdown and connection ageing.

use std::future::Future;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::net::{TcpListener, UnixListener};
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

use super::connections::{self, stopped_at_age_grace};
use super::limits::{self, ConnectionInfo, CountCallsLayer, ServerLimits};
use super::pb;
use super::pb::function_evaluator_server::FunctionEvaluatorServer;
use super::shutdown::{CutOnShutdown, FINAL_ANSWER_WAIT};
use super::socket::SocketFile;
use super::status::to_status;
use crate::adapters::parse_pool::parse_off_workers;
use crate::adapters::telemetry::grpc::EvaluationLayer;
use crate::adapters::telemetry::spans;
use crate::domain::connection_age::ConnectionAge;
use crate::domain::evaluation::{EvalError, EvaluationRequest, Payload, log_excerpt};
use crate::domain::resource_list::ResourceList;
use crate::ports::FunctionEvaluator;

/// Where the server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    /// A TCP address, e.g. `0.0.0.0:9445` or `127.0.0.1:0` (ephemeral port).
    Tcp(SocketAddr),
    /// A Unix domain socket path. A dead socket left by a previous run is
    /// replaced; any other file there, or a socket something still accepts
    /// on, is an error (see [`socket`](super::socket)).
    Unix(PathBuf),
}

impl FromStr for Listen {
    type Err = String;

    /// Parses `unix:/path`, `unix:///path`, or `host:port`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(path) = s.strip_prefix("unix:") {
            let path = path.strip_prefix("//").unwrap_or(path);
            if path.is_empty() {
                return Err("unix: needs a socket path, e.g. unix:/run/krm-fn-runner.sock".into());
            }
            return Ok(Listen::Unix(PathBuf::from(path)));
        }
        s.to_socket_addrs()
            .map_err(|e| format!("{s:?} is not a listen address (host:port or unix:/path): {e}"))?
            .next()
            .map(Listen::Tcp)
            .ok_or_else(|| format!("{s:?} resolves to no address"))
    }
}

impl std::fmt::Display for Listen {
    /// `ip:port`, or `unix:/path`, as `--listen` takes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listen::Tcp(addr) => write!(f, "{addr}"),
            Listen::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// Server settings; [`ServeOptions::default`] gives `serve`'s defaults
/// (6 MiB messages, 25 s shutdown grace, [`ServerLimits::default`],
/// [`ConnectionAge::default`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServeOptions {
    /// Largest request and response message, in bytes (`--max-request-body-size`).
    pub max_message_bytes: usize,
    /// How long in-flight evaluations may run after a shutdown signal before
    /// they are stopped.
    pub shutdown_grace: Duration,
    /// Connection, stream and in-flight byte limits.
    pub limits: ServerLimits,
    /// Connection ageing (`--max-connection-age`,
    /// `--max-connection-age-grace`); `None` keeps connections for as long
    /// as clients keep them.
    pub connection_age: Option<ConnectionAge>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            max_message_bytes: crate::domain::evaluation::DEFAULT_MAX_MESSAGE_BYTES,
            shutdown_grace: Duration::from_secs(25),
            limits: ServerLimits::default(),
            connection_age: Some(ConnectionAge::default()),
        }
    }
}

enum Incoming {
    Tcp(TcpListener),
    Unix(UnixListener, SocketFile),
}

/// A bound, not yet serving, function runner server.
pub struct Server {
    incoming: Incoming,
    local: String,
}

/// Room for the non-ResourceList parts of a request (image string, framing):
/// a request whose ResourceList is within the limit is never refused by the
/// transport.
const ENVELOPE_BYTES: usize = 64 * 1024;

impl Server {
    /// Binds the listener (so the address is known before serving).
    ///
    /// Errors: the address is in use, not permitted, or the socket path's
    /// directory does not exist; a socket path that holds something other
    /// than a dead socket ([`socket::claim`](super::socket::claim)).
    pub async fn bind(listen: &Listen) -> io::Result<Self> {
        match listen {
            Listen::Tcp(addr) => {
                let l = TcpListener::bind(addr).await?;
                let local = l.local_addr()?.to_string();
                Ok(Self {
                    incoming: Incoming::Tcp(l),
                    local,
                })
            }
            Listen::Unix(path) => {
                super::socket::claim(path)?;
                let l = UnixListener::bind(path)?;
                Ok(Self {
                    incoming: Incoming::Unix(l, SocketFile::bound(path)?),
                    local: format!("unix:{}", path.display()),
                })
            }
        }
    }

    /// The bound address: `ip:port`, or `unix:/path`.
    pub fn local_addr(&self) -> &str {
        &self.local
    }

    /// Serves `evaluator` until `shutdown` resolves, then stops accepting,
    /// sends GOAWAY on every connection, lets in-flight calls finish for up
    /// to `options.shutdown_grace`, answers those still running
    /// `UNAVAILABLE`, and stops (closing the connections, and so stopping
    /// whatever still runs). Meanwhile each connection is aged as
    /// `options.connection_age` says ([`connections`]).
    ///
    /// Errors: a transport failure of the listener.
    pub async fn run(
        self,
        evaluator: Arc<dyn FunctionEvaluator>,
        options: ServeOptions,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), tonic::transport::Error> {
        self.run_when_ready(evaluator, options, shutdown, std::future::ready(()))
            .await
    }

    /// As [`run`](Self::run), but `grpc.health.v1.Health` reports
    /// NOT_SERVING (for the whole server, `""`, and for
    /// `evaluator.FunctionEvaluator`) until `ready` resolves, then SERVING.
    /// Calls are accepted meanwhile (they wait for their pods as usual).
    /// Porch reports SERVING at once (spec §10 item 32).
    ///
    /// Errors: a transport failure of the listener.
    pub async fn run_when_ready(
        self,
        evaluator: Arc<dyn FunctionEvaluator>,
        options: ServeOptions,
        shutdown: impl Future<Output = ()>,
        ready: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), tonic::transport::Error> {
        let (tx, health) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            ready.await;
            tx.send_replace(true);
            // Keep the sender: the health stays SERVING.
            tx.closed().await;
        });
        self.run_with_health(evaluator, options, shutdown, health)
            .await
    }

    /// As [`run`](Self::run), but `grpc.health.v1.Health` follows `health`
    /// (for the whole server, `""`, and for `evaluator.FunctionEvaluator`):
    /// SERVING while it is true, NOT_SERVING while it is false or once its
    /// sender is gone. Calls are accepted either way. Porch reports SERVING
    /// at once and never changes it (spec §10 item 32).
    ///
    /// Errors: a transport failure of the listener.
    pub async fn run_with_health(
        self,
        evaluator: Arc<dyn FunctionEvaluator>,
        options: ServeOptions,
        shutdown: impl Future<Output = ()>,
        mut health: tokio::sync::watch::Receiver<bool>,
    ) -> Result<(), tonic::transport::Error> {
        let (health_reporter, health_service) = tonic_health::server::health_reporter();
        // The first status is set before any call is served: the listener
        // is already bound, so a client may ask at once.
        let mut serving = *health.borrow_and_update();
        report_health(&health_reporter, serving).await;
        if serving {
            tracing::info!("health: SERVING");
        }
        let reporter = health_reporter.clone();
        let health_task = tokio::spawn(async move {
            loop {
                let now = *health.borrow_and_update();
                if now != serving {
                    serving = now;
                    report_health(&reporter, now).await;
                    tracing::info!("health: {}", if now { "SERVING" } else { "NOT_SERVING" });
                }
                if health.changed().await.is_err() {
                    if serving {
                        report_health(&reporter, false).await;
                    }
                    return;
                }
            }
        });
        // Calls still running when the grace period ends are answered, not dropped.
        let cut = tokio_util::sync::CancellationToken::new();
        let evaluator = Arc::new(CutOnShutdown::new(
            evaluator,
            cut.clone(),
            options.shutdown_grace,
        ));
        let lim = options.limits;
        let service = FunctionEvaluatorServer::new(EvaluatorService {
            evaluator,
            connection_age: options.connection_age,
            max_message_bytes: options.max_message_bytes,
            in_flight: Arc::new(tokio::sync::Semaphore::new(lim.max_bytes_in_flight)),
            max_bytes_in_flight: lim.max_bytes_in_flight,
        })
        .max_decoding_message_size(options.max_message_bytes + ENVELOPE_BYTES)
        .max_encoding_message_size(options.max_message_bytes + ENVELOPE_BYTES);
        let limit = options.max_message_bytes;
        // The telemetry layer goes outside the size rewrite, so it sees the
        // code the caller gets.
        let router = tonic::transport::Server::builder()
            .max_concurrent_streams(lim.max_concurrent_streams)
            .http2_keepalive_interval(lim.keepalive_interval)
            .http2_keepalive_timeout(Some(lim.keepalive_timeout))
            .layer(EvaluationLayer)
            .layer(
                tower::ServiceBuilder::new()
                    .layer(CountCallsLayer)
                    .map_response(move |r| size_error_to_resource_exhausted(r, limit)),
            )
            .add_service(health_service)
            .add_service(service);

        // `stop`: no new connections, GOAWAY on every one; `kill`: close
        // every connection's transport (the end of the shutdown grace).
        let stop = tokio_util::sync::CancellationToken::new();
        let kill = tokio_util::sync::CancellationToken::new();
        let _kill_on_return = kill.clone().drop_guard();
        let age = options.connection_age;
        let local = self.local.clone();
        let serving = {
            let stop = stop.clone();
            async move {
                match self.incoming {
                    Incoming::Tcp(l) => {
                        let incoming = limits::incoming(l, &lim, &kill);
                        connections::serve(router, incoming, age, stop).await
                    }
                    Incoming::Unix(l, socket) => {
                        let incoming = limits::incoming(l, &lim, &kill);
                        let r = connections::serve(router, incoming, age, stop).await;
                        socket.remove_if_ours();
                        r
                    }
                }
            }
        };
        tokio::pin!(serving);
        match age {
            Some(a) => tracing::info!(
                address = %local,
                max_connection_age = ?a.max_age(),
                max_connection_age_grace = ?a.grace(),
                "serving"
            ),
            None => tracing::info!(address = %local, "serving"),
        }
        let _abort_health = AbortOnDrop(health_task);
        tokio::select! {
            r = &mut serving => r,
            () = shutdown => {
                tracing::info!(grace = ?options.shutdown_grace, "shutting down: no new calls; waiting for in-flight evaluations");
                stop.cancel();
                match tokio::time::timeout(options.shutdown_grace, &mut serving).await {
                    Ok(r) => r,
                    Err(_) => {
                        tracing::warn!("grace period over: stopping the evaluations still running");
                        cut.cancel();
                        let answered = tokio::time::timeout(FINAL_ANSWER_WAIT, &mut serving).await;
                        answered.unwrap_or(Ok(()))
                    }
                }
            }
        }
    }
}

/// Aborts the task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

/// Sets the health of the whole server (`""`) and of
/// `evaluator.FunctionEvaluator` to SERVING or NOT_SERVING.
async fn report_health(reporter: &tonic_health::server::HealthReporter, serving: bool) {
    let status = if serving {
        tonic_health::ServingStatus::Serving
    } else {
        tonic_health::ServingStatus::NotServing
    };
    reporter.set_service_status("", status).await;
    if serving {
        reporter
            .set_serving::<FunctionEvaluatorServer<EvaluatorService>>()
            .await;
    } else {
        reporter
            .set_not_serving::<FunctionEvaluatorServer<EvaluatorService>>()
            .await;
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// tonic refuses an oversize request inside its codec with `OUT_OF_RANGE`;
/// Porch (grpc-go) answers `RESOURCE_EXHAUSTED`. This rewrites that
/// trailers-only answer so clients see Porch's code and a message naming the flag.
fn size_error_to_resource_exhausted(
    mut response: http::Response<tonic::body::Body>,
    limit: usize,
) -> http::Response<tonic::body::Body> {
    let headers = response.headers_mut();
    let out_of_range = headers.get("grpc-status").is_some_and(|v| v == "11");
    let tonic_message = headers
        .get("grpc-message")
        .and_then(|v| v.to_str().ok())
        .map(|m| m.replace("%20", " "))
        .unwrap_or_default();
    if out_of_range && tonic_message.contains("message length too large") {
        let message = EvalError::TooLarge {
            payload: Payload::Request,
            size: found_bytes(&tonic_message),
            limit,
        }
        .to_string();
        headers.insert("grpc-status", http::HeaderValue::from_static("8"));
        if let Ok(v) = http::HeaderValue::from_str(&message) {
            headers.insert("grpc-message", v);
        }
    }
    response
}

/// The size tonic's codec reports in `… too large: found <N> bytes, …`
/// (the gRPC frame's length prefix), so the answer names it as grpc-go's
/// `(<N> vs. <limit>)` does.
fn found_bytes(tonic_message: &str) -> Option<usize> {
    let rest = &tonic_message[tonic_message.find("found ")? + "found ".len()..];
    rest.split(' ').next()?.parse().ok()
}

/// Requests up to this many bytes are checked on the async worker when the
/// input check's scan is sure of them (a quarter of a millisecond of CPU at
/// most); larger ones, and any the scan is unsure of, on the parser pool.
const INLINE_CHECK_BYTES: usize = 256 * 1024;

struct EvaluatorService {
    evaluator: Arc<dyn FunctionEvaluator>,
    /// Named in the answer of a call stopped at its connection's age grace.
    connection_age: Option<ConnectionAge>,
    max_message_bytes: usize,
    /// One permit per byte of the requests being evaluated.
    in_flight: Arc<tokio::sync::Semaphore>,
    max_bytes_in_flight: usize,
}

impl EvaluatorService {
    async fn handle(
        &self,
        image: String,
        tag: String,
        resource_list: Bytes,
        timeout: Option<Duration>,
    ) -> Result<pb::EvaluateFunctionResponse, EvalError> {
        if resource_list.len() > self.max_message_bytes {
            return Err(EvalError::TooLarge {
                payload: Payload::Request,
                size: Some(resource_list.len()),
                limit: self.max_message_bytes,
            });
        }
        if image.trim().is_empty() {
            return Err(EvalError::InvalidInput(
                "the image is empty: set EvaluateFunctionRequest.image to the function's image"
                    .into(),
            ));
        }
        let _bytes = u32::try_from(resource_list.len())
            .ok()
            .and_then(|n| self.in_flight.clone().try_acquire_many_owned(n).ok())
            .ok_or_else(|| {
                EvalError::Exhausted(format!(
                    "the requests being evaluated already hold most of \
                     --max-request-bytes-in-flight ({} bytes); retry later or raise it",
                    self.max_bytes_in_flight
                ))
            })?;
        // A small list the scan is sure of is checked here, without the
        // two thread hand-offs of the parser pool; the rest go to the pool.
        if !(resource_list.len() <= INLINE_CHECK_BYTES
            && ResourceList::is_plainly_valid(&resource_list))
        {
            let rl = resource_list.clone();
            parse_off_workers(move || ResourceList::validate(&rl))
                .await?
                .map_err(|e| EvalError::InvalidInput(format!("resource_list: {e}")))?;
        }
        let mut request = EvaluationRequest::new(image, resource_list).with_tag(tag);
        request.timeout = timeout.map(stop_before_deadline);
        let response = self.evaluator.evaluate(request).await?;
        let size = response.resource_list.len() + response.log.len();
        if size > self.max_message_bytes {
            return Err(EvalError::TooLarge {
                payload: Payload::Output,
                size: Some(size),
                limit: self.max_message_bytes,
            });
        }
        Ok(pb::EvaluateFunctionResponse {
            resource_list: response.resource_list,
            log: response.log,
        })
    }
}

/// The evaluation gets slightly less time than the caller's deadline (a
/// fifth of it, at most 100 ms less), so the runner stops the function and
/// answers `DEADLINE_EXCEEDED` with a message of its own before the
/// transport gives up on the call (tonic's server ends it at the deadline
/// with `CANCELLED`); the margin covers scheduling delays on a loaded node.
fn stop_before_deadline(t: Duration) -> Duration {
    let margin = (t / 5).min(Duration::from_millis(100));
    t.saturating_sub(margin)
}

/// Reads the standard `grpc-timeout` header (e.g. `100m`, `5S`).
fn grpc_timeout(metadata: &MetadataMap) -> Option<Duration> {
    let v = metadata.get("grpc-timeout")?.to_str().ok()?;
    if v.len() < 2 {
        return None;
    }
    let (digits, unit) = v.split_at(v.len() - 1);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[tonic::async_trait]
impl pb::function_evaluator_server::FunctionEvaluator for EvaluatorService {
    async fn evaluate_function(
        &self,
        request: Request<pb::EvaluateFunctionRequest>,
    ) -> Result<Response<pb::EvaluateFunctionResponse>, Status> {
        let timeout = grpc_timeout(request.metadata());
        // The connection's calls are stopped when its age grace runs out.
        let connection = request
            .extensions()
            .get::<ConnectionInfo>()
            .map(|c| c.calls.clone());
        let pb::EvaluateFunctionRequest {
            resource_list,
            image,
            tag,
        } = request.into_inner();
        // The per-call span is open (the telemetry layer); it learns the image.
        spans::record_image(&log_excerpt(&image));
        if !tag.is_empty() {
            spans::record_tag(&log_excerpt(&tag));
        }
        let started = Instant::now();
        let result = match (connection, self.connection_age) {
            (Some(calls), Some(age)) => {
                let name = image.clone();
                tokio::select! {
                    biased;
                    () = calls.cut().cancelled() => Err(stopped_at_age_grace(&name, age.grace())),
                    r = self.handle(image, tag, resource_list, timeout) => r,
                }
            }
            _ => self.handle(image, tag, resource_list, timeout).await,
        };
        let elapsed = started.elapsed();
        match &result {
            Ok(_) => tracing::info!(?elapsed, "evaluation succeeded"),
            Err(e) => {
                tracing::warn!(?elapsed, error = %log_excerpt(&e.to_string()), "evaluation failed")
            }
        }
        result.map(Response::new).map_err(|e| to_status(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oversize_answers_name_the_size_tonic_read() {
        let mut response = http::Response::new(tonic::body::Body::empty());
        let h = response.headers_mut();
        h.insert("grpc-status", http::HeaderValue::from_static("11"));
        h.insert(
            "grpc-message",
            http::HeaderValue::from_static(
                "Error,%20decoded%20message%20length%20too%20large:%20found%201556596%20bytes,%20the%20limit%20is:%201048576%20bytes",
            ),
        );
        let response = size_error_to_resource_exhausted(response, 1 << 20);
        assert_eq!(response.headers()["grpc-status"], "8");
        assert_eq!(
            response.headers()["grpc-message"].to_str().unwrap(),
            "the request is 1556596 bytes, over the limit of 1048576 bytes; raise --max-request-body-size on the runner (and the matching limit on its clients) to allow larger ResourceLists"
        );
        assert_eq!(found_bytes("found 12 bytes"), Some(12));
        assert_eq!(found_bytes("too large"), None);
    }

    #[test]
    fn parses_listen_addresses() {
        assert_eq!("unix:/tmp/s".parse(), Ok(Listen::Unix("/tmp/s".into())));
        assert_eq!("unix:///tmp/s".parse(), Ok(Listen::Unix("/tmp/s".into())));
        assert_eq!(
            "127.0.0.1:9445".parse(),
            Ok(Listen::Tcp("127.0.0.1:9445".parse().unwrap()))
        );
        assert!("unix:".parse::<Listen>().is_err());
        assert!("nonsense".parse::<Listen>().is_err());
    }

    #[test]
    fn parses_grpc_timeout() {
        let mut m = MetadataMap::new();
        m.insert("grpc-timeout", "250m".parse().unwrap());
        assert_eq!(grpc_timeout(&m), Some(Duration::from_millis(250)));
        m.insert("grpc-timeout", "2S".parse().unwrap());
        assert_eq!(grpc_timeout(&m), Some(Duration::from_secs(2)));
        m.insert("grpc-timeout", "x".parse().unwrap());
        assert_eq!(grpc_timeout(&m), None);
        assert_eq!(
            stop_before_deadline(Duration::from_secs(2)),
            Duration::from_millis(1900)
        );
        assert_eq!(
            stop_before_deadline(Duration::from_millis(300)),
            Duration::from_millis(240)
        );
    }
}
