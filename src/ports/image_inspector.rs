//! The `ImageInspector` port: what a function image runs and which digest
//! it is, read from its registry.
//!
//! The pod evaluator needs both before it creates a function pod: the
//! entrypoint becomes the wrapper server's command, the digest names the
//! pod and pins its image (Porch `getImageMetadata`, spec §6). The OCI
//! adapter ([`crate::adapters::oci::OciImageInspector`]) implements it
//! against real registries, with caching, credentials and custom CAs.

use std::time::Duration;

use async_trait::async_trait;

/// What a function image declares, for the platform the runner selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageMetadata {
    /// The image as resolved: default prefix applied to short names and
    /// Docker-normalised, e.g. `ghcr.io/kptdev/krm-functions-catalog/set-labels:v0.2.2`.
    pub image: String,
    /// The registry host contacted, e.g. `ghcr.io`, `index.docker.io`.
    pub registry: String,
    /// The manifest digest the reference resolves to (`sha256:<64 hex>`):
    /// for a multi-arch image the index digest, so that a pod pinned to it
    /// still runs on nodes of any architecture. Pin pods to
    /// [`ImageMetadata::pinned_reference`] (Porch runs the tag, spec §10 item 19).
    pub digest: String,
    /// The digest of the platform manifest the entrypoint was read from;
    /// equal to `digest` for a single-platform image.
    pub platform_digest: String,
    /// The full argv a container runtime runs: the config's `Entrypoint`
    /// followed by its `Cmd`, or `Cmd` alone. Never empty.
    pub entrypoint: Vec<String>,
}

impl ImageMetadata {
    /// `registry/repository@digest` for the image: the reference a pod is
    /// pinned to, so that a moved tag does not change running pods.
    pub fn pinned_reference(&self) -> String {
        let name = self.image.split('@').next().unwrap_or(&self.image);
        let last_slash = name.rfind('/').map_or(0, |i| i + 1);
        let name = match name[last_slash..].rfind(':') {
            Some(i) => &name[..last_slash + i],
            None => name,
        };
        format!("{name}@{}", self.digest)
    }

    /// The digest's hex without the algorithm, e.g. for pod names (Porch
    /// uses the first 8 characters).
    pub fn digest_hex(&self) -> &str {
        self.digest
            .split_once(':')
            .map_or(self.digest.as_str(), |(_, h)| h)
    }
}

/// Why image metadata could not be read. Every message names the image and
/// the registry and says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageInspectError {
    /// The image string is not a valid reference.
    #[error("invalid image reference {image:?}: {reason}")]
    InvalidReference {
        /// The image as given.
        image: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The registry has no such repository, tag or digest (manifest
    /// unknown / name unknown / HTTP 404). Not retried.
    #[error(
        "image {image} not found in registry {registry}: {detail}; check the image name and tag"
    )]
    NotFound {
        /// The resolved image.
        image: String,
        /// The registry host.
        registry: String,
        /// The registry's answer.
        detail: String,
    },
    /// The registry refused the credentials used (HTTP 401/403, or the
    /// token exchange failed). Not retried.
    #[error(
        "registry {registry} refused access to image {image} with {credential}: {detail}; {hint}"
    )]
    Unauthorized {
        /// The resolved image.
        image: String,
        /// The registry host.
        registry: String,
        /// Which credential was sent and where it came from (never the secret).
        credential: String,
        /// The registry's answer.
        detail: String,
        /// What to do about it.
        hint: String,
    },
    /// The TLS handshake or certificate verification failed on every
    /// transport that was tried.
    #[error(
        "TLS connection to registry {registry} for image {image} failed; tried: {tried}; {hint}"
    )]
    Tls {
        /// The resolved image.
        image: String,
        /// The registry host.
        registry: String,
        /// Each transport tried and how it failed, `; `-separated.
        tried: String,
        /// What to do about it (names `--enable-private-registries-tls` and
        /// `--tls-secret-path`).
        hint: String,
    },
    /// The fetch did not finish within the fetch timeout. Transient.
    #[error(
        "fetching metadata of image {image} from registry {registry} timed out after {after:?}; the registry may be slow or unreachable, retry later"
    )]
    Timeout {
        /// The resolved image.
        image: String,
        /// The registry host.
        registry: String,
        /// The timeout that expired.
        after: Duration,
    },
    /// A failure that may pass: HTTP 5xx or 429, connection refused or reset.
    #[error(
        "registry {registry} failed for image {image}: {detail}; this may be temporary, retry later"
    )]
    Transient {
        /// The resolved image.
        image: String,
        /// The registry host.
        registry: String,
        /// What happened.
        detail: String,
    },
    /// A multi-arch image has no manifest for the runner's platform.
    #[error(
        "image {image} in registry {registry} has no manifest for platform {platform} (it has: {available}); publish one or configure another platform"
    )]
    NoMatchingPlatform {
        /// The resolved image.
        image: String,
        /// The registry host.
        registry: String,
        /// The platform wanted, e.g. `linux/amd64`.
        platform: String,
        /// The platforms the index lists.
        available: String,
    },
    /// The image exists but cannot be used as a function: unsupported
    /// manifest, unreadable config, or neither Entrypoint nor Cmd.
    #[error("image {image} in registry {registry} cannot be used as a function: {detail}")]
    InvalidImage {
        /// The resolved image.
        image: String,
        /// The registry host.
        registry: String,
        /// What is wrong.
        detail: String,
    },
    /// The credentials could not be read: an unreadable or malformed
    /// Docker config or pull-secret file, or a failing credential helper.
    #[error(
        "cannot read credentials for registry {registry} (image {image}) from {source_name}: {detail}"
    )]
    Credentials {
        /// The resolved image.
        image: String,
        /// The registry host.
        registry: String,
        /// The file or helper, e.g. the `--registry-auth-secret-path` file.
        source_name: String,
        /// What is wrong.
        detail: String,
    },
    /// Anything else the registry client reported.
    #[error("reading image {image} from registry {registry} failed: {detail}")]
    Other {
        /// The resolved image.
        image: String,
        /// The registry host.
        registry: String,
        /// What happened.
        detail: String,
    },
}

