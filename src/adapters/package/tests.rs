use super::*;
use serde_json::json;

const KPTFILE: &str =
    "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: app # the package\n";
const MULTI: &str = "\
# Copyright header
---
# The web tier.
apiVersion: v1
kind: ConfigMap
metadata:
  name: web # keep me
data:
  replicas: \"3\" # kpt-set: ${replicas}
---
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  ports:
    - port: 80 # wide sequence indentation
";

fn package() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::write(p.join("Kptfile"), KPTFILE).unwrap();
    std::fs::write(p.join("web.yaml"), MULTI).unwrap();
    std::fs::write(p.join("README.md"), "# not KRM: ignored\n").unwrap();
    std::fs::create_dir_all(p.join("sub/.hidden")).unwrap();
    std::fs::write(
        p.join("sub/Kptfile"),
        "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: sub\n",
    )
    .unwrap();
    std::fs::write(
        p.join("sub/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: sub\n",
    )
    .unwrap();
    std::fs::write(p.join("sub/skip.yaml"), "not: [valid\n").unwrap();
    std::fs::write(p.join("sub/.krmignore"), "skip.yaml\n").unwrap();
    std::fs::write(
        p.join("sub/.hidden/x.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: hidden\n",
    )
    .unwrap();
    dir
}

fn paths(items: &[Value]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|i| (ann::path(i).unwrap().into(), ann::index(i).unwrap().into()))
        .collect()
}

#[test]
fn reads_objects_with_both_annotation_forms_and_skips_ignored_files() {
    let dir = package();
    let pkg = PackageDir::read(dir.path()).unwrap();
    assert_eq!(
        paths(pkg.items()),
        [
            ("Kptfile".into(), "0".into()),
            ("sub/.hidden/x.yaml".into(), "0".into()),
            ("sub/Kptfile".into(), "0".into()),
            ("sub/cm.yaml".into(), "0".into()),
            ("web.yaml".into(), "0".into()),
            ("web.yaml".into(), "1".into()),
        ]
    );
    let web = &pkg.items()[4];
    // The sequence style is each document's own, as kyaml derives it: the
    // ConfigMap has no sequence, the Service's is wide.
    assert_eq!(ann::get(web, ann::SEQ_INDENT).as_deref(), Some("compact"));
    assert_eq!(
        ann::get(&pkg.items()[5], ann::SEQ_INDENT).as_deref(),
        Some("wide")
    );
    assert_eq!(ann::get(web, ann::LEGACY_PATH).as_deref(), Some("web.yaml"));
    assert_eq!(ann::get(web, ann::LEGACY_INDEX).as_deref(), Some("0"));
    let tree = pkg.package().unwrap();
    assert_eq!(tree.subpackages.len(), 1);
}

#[test]
fn an_unchanged_render_touches_no_file() {
    let dir = package();
    let pkg = PackageDir::read(dir.path()).unwrap();
    let summary = pkg.write_in_place(pkg.items()).unwrap();
    assert!(summary.written.is_empty(), "{summary:?}");
    assert!(summary.pruned.is_empty());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("web.yaml")).unwrap(),
        MULTI
    );
}

#[test]
fn a_changed_object_is_edited_in_place_and_its_neighbours_are_untouched() {
    let dir = package();
    let pkg = PackageDir::read(dir.path()).unwrap();
    let mut items = pkg.items().to_vec();
    items[4]["metadata"]["namespace"] = json!("prod");
    items[4]["data"]["replicas"] = json!("5");
    let summary = pkg.write_in_place(&items).unwrap();
    assert_eq!(summary.written, ["web.yaml"]);
    let text = std::fs::read_to_string(dir.path().join("web.yaml")).unwrap();
    let want = MULTI
        .replace(
            "name: web # keep me\n",
            "name: web # keep me\n  namespace: prod\n",
        )
        .replace("\"3\" # kpt-set", "\"5\" # kpt-set");
    assert_eq!(text, want);
}

#[test]
fn emptied_files_are_pruned_and_new_objects_get_new_files() {
    let dir = package();
    let pkg = PackageDir::read(dir.path()).unwrap();
    let mut items: Vec<Value> = pkg
        .items()
        .iter()
        .filter(|i| ann::path(i).as_deref() != Some("sub/cm.yaml"))
        .cloned()
        .collect();
    let mut generated =
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod"}});
    ann::set_path(&mut generated, "gen/ns.yaml");
    items.push(generated);
    let summary = pkg.write_in_place(&items).unwrap();
    assert_eq!(summary.pruned, ["sub/cm.yaml"]);
    assert_eq!(summary.written, ["gen/ns.yaml"]);
    assert!(!dir.path().join("sub/cm.yaml").exists());
    assert!(
        dir.path().join("sub/skip.yaml").exists(),
        "ignored files stay"
    );
    assert!(dir.path().join("README.md").exists());
    let ns: Value =
        codec::from_yaml_str(&std::fs::read_to_string(dir.path().join("gen/ns.yaml")).unwrap())
            .unwrap();
    assert_eq!(
        ns,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod"}})
    );
}

