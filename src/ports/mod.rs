//! Ports: the traits the domain and the drivers need from the world.
//!
//! Adapters (`crate::adapters`) implement them; the domain only ever sees the
//! traits.

mod clock;
mod evaluator;
mod function_runtime;
mod image_inspector;
mod pod_platform;
mod tag_lister;

pub use clock::{Clock, SystemClock};
pub use evaluator::FunctionEvaluator;
#[cfg(test)]
pub use evaluator::MockFunctionEvaluator;
#[cfg(test)]
pub use function_runtime::MockFunctionRuntime;
pub use function_runtime::{FunctionCall, FunctionOutput, FunctionRuntime, FunctionTarget};
#[cfg(test)]
pub use image_inspector::MockImageInspector;
pub use image_inspector::{ImageInspectError, ImageInspector, ImageMetadata};
#[cfg(test)]
pub use pod_platform::MockPodPlatform;
pub use pod_platform::{
    ConfigMapData, EndpointEvent, EndpointEventStream, PlatformError, PodEvent, PodEventStream,
    PodPlatform, ServiceEndpoint,
};
#[cfg(test)]
pub use tag_lister::MockTagLister;
pub use tag_lister::TagLister;
