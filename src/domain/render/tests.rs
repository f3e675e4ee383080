//! Pipeline semantics against a fake runtime: order, copies for validators,
//! config resolution, selectors, hierarchy, failures, output checks and the
//! reported shapes.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::{Value, json};

use super::annotations::{self as ann};
use super::*;
use crate::domain::evaluation::{EvalError, ExitReason, FunctionFailure};
use crate::domain::resource_list::{ResourceList, ResultItem, Severity};
use crate::ports::{FunctionCall, FunctionOutput, FunctionRuntime, FunctionTarget};

type Handler = Box<dyn Fn(&FunctionCall) -> Result<ResourceList, EvalError> + Send + Sync>;

/// A runtime whose functions are closures; records every call.
#[derive(Default)]
struct Fake {
    handlers: HashMap<String, Handler>,
    calls: Mutex<Vec<FunctionCall>>,
}

impl Fake {
    fn with(
        mut self,
        name: &str,
        f: impl Fn(&FunctionCall) -> Result<ResourceList, EvalError> + Send + Sync + 'static,
    ) -> Self {
        self.handlers.insert(name.to_string(), Box::new(f));
        self
    }

    fn calls(&self) -> Vec<FunctionCall> {
        self.calls.lock().unwrap().clone()
    }

    fn names(&self) -> Vec<String> {
        self.calls()
            .iter()
            .map(|c| c.target.name().to_string())
            .collect()
    }
}

#[async_trait]
impl FunctionRuntime for Fake {
    async fn run(&self, call: FunctionCall) -> Result<FunctionOutput, EvalError> {
        self.calls.lock().unwrap().push(call.clone());
        match self.handlers.get(call.target.name()) {
            Some(h) => h(&call).map(|resource_list| FunctionOutput::new(resource_list, "")),
            None => Err(EvalError::not_found(call.target.name())),
        }
    }
}

/// Returns the input unchanged.
fn identity(call: &FunctionCall) -> Result<ResourceList, EvalError> {
    Ok(ResourceList::new(call.resource_list.items.clone()))
}

/// Adds label `key=value` to every item.
fn labeler(
    key: &'static str,
    value: &'static str,
) -> impl Fn(&FunctionCall) -> Result<ResourceList, EvalError> {
    move |call| {
        let mut items = call.resource_list.items.clone();
        for i in &mut items {
            i["metadata"]["labels"][key] = json!(value);
        }
        Ok(ResourceList::new(items))
    }
}

fn kptfile(dir: &str, name: &str, pipeline: Value) -> Value {
    let mut k = json!({"apiVersion": "kpt.dev/v1", "kind": "Kptfile", "metadata": {"name": name}});
    if !pipeline.is_null() {
        k["pipeline"] = pipeline;
    }
    let path = if dir.is_empty() {
        "Kptfile".to_string()
    } else {
        format!("{dir}/Kptfile")
    };
    ann::set_path(&mut k, &path);
    ann::set(&mut k, ann::INDEX, "0");
    ann::set(&mut k, ann::LEGACY_INDEX, "0");
    k
}

fn obj(kind: &str, name: &str, path: &str, index: usize) -> Value {
    let mut o = json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name}});
    ann::set_path(&mut o, path);
    ann::set(&mut o, ann::INDEX, index.to_string());
    ann::set(&mut o, ann::LEGACY_INDEX, index.to_string());
    o
}

fn names(items: &[Value]) -> Vec<String> {
    items.iter().map(|i| ann::name(i).to_string()).collect()
}

fn by_name<'a>(items: &'a [Value], name: &str) -> &'a Value {
    items
        .iter()
        .find(|i| ann::name(i) == name)
        .unwrap_or_else(|| panic!("{name} not in {:?}", names(items)))
}

async fn render(fake: &Fake, items: Vec<Value>) -> RenderOutcome {
    render_with(fake, items, RenderOptions::default()).await
}

async fn render_with(fake: &Fake, items: Vec<Value>, options: RenderOptions) -> RenderOutcome {
    let package = Package::from_flat(items).expect("package tree");
    Renderer::new(fake, options).render(package).await
}

fn failure(exit: i32, stderr: &'static str, message: &str) -> EvalError {
    let mut out = ResourceList::new(vec![]);
    out.results.push(ResultItem {
        message: message.into(),
        severity: Some(Severity::Error),
        ..Default::default()
    });
    EvalError::FunctionFailed(Box::new(FunctionFailure::new(
        "f",
        ExitReason::Code(exit),
        Bytes::from(out.to_yaml().unwrap()),
        Bytes::from_static(stderr.as_bytes()),
    )))
}

