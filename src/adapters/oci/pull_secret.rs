//! Replicating the registry pull secret into the pod namespace.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::domain::registry::DockerConfig;
use crate::ports::{PlatformError, PodPlatform};

/// What [`PullSecretSync::ensure`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullSecretOutcome {
    /// The file holds the bytes last handed to the platform, recently
    /// enough: the platform was not called.
    Unchanged,
    /// The platform was asked to create or update the Secret (it leaves an
    /// identical Secret alone).
    Ensured,
}

/// Why the pull secret could not be ensured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PullSecretError {
    /// The `--registry-auth-secret-path` file cannot be read.
    #[error(
        "cannot read --registry-auth-secret-path {path}: {detail}; check that the registry auth secret is mounted there"
    )]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        detail: String,
    },
    /// The file is not a Docker config JSON; it is not replicated.
    #[error("--registry-auth-secret-path {path} is not a Docker config JSON: {detail}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// The platform refused to create or update the Secret.
    #[error("cannot create or update pull secret {name:?} in the pod namespace: {source}")]
    Platform {
        /// The Secret name (`--registry-auth-secret-name`).
        name: String,
        /// The platform's error.
        source: PlatformError,
    },
}

/// Keeps the `kubernetes.io/dockerconfigjson` Secret named
/// `--registry-auth-secret-name` in the pod namespace equal to the file at
/// `--registry-auth-secret-path`, through the [`PodPlatform`] port (Porch
/// `inspectOrCreateSecret`, spec §6.3). Function pods reference it in their
/// `imagePullSecrets`.
///
/// Porch re-reads and compares the Secret on every metadata cache miss
/// (spec §10 item 20). Here the file is read on every call, but the
/// platform is called only when the bytes differ from the last ones it
/// accepted or when `refresh` has passed since (so a Secret deleted by hand
/// comes back); the platform itself compares bytes and leaves an identical
/// Secret alone. Concurrent calls are serialised.
pub struct PullSecretSync {
    platform: Arc<dyn PodPlatform>,
    name: String,
    path: PathBuf,
    refresh: Duration,
    last: Mutex<Option<(Vec<u8>, Instant)>>,
}

impl std::fmt::Debug for PullSecretSync {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PullSecretSync")
            .field("name", &self.name)
            .field("path", &self.path)
            .field("refresh", &self.refresh)
            .finish_non_exhaustive()
    }
}

impl PullSecretSync {
    /// The default interval after which the Secret is re-ensured even when
    /// the file did not change: 5 minutes.
    pub const DEFAULT_REFRESH: Duration = Duration::from_secs(300);

    /// Syncs Secret `name` from the file at `path` through `platform`.
    pub fn new(platform: Arc<dyn PodPlatform>, name: &str, path: PathBuf) -> Self {
        Self {
            platform,
            name: name.to_string(),
            path,
            refresh: Self::DEFAULT_REFRESH,
            last: Mutex::new(None),
        }
    }

    /// Sets the re-ensure interval (see the type's documentation).
    pub fn with_refresh(mut self, refresh: Duration) -> Self {
        self.refresh = refresh;
        self
    }

