//! How Porch picks the version of a function for a Kptfile step's `tag`
//! (`EvaluateFunctionRequest.Tag`, field 3), in the function runner's exec
//! runtime and pod runtime. kpt's own rule for `render`, which also drops
//! `sha256-*` and `*-git-*` registry tags, is
//! [`pick_tag`](super::render::pipeline::pick_tag).
//!
//! A tag is read with the grammar of Masterminds semver v3
//! ([`version_constraint`](super::version_constraint)), as Porch reads it:
//! - a tag that parses as a constraint (`~0.4`, `>=0.5`, `~0.4 || ~0.5`, and
//!   a bare version such as `v0.4.5`, which is `=0.4.5`) picks the highest
//!   candidate that parses as a version and satisfies it
//!   ([`best_match`], Porch's `FindBestSemverMatch`);
//! - any other tag (`latest`, `main`, a digest) matches only a candidate
//!   spelled exactly so, the fallback Porch's current `MatchesAnyConstraint`
//!   makes for tags that are not versions (the Porch of the `Tag` change
//!   answered NotFound for them; the book's operators' page on tags says so).
//!
//! Candidates are the configured versions: the tags of `config.yaml` image
//! keys ([`select_tag`]), the tags of a FunctionConfig's executor
//! ([`matches_config_tags`], Porch's `MatchesConfigTags`), or a registry's
//! tag list (the pod runtime).

use super::version_constraint::{Constraint, Version};

/// Why no candidate serves a step's tag; its [`Display`](std::fmt::Display)
/// is the detail of the runtime's NotFound answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TagMiss {
    /// The tag parses as a constraint, and no candidate satisfies it.
    NoMatch {
        /// The step's tag.
        tag: String,
        /// The candidates, as configured or listed.
        candidates: Vec<String>,
    },
    /// The tag is neither a version constraint nor spelled as a candidate.
    NotAConstraint {
        /// The step's tag.
        tag: String,
        /// Why it is not a constraint (the parser's message).
        reason: String,
        /// The candidates, as configured or listed.
        candidates: Vec<String>,
    },
}

/// At most this many candidates are named in a [`TagMiss`] message.
const NAMED_CANDIDATES: usize = 12;

fn name_candidates(candidates: &[String]) -> String {
    if candidates.is_empty() {
        return "none is configured".to_string();
    }
    let mut named: Vec<&str> = candidates
        .iter()
        .take(NAMED_CANDIDATES)
        .map(String::as_str)
        .collect();
    if candidates.len() > NAMED_CANDIDATES {
        named.push("…");
    }
    format!("the versions here are {}", named.join(", "))
}

impl std::fmt::Display for TagMiss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TagMiss::NoMatch { tag, candidates } => write!(
                f,
                "no version satisfies the tag constraint {tag:?} ({}); \
                 widen the step's tag or configure a matching version",
                name_candidates(candidates)
            ),
            TagMiss::NotAConstraint {
                tag,
                reason,
                candidates,
            } => write!(
                f,
                "the tag {tag:?} is not a valid semver constraint ({reason}) and no version \
                 is spelled so ({}); write a version (v0.4.5) or a constraint (~0.4)",
                name_candidates(candidates)
            ),
        }
    }
}

impl std::error::Error for TagMiss {}

/// A step's tag, read once: a constraint, or a literal tag matched by
/// spelling alone.
#[derive(Debug, Clone)]
pub enum TagRequest {
    /// The tag parses as a Masterminds constraint (a bare version too).
    Constraint(Constraint),
    /// The tag is no constraint (`latest`, a digest, …): the parser's
    /// message, and the tag itself.
    Literal {
        /// The tag as given.
        tag: String,
        /// Why it is not a constraint.
        reason: String,
    },
}

impl TagRequest {
    /// Reads `tag` (surrounding spaces are Masterminds' to judge).
    pub fn parse(tag: &str) -> Self {
        match Constraint::parse(tag) {
            Ok(c) => TagRequest::Constraint(c),
            Err(e) => TagRequest::Literal {
                tag: tag.to_string(),
                reason: e.to_string(),
            },
        }
    }

    /// The candidate this request picks among `candidates`: for a
    /// constraint the highest that satisfies it ([`best_match`]), for a
    /// literal the one spelled the same.
    ///
    /// Errors: [`TagMiss`] naming the tag, why and the candidates.
    pub fn select<'a, S: AsRef<str>>(&self, candidates: &'a [S]) -> Result<&'a str, TagMiss> {
        let listed = || candidates.iter().map(|c| c.as_ref().to_string()).collect();
        match self {
            TagRequest::Constraint(c) => best_match(c, candidates.iter().map(AsRef::as_ref))
                .ok_or_else(|| TagMiss::NoMatch {
                    tag: c.text().to_string(),
                    candidates: listed(),
                }),
            TagRequest::Literal { tag, reason } => candidates
                .iter()
                .map(AsRef::as_ref)
                .find(|c| c == tag)
                .ok_or_else(|| TagMiss::NotAConstraint {
                    tag: tag.clone(),
                    reason: reason.clone(),
                    candidates: listed(),
                }),
        }
    }
}

