//! Image references of pipeline steps: kpt's short-name prefix, literal
//! tags, and semver tag constraints resolved against a registry's tag list
//! (`krm-functions.md` §3.10).

#[cfg(doc)]
use super::Renderer;
use crate::domain::image::{image_repository, split_reference, with_prefix};
use crate::domain::version_constraint::{Constraint, Version};
#[cfg(doc)]
use crate::ports::TagLister;

/// The image name of kpt's builtin package-context generator (never prefixed or tagged).
pub const GEN_PKG_CONTEXT_IMAGE: &str = "builtins/gen-pkg-context";

/// Applies kpt's image resolution (§3.10) to a step's `image` and a literal
/// `tag`: short names get `prefix`, the `tag` replaces the image's tag or
/// digest, and an image with neither gets `:latest`;
/// [`GEN_PKG_CONTEXT_IMAGE`] is kept as is.
///
/// Errors: `tag` is a semver constraint (`~0.2`, `>=0.4, <1`…): resolve it
/// first with [`pick_tag`] over the registry's tags (the [`Renderer`] does,
/// given a [`TagLister`]).
pub fn resolve_function_image(image: &str, tag: &str, prefix: &str) -> Result<String, String> {
    if image == GEN_PKG_CONTEXT_IMAGE {
        return Ok(image.to_string());
    }
    let mut out = with_prefix(image, prefix);
    if !tag.is_empty() {
        if is_tag_constraint(tag) {
            return Err(format!(
                "tag {tag:?} of image {image:?} is a version constraint; resolving it needs the registry's tag list (a TagLister), which this render was not given: write a literal tag"
            ));
        }
        out = format!("{}:{tag}", image_repository(image, prefix));
    }
    if let (_, None, None) = split_reference(&out) {
        out.push_str(":latest");
    }
    Ok(out)
}

/// True when a step's `tag` is a semver constraint (operators, ranges,
/// `x` wildcards) rather than a literal tag, by kpt's rule (§3.10).
pub fn is_tag_constraint(tag: &str) -> bool {
    tag.chars().any(|c| "<>=~^*,| ".contains(c))
        || tag.split('.').any(|p| p.eq_ignore_ascii_case("x"))
}

/// Picks the highest of `tags` (a registry's tag list) that satisfies the
/// semver `constraint`, as kpt resolves a step's `tag` (§3.10): `sha256-*`
/// and `*-git-*` tags are ignored; tags and the constraint are read by
/// Masterminds semver v3's grammar, kpt's library
/// ([`version_constraint`](crate::domain::version_constraint): a leading
/// `v` and missing minor/patch numbers, `~0.4`, `^1.2`, `>=0.4, <1`,
/// `>=0.4 <1`, `1.2 - 1.4`, `!=`, `1.x`, `a || b`, its prerelease rule; a
/// version without an operator is an exact match, `=`).
/// Returns the tag as the registry spells it (`v0.4.5`).
///
/// Errors: a constraint that does not parse, or no tag satisfies it (kpt's
/// "no tag could be found matching the version constraint").
pub fn pick_tag(constraint: &str, tags: &[String]) -> Result<String, String> {
    let constraint = Constraint::parse(constraint)
        .map_err(|e| format!("tag {constraint:?} is not a valid version constraint: {e}"))?;
    tags.iter()
        .filter(|t| !t.starts_with("sha256-") && !t.contains("-git-"))
        .filter_map(|t| Version::parse(t).ok().map(|v| (v, t)))
        .filter(|(v, _)| constraint.matches(v))
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, t)| t.clone())
        .ok_or_else(|| {
            format!(
                "no tag could be found matching the version constraint {:?} (among {} tags)",
                constraint.text(),
                tags.len()
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::image::DEFAULT_IMAGE_PREFIX;

    #[test]
    fn image_resolution() {
        let p = DEFAULT_IMAGE_PREFIX;
        assert_eq!(
            resolve_function_image("set-labels", "", p).unwrap(),
            "ghcr.io/kptdev/krm-functions-catalog/set-labels:latest"
        );
        assert_eq!(
            resolve_function_image("ghcr.io/x/set-namespace", "v0.4.5", p).unwrap(),
            "ghcr.io/x/set-namespace:v0.4.5"
        );
        assert_eq!(
            resolve_function_image("localhost:5000/x:v1@sha256:abc", "v2", p).unwrap(),
            "localhost:5000/x:v2"
        );
        assert_eq!(resolve_function_image("x", "", "").unwrap(), "x:latest");
        assert_eq!(
            resolve_function_image(GEN_PKG_CONTEXT_IMAGE, "", p).unwrap(),
            GEN_PKG_CONTEXT_IMAGE
        );
        assert!(resolve_function_image("x", "~0.2", p).is_err());
        assert!(resolve_function_image("x", "0.4.1 - 0.4.3", p).is_err());
    }
}
