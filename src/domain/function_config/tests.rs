use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::domain::codec;
use crate::domain::image::DEFAULT_IMAGE_PREFIX;
use crate::domain::pod_cache::{FunctionSettings, PodCachePolicy};

const CATALOG: &str = "ghcr.io/kptdev/krm-functions-catalog";

fn object(name: &str, created: &str, spec: serde_json::Value) -> FunctionConfigObject {
    FunctionConfigObject {
        name: name.to_string(),
        generation: 1,
        created: created.to_string(),
        spec: FunctionConfigSpec::from_value(spec),
    }
}

/// Porch's default FunctionConfig objects (its
/// `23-function-configurations.yaml`, read from `KRM_FN_PORCH_DEPLOY`), or
/// `None` when that copy is not at hand (the test skips).
fn head_objects() -> Option<Vec<FunctionConfigObject>> {
    let text = crate::domain::porch_files::read("head/23-function-configurations.yaml")?;
    let objects = codec::from_yaml_documents::<serde_json::Value>(text.as_bytes())
        .unwrap()
        .into_iter()
        .map(|doc| {
            let name = doc["metadata"]["name"].as_str().unwrap().to_string();
            object(&name, "2026-01-01T00:00:00Z", doc["spec"].clone())
        })
        .collect();
    Some(objects)
}

fn store() -> FunctionConfigStore {
    FunctionConfigStore::new(Path::new("/fns"), DEFAULT_IMAGE_PREFIX)
}

/// A store holding Porch's default objects; `None` as [`head_objects`].
fn head_store() -> Option<FunctionConfigStore> {
    let mut s = store();
    s.replace_all(head_objects()?);
    Some(s)
}

fn bin(s: &FunctionConfigStore, image: &str) -> Option<String> {
    s.binary_for(image).map(|p| p.display().to_string())
}

#[test]
fn porchs_default_objects_all_apply() {
    let Some(s) = head_store() else { return };
    assert_eq!(s.len(), 19);
    for name in s.names() {
        assert_eq!(s.outcome(name), Some(Ok(())), "{name}");
    }
}

#[test]
fn binaries_serve_exactly_their_tags_under_their_prefixes() {
    let Some(s) = head_store() else { return };
    let want = Some("/fns/set-namespace".to_string());
    assert_eq!(bin(&s, &format!("{CATALOG}/set-namespace:v0.4.2")), want);
    // Short names resolve with the default prefix ("" in `prefixes`).
    assert_eq!(bin(&s, "set-namespace:v0.4.2"), want);
    // Only the binary's tags: the pod tag and other versions are not served.
    assert_eq!(bin(&s, &format!("{CATALOG}/set-namespace:v0.4.1")), None);
    assert_eq!(bin(&s, &format!("{CATALOG}/set-namespace:v0.4.5")), None);
    // No `latest` defaulting: an untagged image is `:latest`.
    assert_eq!(bin(&s, &format!("{CATALOG}/set-namespace")), None);
    // An object without binaryExecutor serves nothing in exec.
    assert_eq!(
        bin(&s, &format!("{CATALOG}/apply-replacements:v0.1.1")),
        None
    );
    assert_eq!(
        bin(&s, &format!("{CATALOG}/starlark:v0.5.2")).as_deref(),
        Some("/fns/starlark")
    );
    // Unknown functions.
    assert_eq!(bin(&s, &format!("{CATALOG}/no-such-fn:v1")), None);
    assert_eq!(bin(&s, ""), None);
}

