//! The chat transport against the fault-injecting mock upstream: one test per classification row
//! and per mock behaviour, request-body merging, thinking injection, streaming to a consumer,
//! the watchdog layers over real sockets, and the proxy switch.

use std::sync::Arc;
use std::time::Duration;

use polygateway::config::{MissingDone, Secret};
use polygateway::ports::{Classify, EventSink, FailureClass, SourceReason, Transport};
use polygateway::provider::{ProviderProfile, ProviderRegistry};
use polygateway::transport::{ChatDelta, ChatTransport, ChatWireRequest, TransportConfig};
use polygateway::{LlmResponse, Message, TransportError, UsageSource};
use polygateway_testkit::mock_llm::{
    MOCK_CACHED_TOKENS, MOCK_CONTENT, MOCK_PROMPT_TOKENS, MOCK_REASONING_TOKENS, MOCK_THINKING,
};
use polygateway_testkit::{source_settings, Behaviour, MockUpstream};
use serde_json::{json, Value};
use tokio::time::Instant;

fn profile(name: &str) -> ProviderProfile {
    ProviderRegistry::with_defaults().get(name).clone()
}

/// The transport configuration of `testkit::source_settings(base_url)`.
fn config(base_url: &str) -> TransportConfig {
    TransportConfig::from(&source_settings(base_url))
}

fn transport(mock: &MockUpstream) -> ChatTransport {
    ChatTransport::new(config(&mock.base_url()), profile("openai"))
}

fn transport_with(mock: &MockUpstream, f: impl FnOnce(&mut TransportConfig)) -> ChatTransport {
    let mut s = config(&mock.base_url());
    f(&mut s);
    ChatTransport::new(s, profile("openai"))
}

fn request(stream: bool) -> ChatWireRequest {
    let mut r = ChatWireRequest::new(vec![Message::user("hello")]);
    r.stream = stream;
    r
}

async fn call(t: &ChatTransport, stream: bool) -> Result<LlmResponse, TransportError> {
    t.send(&request(stream), None).await
}

async fn fail(behaviour: Behaviour, stream: bool) -> TransportError {
    let mock = MockUpstream::start(behaviour).await;
    let err = call(&transport(&mock), stream).await.unwrap_err();
    mock.shutdown().await;
    err
}

/// Wait (≤ 3 s) until `cond` holds.
async fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(3);
    while Instant::now() < end {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cond()
}

// ---------------------------------------------------------------- healthy answers

// Real time: it checks that a latency is measured, and a mock without delays answers in 0 ms of
// paused time.
#[tokio::test]
async fn healthy_stream_fills_every_transport_field() {
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let t = transport(&mock);
    let r = call(&t, true).await.unwrap();
    assert_eq!(r.content, MOCK_CONTENT);
    assert_eq!(r.thinking, "");
    assert_eq!(r.model, "test-model");
    assert_eq!(r.model_reported.as_deref(), Some("test-model-mock"));
    assert_eq!(r.provider, "openai");
    assert_eq!(r.source_name, "openai_1");
    assert_eq!(r.prompt_tokens, MOCK_PROMPT_TOKENS);
    assert_eq!(r.completion_tokens, 4);
    assert_eq!(r.usage_source, UsageSource::Measured);
    assert_eq!(r.cached_prompt_tokens, None);
    assert_eq!(r.reasoning_tokens, None);
    assert!(r.ttft_ms.is_some());
    assert!(r.max_inter_token_ms.is_some());
    assert!(r.latency_ms > 0.0);
    // Left for the runtime.
    assert_eq!(r.call_id, "");
    assert!(!r.cache_hit && r.cost.is_none() && r.structured_data.is_none());
    assert_eq!(ChatTransport::tokens_used(&r), Some(MOCK_PROMPT_TOKENS + 4));

    let sent = mock.last_request().unwrap();
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(sent.authorization.as_deref(), Some("Bearer sk-test"));
    assert_eq!(sent.body["model"], "test-model");
    assert_eq!(sent.body["stream"], true);
    assert_eq!(sent.body["stream_options"], json!({"include_usage": true}));
    assert_eq!(
        sent.body["messages"],
        json!([{"role": "user", "content": "hello"}])
    );
    assert_eq!(mock.counts().of("healthy"), 1);
}

#[tokio::test(start_paused = true)]
async fn healthy_non_stream_uses_the_body_usage() {
    let mock = MockUpstream::start(Behaviour::healthy_with("plain answer")).await;
    let r = call(&transport(&mock), false).await.unwrap();
    assert_eq!(r.content, "plain answer");
    assert_eq!(r.usage_source, UsageSource::Measured);
    assert_eq!(r.prompt_tokens, MOCK_PROMPT_TOKENS);
    assert_eq!(r.model_reported.as_deref(), Some("test-model-mock"));
    assert_eq!(r.ttft_ms, None);
    assert_eq!(r.max_inter_token_ms, None);
    let sent = mock.last_request().unwrap().body;
    assert_eq!(sent["stream"], false);
    assert!(sent.get("stream_options").is_none());
}

