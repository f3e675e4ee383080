//! The Kubernetes client the runner makes for the generation choice, the
//! FunctionConfig watch and the pod runtime.

use std::path::{Path, PathBuf};

/// Why no Kubernetes client could be made ([`kube_client`]).
#[derive(Debug, thiserror::Error)]
pub enum KubeClientError {
    /// `--kubeconfig` cannot be read or parsed.
    #[error("cannot read --kubeconfig {}: {source}", path.display())]
    ReadKubeconfig {
        /// The file given.
        path: PathBuf,
        /// kube-rs's error.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// `--kubeconfig` was read but cannot be used (no current context, a
    /// bad cluster URL, unreadable certificates…).
    #[error("invalid --kubeconfig {}: {source}", path.display())]
    InvalidKubeconfig {
        /// The file given.
        path: PathBuf,
        /// kube-rs's error.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// The configuration was usable but no client could be built from it.
    #[error(transparent)]
    Client(kube::Error),
    /// Without `--kubeconfig`, kube-rs found no configuration (no
    /// `KUBECONFIG`, no `~/.kube/config`, not in a cluster).
    #[error("no usable Kubernetes configuration (in-cluster, KUBECONFIG or --kubeconfig): {0}")]
    NoConfig(#[source] kube::Error),
}

/// A Kubernetes client from `--kubeconfig`, or as kube-rs infers it
/// (`KUBECONFIG`, `~/.kube/config`, then in-cluster). Making a client does
/// not contact the API server.
///
/// Errors: the file cannot be read or used, or no configuration exists
/// ([`KubeClientError`]).
pub async fn kube_client(kubeconfig: Option<&Path>) -> Result<kube::Client, KubeClientError> {
    match kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|source| {
                KubeClientError::ReadKubeconfig {
                    path: path.to_path_buf(),
                    source,
                }
            })?;
            let config = kube::Config::from_custom_kubeconfig(
                kubeconfig,
                &kube::config::KubeConfigOptions::default(),
            )
            .await
            .map_err(|source| KubeClientError::InvalidKubeconfig {
                path: path.to_path_buf(),
                source,
            })?;
            kube::Client::try_from(config).map_err(KubeClientError::Client)
        }
        None => kube::Client::try_default()
            .await
            .map_err(KubeClientError::NoConfig),
    }
}
