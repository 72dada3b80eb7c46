//! The catalogue of configuration keys the parser accepts (docs/behaviour.md §3).
//!
//! The parser in `env` matches keys against these lists and nothing else, so the docs
//! (`.env.example`, README) can be checked against [`accepted_keys`]. This module holds names
//! only; defaults live in `defaults`, parsing in `env` (both crate-private).

/// Fields of a source key `{SCOPE}__{PROVIDER}__{N}__{FIELD}`.
///
/// ```
/// use polygateway::config::{ConfigError, Settings, SOURCE_FIELDS};
/// # use std::collections::BTreeMap;
/// # fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
/// #     pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
/// # }
/// assert!(SOURCE_FIELDS.contains(&"BASE_URL"));
/// // A misspelt field is refused, and the error lists the accepted fields.
/// let err = Settings::from_map(&env(&[("LLM__QWEN__1__BASEURL", "https://x.invalid")]))
///     .unwrap_err();
/// let ConfigError::UnknownKey { allowed, .. } = err else { panic!("{err}") };
/// assert_eq!(allowed, SOURCE_FIELDS.join(", "));
/// ```
pub const SOURCE_FIELDS: [&str; 17] = [
    "BASE_URL",
    "API_KEY",
    "MODEL",
    "TIMEOUT_S",
    "MAX_CONCURRENCY",
    "RPM",
    "TPM",
    "EST_TOKENS",
    "TTFT_TIMEOUT_S",
    "INTER_TOKEN_TIMEOUT_S",
    "ENABLE_THINKING",
    "MISSING_DONE",
    "TRUST_ENV",
    "STREAM",
    "STRUCTURED_MODE",
    "POOL_IDLE_TIMEOUT_S",
    "EXTRA_BODY",
];

/// Scope-level key suffixes: the full key is `{SCOPE}__{SUFFIX}`. The last three are only valid
/// in embeddings scopes.
///
/// ```
/// use polygateway::config::{Settings, SCOPE_KEYS};
/// # use std::collections::BTreeMap;
/// # fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
/// #     pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
/// # }
/// assert!(SCOPE_KEYS.contains(&"RETRY__MAX_ATTEMPTS"));
/// let settings = Settings::from_map(&env(&[
///     ("PGW_LIMITER_BACKEND", "memory"),
///     ("PGW_BREAKER_BACKEND", "memory"),
///     ("LLM__QWEN__1__BASE_URL", "https://example.invalid/v1"),
///     ("LLM__QWEN__1__MODEL", "qwen-plus"),
///     ("LLM__RETRY__MAX_ATTEMPTS", "5"),
/// ]))
/// .unwrap();
/// assert_eq!(settings.scope("LLM").unwrap().retry.max_attempts, 5);
/// ```
pub const SCOPE_KEYS: [&str; 25] = [
    "GLOBAL__MAX_CONCURRENCY",
    "GLOBAL__RPM",
    "GLOBAL__TPM",
    "SELECTOR",
    "PACER",
    "PACER__START",
    "PACER__CEILING",
    "RETRY__MAX_ATTEMPTS",
    "RETRY__BACKOFF_BASE_S",
    "RETRY__BACKOFF_MAX_S",
    "BREAKER__FAIL_THRESHOLD",
    "BREAKER__COOLDOWN_S",
    "BREAKER__PROBE_TTL_S",
    "BREAKER__MIN_CALLS",
    "BREAKER__FAIL_RATE",
    "BREAKER__WINDOW_S",
    "BREAKER__MAX_COOLDOWN_S",
    "BACKPRESSURE__STALL_WINDOW_S",
    "BACKPRESSURE__POLL_INTERVAL_S",
    "QUOTA_FULL",
    "CIRCUIT_OPEN",
    "BUDGET",
    "BATCH_SIZE",
    "NORMALIZE",
    "EXPECTED_DIM",
];

