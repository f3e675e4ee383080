//! The catalog's `apply-replacements` (v0.1.5: kustomize's replacement
//! filter of `sigs.k8s.io/kustomize/api` v0.20.1 on kyaml v0.20.1, run by
//! the functions SDK v1.0.2), in Rust, working on each item's YAML text so
//! that comments and quoting come out as the Go function writes them.
//!
//! The functionConfig is `fn.kpt.dev/v1alpha1` `ApplyReplacements` with a
//! list `replacements`; each takes a value — `sourceValue`, or the field
//! `source.fieldPath` (default `metadata.name`) of the one item `source`
//! selects by group, version, kind, name and namespace (an empty namespace
//! and `default` are the same; `internal.config.kubernetes.io/previous*`
//! annotations add earlier ids), cut by `source.options.delimiter`/`index`
//! — and writes it into every field `targets[].fieldPaths` (default
//! `metadata.name`) reach in the items each target `select`s (ids, plus
//! `labelSelector`/`annotationSelector`) and does not `reject`. Replacements
//! run in order, each seeing what the ones before wrote.
//!
//! Field paths are split on `.` (`\.` escapes a dot, `[a.b=c]` stays one
//! part). A source path takes field names, element indexes, `-` (the last
//! element) and `[name=value]` (the first element whose field `name` is
//! exactly `value`; `[=value]` an element equal to it). A target path also
//! takes `*` (every element) and treats `[name=value]` as kyaml does: the
//! value is a regular expression, unanchored, matched against the field's
//! YAML text (so `[name=app]` also selects `app-2`), and a `[=value]`
//! element ends the path.
//!
//! A target scalar keeps its style and its tag (kyaml copies only the
//! value): a plain string set to a value that reads as another type is
//! double-quoted, an integer set to an integer stays plain; with
//! `options.delimiter` the target's value is split, the element at
//! `options.index` replaced (a negative index prepends, one past the end
//! appends) and joined again.
//!
//! Results: none on success; on error one result of severity error with
//! the error text (`nothing selected by ~G…`, `unable to find field "…" in
//! replacement target`, …), the items unchanged, exit code 1 and the SDK's
//! stderr line. The items come out sorted as the SDK sorts them.
//!
//! Handed to the next runtime instead ([`Refusal`]): values that are not
//! scalars (copying a mapping or sequence), targets that are not scalars,
//! fields that would have to be created (`options.create` on a missing
//! path), targets in flow collections or with anchors or tags, a target
//! whose tag the new value does not resolve to (kyaml would write e.g.
//! `!!int abc`), label selectors beyond `=`, `==`, `!=`, `in`, `notin`,
//! existence and `!`, regular expressions with `\`, `(?` or `[:`, element
//! matches against fields that are not plain scalars, and configs whose
//! fields have the wrong type or a key in other letter case (the Go JSON
//! decoder's error texts and case folding are not reproduced).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::apply_setters::{Place, Refusal, column, line_end, line_start, reindent, token};
use crate::domain::codec::emit::{self, SeqIndent};
use crate::domain::codec::tree::{Kind, Node, Style, YamlDoc, skip_blank};

/// The functionConfig kind the function takes.
pub const CONFIG_KIND: &str = "ApplyReplacements";
/// The functionConfig apiVersion the function takes.
pub const CONFIG_API_VERSION: &str = "fn.kpt.dev/v1alpha1";
/// The field path used when a source or target names none.
pub const DEFAULT_FIELD_PATH: &str = "metadata.name";
/// Annotation domain of kustomize's previous ids.
const PREVIOUS: &str = "internal.config.kubernetes.io/";

/// What applying the replacements to a call's items did.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    /// Per item, its new text when a replacement changed it (`None`:
    /// unchanged; all `None` when the function fails).
    pub texts: Vec<Option<Arc<YamlDoc>>>,
    /// The error the Go function fails with, if any.
    pub error: Option<String>,
}

/// A resource id as kustomize's `resid.ResId` (group, version, kind, name,
/// namespace; "" is "any" in a selector).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct ResId {
    group: String,
    version: String,
    kind: String,
    name: String,
    namespace: String,
}

impl ResId {
    /// kustomize's `ResId.String()`: `Kind.version.group/name.namespace`
    /// with `[noKind]`, `[noVer]`, `[noGrp]`, `[noName]`, `[noNs]`.
    fn text(&self) -> String {
        let or = |s: &str, none: &str| {
            if s.is_empty() {
                none.to_string()
            } else {
                s.to_string()
            }
        };
        format!(
            "{}.{}.{}/{}.{}",
            or(&self.kind, "[noKind]"),
            or(&self.version, "[noVer]"),
            or(&self.group, "[noGrp]"),
            or(&self.name, "[noName]"),
            or(&self.namespace, "[noNs]")
        )
    }

    fn is_empty(&self) -> bool {
        *self == ResId::default()
    }

    /// The namespace an empty one stands for.
    fn effective_namespace(&self) -> &str {
        if self.namespace.is_empty() || self.namespace == "default" {
            "default"
        } else {
            &self.namespace
        }
    }

    /// kustomize's `ResId.IsSelectedBy`.
    fn is_selected_by(&self, s: &ResId) -> bool {
        (s.name.is_empty() || s.name == self.name)
            && (s.namespace.is_empty() || s.effective_namespace() == self.effective_namespace())
            && (s.group.is_empty() || s.group == self.group)
            && (s.version.is_empty() || s.version == self.version)
            && (s.kind.is_empty() || s.kind == self.kind)
    }
}

#[derive(Debug, Clone, Default)]
struct FieldOptions {
    delimiter: String,
    index: i64,
    create: bool,
}

impl FieldOptions {
    /// kustomize's `FieldOptions.String()`.
    fn text(o: Option<&FieldOptions>) -> String {
        match o {
            Some(o) if !o.delimiter.is_empty() || o.create => {
                format!("{}({}), create={}", o.delimiter, o.index, o.create)
            }
            _ => String::new(),
        }
    }
}

#[derive(Debug, Clone, Default)]
struct Selector {
    id: ResId,
    annotation_selector: String,
    label_selector: String,
}

#[derive(Debug, Clone)]
struct Source {
    id: ResId,
    field_path: String,
    options: Option<FieldOptions>,
}

impl Source {
    /// kustomize's `SourceSelector.String()`.
    fn text(&self) -> String {
        let mut parts = vec![self.id.text()];
        if !self.field_path.is_empty() {
            parts.push(self.field_path.clone());
        }
        let o = FieldOptions::text(self.options.as_ref());
        if !o.is_empty() {
            parts.push(o);
        }
        parts.join(":")
    }
}

#[derive(Debug, Clone)]
struct Target {
    select: Option<Selector>,
    reject: Vec<Selector>,
    field_paths: Vec<String>,
    options: Option<FieldOptions>,
}

#[derive(Debug, Clone, Default)]
struct Replacement {
    source: Option<Source>,
    targets: Option<Vec<Target>>,
    source_value: Option<String>,
}

/// Why a walk stopped.
enum Stop {
    /// The Go function fails with this error.
    Fail(String),
    /// Handed to the next runtime.
    Refuse(String),
}

fn refuse<T>(why: impl Into<String>) -> Result<T, Stop> {
    Err(Stop::Refuse(why.into()))
}

fn fail<T>(why: impl Into<String>) -> Result<T, Stop> {
    Err(Stop::Fail(why.into()))
}

/// Applies the replacements of `function_config` to the items whose YAML
/// documents are `docs` (in item order).
///
/// Errors: [`Refusal`] for a construct or config the builtin leaves to the
/// Go function (nothing is changed then).
pub fn apply(docs: Vec<Arc<YamlDoc>>, function_config: Option<&Value>) -> Result<Applied, Refusal> {
    let unchanged = Applied {
        texts: vec![None; docs.len()],
        error: None,
    };
    let replacements = match config(function_config) {
        Ok(r) => r,
        Err(Stop::Refuse(why)) => return Err(Refusal(why)),
        Err(Stop::Fail(e)) => {
            return Ok(Applied {
                error: Some(e),
                ..unchanged
            });
        }
    };
    let mut docs = docs;
    let mut changed = vec![false; docs.len()];
    let run = Run {
        styles: vec![Styles::new(); docs.len()],
        ids: vec![None; docs.len()],
        patterns: HashMap::new(),
        docs: &mut docs,
        changed: &mut changed,
    };
    match run.all(replacements) {
        Ok(()) => Ok(Applied {
            texts: docs
                .into_iter()
                .zip(changed)
                .map(|(d, c)| c.then_some(d))
                .collect(),
            error: None,
        }),
        Err(Stop::Refuse(why)) => Err(Refusal(why)),
        Err(Stop::Fail(e)) => Ok(Applied {
            error: Some(e),
            ..unchanged
        }),
    }
}

