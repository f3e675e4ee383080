//! ResourceList parsing: never panics, stays within the parse budget, and
//! whatever parses also passes the cheaper validation and survives a
//! write and re-read unchanged. The identity read of one document (what a
//! render's output checks keep of a validator's objects) accepts what the
//! value read accepts and keeps its `apiVersion`, `kind` and `metadata`.
#![no_main]

use krm_fn_runner::domain::codec::tree::{parse_identity, parse_value};
use krm_fn_runner::domain::resource_list::ResourceList;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let full = parse_value(text);
        let identity = parse_identity(text);
        assert_eq!(full.is_ok(), identity.is_ok(), "identity read disagrees on:\n{text}");
        if let (Ok(full), Ok(identity)) = (full, identity) {
            match (full.as_object(), identity.as_object()) {
                (Some(f), Some(i)) => {
                    assert!(f.keys().eq(i.keys()), "identity read changed the keys");
                    for k in ["apiVersion", "kind", "metadata"] {
                        assert_eq!(f.get(k), i.get(k), "identity read changed {k}");
                    }
                }
                _ => assert_eq!(full, identity, "a root that is not a mapping is read whole"),
            }
        }
    }
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
