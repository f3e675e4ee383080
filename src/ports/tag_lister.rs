//! The `TagLister` port: the tags of an image repository.
//!
//! kpt resolves a pipeline step's `tag` semver constraint (`~0.4`,
//! `>=0.4, <1`) by listing the image's tags in its registry and picking the
//! highest that satisfies it (`krm-functions.md` §3.10); the render pipeline
//! asks this port for the list.

use async_trait::async_trait;

/// Lists the tags of image repositories.
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait TagLister: Send + Sync {
    /// The tags of `repository`: registry host and path without tag or
    /// digest, e.g. `ghcr.io/kptdev/krm-functions-catalog/set-namespace`.
    ///
    /// Errors: a message naming the repository and what went wrong
    /// (unreachable registry, refused credentials, unknown repository).
    async fn list_tags(&self, repository: &str) -> Result<Vec<String>, String>;
}
