//! Gemini sources on the governed path (issue #45), against the mock Gemini API
//! (`testkit::mock_gemini`): native embeddings (`batchEmbedContents`) batched, dimensioned,
//! retried and classified; chat usage with implicit-cache reads priced and written to telemetry;
//! a scope mixing a Gemini source with an OpenAI-compatible one, switching away from Gemini's
//! `429 RESOURCE_EXHAUSTED` and `503 UNAVAILABLE`; a tool loop written once on an OpenAI, an
//! Anthropic and a Gemini scope of one gateway, and crossing between them mid-conversation.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use polygateway::config::{Secret, Settings};
use polygateway::ports::{FailureClass, SourceReason, Transport};
use polygateway::provider::Dialect;
use polygateway::transport::embeddings::{EmbeddingTransport, EmbeddingWireRequest};
use polygateway::transport::TransportConfig;
use polygateway::{CallOptions, Gateway, GatewayError, LlmResponse, Message, Tool, UsageSource};
use polygateway_testkit::mock_anthropic::{MockAnthropic, MOCK_ANTHROPIC_KEY};
use polygateway_testkit::mock_gemini::{
    embedding, GeminiFault, MockGemini, EMBEDDING_DIM, MOCK_GEMINI_KEY,
};
use polygateway_testkit::{mock_env, source_settings, Behaviour, MockUpstream};
use serde_json::json;

/// A scope `scope` with one Gemini source on `mock` (model `model`), and `extra` keys.
fn env(
    scope: &str,
    mock: &MockGemini,
    model: &str,
    extra: &[(&str, &str)],
) -> BTreeMap<String, String> {
    let mut env = mock_env();
    let source = format!("{scope}__GEMINI__1");
    env.insert(format!("{source}__BASE_URL"), mock.base_url());
    env.insert(format!("{source}__API_KEY"), MOCK_GEMINI_KEY.into());
    env.insert(format!("{source}__MODEL"), model.into());
    env.insert(format!("{source}__TIMEOUT_S"), "10".into());
    env.insert(format!("{scope}__RETRY__BACKOFF_BASE_S"), "0.01".into());
    env.insert(format!("{scope}__RETRY__BACKOFF_MAX_S"), "0.05".into());
    for (k, v) in extra {
        env.insert((*k).into(), (*v).into());
    }
    env
}

async fn gateway(env: &BTreeMap<String, String>, scope: &str) -> Result<Gateway, GatewayError> {
    Gateway::from_settings(Settings::from_map(env).expect("settings"), scope).await
}

fn texts(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("text number {i}")).collect()
}