#[tokio::test]
async fn mutators_chain_and_validators_see_copies() {
    let fake = Fake::default()
        .with("example.com/m1:v1", labeler("a", "1"))
        .with("example.com/m2:v1", |call| {
            assert!(
                call.resource_list
                    .items
                    .iter()
                    .all(|i| i["metadata"]["labels"]["a"] == "1")
            );
            labeler("b", "2")(call)
        })
        .with("example.com/v1:v1", |call| {
            assert!(
                call.resource_list
                    .items
                    .iter()
                    .all(|i| i["metadata"]["labels"]["b"] == "2")
            );
            labeler("validator", "was-here")(call)
        });
    let pipeline = json!({
        "mutators": [{"image": "example.com/m1:v1"}, {"image": "example.com/m2:v1"}],
        "validators": [{"image": "example.com/v1:v1"}]
    });
    let out = render(
        &fake,
        vec![
            kptfile("", "root", pipeline),
            obj("ConfigMap", "cm", "cm.yaml", 0),
        ],
    )
    .await;
    assert!(out.is_ok(), "{:?}", out.error);
    assert_eq!(
        fake.names(),
        [
            "example.com/m1:v1",
            "example.com/m2:v1",
            "example.com/v1:v1"
        ]
    );
    let items = out.resources.unwrap();
    let cm = by_name(&items, "cm");
    assert_eq!(cm["metadata"]["labels"], json!({"a": "1", "b": "2"}));
    assert_eq!(out.executed, 3);
    assert_eq!(out.packages, 1);
    // Functions saw kyaml's id pair and kpt's package-path; none is left over.
    let first = &fake.calls()[0].resource_list.items[1];
    assert_eq!(ann::get(first, ann::ID).as_deref(), Some("2"));
    assert_eq!(ann::get(first, ann::LEGACY_ID).as_deref(), Some("2"));
    assert_eq!(ann::get(first, ann::PACKAGE_PATH).as_deref(), Some("."));
    for i in &items {
        for k in [
            ann::ID,
            ann::LEGACY_ID,
            ann::PACKAGE_PATH,
            ann::MIGRATION_ID,
        ] {
            assert!(ann::get(i, k).is_none(), "{k} left on {i}");
        }
    }
    assert_eq!(ann::path(cm).as_deref(), Some("cm.yaml"));
    assert_eq!(ann::get(cm, ann::LEGACY_PATH).as_deref(), Some("cm.yaml"));
}

#[tokio::test]
async fn function_config_from_config_map_and_config_path_re_read() {
    let fake = Fake::default()
        .with("example.com/edit-config:v1", |call| {
            let fc = call.resource_list.function_config.as_ref().unwrap();
            assert_eq!(
                fc,
                &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "function-input"}, "data": {"a": "x", "b": "3"}})
            );
            let keys: Vec<&String> = fc["data"].as_object().unwrap().keys().collect();
            assert_eq!(keys, ["b", "a"], "the Kptfile's key order");
            let mut items = call.resource_list.items.clone();
            for i in &mut items {
                if ann::name(i) == "settings" {
                    i["data"]["value"] = json!("changed");
                }
            }
            Ok(ResourceList::new(items))
        })
        .with("example.com/use-config:v1", |call| {
            let fc = call.resource_list.function_config.as_ref().unwrap();
            assert_eq!(fc["data"]["value"], "changed", "config re-read from memory");
            assert_eq!(ann::path(fc).as_deref(), Some("settings.yaml"));
            // The config object is also an ordinary item.
            assert!(call.resource_list.items.iter().any(|i| ann::name(i) == "settings"));
            identity(call)
        })
        .with("example.com/no-config:v1", |call| {
            assert!(call.resource_list.function_config.is_none());
            identity(call)
        });
    let pipeline = json!({
        "mutators": [
            {"image": "example.com/edit-config:v1", "configMap": {"b": "3", "a": "x"}},
            {"image": "example.com/use-config:v1", "configPath": "settings.yaml"},
        ],
        "validators": [
            {"image": "example.com/use-config:v1", "configPath": "./settings.yaml"},
            {"image": "example.com/no-config:v1"}
        ]
    });
    let mut settings = obj("ConfigMap", "settings", "settings.yaml", 0);
    settings["data"] = json!({"value": "original"});
    let out = render(&fake, vec![kptfile("", "root", pipeline), settings]).await;
    assert!(out.is_ok(), "{:?}", out.error);
    assert_eq!(fake.calls().len(), 4);
}

