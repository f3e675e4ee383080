//! The builtin `apply-replacements` against the catalog's Go binary
//! (v0.1.5: kustomize's replacement filter under the functions SDK v1.0.2,
//! installed by `scripts/install-catalog-functions.sh`) on generated inputs.
//!
//! Generated items: one to five ConfigMaps (`data` with plain words,
//! numbers, booleans, quoted and empty strings, strings that need quoting,
//! literal blocks, dates, `null`), Deployments (labels, annotations,
//! `spec.replicas`, containers with `image`, `args` and `env`) and Services
//! (`spec.ports`), in the namespaces `default`, `prod` or none, sometimes
//! one with a `config.kubernetes.io/path` annotation, with trailing and
//! head comments here and there, sequences indented under their key or not.
//! Every text is in the Go YAML writer's normal form (what it writes back
//! for an item no replacement touches; it writes sequences unindented, a
//! difference the comparison removes), and the (apiVersion, kind,
//! namespace, name) of the items are distinct, so the order the SDK sorts
//! the output in is determined. The second test checks that premise: the
//! Go function with no replacements writes each generated item back line
//! for line.
//!
//! Generated functionConfigs (`fn.kpt.dev/v1alpha1` `ApplyReplacements`):
//! one to three replacements, each with a `source` (selecting by kind,
//! name, namespace, group, version — one object mostly, sometimes none or
//! several; a `fieldPath` into data, metadata, containers by name or index,
//! ports, a mapping or a sequence, a missing one, or none for
//! `metadata.name`; sometimes `options` with a delimiter and an index in or
//! out of bounds) or a `sourceValue` (and now and then both or neither);
//! and one to three `targets` (`select` by kind, name, namespace, label or
//! annotation selectors, sometimes `reject`, now and then no `select`;
//! `fieldPaths` with wildcards, `[name=…]` and `[=…]` matches, indexes,
//! paths that are missing, mappings and sequences, or none; `options` with
//! a delimiter and index, or `create`). A few configs are invalid: another
//! kind or apiVersion, a ConfigMap, none at all, `replacements` that is not
//! a list, an `index` that is not a number, a replacement without targets.
//! The generator knows which fields each object has and what its values are
//! (string, integer, other scalar, collection), and mostly aims targets at
//! fields that exist and take the value (the Go function keeps a scalar
//! target's tag: a word set into `replicas: 3` comes out as `!!int word`,
//! which the runner does not read), so that most cases succeed and change
//! something (about 64% of the 300 default cases; the rest fail or change
//! nothing on purpose).
//!
//! Both runtimes get the same call with the items' texts (as render sends
//! them). Compared: success or failure; every output item's value, by
//! position (both sort the items as the SDK does), and its text line by line
//! with leading blanks removed (so sequences indented or not are the same;
//! everything else — tokens, quoting, comments, line breaks — must be); the
//! results; on failure (the Go function then leaves the items unchanged,
//! writes one error result and exits 1) the exit code, stderr, results and
//! the items written. A case the builtin refuses (`NotFound` saying it
//! `leaves this call` to the binary) is counted, not compared; the test
//! fails if more than half are refused. The summary line also says in how
//! many cases the Go function changed something, succeeded without a change,
//! failed, or wrote output the runner does not read, so a generator that
//! drifts into errors shows.
//!
//! The seed of each case is printed with its difference;
//! `KRM_FN_REPLACEMENTS_SEED` reruns one case (printing its input and both
//! outputs) and `KRM_FN_REPLACEMENTS_CASES` sets how many are run (default
//! 300).

use krm_fn_testbed::common;

use krm_fn_runner::adapters::runtime::{BuiltinRuntime, ExecCommandRuntime};
use krm_fn_runner::domain::codec::{self, tree::YamlDoc};
use krm_fn_runner::domain::evaluation::EvalError;
use krm_fn_runner::domain::resource_list::ResourceList;
use krm_fn_runner::ports::{FunctionCall, FunctionOutput, FunctionRuntime, FunctionTarget};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::{Map, Value, json};

/// The image the builtin is asked for.
const IMAGE: &str = "apply-replacements:v0.1.5";

const NAMES: &[&str] = &["web", "db", "cache", "api"];
const NAMESPACES: &[Option<&str>] = &[None, None, Some("default"), Some("prod")];
const APPS: &[&str] = &["web", "db"];
const DATA_KEYS: &[&str] = &["host", "mode", "text", "count"];
const KINDS: &[&str] = &["ConfigMap", "Deployment", "Service"];

/// One of `items`, uniformly.
fn pick<'a, T: ?Sized>(rng: &mut StdRng, items: &[&'a T]) -> &'a T {
    items[rng.random_range(0..items.len())]
}

