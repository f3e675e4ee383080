//! Builtin functions: KRM functions compiled into the runner and run
//! in-process, matched by image name as Porch matches its builtins
//! (`porch-function-runner.md` §8.1, §8.4).
//!
//! | Function | Image names served |
//! |---|---|
//! | package-context generator | `builtins/gen-pkg-context` (kpt's builtin; also with `:latest`) |
//! | `set-namespace` | tags `v0.4`, `v0.4.1`, `v0.4.5` and Porch's pinned digest `sha256:f930d924…` |
//! | `set-labels` | tags `v0.2`, `v0.2.4` |
//! | `apply-setters` | tags `v0.2`, `v0.2.2` |
//! | `apply-replacements` | tags `v0.1`, `v0.1.5` |
//!
//! Each catalog name is served bare (`set-namespace:v0.4.5`) and under
//! `ghcr.io/kptdev/krm-functions-catalog/`, the legacy `gcr.io/kpt-fn/` and
//! the configured default image prefix — the keys Porch's builtin runtime
//! registers (Gen B aliases and Gen C defaults combined). The tags are the
//! releases whose behaviour the Rust versions reproduce: set-namespace as in
//! catalog v0.4.5 (Porch maps v0.4/v0.4.1/v0.4.5 to one builtin too), and
//! set-labels as in the catalog's current `setlabels` transformer (v0.2 line;
//! Porch has no set-labels builtin, so this list is our choice). Any other
//! image is [`EvalError::NotFound`], so a chain passes it to the next
//! runtime. `latest`/`unstable` are deliberately not served: they float.
//!
//! Like the Go functions built on the functions SDK, `set-namespace` and
//! `set-labels` return their items sorted by apiVersion, kind, namespace and
//! name, and report failure as exit code 1 with stderr
//! `failed to evaluate function: error: function failure` and their results.

pub mod apply_replacements;
pub mod apply_setters;
pub mod evaluator;
pub mod pkg_context;
pub mod set_labels;
pub mod set_namespace;

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::{Map, Value};

use crate::domain::codec::tree::YamlDoc;
use crate::domain::evaluation::{EvalError, ExitReason, FunctionFailure};
use crate::domain::image::DEFAULT_IMAGE_PREFIX;
use crate::domain::render::GEN_PKG_CONTEXT_IMAGE;
use crate::domain::render::annotations as ann;
use crate::domain::render::source::emit_document;
use crate::domain::resource_list::{OutputItem, ResourceList};
use crate::ports::{FunctionCall, FunctionOutput, FunctionRuntime, FunctionTarget};

/// Tags (and digests) of `set-namespace` served by the builtin.
pub const SET_NAMESPACE_TAGS: &[&str] = &[
    ":v0.4",
    ":v0.4.1",
    ":v0.4.5",
    "@sha256:f930d9248001fa763799cc81cf2d89bbf83954fc65de0db20ab038a21784f323",
];
/// Tags of `set-labels` served by the builtin.
pub const SET_LABELS_TAGS: &[&str] = &[":v0.2", ":v0.2.4"];
/// Tags of `apply-setters` served by the builtin (catalog v0.2.2).
pub const APPLY_SETTERS_TAGS: &[&str] = &[":v0.2", ":v0.2.2"];
/// Tags of `apply-replacements` served by the builtin (catalog v0.1.5).
pub const APPLY_REPLACEMENTS_TAGS: &[&str] = &[":v0.1", ":v0.1.5"];
/// Prefixes under which catalog builtins are served (besides the bare name
/// and the configured default prefix).
pub const BUILTIN_PREFIXES: &[&str] = &["ghcr.io/kptdev/krm-functions-catalog/", "gcr.io/kpt-fn/"];
/// stderr of a failing SDK-based function (the Go SDK's `AsMain` log line).
pub const SDK_FAILURE_STDERR: &str = "failed to evaluate function: error: function failure";

