//! A request's place among waiting calls (docs/behaviour.md §5.7, §12.2): its key's defaults
//! (`priority`, `deadline_s`, `weight` in the key file) and the request headers
//! `x-pgw-priority` and `x-pgw-deadline-s`. The tenant is the key's, never a header's.

use axum::http::HeaderMap;

use crate::server::auth::keys::VirtualKey;
use crate::server::errors::ApiError;
use crate::types::{CallOptions, Priority};

/// Ask for a priority class: `interactive`, `normal` or `batch`, at most the key's.
pub(crate) const PRIORITY_HEADER: &str = "x-pgw-priority";
/// Ask for a deadline in seconds (a positive number, at most a day).
pub(crate) const DEADLINE_HEADER: &str = "x-pgw-deadline-s";

fn header<'a>(headers: &'a HeaderMap, name: &'static str) -> Result<Option<&'a str>, ApiError> {
    headers
        .get(name)
        .map(|v| {
            v.to_str()
                .map(str::trim)
                .map_err(|_| ApiError::bad_request(format!("header {name} is not text"), None))
        })
        .transpose()
}

/// `options` with the request's priority, deadline and weight. A header that does not parse,
/// or a priority above the key's, is a 400 naming the header, the value and what is allowed: a
/// key for batch work cannot make its calls interactive.
pub(crate) fn with_call_order(
    options: CallOptions,
    key: &VirtualKey,
    headers: &HeaderMap,
) -> Result<CallOptions, ApiError> {
    let priority = match header(headers, PRIORITY_HEADER)? {
        None => key.priority(),
        Some(value) => {
            let asked = crate::validate::parse_priority(value).map_err(|e| {
                ApiError::bad_request(format!("header {PRIORITY_HEADER}: {e}"), None)
            })?;
            if asked < key.priority() {
                let allowed: Vec<&str> = Priority::ALL
                    .iter()
                    .filter(|p| **p >= key.priority())
                    .map(|p| p.as_str())
                    .collect();
                return Err(ApiError::bad_request(
                    format!(
                        "header {PRIORITY_HEADER}: {value} is above this key's priority {}; allowed: {}",
                        key.priority(),
                        allowed.join(", ")
                    ),
                    None,
                ));
            }
            asked
        }
    };
    let deadline = match header(headers, DEADLINE_HEADER)? {
        None => key.deadline(),
        Some(value) => {
            let seconds: f64 = value.parse().map_err(|_| {
                ApiError::bad_request(
                    format!("header {DEADLINE_HEADER}: {value:?} is not a number of seconds"),
                    None,
                )
            })?;
            Some(crate::validate::deadline_from_secs(seconds).map_err(|e| {
                ApiError::bad_request(format!("header {DEADLINE_HEADER}: {e}"), None)
            })?)
        }
    };
    let options = options.priority(priority).weight(key.weight());
    Ok(match deadline {
        Some(d) => options.deadline(d),
        None => options,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::{hash_key, KeyStore};
    use std::time::Duration;

    fn key(extra: &str) -> KeyStore {
        let json = format!(
            r#"{{"keys": [{{"name": "k", "hash": "{}", "scopes": ["*"]{extra}}}]}}"#,
            hash_key("secret")
        );
        KeyStore::from_json(&json).unwrap()
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.insert(*name, value.parse().unwrap());
        }
        h
    }

    fn order(extra: &str, pairs: &[(&'static str, &str)]) -> Result<CallOptions, String> {
        let keys = key(extra);
        let k = keys.authenticate("secret").unwrap();
        with_call_order(CallOptions::new(), k, &headers(pairs)).map_err(|e| e.0.message)
    }

    #[test]
    fn the_key_gives_the_defaults_and_headers_override_them() {
        let o = order(
            r#", "priority": "normal", "deadline_s": 30, "weight": 3"#,
            &[],
        )
        .unwrap();
        assert_eq!(o.priority, Priority::Normal);
        assert_eq!(o.deadline, Some(Duration::from_secs(30)));
        assert_eq!(o.weight, Some(3));
        let o = order(
            r#", "deadline_s": 30"#,
            &[(PRIORITY_HEADER, "batch"), (DEADLINE_HEADER, "2.5")],
        )
        .unwrap();
        assert_eq!(o.priority, Priority::Batch);
        assert_eq!(o.deadline, Some(Duration::from_millis(2500)));
        assert_eq!(o.weight, Some(1));
    }

    #[test]
    fn a_request_cannot_rise_above_its_key_and_bad_values_say_what_is_allowed() {
        let err = order(
            r#", "priority": "batch""#,
            &[(PRIORITY_HEADER, "interactive")],
        )
        .unwrap_err();
        assert_eq!(
            err,
            "header x-pgw-priority: interactive is above this key's priority batch; allowed: batch"
        );
        let err = order("", &[(PRIORITY_HEADER, "urgent")]).unwrap_err();
        assert!(err.contains("use interactive, normal or batch"), "{err}");
        let err = order("", &[(DEADLINE_HEADER, "soon")]).unwrap_err();
        assert!(err.contains("\"soon\" is not a number of seconds"), "{err}");
        let err = order("", &[(DEADLINE_HEADER, "-1")]).unwrap_err();
        assert!(
            err.contains("must be a positive number of seconds"),
            "{err}"
        );
    }

    #[test]
    fn bad_key_file_values_are_refused_naming_the_key() {
        let json = |extra: &str| {
            format!(
                r#"{{"keys": [{{"name": "k", "hash": "{}", "scopes": ["*"]{extra}}}]}}"#,
                hash_key("secret")
            )
        };
        let err = KeyStore::from_json(&json(r#", "priority": "high""#)).unwrap_err();
        assert!(
            err.to_string()
                .contains("key k: priority: unknown priority \"high\""),
            "{err}"
        );
        let err = KeyStore::from_json(&json(r#", "weight": 0"#)).unwrap_err();
        assert!(
            err.to_string()
                .contains("key k: weight must be a whole number from 1 to 1000, got 0"),
            "{err}"
        );
        let err = KeyStore::from_json(&json(r#", "deadline_s": 0"#)).unwrap_err();
        assert!(err.to_string().contains("key k: deadline_s"), "{err}");
    }
}
