//! Settings for this crate's own unit tests.
//!
//! The mock upstreams of unit tests are `polygateway-testkit`'s (a dev-dependency), reached by
//! their URLs. Its settings helpers cannot serve here: they return the types of the `polygateway`
//! that crate links, and a unit-test build is a second compilation of this crate whose types are
//! other types. These build this crate's own, with the values the testkit's helpers document.

use std::time::Duration;

use serde_json::Map;

use crate::config::{MissingDone, Secret, Settings, SourceSettings};

/// `polygateway_testkit::source_settings`, as this crate's type: name `openai_1`, provider
/// `openai`, model `test-model`, key `sk-test`, timeout 30 s, TTFT 10 s, inter-token 5 s,
/// `MISSING_DONE=retry`, `TRUST_ENV=false`, no limits, no extra body, thinking not injected.
pub(crate) fn source_settings(base_url: &str) -> SourceSettings {
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

/// One chat scope `LLM` with one OpenAI-compatible source at `base_url` on the memory backends,
/// no telemetry, no cache: `polygateway_testkit::mock_settings(&[("LLM", base_url)], &[])`'s
/// governance, as this crate's type.
pub(crate) fn chat_settings(base_url: &str) -> Settings {
    let env = [
        ("PGW_LIMITER_BACKEND", "memory"),
        ("PGW_BREAKER_BACKEND", "memory"),
        ("PGW_TELEMETRY_BACKEND", "none"),
        ("PGW_CACHE_BACKEND", "none"),
        ("LLM__OPENAI__1__BASE_URL", base_url),
        ("LLM__OPENAI__1__API_KEY", "sk-test"),
        ("LLM__OPENAI__1__MODEL", "test-model"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    Settings::from_map(&env).expect("the unit tests' settings parse")
}

mod tests {
    /// This crate's copy and the test kit's are one set of values (compared by their `Debug`:
    /// the two are the same type of two builds of this crate).
    #[test]
    fn the_unit_tests_source_is_the_test_kits() {
        let url = "http://127.0.0.1:9/v1";
        assert_eq!(
            format!("{:?}", super::source_settings(url)),
            format!("{:?}", polygateway_testkit::source_settings(url))
        );
        let (ours, kits) = (
            super::chat_settings(url),
            polygateway_testkit::mock_settings(&[("LLM", url)], &[]),
        );
        assert_eq!(
            format!("{:?}", ours.scopes["LLM"].sources),
            format!("{:?}", kits.scopes["LLM"].sources)
        );
    }
}
