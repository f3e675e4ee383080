//! Comparing and looking up JSON values the way the render does most often:
//! objects whose keys are already in the same order, and small maps.
//!
//! `serde_json`'s map equality ignores key order, so it looks every key of
//! one map up in the other (a SipHash per key); an object compared with an
//! edited copy of itself has its keys in the same order almost always.
//! [`same`] walks both side by side and falls back to the order-insensitive
//! comparison only where the keys are not in the same order, so it answers
//! exactly as `==` does.

use serde_json::{Map, Value};

/// Maps up to this many entries are searched key by key by [`get`]:
/// cheaper than hashing the key, and an object's top level, its `metadata`
/// and its annotations are usually that small.
pub const SCAN_UP_TO: usize = 16;

/// `a == b` (maps equal whatever their key order), comparing maps whose
/// keys come in the same order entry by entry, without hashing.
pub fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            if x.len() != y.len() {
                return false;
            }
            for ((kx, vx), (ky, vy)) in x.iter().zip(y) {
                if kx != ky {
                    // Another key order: serde_json's comparison by key.
                    return x == y;
                }
                if !same(vx, vy) {
                    return false;
                }
            }
            true
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        _ => a == b,
    }
}

/// `a == b` with every map's keys in the same order too: whether a text
/// written for `a` also shows `b`'s key order (kpt syncs a function's
/// output to the input's key order, kyaml's `SyncOrder`, so a function's
/// text stands in for a value only when it has that order).
pub fn same_in_order(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((kx, vx), (ky, vy))| kx == ky && same_in_order(vx, vy))
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same_in_order(a, b))
        }
        _ => a == b,
    }
}

/// `a == b` for optional values, as [`same`].
pub fn same_opt(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => same(a, b),
        (None, None) => true,
        _ => false,
    }
}

/// `k == key`, deciding most unequal pairs inline: by length, then by the
/// last byte (the keys of one map that share a length — `kind`, `data`,
/// `spec`, or annotation keys under one prefix — mostly differ there),
/// before the library comparison.
#[inline]
fn key_is(k: &str, key: &str) -> bool {
    k.len() == key.len() && k.as_bytes().last() == key.as_bytes().last() && k == key
}

/// The value at `key` in `map`: `map.get(key)`, searched key by key when
/// the map is small.
pub fn get<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    if map.len() <= SCAN_UP_TO {
        map.iter().find_map(|(k, v)| key_is(k, key).then_some(v))
    } else {
        map.get(key)
    }
}

/// The value at `key` in `map`, to change: `map.get_mut(key)`, searched
/// key by key when the map is small.
pub fn get_mut<'a>(map: &'a mut Map<String, Value>, key: &str) -> Option<&'a mut Value> {
    if map.len() <= SCAN_UP_TO {
        map.iter_mut()
            .find_map(|(k, v)| key_is(k, key).then_some(v))
    } else {
        map.get_mut(key)
    }
}

/// Whether `map` has `key`, as [`get`] finds it.
pub fn has(map: &Map<String, Value>, key: &str) -> bool {
    get(map, key).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn key_order_does_not_matter_as_with_eq() {
        let a = json!({"a": 1, "b": {"x": [1, {"p": 1, "q": 2}]}});
        let b = json!({"b": {"x": [1, {"q": 2, "p": 1}]}, "a": 1});
        assert!(same(&a, &b));
        assert!(!same(&a, &json!({"a": 1, "b": {"x": [1, {"p": 1}]}})));
        assert!(!same(&json!({"a": 1, "b": 2}), &json!({"b": 2, "c": 1})));
        assert!(same_opt(None, None));
        assert!(!same_opt(Some(&a), None));
    }

    #[test]
    fn small_and_large_maps_are_found() {
        let small: Map<String, Value> = (0..4).map(|i| (format!("k{i}"), json!(i))).collect();
        let large: Map<String, Value> = (0..40).map(|i| (format!("k{i}"), json!(i))).collect();
        assert_eq!(get(&small, "k3"), Some(&json!(3)));
        assert_eq!(get(&large, "k33"), Some(&json!(33)));
        let (mut small, mut large) = (small, large);
        *get_mut(&mut small, "k1").unwrap() = json!("one");
        *get_mut(&mut large, "k21").unwrap() = json!("x");
        assert_eq!((&small["k1"], &large["k21"]), (&json!("one"), &json!("x")));
        assert!(get_mut(&mut small, "nope").is_none());
        assert!(!has(&small, "k9") && has(&large, "k9") && !has(&large, "k99"));
        // Same length and last byte, different elsewhere; an empty key.
        let alike: Map<String, Value> = [("xa", 1), ("ya", 2), ("", 3)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        assert_eq!(get(&alike, "ya"), Some(&json!(2)));
        assert_eq!(get(&alike, ""), Some(&json!(3)));
        assert_eq!(get(&alike, "za"), None);
    }

    fn values() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            (0i64..3).prop_map(Value::from),
            "[ab]{0,2}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec(("[abc]", inner), 0..4)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    /// Reverses the key order of every map, recursively.
    fn reordered(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.iter()
                    .rev()
                    .map(|(k, v)| (k.clone(), reordered(v)))
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.iter().map(reordered).collect()),
            v => v.clone(),
        }
    }

    proptest! {
        /// `same` answers as `==`, for values alike, different, and alike
        /// but for key order.
        #[test]
        fn answers_as_eq(a in values(), b in values()) {
            prop_assert_eq!(same(&a, &b), a == b);
            let r = reordered(&a);
            prop_assert_eq!(same(&a, &r), a == r);
            prop_assert!(same(&a, &a.clone()));
        }
    }
}
