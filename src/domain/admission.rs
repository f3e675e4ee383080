//! Function admission policy: which function images may run.
//!
//! An ordered list of allow/deny rules on image references, evaluated before
//! anything runs (kpt issue 1904 asks for this for `kpt fn render` and
//! Porch's runner; neither has it). The first rule whose conditions all
//! match decides; when none matches, `default` decides (allow unless the
//! file says otherwise), so a runner without a policy file admits every
//! image, as Porch does.
//!
//! Conditions, each optional (an absent one matches everything):
//! - `registry`: glob on the registry host as Docker normalises it
//!   (`ghcr.io`, `docker.io` for short Docker Hub names, `localhost:5000`),
//!   compared case-insensitively;
//! - `repository`: glob on the repository path (`kptdev/*` does not cross a
//!   `/`; `kptdev/**` does);
//! - `tag`: glob on the tag (`v1.*`); a reference pinned by digest only has
//!   no tag and does not match a `tag` condition;
//! - `requireDigest: true`: on an `allow` rule, a matching reference without
//!   `@sha256:…` is denied by this rule; on a `deny` rule, only references
//!   without a digest match (pinned ones go on to the next rule).
//!
//! The file (YAML, strict: unknown fields are errors):
//! ```yaml
//! apiVersion: krm-fn-runner.dev/v1alpha1
//! kind: FunctionAdmissionPolicy
//! default: deny
//! rules:
//! - name: catalog-pinned
//!   action: allow
//!   registry: ghcr.io
//!   repository: kptdev/krm-functions-catalog/**
//!   requireDigest: true
//! ```

use globset::{Glob, GlobBuilder, GlobMatcher};
use serde::Deserialize;

use crate::domain::codec;
use crate::domain::image::{ImageRef, resolve_image};

/// `apiVersion` of a policy file.
pub const POLICY_API_VERSION: &str = "krm-fn-runner.dev/v1alpha1";
/// `kind` of a policy file.
pub const POLICY_KIND: &str = "FunctionAdmissionPolicy";
/// The rule name reported when no rule matched and `default: deny` decided.
pub const DEFAULT_RULE: &str = "default";

/// What a rule (or the default) does with a matching image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// The function may run.
    #[default]
    Allow,
    /// The function is refused before anything runs.
    Deny,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    default: Action,
    #[serde(default)]
    rules: Vec<RuleFile>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RuleFile {
    name: String,
    action: Action,
    #[serde(default)]
    registry: Option<String>,
    #[serde(default)]
    repository: Option<String>,
    #[serde(default)]
    tag: Option<String>,
    #[serde(default)]
    require_digest: bool,
}

/// One compiled glob with the text it came from.
#[derive(Debug, Clone)]
struct Pattern {
    matcher: GlobMatcher,
}

impl Pattern {
    fn new(field: &str, rule: &str, text: &str, case_insensitive: bool) -> Result<Self, String> {
        let glob: Glob = GlobBuilder::new(text)
            .literal_separator(true)
            .case_insensitive(case_insensitive)
            .build()
            .map_err(|e| format!("rule {rule:?}: {field} {text:?} is not a valid glob: {e}"))?;
        Ok(Self {
            matcher: glob.compile_matcher(),
        })
    }

    fn matches(&self, value: &str) -> bool {
        self.matcher.is_match(value)
    }
}

/// One allow/deny rule.
#[derive(Debug, Clone)]
pub struct Rule {
    /// The rule's name, reported in denials and in the denial metric.
    pub name: String,
    /// Allow or deny.
    pub action: Action,
    registry: Option<Pattern>,
    repository: Option<Pattern>,
    tag: Option<Pattern>,
    /// See the module documentation.
    pub require_digest: bool,
}

/// The answer for one image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The function may run; `rule` is the rule that allowed it (`None`: the default).
    Allow {
        /// The deciding rule's name.
        rule: Option<String>,
    },
    /// The function must not run.
    Deny {
        /// The deciding rule's name ([`DEFAULT_RULE`] for `default: deny`).
        rule: String,
        /// Why, in words, naming the image and the rule.
        reason: String,
    },
}

/// An ordered allow/deny policy on function images.
#[derive(Debug, Clone, Default)]
pub struct AdmissionPolicy {
    default: Action,
    rules: Vec<Rule>,
}

impl AdmissionPolicy {
    /// The policy without a file: every image is allowed.
    pub fn allow_all() -> Self {
        Self::default()
    }

