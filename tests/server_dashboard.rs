//! The dashboard (`GET /`, `GET /status.json`, docs/behaviour.md §12.8): operator data only for
//! an admin key (or `PGW_SERVER_PUBLIC_STATUS=true`), series for every scope fed by real calls,
//! an outage visible as an error spike with its reason and a breaker timeline entry within 2 s,
//! and `/metrics` behind `PGW_SERVER_METRICS_TOKEN`.

mod server_support;

use std::time::{Duration, Instant};

use polygateway_testkit::{mock_settings, Behaviour, MockUpstream};
use serde_json::Value;
use server_support::*;

const PRICES: &str = r#"{"test-model": {"input_per_1m": 1000.0, "output_per_1m": 2000.0}}"#;
const ADMIN: &str = "pgw-admin-secret";
const APP: &str = "pgw-app-secret";
/// Names that must never show without an admin key.
const KEY_NAME: &str = "kname-zeta";
const TENANT: &str = "tname-omega";

async fn get(url: &str, bearer: Option<&str>) -> reqwest::Response {
    let mut req = reqwest::Client::new().get(url);
    if let Some(b) = bearer {
        req = req.bearer_auth(b);
    }
    req.send().await.unwrap()
}

#[tokio::test]
async fn operator_data_needs_an_admin_key() {
    let dir = tempfile::tempdir().unwrap();
    let prices = dir.path().join("prices.json");
    std::fs::write(&prices, PRICES).unwrap();
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let settings = mock_settings(
        &[("DASHA", &mock.base_url())],
        &[
            ("PGW_PRICING_PATH", prices.to_str().unwrap()),
            ("PGW_TENANT_BUDGETS", &format!("{TENANT}=5/day")),
        ],
    );
    let keys = key_file(&[
        key_entry("ops", ADMIN, &["admin"], ""),
        key_entry(
            KEY_NAME,
            APP,
            &["*"],
            &format!(r#""tenant": "{TENANT}", "budget": "3/day""#),
        ),
    ]);
    let server = start_with_keys(settings, keys).await;
    for _ in 0..3 {
        let ok = reqwest::Client::new()
            .post(server.url("/v1/chat/completions"))
            .bearer_auth(APP)
            .json(&chat_body("DASHA", false))
            .send()
            .await
            .unwrap();
        assert_eq!(ok.status(), 200);
    }

    // No key: scopes and sources, up or down; no name, spend, budget or series.
    let page = get(&server.url("/"), None).await;
    assert_eq!(page.status(), 200);
    let page = page.text().await.unwrap();
    assert!(
        page.contains(">DASHA ") && page.contains("openai_1"),
        "{page}"
    );
    assert!(page.contains(">up<"), "{page}");
    for secret in [
        KEY_NAME,
        TENANT,
        "vkey:",
        "tenant:",
        "0.060000",
        "recent errors",
    ] {
        assert!(
            !page.contains(secret),
            "the public page shows {secret}: {page}"
        );
    }
    let public = get(&server.url("/status.json"), None).await;
    assert_eq!(public.status(), 200);
    let text = public.text().await.unwrap();
    for secret in [
        KEY_NAME,
        TENANT,
        "spend",
        "budget",
        "series",
        "recent_errors",
    ] {
        assert!(
            !text.contains(secret),
            "public status.json shows {secret}: {text}"
        );
    }
    let public: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(public["operator"], false);
    assert_eq!(public["scopes"]["DASHA"]["sources"]["openai_1"]["up"], true);

    // A key without `admin`: 403 on both; an unknown key: 401.
    for path in ["/", "/status.json"] {
        let refused = get(&server.url(path), Some(APP)).await;
        assert_eq!(refused.status(), 403, "{path}");
        let body: Value = refused.json().await.unwrap();
        assert_eq!(body["error"]["code"], "admin_required");
        assert_eq!(get(&server.url(path), Some("nope")).await.status(), 401);
    }

    // The admin key sees everything: series, top keys and tenants, spend, budgets.
    let full: Value = get(&server.url("/status.json?range=120"), Some(ADMIN))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(full["operator"], true);
    let series = &full["series"];
    assert_eq!(
        (series["step_s"].as_u64(), series["points"].as_u64()),
        (Some(1), Some(120))
    );
    let calls: u64 = series["scopes"]["DASHA"]["calls"]["ok"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(calls, 3, "{series}");
    let source = &series["scopes"]["DASHA"]["sources"]["openai_1"];
    assert!(
        source["latency_ms"]["p99"]
            .as_array()
            .unwrap()
            .iter()
            .any(|q| q.is_f64()),
        "per-source attempt latency: {source}"
    );
    let attempts: u64 = source["attempts"]["success"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(attempts, 3, "{source}");
    let key = series["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == KEY_NAME)
        .unwrap_or_else(|| panic!("{series}"));
    assert_eq!(key["calls"], 3);
    assert!(
        (key["spend"].as_f64().unwrap() - 0.06).abs() < 1e-9,
        "{key}"
    );
    assert!(series["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["name"] == TENANT));
    let budgets = full["budgets"].as_array().unwrap();
    for name in [format!("vkey:{KEY_NAME}"), format!("tenant:{TENANT}")] {
        let b = budgets
            .iter()
            .find(|b| b["name"] == name.as_str())
            .unwrap_or_else(|| panic!("{name}: {budgets:?}"));
        assert!(b["spend_per_s"].as_f64().unwrap() > 0.0, "{b}");
        // 0.06 spent in the last 15 min of a 3/day budget: it runs out before the day resets?
        // Only if the rate would reach the limit before the reset; either way a number or null.
        assert!(b["exhausted_in_s"].is_null() || b["exhausted_in_s"].as_f64().unwrap() > 0.0);
    }
    let page = get(&server.url("/"), Some(ADMIN))
        .await
        .text()
        .await
        .unwrap();
    assert!(page.contains(&format!("vkey:{KEY_NAME}")), "{page}");
    server.stop().await;
}

#[tokio::test]
async fn an_outage_shows_as_an_error_spike_with_its_reason_and_a_breaker_change_within_2s() {
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let settings = mock_settings(
        &[("DASHB", &mock.base_url())],
        &[
            ("DASHB__RETRY__MAX_ATTEMPTS", "1"),
            ("PGW_SERVER_PUBLIC_STATUS", "true"),
        ],
    );
    let server = start(settings).await;
    let call = || {
        reqwest::Client::new()
            .post(server.url("/v1/chat/completions"))
            .bearer_auth(KEY)
            .json(&chat_body("DASHB", false))
            .send()
    };
    assert_eq!(call().await.unwrap().status(), 200);
    mock.set_behaviour(Behaviour::Unauthorized);
    let outage = Instant::now();
    for _ in 0..3 {
        assert_eq!(call().await.unwrap().status(), 503);
    }
    let mut last = Value::Null;
    while outage.elapsed() < Duration::from_secs(2) {
        last = get(&server.url("/status.json?range=60"), None)
            .await
            .json()
            .await
            .unwrap();
        let scope = &last["series"]["scopes"]["DASHB"];
        let failed: u64 = scope["calls"]
            .as_object()
            .unwrap()
            .iter()
            .filter(|(k, _)| k.as_str() != "ok")
            .flat_map(|(_, v)| v.as_array().unwrap().iter().map(|n| n.as_u64().unwrap()))
            .sum();
        let opened = scope["sources"]["openai_1"]["breaker"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["to"] == "open");
        if failed >= 3 && opened {
            assert_eq!(last["scopes"]["DASHB"]["sources"]["openai_1"]["up"], false);
            server.stop().await;
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no error spike and breaker change within 2 s: {last}");
}

#[tokio::test]
async fn metrics_can_need_a_bearer_token() {
    assert!(polygateway::server::install_metrics_recorder());
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let settings = mock_settings(
        &[("DASHC", &mock.base_url())],
        &[("PGW_SERVER_METRICS_TOKEN", "scrape-me")],
    );
    let server = start(settings).await;
    let url = server.url("/metrics");
    let refused = get(&url, None).await;
    assert_eq!(refused.status(), 401);
    assert!(refused.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .starts_with("Bearer"));
    assert_eq!(get(&url, Some("scrape-m")).await.status(), 401);
    assert_eq!(get(&url, Some(KEY)).await.status(), 401);
    let ok = get(&url, Some("scrape-me")).await;
    assert_eq!(ok.status(), 200);
    assert!(ok.text().await.unwrap().contains("pgw_"));
    server.stop().await;
}
