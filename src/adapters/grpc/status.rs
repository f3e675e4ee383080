//! The one place where evaluation errors become gRPC statuses (and back).
//!
//! | EvalError | gRPC code | Porch |
//! |---|---|---|
//! | NotFound | `NOT_FOUND` | same (`function "<image>" not found`) |
//! | FunctionFailed | `INTERNAL` | same code; the message also carries the structured results, which Porch's exec evaluator drops |
//! | Timeout | `DEADLINE_EXCEEDED` | same |
//! | Cancelled | `CANCELLED` | same |
//! | InvalidInput | `INVALID_ARGUMENT` | Porch passes bad input to the function and reports `INTERNAL` |
//! | TooLarge | `RESOURCE_EXHAUSTED` | same code for requests; oversize output is `INTERNAL` there |
//! | Exhausted | `RESOURCE_EXHAUSTED` | Porch queues without bound (spec §10 item 33) |
//! | NotReadyInTime | `DEADLINE_EXCEEDED` | same code for a pod that is not ready in time |
//! | Unavailable | `UNAVAILABLE` | Porch crashes with no runtime enabled |
//! | Internal | `INTERNAL` | same |

use tonic::{Code, Status};

use crate::domain::evaluation::{EvalError, FunctionFailure};
use crate::domain::resource_list::format_results;

/// Longest `grpc-message` sent, in bytes **as sent**: the message travels
/// percent-encoded in an HTTP/2 trailer, where every byte outside printable
/// ASCII (and space, `%`, `"` and a few more) takes three bytes, and clients
/// cap metadata (grpc-core's soft limit is 8 KiB; over it, C-core and Python
/// clients report `RESOURCE_EXHAUSTED` instead of the status). So the cap
/// is applied to the encoded length, and a function's stderr is cut to fit;
/// results come first so they survive.
pub const MAX_STATUS_MESSAGE_BYTES: usize = 6 * 1024;

/// Length of `text` once percent-encoded for `grpc-message` (the gRPC
/// HTTP/2 spec's rule, as tonic applies it: controls, non-ASCII and
/// ` "#%<>`?{}` become `%XX`).
pub fn encoded_len(text: &str) -> usize {
    text.bytes()
        .map(|b| {
            let escaped = !(0x20..0x7f).contains(&b) || b" \"#%<>`?{}".contains(&b);
            if escaped { 3 } else { 1 }
        })
        .sum()
}

/// Maps an evaluation error to the status the runner answers with.
pub fn to_status(err: &EvalError) -> Status {
    let code = match err {
        EvalError::NotFound { .. } => Code::NotFound,
        EvalError::FunctionFailed(_)
        | EvalError::Internal(_)
        | EvalError::Io { .. }
        | EvalError::BadOutput { .. } => Code::Internal,
        EvalError::Timeout { .. } => Code::DeadlineExceeded,
        EvalError::Cancelled { .. } => Code::Cancelled,
        EvalError::InvalidInput(_) => Code::InvalidArgument,
        EvalError::TooLarge { .. } | EvalError::Exhausted(_) => Code::ResourceExhausted,
        EvalError::NotReadyInTime(_) => Code::DeadlineExceeded,
        EvalError::Unavailable(_) => Code::Unavailable,
        EvalError::Denied { .. } => Code::PermissionDenied,
    };
    let message = match err {
        EvalError::FunctionFailed(f) => failure_message(f),
        other => truncate(other.to_string(), MAX_STATUS_MESSAGE_BYTES),
    };
    Status::new(code, message)
}

/// Porch's wording, `Failed to execute function "<image>": <exit> (<stderr>)`,
/// with the structured results appended; stderr is shortened first when the
/// whole would exceed [`MAX_STATUS_MESSAGE_BYTES`].
fn failure_message(f: &FunctionFailure) -> String {
    let results = if f.results.is_empty() {
        String::new()
    } else {
        format!("\nstructured results:\n{}", format_results(&f.results))
    };
    let results = truncate(results, MAX_STATUS_MESSAGE_BYTES / 2);
    let hint = f
        .sandbox_hint
        .as_ref()
        .map(|h| truncate(format!("\n{h}"), MAX_STATUS_MESSAGE_BYTES / 4))
        .unwrap_or_default();
    let head = truncate(
        format!("Failed to execute function {:?}: {} (", f.image, f.exit),
        MAX_STATUS_MESSAGE_BYTES / 4,
    );
    let room = MAX_STATUS_MESSAGE_BYTES
        .saturating_sub(encoded_len(&head) + encoded_len(&hint) + encoded_len(&results) + 1);
    let stderr = truncate(
        String::from_utf8_lossy(&f.stderr).trim_end().to_string(),
        room,
    );
    format!("{head}{stderr}){hint}{results}")
}