/// Which builtin an image names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Builtin {
    /// kpt's `builtins/gen-pkg-context`.
    PackageContext,
    /// The catalog's `set-namespace`.
    SetNamespace,
    /// The catalog's `set-labels`.
    SetLabels,
    /// The catalog's `apply-setters`.
    ApplySetters,
    /// The catalog's `apply-replacements`.
    ApplyReplacements,
}

impl Builtin {
    /// The function's catalog name (`apply-setters`; kpt's
    /// `builtins/gen-pkg-context` for the package-context generator).
    pub fn name(self) -> &'static str {
        match self {
            Builtin::PackageContext => GEN_PKG_CONTEXT_IMAGE,
            Builtin::SetNamespace => "set-namespace",
            Builtin::SetLabels => "set-labels",
            Builtin::ApplySetters => "apply-setters",
            Builtin::ApplyReplacements => "apply-replacements",
        }
    }

    /// The tags (and digests) served, each with its `:` or `@`; none for
    /// the package-context generator, which kpt names without one.
    pub fn tags(self) -> &'static [&'static str] {
        match self {
            Builtin::PackageContext => &[],
            Builtin::SetNamespace => SET_NAMESPACE_TAGS,
            Builtin::SetLabels => SET_LABELS_TAGS,
            Builtin::ApplySetters => APPLY_SETTERS_TAGS,
            Builtin::ApplyReplacements => APPLY_REPLACEMENTS_TAGS,
        }
    }

    /// True for the builtins that work on their items' texts (comments and
    /// quoting kept), which [`BuiltinRuntime::run_with_texts`] runs.
    pub fn keeps_texts(self) -> bool {
        matches!(self, Builtin::ApplySetters | Builtin::ApplyReplacements)
    }
}

/// The catalog functions among the builtins, served under the catalog's
/// prefixes with their [`Builtin::tags`].
const CATALOG_BUILTINS: [Builtin; 4] = [
    Builtin::SetNamespace,
    Builtin::SetLabels,
    Builtin::ApplySetters,
    Builtin::ApplyReplacements,
];

/// The in-process runtime.
#[derive(Debug, Clone)]
pub struct BuiltinRuntime {
    table: HashMap<String, Builtin>,
    package_path: Option<String>,
}

impl Default for BuiltinRuntime {
    fn default() -> Self {
        Self::new(DEFAULT_IMAGE_PREFIX)
    }
}

impl BuiltinRuntime {
    /// The builtins, also served under `default_prefix` (kpt's/Porch's
    /// default image prefix, e.g. `ghcr.io/kptdev/krm-functions-catalog`).
    pub fn new(default_prefix: &str) -> Self {
        let mut table = HashMap::new();
        table.insert(GEN_PKG_CONTEXT_IMAGE.to_string(), Builtin::PackageContext);
        table.insert(
            format!("{GEN_PKG_CONTEXT_IMAGE}:latest"),
            Builtin::PackageContext,
        );
        let default_prefix = match default_prefix.trim_end_matches('/') {
            "" => String::new(),
            p => format!("{p}/"),
        };
        let mut prefixes = vec![String::new(), default_prefix];
        prefixes.extend(BUILTIN_PREFIXES.iter().map(|p| p.to_string()));
        for builtin in CATALOG_BUILTINS {
            let name = builtin.name();
            for prefix in &prefixes {
                for tag in builtin.tags() {
                    table.insert(format!("{prefix}{name}{tag}"), builtin);
                }
            }
        }
        Self {
            table,
            package_path: None,
        }
    }

    /// Sets the package path the package-context generator writes as
    /// `data.package-path` (Porch: parent path + `/` + package name).
    pub fn with_package_path(mut self, package_path: impl Into<String>) -> Self {
        self.package_path = Some(package_path.into());
        self
    }