#[tokio::test]
async fn selectors_and_exclusions_merge_back() {
    let fake = Fake::default()
        .with("example.com/sel:v1", |call| {
            let items = &call.resource_list.items;
            assert_eq!(names(items), ["a"], "only selected, not excluded");
            assert_eq!(ann::get(&items[0], ann::RESOURCE_ID).as_deref(), Some("1"));
            let mut a = items[0].clone();
            a["data"] = json!({"touched": "yes"});
            let generated =
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "gen"}});
            Ok(ResourceList::new(vec![generated, a]))
        })
        .with("example.com/delete:v1", |_| Ok(ResourceList::new(vec![])));
    let pipeline = json!({"mutators": [
        {"image": "example.com/sel:v1", "selectors": [{"kind": "ConfigMap"}, {"name": "a"}], "exclude": [{"name": "c"}, {}]},
        {"image": "example.com/delete:v1", "selectors": [{"kind": "Service"}]},
    ]});
    let out = render(
        &fake,
        vec![
            kptfile("", "root", pipeline),
            obj("ConfigMap", "a", "r.yaml", 0),
            obj("Deployment", "b", "r.yaml", 1),
            obj("ConfigMap", "c", "r.yaml", 2),
            obj("Service", "s", "s.yaml", 0),
        ],
    )
    .await;
    assert!(out.is_ok(), "{:?}", out.error);
    let items = out.resources.unwrap();
    assert_eq!(
        names(&items),
        ["root", "a", "b", "c", "gen"],
        "selected replaced, s deleted, generated appended"
    );
    assert_eq!(by_name(&items, "a")["data"]["touched"], "yes");
    assert!(
        items
            .iter()
            .all(|i| ann::get(i, ann::RESOURCE_ID).is_none())
    );
    assert_eq!(
        ann::path(by_name(&items, "gen")).as_deref(),
        Some("secret_gen.yaml")
    );
    assert_eq!(out.steps[0].resource_count, Some(1));
    assert_eq!(out.steps[1].resource_count, Some(1));
}

fn tree(pipeline: impl Fn(&str) -> Value, bfs: bool) -> Vec<Value> {
    let mut root = kptfile("", "root", pipeline("root"));
    if bfs {
        root["metadata"]["annotations"][ann::BFS_RENDERING] = json!("true");
    }
    vec![
        root,
        obj("ConfigMap", "root-cm", "cm.yaml", 0),
        kptfile("b", "b", pipeline("b")),
        obj("ConfigMap", "b-cm", "b/cm.yaml", 0),
        kptfile("a", "a", pipeline("a")),
        obj("ConfigMap", "a-cm", "a/cm.yaml", 0),
        kptfile("a/x", "ax", pipeline("ax")),
        obj("ConfigMap", "ax-cm", "a/x/cm.yaml", 0),
    ]
}

fn recording_fake() -> Fake {
    let mut fake = Fake::default();
    for p in ["root", "a", "b", "ax"] {
        fake = fake.with(&format!("example.com/{p}:v1"), identity);
    }
    fake
}

fn pipeline_named(p: &str) -> Value {
    json!({"mutators": [{"image": format!("example.com/{p}:v1")}]})
}

#[tokio::test]
async fn depth_first_post_order_with_subpackage_objects_first() {
    let fake = recording_fake();
    let out = render(&fake, tree(pipeline_named, false)).await;
    assert!(out.is_ok(), "{:?}", out.error);
    assert_eq!(
        fake.names(),
        [
            "example.com/ax:v1",
            "example.com/a:v1",
            "example.com/b:v1",
            "example.com/root:v1"
        ]
    );
    let calls = fake.calls();
    assert_eq!(
        names(&calls[1].resource_list.items),
        ["ax", "ax-cm", "a", "a-cm"]
    );
    // kpt's order: each subpackage's output (sorted by path), then the
    // package's own objects.
    assert_eq!(
        names(&calls[3].resource_list.items),
        ["ax", "ax-cm", "a", "a-cm", "b", "b-cm", "root", "root-cm"]
    );
    // Paths stay package-relative inside the render; package-path tells the owner.
    let ax_cm = by_name(&calls[3].resource_list.items, "ax-cm");
    assert_eq!(ann::path(ax_cm).as_deref(), Some("cm.yaml"));
    assert_eq!(ann::get(ax_cm, ann::PACKAGE_PATH).as_deref(), Some("./a/x"));
    let items = out.resources.unwrap();
    assert_eq!(
        ann::path(by_name(&items, "ax-cm")).as_deref(),
        Some("a/x/cm.yaml")
    );
    assert_eq!(
        ann::path(by_name(&items, "ax")).as_deref(),
        Some("a/x/Kptfile")
    );
    assert_eq!(out.packages, 4);
}

#[tokio::test]
async fn breadth_first_top_down_with_scoped_visibility() {
    let fake = recording_fake();
    let out = render(&fake, tree(pipeline_named, true)).await;
    assert!(out.is_ok(), "{:?}", out.error);
    assert_eq!(
        fake.names(),
        [
            "example.com/root:v1",
            "example.com/a:v1",
            "example.com/b:v1",
            "example.com/ax:v1"
        ]
    );
    let calls = fake.calls();
    assert_eq!(
        names(&calls[0].resource_list.items),
        ["root", "root-cm", "a", "a-cm", "ax", "ax-cm", "b", "b-cm"]
    );
    assert_eq!(
        names(&calls[1].resource_list.items),
        ["a", "a-cm", "ax", "ax-cm"]
    );
    assert_eq!(names(&calls[2].resource_list.items), ["b", "b-cm"]);
    assert_eq!(names(&calls[3].resource_list.items), ["ax", "ax-cm"]);
    let items = out.resources.unwrap();
    assert_eq!(items.len(), 8);
    assert_eq!(
        ann::path(by_name(&items, "b-cm")).as_deref(),
        Some("b/cm.yaml")
    );
}

