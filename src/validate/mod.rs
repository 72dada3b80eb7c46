//! Entry validation (docs/behaviour.md §2.2): the checks a call's caller-supplied attribution and overlay must
//! pass before anything is sent, queued or counted.
//!
//! These are not attempt failures and not part of the four failure classes; they surface as
//! [`crate::GatewayError::InvalidInput`]. This module only checks values; it never trims or
//! repairs them (`" t1"` and `"t1"` would be two tenants under an equality-based row policy).
//! Configuration checks live in [`crate::config`].

mod error;

use std::collections::BTreeMap;

use polygateway_actors::policy::wait_queue::Priority;
use serde_json::{Map, Value};

pub(crate) use error::shorten;
pub use error::ValidationError;

use crate::types::MetaValue;

/// Longest accepted `tenant_id`, in chars.
pub(crate) const TENANT_ID_MAX_CHARS: usize = 128;
/// Most keys a `meta` map may hold.
pub(crate) const META_MAX_KEYS: usize = 16;
/// Longest `meta` key, in chars (keys match `[a-z0-9_.]{1,64}`).
pub(crate) const META_KEY_MAX_CHARS: usize = 64;
/// Longest `meta` string value, in chars.
pub(crate) const META_STRING_MAX_CHARS: usize = 256;
/// `meta` key prefix reserved for the library.
pub(crate) const META_RESERVED_PREFIX: &str = "pg_";
/// Keys an overlay or a source `extra_body` may not set: the runtime owns them.
pub(crate) const PROTECTED_BODY_KEYS: [&str; 4] = ["model", "messages", "stream", "stream_options"];

/// The longest deadline a call may carry: one day (a longer one is a unit mistake).
pub(crate) const DEADLINE_MAX_S: u64 = 86_400;

/// The largest tenant weight: turns per round of the fair share (docs/behaviour.md §5.7).
pub(crate) const WEIGHT_MAX: u32 = 1000;

/// Check a deadline given in seconds (Python `deadline_s=`, the server's `x-pgw-deadline-s`
/// header, a key's `deadline_s`): positive, finite, at most a day (86,400 s).
///
/// ```
/// use std::time::Duration;
/// use polygateway::validate::{deadline_from_secs, ValidationError};
/// assert_eq!(deadline_from_secs(2.5), Ok(Duration::from_millis(2500)));
/// assert!(matches!(deadline_from_secs(0.0), Err(ValidationError::DeadlineInvalid { .. })));
/// assert!(deadline_from_secs(f64::NAN).is_err());
/// ```
pub fn deadline_from_secs(seconds: f64) -> Result<std::time::Duration, ValidationError> {
    if seconds.is_finite() && seconds > 0.0 && seconds <= DEADLINE_MAX_S as f64 {
        Ok(std::time::Duration::from_secs_f64(seconds))
    } else {
        Err(ValidationError::DeadlineInvalid {
            value: seconds,
            limit_s: DEADLINE_MAX_S,
        })
    }
}

/// Check a tenant weight: 1 to 1000.
///
/// ```
/// use polygateway::validate::{validate_weight, ValidationError};
/// assert_eq!(validate_weight(4), Ok(4));
/// let err = validate_weight(0).unwrap_err();
/// assert_eq!(err.to_string(), "weight must be a whole number from 1 to 1000, got 0");
/// ```
pub fn validate_weight(weight: u64) -> Result<u32, ValidationError> {
    match u32::try_from(weight) {
        Ok(w) if (1..=WEIGHT_MAX).contains(&w) => Ok(w),
        _ => Err(ValidationError::WeightInvalid {
            value: weight,
            limit: WEIGHT_MAX,
        }),
    }
}

/// Read a priority class by its name (`interactive`, `normal`, `batch`).
///
/// ```
/// use polygateway::types::Priority;
/// use polygateway::validate::parse_priority;
/// assert_eq!(parse_priority("batch"), Ok(Priority::Batch));
/// assert!(parse_priority("high").is_err());
/// ```
pub fn parse_priority(value: &str) -> Result<Priority, ValidationError> {
    value.parse().map_err(|_| ValidationError::PriorityInvalid {
        value: shorten(value),
    })
}

