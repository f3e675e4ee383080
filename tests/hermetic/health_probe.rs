//! The `grpc-health-probe` binary against real gRPC servers over real
//! sockets: the runner and the wrapper server (SERVING), a tonic-health
//! server reporting NOT_SERVING, a server whose Check never answers, no
//! server at all, and bad arguments — each with grpc_health_probe's
//! documented exit code (0, 4, 3, 2, 1).

use krm_fn_testbed::common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::Runner;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

/// Runs the probe binary with `args`; returns its exit code and stderr.
async fn probe(args: &[&str]) -> (i32, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_grpc-health-probe"))
        .args(args)
        .output()
        .await
        .expect("run grpc-health-probe");
    let code = out.status.code().expect("the probe exits, not killed");
    (code, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Serves `router` on an ephemeral loopback port until the test ends.
async fn serve(router: tonic::transport::server::Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(router.serve_with_incoming(TcpListenerStream::new(listener)));
    addr
}

#[tokio::test]
async fn serving_runner_and_wrapper_exit_0() {
    let catalog = common::catalog_dir();
    let config = format!("--config={}", catalog.join("config.yaml").display());
    let functions = format!("--functions={}", catalog.join("bin").display());
    let runner = Runner::start(&["--disable-runtimes=pod", &config, &functions]);
    let (code, err) = probe(&["-addr", &runner.address]).await;
    assert_eq!((code, err.trim()), (0, "status: SERVING"));

    // Porch's probe command line, Go flag syntax and all.
    let wrapper = Runner::start_wrapper(&["--", "/bin/cat"]);
    let port = wrapper.address.rsplit(':').next().unwrap();
    let (code, err) = probe(&["-addr", &format!("localhost:{port}")]).await;
    assert_eq!(code, 0, "{err}");
    let (code, err) = probe(&[&format!("-addr=:{port}"), "-v", "-rpc-timeout=2s"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("connection established"), "verbose log: {err}");
}

#[tokio::test]
async fn not_serving_exits_4_and_unknown_service_exits_3() {
    let (reporter, service) = tonic_health::server::health_reporter();
    reporter
        .set_service_status("evaluator", tonic_health::ServingStatus::NotServing)
        .await;
    let addr = serve(tonic::transport::Server::builder().add_service(service)).await;
    let addr = addr.to_string();

    let (code, err) = probe(&["-addr", &addr, "-service", "evaluator"]).await;
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("NOT_SERVING"), "{err}");
    // The whole server ("") is SERVING on the same server.
    assert_eq!(probe(&["-addr", &addr]).await.0, 0);
    // A service the server does not know is an RPC failure (NOT_FOUND).
    let (code, err) = probe(&["-addr", &addr, "-service", "nope"]).await;
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("health rpc failed"), "{err}");
}

/// A Health service whose Check answers after `delay`.
struct Slow {
    delay: Duration,
}

#[tonic::async_trait]
impl Health for Slow {
    async fn check(
        &self,
        _: tonic::Request<HealthCheckRequest>,
    ) -> Result<tonic::Response<HealthCheckResponse>, tonic::Status> {
        tokio::time::sleep(self.delay).await;
        Ok(tonic::Response::new(HealthCheckResponse { status: 1 }))
    }

    type WatchStream = tokio_stream::Empty<Result<HealthCheckResponse, tonic::Status>>;

    async fn watch(
        &self,
        _: tonic::Request<HealthCheckRequest>,
    ) -> Result<tonic::Response<Self::WatchStream>, tonic::Status> {
        Err(tonic::Status::unimplemented("watch"))
    }
}

#[tokio::test]
async fn rpc_timeout_exits_3() {
    let slow = HealthServer::new(Slow {
        delay: Duration::from_secs(30),
    });
    let addr = serve(tonic::transport::Server::builder().add_service(slow)).await;
    let started = Instant::now();
    let (code, err) = probe(&["-addr", &addr.to_string(), "-rpc-timeout", "300ms"]).await;
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("did not complete within"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the probe waited for the slow answer"
    );
}

#[tokio::test]
async fn no_server_exits_2() {
    // A port that was just free: nothing listens there.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let (code, err) = probe(&["-addr", &format!("127.0.0.1:{port}")]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("failed to connect"), "{err}");

    // A listener that accepts TCP but never speaks HTTP/2: the connection
    // counts as made once TCP is (grpc-go's probe waits for the server's
    // HTTP/2 settings and exits 2), so the RPC times out: exit 3, in time.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    let started = Instant::now();
    let (code, err) = probe(&["-addr", &addr, "-rpc-timeout", "300ms"]).await;
    assert_eq!(code, 3, "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
    drop(silent);

    // No socket file.
    let (code, err) = probe(&["-addr", "unix:/nonexistent/probe.sock"]).await;
    assert_eq!(code, 2, "{err}");
}

#[tokio::test]
async fn bad_arguments_exit_1() {
    for (args, needle) in [
        (&[][..], "-addr not specified"),
        (
            &["-addr", "x:1", "-connect-timeout", "0s"][..],
            "-connect-timeout",
        ),
        (&["-addr", "x:1", "-rpc-timeout", "soon"][..], "soon"),
        (&["-addr", "x:1", "-no-such-flag"][..], "no-such-flag"),
        (&["-addr", "x:1", "-tls"][..], "-tls is not supported"),
    ] {
        let (code, err) = probe(args).await;
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let (code, out) = probe(&["-h"]).await;
    assert_eq!(code, 0, "{out}");
}