#[tokio::test]
async fn breadth_first_parent_changes_reach_subpackages() {
    let fake = Fake::default()
        .with("example.com/root:v1", labeler("from", "root"))
        .with("example.com/b:v1", |call| {
            assert!(
                call.resource_list
                    .items
                    .iter()
                    .all(|i| i["metadata"]["labels"]["from"] == "root")
            );
            identity(call)
        });
    let out = render(
        &fake,
        tree(
            |p| match p {
                "root" | "b" => pipeline_named(p),
                _ => Value::Null,
            },
            true,
        ),
    )
    .await;
    assert!(out.is_ok(), "{:?}", out.error);
    assert_eq!(fake.names().len(), 2);
}

#[tokio::test]
async fn first_failure_stops_everything() {
    let fake = Fake::default()
        .with("example.com/ax:v1", identity)
        .with("example.com/a:v1", |_| {
            Err(failure(2, "bad input\n", "replicas must be > 0"))
        })
        .with("example.com/after:v1", identity)
        .with("example.com/b:v1", identity)
        .with("example.com/root:v1", identity);
    let out = render(
        &fake,
        tree(
            |p| match p {
                "a" => json!({"mutators": [{"image": "example.com/a:v1"}, {"image": "example.com/after:v1"}]}),
                other => pipeline_named(other),
            },
            false,
        ),
    )
    .await;
    assert_eq!(fake.names(), ["example.com/ax:v1", "example.com/a:v1"]);
    let err = out.error.as_ref().unwrap();
    assert_eq!(
        err.to_string(),
        "pkg.render: pkg ./a:\n\tpipeline.run: already handled error"
    );
    assert!(err.is_function_failure());
    assert!(out.resources.is_none(), "nothing to write on failure");
    let list = out.result_list();
    assert_eq!(list.exit_code, 1);
    assert_eq!(list.items.len(), 2);
    assert_eq!(list.items[1].exit_code, 2);
    assert_eq!(
        list.items[1].stderr, "bad input",
        "image stderr is recorded line by line"
    );
    assert_eq!(list.items[1].results[0].message, "replicas must be > 0");
    let status = out.kpt_render_status().unwrap();
    assert_eq!(status.error_summary, "example.com/a:v1: exit code 2");
    assert_eq!(status.mutation_steps[1].error_results.len(), 1);
    assert_eq!(out.rendered_condition().reason, "RenderFailed");
}

#[tokio::test]
async fn failing_validator_stops_and_save_on_failure_keeps_partial_output() {
    let fake = Fake::default()
        .with("example.com/m:v1", labeler("m", "done"))
        .with("example.com/v:v1", |_| Err(failure(1, "", "invalid")));
    let mut root = kptfile(
        "",
        "root",
        json!({"mutators": [{"image": "example.com/m:v1"}], "validators": [{"image": "example.com/v:v1"}]}),
    );
    root["metadata"]["annotations"][ann::SAVE_ON_RENDER_FAILURE] = json!("true");
    let out = render(&fake, vec![root, obj("ConfigMap", "cm", "cm.yaml", 0)]).await;
    assert!(out.error.is_some());
    let items = out.resources.expect("partial output saved");
    assert_eq!(by_name(&items, "cm")["metadata"]["labels"]["m"], "done");
    assert!(
        items
            .iter()
            .all(|i| ann::get(i, ann::PACKAGE_PATH).is_none())
    );
}

