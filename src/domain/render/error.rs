//! Render errors, worded like kpt's so that messages (and the Kptfile
//! `Rendered` condition, and Porch's `RenderStatus.error`) read the same.
//!
//! kpt wraps errors with an operation and a package path
//! (`pkg.render: pkg ./db:\n\tpipeline.run: <cause>`); nested wrappers with
//! the same operation or path collapse. The shapes reproduced here:
//!
//! | Where | Text |
//! |---|---|
//! | step failure, depth-first | `pkg.render: pkg <pkg>:\n\tpipeline.run: <cause>` |
//! | step failure, `kpt.dev/bfs-rendering` | `pkg.render: pkg .:\n\tpipeline.run: [pkg <pkg>: ]<cause>` |
//! | a package with no pipeline holds non-KRM objects | `pkg.render: pkg <pkg>: input resource list must contain only KRM resources: <file>: <reason>` |
//! | `configPath` not among the package's own resources | `pkg.render: pkg <pkg>: Kptfile is invalid: …` |
//! | invalid subpackage Kptfile | `pkg.render: pkg <pkg>:\n\tpkg.read: invalid pipeline: …` |
//! | invalid root Kptfile | `fn.render: pkg .:\n\tpkg.read: invalid pipeline: …` |
//!
//! `<pkg>` is `.` for the root and `./<path>` for a subpackage. A function
//! that exits non-zero is reported by kpt as `already handled error` (its
//! exit code, stderr and results are in the step record and results).

use std::fmt;

use super::kptfile::{PipelineInvalid, ValidateError};
use crate::domain::evaluation::EvalError;

/// kpt's cause text for a function that failed with an exit code.
pub const ALREADY_HANDLED: &str = "already handled error";
/// kpt's message when an `exec` function runs without `--allow-exec`.
pub const EXEC_NOT_ALLOWED: &str =
    "must run with `--allow-exec` option to allow running function binaries";

/// Why one pipeline step failed (the cause after `pipeline.run: `).
///
/// Not comparable: a runtime failure keeps the [`EvalError`] it came
/// from, which may hold an I/O or decode error; match on the variant.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StepError {
    /// An `exec` function and exec is not allowed.
    #[error("{EXEC_NOT_ALLOWED}")]
    ExecNotAllowed,
    /// The step's input holds a non-KRM object (`<file>: <reason>`).
    #[error("input resource list must contain only KRM resources: {0}")]
    InvalidInput(String),
    /// The function returned a non-KRM object (`<file>: <reason>`).
    #[error("output resource list must contain only KRM resources: {0}")]
    InvalidOutput(String),
    /// The function put an object outside its package.
    #[error("function must not modify resources outside of package: resource has path {0}")]
    OutsidePackage(String),
    /// Two output objects share a package, file and index.
    #[error("resource at path {path:?} and index {index:?} already exists")]
    Duplicate {
        /// Cleaned file path.
        path: String,
        /// Index text.
        index: String,
    },
    /// Legacy and internal path/index/id annotations disagree (kyaml).
    #[error("{0}")]
    Annotations(String),
    /// The function exited non-zero; details are in the step record.
    #[error("{ALREADY_HANDLED}")]
    FunctionFailed {
        /// The exit code.
        exit_code: i32,
    },
    /// No runtime serves the function's image or binary (every evaluator
    /// in the chain answered not found); kpt's wording names the function.
    #[error("function runtime failed to evaluate function {function:?}: {source}")]
    NotFound {
        /// The image or exec path, as the step names it.
        function: String,
        /// The chain's not-found answer.
        #[source]
        source: EvalError,
    },
    /// The runtime could not run the function (denied, timeout,
    /// transport…), or its output was unusable; the message is the
    /// runtime's own.
    #[error("{0}")]
    Runtime(#[source] EvalError),
    /// The step's image could not be resolved: a bad image reference, a
    /// tag constraint no listed tag satisfies, or the registry's tag list
    /// could not be read (the message names the repository).
    #[error("{0}")]
    Image(String),
}

/// What went wrong, without the package wrapper.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum RenderErrorKind {
    /// The root Kptfile's pipeline is invalid (render did not start).
    InvalidRootKptfile(PipelineInvalid),
    /// A subpackage's Kptfile pipeline is invalid.
    InvalidKptfile(PipelineInvalid),
    /// A `configPath` does not name one of the package's own resources.
    MissingConfig(ValidateError),
    /// A package without pipeline holds a non-KRM object (`<file>: <reason>`).
    NonKrm(String),
    /// A pipeline step failed.
    Step(StepError),
    /// A package-path or tree inconsistency (e.g. an object claiming a
    /// package outside the root).
    Package(String),
}

