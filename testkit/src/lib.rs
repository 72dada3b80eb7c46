//! The test kit of `polygateway`: mock upstreams with fault injection (OpenAI-compatible,
//! Anthropic, Gemini, MonkeyOCR) and the soak and capacity drivers, for tests, examples,
//! benchmarks and soaks — polygateway's own and those of a service built on it. Everything listens
//! on `127.0.0.1` only.
//!
//! A crate of its own, as `tokio-test` is to tokio: a service never compiles it, and the library's
//! API does not carry it. `polygateway` has it as a dev-dependency. The mocks follow the providers'
//! published API references, not polygateway's translation of them, so a test against a mock is a
//! test of the dialect.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![deny(unreachable_pub)]

pub mod capacity;
pub mod demo;
mod doc_setup;
pub mod mock_anthropic;
pub mod mock_capacity;
pub mod mock_gemini;
pub mod mock_llm;
pub mod mock_ocr;
pub mod ocr_soak;
mod settings;
pub mod soak;

pub use doc_setup::{doc_setup, DocMocks};
pub use mock_llm::{mock_embedding, Behaviour, MockCounts, MockUpstream, RecordedRequest};
pub use settings::{mock_env, mock_settings, mock_sources_settings};

use polygateway::config::SourceSettings;

/// Source settings pointing at `base_url`, with test-friendly values: name `openai_1`, provider
/// `openai`, model `test-model`, key `sk-test`, timeout 30 s, TTFT 10 s, inter-token 5 s,
/// `MISSING_DONE=retry`, `TRUST_ENV=false`, no limits, no extra body, thinking not injected.
/// Read from those keys by `Settings::from_map`, as a configured source is; `base_url` is then
/// set as given, unchecked, so a test can hand a transport a URL the configuration would refuse.
///
/// ```
/// use std::time::Duration;
/// let s = polygateway_testkit::source_settings("http://127.0.0.1:9/v1");
/// assert_eq!((s.name.as_str(), s.model.as_str()), ("openai_1", "test-model"));
/// assert_eq!((s.timeout, s.ttft_timeout), (Duration::from_secs(30), Duration::from_secs(10)));
/// assert!(!s.trust_env);
/// assert_eq!(s.enable_thinking, None);
/// assert_eq!(polygateway_testkit::source_settings("not a url").base_url, "not a url");
/// ```
pub fn source_settings(base_url: &str) -> SourceSettings {
    let mut settings = mock_settings(
        &[("LLM", "http://127.0.0.1:9/v1")],
        &[
            ("LLM__OPENAI__1__TIMEOUT_S", "30"),
            ("LLM__OPENAI__1__TTFT_TIMEOUT_S", "10"),
            ("LLM__OPENAI__1__INTER_TOKEN_TIMEOUT_S", "5"),
            ("LLM__OPENAI__1__MISSING_DONE", "retry"),
            ("LLM__OPENAI__1__TRUST_ENV", "false"),
            ("LLM__OPENAI__1__POOL_IDLE_TIMEOUT_S", "4"),
        ],
    );
    let mut scope = settings.scopes.remove("LLM").expect("the one scope");
    let mut source = scope.sources.remove(0);
    source.base_url = base_url.into();
    source
}