    /// For an image naming a builtin's function with a tag the builtin does
    /// not serve (`set-namespace:v0.4.3`), the tags it does serve, e.g.
    /// `the builtin set-namespace serves only tags v0.4, v0.4.1, v0.4.5`.
    pub fn tags_note(&self, image: &str) -> Option<String> {
        let name = image.rsplit('/').next().unwrap_or(image);
        let name = name.split(['@', ':']).next().unwrap_or(name);
        let builtin = CATALOG_BUILTINS.into_iter().find(|b| b.name() == name)?;
        let tags: Vec<&str> = builtin
            .tags()
            .iter()
            .filter_map(|t| t.strip_prefix(':'))
            .collect();
        Some(format!(
            "the builtin {name} serves only tags {}",
            tags.join(", ")
        ))
    }

    /// The tags served for the repository `name` (`…/apply-setters` →
    /// `["v0.2", "v0.2.2"]`), sorted; empty when no builtin has that name.
    pub fn served_tags(&self, name: &str) -> Vec<String> {
        let mut tags: Vec<String> = self
            .table
            .keys()
            .filter_map(|k| k.strip_prefix(name)?.strip_prefix(':'))
            .map(str::to_string)
            .collect();
        tags.sort();
        tags
    }

    /// The builtin serving `image`, if any.
    pub fn lookup(&self, image: &str) -> Option<Builtin> {
        self.table.get(image).copied()
    }

    /// Runs builtin `builtin` on `rl` synchronously: the output
    /// ResourceList, or the failure as the SDK-based process would report it.
    ///
    /// Errors: [`EvalError::FunctionFailed`] (exit code 1, SDK stderr, the
    /// results) when the function fails; [`EvalError::Internal`] if it panicked.
    pub fn run_builtin(
        &self,
        builtin: Builtin,
        image: &str,
        mut rl: ResourceList,
    ) -> Result<ResourceList, EvalError> {
        if builtin.keeps_texts() {
            return self
                .run_with_texts(builtin, image, rl, None)
                .map(|(rl, _)| rl);
        }
        let ran = catch_unwind(AssertUnwindSafe(|| match builtin {
            Builtin::PackageContext => {
                pkg_context::generate(&mut rl, self.package_path.as_deref());
                true
            }
            Builtin::SetNamespace => {
                let ok = set_namespace::run(&mut rl);
                sort_like_sdk(&mut rl.items);
                ok
            }
            Builtin::SetLabels => {
                let ok = set_labels::run(&mut rl);
                sort_like_sdk(&mut rl.items);
                ok
            }
            Builtin::ApplySetters | Builtin::ApplyReplacements => true,
        }));
        match ran {
            Ok(true) => Ok(rl),
            Ok(false) => {
                let output = rl.to_yaml().map(Bytes::from).unwrap_or_default();
                Err(EvalError::FunctionFailed(Box::new(FunctionFailure {
                    image: image.to_string(),
                    exit: ExitReason::Code(1),
                    stderr: Bytes::from_static(SDK_FAILURE_STDERR.as_bytes()),
                    output,
                    results: rl.results,
                    sandbox_hint: None,
                })))
            }
            Err(panic) => {
                let what = crate::adapters::panic_message(&*panic)
                    .unwrap_or_else(|| "unknown panic".into());
                Err(EvalError::Internal(format!(
                    "KRM function panicked with: {what}"
                )))
            }
        }
    }
}

