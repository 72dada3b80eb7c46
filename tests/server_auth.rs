//! Virtual keys of `polygateway serve`: 401 without or with an unknown key, 403 for a scope the
//! key may not use, the key's tenant in telemetry, and per-key RPM and concurrency limits through
//! the limiter backend — in memory, and in Redis shared by two server replicas.

mod server_support;

use std::time::Duration;

use futures::StreamExt;
use polygateway_testkit::{mock_settings, Behaviour, MockUpstream};
use serde_json::Value;
use server_support::*;

async fn chat(server: &TestServer, key: Option<&str>, model: &str) -> reqwest::Response {
    let mut req = reqwest::Client::new()
        .post(server.url("/v1/chat/completions"))
        .json(&chat_body(model, false));
    if let Some(key) = key {
        req = req.bearer_auth(key);
    }
    req.send().await.unwrap()
}

#[tokio::test]
async fn keys_authenticate_and_scopes_authorise() {
    let llm = MockUpstream::start(Behaviour::healthy()).await;
    let judge = MockUpstream::start(Behaviour::healthy()).await;
    let settings = mock_settings(
        &[("LLM", &llm.base_url()), ("JUDGE", &judge.base_url())],
        &[],
    );
    let keys = key_file(&[
        key_entry("all", KEY, &["*"], ""),
        key_entry("llm-only", "pgw-llm-only", &["LLM"], ""),
    ]);
    let server = start_with_keys(settings, keys).await;

    for (key, code) in [
        (None, "invalid_api_key"),
        (Some("pgw-nope"), "invalid_api_key"),
    ] {
        let resp = chat(&server, key, "LLM").await;
        assert_eq!(resp.status(), 401);
        let e: Value = resp.json().await.unwrap();
        assert_eq!(e["error"]["code"], code);
        assert_eq!(e["error"]["type"], "invalid_request_error");
    }
    assert_eq!(
        chat(&server, Some("pgw-llm-only"), "LLM").await.status(),
        200
    );
    let forbidden = chat(&server, Some("pgw-llm-only"), "JUDGE").await;
    assert_eq!(forbidden.status(), 403);
    let e: Value = forbidden.json().await.unwrap();
    assert_eq!(e["error"]["code"], "scope_forbidden");
    assert_eq!(
        judge.counts().chat,
        0,
        "a forbidden call reaches no upstream"
    );
    assert_eq!(chat(&server, Some(KEY), "JUDGE").await.status(), 200);
    // /v1/models lists what the key may use.
    let models: Value = reqwest::Client::new()
        .get(server.url("/v1/models"))
        .bearer_auth("pgw-llm-only")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"].as_array().unwrap().len(), 1);
    assert_eq!(models["data"][0]["id"], "LLM");
    server.stop().await;
}