// ---- the functionConfig ----------------------------------------------------

/// The replacements of the functionConfig, or the function's error.
fn config(fc: Option<&Value>) -> Result<Vec<Replacement>, Stop> {
    let fc = match fc {
        Some(Value::Object(m)) if !m.is_empty() => m,
        Some(Value::Object(_)) | Some(Value::Null) | None => {
            return fail("FunctionConfig is missing. Expect `ApplyReplacements`");
        }
        Some(_) => return refuse("the functionConfig is not a mapping"),
    };
    let text = |k: &str| match fc.get(k) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => refuse(format!("the functionConfig's {k} is not a string")),
    };
    let (kind, api_version) = (text("kind")?, text("apiVersion")?);
    if kind != CONFIG_KIND || api_version != CONFIG_API_VERSION {
        return fail(format!(
            "received functionConfig of kind {kind} and apiVersion {api_version}, \
             only functionConfig of kind {CONFIG_KIND} and apiVersion {CONFIG_API_VERSION} is supported"
        ));
    }
    let root = Obj::new(fc, "functionConfig");
    let list = match root.get("replacements")? {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(_) => return refuse("replacements is not a list"),
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, r) in list.iter().enumerate() {
        let at = format!("replacements[{i}]");
        let r = match r {
            Value::Null => {
                out.push(Replacement::default());
                continue;
            }
            Value::Object(m) => Obj::new(m, &at),
            _ => return refuse(format!("{at} is not a mapping")),
        };
        let source = match r.get("source")? {
            None | Some(Value::Null) => None,
            Some(Value::Object(m)) => {
                let s = Obj::new(m, &format!("{at}.source"));
                Some(Source {
                    id: s.res_id()?,
                    field_path: s.string("fieldPath")?,
                    options: s.options()?,
                })
            }
            Some(_) => return refuse(format!("{at}.source is not a mapping")),
        };
        let targets = match r.get("targets")? {
            None | Some(Value::Null) => None,
            Some(Value::Array(a)) => {
                let mut ts = Vec::with_capacity(a.len());
                for (j, t) in a.iter().enumerate() {
                    let at = format!("{at}.targets[{j}]");
                    let Value::Object(m) = t else {
                        return refuse(format!("{at} is not a mapping"));
                    };
                    ts.push(Obj::new(m, &at).target()?);
                }
                Some(ts)
            }
            Some(_) => return refuse(format!("{at}.targets is not a list")),
        };
        let source_value = match r.get("sourceValue")? {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return refuse(format!("{at}.sourceValue is not a string")),
        };
        out.push(Replacement {
            source,
            targets,
            source_value,
        });
    }
    Ok(out)
}

/// A config mapping read as Go's JSON decoder reads a struct (unknown keys
/// ignored; a key matching a field only in other letter case is refused).
struct Obj<'a> {
    m: &'a Map<String, Value>,
    at: String,
}

impl<'a> Obj<'a> {
    fn new(m: &'a Map<String, Value>, at: &str) -> Self {
        Self {
            m,
            at: at.to_string(),
        }
    }

    fn get(&self, key: &str) -> Result<Option<&'a Value>, Stop> {
        if let Some(v) = self.m.get(key) {
            return Ok(Some(v));
        }
        if self.m.keys().any(|k| k.eq_ignore_ascii_case(key)) {
            return refuse(format!(
                "{}: a key spells {key:?} in other letter case",
                self.at
            ));
        }
        Ok(None)
    }

    fn string(&self, key: &str) -> Result<String, Stop> {
        match self.get(key)? {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => refuse(format!("{}.{key} is not a string", self.at)),
        }
    }

    fn res_id(&self) -> Result<ResId, Stop> {
        Ok(ResId {
            group: self.string("group")?,
            version: self.string("version")?,
            kind: self.string("kind")?,
            name: self.string("name")?,
            namespace: self.string("namespace")?,
        })
    }

    fn selector(&self) -> Result<Selector, Stop> {
        Ok(Selector {
            id: self.res_id()?,
            annotation_selector: self.string("annotationSelector")?,
            label_selector: self.string("labelSelector")?,
        })
    }

    fn options(&self) -> Result<Option<FieldOptions>, Stop> {
        let m = match self.get("options")? {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Object(m)) => Obj::new(m, &format!("{}.options", self.at)),
            Some(_) => return refuse(format!("{}.options is not a mapping", self.at)),
        };
        let index = match m.get("index")? {
            None | Some(Value::Null) => 0,
            Some(Value::Number(n)) if n.is_i64() => n.as_i64().unwrap_or_default(),
            Some(_) => return refuse(format!("{}.index is not an integer", m.at)),
        };
        let create = match m.get("create")? {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return refuse(format!("{}.create is not a boolean", m.at)),
        };
        // `encoding` is read by the Go type but not used by the filter.
        m.string("encoding")?;
        Ok(Some(FieldOptions {
            delimiter: m.string("delimiter")?,
            index,
            create,
        }))
    }

    fn target(&self) -> Result<Target, Stop> {
        let select = match self.get("select")? {
            None | Some(Value::Null) => None,
            Some(Value::Object(m)) => Some(Obj::new(m, &format!("{}.select", self.at)).selector()?),
            Some(_) => return refuse(format!("{}.select is not a mapping", self.at)),
        };
        let mut reject = Vec::new();
        match self.get("reject")? {
            None | Some(Value::Null) => {}
            Some(Value::Array(a)) => {
                for (k, r) in a.iter().enumerate() {
                    let Value::Object(m) = r else {
                        return refuse(format!("{}.reject[{k}] is not a mapping", self.at));
                    };
                    reject.push(Obj::new(m, &format!("{}.reject[{k}]", self.at)).selector()?);
                }
            }
            Some(_) => return refuse(format!("{}.reject is not a list", self.at)),
        }
        let mut field_paths = Vec::new();
        match self.get("fieldPaths")? {
            None | Some(Value::Null) => {}
            Some(Value::Array(a)) => {
                for p in a {
                    match p {
                        Value::String(s) => field_paths.push(s.clone()),
                        Value::Null => field_paths.push(String::new()),
                        _ => {
                            return refuse(format!(
                                "{}.fieldPaths has an entry that is not a string",
                                self.at
                            ));
                        }
                    }
                }
            }
            Some(_) => return refuse(format!("{}.fieldPaths is not a list", self.at)),
        }
        Ok(Target {
            select,
            reject,
            field_paths,
            options: self.options()?,
        })
    }
}

// ---- field paths -------------------------------------------------------------

/// kyaml's `PathSplitter`: split on `delim`, a leading `delim` dropped, a
/// part ending in `\` joined with the next.
fn path_splitter(path: &str, delim: &str) -> Vec<String> {
    let mut ps: Vec<&str> = path.split(delim).collect();
    if ps.len() > 1 && ps[0].is_empty() {
        ps.remove(0);
    }
    let mut res: Vec<String> = vec![ps[0].to_string()];
    for p in &ps[1..] {
        let last = res.last_mut().expect("one part at least");
        if let Some(kept) = last.strip_suffix('\\') {
            *last = format!("{kept}{delim}{p}");
        } else {
            res.push(p.to_string());
        }
    }
    res
}

/// A replacement field path split into its parts, as kyaml's
/// `SmarterPathSplitter` splits it on `.`: a leading `.` dropped, `\.`
/// kept as a dot inside a part, a `[…]` part with dots inside kept whole
/// (its brackets dropped when it has no `=`). `"a.[name=x.y].b"` →
/// `["a", "[name=x.y]", "b"]`; never empty (`""` → `[""]`).
pub fn split_field_path(path: &str) -> Vec<String> {
    let split = path_splitter(path, ".");
    let mut out = Vec::with_capacity(split.len());
    let mut i = 0;
    while i < split.len() {
        let elem = &split[i];
        if elem.starts_with('[') && !elem.ends_with(']') {
            let mut bracketed = vec![elem.clone()];
            while i < split.len() - 1 {
                i += 1;
                bracketed.push(split[i].clone());
                if split[i].ends_with(']') {
                    break;
                }
            }
            let joined = bracketed.join(".");
            if joined.contains('=') {
                out.push(joined);
            } else {
                out.push(joined.trim_matches(['[', ']']).to_string());
            }
        } else {
            out.push(elem.clone());
        }
        i += 1;
    }
    out
}

/// Go's `strconv.Atoi` as kyaml's `IsIdxNumber` uses it: a non-negative
/// decimal integer, a sign allowed.
fn index_number(p: &str) -> Option<i64> {
    let digits = p.strip_prefix(['+', '-']).unwrap_or(p);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    p.parse::<i64>().ok()
}

fn is_list_index(p: &str) -> bool {
    p.starts_with('[') && p.ends_with(']')
}