/// A failed render: the package where it failed and why.
///
/// [`std::error::Error::source`] is the failing step's [`StepError`] or the
/// Kptfile error behind it, so a caller can walk down to the
/// [`EvalError`] a runtime returned.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RenderError {
    /// Path of the failing package relative to the root ("" = root).
    pub package: String,
    /// The cause.
    pub kind: RenderErrorKind,
    /// The render ran breadth-first (`kpt.dev/bfs-rendering`), which changes the wording.
    pub bfs: bool,
}

impl RenderError {
    /// The package as kpt displays it in errors: `.` or `./<path>`.
    pub fn display_package(&self) -> String {
        display_package(&self.package)
    }

    /// True when the failure is a function's non-zero exit.
    pub fn is_function_failure(&self) -> bool {
        matches!(
            self.kind,
            RenderErrorKind::Step(StepError::FunctionFailed { .. })
        )
    }
}

/// `.` for the root, `./<path>` for a subpackage.
pub fn display_package(path: &str) -> String {
    if path.is_empty() {
        ".".to_string()
    } else {
        format!("./{path}")
    }
}

impl fmt::Display for RenderError {
    /// kpt's wording; see the module documentation.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pkg = self.display_package();
        if let RenderErrorKind::InvalidRootKptfile(e) = &self.kind {
            return write!(f, "fn.render: pkg .:\n\tpkg.read: {e}");
        }
        let (outer, inner) = if self.bfs {
            let inner = if self.package.is_empty() {
                String::new()
            } else {
                format!("pkg {pkg}: ")
            };
            (".".to_string(), inner)
        } else {
            (pkg, String::new())
        };
        write!(f, "pkg.render: pkg {outer}")?;
        match &self.kind {
            RenderErrorKind::InvalidRootKptfile(_) => unreachable!("handled above"),
            RenderErrorKind::InvalidKptfile(e) => write!(f, ":\n\tpkg.read: {inner}{e}"),
            RenderErrorKind::MissingConfig(e) => write!(f, ": {inner}{e}"),
            RenderErrorKind::NonKrm(e) => write!(
                f,
                ": {inner}input resource list must contain only KRM resources: {e}"
            ),
            RenderErrorKind::Step(e) => write!(f, ":\n\tpipeline.run: {inner}{e}"),
            RenderErrorKind::Package(e) => write!(f, ": {inner}{e}"),
        }
    }
}

impl std::error::Error for RenderError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            RenderErrorKind::InvalidRootKptfile(e) | RenderErrorKind::InvalidKptfile(e) => Some(e),
            RenderErrorKind::MissingConfig(e) => Some(e),
            RenderErrorKind::Step(e) => Some(e),
            RenderErrorKind::NonKrm(_) | RenderErrorKind::Package(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(package: &str, bfs: bool, kind: RenderErrorKind) -> String {
        RenderError {
            package: package.into(),
            kind,
            bfs,
        }
        .to_string()
    }

    #[test]
    fn wording_matches_kpt_fixtures() {
        assert_eq!(
            err(
                "db",
                false,
                RenderErrorKind::Step(StepError::FunctionFailed { exit_code: 1 })
            ),
            "pkg.render: pkg ./db:\n\tpipeline.run: already handled error"
        );
        assert_eq!(
            err(
                "subpkg",
                true,
                RenderErrorKind::Step(StepError::FunctionFailed { exit_code: 1 })
            ),
            "pkg.render: pkg .:\n\tpipeline.run: pkg ./subpkg: already handled error"
        );
        assert_eq!(
            err(
                "",
                false,
                RenderErrorKind::Step(StepError::Duplicate {
                    path: "resources.yaml".into(),
                    index: "0".into()
                })
            ),
            "pkg.render: pkg .:\n\tpipeline.run: resource at path \"resources.yaml\" and index \"0\" already exists"
        );
        assert_eq!(
            err(
                "",
                false,
                RenderErrorKind::NonKrm("non-krm.yaml: resource must have `apiVersion`".into())
            ),
            "pkg.render: pkg .: input resource list must contain only KRM resources: non-krm.yaml: resource must have `apiVersion`"
        );
        assert_eq!(
            err("", true, RenderErrorKind::Step(StepError::ExecNotAllowed)),
            "pkg.render: pkg .:\n\tpipeline.run: must run with `--allow-exec` option to allow running function binaries"
        );
    }
}
