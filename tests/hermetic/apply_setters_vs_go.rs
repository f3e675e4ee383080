//! The builtin `apply-setters` against the catalog's Go binary (v0.2.2,
//! installed by `scripts/install-catalog-functions.sh`) on generated
//! inputs: objects with `# kpt-set:` comments on scalars, sequence items
//! and sequences (block and flow), in every scalar style, with generated
//! setter configs (plain words, numbers, booleans, empty values, values
//! that need quoting, multi-line values, sequences, values that are not
//! sequences, patterns with several setters, unknown setters, invalid
//! array patterns).
//!
//! Both runtimes get the same call with the items' texts (as render sends
//! them). Compared: success or failure; every output item's value and its
//! text line by line with leading blanks removed (the Go function writes
//! sequences indented, the builtin in the item's own style; everything else
//! — tokens, quoting, comments, line breaks — must be the same); the
//! results; on failure the exit code, stderr and the items written. The
//! seed of each case is printed; `KRM_FN_SETTERS_SEED` reruns one case and
//! `KRM_FN_SETTERS_CASES` sets how many are run (default 300).

use krm_fn_testbed::common;

use krm_fn_runner::adapters::runtime::{BuiltinRuntime, ExecCommandRuntime};
use krm_fn_runner::domain::codec;
use krm_fn_runner::domain::evaluation::EvalError;
use krm_fn_runner::domain::resource_list::ResourceList;
use krm_fn_runner::ports::{FunctionCall, FunctionOutput, FunctionRuntime, FunctionTarget};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};

const NAMES: &[&str] = &["app", "tag", "env", "list", "ns", "n"];

/// A setter value.
fn setter_value(rng: &mut StdRng) -> String {
    let pool: &[&str] = &[
        "shop",
        "my-app",
        "1.25",
        "3",
        "0x1F",
        "true",
        "yes",
        "",
        "a b",
        "key: value",
        "- x",
        "#hash",
        "x #y",
        "it's",
        "say \"hi\"",
        "  padded",
        "trail ",
        "line1\nline2",
        "line1\n\nline2",
        "[dev, staging]",
        "[a, 'b c', 3]",
        "- one\n- two\n",
        "- a: 1\n  b: [x]\n- c\n",
        "[]",
        "not a list",
        "{a: b}",
        "~",
        "null",
        "café",
        "tab\there",
        ":colon",
        "[x, [y, z]]",
    ];
    pool[rng.random_range(0..pool.len())].to_string()
}

/// A scalar pattern over the setter names (sometimes naming no given one).
fn scalar_pattern(rng: &mut StdRng) -> String {
    let a = NAMES[rng.random_range(0..NAMES.len())];
    let b = NAMES[rng.random_range(0..NAMES.len())];
    match rng.random_range(0..8) {
        0 => format!("${{{a}}}:${{{b}}}"),
        1 => format!("prefix-${{{a}}}"),
        2 => format!("${{{a}}}-${{{b}}}"),
        3 => format!("${{{a}}}.${{other}}"),
        4 => format!("${{{a}}}${{{b}}}"),
        _ => format!("${{{a}}}"),
    }
}

/// A scalar token in one of the styles, and whether it is a block scalar.
fn scalar_token(rng: &mut StdRng) -> (String, bool) {
    let words = [
        "nginx", "1.7.9", "3", "true", "dev-x", "a-b-c", "0x10", "x:y",
    ];
    let w = words[rng.random_range(0..words.len())];
    match rng.random_range(0..6) {
        0 => (format!("\"{w}\""), false),
        1 => (format!("'{w}'"), false),
        2 => ("|".to_string(), true),
        _ => (w.to_string(), false),
    }
}

