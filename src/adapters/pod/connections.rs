//! Pooled gRPC connections to wrapper servers, one per function pod, and
//! the seam that turns a pod's endpoint into a dialable address.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tonic::body::Body;

use crate::adapters::grpc::pb::function_evaluator_client::FunctionEvaluatorClient;

/// The gRPC client of one function pod's wrapper server.
pub type WrapperClient = FunctionEvaluatorClient<WrapperChannel>;

/// Turns the endpoint the pod cache hands out (`<service>.<ns>.svc.cluster.local:9446`
/// or `<pod IP>:9446`) into the address actually dialled.
pub trait Resolver: Send + Sync {
    /// The `host:port` to dial for `endpoint`.
    ///
    /// Errors: a message saying why the endpoint cannot be dialled.
    fn resolve(&self, endpoint: &str) -> Result<String, String>;
}

/// Dials endpoints as they are (cluster DNS resolves service names; pod IPs
/// are routable inside the cluster). Porch's behaviour.
#[derive(Debug, Clone, Copy, Default)]
pub struct DirectResolver;

impl Resolver for DirectResolver {
    fn resolve(&self, endpoint: &str) -> Result<String, String> {
        Ok(endpoint.to_string())
    }
}

/// Rewrites endpoints through a map file (`--wrapper-address-map`): one
/// `<endpoint> <address>` pair per line, `#` starts a comment; endpoints not
/// listed are dialled as they are. For runners outside the cluster network
/// (port-forwards, the test bed's local wrapper servers). The file is read on
/// every new connection (a few per pod lifetime), so it may change while the
/// runner runs.
#[derive(Debug, Clone)]
pub struct MapFileResolver {
    path: PathBuf,
}

impl MapFileResolver {
    /// A resolver reading `path`.
    pub fn new(path: PathBuf) -> Self {
        Self { path }
    }
}

/// Looks `endpoint` up in map-file `text` (see [`MapFileResolver`]).
pub fn lookup_address_map(text: &str, endpoint: &str) -> Option<String> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or_default())
        .filter_map(|l| {
            let mut parts = l.split_whitespace();
            Some((parts.next()?, parts.next()?))
        })
        .filter(|(from, _)| *from == endpoint)
        .map(|(_, to)| to.to_string())
        .next_back()
}

impl Resolver for MapFileResolver {
    fn resolve(&self, endpoint: &str) -> Result<String, String> {
        match std::fs::read_to_string(&self.path) {
            Ok(text) => Ok(lookup_address_map(&text, endpoint).unwrap_or_else(|| endpoint.into())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(endpoint.to_string()),
            Err(e) => Err(format!(
                "cannot read the wrapper address map {}: {e}",
                self.path.display()
            )),
        }
    }
}

/// One HTTP/2 connection to a wrapper server, dialled on the first call and
/// dialled again by the first call after it closed; clones share it.
///
/// A call runs on the caller's task against the connection's shared stream
/// state (the `h2` crate's client, without hyper's client dispatch): the
/// caller queues the request's frames and reads the answer's frames itself,
/// and the connection's task only moves bytes between those queues and the
/// socket. A call costs two hand-offs between tasks (request out, answer
/// in); hyper's client connection adds a dispatch channel, a task spawned
/// per request and a callback, and tonic's `Channel` a buffering task in
/// front of that (the book's `docs/src/benchmarks/history.md`: half the futex calls and a third
/// fewer socket writes per call than hyper's). A failed dial is
/// `UNAVAILABLE` (as with tonic's `Channel`: [`tonic::ConnectError`]); a
/// connection that breaks mid-call is `UNKNOWN` with the transport error as
/// its source. Keep-alive pings every 30 s, also while idle, close a
/// connection whose peer does not answer one within 20 s. The call's
/// deadline is the caller's to enforce.
#[derive(Clone)]
pub struct WrapperChannel {
    shared: Arc<ChannelState>,
}

struct ChannelState {
    address: String,
    connect_timeout: Duration,
    connection: tokio::sync::Mutex<Option<Connection>>,
}

/// An open connection: the handle calls open streams with, and whether its
/// task has ended (the connection is closed).
struct Connection {
    sender: h2::client::SendRequest<Bytes>,
    closed: Arc<AtomicBool>,
}

/// How often an open connection is pinged (hyper's client setting the
/// runner used before: 30 s, also while idle), and how long the answer may
/// take before the connection counts as dead (hyper's default, 20 s).
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);