/// Check an explicitly set `tenant_id`: not empty, at most 128 chars, no leading or trailing
/// whitespace.
///
/// ```
/// use polygateway::validate::{validate_tenant_id, ValidationError};
/// assert!(validate_tenant_id("acme").is_ok());
/// assert!(matches!(validate_tenant_id(" t1"), Err(ValidationError::TenantIdWhitespace { .. })));
/// ```
pub fn validate_tenant_id(tenant_id: &str) -> Result<(), ValidationError> {
    if tenant_id.is_empty() {
        return Err(ValidationError::TenantIdEmpty);
    }
    let len = tenant_id.chars().count();
    if len > TENANT_ID_MAX_CHARS {
        return Err(ValidationError::TenantIdTooLong {
            len,
            limit: TENANT_ID_MAX_CHARS,
            value: shorten(tenant_id),
        });
    }
    if tenant_id.trim() != tenant_id {
        return Err(ValidationError::TenantIdWhitespace {
            value: shorten(tenant_id),
        });
    }
    Ok(())
}

fn valid_meta_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= META_KEY_MAX_CHARS
        && key
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'.')
}

/// Check one `meta` key.
fn validate_meta_key(key: &str) -> Result<(), ValidationError> {
    if !valid_meta_key(key) {
        return Err(ValidationError::MetaKeyInvalid {
            key: shorten(key),
            limit: META_KEY_MAX_CHARS,
        });
    }
    if key.starts_with(META_RESERVED_PREFIX) {
        return Err(ValidationError::MetaKeyReserved {
            key: shorten(key),
            prefix: META_RESERVED_PREFIX,
        });
    }
    Ok(())
}

/// Check one `meta` value (its type is already one of the four allowed ones).
fn validate_meta_value(key: &str, value: &MetaValue) -> Result<(), ValidationError> {
    match value {
        MetaValue::String(s) => {
            let len = s.chars().count();
            if len > META_STRING_MAX_CHARS {
                return Err(ValidationError::MetaStringTooLong {
                    key: shorten(key),
                    len,
                    limit: META_STRING_MAX_CHARS,
                    value: shorten(s),
                });
            }
        }
        MetaValue::Float(f) if !f.is_finite() => {
            return Err(ValidationError::MetaFloatNotFinite {
                key: shorten(key),
                value: *f,
            });
        }
        MetaValue::Bool(_) | MetaValue::Int(_) | MetaValue::Float(_) => {}
    }
    Ok(())
}

/// Check a `meta` map: at most 16 keys matching `[a-z0-9_.]{1,64}` without the `pg_` prefix;
/// string values at most 256 chars; floats finite.
///
/// ```
/// use std::collections::BTreeMap;
/// use polygateway::types::MetaValue;
/// use polygateway::validate::validate_meta;
/// let mut meta = BTreeMap::new();
/// meta.insert("batch_id".to_string(), MetaValue::from("b-17"));
/// assert!(validate_meta(&meta).is_ok());
/// meta.insert("pg_x".to_string(), MetaValue::from(1));
/// assert!(validate_meta(&meta).is_err());
/// ```
pub fn validate_meta(meta: &BTreeMap<String, MetaValue>) -> Result<(), ValidationError> {
    if meta.len() > META_MAX_KEYS {
        return Err(ValidationError::MetaTooManyKeys {
            count: meta.len(),
            limit: META_MAX_KEYS,
        });
    }
    for (key, value) in meta {
        validate_meta_key(key)?;
        validate_meta_value(key, value)?;
    }
    Ok(())
}

/// Convert a JSON object into a `meta` map and check it, rejecting values that are not a
/// string, integer, float or bool (`null`, arrays, objects) with [`ValidationError::MetaValueType`].
///
/// ```
/// use polygateway::validate::meta_from_json;
/// let ok = serde_json::json!({"run": 3, "tag": "a"});
/// assert_eq!(meta_from_json(ok.as_object().unwrap()).unwrap().len(), 2);
/// let bad = serde_json::json!({"run": null});
/// assert!(meta_from_json(bad.as_object().unwrap()).is_err());
/// ```
pub fn meta_from_json(
    object: &Map<String, Value>,
) -> Result<BTreeMap<String, MetaValue>, ValidationError> {
    let mut meta = BTreeMap::new();
    for (key, value) in object {
        meta.insert(key.clone(), MetaValue::from_json(key, value)?);
    }
    validate_meta(&meta)?;
    Ok(meta)
}