/// One to three, one the most often.
fn one_to_three(rng: &mut StdRng) -> usize {
    match rng.random_range(0..20) {
        0..10 => 1,
        10..17 => 2,
        _ => 3,
    }
}

/// True with probability `p` percent.
fn chance(rng: &mut StdRng, p: u32) -> bool {
    rng.random_range(0..100) < p
}

/// What a value is, as far as a target's tag goes: the Go function copies
/// a scalar's text into a scalar target and keeps the target's tag, so a
/// word written into an int writes `!!int word` (which the runner does not
/// read back). The generator mostly writes values where they fit.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Ty {
    /// A string (or text that resolves to one).
    Str,
    /// An integer (or a string that reads as one).
    Int,
    /// A float, boolean or date.
    Typed,
    /// Null.
    Null,
    /// A mapping or a sequence.
    Coll,
}

/// A generated object, with what the config generator needs to know of it
/// to aim at fields it has (most of the time).
#[derive(Default)]
struct Obj {
    kind: &'static str,
    name: &'static str,
    ns: Option<&'static str>,
    /// The value of its `app` label, if it has one.
    app: Option<&'static str>,
    /// A ConfigMap's data keys and what their values are.
    keys: Vec<(&'static str, Ty)>,
    /// A Deployment's first container's name.
    first: &'static str,
    /// Whether a Deployment's first container has `args`.
    args: bool,
    /// Whether those `args` have `--x`.
    args_x: bool,
    /// Whether a Deployment's first container has the env var `A`.
    env_a: bool,
    /// A Service's port names.
    ports: Vec<&'static str>,
    text: String,
}

/// Now and then a trailing comment for a line.
fn trailing(rng: &mut StdRng) -> &'static str {
    match rng.random_range(0..14) {
        0 => " # keep",
        1 => " # TODO: bump",
        _ => "",
    }
}

/// Now and then a comment line of its own before a key at `pad`.
fn head(rng: &mut StdRng, pad: &str) -> String {
    if chance(rng, 5) {
        format!("{pad}# a comment\n")
    } else {
        String::new()
    }
}

/// A `data` value as written after `key: ` at indent `pad` (the key's):
/// plain words, numbers, booleans, quoted and empty strings, strings that
/// need quoting, literal blocks, dates, null.
fn data_value(rng: &mut StdRng, pad: &str) -> (String, Ty) {
    let pool: &[&str] = &[
        "hello",
        "web",
        "nginx:1.25",
        "nginx:1.25",
        "x:y:z",
        "a-b",
        "3",
        "1.5",
        "0x1F",
        "true",
        "false",
        "\"x\"",
        "'y'",
        "\"3\"",
        "'true'",
        "\"\"",
        "''",
        "\"a: b\"",
        "\"#x\"",
        "'  lead'",
        "\"x #y\"",
        "'it''s'",
        "2024-01-02",
        "null",
        "café",
        "a b",
        "BLOCK",
        "BLOCK-",
    ];
    let v = match pick(rng, pool) {
        "BLOCK" => format!("|\n{pad}  line1\n{pad}  line2"),
        "BLOCK-" => format!("|-\n{pad}  one\n{pad}  two"),
        v => v.to_string(),
    };
    let ty = match v.as_str() {
        "3" | "0x1F" => Ty::Int,
        "1.5" | "true" | "false" | "2024-01-02" => Ty::Typed,
        "null" => Ty::Null,
        _ => Ty::Str,
    };
    (v, ty)
}

/// The `metadata` lines of an object.
fn metadata(rng: &mut StdRng, o: &Obj, with_path: bool) -> String {
    let mut t = String::from("metadata:\n");
    t.push_str(&format!("  name: {}{}\n", o.name, trailing(rng)));
    if let Some(ns) = o.ns {
        t.push_str(&format!("  namespace: {ns}\n"));
    }
    if let Some(app) = o.app {
        t.push_str(&head(rng, "  "));
        t.push_str("  labels:\n");
        t.push_str(&format!("    app: {app}{}\n", trailing(rng)));
        if chance(rng, 30) {
            t.push_str("    tier: backend\n");
        }
    } else if chance(rng, 20) {
        t.push_str("  labels:\n    tier: backend\n");
    }
    let note = chance(rng, 25);
    if with_path || note {
        t.push_str("  annotations:\n");
        if with_path {
            t.push_str(&format!(
                "    config.kubernetes.io/path: 'pkg/{}.yaml'\n",
                o.name
            ));
        }
        if note {
            t.push_str(&format!(
                "    note: {}\n",
                pick(rng, &["x", "\"y\"", "keep"])
            ));
        }
    }
    t
}

/// The indent of a sequence's dashes under a key at `pad`.
fn dash(pad: &str, wide: bool) -> String {
    if wide {
        format!("{pad}  ")
    } else {
        pad.to_string()
    }
}

