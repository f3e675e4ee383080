use super::*;

fn v(text: &str) -> Version {
    Version::parse(text).unwrap_or_else(|e| panic!("{e}"))
}

fn c(text: &str) -> Constraint {
    Constraint::parse(text).unwrap_or_else(|e| panic!("{e}"))
}

/// Asserts, for each (constraint, version, expected) row, the answer.
fn check(rows: &[(&str, &str, bool)]) {
    for &(constraint, version, want) in rows {
        assert_eq!(
            c(constraint).matches(&v(version)),
            want,
            "{constraint:?} against {version:?}"
        );
    }
}

#[test]
fn versions_parse_loosely_with_their_parts() {
    let x = v("v1.2.3-rc.1+build.5");
    assert_eq!((x.major(), x.minor(), x.patch()), (1, 2, 3));
    assert_eq!((x.prerelease(), x.metadata()), ("rc.1", "build.5"));
    assert_eq!(x.original(), "v1.2.3-rc.1+build.5");
    assert_eq!(x.to_string(), "1.2.3-rc.1+build.5");
    assert_eq!(v("1").to_string(), "1.0.0");
    assert_eq!(v("2.5").to_string(), "2.5.0");
    assert_eq!(v("01.002.0003").to_string(), "1.2.3");
    assert_eq!(v("1-beta").to_string(), "1.0.0-beta");
    assert_eq!(v("1.2.3--").prerelease(), "-");
    assert_eq!(v("1+meta").metadata(), "meta");
    assert_eq!(v("18446744073709551615.0.0").major(), u64::MAX);
    assert_eq!("1.2".parse::<Version>(), Ok(v("1.2.0")));
}

#[test]
fn malformed_versions_are_rejected() {
    for text in [
        "",
        "v",
        "V1.2.3",
        " 1.2.3",
        "1.2.3 ",
        "1.2.3.4",
        "1..2",
        "1.",
        "1.2.",
        "x",
        "1.x",
        "1.2.3-",
        "1.2.3+",
        "1.2.3-a..b",
        "1.2.3-.a",
        "1.2.3-a.",
        "1.2.3+a+b",
        "1.2.3-é",
        "vv1",
        "=1.2.3",
        "1,2",
    ] {
        let err = Version::parse(text).expect_err(text);
        assert_eq!(err.kind(), &VersionErrorKind::Malformed, "{text:?}");
        assert_eq!(err.input(), text);
    }
    let leading = Version::parse("1.2.3-01").expect_err("leading zero");
    assert_eq!(
        leading.kind(),
        &VersionErrorKind::PrereleaseLeadingZero {
            identifier: "01".into()
        }
    );
    assert!(Version::parse("1.2.3-0.0a.00x").is_ok());
    let huge = Version::parse("1.18446744073709551616").expect_err("too large");
    assert_eq!(
        huge.kind(),
        &VersionErrorKind::NumberTooLarge { segment: "minor" }
    );
    assert!(
        huge.to_string()
            .contains("\"1.18446744073709551616\" is not a valid version"),
        "{huge}"
    );
    let long = format!("1.0.0-{}", "a".repeat(251));
    assert_eq!(
        Version::parse(&long).map_err(|e| e.kind().clone()).err(),
        Some(VersionErrorKind::TooLong)
    );
    assert!(Version::parse(&long[..MAX_VERSION_LEN]).is_ok());
}

#[test]
fn versions_order_by_semver_precedence_ignoring_metadata() {
    let ascending = [
        "0.9.9",
        "1.0.0-0",
        "1.0.0-2",
        "1.0.0-10",
        "1.0.0-18446744073709551615",
        "1.0.0--",
        "1.0.0-99999999999999999999",
        "1.0.0-alpha",
        "1.0.0-alpha.1",
        "1.0.0-alpha.beta",
        "1.0.0-beta",
        "1.0.0-beta.2",
        "1.0.0-beta.11",
        "1.0.0-rc.1",
        "1.0.0",
        "1.0.1",
        "1.1.0",
        "2.0.0",
    ];
    for pair in ascending.windows(2) {
        assert!(v(pair[0]) < v(pair[1]), "{} < {}", pair[0], pair[1]);
    }
    assert_eq!(v("1.0.0+a"), v("v1+b"));
    assert_eq!(v("1.0.0-rc+a").cmp(&v("1.0.0-rc")), Ordering::Equal);
    // Numeric identifiers beyond u64 compare as text.
    assert!(v("1.0.0-100000000000000000000") < v("1.0.0-99999999999999999999"));
}

