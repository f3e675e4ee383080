//! Local exec: running function binaries as child processes.

pub mod evaluator;
pub mod process;
mod reap;
mod resident;
pub mod sandbox;
pub mod slots;
pub mod wrapper;

pub use evaluator::{ExecEvaluator, ExecSettings};
pub use sandbox::{Sandbox, SandboxAllow, SandboxGrant};
pub use slots::FunctionSlots;
pub use wrapper::WrapperEvaluator;
