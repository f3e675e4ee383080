//! Which of Porch's two configuration generations `serve` serves:
//! `config.yaml` + `pod-cache-config.yaml` + a template ConfigMap, or the
//! FunctionConfig CRD + template objects ([`choose_generation`]).

use std::path::Path;

use crate::adapters::kube::function_configs::crd_installed;
use crate::domain::function_config::{GROUP, PLURAL};

use super::cluster::kube_client;
use super::pod::PodSettings;
use super::serve::{DEFAULT_CONFIG, RuntimeSettings, StartupError};

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
/// message names both ways out.
pub async fn choose_generation(
    settings: &RuntimeSettings,
    pod: &PodSettings,
    pod_enabled: bool,
) -> Result<GenerationChoice, StartupError> {
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
        Err(e) => {
            let needs = if pod_enabled {
                "the pod runtime and the FunctionConfig generation need a cluster"
            } else {
                "the exec runtime reads FunctionConfigs from a cluster when no --config is given"
            };
            return Err(StartupError::Generation(format!(
                "no configuration to serve: no --config given, {needs}, and there is none ({e}); {}",
                both_options()
            )));
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
        Ok(false) => Err(StartupError::Generation(format!(
            "nothing to serve: the exec runtime has no --config, {DEFAULT_CONFIG} does not exist and the cluster does not serve {PLURAL}.{GROUP}; {}",
            both_options()
        ))),
        Err(e) if !pod_enabled && config_file => Ok(GenerationChoice {
            generation: Generation::ConfigYaml,
            reason: format!(
                "{DEFAULT_CONFIG} exists and the cluster cannot be asked whether it serves {PLURAL}.{GROUP} ({e})"
            ),
            client: None,
        }),
        Err(e) => Err(StartupError::Generation(format!(
            "cannot ask the cluster whether Porch's FunctionConfig CRD is installed: {e}; {}",
            both_options()
        ))),
    }
}