/// kyaml's `SplitIndexNameValue`: `[name=value]` → (name, value).
fn split_index_name_value(p: &str) -> Option<(&str, &str)> {
    let elem = p.strip_suffix(']').unwrap_or(p);
    let elem = elem.strip_prefix('[').unwrap_or(elem);
    elem.split_once('=')
}

const NO_NAME_VALUE: &str =
    "list path element must contain fieldName=fieldValue for element to match";

// ---- the items ---------------------------------------------------------------

/// A node reached in a document, with its parsed value and where it sits.
#[derive(Clone, Copy)]
struct At<'a> {
    node: &'a Node,
    value: &'a Value,
    place: Place,
}

impl<'a> At<'a> {
    fn root(doc: &'a YamlDoc) -> Option<Self> {
        doc.root().map(|node| At {
            node,
            value: doc.value(),
            place: Place::Root,
        })
    }

    /// A null node: a plain null scalar or an empty value.
    fn is_null(&self, t: &str) -> bool {
        matches!(
            self.node.kind,
            Kind::Scalar {
                style: Style::Plain,
                ..
            }
        ) && v3_tag(&scalar_value(t, self)) == Tag::Null
    }

    /// The field `name` of a mapping (`Ok(None)` when absent or when this
    /// node is null); another kind of node is refused (kyaml errors).
    fn field(&self, t: &str, name: &str) -> Result<Option<At<'a>>, Stop> {
        match &self.node.kind {
            Kind::Map { flow, entries } => {
                let m = self.value.as_object();
                Ok(entries.iter().find(|e| e.name == name).map(|e| At {
                    node: &e.value,
                    value: m.and_then(|m| m.get(&e.name)).unwrap_or(&Value::Null),
                    place: match (flow, e.colon, self.place) {
                        (false, Some(colon), p) if !matches!(p, Place::Flow) => Place::Value {
                            column: column(t, e.key.start),
                            colon,
                        },
                        _ => Place::Flow,
                    },
                }))
            }
            _ if self.is_null(t) => Ok(None),
            _ => refuse(format!(
                "the path looks up field {name:?} in a node that is not a mapping"
            )),
        }
    }

    /// The elements of a sequence (none for a null node); another kind of
    /// node is refused (kyaml errors).
    fn elements(&self, t: &str) -> Result<Vec<At<'a>>, Stop> {
        match &self.node.kind {
            Kind::Seq { flow, items } => {
                let a = self.value.as_array();
                Ok(items
                    .iter()
                    .enumerate()
                    .map(|(i, it)| At {
                        node: &it.node,
                        value: a.and_then(|a| a.get(i)).unwrap_or(&Value::Null),
                        place: if *flow || matches!(self.place, Place::Flow) {
                            Place::Flow
                        } else {
                            Place::Item { dash: it.dash }
                        },
                    })
                    .collect())
            }
            _ if self.is_null(t) => Ok(Vec::new()),
            _ => refuse("the path reads elements of a node that is not a sequence"),
        }
    }

    fn is_scalar(&self) -> bool {
        matches!(self.node.kind, Kind::Scalar { .. })
    }
}

/// The scalar's value as yaml.v3 holds it (`Node.Value`); "" for other nodes.
fn scalar_value(t: &str, at: &At) -> String {
    match (&at.node.kind, at.value) {
        (Kind::Scalar { .. }, Value::String(s)) => s.clone(),
        (Kind::Scalar { empty: true, .. }, _) => String::new(),
        (
            Kind::Scalar {
                style: Style::Plain,
                ..
            },
            _,
        ) => t[at.node.start..at.node.end].to_string(),
        (Kind::Scalar { .. }, v) => {
            crate::domain::render::annotations::scalar_text(v).unwrap_or_default()
        }
        _ => String::new(),
    }
}

/// The tags yaml.v3 resolves a plain scalar to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tag {
    Null,
    Bool,
    Int,
    Float,
    Str,
    Timestamp,
    Merge,
    /// A form whose resolution the builtin does not model (timestamps with
    /// a time of day).
    Unknown,
}

/// yaml.v3's `resolve` of a plain scalar's text.
fn v3_tag(s: &str) -> Tag {
    match s {
        "" | "~" | "null" | "Null" | "NULL" => return Tag::Null,
        "true" | "True" | "TRUE" | "false" | "False" | "FALSE" => return Tag::Bool,
        ".nan" | ".NaN" | ".NAN" | ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF"
        | "-.inf" | "-.Inf" | "-.INF" => return Tag::Float,
        "<<" => return Tag::Merge,
        _ => {}
    }
    let first = s.as_bytes()[0];
    if first == b'.' {
        let frac = &s[1..];
        let (digits, exp) = match frac.find(['e', 'E']) {
            Some(i) => (&frac[..i], Some(&frac[i + 1..])),
            None => (frac, None),
        };
        let exp_ok = exp.is_none_or(|e| {
            let e = e.strip_prefix(['+', '-']).unwrap_or(e);
            !e.is_empty() && e.bytes().all(|b| b.is_ascii_digit())
        });
        return if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) && exp_ok {
            Tag::Float
        } else {
            Tag::Str
        };
    }
    if !(first.is_ascii_digit() || first == b'+' || first == b'-') {
        return Tag::Str;
    }
    if first.is_ascii_digit() {
        let year = s.bytes().take_while(u8::is_ascii_digit).count();
        if year == 4 && s.len() > 4 && s.as_bytes()[4] == b'-' {
            let parts: Vec<&str> = s.split('-').collect();
            let date = parts.len() == 3
                && parts[1..]
                    .iter()
                    .all(|p| (1..=2).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit()));
            if date {
                let (m, d): (u32, u32) =
                    (parts[1].parse().unwrap_or(0), parts[2].parse().unwrap_or(0));
                return if (1..=12).contains(&m) && (1..=31).contains(&d) {
                    Tag::Timestamp
                } else {
                    Tag::Unknown
                };
            }
            if s.contains([':', 't', 'T', ' ']) {
                return Tag::Unknown;
            }
        }
    }
    let plain = s.replace('_', "");
    if go_parse_int(&plain) {
        return Tag::Int;
    }
    if yaml_style_float(&plain) {
        return Tag::Float;
    }
    Tag::Str
}

/// Go's `strconv.ParseInt(s, 0, 64)` or `ParseUint(s, 0, 64)` succeeds
/// (prefixes `0x`, `0o`, `0b`, a leading `0` for octal; yaml.v3's own
/// `0b`/`0o` forms included).
fn go_parse_int(s: &str) -> bool {
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if body.is_empty() {
        return false;
    }
    let (radix, digits) = if let Some(d) = body.strip_prefix("0x").or(body.strip_prefix("0X")) {
        (16, d)
    } else if let Some(d) = body.strip_prefix("0o").or(body.strip_prefix("0O")) {
        (8, d)
    } else if let Some(d) = body.strip_prefix("0b").or(body.strip_prefix("0B")) {
        (2, d)
    } else if body.len() > 1 && body.starts_with('0') {
        (8, &body[1..])
    } else {
        (10, body)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return false;
    }
    match u128::from_str_radix(digits, radix) {
        Ok(v) if neg => v <= 1u128 << 63,
        Ok(v) => v <= u64::MAX as u128,
        Err(_) => false,
    }
}

/// yaml.v3's `yamlStyleFloat`: `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`.
fn yaml_style_float(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (mantissa, exp) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let digits = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some(("", frac)) => !frac.is_empty() && digits(frac),
        Some((int, frac)) => digits(int) && digits(frac),
        None => !mantissa.is_empty() && digits(mantissa),
    };
    let exp_ok = exp.is_none_or(|e| {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        !e.is_empty() && digits(e)
    });
    mantissa_ok && exp_ok
}

/// The id of an item and its previous ids (kustomize's `MakeResIds`).
fn res_ids(doc: &YamlDoc) -> Result<Vec<ResId>, Stop> {
    let t = doc.text();
    let Some(root) = At::root(doc) else {
        return Ok(vec![ResId::default()]);
    };
    let text_at = |path: &[&str]| -> Result<String, Stop> {
        let mut at = root;
        for p in path {
            if !matches!(at.node.kind, Kind::Map { .. }) {
                return Ok(String::new());
            }
            match at.field(t, p)? {
                Some(next) => at = next,
                None => return Ok(String::new()),
            }
        }
        if !at.is_scalar() || at.is_null(t) {
            return Ok(String::new());
        }
        Ok(scalar_value(t, &at))
    };
    let api_version = text_at(&["apiVersion"])?;
    let (group, version) = super::group_version(&api_version);
    let (group, version) = (group.to_string(), version.to_string());
    let mut ids = vec![ResId {
        group: group.clone(),
        version: version.clone(),
        kind: text_at(&["kind"])?,
        name: text_at(&["metadata", "name"])?,
        namespace: text_at(&["metadata", "namespace"])?,
    }];
    let annotations = string_map(doc, "annotations")?;
    let Some(names) = annotations
        .iter()
        .find(|(k, _)| k == &format!("{PREVIOUS}previousNames"))
    else {
        return Ok(ids);
    };
    let get = |k: &str| {
        annotations
            .iter()
            .find(|(key, _)| key == &format!("{PREVIOUS}{k}"))
            .map(|(_, v)| v.as_str())
            .unwrap_or("")
    };
    let names: Vec<&str> = names.1.split(',').collect();
    let namespaces: Vec<&str> = get("previousNamespaces").split(',').collect();
    let kinds: Vec<&str> = get("previousKinds").split(',').collect();
    if names.len() != namespaces.len() || names.len() != kinds.len() {
        return fail(
            "number of previous names, number of previous namespaces, number of previous kinds not equal",
        );
    }
    for i in 0..names.len() {
        ids.push(ResId {
            group: group.clone(),
            version: version.clone(),
            kind: kinds[i].to_string(),
            name: names[i].to_string(),
            namespace: namespaces[i].to_string(),
        });
    }
    Ok(ids)
}