#[tokio::test]
async fn the_key_tenant_is_recorded_in_telemetry() {
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.sqlite");
    let db_path = db.display().to_string();
    let settings = mock_settings(
        &[("LLM", &mock.base_url())],
        &[
            ("PGW_TELEMETRY_BACKEND", "sqlite"),
            ("PGW_TELEMETRY_SQLITE_PATH", db_path.as_str()),
        ],
    );
    let keys = key_file(&[key_entry("team-a", KEY, &["*"], r#""tenant": "acme""#)]);
    let server = start_with_keys(settings, keys).await;
    assert_eq!(chat(&server, Some(KEY), "LLM").await.status(), 200);
    server.stop().await; // flushes telemetry
    let conn = rusqlite::Connection::open(&db).unwrap();
    let tenants: Vec<String> = conn
        .prepare("SELECT tenant_id FROM llm_calls")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(tenants, ["acme"]);
    // The key itself appears nowhere in what was recorded.
    let dump: String = conn
        .query_row(
            "SELECT group_concat(messages || response) FROM llm_calls",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(!dump.contains(KEY));
}

#[tokio::test]
async fn a_key_rpm_limit_refuses_with_429_and_retry_after() {
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let settings = mock_settings(&[("LLM", &mock.base_url())], &[]);
    let keys = key_file(&[
        key_entry("slow-lane", "pgw-slow", &["*"], r#""rpm": 2"#),
        key_entry("free", KEY, &["*"], ""),
    ]);
    let server = start_with_keys(settings, keys).await;
    assert_eq!(chat(&server, Some("pgw-slow"), "LLM").await.status(), 200);
    assert_eq!(chat(&server, Some("pgw-slow"), "LLM").await.status(), 200);
    let limited = chat(&server, Some("pgw-slow"), "LLM").await;
    assert_eq!(limited.status(), 429);
    let retry_after: u64 = limited.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    let e: Value = limited.json().await.unwrap();
    assert_eq!(e["error"]["code"], "key_rate_limited");
    assert_eq!(
        mock.counts().chat,
        2,
        "the refused call reached no upstream"
    );
    // Another key is not affected.
    assert_eq!(chat(&server, Some(KEY), "LLM").await.status(), 200);
    server.stop().await;
}

#[tokio::test]
async fn a_key_concurrency_limit_holds_for_the_life_of_a_stream() {
    let mock = MockUpstream::start(Behaviour::Healthy {
        ttft: Duration::ZERO,
        inter_token: Duration::from_millis(100),
        chunks: 50,
        content: "x".repeat(50),
    })
    .await;
    let settings = mock_settings(&[("LLM", &mock.base_url())], &[]);
    let keys = key_file(&[key_entry("one", KEY, &["*"], r#""max_concurrency": 1"#)]);
    let server = start_with_keys(settings, keys).await;
    let client = reqwest::Client::new();
    let stream = client
        .post(server.url("/v1/chat/completions"))
        .bearer_auth(KEY)
        .json(&chat_body("LLM", true))
        .send()
        .await
        .unwrap();
    let mut body = stream.bytes_stream();
    body.next().await.unwrap().unwrap(); // the stream is open and relaying
    let second = chat(&server, Some(KEY), "LLM").await;
    assert_eq!(second.status(), 429);
    let e: Value = second.json().await.unwrap();
    assert!(e["error"]["message"]
        .as_str()
        .unwrap()
        .contains("max_concurrency"));
    drop((body, client)); // the client leaves: the stream's lease goes back
    mock.set_behaviour(Behaviour::healthy()); // the next calls answer at once
    eventually("the key's lease is released", || async {
        chat(&server, Some(KEY), "LLM").await.status() == 200
    })
    .await;
    server.stop().await;
}

#[tokio::test]
async fn redis_shares_a_key_limit_across_server_replicas() {
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    // A fresh key name per run: Redis windows outlive the test.
    let name = format!("shared-{}", uuid::Uuid::new_v4().simple());
    let keys = key_file(&[key_entry(&name, KEY, &["*"], r#""rpm": 3"#)]);
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let settings = mock_settings(
            &[("LLM", &mock.base_url())],
            &[
                ("PGW_LIMITER_BACKEND", "redis"),
                ("PGW_BREAKER_BACKEND", "redis"),
                ("REDIS_URL", "redis://127.0.0.1:6379"),
            ],
        );
        replicas.push(start_with_keys(settings, keys.clone()).await);
    }
    // Redis rate windows are fixed minutes of the server clock (this machine's): stay clear of a
    // boundary so all five requests fall in one window.
    let into_minute = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        % 60.0;
    if into_minute > 50.0 {
        tokio::time::sleep(Duration::from_secs_f64(60.5 - into_minute)).await;
    }
    let mut statuses = Vec::new();
    for i in 0..5 {
        statuses.push(
            chat(&replicas[i % 2], Some(KEY), "LLM")
                .await
                .status()
                .as_u16(),
        );
    }
    // Three in the minute, whichever replica served them; the rest refused by either.
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        3,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 429).count(),
        2,
        "{statuses:?}"
    );
    assert_eq!(mock.counts().chat, 3);
    for r in replicas {
        r.stop().await;
    }
}
