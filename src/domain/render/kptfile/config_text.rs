//! The `configMap` values of a Kptfile's pipeline steps as the Kptfile's
//! text writes them.
//!
//! kpt decodes a step's `configMap` into a Go `map[string]string` with
//! yaml.v3, which gives a plain scalar's text as written: `1.50`, `0x1F`,
//! `0o17`, `007`, `1e3` reach the function as those strings (functionConfig
//! data values are strings). A parsed Kptfile only has typed values (`1.5`,
//! `31`, `15`, `7.0`, `1000.0`), so the render takes the text from the
//! Kptfile's document when it has it.

use crate::domain::codec::tree::{Entry, Kind, Node, Style, YamlDoc, resolve_plain};

use super::{Function, Pipeline};

impl Pipeline {
    /// Replaces each step's `configMap` values by the text `doc` (the
    /// Kptfile this pipeline was read from) writes them with, where that
    /// text is a one-line plain scalar: as written, or empty for a null
    /// (`~`, `null`), as kpt's yaml.v3 decodes them into strings. Quoted
    /// and block scalars, tagged values and multi-line plain scalars keep
    /// the value read (their decoded text). Keys stay in the Kptfile's
    /// order; a step or key `doc` does not have is left as it is.
    pub fn take_config_map_texts(&mut self, doc: &YamlDoc) {
        let Some(pipeline) = doc.root().and_then(|r| entry(r, "pipeline")) else {
            return;
        };
        for (name, steps) in [
            ("mutators", &mut self.mutators),
            ("validators", &mut self.validators),
        ] {
            let Some(Kind::Seq { items, .. }) = entry(pipeline, name).map(|n| &n.kind) else {
                continue;
            };
            for (step, item) in steps.iter_mut().zip(items) {
                if let Some(config) = entry(&item.node, "configMap") {
                    take_texts(step, doc, config);
                }
            }
        }
    }
}

/// The value node of mapping `node`'s entry `name`.
fn entry<'a>(node: &'a Node, name: &str) -> Option<&'a Node> {
    match &node.kind {
        Kind::Map { entries, .. } => entries
            .iter()
            .find(|e: &&Entry| e.name == name)
            .map(|e| &e.value),
        _ => None,
    }
}

/// Sets `step`'s `configMap` values from the entries of `config`.
fn take_texts(step: &mut Function, doc: &YamlDoc, config: &Node) {
    let Kind::Map { entries, .. } = &config.kind else {
        return;
    };
    for (key, value) in &mut step.config_map {
        let text = entries
            .iter()
            .find(|e| &e.name == key)
            .and_then(|e| plain_text(doc, &e.value));
        if let Some(text) = text {
            *value = text;
        }
    }
}

/// yaml.v3's string for a one-line plain scalar without properties.
fn plain_text(doc: &YamlDoc, node: &Node) -> Option<String> {
    if node.props {
        return None;
    }
    match node.kind {
        Kind::Scalar {
            style: Style::Plain,
            empty: true,
        } => Some(String::new()),
        Kind::Scalar {
            style: Style::Plain,
            empty: false,
        } => {
            let text = doc.slice(node.start..node.end);
            if text.contains('\n') {
                None
            } else if resolve_plain(text).is_null() {
                Some(String::new())
            } else {
                Some(text.to_string())
            }
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::render::kptfile::Kptfile;

    fn pairs(p: &[(String, String)]) -> Vec<(&str, &str)> {
        p.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
    }

    #[test]
    fn config_map_values_are_the_text_as_written_in_order() {
        let text = "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: a\npipeline:\n  mutators:\n    - image: x\n      configMap:\n        zeta: 1.50\n        alpha: 0o17\n        mid: 0x1F\n        b: yes\n        c: ~\n        d: \"quoted\"\n        e: 1e3\n        f: 'single'\n        g: 007\n        h: .inf\n        i:\n        j: !!str 012\n  validators:\n    - image: y\n      configMap: {n: 1.0, m: true}\n";
        let kptfile = Kptfile::parse(text.as_bytes()).unwrap();
        let mut pipeline = kptfile.pipeline();
        assert_eq!(pairs(&pipeline.mutators[0].config_map)[0], ("zeta", "1.5"));
        pipeline.take_config_map_texts(&YamlDoc::parse(text).unwrap());
        assert_eq!(
            pairs(&pipeline.mutators[0].config_map),
            [
                ("zeta", "1.50"),
                ("alpha", "0o17"),
                ("mid", "0x1F"),
                ("b", "yes"),
                ("c", ""),
                ("d", "quoted"),
                ("e", "1e3"),
                ("f", "single"),
                ("g", "007"),
                ("h", ".inf"),
                ("i", ""),
                ("j", "012"),
            ]
        );
        assert_eq!(
            pairs(&pipeline.validators[0].config_map),
            [("n", "1.0"), ("m", "true")]
        );
    }
}
