//! Porch's `FunctionConfig` objects from the API server: discovery of the
//! CRD, a kube-runtime watch on the pod namespace feeding the domain's
//! [`FunctionConfigStore`], and the status Porch's runner writes back.
//!
//! The store is published as a snapshot on every change, so the exec
//! evaluator ([`FunctionConfigWatch::catalog`]) and the pod cache
//! ([`FunctionConfigWatch::subscribe`]) see a new, changed or deleted object
//! at their next call, without a restart.
//!
//! Writes, as Porch's reconciler does them (spec §3.2), and nothing else:
//! - finalizer [`RUNNER_FINALIZER`] added to every object (merge patch of
//!   `metadata.finalizers`, conditional on the object's `resourceVersion`)
//!   and removed once the object is being deleted;
//! - `status.functionRunnerObservedGeneration` = `metadata.generation` and
//!   `status.error` = why the object was not applied (removed when it was),
//!   by a merge patch of the status subresource — only when they differ
//!   from what the object already says.
//!
//! The Kubernetes calls: `list` and `watch` on `functionconfigs` in the pod
//! namespace, `patch` on `functionconfigs` (finalizer) and on
//! `functionconfigs/status`, and discovery of the API group (allowed to
//! every authenticated user).

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::sync::watch;
use tokio_stream::StreamExt;

use super::FIELD_MANAGER;
use crate::domain::exec_config::BinaryCatalog;
use crate::domain::function_config::{
    FunctionConfigObject, FunctionConfigSpec, FunctionConfigStore, GROUP, KIND, PLURAL,
    RUNNER_FINALIZER, VERSION,
};

/// The `FunctionConfig` resource for kube's dynamic API.
pub fn resource() -> ApiResource {
    ApiResource {
        group: GROUP.to_string(),
        version: VERSION.to_string(),
        api_version: format!("{GROUP}/{VERSION}"),
        kind: KIND.to_string(),
        plural: PLURAL.to_string(),
    }
}

/// Whether the API server serves `functionconfigs` in
/// `config.porch.kpt.dev/v1alpha1` (the FunctionConfig CRD is installed),
/// by API discovery.
///
/// Errors: the API server cannot be asked (unreachable, TLS, auth), with
/// its error; a 404 for the group is `Ok(false)`.
pub async fn crd_installed(client: &Client) -> Result<bool, kube::Error> {
    match client
        .list_api_group_resources(&format!("{GROUP}/{VERSION}"))
        .await
    {
        Ok(list) => Ok(list.resources.iter().any(|r| r.name == PLURAL)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

/// The live FunctionConfig store of the pod namespace; stops watching when
/// dropped.
pub struct FunctionConfigWatch {
    store: watch::Receiver<Arc<FunctionConfigStore>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FunctionConfigWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The exec evaluator's view of the live store.
#[derive(Debug)]
struct LiveCatalog(watch::Receiver<Arc<FunctionConfigStore>>);

impl BinaryCatalog for LiveCatalog {
    fn binary_for(&self, image: &str) -> Option<crate::domain::exec_config::ExecBinary> {
        self.0.borrow().binary_entry(image)
    }
    fn binary_for_tag(
        &self,
        image: &str,
        tag: &str,
    ) -> Result<crate::domain::exec_config::ExecBinary, String> {
        self.0.borrow().binary_entry_for_tag(image, tag)
    }
    fn binaries(&self) -> Vec<std::path::PathBuf> {
        self.0.borrow().binaries()
    }
    fn len(&self) -> usize {
        self.0.borrow().len()
    }
    fn origin(&self) -> &'static str {
        "the FunctionConfig's binaryExecutor.path"
    }
}

/// How the first listing went, for [`FunctionConfigWatch::start`].
#[derive(Debug, Clone)]
enum Sync {
    /// Not listed yet; the last retryable error, if any.
    Pending(Option<Arc<watcher::Error>>),
    Done,
    /// A permanent error: what to do, and the watcher's error.
    Failed(String, Arc<watcher::Error>),
}

/// Why [`FunctionConfigWatch::start`] could not list the FunctionConfigs.
///
/// Each variant names the namespace; the watcher's error (kube's API or
/// transport error) is kept as the source when there is one.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum FunctionConfigWatchError {
    /// Listing will not succeed by retrying: forbidden (the RBAC rule to
    /// add is named) or the resource is not served (install the CRD).
    #[error("cannot list FunctionConfigs in namespace {namespace:?}: {advice}")]
    Refused {
        /// The pod namespace.
        namespace: String,
        /// What is wrong and what to do.
        advice: String,
        /// The watcher's error.
        #[source]
        source: Arc<watcher::Error>,
    },
    /// The watch task ended before the first listing.
    #[error("the watch on FunctionConfigs in namespace {namespace:?} stopped before listing them")]
    Stopped {
        /// The pod namespace.
        namespace: String,
    },
    /// The first listing did not succeed within the sync timeout
    /// (`--pod-sync-timeout`); the last retryable error, when there was one.
    #[error(
        "could not list FunctionConfigs in namespace {namespace:?} within {}s{}",
        within.as_secs(),
        last.as_ref().map(|e| format!(": {e}")).unwrap_or_default()
    )]
    Timeout {
        /// The pod namespace.
        namespace: String,
        /// The time allowed.
        within: Duration,
        /// The last error of the listing, if any.
        #[source]
        last: Option<Arc<watcher::Error>>,
    },
}