/// Writes the text of `o` (its kind, name, namespace and label chosen),
/// noting the fields it has.
fn object_text(rng: &mut StdRng, o: &mut Obj, with_path: bool) {
    let wide = chance(rng, 50);
    let api = if o.kind == "Deployment" {
        "apps/v1"
    } else {
        "v1"
    };
    let mut t = format!("apiVersion: {api}\nkind: {}\n", o.kind);
    t.push_str(&metadata(rng, o, with_path));
    match o.kind {
        "ConfigMap" => {
            t.push_str(&head(rng, ""));
            t.push_str("data:\n");
            let mut keys: Vec<&str> = Vec::new();
            if chance(rng, 92) {
                keys.push("key");
            }
            for k in DATA_KEYS {
                if chance(rng, 35) {
                    keys.push(k);
                }
            }
            if keys.is_empty() {
                keys.push("key");
            }
            for k in keys {
                t.push_str(&head(rng, "  "));
                let (v, ty) = data_value(rng, "  ");
                let c = if v.starts_with('|') {
                    ""
                } else {
                    trailing(rng)
                };
                t.push_str(&format!("  {k}: {v}{c}\n"));
                o.keys.push((k, ty));
            }
        }
        "Deployment" => {
            t.push_str("spec:\n");
            t.push_str(&format!(
                "  replicas: {}{}\n",
                rng.random_range(1..6),
                trailing(rng)
            ));
            t.push_str("  template:\n    spec:\n");
            t.push_str(&head(rng, "      "));
            t.push_str("      containers:\n");
            let d = dash("      ", wide);
            let images = ["nginx:1.25", "\"nginx:1.25\"", "nginx", "busybox:1.36"];
            o.first = if chance(rng, 92) { "app" } else { "main" };
            t.push_str(&format!("{d}- name: {}\n", o.first));
            t.push_str(&format!(
                "{d}  image: {}{}\n",
                images[rng.random_range(0..images.len())],
                trailing(rng)
            ));
            if chance(rng, 90) {
                o.args = true;
                t.push_str(&format!("{d}  args:\n"));
                let ad = dash(&format!("{d}  "), wide);
                if chance(rng, 90) {
                    o.args_x = true;
                    t.push_str(&format!("{ad}- --x{}\n", trailing(rng)));
                }
                t.push_str(&format!("{ad}- --y=1\n"));
            } else if chance(rng, 50) {
                o.args = true;
                o.args_x = true;
                t.push_str(&format!("{d}  args: [\"--x\"]\n"));
            }
            if chance(rng, 90) {
                o.env_a = true;
                t.push_str(&format!("{d}  env:\n"));
                let ed = dash(&format!("{d}  "), wide);
                t.push_str(&format!(
                    "{ed}- name: A\n{ed}  value: \"1\"{}\n",
                    trailing(rng)
                ));
                if chance(rng, 50) {
                    t.push_str(&format!("{ed}- name: B\n{ed}  value: b\n"));
                }
            }
            if chance(rng, 40) {
                t.push_str(&format!("{d}- name: side\n{d}  image: busybox\n"));
            }
        }
        _ => {
            t.push_str("spec:\n");
            t.push_str("  ports:\n");
            let d = dash("  ", wide);
            for (name, port, p) in [("http", 80, 90), ("grpc", 9090, 40)] {
                if chance(rng, p) {
                    o.ports.push(name);
                    t.push_str(&format!(
                        "{d}- name: {name}\n{d}  port: {port}{}\n",
                        trailing(rng)
                    ));
                }
            }
            if o.ports.is_empty() {
                o.ports.push("https");
                t.push_str(&format!("{d}- name: https\n{d}  port: 443\n"));
            }
        }
    }
    o.text = t;
}

/// The generated objects: distinct (kind, namespace, name), mostly
/// distinct (kind, name) too.
fn objects(rng: &mut StdRng) -> Vec<Obj> {
    let mut objs: Vec<Obj> = Vec::new();
    let n = rng.random_range(1..6);
    let path_at = if chance(rng, 30) {
        Some(rng.random_range(0..n))
    } else {
        None
    };
    while objs.len() < n {
        let kind = pick(
            rng,
            &[
                "ConfigMap",
                "ConfigMap",
                "Deployment",
                "Deployment",
                "Service",
            ],
        );
        let name = pick(rng, NAMES);
        let ns = NAMESPACES[rng.random_range(0..NAMESPACES.len())];
        let same_name = |o: &&Obj| o.kind == kind && o.name == name;
        if objs.iter().filter(same_name).any(|o| o.ns == ns)
            || (objs.iter().any(|o| same_name(&o)) && chance(rng, 95))
        {
            continue;
        }
        let app = if chance(rng, 60) {
            Some(pick(rng, APPS))
        } else {
            None
        };
        let mut o = Obj {
            kind,
            name,
            ns,
            app,
            ..Obj::default()
        };
        object_text(rng, &mut o, path_at == Some(objs.len()));
        objs.push(o);
    }
    objs
}

