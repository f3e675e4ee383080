//! Real-world packages: kpt packages published by other people, rendered by
//! `kpt fn render` and by `krm-fn-runner render`, in place and with
//! `-o DIR`, and compared as every other package of this suite is (exit
//! codes, files, parsed YAML, bytes, comments, `results.yaml`).
//!
//! The packages ([`SOURCES`]):
//! - Google's blueprints (`catalog/` of GoogleCloudPlatform/blueprints at the
//!   four refs Porch's e2e suite clones), from the git bundle
//!   `blueprints-catalog.bundle`; a package that is the same at two refs is
//!   rendered once, under the first ref's name;
//! - Nephio's package catalog (`nephio-catalog.tar.gz`) and Nephio's example
//!   packages (`nephio-example-packages.tar.gz`);
//! - kpt's own `package-examples` (in the kpt module, `KRM_FN_KPT_MODULE`).
//!
//! The first three are read from `KRM_FN_UPSTREAM_PACKAGES` (a folder holding
//! those files; `.ci/run` points it at `../shared/sources`); the test fails
//! naming the variable when it is unset, and `scripts/test.sh` runs it only
//! when it is set. A package is a directory holding a `Kptfile` with none
//! above it in its source; its subpackages render with it.
//!
//! Every `image:` step is rewritten to `exec:` the catalog binary that
//! `scripts/install-catalog-functions.sh` built — the same rewrite for both
//! tools. The packages name versions the Go module proxy does not serve;
//! each is run with the installed version of the same function, and every
//! such alias is in [`ALIASES`] (the test fails when the packages name an
//! image that is not listed, or a listed one is no longer named). Packages
//! whose functions cannot be had at all are skipped, each function with its
//! reason in [`UNAVAILABLE`].
//!
//! Differences from kpt go through the suite's `KNOWN_DIFFERENCES`, as for
//! every other package: any other difference fails the test.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use krm_fn_testbed::common::{self, run_checked as run};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{
    Aspect, Difference, check_against_known, compare_in_place, compare_output_dir_with, files,
    function_name, kptfile_images,
};

/// Where each source's packages come from: (name, file in
/// `KRM_FN_UPSTREAM_PACKAGES`).
const SOURCES: &[(&str, &str)] = &[
    ("blueprints", "blueprints-catalog.bundle"),
    ("nephio-catalog", "nephio-catalog.tar.gz"),
    ("nephio-example-packages", "nephio-example-packages.tar.gz"),
];

/// The blueprint refs Porch v1.5.3's e2e suite clones (tags of the bundle).
const BLUEPRINT_REFS: &[&str] = &[
    "bucket-blueprint-v0.4.3",
    "redis-bucket-blueprint-v0.3.2",
    "spanner-blueprint-v0.3.2",
    "hierarchy-783380ce",
];

/// Every image the runnable packages name, and the installed catalog
/// version that runs in its place (`scripts/install-catalog-functions.sh`
/// pins one version per function: the nearest release the module proxy
/// serves).
const ALIASES: &[(&str, &str)] = &[
    (
        "gcr.io/kpt-fn/apply-replacements:v0.1.1",
        "apply-replacements v0.1.5",
    ),
    ("gcr.io/kpt-fn/apply-setters:v0.1", "apply-setters v0.2.2"),
    ("gcr.io/kpt-fn/apply-setters:v0.2", "apply-setters v0.2.2"),
    ("gcr.io/kpt-fn/set-namespace:v0.1", "set-namespace v0.4.5"),
    ("gcr.io/kpt-fn/starlark:v0.3", "starlark v0.5.5"),
    ("gcr.io/kpt-fn/starlark:v0.4", "starlark v0.5.5"),
    ("gcr.io/kpt-fn/starlark:v0.4.3", "starlark v0.5.5"),
    (
        "ghcr.io/kptdev/krm-functions-catalog/apply-replacements:v0.1.1",
        "apply-replacements v0.1.5",
    ),
    (
        "ghcr.io/kptdev/krm-functions-catalog/apply-setters:v0.2.0",
        "apply-setters v0.2.2",
    ),
    (
        "ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.1",
        "set-namespace v0.4.5",
    ),
    (
        "ghcr.io/kptdev/krm-functions-catalog/starlark:v0.4.3",
        "starlark v0.5.5",
    ),
    (
        "ghcr.io/kptdev/krm-functions-catalog/starlark:v0.5.0",
        "starlark v0.5.5",
    ),
];

