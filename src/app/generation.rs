//! Which of Porch's two configuration generations `serve` serves.
//!
//! Porch has configured its function runner in two ways, one per release:
//! `config.yaml` + `pod-cache-config.yaml` + a template ConfigMap, and the
//! FunctionConfig CRD + template objects. The runner serves both and picks
//! one at start-up, in two steps:
//!
//! 1. [`gather_facts`] finds out what the choice depends on, asking only what
//!    is needed: the config.yaml flags; when none is given, whether
//!    `./config.yaml` exists, whether a cluster client can be made and
//!    whether the cluster serves the FunctionConfig CRD;
//! 2. [`decide`] chooses from those facts alone (no I/O), with the reason
//!    logged at start-up, or fails with a [`GenerationError`] naming both
//!    ways out.
//!
//! [`choose_generation`] does both.

use std::path::Path;

use crate::adapters::kube::function_configs::crd_installed;
use crate::domain::function_config::{GROUP, PLURAL};

use super::cluster::{KubeClientError, kube_client};
use super::pod::PodSettings;
use super::settings::{DEFAULT_CONFIG, RuntimeSettings};

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
    /// The Kubernetes client, if one was made and the cluster answered
    /// discovery (the pod runtime and the FunctionConfig watch reuse it).
    pub client: Option<kube::Client>,
}

/// What the generation depends on, as [`gather_facts`] found it out.
#[derive(Debug)]
pub enum GenerationFacts {
    /// config.yaml flags were given, named in this order: `--config`,
    /// `--pod-cache-config`, `--function-pod-template` (never empty). They
    /// decide alone, so nothing else was asked: no file, no cluster.
    Flags(Vec<&'static str>),
    /// No config.yaml flag was given: what start-up probed.
    Probed(ProbedFacts),
}

/// What start-up probed when no config.yaml flag was given.
#[derive(Debug)]
pub struct ProbedFacts {
    /// Whether the pod runtime will run (`pod` not in `--disable-runtimes`).
    pub pod_enabled: bool,
    /// Whether the default `./config.yaml` exists (as a file).
    pub config_file: bool,
    /// What the cluster said.
    pub cluster: ClusterFact,
}

/// What start-up learnt from the cluster.
#[derive(Debug)]
pub enum ClusterFact {
    /// No client could be made (no usable Kubernetes configuration);
    /// discovery was not tried.
    NoClient(KubeClientError),
    /// API discovery: the cluster serves the FunctionConfig CRD.
    CrdServed,
    /// API discovery: the cluster does not serve it (not installed).
    CrdNotServed,
    /// API discovery failed (the API server did not answer, or refused).
    CrdUnknown(kube::Error),
}

/// The outcome of [`decide`]: the generation, why, and whether the client
/// made while probing is worth keeping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// The generation to serve.
    pub generation: Generation,
    /// Why, for the start-up log.
    pub reason: String,
    /// Whether the cluster client made while probing is kept: only when the
    /// cluster answered discovery.
    pub keep_client: bool,
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

/// The config.yaml flags given, in the order the reason names them:
/// `--config`, `--pod-cache-config`, `--function-pod-template` (a non-empty
/// value).
fn config_yaml_flags(settings: &RuntimeSettings, pod: &PodSettings) -> Vec<&'static str> {
    let mut flags = Vec::new();
    if settings.config.is_some() {
        flags.push("--config");
    }
    if pod.pod_cache_config.is_some() {
        flags.push("--pod-cache-config");
    }
    if !pod.function_pod_template.is_empty() {
        flags.push("--function-pod-template");
    }
    flags
}

/// Finds out what the generation depends on, asking only what is needed,
/// in this order: the config.yaml flags (when any is given, nothing else is
/// asked); whether `./config.yaml` exists; a cluster client from
/// `--kubeconfig` or as kube-rs infers it ([`kube_client`]); when one could
/// be made, whether the cluster serves the FunctionConfig CRD (API
/// discovery).
///
/// Returns the facts and the client, if one was made. Never fails: a probe
/// that fails is a fact.
pub async fn gather_facts(
    settings: &RuntimeSettings,
    pod: &PodSettings,
    pod_enabled: bool,
) -> (GenerationFacts, Option<kube::Client>) {
    let flags = config_yaml_flags(settings, pod);
    if !flags.is_empty() {
        return (GenerationFacts::Flags(flags), None);
    }
    let config_file = Path::new(DEFAULT_CONFIG).is_file();
    let (cluster, client) = match kube_client(pod.kubeconfig.as_deref()).await {
        Err(e) => (ClusterFact::NoClient(e), None),
        Ok(client) => {
            let fact = match crd_installed(&client).await {
                Ok(true) => ClusterFact::CrdServed,
                Ok(false) => ClusterFact::CrdNotServed,
                Err(e) => ClusterFact::CrdUnknown(e),
            };
            (fact, Some(client))
        }
    };
    let facts = ProbedFacts {
        pod_enabled,
        config_file,
        cluster,
    };
    (GenerationFacts::Probed(facts), client)
}

