//! Semantic versions and version constraints with the grammar and the
//! answers of the Go library `github.com/Masterminds/semver/v3`, version
//! v3.5.0 (its `NewVersion`, `Version.Compare`, `NewConstraint` and
//! `Constraints.Check` with the package defaults).
//!
//! Kubernetes tooling written in Go (kpt, Porch, Helm) reads version ranges
//! with that library; this module gives the same verdict on the same text,
//! including the library's quirks, so that a range a user wrote for one
//! tool means the same here.
//!
//! # Versions ([`Version::parse`])
//!
//! The library's loose form: an optional lowercase `v`, a major number, an
//! optional `.minor` and `.patch` (missing ones are 0), an optional
//! `-prerelease` and an optional `+metadata`, where prerelease and metadata
//! are dot-separated non-empty identifiers of `[0-9A-Za-z-]`. Leading zeros
//! in the numbers are accepted and dropped (`01.2` is 1.2.0); a purely
//! numeric prerelease identifier with a leading zero (`1.0.0-01`) is
//! rejected; a number above `u64::MAX` is rejected; so is text longer than
//! 256 bytes. Nothing else is allowed: no surrounding spaces, no `V`, no
//! fourth number.
//!
//! Versions order as semver 2.0 says: by major, minor and patch, then a
//! version with a prerelease before the same one without, prereleases
//! identifier by identifier (numeric ones by value and before alphanumeric
//! ones, alphanumeric ones byte-wise, a shorter list first when one is a
//! prefix of the other). Build metadata takes no part. One detail is the
//! library's own: a numeric identifier too large for `u64` is compared as
//! text.
//!
//! # Constraints ([`Constraint::parse`], [`Constraint::matches`])
//!
//! ```text
//! constraint  = alternative *( "||" alternative )     ; at most 32
//! alternative = comparison *( ( spaces / "," *space ) comparison )
//! comparison  = *space [operator] *space version *space
//! operator    = "=" / "!=" / ">" / "<" / ">=" / "=>" / "<=" / "=<"
//!             / "~" / "~>" / "^"
//! version     = ["v"] part ["." part ["." part]] ["-" ids] ["+" ids]
//! part        = 1*( DIGIT / "x" / "X" / "*" / "|" )
//! range       = version 1*space "-" 1*space version   ; "A - B"
//! ```
//!
//! A hyphen range `A - B` is first rewritten to `>= A, <= B` (textually,
//! with the spaces around it). A version matches the constraint when it
//! matches every comparison of at least one alternative. A part that is
//! `x`, `X` or `*` (or is missing) is a wildcard and makes the parts after
//! it wildcards too: `1.x`, `1` and `1.x.3` all mean "major 1". The
//! operators:
//!
//! | operator | without wildcard | with a wildcard |
//! | --- | --- | --- |
//! | none, `=` | equal | as `~` |
//! | `!=` | not equal | outside the wildcard's range |
//! | `>` | greater | above the wildcard's range |
//! | `<` | less | less than the range's first version |
//! | `>=`, `=>` | greater or equal | greater or equal to the range's first version |
//! | `<=`, `=<` | less or equal | not above the range (see the quirks) |
//! | `~`, `~>` | `>=1.2.3 <1.3.0` | `~1` is `>=1.0.0 <2.0.0` |
//! | `^` | `>=1.2.3 <2.0.0`, `^0.2.3` `<0.3.0`, `^0.0.3` `=0.0.3` | `^0.0` `<0.1.0`, `^0` `<1.0.0` |
//!
//! **Prereleases**: a version with a prerelease matches an alternative only
//! when one of that alternative's comparisons names a prerelease itself
//! (`>=1.2.0-0` lets `1.5.0-beta` in; `>=1.2.0` does not).
//!
//! Quirks kept from the library, on purpose:
//! - The empty constraint is rejected; `*` matches every release.
//! - `^*` (and `^x`) match only 0.0.0, and `<=*` matches only 0.0.x: the
//!   library reads a leading wildcard as the version 0.0.0 for these two.
//!   Likewise `>*` and `!=*` match every release but 0.0.0. `~0.0.0`
//!   matches every release.
//! - A wildcard's later parts are not looked at: `x.1.2` is `*`, `1.x.|`
//!   is `1.x`.
//! - A hyphen range swallows the spaces around it, so `>=1 1 - 2` (no
//!   separator left between `>=1` and `>= 1`) is rejected, and `1 ||2 - 3`
//!   (the `|` characters are taken as part of the range's first version)
//!   is rejected while `1 || 2 - 3` is accepted. For the same reason a
//!   range next to a bare `||` takes the other side into its bound:
//!   `1 - 2||3 - 4` is rejected (write `1 - 2 || 3 - 4`).
//! - `!=1.2.x-beta` lets 1.2.5 in: with a patch wildcard, `!=` compares
//!   the prereleases.
//! - Only the ASCII space, tab, newline, carriage return and form feed are
//!   spaces; a constraint longer than 512 bytes is rejected.
//!
//! The library defines the constraint grammar with regular expressions
//! (which piece of text a hyphen range or a comparison is, is decided by
//! Go's leftmost-first matching), so this module matches the same patterns
//! with a small backtracking matcher of the same semantics (`Program`),
//! over ASCII bytes, in time linear in the text. Versions are read by a
//! direct scan.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;
use std::sync::LazyLock;

