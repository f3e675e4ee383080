//! Ports: the traits the domain and the drivers need from the world.
//!
//! Adapters (`crate::adapters`) implement them; the domain only ever sees the
//! traits.

mod evaluator;

pub use evaluator::FunctionEvaluator;
#[cfg(test)]
pub use evaluator::MockFunctionEvaluator;