#[tokio::test(start_paused = true)]
async fn empty_key_sends_no_authorization() {
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let t = transport_with(&mock, |s| s.api_key = Secret::new(""));
    call(&t, true).await.unwrap();
    assert_eq!(mock.last_request().unwrap().authorization, None);
}

#[tokio::test(start_paused = true)]
async fn key_never_appears_in_debug() {
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let t = transport_with(&mock, |s| s.api_key = Secret::new("sk-very-secret"));
    assert!(!format!("{t:?}").contains("sk-very-secret"));
    let err = {
        mock.set_behaviour(Behaviour::Unauthorized);
        call(&t, true).await.unwrap_err()
    };
    assert!(!format!("{err:?}").contains("sk-very-secret"));
}

// ---------------------------------------------------------------- HTTP classification rows

#[tokio::test(start_paused = true)]
async fn rate_limited_is_transient_pushback_with_retry_after() {
    for stream in [true, false] {
        let e = fail(
            Behaviour::RateLimited {
                retry_after_s: Some(2),
            },
            stream,
        )
        .await;
        assert_eq!(e.class(), FailureClass::Transient);
        assert!(e.is_rate_limited());
        assert_eq!(e.source_reason(), SourceReason::RateLimited);
        assert_eq!(e.retry_after(), Some(Duration::from_secs(2)));
        assert_eq!(e.status, Some(429));
        assert!(
            e.body_text.contains("Rate limit reached"),
            "{}",
            e.body_text
        );
        assert!(e.message.contains(&e.body_text));
    }
    let e = fail(
        Behaviour::RateLimited {
            retry_after_s: None,
        },
        true,
    )
    .await;
    assert!(e.is_rate_limited());
    assert_eq!(e.retry_after(), None);
}

#[tokio::test(start_paused = true)]
async fn insufficient_quota_is_source_dead() {
    let e = fail(Behaviour::InsufficientQuota, true).await;
    assert_eq!(e.class(), FailureClass::SourceDead);
    assert!(!e.is_rate_limited());
    assert_eq!(e.source_reason(), SourceReason::SourceDead);
    assert!(e.body_text.contains("insufficient_quota"));
}

#[tokio::test(start_paused = true)]
async fn unauthorized_and_forbidden_are_source_dead() {
    for (b, status) in [(Behaviour::Unauthorized, 401), (Behaviour::Forbidden, 403)] {
        let e = fail(b, true).await;
        assert_eq!(e.class(), FailureClass::SourceDead);
        assert_eq!(e.status, Some(status));
        assert!(!e.body_text.is_empty());
    }
}

#[tokio::test(start_paused = true)]
async fn bad_request_is_rejected_and_proves_alive() {
    for stream in [true, false] {
        let e = fail(Behaviour::BadRequest, stream).await;
        assert_eq!(e.class(), FailureClass::RequestRejected);
        assert!(e.proves_alive());
        assert_eq!(e.status, Some(400));
        assert!(e.body_text.contains("Invalid 'messages'"));
    }
}

#[tokio::test(start_paused = true)]
async fn server_errors_are_transient() {
    for code in [500, 502, 503] {
        let e = fail(Behaviour::ServerError(code), true).await;
        assert_eq!(e.class(), FailureClass::Transient);
        assert_eq!(e.source_reason(), SourceReason::ServerError);
        assert_eq!(e.status, Some(code));
        assert!(!e.is_rate_limited());
        assert!(!e.proves_alive());
    }
}

#[tokio::test(start_paused = true)]
async fn connection_refused_is_transient_network_error() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let t = ChatTransport::new(
        config(&format!("http://127.0.0.1:{port}/v1")),
        profile("openai"),
    );
    let e = call(&t, true).await.unwrap_err();
    assert_eq!(e.class(), FailureClass::Transient);
    assert_eq!(e.source_reason(), SourceReason::NetworkError);
    assert_eq!(e.status, None);
}

// ---------------------------------------------------------------- stream defects

#[tokio::test(start_paused = true)]
async fn truncated_stream_retry_policy_is_transient() {
    let e = fail(Behaviour::TruncatedStream { with_usage: true }, true).await;
    assert_eq!(e.class(), FailureClass::Transient);
    assert!(e.message.contains("[DONE]"), "{}", e.message);
}

