//! Kptfile parsing: never panics; a parsed Kptfile's pipeline can be read.
#![no_main]

use krm_fn_runner::domain::render::kptfile::Kptfile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(kptfile) = Kptfile::parse(data) {
        let _ = kptfile.pipeline();
        let _ = kptfile.bfs_rendering();
    }
});
