//! kpt's and Porch's package-context generator (`builtins/gen-pkg-context`;
//! `porch-function-runner.md` §8.4, `krm-functions.md` §3.11).
//!
//! Every existing ConfigMap `kptfile.kpt.dev` is dropped. For the root
//! Kptfile only (path annotation exactly `Kptfile`) a ConfigMap
//! `kptfile.kpt.dev` is appended: local-config, path `package-context.yaml`
//! next to the Kptfile, `data.name` = the Kptfile's `metadata.name`, plus
//! `data.package-path` when a package path is configured; with an info result
//! `generated package context` naming the file.

use serde_json::{Value, json};

use super::{group_version, str_at};
use crate::domain::render::annotations::{self as ann};
use crate::domain::render::porch::{PACKAGE_CONTEXT_FILE, PACKAGE_CONTEXT_NAME};
use crate::domain::resource_list::{FileRef, ResourceList, ResultItem, Severity};

/// Replaces package-context ConfigMaps in `rl.items` by one generated from
/// the root Kptfile (see the module documentation).
pub fn generate(rl: &mut ResourceList, package_path: Option<&str>) {
    let mut kept = Vec::with_capacity(rl.items.len() + 1);
    let mut contexts = Vec::new();
    for item in std::mem::take(&mut rl.items) {
        let (group, version) = group_version(str_at(&item, &["apiVersion"]));
        let kind = str_at(&item, &["kind"]);
        if (group, version, kind) == ("", "v1", "ConfigMap")
            && str_at(&item, &["metadata", "name"]) == PACKAGE_CONTEXT_NAME
        {
            continue;
        }
        if (group, version, kind) == ("kpt.dev", "v1", "Kptfile")
            && ann::path(&item).as_deref() == Some("Kptfile")
        {
            let mut data = serde_json::Map::new();
            data.insert(
                "name".into(),
                Value::String(str_at(&item, &["metadata", "name"]).to_string()),
            );
            if let Some(p) = package_path.filter(|p| !p.is_empty()) {
                data.insert("package-path".into(), Value::String(p.to_string()));
            }
            contexts.push(json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": PACKAGE_CONTEXT_NAME,
                    "annotations": {
                        ann::LOCAL_CONFIG: "true",
                        ann::PATH: PACKAGE_CONTEXT_FILE,
                    }
                },
                "data": data,
            }));
        }
        kept.push(item);
    }
    for _ in &contexts {
        rl.results.push(ResultItem {
            message: "generated package context".into(),
            severity: Some(Severity::Info),
            file: Some(FileRef {
                path: PACKAGE_CONTEXT_FILE.into(),
                index: None,
            }),
            ..Default::default()
        });
    }
    kept.extend(contexts);
    rl.items = kept;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kptfile(name: &str, path: &str) -> Value {
        json!({"apiVersion": "kpt.dev/v1", "kind": "Kptfile", "metadata": {"name": name, "annotations": {ann::PATH: path}}})
    }

    #[test]
    fn generates_for_the_root_kptfile_and_drops_old_contexts() {
        let old = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kptfile.kpt.dev"}, "data": {"name": "stale"}});
        let mut rl = ResourceList::new(vec![
            old,
            kptfile("app", "Kptfile"),
            kptfile("db", "db/Kptfile"),
        ]);
        generate(&mut rl, Some("parent/app"));
        assert_eq!(rl.items.len(), 3);
        let ctx = &rl.items[2];
        assert_eq!(
            ctx["data"],
            json!({"name": "app", "package-path": "parent/app"})
        );
        assert_eq!(ann::get(ctx, ann::LOCAL_CONFIG).as_deref(), Some("true"));
        assert_eq!(ann::path(ctx).as_deref(), Some("package-context.yaml"));
        assert_eq!(rl.results.len(), 1);
        assert_eq!(rl.results[0].message, "generated package context");
        assert_eq!(
            rl.results[0].file.as_ref().unwrap().path,
            "package-context.yaml"
        );
    }

    #[test]
    fn nothing_for_subpackages_only() {
        let mut rl = ResourceList::new(vec![kptfile("db", "db/Kptfile")]);
        generate(&mut rl, None);
        assert_eq!(rl.items.len(), 1);
        assert!(rl.results.is_empty());
    }
}
