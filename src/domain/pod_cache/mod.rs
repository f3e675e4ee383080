//! The pod cache: which function pod serves a request, when to start
//! another, who waits, when a pod is reclaimed — as a sans-IO state machine.
//!
//! Porch's pod evaluator mixes these decisions with Kubernetes calls in one
//! event loop; its bug history (spec §10 items 4–7, 11, 25–29, 33) comes from
//! that. Here the decisions live in [`PodCache`], which follows the
//! quinn-proto model: the driver feeds it [`Input`] values, each with the
//! current time ([`UnixTime`]), through [`PodCache::handle`], and drains the
//! resulting [`Command`]s with [`PodCache::poll_command`]. The machine never
//! waits, never reads a clock and never touches the network, so the property
//! tests and the policy simulator run it on virtual time.
//!
//! The rest of the module is the surrounding pure contract:
//! - [`config`]: per-function settings (TTL, max waitlist, max parallel pods)
//!   with global defaults, and Porch's `pod-cache-config.yaml` list format;
//! - [`naming`]: collision-free pod names within Kubernetes' 63-character limit;
//! - [`template`]: the pod-template contract (validate, build pod and
//!   service, inline defaults, read observed pods) over k8s-openapi types.
//!
//! Shared truth between runner replicas is kept on the pods themselves:
//! label [`IMAGE_LABEL`] marks our pods, annotation [`TEMPLATE_VERSION_ANNOTATION`]
//! records the template they were built from and [`RECLAIM_AFTER_ANNOTATION`]
//! holds the time (Unix seconds) after which any replica may delete the pod.

pub mod config;
mod io;
mod machine;
pub mod naming;
pub mod template;
mod time;

pub use config::{
    FunctionSettings, PodCacheConfig, PodCacheConfigEntry, PodCachePolicy, PolicyError,
};
pub use io::{
    Assignment, Command, CreateFailure, DeleteFailure, DeletePrecondition, DeleteReason,
    ErrorClass, Input, Listing, ListingId, ObservedPhase, ObservedPod, ObservedService,
    PersistFailure, PodCacheError, PodCreation, RequestId, SlotId, SlotState, SlotView,
};
pub use machine::{PodCache, reuse_margin};
pub use time::UnixTime;

/// Label on every function pod (and the selector of its service); its value
/// is the pod's name, which is also the service name. Pods without it are
/// never touched by the pod cache. Porch: `fn.kpt.dev/image` = pod ID.
pub const IMAGE_LABEL: &str = "fn.kpt.dev/image";

/// Annotation holding the version of the pod template a pod was built from
/// (the template ConfigMap's `resourceVersion`, or [`INLINE_TEMPLATE_VERSION`]).
pub const TEMPLATE_VERSION_ANNOTATION: &str = "fn.kpt.dev/template-version";

/// Annotation holding the version of the per-function settings a pod was
/// built with ([`FunctionSettings::pod_version`]): a hash of its
/// FunctionConfig's template overrides (or its pod-cache config
/// resources). Absent for pods built with the global settings. Like the
/// template version, it decides whether a pod may be adopted.
pub const SETTINGS_VERSION_ANNOTATION: &str = "fn.kpt.dev/settings-version";

/// Annotation holding the pod's expiry as decimal Unix seconds. Every replica
/// extends it on use and garbage-collects the pod once it has passed (Porch
/// Gen A, as the published docs describe).
pub const RECLAIM_AFTER_ANNOTATION: &str = "fn.kpt.dev/reclaim-after";

/// Annotation identifying the creation that made a pod:
/// `<instance>-<slot>`, unique per process start and slot
/// ([`PodCreation::creation`]). A creation answered with AlreadyExists
/// takes the existing pod as its own only if it carries this exact value.
pub const CREATION_ANNOTATION: &str = "fn.kpt.dev/creation";

/// Template version of the built-in (inline) pod template (Porch Gen A/B).
pub const INLINE_TEMPLATE_VERSION: &str = "inline-v1";

/// How often a starting pod's wrapper server is asked for its health
/// after [`Command::ProbeWrapper`] until it answers (100 ms): the pod
/// driver's probe and the simulator's model of it both use this one value.
/// Not Porch's: Porch waits for the kubelet's readiness probe instead.
pub const WRAPPER_PROBE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// Port the wrapper server listens on inside every function pod, and the
/// port of the pod's ClusterIP service.
pub const WRAPPER_PORT: u16 = 9446;

/// Name of the container that runs the wrapper server and the function
/// (pod-template contract, point 1).
pub const FUNCTION_CONTAINER: &str = "function";

#[cfg(test)]
mod tests;
