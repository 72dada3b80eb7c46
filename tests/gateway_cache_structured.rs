//! The cache and the structured-output ladder in the full call path (SPEC §4, §9).

mod common;

use std::time::Duration;

use polygateway::testkit::mock_llm::{Behaviour, MockUpstream};
use polygateway::{CallOptions, GatewayError, Message, Structured};

fn cached(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    let mut keys = vec![
        ("PGW_CACHE_BACKEND", "memory"),
        ("PGW_CACHE_NAMESPACE", "tests"),
        ("PGW_CACHE_TTL_S", "60"),
    ];
    keys.extend_from_slice(extra);
    keys
}

fn hits_in(path: &std::path::Path) -> (i64, i64) {
    let db = rusqlite::Connection::open(path).unwrap();
    db.query_row(
        "SELECT COUNT(*), COALESCE(SUM(cache_hit), 0) FROM llm_calls",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .unwrap()
}

#[tokio::test]
async fn a_hit_costs_no_upstream_call_and_still_records_a_row() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.sqlite");
    let db_s = db.display().to_string();
    let mock = MockUpstream::start(Behaviour::healthy_with("cached answer")).await;
    let mut keys = cached(&[("PGW_TELEMETRY_BACKEND", "sqlite")]);
    keys.push(("PGW_TELEMETRY_SQLITE_PATH", &db_s));
    let gw = common::gateway(&[("openai", &mock)], &keys).await;

    let first = gw.chat(vec![Message::user("same")]).await.unwrap();
    let opts = CallOptions::new().tenant_id("other-tenant");
    let second = gw
        .chat_with(vec![Message::user("same")], opts)
        .await
        .unwrap();
    assert!(!first.cache_hit);
    assert!(second.cache_hit, "tenant is not part of the key");
    assert_eq!(second.content, "cached answer");
    assert_ne!(first.call_id, second.call_id, "every record has its own id");
    assert_eq!(second.latency_ms, 0.0);
    assert_eq!(second.cost, Some(0.0));
    assert_eq!(mock.counts().chat, 1);

    // bypass and a new salt go upstream again; an empty salt is a salt.
    gw.chat_with(
        vec![Message::user("same")],
        CallOptions::new().bypass_cache(true),
    )
    .await
    .unwrap();
    gw.chat_with(
        vec![Message::user("same")],
        CallOptions::new().cache_salt(""),
    )
    .await
    .unwrap();
    assert_eq!(mock.counts().chat, 3);
    gw.shutdown().await;
    assert_eq!(hits_in(&db), (4, 1), "one row per call, the hit marked");
}

#[tokio::test]
async fn identical_concurrent_misses_are_coalesced_into_one_upstream_call() {
    let mock = MockUpstream::start(Behaviour::Healthy {
        ttft: Duration::from_millis(200),
        inter_token: Duration::ZERO,
        chunks: 1,
        content: "shared".into(),
    })
    .await;
    let gw = common::gateway(&[("openai", &mock)], &cached(&[])).await;
    let calls: Vec<_> = (0..20)
        .map(|_| {
            let gw = gw.clone();
            tokio::spawn(async move { gw.chat(vec![Message::user("burst")]).await })
        })
        .collect();
    let mut hits = 0;
    for call in calls {
        let resp = call.await.unwrap().unwrap();
        assert_eq!(resp.content, "shared");
        hits += usize::from(resp.cache_hit);
    }
    assert_eq!(mock.counts().chat, 1);
    assert_eq!(hits, 19);
    gw.shutdown().await;
}

#[tokio::test]
async fn failures_and_unrepairable_answers_are_never_cached() {
    let mock = MockUpstream::start(Behaviour::ScriptedContent(vec![
        "no json here".into(),
        "{\"ok\": true}".into(),
    ]))
    .await;
    let gw = common::gateway(&[("openai", &mock)], &cached(&[])).await;
    let json = || CallOptions::new().structured(Structured::Json);
    let err = gw
        .chat_with(vec![Message::user("q")], json())
        .await
        .unwrap_err();
    assert!(matches!(err, GatewayError::ResultInvalid { .. }), "{err}");
    let ok = gw
        .chat_with(vec![Message::user("q")], json())
        .await
        .unwrap();
    assert!(!ok.cache_hit, "the invalid answer was not stored");
    assert_eq!(ok.structured_data, Some(serde_json::json!({"ok": true})));
    gw.shutdown().await;
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema, PartialEq)]
struct Grade {
    score: u8,
    reason: String,
}