#[test]
fn a_binary_executor_names_the_sandbox_layers_it_may_do_without() {
    let mut s = store();
    s.apply(object(
        "fetch",
        "2026-01-01T00:00:00Z",
        serde_json::json!({"image": "fetch", "binaryExecutor": {"tags": ["v1"], "path": "fetch",
            "sandbox": {"allow": ["network", "filesystem"]}}}),
    ));
    s.apply(object(
        "plain",
        "2026-01-01T00:00:00Z",
        serde_json::json!({"image": "plain", "binaryExecutor": {"tags": ["v1"], "path": "plain"}}),
    ));
    s.apply(object(
        "typo",
        "2026-01-01T00:00:00Z",
        serde_json::json!({"image": "typo", "binaryExecutor": {"tags": ["v1"], "path": "typo",
            "sandbox": {"allow": ["net"]}}}),
    ));
    s.apply(object(
        "venv",
        "2026-01-01T00:00:00Z",
        serde_json::json!({"image": "venv", "binaryExecutor": {"tags": ["v1"], "path": "venv",
            "sandbox": {"read": ["/opt/venv"], "write": ["/srv/out"]}}}),
    ));
    s.apply(object(
        "relative",
        "2026-01-01T00:00:00Z",
        serde_json::json!({"image": "relative", "binaryExecutor": {"tags": ["v1"], "path": "relative",
            "sandbox": {"read": ["opt"]}}}),
    ));
    let fetch = s.binary_entry("fetch:v1").unwrap();
    assert_eq!(fetch.sandbox.allow.names(), ["filesystem", "network"]);
    assert_eq!(
        s.binary_entry("plain:v1").unwrap().sandbox,
        SandboxGrant::default()
    );
    let venv = s.binary_entry("venv:v1").unwrap().sandbox;
    assert_eq!(venv.read, [std::path::PathBuf::from("/opt/venv")]);
    assert_eq!(venv.write, [std::path::PathBuf::from("/srv/out")]);
    assert!(s.binary_entry("relative:v1").is_none());
    let why = s.outcome("relative").unwrap().unwrap_err();
    assert!(
        why.contains("spec.binaryExecutor.sandbox.read[0]: \"opt\" is not an absolute path"),
        "{why}"
    );
    assert!(s.binary_entry("typo:v1").is_none());
    let why = s.outcome("typo").unwrap().unwrap_err();
    assert!(
        why.contains("spec.binaryExecutor.sandbox.allow: unknown sandbox layer \"net\""),
        "{why}"
    );
}

#[test]
fn prefixes_match_the_whole_repository() {
    // Against Porch's default objects, where their copy is at hand.
    if let Some(s) = head_store() {
        for image in [
            // Porch's start-anchored regex would take these.
            "ghcr.io/kptdev/krm-functions-catalog-fork/set-namespace:v0.4.2",
            "ghcr.io/kptdev/krm-functions-catalog/nested/set-namespace:v0.4.2",
            // Neither a shorter repository.
            "ghcr.io/kptdev/set-namespace:v0.4.2",
            "example.com/set-namespace:v0.4.2",
        ] {
            assert_eq!(bin(&s, image), None, "{image}");
        }
    }
    // A trailing slash in a prefix is the same repository.
    let mut s = store();
    s.apply(object(
        "f",
        "t",
        serde_json::json!({"image": "f", "prefixes": ["ghcr.io/foo/"], "binaryExecutor": {"tags": ["v1"], "path": "f"}}),
    ));
    assert_eq!(bin(&s, "ghcr.io/foo/f:v1").as_deref(), Some("/fns/f"));
    assert_eq!(bin(&s, "ghcr.io/foobar/f:v1"), None);
    assert_eq!(bin(&s, "ghcr.io/foo/bar/f:v1"), None);
}

#[test]
fn the_empty_prefix_is_the_default_prefix() {
    let mut s = FunctionConfigStore::new(Path::new("/fns"), "registry.example/fns/");
    s.apply(object(
        "kubeconform",
        "t",
        serde_json::json!({"image": "kubeconform", "prefixes": [""], "binaryExecutor": {"tags": ["v1"], "path": "/opt/kc"}}),
    ));
    assert_eq!(
        bin(&s, "registry.example/fns/kubeconform:v1").as_deref(),
        Some("/opt/kc"),
        "absolute paths are kept"
    );
    assert_eq!(bin(&s, "kubeconform:v1").as_deref(), Some("/opt/kc"));
    assert_eq!(bin(&s, &format!("{CATALOG}/kubeconform:v1")), None);
    // No prefixes at all also means the default prefix.
    s.apply(object(
        "other",
        "t",
        serde_json::json!({"image": "other", "binaryExecutor": {"tags": ["v1"], "path": "other"}}),
    ));
    assert_eq!(bin(&s, "other:v1").as_deref(), Some("/fns/other"));
}