    /// The Secret name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Reads the file and, if needed, creates or updates the Secret.
    ///
    /// Errors: the file is unreadable or not a Docker config JSON (nothing
    /// is sent), or the platform failed (retried on the next call).
    pub async fn ensure(&self) -> Result<PullSecretOutcome, PullSecretError> {
        let bytes = tokio::fs::read(&self.path)
            .await
            .map_err(|e| PullSecretError::Read {
                path: self.path.clone(),
                detail: e.to_string(),
            })?;
        DockerConfig::parse(&bytes).map_err(|e| PullSecretError::Invalid {
            path: self.path.clone(),
            detail: e.to_string(),
        })?;
        let mut last = self.last.lock().await;
        if let Some((prev, at)) = last.as_ref()
            && *prev == bytes
            && at.elapsed() < self.refresh
        {
            return Ok(PullSecretOutcome::Unchanged);
        }
        self.platform
            .ensure_pull_secret(&self.name, &bytes)
            .await
            .map_err(|source| PullSecretError::Platform {
                name: self.name.clone(),
                source,
            })?;
        tracing::debug!(secret = %self.name, "pull secret ensured");
        *last = Some((bytes, Instant::now()));
        Ok(PullSecretOutcome::Ensured)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::sim::{Operation, SimCluster, SimPlatform};
    use crate::domain::pod_cache::UnixTime;

    const CONFIG_A: &[u8] = br#"{"auths": {"r.example": {"auth": "dTpw"}}}"#;
    const CONFIG_B: &[u8] = br#"{"auths": {"r.example": {"auth": "dTpx"}}}"#;

    fn setup() -> (tempfile::TempDir, PathBuf, SimPlatform) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".dockerconfigjson");
        let sim = SimPlatform::new(SimCluster::new(
            "porch-fn-system",
            UnixTime::from_secs(0),
            1,
        ));
        (dir, path, sim)
    }

    fn secret(sim: &SimPlatform) -> Option<Vec<u8>> {
        sim.with_cluster(|c| c.pull_secret("auth-secret").map(<[u8]>::to_vec))
    }

    #[tokio::test]
    async fn creates_updates_and_leaves_an_identical_secret_alone() {
        let (_dir, path, sim) = setup();
        std::fs::write(&path, CONFIG_A).unwrap();
        let sync = PullSecretSync::new(Arc::new(sim.clone()), "auth-secret", path.clone());
        assert_eq!(sync.ensure().await.unwrap(), PullSecretOutcome::Ensured);
        assert_eq!(secret(&sim).as_deref(), Some(CONFIG_A));

        // Any platform call from now on fails: an unchanged file must not
        // make one.
        sim.with_cluster(|c| {
            c.inject(
                Operation::EnsureSecret,
                PlatformError::Transient("must not be called".into()),
            )
        });
        assert_eq!(sync.ensure().await.unwrap(), PullSecretOutcome::Unchanged);

        // A changed file does call the platform (and meets the injected failure)…
        std::fs::write(&path, CONFIG_B).unwrap();
        let e = sync.ensure().await.unwrap_err();
        assert!(
            matches!(&e, PullSecretError::Platform { name, .. } if name == "auth-secret"),
            "{e}"
        );
        assert_eq!(secret(&sim).as_deref(), Some(CONFIG_A));
        // …and the next call updates the Secret.
        assert_eq!(sync.ensure().await.unwrap(), PullSecretOutcome::Ensured);
        assert_eq!(secret(&sim).as_deref(), Some(CONFIG_B));
    }

    #[tokio::test]
    async fn an_unchanged_file_is_re_ensured_after_the_refresh_interval() {
        let (_dir, path, sim) = setup();
        std::fs::write(&path, CONFIG_A).unwrap();
        // A second replica already wrote identical bytes: the platform
        // leaves them alone.
        sim.with_cluster(|c| c.ensure_pull_secret("auth-secret", CONFIG_A))
            .unwrap();
        let sync = PullSecretSync::new(Arc::new(sim.clone()), "auth-secret", path.clone())
            .with_refresh(Duration::ZERO);
        assert_eq!(sync.ensure().await.unwrap(), PullSecretOutcome::Ensured);
        assert_eq!(
            sim.with_cluster(|c| c.ensure_pull_secret("auth-secret", CONFIG_A)),
            Ok(false),
            "identical bytes leave the secret unchanged"
        );
        assert_eq!(sync.ensure().await.unwrap(), PullSecretOutcome::Ensured);
    }

    #[tokio::test]
    async fn unreadable_or_invalid_files_are_not_replicated() {
        let (_dir, path, sim) = setup();
        let sync = PullSecretSync::new(Arc::new(sim.clone()), "auth-secret", path.clone());
        let e = sync.ensure().await.unwrap_err();
        assert!(matches!(e, PullSecretError::Read { .. }), "{e}");
        assert!(e.to_string().contains("--registry-auth-secret-path"));
        std::fs::write(&path, "not json").unwrap();
        let e = sync.ensure().await.unwrap_err();
        assert!(matches!(e, PullSecretError::Invalid { .. }), "{e}");
        assert_eq!(secret(&sim), None);
    }
}
