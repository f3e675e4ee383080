//! `krm-fn-supervisor`: supervises the function processes of krm-fn-runner
//! and its wrapper server; installed next to them. The program is the
//! library's `supervisor` module (`src/supervisor/mod.rs`, which says what
//! it does and how the runner starts it); this file only hands it the
//! command line.
//!
//! `no_main`: the C runtime calls [`main`] directly, skipping the Rust
//! runtime's start-up (which would, among other things, set SIGPIPE to be
//! ignored, a disposition the function would inherit).

#![no_main]

use std::ffi::{c_char, c_int};

/// The program's entry point, called by the C runtime.
///
/// # Safety
/// `argv` holds `argc` valid C strings followed by a null pointer, as the
/// C runtime passes them.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn main(argc: c_int, argv: *const *const c_char) -> c_int {
    // SAFETY: the C runtime's arguments, at the start of the process.
    unsafe { krm_fn_runner::supervisor::main(argc, argv) }
}