/// Lines of a mapping at `indent` (depth-limited), in kyaml's layout.
fn map_lines(rng: &mut StdRng, out: &mut String, indent: usize, depth: usize, wide: bool) {
    let pad = " ".repeat(indent);
    let n = rng.random_range(1..5);
    for k in 0..n {
        let key = format!("f{depth}{k}");
        let comment = |rng: &mut StdRng, arr: bool| -> String {
            match rng.random_range(0..10) {
                0..=5 => {
                    let p = if arr {
                        if rng.random_range(0..6) == 0 {
                            format!("${{list}}-{}", NAMES[rng.random_range(0..NAMES.len())])
                        } else {
                            format!("${{{}}}", ["list", "env", "app"][rng.random_range(0..3)])
                        }
                    } else {
                        scalar_pattern(rng)
                    };
                    format!(" # kpt-set: {p}")
                }
                6 => " # an ordinary comment".to_string(),
                _ => String::new(),
            }
        };
        match rng.random_range(0..10) {
            0 | 1 if depth < 3 => {
                out.push_str(&format!("{pad}{key}:\n"));
                map_lines(rng, out, indent + 2, depth + 1, wide);
            }
            2 => {
                let c = comment(rng, true);
                out.push_str(&format!("{pad}{key}:{c}\n"));
                let dash = if wide { indent + 2 } else { indent };
                for i in 0..rng.random_range(1..4) {
                    let c = comment(rng, false);
                    out.push_str(&format!("{}- item{i}{c}\n", " ".repeat(dash)));
                }
            }
            3 => {
                let c = comment(rng, true);
                out.push_str(&format!("{pad}{key}: [a, b]{c}\n"));
            }
            _ => {
                let (token, block) = scalar_token(rng);
                let c = comment(rng, false);
                if block {
                    out.push_str(&format!("{pad}{key}: |{c}\n{pad}  old text\n"));
                } else {
                    out.push_str(&format!("{pad}{key}: {token}{c}\n"));
                }
            }
        }
    }
}

/// A generated case: the items' texts and the functionConfig.
fn case(seed: u64) -> (Vec<String>, Value) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut items = Vec::new();
    for i in 0..rng.random_range(1..4) {
        let wide = rng.random_range(0..2) == 0;
        let mut t = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: obj{i}\n  annotations:\n    config.kubernetes.io/path: 'file{i}.yaml'\ndata:\n"
        );
        map_lines(&mut rng, &mut t, 2, 0, wide);
        items.push(t);
    }
    let mut data = serde_json::Map::new();
    for name in NAMES {
        if rng.random_range(0..4) != 0 {
            data.insert(name.to_string(), json!(setter_value(&mut rng)));
        }
    }
    let fc = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "setters"}, "data": data});
    (items, fc)
}

fn call(target: FunctionTarget, items: &[String], fc: &Value) -> FunctionCall {
    common::call_with_texts(target, items, Some(fc))
}

/// Each output item's text, lines with leading blanks removed.
fn item_lines(out: &FunctionOutput, inputs: &[String]) -> Vec<Vec<String>> {
    common::output_item_lines(out, inputs).expect("item texts")
}

/// The setter comments of the inputs' flow sequences: the Go function
/// leaves such a comment on the sequence it sets as well as on its key, and
/// its YAML writer puts it on the next line without a comment of its own —
/// a difference the builtin makes on purpose (see the module docs of
/// `apply_setters`), so a Go line that is ours plus one of these is equal.
fn flow_setter_comments(items: &[String]) -> Vec<String> {
    items
        .iter()
        .flat_map(|t| t.lines())
        .filter_map(|l| {
            l.split_once("] # kpt-set: ")
                .map(|(_, p)| format!("# kpt-set: {p}"))
        })
        .collect()
}

