//! Function image references: the one place image strings are taken apart.
//!
//! Three rules meet here, all on [`split_reference`]'s reading of an image
//! as written (`[domain/]path[:tag][@digest]`):
//! - kpt's short-name rule (what Porch sends is already resolved by it): an
//!   image with no `/` gets the image prefix ([`with_prefix`]), and
//!   `:latest` is added when there is neither a tag nor a digest
//!   ([`resolve_image`]).
//! - kpt's image-name grammar for a Kptfile step's `image`
//!   ([`valid_image_name`]).
//! - Docker's normalisation for parsing ([`ImageRef::parse`]): the first path
//!   segment is a registry only if it contains `.` or `:` or is `localhost`;
//!   otherwise the registry is `docker.io` (`index.docker.io` on the wire) and
//!   one-segment names live under `library/`.
//!
//! oci-client's own reference type is used only inside the OCI adapter.

use std::fmt;

/// The catalog prefix kpt and Porch put in front of short function names.
pub const DEFAULT_IMAGE_PREFIX: &str = "ghcr.io/kptdev/krm-functions-catalog/";
/// Docker Hub's canonical registry name.
pub const DOCKER_HUB: &str = "docker.io";
/// Docker Hub's registry host on the wire.
pub const DOCKER_HUB_HOST: &str = "index.docker.io";

/// A parsed, normalised image reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ImageRef {
    /// Registry host (with port if any), e.g. `ghcr.io`, `docker.io`, `localhost:5000`.
    pub registry: String,
    /// Repository path, e.g. `kptdev/krm-functions-catalog/set-namespace`, `library/alpine`.
    pub repository: String,
    /// Tag, if the reference names one (`latest` is filled in only when there is no digest).
    pub tag: Option<String>,
    /// Digest such as `sha256:<64 hex>`, if the reference pins one.
    pub digest: Option<String>,
}

/// Why an image string is not a valid reference.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid image reference {image:?}: {reason}")]
pub struct ImageError {
    /// The image string as given.
    pub image: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Splits `image` as written into its name (`[domain/]path`), tag and
/// digest by Docker's grammar: the digest follows the first `@`, the tag the
/// last `:` after the last `/`. Nothing is normalised or checked.
pub fn split_reference(image: &str) -> (&str, Option<&str>, Option<&str>) {
    let (rest, digest) = match image.split_once('@') {
        Some((r, d)) => (r, Some(d)),
        None => (image, None),
    };
    let (name, tag) = match rest.rfind(':') {
        Some(i) if !rest[i..].contains('/') => (&rest[..i], Some(&rest[i + 1..])),
        _ => (rest, None),
    };
    (name, tag, digest)
}

/// kpt's short-name rule: `image` without `/` gets `prefix`, with exactly
/// one `/` between them whether or not `prefix` ends with one. An empty
/// `prefix` (prefixing disabled) leaves the image as is.
pub fn with_prefix(image: &str, prefix: &str) -> String {
    let prefix = prefix.trim_end_matches('/');
    if image.contains('/') || prefix.is_empty() {
        image.to_string()
    } else {
        format!("{prefix}/{image}")
    }
}

/// Applies kpt's short-name rule ([`with_prefix`]), and gives an image with
/// neither tag nor digest `:latest`. Empty input is returned unchanged.
pub fn resolve_image(image: &str, prefix: &str) -> String {
    if image.is_empty() {
        return String::new();
    }
    let mut out = with_prefix(image, prefix);
    if let (_, None, None) = split_reference(&out) {
        out.push_str(":latest");
    }
    out
}

/// The repository of `image` after the short-name rule, without tag or
/// digest (`set-namespace:v0.4` with the catalog prefix →
/// `ghcr.io/kptdev/krm-functions-catalog/set-namespace`).
pub fn image_repository(image: &str, prefix: &str) -> String {
    let out = with_prefix(image, prefix);
    split_reference(&out).0.to_string()
}

/// kpt's image-name grammar for a Kptfile step's `image` (Docker reference:
/// optional registry domain with port, lower-case path components joined by
/// `/`, then `:tag` or `@sha256:<64 alphanumerics>`; kpt's pattern also
/// accepts a tag-shaped version after `@`, and not both a tag and a digest).
pub fn valid_image_name(image: &str) -> bool {
    let (name, tag, digest) = split_reference(image);
    let version_ok = match (tag, digest) {
        (Some(_), Some(_)) => false,
        (Some(t), None) => valid_tag(t),
        (None, Some(d)) => {
            d.strip_prefix("sha256:")
                .is_some_and(|h| h.len() == 64 && h.chars().all(|c| c.is_ascii_alphanumeric()))
                || valid_tag(d)
        }
        (None, None) => true,
    };
    if !version_ok {
        return false;
    }
    let mut parts: Vec<&str> = name.split('/').collect();
    if parts.len() > 1 && valid_domain(parts[0]) && !valid_path_component(parts[0]) {
        parts.remove(0);
    } else if parts.len() > 1 && valid_domain(parts[0]) {
        // Ambiguous (e.g. `localhost`): either reading is fine for kpt's regex.
        if !parts.iter().all(|p| valid_path_component(p)) {
            parts.remove(0);
        }
    }
    !parts.is_empty() && parts.iter().all(|p| valid_path_component(p))
}

/// A tag: a letter, digit or `_`, then up to 127 of those, `.` and `-`.
fn valid_tag(t: &str) -> bool {
    let mut chars = t.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphanumeric() || c == '_')
        && t.len() <= 128
        && chars.all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
}