/// A source selector's id fields (kind, name, namespace, group, version)
/// for `o`, sometimes too few to single it out or matching it not.
fn source_id(rng: &mut StdRng, o: &Obj, m: &mut Map<String, Value>) {
    m.insert("kind".into(), json!(o.kind));
    if chance(rng, 97) {
        m.insert("name".into(), json!(o.name));
    }
    if chance(rng, 20) {
        m.insert("namespace".into(), json!(o.ns.unwrap_or("default")));
    }
    match rng.random_range(0..15) {
        0 => {
            m.insert("version".into(), json!("v1"));
        }
        1 if o.kind == "Deployment" => {
            m.insert("group".into(), json!("apps"));
        }
        2 if o.kind == "Deployment" => {
            m.insert("group".into(), json!("apps"));
            m.insert("version".into(), json!("v1"));
        }
        // Nothing selected.
        3 if chance(rng, 30) => {
            m.insert("version".into(), json!("v2"));
        }
        _ => {}
    }
}

/// A delimiter option (`index` in or out of bounds), with probability `p`
/// percent.
fn delimiter_options(rng: &mut StdRng, p: u32) -> Option<Value> {
    if !chance(rng, p) {
        return None;
    }
    let index = [0, 1, 1, 5, -1][rng.random_range(0..5)];
    Some(json!({"delimiter": ":", "index": index}))
}

/// A source field path into `o` (empty: omitted, so `metadata.name`) and
/// what it finds; now and then one `o` does not have, a mapping or a
/// sequence.
fn source_path(rng: &mut StdRng, o: &Obj) -> (&'static str, Ty) {
    if chance(rng, 7) {
        return *pick(
            rng,
            &[
                &("metadata.name", Ty::Str),
                &("", Ty::Str),
                &("", Ty::Str),
                &("metadata.labels.app", Ty::Str),
                &("metadata.namespace", Ty::Str),
                &("metadata.labels", Ty::Coll),
                &("spec.missing.path", Ty::Str),
            ],
        );
    }
    let mut paths: Vec<(&str, Ty)> = Vec::new();
    match o.kind {
        "ConfigMap" => {
            paths.extend(
                o.keys
                    .iter()
                    .filter(|(_, ty)| *ty != Ty::Null || chance(rng, 20))
                    .map(|&(k, ty)| (data_path(k), ty)),
            );
            if paths.is_empty() {
                paths.push(("data.host", Ty::Str));
            }
        }
        "Deployment" => {
            paths.extend([
                ("spec.template.spec.containers.0.image", Ty::Str),
                ("spec.replicas", Ty::Int),
            ]);
            if o.first == "app" {
                paths.extend([("spec.template.spec.containers.[name=app].image", Ty::Str); 3]);
                if o.args {
                    paths.push(("spec.template.spec.containers.[name=app].args", Ty::Coll));
                }
                if o.env_a {
                    paths.push((
                        "spec.template.spec.containers.[name=app].env.[name=A].value",
                        Ty::Str,
                    ));
                }
            }
            if chance(rng, 2) {
                paths = vec![("spec.template.spec.containers.[name=nope].image", Ty::Str)];
            }
        }
        _ => {
            paths.extend([
                ("spec.ports.0.name", Ty::Str),
                ("spec.ports.0.port", Ty::Int),
            ]);
            if o.ports.contains(&"http") {
                paths.extend([("spec.ports.[name=http].port", Ty::Int); 3]);
            }
            if o.ports.contains(&"grpc") || chance(rng, 10) {
                paths.push(("spec.ports.[name=grpc].port", Ty::Int));
            }
        }
    }
    paths[rng.random_range(0..paths.len())]
}

/// The `data.` path of a ConfigMap key.
fn data_path(key: &str) -> &'static str {
    match key {
        "key" => "data.key",
        "host" => "data.host",
        "mode" => "data.mode",
        "text" => "data.text",
        _ => "data.count",
    }
}

/// A replacement's `source`, and what it finds.
fn source(rng: &mut StdRng, objs: &[Obj]) -> (Value, Ty) {
    let mut m = Map::new();
    let o = &objs[rng.random_range(0..objs.len())];
    match rng.random_range(0..50) {
        // Nothing selected.
        0 => {
            m.insert("kind".into(), json!("ConfigMap"));
            m.insert("name".into(), json!("nope"));
        }
        // Several, when there are.
        1 => {
            m.insert("kind".into(), json!(o.kind));
        }
        _ => source_id(rng, o, &mut m),
    }
    let (p, mut ty) = source_path(rng, o);
    if !p.is_empty() {
        m.insert("fieldPath".into(), json!(p));
    }
    if let Some(o) = delimiter_options(rng, 6) {
        m.insert("options".into(), o);
        ty = Ty::Str;
    }
    (Value::Object(m), ty)
}