/// The longest version text [`Version::parse`] accepts, in bytes (the
/// library's `MaxVersionLen`).
pub const MAX_VERSION_LEN: usize = 256;

/// The longest constraint text [`Constraint::parse`] accepts, in bytes (the
/// library's `MaxConstraintLen`).
pub const MAX_CONSTRAINT_LEN: usize = 512;

/// The most `||` alternatives a constraint may have (the library's
/// `MaxConstraintGroups`).
pub const MAX_ALTERNATIVES: usize = 32;

/// A semantic version, as the library's `NewVersion` reads it.
///
/// Equality, ordering and hashing follow the library's `Version.Compare`:
/// build metadata is ignored, so `1.0.0+a == 1.0.0+b`, and `v1` equals
/// `1.0.0`. [`Version::original`] keeps the text as given.
#[derive(Debug, Clone)]
pub struct Version {
    major: u64,
    minor: u64,
    patch: u64,
    pre: String,
    metadata: String,
    original: String,
}

impl Version {
    /// Parses `text` as the library's `NewVersion` does (see the module
    /// documentation for the grammar).
    ///
    /// # Errors
    ///
    /// A [`VersionError`] naming `text` when it is longer than
    /// [`MAX_VERSION_LEN`] bytes, does not have the grammar's shape, has a
    /// number above `u64::MAX`, or has a numeric prerelease identifier
    /// with a leading zero.
    pub fn parse(text: &str) -> Result<Version, VersionError> {
        let fail = |kind| {
            Err(VersionError {
                input: text.to_owned(),
                kind,
            })
        };
        if text.len() > MAX_VERSION_LEN {
            return fail(VersionErrorKind::TooLong);
        }
        let Some(parts) = split_version(text) else {
            return fail(VersionErrorKind::Malformed);
        };
        let number = |digits: Option<&str>, segment| {
            digits
                .map_or(Ok(0), str::parse::<u64>)
                .map_err(|_| VersionErrorKind::NumberTooLarge { segment })
        };
        let (major, minor, patch) = match (
            number(Some(parts.major), "major"),
            number(parts.minor, "minor"),
            number(parts.patch, "patch"),
        ) {
            (Ok(major), Ok(minor), Ok(patch)) => (major, minor, patch),
            (Err(kind), _, _) | (_, Err(kind), _) | (_, _, Err(kind)) => return fail(kind),
        };
        let pre = parts.pre.unwrap_or("");
        if let Some(id) = pre
            .split('.')
            .find(|id| id.len() > 1 && id.starts_with('0') && is_digits(id))
        {
            return fail(VersionErrorKind::PrereleaseLeadingZero {
                identifier: id.to_owned(),
            });
        }
        Ok(Version {
            major,
            minor,
            patch,
            pre: pre.to_owned(),
            metadata: parts.metadata.unwrap_or("").to_owned(),
            original: text.to_owned(),
        })
    }

    /// The text this version was parsed from, unchanged (the library's
    /// `Original`).
    pub fn original(&self) -> &str {
        &self.original
    }

    /// The major number.
    pub fn major(&self) -> u64 {
        self.major
    }

    /// The minor number (0 when the text had none).
    pub fn minor(&self) -> u64 {
        self.minor
    }

    /// The patch number (0 when the text had none).
    pub fn patch(&self) -> u64 {
        self.patch
    }

    /// The prerelease without its `-` (`"rc.1"` for `1.0.0-rc.1`), or `""`.
    pub fn prerelease(&self) -> &str {
        &self.pre
    }

    /// The build metadata without its `+` (`"build.5"` for
    /// `1.0.0+build.5`), or `""`.
    pub fn metadata(&self) -> &str {
        &self.metadata
    }
}

/// The canonical form, as the library's `String`: `MAJOR.MINOR.PATCH`,
/// then `-PRERELEASE` and `+METADATA` when present, without a leading `v`
/// and with the numbers' leading zeros dropped (`v01.2` shows as `1.2.0`).
impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)?;
        if !self.pre.is_empty() {
            write!(f, "-{}", self.pre)?;
        }
        if !self.metadata.is_empty() {
            write!(f, "+{}", self.metadata)?;
        }
        Ok(())
    }
}

/// [`Version::parse`].
impl FromStr for Version {
    type Err = VersionError;

    fn from_str(text: &str) -> Result<Version, VersionError> {
        Version::parse(text)
    }
}