#[tokio::test]
async fn output_checks() {
    async fn run_with(out_item: Value, input_extra: Option<Value>) -> RenderOutcome {
        let fake = Fake::default().with("example.com/f:v1", move |call| {
            let mut items = call.resource_list.items.clone();
            items.push(out_item.clone());
            Ok(ResourceList::new(items))
        });
        let mut items = vec![
            kptfile(
                "",
                "root",
                json!({"mutators": [{"image": "example.com/f:v1"}]}),
            ),
            obj("ConfigMap", "cm", "cm.yaml", 0),
        ];
        items.extend(input_extra);
        render(&fake, items).await
    }
    let mut escaping = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}});
    ann::set(&mut escaping, ann::PATH, "../notpkg/x.yaml");
    let out = run_with(escaping, None).await;
    assert_eq!(
        out.error.as_ref().unwrap().to_string(),
        "pkg.render: pkg .:\n\tpipeline.run: function must not modify resources outside of package: resource has path ../notpkg/x.yaml"
    );
    assert!(
        !out.steps[0].ran,
        "kpt records no result item for an output-check failure"
    );
    assert!(out.result_list().items.is_empty());

    let mut dup = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "y"}});
    ann::set(&mut dup, ann::PATH, "./cm.yaml");
    dup["metadata"]["annotations"][ann::INDEX] = json!(0);
    let out = run_with(dup, None).await;
    assert_eq!(
        out.error.unwrap().to_string(),
        "pkg.render: pkg .:\n\tpipeline.run: resource at path \"cm.yaml\" and index \"0\" already exists"
    );

    let non_krm = json!({"kind": "ConfigMap", "metadata": {"name": "z"}});
    let out = run_with(non_krm, None).await;
    assert_eq!(
        out.error.unwrap().to_string(),
        "pkg.render: pkg .:\n\tpipeline.run: output resource list must contain only KRM resources: configmap_z.yaml: resource must have `apiVersion`"
    );

    let mut bad_input = json!({"data": 1});
    ann::set_path(&mut bad_input, "non-krm.yaml");
    let out = run_with(json!({}), Some(bad_input)).await;
    let err = out.error.unwrap().to_string();
    assert_eq!(
        err,
        "pkg.render: pkg .:\n\tpipeline.run: input resource list must contain only KRM resources: non-krm.yaml: resource must have `apiVersion`"
    );
    assert_eq!(
        out.steps[0].execution_error.as_deref(),
        Some(
            "input resource list must contain only KRM resources: non-krm.yaml: resource must have `apiVersion`"
        )
    );
}

/// kpt checks every step's input; a check passed earlier is not repeated,
/// but objects a filtered step did not select were never checked by it.
#[tokio::test]
async fn objects_a_filtered_step_skipped_are_checked_by_the_next_step() {
    let fake = Fake::default().with("example.com/f:v1", |call| {
        Ok(ResourceList::new(call.resource_list.items.clone()))
    });
    // A filtered first step, then unfiltered ones: mutators, then validators only.
    let filtered = json!({"image": "example.com/f:v1", "selectors": [{"kind": "ConfigMap"}]});
    let all = json!({"image": "example.com/f:v1"});
    for pipeline in [
        json!({"mutators": [filtered, all, all]}),
        json!({"validators": [filtered, all]}),
    ] {
        let mut non_krm = json!({"data": 1});
        ann::set_path(&mut non_krm, "non-krm.yaml");
        let out = render(
            &fake,
            vec![
                kptfile("", "root", pipeline.clone()),
                obj("ConfigMap", "cm", "cm.yaml", 0),
                non_krm,
            ],
        )
        .await;
        assert_eq!(
            out.error.unwrap().to_string(),
            "pkg.render: pkg .:\n\tpipeline.run: input resource list must contain only KRM resources: non-krm.yaml: resource must have `apiVersion`",
            "{pipeline}"
        );
        assert_eq!(out.steps.len(), 2, "{pipeline}: {:?}", out.steps);
        assert!(out.steps[0].ran && out.steps[0].execution_error.is_none());
        assert!(out.steps[1].execution_error.is_some());
    }
}

#[tokio::test]
async fn generated_objects_get_paths_in_their_package() {
    let fake = Fake::default().with("example.com/gen:v1", |call| {
        let mut items = call.resource_list.items.clone();
        items.push(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "prod"}}));
        Ok(ResourceList::new(items))
    });
    let mut fn_config = obj("ConfigMap", "gen-config", "fns/gen.yaml", 0);
    fn_config["data"] = json!({"x": "y"});
    ann::set_path(&mut fn_config, "db/fns/gen.yaml");
    let out = render(
        &fake,
        vec![
            kptfile("", "root", Value::Null),
            kptfile("db", "db", json!({"mutators": [{"image": "example.com/gen:v1", "configPath": "fns/gen.yaml"}]})),
            fn_config,
        ],
    )
    .await;
    assert!(out.is_ok(), "{:?}", out.error);
    let items = out.resources.unwrap();
    assert_eq!(
        ann::path(by_name(&items, "web")).as_deref(),
        Some("db/fns/prod/deployment_web.yaml")
    );
}

#[tokio::test]
async fn functions_may_move_objects_through_either_path_annotation() {
    let fake = Fake::default().with("example.com/mv:v1", |call| {
        let mut items = call.resource_list.items.clone();
        for i in &mut items {
            if ann::name(i) == "a" {
                ann::set(i, ann::LEGACY_PATH, "moved.yaml");
            }
        }
        Ok(ResourceList::new(items))
    });
    let out = render(
        &fake,
        vec![
            kptfile(
                "",
                "root",
                json!({"mutators": [{"image": "example.com/mv:v1"}]}),
            ),
            obj("ConfigMap", "a", "a.yaml", 0),
        ],
    )
    .await;
    let items = out.resources.unwrap();
    let a = by_name(&items, "a");
    assert_eq!(ann::get(a, ann::PATH).as_deref(), Some("moved.yaml"));
    assert_eq!(ann::get(a, ann::LEGACY_PATH).as_deref(), Some("moved.yaml"));
}