impl BuiltinRuntime {
    /// Runs `apply-setters` on `rl`, whose items' YAML texts are `texts`
    /// (as the function gets them; `None`: emitted from the items, so
    /// without comments). Returns the output ResourceList and each output
    /// item's text ([`OutputItem::Same`] for an item no setter changed).
    ///
    /// Errors: [`EvalError::FunctionFailed`] as the Go function fails (exit
    /// code 1, its error twice on stderr, one error result, the items as
    /// far as they were set); [`EvalError::NotFound`] with the reason for a
    /// construct the builtin leaves to the Go function
    /// ([`apply_setters::Refusal`]); [`EvalError::Internal`] if it panicked.
    pub fn apply_setters(
        &self,
        image: &str,
        mut rl: ResourceList,
        docs: Option<Vec<Arc<YamlDoc>>>,
    ) -> Result<(ResourceList, Vec<OutputItem>), EvalError> {
        let texts: Vec<Arc<str>> = match docs {
            Some(d) => d.iter().map(|d| d.shared_text()).collect(),
            None => rl
                .items
                .iter()
                .map(|i| Arc::from(emit_document(i)))
                .collect(),
        };
        let inputs: Vec<(Arc<str>, String)> = texts
            .into_iter()
            .zip(&rl.items)
            .map(|(t, item)| {
                let file = ann::get_text(item, ann::LEGACY_PATH).unwrap_or_default();
                (t, file.into_owned())
            })
            .collect();
        let setters = apply_setters::setters(rl.function_config.as_ref());
        let applied = guarded(image, Builtin::ApplySetters, || {
            apply_setters::apply(&inputs, &setters)
        })?;
        let item_texts = take_texts(
            &mut rl.items,
            applied.texts.into_iter().map(|t| t.map(Arc::new)),
        );
        rl.results = applied.results;
        if let Some(e) = applied.error {
            let output = rl.to_yaml().map(Bytes::from).unwrap_or_default();
            return Err(EvalError::FunctionFailed(Box::new(FunctionFailure {
                image: image.to_string(),
                exit: ExitReason::Code(1),
                stderr: Bytes::from(format!("{e}{e}\n")),
                output,
                results: rl.results,
                sandbox_hint: None,
            })));
        }
        Ok((rl, item_texts))
    }
}

impl BuiltinRuntime {
    /// Runs a builtin that works on its items' texts
    /// ([`Builtin::keeps_texts`]): [`Self::apply_setters`] or
    /// [`Self::apply_replacements`]; any other builtin runs on values
    /// ([`Self::run_builtin`]) and its items come back as
    /// [`OutputItem::Same`] of nothing (their texts are not kept).
    ///
    /// Errors: as the builtin's own method.
    pub fn run_with_texts(
        &self,
        builtin: Builtin,
        image: &str,
        rl: ResourceList,
        docs: Option<Vec<Arc<YamlDoc>>>,
    ) -> Result<(ResourceList, Vec<OutputItem>), EvalError> {
        match builtin {
            Builtin::ApplySetters => self.apply_setters(image, rl, docs),
            Builtin::ApplyReplacements => self.apply_replacements(image, rl, docs),
            other => {
                let rl = self.run_builtin(other, image, rl)?;
                Ok((rl, Vec::new()))
            }
        }
    }

    /// Runs `apply-replacements` on `rl`, whose items' YAML texts are
    /// `texts` (as the function gets them; `None`: emitted from the items,
    /// so without comments). Returns the output ResourceList, its items
    /// sorted as the functions SDK sorts them ([`sort_like_sdk`]), and each
    /// output item's text ([`OutputItem::Same`] with the input index for
    /// an item no replacement changed).
    ///
    /// Errors: [`EvalError::FunctionFailed`] as the Go function fails (exit
    /// code 1, the SDK's stderr line, the error as one result, the items
    /// unchanged); [`EvalError::NotFound`] with the reason for a construct
    /// the builtin leaves to the Go function
    /// ([`apply_setters::Refusal`]); [`EvalError::Internal`] if it panicked.
    pub fn apply_replacements(
        &self,
        image: &str,
        mut rl: ResourceList,
        docs: Option<Vec<Arc<YamlDoc>>>,
    ) -> Result<(ResourceList, Vec<OutputItem>), EvalError> {
        let docs = match docs {
            Some(d) => d,
            None => emitted_docs(&rl.items)?,
        };
        let applied = guarded(image, Builtin::ApplyReplacements, || {
            apply_replacements::apply(docs, rl.function_config.as_ref())
        })?;
        let item_texts = take_texts(&mut rl.items, applied.texts.into_iter());
        let order = sdk_order(&rl.items);
        let mut items = std::mem::take(&mut rl.items);
        rl.items = order
            .iter()
            .map(|&i| std::mem::take(&mut items[i]))
            .collect();
        let item_texts: Vec<OutputItem> = order.iter().map(|&i| item_texts[i].clone()).collect();
        if let Some(e) = applied.error {
            rl.results.push(crate::domain::resource_list::ResultItem {
                message: e,
                severity: Some(crate::domain::resource_list::Severity::Error),
                ..Default::default()
            });
            let output = rl.to_yaml().map(Bytes::from).unwrap_or_default();
            return Err(EvalError::FunctionFailed(Box::new(FunctionFailure {
                image: image.to_string(),
                exit: ExitReason::Code(1),
                stderr: Bytes::from_static(SDK_FAILURE_STDERR.as_bytes()),
                output,
                results: rl.results,
                sandbox_hint: None,
            })));
        }
        Ok((rl, item_texts))
    }
}