#[test]
fn a_repository_in_spec_image_is_one_more_prefix() {
    let mut s = store();
    s.apply(object(
        "mine",
        "t",
        serde_json::json!({"image": "example.com/team/mine", "binaryExecutor": {"tags": ["v2"], "path": "mine"}}),
    ));
    assert_eq!(s.outcome("mine"), Some(Ok(())));
    assert_eq!(
        bin(&s, "example.com/team/mine:v2").as_deref(),
        Some("/fns/mine")
    );
    assert_eq!(bin(&s, "mine:v2"), None, "not under the default prefix");
}

#[test]
fn digests_are_tags_too() {
    let digest = format!("sha256:{}", "a".repeat(64));
    let mut s = store();
    s.apply(object(
        "f",
        "t",
        serde_json::json!({"image": "f", "prefixes": [""], "binaryExecutor": {"tags": [digest], "path": "f"}}),
    ));
    assert_eq!(
        bin(&s, &format!("{CATALOG}/f@{digest}")).as_deref(),
        Some("/fns/f")
    );
    assert_eq!(
        bin(&s, &format!("{CATALOG}/f:v9@{digest}")).as_deref(),
        Some("/fns/f")
    );
    assert_eq!(bin(&s, &format!("{CATALOG}/f:v9")), None);
}

// Porch §9.8: the store holds the object; a binary lookup of
// set-image:v0.1.4 finds /functions/set-image; a deleted object is removed.
#[test]
fn porch_reconciler_case() {
    let mut s = FunctionConfigStore::new(Path::new("/functions"), DEFAULT_IMAGE_PREFIX);
    s.apply(object(
        "set-image",
        "t",
        serde_json::json!({"image": "set-image", "prefixes": [""], "binaryExecutor": {"tags": ["v0.1.4"], "path": "set-image"}}),
    ));
    assert_eq!(
        bin(&s, &format!("{CATALOG}/set-image:v0.1.4")).as_deref(),
        Some("/functions/set-image")
    );
    assert!(s.remove("set-image"));
    assert_eq!(bin(&s, &format!("{CATALOG}/set-image:v0.1.4")), None);
    assert_eq!(s.outcome("set-image"), None);
    assert!(!s.remove("set-image"));
}

#[test]
fn pod_settings_follow_pod_executor_tags() {
    let mut s = store();
    s.apply(object(
        "f",
        "t",
        serde_json::json!({"image": "f", "prefixes": [""], "podExecutor": {
            "tags": ["v1"], "timeToLive": "1h0m0s", "maxParallelExecutions": 3, "preferredMaxQueueLength": 0,
            "templateOverrides": {"serviceAccountName": "fn-sa", "container": {"env": [{"name": "A", "value": "1"}]}},
        }}),
    ));
    let e = s
        .pod_entry(&format!("{CATALOG}/f:v1"))
        .expect("v1 is configured");
    assert_eq!(e.name, format!("{CATALOG}/f:v1"));
    assert_eq!(e.ttl, Some(Duration::from_secs(3600)));
    assert_eq!((e.max_parallel_pods, e.max_waitlist), (Some(3), None));
    assert_eq!(e.source.as_deref(), Some("FunctionConfig f"));
    let o = e.overrides.expect("overrides");
    assert_eq!(o.service_account_name.as_deref(), Some("fn-sa"));
    assert_eq!(o.container.env.as_ref().unwrap()[0].name, "A");
    assert_eq!(s.pod_entry(&format!("{CATALOG}/f:v2")), None, "other tags");
    // No tags: every tag.
    s.apply(object(
        "f",
        "t",
        serde_json::json!({"image": "f", "prefixes": [""], "podExecutor": {"timeToLive": "30m"}}),
    ));
    assert!(s.pod_entry(&format!("{CATALOG}/f:v2")).is_some());
    assert_eq!(s.shortest_ttl(), Some(Duration::from_secs(1800)));

    let policy = PodCachePolicy::new(FunctionSettings::default(), "r1")
        .unwrap()
        .with_settings_source(Arc::new(s));
    let settings = policy.settings_for(&format!("{CATALOG}/f:v7"));
    assert_eq!(settings.ttl, Duration::from_secs(1800));
    assert_eq!(settings.source.as_deref(), Some("FunctionConfig f"));
    assert_eq!(
        policy.settings_for("example.com/f:v7"),
        FunctionSettings::default(),
        "unconfigured images get the globals"
    );
}

