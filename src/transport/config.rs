//! What a transport is configured with ([`TransportConfig`]): the part of a source's settings
//! that reaches the wire — where and how to connect, what to send, how long to wait. Governance
//! (limits, token estimates) stays in [`SourceSettings`], which only the runtime reads; this file
//! is the one place a transport's configuration is taken from a source's settings.

use std::fmt;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::config::{redact_dsn, MissingDone, Secret, SourceSettings};
use crate::provider::Dialect;
use crate::structured::StructuredMode;

/// The configuration of one source's transport (chat, embeddings or OCR): a source's settings
/// without its governance (`MAX_CONCURRENCY`, `RPM`, `TPM`, `EST_TOKENS`), which the runtime
/// applies around the transport. Built from a configured source with `From<&SourceSettings>`;
/// the fields mean what the source's keys of the same name do
/// ([`SourceSettings`](crate::config::SourceSettings)).
///
/// ```
/// use std::time::Duration;
/// use polygateway::config::Secret;
/// use polygateway::provider::ProviderProfile;
/// use polygateway::transport::{ChatTransport, TransportConfig};
/// let mut settings = polygateway_testkit::source_settings("http://127.0.0.1:9/v1");
/// settings.api_key = Secret::new("sk-live-123");
/// settings.rpm = 600; // governance: the runtime's, not the transport's
/// let mut config = TransportConfig::from(&settings);
/// assert_eq!((config.name.as_str(), config.model.as_str()), ("openai_1", "test-model"));
/// config.ttft_timeout = Duration::from_secs(2);
/// let transport = ChatTransport::new(config, ProviderProfile::generic());
/// assert_eq!(transport.config().ttft_timeout, Duration::from_secs(2));
/// // Debug output never shows the key.
/// assert!(!format!("{:?}", transport.config()).contains("sk-live-123"));
/// ```
#[derive(Clone, PartialEq)]
pub struct TransportConfig {
    /// The source's name (`{provider}_{n}`): answers, errors, logs and metrics carry it.
    pub name: String,
    /// The provider registry key (`{PROVIDER}` of the keys), carried by every answer.
    pub provider: String,
    /// `BASE_URL`: requests go to `{base_url}/{path}` (`/chat/completions`, `/embeddings`, …).
    pub base_url: String,
    /// `API_KEY`, sent in the header the dialect takes it in; empty sends none (a keyless
    /// service, such as a local OCR server).
    pub api_key: Secret,
    /// `MODEL`, put in each request body (Gemini: in the path).
    pub model: String,
    /// `TIMEOUT_S`: how long one attempt may take in all.
    pub timeout: Duration,
    /// `TTFT_TIMEOUT_S`: how long a stream may take to its first token (also caps the connect
    /// deadline).
    pub ttft_timeout: Duration,
    /// `INTER_TOKEN_TIMEOUT_S`: the longest gap a stream may leave between two tokens.
    pub inter_token_timeout: Duration,
    /// `ENABLE_THINKING`: `Some(on)` asks the model for thinking on or off in the provider's
    /// form; `None` asks nothing.
    pub enable_thinking: Option<bool>,
    /// `MISSING_DONE`: how a stream that ended with content but no end marker is judged.
    pub missing_done: MissingDone,
    /// `TRUST_ENV`: `false` ignores the proxy environment variables.
    pub trust_env: bool,
    /// `STREAM`: `false` sends every chat attempt on this source unstreamed.
    pub stream: bool,
    /// `STRUCTURED_MODE`: the mode a typed call is first sent in (`None`: the provider's
    /// strongest); the chat transport falls back from it on a refusal.
    pub structured_mode: Option<StructuredMode>,
    /// `DIALECT`: the API spoken (`None`: the provider's; an embeddings transport built without
    /// a provider speaks OpenAI's).
    pub dialect: Option<Dialect>,
    /// `POOL_IDLE_TIMEOUT_S`: how long the pool keeps an idle connection (lowered when the
    /// upstream announces a shorter `Keep-Alive: timeout=`).
    pub pool_idle_timeout: Duration,
    /// `EXTRA_BODY`: JSON keys merged into every request body, below everything the call sets.
    pub extra_body: Map<String, Value>,
}

impl From<&SourceSettings> for TransportConfig {
    fn from(s: &SourceSettings) -> Self {
        Self {
            name: s.name.clone(),
            provider: s.provider.clone(),
            base_url: s.base_url.clone(),
            api_key: s.api_key.clone(),
            model: s.model.clone(),
            timeout: s.timeout,
            ttft_timeout: s.ttft_timeout,
            inter_token_timeout: s.inter_token_timeout,
            enable_thinking: s.enable_thinking,
            missing_done: s.missing_done,
            trust_env: s.trust_env,
            stream: s.stream,
            structured_mode: s.structured_mode,
            dialect: s.dialect,
            pool_idle_timeout: s.pool_idle_timeout,
            extra_body: s.extra_body.clone(),
        }
    }
}

