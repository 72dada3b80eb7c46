//! Test kit (feature `testkit`): mock upstreams with fault injection, for tests, examples,
//! benchmarks and soaks. Everything listens on `127.0.0.1` only.
//!
//! Not for production use; nothing in the runtime depends on it.

pub mod capacity;
pub mod demo;
mod doc_setup;
pub mod mock_anthropic;
pub mod mock_capacity;
pub mod mock_gemini;
pub mod mock_llm;
pub mod mock_ocr;
#[cfg(feature = "redis")]
pub mod ocr_soak;
mod settings;
pub mod soak;

pub use doc_setup::{doc_setup, DocMocks};
pub use mock_llm::{mock_embedding, Behaviour, MockCounts, MockUpstream, RecordedRequest};
pub use settings::{mock_env, mock_settings, mock_sources_settings};

use std::time::Duration;

use serde_json::Map;

use crate::config::{MissingDone, Secret, SourceSettings};

/// Source settings pointing at `base_url`, with test-friendly values: name `openai_1`, provider
/// `openai`, model `test-model`, key `sk-test`, timeout 30 s, TTFT 10 s, inter-token 5 s,
/// `MISSING_DONE=retry`, `TRUST_ENV=false`, no limits, no extra body, thinking not injected.
///
/// ```
/// let s = polygateway::testkit::source_settings("http://127.0.0.1:9/v1");
/// assert_eq!(s.model, "test-model");
/// assert!(!s.trust_env);
/// ```
pub fn source_settings(base_url: &str) -> SourceSettings {
    SourceSettings {
        name: "openai_1".into(),
        provider: "openai".into(),
        base_url: base_url.into(),
        api_key: Secret::new("sk-test"),
        model: "test-model".into(),
        timeout: Duration::from_secs(30),
        max_concurrency: 0,
        rpm: 0,
        tpm: 0,
        est_tokens: None,
        ttft_timeout: Duration::from_secs(10),
        inter_token_timeout: Duration::from_secs(5),
        enable_thinking: None,
        missing_done: MissingDone::Retry,
        trust_env: false,
        stream: true,
        structured_mode: None,
        dialect: None,
        pool_idle_timeout: Duration::from_secs(4),
        extra_body: Map::new(),
    }
}