// Warm pools in the FunctionConfig generation: `podExecutor.minReady` and
// `maxPods` (our extension) reach the function's settings.
#[test]
fn pod_executor_sets_the_warm_pool() {
    let mut s = store();
    s.apply(object(
        "f",
        "t",
        serde_json::json!({"image": "f", "prefixes": [""], "podExecutor": {
            "tags": ["v1"], "minReady": 2, "maxPods": 5,
        }}),
    ));
    let image = format!("{CATALOG}/f:v1");
    let e = s.pod_entry(&image).expect("v1 is configured");
    assert_eq!((e.min_ready, e.max_pods), (Some(2), Some(5)));
    let policy = PodCachePolicy::new(FunctionSettings::default(), "r1")
        .unwrap()
        .with_settings_source(Arc::new(s));
    let pool = policy.settings_for(&image).pool().expect("a pool");
    assert_eq!((pool.min, pool.max), (2, 5));
    assert_eq!(policy.min_ready_images(), vec![image]);
}

#[test]
fn invalid_objects_say_why_and_configure_nothing() {
    let mut s = store();
    let cases = [
        (
            serde_json::json!({"image": "f:v1", "binaryExecutor": {"tags": ["v1"], "path": "f"}}),
            "has a tag or digest",
        ),
        (
            serde_json::json!({"image": "", "binaryExecutor": {"tags": ["v1"], "path": "f"}}),
            "spec.image is empty",
        ),
        (
            serde_json::json!({"image": "f", "binaryExecutor": {"tags": [], "path": "f"}}),
            "binaryExecutor.tags is empty",
        ),
        (
            serde_json::json!({"image": "f", "binaryExecutor": {"tags": ["v1"], "path": " "}}),
            "binaryExecutor.path is empty",
        ),
        (
            serde_json::json!({"image": "f", "podExecutor": {"timeToLive": "soon"}}),
            "timeToLive \"soon\" is not a duration",
        ),
        (
            serde_json::json!({"image": "f", "podExecutor": {"maxParallelExecutions": -1}}),
            "maxParallelExecutions is -1",
        ),
        (
            serde_json::json!({"image": "f", "podExecutor": {"preferredMaxQueueLength": -2}}),
            "preferredMaxQueueLength is -2",
        ),
        (
            serde_json::json!({"image": "f", "podExecutor": {"minReady": -1}}),
            "spec.podExecutor.minReady is -1",
        ),
        (
            serde_json::json!({"image": "f", "podExecutor": {"minReady": "two"}}),
            "spec.podExecutor.minReady is \"two\", a string: write a whole number (such as 2)",
        ),
        (
            serde_json::json!({"image": "f", "podExecutor": {"minReady": 1.5}}),
            "spec.podExecutor.minReady is 1.5, not a whole number: write a whole number (such as 2)",
        ),
        (
            serde_json::json!({"image": "f", "podExecutor": {"maxPods": [2]}}),
            "spec.podExecutor.maxPods is [2], a list: write a whole number",
        ),
        (
            serde_json::json!({"image": "f", "podExecutor": {"minReady": 3, "maxPods": 2}}),
            "spec.podExecutor.minReady 3 is more than spec.podExecutor.maxPods 2",
        ),
        (
            serde_json::json!({"image": "f", "podExecutor": {"maxPods": 2, "maxParallelExecutions": 2}}),
            "spec.podExecutor.maxPods and spec.podExecutor.maxParallelExecutions are both set",
        ),
        (
            serde_json::json!({"image": "f", "prefixes": "not-a-list"}),
            "invalid type",
        ),
    ];
    for (spec, want) in cases {
        s.apply(object("f", "t", spec.clone()));
        let err = s.outcome("f").unwrap().unwrap_err();
        assert!(err.contains(want), "{spec}: {err}");
        assert_eq!(bin(&s, "f:v1"), None, "{spec}");
        assert_eq!(s.pod_entry("f:v1"), None, "{spec}");
        assert!(s.warm_up_images().is_empty());
    }
}

