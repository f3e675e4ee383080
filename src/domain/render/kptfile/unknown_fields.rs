//! The unknown-field check: the first key the Kptfile schema does not
//! have, named with the Go type kpt's strict decoder (yaml.v3 `KnownFields`)
//! reports, so the error reads like kpt's.

use serde_json::Value;

/// The first key (depth-first, in document order) that the Kptfile schema
/// does not have, with the Go type kpt would name.
pub(super) fn unknown_field(v: &Value) -> Option<(String, &'static str)> {
    type Child = fn(&str, &Value) -> Option<(String, &'static str)>;
    fn check(
        v: &Value,
        type_name: &'static str,
        known: &[&str],
        child: Child,
    ) -> Option<(String, &'static str)> {
        let map = v.as_object()?;
        for (k, val) in map {
            if !known.contains(&k.as_str()) {
                return Some((k.clone(), type_name));
            }
            if let Some(found) = child(k, val) {
                return Some(found);
            }
        }
        None
    }
    fn none(_: &str, _: &Value) -> Option<(String, &'static str)> {
        None
    }
    fn each(
        v: &Value,
        f: impl Fn(&Value) -> Option<(String, &'static str)>,
    ) -> Option<(String, &'static str)> {
        v.as_array()?.iter().find_map(f)
    }
    fn git(_: &str, v: &Value) -> Option<(String, &'static str)> {
        check(v, "v1.Git", &["repo", "directory", "ref", "commit"], none)
    }
    fn selector(v: &Value) -> Option<(String, &'static str)> {
        check(
            v,
            "v1.Selector",
            &[
                "apiVersion",
                "kind",
                "name",
                "namespace",
                "labels",
                "annotations",
            ],
            none,
        )
    }
    fn function(v: &Value) -> Option<(String, &'static str)> {
        check(
            v,
            "v1.Function",
            &[
                "image",
                "exec",
                "tag",
                "configPath",
                "configMap",
                "name",
                "selectors",
                "exclude",
            ],
            |k, v| match k {
                "selectors" | "exclude" => each(v, selector),
                _ => None,
            },
        )
    }
    check(
        v,
        "v1.KptFile",
        &[
            "apiVersion",
            "kind",
            "metadata",
            "upstream",
            "upstreamLock",
            "info",
            "pipeline",
            "inventory",
            "status",
        ],
        |k, v| match k {
            "metadata" => check(
                v,
                "yaml.ObjectMeta",
                &["name", "namespace", "labels", "annotations"],
                none,
            ),
            "upstream" => check(
                v,
                "v1.Upstream",
                &["type", "git", "updateStrategy"],
                |k, v| (k == "git").then(|| git(k, v)).flatten(),
            ),
            "upstreamLock" => check(v, "v1.UpstreamLock", &["type", "git", "generic"], |k, v| {
                (k == "git").then(|| git(k, v)).flatten()
            }),
            "info" => check(
                v,
                "v1.PackageInfo",
                &[
                    "site",
                    "emails",
                    "license",
                    "licenseFile",
                    "description",
                    "keywords",
                    "man",
                    "readinessGates",
                ],
                none,
            ),
            "pipeline" => check(v, "v1.Pipeline", &["mutators", "validators"], |_, v| {
                each(v, function)
            }),
            "inventory" => check(
                v,
                "v1.Inventory",
                &["namespace", "name", "inventoryID", "labels", "annotations"],
                none,
            ),
            _ => None,
        },
    )
}