/// The string entries of `metadata.<field>` (kyaml's `GetLabels` /
/// `GetAnnotations`: scalar values as text).
fn string_map(doc: &YamlDoc, field: &str) -> Result<Vec<(String, String)>, Stop> {
    let t = doc.text();
    let Some(root) = At::root(doc) else {
        return Ok(Vec::new());
    };
    if !matches!(root.node.kind, Kind::Map { .. }) {
        return Ok(Vec::new());
    }
    let Some(meta) = root.field(t, "metadata")? else {
        return Ok(Vec::new());
    };
    if !matches!(meta.node.kind, Kind::Map { .. }) {
        return Ok(Vec::new());
    }
    let Some(map) = meta.field(t, field)? else {
        return Ok(Vec::new());
    };
    let Kind::Map { entries, .. } = &map.node.kind else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for e in entries {
        if let Some(v) = map.field(t, &e.name)?
            && v.is_scalar()
        {
            out.push((e.name.clone(), scalar_value(t, &v)));
        }
    }
    Ok(out)
}

// ---- label selectors -----------------------------------------------------------

/// One requirement of a Kubernetes label selector.
enum Requirement {
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

fn label_key_ok(k: &str) -> bool {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric();
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|l| {
                !l.is_empty()
                    && l.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            })
    });
    name_ok && prefix_ok
}

fn label_value_ok(v: &str) -> bool {
    v.is_empty()
        || (v.len() <= 63
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && v.as_bytes()[0].is_ascii_alphanumeric()
            && v.as_bytes()[v.len() - 1].is_ascii_alphanumeric())
}

/// apimachinery's `labels.Parse` for the common forms; anything else is
/// refused.
fn parse_selector(s: &str) -> Result<Vec<Requirement>, Stop> {
    let bad = || refuse(format!("the selector {s:?} is not one the builtin reads"));
    let mut out = Vec::new();
    if s.trim().is_empty() {
        return Ok(out);
    }
    // Split on commas outside parentheses.
    let mut parts = Vec::new();
    let (mut depth, mut from) = (0, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[from..]);
    for p in parts {
        let p = p.trim();
        let r = if let Some(k) = p.strip_prefix('!') {
            Requirement::NotExists(k.trim().to_string())
        } else if let Some((k, v)) = p.split_once("!=") {
            Requirement::NotIn(k.trim().to_string(), vec![v.trim().to_string()])
        } else if let Some((k, v)) = p.split_once("==").or_else(|| p.split_once('=')) {
            Requirement::In(k.trim().to_string(), vec![v.trim().to_string()])
        } else if let Some((k, rest)) = p.split_once(char::is_whitespace) {
            let rest = rest.trim_start();
            let (notin, list) = if let Some(l) = rest.strip_prefix("notin") {
                (true, l)
            } else if let Some(l) = rest.strip_prefix("in") {
                (false, l)
            } else {
                return bad();
            };
            let list = list.trim();
            let Some(inner) = list.strip_prefix('(').and_then(|l| l.strip_suffix(')')) else {
                return bad();
            };
            let values: Vec<String> = inner.split(',').map(|v| v.trim().to_string()).collect();
            if notin {
                Requirement::NotIn(k.to_string(), values)
            } else {
                Requirement::In(k.to_string(), values)
            }
        } else {
            Requirement::Exists(p.to_string())
        };
        let (key, values): (&str, &[String]) = match &r {
            Requirement::Exists(k) | Requirement::NotExists(k) => (k, &[]),
            Requirement::In(k, v) | Requirement::NotIn(k, v) => (k, v),
        };
        if !label_key_ok(key) || !values.iter().all(|v| label_value_ok(v)) {
            return bad();
        }
        out.push(r);
    }
    Ok(out)
}

fn matches_selector(selector: &str, set: &[(String, String)]) -> Result<bool, Stop> {
    let get = |k: &str| set.iter().find(|(key, _)| key == k).map(|(_, v)| v);
    Ok(parse_selector(selector)?.iter().all(|r| match r {
        Requirement::Exists(k) => get(k).is_some(),
        Requirement::NotExists(k) => get(k).is_none(),
        Requirement::In(k, vs) => get(k).is_some_and(|v| vs.contains(v)),
        Requirement::NotIn(k, vs) => get(k).is_none_or(|v| !vs.contains(v)),
    }))
}

fn matches_anno_and_label(doc: &YamlDoc, s: &Selector) -> Result<bool, Stop> {
    let anno = if s.annotation_selector.is_empty() {
        true
    } else {
        matches_selector(&s.annotation_selector, &string_map(doc, "annotations")?)?
    };
    let label = if s.label_selector.is_empty() {
        true
    } else {
        matches_selector(&s.label_selector, &string_map(doc, "labels")?)?
    };
    Ok(anno && label)
}

// ---- what the Go function's nodes hold ------------------------------------------

/// A scalar's style and tag as the Go function's node holds them, which
/// the text it writes does not always show: kyaml keeps a target's style
/// and tag when it sets its value, and the YAML writer quotes or blocks a
/// value on its own when the style cannot write it (a plain string that
/// reads as a number is written `"3"` but stays plain).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct GoStyle {
    style: Style,
    /// The node's tag; `None` for a node kyaml created, which has none.
    tag: Option<Tag>,
}

/// The styles of the scalars a run wrote, by their position in the
/// current text of their item.
type Styles = HashMap<usize, GoStyle>;

/// The Go style of a scalar node: as written, unless the run wrote it.
fn go_style(styles: &Styles, t: &str, at: &At) -> GoStyle {
    if let Some(s) = styles.get(&at.node.start) {
        return *s;
    }
    let style = match at.node.kind {
        Kind::Scalar { style, .. } => style,
        _ => Style::Plain,
    };
    let tag = match style {
        Style::Plain => v3_tag(&scalar_value(t, at)),
        _ => Tag::Str,
    };
    GoStyle {
        style,
        tag: Some(tag),
    }
}

/// One change to an item's text: `start..end` replaced by `text`; a
/// scalar written at `start + offset` with the Go style it keeps; the
/// scalar's new `Node.Value`; what it changes in the item's tree, when the
/// tree can be changed in place.
struct Edit {
    start: usize,
    end: usize,
    text: String,
    written: Option<(usize, GoStyle)>,
    value: Option<String>,
    in_place: InPlace,
}

/// What an [`Edit`] changes in the item's tree, for changing it in place.
#[derive(Clone, Copy)]
enum InPlace {
    /// Nothing known: the item is read again.
    No,
    /// The scalar node starting here is replaced ([`YamlDoc::replace_scalar`]).
    Scalar(usize),
    /// Entries are added to the block mapping starting here
    /// ([`YamlDoc::insert_entries`]).
    Entries(usize),
}

