//! Local exec: running function binaries as child processes.

mod confine;
pub mod evaluator;
pub mod process;
mod reap;
mod resident;
pub mod slots;
pub mod wrapper;

pub use evaluator::{ExecEvaluator, ExecSettings};
pub use slots::FunctionSlots;
pub use wrapper::WrapperEvaluator;