/// The library's `Version.Compare`: major, minor, patch, then the
/// prerelease (none ranks above any); metadata is ignored.
impl Ord for Version {
    fn cmp(&self, other: &Version) -> Ordering {
        self.major
            .cmp(&other.major)
            .then(self.minor.cmp(&other.minor))
            .then(self.patch.cmp(&other.patch))
            .then_with(|| match (self.pre.is_empty(), other.pre.is_empty()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => compare_prerelease(&self.pre, &other.pre),
            })
    }
}

/// See [`Ord`]: consistent with it.
impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Version) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Equal when [`Ord`] says so: metadata and the original text are ignored.
impl PartialEq for Version {
    fn eq(&self, other: &Version) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Version {}

/// Hashes what equality looks at: the numbers and the prerelease (two
/// prereleases compare equal only when their texts are equal).
impl Hash for Version {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self.major, self.minor, self.patch, &self.pre).hash(state);
    }
}

/// Why [`Version::parse`] rejected a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionError {
    input: String,
    kind: VersionErrorKind,
}

impl VersionError {
    /// The rejected text.
    pub fn input(&self) -> &str {
        &self.input
    }

    /// What is wrong with it.
    pub fn kind(&self) -> &VersionErrorKind {
        &self.kind
    }
}

/// What is wrong with a rejected version text (see [`VersionError`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum VersionErrorKind {
    /// Longer than [`MAX_VERSION_LEN`] bytes.
    TooLong,
    /// Not of the form `[v]MAJOR[.MINOR[.PATCH]][-PRERELEASE][+METADATA]`.
    Malformed,
    /// A number does not fit in 64 bits.
    NumberTooLarge {
        /// `"major"`, `"minor"` or `"patch"`.
        segment: &'static str,
    },
    /// A numeric prerelease identifier starts with 0 (`01`).
    PrereleaseLeadingZero {
        /// The identifier.
        identifier: String,
    },
}

impl fmt::Display for VersionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} is not a valid version: ", self.input)?;
        match &self.kind {
            VersionErrorKind::TooLong => write!(f, "longer than {MAX_VERSION_LEN} bytes"),
            VersionErrorKind::Malformed => f.write_str(
                "expected [v]MAJOR[.MINOR[.PATCH]][-PRERELEASE][+METADATA], numbers of digits and \
                 dot-separated identifiers of letters, digits and '-'",
            ),
            VersionErrorKind::NumberTooLarge { segment } => {
                write!(f, "the {segment} number is larger than {}", u64::MAX)
            }
            VersionErrorKind::PrereleaseLeadingZero { identifier } => {
                write!(
                    f,
                    "the numeric prerelease identifier {identifier:?} starts with 0"
                )
            }
        }
    }
}

impl std::error::Error for VersionError {}

/// The pieces of a version text that has the grammar's shape.
struct VersionParts<'a> {
    major: &'a str,
    minor: Option<&'a str>,
    patch: Option<&'a str>,
    pre: Option<&'a str>,
    metadata: Option<&'a str>,
}

/// Splits `text` into its pieces, or `None` when it does not have the
/// shape `[v]DIGITS[.DIGITS[.DIGITS]][-IDS][+IDS]` (IDS: dot-separated
/// non-empty runs of `[0-9A-Za-z-]`). Each piece is determined by the one
/// before it, so a left-to-right scan decides.
fn split_version(text: &str) -> Option<VersionParts<'_>> {
    let rest = text.strip_prefix('v').unwrap_or(text);
    let (major, mut rest) = take_while(rest, |b| b.is_ascii_digit());
    if major.is_empty() {
        return None;
    }
    let mut numbers = [None, None];
    for slot in &mut numbers {
        if let Some(after) = rest.strip_prefix('.') {
            let (digits, after) = take_while(after, |b| b.is_ascii_digit());
            if digits.is_empty() {
                return None;
            }
            *slot = Some(digits);
            rest = after;
        }
    }
    let mut labels = [None, None];
    for (slot, lead) in labels.iter_mut().zip(['-', '+']) {
        if let Some(after) = rest.strip_prefix(lead) {
            let (ids, after) = take_while(after, |b| b == b'.' || is_identifier_byte(b));
            if ids.split('.').any(str::is_empty) {
                return None;
            }
            *slot = Some(ids);
            rest = after;
        }
    }
    if !rest.is_empty() {
        return None;
    }
    Some(VersionParts {
        major,
        minor: numbers[0],
        patch: numbers[1],
        pre: labels[0],
        metadata: labels[1],
    })
}

/// Splits `text` after its longest prefix of ASCII bytes that satisfy `keep`.
fn take_while(text: &str, keep: impl Fn(u8) -> bool) -> (&str, &str) {
    let end = text.bytes().position(|b| !keep(b)).unwrap_or(text.len());
    // `end` follows ASCII bytes only, so it is a character boundary.
    text.split_at_checked(end).unwrap_or((text, ""))
}

/// A byte of a prerelease or metadata identifier: `[0-9A-Za-z-]`.
fn is_identifier_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-'
}