/// Makes `edits` in `doc` — one scalar replaced or fields added in place
/// when it can be ([`YamlDoc::replace_scalar`], [`YamlDoc::insert_entries`]:
/// the same document without reading the text again), else the text
/// spliced and read back — and returns `styles` moved to where their
/// scalars now are (those inside a replaced region dropped), with the
/// styles of the scalars written.
fn splice_tracked(
    doc: &mut Arc<YamlDoc>,
    mut edits: Vec<Edit>,
    styles: &Styles,
) -> Result<Styles, Stop> {
    edits.sort_by_key(|e| e.start);
    // (old start, old end, length change) per edit.
    let mut regions = Vec::with_capacity(edits.len());
    let mut new_styles = Styles::new();
    let mut moved: isize = 0;
    for e in &edits {
        let delta = e.text.len() as isize - (e.end - e.start) as isize;
        if let Some((offset, style)) = e.written {
            new_styles.insert((e.start as isize + moved) as usize + offset, style);
        }
        regions.push((e.start, e.end, delta));
        moved += delta;
    }
    for (&p, style) in styles {
        if regions.iter().any(|&(a, b, _)| a <= p && p < b.max(a + 1)) {
            continue;
        }
        let shift: isize = regions
            .iter()
            .filter(|&&(_, b, _)| b <= p)
            .map(|&(_, _, d)| d)
            .sum();
        new_styles
            .entry((p as isize + shift) as usize)
            .or_insert(*style);
    }
    let done = match edits.as_slice() {
        [e] => match e.in_place {
            InPlace::Scalar(node) => {
                Arc::make_mut(doc).replace_scalar(node, e.start..e.end, &e.text)
            }
            InPlace::Entries(map) if e.start == e.end => {
                Arc::make_mut(doc).insert_entries(map, e.start, &e.text)
            }
            _ => false,
        },
        _ => false,
    };
    if done {
        return Ok(new_styles);
    }
    let t = doc.text();
    let mut s = String::with_capacity(t.len() + moved.max(0) as usize);
    let mut at = 0;
    for e in &edits {
        s.push_str(&t[at..e.start]);
        s.push_str(&e.text);
        at = e.end;
    }
    s.push_str(&t[at..]);
    let new = YamlDoc::parse(s)
        .map_err(|e| Stop::Refuse(format!("the changed item does not read back: {e}")))?;
    *doc = Arc::new(new);
    Ok(new_styles)
}

/// A scalar token for `value` in `style` as yaml.v3 writes it, the empty
/// value included (`''` single-quoted, nothing at all plain, `""` else).
fn scalar_token(value: &str, style: Style, indent: usize) -> String {
    if value.is_empty() {
        return match style {
            Style::SingleQuoted => "''".into(),
            Style::Plain => String::new(),
            _ => "\"\"".into(),
        };
    }
    token(value, style, indent)
}

// ---- the replacement filter ------------------------------------------------------

/// The value a replacement writes.
enum Replacing {
    /// A scalar's `Node.Value`.
    Scalar(String),
    /// A block mapping or sequence copied from the source: its text (from
    /// its first key or dash, with a comment ending its last line), the
    /// column its first line starts at, and whether it is a sequence.
    Block {
        text: String,
        column: usize,
        seq: bool,
    },
}

impl Replacing {
    /// yaml.v3's `Node.Value` of the value ("" for a collection).
    fn value(&self) -> &str {
        match self {
            Replacing::Scalar(v) => v,
            Replacing::Block { .. } => "",
        }
    }

    /// The block's lines for a value under a key at column `key_column`
    /// (a sequence at the key's column or two further, as the document
    /// writes its sequences): starting with a line break.
    fn block_under(&self, key_column: usize, seq_indent: SeqIndent) -> String {
        let Replacing::Block { text, column, seq } = self else {
            return String::new();
        };
        let to = key_column
            + if *seq && seq_indent == SeqIndent::Compact {
                0
            } else {
                2
            };
        format!("\n{}{}", " ".repeat(to), reindent(text, *column, to))
    }
}

struct Run<'a> {
    docs: &'a mut Vec<Arc<YamlDoc>>,
    changed: &'a mut Vec<bool>,
    /// Per item, the styles of the scalars written ([`GoStyle`]).
    styles: Vec<Styles>,
    /// Per item, its ids ([`res_ids`]) once read, until the item changes.
    ids: Vec<Option<Arc<Vec<ResId>>>>,
    /// The `[name=value]` patterns of the field paths, compiled once.
    patterns: HashMap<String, Arc<regex::Regex>>,
}

/// Where a replacement's value lives while its targets are set: kyaml
/// holds the source field itself (without a delimiter), so a target that
/// is that field changes the value the later targets get.
struct Live {
    doc: usize,
    path: Vec<String>,
}

impl Run<'_> {
    /// The ids of item `i` ([`res_ids`]), read once until the item changes.
    fn ids(&mut self, i: usize) -> Result<Arc<Vec<ResId>>, Stop> {
        if let Some(ids) = &self.ids[i] {
            return Ok(ids.clone());
        }
        let ids = Arc::new(res_ids(&self.docs[i])?);
        self.ids[i] = Some(ids.clone());
        Ok(ids)
    }

    fn all(mut self, replacements: Vec<Replacement>) -> Result<(), Stop> {
        for mut r in replacements {
            if (r.source_value.is_none() && r.source.is_none()) || r.targets.is_none() {
                return fail("replacements must specify a source and at least one target");
            }
            let (mut value, live) = self.replacement(&mut r)?;
            for target in r.targets.as_mut().into_iter().flatten() {
                self.apply_target(&mut value, live.as_ref(), target)?;
            }
        }
        Ok(())
    }

    /// kustomize's `getReplacement`: the value, and where it lives when it
    /// is the source field itself.
    fn replacement(&mut self, r: &mut Replacement) -> Result<(Replacing, Option<Live>), Stop> {
        if r.source_value.is_some() && r.source.is_some() {
            return fail("value and resource selectors are mutually exclusive");
        }
        if let Some(v) = &r.source_value {
            return Ok((Replacing::Scalar(v.clone()), None));
        }
        let source = r.source.as_mut().expect("checked above");
        let mut found = None;
        for i in 0..self.docs.len() {
            let ids = self.ids(i).map_err(|e| match e {
                Stop::Fail(e) => Stop::Fail(format!("error getting node IDs: {e}")),
                refused => refused,
            })?;
            if ids.iter().any(|id| id.is_selected_by(&source.id)) {
                if found.is_some() {
                    return fail(format!("multiple matches for selector {}", source.text()));
                }
                found = Some(i);
            }
        }
        let Some(i) = found else {
            return fail(format!("nothing selected by {}", source.text()));
        };
        let doc = &self.docs[i];
        if doc.is_opaque() {
            return refuse("the source item uses anchors, aliases or tags");
        }
        if source.field_path.is_empty() {
            source.field_path = DEFAULT_FIELD_PATH.to_string();
        }
        let t = doc.text();
        let missing = || {
            fail(format!(
                "fieldPath `{}` is missing for replacement source {}",
                source.field_path,
                source.id.text()
            ))
        };
        let Some(at) = lookup(doc, &split_field_path(&source.field_path))? else {
            return missing();
        };
        let empty = match &at.node.kind {
            Kind::Scalar { .. } => at.is_null(t),
            Kind::Map { entries, .. } => entries.is_empty(),
            Kind::Seq { items, .. } => items.is_empty(),
            Kind::Alias => false,
        };
        if empty {
            return missing();
        }
        if !at.is_scalar() {
            if source
                .options
                .as_ref()
                .is_some_and(|o| !o.delimiter.is_empty())
            {
                return fail("delimiter option can only be used with scalar nodes");
            }
            return block_value(doc, &at).map(|b| (b.expect("a collection"), None));
        }
        let value = scalar_value(t, &at);
        match source.options.as_ref() {
            Some(o) if !o.delimiter.is_empty() => {
                let parts: Vec<&str> = value.split(o.delimiter.as_str()).collect();
                if o.index < 0 || o.index >= parts.len() as i64 {
                    return fail(format!(
                        "options.index {} is out of bounds for value {value}",
                        o.index
                    ));
                }
                Ok((Replacing::Scalar(parts[o.index as usize].to_string()), None))
            }
            _ => Ok((
                Replacing::Scalar(value),
                Some(Live {
                    doc: i,
                    path: split_field_path(&source.field_path),
                }),
            )),
        }
    }

    /// kustomize's `applyReplacement` for one target selector.
    fn apply_target(
        &mut self,
        value: &mut Replacing,
        live: Option<&Live>,
        target: &mut Target,
    ) -> Result<(), Stop> {
        let Some(select) = target.select.clone() else {
            return fail("target must specify resources to select");
        };
        if target.field_paths.is_empty() {
            target.field_paths = vec![DEFAULT_FIELD_PATH.to_string()];
        }
        let paths: Vec<Vec<String>> = target
            .field_paths
            .iter()
            .map(|fp| split_field_path(fp))
            .collect();
        for i in 0..self.docs.len() {
            let ids = self.ids(i)?;
            if !matches_anno_and_label(&self.docs[i], &select)? {
                continue;
            }
            let mut rejected = false;
            for r in &target.reject {
                if r.annotation_selector.is_empty() && r.label_selector.is_empty() {
                    continue;
                }
                if matches_anno_and_label(&self.docs[i], r)? {
                    rejected = true;
                    break;
                }
            }
            if rejected {
                continue;
            }
            let reject_id = target
                .reject
                .iter()
                .filter(|r| !r.id.is_empty())
                .any(|r| ids.iter().any(|id| id.is_selected_by(&r.id)));
            if ids.iter().any(|id| id.is_selected_by(&select.id)) && !reject_id {
                self.copy_to_target(i, value, live, target, &paths)?;
            }
        }
        Ok(())
    }

    /// kustomize's `copyValueToTarget` on item `i`.
    fn copy_to_target(
        &mut self,
        i: usize,
        value: &mut Replacing,
        live: Option<&Live>,
        target: &Target,
        paths: &[Vec<String>],
    ) -> Result<(), Stop> {
        if self.docs[i].is_opaque() {
            return refuse("a target item uses anchors, aliases or tags");
        }
        let create = target.options.as_ref().is_some_and(|o| o.create);
        for (fp, path) in target.field_paths.iter().zip(paths) {
            let not_found = |detail: Option<String>| {
                let what = if create { "find or create" } else { "find" };
                let head = format!(
                    "unable to {what} field {} in replacement target",
                    super::go_quote(fp)
                );
                fail(match detail {
                    Some(d) => format!("{head}: {d}"),
                    None => head,
                })
            };
            let doc = &self.docs[i];
            let t = doc.text();
            let mut found = Vec::new();
            let Some(root) = At::root(doc) else {
                return not_found(None);
            };
            let mut walk = Matcher {
                t,
                create,
                out: &mut found,
                created: Vec::new(),
                patterns: &mut self.patterns,
            };
            match walk.path(root, path) {
                Ok(()) => {}
                Err(Stop::Fail(d)) => return not_found(Some(d)),
                Err(refused) => return Err(refused),
            }
            let created = std::mem::take(&mut walk.created);
            if found.is_empty() && created.is_empty() {
                return not_found(None);
            }
            // The source field, when it is in this item.
            let source_at = match live {
                Some(l) if l.doc == i => lookup(doc, &l.path)?.map(|a| a.node.start),
                _ => None,
            };
            let styles = &self.styles[i];
            let mut edits = Vec::with_capacity(found.len() + created.len());
            for at in found {
                let edit = set_field_value(t, doc, styles, &at, value, target.options.as_ref())?;
                if source_at == Some(at.node.start)
                    && let Some(v) = &edit.value
                {
                    *value = Replacing::Scalar(v.clone());
                }
                edits.push(edit);
            }
            for c in created {
                edits.push(c.edit(value, target.options.as_ref()));
            }
            let styles = splice_tracked(&mut self.docs[i], edits, styles)?;
            self.ids[i] = None;
            self.styles[i] = styles;
            self.changed[i] = true;
        }
        Ok(())
    }
}