#[test]
fn paths_escaping_the_package_are_refused_before_anything_is_written() {
    let dir = package();
    let pkg = PackageDir::read(dir.path()).unwrap();
    let mut items = pkg.items().to_vec();
    items[4]["metadata"]["namespace"] = json!("prod");
    ann::set_path(&mut items[5], "../evil.yaml");
    let err = pkg.write_in_place(&items).unwrap_err();
    assert!(matches!(err, PackageIoError::Escapes { .. }), "{err}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("web.yaml")).unwrap(),
        MULTI
    );
}

#[test]
fn output_modes_keep_comments() {
    let dir = package();
    let pkg = PackageDir::read(dir.path()).unwrap();
    let wrapped = pkg.wrapped(pkg.items(), None).unwrap();
    let list = ResourceList::parse(wrapped.as_bytes()).unwrap();
    assert_eq!(list.items.len(), pkg.items().len());
    assert_eq!(
        ann::get(&list.items[5], ann::SEQ_INDENT).as_deref(),
        Some("wide")
    );
    assert_eq!(ann::path(&list.items[5]).as_deref(), Some("web.yaml"));
    assert!(wrapped.contains("# kpt-set: ${replicas}"));
    let unwrapped = pkg.unwrapped(pkg.items(), None);
    let docs: Vec<Value> = codec::from_yaml_documents(unwrapped.as_bytes()).unwrap();
    assert_eq!(docs.len(), 6);
    assert!(ann::get(&docs[4], ann::INDEX).is_none());
    assert!(ann::path(&docs[4]).is_none());
    assert!(unwrapped.contains("# keep me"));

    let out = dir.path().join("out");
    pkg.write_to_dir(&out, pkg.items(), None).unwrap();
    assert_eq!(
        std::fs::read_to_string(out.join("web.yaml")).unwrap(),
        MULTI
    );
    assert!(!out.join("README.md").exists());
    assert!(matches!(
        pkg.write_to_dir(&out, pkg.items(), None).unwrap_err(),
        PackageIoError::OutputExists(_)
    ));
}

#[test]
fn invalid_yaml_names_the_file_and_a_missing_kptfile_is_reported() {
    let dir = package();
    std::fs::write(dir.path().join("bad.yaml"), "a: [1, 2\n").unwrap();
    let err = PackageDir::read(dir.path()).unwrap_err().to_string();
    assert!(err.contains("bad.yaml"), "{err}");
    let empty = tempfile::tempdir().unwrap();
    assert!(matches!(
        PackageDir::read(empty.path()).unwrap_err(),
        PackageIoError::NoKptfile(_)
    ));
}

#[test]
fn kptfile_status_is_written_alone() {
    let dir = package();
    let pkg = PackageDir::read(dir.path()).unwrap();
    pkg.write_kptfile_status(&json!({"conditions": [{"type": "Rendered", "status": "False"}]}))
        .unwrap();
    let text = std::fs::read_to_string(dir.path().join("Kptfile")).unwrap();
    assert!(text.starts_with(KPTFILE), "{text}");
    assert!(text.contains("status:"));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("web.yaml")).unwrap(),
        MULTI
    );
}

#[test]
fn json_files_stay_json() {
    let dir = package();
    let json_text =
        "{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \"j\"}}\n";
    std::fs::write(dir.path().join("j.json"), json_text).unwrap();
    let pkg = PackageDir::read(dir.path()).unwrap();
    let mut items = pkg.items().to_vec();
    assert!(pkg.write_in_place(&items).unwrap().written.is_empty());
    let j = items
        .iter_mut()
        .find(|i| ann::path(i).as_deref() == Some("j.json"))
        .unwrap();
    j["metadata"]["namespace"] = json!("prod");
    pkg.write_in_place(&items).unwrap();
    let back: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("j.json")).unwrap()).unwrap();
    assert_eq!(back["metadata"]["namespace"], "prod");
}

