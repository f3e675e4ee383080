//! The pod runtime's flags of `serve`: Porch's pod-runtime and registry
//! flags, with Porch's names and defaults.

use std::path::PathBuf;
use std::time::Duration;

use clap::ArgAction;

use crate::adapters::pod::AddressMode;
use crate::app::PodSettings;

/// The pod runtime's flags (parsed by clap, with Porch's names and
/// defaults); [`PodArgs::settings`] makes them the app's [`PodSettings`],
/// with `WRAPPER_SERVER_IMAGE` and the flags shared with the exec runtime.
#[derive(Debug, Clone, clap::Args)]
pub struct PodArgs {
    /// Namespace for function pods, services and the pull secret.
    #[arg(
        long = "pod-namespace",
        value_name = "POD_NAMESPACE",
        default_value = "porch-fn-system"
    )]
    pub namespace: String,
    /// Default idle time-to-live of a function pod.
    #[arg(long = "pod-ttl",
        value_name = "POD_TTL", value_parser = humantime::parse_duration, default_value = "30m")]
    pub ttl: Duration,
    /// Garbage-collection period of the pod cache.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1m")]
    pub scan_interval: Duration,
    /// Pre-create one pod per --pod-cache-config entry (or per FunctionConfig podExecutor) at start-up.
    #[arg(long = "warm-up-pod-cache",
        value_name = "WARM_UP_POD_CACHE", action = ArgAction::Set, num_args = 0..=1, default_value_t = true, default_missing_value = "true")]
    pub warm_up: bool,
    /// Per-function pod settings and warm-up list; giving it selects the config.yaml generation [default: /pod-cache-config/pod-cache-config.yaml].
    #[arg(long)]
    pub pod_cache_config: Option<PathBuf>,
    /// ConfigMap holding `template` and `serviceTemplate` for function pods (in the runner's namespace, or NAMESPACE/NAME); giving it selects the config.yaml generation.
    #[arg(long, default_value = "")]
    pub function_pod_template: String,
    /// Load on a pod before another pod is started.
    #[arg(long, default_value_t = 2)]
    pub max_waitlist_length: i64,
    /// Most pods per function image.
    #[arg(long, default_value_t = 1)]
    pub max_parallel_pods_per_function: i64,
    /// Use the Docker config at --registry-auth-secret-path for private registries.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true")]
    pub enable_private_registries: bool,
    /// Mounted Docker config JSON for private registries.
    #[arg(long, default_value = "/var/tmp/config-secret/.dockerconfigjson")]
    pub registry_auth_secret_path: PathBuf,
    /// Name of the pull secret created in --pod-namespace.
    #[arg(long, default_value = "auth-secret")]
    pub registry_auth_secret_name: String,
    /// Trust the CA in --tls-secret-path for private registries.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true")]
    pub enable_private_registries_tls: bool,
    /// Directory holding ca.crt or ca.pem.
    #[arg(long, default_value = "/var/tmp/tls-secret/")]
    pub tls_secret_path: PathBuf,
    /// Kubeconfig file (default: KUBECONFIG, ~/.kube/config, then in-cluster, as kube-rs infers it).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Requests a pod may carry once the function has all its pods; more are refused with RESOURCE_EXHAUSTED.
    #[arg(long, default_value_t = 64)]
    pub max_load_per_pod: u32,
    /// How long a new function pod may take to become ready (Porch: fixed 60s).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "60s")]
    pub pod_ready_timeout: Duration,
    /// How the runner reaches wrapper servers: service (the pod's ClusterIP service DNS name) or pod-ip.
    #[arg(long = "pod-address-mode",
        value_name = "POD_ADDRESS_MODE", value_enum, default_value_t = AddressMode::Service)]
    pub address_mode: AddressMode,
    /// Short name of this replica inside pod names (1-8 of a-z0-9), unique among replicas and, ideally, per start [default: random per process start].
    #[arg(long)]
    pub replica_token: Option<String>,
    /// In pod-ip mode, a starting function pod takes calls as soon as its wrapper server answers a gRPC health check at the pod IP, instead of when the kubelet's readiness probe reports it (Porch waits for Ready).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value_t = true, default_missing_value = "true")]
    pub wrapper_health_check: bool,
    /// File mapping wrapper endpoints to dialable addresses (`<endpoint> <host:port>` per line): a test seam for the emulated kubelet of the test bed, whose wrappers listen on loopback ports; not for production (hidden).
    #[arg(long, hide = true)]
    pub wrapper_address_map: Option<PathBuf>,
    /// Bound on connecting to a wrapper server.
    #[arg(long = "wrapper-connect-timeout",
        value_name = "WRAPPER_CONNECT_TIMEOUT", value_parser = humantime::parse_duration, default_value = "5s")]
    pub connect_timeout: Duration,
    /// Bound on each Kubernetes API call (an API server that does not answer fails the call after this long).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    pub api_timeout: Duration,
    /// How long a registry's tag list answers a step's tag constraint (Tag) before the registry is asked again; 0s lists on every call, as Porch does.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5m")]
    pub tag_list_ttl: Duration,
    /// Attempts of a Kubernetes API call that fails transiently (5xx, 429, timeouts), the first included.
    #[arg(long, default_value_t = 4)]
    pub api_retries: u32,
    /// First delay between those attempts; doubled each time.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "100ms")]
    pub api_retry_backoff: Duration,
    /// First delay before the pod cache retries a failed reclaim-after patch or pod deletion; doubled each time up to 30s.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    pub write_retry_backoff: Duration,
    /// How long start-up waits for the FunctionConfig, PodTemplate and ServiceTemplate watches to list their objects.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "60s")]
    pub sync_timeout: Duration,
    /// Registry (host:port) reached over plain HTTP, e.g. a registry on loopback. Repeatable.
    #[arg(long = "plain-http-registry", value_name = "HOST:PORT")]
    pub plain_http_registries: Vec<String>,
}

