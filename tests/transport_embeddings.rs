//! The embeddings transport against the mock upstream: order by index, usage, classification,
//! count mismatch, dimension checks and normalisation helpers.

use std::sync::Arc;

use polygateway::ports::{Classify, FailureClass, SourceReason, Transport};
use polygateway::transport::{EmbeddingTransport, EmbeddingWireRequest, TransportConfig};
use polygateway::UsageSource;
use polygateway_testkit::{mock_embedding, source_settings, Behaviour, MockUpstream};

fn request(texts: &[&str]) -> EmbeddingWireRequest {
    EmbeddingWireRequest {
        inputs: Arc::new(texts.iter().map(|s| s.to_string()).collect()),
    }
}

fn transport(mock: &MockUpstream) -> EmbeddingTransport {
    EmbeddingTransport::new(TransportConfig::from(&source_settings(&mock.base_url())))
}

#[tokio::test]
async fn vectors_come_back_in_input_order_with_usage() {
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    mock.set_embedding_dim(16);
    let texts = ["alpha", "beta", "gamma delta epsilon"];
    let b = transport(&mock).send(&request(&texts), None).await.unwrap();
    // The mock answers in reverse order; the transport sorts by `index`.
    let expected: Vec<Vec<f32>> = texts.iter().map(|t| mock_embedding(t, 16)).collect();
    assert_eq!(b.vectors, expected);
    assert_eq!(b.usage_source, UsageSource::Measured);
    assert_eq!(b.prompt_tokens, 1 + 1 + 4);
    assert_eq!(b.model_reported.as_deref(), Some("test-model-mock"));
    assert!(b.latency_ms > 0.0);
    assert_eq!(EmbeddingTransport::tokens_used(&b), Some(6));
    let sent = mock.last_request().unwrap();
    assert_eq!(sent.path, "/v1/embeddings");
    assert_eq!(sent.body["model"], "test-model");
    assert_eq!(sent.body["input"], serde_json::json!(texts));
    assert_eq!(sent.authorization.as_deref(), Some("Bearer sk-test"));
}

#[tokio::test]
async fn missing_usage_is_unavailable() {
    let mock = MockUpstream::start(Behaviour::NoUsage).await;
    let b = transport(&mock).send(&request(&["x"]), None).await.unwrap();
    assert_eq!(b.prompt_tokens, 0);
    assert_eq!(b.usage_source, UsageSource::Unavailable);
    assert_eq!(EmbeddingTransport::tokens_used(&b), None);
}

#[tokio::test]
async fn count_mismatch_is_result_invalid() {
    let mock = MockUpstream::start(Behaviour::EmbeddingCountMismatch).await;
    let e = transport(&mock)
        .send(&request(&["a", "b", "c"]), None)
        .await
        .unwrap_err();
    assert_eq!(e.class(), FailureClass::ResultInvalid);
    assert!(e.proves_alive());
    assert!(
        e.message.contains("2 vectors for 3 inputs"),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn http_failures_are_classified_like_chat() {
    let mock = MockUpstream::start(Behaviour::RateLimited {
        retry_after_s: Some(4),
    })
    .await;
    let t = transport(&mock);
    let e = t.send(&request(&["a"]), None).await.unwrap_err();
    assert!(e.is_rate_limited());
    assert_eq!(e.retry_after(), Some(std::time::Duration::from_secs(4)));
    mock.set_behaviour(Behaviour::InsufficientQuota);
    assert_eq!(
        t.send(&request(&["a"]), None).await.unwrap_err().class(),
        FailureClass::SourceDead
    );
    mock.set_behaviour(Behaviour::Unauthorized);
    assert_eq!(
        t.send(&request(&["a"]), None).await.unwrap_err().class(),
        FailureClass::SourceDead
    );
    mock.set_behaviour(Behaviour::BadRequest);
    let e = t.send(&request(&["a"]), None).await.unwrap_err();
    assert_eq!(e.class(), FailureClass::RequestRejected);
    assert!(e.body_text.contains("Invalid"));
    mock.set_behaviour(Behaviour::ServerError(503));
    assert_eq!(
        t.send(&request(&["a"]), None).await.unwrap_err().class(),
        FailureClass::Transient
    );
}

#[tokio::test]
async fn black_hole_hits_the_total_deadline() {
    let mock = MockUpstream::start(Behaviour::BlackHole).await;
    let mut s = source_settings(&mock.base_url());
    s.timeout = std::time::Duration::from_millis(200);
    let e = EmbeddingTransport::new(TransportConfig::from(&s))
        .send(&request(&["a"]), None)
        .await
        .unwrap_err();
    assert_eq!(e.source_reason(), SourceReason::Timeout);
    assert!(e.message.contains("total"), "{}", e.message);
}

#[tokio::test]
async fn empty_batch_sends_nothing() {
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let b = transport(&mock).send(&request(&[]), None).await.unwrap();
    assert!(b.vectors.is_empty());
    assert_eq!(mock.counts().total, 0);
}
