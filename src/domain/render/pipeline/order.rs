//! Traversal order: the package tree flattened into nodes, depth-first
//! post-order (kpt's default) or breadth-first (`kpt.dev/bfs-rendering`),
//! and the hand-back of objects to their packages.

use foldhash::HashMap;

use serde_json::Value;

use super::{Ctx, Failure, Node, Renderer};
use crate::domain::render::annotations::{self as ann, clean_path, join_path};
use crate::domain::render::error::RenderErrorKind;
use crate::domain::render::kptfile::KPTFILE_NAME;
use crate::domain::render::package::Package;

impl Renderer<'_> {
    /// Adds `pkg` and its subpackages to `nodes` (depth-first pre-order),
    /// moving their objects in; returns `pkg`'s node.
    pub(super) fn flatten(&self, mut pkg: Package, path: String, nodes: &mut Vec<Node>) -> usize {
        let package_path = if path.is_empty() {
            self.options.package_root.clone()
        } else {
            format!("{}/{path}", self.options.package_root.trim_end_matches('/'))
        };
        let mut pipeline = pkg.kptfile.pipeline();
        // `configMap` values as the Kptfile writes them, when its text is known.
        if let Some(doc) = self
            .sources
            .as_deref()
            .and_then(|s| s.get(&join_path(&[&path, KPTFILE_NAME]), 0))
        {
            pipeline.take_config_map_texts(doc);
        }
        let invalid = pkg.kptfile.validate(|p| pkg.file_objects(p)).err();
        let own_files = pkg
            .resources
            .iter()
            .filter_map(ann::path)
            .map(|p| clean_path(&p))
            .collect();
        let config_files = pipeline
            .mutators
            .iter()
            .chain(&pipeline.validators)
            .filter(|f| !f.config_path.is_empty())
            .filter_map(|f| {
                let objects = pkg.file_objects(&f.config_path)?;
                let mut v = (*objects.first()?).clone();
                ann::remove_all(
                    &mut v,
                    &[
                        ann::PATH,
                        ann::LEGACY_PATH,
                        ann::INDEX,
                        ann::LEGACY_INDEX,
                        ann::SEQ_INDENT,
                        ann::PACKAGE_PATH,
                    ],
                );
                Some((clean_path(&f.config_path), v))
            })
            .collect();
        // Checks and configs read, the objects move into the node.
        let mut own = std::mem::take(&mut pkg.resources);
        for r in &mut own {
            ann::set(r, ann::PACKAGE_PATH, package_path.clone());
        }
        let idx = nodes.len();
        nodes.push(Node {
            path: path.clone(),
            package_path,
            name: std::mem::take(&mut pkg.kptfile.metadata.name),
            pipeline,
            invalid,
            own_files,
            config_files,
            own,
            children: Vec::new(),
            output: None,
        });
        let mut subs = std::mem::take(&mut pkg.subpackages);
        subs.sort_by(|a, b| a.path.cmp(&b.path));
        for sub in subs {
            let child_path = if path.is_empty() || sub.path.starts_with(&format!("{path}/")) {
                sub.path.clone()
            } else {
                format!("{path}/{}", sub.path)
            };
            let child = self.flatten(sub, child_path, nodes);
            nodes[idx].children.push(child);
        }
        idx
    }

    pub(super) async fn render_dfs(
        &self,
        ctx: &mut Ctx,
        nodes: &mut [Node],
    ) -> (Result<Vec<Value>, (usize, Failure)>, usize) {
        enum Ev {
            Enter(usize),
            Exit(usize),
        }
        fn walk(i: usize, nodes: &[Node], out: &mut Vec<Ev>) {
            out.push(Ev::Enter(i));
            for &c in &nodes[i].children {
                walk(c, nodes, out);
            }
            out.push(Ev::Exit(i));
        }
        let mut events = Vec::new();
        walk(0, nodes, &mut events);
        let mut packages = 0;
        for ev in events {
            match ev {
                Ev::Enter(i) => {
                    packages += 1;
                    if let Some(e) = nodes[i].invalid.clone() {
                        let partial = std::mem::take(&mut nodes[i].own);
                        return (
                            Err((
                                i,
                                Failure {
                                    kind: RenderErrorKind::InvalidKptfile(e),
                                    partial,
                                },
                            )),
                            packages,
                        );
                    }
                }
                Ev::Exit(i) => {
                    // kpt's order: the subpackages' outputs (sorted by
                    // path), then the package's own objects.
                    let mut input = Vec::new();
                    for c in nodes[i].children.clone() {
                        input.extend(nodes[c].output.take().unwrap_or_default());
                    }
                    input.append(&mut nodes[i].own);
                    match self.run_pipeline(ctx, &nodes[i], input).await {
                        Ok(out) => nodes[i].output = Some(out),
                        Err(f) => return (Err((i, f)), packages),
                    }
                }
            }
        }
        (Ok(nodes[0].output.take().unwrap_or_default()), packages)
    }

    pub(super) async fn render_bfs(
        &self,
        ctx: &mut Ctx,
        nodes: &mut [Node],
    ) -> (Result<Vec<Value>, (usize, Failure)>, usize) {
        let order = bfs_order(nodes);
        for &i in &order {
            nodes[i].output = Some(std::mem::take(&mut nodes[i].own));
        }
        for &i in &order {
            if let Some(e) = nodes[i].invalid.clone() {
                return (
                    Err((
                        i,
                        Failure {
                            kind: RenderErrorKind::InvalidKptfile(e),
                            partial: nodes[i].output.take().unwrap_or_default(),
                        },
                    )),
                    order.len(),
                );
            }
        }
        for &i in &order {
            let mut input = nodes[i].output.take().unwrap_or_default();
            for d in descendants(nodes, i) {
                input.extend(nodes[d].output.take().unwrap_or_default());
            }
            match self.run_pipeline(ctx, &nodes[i], input).await {
                Ok(out) => distribute(nodes, i, out),
                Err(f) => return (Err((i, f)), order.len()),
            }
        }
        let all = order
            .iter()
            .flat_map(|&i| nodes[i].output.take().unwrap_or_default())
            .collect();
        (Ok(all), order.len())
    }
}

