//! Rendering a package directory: read it, run its pipelines, write it back
//! (kpt's `fn render` flow, `krm-functions.md` §3.7).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use super::{PackageDir, PackageIoError, WriteSummary, record_status, status_of};
use crate::domain::render::results::rendered_condition;
use crate::domain::render::{
    RenderErrorKind, RenderEvents, RenderOptions, RenderOutcome, RenderStatus, Renderer,
};
use crate::ports::{FunctionRuntime, TagLister};

/// A rendered package directory, not yet written.
#[derive(Debug, Clone)]
pub struct RenderedPackage {
    /// The package as read.
    pub package: PackageDir,
    /// What the render did: steps, results, error, and the rendered objects
    /// (root-relative paths; the root Kptfile carries the render status).
    pub outcome: RenderOutcome,
}

impl RenderedPackage {
    /// True when every step passed.
    pub fn is_ok(&self) -> bool {
        self.outcome.is_ok()
    }

    /// Porch's `RenderStatus` (results and error text).
    pub fn render_status(&self) -> RenderStatus {
        self.outcome.render_status()
    }

    /// The rendered objects when there is something to write: all of them
    /// on success, the partial output on a failure when the root Kptfile asks
    /// for `kpt.dev/save-on-render-failure`, else `None`.
    pub fn resources(&self) -> Option<&[Value]> {
        self.outcome.resources.as_deref()
    }

    /// The files the render produces (root-relative path → text), `None`
    /// when nothing is to be written.
    ///
    /// Errors: a rendered object whose path escapes the package.
    pub fn files(&self) -> Result<Option<BTreeMap<String, String>>, PackageIoError> {
        self.resources()
            .map(|items| {
                self.package
                    .render_files(items, self.outcome.texts.as_deref())
            })
            .transpose()
    }

    /// Writes the result in place, as `kpt fn render` does: on success (or
    /// save-on-failure) the rendered files and the root Kptfile's render
    /// status, pruning emptied files — all or nothing; otherwise only the
    /// root Kptfile's render status.
    ///
    /// When the files cannot be written, none is changed, the Kptfile's
    /// status says so (`Rendered: False`, `failed to save resources: …`)
    /// when the Kptfile itself can still be written, and the error is
    /// returned.
    ///
    /// Errors: [`PackageIoError::NotSaved`] (nothing changed), paths
    /// escaping the package.
    pub fn write_in_place(&self) -> Result<WriteSummary, PackageIoError> {
        match self.resources() {
            Some(items) => {
                let mut items = items.to_vec();
                record_status(&mut items, &self.outcome);
                match self
                    .package
                    .write_in_place_with(&items, self.outcome.texts.as_deref())
                {
                    Ok(summary) => Ok(summary),
                    Err(e) => {
                        let mut status = status_of(&self.outcome);
                        status["conditions"] =
                            serde_json::json!([rendered_condition(Some(&e.to_string()))]);
                        let _ = self.package.write_kptfile_status(&status);
                        Err(e)
                    }
                }
            }
            // kpt stops while loading a root package whose pipeline is
            // invalid, before it records any status.
            None if matches!(
                self.outcome.error.as_ref().map(|e| &e.kind),
                Some(RenderErrorKind::InvalidRootKptfile(_))
            ) =>
            {
                Ok(WriteSummary::default())
            }
            None => {
                self.package
                    .write_kptfile_status(&status_of(&self.outcome))?;
                Ok(WriteSummary::default())
            }
        }
    }

    /// The rendered objects as a ResourceList (`-o stdout`), `None` when
    /// nothing is to be written.
    ///
    /// Errors: none in practice.
    pub fn wrapped(&self) -> Result<Option<String>, crate::domain::codec::CodecError> {
        self.resources()
            .map(|items| self.package.wrapped(items, self.outcome.texts.as_deref()))
            .transpose()
    }

    /// The rendered objects as documents (`-o unwrap`), `None` when nothing
    /// is to be written.
    pub fn unwrapped(&self) -> Option<String> {
        self.resources()
            .map(|items| self.package.unwrapped(items, self.outcome.texts.as_deref()))
    }

    /// Writes the rendered package into the new directory `out` (`-o DIR`),
    /// all or nothing.
    ///
    /// Errors: as [`PackageDir::write_to_dir`].
    pub fn write_to_dir(&self, out: &Path) -> Result<WriteSummary, PackageIoError> {
        match self.resources() {
            Some(items) => self
                .package
                .write_to_dir(out, items, self.outcome.texts.as_deref()),
            None => Ok(WriteSummary::default()),
        }
    }
}

/// What writing a render did (for the CLI's summary).
#[derive(Debug)]
pub enum WriteOutcome {
    /// The files were written (or there was nothing to write).
    Written(WriteSummary),
    /// Nothing was written; why.
    NotWritten(PackageIoError),
}

/// Reads the package at `dir`, renders it with `runtime` (functions get the
/// package's comments) and returns the outcome without writing anything.
/// [`RenderedPackage::write_in_place`] adds kpt's render status to the root
/// Kptfile; the other outputs (`files`, `-o stdout|unwrap|DIR`) leave it out,
/// as kpt's out-of-place modes do.
///
/// Errors: the directory cannot be read as a package (no Kptfile, invalid
/// YAML, unreadable Kptfile). Function failures are not errors: they are in
/// [`RenderedPackage::outcome`].
pub async fn render_dir(
    dir: &Path,
    runtime: &dyn FunctionRuntime,
    options: RenderOptions,
    events: &dyn RenderEvents,
) -> Result<RenderedPackage, PackageIoError> {
    render(dir, runtime, options, events, None).await
}

/// [`render_dir`], resolving steps whose `tag` is a semver constraint
/// (`~0.4`) through `tags` — kpt lists the image's tags in its registry and
/// takes the highest match (`krm-functions.md` §3.10);
/// [`crate::adapters::oci::OciImageInspector`] lists them.
///
/// Errors: as [`render_dir`].
pub async fn render_dir_with_tags(
    dir: &Path,
    runtime: &dyn FunctionRuntime,
    options: RenderOptions,
    events: &dyn RenderEvents,
    tags: Arc<dyn TagLister>,
) -> Result<RenderedPackage, PackageIoError> {
    render(dir, runtime, options, events, Some(tags)).await
}

async fn render(
    dir: &Path,
    runtime: &dyn FunctionRuntime,
    options: RenderOptions,
    events: &dyn RenderEvents,
    tags: Option<Arc<dyn TagLister>>,
) -> Result<RenderedPackage, PackageIoError> {
    let package = PackageDir::read(dir)?;
    let tree = package.package()?;
    let mut renderer = Renderer::new(runtime, options)
        .with_events(events)
        .with_sources(package.sources());
    if let Some(tags) = tags {
        renderer = renderer.with_tag_lister(tags);
    }
    let outcome = renderer.render(tree).await;
    Ok(RenderedPackage { package, outcome })
}