/// Non-empty and only ASCII digits.
fn is_digits(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

/// The library's prerelease order: identifier by identifier, a missing
/// identifier (the shorter list) first, numeric identifiers (digits that
/// fit in a `u64`) by value and before all others, the others byte-wise.
fn compare_prerelease(a: &str, b: &str) -> Ordering {
    let mut left = a.split('.');
    let mut right = b.split('.');
    loop {
        let (x, y) = match (left.next(), right.next()) {
            (None, None) => return Ordering::Equal,
            (x, y) => (x.unwrap_or(""), y.unwrap_or("")),
        };
        if x == y {
            continue;
        }
        if x.is_empty() {
            return Ordering::Less;
        }
        if y.is_empty() {
            return Ordering::Greater;
        }
        let numeric = |id: &str| {
            if is_digits(id) {
                id.parse::<u64>().ok()
            } else {
                None
            }
        };
        return match (numeric(x), numeric(y)) {
            (Some(m), Some(n)) => m.cmp(&n),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => x.as_bytes().cmp(y.as_bytes()),
        };
    }
}

/// A version constraint, as the library's `NewConstraint` reads it: one or
/// more `||` alternatives of comparisons (see the module documentation).
#[derive(Debug, Clone)]
pub struct Constraint {
    text: String,
    alternatives: Vec<Alternative>,
}

/// One `||` alternative: every comparison must hold.
#[derive(Debug, Clone)]
struct Alternative {
    comparisons: Vec<Comparison>,
    /// Whether a comparison names a prerelease, which lets prerelease
    /// versions in.
    admits_prereleases: bool,
}

/// One operator and version, with its wildcard.
#[derive(Debug, Clone)]
struct Comparison {
    op: Op,
    /// The version with its wildcard parts (and missing ones) as 0 and its
    /// prerelease kept.
    version: Version,
    wildcard: Wildcard,
}

/// The operators; the aliases (`=>`, `=<`, `~>`, none) are folded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// None or `=`.
    Equal,
    /// `!=`.
    NotEqual,
    /// `>`.
    Greater,
    /// `<`.
    Less,
    /// `>=`, `=>`.
    GreaterOrEqual,
    /// `<=`, `=<`.
    LessOrEqual,
    /// `~`, `~>`.
    Tilde,
    /// `^`.
    Caret,
}

/// The first part of a comparison's version that is a wildcard (`x`, `X`,
/// `*` or missing); the parts after it are wildcards too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wildcard {
    /// `1.2.3`.
    None,
    /// `*`, `x.1`: the major part.
    Major,
    /// `1`, `1.x`: the minor part.
    Minor,
    /// `1.2`, `1.2.*`: the patch part.
    Patch,
}

impl Constraint {
    /// Parses `text` as the library's `NewConstraint` does (see the module
    /// documentation for the grammar and its quirks).
    ///
    /// # Errors
    ///
    /// A [`ConstraintError`] naming `text` when it is longer than
    /// [`MAX_CONSTRAINT_LEN`] bytes, has more than [`MAX_ALTERNATIVES`]
    /// alternatives, has an alternative that is not a list of comparisons
    /// (the empty constraint included), or has a comparison whose version
    /// [`Version::parse`] rejects (`>=1|2`, a number above `u64::MAX`).
    pub fn parse(text: &str) -> Result<Constraint, ConstraintError> {
        let fail = |kind| {
            Err(ConstraintError {
                input: text.to_owned(),
                kind,
            })
        };
        if text.len() > MAX_CONSTRAINT_LEN {
            return fail(ConstraintErrorKind::TooLong);
        }
        let patterns = &*PATTERNS;
        let rewritten = rewrite_hyphen_ranges(patterns, text);
        let pieces: Vec<&str> = rewritten.split("||").collect();
        if pieces.len() > MAX_ALTERNATIVES {
            return fail(ConstraintErrorKind::TooManyAlternatives {
                count: pieces.len(),
            });
        }
        let mut alternatives = Vec::with_capacity(pieces.len());
        for piece in pieces {
            if patterns.alternative.search(piece, 0).is_none() {
                return fail(ConstraintErrorKind::Improper {
                    alternative: piece.to_owned(),
                });
            }
            let mut terms = find_all(&patterns.comparison, piece);
            if terms.is_empty() {
                terms.push(piece);
            }
            let mut comparisons = Vec::with_capacity(terms.len());
            for term in terms {
                match parse_comparison(patterns, term) {
                    Ok(c) => comparisons.push(c),
                    Err(kind) => return fail(kind),
                }
            }
            let admits_prereleases = comparisons.iter().any(|c| !c.version.pre.is_empty());
            alternatives.push(Alternative {
                comparisons,
                admits_prereleases,
            });
        }
        Ok(Constraint {
            text: text.to_owned(),
            alternatives,
        })
    }

    /// Whether `version` satisfies the constraint: every comparison of at
    /// least one alternative holds (the library's `Constraints.Check`). A
    /// version with a prerelease never satisfies an alternative none of
    /// whose comparisons names a prerelease.
    pub fn matches(&self, version: &Version) -> bool {
        self.alternatives.iter().any(|alt| {
            (version.pre.is_empty() || alt.admits_prereleases)
                && alt.comparisons.iter().all(|c| c.holds(version))
        })
    }