#[tokio::test]
async fn exec_needs_permission_and_is_checked_before_any_mutator() {
    let fake = Fake::default()
        .with("example.com/m:v1", identity)
        .with("sed -e s/a/b/", identity);
    let pipeline = json!({"mutators": [{"image": "example.com/m:v1"}, {"exec": "sed -e s/a/b/"}]});
    let out = render(&fake, vec![kptfile("", "root", pipeline.clone())]).await;
    assert!(fake.calls().is_empty());
    assert_eq!(
        out.error.unwrap().to_string(),
        "pkg.render: pkg .:\n\tpipeline.run: must run with `--allow-exec` option to allow running function binaries"
    );
    assert_eq!(out.steps.len(), 1);
    assert_eq!(
        out.steps[0].target,
        FunctionTarget::Exec("sed -e s/a/b/".into())
    );
    assert_eq!(out.steps[0].exit_code, 1);
    let options = RenderOptions {
        allow_exec: true,
        ..Default::default()
    };
    let out = render_with(&fake, vec![kptfile("", "root", pipeline)], options).await;
    assert!(out.is_ok(), "{:?}", out.error);
    assert_eq!(
        fake.calls()[1].target,
        FunctionTarget::Exec("sed -e s/a/b/".into())
    );
}

#[tokio::test]
async fn timeout_and_image_prefix_are_passed_to_the_runtime() {
    let fake = Fake::default().with("example.com/fns/short:latest", identity);
    let options = RenderOptions {
        image_prefix: "example.com/fns/".into(),
        step_timeout: Duration::from_secs(42),
        ..Default::default()
    };
    let out = render_with(
        &fake,
        vec![kptfile(
            "",
            "root",
            json!({"mutators": [{"image": "short"}]}),
        )],
        options,
    )
    .await;
    assert!(out.is_ok(), "{:?}", out.error);
    assert_eq!(fake.calls()[0].timeout, Some(Duration::from_secs(42)));
    let fake = Fake::default().with(
        "ghcr.io/kptdev/krm-functions-catalog/short:latest",
        identity,
    );
    render(
        &fake,
        vec![kptfile(
            "",
            "root",
            json!({"mutators": [{"image": "short"}]}),
        )],
    )
    .await;
    assert_eq!(fake.calls()[0].timeout, Some(DEFAULT_STEP_TIMEOUT));
    assert_eq!(DEFAULT_STEP_TIMEOUT, Duration::from_secs(300));
}

#[tokio::test]
async fn a_steps_timeout_overrides_the_default_and_bad_ones_are_kptfile_errors() {
    let fake = Fake::default()
        .with("example.com/a:v1", identity)
        .with("example.com/b:v1", identity);
    let options = RenderOptions {
        step_timeout: Duration::from_secs(42),
        ..Default::default()
    };
    let out = render_with(
        &fake,
        vec![kptfile(
            "",
            "root",
            json!({"mutators": [{"image": "example.com/a:v1", "timeout": "1m30s"}],
                   "validators": [{"image": "example.com/b:v1"}]}),
        )],
        options,
    )
    .await;
    assert!(out.is_ok(), "{:?}", out.error);
    assert_eq!(fake.calls()[0].timeout, Some(Duration::from_secs(90)));
    assert_eq!(fake.calls()[1].timeout, Some(Duration::from_secs(42)));
    for bad in ["soon", "0s", "-5s"] {
        let out = render(
            &fake,
            vec![kptfile(
                "",
                "root",
                json!({"mutators": [{"image": "example.com/a:v1", "timeout": bad}]}),
            )],
        )
        .await;
        let e = out.error.unwrap().to_string();
        assert!(
            e.contains("Field: `pipeline.mutators[0].timeout`") && e.contains("Go duration"),
            "{bad}: {e}"
        );
    }
}

#[tokio::test]
async fn a_denied_step_fails_without_running_and_names_the_rule() {
    let fake = Fake::default().with("example.com/a:v1", |_| {
        Err(EvalError::Denied {
            image: "example.com/a:v1".into(),
            rule: "no-a".into(),
            reason: "function \"example.com/a:v1\" is denied by admission rule \"no-a\"".into(),
        })
    });
    let out = render(
        &fake,
        vec![kptfile(
            "",
            "root",
            json!({"mutators": [{"image": "example.com/a:v1"}]}),
        )],
    )
    .await;
    assert!(out.resources.is_none());
    let results = out.result_list();
    assert_eq!(results.items[0].exit_code, 1);
    assert_eq!(out.steps[0].results[0].tags["admission-rule"], "no-a");
    assert_eq!(out.executed, 0);
    assert!(
        out.error
            .unwrap()
            .to_string()
            .contains("is denied by admission rule \"no-a\"")
    );
}