impl FunctionConfigWatch {
    /// Starts watching the FunctionConfigs of `namespace` into `empty` (a
    /// store made with `--functions` and `--default-image-prefix`) and
    /// returns once every existing object has been applied, so warm-up and
    /// the first call see them (spec §10 item 10). Needs a Tokio runtime.
    ///
    /// Errors: [`FunctionConfigWatchError`] — listing is forbidden (the
    /// RBAC rule to add is named), the resource does not exist, or the
    /// first listing has not succeeded within `within` (with the last
    /// error).
    pub async fn start(
        client: Client,
        namespace: &str,
        empty: FunctionConfigStore,
        within: Duration,
    ) -> Result<Self, FunctionConfigWatchError> {
        let api: Api<DynamicObject> = Api::namespaced_with(client, namespace, &resource());
        let (store_tx, store) = watch::channel(Arc::new(empty));
        let (sync_tx, mut sync) = watch::channel(Sync::Pending(None));
        let task = tokio::spawn(run(api, store_tx, sync_tx));
        let watch = Self { store, task };
        let outcome =
            tokio::time::timeout(within, sync.wait_for(|s| !matches!(s, Sync::Pending(_))))
                .await
                .map(|r| r.map(|s| s.clone()));
        let namespace = namespace.to_string();
        match outcome {
            Ok(Ok(Sync::Failed(advice, source))) => Err(FunctionConfigWatchError::Refused {
                namespace,
                advice,
                source,
            }),
            Ok(Ok(_)) => Ok(watch),
            Ok(Err(_)) => Err(FunctionConfigWatchError::Stopped { namespace }),
            Err(_) => {
                let last = match &*sync.borrow() {
                    Sync::Pending(last) => last.clone(),
                    _ => None,
                };
                Err(FunctionConfigWatchError::Timeout {
                    namespace,
                    within,
                    last,
                })
            }
        }
    }

    /// The current store.
    pub fn current(&self) -> Arc<FunctionConfigStore> {
        self.store.borrow().clone()
    }

    /// A receiver that sees every new snapshot of the store.
    pub fn subscribe(&self) -> watch::Receiver<Arc<FunctionConfigStore>> {
        self.store.clone()
    }

    /// The store as the exec evaluator's catalog, read at each call.
    pub fn catalog(&self) -> Arc<dyn BinaryCatalog> {
        Arc::new(LiveCatalog(self.store.clone()))
    }
}

/// The store's view of a watched object.
fn to_object(o: &DynamicObject) -> FunctionConfigObject {
    let created = o
        .metadata
        .creation_timestamp
        .as_ref()
        .and_then(|t| serde_json::to_value(t).ok())
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let spec = o
        .data
        .get("spec")
        .cloned()
        .unwrap_or(serde_json::Value::Null);
    FunctionConfigObject {
        name: o.metadata.name.clone().unwrap_or_default(),
        generation: o.metadata.generation.unwrap_or_default(),
        created,
        spec: FunctionConfigSpec::from_value(spec),
    }
}

fn deleting(o: &DynamicObject) -> bool {
    o.metadata.deletion_timestamp.is_some()
}

fn has_finalizer(o: &DynamicObject) -> bool {
    o.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == RUNNER_FINALIZER))
}

/// Whether `e` will not go away by retrying (listing forbidden, resource gone).
fn permanent(e: &watcher::Error) -> Option<String> {
    let api = match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s)) => s,
        _ => return None,
    };
    match api.code {
        403 => Some(format!(
            "forbidden ({}): the runner's service account needs list and watch on {PLURAL}.{GROUP} in this namespace",
            api.message
        )),
        404 => Some(format!(
            "the {PLURAL}.{GROUP} resource is not served ({}): install Porch's FunctionConfig CRD",
            api.message
        )),
        _ => None,
    }
}

