//! Shape validation of a repaired value against the caller's type (docs/behaviour.md §9.2 step 3).
//!
//! Shape only: "does it deserialize into `T`". Semantic rules (ranges, cross-field checks) stay
//! with the caller. Errors name the JSON path where serde stopped (`$.items[2].price: invalid
//! type …`), so a re-ask can tell the model exactly what to fix.

use serde::de::DeserializeOwned;
use serde_json::Value;

/// Longest error message handed on (docs/behaviour.md §9.2: each ≤ 200 chars).
pub(crate) const MAX_ERROR_CHARS: usize = 200;

/// Deserializes `value` into `T`; on failure, the errors (each ≤ 200 chars, with a JSON path
/// when serde reported a position).
///
/// ```
/// use polygateway::structured::validate;
/// #[derive(serde::Deserialize, Debug)]
/// struct Item { price: u32 }
/// #[derive(serde::Deserialize, Debug)]
/// struct Order { items: Vec<Item> }
/// let errs = validate::<Order>(serde_json::json!({"items": [{"price": 1}, {"price": "x"}]})).unwrap_err();
/// assert!(errs[0].starts_with("$.items[1].price: invalid type"), "{errs:?}");
/// ```
pub fn validate<T: DeserializeOwned>(value: Value) -> Result<T, Vec<String>> {
    // Serialize compactly and parse from text: serde_json then reports a byte position, which
    // `path_at` maps back to a JSON path. (`from_value` reports no position at all.)
    let text = match serde_json::to_string(&value) {
        Ok(t) => t,
        Err(e) => return Err(vec![clip(&e.to_string())]),
    };
    match serde_json::from_str::<T>(&text) {
        Ok(v) => Ok(v),
        Err(e) => {
            let msg = strip_position(&e.to_string());
            // Compact JSON has no raw newlines, so the column is the byte offset.
            let path = if e.line() == 1 && e.column() > 0 {
                path_at(&text, e.column())
            } else {
                "$".to_owned()
            };
            Err(vec![clip(&format!("{path}: {msg}"))])
        }
    }
}

/// Cuts a message to [`MAX_ERROR_CHARS`] characters (with an ellipsis).
pub(crate) fn clip(s: &str) -> String {
    if s.chars().count() <= MAX_ERROR_CHARS {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(MAX_ERROR_CHARS - 1).collect();
    out.push('…');
    out
}

/// Removes serde_json's " at line L column C" suffix (positions in our re-serialized text mean
/// nothing to the model).
fn strip_position(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_owned(),
        None => msg.to_owned(),
    }
}

enum Frame {
    Object {
        key: Option<String>,
        expect_key: bool,
    },
    Array {
        index: usize,
    },
}

