//! The cache and the structured-output ladder in the full call path (docs/behaviour.md §4, §9).

mod common;

use std::time::Duration;

use polygateway::{CallOptions, GatewayError, Message, Structured};
use polygateway_testkit::mock_llm::{Behaviour, MockUpstream};

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
        Some(polygateway::ports::BreakerState::Closed)
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

/// Issue #21: native schema was all-or-nothing per scope (one `deepseek` source turned it off
/// for the `openai` source too) and the first ask then carried no schema at all. Each attempt now
/// uses the strongest mode its own source's provider supports.
#[tokio::test]
async fn a_mixed_scope_sends_each_source_the_strongest_mode_it_supports() {
    let answer = r#"{"score": 4, "reason": "correct"}"#;
    let openai = MockUpstream::start(Behaviour::healthy_with(answer)).await;
    let deepseek = MockUpstream::start(Behaviour::healthy_with(answer)).await;
    let proxy = MockUpstream::start(Behaviour::healthy_with(answer)).await;
    let settings = polygateway_testkit::mock_sources_settings(
        &[
            ("LLM", "openai", &openai.base_url()),
            ("LLM", "deepseek", &deepseek.base_url()),
            ("LLM", "someproxy", &proxy.base_url()),
        ],
        &[("LLM__SELECTOR", "round_robin")],
    );
    let gw = polygateway::Gateway::from_settings(settings, "LLM")
        .await
        .unwrap();
    for _ in 0..3 {
        let (_, grade): (_, Grade) = gw
            .chat_structured(vec![Message::user("grade 2+2=4")], CallOptions::new())
            .await
            .unwrap();
        assert_eq!(grade.score, 4);
    }
    let first_ask = |mock: &MockUpstream| {
        let requests = mock.requests();
        assert_eq!(requests.len(), 1, "round robin: one ask per source");
        requests[0].body.clone()
    };
    // openai: strict json_schema, the conversation untouched.
    let body = first_ask(&openai);
    assert_eq!(body["response_format"]["type"], "json_schema");
    assert_eq!(body["response_format"]["json_schema"]["name"], "Grade");
    assert_eq!(body["messages"].as_array().unwrap().len(), 1);
    // deepseek: json_object, and the schema in a system message in front.
    let body = first_ask(&deepseek);
    assert_eq!(
        body["response_format"],
        serde_json::json!({"type": "json_object"})
    );
    assert_eq!(body["messages"][0]["role"], "system");
    let system = body["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("JSON Schema") && system.contains("\"score\""),
        "{system}"
    );
    assert_eq!(body["messages"][1]["content"], "grade 2+2=4");
    // An unknown provider: no response_format, the schema in the prompt.
    let body = first_ask(&proxy);
    assert!(body.get("response_format").is_none(), "{body}");
    assert!(body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .contains("\"reason\""));
    gw.shutdown().await;
}

/// What was asked is part of the cache key: a plain answer cached for the same messages is not
/// served to a typed call (it has no `structured_data`, and was never validated as `Grade`).
#[tokio::test]
async fn plain_and_typed_calls_do_not_share_cache_entries() {
    let mock = MockUpstream::start(Behaviour::ScriptedContent(vec![
        "a plain answer".into(),
        r#"{"score": 5, "reason": "fine"}"#.into(),
    ]))
    .await;
    let gw = common::gateway(&[("openai", &mock)], &cached(&[])).await;
    let question = || vec![Message::user("grade this")];
    let plain = gw.chat(question()).await.unwrap();
    assert_eq!(plain.content, "a plain answer");
    let (typed, grade): (_, Grade) = gw
        .chat_structured(question(), CallOptions::new())
        .await
        .unwrap();
    assert!(!typed.cache_hit);
    assert_eq!(grade.score, 5);
    assert_eq!(mock.counts().chat, 2);
    // Each one is a hit of its own entry afterwards.
    assert!(gw.chat(question()).await.unwrap().cache_hit);
    let (again, _): (_, Grade) = gw
        .chat_structured(question(), CallOptions::new())
        .await
        .unwrap();
    assert!(again.cache_hit);
    assert_eq!(mock.counts().chat, 2);
    gw.shutdown().await;
}

