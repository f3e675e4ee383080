//! Pod names: readable, valid, and never the name of another live pod.
//!
//! Porch names pods `<name>-<tag>-<N>-<digest[0:8]>` with `N` = the current
//! slot count, so after a removal a new pod can take a live pod's name (and
//! creating it deletes the live one), digest references yield names with
//! `sha256:` in them and long names exceed 63 characters (spec §10 items 7–8).
//!
//! Here a name is `<function>-<tag>-<hash>-<replica>-<seq>`:
//! - `<function>-<tag>`: the image's last path segment and its tag with dots
//!   removed (Porch's readable part), or `sha256-<8 hex>` for digest-only
//!   references; shortened so the whole name fits in 63 characters;
//! - `<hash>`: 8 hex digits of a stable hash of the full image string, so that
//!   images with the same function name in different repositories differ;
//! - `<replica>`: the runner replica's token, so that replicas never collide;
//! - `<seq>`: a per-replica sequence number (base 36) that never repeats.
//!
//! The result is a valid DNS-1035 label (it is also the service name and the
//! value of the [`IMAGE_LABEL`](super::IMAGE_LABEL) label).

use crate::domain::image::ImageRef;

/// Kubernetes' limit for a DNS-1035 label (service names, label values).
pub const MAX_NAME_LEN: usize = 63;

/// The pod (and service) name for the `seq`-th pod this replica creates for
/// `image`. Never fails: an image that does not parse gets the readable part
/// `fn`. Distinct `(image, replica_token, seq)` give distinct names as long as
/// the hashes differ; [`PodCache`](super::PodCache) also skips any name it has
/// seen on a live pod.
pub fn pod_name(image: &str, replica_token: &str, seq: u64) -> String {
    let suffix = format!(
        "-{:08x}-{}-{}",
        fnv1a32(image),
        sanitize(replica_token),
        base36(seq)
    );
    with_readable_part(image, &suffix)
}

/// The name of pod `index` of `image`'s warm pool: the same on every
/// replica, so that the API server's name uniqueness keeps the pool within
/// its size whoever creates its pods. `key` tells pools of different pods
/// apart (a digest of the template and settings versions, see
/// [`pool_key`]). The form is `<function>-<tag>-<hash>--<key>-<index>`:
/// the double `-` never occurs in [`pod_name`]'s names (its parts are
/// sanitised), so pool names and per-replica names never meet.
pub fn pool_pod_name(image: &str, key: &str, index: u32) -> String {
    let suffix = format!(
        "-{:08x}--{}-{}",
        fnv1a32(image),
        sanitize(key),
        base36(u64::from(index))
    );
    with_readable_part(image, &suffix)
}

/// The pool key of pods built from template `template_version` with
/// settings version `settings_version`: 8 hex digits of their hash, so that
/// a template or settings change starts a pool of new names while the old
/// pods are reclaimed.
pub fn pool_key(template_version: &str, settings_version: Option<&str>) -> String {
    let text = format!("{template_version}\0{}", settings_version.unwrap_or(""));
    format!("{:08x}", fnv1a32(&text))
}

/// Whether `name` is a warm-pool pod name ([`pool_pod_name`]).
pub fn is_pool_name(name: &str) -> bool {
    name.contains("--")
}

fn with_readable_part(image: &str, suffix: &str) -> String {
    let readable = match ImageRef::parse(image) {
        Ok(r) => {
            let name = r.name().replace('_', "-");
            let id = match (&r.tag, &r.digest) {
                (Some(tag), _) => tag.replace('.', ""),
                (None, Some(digest)) => {
                    let (algo, hex) = digest.split_once(':').unwrap_or(("sha256", digest));
                    format!("{algo}-{}", &hex[..hex.len().min(8)])
                }
                (None, None) => "latest".to_string(),
            };
            sanitize(&format!("{name}-{id}"))
        }
        Err(_) => String::new(),
    };
    let mut readable = if readable.starts_with(|c: char| c.is_ascii_lowercase()) {
        readable
    } else if readable.is_empty() {
        "fn".to_string()
    } else {
        format!("fn-{readable}")
    };
    readable.truncate(MAX_NAME_LEN.saturating_sub(suffix.len()));
    let readable = readable.trim_end_matches('-');
    format!("{readable}{suffix}")
}