/// Logs once per process that goExecutor entries are not the runner's.
fn note_go_executor(name: &str) {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        tracing::debug!(
            object = name,
            "FunctionConfig goExecutor entries configure Porch's builtin runtime in porch-server; the function runner ignores them"
        );
    }
}

/// The watch task: applies events to the store, publishes it, then brings
/// finalizers and statuses up to date.
async fn run(
    api: Api<DynamicObject>,
    store_tx: watch::Sender<Arc<FunctionConfigStore>>,
    sync_tx: watch::Sender<Sync>,
) {
    let mut stream = Box::pin(watcher(api.clone(), watcher::Config::default()).default_backoff());
    let mut objects: BTreeMap<String, DynamicObject> = BTreeMap::new();
    let mut listing: Option<Vec<DynamicObject>> = None;
    let mut warned: HashSet<(String, i64)> = HashSet::new();
    let mut writes = Writes::default();
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(watcher::Event::Init) => {
                listing = Some(Vec::new());
                continue;
            }
            Ok(watcher::Event::InitApply(o)) => {
                listing.get_or_insert_with(Vec::new).push(o);
                continue;
            }
            Err(e) => {
                let synced = matches!(*sync_tx.borrow(), Sync::Done);
                match permanent(&e) {
                    Some(m) if !synced => {
                        sync_tx.send_replace(Sync::Failed(m, Arc::new(e)));
                    }
                    _ if !synced => {
                        sync_tx.send_replace(Sync::Pending(Some(Arc::new(e))));
                    }
                    _ => tracing::warn!("FunctionConfig watch error (retrying): {e}"),
                }
                continue;
            }
            Ok(e) => e,
        };
        let mut store = (**store_tx.borrow()).clone();
        match event {
            watcher::Event::InitDone => {
                objects = listing
                    .take()
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|o| o.metadata.name.clone().map(|n| (n, o)))
                    .collect();
                store.replace_all(objects.values().filter(|o| !deleting(o)).map(to_object));
            }
            watcher::Event::Apply(o) => {
                let Some(name) = o.metadata.name.clone() else {
                    continue;
                };
                if deleting(&o) {
                    store.remove(&name);
                } else {
                    store.apply(to_object(&o));
                }
                objects.insert(name, o);
            }
            watcher::Event::Delete(o) => {
                let Some(name) = o.metadata.name.clone() else {
                    continue;
                };
                objects.remove(&name);
                store.remove(&name);
            }
            watcher::Event::Init | watcher::Event::InitApply(_) => continue,
        }
        for o in objects.values() {
            let Some(name) = o.metadata.name.as_deref() else {
                continue;
            };
            if o.data
                .get("spec")
                .is_some_and(|s| s.get("goExecutor").is_some())
            {
                note_go_executor(name);
            }
            let generation = o.metadata.generation.unwrap_or_default();
            if let Some(Err(e)) = store.outcome(name)
                && warned.insert((name.to_string(), generation))
            {
                tracing::warn!(object = name, generation, "FunctionConfig not applied: {e}");
            }
        }
        if store != **store_tx.borrow() {
            tracing::info!(objects = store.len(), "FunctionConfigs applied");
            warn_missing_binaries(&store);
            store_tx.send_replace(Arc::new(store));
        }
        sync_tx.send_if_modified(|s| {
            let changed = !matches!(s, Sync::Done);
            *s = Sync::Done;
            changed
        });
        let store = store_tx.borrow().clone();
        writes.forget_all_but(&objects);
        for o in objects.values() {
            writes.write_back(&api, o, &store).await;
        }
    }
}

/// Warns once per binary path that applied objects name a binary the
/// runner cannot run (calls for it fall through to the pod runtime).
fn warn_missing_binaries(store: &FunctionConfigStore) {
    static WARNED: std::sync::Mutex<Option<HashSet<std::path::PathBuf>>> =
        std::sync::Mutex::new(None);
    let mut warned = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    let warned = warned.get_or_insert_with(HashSet::new);
    for path in store.binaries() {
        if !Path::new(&path).is_file() && warned.insert(path.clone()) {
            tracing::warn!(
                binary = %path.display(),
                "a FunctionConfig names a binary that does not exist; its images go to the pod runtime"
            );
        }
    }
}