    /// The text this constraint was parsed from, unchanged.
    pub fn text(&self) -> &str {
        &self.text
    }
}

/// The text as given.
impl fmt::Display for Constraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// [`Constraint::parse`].
impl FromStr for Constraint {
    type Err = ConstraintError;

    fn from_str(text: &str) -> Result<Constraint, ConstraintError> {
        Constraint::parse(text)
    }
}

impl Comparison {
    /// Whether `v` passes this comparison, the prerelease admission being
    /// decided by the caller (the library's per-operator functions).
    fn holds(&self, v: &Version) -> bool {
        let c = &self.version;
        match self.op {
            Op::Equal if self.wildcard == Wildcard::None => v == c,
            Op::Equal | Op::Tilde => self.tilde(v),
            Op::NotEqual => match self.wildcard {
                Wildcard::None | Wildcard::Major => v != c,
                Wildcard::Minor => v.major != c.major,
                Wildcard::Patch => {
                    v.major != c.major
                        || v.minor != c.minor
                        || compare_prerelease(&v.pre, &c.pre) != Ordering::Equal
                }
            },
            Op::Greater => match self.wildcard {
                Wildcard::None | Wildcard::Major => v > c,
                Wildcard::Minor => v.major > c.major,
                Wildcard::Patch => (v.major, v.minor) > (c.major, c.minor),
            },
            Op::Less => v < c,
            Op::GreaterOrEqual => v >= c,
            Op::LessOrEqual => match self.wildcard {
                Wildcard::None => v <= c,
                // For `<=*` that is 0.0.x only (`*` reads as 0.0.0).
                Wildcard::Major | Wildcard::Patch => (v.major, v.minor) <= (c.major, c.minor),
                Wildcard::Minor => v.major <= c.major,
            },
            Op::Caret => self.caret(v),
        }
    }

    /// `~`: at least the version, and the same major (and the same minor
    /// unless the minor part is a wildcard); `~0.0.0` and `~*` admit all.
    fn tilde(&self, v: &Version) -> bool {
        let c = &self.version;
        if v < c {
            return false;
        }
        let minor_free = self.wildcard == Wildcard::Minor;
        if (c.major, c.minor, c.patch) == (0, 0, 0)
            && !minor_free
            && self.wildcard != Wildcard::Patch
        {
            return true;
        }
        v.major == c.major && (minor_free || v.minor == c.minor)
    }

    /// `^`: at least the version, and the same first non-zero part among
    /// major, minor and patch (a wildcard minor or patch part counts as
    /// non-zero; a wildcard major part does not).
    fn caret(&self, v: &Version) -> bool {
        let c = &self.version;
        if v < c {
            return false;
        }
        if c.major > 0 || self.wildcard == Wildcard::Minor {
            return v.major == c.major;
        }
        if v.major > 0 {
            return false;
        }
        if c.minor > 0 || self.wildcard == Wildcard::Patch {
            return v.minor == c.minor;
        }
        v.minor == 0 && v.patch == c.patch
    }
}

/// Why [`Constraint::parse`] rejected a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConstraintError {
    input: String,
    kind: ConstraintErrorKind,
}

impl ConstraintError {
    /// The rejected text.
    pub fn input(&self) -> &str {
        &self.input
    }

    /// What is wrong with it.
    pub fn kind(&self) -> &ConstraintErrorKind {
        &self.kind
    }
}

/// What is wrong with a rejected constraint text (see [`ConstraintError`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConstraintErrorKind {
    /// Longer than [`MAX_CONSTRAINT_LEN`] bytes.
    TooLong,
    /// More than [`MAX_ALTERNATIVES`] `||` alternatives.
    TooManyAlternatives {
        /// How many there are.
        count: usize,
    },
    /// An alternative (after hyphen ranges are rewritten to `>= A, <= B`)
    /// is not a list of comparisons.
    Improper {
        /// The alternative.
        alternative: String,
    },
    /// A comparison's version is not a valid version.
    InvalidVersion {
        /// The comparison, as found in the alternative.
        comparison: String,
        /// Why its version was rejected (for a wildcard version, the error
        /// names the version with its wildcards as 0).
        error: VersionError,
    },
}

impl fmt::Display for ConstraintError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} is not a valid version constraint: ", self.input)?;
        match &self.kind {
            ConstraintErrorKind::TooLong => write!(f, "longer than {MAX_CONSTRAINT_LEN} bytes"),
            ConstraintErrorKind::TooManyAlternatives { count } => {
                write!(
                    f,
                    "{count} '||' alternatives, at most {MAX_ALTERNATIVES} are allowed"
                )
            }
            ConstraintErrorKind::Improper { alternative } => write!(
                f,
                "{alternative:?} is not a list of comparisons (an optional operator among \
                 = != > < >= => <= =< ~ ~> ^, then a version such as 1.2.3, 1.x or v2; \
                 comparisons separated by spaces or commas)"
            ),
            ConstraintErrorKind::InvalidVersion { comparison, error } => {
                write!(f, "in {comparison:?}, {error}")
            }
        }
    }
}

