//! The wire dialect of a source (re-exported as `provider::Dialect`). In `types` because a
//! client's body in a source dialect ([`super::native_body`]) names it, and the call's options
//! carry that body from the server to the transport.

/// The wire protocol a chat source speaks: which API its requests and answers follow. Each
/// dialect is a codec behind the one chat transport (docs/behaviour.md §7.5); the governance
/// stack above it sees only the canonical call model (messages, `LlmResponse`, `Usage`).
///
/// ```
/// use polygateway::provider::{Dialect, ProviderRegistry};
/// let registry = ProviderRegistry::with_defaults();
/// // Chosen by the provider name; a source's `DIALECT` key overrides it.
/// assert_eq!(registry.get("anthropic").dialect, Dialect::Anthropic);
/// assert_eq!(registry.get("gemini").dialect, Dialect::Gemini);
/// assert_eq!(registry.get("deepseek").dialect, Dialect::OpenAi);
/// assert_eq!(Dialect::Gemini.as_str(), "gemini");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Dialect {
    /// OpenAI's chat completions API (`POST {base}/chat/completions`), spoken by OpenAI and
    /// most other providers and servers.
    #[default]
    OpenAi,
    /// Anthropic's Messages API (`POST {base}/messages`).
    Anthropic,
    /// Google's Gemini API (`POST {base}/models/{model}:generateContent`).
    Gemini,
}

impl Dialect {
    /// Every dialect, in the order the configuration documents them.
    pub(crate) const ALL: [Dialect; 3] = [Dialect::OpenAi, Dialect::Anthropic, Dialect::Gemini];

    /// The configuration value (`DIALECT`).
    ///
    /// ```
    /// use polygateway::provider::Dialect;
    /// assert_eq!(Dialect::OpenAi.as_str(), "openai");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::OpenAi => "openai",
            Dialect::Anthropic => "anthropic",
            Dialect::Gemini => "gemini",
        }
    }
}