#[async_trait]
impl FunctionRuntime for BuiltinRuntime {
    /// Runs the builtin named by `call.target` (an image); anything else is
    /// NotFound. Builtins finish in microseconds, so `call.timeout` is not
    /// enforced.
    async fn run(&self, call: FunctionCall) -> Result<FunctionOutput, EvalError> {
        let FunctionTarget::Image(image) = &call.target else {
            return Err(EvalError::not_found(call.target.name()));
        };
        let Some(builtin) = self.lookup(image) else {
            return Err(EvalError::not_found(image));
        };
        if builtin.keeps_texts() {
            let texts = call
                .sources
                .as_ref()
                .and_then(|s| s.input_docs(&call.resource_list.items));
            let (rl, item_texts) =
                self.run_with_texts(builtin, image, call.resource_list, texts)?;
            let mut out = FunctionOutput::new(rl, "");
            out.item_texts = Some(item_texts);
            return Ok(out);
        }
        let resource_list = self.run_builtin(builtin, image, call.resource_list)?;
        Ok(FunctionOutput::new(resource_list, ""))
    }

    /// Only the images of the builtin table ([`Self::lookup`]).
    fn may_serve(&self, target: &FunctionTarget) -> bool {
        matches!(target, FunctionTarget::Image(image) if self.lookup(image).is_some())
    }
}

/// The items written as YAML and read back as documents (for a call that
/// came without the items' texts).
///
/// Errors: [`EvalError::Internal`] if a written item does not read back.
pub(crate) fn emitted_docs(items: &[Value]) -> Result<Vec<Arc<YamlDoc>>, EvalError> {
    items.iter().map(emitted_doc).collect()
}

/// One item written as YAML and read back; errors as [`emitted_docs`].
pub(crate) fn emitted_doc(item: &Value) -> Result<Arc<YamlDoc>, EvalError> {
    YamlDoc::parse(emit_document(item))
        .map(Arc::new)
        .map_err(|e| {
            EvalError::Internal(format!("an item written as YAML does not read back: {e}"))
        })
}

/// Runs text-keeping `builtin`: its result, a [`Refusal`] as
/// [`EvalError::NotFound`] naming why (so a chain goes on to the binary or
/// image), a panic as [`EvalError::Internal`].
///
/// [`Refusal`]: apply_setters::Refusal
fn guarded<T>(
    image: &str,
    builtin: Builtin,
    run: impl FnOnce() -> Result<T, apply_setters::Refusal>,
) -> Result<T, EvalError> {
    let name = builtin.name();
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(Ok(a)) => Ok(a),
        Ok(Err(apply_setters::Refusal(why))) => Err(EvalError::NotFound {
            image: image.to_string(),
            detail: Some(format!(
                "the builtin {name} leaves this call to the function's binary or image: {why}"
            )),
        }),
        Err(panic) => {
            let what =
                crate::adapters::panic_message(&*panic).unwrap_or_else(|| "unknown panic".into());
            Err(EvalError::Internal(format!(
                "KRM function panicked with: {what}"
            )))
        }
    }
}

