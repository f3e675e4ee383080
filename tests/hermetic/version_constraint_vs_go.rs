//! `domain::version_constraint` against the Go library it mirrors,
//! `github.com/Masterminds/semver/v3`: the same constraints and versions go
//! to both, and every answer must agree.
//!
//! The Go side is the peer `tests/go/semver-peer` (one process, all the
//! questions in one batch); `scripts/build-semver-peer.sh` builds it and
//! prints its path:
//!
//! ```sh
//! KRM_FN_SEMVER_PEER="$(scripts/build-semver-peer.sh)" \
//!   cargo test --test hermetic version_constraint_vs_go:: -- --nocapture
//! ```
//!
//! Without `KRM_FN_SEMVER_PEER` the test says so and passes without
//! checking anything. The questions are a fixed list of edge cases and
//! generated ones (operators, spacing, commas, `||`, hyphen ranges,
//! wildcards, partial versions, a leading `v`, prereleases, build metadata,
//! huge numbers, stray characters), from a seeded generator: the seed is
//! printed, and `KRM_FN_SEMVER_SEED=N` replays it; `KRM_FN_SEMVER_CASES=N`
//! sets how many constraint questions are generated (default 24,000, plus
//! a quarter as many version comparisons).

use std::io::{Read, Write};
use std::process::{Command, Stdio};

use krm_fn_runner::domain::version_constraint::{Constraint, Version};

/// How many generated constraint questions by default.
const DEFAULT_CASES: usize = 24_000;
/// Versions asked about each generated constraint.
const VERSIONS_PER_CONSTRAINT: usize = 4;
/// Mismatches listed when the answers differ.
const SHOWN: usize = 20;

/// One question, asked of both sides.
enum Question {
    /// Does the version satisfy the constraint?
    Check { constraint: String, version: String },
    /// How do the versions compare?
    Compare { a: String, b: String },
}

impl Question {
    /// The peer's input line (fields escaped as the peer expects).
    fn line(&self) -> String {
        match self {
            Question::Check {
                constraint,
                version,
            } => format!("C\t{}\t{}", escape(constraint), escape(version)),
            Question::Compare { a, b } => format!("V\t{}\t{}", escape(a), escape(b)),
        }
    }

    /// Our answer, in the peer's output format.
    fn ours(&self) -> String {
        match self {
            Question::Check {
                constraint,
                version,
            } => match Constraint::parse(constraint) {
                Err(_) => "badc".into(),
                Ok(c) => match Version::parse(version) {
                    Err(_) => "badv".into(),
                    Ok(v) => format!("ok\t{}", c.matches(&v)),
                },
            },
            Question::Compare { a, b } => match (Version::parse(a), Version::parse(b)) {
                (Ok(a), Ok(b)) => format!("cmp\t{}", a.cmp(&b) as i8),
                _ => "badv".into(),
            },
        }
    }
}

/// The peer's field escaping: backslash, tab, newline, CR, FF and VT.
fn escape(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    for ch in field.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            _ => out.push(ch),
        }
    }
    out
}

