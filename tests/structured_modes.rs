//! Structured modes of self-hosted servers (issue #36): the registry's strongest mode per
//! server, the `STRUCTURED_MODE` override, the remembered fallback when a source refuses its
//! mode, and the `structured_mode` telemetry column — against the mock upstream.

mod common;

use std::time::Duration;

use polygateway::config::{ConfigError, Settings};
use polygateway::structured::StructuredMode;
use polygateway::{CallOptions, Gateway, Message};
use polygateway_testkit::mock_llm::{Behaviour, MockUpstream};

#[derive(Debug, PartialEq, serde::Deserialize, schemars::JsonSchema)]
struct Verdict {
    label: String,
    score: i64,
}

const VERDICT: &str = r#"{"label": "ok", "score": 3}"#;

async fn ask(gw: &Gateway) -> Verdict {
    let (_, verdict) = gw
        .chat_structured::<Verdict>(vec![Message::user("grade it")], CallOptions::new())
        .await
        .unwrap_or_else(|e| panic!("the typed call failed: {e}"));
    verdict
}

fn format_types(mock: &MockUpstream) -> Vec<String> {
    mock.requests()
        .iter()
        .map(|r| {
            r.body["response_format"]["type"]
                .as_str()
                .unwrap_or("none")
                .to_string()
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_self_hosted_server_named_by_its_provider_gets_strict_json_schema() {
    for provider in ["vllm", "sglang", "llamacpp", "ollama", "lmstudio"] {
        let mock = MockUpstream::start(Behaviour::healthy_with(VERDICT)).await;
        let gw = common::gateway(&[(provider, &mock)], &[]).await;
        assert_eq!(ask(&gw).await.score, 3);
        let body = mock.last_request().unwrap().body;
        assert_eq!(body["response_format"]["type"], "json_schema", "{provider}");
        assert_eq!(body["response_format"]["json_schema"]["strict"], true);
        gw.shutdown().await;
    }
    // TGI reads its grammar form: the bare schema under `value`, type `json`.
    let mock = MockUpstream::start(Behaviour::healthy_with(VERDICT)).await;
    let gw = common::gateway(&[("tgi", &mock)], &[]).await;
    ask(&gw).await;
    let body = mock.last_request().unwrap().body;
    assert_eq!(body["response_format"]["type"], "json");
    assert_eq!(body["response_format"]["value"]["type"], "object");
    assert!(body["response_format"].get("json_schema").is_none());
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn structured_mode_overrides_the_registry_for_one_source() {
    let mock = MockUpstream::start(Behaviour::healthy_with(VERDICT)).await;
    // An unknown provider name would get the prompt mode; the source says it speaks json_schema.
    let gw = common::gateway(
        &[("myllama", &mock)],
        &[("LLM__MYLLAMA__1__STRUCTURED_MODE", "json_schema")],
    )
    .await;
    ask(&gw).await;
    assert_eq!(format_types(&mock), ["json_schema"]);
    let source = gw.sources("LLM").await.unwrap().remove(0);
    assert_eq!(source.structured_mode, Some(StructuredMode::JsonSchema));
    assert_eq!(
        source.structured_mode_configured,
        Some(StructuredMode::JsonSchema)
    );
    gw.shutdown().await;

    // And the other way: an OpenAI-named source held to the prompt.
    let mock = MockUpstream::start(Behaviour::healthy_with(VERDICT)).await;
    let gw = common::gateway(
        &[("openai", &mock)],
        &[("LLM__OPENAI__1__STRUCTURED_MODE", "Prompt")],
    )
    .await;
    ask(&gw).await;
    assert_eq!(format_types(&mock), ["none"]);
    let body = mock.last_request().unwrap().body;
    assert!(body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .contains("JSON Schema"));
    gw.shutdown().await;
}

#[test]
fn a_bad_structured_mode_names_the_key_and_the_allowed_values() {
    let mut map = polygateway_testkit::mock_env();
    map.extend(common::source("LLM", "vllm", 1, "http://127.0.0.1:9/v1"));
    map.insert("LLM__VLLM__1__STRUCTURED_MODE".into(), "strict".into());
    let err = Settings::from_map(&map).unwrap_err();
    let ConfigError::InvalidValue { key, expected, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(key, "LLM__VLLM__1__STRUCTURED_MODE");
    assert_eq!(expected, "one of json_schema | json_object | prompt");
}

#[tokio::test(start_paused = true)]
async fn a_refused_mode_falls_back_once_is_remembered_and_is_no_source_fault() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.sqlite");
    let db_s = db.display().to_string();
    let mock = MockUpstream::start(Behaviour::healthy_with(VERDICT)).await;
    // A server without strict schemas (an old build, a proxy): JSON mode only.
    mock.refuse_response_formats(&["json_schema"]);
    let gw = common::gateway(
        &[("vllm", &mock)],
        &[
            ("LLM__RETRY__MAX_ATTEMPTS", "1"),
            ("LLM__BREAKER__FAIL_THRESHOLD", "1"),
            ("PGW_TELEMETRY_BACKEND", "sqlite"),
            ("PGW_TELEMETRY_SQLITE_PATH", db_s.as_str()),
        ],
    )
    .await;
    // One attempt allowed, a breaker that opens on one fault: the call still succeeds.
    assert_eq!(ask(&gw).await.label, "ok");
    // The refused mode is re-sent at once in the next weaker one, then remembered.
    assert_eq!(format_types(&mock), ["json_schema", "json_object"]);
    ask(&gw).await;
    assert_eq!(
        format_types(&mock),
        ["json_schema", "json_object", "json_object"]
    );

    let mut source = gw.sources("LLM").await.unwrap().remove(0);
    for _ in 0..100 {
        if source.successes == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        source = gw.sources("LLM").await.unwrap().remove(0);
    }
    assert_eq!(source.structured_mode, Some(StructuredMode::JsonObject));
    assert_eq!(
        source.structured_mode_configured,
        Some(StructuredMode::JsonSchema)
    );
    // Not a source fault: two attempts, two successes, full health, breaker closed.
    assert_eq!(
        (source.attempts, source.successes, source.failures),
        (2, 2, 0)
    );
    assert_eq!(source.health, 1.0);
    assert_eq!(
        source.breaker,
        Some(polygateway::ports::BreakerState::Closed)
    );

    // JSON mode refused too: down to the prompt, which needs nothing from the server.
    mock.refuse_response_formats(&["json_schema", "json_object"]);
    ask(&gw).await;
    assert_eq!(
        format_types(&mock)[3..],
        ["json_object".to_string(), "none".to_string()]
    );
    gw.shutdown().await;

    // Telemetry names the mode each ask ended in, and records no failure.
    let conn = rusqlite::Connection::open(&db).unwrap();
    let rows: Vec<(Option<String>, Option<String>)> = conn
        .prepare("SELECT structured_mode, error FROM llm_calls ORDER BY created_at, rowid")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let modes: Vec<_> = rows.iter().map(|(m, _)| m.as_deref()).collect();
    assert_eq!(
        modes,
        [Some("json_object"), Some("json_object"), Some("prompt")]
    );
    assert!(rows.iter().all(|(_, e)| e.is_none()), "{rows:?}");
}

#[tokio::test(start_paused = true)]
async fn another_bad_request_still_fails_the_call_without_falling_back() {
    let mock = MockUpstream::start(Behaviour::BadRequest).await;
    let gw = common::gateway(&[("vllm", &mock)], &[]).await;
    let err = gw
        .chat_structured::<Verdict>(vec![Message::user("q")], CallOptions::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("400"), "{err}");
    assert_eq!(format_types(&mock), ["json_schema"]);
    let source = gw.sources("LLM").await.unwrap().remove(0);
    assert_eq!(source.structured_mode, Some(StructuredMode::JsonSchema));
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn plain_calls_have_no_structured_mode_in_telemetry() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.sqlite");
    let db_s = db.display().to_string();
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let gw = common::gateway(
        &[("vllm", &mock)],
        &[
            ("PGW_TELEMETRY_BACKEND", "sqlite"),
            ("PGW_TELEMETRY_SQLITE_PATH", db_s.as_str()),
        ],
    )
    .await;
    gw.chat(vec![Message::user("hi")]).await.unwrap();
    gw.shutdown().await;
    let conn = rusqlite::Connection::open(&db).unwrap();
    let mode: Option<String> = conn
        .query_row("SELECT structured_mode FROM llm_calls", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, None);
}
