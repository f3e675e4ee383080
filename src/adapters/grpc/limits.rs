//! Transport limits of the gRPC server: how many connections it holds, how
//! long an idle one may stay, and accepting without spinning when the
//! process is out of file descriptors.
//!
//! tonic's own accept loop retries `accept` at once when it fails with
//! `EMFILE` (the pending connection stays in the backlog), which spins a
//! core while new calls hang; and it holds any number of connections for
//! ever. Here one task accepts: it takes a connection slot first (at most
//! [`ServerLimits::max_connections`] are open; beyond that, connections wait
//! in the kernel's backlog), backs off for [`ACCEPT_BACKOFF`] after a
//! resource error, and wraps every connection so that it is closed after
//! [`ServerLimits::idle_timeout`] without a call in progress (grpc-go's
//! `MaxConnectionIdle`), or as soon as the server kills it (the end of a
//! connection's age grace, or of the shutdown grace; see
//! [`connections`](super::connections)). Dead peers are found by HTTP/2
//! keepalive pings.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::time::{Instant, Sleep};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// Pause after `accept` fails for lack of resources (file descriptors,
/// memory) before trying again.
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(200);

/// The server's connection and request limits (flags of `serve` and
/// `wrapper-server`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerLimits {
    /// Most open connections (`--max-connections`); more wait in the backlog.
    pub max_connections: usize,
    /// Most concurrent calls (HTTP/2 streams) per connection
    /// (`--max-concurrent-streams`).
    pub max_concurrent_streams: u32,
    /// Period of HTTP/2 keepalive pings (`--keepalive-interval`); `None`
    /// sends none.
    pub keepalive_interval: Option<Duration>,
    /// How long a ping may go unanswered before the connection is closed
    /// (`--keepalive-timeout`).
    pub keepalive_timeout: Duration,
    /// A connection with no call in progress for this long is closed
    /// (`--idle-timeout`); `None` keeps idle connections.
    pub idle_timeout: Option<Duration>,
    /// Most bytes of requests being evaluated at once
    /// (`--max-request-bytes-in-flight`); a request that would exceed it is
    /// refused with `RESOURCE_EXHAUSTED`.
    pub max_bytes_in_flight: usize,
}

impl Default for ServerLimits {
    /// 1,024 connections, 100 streams each, a ping every 30 s answered within
    /// 10 s, idle connections closed after 5 minutes, 64 MiB of requests in
    /// flight.
    fn default() -> Self {
        Self {
            max_connections: 1024,
            max_concurrent_streams: 100,
            keepalive_interval: Some(Duration::from_secs(30)),
            keepalive_timeout: Duration::from_secs(10),
            idle_timeout: Some(Duration::from_secs(300)),
            max_bytes_in_flight: 64 << 20,
        }
    }
}

/// A listener the accept task can take connections from.
pub(crate) trait Accept: Send + 'static {
    /// The connection type.
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// Accepts one connection.
    fn accept_one(&self) -> impl Future<Output = io::Result<Self::Io>> + Send;
}

impl Accept for TcpListener {
    type Io = TcpStream;
    async fn accept_one(&self) -> io::Result<TcpStream> {
        let (s, _) = self.accept().await?;
        let _ = s.set_nodelay(true);
        Ok(s)
    }
}

impl Accept for UnixListener {
    type Io = UnixStream;
    async fn accept_one(&self) -> io::Result<UnixStream> {
        Ok(self.accept().await?.0)
    }
}

/// An accepted connection, TCP or Unix: the server is built once for both
/// (one copy of tonic's serving code in the binary, not one per socket
/// type), at the cost of a virtual call per read and write.
pub trait Connection: AsyncRead + AsyncWrite + Unpin + Send + 'static {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Connection for T {}

/// Errors of one connection that do not concern the listener.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::Interrupted
    )
}

/// Accepts connections from `listener` within `limits` on a task of its
/// own; the stream ends, and the listener is closed, when the stream is
/// dropped. Cancelling `kill` closes every connection it accepted.
pub(crate) fn incoming<L: Accept>(
    listener: L,
    limits: &ServerLimits,
    kill: &CancellationToken,
) -> ReceiverStream<io::Result<Limited<Box<dyn Connection>>>> {
    let kill = kill.clone();
    let (tx, rx) = mpsc::channel(1);
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let idle = limits.idle_timeout;
    tokio::spawn(async move {
        let mut warned_full = false;
        let mut warned_error = false;
        loop {
            let permit = match slots.clone().try_acquire_owned() {
                Ok(p) => p,
                Err(_) => {
                    if !warned_full {
                        tracing::warn!(
                            "--max-connections reached: new connections wait until one closes"
                        );
                        warned_full = true;
                    }
                    tokio::select! {
                        p = slots.clone().acquire_owned() => p.expect("never closed"),
                        () = tx.closed() => return,
                    }
                }
            };
            let accepted = tokio::select! {
                r = listener.accept_one() => r,
                () = tx.closed() => return,
            };
            match accepted {
                Ok(io) => {
                    warned_error = false;
                    let io: Box<dyn Connection> = Box::new(io);
                    let conn = Limited::new(io, permit, idle, kill.child_token());
                    if tx.send(Ok(conn)).await.is_err() {
                        return;
                    }
                }
                Err(e) if is_connection_error(&e) => {}
                Err(e) => {
                    if !warned_error {
                        tracing::warn!(
                            "cannot accept a connection: {e}; trying again every {ACCEPT_BACKOFF:?} \
                             (at the file-descriptor limit, lower --max-connections or raise ulimit -n)"
                        );
                        warned_error = true;
                    }
                    tokio::select! {
                        () = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                        () = tx.closed() => return,
                    }
                }
            }
        }
    });
    ReceiverStream::new(rx)
}

