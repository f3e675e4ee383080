//! The hermetic integration tests: the real `krm-fn-runner` and
//! `wrapper-server` binaries, real catalog functions, kpt and clients not
//! written in Rust, on loopback and Unix sockets — no cluster, registry or
//! Collector (those are `tests/beds`). One module per subject; the beds'
//! helpers come from the `krm-fn-testbed` crate.
//!
//! With `--cfg krm_fn_render_only` (the render-only check of
//! `scripts/test.sh`, built `--no-default-features --features render`)
//! only [`api`] is compiled: the crate root's API without the gRPC,
//! Kubernetes and OCI crates.

mod api;
#[cfg(not(krm_fn_render_only))]
mod apply_replacements_vs_go;
#[cfg(not(krm_fn_render_only))]
mod apply_setters_vs_go;
#[cfg(not(krm_fn_render_only))]
mod builtin_catalog;
#[cfg(not(krm_fn_render_only))]
mod crypto_provider;
#[cfg(not(krm_fn_render_only))]
mod first_hour;
#[cfg(not(krm_fn_render_only))]
mod fixtures;
#[cfg(not(krm_fn_render_only))]
mod health_probe;
#[cfg(not(krm_fn_render_only))]
mod hostile;
#[cfg(not(krm_fn_render_only))]
mod pod_cache_props;
#[cfg(not(krm_fn_render_only))]
mod python_client;
#[cfg(not(krm_fn_render_only))]
mod readme;
#[cfg(not(krm_fn_render_only))]
mod render_examples;
#[cfg(not(krm_fn_render_only))]
mod render_kpt_fixtures;
#[cfg(not(krm_fn_render_only))]
mod render_runtimes;
#[cfg(not(krm_fn_render_only))]
mod render_sandbox;
#[cfg(not(krm_fn_render_only))]
mod render_vs_kpt;
#[cfg(not(krm_fn_render_only))]
mod sandbox;
#[cfg(not(krm_fn_render_only))]
mod service;
#[cfg(not(krm_fn_render_only))]
mod simulate;
#[cfg(not(krm_fn_render_only))]
mod step_timeout;
#[cfg(not(krm_fn_render_only))]
mod supervisor;
#[cfg(not(krm_fn_render_only))]
mod version_constraint_vs_go;