/// kyaml's `PathGetter` (`yaml.Lookup`) from the document root: the node,
/// or `None` when a part is missing.
fn lookup<'a>(doc: &'a YamlDoc, path: &[String]) -> Result<Option<At<'a>>, Stop> {
    let t = doc.text();
    let Some(mut at) = At::root(doc) else {
        return Ok(None);
    };
    let wrap = |e: &str| fail(format!("error looking up replacement source: {e}"));
    for part in path.iter().map(|p| p.trim()).filter(|p| !p.is_empty()) {
        let next = if let Some(idx) = index_number(part) {
            if idx < 0 {
                return wrap(&format!("array index {idx} cannot be negative"));
            }
            at.elements(t)?.get(idx as usize).copied()
        } else if part == "-" {
            let elements = at.elements(t)?;
            if elements.is_empty() {
                return refuse("the source path takes the last element of an empty sequence");
            }
            elements.last().copied()
        } else if part == "*" {
            return wrap("wildcard is not supported in PathGetter");
        } else if is_list_index(part) {
            let Some((name, value)) = split_index_name_value(part) else {
                return wrap(NO_NAME_VALUE);
            };
            let elements = at.elements(t)?;
            if name.is_empty() {
                elements.into_iter().find(|e| scalar_value(t, e) == value)
            } else {
                let mut hit = None;
                for e in elements {
                    if !matches!(e.node.kind, Kind::Map { .. }) {
                        continue;
                    }
                    if let Some(f) = e.field(t, name)?
                        && scalar_value(t, &f) == value
                    {
                        hit = Some(e);
                        break;
                    }
                }
                hit
            }
        } else {
            at.field(t, part)?
        };
        match next {
            Some(n) => at = n,
            None => return Ok(None),
        }
    }
    Ok(Some(at))
}

/// Fields a target path creates (`options.create`): under the block
/// mapping ending at `at` (where its last entry's line ends), whose keys
/// start at `column`, the field names `chain`, the last one set.
struct Creation {
    at: usize,
    /// Where the block mapping starts.
    map: usize,
    column: usize,
    chain: Vec<String>,
    seq_indent: SeqIndent,
}

impl Creation {
    /// The text inserted: each field on its own line, nested two columns
    /// further, the last one with the value (a created scalar has no tag:
    /// its value is written as a plain scalar if it reads as one).
    fn edit(&self, value: &Replacing, options: Option<&FieldOptions>) -> Edit {
        let mut s = String::new();
        let mut written = None;
        let mut new_value = None;
        let last = self.chain.len() - 1;
        for (depth, name) in self.chain.iter().enumerate() {
            let indent = self.column + 2 * depth;
            s.push('\n');
            s.push_str(&" ".repeat(indent));
            // A created key has no tag: written plain when it can be.
            s.push_str(&token(name, Style::Plain, indent));
            s.push(':');
            if depth < last {
                continue;
            }
            match value {
                Replacing::Scalar(v) => {
                    let new = with_delimiter("", v, options);
                    let token = scalar_token(&new, Style::Plain, indent);
                    if !token.is_empty() {
                        s.push(' ');
                    }
                    written = Some((
                        s.len(),
                        GoStyle {
                            style: Style::Plain,
                            tag: None,
                        },
                    ));
                    s.push_str(&token);
                    new_value = Some(new);
                }
                block => s.push_str(&block.block_under(indent, self.seq_indent)),
            }
        }
        Edit {
            start: self.at,
            end: self.at,
            text: s,
            written,
            value: new_value,
            in_place: InPlace::Entries(self.map),
        }
    }
}

/// kyaml's `PathMatcher`: every node `path` reaches from a node, in
/// document order; with `create`, the fields it would add.
struct Matcher<'a, 'o> {
    t: &'a str,
    create: bool,
    out: &'o mut Vec<At<'a>>,
    created: Vec<Creation>,
    /// The compiled `[name=value]` patterns ([`Run::patterns`]).
    patterns: &'o mut HashMap<String, Arc<regex::Regex>>,
}

impl<'a> Matcher<'a, '_> {
    fn path(&mut self, at: At<'a>, path: &[String]) -> Result<(), Stop> {
        let t = self.t;
        let Some((part, rest)) = path.split_first() else {
            self.out.push(at);
            return Ok(());
        };
        let must_create = || {
            refuse(
                "the target path needs sequence elements created (options.create), which is left to the Go function",
            )
        };
        if part.is_empty() {
            return refuse("the target path has an empty part");
        }
        if let Some(idx) = index_number(part).filter(|i| *i >= 0) {
            let elements = at.elements(t)?;
            let idx = idx as usize;
            if elements.len() == idx && self.create {
                return must_create();
            }
            let Some(e) = elements.get(idx) else {
                return fail(format!(
                    "index {idx} specified but only {} elements found",
                    elements.len()
                ));
            };
            return self.path(*e, rest);
        }
        if is_list_index(part) {
            let Some((name, pattern)) = split_index_name_value(part) else {
                return fail(NO_NAME_VALUE);
            };
            if pattern.contains('\\') || pattern.contains("(?") || pattern.contains("[:") {
                return refuse(format!(
                    "the pattern {pattern:?} may read differently in Go's regular expressions"
                ));
            }
            // Shared, not cloned: a cloned `Regex` starts with an empty
            // search cache of its own.
            let re = match self.patterns.get(pattern) {
                Some(re) => re.clone(),
                None => {
                    let re = Arc::new(regex::Regex::new(pattern).map_err(|e| {
                        Stop::Refuse(format!("the pattern {pattern:?} does not compile: {e}"))
                    })?);
                    self.patterns.insert(pattern.to_string(), re.clone());
                    re
                }
            };
            let before = (self.out.len(), self.created.len());
            for e in at.elements(t)? {
                if name.is_empty() {
                    if re.is_match(&node_string(t, &e)?) {
                        self.out.push(e);
                    }
                    continue;
                }
                if !matches!(e.node.kind, Kind::Map { .. }) {
                    continue;
                }
                let Some(f) = e.field(t, name)? else { continue };
                if re.is_match(&node_string(t, &f)?) {
                    self.path(e, rest)?;
                }
            }
            if before == (self.out.len(), self.created.len()) && self.create {
                return must_create();
            }
            return Ok(());
        }
        if part == "*" {
            for e in at.elements(t)? {
                self.path(e, rest)?;
            }
            return Ok(());
        }
        match at.field(t, part)? {
            Some(f) => self.path(f, rest),
            None if self.create => self.creation(at, path),
            None => Ok(()),
        }
    }

    /// The fields `path` names, created at the end of the block mapping `at`.
    fn creation(&mut self, at: At<'a>, path: &[String]) -> Result<(), Stop> {
        let t = self.t;
        let plain = |p: &String| {
            !p.is_empty() && index_number(p).is_none() && !is_list_index(p) && p != "*"
        };
        if !path.iter().all(plain) {
            return refuse(
                "the target path needs sequence elements created (options.create), which is left to the Go function",
            );
        }
        let Kind::Map {
            flow: false,
            entries,
        } = &at.node.kind
        else {
            return refuse("the target path creates fields in a node that is not a block mapping");
        };
        if matches!(at.place, Place::Flow) || entries.is_empty() {
            return refuse("the target path creates fields in a node that is not a block mapping");
        }
        let column = column(t, entries[0].key.start);
        let end = line_end(t, at.node.end);
        if !t[at.node.end..end].trim().is_empty()
            && !t[at.node.end..end].trim_start().starts_with('#')
        {
            return refuse("the mapping fields are created in does not end its line");
        }
        // A comment line after the mapping may belong to it (a foot comment).
        let next = t[end..].lines().map(str::trim).find(|l| !l.is_empty());
        if next.is_some_and(|l| l.starts_with('#')) {
            return refuse("comment lines follow the mapping fields are created in");
        }
        self.created.push(Creation {
            at: end,
            map: at.node.start,
            column,
            chain: path.to_vec(),
            seq_indent: SeqIndent::of(self.t),
        });
        Ok(())
    }
}