/// Porch's `FindBestSemverMatch`: the candidate with the highest version
/// (Masterminds order: build metadata ignored) among those that parse as a
/// version and satisfy `constraint`, returned as spelled; candidates that
/// are not versions (`latest`, digests) are skipped. Of two candidates with
/// the same version (`v0.4.1`, `0.4.1`) the first listed wins. `None` when
/// none satisfies it.
pub fn best_match<'a>(
    constraint: &Constraint,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let mut best: Option<(Version, &'a str)> = None;
    for c in candidates {
        let Ok(v) = Version::parse(c) else { continue };
        if !constraint.matches(&v) {
            continue;
        }
        if best.as_ref().is_none_or(|(b, _)| v > *b) {
            best = Some((v, c));
        }
    }
    best.map(|(_, c)| c)
}

/// [`TagRequest::select`] on `tag` over `candidates` (the exec runtime's
/// rule for `config.yaml` image keys, Porch's exec evaluator at the `Tag`
/// change).
///
/// Errors: [`TagMiss`].
pub fn select_tag<'a, S: AsRef<str>>(tag: &str, candidates: &'a [S]) -> Result<&'a str, TagMiss> {
    TagRequest::parse(tag).select(candidates)
}

/// Porch's `MatchesConfigTags` for a FunctionConfig executor's `tags`
/// (constraints): true when `tag` — the step's tag, or the image's own —
/// is a version that satisfies one of them, or when it is a constraint and
/// one of them is a version that satisfies it. An empty list matches
/// nothing, `*` in it matches everything; a `tag` that is not a version
/// matches a list entry spelled exactly so (`latest`, a digest); entries
/// that are not constraints are skipped as constraints, as in Porch.
pub fn matches_config_tags<S: AsRef<str>>(tag: &str, config_tags: &[S]) -> bool {
    if config_tags.is_empty() {
        return false;
    }
    if config_tags.iter().any(|t| t.as_ref() == "*") {
        return true;
    }
    match Version::parse(tag) {
        Ok(v) => {
            if config_tags
                .iter()
                .filter_map(|t| Constraint::parse(t.as_ref()).ok())
                .any(|c| c.matches(&v))
            {
                return true;
            }
        }
        Err(_) => {
            if config_tags.iter().any(|t| t.as_ref() == tag) {
                return true;
            }
        }
    }
    match Constraint::parse(tag) {
        Ok(c) => best_match(&c, config_tags.iter().map(AsRef::as_ref)).is_some(),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIGURED: &[&str] = &["v0.4.1", "v0.4.5", "v0.5.2", "latest", "0.3.9"];

    #[test]
    fn a_constraint_picks_the_highest_configured_version_that_satisfies_it() {
        for (tag, want) in [
            ("~0.4", "v0.4.5"),
            (">=0.5", "v0.5.2"),
            ("<0.4.2", "v0.4.1"),
            ("v0.4.5", "v0.4.5"),
            ("0.4.1", "v0.4.1"),
            ("~0.4 || ~0.5", "v0.5.2"),
            ("^0.3", "0.3.9"),
            ("0.4.x", "v0.4.5"),
            ("*", "v0.5.2"),
        ] {
            assert_eq!(select_tag(tag, CONFIGURED), Ok(want), "tag {tag}");
        }
    }

    #[test]
    fn no_match_and_a_tag_that_is_no_constraint_name_the_tag_and_the_versions() {
        let miss = select_tag(">=1.0", CONFIGURED).unwrap_err();
        assert!(matches!(miss, TagMiss::NoMatch { .. }));
        let text = miss.to_string();
        assert!(text.contains("\">=1.0\""), "{text}");
        assert!(
            text.contains("v0.4.1, v0.4.5, v0.5.2, latest, 0.3.9"),
            "{text}"
        );
        let miss = select_tag("~0.4 |", CONFIGURED).unwrap_err();
        assert!(matches!(miss, TagMiss::NotAConstraint { .. }), "{miss:?}");
        assert!(
            miss.to_string()
                .contains("is not a valid semver constraint")
        );
        let none: &[&str] = &[];
        assert!(
            select_tag("~0.4", none)
                .unwrap_err()
                .to_string()
                .contains("none is configured")
        );
    }

    #[test]
    fn a_literal_that_is_no_version_matches_only_its_own_spelling() {
        assert_eq!(select_tag("latest", CONFIGURED), Ok("latest"));
        assert!(select_tag("main", CONFIGURED).is_err());
    }

    #[test]
    fn equal_versions_keep_the_first_listed() {
        assert_eq!(select_tag("~0.4", &["0.4.1", "v0.4.1"]), Ok("0.4.1"));
        assert_eq!(select_tag("~0.4", &["v0.4.1", "0.4.1"]), Ok("v0.4.1"));
    }

    #[test]
    fn function_config_tags_are_constraints() {
        let tags = ["~0.1", "v0.2.1"];
        assert!(matches_config_tags("v0.1.5", &tags));
        assert!(matches_config_tags(">= 0.2.0 < 0.3.0", &tags));
        assert!(!matches_config_tags("v0.3.0", &tags));
        assert!(matches_config_tags("anything", &["*"]));
        let empty: [&str; 0] = [];
        assert!(!matches_config_tags("v0.1.0", &empty));
        assert!(matches_config_tags("latest", &["latest"]));
        assert!(!matches_config_tags("latest", &["stable"]));
        assert!(matches_config_tags("v0.1.3", &["~0.1 != v0.1.4"]));
        assert!(!matches_config_tags("v0.1.4", &["~0.1 != v0.1.4"]));
        // An entry that is no constraint is no version either: skipped.
        assert!(!matches_config_tags("v0.1.0", &["latest"]));
    }
}
