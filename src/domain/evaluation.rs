//! One function evaluation: request, response and the error type.
//!
//! [`EvalError`] is the single error type every evaluator returns. It tells
//! apart the cases a caller must treat differently: not found (the chain falls
//! through to the next evaluator), the function itself failed (exit code,
//! stderr and structured results kept), timeout/cancellation, invalid input
//! and infrastructure failure. The gRPC adapter maps it to status codes in one
//! place (`adapters::grpc::status`).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::resource_list::{ResourceList, ResourceListError, ResultItem, format_results};

/// Porch's default cap on a ResourceList message, in bytes (6 MiB: the
/// function runner's `--max-request-body-size`); the exec runtimes cap each
/// function's stdout and stderr at it too.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 6 * 1024 * 1024;

/// A request to run one function.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct EvaluationRequest {
    /// The image as the caller sent it (Porch sends it already resolved).
    pub image: String,
    /// The Kptfile step's `tag` as the caller sent it (Porch's
    /// `EvaluateFunctionRequest.Tag`, field 3): a literal tag or a semver
    /// constraint that picks the version to run and wins over any tag in
    /// [`image`](Self::image). `None` when the caller sent none (Porch
    /// v1.5.3 never does), and for an empty string.
    pub tag: Option<String>,
    /// The input ResourceList, opaque bytes (YAML or JSON).
    pub resource_list: Bytes,
    /// Time left for this evaluation, if the caller set a deadline. The
    /// evaluator stops the function when it runs out and returns
    /// [`EvalError::Timeout`].
    pub timeout: Option<Duration>,
}

impl EvaluationRequest {
    /// A request without a deadline.
    pub fn new(image: impl Into<String>, resource_list: impl Into<Bytes>) -> Self {
        Self {
            image: image.into(),
            tag: None,
            resource_list: resource_list.into(),
            timeout: None,
        }
    }

    /// The same request with the step's `tag` set (an empty `tag` clears it).
    pub fn with_tag(mut self, tag: impl Into<String>) -> Self {
        let tag = tag.into();
        self.tag = (!tag.is_empty()).then_some(tag);
        self
    }
}

/// The result of a successful evaluation.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct EvaluationResponse {
    /// The function's output ResourceList (its stdout, verbatim).
    pub resource_list: Bytes,
    /// The function's stderr (may be empty).
    pub log: Bytes,
}

/// How a function process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitReason {
    /// Exited with this code.
    Code(i32),
    /// Killed by this signal number.
    Signal(i32),
}

impl ExitReason {
    /// The exit code kpt records: the code, or 128+signal (shell convention).
    pub fn exit_code(self) -> i32 {
        match self {
            ExitReason::Code(c) => c,
            ExitReason::Signal(s) => 128 + s,
        }
    }
}

impl fmt::Display for ExitReason {
    /// Go's `os/exec` wording, which Porch's messages carry: `exit status 1`, `signal: 9`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitReason::Code(c) => write!(f, "exit status {c}"),
            ExitReason::Signal(s) => write!(f, "signal: {s}"),
        }
    }
}

/// A function that ran and failed.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionFailure {
    /// The image that was evaluated.
    pub image: String,
    /// How the process ended.
    pub exit: ExitReason,
    /// The function's stderr.
    pub stderr: Bytes,
    /// The function's stdout: the output ResourceList, when it wrote one.
    pub output: Bytes,
    /// Structured results read from the output, when it parsed.
    pub results: Vec<ResultItem>,
    /// The sandbox's line for a function that failed with any layer on:
    /// the layers, what the filesystem layer allowed, and what relaxes
    /// each (`SandboxGrant::refusal_hint`); `None` for a function that ran
    /// unconfined or in process.
    pub sandbox_hint: Option<String>,
}

impl FunctionFailure {
    /// Builds a failure, collecting structured results from `output` when it
    /// parses as a ResourceList (functions write their results there and then
    /// exit non-zero, so stdout is read even on failure, as kpt does).
    pub fn new(image: &str, exit: ExitReason, stdout: Bytes, stderr: Bytes) -> Self {
        let results = ResourceList::parse(&stdout)
            .map(|rl| rl.results)
            .unwrap_or_default();
        Self {
            image: image.to_string(),
            exit,
            stderr,
            output: stdout,
            results,
            sandbox_hint: None,
        }
    }

    /// The same failure with the sandbox's line `hint` (see
    /// [`FunctionFailure::sandbox_hint`]).
    pub fn with_sandbox_hint(mut self, hint: Option<String>) -> Self {
        self.sandbox_hint = hint;
        self
    }
}

impl fmt::Display for FunctionFailure {
    /// `Failed to execute function "<image>": <exit> (<stderr>)` as Porch's
    /// exec evaluator says it, followed by the structured results, if any, in
    /// Porch's wrapper-server rendering.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let stderr = String::from_utf8_lossy(&self.stderr);
        write!(
            f,
            "Failed to execute function {:?}: {} ({})",
            self.image,
            self.exit,
            stderr.trim_end()
        )?;
        if let Some(hint) = &self.sandbox_hint {
            write!(f, "\n{hint}")?;
        }
        if !self.results.is_empty() {
            write!(
                f,
                "\nstructured results:\n{}",
                format_results(&self.results)
            )?;
        }
        Ok(())
    }
}

/// Which payload went over the size limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    /// The request's ResourceList.
    Request,
    /// The function's stdout.
    Output,
    /// The function's stderr.
    Log,
}

