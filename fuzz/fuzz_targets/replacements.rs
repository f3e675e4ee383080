//! The builtin apply-replacements' field-path reader and editor: the input
//! is objects' YAML texts and an `ApplyReplacements` functionConfig's
//! `replacements` list, separated by lines `---` (the last part is the
//! list). Nothing panics; a field path splits into parts; a changed object
//! reads back as YAML (the editor re-reads what it writes, and refuses
//! rather than writing what does not read back).
#![no_main]

use std::sync::Arc;

use krm_fn_runner::adapters::runtime::builtin::apply_replacements;
use krm_fn_runner::domain::codec::{self, tree::YamlDoc};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for line in text.lines() {
        assert!(!apply_replacements::split_field_path(line).is_empty());
    }
    let mut parts: Vec<&str> = text.split("\n---\n").collect();
    let list = parts.pop().unwrap_or_default();
    let Ok(replacements) = codec::from_yaml_str::<Value>(list) else {
        return;
    };
    let config = json!({
        "apiVersion": apply_replacements::CONFIG_API_VERSION,
        "kind": apply_replacements::CONFIG_KIND,
        "metadata": {"name": "r"},
        "replacements": replacements,
    });
    let mut docs = Vec::with_capacity(parts.len());
    for p in &parts {
        match YamlDoc::parse(format!("{p}\n")) {
            Ok(d) => docs.push(Arc::new(d)),
            Err(_) => return,
        }
    }
    if let Ok(applied) = apply_replacements::apply(docs, Some(&config)) {
        for doc in applied.texts.iter().flatten() {
            assert!(YamlDoc::parse(doc.text()).is_ok(), "a changed object reads back");
        }
    }
});