#[test]
fn the_older_of_two_conflicting_objects_wins_until_it_is_deleted() {
    let spec = |path: &str| serde_json::json!({"image": "set-namespace", "prefixes": [""], "binaryExecutor": {"tags": ["v1"], "path": path}});
    let mut s = store();
    s.apply(object("newer", "2026-02-01T00:00:00Z", spec("b")));
    assert_eq!(s.outcome("newer"), Some(Ok(())));
    s.apply(object("older", "2026-01-01T00:00:00Z", spec("a")));
    assert_eq!(s.outcome("older"), Some(Ok(())));
    let err = s.outcome("newer").unwrap().unwrap_err();
    assert!(
        err.contains("FunctionConfig older already configures ghcr.io/kptdev/krm-functions-catalog/set-namespace"),
        "{err}"
    );
    assert_eq!(bin(&s, "set-namespace:v1").as_deref(), Some("/fns/a"));
    // Same creation time: the name decides.
    s.apply(object("aaa", "2026-01-01T00:00:00Z", spec("c")));
    assert_eq!(bin(&s, "set-namespace:v1").as_deref(), Some("/fns/c"));
    assert!(s.outcome("older").unwrap().is_err());
    s.remove("aaa");
    s.remove("older");
    assert_eq!(s.outcome("newer"), Some(Ok(())));
    assert_eq!(bin(&s, "set-namespace:v1").as_deref(), Some("/fns/b"));
    // Disjoint prefixes do not conflict.
    s.apply(object(
        "elsewhere",
        "2026-03-01T00:00:00Z",
        serde_json::json!({"image": "set-namespace", "prefixes": ["example.com/fns"], "binaryExecutor": {"tags": ["v1"], "path": "d"}}),
    ));
    assert_eq!(s.outcome("elsewhere"), Some(Ok(())));
    assert_eq!(
        bin(&s, "example.com/fns/set-namespace:v1").as_deref(),
        Some("/fns/d")
    );
}

#[test]
fn warm_up_takes_the_first_prefix_and_tag_of_each_pod_executor() {
    // Porch's default objects, where their copy is at hand.
    if let Some(s) = head_store() {
        let images = s.warm_up_images();
        assert_eq!(images.len(), 19, "{images:?}");
        assert!(images.contains(&format!("{CATALOG}/apply-setters:v0.2.2")));
        assert!(images.contains(&format!("{CATALOG}/kubeconform:v0.1.1")));
    }
    let mut s = store();
    s.apply(object(
        "f",
        "t",
        serde_json::json!({"image": "f", "prefixes": ["example.com/a", ""], "podExecutor": {"tags": ["v3", "v4"]}}),
    ));
    s.apply(object(
        "g",
        "t",
        serde_json::json!({"image": "g", "podExecutor": {"timeToLive": "5m"}}),
    ));
    assert_eq!(s.warm_up_images(), vec!["example.com/a/f:v3".to_string()]);
}

#[test]
fn a_fresh_listing_replaces_everything() {
    let Some(mut s) = head_store() else { return };
    s.replace_all(vec![object(
        "only",
        "t",
        serde_json::json!({"image": "only", "binaryExecutor": {"tags": ["v1"], "path": "only"}}),
    )]);
    assert_eq!(s.names().collect::<Vec<_>>(), ["only"]);
    assert_eq!(bin(&s, "set-namespace:v0.4.2"), None);
    assert_eq!(s.binaries(), vec![Path::new("/fns/only").to_path_buf()]);
}

