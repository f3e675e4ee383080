//! Local exec: running function binaries as child processes.

pub mod evaluator;
pub mod process;

pub use evaluator::{ExecEvaluator, ExecSettings};