#[test]
fn equal_and_not_equal() {
    check(&[
        ("1.2.3", "1.2.3", true),
        ("=1.2.3", "v1.2.3+meta", true),
        ("= 1.2.3", "1.2.4", false),
        ("v1.2", "1.3.0", false),
        ("1.2", "1.2.9", true),
        ("=1", "1.9.0", true),
        ("!=1.2.3", "1.2.3", false),
        ("!=1.2.3", "1.2.4", true),
        ("!=1.x", "1.5.0", false),
        ("!=1.x", "2.0.0", true),
        ("!=1.2.x", "1.2.7", false),
        ("!=1.2.x", "1.3.0", true),
        ("!=*", "0.0.0", false),
        ("!=*", "0.0.1", true),
    ]);
}

#[test]
fn ordering_operators_and_their_aliases() {
    check(&[
        (">1.2.3", "1.2.4", true),
        (">1.2.3", "1.2.3", false),
        (">1.2", "1.2.9", false),
        (">1.2", "1.3.0", true),
        (">1", "1.9.9", false),
        (">1", "2.0.0", true),
        ("<1.2.3", "1.2.2", true),
        ("<1.2.3", "1.2.3", false),
        ("<1.2", "1.1.9", true),
        ("<1.2", "1.2.0", false),
        (">=1.2.3", "1.2.3", true),
        ("=>1.2.3", "1.2.2", false),
        ("<=1.2.3", "1.2.3", true),
        ("=<1.2.3", "1.2.4", false),
        ("<=1.2", "1.2.9", true),
        ("<=1.2", "1.3.0", false),
        ("<=1", "1.9.9", true),
        ("<=1", "2.0.0", false),
    ]);
}

#[test]
fn tilde_and_caret_including_zero_majors() {
    check(&[
        ("~1.2.3", "1.2.9", true),
        ("~1.2.3", "1.3.0", false),
        ("~>1.2", "1.2.0", true),
        ("~1", "1.9.0", true),
        ("~1", "2.0.0", false),
        ("~0.0.0", "5.0.0", true),
        ("~0", "0.9.0", true),
        ("~0", "1.0.0", false),
        ("~0.0.x", "0.0.9", true),
        ("~0.0.x", "0.1.0", false),
        ("^1.2.3", "1.9.0", true),
        ("^1.2.3", "2.0.0", false),
        ("^1.2.3", "1.2.2", false),
        ("^0.2.3", "0.2.9", true),
        ("^0.2.3", "0.3.0", false),
        ("^0.0.3", "0.0.3", true),
        ("^0.0.3", "0.0.4", false),
        ("^0.0", "0.0.9", true),
        ("^0.0", "0.1.0", false),
        ("^0", "0.9.0", true),
        ("^0", "1.0.0", false),
        ("^0.0.0", "0.0.1", false),
    ]);
}

#[test]
fn wildcards_in_any_position() {
    check(&[
        ("*", "0.0.0", true),
        ("*", "99.1.2", true),
        ("x", "3.0.0", true),
        ("1.x", "1.4.0", true),
        ("1.X", "2.0.0", false),
        ("1.*.*", "1.0.0", true),
        ("1.2.x", "1.2.7", true),
        ("1.2.x", "1.3.0", false),
        ("x.1.2", "7.0.0", true),
        ("1.x.3", "1.0.0", true),
        (">=1.x", "1.0.0", true),
        ("<1.x", "0.9.0", true),
        ("<1.x", "1.0.0", false),
        (">1.x", "2.0.0", true),
        // The library reads `*` as 0.0.0 for these two.
        ("^*", "0.0.0", true),
        ("^*", "1.0.0", false),
        ("<=*", "0.0.5", true),
        ("<=*", "0.1.0", false),
        (">*", "0.0.0", false),
        (">*", "0.0.1", true),
    ]);
}

#[test]
fn hyphen_ranges_and_lists() {
    check(&[
        ("1.2 - 1.4.5", "1.2.0", true),
        ("1.2 - 1.4.5", "1.4.5", true),
        ("1.2 - 1.4.5", "1.4.6", false),
        ("1.2 - 1.4", "1.4.9", true),
        ("1.2 - 1.4", "1.5.0", false),
        ("1.2.3  -  2", "2.0.0", true),
        ("1 - 2, !=1.5.0", "1.5.0", false),
        (">=1.2, <2", "1.9.9", true),
        (">=1.2 <2", "2.0.0", false),
        (">= 1.2 , < 2", "1.5.0", true),
        ("\t>=1.2\n<2 ", "1.5.0", true),
    ]);
}

