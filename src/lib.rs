//! krm-fn-runner runs KRM functions: programs that read a `ResourceList` on
//! stdin and write a transformed one on stdout. A re-implementation of
//! Porch's function runner, usable as a library. The three things a user
//! does, each from the crate root:
//!
//! 1. **Render a kpt package** in process, like `kpt fn render`:
//!    [`render_dir`] with a [`RuntimeChain`] and [`RenderOptions`]
//!    ([`PackageRender`] adds progress events and registry tag lookup).
//! 2. **Evaluate one function**: a [`FunctionEvaluator`] — the
//!    [`ExecEvaluator`] (image → local binary), a [`RemoteEvaluator`] (a
//!    function runner over gRPC), an [`EvaluatorChain`] — called with an
//!    [`EvaluationRequest`]; or serve evaluators to Porch with the gRPC
//!    [`Server`].
//! 3. **Simulate the pod cache**: replay a trace of requests against a
//!    [`SimPolicy`] with [`replay()`] (the same [`PodCache`] state machine the
//!    pod evaluator runs, on a simulated cluster and clock).
//!
//! Rendering a package (this renders `examples/packages/hello` of the
//! repository in memory):
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use krm_fn_runner::{RenderOptions, RuntimeChain, render_dir};
//!
//! let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/packages/hello");
//! let rendered = render_dir(&dir, &RuntimeChain::local(), RenderOptions::default()).await?;
//! assert!(rendered.is_ok(), "{}", rendered.render_status().error);
//! let files = rendered.files()?.expect("a successful render has files");
//! assert!(files["deployment.yaml"].contains("namespace: hello-prod"));
//! assert!(files["deployment.yaml"].contains("replicas: 2 # scale here"));
//! // rendered.write_in_place()? would write them back like `kpt fn render`.
//! # Ok(()) }
//! ```
//!
//! Evaluating a function with the exec evaluator (Porch's `config.yaml`
//! maps images to binaries):
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::path::Path;
//! use krm_fn_runner::{
//!     DEFAULT_IMAGE_PREFIX, EvaluationRequest, ExecConfig, ExecEvaluator, ExecSettings,
//!     FunctionEvaluator,
//! };
//!
//! let config = ExecConfig::parse(&std::fs::read("config.yaml")?, "config.yaml")?;
//! let (table, _warnings) = config.table(Path::new("functions"), DEFAULT_IMAGE_PREFIX);
//! let exec = ExecEvaluator::new(table, ExecSettings::new(6 << 20, &[]));
//! let input = std::fs::read("resourcelist.yaml")?;
//! let out = exec.evaluate(EvaluationRequest::new("set-namespace:v0.4.5", input)).await?;
//! println!("{}", String::from_utf8_lossy(&out.resource_list));
//! # Ok(()) }
//! ```
//!
//! The modules beneath follow the code's hexagonal shape: [`domain`] is pure
//! (no I/O, no async runtime), [`ports`] are the traits it needs, and
//! [`adapters`] implement them for processes, files, gRPC and Kubernetes.
//! The command-line binaries are built on the same items.
//!
//! # Cargo features
//!
//! - `render`: the domain, package I/O, and the builtin and exec runtimes —
//!   items 1 and the exec half of 2, without Kubernetes, gRPC, OCI or
//!   command-line dependencies.
//! - `pod-cache`: adds the pod cache's state machine ([`PodCache`]) and the
//!   simulator's pure core (traces, policies, reports), with Kubernetes
//!   object types (`k8s-openapi`) but no client.
//! - `full` (default): everything else — the gRPC server and client, the pod
//!   evaluator on Kubernetes, the OCI registry client, telemetry, the
//!   simulator and the command-line binaries.

pub mod adapters;
#[cfg(feature = "full")]
mod app;
#[cfg(feature = "full")]
mod cli;
pub mod domain;
pub mod ports;
#[doc(hidden)]
pub mod supervisor;

pub use adapters::exec::{ExecEvaluator, ExecSettings};
pub use adapters::package::{PackageIoError, PackageRender, RenderedPackage, render_dir};
pub use adapters::runtime::{
    BuiltinRuntime, DeadlineRuntime, EvaluatorRuntime, ExecCommandRuntime, RuntimeChain,
};
pub use domain::chain::EvaluatorChain;
pub use domain::evaluation::{
    DEFAULT_MAX_MESSAGE_BYTES, EvalError, EvaluationRequest, EvaluationResponse,
};
pub use domain::exec_config::ExecConfig;
pub use domain::image::DEFAULT_IMAGE_PREFIX;
pub use domain::render::{
    NoEvents, RenderError, RenderEvents, RenderOptions, RenderOptionsBuilder, RenderOutcome,
    RenderStatus, StepRecord,
};
pub use ports::{FunctionCall, FunctionEvaluator, FunctionOutput, FunctionRuntime, FunctionTarget};

#[cfg(feature = "full")]
pub use adapters::grpc::{Listen, RemoteEvaluator, ServeOptions, Server, ServerLimits};
#[cfg(feature = "full")]
pub use adapters::sim::{ReplayOptions, replay};
#[cfg(feature = "pod-cache")]
pub use domain::pod_cache::PodCache;
#[cfg(feature = "pod-cache")]
pub use domain::simulation::{PolicyReport, SimPolicy, TraceEntry, parse_trace};

/// The Rust examples of the book's library page (`docs/src/library.md`),
/// compiled by the doc tests so the book's code keeps building against the
/// crate (the README's example is one of them: `tests/hermetic/readme.rs`). Only
/// under `cfg(doctest)`: not part of the API.
#[cfg(all(doctest, feature = "full"))]
#[doc = include_str!("../docs/src/library.md")]
pub struct BookLibraryExamples;

/// Entry points of the command-line binaries of this package
/// (`krm-fn-runner`, `wrapper-server`, `grpc-health-probe`); not a library API.
#[cfg(feature = "full")]
#[doc(hidden)]
pub mod bin {
    /// The `krm-fn-runner` command line.
    pub fn krm_fn_runner() -> std::process::ExitCode {
        crate::cli::main()
    }

    /// The `wrapper-server` command line.
    pub fn wrapper_server() -> std::process::ExitCode {
        crate::cli::wrapper::main()
    }

    /// The `grpc-health-probe` command line.
    pub fn grpc_health_probe() -> std::process::ExitCode {
        crate::cli::probe::main()
    }

    /// The clap definitions of `krm-fn-runner` and `wrapper-server` (for
    /// checking the documentation against the flags).
    pub fn commands() -> [clap::Command; 2] {
        use clap::CommandFactory;
        [
            crate::cli::Cli::command(),
            crate::cli::wrapper::WrapperArgs::command(),
        ]
    }
}