#[tokio::test]
async fn results_and_render_status_shapes() {
    let fake = Fake::default().with("example.com/m:v1", |call| {
        let mut rl = ResourceList::new(call.resource_list.items.clone());
        rl.results.push(ResultItem {
            message: "all good".into(),
            severity: Some(Severity::Info),
            ..Default::default()
        });
        Ok(rl)
    });
    let out = render(
        &fake,
        vec![kptfile(
            "",
            "root",
            json!({"mutators": [{"image": "example.com/m:v1", "name": "step-one"}]}),
        )],
    )
    .await;
    let status = serde_json::to_value(out.render_status()).unwrap();
    assert_eq!(
        status,
        json!({
            "result": {
                "apiVersion": "kpt.dev/v1",
                "kind": "FunctionResultList",
                "metadata": {"name": "fnresults"},
                "exitCode": 0,
                "items": [{"image": "example.com/m:v1", "exitCode": 0, "results": [{"message": "all good", "severity": "info"}]}]
            },
            "error": ""
        })
    );
    let yaml = out.result_list().to_yaml().unwrap();
    let parsed: Value = crate::domain::codec::from_yaml_str(&yaml).unwrap();
    assert_eq!(parsed, status["result"]);
    let kpt = out.kpt_render_status().unwrap();
    assert_eq!(kpt.mutation_steps[0].name, "step-one");
    assert_eq!(kpt.error_summary, "");
    assert_eq!(out.rendered_condition().status, "True");
}

#[tokio::test]
async fn kptfile_problems_are_reported_like_kpt() {
    let fake = Fake::default().with("example.com/m:v1", identity);
    // Invalid root pipeline: nothing runs.
    let out = render(
        &fake,
        vec![kptfile(
            "",
            "root",
            json!({"mutators": [{"name": "nothing"}]}),
        )],
    )
    .await;
    assert_eq!(
        out.error.unwrap().to_string(),
        "fn.render: pkg .:\n\tpkg.read: invalid pipeline: function \"\": Kptfile is invalid:\nField: `pipeline.mutators[0]`\nReason: must specify a functon (`image` or `exec`) to execute\n"
    );
    // configPath pointing into a subpackage.
    let mut sub_cfg = obj("ConfigMap", "cfg", "db/cfg.yaml", 0);
    sub_cfg["data"] = json!({});
    let out = render(
        &fake,
        vec![
            kptfile("", "root", json!({"mutators": [{"image": "example.com/set-labels:v1", "configPath": "db/cfg.yaml"}]})),
            kptfile("db", "db", Value::Null),
            sub_cfg,
        ],
    )
    .await;
    assert_eq!(
        out.error.unwrap().to_string(),
        "pkg.render: pkg .: Kptfile is invalid:\nField: `pipeline.mutators[0].configPath`\nValue: \"db/cfg.yaml\"\nReason: functionConfig resource for mutator \"set-labels\" is missing from path \"db/cfg.yaml\", this also occurs if \"db/cfg.yaml\" is part of a subpackage\n"
    );
    // A package without pipeline must still hold only KRM objects.
    let mut non_krm = json!({"a": 1});
    ann::set_path(&mut non_krm, "non-krm.yaml");
    let out = render(&fake, vec![kptfile("", "root", Value::Null), non_krm]).await;
    assert_eq!(
        out.error.as_ref().unwrap().to_string(),
        "pkg.render: pkg .: input resource list must contain only KRM resources: non-krm.yaml: resource must have `apiVersion`"
    );
    assert!(out.kpt_render_status().is_none());
}

#[tokio::test]
async fn runtime_errors_are_step_failures() {
    let fake = Fake::default();
    let out = render(
        &fake,
        vec![kptfile(
            "",
            "root",
            json!({"mutators": [{"image": "example.com/missing:v1"}]}),
        )],
    )
    .await;
    assert_eq!(
        out.error.as_ref().unwrap().to_string(),
        "pkg.render: pkg .:\n\tpipeline.run: function runtime failed to evaluate function \"example.com/missing:v1\": function \"example.com/missing:v1\" not found"
    );
    // The chain's own error is kept: render error → step error → EvalError.
    let error = out.error.unwrap();
    let step = std::error::Error::source(&error).expect("the step error is the source");
    let eval = step
        .source()
        .and_then(|e| e.downcast_ref::<EvalError>())
        .expect("the runtime's EvalError is the step error's source");
    assert!(eval.is_not_found(), "{eval:?}");
    let fake = Fake::default().with("example.com/t:v1", |_| {
        Err(EvalError::Timeout {
            image: "example.com/t:v1".into(),
            after: Duration::from_secs(300),
        })
    });
    let out = render(
        &fake,
        vec![kptfile(
            "",
            "root",
            json!({"mutators": [{"image": "example.com/t:v1"}]}),
        )],
    )
    .await;
    assert!(
        out.error
            .as_ref()
            .unwrap()
            .to_string()
            .contains("did not finish within 300.000s")
    );
    assert!(matches!(
        out.error.as_ref().unwrap().kind,
        RenderErrorKind::Step(StepError::Runtime(EvalError::Timeout { .. }))
    ));
    assert_eq!(
        out.result_list().items[0].exit_code,
        1,
        "kpt records non-exec failures as exit 1"
    );
}

