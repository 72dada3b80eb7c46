//! The chat transport on a Gemini source (issue #45) against the mock Gemini API
//! (`testkit::mock_gemini`): text, streaming, the tool loop with thought signatures, thinking,
//! canonical usage, every error class and finish reason, structured output.

use std::sync::Arc;
use std::time::Duration;

use polygateway::config::{MissingDone, Secret, SourceSettings};
use polygateway::ports::{EventSink, FailureClass, SourceReason, Transport};
use polygateway::provider::{Dialect, ProviderRegistry};
use polygateway::structured::SchemaRequest;
use polygateway::transport::{ChatDelta, ChatTransport, ChatWireRequest, TransportConfig};
use polygateway::{LlmResponse, Message, TransportError, UsageSource};
use polygateway_testkit::mock_gemini::{GeminiFault, MockGemini, MOCK_GEMINI_KEY};
use polygateway_testkit::source_settings;
use serde_json::{json, Value};

fn settings(mock: &MockGemini) -> SourceSettings {
    let mut s = source_settings(&mock.base_url());
    s.name = "gemini_1".into();
    s.provider = "gemini".into();
    s.model = "gemini-2.5-flash".into();
    s.api_key = Secret::new(MOCK_GEMINI_KEY);
    s
}

fn transport_with(mock: &MockGemini, f: impl FnOnce(&mut SourceSettings)) -> ChatTransport {
    let mut s = settings(mock);
    f(&mut s);
    let profile = ProviderRegistry::with_defaults().get("gemini").clone();
    assert_eq!(s.effective_dialect(&profile), Dialect::Gemini);
    ChatTransport::new(TransportConfig::from(&s), profile)
}

fn transport(mock: &MockGemini) -> ChatTransport {
    transport_with(mock, |_| {})
}

async fn call(t: &ChatTransport, req: &ChatWireRequest) -> Result<LlmResponse, TransportError> {
    t.send(req, None).await
}

fn request(messages: Vec<Message>, stream: bool) -> ChatWireRequest {
    let mut r = ChatWireRequest::new(messages);
    r.stream = stream;
    r
}

fn weather_tool() -> Value {
    json!([{"type": "function", "function": {"name": "weather", "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"], "additionalProperties": false}}}])
}

#[tokio::test(start_paused = true)]
async fn text_plain_and_streamed_with_the_key_in_a_header() {
    let mock = MockGemini::start().await;
    let t = transport(&mock);
    assert!(t
        .url()
        .ends_with("/v1beta/models/gemini-2.5-flash:generateContent"));
    let plain = call(&t, &request(vec![Message::user("Hi")], false))
        .await
        .unwrap();
    assert_eq!(plain.content, "Hello from Gemini");
    assert_eq!(plain.finish_reason.as_deref(), Some("stop"));
    assert_eq!(plain.usage_source, UsageSource::Measured);
    assert!(plain.prompt_tokens > 0 && plain.completion_tokens > 0);
    assert_eq!(plain.model_reported.as_deref(), Some("gemini-2.5-flash"));
    assert!(!plain.truncated);

    let (sink, mut rx) = EventSink::channel(64);
    let streamed = t
        .send(&request(vec![Message::user("Hi")], true), Some(&sink))
        .await
        .unwrap();
    drop(sink);
    let mut pieces = Vec::new();
    while let Some(ChatDelta::Content(piece)) = rx.recv().await {
        pieces.push(piece);
    }
    assert_eq!(pieces.concat(), "Hello from Gemini");
    assert!(
        pieces.len() >= 2,
        "the mock streams the text in pieces: {pieces:?}"
    );
    assert_eq!(streamed.content, "Hello from Gemini");
    assert!(streamed.ttft_ms.is_some());

    let requests = mock.requests();
    assert_eq!(requests[0]["action"], "gemini-2.5-flash:generateContent");
    assert_eq!(requests[0]["query"], Value::Null);
    assert_eq!(
        requests[1]["action"],
        "gemini-2.5-flash:streamGenerateContent"
    );
    assert_eq!(requests[1]["query"], "alt=sse");
    for r in &requests {
        assert_eq!(r["api_key_header"], true);
        assert!(
            !r.to_string().contains(MOCK_GEMINI_KEY),
            "key recorded in {r}"
        );
    }
    // The key never shows in the transport's Debug.
    assert!(!format!("{t:?}").contains(MOCK_GEMINI_KEY));
}

