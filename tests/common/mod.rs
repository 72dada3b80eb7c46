//! Shared helpers of the runtime integration tests: settings over mock upstreams.
#![allow(dead_code)]

use std::collections::BTreeMap;

use polygateway::config::Settings;

/// Env-style settings: memory backends, no telemetry, fast retries, plus `extra` keys.
pub fn settings(extra: &[(&str, String)]) -> Settings {
    let mut map: BTreeMap<String, String> = BTreeMap::new();
    for (k, v) in [
        ("PGW_LIMITER_BACKEND", "memory"),
        ("PGW_BREAKER_BACKEND", "memory"),
        ("PGW_TELEMETRY_BACKEND", "none"),
        ("PGW_CACHE_BACKEND", "none"),
    ] {
        map.insert(k.into(), v.into());
    }
    for (k, v) in extra {
        map.insert((*k).to_string(), v.clone());
    }
    Settings::from_map(&map).expect("test settings are valid")
}

/// Keys of one chat source `{scope}__{provider}__{n}` pointing at `base_url`.
pub fn source(scope: &str, provider: &str, n: u32, base_url: &str) -> Vec<(String, String)> {
    let p = format!("{scope}__{}__{n}", provider.to_uppercase());
    vec![
        (format!("{p}__BASE_URL"), base_url.to_string()),
        (format!("{p}__API_KEY"), format!("sk-test-{provider}-{n}")),
        (format!("{p}__MODEL"), format!("model-{provider}")),
        (format!("{p}__TIMEOUT_S"), "5".into()),
        (format!("{p}__TTFT_TIMEOUT_S"), "2".into()),
        (format!("{p}__INTER_TOKEN_TIMEOUT_S"), "1".into()),
    ]
}

/// Build settings from owned pairs.
pub fn settings_from(pairs: Vec<(String, String)>) -> Settings {
    let borrowed: Vec<(&str, String)> =
        pairs.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    settings(&borrowed)
}