/// Cuts `s` so that its encoded length ([`encoded_len`]) is at most `max`,
/// ending with a note of how many bytes were cut.
fn truncate(mut s: String, max: usize) -> String {
    if encoded_len(&s) <= max {
        return s;
    }
    // The note's own length depends on the count; the count's digits are
    // bounded by the input's.
    let note_room = encoded_len(&format!(" … [{} bytes cut; see the runner's log]", s.len()));
    let budget = max.saturating_sub(note_room);
    let mut used = 0;
    let mut cut = 0;
    for (i, c) in s.char_indices() {
        let mut buf = [0u8; 4];
        let w = encoded_len(c.encode_utf8(&mut buf));
        if used + w > budget {
            break;
        }
        used += w;
        cut = i + c.len_utf8();
    }
    let note = format!(" … [{} bytes cut; see the runner's log]", s.len() - cut);
    s.truncate(cut);
    s.push_str(&note);
    s
}

/// Who sent a status that [`from_status`] reads back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusSource<'a> {
    /// A function runner answering `EvaluateFunction` (this crate's server
    /// or Porch's): its codes mean what [`to_status`] gives them.
    Runner,
    /// The wrapper server in function pod `pod` (the pod evaluator's call):
    /// only a timeout, a cancellation, bad input and exhaustion carry a
    /// meaning there; a lost connection means the pod is gone
    /// ([`connection_lost`]); anything else is an internal error naming the
    /// code, as Porch's pod evaluator words it.
    WrapperPod(&'a str),
}

/// True when a call got no answer from its peer: `UNAVAILABLE`, or tonic's
/// `UNKNOWN` with the transport error as its source (a connection that
/// broke mid-call; a status the peer sent has no source).
pub fn connection_lost(status: &Status) -> bool {
    status.code() == Code::Unavailable
        || (status.code() == Code::Unknown && std::error::Error::source(status).is_some())
}

