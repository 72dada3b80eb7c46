//! Which key family a raw environment key belongs to, looked up in the key table.
//!
//! Keys outside the library's namespaces are not ours (the process environment holds many
//! unrelated variables); inside them (`PGW_*`, `{SCOPE}__…`) an unknown key is an error naming
//! the key and what is allowed.

use crate::config::error::ConfigError;
use crate::config::keys::{
    self, KeyDef, GLOBAL_KEYS, GLOBAL_PREFIX, SCOPE_KEYS, SCOPE_KEY_GROUPS, SOURCE_FIELDS,
};

/// Where a raw key belongs.
pub(super) enum KeyClass<'a> {
    Global(&'static KeyDef),
    Shorthand(&'static KeyDef),
    Scope {
        scope: &'a str,
        key: &'static KeyDef,
    },
    Source {
        scope: &'a str,
        provider: &'a str,
        n: u32,
        field: &'static KeyDef,
    },
    NotOurs,
}

fn is_scope_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_uppercase())
        && bytes.all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

fn is_provider_segment(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

fn unknown(key: &str, reason: impl Into<String>, allowed: impl Into<String>) -> ConfigError {
    ConfigError::UnknownKey {
        key: key.to_string(),
        reason: reason.into(),
        allowed: allowed.into(),
    }
}

fn scope_suffixes_allowed() -> String {
    format!(
        "{} or a source key {{SCOPE}}__{{PROVIDER}}__{{N}}__{{FIELD}}",
        SCOPE_KEYS.join(", ")
    )
}

pub(super) fn classify(key: &str) -> Result<KeyClass<'_>, ConfigError> {
    if let Some(def) = keys::global_key(key) {
        return Ok(KeyClass::Global(def));
    }
    if key.starts_with(GLOBAL_PREFIX) {
        return Err(unknown(
            key,
            "the PGW_ prefix is reserved for the library's keys",
            GLOBAL_KEYS.join(", "),
        ));
    }
    if let Some(def) = keys::shorthand(key) {
        return Ok(KeyClass::Shorthand(def));
    }
    let segments: Vec<&str> = key.split("__").collect();
    if segments.len() < 2 || !is_scope_name(segments[0]) {
        return Ok(KeyClass::NotOurs);
    }
    let scope = segments[0];
    if segments[1..].iter().any(|s| s.is_empty()) {
        return Err(unknown(key, "empty segment", scope_suffixes_allowed()));
    }
    match segments.len() {
        2 | 3 => classify_scope_key(key, scope, &segments[1..]),
        4 => classify_source_key(key, scope, segments[1], segments[2], segments[3]),
        _ => Err(unknown(
            key,
            "too many __-separated segments",
            scope_suffixes_allowed(),
        )),
    }
}

/// `{SCOPE}__{SUFFIX}` or `{SCOPE}__{GROUP}__{FIELD}` (`rest` is what follows the scope).
fn classify_scope_key<'a>(
    key: &str,
    scope: &'a str,
    rest: &[&str],
) -> Result<KeyClass<'a>, ConfigError> {
    if let Some(def) = keys::scope_key(&rest.join("__")) {
        return Ok(KeyClass::Scope { scope, key: def });
    }
    match rest {
        [suffix] => Err(unknown(
            key,
            format!("unknown scope key {suffix}"),
            scope_suffixes_allowed(),
        )),
        [group, field] if SCOPE_KEY_GROUPS.contains(group) => {
            let allowed: Vec<String> = SCOPE_KEYS
                .iter()
                .filter(|k| k.starts_with(&format!("{group}__")))
                .map(|k| format!("{scope}__{k}"))
                .collect();
            Err(unknown(
                key,
                format!("unknown {group} field {field}"),
                allowed.join(", "),
            ))
        }
        [provider, _] => Err(unknown(
            key,
            "a source key needs a provider, an index and a field",
            format!("{scope}__{provider}__{{N}}__{{FIELD}} with N a number"),
        )),
        _ => unreachable!("classify passes one or two segments"),
    }
}

/// `{SCOPE}__{PROVIDER}__{N}__{FIELD}`.
fn classify_source_key<'a>(
    key: &str,
    scope: &'a str,
    provider: &'a str,
    index: &str,
    field: &str,
) -> Result<KeyClass<'a>, ConfigError> {
    if SCOPE_KEY_GROUPS.contains(&provider) || SCOPE_KEYS.contains(&provider) {
        return Err(unknown(
            key,
            format!("{provider} is a scope-key word, not a provider"),
            scope_suffixes_allowed(),
        ));
    }
    if !is_provider_segment(provider) {
        return Err(unknown(
            key,
            format!("provider segment {provider} must be upper-case [A-Z0-9_]"),
            format!(
                "{scope}__{}__{index}__{field}",
                provider.to_ascii_uppercase()
            ),
        ));
    }
    let n = match index.parse::<u32>() {
        Ok(n) if index.bytes().all(|b| b.is_ascii_digit()) => n,
        _ => {
            return Err(unknown(
                key,
                format!("source index {index} is not a number"),
                format!("{scope}__{provider}__{{N}}__{field} with N = 1, 2, …"),
            ))
        }
    };
    let Some(def) = keys::source_field(field) else {
        return Err(unknown(
            key,
            format!("unknown source field {field}"),
            SOURCE_FIELDS.join(", "),
        ));
    };
    Ok(KeyClass::Source {
        scope,
        provider,
        n,
        field: def,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_families() {
        assert!(matches!(classify("PATH"), Ok(KeyClass::NotOurs)));
        assert!(matches!(classify("__CF_X"), Ok(KeyClass::NotOurs)));
        assert!(matches!(classify("lower__x"), Ok(KeyClass::NotOurs)));
        assert!(matches!(
            classify("PGW_LEASE_TTL_S"),
            Ok(KeyClass::Global(def)) if def.name == "PGW_LEASE_TTL_S"
        ));
        assert!(matches!(
            classify("LLM_TIMEOUT"),
            Ok(KeyClass::Shorthand(_))
        ));
        assert!(matches!(
            classify("LLM__RETRY__MAX_ATTEMPTS"),
            Ok(KeyClass::Scope { scope: "LLM", key }) if key.name == "RETRY__MAX_ATTEMPTS"
        ));
        assert!(matches!(
            classify("OCR_FAST__MONKEY__2__TIMEOUT_S"),
            Ok(KeyClass::Source {
                scope: "OCR_FAST",
                provider: "MONKEY",
                n: 2,
                field
            }) if field.name == "TIMEOUT_S"
        ));
        for bad in [
            "PGW_CACHE_BAKEND",
            "LLM__SELECTR",
            "LLM__RETRY__MAX",
            "LLM__QWEN__BASE_URL",
            "LLM__QWEN__X__BASE_URL",
            "LLM__QWEN__1__BASEURL",
            "LLM__RETRY__1__MODEL",
            "LLM__qwen__1__MODEL",
            "LLM__QWEN__1__MODEL__X",
            "LLM____X",
        ] {
            assert!(classify(bad).is_err(), "{bad}");
        }
    }
}