/// Cases where the Go function wrote output that is not YAML (counted).
static INVALID_GO_OUTPUT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The differences between the two runs of one case.
async fn compare(seed: u64, go: &ExecCommandRuntime, rust: &BuiltinRuntime) -> Vec<String> {
    let bin = common::installed_catalog_binary("apply-setters");
    let (items, fc) = case(seed);
    let g = go
        .run(call(
            FunctionTarget::Exec(bin.display().to_string()),
            &items,
            &fc,
        ))
        .await;
    let r = rust
        .run(call(
            FunctionTarget::Image("apply-setters:v0.2.2".into()),
            &items,
            &fc,
        ))
        .await;
    let sets_empty_array = fc["data"]
        .as_object()
        .is_some_and(|d| d.values().any(|v| v == "[]"));
    let mut diffs = Vec::new();
    match (g, r) {
        (Ok(g), Ok(r)) => {
            if g.resource_list.items != r.resource_list.items {
                diffs.push(format!(
                    "items differ\n--- go\n{}--- rust\n{}",
                    codec::to_yaml_string(&g.resource_list.items).unwrap(),
                    codec::to_yaml_string(&r.resource_list.items).unwrap()
                ));
            }
            let (gl, rl) = (item_lines(&g, &items), item_lines(&r, &items));
            let leaks = flow_setter_comments(&items);
            for (i, (a, b)) in gl.iter().zip(&rl).enumerate() {
                let leaked = |x: &String, y: &String| {
                    x == y || leaks.iter().any(|c| *x == format!("{y} {c}"))
                };
                // A leaked comment may also be a line of its own.
                let a: &[String] = match a.first() {
                    Some(first) if a.len() == b.len() + 1 && leaks.contains(first) => &a[1..],
                    _ => a,
                };
                if a.len() != b.len() || !a.iter().zip(b).all(|(x, y)| leaked(x, y)) {
                    diffs.push(format!(
                        "item {i} text differs\n--- go\n{}\n--- rust\n{}",
                        a.join("\n"),
                        b.join("\n")
                    ));
                }
            }
            if g.resource_list.results != r.resource_list.results {
                diffs.push(format!(
                    "results differ\n--- go\n{}--- rust\n{}",
                    codec::to_yaml_string(&g.resource_list.results).unwrap(),
                    codec::to_yaml_string(&r.resource_list.results).unwrap()
                ));
            }
        }
        (Err(EvalError::FunctionFailed(g)), Err(EvalError::FunctionFailed(_)))
            if ResourceList::parse(&g.output).is_err() && sets_empty_array =>
        {
            INVALID_GO_OUTPUT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        (Err(EvalError::FunctionFailed(g)), Err(EvalError::FunctionFailed(r))) => {
            diffs.extend(common::failure_differences(&g, &r));
        }
        // The Go function writes `key: # comment` and an unindented `[]`
        // line for an array setter whose value is `[]`: not YAML. The
        // builtin writes `key: [] # comment` instead, on purpose.
        (Err(EvalError::BadOutput { .. }), Ok(_)) if sets_empty_array => {
            INVALID_GO_OUTPUT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        (g, r) => diffs.push(format!(
            "outcomes differ: go {:?}, rust {:?}",
            g.map(|_| "ok").map_err(|e| e.to_string()),
            r.map(|_| "ok").map_err(|e| e.to_string())
        )),
    }
    if !diffs.is_empty() {
        diffs.insert(
            0,
            format!(
                "seed {seed}: input\n{}functionConfig: {}",
                items.join("---\n"),
                fc["data"]
            ),
        );
    }
    diffs
}

#[tokio::test]
async fn builtin_apply_setters_matches_the_go_binary_on_generated_inputs() {
    common::installed_catalog_binary("apply-setters");
    let go = ExecCommandRuntime::inheriting(64 << 20);
    let rust = BuiltinRuntime::default();
    let seeds: Vec<u64> = match std::env::var("KRM_FN_SETTERS_SEED") {
        Ok(s) => vec![s.parse().expect("KRM_FN_SETTERS_SEED is a number")],
        Err(_) => {
            let n = std::env::var("KRM_FN_SETTERS_CASES")
                .ok()
                .and_then(|n| n.parse().ok())
                .unwrap_or(300);
            (0..n).collect()
        }
    };
    let mut failed = Vec::new();
    let mut refused = 0;
    for &seed in &seeds {
        let diffs = compare(seed, &go, &rust).await;
        if diffs.iter().any(|d| d.contains("leaves this call")) {
            refused += 1;
        }
        if !diffs.is_empty() {
            failed.push(diffs.join("\n"));
        }
    }
    println!(
        "apply-setters: {} generated cases (seeds {}..={}), {} differ, {refused} refused by the builtin, \
         {} where the Go function wrote invalid YAML (an array setter set to `[]`)",
        seeds.len(),
        seeds[0],
        seeds[seeds.len() - 1],
        failed.len(),
        INVALID_GO_OUTPUT.load(std::sync::atomic::Ordering::Relaxed)
    );
    assert!(
        failed.is_empty(),
        "{} of {} cases differ:\n\n{}",
        failed.len(),
        seeds.len(),
        failed
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n\n")
    );
}
