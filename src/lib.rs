//! krm-fn-runner: a Rust re-implementation of Porch's KRM function runner.
//!
//! A KRM function is a program that reads a `ResourceList` on stdin and
//! writes a transformed one on stdout. This crate runs such functions:
//!
//! - as a gRPC service wire-compatible with Porch's function runner
//!   (`krm-fn-runner serve`, [`adapters::grpc`]);
//! - as a library: build an evaluator and call it in-process;
//! - as a `kpt fn render` for Rust: render a package directory through a
//!   chain of function runtimes (builtin in-process functions, local
//!   binaries, a remote function runner), keeping the package's comments
//!   ([`adapters::package`], `krm-fn-runner render`).
//!
//! The code is hexagonal: [`domain`] is pure (no I/O, no async runtime),
//! [`ports`] are the traits it needs, [`adapters`] implement them for
//! processes and gRPC, and [`app`] wires them together.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::path::Path;
//! use krm_fn_runner::adapters::exec::{ExecEvaluator, ExecSettings};
//! use krm_fn_runner::domain::evaluation::EvaluationRequest;
//! use krm_fn_runner::domain::exec_config::ExecConfig;
//! use krm_fn_runner::domain::image::DEFAULT_IMAGE_PREFIX;
//! use krm_fn_runner::ports::FunctionEvaluator;
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
//! Rendering a package directory with the builtin functions (this renders
//! `examples/packages/hello` of the repository in memory):
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use krm_fn_runner::adapters::package::render_dir;
//! use krm_fn_runner::adapters::runtime::{BuiltinRuntime, RuntimeChain};
//! use krm_fn_runner::domain::render::{NoEvents, RenderOptions};
//!
//! let runtime = RuntimeChain::new().with("builtin", Arc::new(BuiltinRuntime::default()));
//! let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/packages/hello");
//! let rendered = render_dir(&dir, &runtime, RenderOptions::default(), &NoEvents).await?;
//! assert!(rendered.is_ok(), "{}", rendered.render_status().error);
//! let files = rendered.files()?.expect("a successful render has files");
//! assert!(files["deployment.yaml"].contains("namespace: hello-prod"));
//! assert!(files["deployment.yaml"].contains("replicas: 2 # scale here"));
//! // rendered.write_in_place()? would write them back like `kpt fn render`.
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

pub mod adapters;
pub mod app;
pub mod cli;
pub mod domain;
pub mod ports;
