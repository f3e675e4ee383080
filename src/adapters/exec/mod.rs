//! Local exec: running function binaries as child processes.

pub mod evaluator;
pub mod process;
pub mod wrapper;

pub use evaluator::{ExecEvaluator, ExecSettings};
pub use wrapper::WrapperEvaluator;
