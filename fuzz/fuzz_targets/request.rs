//! The gRPC request path's input check (`ResourceList::validate`, what the
//! server runs on every request before any function): never panics, and
//! whatever it refuses, the full parse refuses too.
#![no_main]

use krm_fn_runner::domain::resource_list::ResourceList;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if ResourceList::validate(data).is_err() {
        assert!(
            ResourceList::parse(data).is_err(),
            "validate refused what parse accepts"
        );
    }
});