#[tokio::test(start_paused = true)]
async fn the_tool_loop_replays_thought_signatures() {
    for stream in [false, true] {
        let mock = MockGemini::start().await;
        mock.script(
            "The weather is",
            None,
            Some(("weather", json!({"city": "Paris"}))),
            None,
        );
        let t = transport(&mock);
        let mut first = request(
            vec![
                Message::system("Be brief."),
                Message::user("Weather in Paris?"),
            ],
            stream,
        );
        first.overlay.insert("tools".into(), weather_tool());
        first.overlay.insert("tool_choice".into(), json!("auto"));
        let answer = call(&t, &first).await.unwrap();
        assert_eq!(answer.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(answer.tool_calls.len(), 1);
        let tool_call = &answer.tool_calls[0];
        assert!(tool_call.id.starts_with("call_"), "{}", tool_call.id);
        assert_eq!(tool_call.function.name, "weather");
        assert_eq!(tool_call.function.arguments, r#"{"city":"Paris"}"#);

        let mut messages = first.messages.as_ref().clone();
        messages.push(answer.to_message());
        messages.push(Message::tool_result(
            tool_call.id.clone(),
            r#"{"temp_c": 18}"#,
        ));
        let mut second = request(messages.clone(), stream);
        second.overlay = first.overlay.clone();
        let done = call(&t, &second).await.unwrap();
        assert_eq!(done.content, r#"The weather is {"temp_c":18}"#);
        assert_eq!(done.finish_reason.as_deref(), Some("stop"));

        let sent = &mock.requests()[1]["body"];
        assert_eq!(sent["systemInstruction"]["parts"][0]["text"], "Be brief.");
        assert_eq!(sent["contents"][1]["role"], "model");
        assert_eq!(
            sent["contents"][1]["parts"][0]["thoughtSignature"],
            "mock-sig-0"
        );
        assert_eq!(
            sent["contents"][2]["parts"][0]["functionResponse"],
            json!({"name": "weather", "response": {"temp_c": 18}})
        );
        assert!(sent["tools"][0]["functionDeclarations"][0]
            .get("parametersJsonSchema")
            .is_some());

        // The same turn without its signature (a call another dialect's source made, or a
        // client that dropped the field): Gemini 3 refuses an unsigned call, so the call goes
        // with the stand-in signature the API documents for calls it did not make.
        let mut stripped = messages;
        stripped[2].tool_calls.as_mut().unwrap()[0].extra.clear();
        let mut third = request(stripped, stream);
        third.overlay = first.overlay.clone();
        let crossed = call(&t, &third).await.unwrap();
        assert_eq!(crossed.finish_reason.as_deref(), Some("stop"));
        assert_eq!(
            mock.requests()[2]["body"]["contents"][1]["parts"][0]["thoughtSignature"],
            "skip_thought_signature_validator"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn thinking_and_usage_land_in_the_canonical_fields() {
    for stream in [false, true] {
        let mock = MockGemini::start().await;
        mock.script("42.", Some("Six times seven."), None, Some(3));
        let t = transport_with(&mock, |s| s.enable_thinking = Some(true));
        let answer = call(&t, &request(vec![Message::user("6*7?")], stream))
            .await
            .unwrap();
        assert_eq!(answer.content, "42.");
        assert_eq!(answer.thinking, "Six times seven.");
        let usage = &mock.requests()[0]["body"]["generationConfig"]["thinkingConfig"];
        assert_eq!(usage["includeThoughts"], true);
        // thoughtsTokenCount = len("Six times seven.")/4 = 4; candidates = len("42.")/4 → 1.
        assert_eq!(answer.reasoning_tokens, Some(4));
        assert_eq!(answer.completion_tokens, 1 + 4);
        assert_eq!(answer.cached_prompt_tokens, Some(3));
        assert!(answer.prompt_tokens >= 3);
        assert_eq!(answer.usage_source, UsageSource::Measured);
    }
    // Thinking switched off: budget 0, nothing asked back.
    let mock = MockGemini::start().await;
    let t = transport_with(&mock, |s| s.enable_thinking = Some(false));
    call(&t, &request(vec![Message::user("hi")], false))
        .await
        .unwrap();
    assert_eq!(
        mock.requests()[0]["body"]["generationConfig"]["thinkingConfig"],
        json!({"thinkingBudget": 0})
    );
}

async fn fault(fault: GeminiFault, stream: bool) -> TransportError {
    let mock = MockGemini::start().await;
    mock.push_fault(fault);
    let t = transport_with(&mock, |s| s.ttft_timeout = Duration::from_millis(300));
    call(&t, &request(vec![Message::user("hi")], stream))
        .await
        .unwrap_err()
}

#[tokio::test(start_paused = true)]
async fn every_error_class() {
    for stream in [false, true] {
        let e = fault(GeminiFault::RateLimited { retry_delay_s: 12 }, stream).await;
        assert_eq!(
            (e.class, e.reason),
            (FailureClass::Transient, SourceReason::RateLimited)
        );
        assert!(e.rate_limited);
        assert_eq!(e.retry_after, Some(Duration::from_secs(12)));

        for f in [GeminiFault::Unavailable, GeminiFault::Internal] {
            let e = fault(f, stream).await;
            assert_eq!(
                (e.class, e.reason),
                (FailureClass::Transient, SourceReason::ServerError)
            );
        }
        let e = fault(GeminiFault::InvalidArgument, stream).await;
        assert_eq!(
            (e.class, e.status),
            (FailureClass::RequestRejected, Some(400))
        );
        let e = fault(GeminiFault::PermissionDenied, stream).await;
        assert_eq!((e.class, e.status), (FailureClass::SourceDead, Some(403)));
        let e = fault(GeminiFault::PromptBlocked, stream).await;
        assert_eq!(e.class, FailureClass::RequestRejected);
    }
    // A slow first chunk: the first-token deadline of a stream; a whole answer has only the
    // total deadline.
    let e = fault(GeminiFault::SlowFirstChunk(Duration::from_secs(2)), true).await;
    assert_eq!(
        (e.class, e.reason),
        (FailureClass::Transient, SourceReason::Timeout)
    );
    let mock = MockGemini::start().await;
    mock.push_fault(GeminiFault::SlowFirstChunk(Duration::from_secs(2)));
    let t = transport_with(&mock, |s| s.timeout = Duration::from_millis(400));
    let e = call(&t, &request(vec![Message::user("hi")], false))
        .await
        .unwrap_err();
    assert_eq!(
        (e.class, e.reason),
        (FailureClass::Transient, SourceReason::Timeout)
    );
    // A wrong key: Gemini says 400 API_KEY_INVALID; the source is dead, and the key is nowhere.
    let mock = MockGemini::start().await;
    let t = transport_with(&mock, |s| s.api_key = Secret::new("AIza-wrong-key"));
    let e = call(&t, &request(vec![Message::user("hi")], true))
        .await
        .unwrap_err();
    assert_eq!(e.class, FailureClass::SourceDead);
    assert!(!format!("{e:?}").contains("AIza-wrong-key"));
}

#[tokio::test(start_paused = true)]
async fn truncated_streams_retry_or_salvage() {
    let e = fault(GeminiFault::AbruptClose, true).await;
    assert_eq!(e.class, FailureClass::Transient);
    assert!(e.message.contains("connection closed"), "{}", e.message);
    // A whole answer cut halfway: its body read fails, Transient.
    let e = fault(GeminiFault::AbruptClose, false).await;
    assert_eq!(e.class, FailureClass::Transient);
    let e = fault(GeminiFault::NoFinishReason, true).await;
    assert_eq!(e.class, FailureClass::Transient);
    assert!(e.message.contains("without finishReason"), "{}", e.message);

    let mock = MockGemini::start().await;
    mock.push_fault(GeminiFault::NoFinishReason);
    let t = transport_with(&mock, |s| s.missing_done = MissingDone::Salvage);
    let salvaged = call(&t, &request(vec![Message::user("hi")], true))
        .await
        .unwrap();
    assert!(salvaged.truncated);
    assert_eq!(salvaged.content, "Hello from Gemini");
    assert_eq!(salvaged.usage_source, UsageSource::Estimated);
}

#[tokio::test(start_paused = true)]
async fn finish_reasons_are_judged() {
    for stream in [false, true] {
        for (reason, class) in [
            ("SAFETY", FailureClass::RequestRejected),
            ("RECITATION", FailureClass::RequestRejected),
            ("PROHIBITED_CONTENT", FailureClass::RequestRejected),
            ("MALFORMED_FUNCTION_CALL", FailureClass::Transient),
            ("OTHER", FailureClass::Transient),
        ] {
            let e = fault(GeminiFault::Finish(reason), stream).await;
            assert_eq!(e.class, class, "{reason}");
            assert!(e.message.contains(reason), "{}", e.message);
        }
        let mock = MockGemini::start().await;
        mock.push_fault(GeminiFault::Finish("MAX_TOKENS"));
        let answer = call(
            &transport(&mock),
            &request(vec![Message::user("hi")], stream),
        )
        .await
        .unwrap();
        assert_eq!(answer.finish_reason.as_deref(), Some("length"));
    }
}

#[tokio::test(start_paused = true)]
async fn structured_output_modes() {
    let mock = MockGemini::start().await;
    let t = transport(&mock);
    let mut req = request(vec![Message::user("A city as JSON")], false);
    req.schema = Some(Arc::new(SchemaRequest {
        name: "city".into(),
        schema: json!({"type": "object", "properties": {"name": {"type": "string"}},
                       "required": ["name"], "additionalProperties": false}),
    }));
    call(&t, &req).await.unwrap();
    let config = &mock.requests()[0]["body"]["generationConfig"];
    assert_eq!(config["responseMimeType"], "application/json");
    assert_eq!(config["responseJsonSchema"]["required"], json!(["name"]));

    // A response_format set by the caller in json_object mode: the MIME type only.
    let mut req = request(vec![Message::user("JSON please")], false);
    req.response_format = Some(json!({"type": "json_object"}));
    call(&t, &req).await.unwrap();
    let config = &mock.requests()[1]["body"]["generationConfig"];
    assert_eq!(config, &json!({"responseMimeType": "application/json"}));
}