fn tags(list: &[&str]) -> Vec<String> {
    list.iter().map(|t| t.to_string()).collect()
}

#[test]
fn version_constraints_pick_the_highest_matching_tag() {
    let all = tags(&[
        "v0.3.9",
        "v0.4.0",
        "v0.4.5",
        "v0.4.10-rc.1",
        "v0.5.0",
        "v1",
        "latest",
        "sha256-abc.sig",
        "v0.4.99-git-abc",
    ]);
    assert_eq!(pick_tag("~0.4", &all).unwrap(), "v0.4.5");
    assert_eq!(pick_tag("~v0.4", &all).unwrap(), "v0.4.5");
    assert_eq!(pick_tag(">= 0.4 <0.5", &all).unwrap(), "v0.4.5");
    assert_eq!(pick_tag(">=0.4, <1", &all).unwrap(), "v0.5.0");
    assert_eq!(pick_tag("<0.4", &all).unwrap(), "v0.3.9");
    assert_eq!(pick_tag("0.3.x || ^1", &all).unwrap(), "v1");
    assert_eq!(pick_tag("*", &all).unwrap(), "v1");
    // A bare version inside a constraint is `=` (Masterminds, kpt's
    // library), not Cargo's `^`: `0.4.0 || <0.1` picks v0.4.0, not v0.4.5.
    assert_eq!(pick_tag("0.4.0 || <0.1", &all).unwrap(), "v0.4.0");
    assert_eq!(pick_tag(">=0.3 0.4.0", &all).unwrap(), "v0.4.0");
    assert_eq!(pick_tag("=0.4.0 || =0.3.9", &all).unwrap(), "v0.4.0");
    // A partial one stands for its wildcard: `0.4 || <0.1` is 0.4.x.
    assert_eq!(pick_tag("0.4 || <0.1", &all).unwrap(), "v0.4.5");
    assert_eq!(pick_tag("0 || <0.1", &all).unwrap(), "v0.5.0");
    assert_eq!(pick_tag("0.4.x || <0.1", &all).unwrap(), "v0.4.5");
    let none = pick_tag("~2.0", &all).unwrap_err();
    assert!(
        none.starts_with("no tag could be found matching the version constraint \"~2.0\""),
        "{none}"
    );
    let bad = pick_tag(">=>0.4", &all).unwrap_err();
    assert!(bad.contains("not a valid version constraint"), "{bad}");
    assert!(is_tag_constraint("~0.4") && is_tag_constraint("1.x"));
    assert!(!is_tag_constraint("v0.4.5") && !is_tag_constraint("latest"));
    assert_eq!(
        image_repository("set-namespace:v0.4", "ghcr.io/kptdev/krm-functions-catalog"),
        "ghcr.io/kptdev/krm-functions-catalog/set-namespace"
    );
    assert_eq!(
        image_repository("localhost:5000/fns/x@sha256:abc", "p"),
        "localhost:5000/fns/x"
    );
}

#[tokio::test]
async fn a_tag_constraint_is_resolved_through_the_tag_lister() {
    let fake = Fake::default().with("example.com/fns/m:v0.4.5", identity);
    let pipeline = json!({"mutators": [{"image": "example.com/fns/m", "tag": "~0.4"}]});
    let items = vec![
        kptfile("", "root", pipeline),
        obj("ConfigMap", "a", "a.yaml", 0),
    ];
    let mut lister = crate::ports::MockTagLister::new();
    lister
        .expect_list_tags()
        .withf(|repo| repo == "example.com/fns/m")
        .times(1)
        .returning(|_| Ok(tags(&["v0.3.0", "v0.4.1", "v0.4.5", "v0.5.0"])));
    let package = Package::from_flat(items.clone()).unwrap();
    let out = Renderer::new(&fake, RenderOptions::default())
        .with_tag_lister(std::sync::Arc::new(lister))
        .render(package)
        .await;
    assert!(out.error.is_none(), "{:?}", out.error);
    assert_eq!(fake.names(), ["example.com/fns/m:v0.4.5"]);

    // Without a lister the step fails and says what is missing.
    let package = Package::from_flat(items).unwrap();
    let out = Renderer::new(&Fake::default(), RenderOptions::default())
        .render(package)
        .await;
    let err = out.error.expect("an error").to_string();
    assert!(err.contains("is a version constraint"), "{err}");
}