/// `at` as a copied value: a block mapping or sequence's text, or `None`
/// for a scalar; refused for flow collections and for comments around it
/// that kyaml would carry differently.
fn block_value(doc: &YamlDoc, at: &At) -> Result<Option<Replacing>, Stop> {
    let t = doc.text();
    let seq = match &at.node.kind {
        Kind::Scalar { .. } => return Ok(None),
        Kind::Map { flow: false, .. } => false,
        Kind::Seq { flow: false, .. } => true,
        _ => return refuse("a copied value is a flow collection or an alias"),
    };
    if at.node.props {
        return refuse("a copied value has an anchor or a tag");
    }
    let from = match at.place {
        Place::Value { colon, .. } => colon + 1,
        Place::Item { dash } => dash + 1,
        _ => return refuse("a copied value is the document or inside a flow collection"),
    };
    if doc
        .comments()
        .iter()
        .any(|c| c.start >= from && c.start < at.node.start)
    {
        return refuse("a copied value has a comment before its first entry");
    }
    let (_, rest) = block_end(t, at.node.end, "a copied value")?;
    let text = format!(
        "{}{}",
        &t[at.node.start..at.node.end],
        if rest.is_empty() { "" } else { " " }
    ) + rest;
    Ok(Some(Replacing::Block {
        text,
        column: column(t, at.node.start),
        seq,
    }))
}

/// Where the line of a block collection ending at `node_end` ends, and the
/// comment on it (`""` if none); refused when more than a comment follows
/// on that line or comment lines follow it (kyaml carries those as the
/// collection's foot comments). `what` names the collection in the reason.
fn block_end<'t>(t: &'t str, node_end: usize, what: &str) -> Result<(usize, &'t str), Stop> {
    let end = line_end(t, node_end);
    let rest = t[node_end..end].trim();
    if !rest.is_empty() && !rest.starts_with('#') {
        return refuse(format!("{what} does not end its line"));
    }
    if t[end..]
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .is_some_and(|l| l.starts_with('#'))
    {
        return refuse(format!("comment lines follow {what}"));
    }
    Ok((end, rest))
}

/// kustomize's delimiter rule: `old` split, the element at `index`
/// replaced by `value` (prepended for a negative index, appended past the
/// end), joined again; `value` itself without a delimiter.
fn with_delimiter(old: &str, value: &str, options: Option<&FieldOptions>) -> String {
    let Some(o) = options.filter(|o| !o.delimiter.is_empty()) else {
        return value.to_string();
    };
    let mut parts: Vec<&str> = old.split(o.delimiter.as_str()).collect();
    if o.index < 0 {
        parts.insert(0, value);
    } else if o.index >= parts.len() as i64 {
        parts.push(value);
    } else {
        parts[o.index as usize] = value;
    }
    parts.join(&o.delimiter)
}

/// kyaml's `RNode.String()` of a scalar, trimmed: its token as yaml.v3
/// writes it alone, with its line comment.
fn node_string(t: &str, at: &At) -> Result<String, Stop> {
    let Kind::Scalar { style, empty } = at.node.kind else {
        return refuse("an element match reads a field that is not a scalar");
    };
    if empty || matches!(style, Style::Literal | Style::Folded) || at.node.props {
        return refuse("an element match reads a field that is empty, a block scalar or tagged");
    }
    let value = scalar_value(t, at);
    if value.contains('\n') {
        return refuse("an element match reads a multi-line scalar");
    }
    let token = match style {
        Style::Plain => value,
        s => token(&value, s, 0),
    };
    let end = line_end(t, at.node.end);
    let comment = (!matches!(at.place, Place::Flow))
        .then(|| t[at.node.end..end].trim())
        .filter(|c| c.starts_with('#'));
    Ok(match comment {
        Some(c) => format!("{token} {c}"),
        None => token,
    })
}

/// kustomize's `setFieldValue` for one target node: the edit to the text.
fn set_field_value(
    t: &str,
    doc: &YamlDoc,
    styles: &Styles,
    at: &At,
    value: &Replacing,
    options: Option<&FieldOptions>,
) -> Result<Edit, Stop> {
    let Kind::Scalar { empty, .. } = at.node.kind else {
        if options.is_some_and(|o| !o.delimiter.is_empty()) {
            return fail("delimiter option can only be used with scalar nodes");
        }
        return replace_collection(t, at, value);
    };
    let old = scalar_value(t, at);
    let new = with_delimiter(&old, value.value(), options);
    if empty || at.node.props {
        return refuse("a target field is empty, anchored or tagged");
    }
    let (start, indent) = match at.place {
        Place::Root => (at.node.start, 0),
        Place::Value { column, colon } => (skip_blank(t, colon + 1).min(at.node.start), column),
        Place::Item { dash } => (skip_blank(t, dash + 1).min(at.node.start), column(t, dash)),
        Place::Flow => return refuse("a target field is inside a flow collection"),
    };
    if t[start..at.node.start].contains(['&', '!']) {
        return refuse("a target field has an anchor or a tag");
    }
    if doc
        .comments()
        .iter()
        .any(|c| c.start >= start && c.start < at.node.end)
    {
        return refuse("a target field has a comment inside it");
    }
    let go = go_style(styles, t, at);
    let token = match (go.style, go.tag) {
        (Style::Plain, None) => scalar_token(&new, Style::Plain, indent),
        (Style::Plain, Some(was)) => {
            let is = v3_tag(&new);
            if was == Tag::Unknown || is == Tag::Unknown {
                return refuse(format!(
                    "the value {new:?} or {old:?} may resolve to a timestamp"
                ));
            }
            if was == is {
                scalar_token(&new, Style::Plain, indent)
            } else if was == Tag::Str {
                if new.contains('\n') {
                    token(&new, Style::Plain, indent)
                } else {
                    emit::double_quoted(&new)
                }
            } else {
                return refuse(format!(
                    "the target keeps its tag {was:?}, which the value {new:?} does not resolve to"
                ));
            }
        }
        (s, _) => scalar_token(&new, s, indent),
    };
    // The Go function writes such a block, and its YAML reader takes a
    // content line starting with `#` for a comment when it reads the item
    // back (the value comes out empty).
    if token.starts_with(['|', '>']) && new.lines().any(|l| l.trim_start().starts_with('#')) {
        return refuse(
            "a block scalar would get a line starting with `#`, which the Go function loses",
        );
    }
    // Nothing is written for an empty plain value, not even the blank
    // before it (`key:`).
    let start = if token.is_empty() {
        t[..start].trim_end_matches([' ', '\t']).len()
    } else {
        start
    };
    let edit = |start: usize, end: usize, text: String| Edit {
        start,
        end,
        text,
        written: Some((0, go)),
        value: Some(new.clone()),
        in_place: InPlace::Scalar(at.node.start),
    };
    // A comment after the value stays, one blank after it (on a block
    // scalar's header line).
    let end = line_end(t, at.node.end);
    let after = &t[at.node.end..end];
    match after.trim_start().starts_with('#').then(|| after.trim()) {
        Some(comment) => {
            let text = match token.split_once('\n') {
                Some((header, body)) if token.starts_with(['|', '>']) => {
                    format!("{header} {comment}\n{body}")
                }
                _ if token.is_empty() => format!(" {comment}"),
                _ => format!("{token} {comment}"),
            };
            let mut e = edit(start, end, text);
            if token.is_empty() {
                e.written = None;
            }
            Ok(e)
        }
        None => Ok(edit(start, at.node.end, token)),
    }
}

