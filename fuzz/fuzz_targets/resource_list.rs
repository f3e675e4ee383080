//! ResourceList parsing: never panics, stays within the parse budget, and
//! whatever parses also passes the cheaper validation and survives a
//! write and re-read unchanged.
#![no_main]

use krm_fn_runner::domain::resource_list::ResourceList;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(list) = ResourceList::parse(data) else {
        return;
    };
    assert!(
        ResourceList::validate(data).is_ok(),
        "parse accepted what validate refuses"
    );
    let text = list.to_yaml().expect("a parsed ResourceList serialises");
    let again = ResourceList::parse(text.as_bytes()).expect("written ResourceList re-parses");
    assert_eq!(again.items, list.items);
    assert_eq!(again.function_config, list.function_config);
});
