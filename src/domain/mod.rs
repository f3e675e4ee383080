//! The pure core: ResourceLists and their YAML codec, images and tag
//! constraints, evaluation errors, the evaluator chain, the render pipeline,
//! the pod-cache state machine and its TTL/GC policy, pod-template
//! contract validation, the sandbox's rules, the simulation model and the
//! configuration models.
//!
//! Nothing here performs I/O, reads a clock or depends on an async runtime;
//! it depends only on the port traits in [`crate::ports`].

pub mod admission;
pub mod chain;
pub mod codec;
pub mod connection_age;
pub mod evaluation;
pub mod exec_config;
#[cfg(feature = "pod-cache")]
pub mod function_config;
pub mod image;
#[cfg(feature = "pod-cache")]
pub mod pod_cache;
#[cfg(all(test, feature = "pod-cache"))]
pub(crate) mod porch_files;
pub mod registry;
pub mod render;
pub mod resource_list;
pub mod sandbox;
#[cfg(feature = "pod-cache")]
pub mod simulation;
pub mod start_limit;
pub mod tag_selection;
pub mod version_constraint;