/// Each item's output text: a changed item's new document (its value
/// replacing the item's), [`OutputItem::Same`] for the others.
fn take_texts(
    items: &mut [Value],
    texts: impl Iterator<Item = Option<Arc<YamlDoc>>>,
) -> Vec<OutputItem> {
    texts
        .enumerate()
        .map(|(i, text)| match text {
            Some(doc) => {
                items[i] = doc.value().clone();
                OutputItem::Text(doc)
            }
            None => OutputItem::Same(i),
        })
        .collect()
}

/// The functions SDK's output order of `items` as indexes (a stable sort by
/// the key [`sort_like_sdk`] uses).
fn sdk_order(items: &[Value]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by_cached_key(|&i| sdk_key(&items[i]));
    order
}

/// The functions SDK's output order: by `"<apiVersion> <kind> <namespace> <name>"`.
pub fn sort_like_sdk(items: &mut [Value]) {
    items.sort_by_cached_key(sdk_key);
}

/// The key the functions SDK sorts items by:
/// `"<apiVersion> <kind> <namespace> <name>"`.
fn sdk_key(o: &Value) -> String {
    format!(
        "{} {} {} {}",
        str_at(o, &["apiVersion"]),
        str_at(o, &["kind"]),
        str_at(o, &["metadata", "namespace"]),
        str_at(o, &["metadata", "name"])
    )
}

/// A string field at `path`, or "".
pub(crate) fn str_at<'a>(o: &'a Value, path: &[&str]) -> &'a str {
    let mut cur = o;
    for p in path {
        match cur.get(p) {
            Some(v) => cur = v,
            None => return "",
        }
    }
    cur.as_str().unwrap_or("")
}

/// Group and version of an apiVersion (`apps/v1` → (`apps`, `v1`), `v1` → ("", `v1`)).
pub(crate) fn group_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}

/// The SDK's lenient `IsGVK`: each of group, version, kind matches when
/// either side is empty or they are equal.
pub(crate) fn is_gvk(o: &Value, group: &str, version: &str, kind: &str) -> bool {
    let (g, v) = group_version(str_at(o, &["apiVersion"]));
    let k = str_at(o, &["kind"]);
    let ok = |a: &str, b: &str| a.is_empty() || b.is_empty() || a == b;
    ok(k, kind) && ok(g, group) && ok(v, version)
}

