//! kpt's image-name grammar for a step's `image` field.

/// kpt's image-name grammar (Docker reference: optional registry domain with
/// port, lower-case path components joined by `/`, optional `:tag` or
/// `@sha256:<64 alphanumerics>`).
pub fn valid_image_name(image: &str) -> bool {
    let (name, version) = match image.find('@') {
        Some(i) => (&image[..i], Some((&image[i + 1..], true))),
        None => match image.rfind(':') {
            Some(i) if !image[i..].contains('/') => (&image[..i], Some((&image[i + 1..], false))),
            _ => (image, None),
        },
    };
    if let Some((v, digest)) = version {
        let ok = if digest {
            v.strip_prefix("sha256:")
                .is_some_and(|h| h.len() == 64 && h.chars().all(|c| c.is_ascii_alphanumeric()))
        } else {
            valid_tag(v)
        };
        // kpt's regex also accepts a tag-shaped version after `@`.
        if !(ok || digest && valid_tag(v)) {
            return false;
        }
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

fn valid_tag(t: &str) -> bool {
    let mut chars = t.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphanumeric() || c == '_')
        && t.len() <= 128
        && chars.all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
}

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
