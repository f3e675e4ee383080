//! Which of Porch's two configuration generations `serve` serves:
//! `config.yaml` + `pod-cache-config.yaml` + a template ConfigMap, or the
//! FunctionConfig CRD + template objects ([`choose_generation`]).

use std::path::Path;

use crate::adapters::kube::function_configs::crd_installed;
use crate::domain::function_config::{GROUP, PLURAL};

use super::cluster::{KubeClientError, kube_client};
use super::pod::PodSettings;
use super::serve::{DEFAULT_CONFIG, RuntimeSettings};

/// Which of Porch's configuration surfaces the runner serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generation {
    /// Porch's config.yaml era: `--config` (exec), `--pod-cache-config`
    /// (per-function pod settings and warm-up), `--function-pod-template`
    /// (a template ConfigMap) or the inline templates.
    ConfigYaml,
    /// Porch as it ships today: `FunctionConfig` objects in
    /// `--pod-namespace` (exec binaries and pod settings, followed live),
    /// and the `PodTemplate`/`ServiceTemplate` objects there.
    FunctionConfig,
}

impl std::fmt::Display for Generation {
    /// `config.yaml` or `FunctionConfig`, as the start-up log names them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Generation::ConfigYaml => "config.yaml",
            Generation::FunctionConfig => "FunctionConfig",
        })
    }
}

/// The generation chosen, why, and the cluster client made on the way.
pub struct GenerationChoice {
    /// The generation.
    pub generation: Generation,
    /// Why, for the start-up log.
    pub reason: String,
    /// The Kubernetes client, if one was made.
    pub client: Option<kube::Client>,
}

/// Why no configuration generation can serve anything. Each message says
/// why and ends with both ways out (config.yaml flags, or a cluster with
/// Porch's FunctionConfig CRD).
#[derive(Debug, thiserror::Error)]
pub enum GenerationError {
    /// No config.yaml flag, and no cluster client could be made, while the
    /// pod runtime is on or `./config.yaml` does not exist.
    #[error(
        "no configuration to serve: no --config given, {needs}, and there is none ({source}); {ways}",
        needs = what_needs_a_cluster(*.pod_enabled),
        ways = both_options()
    )]
    NoCluster {
        /// Whether the pod runtime is on (it changes what the message says
        /// needs the cluster).
        pod_enabled: bool,
        /// Why no client could be made.
        #[source]
        source: KubeClientError,
    },
    /// Exec only, no `./config.yaml`, and the cluster does not serve the
    /// FunctionConfig CRD.
    #[error(
        "nothing to serve: the exec runtime has no --config, {DEFAULT_CONFIG} does not exist and the cluster does not serve {PLURAL}.{GROUP}; {ways}",
        ways = both_options()
    )]
    NothingToServe,
    /// API discovery failed, while the pod runtime is on or `./config.yaml`
    /// does not exist.
    #[error(
        "cannot ask the cluster whether Porch's FunctionConfig CRD is installed: {source}; {ways}",
        ways = both_options()
    )]
    CrdUnknown {
        /// The discovery error.
        #[source]
        source: kube::Error,
    },
}

/// What needs the cluster that cannot be reached, in
/// [`GenerationError::NoCluster`]'s message.
fn what_needs_a_cluster(pod_enabled: bool) -> &'static str {
    if pod_enabled {
        "the pod runtime and the FunctionConfig generation need a cluster"
    } else {
        "the exec runtime reads FunctionConfigs from a cluster when no --config is given"
    }
}

/// The end of the error when no generation can work.
fn both_options() -> String {
    format!(
        "either give --config FILE (and --functions DIR), --pod-cache-config or --function-pod-template for the config.yaml generation, or run with access to a cluster (in-cluster, KUBECONFIG or --kubeconfig) where Porch's FunctionConfig CRD ({PLURAL}.{GROUP}) is installed for the FunctionConfig generation"
    )
}

/// Chooses the configuration generation (Porch has one per release; the
/// runner serves both):
/// - any of `--config`, `--pod-cache-config`, `--function-pod-template`
///   given → config.yaml, no cluster asked;
/// - otherwise the FunctionConfig generation when the cluster serves the
///   FunctionConfig CRD (API discovery), else config.yaml with its defaults
///   (`./config.yaml` if it exists, inline templates).
///
/// `pod_enabled` says whether the pod runtime will run: without it and
/// without a cluster, config.yaml works only if `./config.yaml` exists.
///
/// Errors: no generation can serve anything (no cluster and no config file,
/// an unreachable cluster while the pod runtime is on or no config file
/// exists, or exec only with neither the CRD nor a config file) — the
/// message names both ways out ([`GenerationError`]).
pub async fn choose_generation(
    settings: &RuntimeSettings,
    pod: &PodSettings,
    pod_enabled: bool,
) -> Result<GenerationChoice, GenerationError> {
    let mut explicit = Vec::new();
    if settings.config.is_some() {
        explicit.push("--config");
    }
    if pod.pod_cache_config.is_some() {
        explicit.push("--pod-cache-config");
    }
    if !pod.function_pod_template.is_empty() {
        explicit.push("--function-pod-template");
    }
    if !explicit.is_empty() {
        return Ok(GenerationChoice {
            generation: Generation::ConfigYaml,
            reason: format!("{} given", explicit.join(", ")),
            client: None,
        });
    }
    let config_file = Path::new(DEFAULT_CONFIG).is_file();
    let client = match kube_client(pod.kubeconfig.as_deref()).await {
        Ok(c) => c,
        Err(e) if !pod_enabled && config_file => {
            return Ok(GenerationChoice {
                generation: Generation::ConfigYaml,
                reason: format!("{DEFAULT_CONFIG} exists and there is no cluster ({e})"),
                client: None,
            });
        }
        Err(source) => {
            return Err(GenerationError::NoCluster {
                pod_enabled,
                source,
            });
        }
    };
    match crd_installed(&client).await {
        Ok(true) => Ok(GenerationChoice {
            generation: Generation::FunctionConfig,
            reason: format!("no config.yaml flags given and the cluster serves {PLURAL}.{GROUP}"),
            client: Some(client),
        }),
        Ok(false) if pod_enabled || config_file => Ok(GenerationChoice {
            generation: Generation::ConfigYaml,
            reason: format!(
                "no config.yaml flags given and the cluster does not serve {PLURAL}.{GROUP} (Porch's FunctionConfig CRD is not installed)"
            ),
            client: Some(client),
        }),
        Ok(false) => Err(GenerationError::NothingToServe),
        Err(e) if !pod_enabled && config_file => Ok(GenerationChoice {
            generation: Generation::ConfigYaml,
            reason: format!(
                "{DEFAULT_CONFIG} exists and the cluster cannot be asked whether it serves {PLURAL}.{GROUP} ({e})"
            ),
            client: None,
        }),
        Err(source) => Err(GenerationError::CrdUnknown { source }),
    }
}