/// True if `name` is a DNS-1035 label: 1–63 characters, lower-case letters,
/// digits and `-`, starting with a letter and ending with a letter or digit.
pub fn is_valid_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_NAME_LEN
        && b[0].is_ascii_lowercase()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// Lower-cases, turns every other character into `-`, collapses runs of `-`
/// and trims them from both ends.
fn sanitize(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}

/// FNV-1a, 32 bits: stable across Rust versions and platforms (unlike
/// `DefaultHasher`), which matters because names outlive the process.
fn fnv1a32(s: &str) -> u32 {
    s.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

fn base36(mut n: u64) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut buf = Vec::new();
    loop {
        buf.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    buf.reverse();
    String::from_utf8(buf).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_names_are_shared_valid_and_apart_from_replica_names() {
        let image = "ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.5";
        let key = pool_key("inline-v1", None);
        let a = pool_pod_name(image, &key, 0);
        assert_eq!(a, pool_pod_name(image, &key, 0), "same on every replica");
        assert_ne!(a, pool_pod_name(image, &key, 1));
        assert_ne!(key, pool_key("inline-v1", Some("abc")));
        assert_ne!(key, pool_key("7", None));
        let long = format!("example.com/{}/f:v1", "x".repeat(80));
        for name in [a.clone(), pool_pod_name(&long, &key, 35)] {
            assert!(is_valid_name(&name), "{name}");
            assert!(is_pool_name(&name), "{name}");
        }
        assert!(a.starts_with("set-namespace-v045-"), "{a}");
        for seq in 0..2000 {
            assert!(!is_pool_name(&pod_name(image, "r1", seq)));
        }
    }

    const DIGEST: &str = "sha256:5245a527f930d9248001fa763799cc81cf2d89bbf83954fc65de0db20ab038a2";

    // Porch TestPodID, adapted: readable part keeps `<name>-<tag>` with dots
    // stripped, `_` becomes `-`, untagged means `latest`.
    #[test]
    fn readable_part_follows_porch() {
        let n = pod_name("gcr.io/kpt-fn/apply-replacements:latest", "a", 1);
        assert!(n.starts_with("apply-replacements-latest-"), "{n}");
        assert!(n.ends_with("-a-1"), "{n}");
        assert!(
            pod_name("gcr.io/kpt-fn/set-labels:v0.4.1", "a", 1).starts_with("set-labels-v041-")
        );
        assert!(pod_name("gcr.io/kpt-fn/set-labels", "a", 1).starts_with("set-labels-latest-"));
        assert!(pod_name("my_function", "a", 1).starts_with("my-function-latest-"));
    }

    #[test]
    fn digest_references_make_valid_names() {
        let n = pod_name(
            &format!("ghcr.io/kptdev/krm-functions-catalog/set-namespace@{DIGEST}"),
            "r0",
            7,
        );
        assert!(is_valid_name(&n), "{n}");
        assert!(n.starts_with("set-namespace-sha256-5245a527-"), "{n}");
    }

    #[test]
    fn long_and_odd_names_stay_valid() {
        let long = format!(
            "example.com/{}/{}:{}",
            "x".repeat(80),
            "Y_y".repeat(30).to_lowercase(),
            "v1.2.3-rc.1"
        );
        for image in [long.as_str(), "", "NOT VALID", "9lives:v1", "a/-b", "x:___"] {
            let n = pod_name(image, "abcdefgh", u64::MAX);
            assert!(is_valid_name(&n), "{image:?} -> {n}");
        }
    }

    #[test]
    fn same_function_name_in_two_repositories_differs() {
        assert_ne!(
            pod_name("a.io/x/fn:v1", "a", 1),
            pod_name("b.io/x/fn:v1", "a", 1)
        );
        assert_ne!(
            pod_name("a.io/x/fn:v1", "a", 1),
            pod_name("a.io/x/fn:v1", "b", 1)
        );
        assert_ne!(
            pod_name("a.io/x/fn:v1", "a", 1),
            pod_name("a.io/x/fn:v1", "a", 2)
        );
    }

    #[test]
    fn names_are_stable() {
        // The hash is part of names that outlive the process: pin it.
        assert_eq!(fnv1a32(""), 0x811c_9dc5);
        assert_eq!(fnv1a32("a"), 0xe40c_292c);
        assert_eq!(base36(0), "0");
        assert_eq!(base36(36 * 36 + 35), "10z");
    }
}