/// kyaml's `SetYNode` of a block mapping or sequence target: the copied
/// block in its place (the comment on the target's key line stays).
fn replace_collection(t: &str, at: &At, value: &Replacing) -> Result<Edit, Stop> {
    if matches!(value, Replacing::Scalar(_)) {
        return refuse("a scalar replaces a mapping or sequence (left to the Go function)");
    }
    if !matches!(
        at.node.kind,
        Kind::Map { flow: false, .. } | Kind::Seq { flow: false, .. }
    ) || at.node.props
    {
        return refuse("a target is a flow collection, an alias, anchored or tagged");
    }
    let Place::Value {
        column: key_column,
        colon,
    } = at.place
    else {
        return refuse("a replaced mapping or sequence is not a mapping entry's value");
    };
    let from = line_end(t, colon);
    if line_start(t, at.node.start) <= colon {
        return refuse("a replaced mapping or sequence starts on its key's line");
    }
    let (end, _) = block_end(t, at.node.end, "a replaced mapping or sequence")?;
    Ok(Edit {
        start: from,
        end,
        text: value.block_under(key_column, SeqIndent::of(t)),
        written: None,
        value: None,
        in_place: InPlace::No,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(items: &[&str], config: &str) -> Result<Applied, Refusal> {
        let docs: Vec<Arc<YamlDoc>> = items
            .iter()
            .map(|t| Arc::new(YamlDoc::parse(*t).unwrap()))
            .collect();
        let fc: Value = crate::domain::codec::from_yaml_str(config).unwrap();
        apply(docs, Some(&fc))
    }

    fn text(a: &Applied, i: usize) -> &str {
        a.texts[i].as_ref().expect("changed").text()
    }

    const HEAD: &str =
        "apiVersion: fn.kpt.dev/v1alpha1\nkind: ApplyReplacements\nmetadata:\n  name: r\n";

    #[test]
    fn paths_split_as_kyaml_splits_them() {
        assert_eq!(split_field_path("a.b.c"), ["a", "b", "c"]);
        assert_eq!(split_field_path("/a/b"), ["/a/b"]);
        assert_eq!(split_field_path(".a.b"), ["a", "b"]);
        assert_eq!(split_field_path(r"a\.b.c"), ["a.b", "c"]);
        assert_eq!(
            split_field_path("spec.[name=a.b].image"),
            ["spec", "[name=a.b]", "image"]
        );
        assert_eq!(split_field_path("a.[b.c].d"), ["a", "b.c", "d"]);
        assert_eq!(split_field_path(""), [""]);
    }

    #[test]
    fn tags_resolve_as_yaml_v3_resolves_them() {
        for (s, tag) in [
            ("", Tag::Null),
            ("~", Tag::Null),
            ("Null", Tag::Null),
            ("TRUE", Tag::Bool),
            ("yes", Tag::Str),
            ("3", Tag::Int),
            ("-3", Tag::Int),
            ("0x1F", Tag::Int),
            ("0o17", Tag::Int),
            ("017", Tag::Int),
            ("018", Tag::Float),
            ("1_000", Tag::Int),
            ("1.5", Tag::Float),
            (".5", Tag::Float),
            ("1e3", Tag::Float),
            ("1.", Tag::Float),
            ("-.inf", Tag::Float),
            ("2024-01-02", Tag::Timestamp),
            ("2024-01-02T10:00:00Z", Tag::Unknown),
            ("1.2.3", Tag::Str),
            ("nginx:1.14", Tag::Str),
            ("99999999999999999999", Tag::Float),
        ] {
            assert_eq!(v3_tag(s), tag, "{s:?}");
        }
    }

    #[test]
    fn a_source_field_is_written_into_the_targets_keeping_their_style() {
        let a = run(
            &[
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: src\ndata:\n  image: nginx:1.25\n",
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web # main\nspec:\n  template:\n    spec:\n      containers:\n      - name: app\n        image: \"nginx\"\n      - name: app-2\n        image: busybox   # side\n",
            ],
            &format!(
                "{HEAD}replacements:\n- source:\n    kind: ConfigMap\n    fieldPath: data.image\n  targets:\n  - select:\n      kind: Deployment\n    fieldPaths:\n    - spec.template.spec.containers.[name=app].image\n"
            ),
        )
        .unwrap();
        assert_eq!(a.error, None);
        assert!(a.texts[0].is_none());
        assert_eq!(
            text(&a, 1),
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web # main\nspec:\n  template:\n    spec:\n      containers:\n      - name: app\n        image: \"nginx:1.25\"\n      - name: app-2\n        image: nginx:1.25 # side\n"
        );
    }

    #[test]
    fn types_and_delimiters_follow_kyaml() {
        let a = run(
            &["apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  n: abc\n  host: a.b.c\n  r: 1\n"],
            &format!(
                "{HEAD}replacements:\n- sourceValue: '3'\n  targets:\n  - select: {{kind: ConfigMap}}\n    fieldPaths: [data.n, data.r]\n- sourceValue: x\n  targets:\n  - select: {{name: c}}\n    fieldPaths: [data.host]\n    options: {{delimiter: '.', index: 1}}\n"
            ),
        )
        .unwrap();
        assert_eq!(
            text(&a, 0),
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  n: \"3\"\n  host: a.x.c\n  r: 3\n"
        );
    }

    #[test]
    fn errors_are_the_go_function_texts() {
        let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n";
        let err = |config: &str| run(&[cm], config).unwrap().error.unwrap();
        assert_eq!(
            err(&format!(
                "{HEAD}replacements:\n- source: {{kind: Secret}}\n  targets: []\n"
            )),
            "nothing selected by Secret.[noVer].[noGrp]/[noName].[noNs]"
        );
        assert_eq!(
            err(&format!(
                "{HEAD}replacements:\n- sourceValue: x\n  targets:\n  - select: {{kind: ConfigMap}}\n    fieldPaths: [data.x]\n"
            )),
            "unable to find field \"data.x\" in replacement target"
        );
        assert_eq!(
            err(&format!("{HEAD}replacements:\n- targets: []\n")),
            "replacements must specify a source and at least one target"
        );
        assert_eq!(
            err("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"),
            "received functionConfig of kind ConfigMap and apiVersion v1, only functionConfig of kind ApplyReplacements and apiVersion fn.kpt.dev/v1alpha1 is supported"
        );
        assert_eq!(
            err(&format!(
                "{HEAD}replacements:\n- source: {{kind: ConfigMap, fieldPath: data.none}}\n  targets: []\n"
            )),
            "fieldPath `data.none` is missing for replacement source ConfigMap.[noVer].[noGrp]/[noName].[noNs]"
        );
    }

    #[test]
    fn mappings_are_copied_and_missing_fields_created() {
        let a = run(
            &[
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - image: busybox # the image\n    name: app\n  restartPolicy: OnFailure\n",
                "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: j\nspec:\n  template:\n    spec: # kept\n      old: 1\n",
            ],
            &format!(
                "{HEAD}replacements:\n- source: {{kind: Pod, fieldPath: spec}}\n  targets:\n  - select: {{kind: Job}}\n    fieldPaths: [spec.template.spec, spec.x.y]\n    options: {{create: true}}\n"
            ),
        )
        .unwrap();
        assert_eq!(a.error, None);
        assert_eq!(
            text(&a, 1),
            "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: j\nspec:\n  template:\n    spec: # kept\n      containers:\n      - image: busybox # the image\n        name: app\n      restartPolicy: OnFailure\n  x:\n    y:\n      containers:\n      - image: busybox # the image\n        name: app\n      restartPolicy: OnFailure\n"
        );
    }

    #[test]
    fn what_is_not_reproduced_is_refused() {
        let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  n: 1\n";
        for config in [
            "replacements:\n- sourceValue: x\n  targets:\n  - select: {kind: ConfigMap}\n    fieldPaths: [data.n]\n",
            "replacements:\n- sourceValue: x\n  targets:\n  - select: {kind: ConfigMap}\n    fieldPaths: [data.l.0]\n    options: {create: true}\n",
            "replacements:\n- sourceValue: x\n  targets:\n  - select: {kind: ConfigMap}\n    fieldPaths: [data]\n",
            "replacements:\n- sourceValue: x\n  targets:\n  - select: {kind: ConfigMap}\n    options: {index: '1'}\n",
            "replacements:\n- sourceValue: x\n  targets:\n  - select: {kind: ConfigMap}\n    fieldPaths: [metadata]\n",
        ] {
            assert!(run(&[cm], &format!("{HEAD}{config}")).is_err(), "{config}");
        }
    }
}
