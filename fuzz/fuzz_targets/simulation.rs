//! The simulator's inputs: request traces (CSV or JSON lines) and policy
//! files; never a panic, whatever the bytes.
#![no_main]

use krm_fn_runner::domain::simulation::SimPolicy;
use krm_fn_runner::domain::simulation::trace::parse_trace;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = parse_trace(text);
    }
    let _ = SimPolicy::parse(data, "fuzz.yaml");
});