/// Scope-key suffixes valid only in embeddings scopes.
///
/// ```
/// use polygateway::config::{ConfigError, Settings, EMBEDDING_SCOPE_KEYS};
/// # use std::collections::BTreeMap;
/// # fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
/// #     pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
/// # }
/// assert!(EMBEDDING_SCOPE_KEYS.contains(&"BATCH_SIZE"));
/// // `LLM` is a chat scope, so an embeddings-only key is refused there.
/// let err = Settings::from_map(&env(&[
///     ("PGW_LIMITER_BACKEND", "memory"),
///     ("PGW_BREAKER_BACKEND", "memory"),
///     ("LLM__QWEN__1__BASE_URL", "https://example.invalid/v1"),
///     ("LLM__QWEN__1__MODEL", "qwen-plus"),
///     ("LLM__BATCH_SIZE", "32"),
/// ]))
/// .unwrap_err();
/// assert!(matches!(err, ConfigError::WrongScopeKind { kind: "chat", .. }), "{err}");
/// ```
pub const EMBEDDING_SCOPE_KEYS: [&str; 3] = ["BATCH_SIZE", "NORMALIZE", "EXPECTED_DIM"];

/// Second segments that introduce a scope-key group (`{SCOPE}__{GROUP}__{FIELD}`); they can never
/// be provider names.
///
/// ```
/// use polygateway::config::keys::SCOPE_KEY_GROUPS;
/// use polygateway::config::{ConfigError, Settings};
/// # use std::collections::BTreeMap;
/// # fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
/// #     pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
/// # }
/// assert!(SCOPE_KEY_GROUPS.contains(&"RETRY"));
/// // `RETRY` cannot be read as a provider name, even in a source-shaped key.
/// let err = Settings::from_map(&env(&[("LLM__RETRY__1__MODEL", "m")])).unwrap_err();
/// assert!(matches!(err, ConfigError::UnknownKey { .. }), "{err}");
/// ```
pub const SCOPE_KEY_GROUPS: [&str; 5] = ["GLOBAL", "RETRY", "BREAKER", "BACKPRESSURE", "PACER"];

/// Flat shorthands: defaults for every scope (scope and source keys win).
///
/// ```
/// use std::time::Duration;
/// use polygateway::config::{Settings, SHORTHAND_KEYS};
/// # use std::collections::BTreeMap;
/// # fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
/// #     pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
/// # }
/// assert!(SHORTHAND_KEYS.contains(&"LLM_TIMEOUT"));
/// let settings = Settings::from_map(&env(&[
///     ("PGW_LIMITER_BACKEND", "memory"),
///     ("PGW_BREAKER_BACKEND", "memory"),
///     ("LLM_TIMEOUT", "20"),
///     ("VLM__QWEN__1__BASE_URL", "https://example.invalid/v1"),
///     ("VLM__QWEN__1__MODEL", "qwen-vl"),
///     ("VLM__QWEN__2__BASE_URL", "https://example.invalid/v1"),
///     ("VLM__QWEN__2__MODEL", "qwen-vl"),
///     ("VLM__QWEN__2__TIMEOUT_S", "90"),
/// ]))
/// .unwrap();
/// // The shorthand applies to every scope (not only `LLM`); a source key wins over it.
/// let vlm = settings.scope("VLM").unwrap();
/// assert_eq!(vlm.sources[0].timeout, Duration::from_secs(20));
/// assert_eq!(vlm.sources[1].timeout, Duration::from_secs(90));
/// ```
pub const SHORTHAND_KEYS: [&str; 8] = [
    "LLM_TIMEOUT",
    "LLM_MAX_RETRIES",
    "LLM_RETRY_BASE_DELAY",
    "LLM_RETRY_MAX_DELAY",
    "LLM_CIRCUIT_BREAKER_THRESHOLD",
    "LLM_CIRCUIT_BREAKER_COOLDOWN",
    "LLM_TTFT_TIMEOUT",
    "LLM_INTER_TOKEN_TIMEOUT",
];