#[tokio::test]
async fn the_ladder_re_asks_with_feedback_and_a_hit_rebuilds_the_type() {
    let mock = MockUpstream::start(Behaviour::ScriptedContent(vec![
        "Sure! ```json\n{'score': 'high', 'reason': 'x',}\n```".into(),
        "```json\n{\"score\": 4, \"reason\": \"correct\",}\n```".into(),
    ]))
    .await;
    let gw = common::gateway(&[("openai", &mock)], &cached(&[])).await;
    let (resp, grade): (_, Grade) = gw
        .chat_structured(vec![Message::user("grade 2+2=4")], CallOptions::new())
        .await
        .unwrap();
    assert_eq!(
        grade,
        Grade {
            score: 4,
            reason: "correct".into()
        }
    );
    assert_eq!(mock.counts().chat, 2, "one re-ask");
    // The re-ask carried the bad answer and the validation error, and the native schema.
    let reask = mock.last_request().unwrap().body;
    let messages = reask["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3);
    assert!(messages[2]["content"].as_str().unwrap().contains("score"));
    assert_eq!(reask["response_format"]["type"], "json_schema");
    assert!(resp.structured_data.is_some());

    let (hit, again): (_, Grade) = gw
        .chat_structured(vec![Message::user("grade 2+2=4")], CallOptions::new())
        .await
        .unwrap();
    assert!(hit.cache_hit);
    assert_eq!(again, grade);
    assert_eq!(mock.counts().chat, 2, "rebuilt without network");
    gw.shutdown().await;
}

#[tokio::test]
async fn unusable_answers_do_not_count_toward_the_breaker() {
    let mock = MockUpstream::start(Behaviour::healthy_with("never json")).await;
    let gw = common::gateway(
        &[("openai", &mock)],
        &[
            ("PGW_STRUCTURED_MAX_RETRIES", "1"),
            ("LLM__BREAKER__FAIL_THRESHOLD", "2"),
        ],
    )
    .await;
    for _ in 0..6 {
        let err = gw
            .chat_structured::<Grade>(vec![Message::user("q")], CallOptions::new())
            .await
            .unwrap_err();
        match err {
            GatewayError::ResultInvalid { details, .. } => {
                assert_eq!(details.raw_text, "never json");
                assert!(details.repair_error.is_some());
            }
            other => panic!("expected ResultInvalid, got {other}"),
        }
    }
    assert_eq!(
        mock.counts().chat,
        12,
        "every call asked twice, none refused"
    );
    let source = &gw.sources("LLM").await.unwrap()[0];
    assert_eq!(
        source.breaker,
        Some(polygateway::actors::BreakerState::Closed)
    );
    assert_eq!(source.failures, 0);
    gw.shutdown().await;
}

#[tokio::test]
async fn a_redis_cache_that_is_down_degrades_to_misses() {
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let gw = common::gateway(
        &[("openai", &mock)],
        &[
            ("PGW_CACHE_BACKEND", "redis"),
            ("PGW_CACHE_NAMESPACE", "tests"),
            ("PGW_CACHE_TTL_S", "60"),
            ("REDIS_URL", "redis://127.0.0.1:1"),
        ],
    )
    .await;
    for _ in 0..3 {
        let resp = tokio::time::timeout(Duration::from_secs(10), gw.chat(vec![Message::user("q")]))
            .await
            .expect("a dead cache never hangs a call")
            .unwrap();
        assert!(!resp.cache_hit);
    }
    assert_eq!(mock.counts().chat, 3);
    gw.shutdown().await;
}

#[tokio::test]
async fn a_salvaged_truncated_stream_is_returned_but_never_cached() {
    let mock = MockUpstream::start(Behaviour::Scripted(vec![
        Behaviour::TruncatedStream { with_usage: true },
        Behaviour::healthy_with("complete"),
    ]))
    .await;
    let gw = common::gateway(
        &[("openai", &mock)],
        &cached(&[("LLM__OPENAI__1__MISSING_DONE", "salvage")]),
    )
    .await;
    let salvaged = gw.chat(vec![Message::user("q")]).await.unwrap();
    assert!(salvaged.truncated);
    assert_eq!(salvaged.usage_source, polygateway::UsageSource::Estimated);
    let next = gw.chat(vec![Message::user("q")]).await.unwrap();
    assert!(!next.cache_hit, "the salvaged answer was not stored");
    assert_eq!(next.content, "complete");
    assert_eq!(mock.counts().chat, 2);
    gw.shutdown().await;
}

#[tokio::test]
async fn an_abruptly_closed_stream_is_salvaged_but_never_cached() {
    let mock = MockUpstream::start(Behaviour::Scripted(vec![
        Behaviour::AbruptClose {
            content: true,
            with_usage: true,
        },
        Behaviour::healthy_with("complete"),
    ]))
    .await;
    let gw = common::gateway(
        &[("openai", &mock)],
        &cached(&[("LLM__OPENAI__1__MISSING_DONE", "salvage")]),
    )
    .await;
    let salvaged = gw.chat(vec![Message::user("q")]).await.unwrap();
    assert!(salvaged.truncated);
    assert_eq!(
        salvaged.content,
        polygateway::testkit::mock_llm::MOCK_CONTENT
    );
    assert_eq!(salvaged.usage_source, polygateway::UsageSource::Estimated);
    let next = gw.chat(vec![Message::user("q")]).await.unwrap();
    assert!(!next.cache_hit, "the salvaged answer was not stored");
    assert_eq!(next.content, "complete");
    assert_eq!(mock.counts().chat, 2);
    gw.shutdown().await;
}
