//! The function admission policy at the edges: the policy file (re-read
//! when it changes, no restart) and the wrappers that check every call
//! before anything runs — [`AdmittedEvaluator`] for `serve` and `eval`
//! (every runtime behind it: exec, pod), [`AdmittedRuntime`] for `render`
//! (every `image:` step, builtins included, by image name).
//!
//! The rules and their matching are [`crate::domain::admission`]. A denied
//! call is [`EvalError::Denied`] (gRPC `PERMISSION_DENIED`), logged at info
//! and counted in `krm_fn_runner_admission_denials_total{rule}`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use async_trait::async_trait;

use crate::adapters::telemetry::count_admission_denial;
use crate::domain::admission::{AdmissionPolicy, Decision};
use crate::domain::evaluation::{EvalError, EvaluationRequest, EvaluationResponse};
use crate::ports::{
    FunctionCall, FunctionEvaluator, FunctionOutput, FunctionRuntime, FunctionTarget,
};

/// What identifies one version of the file: modification time, size and
/// inode (a ConfigMap update swaps a symlink to a new file, a new inode).
type Stamp = (Option<SystemTime>, u64, u64);

fn stamp(path: &Path) -> std::io::Result<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path)?;
    Ok((m.modified().ok(), m.len(), m.ino()))
}

#[derive(Debug)]
struct Loaded {
    stamp: Option<Stamp>,
    policy: Arc<AdmissionPolicy>,
}

/// The admission policy of a runner: none (every image allowed) or a policy
/// file, checked for changes on every call (one `stat`) and re-read when
/// it changed. A change that does not parse, or a file that disappeared,
/// keeps the last good policy and logs an error naming the file; the
/// service goes on.
#[derive(Debug)]
pub struct Admission {
    path: Option<PathBuf>,
    image_prefix: String,
    loaded: Mutex<Loaded>,
}

impl Admission {
    /// No policy: every image is allowed.
    pub fn allow_all() -> Self {
        Self {
            path: None,
            image_prefix: String::new(),
            loaded: Mutex::new(Loaded {
                stamp: None,
                policy: Arc::new(AdmissionPolicy::allow_all()),
            }),
        }
    }

    /// The policy in `path`; short image names are judged after kpt's
    /// short-name rule with `image_prefix` (the runner's
    /// `--default-image-prefix`, render's `--image-prefix`).
    ///
    /// Errors: the file cannot be read or is not a valid policy (the message
    /// names the file and the problem).
    pub fn from_file(path: &Path, image_prefix: &str) -> Result<Self, String> {
        let (stamp, policy) = read(path)?;
        Ok(Self {
            path: Some(path.to_path_buf()),
            image_prefix: image_prefix.to_string(),
            loaded: Mutex::new(Loaded {
                stamp: Some(stamp),
                policy: Arc::new(policy),
            }),
        })
    }

    /// `from_file` when `path` is given, else [`Admission::allow_all`].
    ///
    /// Errors: as [`Admission::from_file`].
    pub fn from_option(path: Option<&Path>, image_prefix: &str) -> Result<Self, String> {
        match path {
            Some(p) => Self::from_file(p, image_prefix),
            None => Ok(Self::allow_all()),
        }
    }

    /// The policy now in force (re-read first if the file changed).
    pub fn current(&self) -> Arc<AdmissionPolicy> {
        let now = self.path.as_deref().map(|p| stamp(p).ok());
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        let (Some(path), Some(now)) = (&self.path, now) else {
            return loaded.policy.clone();
        };
        if now != loaded.stamp {
            match read(path) {
                Ok((s, policy)) => {
                    tracing::info!(file = %path.display(), rules = policy.rules().len(), "admission policy reloaded");
                    loaded.stamp = Some(s);
                    loaded.policy = Arc::new(policy);
                }
                Err(e) => {
                    tracing::error!("{e}; the previous admission policy stays in force");
                    loaded.stamp = now;
                }
            }
        }
        loaded.policy.clone()
    }

