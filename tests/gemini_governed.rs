//! Gemini sources on the governed path (issue #45), against the mock Gemini API
//! (`testkit::mock_gemini`): native embeddings (`batchEmbedContents`) batched, dimensioned,
//! retried and classified; chat usage with implicit-cache reads priced and written to telemetry;
//! a scope mixing a Gemini source with an OpenAI-compatible one, switching away from Gemini's
//! `429 RESOURCE_EXHAUSTED` and `503 UNAVAILABLE`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use polygateway::config::{Secret, Settings};
use polygateway::ports::{FailureClass, SourceReason, Transport};
use polygateway::provider::Dialect;
use polygateway::testkit::mock_gemini::{
    embedding, GeminiFault, MockGemini, EMBEDDING_DIM, MOCK_GEMINI_KEY,
};
use polygateway::testkit::{mock_env, source_settings, Behaviour, MockUpstream};
use polygateway::transport::embeddings::{EmbeddingTransport, EmbeddingWireRequest};
use polygateway::{Gateway, GatewayError, Message, UsageSource};

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

#[tokio::test]
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

#[tokio::test]
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

#[tokio::test]
async fn embedding_errors_are_read_from_geminis_body() {
    let mock = MockGemini::start().await;
    let mut settings = source_settings(&mock.base_url());
    settings.provider = "gemini".into();
    settings.dialect = Some(Dialect::Gemini);
    settings.model = "gemini-embedding-001".into();
    settings.api_key = Secret::new(MOCK_GEMINI_KEY);
    let transport = EmbeddingTransport::new(settings.clone());
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
    let e = EmbeddingTransport::new(settings)
        .send(&request, None)
        .await
        .unwrap_err();
    assert_eq!(e.class, FailureClass::SourceDead);
    assert!(!format!("{e:?}").contains("AIza-wrong-key"));
}

#[tokio::test]
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

#[tokio::test]
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
