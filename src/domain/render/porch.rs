//! The texts Porch shows API users when a render fails
//! (`porch-function-runner.md` §8.3, §8.4), so a Porch-compatible caller can
//! report render failures in Porch's words.

/// PackageRevision annotation that makes Porch push a draft even when render fails.
pub const PUSH_ON_RENDER_FAILURE_ANNOTATION: &str = "porch.kpt.dev/push-on-render-failure";

/// Name of the package-context ConfigMap (`kptfile.kpt.dev`).
pub const PACKAGE_CONTEXT_NAME: &str = "kptfile.kpt.dev";
/// File the package context is generated into, next to the root Kptfile.
pub const PACKAGE_CONTEXT_FILE: &str = "package-context.yaml";

/// Kptfile-patch path (update of a draft PackageRevision):
/// `Error rendering package in kpt function pipeline. Package NOT pushed to remote. Fix locally (until 'kpt fn render' succeeds) and retry. Details: <err>`.
pub fn kptfile_patch_failure(err: &str) -> String {
    format!(
        "Error rendering package in kpt function pipeline. Package NOT pushed to remote. Fix locally (until 'kpt fn render' succeeds) and retry. Details: {err}"
    )
}

/// Resources-update path without push-on-failure (lower-case `error`).
pub fn resources_update_failure(err: &str) -> String {
    format!(
        "error rendering package in kpt function pipeline. Package NOT pushed to remote. Fix locally (until 'kpt fn render' succeeds) and retry. Details: {err}"
    )
}

/// With [`PUSH_ON_RENDER_FAILURE_ANNOTATION`] `"true"`: the draft was pushed anyway.
pub fn pushed_despite_failure(err: &str) -> String {
    format!(
        "error rendering package in kpt function pipeline. Package pushed to remote despite render failure. Details: {err}"
    )
}

/// Persisting resources after a failed render failed too.
pub fn persist_after_failure(persist_err: &str, render_err: &str) -> String {
    format!("failed to persist resources after render failure: {persist_err}: {render_err}")
}

/// A function failed inside Porch's evaluation (`func eval "<image>" failed: <err>`).
pub fn func_eval_failed(image: &str, err: &str) -> String {
    format!("func eval {image:?} failed: {err}")
}

/// The package-context generator failed (`failed to evaluate function "builtins/gen-pkg-context": <err>`).
pub fn package_context_failed(err: &str) -> String {
    format!("failed to evaluate function \"builtins/gen-pkg-context\": {err}")
}

/// Clone wraps a package-context failure as `failed to generate deployment context: <err>`.
pub fn deployment_context_failed(err: &str) -> String {
    format!("failed to generate deployment context: {err}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn porch_wording() {
        assert!(kptfile_patch_failure("x").starts_with("Error rendering package"));
        assert!(resources_update_failure("x").ends_with("Details: x"));
        assert!(pushed_despite_failure("x").contains("pushed to remote despite render failure"));
        assert_eq!(
            persist_after_failure("a", "b"),
            "failed to persist resources after render failure: a: b"
        );
        assert_eq!(func_eval_failed("img", "e"), "func eval \"img\" failed: e");
        assert_eq!(
            deployment_context_failed(&package_context_failed("e")),
            "failed to generate deployment context: failed to evaluate function \"builtins/gen-pkg-context\": e"
        );
    }
}