/// xorshift64*: small, seedable, good enough to spread test inputs.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        // One splitmix64 step spreads nearby seeds apart; zero is
        // xorshift's fixed point.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)).max(1))
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n` > 0).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True `percent` times in a hundred.
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

/// Version numbers: mostly small (so that constraints and versions meet),
/// some with leading zeros; when `noisy`, some at and past `u64::MAX`.
fn number(rng: &mut Rng, noisy: bool) -> String {
    if rng.chance(85) {
        return rng.below(4).to_string();
    }
    if noisy && rng.chance(50) {
        return rng
            .pick(&[
                "18446744073709551615",
                "18446744073709551616",
                "99999999999999999999",
            ])
            .to_owned();
    }
    rng.pick(&["10", "01", "00", "007"]).to_owned()
}

/// Dot-separated identifiers for a prerelease (`pre`) or metadata; when
/// `noisy`, some empty or with a leading zero.
fn identifiers(rng: &mut Rng, pre: bool, noisy: bool) -> String {
    const PRE: &[&str] = &[
        "alpha",
        "beta",
        "rc",
        "0",
        "1",
        "2",
        "10",
        "11",
        "-",
        "a-b",
        "x",
        "X",
        "1a",
        "0a",
        "alpha1",
        "99999999999999999999",
        "18446744073709551616",
    ];
    const META: &[&str] = &["build", "001", "sha-1f2e", "1", "x", "-", "exp.sha"];
    let count = 1 + rng.below(3);
    let ids: Vec<&str> = (0..count)
        .map(|_| match noisy && rng.chance(15) {
            true => rng.pick(&["", "01", "00", "é"]),
            false => rng.pick(if pre { PRE } else { META }),
        })
        .collect();
    ids.join(".")
}

/// Characters that the grammar gives a meaning to, and a few it does not.
const GARBAGE: &[&str] = &[
    "x", "X", "*", "|", "||", "-", "+", ".", ",", " ", "\t", "\n", "\u{b}", "\u{c}", "\r", "v",
    "V", "=", ">", "<", "~", "^", "!", "a", "é", "１", "\\", "0", "9",
];

/// A version text: sometimes partial, wildcarded (`wild`), with a `v`, a
/// prerelease or metadata; when `noisy`, also with four numbers, a wrong
/// prefix, a malformed wildcard or a stray character.
fn version(rng: &mut Rng, wild: bool, noisy: bool) -> String {
    let mut out = String::new();
    if rng.chance(12) {
        out.push_str(if noisy {
            rng.pick(&["v", "V", "vv", " "])
        } else {
            "v"
        });
    }
    let parts = match rng.below(20) {
        0 if noisy => 4,
        1..=4 => 1,
        5..=8 => 2,
        _ => 3,
    };
    for i in 0..parts {
        if i > 0 {
            out.push('.');
        }
        if wild && rng.chance(20) {
            out.push_str(match noisy && rng.chance(30) {
                true => rng.pick(&["xx", "1x", "|", "x|", "**"]),
                false => rng.pick(&["x", "X", "*"]),
            });
        } else {
            out.push_str(&number(rng, noisy));
        }
    }
    if rng.chance(30) {
        out.push('-');
        out.push_str(&identifiers(rng, true, noisy));
    }
    if rng.chance(12) {
        out.push('+');
        out.push_str(&identifiers(rng, false, noisy));
    }
    if noisy && rng.chance(10) {
        let at = (0..=out.len())
            .filter(|&i| out.is_char_boundary(i))
            .nth(rng.below(out.len() + 1))
            .unwrap_or(0);
        out.insert_str(at, rng.pick(GARBAGE));
    }
    out
}

/// A version to check a constraint with: small numbers, complete or not.
fn candidate(rng: &mut Rng) -> String {
    if rng.chance(10) {
        let noisy = rng.chance(30);
        return version(rng, false, noisy);
    }
    let mut out = format!("{}.{}.{}", rng.below(4), rng.below(4), rng.below(4));
    if rng.chance(25) {
        out.push('-');
        out.push_str(rng.pick(&["alpha", "beta", "rc.1", "0", "beta.2", "alpha.10"]));
    }
    if rng.chance(5) {
        out.push_str("+build");
    }
    out
}

/// One comparison or hyphen range.
fn term(rng: &mut Rng, noisy: bool) -> String {
    if rng.chance(15) {
        let dash = match noisy {
            true => rng.pick(&[" -", "- ", "-", " - - ", " -\t", "\t-\n", "\u{b}-\u{b}"]),
            false => rng.pick(&[" - ", " - ", "  -  ", " -\t", "\t-\n"]),
        };
        return format!(
            "{}{dash}{}",
            version(rng, true, noisy),
            version(rng, true, noisy)
        );
    }
    let op = match noisy && rng.chance(20) {
        true => rng.pick(&["==", "<>", "!", "=~", "~=", "^^", ">>", "≥", "=>=", "~>="]),
        false => rng.pick(&[
            "", "", "=", "!=", ">", "<", ">=", "=>", "<=", "=<", "~", "~>", "^", "", ">=", "<",
            "^", "~",
        ]),
    };
    let gap = rng.pick(&["", "", "", " ", "  ", "\t"]);
    format!("{op}{gap}{}", version(rng, true, noisy))
}

/// A constraint: alternatives of comparisons with varied separators; one
/// in four is `noisy` (malformed pieces, and now and then a random string
/// over the grammar's characters).
fn constraint(rng: &mut Rng) -> String {
    let noisy = rng.chance(25);
    if noisy && rng.chance(20) {
        const ALPHABET: &[&str] = &[
            "0", "1", "2", ".", ".", "x", "*", "|", "-", "+", "v", " ", " ", ",", "<", ">", "=",
            "!", "~", "^", "a",
        ];
        return (0..1 + rng.below(14)).map(|_| rng.pick(ALPHABET)).collect();
    }
    let groups = match rng.below(10) {
        0..=5 => 1,
        6..=8 => 2,
        _ => 3 + rng.below(3),
    };
    let mut out = String::new();
    if rng.chance(5) {
        out.push_str(rng.pick(&[" ", "\t", "  ", ","]));
    }
    for g in 0..groups {
        if g > 0 {
            out.push_str(match noisy && rng.chance(30) {
                true => rng.pick(&["|", "|||", " | ", "||||"]),
                false => rng.pick(&[" || ", "||", " || ", "|| ", " ||", "  ||  "]),
            });
        }
        let terms = 1 + rng.below(3);
        for t in 0..terms {
            if t > 0 {
                out.push_str(match noisy && rng.chance(30) {
                    true => rng.pick(&[",,", "", "\u{b}", ";", " ,,"]),
                    false => {
                        rng.pick(&[",", ", ", " ", " ", "  ", " , ", ",\t", "\n", "\u{c}", "\r"])
                    }
                });
            }
            out.push_str(&term(rng, noisy));
        }
    }
    if rng.chance(5) {
        out.push_str(rng.pick(&[" ", "\t", ",", " ,", "\n"]));
    }
    out
}

/// Hand-picked cases: each operator and alias, wildcards, ranges, the
/// prerelease rule, the library's quirks, and the limits.
fn edge_cases() -> Vec<Question> {
    let constraints: Vec<String> = [
        "",
        " ",
        "*",
        "x",
        "X",
        "x.x.x",
        "x.1.2",
        "1.x.3",
        "1.x.|",
        "1.xx",
        "1|2",
        "~0.4 |",
        "^*",
        "^x",
        "<=*",
        "<=x",
        ">*",
        "<*",
        "!=*",
        ">=*",
        "~*",
        "~0.0.0",
        "~0",
        "~0.0",
        "~0.0.x",
        "^0",
        "^0.0",
        "^0.0.0",
        "^0.0.3",
        "^0.2.3",
        "^0.x",
        "^1.x",
        "=1.2.3",
        "1.2.3",
        "v1.2.3",
        "=v1",
        "V1",
        "!=1.2.3",
        "!=1.x",
        "!=1.2.x",
        "!=1.2.x-beta",
        ">1.2",
        ">1",
        ">1.2.x-0",
        "<1.x",
        "<=1.2",
        "=<1",
        "=>1.2",
        "~>1.2.3",
        "~1.2.3-beta.2",
        "^1.2.3-beta",
        ">=1.2.0-0",
        "<2.0.0-0",
        ">=1.0.0-beta, <2",
        ">=1.0.0-beta || <2",
        "<2 || >=1.0.0-beta",
        "1.2 - 1.4.5",
        "1.2.3  -  2",
        "1 - 2, !=1.5.0",
        ">=1 1 - 2",
        "1 ||2 - 3",
        "1 || 2 - 3",
        "1 - 2||3 - 4",
        "1 - 2 || 3 - 4",
        "1 - 2||3",
        "1.2 -1.4",
        "1 - 2 - 3",
        "1 - 2 - 3 - 4",
        "x - 1",
        "1 - x",
        "1.0.0-a - 2.0.0-b",
        ">=1.2,,<2",
        ">=1.2, <2",
        ">=1.2 <2",
        "\t>=1.2\n<2 ",
        ">=1.2\u{b}<2",
        ">=1.2\u{c}<2",
        "~1.2 || ~2.3",
        "1.2||2.3",
        "||1",
        "1 ||",
        "|||",
        ">=",
        "==1",
        "<>1",
        ">=1.2.3<2",
        "1.2.3.4",
        ">=18446744073709551615",
        ">=18446744073709551616",
        "1.2.3-01",
        ">=1.2.3-00.x",
        "1.2.3+01",
        "≥1",
        "1.2.3-é",
        "v",
        "vx",
        "v*",
        "-1",
        "+1",
        "1,",
        ",1",
        " ,1",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([
        "1".repeat(512),
        "1".repeat(513),
        format!("{}1", " ".repeat(511)),
        format!(">=1.0.0-{}", "a".repeat(249)),
        format!(">=1.0.0-{}", "a".repeat(250)),
        format!(">=1.x-{}", "a".repeat(300)),
        vec!["1"; 32].join("||"),
        vec!["1"; 33].join("||"),
        vec!["1 - 2"; 40].join(" "),
        "1 ".repeat(256),
    ])
    .collect();
    let versions: Vec<String> = [
        "0.0.0",
        "0.0.1",
        "0.0.3",
        "0.0.4",
        "0.1.0",
        "0.2.9",
        "0.3.0",
        "0.9.0",
        "1.0.0",
        "1.0.0-alpha",
        "1.2.0",
        "1.2.2",
        "1.2.3",
        "1.2.3-beta",
        "1.2.3-beta.10",
        "1.2.4",
        "1.2.5",
        "1.2.5-beta",
        "1.3.0",
        "1.4.5",
        "1.4.6",
        "1.5.0",
        "1.5.0-beta",
        "1.9.0-rc",
        "2.0.0",
        "2.0.0-0",
        "2.3.9",
        "2.5.0",
        "3.0.0",
        "v1.2.3+meta",
        "01.2.3",
        "18446744073709551615.0.0",
        "18446744073709551616",
        "",
        "1.2.3.4",
        "V1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut questions = Vec::new();
    for c in &constraints {
        for v in &versions {
            questions.push(Question::Check {
                constraint: c.clone(),
                version: v.clone(),
            });
        }
    }
    let ordered = [
        "1.0.0-0",
        "1.0.0-2",
        "1.0.0-10",
        "1.0.0-18446744073709551615",
        "1.0.0--",
        "1.0.0-99999999999999999999",
        "1.0.0-100000000000000000000",
        "1.0.0-alpha",
        "1.0.0-alpha.1",
        "1.0.0-alpha.beta",
        "1.0.0-beta.11",
        "1.0.0-rc.1",
        "1.0.0",
        "1.0.0+x",
        "v1",
        "1.0.0-A",
        "1.0.0-a-",
        "1.0.0-0a",
    ];
    for a in ordered {
        for b in ordered {
            questions.push(Question::Compare {
                a: a.into(),
                b: b.into(),
            });
        }
    }
    questions
}

/// Runs the peer once on all the questions' lines; its answers.
fn ask_peer(peer: &str, input: String) -> Vec<String> {
    let mut child = Command::new(peer)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run the semver peer {peer}: {e}"));
    let mut stdin = child.stdin.take().expect("peer stdin");
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let mut output = String::new();
    child
        .stdout
        .take()
        .expect("peer stdout")
        .read_to_string(&mut output)
        .expect("read the peer's answers");
    writer
        .join()
        .expect("writer thread")
        .expect("write the questions to the peer");
    let status = child.wait().expect("wait for the peer");
    assert!(status.success(), "the semver peer {peer} failed: {status}");
    output.lines().map(str::to_owned).collect()
}

#[test]
fn constraints_and_versions_agree_with_masterminds_semver() {
    let Ok(peer) = std::env::var("KRM_FN_SEMVER_PEER") else {
        println!(
            "skipped: set KRM_FN_SEMVER_PEER to the Go peer's path, e.g. \
             KRM_FN_SEMVER_PEER=\"$(scripts/build-semver-peer.sh)\""
        );
        return;
    };
    let seed = match std::env::var("KRM_FN_SEMVER_SEED") {
        Ok(text) => text
            .parse::<u64>()
            .unwrap_or_else(|_| panic!("KRM_FN_SEMVER_SEED={text:?} is not a number")),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
    };
    let cases = match std::env::var("KRM_FN_SEMVER_CASES") {
        Ok(text) => text
            .parse::<usize>()
            .unwrap_or_else(|_| panic!("KRM_FN_SEMVER_CASES={text:?} is not a number")),
        Err(_) => DEFAULT_CASES,
    };
    println!("semver differential: seed {seed} (KRM_FN_SEMVER_SEED={seed} replays it)");

    let mut rng = Rng::new(seed);
    let mut questions = edge_cases();
    let fixed = questions.len();
    for _ in 0..cases.div_ceil(VERSIONS_PER_CONSTRAINT) {
        let c = constraint(&mut rng);
        for _ in 0..VERSIONS_PER_CONSTRAINT {
            questions.push(Question::Check {
                constraint: c.clone(),
                version: candidate(&mut rng),
            });
        }
    }
    for _ in 0..cases / 4 {
        let (a, b) = if rng.chance(70) {
            (candidate(&mut rng), candidate(&mut rng))
        } else {
            (
                version(&mut rng, false, true),
                version(&mut rng, false, false),
            )
        };
        questions.push(Question::Compare { a, b });
    }

    let input: String = questions.iter().map(|q| q.line() + "\n").collect();
    let theirs = ask_peer(&peer, input);
    assert_eq!(
        theirs.len(),
        questions.len(),
        "the peer answered {} lines to {} questions",
        theirs.len(),
        questions.len()
    );

    let mut differing = Vec::new();
    let mut verdicts = [0usize; 4];
    for (q, go) in questions.iter().zip(&theirs) {
        let ours = q.ours();
        verdicts[match go.as_str() {
            "ok\ttrue" => 0,
            "ok\tfalse" => 1,
            "badc" | "badv" => 2,
            _ => 3,
        }] += 1;
        if &ours != go {
            differing.push(format!("{}  ours: {:?}  Go: {:?}", q.line(), ours, go));
        }
    }
    println!(
        "semver differential: {} questions ({fixed} fixed, {} generated); Go answered {} true, \
         {} false, {} rejected, {} comparisons",
        questions.len(),
        questions.len() - fixed,
        verdicts[0],
        verdicts[1],
        verdicts[2],
        verdicts[3]
    );
    assert!(
        differing.is_empty(),
        "{} of {} answers differ from Masterminds semver (seed {seed}); the first {}:\n{}",
        differing.len(),
        questions.len(),
        differing.len().min(SHOWN),
        differing
            .iter()
            .take(SHOWN)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