impl std::fmt::Debug for WrapperChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WrapperChannel")
            .field("address", &self.shared.address)
            .finish_non_exhaustive()
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl WrapperChannel {
    /// A channel to `address` (`host:port`); no network I/O until the first
    /// call, whose dial gives up after `connect_timeout`.
    pub fn new(address: String, connect_timeout: Duration) -> Self {
        Self {
            shared: Arc::new(ChannelState {
                address,
                connect_timeout,
                connection: tokio::sync::Mutex::new(None),
            }),
        }
    }

    /// A sender on the open connection, dialling one when there is none or
    /// it has closed. Callers racing for a new connection wait for one dial.
    async fn sender(&self) -> Result<h2::client::SendRequest<Bytes>, BoxError> {
        let mut connection = self.shared.connection.lock().await;
        if let Some(c) = connection.as_ref()
            && !c.closed.load(Ordering::Acquire)
        {
            return Ok(c.sender.clone());
        }
        *connection = None;
        let dialled = tokio::time::timeout(self.shared.connect_timeout, self.dial())
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "no connection to {} within {:?}",
                    self.shared.address, self.shared.connect_timeout
                )
                .into())
            })
            .map_err(tonic::ConnectError)?;
        Ok(connection.insert(dialled).sender.clone())
    }

    /// Dials the wrapper server and spawns the connection's task (socket
    /// I/O and keep-alive pings). Flow-control windows and buffers are
    /// hyper's client defaults, so large ResourceLists move as before.
    async fn dial(&self) -> Result<Connection, BoxError> {
        let stream = tokio::net::TcpStream::connect(&self.shared.address).await?;
        stream.set_nodelay(true)?;
        let (sender, mut connection) = h2::client::Builder::new()
            .initial_window_size(2 * 1024 * 1024)
            .initial_connection_window_size(5 * 1024 * 1024)
            .max_send_buffer_size(1024 * 1024)
            .max_header_list_size(16 * 1024)
            .enable_push(false)
            .handshake::<_, Bytes>(stream)
            .await?;
        let closed = Arc::new(AtomicBool::new(false));
        let ping_pong = connection.ping_pong();
        let address = self.shared.address.clone();
        let ended = closed.clone();
        tokio::spawn(async move {
            tokio::select! {
                r = &mut connection => if let Err(e) = r {
                    tracing::debug!(%address, "connection to the wrapper server ended: {e}");
                },
                why = keep_alive(ping_pong) => {
                    tracing::debug!(%address, "closing the connection to the wrapper server: {why}");
                }
            }
            ended.store(true, Ordering::Release);
        });
        Ok(Connection { sender, closed })
    }
}

/// Pings the peer every [`KEEP_ALIVE_INTERVAL`]; returns why the connection
/// should close (a ping unanswered within [`KEEP_ALIVE_TIMEOUT`], or failed).
async fn keep_alive(ping_pong: Option<h2::PingPong>) -> String {
    let Some(mut ping_pong) = ping_pong else {
        return std::future::pending().await;
    };
    loop {
        tokio::time::sleep(KEEP_ALIVE_INTERVAL).await;
        match tokio::time::timeout(KEEP_ALIVE_TIMEOUT, ping_pong.ping(h2::Ping::opaque())).await {
            Ok(Ok(_pong)) => {}
            Ok(Err(e)) => return format!("keep-alive ping failed: {e}"),
            Err(_) => {
                return format!("no answer to a keep-alive ping within {KEEP_ALIVE_TIMEOUT:?}");
            }
        }
    }
}

/// Sends `body` on `stream`: its data frames, then its trailers or the end
/// of the stream. The body is the call's one encoded message, already in
/// memory, so it is queued without waiting for flow-control capacity (the
/// connection sends it as the peer's window allows).
async fn send_body(mut body: Body, mut stream: h2::SendStream<Bytes>) {
    use http_body_util::BodyExt;
    loop {
        let sent = match body.frame().await {
            None => {
                let _ = stream.send_data(Bytes::new(), true);
                return;
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => stream.send_data(data, false),
                Err(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        let _ = stream.send_trailers(trailers);
                        return;
                    }
                    continue;
                }
            },
            Some(Err(e)) => {
                tracing::debug!("request body failed: {e}");
                stream.send_reset(h2::Reason::CANCEL);
                return;
            }
        };
        // A stream the peer has reset or closed: its answer says why.
        if sent.is_err() {
            return;
        }
    }
}

/// The answer's body: its data frames (each released back to the peer's
/// window as it is handed on), then its trailers.
pub struct WrapperBody {
    stream: h2::RecvStream,
    data_done: bool,
}

impl hyper::body::Body for WrapperBody {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, h2::Error>>> {
        let this = self.get_mut();
        if !this.data_done {
            match std::task::ready!(this.stream.poll_data(cx)) {
                Some(Ok(data)) => {
                    let _ = this.stream.flow_control().release_capacity(data.len());
                    return Poll::Ready(Some(Ok(hyper::body::Frame::data(data))));
                }
                // RST_STREAM with NO_ERROR ends the answer early without
                // failing it (RFC 9113 §8.1).
                Some(Err(e)) if e.reason() == Some(h2::Reason::NO_ERROR) => {
                    return Poll::Ready(None);
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => this.data_done = true,
            }
        }
        match std::task::ready!(this.stream.poll_trailers(cx)) {
            Ok(trailers) => Poll::Ready(trailers.map(|t| Ok(hyper::body::Frame::trailers(t)))),
            Err(e) => Poll::Ready(Some(Err(e))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.stream.is_end_stream()
    }
}

impl tower::Service<http::Request<Body>> for WrapperChannel {
    type Response = http::Response<WrapperBody>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    /// Always ready: the call itself waits for the connection.
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let channel = self.clone();
        Box::pin(async move {
            let mut sender = channel.sender().await?.ready().await?;
            let (head, body) = request.into_parts();
            let end = hyper::body::Body::is_end_stream(&body);
            let (answer, stream) = sender.send_request(http::Request::from_parts(head, ()), end)?;
            if !end {
                // Sent here when the body is at hand (a unary call's one
                // message); a body still waiting goes on sending on its own.
                let mut sending = Box::pin(send_body(body, stream));
                if futures_poll_once(sending.as_mut()).await.is_pending() {
                    tokio::spawn(sending);
                }
            }
            let (head, stream) = answer.await?.into_parts();
            Ok(http::Response::from_parts(
                head,
                WrapperBody {
                    stream,
                    data_done: false,
                },
            ))
        })
    }
}

/// Polls `future` once, on the calling task.
async fn futures_poll_once<F: Future + Unpin>(mut future: F) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut future).poll(cx))).await
}

