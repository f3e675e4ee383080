//! The comment-preserving editor: the input is an original document and a
//! merge patch (JSON merge-patch rules: `null` removes a key) separated by a
//! line `---`. Whenever `patch_document` returns an edited text, that text
//! parses to exactly the target value.
#![no_main]

use krm_fn_runner::domain::codec::{self, preserve};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (original, patch) = text.split_once("\n---\n").unwrap_or((text, "{}"));
    let Ok(from) = codec::from_yaml_str::<Value>(original) else {
        return;
    };
    let Ok(patch) = codec::from_yaml_str::<Value>(patch) else {
        return;
    };
    let mut to = from.clone();
    merge(&mut to, &patch);
    if let Ok(edited) = preserve::patch_document(original, &from, &to) {
        let reread: Value = codec::from_yaml_str(&edited).expect("an edited document parses");
        assert_eq!(reread, to, "edited text:\n{edited}");
    }
});