/// Functions the packages name that no one can build here, and why; a
/// package naming one is skipped.
const UNAVAILABLE: &[(&str, &str)] = &[
    (
        "generate-folders",
        "a TypeScript function of the catalog: no Go module to build it from",
    ),
    (
        "enable-gcp-services",
        "the catalog's Go module for it is not served by the Go module proxy",
    ),
    (
        "set-project-id",
        "the catalog's Go module for it is not served by the Go module proxy",
    ),
    (
        "kubeval",
        "the catalog's Go module for it is not served by the Go module proxy",
    ),
    (
        "set-labels",
        "the catalog's Go module for it is not served by the Go module proxy",
    ),
    (
        "policy-controller-validate",
        "Google's Policy Controller image: published as an image only, no source",
    ),
    (
        "interface-fn",
        "Nephio's own function: published as an image only (docker.io/nephio)",
    ),
    (
        "nad-fn",
        "Nephio's own function: published as an image only (docker.io/nephio)",
    ),
    (
        "nfdeploy-fn",
        "Nephio's own function: published as an image only (docker.io/nephio)",
    ),
    (
        "dnn-fn",
        "Nephio's own function: published as an image only (docker.io/nephio)",
    ),
    (
        "ueransim-deploy-fn",
        "Nephio's own function: published as an image only (docker.io/nephio)",
    ),
    (
        "gen-configmap-fn",
        "Nephio's own function: published as an image only (docker.io/nephio)",
    ),
];

/// Unpacks the sources into `dest` (one folder each; the blueprints one
/// folder per ref) and returns (source name, folder) pairs.
fn unpack(upstream: &Path, kpt_module: &Path, dest: &Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for (name, file) in SOURCES {
        let src = upstream.join(file);
        assert!(
            src.is_file(),
            "KRM_FN_UPSTREAM_PACKAGES={} holds no {file}",
            upstream.display()
        );
        if file.ends_with(".bundle") {
            let mirror = dest.join(format!("{name}.git"));
            run(Command::new("git")
                .args(["clone", "--quiet", "--mirror"])
                .arg(&src)
                .arg(&mirror));
            for tag in BLUEPRINT_REFS {
                let dir = dest.join(format!("{name}@{tag}"));
                std::fs::create_dir_all(&dir).unwrap();
                let archive = dir.join("archive.tar");
                run(Command::new("git")
                    .arg("-C")
                    .arg(&mirror)
                    .args(["archive", "--output"])
                    .arg(&archive)
                    .args([tag, "catalog"]));
                run(Command::new("tar")
                    .arg("-xf")
                    .arg(&archive)
                    .arg("-C")
                    .arg(&dir));
                std::fs::remove_file(&archive).unwrap();
                out.push((format!("{name}@{tag}"), dir.join("catalog")));
            }
        } else {
            let dir = dest.join(name);
            std::fs::create_dir_all(&dir).unwrap();
            run(Command::new("tar")
                .arg("-xzf")
                .arg(&src)
                .arg("-C")
                .arg(&dir));
            out.push((name.to_string(), dir));
        }
    }
    let examples = kpt_module.join("package-examples");
    assert!(
        examples.is_dir(),
        "the kpt module at {} has no package-examples/",
        kpt_module.display()
    );
    out.push(("kpt-package-examples".to_string(), examples));
    out
}

/// The directories under `root` holding a `Kptfile` with none above them.
/// The builtins rendered in place of their binaries: (function, image).
const BUILTINS: &[(&str, &str)] = &[
    ("apply-setters", super::BUILTIN_APPLY_SETTERS),
    ("apply-replacements", super::BUILTIN_APPLY_REPLACEMENTS),
];

/// The builtins of [`BUILTINS`] whose function a Kptfile of the package
/// (or of a subpackage) runs.
fn builtins_used(pkg: &Path) -> Vec<(&'static str, &'static str)> {
    let images: Vec<String> = kptfiles(pkg)
        .iter()
        .flat_map(|k| kptfile_images(k))
        .collect();
    BUILTINS
        .iter()
        .filter(|(f, _)| images.iter().any(|i| function_name(i) == *f))
        .copied()
        .collect()
}

