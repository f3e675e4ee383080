//! The builtin apply-setters' setter-comment reader and editor: the input
//! is an object's YAML text and its setters (`name=value` lines, `\n` in a
//! value written as `\\n`) separated by a line `---`. Nothing panics; a
//! changed object reads back as YAML (the editor re-reads what it writes,
//! and refuses rather than writing what does not read back).
#![no_main]

use std::sync::Arc;

use krm_fn_runner::adapters::runtime::builtin::apply_setters::{self, Setter};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (object, setters) = text.split_once("\n---\n").unwrap_or((text, "a=b"));
    let setters: Vec<Setter> = setters
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(n, v)| Setter {
            name: n.to_string(),
            value: v.replace("\\n", "\n"),
        })
        .collect();
    let texts = [(Arc::<str>::from(format!("{object}\n")), "f.yaml".to_string())];
    if let Ok(applied) = apply_setters::apply(&texts, &setters) {
        assert!(!applied.results.is_empty(), "the Go function always writes a result");
        for doc in applied.texts.iter().flatten() {
            assert!(
                krm_fn_runner::domain::codec::tree::YamlDoc::parse(doc.text()).is_ok(),
                "a set object reads back"
            );
        }
    }
});