/// The bodies of the mock's `batchEmbedContents` requests, in order.
fn batch_requests(mock: &MockGemini) -> Vec<serde_json::Value> {
    mock.requests()
        .into_iter()
        .filter(|r| {
            r["action"]
                .as_str()
                .is_some_and(|a| a.ends_with(":batchEmbedContents"))
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn embeddings_are_native_batched_dimensioned_and_retried() {
    let mock = MockGemini::start().await;
    // The first batch meets a busy model once: only it is sent again.
    mock.push_fault(GeminiFault::Unavailable);
    let keys = env(
        "EMBED",
        &mock,
        "models/gemini-embedding-001",
        &[("EMBED__BATCH_SIZE", "2"), ("EMBED__EXPECTED_DIM", "4")],
    );
    let gw = gateway(&keys, "EMBED").await.unwrap();
    let input = texts(5);
    let out = gw.embed(input.clone()).await.unwrap();
    assert_eq!(out.dim, 4);
    for (text, vector) in input.iter().zip(&out.vectors) {
        assert_eq!(vector, &embedding(text, 4), "order kept for {text}");
    }
    // The API reports no usage for embeddings: the gateway says so instead of inventing it.
    assert_eq!(out.usage_source, UsageSource::Unavailable);
    gw.shutdown().await;

    let sent = batch_requests(&mock);
    assert_eq!(sent.len(), 4, "three batches, the first sent twice");
    for request in &sent {
        assert_eq!(request["api_key_header"], true, "the key in x-goog-api-key");
        assert_eq!(request["action"], "gemini-embedding-001:batchEmbedContents");
        for item in request["body"]["requests"].as_array().unwrap() {
            assert_eq!(item["model"], "models/gemini-embedding-001");
            assert_eq!(
                item["outputDimensionality"], 4,
                "EXPECTED_DIM asked of the model"
            );
        }
    }
    // Batches go concurrently: their order at the mock is not fixed.
    let mut sizes: Vec<usize> = sent
        .iter()
        .map(|r| r["body"]["requests"].as_array().unwrap().len())
        .collect();
    sizes.sort_unstable();
    assert_eq!(sizes, vec![1, 2, 2, 2]);
}

#[tokio::test(start_paused = true)]
async fn an_embeddings_scope_refuses_what_gemini_or_anthropic_cannot_serve() {
    let mock = MockGemini::start().await;
    let keys = env(
        "EMBED",
        &mock,
        "gemini-embedding-001",
        &[("EMBED__BATCH_SIZE", "101")],
    );
    let err = gateway(&keys, "EMBED").await.unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, GatewayError::Config(_)), "{err:?}");
    assert!(
        message.contains("EMBED__BATCH_SIZE") && message.contains("at most 100"),
        "{message}"
    );

    let mut keys = env(
        "EMBED",
        &mock,
        "gemini-embedding-001",
        &[("EMBED__BATCH_SIZE", "8")],
    );
    keys.insert("EMBED__GEMINI__1__DIALECT".into(), "anthropic".into());
    let err = gateway(&keys, "EMBED").await.unwrap_err();
    assert!(err.to_string().contains("has no embeddings"), "{err}");
    assert!(mock.requests().is_empty(), "nothing was sent");
}

#[tokio::test(start_paused = true)]
async fn embedding_errors_are_read_from_geminis_body() {
    let mock = MockGemini::start().await;
    let mut settings = source_settings(&mock.base_url());
    settings.provider = "gemini".into();
    settings.dialect = Some(Dialect::Gemini);
    settings.model = "gemini-embedding-001".into();
    settings.api_key = Secret::new(MOCK_GEMINI_KEY);
    let transport = EmbeddingTransport::new(TransportConfig::from(&settings));
    assert!(transport
        .url()
        .ends_with("/models/gemini-embedding-001:batchEmbedContents"));
    let request = EmbeddingWireRequest {
        inputs: Arc::new(vec!["alpha".into(), "beta".into()]),
    };
    let batch = transport.send(&request, None).await.unwrap();
    assert_eq!(
        batch.vectors,
        vec![
            embedding("alpha", EMBEDDING_DIM),
            embedding("beta", EMBEDDING_DIM)
        ]
    );
    assert_eq!(EmbeddingTransport::tokens_used(&batch), None);

    // 429 RESOURCE_EXHAUSTED: pushback, its RetryInfo the Retry-After.
    mock.push_fault(GeminiFault::RateLimited { retry_delay_s: 7 });
    let e = transport.send(&request, None).await.unwrap_err();
    assert_eq!(
        (e.class, e.reason),
        (FailureClass::Transient, SourceReason::RateLimited)
    );
    assert_eq!(e.retry_after, Some(Duration::from_secs(7)));
    mock.push_fault(GeminiFault::PermissionDenied);
    let e = transport.send(&request, None).await.unwrap_err();
    assert_eq!(e.class, FailureClass::SourceDead);
    // A wrong key (Gemini answers 400 API_KEY_INVALID) is a dead source, and the key is nowhere.
    settings.api_key = Secret::new("AIza-wrong-key");
    let e = EmbeddingTransport::new(TransportConfig::from(&settings))
        .send(&request, None)
        .await
        .unwrap_err();
    assert_eq!(e.class, FailureClass::SourceDead);
    assert!(!format!("{e:?}").contains("AIza-wrong-key"));
}

#[tokio::test(start_paused = true)]
async fn cache_reads_are_priced_and_written_to_telemetry() {
    let mock = MockGemini::start().await;
    mock.script("Cached answer.", None, None, Some(40));
    let dir = tempfile::tempdir().unwrap();
    let prices = dir.path().join("prices.json");
    std::fs::write(
        &prices,
        r#"{"gemini-2.5-flash": {"input_per_1m": 0.3, "output_per_1m": 2.5, "cached_input_per_1m": 0.03}}"#,
    )
    .unwrap();
    let db = dir.path().join("telemetry.sqlite");
    let keys = env(
        "LLM",
        &mock,
        "gemini-2.5-flash",
        &[
            ("PGW_PRICING_PATH", prices.to_str().unwrap()),
            ("PGW_TELEMETRY_BACKEND", "sqlite"),
            ("PGW_TELEMETRY_SQLITE_PATH", db.to_str().unwrap()),
        ],
    );
    let gw = gateway(&keys, "LLM").await.unwrap();
    let long = "The rules of the game. ".repeat(40);
    let answer = gw
        .chat(vec![Message::system(&long), Message::user("Play.")])
        .await
        .unwrap();
    assert_eq!(answer.content, "Cached answer.");
    assert_eq!(answer.cached_prompt_tokens, Some(40), "{answer:?}");
    assert!(answer.prompt_tokens > 40);
    let expected = ((answer.prompt_tokens - 40) as f64 * 0.3
        + 40.0 * 0.03
        + answer.completion_tokens as f64 * 2.5)
        / 1e6;
    assert!(
        (answer.cost.unwrap() - expected).abs() < 1e-12,
        "{answer:?}"
    );
    gw.shutdown().await;

    let row: (i64, Option<i64>, Option<i64>, f64) = rusqlite::Connection::open(&db)
        .unwrap()
        .query_row(
            "SELECT prompt_tokens, cached_prompt_tokens, cache_read_tokens, cost FROM llm_calls",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap();
    assert_eq!(
        row,
        (
            answer.prompt_tokens as i64,
            Some(40),
            Some(40),
            answer.cost.unwrap()
        )
    );
}

#[tokio::test(start_paused = true)]
async fn a_mixed_scope_switches_away_from_geminis_pushback_and_outages() {
    let gemini = MockGemini::start().await;
    let openai = MockUpstream::start(Behaviour::healthy_with("from openai")).await;
    let mut keys = env(
        "LLM",
        &gemini,
        "gemini-2.5-flash",
        &[("LLM__SELECTOR", "round_robin")],
    );
    keys.insert("LLM__OPENAI__1__BASE_URL".into(), openai.base_url());
    keys.insert("LLM__OPENAI__1__API_KEY".into(), "sk-openai".into());
    keys.insert("LLM__OPENAI__1__MODEL".into(), "gpt-mock".into());
    let gw = gateway(&keys, "LLM").await.unwrap();
    let healthy = gw.chat(vec![Message::user("Hi")]).await.unwrap();
    let second = gw.chat(vec![Message::user("Hi")]).await.unwrap();
    let mut served: Vec<String> = vec![healthy.source_name, second.source_name];
    served.sort();
    assert_eq!(served, vec!["gemini_1", "openai_1"], "both sources serve");

    // Every call that meets Gemini's outage (503 UNAVAILABLE) or pushback (429
    // RESOURCE_EXHAUSTED) is answered by the other source.
    for fault in [
        GeminiFault::Unavailable,
        // (A call waits at least a 429's retry delay before its next attempt, behaviour §5.1:
        // zero keeps the test short.)
        GeminiFault::RateLimited { retry_delay_s: 0 },
    ] {
        let tried = gemini.requests().len();
        for _ in 0..4 {
            gemini.push_fault(fault.clone());
        }
        for _ in 0..4 {
            let answer = gw.chat(vec![Message::user("Hi")]).await.unwrap();
            assert_eq!(answer.source_name, "openai_1", "{fault:?}: {answer:?}");
            assert_eq!(answer.content, "from openai");
        }
        assert!(
            gemini.requests().len() > tried,
            "{fault:?}: Gemini was tried"
        );
    }
    gw.shutdown().await;
}

fn weather_tool() -> Tool {
    Tool::function(
        "weather",
        "The weather in a city.",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    )
}

/// The tool loop an application writes once: ask, run every tool the answer calls, append the
/// answer's turn and the results, ask again; turn `n` goes to `scopes[n % len]` (one scope: a
/// plain loop; several: a conversation crossing dialects mid-way, as a failover would).
async fn tool_loop(gw: &Gateway, scopes: &[&str]) -> (Vec<Message>, LlmResponse) {
    let mut conversation = vec![Message::user("Weather in Paris?")];
    for scope in scopes.iter().cycle().take(4) {
        let answer = gw
            .chat_scope(scope)
            .unwrap()
            .chat_with(
                conversation.clone(),
                CallOptions::new().tools([weather_tool()]),
            )
            .await
            .unwrap_or_else(|e| panic!("{scope}: {e}"));
        if answer.tool_calls.is_empty() {
            return (conversation, answer);
        }
        conversation.push(answer.to_message());
        for call in &answer.tool_calls {
            assert_eq!(call.function.name, "weather", "{scope}");
            conversation.push(Message::tool_result(&call.id, r#"{"temp_c": 18}"#));
        }
    }
    panic!("no final answer after four turns of {scopes:?}");
}

#[tokio::test(start_paused = true)]
async fn a_tool_loop_written_once_runs_on_every_dialect_and_crosses_between_them() {
    let claude = MockAnthropic::start().await;
    let gemini = MockGemini::start().await;
    gemini.script(
        "In Paris:",
        None,
        Some(("weather", json!({"city": "Paris"}))),
        None,
    );
    // The OpenAI-compatible mock calls the offered tool, and answers a tool result with it.
    let openai = MockUpstream::start(Behaviour::healthy()).await;
    let mut keys = env("GEMINI", &gemini, "gemini-2.5-flash", &[]);
    for (k, v) in [
        ("CLAUDE__ANTHROPIC__1__BASE_URL", claude.base_url()),
        ("CLAUDE__ANTHROPIC__1__API_KEY", MOCK_ANTHROPIC_KEY.into()),
        ("CLAUDE__ANTHROPIC__1__MODEL", "claude-mock".into()),
        ("OPENAI__OPENAI__1__BASE_URL", openai.base_url()),
        ("OPENAI__OPENAI__1__API_KEY", "sk-openai".into()),
        ("OPENAI__OPENAI__1__MODEL", "gpt-mock".into()),
    ] {
        keys.insert(k.into(), v);
    }
    let gw = gateway(&keys, "GEMINI").await.unwrap();

    // Written once, run on each dialect alone.
    let (_, on_claude) = tool_loop(&gw, &["CLAUDE"]).await;
    assert_eq!(on_claude.content, r#"tool said: {"temp_c": 18}"#);
    let (_, on_gemini) = tool_loop(&gw, &["GEMINI"]).await;
    assert_eq!(on_gemini.content, r#"In Paris: {"temp_c":18}"#);
    let (_, on_openai) = tool_loop(&gw, &["OPENAI"]).await;
    assert_eq!(on_openai.content, r#"tool said: {"temp_c": 18}"#);

    // Crossing: the call Anthropic made, answered on Gemini (which has issued signatures of
    // its own by now, so it checks the call's): the stand-in signature lets it through.
    let (conversation, crossed) = tool_loop(&gw, &["CLAUDE", "GEMINI"]).await;
    assert_eq!(crossed.content, r#"In Paris: {"temp_c":18}"#);
    assert!(conversation[1].tool_calls.as_ref().unwrap()[0]
        .id
        .starts_with("toolu_"));
    let sent = gemini.requests().pop().unwrap();
    assert_eq!(
        sent["body"]["contents"][1]["parts"][0]["thoughtSignature"],
        "skip_thought_signature_validator"
    );
    // Gemini's signed call answered on Anthropic (the signature stays Gemini's business), and on
    // the OpenAI-compatible source.
    let (_, crossed) = tool_loop(&gw, &["GEMINI", "CLAUDE"]).await;
    assert_eq!(crossed.content, r#"tool said: {"temp_c": 18}"#);
    let sent = claude.requests().pop().unwrap().body;
    assert_eq!(sent["messages"][1]["content"][0]["type"], "tool_use");
    assert!(!sent.to_string().contains("thought_signature"), "{sent}");
    let (_, crossed) = tool_loop(&gw, &["CLAUDE", "OPENAI"]).await;
    assert_eq!(crossed.content, r#"tool said: {"temp_c": 18}"#);
    let (_, crossed) = tool_loop(&gw, &["GEMINI", "OPENAI"]).await;
    assert_eq!(crossed.content, r#"tool said: {"temp_c": 18}"#);
    gw.shutdown().await;
}