/// Chooses the configuration generation from `facts`, without I/O:
/// - any config.yaml flag given → config.yaml;
/// - otherwise the FunctionConfig generation when the cluster serves the
///   FunctionConfig CRD, else config.yaml with its defaults (`./config.yaml`
///   if it exists, inline templates) — when that can serve something: with
///   the pod runtime on it needs the cluster, and with exec only it needs
///   `./config.yaml`.
///
/// The client is kept only when the cluster answered discovery.
///
/// This is the runner's own rule (each Porch release reads one generation
/// only), as the book's configuration chapter states it ("Two generations
/// of configuration"); the reasons and messages are the ones logged and
/// printed.
///
/// Errors: no generation can serve anything — no client while the pod
/// runtime is on or no `./config.yaml` exists ([`GenerationError::NoCluster`]),
/// exec only with neither the CRD nor `./config.yaml`
/// ([`GenerationError::NothingToServe`]), or discovery failing while the
/// pod runtime is on or no `./config.yaml` exists
/// ([`GenerationError::CrdUnknown`]).
pub fn decide(facts: GenerationFacts) -> Result<Choice, GenerationError> {
    let config_yaml = |reason: String, keep_client: bool| Choice {
        generation: Generation::ConfigYaml,
        reason,
        keep_client,
    };
    let ProbedFacts {
        pod_enabled,
        config_file,
        cluster,
    } = match facts {
        GenerationFacts::Flags(flags) => {
            return Ok(config_yaml(format!("{} given", flags.join(", ")), false));
        }
        GenerationFacts::Probed(probed) => probed,
    };
    // Exec only, with ./config.yaml: config.yaml works without a cluster.
    let file_alone_serves = !pod_enabled && config_file;
    match cluster {
        ClusterFact::NoClient(e) if file_alone_serves => Ok(config_yaml(
            format!("{DEFAULT_CONFIG} exists and there is no cluster ({e})"),
            false,
        )),
        ClusterFact::NoClient(source) => Err(GenerationError::NoCluster {
            pod_enabled,
            source,
        }),
        ClusterFact::CrdServed => Ok(Choice {
            generation: Generation::FunctionConfig,
            reason: format!("no config.yaml flags given and the cluster serves {PLURAL}.{GROUP}"),
            keep_client: true,
        }),
        ClusterFact::CrdNotServed if pod_enabled || config_file => Ok(config_yaml(
            format!(
                "no config.yaml flags given and the cluster does not serve {PLURAL}.{GROUP} (Porch's FunctionConfig CRD is not installed)"
            ),
            true,
        )),
        ClusterFact::CrdNotServed => Err(GenerationError::NothingToServe),
        ClusterFact::CrdUnknown(e) if file_alone_serves => Ok(config_yaml(
            format!(
                "{DEFAULT_CONFIG} exists and the cluster cannot be asked whether it serves {PLURAL}.{GROUP} ({e})"
            ),
            false,
        )),
        ClusterFact::CrdUnknown(source) => Err(GenerationError::CrdUnknown { source }),
    }
}