#[test]
fn links_inside_the_package_are_read_and_links_out_of_it_refused() {
    let dir = package();
    std::os::unix::fs::symlink("web.yaml", dir.path().join("link.yaml")).unwrap();
    std::os::unix::fs::symlink("sub", dir.path().join("linkdir")).unwrap();
    let pkg = PackageDir::read(dir.path()).unwrap();
    let linked: Vec<_> = paths(pkg.items())
        .into_iter()
        .filter(|(p, _)| p.starts_with("link"))
        .collect();
    assert_eq!(
        linked,
        [
            ("link.yaml".into(), "0".into()),
            ("link.yaml".into(), "1".into())
        ],
        "a linked file is read under its own name; a linked directory is not entered"
    );

    let outside = tempfile::tempdir().unwrap();
    std::fs::write(
        outside.path().join("secret.yaml"),
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n",
    )
    .unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret.yaml"),
        dir.path().join("out.yaml"),
    )
    .unwrap();
    let err = PackageDir::read(dir.path()).unwrap_err();
    assert!(matches!(err, PackageIoError::Link { .. }), "{err}");
    assert!(err.to_string().contains("outside the package"), "{err}");
    std::fs::write(dir.path().join(".krmignore"), "out.yaml\n").unwrap();
    assert!(
        PackageDir::read(dir.path()).is_ok(),
        "an ignored link is not read"
    );

    std::os::unix::fs::symlink("nowhere.yaml", dir.path().join("dangling.yaml")).unwrap();
    let err = PackageDir::read(dir.path()).unwrap_err().to_string();
    assert!(
        err.contains("dangling.yaml") && err.contains("cannot be read"),
        "{err}"
    );
}

#[test]
fn a_changed_linked_file_is_not_written_through_its_link() {
    let dir = package();
    std::fs::create_dir(dir.path().join("real")).unwrap();
    std::fs::write(
        dir.path().join("real/target.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: linked\n",
    )
    .unwrap();
    std::fs::write(dir.path().join(".krmignore"), "real\n").unwrap();
    std::os::unix::fs::symlink("real/target.yaml", dir.path().join("link.yaml")).unwrap();
    let pkg = PackageDir::read(dir.path()).unwrap();
    let mut items = pkg.items().to_vec();
    for i in &mut items {
        i["metadata"]["namespace"] = json!("prod");
    }
    let before = std::fs::read_to_string(dir.path().join("web.yaml")).unwrap();
    let err = pkg.write_in_place(&items).unwrap_err();
    assert!(matches!(err, PackageIoError::NotSaved(_)), "{err}");
    assert!(
        err.to_string().contains("link.yaml") && err.to_string().contains("symbolic link"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("web.yaml")).unwrap(),
        before
    );
    assert!(
        !std::fs::read_to_string(dir.path().join("real/target.yaml"))
            .unwrap()
            .contains("prod")
    );
}

#[test]
fn crlf_files_keep_their_line_ends_and_document_end_markers_stay() {
    let dir = package();
    let crlf = "# head\r\napiVersion: v1\r\nkind: ConfigMap\r\nmetadata:\r\n  name: w\r\n...\r\n---\r\napiVersion: v1\r\nkind: ConfigMap\r\nmetadata:\r\n  name: x\r\n";
    std::fs::write(dir.path().join("win.yaml"), crlf).unwrap();
    let pkg = PackageDir::read(dir.path()).unwrap();
    let mut items = pkg.items().to_vec();
    assert!(pkg.write_in_place(&items).unwrap().written.is_empty());
    for i in items
        .iter_mut()
        .filter(|i| ann::path(i).as_deref() == Some("win.yaml"))
    {
        i["metadata"]["labels"] = json!({"a": "b"});
    }
    pkg.write_in_place(&items).unwrap();
    let text = std::fs::read_to_string(dir.path().join("win.yaml")).unwrap();
    assert_eq!(
        text,
        "# head\r\napiVersion: v1\r\nkind: ConfigMap\r\nmetadata:\r\n  name: w\r\n  labels:\r\n    a: b\r\n...\r\n---\r\napiVersion: v1\r\nkind: ConfigMap\r\nmetadata:\r\n  name: x\r\n  labels:\r\n    a: b\r\n"
    );
}

#[test]
fn a_file_whose_first_documents_are_deleted_starts_with_the_next_one() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::write(p.join("Kptfile"), KPTFILE).unwrap();
    std::fs::write(
        p.join("two.yaml"),
        "# about a\nkind: A\nmetadata:\n  name: a\n...\n--- # about b\nkind: B\nmetadata:\n  name: b\n---\nkind: C\nmetadata:\n  name: c\n",
    )
    .unwrap();
    let pkg = PackageDir::read(p).unwrap();
    let items: Vec<Value> = pkg
        .items()
        .iter()
        .filter(|i| ann::name(i) != "a")
        .cloned()
        .collect();
    pkg.write_in_place(&items).unwrap();
    assert_eq!(
        std::fs::read_to_string(p.join("two.yaml")).unwrap(),
        "# about b\nkind: B\nmetadata:\n  name: b\n---\nkind: C\nmetadata:\n  name: c\n"
    );
}

