//! Shared helpers of the runtime integration tests: settings over mock upstreams.
#![allow(dead_code)]

use polygateway::config::Settings;

/// Env-style settings: memory backends, no telemetry, fast retries, plus `extra` keys.
pub fn settings(extra: &[(&str, String)]) -> Settings {
    let mut map = polygateway_testkit::mock_env();
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

use std::time::Duration;

use polygateway::Gateway;
use polygateway_testkit::mock_llm::MockUpstream;

/// A gateway with one `LLM` chat source per mock (`{name}_1`), fast retries, plus `extra` keys.
pub async fn gateway(mocks: &[(&str, &MockUpstream)], extra: &[(&str, &str)]) -> Gateway {
    let mut keys = Vec::new();
    for (name, mock) in mocks {
        keys.extend(source("LLM", name, 1, &mock.base_url()));
    }
    keys.push(("LLM__RETRY__BACKOFF_BASE_S".into(), "0.01".into()));
    keys.push(("LLM__RETRY__BACKOFF_MAX_S".into(), "0.05".into()));
    for (k, v) in extra {
        keys.push(((*k).to_string(), (*v).to_string()));
    }
    Gateway::from_settings(settings_from(keys), "LLM")
        .await
        .expect("the gateway starts")
}

/// Wait (bounded) until scope `LLM` holds nothing — no pacer slot, lease or probe — and no mock
/// has a request open; panic with the state otherwise.
pub async fn wait_idle(gw: &Gateway, mocks: &[&MockUpstream]) {
    for _ in 0..150 {
        let sources = gw.sources("LLM").await.unwrap();
        let leases = gw.leases_held("LLM").await.unwrap();
        if leases == 0
            && sources.iter().all(|s| s.in_flight == 0 && !s.probe_held)
            && mocks.iter().all(|m| m.in_flight() == 0)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "not idle: leases {}, mocks in flight {:?}, sources {:?}",
        gw.leases_held("LLM").await.unwrap(),
        mocks.iter().map(|m| m.in_flight()).collect::<Vec<_>>(),
        gw.sources("LLM").await.unwrap()
    );
}

/// Attempts cancelled by their callers across scope `LLM`.
pub async fn cancelled_attempts(gw: &Gateway) -> u64 {
    gw.sources("LLM")
        .await
        .unwrap()
        .iter()
        .map(|s| s.cancelled)
        .sum()
}