/// Chooses the configuration generation (Porch has one per release; the
/// runner serves both): [`gather_facts`], then [`decide`]. `pod_enabled`
/// says whether the pod runtime will run.
///
/// Errors: see [`decide`].
pub async fn choose_generation(
    settings: &RuntimeSettings,
    pod: &PodSettings,
    pod_enabled: bool,
) -> Result<GenerationChoice, GenerationError> {
    let (facts, client) = gather_facts(settings, pod, pod_enabled).await;
    let choice = decide(facts)?;
    Ok(GenerationChoice {
        generation: choice.generation,
        reason: choice.reason,
        client: client.filter(|_| choice.keep_client),
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    /// Porch's CRD as the messages name it.
    const CRD: &str = "functionconfigs.config.porch.kpt.dev";

    /// What a failed client gives, as `kube_client` words it.
    fn no_client() -> ClusterFact {
        ClusterFact::NoClient(KubeClientError::NoConfig(kube::Error::Service(
            "no kubeconfig".into(),
        )))
    }
    const NO_CLIENT_TEXT: &str = "no usable Kubernetes configuration (in-cluster, KUBECONFIG or --kubeconfig): ServiceError: no kubeconfig";

    /// What a failed discovery gives.
    fn crd_unknown() -> ClusterFact {
        ClusterFact::CrdUnknown(kube::Error::Service("connection refused".into()))
    }
    const CRD_UNKNOWN_TEXT: &str = "ServiceError: connection refused";

    fn probed(pod_enabled: bool, config_file: bool, cluster: ClusterFact) -> GenerationFacts {
        GenerationFacts::Probed(ProbedFacts {
            pod_enabled,
            config_file,
            cluster,
        })
    }

    /// An expected outcome: a choice (generation, reason, client kept) or
    /// an error's message.
    enum Want {
        Chosen(Generation, String, bool),
        Fails(String),
    }
    use Want::{Chosen, Fails};

    fn ways() -> String {
        format!(
            "either give --config FILE (and --functions DIR), --pod-cache-config or --function-pod-template for the config.yaml generation, or run with access to a cluster (in-cluster, KUBECONFIG or --kubeconfig) where Porch's FunctionConfig CRD ({CRD}) is installed for the FunctionConfig generation"
        )
    }

    #[test]
    fn every_branch_of_the_decision() {
        use Generation::{ConfigYaml, FunctionConfig};
        let flags = |f: &[&'static str]| GenerationFacts::Flags(f.to_vec());
        let no_cluster = |needs: &str, e: &str| {
            Fails(format!(
                "no configuration to serve: no --config given, {needs}, and there is none ({e}); {}",
                ways()
            ))
        };
        let pod_needs = "the pod runtime and the FunctionConfig generation need a cluster";
        let exec_needs =
            "the exec runtime reads FunctionConfigs from a cluster when no --config is given";
        let crd_absent = format!(
            "no config.yaml flags given and the cluster does not serve {CRD} (Porch's FunctionConfig CRD is not installed)"
        );
        let cannot_ask = || {
            Fails(format!(
                "cannot ask the cluster whether Porch's FunctionConfig CRD is installed: {CRD_UNKNOWN_TEXT}; {}",
                ways()
            ))
        };
        // (what the row checks, the facts, the outcome)
        let rows: Vec<(&str, GenerationFacts, Want)> = vec![
            // 1. config.yaml flags decide alone.
            (
                "--config",
                flags(&["--config"]),
                Chosen(ConfigYaml, "--config given".into(), false),
            ),
            (
                "--pod-cache-config",
                flags(&["--pod-cache-config"]),
                Chosen(ConfigYaml, "--pod-cache-config given".into(), false),
            ),
            (
                "--function-pod-template",
                flags(&["--function-pod-template"]),
                Chosen(ConfigYaml, "--function-pod-template given".into(), false),
            ),
            (
                "all three flags",
                flags(&["--config", "--pod-cache-config", "--function-pod-template"]),
                Chosen(
                    ConfigYaml,
                    "--config, --pod-cache-config, --function-pod-template given".into(),
                    false,
                ),
            ),
            // 2. No client, exec only with ./config.yaml: config.yaml.
            (
                "no client, exec only, config file",
                probed(false, true, no_client()),
                Chosen(
                    ConfigYaml,
                    format!("./config.yaml exists and there is no cluster ({NO_CLIENT_TEXT})"),
                    false,
                ),
            ),
            // Error: no client otherwise.
            (
                "no client, pod on, config file",
                probed(true, true, no_client()),
                no_cluster(pod_needs, NO_CLIENT_TEXT),
            ),
            (
                "no client, pod on, no config file",
                probed(true, false, no_client()),
                no_cluster(pod_needs, NO_CLIENT_TEXT),
            ),
            (
                "no client, exec only, no config file",
                probed(false, false, no_client()),
                no_cluster(exec_needs, NO_CLIENT_TEXT),
            ),
            // 3. The CRD is served: FunctionConfig, whatever else.
            (
                "CRD served, pod on, no config file",
                probed(true, false, ClusterFact::CrdServed),
                Chosen(
                    FunctionConfig,
                    format!("no config.yaml flags given and the cluster serves {CRD}"),
                    true,
                ),
            ),
            (
                "CRD served, exec only, config file",
                probed(false, true, ClusterFact::CrdServed),
                Chosen(
                    FunctionConfig,
                    format!("no config.yaml flags given and the cluster serves {CRD}"),
                    true,
                ),
            ),
            // 4. The CRD is not served: config.yaml when it serves something.
            (
                "CRD not served, pod on, no config file",
                probed(true, false, ClusterFact::CrdNotServed),
                Chosen(ConfigYaml, crd_absent.clone(), true),
            ),
            (
                "CRD not served, exec only, config file",
                probed(false, true, ClusterFact::CrdNotServed),
                Chosen(ConfigYaml, crd_absent.clone(), true),
            ),
            // Error: exec only with neither the CRD nor ./config.yaml.
            (
                "CRD not served, exec only, no config file",
                probed(false, false, ClusterFact::CrdNotServed),
                Fails(format!(
                    "nothing to serve: the exec runtime has no --config, ./config.yaml does not exist and the cluster does not serve {CRD}; {}",
                    ways()
                )),
            ),
            // 5. Discovery fails, exec only with ./config.yaml: config.yaml.
            (
                "discovery fails, exec only, config file",
                probed(false, true, crd_unknown()),
                Chosen(
                    ConfigYaml,
                    format!(
                        "./config.yaml exists and the cluster cannot be asked whether it serves {CRD} ({CRD_UNKNOWN_TEXT})"
                    ),
                    false,
                ),
            ),
            // Error: discovery fails otherwise.
            (
                "discovery fails, pod on, config file",
                probed(true, true, crd_unknown()),
                cannot_ask(),
            ),
            (
                "discovery fails, pod on, no config file",
                probed(true, false, crd_unknown()),
                cannot_ask(),
            ),
            (
                "discovery fails, exec only, no config file",
                probed(false, false, crd_unknown()),
                cannot_ask(),
            ),
        ];
        for (row, facts, want) in rows {
            match (decide(facts), want) {
                (Ok(got), Chosen(generation, reason, keep_client)) => assert_eq!(
                    got,
                    Choice {
                        generation,
                        reason,
                        keep_client
                    },
                    "{row}"
                ),
                (Err(got), Fails(message)) => assert_eq!(got.to_string(), message, "{row}"),
                (got, _) => panic!("{row}: unexpected {got:?}"),
            }
        }
    }

    #[test]
    fn the_errors_keep_their_causes() {
        use std::error::Error;
        let Err(e) = decide(probed(true, false, no_client())) else {
            panic!("no client with the pod runtime on fails")
        };
        assert_eq!(e.source().unwrap().to_string(), NO_CLIENT_TEXT);
        let Err(e) = decide(probed(true, false, crd_unknown())) else {
            panic!("failed discovery with the pod runtime on fails")
        };
        assert_eq!(e.source().unwrap().to_string(), CRD_UNKNOWN_TEXT);
    }

    fn settings(config: Option<&str>) -> RuntimeSettings {
        RuntimeSettings {
            config: config.map(PathBuf::from),
            functions: PathBuf::from("./functions"),
            disabled: Vec::new(),
            max_message_bytes: 1 << 20,
            default_image_prefix: String::new(),
            exec_env: Vec::new(),
            slots: Default::default(),
            sandbox: Default::default(),
            render_read_rules: false,
            builtins: false,
        }
    }

    #[test]
    fn flags_are_named_in_a_fixed_order() {
        let mut pod = PodSettings::for_tests();
        assert!(config_yaml_flags(&settings(None), &pod).is_empty());
        pod.function_pod_template = "templates".into();
        pod.pod_cache_config = Some(PathBuf::from("pod-cache-config.yaml"));
        assert_eq!(
            config_yaml_flags(&settings(Some("config.yaml")), &pod),
            ["--config", "--pod-cache-config", "--function-pod-template"]
        );
    }

    /// With a config.yaml flag nothing else is asked: an unusable
    /// `--kubeconfig` is not even read.
    #[tokio::test]
    async fn flags_decide_without_asking_the_cluster() {
        let mut pod = PodSettings::for_tests();
        pod.kubeconfig = Some(PathBuf::from("/nonexistent/kubeconfig"));
        let (facts, client) = gather_facts(&settings(Some("config.yaml")), &pod, true).await;
        assert!(client.is_none());
        assert!(
            matches!(&facts, GenerationFacts::Flags(f) if f == &["--config"]),
            "{facts:?}"
        );
        // Without the flag, the unusable file is a fact.
        let (facts, client) = gather_facts(&settings(None), &pod, true).await;
        assert!(client.is_none());
        let GenerationFacts::Probed(ProbedFacts {
            cluster: ClusterFact::NoClient(e),
            ..
        }) = facts
        else {
            panic!("{facts:?}")
        };
        assert!(
            e.to_string()
                .starts_with("cannot read --kubeconfig /nonexistent/kubeconfig: "),
            "{e}"
        );
    }
}
