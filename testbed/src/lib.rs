//! The test beds of krm-fn-runner's integration tests (`tests/hermetic`,
//! `tests/beds`, `tests/pod_real.rs`) and benchmarks (`benches/`), compiled
//! once and used as a dependency. Each module is one bed or one kind of
//! helper; every bed is real — the runner's own binaries as processes, a
//! kube-apiserver with etcd, a kubelet, registries, the OpenTelemetry
//! Collector, Porch — built once per machine by the scripts under
//! `scripts/` and started on loopback or in network namespaces the tests
//! create.
//!
//! - [`common`]: the runner under test (`serve`, `wrapper-server`) on
//!   loopback, the catalog functions, the Python and Go clients, the tools
//!   the scripts build, polling helpers.
//! - [`packages`]: kpt packages read and written as kpt's annotations lay
//!   them out, for render comparisons.
//! - [`k8s_support`]: a real control plane (etcd, kube-apiserver).
//! - [`kubelet`]: a test kubelet that runs function pods as local
//!   `wrapper-server` processes, with fault injection.
//! - [`node_support`]: a real single-node cluster (kubelet, containerd,
//!   runc, kube-proxy, CoreDNS) in a network namespace.
//! - [`registry_support`]: OCI registries (plain, and basic auth with TLS).
//! - [`otel_support`]: `/metrics` scrapes and an OpenTelemetry Collector.
//! - [`porch_support`]: porch-server v1.5.3 and Porch's own clients.
//! - [`service_support`]: a stand-in ClusterIP Service for replicas.
//! - [`replicas_support`]: runner replicas and Porch's Go client for
//!   connection ageing.
//!
//! The binaries under test are this build's (found beside the running test
//! in the target directory: [`common::built_binary`]), or the ones
//! `KRM_FN_RUNNER_BIN` and `KRM_FN_WRAPPER_BIN` name.

pub mod common;
pub mod k8s_support;
pub mod kubelet;
pub mod node_support;
pub mod otel_support;
pub mod packages;
pub mod porch_support;
pub mod registry_support;
pub mod replicas_support;
pub mod service_support;