/// One lazily connected HTTP/2 connection per pod ([`WrapperChannel`]),
/// shared by every call on that pod (Porch: one connection per pod, spec
/// §1.6), with a bounded connect timeout instead of Porch's wait-for-ready.
pub struct ConnectionPool {
    resolver: Box<dyn Resolver>,
    connect_timeout: Duration,
    max_message_bytes: usize,
    channels: Mutex<HashMap<String, (String, WrapperClient)>>,
}

impl std::fmt::Debug for ConnectionPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionPool")
            .field("connect_timeout", &self.connect_timeout)
            .finish_non_exhaustive()
    }
}

/// Room for the non-ResourceList parts of a message.
const ENVELOPE_BYTES: usize = 64 * 1024;

impl ConnectionPool {
    /// A pool dialling through `resolver`, giving up a connection attempt
    /// after `connect_timeout`, with message limits of `max_message_bytes`.
    pub fn new(
        resolver: Box<dyn Resolver>,
        connect_timeout: Duration,
        max_message_bytes: usize,
    ) -> Self {
        Self {
            resolver,
            connect_timeout,
            max_message_bytes,
            channels: Mutex::new(HashMap::new()),
        }
    }

    /// The client for `pod` at `endpoint`: the pooled one, or a new lazily
    /// connecting one (no network I/O here). A pooled channel for a different
    /// endpoint is replaced.
    ///
    /// Errors: the resolver fails or the address is not a valid URI.
    pub fn client(&self, pod: &str, endpoint: &str) -> Result<WrapperClient, String> {
        let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((e, client)) = channels.get(pod)
            && e == endpoint
        {
            return Ok(client.clone());
        }
        let address = self.resolver.resolve(endpoint)?;
        let origin = http::Uri::try_from(format!("http://{address}"))
            .map_err(|e| format!("invalid wrapper address {address:?} for pod {pod}: {e}"))?;
        let channel = WrapperChannel::new(address, self.connect_timeout);
        let client = FunctionEvaluatorClient::with_origin(channel, origin)
            .max_decoding_message_size(self.max_message_bytes + ENVELOPE_BYTES)
            .max_encoding_message_size(self.max_message_bytes + ENVELOPE_BYTES);
        channels.insert(pod.to_string(), (endpoint.to_string(), client.clone()));
        Ok(client)
    }

    /// The address dialled for `endpoint` (through the pool's resolver).
    ///
    /// Errors: the resolver's.
    pub fn address(&self, endpoint: &str) -> Result<String, String> {
        self.resolver.resolve(endpoint)
    }

    /// Drops the pooled channel of `pod` (its pod is gone or evicted).
    pub fn remove(&self, pod: &str) {
        self.channels
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(pod);
    }

    /// Pods with a pooled channel.
    pub fn len(&self) -> usize {
        self.channels
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// True when no channel is pooled.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_map_lines() {
        let text = "# test bed\na.ns.svc.cluster.local:9446 127.0.0.1:4000\n\n10.244.0.1:9446  127.0.0.1:4001 # pod ip\nbroken\n";
        assert_eq!(
            lookup_address_map(text, "a.ns.svc.cluster.local:9446").as_deref(),
            Some("127.0.0.1:4000")
        );
        assert_eq!(
            lookup_address_map(text, "10.244.0.1:9446").as_deref(),
            Some("127.0.0.1:4001")
        );
        assert_eq!(lookup_address_map(text, "other:9446"), None);
    }

    #[tokio::test]
    async fn channels_are_pooled_per_pod_and_endpoint() {
        let pool = ConnectionPool::new(Box::new(DirectResolver), Duration::from_secs(1), 1024);
        pool.client("p", "127.0.0.1:1").unwrap();
        pool.client("p", "127.0.0.1:1").unwrap();
        assert_eq!(pool.len(), 1);
        pool.client("q", "127.0.0.1:2").unwrap();
        assert_eq!(pool.len(), 2);
        pool.remove("p");
        assert_eq!(pool.len(), 1);
        assert!(pool.client("r", "bad address with spaces").is_err());
    }
}
