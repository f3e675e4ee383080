//! Function runtimes for the render pipeline ([`crate::ports::FunctionRuntime`]):
//!
//! - [`builtin::BuiltinRuntime`]: functions compiled into the runner (the
//!   package-context generator, `set-namespace`, `set-labels`), matched by
//!   image name and tag as Porch matches its builtins;
//! - [`EvaluatorRuntime`]: any [`crate::ports::FunctionEvaluator`] — the
//!   exec evaluator (image → local binary, Porch's `config.yaml`), a remote
//!   function runner over gRPC ([`crate::adapters::grpc::client::RemoteEvaluator`]),
//!   or an evaluator chain — for `image:` functions;
//! - [`ExecCommandRuntime`]: `exec:` functions (a command line run as a child
//!   process, as `kpt fn render --allow-exec` does);
//! - [`RuntimeChain`]: several runtimes tried in order, falling through only
//!   on NotFound (Porch's builtin → gRPC chain);
//! - [`DeadlineRuntime`]: any runtime, bounded by each call's time limit;
//! - [`NextStepOnNotFound`]: a chain whose NotFound for an image says what
//!   was tried and which flags would make it run (`render`).

pub mod builtin;
mod chain;
mod deadline;
mod evaluator;
mod exec;
mod next_step;

pub use builtin::BuiltinRuntime;
pub use chain::RuntimeChain;
pub use deadline::DeadlineRuntime;
pub use evaluator::EvaluatorRuntime;
pub use exec::ExecCommandRuntime;
pub use next_step::NextStepOnNotFound;