/// The writes already made, so that an object whose own update has not
/// come back through the watch yet is not written again.
#[derive(Default)]
struct Writes {
    /// Object → resourceVersion a finalizer patch was sent for.
    finalizer: std::collections::HashMap<String, Option<String>>,
    /// Object → (generation, error) last written to its status.
    status: std::collections::HashMap<String, (i64, Option<String>)>,
}

impl Writes {
    /// Drops what is remembered of objects that are gone.
    fn forget_all_but(&mut self, objects: &BTreeMap<String, DynamicObject>) {
        self.finalizer.retain(|n, _| objects.contains_key(n));
        self.status.retain(|n, _| objects.contains_key(n));
    }

    /// Brings `o`'s finalizer and status in line with `store`: only the
    /// writes that change something and have not been made already.
    async fn write_back(
        &mut self,
        api: &Api<DynamicObject>,
        o: &DynamicObject,
        store: &FunctionConfigStore,
    ) {
        let Some(name) = o.metadata.name.as_deref() else {
            return;
        };
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        let rv = o.metadata.resource_version.clone();
        let finalizers = o.metadata.finalizers.clone().unwrap_or_default();
        let wants_finalizer = !deleting(o);
        if has_finalizer(o) != wants_finalizer {
            // One patch per object version: it either lands (and comes back
            // as a new version) or conflicts with a newer one.
            if self.finalizer.get(name) == Some(&rv) {
                return;
            }
            self.finalizer.insert(name.to_string(), rv.clone());
            let list: Vec<String> = if wants_finalizer {
                finalizers
                    .iter()
                    .cloned()
                    .chain(std::iter::once(RUNNER_FINALIZER.to_string()))
                    .collect()
            } else {
                finalizers
                    .iter()
                    .filter(|f| *f != RUNNER_FINALIZER)
                    .cloned()
                    .collect()
            };
            let patch =
                serde_json::json!({"metadata": {"finalizers": list, "resourceVersion": rv}});
            let what = if wants_finalizer {
                "add the finalizer to"
            } else {
                "remove the finalizer from"
            };
            report(
                name,
                what,
                api.patch(name, &params, &Patch::Merge(&patch)).await,
            );
            return;
        }
        if !wants_finalizer {
            return;
        }
        let Some(outcome) = store.outcome(name) else {
            return;
        };
        let generation = o.metadata.generation.unwrap_or_default();
        let status = o.data.get("status");
        let observed = status
            .and_then(|s| s.get("functionRunnerObservedGeneration"))
            .and_then(serde_json::Value::as_i64);
        let error = status
            .and_then(|s| s.get("error"))
            .and_then(serde_json::Value::as_str)
            .filter(|e| !e.is_empty());
        let wanted = outcome.err();
        if observed == Some(generation) && error == wanted.as_deref() {
            self.status.remove(name);
            return;
        }
        let key = (generation, wanted.clone());
        if self.status.get(name) == Some(&key) {
            return;
        }
        let patch = serde_json::json!({"status": {
            "functionRunnerObservedGeneration": generation,
            "error": wanted,
        }});
        let result = api.patch_status(name, &params, &Patch::Merge(&patch)).await;
        if result.is_ok() {
            self.status.insert(name.to_string(), key);
        }
        report(name, "write the status of", result);
    }
}

/// Logs a failed write; conflicts and vanished objects are expected (the
/// next watch event brings the new state).
fn report(name: &str, what: &str, result: Result<DynamicObject, kube::Error>) {
    match result {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {
            tracing::debug!(
                object = name,
                "cannot {what} FunctionConfig now ({}); retried on its next change",
                s.message
            );
        }
        Err(e) => tracing::warn!(object = name, "cannot {what} FunctionConfig: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_decode_for_the_store() {
        let o: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "config.porch.kpt.dev/v1alpha1",
            "kind": "FunctionConfig",
            "metadata": {"name": "f", "generation": 3, "creationTimestamp": "2026-04-29T10:00:00Z",
                "finalizers": ["other", RUNNER_FINALIZER]},
            "spec": {"image": "f", "binaryExecutor": {"tags": ["v1"], "path": "f"}},
        }))
        .unwrap();
        let obj = to_object(&o);
        assert_eq!((obj.name.as_str(), obj.generation), ("f", 3));
        assert_eq!(obj.created, "2026-04-29T10:00:00Z");
        assert!(obj.spec.is_ok());
        assert!(has_finalizer(&o) && !deleting(&o));
        let bad: DynamicObject = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "g"}, "spec": {"image": 7},
        }))
        .unwrap();
        assert!(
            to_object(&bad)
                .spec
                .unwrap_err()
                .starts_with("spec does not decode")
        );
    }
}