    /// Checks `image`: `Ok` to run it, else [`EvalError::Denied`] naming the
    /// rule (logged and counted).
    pub fn check(&self, image: &str) -> Result<(), EvalError> {
        match self.current().decide(image, &self.image_prefix) {
            Decision::Allow { .. } => Ok(()),
            Decision::Deny { rule, reason } => {
                tracing::info!(image = %image, rule = %rule, "function denied by the admission policy");
                count_admission_denial(&rule);
                Err(EvalError::Denied {
                    image: image.to_string(),
                    rule,
                    reason,
                })
            }
        }
    }
}

fn read(path: &Path) -> Result<(Stamp, AdmissionPolicy), String> {
    let fail = |e: String| format!("admission policy {}: {e}", path.display());
    let s = stamp(path).map_err(|e| fail(format!("cannot read it: {e}")))?;
    let text = std::fs::read_to_string(path).map_err(|e| fail(format!("cannot read it: {e}")))?;
    let policy = AdmissionPolicy::parse(&text).map_err(fail)?;
    Ok((s, policy))
}

/// A [`FunctionEvaluator`] that asks the admission policy before passing a
/// call on; a denied call never reaches `inner`.
pub struct AdmittedEvaluator {
    inner: Arc<dyn FunctionEvaluator>,
    admission: Arc<Admission>,
}

impl AdmittedEvaluator {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn FunctionEvaluator>, admission: Arc<Admission>) -> Self {
        Self { inner, admission }
    }
}

#[async_trait]
impl FunctionEvaluator for AdmittedEvaluator {
    /// [`EvalError::Denied`] when the policy refuses `request.image`, else `inner`'s answer.
    async fn evaluate(&self, request: EvaluationRequest) -> Result<EvaluationResponse, EvalError> {
        self.admission.check(&request.image)?;
        self.inner.evaluate(request).await
    }
}

/// A [`FunctionRuntime`] that asks the admission policy about every
/// `image:` step (builtins included, by their image name) before passing it
/// on; `exec:` steps are not images and are governed by `--allow-exec`.
pub struct AdmittedRuntime<R> {
    inner: R,
    admission: Arc<Admission>,
}

impl<R> AdmittedRuntime<R> {
    /// Wraps `inner`.
    pub fn new(inner: R, admission: Arc<Admission>) -> Self {
        Self { inner, admission }
    }
}

#[async_trait]
impl<R: FunctionRuntime> FunctionRuntime for AdmittedRuntime<R> {
    /// [`EvalError::Denied`] when the policy refuses the image, else `inner`'s answer.
    async fn run(&self, call: FunctionCall) -> Result<FunctionOutput, EvalError> {
        if let FunctionTarget::Image(image) = &call.target {
            self.admission.check(image)?;
        }
        self.inner.run(call).await
    }

    crate::ports::forward_capabilities!(inner);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::MockFunctionEvaluator;

    #[tokio::test]
    async fn denied_calls_never_reach_the_evaluator_and_edits_apply_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.yaml");
        std::fs::write(
            &path,
            "rules:\n- {name: no-x, action: deny, repository: x}\n",
        )
        .unwrap();
        let admission = Arc::new(Admission::from_file(&path, "example.com").unwrap());
        let mut inner = MockFunctionEvaluator::new();
        inner.expect_evaluate().times(1).returning(|_| {
            Ok(EvaluationResponse {
                resource_list: Default::default(),
                log: Default::default(),
            })
        });
        let ev = AdmittedEvaluator::new(Arc::new(inner), admission.clone());
        let denied = ev
            .evaluate(EvaluationRequest::new("example.com/x:v1", Vec::<u8>::new()))
            .await
            .unwrap_err();
        assert!(
            matches!(&denied, EvalError::Denied { rule, .. } if rule == "no-x"),
            "{denied:?}"
        );
        // A broken edit keeps the old policy; a good one applies on the next call.
        std::fs::write(&path, "rules: [oops\n").unwrap();
        assert!(admission.check("example.com/x:v1").is_err());
        let tmp = dir.path().join("new.yaml");
        std::fs::write(&tmp, "rules: []\n").unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        ev.evaluate(EvaluationRequest::new("example.com/x:v1", Vec::<u8>::new()))
            .await
            .unwrap();
    }

    #[test]
    fn a_bad_file_at_start_names_the_file() {
        let e = Admission::from_file(Path::new("/nonexistent/policy.yaml"), "").unwrap_err();
        assert!(e.contains("/nonexistent/policy.yaml"), "{e}");
    }
}