fn root_packages(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        if dir.join("Kptfile").is_file() {
            found.push(dir);
            continue;
        }
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            }
        }
    }
    found.sort();
    found
}

/// The text of every `Kptfile` in the package (subpackages included).
fn kptfiles(pkg: &Path) -> Vec<String> {
    files(pkg)
        .into_iter()
        .filter(|(rel, _)| rel == "Kptfile" || rel.ends_with("/Kptfile"))
        .map(|(_, bytes)| String::from_utf8_lossy(&bytes).into_owned())
        .collect()
}

/// A hash of the package's paths and bytes (to render a package the
/// blueprint refs share once).
fn content_hash(pkg: &Path) -> u64 {
    let mut h = DefaultHasher::new();
    files(pkg).hash(&mut h);
    h.finish()
}

/// The lines of `text`, counted.
fn line_counts(text: &[u8]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for line in String::from_utf8_lossy(text).lines() {
        *counts.entry(line.to_string()).or_default() += 1;
    }
    counts
}

/// KEPT_INPUT_TEXT: a file that reads the same from kpt's render and ours
/// (the caller compared their values) and differs in bytes only because kpt
/// re-encoded text that we wrote as it was read: every line our file has
/// more often than kpt's is a line of the input file, as often. kpt writes
/// every file of a package through kyaml, whether a function changed it or
/// not — trailing spaces dropped, long or multi-line scalars re-quoted,
/// blocks and flow lists re-laid, a scalar a function wrote with the same
/// value in the function's style; we keep the file's text wherever the
/// value did not change (the book's differences page). The one line of
/// ours that may differ from the input's is a block scalar's header that
/// ends the file without a final line break, written with strip chomping
/// (`key: |` → `key: |-`) so that its value stays the same (the
/// block-scalar-at-EOF rule). A line we wrote that is neither kpt's nor the
/// input's is a difference of ours and fails.
fn kept_input_text(input: &[u8], kpt: &[u8], ours: &[u8]) -> bool {
    let (input, kpt) = (line_counts(input), line_counts(kpt));
    let from_input = |line: &str| {
        let as_read = input.get(line).copied().unwrap_or(0);
        let clipped = line
            .strip_suffix("|-")
            .or_else(|| line.strip_suffix(">-"))
            .map(|head| {
                let indicator = &line[head.len()..head.len() + 1];
                input
                    .get(&format!("{head}{indicator}"))
                    .copied()
                    .unwrap_or(0)
            })
            .unwrap_or(0);
        as_read + clipped
    };
    line_counts(ours).into_iter().all(|(line, n)| {
        let extra = n.saturating_sub(kpt.get(&line).copied().unwrap_or(0));
        extra <= from_input(&line)
    })
}

/// What kpt's re-encoding changed, for the summary: only trailing spaces,
/// or more.
fn reencoding_kind(kpt: &[u8], ours: &[u8]) -> &'static str {
    let trimmed = |b: &[u8]| {
        String::from_utf8_lossy(b)
            .lines()
            .map(|l| l.trim_end().to_string())
            .collect::<Vec<_>>()
    };
    if trimmed(kpt) == trimmed(ours) {
        "trailing spaces dropped"
    } else {
        "re-encoded"
    }
}

