//! The Kubernetes client the runner makes for the generation choice, the
//! FunctionConfig watch and the pod runtime.

use std::path::Path;

/// A Kubernetes client from `--kubeconfig`, or as kube-rs infers it
/// (`KUBECONFIG`, `~/.kube/config`, then in-cluster).
///
/// Errors: the file cannot be read or used, or no configuration exists.
pub async fn kube_client(kubeconfig: Option<&Path>) -> Result<kube::Client, String> {
    match kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| format!("cannot read --kubeconfig {}: {e}", path.display()))?;
            let config = kube::Config::from_custom_kubeconfig(
                kubeconfig,
                &kube::config::KubeConfigOptions::default(),
            )
            .await
            .map_err(|e| format!("invalid --kubeconfig {}: {e}", path.display()))?;
            kube::Client::try_from(config).map_err(|e| e.to_string())
        }
        None => kube::Client::try_default().await.map_err(|e| {
            format!(
                "no usable Kubernetes configuration (in-cluster, KUBECONFIG or --kubeconfig): {e}"
            )
        }),
    }
}
