//! [`ValidationError`], what every entry check returns, and how it shows an offending value
//! ([`shorten`]). Its own file because the checks (`validate`) and the types that convert and check
//! their own values (`types::MetaValue::from_json`) both build it.

/// How many chars of an offending value an error message shows.
const SHOWN_CHARS: usize = 64;

/// An entry validation failure. Each variant names the field, the limit and (shortened to about
/// 64 chars) the offending value.
///
/// A call with such an input fails with [`crate::GatewayError::InvalidInput`]
/// before anything is sent:
///
/// ```
/// use polygateway::validate::{validate_overlay, ValidationError};
/// use polygateway::GatewayError;
/// let overlay = serde_json::json!({"model": "gpt-4o"});
/// let err = validate_overlay("overlay", overlay.as_object().unwrap()).unwrap_err();
/// assert_eq!(err, ValidationError::ProtectedKey { field: "overlay".into(), key: "model".into() });
/// assert!(err.to_string().starts_with("overlay must not set the protected key \"model\""));
/// let err: GatewayError = err.into();
/// assert_eq!(err.class_name(), "InvalidInput");
/// ```
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ValidationError {
    /// `tenant_id` was set to the empty string (empty is reserved as the "unattributed" sentinel:
    /// leave the field unset instead).
    #[error("tenant_id must not be empty (the empty string is the unattributed sentinel; leave tenant_id unset instead)")]
    TenantIdEmpty,
    /// `tenant_id` is longer than 128 characters (`limit`).
    #[error("tenant_id is {len} chars, limit {limit}: {value:?}")]
    TenantIdTooLong {
        /// Its length in chars.
        len: usize,
        /// The limit.
        limit: usize,
        /// The value, shortened.
        value: String,
    },
    /// `tenant_id` starts or ends with whitespace (rejected, never trimmed).
    #[error("tenant_id must not start or end with whitespace (it is never trimmed): {value:?}")]
    TenantIdWhitespace {
        /// The value, shortened.
        value: String,
    },
    /// `meta` holds more than 16 keys (`limit`).
    #[error("meta has {count} keys, limit {limit}")]
    MetaTooManyKeys {
        /// How many keys it has.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// A `meta` key does not match `[a-z0-9_.]{1,64}`.
    #[error("meta key {key:?} must match [a-z0-9_.]{{1,{limit}}}")]
    MetaKeyInvalid {
        /// The key, shortened.
        key: String,
        /// The length limit.
        limit: usize,
    },
    /// A `meta` key uses the reserved `pg_` prefix.
    #[error("meta key {key:?} uses the prefix {prefix:?}, which is reserved for the library")]
    MetaKeyReserved {
        /// The key, shortened.
        key: String,
        /// The reserved prefix.
        prefix: &'static str,
    },
    /// A `meta` value is not a string, integer, float or bool.
    #[error("meta value of key {key:?} is {found}; allowed: string, integer, float, bool")]
    MetaValueType {
        /// The key, shortened.
        key: String,
        /// The JSON type that was found (`null`, `array`, `object`).
        found: &'static str,
    },
    /// A `meta` string value is longer than 256 characters (`limit`).
    #[error("meta value of key {key:?} is {len} chars, limit {limit}: {value:?}")]
    MetaStringTooLong {
        /// The key, shortened.
        key: String,
        /// The value's length in chars.
        len: usize,
        /// The limit.
        limit: usize,
        /// The value, shortened.
        value: String,
    },
    /// A `meta` float value is NaN or infinite (not valid JSON; JSONB refuses it).
    #[error("meta value of key {key:?} must be a finite float, got {value}")]
    MetaFloatNotFinite {
        /// The key, shortened.
        key: String,
        /// The value.
        value: f64,
    },
    /// A call's deadline is not a positive, finite number of seconds of at most a day.
    #[error(
        "deadline must be a positive number of seconds, at most {limit_s} (one day), got {value}"
    )]
    DeadlineInvalid {
        /// The value given, in seconds.
        value: f64,
        /// The largest deadline allowed, in seconds.
        limit_s: u64,
    },
    /// A tenant weight is outside `1..=MAX`.
    #[error("weight must be a whole number from 1 to {limit}, got {value}")]
    WeightInvalid {
        /// The value given.
        value: u64,
        /// The largest weight allowed.
        limit: u32,
    },
    /// A priority that is not one of the classes.
    #[error("unknown priority {value:?}: use interactive, normal or batch")]
    PriorityInvalid {
        /// The value given, shortened.
        value: String,
    },
    /// An overlay or `extra_body` sets a key the runtime owns.
    #[error("{field} must not set the protected key {key:?} (protected: model, messages, stream, stream_options)")]
    ProtectedKey {
        /// `overlay` or `extra_body` (or the config key it came from).
        field: String,
        /// The offending key.
        key: String,
    },
}

/// Shorten a value for an error message: at most [`SHOWN_CHARS`] chars, then `…`.
pub(crate) fn shorten(value: &str) -> String {
    if value.chars().count() <= SHOWN_CHARS {
        value.to_string()
    } else {
        let mut s: String = value.chars().take(SHOWN_CHARS).collect();
        s.push('…');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shorten_keeps_short_values_and_cuts_long_ones() {
        assert_eq!(shorten("abc"), "abc");
        let long = "é".repeat(100);
        let s = shorten(&long);
        assert_eq!(s.chars().count(), SHOWN_CHARS + 1);
        assert!(s.ends_with('…'));
    }
}
