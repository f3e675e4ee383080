//! Rendering kpt packages: the Kptfile model, the function pipeline over an
//! in-memory package tree, and what a render reports — `kpt fn render`
//! semantics (`krm-functions.md` §1–3) with Porch's `RenderStatus`
//! (`porch-function-runner.md` §8).
//!
//! Pure: no file system, no clock, no async runtime. Functions run through
//! the [`crate::ports::FunctionRuntime`] port; the package I/O adapter
//! builds the [`Package`] tree and writes [`RenderOutcome::resources`] back.
//!
//! ```
//! # use krm_fn_runner::domain::render::*;
//! # use krm_fn_runner::ports::{FunctionCall, FunctionOutput, FunctionRuntime};
//! # use krm_fn_runner::domain::evaluation::EvalError;
//! # struct Echo;
//! # #[async_trait::async_trait]
//! # impl FunctionRuntime for Echo {
//! #     async fn run(&self, call: FunctionCall) -> Result<FunctionOutput, EvalError> {
//! #         Ok(FunctionOutput::new(call.resource_list, ""))
//! #     }
//! # }
//! # futures_executor(async {
//! let kptfile = serde_json::json!({
//!     "apiVersion": "kpt.dev/v1", "kind": "Kptfile",
//!     "metadata": {"name": "app", "annotations": {"internal.config.kubernetes.io/path": "Kptfile"}},
//!     "pipeline": {"mutators": [{"image": "set-namespace:v0.4.5", "configMap": {"namespace": "prod"}}]}
//! });
//! let package = Package::from_flat(vec![kptfile]).unwrap();
//! let outcome = Renderer::new(&Echo, RenderOptions::default()).render(package).await;
//! assert!(outcome.is_ok());
//! assert_eq!(outcome.result_list().items[0].image,
//!            "ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.5");
//! # });
//! # fn futures_executor(f: impl std::future::Future<Output = ()>) {
//! #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
//! # }
//! ```

pub mod annotations;
pub mod attribution;
pub mod error;
pub mod kptfile;
pub mod package;
pub mod pipeline;
pub mod porch;
pub mod results;
pub mod selector;
pub mod source;

pub use error::{RenderError, RenderErrorKind, StepError};
pub use kptfile::{Function, Kptfile, KptfileError, Pipeline, Selector};
pub use package::{Package, PackageError};
pub use pipeline::{
    DEFAULT_STEP_TIMEOUT, GEN_PKG_CONTEXT_IMAGE, NoEvents, RenderEvents, RenderOptions,
    RenderOptionsBuilder, RenderOutcome, Renderer, StepStart, image_repository, is_tag_constraint,
    pick_tag, resolve_function_image,
};
pub use results::{
    FunctionResult, FunctionResultList, KptRenderStatus, RenderStatus, StepKind, StepRecord,
    StructuredResult,
};
pub use source::{CallSources, ObjectText, SourceMap, TextMap};

#[cfg(test)]
mod tests;