impl ImageInspectError {
    /// True for failures worth retrying later ([`ImageInspectError::Timeout`],
    /// [`ImageInspectError::Transient`]); not-found, unauthorized, TLS and
    /// configuration errors fail fast.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ImageInspectError::Timeout { .. } | ImageInspectError::Transient { .. }
        )
    }
}

/// Reads function images' metadata from their registries.
///
/// Contract: `image` is what a caller sends (a short catalog name such as
/// `set-labels:v0.2.2`, or a full reference with tag or digest); the
/// implementation applies the default image prefix and Docker's
/// normalisation, selects the runner's platform from multi-arch indexes,
/// caches results (digest → metadata for the process lifetime, tag → digest
/// for a TTL), lets concurrent misses for one image share one fetch, and
/// bounds every fetch by a timeout.
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait ImageInspector: Send + Sync {
    /// The digest and entrypoint of `image`.
    ///
    /// Errors: see [`ImageInspectError`]; only
    /// [`is_transient`](ImageInspectError::is_transient) ones are worth a retry.
    async fn inspect(&self, image: &str) -> Result<ImageMetadata, ImageInspectError>;

    /// The tags of `repository` (registry host and path, no tag or digest),
    /// as [`TagLister::list_tags`](super::TagLister::list_tags) lists them,
    /// with the same credentials as [`inspect`](Self::inspect): the pod
    /// runtime resolves a step's tag constraint (`EvaluateFunctionRequest.Tag`)
    /// against it.
    ///
    /// Errors: a message naming the repository and what went wrong; an
    /// inspector that cannot list tags says so (the default).
    async fn repository_tags(&self, repository: &str) -> Result<Vec<String>, String> {
        Err(format!(
            "cannot list the tags of {repository}: this image inspector does not list tags"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(image: &str) -> ImageMetadata {
        ImageMetadata {
            image: image.into(),
            registry: "r".into(),
            digest: "sha256:abcdef0123".into(),
            platform_digest: "sha256:abcdef0123".into(),
            entrypoint: vec!["/fn".into()],
        }
    }

    #[test]
    fn pinned_reference_replaces_the_tag() {
        assert_eq!(
            meta("ghcr.io/a/b:v1").pinned_reference(),
            "ghcr.io/a/b@sha256:abcdef0123"
        );
        assert_eq!(
            meta("localhost:5000/a/b:v1").pinned_reference(),
            "localhost:5000/a/b@sha256:abcdef0123"
        );
        assert_eq!(
            meta("localhost:5000/b").pinned_reference(),
            "localhost:5000/b@sha256:abcdef0123"
        );
        assert_eq!(
            meta("ghcr.io/a/b:v1@sha256:0000").pinned_reference(),
            "ghcr.io/a/b@sha256:abcdef0123"
        );
        assert_eq!(meta("x/y:z").digest_hex(), "abcdef0123");
    }

    #[test]
    fn only_timeouts_and_transient_errors_are_transient() {
        let t = ImageInspectError::Timeout {
            image: "i".into(),
            registry: "r".into(),
            after: Duration::from_secs(1),
        };
        assert!(t.is_transient());
        let n = ImageInspectError::NotFound {
            image: "i".into(),
            registry: "r".into(),
            detail: "manifest unknown".into(),
        };
        assert!(!n.is_transient());
        assert!(n.to_string().contains("image i not found in registry r"));
    }
}