/// Runtime-wide keys (backends and library knobs). Any other `PGW_*` key is an error.
///
/// ```
/// use polygateway::config::keys::GLOBAL_PREFIX;
/// use polygateway::config::GLOBAL_KEYS;
/// assert!(GLOBAL_KEYS.contains(&"PGW_LIMITER_BACKEND"));
/// // All but `REDIS_URL` live in the library's reserved namespace.
/// let outside: Vec<_> = GLOBAL_KEYS.iter().filter(|k| !k.starts_with(GLOBAL_PREFIX)).collect();
/// assert_eq!(outside, [&"REDIS_URL"]);
/// ```
pub const GLOBAL_KEYS: [&str; 23] = [
    "PGW_LIMITER_BACKEND",
    "PGW_BREAKER_BACKEND",
    "REDIS_URL",
    "PGW_CACHE_BACKEND",
    "PGW_CACHE_NAMESPACE",
    "PGW_CACHE_TTL_S",
    "PGW_TELEMETRY_BACKEND",
    "PGW_TELEMETRY_SQLITE_PATH",
    "PGW_TELEMETRY_PG_DSN",
    "PGW_TELEMETRY_SCHEMA_MODE",
    "PGW_TELEMETRY_TEXT_CAP",
    "PGW_TELEMETRY_PG_POOL_MAX",
    "PGW_TELEMETRY_PG_WRITE_TIMEOUT_S",
    "PGW_PRICING_PATH",
    "PGW_STRUCTURED_MAX_RETRIES",
    "PGW_LEASE_TTL_S",
    "PGW_TENANT_BUDGETS",
    "PGW_SERVER_BIND",
    "PGW_SERVER_BODY_LIMIT_BYTES",
    "PGW_SERVER_REQUEST_TIMEOUT_S",
    "PGW_SERVER_DRAIN_TIMEOUT_S",
    "PGW_SERVER_KEYS_FILE",
    "PGW_SERVER_MODEL_ALIASES",
];

/// Prefix reserved for the library's global keys.
///
/// ```
/// use polygateway::config::keys::GLOBAL_PREFIX;
/// use polygateway::config::{ConfigError, Settings};
/// # use std::collections::BTreeMap;
/// # fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
/// #     pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
/// # }
/// assert_eq!(GLOBAL_PREFIX, "PGW_");
/// // A typo in a library key fails loudly instead of being ignored.
/// let err = Settings::from_map(&env(&[("PGW_CACHE_BAKEND", "memory")])).unwrap_err();
/// let ConfigError::UnknownKey { key, .. } = err else { panic!("{err}") };
/// assert_eq!(key, "PGW_CACHE_BAKEND");
/// ```
pub const GLOBAL_PREFIX: &str = "PGW_";

/// Every accepted key as a pattern: `{SCOPE}__{PROVIDER}__{N}__{FIELD}` for each source field,
/// `{SCOPE}__{SUFFIX}` for each scope key, then the shorthands and the global keys verbatim.
///
/// ```
/// let keys = polygateway::config::accepted_keys();
/// assert!(keys.contains(&"{SCOPE}__{PROVIDER}__{N}__BASE_URL".to_string()));
/// assert!(keys.contains(&"{SCOPE}__RETRY__MAX_ATTEMPTS".to_string()));
/// assert!(keys.contains(&"PGW_LEASE_TTL_S".to_string()));
/// ```
pub fn accepted_keys() -> Vec<String> {
    SOURCE_FIELDS
        .iter()
        .map(|f| format!("{{SCOPE}}__{{PROVIDER}}__{{N}}__{f}"))
        .chain(SCOPE_KEYS.iter().map(|s| format!("{{SCOPE}}__{s}")))
        .chain(SHORTHAND_KEYS.iter().map(|k| k.to_string()))
        .chain(GLOBAL_KEYS.iter().map(|k| k.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn lists_have_no_duplicates_and_groups_cover_scope_keys() {
        let all = accepted_keys();
        let set: BTreeSet<_> = all.iter().collect();
        assert_eq!(set.len(), all.len());
        for key in SCOPE_KEYS {
            if let Some((group, _)) = key.split_once("__") {
                assert!(SCOPE_KEY_GROUPS.contains(&group), "{key}");
            }
        }
        for key in EMBEDDING_SCOPE_KEYS {
            assert!(SCOPE_KEYS.contains(&key));
        }
    }
}