/// Sets a string at `path` inside `o`, creating maps on the way (a non-map
/// on the way is replaced, as the SDK's `SetNestedString` does).
pub(crate) fn set_str(o: &mut Value, path: &[&str], value: &str) {
    let mut cur = o;
    for (i, p) in path.iter().enumerate() {
        if !cur.is_object() {
            *cur = Value::Object(Map::new());
        }
        let map = cur.as_object_mut().expect("made a map above");
        if i + 1 == path.len() {
            map.insert(p.to_string(), Value::String(value.to_string()));
            return;
        }
        cur = map
            .entry(p.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        if cur.is_null() {
            *cur = Value::Object(Map::new());
        }
    }
}

/// Go's `strconv.Quote` (`%q`): double quotes, Go's escapes for `\a \b
/// \f \n \r \t \v \\ \"`, `\xHH` for other ASCII controls, `\uHHHH` /
/// `\UHHHHHHHH` for other characters Go does not count as printable
/// (controls, format characters, separators other than the space).
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            c if c.is_ascii() && (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if go_printable(c) => out.push(c),
            c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push('"');
    out
}

/// Go's `strconv.IsPrint`, for the characters that matter in field values:
/// ASCII from the space to `~`, and other characters unless they are
/// controls, white space, private-use or format characters.
fn go_printable(c: char) -> bool {
    let u = c as u32;
    if c.is_ascii() {
        return (0x20..0x7f).contains(&u);
    }
    !(c.is_control()
        || c.is_whitespace()
        || matches!(u, 0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x180E | 0x200B..=0x200F
            | 0x202A..=0x202E | 0x2060..=0x206F | 0xFEFF | 0xFFF9..=0xFFFB | 0xE000..=0xF8FF
            | 0xFFFE | 0xFFFF))
}

/// Go's `fmt` rendering of a sorted string list: `[a b c]`.
pub(crate) fn go_list(items: &std::collections::BTreeSet<String>) -> String {
    format!(
        "[{}]",
        items
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn image_keys_follow_porch() {
        let rt = BuiltinRuntime::new("example.com/fns");
        for image in [
            "set-namespace:v0.4.5",
            "ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4",
            "gcr.io/kpt-fn/set-namespace:v0.4.1",
            "gcr.io/kpt-fn/set-namespace@sha256:f930d9248001fa763799cc81cf2d89bbf83954fc65de0db20ab038a21784f323",
            "example.com/fns/set-namespace:v0.4.5",
        ] {
            assert_eq!(rt.lookup(image), Some(Builtin::SetNamespace), "{image}");
        }
        assert_eq!(
            rt.lookup("ghcr.io/kptdev/krm-functions-catalog/set-labels:v0.2.4"),
            Some(Builtin::SetLabels)
        );
        assert_eq!(
            rt.lookup("builtins/gen-pkg-context"),
            Some(Builtin::PackageContext)
        );
        for image in [
            "set-namespace:latest",
            "ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.5.0",
            "docker.io/evil/set-namespace:v0.4.5",
            "starlark:v0.5",
        ] {
            assert_eq!(rt.lookup(image), None, "{image}");
        }
    }

    #[test]
    fn tags_notes_name_the_served_tags() {
        let rt = BuiltinRuntime::default();
        let note = rt.tags_note("ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.3");
        assert_eq!(
            note.as_deref(),
            Some("the builtin set-namespace serves only tags v0.4, v0.4.1, v0.4.5")
        );
        assert!(
            rt.tags_note("set-labels:v0.2.2")
                .unwrap()
                .ends_with("v0.2, v0.2.4")
        );
        assert_eq!(rt.tags_note("starlark:v0.5"), None);
    }

    #[tokio::test]
    async fn unknown_images_and_exec_are_not_found() {
        let rt = BuiltinRuntime::default();
        let call = |t| FunctionCall {
            target: t,
            resource_list: ResourceList::new(vec![]),
            timeout: None,
            sources: None,
        };
        assert!(
            rt.run(call(FunctionTarget::Image("set-namespace:latest".into())))
                .await
                .unwrap_err()
                .is_not_found()
        );
        assert!(
            rt.run(call(FunctionTarget::Exec("set-namespace".into())))
                .await
                .unwrap_err()
                .is_not_found()
        );
    }

    #[test]
    fn helpers() {
        let mut o = json!({"apiVersion": "apps/v1", "kind": "Deployment"});
        assert!(is_gvk(&o, "", "", "Deployment"));
        assert!(is_gvk(&o, "apps", "v1", "Deployment"));
        assert!(!is_gvk(&o, "batch", "", "Deployment"));
        set_str(&mut o, &["spec", "a", "b"], "x");
        assert_eq!(o["spec"]["a"]["b"], "x");
        let mut items = vec![
            json!({"apiVersion": "v1", "kind": "B", "metadata": {"name": "a"}}),
            json!({"apiVersion": "apps/v1", "kind": "Z", "metadata": {"name": "a"}}),
            json!({"apiVersion": "v1", "kind": "A", "metadata": {"name": "b"}}),
        ];
        sort_like_sdk(&mut items);
        let kinds: Vec<&str> = items.iter().map(|i| str_at(i, &["kind"])).collect();
        assert_eq!(kinds, ["Z", "A", "B"]);
    }
}