#[cfg(test)]
impl TransportConfig {
    /// The configuration of `testkit::source_settings(base_url)`, for unit tests.
    pub(crate) fn for_tests(base_url: &str) -> Self {
        Self::from(&crate::test_support::source_settings(base_url))
    }
}

impl fmt::Debug for TransportConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransportConfig")
            .field("name", &self.name)
            .field("provider", &self.provider)
            .field("base_url", &redact_dsn(&self.base_url))
            .field("api_key", &self.api_key)
            .field("model", &self.model)
            .field("timeout", &self.timeout)
            .field("ttft_timeout", &self.ttft_timeout)
            .field("inter_token_timeout", &self.inter_token_timeout)
            .field("enable_thinking", &self.enable_thinking)
            .field("missing_done", &self.missing_done)
            .field("trust_env", &self.trust_env)
            .field("stream", &self.stream)
            .field("structured_mode", &self.structured_mode)
            .field("dialect", &self.dialect)
            .field("pool_idle_timeout", &self.pool_idle_timeout)
            .field("extra_body", &self.extra_body)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_neither_the_key_nor_a_password_in_the_url() {
        let mut config = TransportConfig::for_tests("https://user:url-s3cret@llm.example/v1");
        config.api_key = Secret::new("sk-live-transport-123");
        let shown = format!("{config:?}");
        assert!(!shown.contains("sk-live-transport-123"), "{shown}");
        assert!(!shown.contains("url-s3cret"), "{shown}");
        // The rest is shown: a config stays debuggable.
        assert!(
            shown.contains("openai_1") && shown.contains("test-model"),
            "{shown}"
        );
    }

    #[test]
    fn every_wire_field_is_taken_from_the_source() {
        use crate::provider::Dialect;
        let mut s = crate::test_support::source_settings("http://127.0.0.1:9/v1");
        s.enable_thinking = Some(true);
        s.missing_done = MissingDone::Salvage;
        s.trust_env = true;
        s.stream = false;
        s.structured_mode = Some(StructuredMode::Prompt);
        s.dialect = Some(Dialect::Gemini);
        s.pool_idle_timeout = Duration::from_secs(9);
        s.extra_body.insert("temperature".into(), 0.2.into());
        let c = TransportConfig::from(&s);
        assert_eq!(
            (c.name, c.provider, c.base_url, c.api_key, c.model),
            (s.name, s.provider, s.base_url, s.api_key, s.model)
        );
        assert_eq!(
            (
                c.timeout,
                c.ttft_timeout,
                c.inter_token_timeout,
                c.pool_idle_timeout
            ),
            (
                s.timeout,
                s.ttft_timeout,
                s.inter_token_timeout,
                s.pool_idle_timeout
            )
        );
        assert_eq!(
            (c.enable_thinking, c.missing_done, c.trust_env, c.stream),
            (s.enable_thinking, s.missing_done, s.trust_env, s.stream)
        );
        assert_eq!(
            (c.structured_mode, c.dialect),
            (s.structured_mode, s.dialect)
        );
        assert_eq!(c.extra_body, s.extra_body);
    }

    #[test]
    fn the_source_or_else_its_provider_decides_dialect_and_mode() {
        use crate::provider::ProviderRegistry;
        let registry = ProviderRegistry::with_defaults();
        let mut s = crate::test_support::source_settings("http://127.0.0.1:9/v1");
        s.provider = "anthropic".into();
        let profile = registry.get(&s.provider);
        let c = TransportConfig::from(&s);
        // Unset: the provider's, alike for the transport and the source.
        assert_eq!(profile.dialect_for(c.dialect), Dialect::Anthropic);
        assert_eq!(s.effective_dialect(profile), Dialect::Anthropic);
        assert_eq!(
            profile.structured_mode_for(c.structured_mode),
            profile.structured_mode()
        );
        assert_eq!(
            s.effective_structured_mode(profile),
            profile.structured_mode()
        );
        s.dialect = Some(Dialect::OpenAi);
        s.structured_mode = Some(StructuredMode::Prompt);
        let c = TransportConfig::from(&s);
        assert_eq!(profile.dialect_for(c.dialect), Dialect::OpenAi);
        assert_eq!(
            profile.structured_mode_for(c.structured_mode),
            StructuredMode::Prompt
        );
    }
}