#[tokio::test(start_paused = true)]
async fn truncated_stream_salvage_is_estimated_only_with_a_usage_frame() {
    let mock = MockUpstream::start(Behaviour::TruncatedStream { with_usage: true }).await;
    let t = transport_with(&mock, |s| s.missing_done = MissingDone::Salvage);
    let r = call(&t, true).await.unwrap();
    assert_eq!(r.content, MOCK_CONTENT);
    assert_eq!(r.usage_source, UsageSource::Estimated);
    assert_eq!(r.prompt_tokens, MOCK_PROMPT_TOKENS);
    assert_eq!(r.completion_tokens, 4);

    mock.set_behaviour(Behaviour::TruncatedStream { with_usage: false });
    let r = call(&t, true).await.unwrap();
    assert_eq!(r.content, MOCK_CONTENT);
    assert_eq!(r.usage_source, UsageSource::Unavailable);
    assert_eq!((r.prompt_tokens, r.completion_tokens), (0, 0));
    assert_eq!(ChatTransport::tokens_used(&r), None);
}

#[tokio::test(start_paused = true)]
async fn truncated_non_stream_body_is_transient() {
    let e = fail(Behaviour::TruncatedStream { with_usage: true }, false).await;
    assert_eq!(e.class(), FailureClass::Transient);
    assert!(
        e.message.contains("malformed completion body"),
        "{}",
        e.message
    );
}

#[tokio::test(start_paused = true)]
async fn early_eof_is_transient_even_when_salvaging() {
    let mock = MockUpstream::start(Behaviour::EarlyEof).await;
    for policy in [MissingDone::Retry, MissingDone::Salvage] {
        let t = transport_with(&mock, |s| s.missing_done = policy);
        let e = call(&t, true).await.unwrap_err();
        assert_eq!(e.class(), FailureClass::Transient);
        assert!(e.message.contains("early_eof"), "{}", e.message);
    }
    let e = call(&transport(&mock), false).await.unwrap_err();
    assert_eq!(e.class(), FailureClass::Transient);
}

// ---------------------------------------------------------------- abrupt closes (no final chunk)

fn abrupt(content: bool, with_usage: bool) -> Behaviour {
    Behaviour::AbruptClose {
        content,
        with_usage,
    }
}

#[tokio::test(start_paused = true)]
async fn the_mock_drops_the_socket_without_the_final_chunk() {
    // Read the raw body: the content arrives, then a body error instead of a clean end.
    let mock = MockUpstream::start(abrupt(true, true)).await;
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let body = json!({"model": "m", "messages": [], "stream": true,
        "stream_options": {"include_usage": true}});
    let resp = client
        .post(format!("{}/chat/completions", mock.base_url()))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut stream = resp.bytes_stream();
    let mut received = Vec::new();
    let error = loop {
        match futures::StreamExt::next(&mut stream).await {
            Some(Ok(bytes)) => received.extend_from_slice(&bytes),
            Some(Err(e)) => break e,
            None => panic!("a clean end of body: the close was not abrupt"),
        }
    };
    let text = String::from_utf8(received).unwrap();
    assert!(text.contains("\"usage\""), "{text}");
    assert!(!text.contains("[DONE]"), "{text}");
    assert!(error.is_body() || error.is_decode(), "{error:?}");
    assert_eq!(mock.counts().of("abrupt_close"), 1);
}

#[tokio::test(start_paused = true)]
async fn abrupt_close_after_content_retry_says_truncated_with_the_char_count() {
    let e = fail(abrupt(true, true), true).await;
    assert_eq!(e.class(), FailureClass::Transient);
    assert_eq!(e.source_reason(), SourceReason::NetworkError);
    let chars = MOCK_CONTENT.chars().count();
    assert_eq!(
        e.message,
        format!(
            "truncated stream: connection closed after {chars} chars of content, without [DONE]"
        )
    );
}

#[tokio::test(start_paused = true)]
async fn abrupt_close_after_content_is_salvaged() {
    let mock = MockUpstream::start(abrupt(true, true)).await;
    let t = transport_with(&mock, |s| s.missing_done = MissingDone::Salvage);
    let r = call(&t, true).await.unwrap();
    assert_eq!(r.content, MOCK_CONTENT);
    assert!(r.truncated);
    assert_eq!(r.usage_source, UsageSource::Estimated);
    assert_eq!(r.prompt_tokens, MOCK_PROMPT_TOKENS);
    assert_eq!(r.completion_tokens, 4);

    mock.set_behaviour(abrupt(true, false));
    let r = call(&t, true).await.unwrap();
    assert_eq!(r.content, MOCK_CONTENT);
    assert!(r.truncated);
    assert_eq!(r.usage_source, UsageSource::Unavailable);
    assert_eq!(ChatTransport::tokens_used(&r), None);
}