/// Writes `files` (path → text; a path ending in `Kptfile` gets a Kptfile
/// named after its directory, any other gets a ConfigMap named after the
/// file) and returns the object files the reader keeps.
fn read_kept(files: &[(&str, &str)]) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let full = dir.path().join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        let text = if text.is_empty() && path.ends_with("Kptfile") {
            KPTFILE.to_string()
        } else if text.is_empty() {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{}\n",
                path.len()
            )
        } else {
            text.to_string()
        };
        std::fs::write(full, text).unwrap();
    }
    let pkg = PackageDir::read(dir.path()).unwrap();
    let mut kept: Vec<String> = paths(pkg.items()).into_iter().map(|(p, _)| p).collect();
    kept.dedup();
    kept.retain(|p| !p.ends_with("Kptfile"));
    kept
}

/// `.krmignore` follows gitignore's rules within its own package, the cases
/// kyaml's package reader is tested with (a file by path, a folder, a
/// subpackage's own file, a parent's file not reaching into a subpackage)
/// and the gitignore rules beyond a plain `*`.
#[test]
fn krmignore_follows_gitignore_rules_per_package() {
    // One file by its path; a folder by its path (everything under it).
    let base = [
        ("Kptfile", ""),
        ("x/keep/one.yaml", ""),
        ("x/drop/two.yaml", ""),
    ];
    let with = |ignore: &'static str| {
        let mut files = base.to_vec();
        files.push((".krmignore", ignore));
        read_kept(&files)
    };
    assert_eq!(with("x/drop/two.yaml\n"), ["x/keep/one.yaml"]);
    assert_eq!(with("\nx/drop\n"), ["x/keep/one.yaml"]);
    // A directory-only pattern matches the folder, not a file of that name.
    assert_eq!(with("drop/\n"), ["x/keep/one.yaml"]);
    // A leading `/` anchors to the package directory: no top-level `drop`.
    assert_eq!(with("/drop\n"), ["x/drop/two.yaml", "x/keep/one.yaml"]);
    // `?` and `[…]` wildcards, comments and negation.
    assert_eq!(with("# comment\n??o.yaml\n"), ["x/keep/one.yaml"]);
    assert_eq!(with("[t]wo.yaml\n"), ["x/keep/one.yaml"]);
    assert_eq!(with("*.yaml\n!one.yaml\n"), ["x/keep/one.yaml"]);
    // `**` spans directories.
    assert_eq!(with("x/**/two.yaml\n"), ["x/keep/one.yaml"]);
    // A pattern with a slash inside is anchored: `drop/two.yaml` is not at the top.
    assert_eq!(
        with("drop/two.yaml\n"),
        ["x/drop/two.yaml", "x/keep/one.yaml"]
    );

    // A subpackage's own `.krmignore` applies to its files; the parent's
    // patterns, which name paths in the parent, do not reach into it.
    let sub = [
        ("Kptfile", ""),
        (".krmignore", "d/e/f.yaml\nsub/b.yaml\n"),
        ("sub/Kptfile", ""),
        ("sub/.krmignore", "a.yaml\n"),
        ("sub/a.yaml", ""),
        ("sub/b.yaml", ""),
    ];
    assert_eq!(read_kept(&sub), ["sub/b.yaml"]);

    // Packages and plain directories mixed: only the package with the
    // `.krmignore` loses its file; its plain subdirectory follows its rules,
    // its own subpackage does not.
    let mixed = [
        ("Kptfile", ""),
        ("manifest.yaml", ""),
        ("a/manifest.yaml", ""),
        ("d/Kptfile", ""),
        ("d/.krmignore", "manifest.yaml\n"),
        ("d/manifest.yaml", ""),
        ("d/plain/manifest.yaml", ""),
        ("d/e/Kptfile", ""),
        ("d/e/manifest.yaml", ""),
    ];
    assert_eq!(
        read_kept(&mixed),
        ["a/manifest.yaml", "d/e/manifest.yaml", "manifest.yaml"]
    );
}

#[test]
fn a_byte_order_mark_is_not_read_into_the_object_and_stays_with_the_file() {
    let dir = package();
    let marked = "\u{feff}apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: m\n";
    std::fs::write(dir.path().join("m.yaml"), marked).unwrap();
    let pkg = PackageDir::read(dir.path()).unwrap();
    let mut items = pkg.items().to_vec();
    let m = items
        .iter_mut()
        .find(|i| ann::path(i).as_deref() == Some("m.yaml"))
        .unwrap();
    assert_eq!(m["apiVersion"], "v1", "{m}");
    assert!(pkg.write_in_place(&items).unwrap().written.is_empty());
    for i in items
        .iter_mut()
        .filter(|i| ann::path(i).as_deref() == Some("m.yaml"))
    {
        i["metadata"]["namespace"] = "prod".into();
    }
    pkg.write_in_place(&items).unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("m.yaml")).unwrap(),
        "\u{feff}apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: m\n  namespace: prod\n"
    );
}
