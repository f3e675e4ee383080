//! Pooled gRPC connections to wrapper servers, one per function pod, and
//! the seam that turns a pod's endpoint into a dialable address.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
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
/// A call goes from the caller's task straight to hyper's connection task:
/// unlike tonic's `Channel` there is no buffering task (and no second
/// hand-off per call) in between, which is most of what a warm pod call
/// adds over calling the wrapper server directly. A failed dial is
/// `UNAVAILABLE` (as with tonic's `Channel`: [`tonic::ConnectError`]); a
/// connection that breaks mid-call is `UNKNOWN` with the transport error as
/// its source. Keep-alive pings every 30 s, also while idle, find a dead
/// peer. The call's deadline is the caller's to enforce.
#[derive(Clone)]
pub struct WrapperChannel {
    shared: Arc<ChannelState>,
}

struct ChannelState {
    address: String,
    connect_timeout: Duration,
    sender: tokio::sync::Mutex<Option<SendRequest<Body>>>,
}

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
                sender: tokio::sync::Mutex::new(None),
            }),
        }
    }

    /// A sender on the open connection, dialling one when there is none or
    /// it has closed. Callers racing for a new connection wait for one dial.
    async fn sender(&self) -> Result<SendRequest<Body>, BoxError> {
        let mut sender = self.shared.sender.lock().await;
        if let Some(s) = sender.as_ref()
            && !s.is_closed()
        {
            return Ok(s.clone());
        }
        *sender = None;
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
        Ok(sender.insert(dialled).clone())
    }

    async fn dial(&self) -> Result<SendRequest<Body>, BoxError> {
        let stream = tokio::net::TcpStream::connect(&self.shared.address).await?;
        stream.set_nodelay(true)?;
        let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .keep_alive_interval(Duration::from_secs(30))
            .keep_alive_while_idle(true)
            .handshake(TokioIo::new(stream))
            .await?;
        let address = self.shared.address.clone();
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(%address, "connection to the wrapper server ended: {e}");
            }
        });
        Ok(sender)
    }
}

impl tower::Service<http::Request<Body>> for WrapperChannel {
    type Response = http::Response<hyper::body::Incoming>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    /// Always ready: the call itself waits for the connection.
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let channel = self.clone();
        Box::pin(async move {
            let mut sender = channel.sender().await?;
            sender.ready().await?;
            Ok(sender.send_request(request).await?)
        })
    }
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