/// Maps a status received from `source` back to an evaluation error for
/// `image`; `timeout` is the call's time limit, reported by a timeout.
pub fn from_status(
    source: StatusSource<'_>,
    image: &str,
    status: &Status,
    timeout: Option<std::time::Duration>,
) -> EvalError {
    let message = status.message().to_string();
    if let StatusSource::WrapperPod(pod) = source {
        let context = format!("unable to evaluate {image} with pod evaluator");
        if connection_lost(status) {
            return EvalError::Unavailable(format!(
                "{context}: function pod {pod} is unavailable ({message}); the pod was evicted from this runner and the next call gets another pod"
            ));
        }
        match status.code() {
            Code::DeadlineExceeded | Code::Cancelled | Code::InvalidArgument => {}
            Code::ResourceExhausted => {
                return EvalError::Exhausted(format!("{context}: {message}"));
            }
            code => {
                return EvalError::Internal(format!(
                    "{context}: rpc error: code = {code:?} desc = {message}"
                ));
            }
        }
    }
    match status.code() {
        Code::NotFound if message == EvalError::not_found(image).to_string() => {
            EvalError::not_found(image)
        }
        Code::NotFound => EvalError::NotFound {
            image: image.to_string(),
            detail: Some(format!("the function runner answered: {message}")),
        },
        Code::DeadlineExceeded => EvalError::Timeout {
            image: image.to_string(),
            after: timeout.unwrap_or_default(),
        },
        Code::Cancelled => EvalError::Cancelled {
            image: image.to_string(),
        },
        Code::InvalidArgument => EvalError::InvalidInput(
            message
                .strip_prefix("invalid request: ")
                .unwrap_or(&message)
                .to_string(),
        ),
        Code::Unavailable => {
            EvalError::Unavailable(format!("the function runner is unavailable: {message}"))
        }
        Code::ResourceExhausted if !message.contains("--max-request-body-size") => {
            EvalError::Exhausted(message)
        }
        Code::PermissionDenied => EvalError::Denied {
            image: image.to_string(),
            // Our runner names the rule as `admission rule "<name>"`.
            rule: message
                .split_once("admission rule \"")
                .and_then(|(_, rest)| rest.split_once('"'))
                .map(|(rule, _)| rule.to_string())
                .unwrap_or_default(),
            reason: format!("the function runner refused it: {message}"),
        },
        code => EvalError::Internal(format!("the function runner answered {code:?}: {message}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::evaluation::ExitReason;
    use bytes::Bytes;
    use std::time::Duration;

    #[test]
    fn failed_function_keeps_results_when_stderr_is_huge() {
        let stdout = Bytes::from_static(
            b"kind: ResourceList\nitems: []\nresults:\n- message: replicas must be > 0\n  severity: error\n",
        );
        let stderr = Bytes::from(vec![b'x'; 100_000]);
        let f = FunctionFailure::new("img", ExitReason::Code(1), stdout, stderr);
        let status = to_status(&EvalError::FunctionFailed(Box::new(f)));
        assert_eq!(status.code(), Code::Internal);
        assert!(status.message().len() <= MAX_STATUS_MESSAGE_BYTES);
        assert!(
            status
                .message()
                .starts_with("Failed to execute function \"img\": exit status 1 (xxx")
        );
        assert!(status.message().ends_with("[error]: replicas must be > 0"));
        assert!(status.message().contains("bytes cut"));
    }

    #[test]
    fn the_cap_holds_after_encoding() {
        let stderr = Bytes::from("é ünïcödé ".repeat(20_000));
        let f = FunctionFailure::new("img", ExitReason::Code(1), Bytes::new(), stderr);
        let status = to_status(&EvalError::FunctionFailed(Box::new(f)));
        let mut headers = http::HeaderMap::new();
        status.add_header(&mut headers).unwrap();
        let sent = headers["grpc-message"].len();
        assert!(sent <= MAX_STATUS_MESSAGE_BYTES, "{sent} bytes sent");
        assert!(
            sent > MAX_STATUS_MESSAGE_BYTES - 64,
            "{sent} bytes: cut too much"
        );
        assert_eq!(encoded_len(status.message()), sent);
        let long = EvalError::InvalidInput("ü".repeat(50_000));
        assert!(encoded_len(to_status(&long).message()) <= MAX_STATUS_MESSAGE_BYTES);
    }

    #[test]
    fn codes() {
        assert_eq!(to_status(&EvalError::not_found("a")).code(), Code::NotFound);
        assert_eq!(
            to_status(&EvalError::InvalidInput("x".into())).code(),
            Code::InvalidArgument
        );
        assert_eq!(
            to_status(&EvalError::Unavailable("x".into())).code(),
            Code::Unavailable
        );
        let back = from_status(
            StatusSource::Runner,
            "a",
            &to_status(&EvalError::not_found("a")),
            None,
        );
        assert!(back.is_not_found());
    }

    #[test]
    fn denials_are_permission_denied_and_keep_the_rule_across_the_wire() {
        let denied = EvalError::Denied {
            image: "a".into(),
            rule: "no-a".into(),
            reason: "function \"a\" is denied by admission rule \"no-a\"".into(),
        };
        let status = to_status(&denied);
        assert_eq!(status.code(), Code::PermissionDenied);
        let EvalError::Denied { rule, reason, .. } =
            from_status(StatusSource::Runner, "a", &status, None)
        else {
            panic!("a denial comes back as a denial")
        };
        assert_eq!(rule, "no-a");
        assert!(
            reason.contains("denied by admission rule \"no-a\""),
            "{reason}"
        );
    }

    #[test]
    fn a_wrapper_pods_status_reads_as_the_pod_evaluators() {
        let pod = StatusSource::WrapperPod("fn-pod-1");
        let read = |code, message: &str| {
            from_status(
                pod,
                "img",
                &Status::new(code, message),
                Some(Duration::from_secs(3)),
            )
        };
        let gone = read(Code::Unavailable, "connection refused");
        assert!(matches!(gone, EvalError::Unavailable(_)), "{gone:?}");
        assert!(
            gone.to_string()
                .contains("function pod fn-pod-1 is unavailable")
        );
        assert!(connection_lost(&Status::new(Code::Unavailable, "")));
        assert!(!connection_lost(&Status::new(
            Code::Unknown,
            "sent by the peer"
        )));
        assert!(matches!(
            read(Code::DeadlineExceeded, ""),
            EvalError::Timeout { after, .. } if after == Duration::from_secs(3)
        ));
        let full = read(Code::ResourceExhausted, "too big");
        assert_eq!(
            full.to_string(),
            "unable to evaluate img with pod evaluator: too big"
        );
        // No runner meaning from a pod: a NOT_FOUND does not fall through
        // to the next evaluator.
        let odd = read(Code::NotFound, "no such thing");
        assert!(matches!(odd, EvalError::Internal(_)), "{odd:?}");
        assert!(odd.to_string().contains("rpc error: code = NotFound"));
        let runner = from_status(
            StatusSource::Runner,
            "img",
            &Status::new(Code::NotFound, "x"),
            None,
        );
        assert!(runner.is_not_found());
    }
}