/// Issue #21: after re-asks the answers summed to less than `llm_calls` (the rejected answers
/// were billed too), and re-ask rows carried `parent_call_id = NULL`. Now an answer reports the
/// whole call and every row of it — failed attempts, re-asks, cache hits — carries its id
/// (`call_group_id`; `parent_call_id` stays the caller's chain link, empty here).
#[tokio::test]
async fn answers_sum_to_the_telemetry_rows_of_their_calls() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.sqlite");
    let db_s = db.display().to_string();
    let prices = dir.path().join("prices.json");
    std::fs::write(
        &prices,
        r#"{"model-openai": {"input_per_1m": 1000.0, "output_per_1m": 3000.0}}"#,
    )
    .unwrap();
    let prices_s = prices.display().to_string();
    let valid = r#"{"score": 3, "reason": "ok"}"#;
    let mock = MockUpstream::start(Behaviour::Scripted(vec![
        // call 1: a 503 (retried), an invalid answer (re-asked), a valid one
        Behaviour::ServerError(503),
        Behaviour::healthy_with("not json at all"),
        Behaviour::healthy_with(valid),
        // call 2: an invalid answer, then the re-ask meets a 503 and its retry answers
        Behaviour::healthy_with(r#"{"score": "high"}"#),
        Behaviour::ServerError(503),
        Behaviour::healthy_with(valid),
    ]))
    .await;
    let mut keys = cached(&[("PGW_TELEMETRY_BACKEND", "sqlite")]);
    keys.push(("PGW_TELEMETRY_SQLITE_PATH", &db_s));
    keys.push(("PGW_PRICING_PATH", &prices_s));
    let gw = common::gateway(&[("openai", &mock)], &keys).await;
    let mut answers = Vec::new();
    for question in ["one", "two", "three", "one"] {
        let (answer, _): (_, Grade) = gw
            .chat_structured(vec![Message::user(question)], CallOptions::new())
            .await
            .unwrap();
        answers.push(answer);
    }
    gw.shutdown().await;
    assert_eq!(
        answers.iter().map(|a| a.asks).collect::<Vec<_>>(),
        [2, 2, 1, 0],
        "the last call is a cache hit"
    );
    assert!(answers[3].cache_hit);
    // The last ask alone is kept apart from the whole call.
    assert!(answers[0].last_ask_usage.total() < answers[0].usage().total());
    assert!(answers[0].last_ask_cost.unwrap() < answers[0].cost.unwrap());

    let conn = rusqlite::Connection::open(&db).unwrap();
    let (rows, cost, tokens): (i64, f64, i64) = conn
        .query_row(
            "SELECT COUNT(*), SUM(cost), SUM(prompt_tokens + completion_tokens) FROM llm_calls",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(rows, 3 + 3 + 1 + 1);
    let answer_cost: f64 = answers.iter().map(|a| a.cost.unwrap()).sum();
    let answer_tokens: u64 = answers
        .iter()
        .map(|a| a.prompt_tokens + a.completion_tokens)
        .sum();
    assert!((answer_cost - cost).abs() < 1e-9, "{answer_cost} vs {cost}");
    assert_eq!(answer_tokens as i64, tokens);
    // Per call: every row carries the call's id, and its rows sum to the answer.
    let mut ids = std::collections::HashSet::new();
    for answer in &answers {
        assert_eq!(answer.parent_call_id, None, "no chain link was given");
        let id = answer
            .call_group_id
            .clone()
            .expect("a gateway answer has a call id");
        assert!(ids.insert(id.clone()), "one id per call");
        let (n, cost): (i64, Option<f64>) = conn
            .query_row(
                "SELECT COUNT(*), SUM(cost) FROM llm_calls WHERE call_group_id = ?1",
                [&id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(
            n,
            if answer.cache_hit {
                1
            } else {
                1 + 2 * i64::from(answer.asks > 1)
            }
        );
        assert!((cost.unwrap() - answer.cost.unwrap()).abs() < 1e-9);
    }
    let orphans: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM llm_calls WHERE call_group_id IS NULL",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(orphans, 0);
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
        polygateway_testkit::mock_llm::MOCK_CONTENT
    );
    assert_eq!(salvaged.usage_source, polygateway::UsageSource::Estimated);
    let next = gw.chat(vec![Message::user("q")]).await.unwrap();
    assert!(!next.cache_hit, "the salvaged answer was not stored");
    assert_eq!(next.content, "complete");
    assert_eq!(mock.counts().chat, 2);
    gw.shutdown().await;
}