/// The JSON path of the innermost value containing the character just before byte `consumed`
/// of compact JSON `text` (the last character serde read when it failed).
fn path_at(text: &str, consumed: usize) -> String {
    let stop = consumed.saturating_sub(1).min(text.len());
    let bytes = text.as_bytes();
    let mut stack: Vec<Frame> = Vec::new();
    let mut i = 0;
    while i < stop {
        match bytes[i] {
            b'{' => stack.push(Frame::Object {
                key: None,
                expect_key: true,
            }),
            b'[' => stack.push(Frame::Array { index: 0 }),
            b'}' | b']' => {
                stack.pop();
            }
            b',' => match stack.last_mut() {
                Some(Frame::Array { index }) => *index += 1,
                Some(Frame::Object { expect_key, .. }) => *expect_key = true,
                None => {}
            },
            b'"' => {
                let end = string_end(bytes, i);
                if let Some(Frame::Object { key, expect_key }) = stack.last_mut() {
                    if *expect_key && end <= stop {
                        *key = serde_json::from_str::<String>(&text[i..end]).ok();
                        *expect_key = false;
                    }
                }
                i = end;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    // Failing on a closing bracket means the container itself is wrong (missing field, wrong
    // length): the path ends at the container, not at its last member.
    if matches!(bytes.get(stop), Some(b'}' | b']')) {
        match stack.last_mut() {
            Some(Frame::Object { expect_key, .. }) => *expect_key = true,
            Some(Frame::Array { .. }) => {
                stack.pop();
                stack.push(Frame::Object {
                    key: None,
                    expect_key: true,
                });
            }
            None => {}
        }
    }
    let mut path = String::from("$");
    for frame in &stack {
        match frame {
            Frame::Array { index } => path.push_str(&format!("[{index}]")),
            Frame::Object {
                key: Some(k),
                expect_key: false,
            } => {
                if !k.is_empty() && k.chars().all(|c| c.is_alphanumeric() || c == '_') {
                    path.push('.');
                    path.push_str(k);
                } else {
                    path.push_str(&format!("[{}]", serde_json::Value::String(k.clone())));
                }
            }
            Frame::Object { .. } => {}
        }
    }
    path
}

/// Byte offset just past the string starting at `start` (a `"`).
fn string_end(bytes: &[u8], start: usize) -> usize {
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[allow(dead_code)]
    #[derive(Debug, Deserialize)]
    struct Inner {
        b: u32,
        c: String,
    }
    #[allow(dead_code)]
    #[derive(Debug, Deserialize)]
    struct Outer {
        a: Inner,
        list: Vec<Inner>,
    }

    #[test]
    fn paths_point_at_the_failure() {
        let e = validate::<Outer>(json!({"a": {"b": "x", "c": "y"}, "list": []})).unwrap_err();
        assert!(
            e[0].starts_with("$.a.b: invalid type: string \"x\""),
            "{e:?}"
        );
        let e = validate::<Outer>(
            json!({"a": {"b": 1, "c": "y"}, "list": [{"b": 1, "c": "z"}, {"b": 2}]}),
        )
        .unwrap_err();
        assert_eq!(e[0], "$.list[1]: missing field `c`");
        let e = validate::<Outer>(json!({"a": {"b": 1, "c": "y"}})).unwrap_err();
        assert_eq!(e[0], "$: missing field `list`");
        // serde's derived structs also accept sequences: the first element is field `a`.
        let e = validate::<Outer>(json!([1])).unwrap_err();
        assert_eq!(
            e[0],
            "$[0]: invalid type: integer `1`, expected struct Inner"
        );
        let e = validate::<Outer>(json!("text")).unwrap_err();
        assert!(
            e[0].starts_with("$: invalid type: string \"text\""),
            "{e:?}"
        );
    }

    #[test]
    fn odd_keys_are_quoted_and_errors_clipped() {
        #[allow(dead_code)]
        #[derive(Debug, Deserialize)]
        struct K {
            #[serde(rename = "a key")]
            k: Vec<u8>,
        }
        let e = validate::<K>(json!({"a key": [1, 300]})).unwrap_err();
        assert!(e[0].starts_with("$[\"a key\"][1]: invalid value"), "{e:?}");
        let long = "x".repeat(1000);
        let e = validate::<Inner>(json!({"b": long, "c": ""})).unwrap_err();
        assert!(e[0].chars().count() <= MAX_ERROR_CHARS);
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn max_error_chars_example() {
        use crate::structured::validate::{validate, MAX_ERROR_CHARS};
        // serde quotes the offending string in full; the error is clipped.
        let errs = validate::<u8>(serde_json::json!("x".repeat(1000))).unwrap_err();
        assert_eq!(errs[0].chars().count(), MAX_ERROR_CHARS);
    }

    #[test]
    fn clip_example() {
        use crate::structured::validate::clip;
        assert_eq!(clip("short message"), "short message");
        let long = clip(&"é".repeat(300));
        assert_eq!(long.chars().count(), 200);
        assert!(long.ends_with('…'));
    }
}