/// A `sourceValue`, and what it is.
fn source_value(rng: &mut StdRng) -> (Value, Ty) {
    let pool: &[&str] = &[
        "web",
        "nginx:1.27",
        "registry.example.com/app:2.0",
        "3",
        "",
        "a: b",
        "#x",
        "true",
        "line1\nline2",
        "  lead",
        "x:y:z",
        "null",
        "2024-01-02",
        "café",
        "it's",
        "0x1F",
    ];
    let v = pick(rng, pool);
    let ty = match v {
        "3" | "0x1F" => Ty::Int,
        _ => Ty::Str,
    };
    (json!(v), ty)
}

/// A label selector, mostly one that `o` matches (sometimes invalid).
fn label_selector(rng: &mut StdRng, o: &Obj) -> &'static str {
    if chance(rng, 15) {
        return pick(
            rng,
            &[
                "app=web",
                "app!=web",
                "app",
                "!app",
                "app in (web,db)",
                "app notin (db)",
                "app=web,tier=backend",
                "app in web",
            ],
        );
    }
    match o.app {
        Some("web") => pick(
            rng,
            &["app=web", "app", "app in (web,db)", "app notin (db)"],
        ),
        Some(_) => pick(rng, &["app=db", "app!=web", "app in (web,db)"]),
        None => pick(rng, &["!app", "app!=web", "app notin (web,db)"]),
    }
}

/// An annotation selector.
fn annotation_selector(rng: &mut StdRng) -> &'static str {
    pick(
        rng,
        &["note=x", "note", "!note", "config.kubernetes.io/path"],
    )
}

/// A target field path into an object like `o` for a value that is `ty`,
/// and whether it wants `create`: mostly one where the value fits, now and
/// then any, or one `o` does not have.
fn target_path(rng: &mut StdRng, o: &Obj, ty: Ty) -> (&'static str, bool) {
    if rng.random_range(0..400) == 0 {
        return ("spec.nothing.here", false);
    }
    if chance(rng, 8) {
        return ("metadata.annotations.new", true);
    }
    let any = chance(rng, 8);
    let fits = |t: Ty| any || t == Ty::Str || (t == Ty::Int && ty == Ty::Int);
    let mut paths: Vec<(&str, bool)> = Vec::new();
    if (ty != Ty::Coll || any) && (o.app.is_some() || chance(rng, 30)) {
        paths.push(("metadata.labels.app", o.app.is_none()));
    }
    match o.kind {
        "ConfigMap" => {
            for &(k, t) in &o.keys {
                if fits(t) && (ty != Ty::Coll || any) {
                    paths.extend([(data_path(k), false); 3]);
                }
            }
            paths.push(("data.new", chance(rng, 95)));
            if ty == Ty::Coll || any {
                paths.push(("data", false));
            }
        }
        "Deployment" => {
            if ty != Ty::Coll || any {
                paths.extend([
                    ("spec.template.spec.containers.*.image", false),
                    ("spec.template.spec.containers.0.image", false),
                ]);
                if fits(Ty::Int) {
                    paths.push(("spec.replicas", false));
                }
                if o.first == "app" {
                    paths.extend([("spec.template.spec.containers.[name=app].image", false); 2]);
                    if o.args_x && chance(rng, 50) {
                        paths.push((
                            "spec.template.spec.containers.[name=app].args.[=--x]",
                            false,
                        ));
                    }
                }
                if o.env_a {
                    paths.push(("spec.template.spec.containers.0.env.[name=A].value", false));
                }
            }
            if o.first == "app" && o.args && (ty == Ty::Coll || any) {
                paths.push(("spec.template.spec.containers.[name=app].args", false));
            }
        }
        _ => {
            if ty != Ty::Coll || any {
                paths.push(("spec.ports.0.name", false));
                if fits(Ty::Int) {
                    paths.push(("spec.ports.0.port", false));
                    if o.ports.contains(&"http") {
                        paths.extend([("spec.ports.[name=http].port", false); 2]);
                    }
                }
            }
        }
    }
    if paths.is_empty() {
        paths.push(("metadata.annotations.new", true));
    }
    paths[rng.random_range(0..paths.len())]
}