impl std::error::Error for ConstraintError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            ConstraintErrorKind::InvalidVersion { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// Rewrites each hyphen range `A - B` of `text` (with the spaces around it)
/// to `>= A, <= B `, the matches found left to right in the original text
/// and each replacing the first occurrence of its text in the result so
/// far, as the library does.
fn rewrite_hyphen_ranges(patterns: &Patterns, text: &str) -> String {
    let mut out = text.to_owned();
    let mut from = 0;
    while let Some(slots) = patterns.range.search(text, from) {
        let (Some(whole), Some(low), Some(high)) = (
            slot_text(text, &slots, 0),
            slot_text(text, &slots, 1),
            slot_text(text, &slots, 6),
        ) else {
            break;
        };
        out = out.replacen(whole, &format!(">= {low}, <= {high} "), 1);
        match slots[1] {
            Some(end) if end > from => from = end,
            _ => break,
        }
    }
    out
}

/// Every match of `program` in `text`, left to right, not overlapping.
fn find_all<'t>(program: &Program, text: &'t str) -> Vec<&'t str> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(slots) = program.search(text, from) {
        let Some(whole) = slot_text(text, &slots, 0) else {
            break;
        };
        found.push(whole);
        match slots[1] {
            Some(end) if end > from => from = end,
            _ => break,
        }
    }
    found
}

/// Reads one comparison found in an alternative (the library's
/// `parseConstraint`).
fn parse_comparison(patterns: &Patterns, term: &str) -> Result<Comparison, ConstraintErrorKind> {
    let invalid = |error| ConstraintErrorKind::InvalidVersion {
        comparison: term.to_owned(),
        error,
    };
    if term.is_empty() {
        // The library's reading of an empty comparison: `*`.
        return Ok(Comparison {
            op: Op::Equal,
            version: zero_version(),
            wildcard: Wildcard::Major,
        });
    }
    let Some(slots) = patterns.anchored_comparison.search(term, 0) else {
        return Err(ConstraintErrorKind::Improper {
            alternative: term.to_owned(),
        });
    };
    let group = |n| slot_text(term, &slots, n).unwrap_or("");
    let op = match group(1) {
        "" | "=" => Op::Equal,
        "!=" => Op::NotEqual,
        ">" => Op::Greater,
        "<" => Op::Less,
        ">=" | "=>" => Op::GreaterOrEqual,
        "<=" | "=<" => Op::LessOrEqual,
        "~" | "~>" => Op::Tilde,
        _ => Op::Caret,
    };
    let is_wild = |part: &str| part.is_empty() || matches!(part, "x" | "X" | "*");
    let (major, minor, patch, pre) = (group(3), group(4), group(5), group(6));
    let (wildcard, text) = if is_wild(major) {
        (Wildcard::Major, format!("0.0.0{pre}"))
    } else if is_wild(minor.strip_prefix('.').unwrap_or(minor)) {
        (Wildcard::Minor, format!("{major}.0.0{pre}"))
    } else if is_wild(patch.strip_prefix('.').unwrap_or(patch)) {
        (Wildcard::Patch, format!("{major}{minor}.0{pre}"))
    } else {
        (Wildcard::None, group(2).to_owned())
    };
    let version = Version::parse(&text).map_err(invalid)?;
    Ok(Comparison {
        op,
        version,
        wildcard,
    })
}

/// 0.0.0.
fn zero_version() -> Version {
    Version {
        major: 0,
        minor: 0,
        patch: 0,
        pre: String::new(),
        metadata: String::new(),
        original: "0.0.0".into(),
    }
}

/// The text of capture group `n` in `slots`, when it took part.
fn slot_text<'t>(text: &'t str, slots: &[Option<usize>], n: usize) -> Option<&'t str> {
    match (slots.get(2 * n), slots.get(2 * n + 1)) {
        (Some(Some(start)), Some(Some(end))) => text.get(*start..*end),
        _ => None,
    }
}

/// The four patterns of the constraint grammar, compiled once.
struct Patterns {
    /// A hyphen range: `\s*(V)\s+-\s+(V)\s*`, groups 1 and 6 the versions.
    range: Program,
    /// One comparison, unanchored: `(OP)\s*(V)`.
    comparison: Program,
    /// One comparison, whole text: `^\s*(OP)\s*(V)\s*$`; group 1 the
    /// operator, 2 the version, 3-5 its parts (minor and patch with their
    /// dot), 6 its prerelease with its dash.
    anchored_comparison: Program,
    /// A whole alternative:
    /// `^\s*OP\s*V\s*((\s+|,\s*)OP\s*V\s*)*$`.
    alternative: Program,
}