#[test]
fn alternatives() {
    check(&[
        ("~1.2 || ~2.3", "2.3.9", true),
        ("~1.2 || ~2.3", "2.4.0", false),
        ("1.2||2.3", "1.2.0", true),
        ("1 || 2 - 3", "2.5.0", true),
        // The range's upper bound is `2||3`: split, `<= 2` or `3`.
        ("1 - 2||3", "3.0.0", true),
        ("1 - 2||3", "4.0.0", false),
        ("<1 || >3", "2.0.0", false),
    ]);
    assert!(Constraint::parse(&vec!["1"; MAX_ALTERNATIVES].join("||")).is_ok());
    let many =
        Constraint::parse(&vec!["1"; MAX_ALTERNATIVES + 1].join("||")).expect_err("too many");
    assert_eq!(
        many.kind(),
        &ConstraintErrorKind::TooManyAlternatives { count: 33 }
    );
}

#[test]
fn prereleases_need_an_alternative_that_names_one() {
    check(&[
        (">=1.2.0", "1.5.0-beta", false),
        ("*", "1.0.0-rc.1", false),
        (">=1.2.0-0", "1.5.0-beta", true),
        (">=1.2.0-0", "1.5.0", true),
        ("<2.0.0-0", "1.9.0-rc", true),
        (">=1.0.0-beta, <2", "1.5.0-alpha", true),
        (">=1.0.0-beta, <2", "1.0.0-alpha", false),
        (">=1.0.0-beta || <2", "1.5.0-alpha", true),
        ("<2 || >=1.0.0-beta", "1.5.0-alpha", true),
        (">=1 || >=1.0.0-beta", "0.9.0-alpha", false),
        ("1.2.3-beta", "1.2.3-beta+build", true),
        ("1.2.x-beta", "1.2.5-beta", true),
        ("!=1.2.x-beta", "1.2.5", true),
        ("!=1.2.x-beta", "1.2.5-beta", false),
        ("~1.2.3-beta.2", "1.2.3-beta.10", true),
        ("^1.2.3-beta", "1.9.0-alpha", true),
    ]);
}

#[test]
fn rejected_constraints() {
    for text in [
        "",
        " ",
        "~0.4 |",
        "||1",
        "1 ||",
        ">=",
        "==1",
        "<>1",
        ">=1.2.3<2",
        "1.2.3.4",
        ">= 1,",
        ">=1.2,,<2",
        "1.2 -1.4",
        ">=1 1 - 2",
        "1 ||2 - 3",
        "1 - 2||3 - 4",
        "=V1",
        "1.2.3-",
        "1.2.3-a..b",
        "1|2",
        "1.xx",
        "1.2.3-01",
        ">=18446744073709551616",
        "\u{b}1",
        "1.2\u{b}",
        "≥1",
    ] {
        let err = Constraint::parse(text).expect_err(text);
        assert_eq!(err.input(), text);
        assert!(
            err.to_string()
                .starts_with(&format!("{text:?} is not a valid version constraint: ")),
            "{err}"
        );
    }
    let err = Constraint::parse("~0.4 ~").expect_err("improper");
    assert_eq!(
        err.kind(),
        &ConstraintErrorKind::Improper {
            alternative: "~0.4 ~".into()
        }
    );
    // `|` is a version character: " |" is the comparison `=|`.
    let err = Constraint::parse("~0.4 |").expect_err("bad version");
    let ConstraintErrorKind::InvalidVersion { comparison, .. } = err.kind() else {
        panic!("{err:?}");
    };
    assert_eq!(comparison, " |");
    let err = Constraint::parse(">=1.2.3-01").expect_err("bad version");
    assert!(std::error::Error::source(&err).is_some());
    assert!(Constraint::parse(&"1".repeat(MAX_CONSTRAINT_LEN + 1)).is_err());
    assert!(Constraint::parse(&format!("{}1", " ".repeat(MAX_CONSTRAINT_LEN - 1))).is_ok());
}

#[test]
fn constraints_keep_their_text() {
    let x = c(" ~1.2 || 2 ");
    assert_eq!(x.text(), " ~1.2 || 2 ");
    assert_eq!(x.to_string(), " ~1.2 || 2 ");
}

#[test]
fn hostile_input_is_answered_without_panicking() {
    let spaces = format!("1{}x", " ".repeat(500));
    let texts = [
        spaces.as_str(),
        "1 - 2 - 3 - 4",
        "|||||",
        "- - -",
        "v",
        "1.2.3-x - 1.2.3+x - ",
        "é - ü",
    ];
    for text in texts {
        let _ = Constraint::parse(text);
        let _ = Version::parse(text);
    }
    let deep = "1 ".repeat(MAX_CONSTRAINT_LEN / 2);
    assert!(c(&deep).matches(&v("1.0.0")));
}
