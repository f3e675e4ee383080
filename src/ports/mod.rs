//! Ports: the traits the domain and the drivers need from the world.
//!
//! Adapters (`crate::adapters`) implement them; the domain only ever sees the
//! traits.

#[cfg(feature = "pod-cache")]
mod clock;
mod evaluator;
mod function_runtime;
mod image_inspector;
#[cfg(feature = "pod-cache")]
mod pod_platform;
mod tag_lister;

#[cfg(feature = "pod-cache")]
pub use clock::{Clock, SystemClock};
pub use evaluator::FunctionEvaluator;
#[cfg(test)]
pub use evaluator::MockFunctionEvaluator;
#[cfg(test)]
pub use function_runtime::MockFunctionRuntime;
pub(crate) use function_runtime::forward_capabilities;
pub use function_runtime::{FunctionCall, FunctionOutput, FunctionRuntime, FunctionTarget};
#[cfg(test)]
pub use image_inspector::MockImageInspector;
pub use image_inspector::{ImageInspectError, ImageInspector, ImageMetadata};
#[cfg(all(test, feature = "pod-cache"))]
pub use pod_platform::MockPodPlatform;
#[cfg(feature = "pod-cache")]
pub use pod_platform::{
    ConfigMapData, EndpointEvent, EndpointEventStream, PlatformError, PodEvent, PodEventStream,
    PodPlatform, PodWarning, PodWarningStream, ServiceEndpoint, delete_outcome, listing_outcome,
};
#[cfg(test)]
pub use tag_lister::MockTagLister;
pub use tag_lister::TagLister;