impl fmt::Display for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Payload::Request => "the request",
            Payload::Output => "the function's output (stdout)",
            Payload::Log => "the function's log (stderr)",
        })
    }
}

/// Every way an evaluation can fail.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum EvalError {
    /// This evaluator does not serve the image; the chain tries the next one.
    #[error("function {image:?} not found{}", detail.as_ref().map(|d| format!(": {d}")).unwrap_or_default())]
    NotFound {
        /// The image asked for.
        image: String,
        /// Why, when there is more to say than "not configured".
        detail: Option<String>,
    },
    /// The function ran and failed.
    #[error("{0}")]
    FunctionFailed(Box<FunctionFailure>),
    /// The deadline passed; the function was stopped.
    #[error("function {image:?} did not finish within {}; it was stopped", humanize(*.after))]
    Timeout {
        /// The image.
        image: String,
        /// The time it was given.
        after: Duration,
    },
    /// The caller went away; the function was stopped.
    #[error("evaluation of function {image:?} was cancelled")]
    Cancelled {
        /// The image.
        image: String,
    },
    /// The request is not something a function can be run on.
    #[error("invalid request: {0}")]
    InvalidInput(String),
    /// A payload exceeded the configured message size.
    #[error("{payload} is {} bytes, over the limit of {limit} bytes; raise --max-request-body-size on the runner (and the matching limit on its clients) to allow larger ResourceLists", size.map(|s| s.to_string()).unwrap_or_else(|| format!("more than {limit}")))]
    TooLarge {
        /// What was too large.
        payload: Payload,
        /// Its size in bytes, when known (streamed output is cut at the limit).
        size: Option<usize>,
        /// The limit in bytes.
        limit: usize,
    },
    /// The runner has no capacity for the function now (every pod the
    /// function may have carries its maximum load); retry later.
    #[error("{0}")]
    Exhausted(String),
    /// The infrastructure did not get ready in time (a function pod did not
    /// start before its deadline); not the function's own run time.
    #[error("{0}")]
    NotReadyInTime(String),
    /// The function admission policy refuses the image; nothing ran.
    #[error("{reason}")]
    Denied {
        /// The image asked for.
        image: String,
        /// The deciding rule's name.
        rule: String,
        /// The message, naming the image and the rule.
        reason: String,
    },
    /// The runner cannot serve now (no runtime enabled, pod platform down…); retrying may help.
    #[error("{0}")]
    Unavailable(String),
    /// The runner failed for a reason that is not the function's fault.
    #[error("{0}")]
    Internal(String),
    /// The runner could not start the function's process or talk to it
    /// (missing or non-executable program, a broken pipe): not the
    /// function's fault. The OS error is the source.
    #[error("{context}: {source}")]
    Io {
        /// What the runner was doing, naming the function.
        context: String,
        /// The OS error.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The function exited 0 but its stdout is not a ResourceList. The
    /// decoder's error is the source.
    #[error("{context}: {source}")]
    BadOutput {
        /// Which function, and its stderr when there is any.
        context: String,
        /// Why the output is not a ResourceList.
        #[source]
        source: ResourceListError,
    },
}

impl EvalError {
    /// True for [`EvalError::NotFound`], the only error the chain falls through on.
    pub fn is_not_found(&self) -> bool {
        matches!(self, EvalError::NotFound { .. })
    }

    /// A not-found error without detail.
    pub fn not_found(image: &str) -> Self {
        EvalError::NotFound {
            image: image.to_string(),
            detail: None,
        }
    }
}

/// Longest text logged whole by [`log_excerpt`], in bytes.
pub const LOG_EXCERPT_BYTES: usize = 2048;

/// `text` for a log line: whole when it has at most [`LOG_EXCERPT_BYTES`]
/// bytes, else its first and last kilobyte around a note giving its size in
/// bytes, so a function's 5 MB stderr or a 100 KB image name is one short
/// line (the full text is in the reply, never in the log).
pub fn log_excerpt(text: &str) -> std::borrow::Cow<'_, str> {
    if text.len() <= LOG_EXCERPT_BYTES {
        return text.into();
    }
    let half = LOG_EXCERPT_BYTES / 2;
    let mut head = half;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - half;
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{} … [{} bytes in all; middle not logged] … {}",
        &text[..head],
        text.len(),
        &text[tail..]
    )
    .into()
}

fn humanize(d: Duration) -> String {
    format!("{:.3}s", d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_message_keeps_porch_wording_and_results() {
        let stdout = Bytes::from_static(
            b"kind: ResourceList\nitems: []\nresults:\n- message: boom\n  severity: error\n",
        );
        let f = FunctionFailure::new(
            "img",
            ExitReason::Code(1),
            stdout,
            Bytes::from_static(b"function failure\n"),
        );
        assert_eq!(f.results.len(), 1);
        assert_eq!(
            f.to_string(),
            "Failed to execute function \"img\": exit status 1 (function failure)\nstructured results:\n[error]: boom"
        );
    }

    #[test]
    fn not_found_text_matches_porch() {
        assert_eq!(
            EvalError::not_found("x").to_string(),
            "function \"x\" not found"
        );
        assert!(EvalError::not_found("x").is_not_found());
    }

    #[test]
    fn too_large_names_the_flag() {
        let e = EvalError::TooLarge {
            payload: Payload::Request,
            size: Some(10),
            limit: 5,
        };
        assert!(e.to_string().contains("--max-request-body-size"));
    }
}