/// An object over a small universe of names, prefixes and tags, so that
/// conflicts and matches are frequent.
fn arb_object() -> impl Strategy<Value = FunctionConfigObject> {
    (
        0..6usize,
        0..4usize,
        "[ab]",
        prop::collection::vec(
            prop::sample::select(vec!["", "r.io/a", "r.io/b", "r.io/a/"]),
            0..3,
        ),
        prop::collection::vec(prop::sample::select(vec!["v1", "v2", "latest"]), 1..3),
        any::<bool>(),
    )
        .prop_map(|(name, created, image, prefixes, tags, pod)| {
            let mut spec = serde_json::json!({"image": image, "prefixes": prefixes});
            if pod {
                spec["podExecutor"] =
                    serde_json::json!({"tags": tags, "maxParallelExecutions": name + 1});
            } else {
                spec["binaryExecutor"] =
                    serde_json::json!({"tags": tags, "path": format!("bin-{name}")});
            }
            object(&format!("o{name}"), &format!("2026-01-0{created}"), spec)
        })
}

fn probes() -> Vec<String> {
    let mut v = Vec::new();
    for repo in ["r.io/a", "r.io/b", "r.io/ab", "r.io/a/x", CATALOG] {
        for f in ["a", "b"] {
            for tag in ["v1", "v2", "latest"] {
                v.push(format!("{repo}/{f}:{tag}"));
            }
        }
    }
    v.push("a:v1".into());
    v.push("b".into());
    v
}

proptest! {
    /// A prefix matches exactly its own repository: never a longer name,
    /// never a sub-repository.
    #[test]
    fn prefix_matching_is_end_anchored(a in "[a-z]{1,6}", b in "[a-z]{1,6}", tail in "[a-z0-9-]{1,4}") {
        let mut s = store();
        s.apply(object("f", "t", serde_json::json!({
            "image": "fn", "prefixes": [format!("reg.io/{a}")], "binaryExecutor": {"tags": ["v1"], "path": "fn"},
        })));
        prop_assert_eq!(s.binary_for(&format!("reg.io/{b}/fn:v1")).is_some(), a == b);
        let longer = format!("reg.io/{a}{tail}/fn:v1");
        let nested = format!("reg.io/{a}/{tail}/fn:v1");
        prop_assert!(s.binary_for(&longer).is_none());
        prop_assert!(s.binary_for(&nested).is_none());
    }

    /// The store is a function of the set of objects: the order in which
    /// they arrive does not matter, and removing an object leaves the store
    /// exactly as if it had never been applied.
    #[test]
    fn answers_depend_only_on_the_current_objects(
        objects in prop::collection::vec(arb_object(), 0..8),
        seed in any::<u64>(),
        victim in 0..8usize,
    ) {
        // Later objects of the same name replace earlier ones.
        let mut latest = std::collections::BTreeMap::new();
        for o in &objects {
            latest.insert(o.name.clone(), o.clone());
        }
        let mut forward = store();
        for o in &objects {
            forward.apply(o.clone());
        }
        let mut shuffled: Vec<_> = latest.values().cloned().collect();
        let n = shuffled.len().max(1);
        shuffled.rotate_left((seed as usize) % n);
        if seed % 2 == 1 {
            shuffled.reverse();
        }
        let mut other = store();
        for o in shuffled {
            other.apply(o);
        }
        prop_assert_eq!(&forward, &other);

        // Duplicate guard: each probe is answered by at most one object, an applied one.
        for p in probes() {
            if let Some(path) = forward.binary_for(&p) {
                let name = path.file_name().unwrap().to_string_lossy().replace("bin-", "o");
                prop_assert_eq!(forward.outcome(&name), Some(Ok(())));
            }
        }

        // Deleting is forgetting.
        let names: Vec<String> = latest.keys().cloned().collect();
        if let Some(gone) = names.get(victim % names.len().max(1)) {
            let mut removed = forward.clone();
            prop_assert!(removed.remove(gone));
            let mut never = store();
            never.replace_all(latest.values().filter(|o| &o.name != gone).cloned());
            prop_assert_eq!(&removed, &never);
            for p in probes() {
                prop_assert_eq!(removed.binary_for(&p), never.binary_for(&p));
                prop_assert_eq!(removed.pod_entry(&p), never.pod_entry(&p));
            }
        }
        let mut empty = forward.clone();
        for n in &names {
            empty.remove(n);
        }
        for p in probes() {
            prop_assert_eq!(empty.binary_for(&p), None);
            prop_assert_eq!(empty.pod_entry(&p), None);
        }
        prop_assert!(empty.warm_up_images().is_empty());
    }
}