    /// Parses a policy file's text (see the module documentation).
    ///
    /// Errors, each naming what to fix: not YAML or an unknown field, a
    /// wrong `apiVersion`/`kind` (both may be omitted), an empty or
    /// duplicate rule name, an invalid glob.
    pub fn parse(text: &str) -> Result<Self, String> {
        let file: PolicyFile = codec::from_yaml_str(text).map_err(|e| e.to_string())?;
        if !file.api_version.is_empty() && file.api_version != POLICY_API_VERSION {
            return Err(format!(
                "apiVersion {:?} is not supported: use {POLICY_API_VERSION}",
                file.api_version
            ));
        }
        if !file.kind.is_empty() && file.kind != POLICY_KIND {
            return Err(format!(
                "kind {:?} is not supported: use {POLICY_KIND}",
                file.kind
            ));
        }
        let mut rules: Vec<Rule> = Vec::with_capacity(file.rules.len());
        for (i, r) in file.rules.into_iter().enumerate() {
            if r.name.trim().is_empty() {
                return Err(format!(
                    "rules[{i}] has no name: give every rule a name (denials report it)"
                ));
            }
            if r.name == DEFAULT_RULE || rules.iter().any(|x| x.name == r.name) {
                return Err(format!(
                    "rules[{i}]: the name {:?} is already taken: rule names must be unique and not {DEFAULT_RULE:?}",
                    r.name
                ));
            }
            let pattern = |field: &str, text: &Option<String>, ci: bool| {
                text.as_deref()
                    .map(|t| Pattern::new(field, &r.name, t, ci))
                    .transpose()
            };
            rules.push(Rule {
                registry: pattern("registry", &r.registry, true)?,
                repository: pattern("repository", &r.repository, false)?,
                tag: pattern("tag", &r.tag, false)?,
                name: r.name,
                action: r.action,
                require_digest: r.require_digest,
            });
        }
        Ok(Self {
            default: file.default,
            rules,
        })
    }

    /// True when the policy admits every image without looking at it (no
    /// rules, `default: allow`).
    pub fn allows_everything(&self) -> bool {
        self.rules.is_empty() && self.default == Action::Allow
    }