/// One of a replacement's `targets`, aimed at one of `objs` (and whatever
/// else the selector selects).
fn target(rng: &mut StdRng, objs: &[Obj], ty: Ty) -> Value {
    let mut t = Map::new();
    let o = &objs[rng.random_range(0..objs.len())];
    if rng.random_range(0..200) != 0 {
        let mut s = Map::new();
        if chance(rng, 98) {
            let kind = if chance(rng, 98) {
                o.kind
            } else {
                pick(rng, KINDS)
            };
            s.insert("kind".into(), json!(kind));
        }
        if chance(rng, 90) {
            s.insert("name".into(), json!(o.name));
        }
        if chance(rng, 12) {
            let ns = if chance(rng, 80) {
                o.ns.unwrap_or("default")
            } else {
                pick(rng, &["default", "prod"])
            };
            s.insert("namespace".into(), json!(ns));
        }
        if chance(rng, 20) {
            s.insert("labelSelector".into(), json!(label_selector(rng, o)));
        }
        if chance(rng, 6) {
            s.insert("annotationSelector".into(), json!(annotation_selector(rng)));
        }
        t.insert("select".into(), Value::Object(s));
    }
    if chance(rng, 15) {
        let mut rejects = Vec::new();
        for _ in 0..rng.random_range(1..3) {
            rejects.push(match rng.random_range(0..5) {
                0 => json!({"labelSelector": label_selector(rng, o)}),
                1 => json!({"namespace": "prod"}),
                2 => json!({"kind": pick(rng, KINDS), "name": pick(rng, NAMES)}),
                _ => json!({"name": pick(rng, NAMES)}),
            });
        }
        t.insert("reject".into(), json!(rejects));
    }
    let mut create = false;
    if !chance(rng, 5) {
        let mut paths = Vec::new();
        for _ in 0..if chance(rng, 70) { 1 } else { 2 } {
            let (p, c) = target_path(rng, o, ty);
            create |= c;
            if !paths.contains(&p) {
                paths.push(p);
            }
        }
        t.insert("fieldPaths".into(), json!(paths));
    }
    if create && chance(rng, 97) {
        t.insert("options".into(), json!({"create": true}));
    } else if let Some(o) = delimiter_options(rng, 10) {
        t.insert("options".into(), o);
    } else if chance(rng, 3) {
        t.insert("options".into(), json!({"create": true}));
    }
    Value::Object(t)
}

/// One replacement.
fn replacement(rng: &mut StdRng, objs: &[Obj]) -> Value {
    let mut r = Map::new();
    let ty = match rng.random_range(0..150) {
        // Both: an error.
        0 => {
            r.insert("source".into(), source(rng, objs).0);
            r.insert("sourceValue".into(), source_value(rng).0);
            Ty::Str
        }
        // Neither: an error.
        1 => Ty::Str,
        n if n < 50 => {
            let (v, ty) = source_value(rng);
            r.insert("sourceValue".into(), v);
            ty
        }
        _ => {
            let (v, ty) = source(rng, objs);
            r.insert("source".into(), v);
            ty
        }
    };
    if rng.random_range(0..150) != 0 {
        let targets: Vec<Value> = (0..one_to_three(rng))
            .map(|_| target(rng, objs, ty))
            .collect();
        r.insert("targets".into(), json!(targets));
    }
    Value::Object(r)
}

/// The functionConfig (`None`: the call has none); now and then invalid.
fn function_config(rng: &mut StdRng, objs: &[Obj]) -> Option<Value> {
    let replacements: Vec<Value> = (0..one_to_three(rng))
        .map(|_| replacement(rng, objs))
        .collect();
    let mut fc = json!({
        "apiVersion": "fn.kpt.dev/v1alpha1",
        "kind": "ApplyReplacements",
        "metadata": {"name": "r"},
        "replacements": replacements,
    });
    match rng.random_range(0..160) {
        0 => fc["kind"] = json!("ApplyReplacement"),
        1 => fc["apiVersion"] = json!("fn.kpt.dev/v1beta1"),
        2 => {
            fc = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "r"},
                "data": {"replacements": "x"}})
        }
        3 => fc["replacements"] = json!("not a list"),
        4 => fc["replacements"] = json!({"source": {"kind": "ConfigMap"}}),
        5 => {
            fc["replacements"][0]["targets"] = json!([{"select": {"kind": "ConfigMap"},
                "options": {"delimiter": ":", "index": "x"}}])
        }
        6 => return None,
        7 => fc["replacements"] = json!([]),
        _ => {}
    }
    Some(fc)
}

/// A generated case: the items' texts and the functionConfig.
fn case(seed: u64) -> (Vec<String>, Option<Value>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let objs = objects(&mut rng);
    let fc = function_config(&mut rng, &objs);
    (objs.into_iter().map(|o| o.text).collect(), fc)
}

fn call(target: FunctionTarget, items: &[String], fc: Option<&Value>) -> FunctionCall {
    common::call_with_texts(target, items, fc)
}

/// Each output item's text, lines with leading blanks removed (`None`: the
/// runtime gave no item texts).
fn item_lines(out: &FunctionOutput, inputs: &[String]) -> Option<Vec<Vec<String>>> {
    common::output_item_lines(out, inputs)
}