/// A registry domain: dot-separated host labels, optionally `:port`.
fn valid_domain(d: &str) -> bool {
    let (host, port) = match d.split_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (d, None),
    };
    if port.is_some_and(|p| p.is_empty() || !p.chars().all(|c| c.is_ascii_digit())) {
        return false;
    }
    !host.is_empty()
        && host.split('.').all(|c| {
            !c.is_empty()
                && c.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '-')
                && !c.starts_with('-')
                && !c.ends_with('-')
        })
}

/// `[a-z0-9]+` joined by `.`, `_`, `__` or any number of `-`.
fn valid_path_component(c: &str) -> bool {
    let b = c.as_bytes();
    if b.is_empty() || !is_alnum_lower(b[0]) || !is_alnum_lower(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if is_alnum_lower(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !is_alnum_lower(b[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        let ok = sep == "." || sep == "_" || sep == "__" || sep.chars().all(|ch| ch == '-');
        if !ok {
            return false;
        }
    }
    true
}

fn is_alnum_lower(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

impl ImageRef {
    /// Parses `image` with Docker's normalisation and the default tag `latest`.
    ///
    /// Errors: empty input, upper-case or otherwise invalid repository
    /// characters, an invalid tag, or a malformed digest.
    pub fn parse(image: &str) -> Result<Self, ImageError> {
        let err = |reason: &str| ImageError {
            image: image.to_string(),
            reason: reason.to_string(),
        };
        if image.is_empty() {
            return Err(err("the image is empty"));
        }
        if image.chars().any(char::is_whitespace) {
            return Err(err("the image contains whitespace"));
        }
        let (name, tag, digest) = split_reference(image);
        if let Some(d) = digest {
            validate_digest(d).map_err(|r| err(&r))?;
        }
        if let Some(t) = tag
            && !valid_tag(t)
        {
            return Err(err(&format!("invalid tag {t:?}")));
        }
        let (registry, repository) = match name.split_once('/') {
            Some((first, path))
                if first.contains('.') || first.contains(':') || first == "localhost" =>
            {
                (first.to_string(), path.to_string())
            }
            Some(_) => (DOCKER_HUB.to_string(), name.to_string()),
            None => (DOCKER_HUB.to_string(), format!("library/{name}")),
        };
        let repo_ok = !repository.is_empty()
            && repository.split('/').all(|seg| {
                !seg.is_empty()
                    && seg
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
                    && seg
                        .chars()
                        .next()
                        .is_some_and(|c| c.is_ascii_alphanumeric())
            });
        if !repo_ok {
            return Err(err(
                "the repository must be lower-case letters, digits and separators (. _ - /)",
            ));
        }
        let tag = match (tag, digest) {
            (Some(t), _) => Some(t.to_string()),
            (None, None) => Some("latest".to_string()),
            (None, Some(_)) => None,
        };
        Ok(Self {
            registry,
            repository,
            tag,
            digest: digest.map(str::to_string),
        })
    }

    /// The registry host as it is contacted (`index.docker.io` for Docker Hub).
    pub fn registry_host(&self) -> &str {
        if self.registry == DOCKER_HUB {
            DOCKER_HUB_HOST
        } else {
            &self.registry
        }
    }

    /// The function name: the last path segment of the repository.
    pub fn name(&self) -> &str {
        self.repository
            .rsplit('/')
            .next()
            .unwrap_or(&self.repository)
    }

    /// The identifier of the reference: the digest when pinned, else the tag.
    pub fn identifier(&self) -> &str {
        self.digest
            .as_deref()
            .or(self.tag.as_deref())
            .unwrap_or("latest")
    }
}

impl fmt::Display for ImageRef {
    /// The fully qualified form, e.g. `docker.io/library/alpine:latest`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

fn validate_digest(d: &str) -> Result<(), String> {
    let (algo, hex) = d
        .split_once(':')
        .ok_or_else(|| format!("invalid digest {d:?}: expected <algorithm>:<hex>"))?;
    let len = match algo {
        "sha256" => 64,
        "sha384" => 96,
        "sha512" => 128,
        _ => return Err(format!("unsupported digest algorithm {algo:?}")),
    };
    if hex.len() != len
        || !hex
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    {
        return Err(format!(
            "invalid {algo} digest: expected {len} lower-case hex digits"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:f930d9248001fa763799cc81cf2d89bbf83954fc65de0db20ab038a21784f323";

    #[test]
    fn short_names_get_the_catalog_prefix_and_latest() {
        assert_eq!(
            resolve_image("set-namespace", DEFAULT_IMAGE_PREFIX),
            "ghcr.io/kptdev/krm-functions-catalog/set-namespace:latest"
        );
        assert_eq!(
            resolve_image("set-namespace:v0.4.5", "example.com/fns"),
            "example.com/fns/set-namespace:v0.4.5"
        );
        assert_eq!(
            resolve_image("gcr.io/kpt-fn/x", DEFAULT_IMAGE_PREFIX),
            "gcr.io/kpt-fn/x:latest"
        );
        assert_eq!(
            resolve_image("localhost:5000/x", DEFAULT_IMAGE_PREFIX),
            "localhost:5000/x:latest"
        );
        let pinned = format!("ghcr.io/a/b@{DIGEST}");
        assert_eq!(resolve_image(&pinned, DEFAULT_IMAGE_PREFIX), pinned);
    }

    #[test]
    fn docker_normalisation() {
        let r = ImageRef::parse("alpine").unwrap();
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str()),
            ("docker.io", "library/alpine")
        );
        assert_eq!(r.registry_host(), "index.docker.io");
        assert_eq!(r.tag.as_deref(), Some("latest"));
        assert_eq!(r.to_string(), "docker.io/library/alpine:latest");
        let r = ImageRef::parse("nephio/porch-wrapper-server:v1").unwrap();
        assert_eq!(r.repository, "nephio/porch-wrapper-server");
        let r = ImageRef::parse("localhost:5000/fn/set-labels:v0.2.2").unwrap();
        assert_eq!(r.registry, "localhost:5000");
        assert_eq!(r.name(), "set-labels");
    }

    #[test]
    fn tag_versus_digest() {
        let r = ImageRef::parse(&format!(
            "ghcr.io/kptdev/krm-functions-catalog/set-namespace@{DIGEST}"
        ))
        .unwrap();
        assert_eq!(r.tag, None);
        assert_eq!(r.digest.as_deref(), Some(DIGEST));
        assert_eq!(r.identifier(), DIGEST);
        let r = ImageRef::parse(&format!("ghcr.io/x/y:v1@{DIGEST}")).unwrap();
        assert_eq!(r.tag.as_deref(), Some("v1"));
        assert_eq!(r.identifier(), DIGEST);
    }

    #[test]
    fn invalid_references_are_named() {
        for bad in [
            "",
            "UPPER/case",
            "a b",
            "x:",
            "x@sha256:abc",
            "x@md5:00",
            "ghcr.io//x",
        ] {
            let e = ImageRef::parse(bad).unwrap_err();
            assert_eq!(e.image, bad);
        }
    }

    #[test]
    fn image_grammar() {
        for ok in [
            "set-namespace",
            "set-namespace:v0.4.5",
            "ghcr.io/kptdev/krm-functions-catalog/set-namespace:latest",
            "localhost:5000/fn/x",
            "gcr.io/kpt-fn/set-namespace@sha256:f930d9248001fa763799cc81cf2d89bbf83954fc65de0db20ab038a21784f323",
            "builtins/gen-pkg-context",
            "a__b/c-d.e",
        ] {
            assert!(valid_image_name(ok), "{ok}");
        }
        for bad in ["Bad/Image", "x:", "x::y", "/x", "x/", "a@sha256:123", "-x"] {
            assert!(!valid_image_name(bad), "{bad}");
        }
    }

    #[test]
    fn one_reading_of_an_image_as_written() {
        assert_eq!(
            split_reference("set-namespace"),
            ("set-namespace", None, None)
        );
        assert_eq!(
            split_reference("localhost:5000/x:v1"),
            ("localhost:5000/x", Some("v1"), None)
        );
        assert_eq!(
            split_reference(&format!("ghcr.io/a/b:v1@{DIGEST}")),
            ("ghcr.io/a/b", Some("v1"), Some(DIGEST))
        );
        assert_eq!(with_prefix("x", "example.com/fns/"), "example.com/fns/x");
        assert_eq!(with_prefix("x", ""), "x");
        assert_eq!(resolve_image("x", ""), "x:latest");
        assert_eq!(
            image_repository(&format!("localhost:5000/fns/x:v1@{DIGEST}"), "p"),
            "localhost:5000/fns/x"
        );
    }
}
