use super::*;
use crate::domain::codec::from_yaml_str;
use serde_json::json;

fn patch(text: &str, edit: impl FnOnce(&mut Value)) -> String {
    let from: Value = from_yaml_str(text).unwrap();
    let mut to = from.clone();
    edit(&mut to);
    let out = patch_document(text, &from, &to).unwrap();
    assert_eq!(from_yaml_str::<Value>(&out).unwrap(), to, "{out}");
    out
}

/// `base` edited into `target`, with the function's text `source`.
fn merged(base: &str, source: &str, target: Option<Value>) -> String {
    let b = YamlDoc::parse(base).unwrap();
    let s = YamlDoc::parse(source).unwrap();
    let target = target.unwrap_or_else(|| s.value().clone());
    let out = merge(&b, Some(&s), &target).unwrap();
    assert_eq!(from_yaml_str::<Value>(&out).unwrap(), target, "{out}");
    out
}

const DEPLOY: &str = "\
# A web server.
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web # the name

  labels:
    app: web
spec:
  replicas: 3 # kpt-set: ${replicas}
  template:
    spec:
      containers:
        - name: nginx
          image: nginx:1.25 # kpt-set: ${image}
          args: [\"-g\", \"daemon off;\"]
        - name: sidecar
          image: envoy
      notes: |
        line one
        line two
";

#[test]
fn unchanged_documents_are_returned_as_they_are() {
    assert_eq!(patch(DEPLOY, |_| {}), DEPLOY);
}

#[test]
fn a_changed_scalar_keeps_its_comment_and_everything_else() {
    let out = patch(DEPLOY, |v| {
        v["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:1.27".into();
        v["spec"]["replicas"] = 5.into();
    });
    assert_eq!(
        out,
        DEPLOY
            .replace("nginx:1.25 #", "nginx:1.27 #")
            .replace("replicas: 3", "replicas: 5")
    );
}

#[test]
fn new_keys_are_appended_with_the_mapping_indentation() {
    let out = patch(DEPLOY, |v| {
        v["metadata"]["namespace"] = "prod".into();
        v["metadata"]["labels"]["tier"] = "007".into();
        v["metadata"]["annotations"] = json!({"b": "x", "a": "true"});
    });
    assert!(
        out.contains("  labels:\n    app: web\n    tier: \"007\"\n  namespace: prod\n  annotations:\n    b: x\n    a: \"true\"\nspec:"),
        "{out}"
    );
    assert!(out.contains("name: web # the name\n"));
}

#[test]
fn removed_keys_and_items_go_and_inserted_items_land_in_place() {
    let out = patch(DEPLOY, |v| {
        v["metadata"]
            .as_object_mut()
            .unwrap()
            .shift_remove("labels");
        let c = v["spec"]["template"]["spec"]["containers"]
            .as_array_mut()
            .unwrap();
        c.insert(1, json!({"name": "init", "image": "busybox"}));
    });
    assert!(!out.contains("labels"));
    assert!(
        out.contains("          args: [\"-g\", \"daemon off;\"]\n        - name: init\n          image: busybox\n        - name: sidecar\n"),
        "{out}"
    );
}

#[test]
fn wide_and_compact_sequences_stay_as_they_are() {
    let text = "spec:\n  ports:\n    - port: 80\n";
    let out = patch(text, |v| v["spec"]["hosts"] = json!(["a", "b"]));
    assert_eq!(
        out,
        "spec:\n  ports:\n    - port: 80\n  hosts:\n    - a\n    - b\n"
    );
    let text = "spec:\n  ports:\n  - port: 80\n";
    let out = patch(text, |v| v["spec"]["hosts"] = json!(["a"]));
    assert_eq!(out, "spec:\n  ports:\n  - port: 80\n  hosts:\n  - a\n");
}

#[test]
fn type_changes_and_block_scalars_are_rewritten_in_place() {
    let out = patch(DEPLOY, |v| {
        v["spec"]["template"]["spec"]["notes"] = "other".into();
        v["spec"]["replicas"] = json!({"min": 1});
        v["metadata"]["labels"] = json!("none");
    });
    assert!(out.contains("      notes: other\n"), "{out}");
    assert!(
        out.contains("  replicas: # kpt-set: ${replicas}\n    min: 1\n"),
        "{out}"
    );
    assert!(out.contains("  labels: none\nspec:"), "{out}");
}

#[test]
fn flow_collections_and_missing_final_newlines() {
    let out = patch("a: [1, 2]\nb: {x: 1}\nc: 1", |v| {
        v["a"] = json!([1, 2, 3]);
        v["b"]["z"] = 2.into();
        v["d"] = json!([]);
    });
    assert_eq!(out, "a: [1, 2, 3]\nb: {x: 1, z: 2}\nc: 1\nd: []\n");
}

#[test]
fn a_function_s_scalar_spelling_is_kept() {
    let base = "data:\n  a: 1 # kpt-set: ${a}\n  b: x\n  c: y\n";
    let source = "data:\n  a: 0123 # kpt-set: ${a}\n  b: '007'\n  c: .inf\n  d: 0x1F\n  e: 1_000\n";
    let out = merged(base, source, None);
    assert_eq!(
        out,
        "data:\n  a: 0123 # kpt-set: ${a}\n  b: '007'\n  c: .inf\n  d: 0x1F\n  e: 1_000\n"
    );
}

#[test]
fn comments_a_function_writes_land_where_it_wrote_them() {
    let base = "# doc\nspec:\n  replicas: 3\n  image: nginx # keep me\n  old: x\n";
    let source = "# doc\nspec:\n  # how many\n  replicas: 3 # kpt-set: ${replicas}\n  image: nginx\n  old: x\n  # a new field\n  added: 1 # new\n  obj:\n    a: b # inner\n";
    let out = merged(base, source, None);
    assert_eq!(
        out,
        "# doc\nspec:\n  # how many\n  replicas: 3 # kpt-set: ${replicas}\n  image: nginx # keep me\n  old: x\n  # a new field\n  added: 1 # new\n  obj:\n    a: b # inner\n"
    );
}

#[test]
fn new_sequences_a_function_writes_take_the_file_s_indentation() {
    let wide = "spec:\n  args:\n    - a\n";
    let source = "spec:\n  args:\n  - a\n  ports:\n  - port: 80 # http\n    names:\n    - x\n";
    assert_eq!(
        merged(wide, source, None),
        "spec:\n  args:\n    - a\n  ports:\n    - port: 80 # http\n      names:\n        - x\n"
    );
    let compact = "spec:\n  args:\n  - a\n";
    let source = "spec:\n  args:\n    - a\n  ports:\n    - port: 80\n";
    assert_eq!(
        merged(compact, source, None),
        "spec:\n  args:\n  - a\n  ports:\n  - port: 80\n"
    );
}

#[test]
fn a_null_written_as_nothing_leaves_no_space_behind() {
    let base = "a: x\nb: y # keep\nl:\n  - x\n";
    let source = "a:\nb: # keep\nl:\n  -\n";
    assert_eq!(merged(base, source, None), "a:\nb: # keep\nl:\n  -\n");
}

#[test]
fn the_space_a_function_puts_before_a_new_comment_is_kept() {
    let base = "spec:\n  replicas: 3\n  image: nginx # old\n";
    let source = "spec:\n  replicas: 3   # kpt-set: ${replicas}\n  image: nginx  # new\n";
    assert_eq!(merged(base, source, None), source);
}

#[test]
fn a_new_mapping_takes_only_the_target_s_keys_from_the_source() {
    let base = "metadata:\n  name: a\n";
    let source = "metadata:\n  name: a\n  annotations:\n    internal.config.kubernetes.io/path: a.yaml\n    team: x # owner\n";
    let target = json!({"metadata": {"name": "a", "annotations": {"team": "x"}}});
    let out = merged(base, source, Some(target));
    assert_eq!(
        out,
        "metadata:\n  name: a\n  annotations:\n    team: x # owner\n"
    );
}

#[test]
fn source_indentation_is_moved_to_the_base_s() {
    let base = "spec:\n    containers:\n    -   name: a\n";
    let source =
        "spec:\n  containers:\n  - name: a\n    env:\n    - name: X # the x\n      value: \"1\"\n";
    let out = merged(base, source, None);
    assert!(out.contains("    -   name: a\n"), "{out}");
    assert!(out.contains("# the x"), "{out}");
}

#[test]
fn documents_split_on_markers_only() {
    let docs = split_documents("a: 1\n---\nb: |\n  ---x\n--- # two\nc: 3\n");
    assert_eq!(docs, ["a: 1\n", "b: |\n  ---x\n", "c: 3\n"]);
    assert_eq!(split_documents("---\na: 1\n"), ["", "a: 1\n"]);
    assert!(is_blank_document("# only a comment\n\n"));
    let s = split_stream("a: 1\n...\n# between\n---\nb: 2\n...\n");
    assert_eq!(
        s.docs,
        [
            (String::new(), "a: 1\n".to_string()),
            ("...\n# between\n---\n".to_string(), "b: 2\n".to_string())
        ]
    );
    assert_eq!(s.trailer, "...\n");
    assert_eq!(split_documents("a: 1\n...\nb: 2\n"), ["a: 1\n", "b: 2\n"]);
}

#[test]
fn sequence_style_is_detected_like_kyaml() {
    assert_eq!(sequence_indent("a:\n  - x\n"), "wide");
    assert_eq!(sequence_indent("a:\n- x\n"), "compact");
    assert_eq!(sequence_indent("m:\n  k: # c\n  - x\n"), "compact");
    assert_eq!(sequence_indent("m:\n  k:\n    - x\n"), "wide");
    assert_eq!(sequence_indent("a: 1\n"), "compact");
    // kyaml's rule, line by line: a Markdown list in a block scalar decides
    // when it comes first; a blank line, a key line with two colons, a bare
    // `-`, an item four spaces deeper do not count; a comment is cut at its
    // first `#`.
    let lists =
        "info:\n  description: |\n    Items:\n    {MD}\npipeline:\n  mutators:\n    - exec: x\n";
    assert_eq!(sequence_indent(&lists.replace("{MD}", "- one")), "compact");
    assert_eq!(sequence_indent(&lists.replace("{MD}", "  - one")), "wide");
    for passed_over in ["", "        - four deeper"] {
        let text = lists.replace("    {MD}", &format!("    Items:\n{passed_over}\n    - one"));
        assert_eq!(sequence_indent(&text), "wide", "{text}");
    }
    assert_eq!(
        sequence_indent("d: |\n  See: Items:\n  - one\nm:\n  - x\n"),
        "wide"
    );
    assert_eq!(sequence_indent("m:\n-\n  - x\n"), "compact");
    assert_eq!(sequence_indent("m: # a: b\n  # c\n  - x\n"), "wide");
    assert_eq!(sequence_indent("m:\r\n  - x\r\n"), "wide");
    assert_eq!(sequence_indent("- a\n- b\n"), "compact");
    // The document's own lists: block scalars' lines passed over.
    assert_eq!(own_sequence_indent(&lists.replace("{MD}", "- one")), "wide");
    assert_eq!(
        own_sequence_indent("d: >-\n  Items:\n  - one\n\n  - two\nm:\n  - x\n"),
        "wide"
    );
    assert_eq!(
        own_sequence_indent("l:\n- |+ # text\n  k:\n    - deep\nm:\n  - x\n"),
        "compact"
    );
    assert_eq!(own_sequence_indent("a: |\n  k:\n    - x\n"), "compact");
}

#[test]
fn nesting_makes_a_sequence_item() {
    assert_eq!(
        nest("a: 1\nb: |\n  x\n\n  y\n", "- ", "  "),
        "- a: 1\n  b: |\n    x\n\n    y\n"
    );
}

#[test]
fn non_mapping_roots_are_rewritten_not_mangled() {
    let from = Value::from("x");
    assert_eq!(
        patch_document("x\n", &from, &Value::from("z")).unwrap(),
        "z\n"
    );
}

/// The check that re-reads only the top-level entries an edit touched
/// accepts a right edit and refuses each kind of wrong one (a wrong value,
/// a splice that changes the structure around it, an entry the target
/// changes but the edit leaves alone, a key the target does not have, an
/// untouched key written again) — so `merge` falls back to reading the
/// whole result, or to other text, instead of writing it.
#[test]
fn the_partial_edit_check_refuses_wrong_edits() {
    let base = YamlDoc::parse("a: 1\nb:\n  c: 2\n  e: 5\nd: x\n").unwrap();
    let root = base.root().unwrap();
    let t = base.text();
    let two = t.find("2\n").unwrap();
    let splice = |start: usize, end: usize, text: &str| Splice {
        start,
        end,
        text: text.to_string(),
    };
    let target = json!({"a": 1, "b": {"c": 3, "e": 5}, "d": "x"});
    assert!(edits_read_as(
        &base,
        root,
        &[splice(two, two + 1, "3")],
        &target
    ));
    let e = t.find("  e").unwrap();
    let five = t.find("5\n").unwrap();
    let mut a_changed = target.clone();
    a_changed["a"] = json!(2);
    let wrong = [
        ("a wrong value", vec![splice(two, two + 1, "4")], &target),
        (
            "`e` pulled out of `b` to the top level",
            vec![splice(two, two + 1, "3"), splice(e, e + 2, "")],
            &target,
        ),
        (
            "the next entry's line joined to the edited one",
            vec![splice(two, two + 1, "3"), splice(five + 1, five + 2, " ")],
            &target,
        ),
        (
            "`a` changes in the target, the edit leaves it alone",
            vec![splice(two, two + 1, "3")],
            &a_changed,
        ),
        (
            "a key the target does not have",
            vec![
                splice(two, two + 1, "3"),
                splice(five + 2, five + 2, "f: 6\n"),
            ],
            &target,
        ),
        (
            "an untouched key written again",
            vec![
                splice(two, two + 1, "3"),
                splice(five + 2, five + 2, "d: x\n"),
            ],
            &target,
        ),
    ];
    for (what, splices, target) in wrong {
        assert!(!edits_read_as(&base, root, &splices, target), "{what}");
    }
}

/// Changed scalars edited in place give byte for byte what the general
/// merge gives, and shapes they do not cover are left to it.
#[test]
fn scalar_edits_agree_with_the_merge() {
    let docs = [
        DEPLOY,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  annotations:\n    internal.config.kubernetes.io/id: \"4\" # id\n    config.k8s.io/id: '4'\n    x: plain\ndata:\n  n: 1\n  b: true\n  s: \"x y\"\n",
        "a:\n  - b: 1\n    c: x\n  - b: 2\n    c: y\nd: 0x1F # hex\n",
    ];
    // Each edit sets the values at these pointers, where the document has them.
    let edits: [&[(&str, Value)]; 6] = [
        &[("/metadata/name", json!("renamed"))],
        &[
            (
                "/metadata/annotations/internal.config.kubernetes.io~1id",
                json!("503"),
            ),
            ("/metadata/annotations/config.k8s.io~1id", json!("503")),
            ("/metadata/annotations/x", json!("needs: quotes")),
        ],
        &[
            ("/data/n", json!(2)),
            ("/data/b", json!(false)),
            ("/data/s", json!("")),
        ],
        &[("/a/1/c", json!("z")), ("/d", json!(7))],
        &[("/spec/replicas", json!("3"))],
        &[("/spec/template/spec/containers/1/image", json!("envoy:1"))],
    ];
    let mut fast = 0;
    for doc in docs {
        let base = YamlDoc::parse(doc).unwrap();
        for edit in &edits {
            let mut target = base.value().clone();
            for (pointer, value) in edit.iter() {
                if let Some(at) = target.pointer_mut(pointer) {
                    *at = value.clone();
                }
            }
            let Some(edited) = edit_scalars(&base, &target) else {
                continue;
            };
            fast += 1;
            let merged = merge_by_walk(&base, &target).unwrap();
            assert_eq!(edited, merged, "{doc}");
            assert_eq!(from_yaml_str::<Value>(&edited).unwrap(), target, "{edited}");
        }
        // A new key, a removed one, a collection: not in place.
        let mut target = base.value().clone();
        target["new"] = "x".into();
        assert!(edit_scalars(&base, &target).is_none());
        let mut target = base.value().clone();
        target.as_object_mut().unwrap().shift_remove("apiVersion");
        target["z"] = json!([1]);
        assert!(edit_scalars(&base, &target).is_none());
    }
    assert!(fast >= 8, "{fast} edits took the in-place path");
}

const OPAQUE: &str = "\
apiVersion: v1
kind: ConfigMap
metadata:
  name: tags # the name
base: &base
  k: v
derived:
  <<: *base
  j: w
data:
  s: !!str 123
  b: !!binary aGVsbG8=
  oct: 0o777
  copy: *base
";

#[test]
fn documents_with_anchors_aliases_tags_and_merge_keys_are_edited_in_place() {
    let out = patch(OPAQUE, |v| {
        v["metadata"]["namespace"] = "prod".into();
        v["data"]["new"] = "x".into();
    });
    assert_eq!(
        out,
        OPAQUE
            .replace("the name\n", "the name\n  namespace: prod\n")
            .replace("copy: *base\n", "copy: *base\n  new: x\n")
    );
}

#[test]
fn an_edit_that_would_change_what_an_alias_reads_is_not_taken() {
    // The anchored mapping changes, its alias does not: the anchor's text
    // cannot simply be edited (the alias would read the new value too).
    let text = "a: &x\n  k: v\nb: *x\nc: 1 # kept\n";
    let from: Value = from_yaml_str(text).unwrap();
    let mut to = from.clone();
    to["a"]["k"] = "w".into();
    let out = patch_document(text, &from, &to).unwrap();
    assert_eq!(from_yaml_str::<Value>(&out).unwrap(), to, "{out}");
    // And the other way round: the alias's copy changes, the anchor does not.
    let mut to = from.clone();
    to["b"]["k"] = "w".into();
    let out = patch_document(text, &from, &to).unwrap();
    assert_eq!(from_yaml_str::<Value>(&out).unwrap(), to, "{out}");
    assert!(out.contains("a: &x\n  k: v\n"), "{out}");
}

#[test]
fn a_function_s_text_in_another_key_order_does_not_stand_in_for_the_value() {
    // The function rewrote the ports in its own key order; the target has
    // the file's order (kpt syncs a function's output to its input's order).
    let base = "spec:\n  ports: [{port: 80, name: http}]\n  new: 1\n";
    let source = "spec:\n  ports: # the ports\n  - name: http # from the function\n    port: 81\n  new: 1\n  added:\n    b: 2\n    a: 1\n";
    let target = json!({"spec": {"ports": [{"port": 81, "name": "http"}], "new": 1, "added": {"a": 1, "b": 2}}});
    let out = merged(base, source, Some(target));
    assert_eq!(
        out,
        "spec:\n  ports: [{port: 81, name: http}] # the ports\n  new: 1\n  added:\n    a: 1\n    b: 2\n"
    );
    // In the function's order, its text is taken.
    let target = json!({"spec": {"ports": [{"name": "http", "port": 81}], "new": 1, "added": {"b": 2, "a": 1}}});
    let out = merged(base, source, Some(target));
    assert!(
        out.contains("  - name: http # from the function\n    port: 81\n"),
        "{out}"
    );
    assert!(out.contains("  added:\n    b: 2\n    a: 1\n"), "{out}");
}

/// A comment on a block scalar's header is written once when the function
/// rewrote the scalar with the comment (its text is taken), and kept when
/// it dropped it.
#[test]
fn a_block_scalar_header_comment_is_written_once() {
    let base = "data:\n  k: | # note\n    body\nlist:\n- | # on an item\n  body\n";
    let source = "data:\n  k: | # note\n    changed\nlist:\n- | # on an item\n  changed\n";
    assert_eq!(
        merged(base, source, None),
        "data:\n  k: | # note\n    changed\nlist:\n- | # on an item\n  changed\n"
    );
    let dropped = "data:\n  k: |\n    changed\nlist:\n- |\n  changed\n";
    assert_eq!(merged(base, dropped, None), source);
}

/// The blank lines of a keep (`|+`) block scalar are its content: they go
/// with it when it is rewritten, and come with a function's `|+` text.
#[test]
fn a_keep_block_scalar_s_blank_lines_go_with_it() {
    let base = "a: |+\n  body\n\n\nb: x\nc:\n- |+\n  body\n\n- y\n";
    assert_eq!(
        merged(base, "a: |-\n  body\nb: x\nc:\n- |-\n  body\n- y\n", None),
        "a: |-\n  body\nb: x\nc:\n- |-\n  body\n- y\n"
    );
    assert_eq!(
        merged("a: |-\n  body\nb: x\n", "a: |+\n  new\n\n\nb: x\n", None),
        "a: |+\n  new\n\n\nb: x\n"
    );
    let doc = YamlDoc::parse(base).unwrap();
    let Some(Kind::Map { entries, .. }) = doc.root().map(|r| &r.kind) else {
        panic!()
    };
    assert_eq!(
        doc.slice(entries[0].value.start..entries[0].value.end),
        "|+\n  body\n\n"
    );
}

/// Edits of a document with anchors, aliases and merge keys keep them:
/// the change goes inside the anchored node, aliases and merge keys stay
/// where they are, reading the edited anchor.
#[test]
fn anchors_aliases_and_merge_keys_stay_through_an_edit() {
    let text = "base: &base\n  a: one\n  b: two\nref: *base\nmerged:\n  <<: *base\n  c: three\nname: &n old\nsame: *n\n";
    let out = patch(text, |v| {
        for path in [&["base", "a"][..], &["ref", "a"], &["merged", "a"]] {
            v[path[0]][path[1]] = "uno".into();
        }
        v["merged"]["c"] = "tres".into();
        v["name"] = "new".into();
        v["same"] = "new".into();
    });
    assert_eq!(
        out,
        "base: &base\n  a: uno\n  b: two\nref: *base\nmerged:\n  <<: *base\n  c: tres\nname: &n new\nsame: *n\n"
    );
}

/// An edit that aliases cannot express — one copy of an aliased value
/// changed, a key a merge key brings in removed — writes the changed
/// values out (their content is right, the aliases there are gone).
#[test]
fn edits_aliases_cannot_express_write_the_values_out() {
    let text = "base: &base\n  a: one\nref: *base\nmerged:\n  <<: *base\n  c: three\n";
    let out = patch(text, |v| v["ref"]["a"] = "uno".into());
    assert!(out.contains("base: &base\n  a: one\n"), "{out}");
    assert!(!out.contains("ref: *base"), "{out}");
    let out = patch(text, |v| {
        v["merged"].as_object_mut().unwrap().remove("a");
    });
    assert!(!out.contains("<<"), "{out}");
}

/// In a document with anchors, a changed value keeps the function's text
/// (quoting, `~`, its comments), inside tagged and anchored mappings too.
#[test]
fn a_function_s_text_is_kept_in_documents_with_anchors() {
    let base = "a: &a\n  q: 'one'\nb: *a\nt: !!map\n  q: 'one'\n  f: !!map {q: 'one', n: ~}\n";
    let source =
        "a: &a\n  q: 'uno' # changed\nb: *a\nt: !!map\n  q: 'uno'\n  f: !!map {q: 'uno', n: ~}\n";
    assert_eq!(merged(base, source, None), source);
}

#[test]
fn a_scalar_is_restyled_in_place() {
    let path = ["metadata", "annotations", "a"];
    for (text, expected) in [
        (
            "metadata:\n  annotations:\n    a: x,y # note\n    b: c\n",
            Some("metadata:\n  annotations:\n    a: 'x,y' # note\n    b: c\n"),
        ),
        (
            "metadata:\n  annotations:\n    a: \"it's\"\n",
            Some("metadata:\n  annotations:\n    a: 'it''s'\n"),
        ),
        (
            "metadata:\n  annotations:\n    a: >-\n      folded\n",
            Some("metadata:\n  annotations:\n    a: 'folded'\n"),
        ),
        (
            "metadata: {annotations: {a: x}}\n",
            Some("metadata: {annotations: {a: 'x'}}\n"),
        ),
        // Not a string, several lines, a collection, missing, tagged.
        ("metadata:\n  annotations:\n    a: 5\n", None),
        (
            "metadata:\n  annotations:\n    a: |\n      two\n      lines\n",
            None,
        ),
        ("metadata:\n  annotations:\n    a: [x]\n", None),
        ("metadata:\n  annotations:\n    b: x\n", None),
        ("metadata:\n  annotations:\n    a: !!str x\n", None),
    ] {
        assert_eq!(
            super::restyled_at(text, &path, Style::SingleQuoted).as_deref(),
            expected,
            "{text}"
        );
    }
}

#[test]
fn a_scalars_style_is_read_and_can_be_double_quoted() {
    let path = ["metadata", "annotations", "a"];
    let text = "metadata:\n  annotations: {a: 'x,y', b: c}\n";
    assert_eq!(
        super::scalar_style_at(text, &path),
        Some(Style::SingleQuoted)
    );
    assert_eq!(
        super::restyled_at(text, &path, Style::DoubleQuoted).as_deref(),
        Some("metadata:\n  annotations: {a: \"x,y\", b: c}\n")
    );
    assert_eq!(super::restyled_at(text, &path, Style::Plain), None);
    assert_eq!(super::scalar_style_at(text, &["metadata", "x"]), None);
}