/// Calls in progress on one connection, and since when it has had none;
/// and the server's hold on the connection: stopping its calls, closing it.
#[derive(Debug)]
pub struct ConnectionCalls {
    active: AtomicUsize,
    idle_since: Mutex<Instant>,
    cut: CancellationToken,
    kill: CancellationToken,
    closed: CancellationToken,
}

impl ConnectionCalls {
    fn enter(self: &Arc<Self>) -> CallGuard {
        self.active.fetch_add(1, Ordering::AcqRel);
        CallGuard(self.clone())
    }

    /// Calls in progress on the connection now.
    pub fn active(&self) -> usize {
        self.active.load(Ordering::Acquire)
    }

    /// Cancelled when the connection's calls are to be stopped (the end of
    /// its age grace); each call then answers `UNAVAILABLE`.
    pub fn cut(&self) -> &CancellationToken {
        &self.cut
    }

    /// Cancelling it closes the connection's transport at once (reads and
    /// writes fail), whatever runs on it.
    pub fn kill(&self) -> &CancellationToken {
        &self.kill
    }

    /// Cancelled once the connection's transport is dropped (closed, by
    /// either side).
    pub fn closed(&self) -> &CancellationToken {
        &self.closed
    }
}

/// Counts one call on its connection while alive.
struct CallGuard(Arc<ConnectionCalls>);

impl Drop for CallGuard {
    fn drop(&mut self) {
        if self.0.active.fetch_sub(1, Ordering::AcqRel) == 1
            && let Ok(mut t) = self.0.idle_since.lock()
        {
            *t = Instant::now();
        }
    }
}

/// What tonic puts in each request's extensions for a [`Limited`] connection.
#[derive(Debug, Clone)]
pub struct ConnectionInfo {
    /// The connection's call counter.
    pub calls: Arc<ConnectionCalls>,
}

/// A connection holding one of the `--max-connections` slots, closed when
/// idle for too long.
pub struct Limited<T> {
    io: T,
    _slot: OwnedSemaphorePermit,
    calls: Arc<ConnectionCalls>,
    idle: Option<Duration>,
    timer: Pin<Box<Sleep>>,
    killed: Pin<Box<WaitForCancellationFutureOwned>>,
}

impl<T> Limited<T> {
    fn new(
        io: T,
        slot: OwnedSemaphorePermit,
        idle: Option<Duration>,
        kill: CancellationToken,
    ) -> Self {
        let now = Instant::now();
        Self {
            io,
            _slot: slot,
            calls: Arc::new(ConnectionCalls {
                active: AtomicUsize::new(0),
                idle_since: Mutex::new(now),
                cut: CancellationToken::new(),
                kill: kill.clone(),
                closed: CancellationToken::new(),
            }),
            idle,
            timer: Box::pin(tokio::time::sleep_until(now + idle.unwrap_or_default())),
            killed: Box::pin(kill.cancelled_owned()),
        }
    }

    /// The connection's calls and the server's hold on it.
    pub fn calls(&self) -> Arc<ConnectionCalls> {
        self.calls.clone()
    }

    /// Ready with an error once the server has killed the connection.
    fn poll_killed(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        self.killed.as_mut().poll(cx).map(|()| {
            io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "connection closed by the server (its calls were stopped)",
            )
        })
    }

    /// Ready with an error once the connection has been idle too long.
    fn poll_idle(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let Some(idle) = self.idle else {
            return Poll::Pending;
        };
        if self.calls.active.load(Ordering::Acquire) > 0 {
            return Poll::Pending;
        }
        let Ok(since) = self.calls.idle_since.lock().map(|t| *t) else {
            return Poll::Pending;
        };
        if self.timer.deadline() != since + idle {
            self.timer.as_mut().reset(since + idle);
        }
        match self.timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(io::Error::new(
                io::ErrorKind::TimedOut,
                "connection idle for longer than --idle-timeout",
            )),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T> Drop for Limited<T> {
    fn drop(&mut self) {
        self.calls.closed.cancel();
    }
}

impl<T> tonic::transport::server::Connected for Limited<T> {
    type ConnectInfo = ConnectionInfo;
    fn connect_info(&self) -> ConnectionInfo {
        ConnectionInfo {
            calls: self.calls.clone(),
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Limited<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Poll::Ready(e) = this.poll_killed(cx) {
            return Poll::Ready(Err(e));
        }
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Pending => this.poll_idle(cx).map(Err),
            ready => ready,
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Limited<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Poll::Ready(e) = this.poll_killed(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Poll::Ready(e) = this.poll_killed(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Poll::Ready(e) = this.poll_killed(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// A tower layer counting each request as a call on its connection, so
/// that the idle timeout never closes a connection with a call in progress.
#[derive(Debug, Clone, Copy, Default)]
pub struct CountCallsLayer;

impl<S> tower::Layer<S> for CountCallsLayer {
    type Service = CountCalls<S>;
    fn layer(&self, inner: S) -> CountCalls<S> {
        CountCalls(inner)
    }
}

/// See [`CountCallsLayer`].
#[derive(Debug, Clone)]
pub struct CountCalls<S>(S);

impl<S, B> tower::Service<http::Request<B>> for CountCalls<S>
where
    S: tower::Service<http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let guard = request
            .extensions()
            .get::<ConnectionInfo>()
            .map(|c| c.calls.enter());
        let call = self.0.call(request);
        Box::pin(async move {
            let response = call.await;
            drop(guard);
            response
        })
    }
}
