//! The integration tests on beds: a real kube-apiserver with etcd, the test
//! kubelet, OCI registries, the OpenTelemetry Collector and Porch
//! (porch-server v1.5.3 and its clients), each built once per machine by the
//! scripts under `scripts/` and started on loopback by the `krm-fn-testbed`
//! crate. The real-node scenarios are `tests/pod_real.rs`, apart (their own
//! harness enters a network namespace before any thread starts).

mod admission;
mod deploy;
mod images;
mod k8s_function_config;
mod k8s_platform;
mod k8s_pod_evaluator;
mod k8s_testbed;
mod porch_e2e;
mod porch_suite;
mod registry;
mod replicas;
mod telemetry;
mod wrapper;