#[tokio::test(start_paused = true)]
async fn abrupt_close_before_content_is_an_early_eof_under_both_policies() {
    let mock = MockUpstream::start(abrupt(false, false)).await;
    for policy in [MissingDone::Retry, MissingDone::Salvage] {
        let t = transport_with(&mock, |s| s.missing_done = policy);
        let e = call(&t, true).await.unwrap_err();
        assert_eq!(e.class(), FailureClass::Transient);
        assert_eq!(
            e.message, "early_eof: connection closed before any content",
            "{policy:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn abrupt_close_of_a_non_streaming_body_is_a_transient_body_error() {
    let e = fail(abrupt(true, true), false).await;
    assert_eq!(e.class(), FailureClass::Transient);
    assert!(e.message.starts_with("body error"), "{}", e.message);
}

#[tokio::test(start_paused = true)]
async fn a_frame_past_the_sse_cap_is_transient_not_buffered() {
    // One 9 MiB content delta: a single SSE line past the 8 MiB cap.
    let e = fail(
        Behaviour::Healthy {
            ttft: Duration::ZERO,
            inter_token: Duration::ZERO,
            chunks: 1,
            content: "z".repeat(9 * 1024 * 1024),
        },
        true,
    )
    .await;
    assert_eq!(e.class(), FailureClass::Transient);
    assert_eq!(
        e.message,
        "malformed stream: SSE line or event larger than the 8388608-byte cap"
    );
}

#[tokio::test(start_paused = true)]
async fn malformed_frame_is_transient_with_the_frame_summarised() {
    let e = fail(Behaviour::MalformedFrame, true).await;
    assert_eq!(e.class(), FailureClass::Transient);
    assert_eq!(e.source_reason(), SourceReason::NetworkError);
    assert!(e.message.contains("malformed SSE frame"), "{}", e.message);
    assert_eq!(e.body_text, r#"{"choices":[{"delta":{"content":"x""#);
    let e = fail(Behaviour::MalformedFrame, false).await;
    assert_eq!(e.class(), FailureClass::Transient);
}

#[tokio::test(start_paused = true)]
async fn empty_completion_is_transient() {
    for stream in [true, false] {
        let e = fail(Behaviour::EmptyCompletion, stream).await;
        assert_eq!(e.class(), FailureClass::Transient);
        assert!(e.message.contains("empty completion"), "{}", e.message);
    }
}

#[tokio::test(start_paused = true)]
async fn in_band_error_is_classified() {
    for stream in [true, false] {
        let e = fail(Behaviour::InBandError, stream).await;
        assert_eq!(e.class(), FailureClass::Transient);
        assert!(e.message.contains("in-band"), "{}", e.message);
        assert!(e.body_text.contains("overloaded"));
    }
}

// ---------------------------------------------------------------- reasoning and usage

#[tokio::test(start_paused = true)]
async fn reasoning_content_goes_to_thinking_and_starts_ttft() {
    let mock = MockUpstream::start(Behaviour::Reasoning).await;
    let t = transport(&mock);
    let r = call(&t, true).await.unwrap();
    assert_eq!(r.thinking, MOCK_THINKING);
    assert_eq!(r.content, MOCK_CONTENT);
    assert_eq!(r.completion_tokens, 7);
    let r = call(&t, false).await.unwrap();
    assert_eq!(r.thinking, MOCK_THINKING);
    assert_eq!(r.content, MOCK_CONTENT);
}

#[tokio::test(start_paused = true)]
async fn think_tags_are_stripped_for_tag_providers_only() {
    let mock = MockUpstream::start(Behaviour::ThinkTags).await;
    let tags = ChatTransport::new(config(&mock.base_url()), profile("minimax"));
    for stream in [true, false] {
        let r = call(&tags, stream).await.unwrap();
        assert_eq!(r.thinking, MOCK_THINKING, "stream={stream}");
        assert_eq!(r.content, MOCK_CONTENT, "stream={stream}");
    }
    // A `reasoning_content` provider takes content verbatim.
    let r = call(&transport(&mock), true).await.unwrap();
    assert_eq!(r.thinking, "");
    assert!(
        r.content.starts_with("<think>Let me think.</think>"),
        "{}",
        r.content
    );
}

#[tokio::test(start_paused = true)]
async fn usage_details_are_reported() {
    let mock = MockUpstream::start(Behaviour::UsageDetails).await;
    for stream in [true, false] {
        let r = call(&transport(&mock), stream).await.unwrap();
        assert_eq!(r.cached_prompt_tokens, Some(MOCK_CACHED_TOKENS));
        assert_eq!(r.reasoning_tokens, Some(MOCK_REASONING_TOKENS));
        assert_eq!(r.usage_source, UsageSource::Measured);
    }
}

#[tokio::test(start_paused = true)]
async fn missing_usage_is_zero_and_unavailable() {
    let mock = MockUpstream::start(Behaviour::NoUsage).await;
    for stream in [true, false] {
        let r = call(&transport(&mock), stream).await.unwrap();
        assert_eq!(r.content, MOCK_CONTENT);
        assert_eq!((r.prompt_tokens, r.completion_tokens), (0, 0));
        assert_eq!(r.usage_source, UsageSource::Unavailable);
        assert_eq!(r.cached_prompt_tokens, None);
        assert_eq!(ChatTransport::tokens_used(&r), None);
    }
}

// ---------------------------------------------------------------- request body

#[tokio::test(start_paused = true)]
async fn merge_priority_structured_over_overlay_over_extra_body() {
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let t = transport_with(&mock, |s| {
        let extra = json!({"temperature": 0.1, "top_p": 0.5, "seed": 7,
                           "response_format": {"type": "text"}, "model": "evil", "stream": false});
        s.extra_body = extra.as_object().unwrap().clone();
    });
    let mut req = request(true);
    req.overlay =
        json!({"temperature": 0.7, "top_p": 0.9, "response_format": {"type": "json_object"}})
            .as_object()
            .unwrap()
            .clone();
    req.response_format = Some(json!({"type": "json_schema", "json_schema": {"name": "x"}}));
    t.send(&req, None).await.unwrap();
    let body = mock.last_request().unwrap().body;
    assert_eq!(body["temperature"], 0.7);
    assert_eq!(body["top_p"], 0.9);
    assert_eq!(body["seed"], 7);
    assert_eq!(body["response_format"]["type"], "json_schema");
    // Protected keys stay the transport's.
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
}

async fn sent_body(provider: &str, enable: Option<bool>) -> Value {
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let mut s = config(&mock.base_url());
    s.enable_thinking = enable;
    ChatTransport::new(s, profile(provider))
        .send(&request(true), None)
        .await
        .unwrap();
    mock.last_request().unwrap().body
}

#[tokio::test(start_paused = true)]
async fn thinking_injection_forms_on_and_off() {
    let b = sent_body("deepseek", Some(true)).await;
    assert_eq!(b["thinking"], json!({"type": "enabled"}));
    let b = sent_body("glm", Some(false)).await;
    assert_eq!(b["thinking"], json!({"type": "disabled"}));
    let b = sent_body("qwen", Some(false)).await;
    assert_eq!(b["enable_thinking"], false);
    let b = sent_body("qwen", Some(true)).await;
    assert_eq!(b["enable_thinking"], true);
    // Absent = inject nothing; a provider without a switch injects nothing either.
    let b = sent_body("deepseek", None).await;
    assert!(b.get("thinking").is_none());
    let b = sent_body("openai", Some(true)).await;
    assert!(b.get("thinking").is_none() && b.get("enable_thinking").is_none());
}

#[tokio::test(start_paused = true)]
async fn call_overlay_overrides_thinking_injection() {
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let mut s = config(&mock.base_url());
    s.enable_thinking = Some(true);
    let t = ChatTransport::new(s, profile("qwen"));
    let mut req = request(true);
    req.overlay.insert("enable_thinking".into(), false.into());
    t.send(&req, None).await.unwrap();
    assert_eq!(mock.last_request().unwrap().body["enable_thinking"], false);
}

// ---------------------------------------------------------------- streaming to a consumer

#[tokio::test(start_paused = true)]
async fn deltas_reach_the_consumer_in_order() {
    let mock = MockUpstream::start(Behaviour::Reasoning).await;
    let t = transport(&mock);
    let (sink, mut rx) = EventSink::channel(64);
    let r = t.send(&request(true), Some(&sink)).await.unwrap();
    drop(sink);
    let mut content = String::new();
    let mut thinking = String::new();
    let mut saw_content = false;
    while let Some(d) = rx.recv().await {
        match d {
            ChatDelta::Reasoning(x) => {
                assert!(!saw_content, "reasoning after content");
                thinking.push_str(&x);
            }
            ChatDelta::Content(x) => {
                saw_content = true;
                content.push_str(&x);
            }
            other => panic!("a text answer sent {other:?}"),
        }
    }
    assert_eq!(content, r.content);
    assert_eq!(thinking, r.thinking);
}

#[tokio::test(start_paused = true)]
async fn consumer_gone_stops_reading_and_releases_the_upstream() {
    let mock = MockUpstream::start(Behaviour::Healthy {
        ttft: Duration::from_millis(10),
        inter_token: Duration::from_millis(30),
        chunks: 50,
        content: "x".repeat(50),
    })
    .await;
    let t = transport(&mock);
    let (sink, rx) = EventSink::channel(1);
    drop(rx);
    let started = Instant::now();
    let e = t.send(&request(true), Some(&sink)).await.unwrap_err();
    assert_eq!(e.class(), FailureClass::Transient);
    assert!(e.message.contains("consumer gone"), "{}", e.message);
    assert!(started.elapsed() < Duration::from_millis(1000));
    assert!(
        eventually(|| mock.in_flight() == 0).await,
        "in flight {}",
        mock.in_flight()
    );
}

#[tokio::test(start_paused = true)]
async fn aborted_attempt_drops_the_upstream_stream() {
    let mock = MockUpstream::start(Behaviour::Healthy {
        ttft: Duration::ZERO,
        inter_token: Duration::from_millis(50),
        chunks: 100,
        content: "y".repeat(100),
    })
    .await;
    let t = Arc::new(transport(&mock));
    let task = {
        let t = t.clone();
        tokio::spawn(async move { t.send(&request(true), None).await })
    };
    assert!(eventually(|| mock.in_flight() == 1).await);
    task.abort();
    assert!(
        eventually(|| mock.in_flight() == 0).await,
        "in flight {}",
        mock.in_flight()
    );
}

// ---------------------------------------------------------------- watchdog over sockets

fn deadlines(s: &mut TransportConfig, ttft: u64, inter: u64, total: u64) {
    s.ttft_timeout = Duration::from_millis(ttft);
    s.inter_token_timeout = Duration::from_millis(inter);
    s.timeout = Duration::from_millis(total);
}

#[tokio::test(start_paused = true)]
async fn watchdog_ttft_inter_token_and_total() {
    let mock = MockUpstream::start(Behaviour::BlackHole).await;
    let t = transport_with(&mock, |s| deadlines(s, 150, 100, 2000));
    let started = Instant::now();
    let e = call(&t, true).await.unwrap_err();
    assert_eq!(e.source_reason(), SourceReason::Timeout);
    assert!(e.message.contains("ttft"), "{}", e.message);
    assert!(started.elapsed() < Duration::from_millis(1000));

    mock.set_behaviour(Behaviour::Healthy {
        ttft: Duration::ZERO,
        inter_token: Duration::from_millis(400),
        chunks: 3,
        content: "abc".into(),
    });
    let e = call(&t, true).await.unwrap_err();
    assert_eq!(e.class(), FailureClass::Transient);
    assert!(e.message.contains("inter_token"), "{}", e.message);

    mock.set_behaviour(Behaviour::Healthy {
        ttft: Duration::ZERO,
        inter_token: Duration::from_millis(40),
        chunks: 50,
        content: "z".repeat(50),
    });
    let t = transport_with(&mock, |s| deadlines(s, 150, 100, 400));
    let e = call(&t, true).await.unwrap_err();
    assert!(e.message.contains("total"), "{}", e.message);
    assert_eq!(e.source_reason(), SourceReason::Timeout);
}

#[tokio::test(start_paused = true)]
async fn ttft_and_largest_gap_are_measured() {
    let mock = MockUpstream::start(Behaviour::Healthy {
        ttft: Duration::from_millis(20),
        inter_token: Duration::from_millis(60),
        chunks: 4,
        content: "abcd".into(),
    })
    .await;
    let t = transport_with(&mock, |s| deadlines(s, 500, 300, 2000));
    let r = call(&t, true).await.unwrap();
    assert_eq!(r.content, "abcd");
    let ttft = r.ttft_ms.unwrap();
    assert!((15.0..300.0).contains(&ttft), "ttft {ttft}");
    let gap = r.max_inter_token_ms.unwrap();
    assert!((50.0..300.0).contains(&gap), "gap {gap}");
}

#[tokio::test(start_paused = true)]
async fn reasoning_deltas_count_as_tokens_for_the_watchdog() {
    // 3 reasoning then 4 content deltas, 60 ms apart: content starts ~200 ms in, past a 100 ms
    // TTFT budget — only reasoning counting as the first token (and refreshing the 90 ms
    // inter-token budget) lets this succeed.
    let mock = MockUpstream::start(Behaviour::ReasoningPaced {
        ttft: Duration::from_millis(20),
        inter_token: Duration::from_millis(60),
    })
    .await;
    let t = transport_with(&mock, |s| deadlines(s, 100, 90, 3000));
    let r = call(&t, true).await.unwrap();
    assert_eq!(r.thinking, MOCK_THINKING);
    assert_eq!(r.content, MOCK_CONTENT);
    assert!(r.ttft_ms.unwrap() < 100.0, "{:?}", r.ttft_ms);
}

#[tokio::test(start_paused = true)]
async fn non_stream_is_bounded_by_the_total_deadline_only() {
    let mock = MockUpstream::start(Behaviour::Slow {
        delay: Duration::from_millis(300),
    })
    .await;
    // TTFT shorter than the delay does not apply to a non-streaming answer.
    let t = transport_with(&mock, |s| deadlines(s, 100, 50, 1000));
    let r = call(&t, false).await.unwrap();
    assert_eq!(r.content, MOCK_CONTENT);
    let t = transport_with(&mock, |s| deadlines(s, 100, 50, 200));
    let e = call(&t, false).await.unwrap_err();
    assert!(e.message.contains("total"), "{}", e.message);
}

// ---------------------------------------------------------------- STREAM=false sources

#[tokio::test(start_paused = true)]
async fn a_non_streaming_source_never_streams_and_reads_usage_and_reasoning_from_the_body() {
    let mock = MockUpstream::start(Behaviour::UsageDetails).await;
    let t = transport_with(&mock, |s| s.stream = false);
    // The call asks for a stream; the source refuses it.
    let (sink, mut rx) = EventSink::channel(64);
    let r = t.send(&request(true), Some(&sink)).await.unwrap();
    drop(sink);
    let sent = mock.last_request().unwrap().body;
    assert_eq!(sent["stream"], false);
    assert!(sent.get("stream_options").is_none());
    assert_eq!(r.content, MOCK_CONTENT);
    assert_eq!(r.usage_source, UsageSource::Measured);
    assert_eq!(r.cached_prompt_tokens, Some(MOCK_CACHED_TOKENS));
    assert_eq!(r.reasoning_tokens, Some(MOCK_REASONING_TOKENS));
    assert_eq!(r.ttft_ms, None);
    let mut streamed = String::new();
    while let Some(d) = rx.recv().await {
        if let ChatDelta::Content(c) = d {
            streamed.push_str(&c);
        }
    }
    assert_eq!(streamed, MOCK_CONTENT, "the consumer still gets the answer");

    // Reasoning from the JSON body, as from SSE deltas.
    mock.set_behaviour(Behaviour::Reasoning);
    let r = call(&t, true).await.unwrap();
    assert_eq!(r.thinking, MOCK_THINKING);
    assert_eq!(r.content, MOCK_CONTENT);
    assert_eq!(mock.last_request().unwrap().body["stream"], false);
}

#[tokio::test(start_paused = true)]
async fn a_non_streaming_source_is_bounded_by_the_total_deadline() {
    let mock = MockUpstream::start(Behaviour::Healthy {
        ttft: Duration::from_millis(1500),
        inter_token: Duration::ZERO,
        chunks: 1,
        content: "late".into(),
    })
    .await;
    let t = transport_with(&mock, |s| {
        s.stream = false;
        deadlines(s, 50, 50, 400);
    });
    let started = Instant::now();
    let e = call(&t, true).await.unwrap_err();
    assert_eq!(e.class(), FailureClass::Transient);
    assert_eq!(e.source_reason(), SourceReason::Timeout);
    assert_eq!(e.message, "watchdog: total deadline of 0.400s exceeded");
    assert!(started.elapsed() < Duration::from_millis(1400));
}

// ---------------------------------------------------------------- TRUST_ENV

/// Proxy variables the child process starts without (only `HTTP_PROXY` is then set).
const PROXY_VARS: [&str; 6] = [
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
];

/// Set only in the child process: the target its two calls go to.
const CHILD_TARGET: &str = "PGW_TEST_TARGET_URL";

// Real time, in both processes: the child calls this process's servers, and a paused clock jumps
// to the transport's timeout while another process answers.
#[tokio::test]
async fn trust_env_false_bypasses_the_proxy_env() {
    // The child: this same test, run again by the parent below with `HTTP_PROXY` set. It makes one
    // call with `trust_env = false`, then one with `true`; the parent checks where they went.
    if let Ok(base) = std::env::var(CHILD_TARGET) {
        let with = |trust_env: bool| {
            let mut s = config(&base);
            s.trust_env = trust_env;
            ChatTransport::new(s, profile("openai"))
        };
        call(&with(false), true).await.unwrap();
        call(&with(true), true).await.unwrap();
        return;
    }
    // The "proxy" is a second mock: a proxied request reaches it in absolute form and is
    // routed by path, so its counter shows whether the proxy was used. Proxy variables are
    // process-wide (and setting them is unsafe in a threaded process), so the two calls run in a
    // child process of this test binary that starts with `HTTP_PROXY` set; no other test sees it.
    let target = MockUpstream::start(Behaviour::healthy()).await;
    let proxy = MockUpstream::start(Behaviour::healthy()).await;
    let mut child = tokio::process::Command::new(std::env::current_exe().unwrap());
    child.args([
        "trust_env_false_bypasses_the_proxy_env",
        "--exact",
        "--test-threads=1",
    ]);
    for k in PROXY_VARS {
        child.env_remove(k);
    }
    child
        .env("HTTP_PROXY", format!("http://{}", proxy.addr()))
        .env(CHILD_TARGET, target.base_url());
    let out = child.output().await.unwrap();
    assert!(
        out.status.success(),
        "child failed: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    // One direct call reached the target, one proxied call went through the proxy. A child that
    // ran no test would leave both at zero.
    assert_eq!((target.counts().chat, proxy.counts().chat), (1, 1));
}

// ---------------------------------------------------------------- the mock's own contract

#[tokio::test(start_paused = true)]
async fn scripted_behaviours_run_in_order_then_repeat_the_last() {
    let mock = MockUpstream::start(Behaviour::Scripted(vec![
        Behaviour::ServerError(502),
        Behaviour::RateLimited {
            retry_after_s: Some(1),
        },
        Behaviour::healthy_with("third"),
    ]))
    .await;
    let t = transport(&mock);
    assert_eq!(call(&t, true).await.unwrap_err().status, Some(502));
    assert!(call(&t, true).await.unwrap_err().is_rate_limited());
    assert_eq!(call(&t, true).await.unwrap().content, "third");
    assert_eq!(call(&t, false).await.unwrap().content, "third");
    let c = mock.counts();
    assert_eq!((c.total, c.chat), (4, 4));
    assert_eq!(
        (c.of("server_error"), c.of("rate_limited"), c.of("healthy")),
        (1, 1, 2)
    );
}

#[tokio::test(start_paused = true)]
async fn scripted_content_answers_each_request_with_the_next_string() {
    let mock = MockUpstream::start(Behaviour::ScriptedContent(vec![
        "{\"a\":".into(),
        "{\"a\":1}".into(),
    ]))
    .await;
    let t = transport(&mock);
    assert_eq!(call(&t, true).await.unwrap().content, "{\"a\":");
    assert_eq!(call(&t, true).await.unwrap().content, "{\"a\":1}");
    assert_eq!(call(&t, true).await.unwrap().content, "{\"a\":1}");
    mock.set_behaviour(Behaviour::ScriptedContent(vec!["again".into()]));
    assert_eq!(call(&t, true).await.unwrap().content, "again");
}

#[tokio::test(start_paused = true)]
async fn mix_is_seeded_and_roughly_at_its_rate() {
    async fn outcomes(seed: u64) -> (Vec<bool>, u64) {
        let mock = MockUpstream::start(Behaviour::Mix {
            failure_rate: 0.3,
            failure: Box::new(Behaviour::ServerError(503)),
            healthy: Box::new(Behaviour::healthy()),
            seed,
        })
        .await;
        let t = transport(&mock);
        let mut out = Vec::new();
        for _ in 0..200 {
            out.push(call(&t, false).await.is_ok());
        }
        (out, mock.counts().of("server_error"))
    }
    let (a, failures) = outcomes(42).await;
    let (b, _) = outcomes(42).await;
    let (c, _) = outcomes(43).await;
    assert_eq!(a, b, "same seed, same sequence");
    assert_ne!(a, c, "different seed, different sequence");
    assert_eq!(failures as usize, a.iter().filter(|ok| !**ok).count());
    assert!(
        (30..90).contains(&failures),
        "failures {failures} of 200 at rate 0.3"
    );
}

#[tokio::test(start_paused = true)]
async fn connections_are_counted_and_models_served() {
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    assert_eq!(mock.open_connections(), 0);
    let client = reqwest::Client::new();
    let models: Value = client
        .get(format!("{}/models", mock.base_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], "test-model");
    assert_eq!(mock.open_connections(), 1, "pooled keep-alive connection");
    drop(client);
    assert!(eventually(|| mock.open_connections() == 0).await);
    assert_eq!(mock.counts().models, 1);
    assert_eq!(mock.counts().chat, 0);
}

#[tokio::test(start_paused = true)]
async fn shutdown_ends_a_black_hole_promptly() {
    let mock = MockUpstream::start(Behaviour::BlackHole).await;
    let t = Arc::new(transport(&mock));
    let pending = {
        let t = t.clone();
        tokio::spawn(async move { t.send(&request(true), None).await })
    };
    assert!(eventually(|| mock.in_flight() == 1).await);
    let started = Instant::now();
    mock.shutdown().await;
    let res = tokio::time::timeout(Duration::from_secs(3), pending)
        .await
        .expect("the attempt ends once the mock shuts down")
        .unwrap();
    assert!(res.is_err());
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn aborted_attempt_on_a_black_hole_is_seen_by_the_mock() {
    let mock = MockUpstream::start(Behaviour::BlackHole).await;
    let t = Arc::new(transport(&mock));
    let task = {
        let t = t.clone();
        tokio::spawn(async move { t.send(&request(true), None).await })
    };
    assert!(eventually(|| mock.in_flight() == 1 && mock.open_connections() == 1).await);
    task.abort();
    // The client closes the connection; the mock's handler is dropped with it.
    assert!(
        eventually(|| mock.open_connections() == 0).await,
        "connections {}",
        mock.open_connections()
    );
    assert!(
        eventually(|| mock.in_flight() == 0).await,
        "in flight {}",
        mock.in_flight()
    );
}
