//! Configuration errors: what refuses assembly, naming the key, the value and what is allowed.
//!
//! Messages never carry secrets: API keys, `REDIS_URL` and the Postgres DSN are never rendered,
//! and URL-like values are shown with their credentials masked ([`super::redact_dsn`]).

use crate::validate::ValidationError;

/// A configuration defect. Assembly stops at the first one found.
///
/// ```
/// use std::collections::BTreeMap;
/// use polygateway::config::{ConfigError, Settings};
/// // A scope is configured but the limiter backend, which has no default, is not.
/// let map: BTreeMap<String, String> = [
///     ("LLM__QWEN__1__BASE_URL", "https://example.invalid/v1"),
///     ("LLM__QWEN__1__MODEL", "qwen-plus"),
/// ]
/// .into_iter()
/// .map(|(k, v)| (k.to_string(), v.to_string()))
/// .collect();
/// let err = Settings::from_map(&map).unwrap_err();
/// match &err {
///     ConfigError::Missing { key, .. } => assert_eq!(key, "PGW_LIMITER_BACKEND"),
///     other => panic!("unexpected: {other}"),
/// }
/// assert!(err.to_string().starts_with("missing required key PGW_LIMITER_BACKEND: "));
/// ```
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A required key is absent (or empty).
    #[error("missing required key {key}: {reason}")]
    Missing {
        /// The key.
        key: String,
        /// Why it is required.
        reason: String,
    },
    /// A key in the library's namespace is not one the parser knows.
    #[error("unknown key {key}: {reason}; allowed: {allowed}")]
    UnknownKey {
        /// The key as written.
        key: String,
        /// What is wrong with it.
        reason: String,
        /// What would have been accepted at that position.
        allowed: String,
    },
    /// A value does not parse or is out of range.
    #[error("invalid value for {key}: {value} (expected {expected})")]
    InvalidValue {
        /// The key.
        key: String,
        /// The value, shortened, or a placeholder for secrets.
        value: String,
        /// What is allowed.
        expected: String,
    },
    /// A key that is meaningless for this kind of scope.
    #[error("{key} is not valid in scope {scope} ({kind} scope): {reason}")]
    WrongScopeKind {
        /// The key.
        key: String,
        /// The scope name.
        scope: String,
        /// The scope kind (`chat`, `embeddings`, `ocr`).
        kind: &'static str,
        /// Why.
        reason: String,
    },
    /// A body fragment (`EXTRA_BODY`) breaks an entry rule.
    #[error("invalid {key}: {source}")]
    Validation {
        /// The key.
        key: String,
        /// The rule that failed.
        #[source]
        source: ValidationError,
    },
    /// An assembly guard refused the combination of values.
    #[error("{key}={value} refused: {rule}")]
    Guard {
        /// The key whose value is refused.
        key: String,
        /// Its value (never a secret).
        value: String,
        /// The rule, naming any other key involved and its value.
        rule: String,
    },
    /// A scope keyed only by scope-level keys, with no source.
    #[error(
        "scope {scope} has no sources: add {scope}__{{PROVIDER}}__{{N}}__BASE_URL and __MODEL"
    )]
    NoSources {
        /// The scope name.
        scope: String,
    },
    /// The caller asked for a scope that is not configured.
    #[error("scope {scope} is not configured; configured scopes: {available}")]
    UnknownScope {
        /// The requested name.
        scope: String,
        /// The configured names, comma separated (or `none`).
        available: String,
    },
    /// The configuration names a backend whose cargo feature this build of polygateway does not
    /// enable (e.g. `PGW_LIMITER_BACKEND=redis` without the `redis` feature).
    #[error(
        "{key}={value} needs polygateway's `{feature}` cargo feature, which this build does not \
         enable: add `features = [\"{feature}\"]` to the polygateway dependency"
    )]
    FeatureDisabled {
        /// The key naming the backend.
        key: String,
        /// Its value.
        value: String,
        /// The cargo feature that provides the backend.
        feature: &'static str,
    },
    /// Well-formed settings the gateway cannot be assembled from: a file or service a key names
    /// cannot be used (the server's key file, `REDIS_URL`, the pricing table, the cache, a batch
    /// journal), or values that do not fit together (a spend budget over an unpriced model, an
    /// alias naming no scope). The message names the key.
    #[error("{0}")]
    Assembly(String),
    /// The `.env` file could not be read or parsed. Line contents are never shown (they may hold
    /// a secret).
    #[error("cannot read {path}: {reason}")]
    DotEnv {
        /// The file.
        path: String,
        /// What went wrong.
        reason: String,
    },
}