/// What comparing one package found.
struct Outcome {
    /// Renders (of two) whose exit codes agree.
    agree: usize,
    /// No difference at all, in either mode.
    identical: bool,
    /// KEPT_INPUT_TEXT differences: (kind, package name as compared).
    reencoded: Vec<(&'static str, String)>,
    /// Every other difference.
    diffs: Vec<Difference>,
}

/// Renders `pkg` in place and with `-o DIR` with both tools and compares,
/// setting KEPT_INPUT_TEXT differences apart.
/// The name under which a package's render with our builtin `function`
/// (in place of the binary kpt runs) is compared.
fn builtin_name(name: &str, function: &str) -> String {
    format!("{name}@builtin:{function}")
}

fn compare_package(name: &str, pkg: &Path) -> Outcome {
    let mut found = Vec::new();
    let (kpt, ours, work) = compare_in_place(name, pkg, &super::image_to_exec, &mut found);
    let in_place = found.len();
    let (kpt_dir, ours_dir, out) =
        compare_output_dir_with(name, pkg, &super::image_to_exec, &mut found);
    let in_dir = found.len();
    let mut agree = usize::from(kpt.code == ours.code) + usize::from(kpt_dir == ours_dir);
    // Per builtin run: where its differences end in `found`, its work dir.
    let mut builtin_work = Vec::new();
    for (function, image) in builtins_used(pkg) {
        let (k, o, w) = super::compare_builtin_in_place(
            &builtin_name(name, function),
            pkg,
            &super::image_to_exec,
            (function, image),
            &mut found,
        );
        agree += usize::from(k == o);
        builtin_work.push((found.len(), w));
    }
    let mut outcome = Outcome {
        agree,
        identical: found.is_empty(),
        reencoded: Vec::new(),
        diffs: Vec::new(),
    };
    for (n, d) in found.into_iter().enumerate() {
        let (dir, sub) = if n < in_place {
            (work.path(), "pkg")
        } else if n < in_dir {
            (out.path(), "out")
        } else {
            let (_, w) = builtin_work
                .iter()
                .find(|(end, _)| n < *end)
                .expect("a difference belongs to a run");
            (w.path(), "pkg")
        };
        let read = |tool: &str| {
            let bytes = std::fs::read(dir.join(tool).join(sub).join(&d.file)).ok()?;
            Some(super::without_top_level_key(&bytes, "status"))
        };
        let input = std::fs::read(pkg.join(&d.file)).ok().map(|b| {
            if d.file == "Kptfile" || d.file.ends_with("/Kptfile") {
                super::image_to_exec(&String::from_utf8_lossy(&b)).into_bytes()
            } else {
                b
            }
        });
        match (d.aspect, read("kpt"), read("ours"), input) {
            (Aspect::Bytes, Some(k), Some(o), Some(i)) if kept_input_text(&i, &k, &o) => {
                outcome
                    .reencoded
                    .push((reencoding_kind(&k, &o), d.package.clone()));
            }
            _ => outcome.diffs.push(d),
        }
    }
    outcome
}

#[test]
#[ignore = "needs the upstream packages (KRM_FN_UPSTREAM_PACKAGES); scripts/test.sh runs it when set"]
fn real_world_packages() {
    let upstream = std::env::var_os("KRM_FN_UPSTREAM_PACKAGES").unwrap_or_else(|| {
        panic!(
            "KRM_FN_UPSTREAM_PACKAGES is not set: point it at a folder holding \
             blueprints-catalog.bundle, nephio-catalog.tar.gz and nephio-example-packages.tar.gz \
             (.ci/run sets it to ../shared/sources)"
        )
    });
    let module = std::env::var_os("KRM_FN_KPT_MODULE").unwrap_or_else(|| {
        panic!(
            "KRM_FN_KPT_MODULE is not set: run the tests through scripts/test.sh, or export \
             KRM_FN_KPT_MODULE=\"$(scripts/fetch-kpt-fixtures.sh)\""
        )
    });
    let work = tempfile::tempdir().unwrap();
    let sources = unpack(Path::new(&upstream), Path::new(&module), work.path());
    let installed: BTreeMap<&str, String> = super::INSTALLED
        .iter()
        .map(|f| (*f, common::catalog_version(f)))
        .collect();
    let unavailable: BTreeMap<&str, &str> = UNAVAILABLE.iter().copied().collect();

    let mut seen = BTreeSet::new();
    let mut runnable: Vec<(String, PathBuf)> = Vec::new();
    let mut skipped: Vec<(String, BTreeSet<String>)> = Vec::new();
    let mut duplicates = 0;
    let mut aliases: BTreeMap<String, String> = BTreeMap::new();
    let mut per_source: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for (source, root) in &sources {
        for pkg in root_packages(root) {
            let name = format!("{source}/{}", pkg.strip_prefix(root).unwrap().display());
            if !seen.insert(content_hash(&pkg)) {
                duplicates += 1;
                continue;
            }
            let images: Vec<String> = kptfiles(&pkg)
                .iter()
                .flat_map(|k| kptfile_images(k))
                .collect();
            let missing: BTreeSet<String> = images
                .iter()
                .map(|i| function_name(i).to_string())
                .filter(|f| !installed.contains_key(f.as_str()))
                .collect();
            let counts = per_source
                .entry(source.split('@').next().unwrap())
                .or_default();
            if missing.is_empty() {
                for image in &images {
                    let f = function_name(image);
                    aliases.insert(image.clone(), format!("{f} {}", installed[f]));
                }
                counts.0 += 1;
                runnable.push((name, pkg));
            } else {
                counts.1 += 1;
                skipped.push((name, missing));
            }
        }
    }

    // Every skip has a listed reason; every listed reason is still used.
    let missing_functions: BTreeSet<&String> = skipped.iter().flat_map(|(_, m)| m).collect();
    let unlisted: Vec<&&String> = missing_functions
        .iter()
        .filter(|f| !unavailable.contains_key(f.as_str()))
        .collect();
    assert!(
        unlisted.is_empty(),
        "packages name functions that are neither installed nor in UNAVAILABLE: {unlisted:?}"
    );
    let unused: Vec<&str> = unavailable
        .keys()
        .filter(|f| !missing_functions.iter().any(|m| m == *f))
        .copied()
        .collect();
    assert!(
        unused.is_empty(),
        "UNAVAILABLE lists functions no package names any more: {unused:?}"
    );
    // Every alias is listed, and every listed one is used.
    let listed: BTreeMap<String, String> = ALIASES
        .iter()
        .map(|(i, v)| (i.to_string(), v.to_string()))
        .collect();
    let exact: BTreeMap<String, String> = aliases
        .into_iter()
        .filter(|(image, runs)| {
            let tag = image.rsplit_once(':').map(|(_, t)| t).unwrap_or("");
            runs.split_whitespace().nth(1) != Some(tag)
        })
        .collect();
    assert_eq!(
        exact, listed,
        "ALIASES must list every image the packages name whose version is not the installed one"
    );

    // Four packages at a time: most of a render is waiting on processes
    // (kpt's render of a package is about a third CPU).
    let next = AtomicUsize::new(0);
    let outcomes: Mutex<Vec<(usize, Outcome)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some((name, pkg)) = runnable.get(i) else {
                        break;
                    };
                    let outcome = compare_package(name, pkg);
                    outcomes.lock().unwrap().push((i, outcome));
                }
            });
        }
    });
    let mut outcomes = outcomes.into_inner().unwrap();
    outcomes.sort_by_key(|(i, _)| *i);
    let mut diffs = Vec::new();
    let mut names = Vec::new();
    let mut agree = 0;
    let mut identical = 0;
    let mut reencoded: BTreeMap<&str, usize> = BTreeMap::new();
    let mut reencoded_packages = BTreeSet::new();
    let mut builtin_runs = 0;
    for ((name, pkg), (_, outcome)) in runnable.iter().zip(outcomes) {
        agree += outcome.agree;
        identical += usize::from(outcome.identical);
        for (kind, package) in outcome.reencoded {
            *reencoded.entry(kind).or_default() += 1;
            reencoded_packages.insert(package);
        }
        diffs.extend(outcome.diffs);
        names.push(name.clone());
        names.push(format!("{name}@dir"));
        for (function, _) in builtins_used(pkg) {
            builtin_runs += 1;
            names.push(builtin_name(name, function));
        }
    }
    println!(
        "real-world packages: {} rendered, {} skipped, {} the same as another ref's",
        runnable.len(),
        skipped.len(),
        duplicates
    );
    for (source, (ran, skip)) in &per_source {
        println!("  {source}: {ran} rendered, {skip} skipped");
    }
    for (name, missing) in &skipped {
        let reasons: Vec<String> = missing
            .iter()
            .map(|f| format!("{f}: {}", unavailable[f.as_str()]))
            .collect();
        println!("  skipped {name} ({})", reasons.join("; "));
    }
    println!(
        "exit codes agree in {agree} of {} renders ({builtin_runs} of them with the builtin \
         apply-setters or apply-replacements in place of the binary); {identical} of {} packages identical in every mode",
        2 * runnable.len() + builtin_runs,
        runnable.len()
    );
    println!(
        "files kpt re-encoded where we kept the text as read (KEPT_INPUT_TEXT), in {} renders: {reencoded:?}",
        reencoded_packages.len()
    );
    assert!(
        runnable.len() >= 100,
        "expected at least 100 runnable real-world packages, found {}",
        runnable.len()
    );
    check_against_known(&names, &diffs);
}
