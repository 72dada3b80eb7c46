//! A secret configuration value: kept apart so that every settings module can hold one without
//! importing the others.

use std::fmt;

/// A secret string (API key, DSN password). Its `Debug`/`Display` never show the value.
///
/// ```
/// use polygateway::config::Secret;
/// let s = Secret::new("sk-live-123");
/// assert_eq!(format!("{s:?}"), "Secret(***)");
/// assert_eq!(s.expose(), "sk-live-123");
/// ```
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

impl Secret {
    /// Wrap a secret.
    ///
    /// ```
    /// use polygateway::config::Secret;
    /// // Anything string-like; the wrapper hides it from logs.
    /// let key = Secret::new(String::from("sk-live-123"));
    /// assert_eq!(key.to_string(), "***");
    /// assert_eq!(key, Secret::new("sk-live-123"));
    /// ```
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }
    /// The raw value — only for building the outgoing request.
    ///
    /// ```
    /// use polygateway::config::Secret;
    /// let key = Secret::new("sk-live-123");
    /// let header = format!("Bearer {}", key.expose());
    /// assert_eq!(header, "Bearer sk-live-123");
    /// ```
    pub fn expose(&self) -> &str {
        &self.0
    }
    /// `true` when empty.
    ///
    /// ```
    /// use polygateway::config::Secret;
    /// // Keyless services (e.g. a local OCR server) have an empty key: send no auth header.
    /// assert!(Secret::default().is_empty());
    /// assert!(!Secret::new("sk-live-123").is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}