impl PodArgs {
    /// The app's pod settings: these flags, plus `wrapper_image`
    /// (`WRAPPER_SERVER_IMAGE`), and `max_message_bytes`
    /// (`--max-request-body-size`) and `default_image_prefix`
    /// (`--default-image-prefix`), which `serve` shares with the exec runtime.
    pub fn settings(
        self,
        wrapper_image: Option<String>,
        max_message_bytes: usize,
        default_image_prefix: &str,
    ) -> PodSettings {
        let a = self;
        PodSettings {
            namespace: a.namespace,
            ttl: a.ttl,
            scan_interval: a.scan_interval,
            warm_up: a.warm_up,
            pod_cache_config: a.pod_cache_config,
            function_pod_template: a.function_pod_template,
            max_waitlist_length: a.max_waitlist_length,
            max_parallel_pods_per_function: a.max_parallel_pods_per_function,
            enable_private_registries: a.enable_private_registries,
            registry_auth_secret_path: a.registry_auth_secret_path,
            registry_auth_secret_name: a.registry_auth_secret_name,
            enable_private_registries_tls: a.enable_private_registries_tls,
            tls_secret_path: a.tls_secret_path,
            kubeconfig: a.kubeconfig,
            max_load_per_pod: a.max_load_per_pod,
            pod_ready_timeout: a.pod_ready_timeout,
            address_mode: a.address_mode,
            replica_token: a.replica_token,
            wrapper_health_check: a.wrapper_health_check,
            wrapper_address_map: a.wrapper_address_map,
            connect_timeout: a.connect_timeout,
            api_timeout: a.api_timeout,
            tag_list_ttl: a.tag_list_ttl,
            api_retries: a.api_retries,
            api_retry_backoff: a.api_retry_backoff,
            write_retry_backoff: a.write_retry_backoff,
            sync_timeout: a.sync_timeout,
            plain_http_registries: a.plain_http_registries,
            wrapper_image,
            max_message_bytes,
            default_image_prefix: default_image_prefix.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        pod: PodArgs,
    }

    /// Without flags, the settings are Porch's defaults (those the app's
    /// tests start from).
    #[test]
    fn defaults_are_porchs() {
        let t = T::try_parse_from(["serve"]).unwrap();
        assert_eq!(t.pod.settings(None, 1 << 20, ""), PodSettings::for_tests());
    }

    #[test]
    fn every_flag_reaches_the_settings() {
        let t = T::try_parse_from(
            "serve --pod-namespace=ns --pod-ttl=1m --scan-interval=2s --warm-up-pod-cache=false \
             --pod-cache-config=pcc.yaml --function-pod-template=ns/t --max-waitlist-length=3 \
             --max-parallel-pods-per-function=4 --enable-private-registries \
             --registry-auth-secret-path=/auth --registry-auth-secret-name=s \
             --enable-private-registries-tls --tls-secret-path=/tls --kubeconfig=/kc \
             --max-load-per-pod=5 --pod-ready-timeout=6s --pod-address-mode=pod-ip \
             --replica-token=r1 --wrapper-health-check=false --wrapper-address-map=/map \
             --wrapper-connect-timeout=7s --api-timeout=8s --tag-list-ttl=9s --api-retries=2 \
             --api-retry-backoff=10ms --write-retry-backoff=11s --sync-timeout=12s \
             --plain-http-registry=localhost:5000"
                .split_whitespace(),
        )
        .unwrap();
        let s = t
            .pod
            .settings(Some("wrapper:1".into()), 42, "example.com/fns");
        let secs = Duration::from_secs;
        let want = PodSettings {
            namespace: "ns".into(),
            ttl: secs(60),
            scan_interval: secs(2),
            warm_up: false,
            pod_cache_config: Some("pcc.yaml".into()),
            function_pod_template: "ns/t".into(),
            max_waitlist_length: 3,
            max_parallel_pods_per_function: 4,
            enable_private_registries: true,
            registry_auth_secret_path: "/auth".into(),
            registry_auth_secret_name: "s".into(),
            enable_private_registries_tls: true,
            tls_secret_path: "/tls".into(),
            kubeconfig: Some("/kc".into()),
            max_load_per_pod: 5,
            pod_ready_timeout: secs(6),
            address_mode: AddressMode::PodIp,
            replica_token: Some("r1".into()),
            wrapper_health_check: false,
            wrapper_address_map: Some("/map".into()),
            connect_timeout: secs(7),
            api_timeout: secs(8),
            tag_list_ttl: secs(9),
            api_retries: 2,
            api_retry_backoff: Duration::from_millis(10),
            write_retry_backoff: secs(11),
            sync_timeout: secs(12),
            plain_http_registries: vec!["localhost:5000".into()],
            wrapper_image: Some("wrapper:1".into()),
            max_message_bytes: 42,
            default_image_prefix: "example.com/fns".into(),
        };
        assert_eq!(s, want);
    }
}
