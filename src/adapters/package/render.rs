//! Rendering a package directory: read it, run its pipelines, write it back
//! (kpt's `fn render` flow, `krm-functions.md` §3.7).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use super::{PackageDir, PackageIoError, WriteSummary, kptfile_with_status, status_of};
use crate::domain::render::results::rendered_condition;
use crate::domain::render::{
    NoEvents, RenderError, RenderErrorKind, RenderEvents, RenderOptions, RenderOutcome,
    RenderStatus, Renderer,
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

    /// The package back when every step passed, else why the render failed
    /// (kpt's message: the package, the step and the function's results).
    ///
    /// Errors: the render's [`RenderError`].
    pub fn into_result(self) -> Result<Self, Box<RenderError>> {
        match self.outcome.error.clone() {
            None => Ok(self),
            Some(error) => Err(Box::new(error)),
        }
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
        let objects = self
            .resources()
            .map(|items| items.iter().map(Cow::Borrowed).collect());
        self.write_objects(objects)
    }

    /// [`RenderedPackage::write_in_place`] that moves the rendered objects
    /// into the files instead of copying them (the copy drops the reader
    /// annotations, which the moved objects lose in place): afterwards
    /// `outcome.resources` is `None`; the steps, results and error stay.
    /// For a caller that writes once and then only reports (the CLI).
    ///
    /// Errors: as [`RenderedPackage::write_in_place`].
    pub fn write_in_place_moving_objects(&mut self) -> Result<WriteSummary, PackageIoError> {
        let objects = self
            .outcome
            .resources
            .take()
            .map(|items| items.into_iter().map(Cow::Owned).collect());
        self.write_objects(objects)
    }

    /// Writes `objects` (the rendered objects, `None` when nothing is to be
    /// written) as [`RenderedPackage::write_in_place`] says.
    fn write_objects(
        &self,
        objects: Option<Vec<Cow<'_, Value>>>,
    ) -> Result<WriteSummary, PackageIoError> {
        match objects {
            Some(mut objects) => {
                // Only the Kptfile changes: the other objects are written as they are.
                let items = objects.iter().map(Cow::as_ref);
                if let Some((k, updated)) = kptfile_with_status(items, &self.outcome) {
                    objects[k] = Cow::Owned(updated);
                }
                match self
                    .package
                    .write_objects_in_place(objects, self.outcome.texts.as_deref())
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
/// package's comments) and returns the outcome without writing anything —
/// `kpt fn render` up to the write. [`RenderedPackage::write_in_place`] adds
/// kpt's render status to the root Kptfile; the other outputs (`files`,
/// `-o stdout|unwrap|DIR`) leave it out, as kpt's out-of-place modes do.
///
/// [`PackageRender`] adds a progress observer and registry tag lookup.
///
/// Errors: the directory cannot be read as a package (no Kptfile, invalid
/// YAML, unreadable Kptfile). Function failures are not errors: they are in
/// [`RenderedPackage::outcome`].
pub async fn render_dir(
    dir: impl AsRef<Path>,
    runtime: &dyn FunctionRuntime,
    options: RenderOptions,
) -> Result<RenderedPackage, PackageIoError> {
    PackageRender::new(runtime)
        .options(options)
        .render(dir.as_ref())
        .await
}

/// A package render with everything optional set by name: the runtime, the
/// [`RenderOptions`], an observer of the steps ([`RenderEvents`], default
/// none) and a [`TagLister`] that resolves steps whose `tag` is a semver
/// constraint (`~0.4`) — kpt lists the image's tags in its registry and takes
/// the highest match (`krm-functions.md` §3.10); the OCI adapter's
/// `OciImageInspector` lists them. Without one, such a step fails with
/// kpt's message.
#[must_use]
pub struct PackageRender<'a> {
    runtime: &'a dyn FunctionRuntime,
    options: RenderOptions,
    events: &'a dyn RenderEvents,
    tags: Option<Arc<dyn TagLister>>,
}

impl<'a> PackageRender<'a> {
    /// A render through `runtime` with kpt's default options.
    pub fn new(runtime: &'a dyn FunctionRuntime) -> Self {
        Self {
            runtime,
            options: RenderOptions::default(),
            events: &NoEvents,
            tags: None,
        }
    }

    /// Replaces the options.
    pub fn options(mut self, options: RenderOptions) -> Self {
        self.options = options;
        self
    }

    /// Reports each step to `events` as it starts and ends.
    pub fn events(mut self, events: &'a dyn RenderEvents) -> Self {
        self.events = events;
        self
    }

    /// Resolves semver `tag` constraints through `tags`.
    pub fn tag_lister(mut self, tags: Arc<dyn TagLister>) -> Self {
        self.tags = Some(tags);
        self
    }

    /// Reads the package at `dir` and renders it, writing nothing
    /// (as [`render_dir`]).
    ///
    /// Errors: as [`render_dir`].
    pub async fn render(self, dir: &Path) -> Result<RenderedPackage, PackageIoError> {
        let package = PackageDir::read(dir)?;
        let tree = package.package()?;
        let mut renderer = Renderer::new(self.runtime, self.options)
            .with_events(self.events)
            .with_sources(package.sources());
        if let Some(tags) = self.tags {
            renderer = renderer.with_tag_lister(tags);
        }
        let outcome = renderer.render(tree).await;
        Ok(RenderedPackage { package, outcome })
    }
}