static PATTERNS: LazyLock<Patterns> = LazyLock::new(|| {
    use Node::*;
    let spaces = || Star(Box::new(Set(SPACE)));
    let comparison_body = |groups: Option<usize>| {
        vec![
            group(groups, operator()),
            spaces(),
            version_pattern(groups.map(|g| g + 1)),
        ]
    };
    let mut range = vec![spaces(), version_pattern(Some(1))];
    range.extend([
        Plus(Box::new(Set(SPACE))),
        lit("-"),
        Plus(Box::new(Set(SPACE))),
    ]);
    range.extend([version_pattern(Some(6)), spaces()]);

    let mut anchored = vec![Start, spaces()];
    anchored.extend(comparison_body(Some(1)));
    anchored.extend([spaces(), End]);

    let separator = Alt(vec![
        Plus(Box::new(Set(SPACE))),
        Cat(vec![lit(","), spaces()]),
    ]);
    let mut next = vec![separator];
    next.extend(comparison_body(None));
    next.push(spaces());
    let mut alternative = vec![Start, spaces()];
    alternative.extend(comparison_body(None));
    alternative.extend([spaces(), Star(Box::new(Cat(next))), End]);

    Patterns {
        range: Program::compile(Cat(range)),
        comparison: Program::compile(Cat(comparison_body(None))),
        anchored_comparison: Program::compile(Cat(anchored)),
        alternative: Program::compile(Cat(alternative)),
    }
});