/// Check a call `overlay` or a source `extra_body`: it must not set `model`, `messages`,
/// `stream` or `stream_options`. `field_name` names the field in the error (`overlay`,
/// `extra_body`, or a config key).
///
/// ```
/// use polygateway::validate::validate_overlay;
/// let ok = serde_json::json!({"temperature": 0.2});
/// assert!(validate_overlay("overlay", ok.as_object().unwrap()).is_ok());
/// let bad = serde_json::json!({"stream": false});
/// assert!(validate_overlay("overlay", bad.as_object().unwrap()).is_err());
/// ```
pub fn validate_overlay(
    field_name: &str,
    body: &Map<String, Value>,
) -> Result<(), ValidationError> {
    // Report in a fixed order so the message does not depend on map iteration order.
    for key in PROTECTED_BODY_KEYS {
        if body.contains_key(key) {
            return Err(ValidationError::ProtectedKey {
                field: field_name.to_string(),
                key: key.to_string(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_key_pattern() {
        for ok in ["a", "run.id", "x_1", &"k".repeat(64)] {
            assert!(valid_meta_key(ok), "{ok}");
        }
        for bad in ["", "A", "run-id", "ключ", "a b", &"k".repeat(65)] {
            assert!(!valid_meta_key(bad), "{bad}");
        }
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn tenant_id_max_chars_example() {
        use crate::validate::{validate_tenant_id, ValidationError, TENANT_ID_MAX_CHARS};
        // Counted in chars, not bytes.
        assert!(validate_tenant_id(&"é".repeat(TENANT_ID_MAX_CHARS)).is_ok());
        let too_long = "t".repeat(TENANT_ID_MAX_CHARS + 1);
        assert!(matches!(
            validate_tenant_id(&too_long),
            Err(ValidationError::TenantIdTooLong {
                len: 129,
                limit: TENANT_ID_MAX_CHARS,
                ..
            })
        ));
    }

    #[test]
    fn meta_max_keys_example() {
        use crate::types::MetaValue;
        use crate::validate::{validate_meta, ValidationError, META_MAX_KEYS};
        use std::collections::BTreeMap;
        let mut meta: BTreeMap<String, MetaValue> = (0..META_MAX_KEYS)
            .map(|i| (format!("k{i}"), MetaValue::from(true)))
            .collect();
        assert!(validate_meta(&meta).is_ok());
        meta.insert("one_more".into(), MetaValue::from(true));
        assert_eq!(
            validate_meta(&meta),
            Err(ValidationError::MetaTooManyKeys {
                count: 17,
                limit: META_MAX_KEYS
            })
        );
    }

    #[test]
    fn meta_key_max_chars_example() {
        use crate::types::MetaValue;
        use crate::validate::{validate_meta, ValidationError, META_KEY_MAX_CHARS};
        use std::collections::BTreeMap;
        let longest = BTreeMap::from([("k".repeat(META_KEY_MAX_CHARS), MetaValue::from(1))]);
        assert!(validate_meta(&longest).is_ok());
        let too_long = BTreeMap::from([("k".repeat(META_KEY_MAX_CHARS + 1), MetaValue::from(1))]);
        assert!(matches!(
            validate_meta(&too_long),
            Err(ValidationError::MetaKeyInvalid {
                limit: META_KEY_MAX_CHARS,
                ..
            })
        ));
    }

    #[test]
    fn meta_string_max_chars_example() {
        use crate::types::MetaValue;
        use crate::validate::{validate_meta, ValidationError, META_STRING_MAX_CHARS};
        use std::collections::BTreeMap;
        let note =
            |len: usize| BTreeMap::from([("note".to_string(), MetaValue::from("x".repeat(len)))]);
        assert!(validate_meta(&note(META_STRING_MAX_CHARS)).is_ok());
        assert!(matches!(
            validate_meta(&note(META_STRING_MAX_CHARS + 1)),
            Err(ValidationError::MetaStringTooLong { len: 257, .. })
        ));
    }

    #[test]
    fn meta_reserved_prefix_example() {
        use crate::types::MetaValue;
        use crate::validate::{validate_meta, ValidationError, META_RESERVED_PREFIX};
        use std::collections::BTreeMap;
        let key = format!("{META_RESERVED_PREFIX}run");
        let meta = BTreeMap::from([(key.clone(), MetaValue::from("r1"))]);
        assert_eq!(
            validate_meta(&meta),
            Err(ValidationError::MetaKeyReserved {
                key,
                prefix: META_RESERVED_PREFIX
            })
        );
    }

    #[test]
    fn protected_body_keys_example() {
        use crate::validate::{validate_overlay, PROTECTED_BODY_KEYS};
        for key in PROTECTED_BODY_KEYS {
            let mut overlay = serde_json::Map::new();
            overlay.insert(key.to_string(), serde_json::json!(null));
            assert!(validate_overlay("overlay", &overlay).is_err(), "{key}");
        }
    }
}