    /// The rules in evaluation order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Decides for `image` after kpt's short-name rule with `prefix` (so
    /// `set-namespace:v0.4.5` is judged as the catalog image it runs as).
    /// An image that is not a valid reference is denied (rule
    /// [`DEFAULT_RULE`]) unless the policy admits everything.
    pub fn decide(&self, image: &str, prefix: &str) -> Decision {
        if self.allows_everything() {
            return Decision::Allow { rule: None };
        }
        let resolved = resolve_image(image, prefix);
        let reference = match ImageRef::parse(&resolved) {
            Ok(r) => r,
            Err(e) => {
                return Decision::Deny {
                    rule: DEFAULT_RULE.to_string(),
                    reason: format!(
                        "function {image:?} is denied by admission rule {DEFAULT_RULE:?}: it is not a valid image reference ({e})"
                    ),
                };
            }
        };
        let has_digest = reference.digest.is_some();
        for rule in &self.rules {
            let matches = rule
                .registry
                .as_ref()
                .is_none_or(|p| p.matches(&reference.registry))
                && rule
                    .repository
                    .as_ref()
                    .is_none_or(|p| p.matches(&reference.repository))
                && rule
                    .tag
                    .as_ref()
                    .is_none_or(|p| reference.tag.as_deref().is_some_and(|t| p.matches(t)));
            if !matches {
                continue;
            }
            match rule.action {
                Action::Allow if rule.require_digest && !has_digest => {
                    return Decision::Deny {
                        rule: rule.name.clone(),
                        reason: format!(
                            "function {image:?} is denied by admission rule {:?}: the rule requires a digest (image@sha256:…)",
                            rule.name
                        ),
                    };
                }
                Action::Allow => {
                    return Decision::Allow {
                        rule: Some(rule.name.clone()),
                    };
                }
                Action::Deny if rule.require_digest && has_digest => continue,
                Action::Deny => {
                    return Decision::Deny {
                        rule: rule.name.clone(),
                        reason: format!(
                            "function {image:?} is denied by admission rule {:?}",
                            rule.name
                        ),
                    };
                }
            }
        }
        match self.default {
            Action::Allow => Decision::Allow { rule: None },
            Action::Deny => Decision::Deny {
                rule: DEFAULT_RULE.to_string(),
                reason: format!(
                    "function {image:?} is denied by admission rule {DEFAULT_RULE:?}: no rule matches it and the policy's default is deny"
                ),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFIX: &str = "ghcr.io/kptdev/krm-functions-catalog/";
    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn denied_by(p: &AdmissionPolicy, image: &str) -> Option<String> {
        match p.decide(image, PREFIX) {
            Decision::Allow { .. } => None,
            Decision::Deny { rule, .. } => Some(rule),
        }
    }

    #[test]
    fn no_rules_allows_everything_even_nonsense() {
        let p = AdmissionPolicy::allow_all();
        assert!(p.allows_everything());
        assert_eq!(denied_by(&p, "NOT AN IMAGE"), None);
        let p = AdmissionPolicy::parse("rules: []\n").unwrap();
        assert!(p.allows_everything());
    }

    #[test]
    fn registry_rule() {
        let p = AdmissionPolicy::parse(
            "rules:\n- name: no-hub\n  action: deny\n  registry: docker.io\n- name: any-example\n  action: allow\n  registry: '*.EXAMPLE.com'\ndefault: deny\n",
        )
        .unwrap();
        assert_eq!(denied_by(&p, "library/alpine:3").as_deref(), Some("no-hub"));
        // A bare name is a catalog function (kpt's short-name rule), not Docker Hub.
        assert_eq!(denied_by(&p, "alpine").as_deref(), Some("default"));
        assert_eq!(denied_by(&p, "registry.example.com/fn:v1"), None);
        assert_eq!(denied_by(&p, "ghcr.io/x/fn:v1").as_deref(), Some("default"));
    }

    #[test]
    fn repository_glob_respects_slashes() {
        let p = AdmissionPolicy::parse(
            "default: deny\nrules:\n- name: top\n  action: allow\n  repository: 'kptdev/*'\n- name: deep\n  action: allow\n  repository: 'deep/**'\n",
        )
        .unwrap();
        assert_eq!(denied_by(&p, "ghcr.io/kptdev/fn:v1"), None);
        assert_eq!(
            denied_by(&p, "ghcr.io/kptdev/krm-functions-catalog/fn:v1").as_deref(),
            Some("default")
        );
        assert_eq!(denied_by(&p, "ghcr.io/deep/a/b/fn:v1"), None);
        // Short names are judged as the catalog images they run as.
        assert_eq!(
            denied_by(&p, "set-namespace:v0.4.5").as_deref(),
            Some("default")
        );
    }

    #[test]
    fn tag_pattern_and_digest_only_references() {
        let p = AdmissionPolicy::parse("rules:\n- name: no-v0\n  action: deny\n  tag: 'v0.*'\n")
            .unwrap();
        assert_eq!(
            denied_by(&p, "example.com/fn:v0.4.5").as_deref(),
            Some("no-v0")
        );
        assert_eq!(denied_by(&p, "example.com/fn:v1.0.0"), None);
        assert_eq!(denied_by(&p, &format!("example.com/fn@{DIGEST}")), None);
        // No tag written means :latest.
        let p =
            AdmissionPolicy::parse("rules:\n- name: no-latest\n  action: deny\n  tag: latest\n")
                .unwrap();
        assert_eq!(
            denied_by(&p, "example.com/fn").as_deref(),
            Some("no-latest")
        );
    }

    #[test]
    fn digest_required_on_allow_and_on_deny() {
        let p = AdmissionPolicy::parse(
            "default: deny\nrules:\n- name: pinned\n  action: allow\n  registry: example.com\n  requireDigest: true\n",
        )
        .unwrap();
        let Decision::Deny { rule, reason } = p.decide("example.com/fn:v1", PREFIX) else {
            panic!("unpinned must be denied")
        };
        assert_eq!(rule, "pinned");
        assert!(reason.contains("requires a digest"), "{reason}");
        assert_eq!(denied_by(&p, &format!("example.com/fn:v1@{DIGEST}")), None);
        let p = AdmissionPolicy::parse(
            "rules:\n- name: unpinned\n  action: deny\n  requireDigest: true\n",
        )
        .unwrap();
        assert_eq!(
            denied_by(&p, "example.com/fn:v1").as_deref(),
            Some("unpinned")
        );
        assert_eq!(denied_by(&p, &format!("example.com/fn@{DIGEST}")), None);
    }

    #[test]
    fn first_match_wins_and_invalid_images_are_denied() {
        let p = AdmissionPolicy::parse(
            "rules:\n- name: a\n  action: allow\n  repository: 'x/**'\n- name: b\n  action: deny\n",
        )
        .unwrap();
        assert_eq!(
            p.decide("example.com/x/fn:v1", PREFIX),
            Decision::Allow {
                rule: Some("a".into())
            }
        );
        assert_eq!(denied_by(&p, "example.com/y/fn:v1").as_deref(), Some("b"));
        assert_eq!(
            denied_by(&p, "Example.com/UPPER:v1").as_deref(),
            Some("default")
        );
    }

    #[test]
    fn bad_files_say_what_to_fix() {
        for (text, says) in [
            ("rules:\n- name: a\n  action: maybe\n", "maybe"),
            (
                "rules:\n- name: a\n  action: deny\n  registy: x\n",
                "registy",
            ),
            ("rules:\n- name: ''\n  action: deny\n", "has no name"),
            (
                "rules:\n- {name: a, action: deny}\n- {name: a, action: allow}\n",
                "already taken",
            ),
            (
                "rules:\n- {name: a, action: deny, tag: 'v[1'}\n",
                "not a valid glob",
            ),
            ("kind: Kptfile\n", "kind \"Kptfile\""),
            ("apiVersion: v1\n", "apiVersion \"v1\""),
        ] {
            let e = AdmissionPolicy::parse(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