/// `\s` of Go's regular expressions: `[\t\n\f\r ]`.
const SPACE: ByteSet = ByteSet::of(b"\t\n\x0c\r ");
/// A part of a constraint's version: digits, `x`, `X`, `*` and (a quirk of
/// the library's pattern) `|`.
const PART: ByteSet = ByteSet::of(b"0123456789xX*|");
/// A prerelease or metadata identifier byte: `[0-9A-Za-z-]`.
const IDENT: ByteSet =
    ByteSet::of(b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-");

/// The operators in the library's order of preference, the empty one second.
fn operator() -> Node {
    Node::Alt(
        [
            "=", "", "!=", ">", "<", ">=", "=>", "<=", "=<", "~", "~>", "^",
        ]
        .into_iter()
        .map(lit)
        .collect(),
    )
}

/// A constraint's version,
/// `v?(P+)(\.P+)?(\.P+)?(-(I+(\.I+)*))?(\+I+(\.I+)*)?`; with `Some(g)`, the
/// whole is group g, the parts g+1 to g+3, the dashed prerelease g+4.
fn version_pattern(groups: Option<usize>) -> Node {
    use Node::*;
    let at = |k: usize| groups.map(|g| g + k);
    let plus = |set| Plus(Box::new(Set(set)));
    let ids = || {
        Cat(vec![
            plus(IDENT),
            Star(Box::new(Cat(vec![lit("."), plus(IDENT)]))),
        ])
    };
    let opt = |n: Node| Opt(Box::new(n));
    group(
        at(0),
        Cat(vec![
            opt(lit("v")),
            group(at(1), plus(PART)),
            opt(group(at(2), Cat(vec![lit("."), plus(PART)]))),
            opt(group(at(3), Cat(vec![lit("."), plus(PART)]))),
            opt(group(at(4), Cat(vec![lit("-"), ids()]))),
            opt(Cat(vec![lit("+"), ids()])),
        ]),
    )
}

/// `node` as capture group `n`, or as is.
fn group(n: Option<usize>, node: Node) -> Node {
    match n {
        Some(n) => Node::Group(n, Box::new(node)),
        None => node,
    }
}

/// The ASCII text `s`, byte by byte.
fn lit(s: &str) -> Node {
    Node::Cat(s.bytes().map(|b| Node::Set(ByteSet::of(&[b]))).collect())
}

/// A set of ASCII bytes.
#[derive(Debug, Clone, Copy)]
struct ByteSet(u128);

impl ByteSet {
    const fn of(bytes: &[u8]) -> ByteSet {
        let mut bits = 0u128;
        let mut i = 0;
        while i < bytes.len() {
            bits |= 1 << (bytes[i] & 0x7f);
            i += 1;
        }
        ByteSet(bits)
    }

    fn contains(self, b: u8) -> bool {
        b < 128 && (self.0 >> b) & 1 == 1
    }
}

/// A regular expression over ASCII bytes; alternatives and repetitions
/// prefer their first choice and the longest repetition, as Go's (and
/// Perl's) leftmost-first matching does.
enum Node {
    Set(ByteSet),
    Cat(Vec<Node>),
    Alt(Vec<Node>),
    Opt(Box<Node>),
    Star(Box<Node>),
    Plus(Box<Node>),
    Group(usize, Box<Node>),
    Start,
    End,
}

/// A compiled [`Node`]: instructions for a backtracking matcher.
#[derive(Debug, Clone, Copy)]
enum Inst {
    Byte(ByteSet),
    /// Try the first target, then the second.
    Split(usize, usize),
    Jump(usize),
    Save(usize),
    Start,
    End,
    Match,
}

/// A compiled pattern; slots 0 and 1 are the whole match, `2n` and `2n+1`
/// group n.
struct Program {
    insts: Vec<Inst>,
    slots: usize,
    anchored: bool,
}

impl Program {
    fn compile(node: Node) -> Program {
        let anchored =
            matches!(&node, Node::Cat(nodes) if matches!(nodes.first(), Some(Node::Start)));
        let mut insts = vec![Inst::Save(0)];
        let mut slots = 2;
        emit(&node, &mut insts, &mut slots);
        insts.push(Inst::Save(1));
        insts.push(Inst::Match);
        Program {
            insts,
            slots,
            anchored,
        }
    }

    /// The leftmost match starting at or after byte `from` (at character
    /// boundaries), the first in order of preference there; its slots.
    /// Each (instruction, position) state is explored at most once, so the
    /// search takes time linear in the text for a given pattern.
    fn search(&self, text: &str, from: usize) -> Option<Vec<Option<usize>>> {
        let bytes = text.as_bytes();
        let width = bytes.len() + 1;
        let mut visited = vec![0u64; (self.insts.len() * width).div_ceil(64)];
        let last = if self.anchored {
            from.min(bytes.len())
        } else {
            bytes.len()
        };
        (from..=last)
            .filter(|&start| text.is_char_boundary(start))
            .find_map(|start| self.try_at(bytes, start, &mut visited))
    }

    /// The preferred match starting exactly at `start`, skipping states
    /// in `visited` (they failed before) and marking those it explores.
    fn try_at(
        &self,
        bytes: &[u8],
        start: usize,
        visited: &mut [u64],
    ) -> Option<Vec<Option<usize>>> {
        enum Job {
            Run(usize, usize),
            Restore(usize, Option<usize>),
        }
        let width = bytes.len() + 1;
        let mut slots = vec![None; self.slots];
        let mut jobs = vec![Job::Run(0, start)];
        while let Some(job) = jobs.pop() {
            let (mut pc, mut pos) = match job {
                Job::Restore(slot, old) => {
                    slots[slot] = old;
                    continue;
                }
                Job::Run(pc, pos) => (pc, pos),
            };
            loop {
                let bit = pc * width + pos;
                let (word, mask) = (bit / 64, 1u64 << (bit % 64));
                if visited[word] & mask != 0 {
                    break;
                }
                visited[word] |= mask;
                match self.insts[pc] {
                    Inst::Byte(set) => match bytes.get(pos) {
                        Some(&b) if set.contains(b) => (pc, pos) = (pc + 1, pos + 1),
                        _ => break,
                    },
                    Inst::Split(first, second) => {
                        jobs.push(Job::Run(second, pos));
                        pc = first;
                    }
                    Inst::Jump(to) => pc = to,
                    Inst::Save(slot) => {
                        jobs.push(Job::Restore(slot, slots[slot]));
                        slots[slot] = Some(pos);
                        pc += 1;
                    }
                    Inst::Start if pos == 0 => pc += 1,
                    Inst::End if pos == bytes.len() => pc += 1,
                    Inst::Start | Inst::End => break,
                    Inst::Match => return Some(slots),
                }
            }
        }
        None
    }
}

/// Appends the instructions of `node` to `insts`.
fn emit(node: &Node, insts: &mut Vec<Inst>, slots: &mut usize) {
    match node {
        Node::Set(set) => insts.push(Inst::Byte(*set)),
        Node::Cat(nodes) => nodes.iter().for_each(|n| emit(n, insts, slots)),
        Node::Alt(nodes) => {
            let mut exits = Vec::new();
            for (i, n) in nodes.iter().enumerate() {
                if i + 1 == nodes.len() {
                    emit(n, insts, slots);
                    break;
                }
                let split = insts.len();
                insts.push(Inst::Split(split + 1, 0));
                emit(n, insts, slots);
                exits.push(insts.len());
                insts.push(Inst::Jump(0));
                insts[split] = Inst::Split(split + 1, insts.len());
            }
            let end = insts.len();
            for exit in exits {
                insts[exit] = Inst::Jump(end);
            }
        }
        Node::Opt(n) => {
            let split = insts.len();
            insts.push(Inst::Split(split + 1, 0));
            emit(n, insts, slots);
            insts[split] = Inst::Split(split + 1, insts.len());
        }
        Node::Star(n) => {
            let split = insts.len();
            insts.push(Inst::Split(split + 1, 0));
            emit(n, insts, slots);
            insts.push(Inst::Jump(split));
            insts[split] = Inst::Split(split + 1, insts.len());
        }
        Node::Plus(n) => {
            let top = insts.len();
            emit(n, insts, slots);
            insts.push(Inst::Split(top, insts.len() + 1));
        }
        Node::Group(g, n) => {
            *slots = (*slots).max(2 * g + 2);
            insts.push(Inst::Save(2 * g));
            emit(n, insts, slots);
            insts.push(Inst::Save(2 * g + 1));
        }
        Node::Start => insts.push(Inst::Start),
        Node::End => insts.push(Inst::End),
    }
}

#[cfg(test)]
mod tests;
