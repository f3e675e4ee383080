//! Serving accepted connections one by one, so that each can be aged and
//! drained on its own: the runner's connection ageing (grpc-go's
//! `MaxConnectionAge` and `MaxConnectionAgeGrace`, see
//! [`connection_age`](crate::domain::connection_age)).
//!
//! Each connection is served by tonic's own server (its HTTP/2 settings,
//! error recovery and deadline handling), fed with that one connection.
//! tonic's graceful shutdown of a server is exactly what ageing needs for
//! one connection: hyper sends GOAWAY (first with the highest stream id,
//! then, after a ping, with the last stream it took), serves the calls
//! already started to their end and closes. So a connection's server is
//! shut down when its jittered age is reached, or when the whole server
//! stops. If calls still run when the grace is over, each is answered
//! `UNAVAILABLE` (saying why, and that it may be retried) and, after
//! [`FINAL_ANSWER_WAIT`] for those answers to go out, the transport is
//! closed.
//!
//! tonic's `Server::max_connection_age` is not used: in tonic 0.14.9 it
//! has no jitter, and with a grace set it sends no GOAWAY at the age at all
//! (the connection is dropped at age + grace, calls and all).

use std::future::Future;
use std::io;
use std::pin::pin;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_stream::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;
use tonic::body::Body;
use tonic::service::Routes;
use tonic::transport::server::Router;
use tower::Layer;

use super::limits::{ConnectionCalls, Limited};
use super::shutdown::FINAL_ANSWER_WAIT;
use crate::adapters::telemetry::metrics;
use crate::domain::connection_age::ConnectionAge;
use crate::domain::evaluation::EvalError;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The answer of a call stopped because its connection's age grace ran out.
pub fn stopped_at_age_grace(image: &str, grace: Duration) -> EvalError {
    EvalError::Unavailable(format!(
        "function {image:?} was stopped: its connection reached the runner's maximum age \
         (--max-connection-age) and the call was still running when the grace for calls in \
         flight (--max-connection-age-grace, {}) ran out; retry the call (the client reconnects \
         to any replica), or raise --max-connection-age-grace above the longest call",
        humantime::format_duration(grace)
    ))
}

/// Serves every connection of `incoming` with `router` until `stop` is
/// cancelled; then stops accepting (dropping `incoming`, which closes the
/// listener), sends GOAWAY on every connection and returns once all are
/// closed. With `age`, each connection is also shut down at its own
/// jittered age and its calls get the grace.
///
/// Errors: none so far (a connection's failure is logged, not returned);
/// the type is the server's.
pub(crate) async fn serve<L, ResBody, IO>(
    router: Router<L>,
    incoming: impl Stream<Item = io::Result<Limited<IO>>>,
    connection_age: Option<ConnectionAge>,
    stop: CancellationToken,
) -> Result<(), tonic::transport::Error>
where
    L: Layer<Routes> + Clone + Send + 'static,
    L::Service: tower::Service<http::Request<Body>, Response = http::Response<ResBody>>
        + Clone
        + Send
        + 'static,
    <L::Service as tower::Service<http::Request<Body>>>::Future: Send,
    <L::Service as tower::Service<http::Request<Body>>>::Error: Into<BoxError> + Send,
    ResBody: hyper::body::Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // Each connection's task holds a sender; all gone = all closed.
    let (open, mut all_closed) = mpsc::channel::<()>(1);
    {
        let mut incoming = pin!(incoming);
        loop {
            let next = tokio::select! {
                biased;
                () = stop.cancelled() => break,
                next = incoming.next() => next,
            };
            match next {
                None => break,
                Some(Err(e)) => tracing::debug!("connection not accepted: {e}"),
                Some(Ok(io)) => {
                    let calls = io.calls();
                    let aged = CancellationToken::new();
                    let shutdown = shutdown_signal(&stop, &aged, &calls);
                    let one =
                        tokio_stream::once(Ok::<_, io::Error>(io)).chain(tokio_stream::pending());
                    let serving = router.clone().serve_with_incoming_shutdown(one, shutdown);
                    let (stop, open) = (stop.clone(), open.clone());
                    tokio::spawn(async move {
                        let counted = metrics::open_connection();
                        serve_aged(serving, &calls, &aged, connection_age, &stop).await;
                        drop(counted);
                        drop(open);
                    });
                }
            }
        }
    }
    drop(open);
    let _ = all_closed.recv().await;
    Ok(())
}

/// Resolves when tonic's server of one connection is to shut down
/// (GOAWAY, drain): when the whole server stops or the connection is aged;
/// also when the connection has ended by itself, which that server's
/// accept loop (waiting for a next connection that never comes) would not
/// notice.
fn shutdown_signal(
    stop: &CancellationToken,
    aged: &CancellationToken,
    calls: &ConnectionCalls,
) -> impl Future<Output = ()> + Send + 'static {
    let (stop, aged, closed) = (stop.clone(), aged.clone(), calls.closed().clone());
    async move {
        tokio::select! {
            () = stop.cancelled() => {}
            () = aged.cancelled() => {}
            () = closed.cancelled() => {}
        }
    }
}

/// Drives `serving`, one connection's server, until the connection
/// closes: by the client, when idle, when the server stops, or at its
/// jittered `age` (cancelling `aged` sends GOAWAY), then within the grace
/// (after which its calls are cut and the transport killed).
async fn serve_aged<F>(
    serving: F,
    calls: &ConnectionCalls,
    aged: &CancellationToken,
    age: Option<ConnectionAge>,
    stop: &CancellationToken,
) where
    F: Future<Output = Result<(), tonic::transport::Error>>,
{
    let mut serving = pin!(serving);
    let Some(age) = age else {
        log_end(serving.await);
        return;
    };
    let lifetime = age.jittered(rand::random::<f64>());
    tokio::select! {
        r = &mut serving => {
            log_end(r);
            return;
        }
        () = tokio::time::sleep(lifetime) => {}
    }
    if stop.is_cancelled() {
        // The server's shutdown has its own grace.
        log_end(serving.await);
        return;
    }
    tracing::debug!(
        age = ?lifetime,
        in_flight = calls.active(),
        "connection reached its maximum age: GOAWAY sent, calls in flight may finish"
    );
    aged.cancel();
    let outcome = match tokio::time::timeout(age.grace(), &mut serving).await {
        Ok(r) => {
            log_end(r);
            "drained"
        }
        Err(_) => {
            tracing::warn!(
                grace = ?age.grace(),
                running = calls.active(),
                "a connection's age grace ran out with calls still running: they are stopped \
                 (raise --max-connection-age-grace above the longest call)"
            );
            calls.cut().cancel();
            if tokio::time::timeout(FINAL_ANSWER_WAIT, &mut serving)
                .await
                .is_err()
            {
                calls.kill().cancel();
                log_end(serving.await);
            }
            "cut"
        }
    };
    metrics::count_aged_connection(outcome);
}

fn log_end(r: Result<(), tonic::transport::Error>) {
    if let Err(e) = r {
        tracing::debug!("connection ended with an error: {e}");
    }
}