pub(super) fn bfs_order(nodes: &[Node]) -> Vec<usize> {
    let mut order = vec![0];
    let mut i = 0;
    while i < order.len() {
        order.extend(nodes[order[i]].children.iter().copied());
        i += 1;
    }
    order
}

/// Descendants of `i` in pre-order (children in sorted order, each followed by its own descendants).
fn descendants(nodes: &[Node], i: usize) -> Vec<usize> {
    let mut out = Vec::new();
    for &c in &nodes[i].children {
        out.push(c);
        out.extend(descendants(nodes, c));
    }
    out
}

/// Breadth-first hand-back: objects go to the package named by their
/// package-path among `i` and its descendants; others stay with `i`.
pub(super) fn distribute(nodes: &mut [Node], i: usize, items: Vec<Value>) {
    let scope: Vec<usize> = std::iter::once(i).chain(descendants(nodes, i)).collect();
    let by_path: HashMap<String, usize> = scope
        .iter()
        .map(|&n| (nodes[n].package_path.clone(), n))
        .collect();
    let mut buckets: HashMap<usize, Vec<Value>> = scope.iter().map(|&n| (n, Vec::new())).collect();
    for item in items {
        let owner = ann::get(&item, ann::PACKAGE_PATH)
            .and_then(|p| by_path.get(&p).copied())
            .unwrap_or(i);
        buckets.entry(owner).or_default().push(item);
    }
    for (n, items) in buckets {
        nodes[n].output = Some(items);
    }
}

/// Depth-first partial result after a failure in `failed`: the failing
/// package's partial objects, finished subtrees' outputs, and the original
/// objects of packages that did not run.
pub(super) fn collect_partial(
    nodes: &mut [Node],
    i: usize,
    failed: usize,
    partial: &mut Option<Vec<Value>>,
) -> Vec<Value> {
    if i == failed
        && let Some(p) = partial.take()
    {
        return p;
    }
    if let Some(out) = nodes[i].output.take() {
        return out;
    }
    let mut items = Vec::new();
    for c in nodes[i].children.clone() {
        items.extend(collect_partial(nodes, c, failed, partial));
    }
    items.append(&mut nodes[i].own);
    items
}
