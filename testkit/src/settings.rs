//! Settings for scopes served by local mock upstreams, the one-liner that tests and doc examples
//! start from.

use std::collections::BTreeMap;

use polygateway::config::{scope_kind_for, ScopeKind, Settings};

/// Settings with one source per `(scope, base_url)` pair and test-friendly governance: memory
/// limiter and breaker, no telemetry, no cache, retry backoff 10–50 ms. Chat and embeddings
/// scopes get source `openai_1` (`{SCOPE}__OPENAI__1__…`, model `test-model`, key `sk-test`);
/// OCR scopes (names starting with `OCR`) get `monkey_1`. `extra` env-style keys are applied
/// last and win.
///
/// # Panics
/// If the resulting settings do not parse (a bad `extra` key or value): this is a test helper.
///
/// ```
/// use polygateway_testkit::mock_settings;
/// let settings = mock_settings(
///     &[("LLM", "http://127.0.0.1:9/v1"), ("OCR", "http://127.0.0.1:9")],
///     &[("LLM__RETRY__MAX_ATTEMPTS", "1")],
/// );
/// assert_eq!(settings.scopes["LLM"].sources[0].name, "openai_1");
/// assert_eq!(settings.scopes["OCR"].sources[0].name, "monkey_1");
/// assert_eq!(settings.scopes["LLM"].retry.max_attempts, 1);
/// ```
pub fn mock_settings(scopes: &[(&str, &str)], extra: &[(&str, &str)]) -> Settings {
    let sources: Vec<(&str, &str, &str)> = scopes
        .iter()
        .map(|&(scope, base_url)| {
            let provider = match scope_kind_for(scope) {
                ScopeKind::Ocr => "MONKEY",
                ScopeKind::Chat | ScopeKind::Embeddings => "OPENAI",
            };
            (scope, provider, base_url)
        })
        .collect();
    mock_sources_settings(&sources, extra)
}

/// Like [`mock_settings`], with any number of sources per scope and a provider of your choice:
/// one `(scope, provider, base_url)` triple per source. Sources of one provider in one scope are
/// numbered in order (`deepseek_1`, `deepseek_2`, …); the provider decides the wire details
/// (thinking switch, structured-output mode), so a mixed scope behaves as in production.
///
/// # Panics
/// If the resulting settings do not parse: this is a test helper.
///
/// ```
/// use polygateway_testkit::mock_sources_settings;
/// let settings = mock_sources_settings(
///     &[
///         ("LLM", "openai", "http://127.0.0.1:9/v1"),
///         ("LLM", "deepseek", "http://127.0.0.1:10/v1"),
///         ("LLM", "deepseek", "http://127.0.0.1:11/v1"),
///     ],
///     &[("LLM__SELECTOR", "round_robin")],
/// );
/// let names: Vec<&str> = settings.scopes["LLM"].sources.iter().map(|s| s.name.as_str()).collect();
/// assert_eq!(names, ["deepseek_1", "deepseek_2", "openai_1"]);
/// ```
pub fn mock_sources_settings(sources: &[(&str, &str, &str)], extra: &[(&str, &str)]) -> Settings {
    let mut env = mock_env();
    let mut numbers: BTreeMap<(String, String), u32> = BTreeMap::new();
    for &(scope, provider, base_url) in sources {
        let provider = provider.to_ascii_uppercase();
        let n = numbers
            .entry((scope.to_string(), provider.clone()))
            .or_insert(0);
        *n += 1;
        let source = format!("{scope}__{provider}__{n}");
        env.insert(format!("{source}__BASE_URL"), base_url.to_string());
        env.insert(format!("{source}__API_KEY"), "sk-test".into());
        env.insert(format!("{source}__MODEL"), "test-model".into());
        env.insert(format!("{scope}__RETRY__BACKOFF_BASE_S"), "0.01".into());
        env.insert(format!("{scope}__RETRY__BACKOFF_MAX_S"), "0.05".into());
    }
    for (key, value) in extra {
        env.insert(key.to_string(), value.to_string());
    }
    Settings::from_map(&env).unwrap_or_else(|e| panic!("mock settings do not parse: {e}"))
}

/// The env-style keys every mock-backed run starts from: memory limiter and breaker, no
/// telemetry, no cache. Add sources and scope keys, then `Settings::from_map`.
///
/// ```
/// use polygateway::config::Settings;
/// let mut env = polygateway_testkit::mock_env();
/// env.insert("LLM__OPENAI__1__BASE_URL".into(), "http://127.0.0.1:9/v1".into());
/// env.insert("LLM__OPENAI__1__MODEL".into(), "m".into());
/// let settings = Settings::from_map(&env).unwrap();
/// assert_eq!(settings.scopes["LLM"].sources.len(), 1);
/// assert_eq!(env["PGW_TELEMETRY_BACKEND"], "none");
/// ```
pub fn mock_env() -> BTreeMap<String, String> {
    [
        ("PGW_LIMITER_BACKEND", "memory"),
        ("PGW_BREAKER_BACKEND", "memory"),
        ("PGW_TELEMETRY_BACKEND", "none"),
        ("PGW_CACHE_BACKEND", "none"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}