/// Porch's current default objects give constraints as tags
/// (`~0.4`, `~0.1 != v0.1.4`): a request's tag — the step's `Tag`, else the
/// image's own — is admitted when it satisfies one, or when it is a
/// constraint that one of them (a version) satisfies.
#[test]
fn executor_tags_are_semver_constraints() {
    let mut s = store();
    s.apply(object(
        "set-annotations",
        "2026-01-01T00:00:00Z",
        serde_json::json!({
            "image": "set-annotations",
            "prefixes": ["", CATALOG],
            "binaryExecutor": {"tags": ["~0.1 != v0.1.4", "v0.2.1"], "path": "set-annotations"},
        }),
    ));
    let full = format!("{CATALOG}/set-annotations");
    assert_eq!(
        bin(&s, &format!("{full}:v0.1.3")).as_deref(),
        Some("/fns/set-annotations")
    );
    assert_eq!(bin(&s, &format!("{full}:v0.1.4")), None);
    assert_eq!(
        bin(&s, &format!("{full}:v0.2.1")).as_deref(),
        Some("/fns/set-annotations")
    );
    assert_eq!(
        bin(&s, "set-annotations:v0.1.9").as_deref(),
        Some("/fns/set-annotations")
    );
    let tagged = |s: &FunctionConfigStore, image: &str, tag: &str| {
        s.binary_entry_for_tag(image, tag)
            .map(|b| b.path.display().to_string())
    };
    // A constraint meets a constraint only when spelled the same (Porch
    // compares no two ranges): `~0.1` is not admitted by `~0.1 != v0.1.4`.
    assert!(tagged(&s, &full, "~0.1").is_err());
    assert_eq!(
        tagged(&s, &full, "~0.1 != v0.1.4").as_deref(),
        Ok("/fns/set-annotations")
    );
    assert_eq!(
        tagged(&s, &full, "v0.1.2").as_deref(),
        Ok("/fns/set-annotations")
    );
    // A constraint admitted through the version entry it selects.
    assert_eq!(
        tagged(&s, &full, ">=0.2, <0.3").as_deref(),
        Ok("/fns/set-annotations")
    );
    // The step's tag wins over the image's own.
    assert!(tagged(&s, &format!("{full}:v0.1.3"), "v0.1.4").is_err());
    let e = tagged(&s, &full, "~0.3").unwrap_err();
    assert!(
        e.contains("\"~0.3\"") && e.contains("~0.1 != v0.1.4, v0.2.1"),
        "{e}"
    );
    // The prefix still has to be one of the object's.
    let e = tagged(&s, "example.com/other/set-annotations", "~0.1").unwrap_err();
    assert!(e.contains("no FunctionConfig configures"), "{e}");
    s.apply(object(
        "any",
        "2026-01-01T00:00:00Z",
        serde_json::json!({
            "image": "any",
            "binaryExecutor": {"tags": ["*"], "path": "any"},
        }),
    ));
    assert_eq!(tagged(&s, "any", "whatever").as_deref(), Ok("/fns/any"));
    assert_eq!(bin(&s, "any:main").as_deref(), Some("/fns/any"));
}