/// How a case came out of the Go function (for the summary line).
#[derive(Default)]
struct GoOutcomes {
    /// It succeeded and some item is not as it was.
    changed: usize,
    /// It succeeded and every item is as it was.
    unchanged: usize,
    /// It failed (exit 1, an error result).
    failed: usize,
    /// It wrote a ResourceList the runner does not read: a word set into
    /// an int, bool or float scalar keeps the scalar's tag (`!!int web`).
    unreadable: usize,
    /// Anything else.
    other: usize,
}

/// What one case came to.
enum Verdict {
    /// The runs agree.
    Same,
    /// The builtin left the call to the binary.
    Refused,
    /// The differences, the first entry the seed and input.
    Differ(Vec<String>),
}

/// Compares the two runs of one case (`verbose`: prints the case and both
/// outputs).
/// Cases where the Go function's output could only be compared by value.
static VALUES_ONLY: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

async fn compare(
    seed: u64,
    go: &ExecCommandRuntime,
    rust: &BuiltinRuntime,
    stats: &mut GoOutcomes,
    verbose: bool,
) -> Verdict {
    let bin = common::installed_catalog_binary("apply-replacements");
    let (items, fc) = case(seed);
    let g = go
        .run(call(
            FunctionTarget::Exec(bin.display().to_string()),
            &items,
            fc.as_ref(),
        ))
        .await;
    let r = rust
        .run(call(
            FunctionTarget::Image(IMAGE.into()),
            &items,
            fc.as_ref(),
        ))
        .await;
    let input = format!(
        "seed {seed}: input\n{}--- functionConfig\n{}",
        items.join("---\n"),
        fc.as_ref()
            .map(|v| codec::to_yaml_string(v).unwrap())
            .unwrap_or_else(|| "none\n".into())
    );
    let inputs: Vec<Value> = items
        .iter()
        .map(|t| YamlDoc::parse(t.as_str()).unwrap().value().clone())
        .collect();
    match &g {
        Ok(o) if o.resource_list.items.iter().all(|i| inputs.contains(i)) => stats.unchanged += 1,
        Ok(_) => stats.changed += 1,
        Err(EvalError::FunctionFailed(_)) => stats.failed += 1,
        Err(EvalError::BadOutput { .. }) => stats.unreadable += 1,
        Err(_) => stats.other += 1,
    }
    if verbose {
        let show = |o: &Result<FunctionOutput, EvalError>| match o {
            Ok(o) => format!(
                "ok\n{}results: {:?}",
                codec::to_yaml_string(&o.resource_list.items).unwrap(),
                o.resource_list.results
            ),
            Err(EvalError::FunctionFailed(f)) => format!(
                "failed {:?} {:?} (output {})\n{}",
                f.exit,
                String::from_utf8_lossy(&f.stderr),
                match ResourceList::parse(&f.output) {
                    Ok(_) => "parses".to_string(),
                    Err(e) => format!("does not parse: {e}"),
                },
                String::from_utf8_lossy(&f.output)
            ),
            Err(e) => format!("error: {e}"),
        };
        println!("{input}--- go: {}\n--- builtin: {}", show(&g), show(&r));
    }
    let mut diffs = Vec::new();
    match (g, r) {
        (
            _,
            Err(EvalError::NotFound {
                detail: Some(d), ..
            }),
        ) if d.contains("leaves this call") => {
            return Verdict::Refused;
        }
        (Ok(g), Ok(r)) => {
            if g.resource_list.items != r.resource_list.items {
                diffs.push(format!(
                    "items differ\n--- go\n{}--- rust\n{}",
                    codec::to_yaml_string(&g.resource_list.items).unwrap(),
                    codec::to_yaml_string(&r.resource_list.items).unwrap()
                ));
            }
            match (item_lines(&g, &items), item_lines(&r, &items)) {
                (Some(gl), Some(rl)) => {
                    if gl.len() != rl.len() {
                        diffs.push(format!(
                            "item text counts differ: go {}, rust {}",
                            gl.len(),
                            rl.len()
                        ));
                    }
                    for (i, (a, b)) in gl.iter().zip(&rl).enumerate() {
                        if a != b {
                            diffs.push(format!(
                                "item {i} text differs\n--- go\n{}\n--- rust\n{}",
                                a.join("\n"),
                                b.join("\n")
                            ));
                        }
                    }
                }
                // The Go function's output is not laid out item by item
                // (a block scalar ending an item, say): its values are
                // compared above, its text cannot be.
                (None, Some(_)) => {
                    VALUES_ONLY.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                (g, r) => diffs.push(format!(
                    "item texts: go {}, rust {}",
                    if g.is_some() { "given" } else { "none" },
                    if r.is_some() { "given" } else { "none" }
                )),
            }
            if g.resource_list.results != r.resource_list.results {
                diffs.push(format!(
                    "results differ\n--- go\n{}--- rust\n{}",
                    codec::to_yaml_string(&g.resource_list.results).unwrap(),
                    codec::to_yaml_string(&r.resource_list.results).unwrap()
                ));
            }
        }
        (Err(EvalError::FunctionFailed(g)), Err(EvalError::FunctionFailed(r))) => {
            diffs.extend(common::failure_differences(&g, &r));
        }
        (g, r) => diffs.push(format!(
            "outcomes differ: go {}, rust {}",
            match g {
                Ok(_) => "ok".to_string(),
                Err(EvalError::FunctionFailed(f)) => format!("failed: {:?}", f.results),
                Err(e) => e.to_string(),
            },
            match r {
                Ok(_) => "ok".to_string(),
                Err(EvalError::FunctionFailed(f)) => format!("failed: {:?}", f.results),
                Err(e) => e.to_string(),
            }
        )),
    }
    if diffs.is_empty() {
        Verdict::Same
    } else {
        diffs.insert(0, input);
        Verdict::Differ(diffs)
    }
}

#[tokio::test]
async fn builtin_apply_replacements_matches_the_go_binary_on_generated_inputs() {
    common::installed_catalog_binary("apply-replacements");
    let go = ExecCommandRuntime::inheriting(64 << 20);
    let rust = BuiltinRuntime::default();
    let (seeds, verbose): (Vec<u64>, bool) = match std::env::var("KRM_FN_REPLACEMENTS_SEED") {
        Ok(s) => (
            vec![s.parse().expect("KRM_FN_REPLACEMENTS_SEED is a number")],
            true,
        ),
        Err(_) => {
            let n = std::env::var("KRM_FN_REPLACEMENTS_CASES")
                .ok()
                .and_then(|n| n.parse().ok())
                .unwrap_or(300);
            ((0..n).collect(), false)
        }
    };
    let mut stats = GoOutcomes::default();
    let mut failed = Vec::new();
    let mut refused = 0;
    for &seed in &seeds {
        match compare(seed, &go, &rust, &mut stats, verbose).await {
            Verdict::Same => {}
            Verdict::Refused => refused += 1,
            Verdict::Differ(diffs) => failed.push((seed, diffs.join("\n"))),
        }
    }
    println!(
        "apply-replacements: {} generated cases (seeds {}..={}), {} differ, {refused} refused by the builtin \
         (the Go function changed items in {}, succeeded without a change in {}, failed in {}, \
         wrote output the runner does not read in {}, other {}; {} compared by value only, the Go \
         output not being laid out item by item)",
        seeds.len(),
        seeds[0],
        seeds[seeds.len() - 1],
        failed.len(),
        stats.changed,
        stats.unchanged,
        stats.failed,
        stats.unreadable,
        stats.other,
        VALUES_ONLY.load(std::sync::atomic::Ordering::Relaxed)
    );
    assert!(
        failed.is_empty(),
        "{} of {} cases differ (seeds {:?}); the first:\n\n{}",
        failed.len(),
        seeds.len(),
        failed.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        failed
            .iter()
            .take(5)
            .map(|(_, d)| d.as_str())
            .collect::<Vec<_>>()
            .join("\n\n")
    );
    // One case may well be refused; many would make the test hollow.
    assert!(
        seeds.len() == 1 || refused * 2 <= seeds.len(),
        "the builtin refused {refused} of {} cases: more than half",
        seeds.len()
    );
}

/// The generator's premise: the Go function writes every generated item
/// back as it got it when no replacement touches it (up to the indentation
/// of sequences), so a difference in an item's text is one the
/// replacements made.
#[tokio::test]
async fn generated_items_are_in_the_go_writers_normal_form() {
    let bin = common::installed_catalog_binary("apply-replacements");
    let go = ExecCommandRuntime::inheriting(64 << 20);
    let fc = json!({
        "apiVersion": "fn.kpt.dev/v1alpha1",
        "kind": "ApplyReplacements",
        "metadata": {"name": "r"},
        "replacements": [],
    });
    let trimmed =
        |t: &str| -> Vec<String> { t.lines().map(|l| l.trim_start().to_string()).collect() };
    for seed in 0..100 {
        let (items, _) = case(seed);
        let out = go
            .run(call(
                FunctionTarget::Exec(bin.display().to_string()),
                &items,
                Some(&fc),
            ))
            .await
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let inputs: Vec<Vec<String>> = items.iter().map(|t| trimmed(t)).collect();
        for lines in item_lines(&out, &items).expect("item texts") {
            assert!(
                inputs.contains(&lines),
                "seed {seed}: the Go function rewrote an item:\n{}\n--- inputs\n{}",
                lines.join("\n"),
                items.join("---\n")
            );
        }
    }
}
