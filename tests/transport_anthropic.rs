//! Native Anthropic sources (issue #45) against a mock of the Messages API written from
//! Anthropic's API reference (`testkit::mock_anthropic`), which refuses what the real API
//! refuses: text and streaming, a tool loop written once (`LlmResponse::to_message`), thinking
//! with signatures sent back, cache breakpoints and cache usage priced, every error class
//! through the transport and the governed path, and the hostile streams (an `error` event after
//! content, a cut mid-block, no `message_stop`, a slow first event).

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use polygateway::config::Settings;
use polygateway::ports::{Classify, FailureClass, SourceReason, Transport};
use polygateway::provider::ProviderRegistry;
use polygateway::transport::{ChatTransport, ChatWireRequest, TransportConfig};
use polygateway::{CallOptions, ChatEvent, Gateway, GatewayError, Message, ThinkingBlock, Tool};
use polygateway_testkit::mock_anthropic::{AnthropicFault, MockAnthropic, MOCK_ANTHROPIC_KEY};
use polygateway_testkit::{mock_env, source_settings};
use serde_json::{json, Value};

/// A scope `LLM` of Anthropic sources, one per mock, with `extra` keys.
fn env(mocks: &[&MockAnthropic], extra: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut env = mock_env();
    for (i, mock) in mocks.iter().enumerate() {
        let source = format!("LLM__ANTHROPIC__{}", i + 1);
        env.insert(format!("{source}__BASE_URL"), mock.base_url());
        env.insert(format!("{source}__API_KEY"), MOCK_ANTHROPIC_KEY.into());
        env.insert(format!("{source}__MODEL"), "claude-mock".into());
        env.insert(format!("{source}__TIMEOUT_S"), "10".into());
    }
    env.insert("LLM__RETRY__BACKOFF_BASE_S".into(), "0.01".into());
    env.insert("LLM__RETRY__BACKOFF_MAX_S".into(), "0.05".into());
    for (k, v) in extra {
        env.insert((*k).into(), (*v).into());
    }
    env
}

async fn gateway(env: BTreeMap<String, String>) -> Gateway {
    let settings = Settings::from_map(&env).expect("settings");
    Gateway::from_settings(settings, "LLM")
        .await
        .expect("gateway")
}

fn weather_tool() -> Tool {
    Tool::function(
        "weather",
        "The weather in a city.",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    )
}

#[tokio::test(start_paused = true)]
async fn text_streamed_and_not_with_the_apis_headers_and_required_fields() {
    let mock = MockAnthropic::start().await;
    let gw = gateway(env(&[&mock], &[])).await;
    let answer = gw
        .chat(vec![Message::system("Be brief."), Message::user("Hi")])
        .await
        .unwrap();
    assert_eq!(answer.content, "Hello from Claude");
    assert_eq!(
        (answer.provider.as_str(), answer.source_name.as_str()),
        ("anthropic", "anthropic_1")
    );
    assert_eq!(answer.finish_reason.as_deref(), Some("stop"));
    assert_eq!(answer.model_reported.as_deref(), Some("claude-mock"));
    assert!(answer.prompt_tokens > 0 && answer.completion_tokens > 0);
    let sent = mock.requests().pop().unwrap();
    assert_eq!(sent.api_key.as_deref(), Some(MOCK_ANTHROPIC_KEY));
    assert_eq!(sent.version.as_deref(), Some("2023-06-01"));
    assert_eq!(sent.body["max_tokens"], 4096);
    assert_eq!(
        sent.body["system"],
        json!([{"type": "text", "text": "Be brief."}])
    );
    assert_eq!(sent.body["stream"], true);

    // The deltas a consumer sees add up to the answer.
    let mut stream = gw
        .chat_stream(vec![Message::user("Hi")], CallOptions::new())
        .unwrap();
    let mut text = String::new();
    let mut last = None;
    while let Some(event) = stream.next().await {
        match event.unwrap() {
            ChatEvent::Content(piece) => text.push_str(&piece),
            ChatEvent::Done(answer) => last = Some(answer),
            _ => {}
        }
    }
    assert_eq!(text, "Hello from Claude");
    assert_eq!(last.unwrap().content, text);

    // Not streamed: the whole message.
    let plain = gw
        .chat_with(vec![Message::user("Hi")], CallOptions::new().stream(false))
        .await
        .unwrap();
    assert_eq!(plain.content, "Hello from Claude");
    assert!(mock.requests().pop().unwrap().body.get("stream").is_none());
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_tool_loop_written_once_runs_with_thinking_signatures_sent_back() {
    let mock = MockAnthropic::start().await;
    let gw = gateway(env(
        &[&mock],
        &[("LLM__ANTHROPIC__1__ENABLE_THINKING", "true")],
    ))
    .await;
    let options = || CallOptions::new().tools([weather_tool()]);
    let mut conversation = vec![Message::user("Paris")];
    let first = gw.chat_with(conversation.clone(), options()).await.unwrap();
    assert_eq!(first.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(first.tool_calls.len(), 1);
    assert_eq!(first.tool_calls[0].function.name, "weather");
    assert_eq!(
        first.tool_calls[0].function.arguments,
        r#"{"city":"Paris"}"#
    );
    let [ThinkingBlock::Thinking {
        thinking,
        signature,
    }] = first.thinking_blocks.as_slice()
    else {
        panic!("one signed thinking block: {:?}", first.thinking_blocks);
    };
    assert_eq!(
        signature.as_deref(),
        Some(MockAnthropic::signature(thinking).as_str())
    );
    assert_eq!(first.thinking, *thinking);
    // The loop: the answer's turn, then the tool's result.
    conversation.push(first.to_message());
    conversation.push(Message::tool_result(&first.tool_calls[0].id, "18 C"));
    let second = gw.chat_with(conversation.clone(), options()).await.unwrap();
    assert_eq!(second.content, "tool said: 18 C");
    // What the mock received: the signed thinking first in the assistant turn, the tool result
    // in the next user turn (it refuses a changed signature, checked below).
    let sent = mock.requests().pop().unwrap().body;
    assert_eq!(
        sent["messages"][1]["content"][0]["signature"],
        json!(signature)
    );
    assert_eq!(sent["messages"][2]["content"][0]["type"], "tool_result");

    // A thinking block changed on the way back is refused by the API: the caller's fault.
    let mut tampered = conversation.clone();
    tampered[1].thinking_blocks = vec![ThinkingBlock::Thinking {
        thinking: "something else".into(),
        signature: signature.clone(),
    }];
    let err = gw.chat_with(tampered, options()).await.unwrap_err();
    assert!(
        matches!(err, GatewayError::RequestRejected { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("signature"), "{err}");
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn cache_breakpoints_reach_the_api_and_cache_usage_is_priced() {
    let mock = MockAnthropic::start().await;
    let dir = tempfile::tempdir().unwrap();
    let prices = dir.path().join("prices.json");
    std::fs::write(
        &prices,
        r#"{"claude-mock": {"input_per_1m": 3.0, "output_per_1m": 15.0, "cached_input_per_1m": 0.3,
            "cache_write_5m_per_1m": 3.75, "cache_write_1h_per_1m": 6.0}}"#,
    )
    .unwrap();
    let db = dir.path().join("telemetry.sqlite");
    let gw = gateway(env(
        &[&mock],
        &[
            ("PGW_PRICING_PATH", prices.to_str().unwrap()),
            ("PGW_TELEMETRY_BACKEND", "sqlite"),
            ("PGW_TELEMETRY_SQLITE_PATH", db.to_str().unwrap()),
        ],
    ))
    .await;
    let long = "The rules of the game. ".repeat(200);
    let system: Message = serde_json::from_value(json!({
        "role": "system",
        "content": [{"type": "text", "text": long, "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    }))
    .unwrap();
    let ask = |q: &str| vec![system.clone(), Message::user(q)];
    let first = gw.chat(ask("First question")).await.unwrap();
    let sent = mock.requests().pop().unwrap().body;
    assert_eq!(
        sent["system"][0]["cache_control"],
        json!({"type": "ephemeral", "ttl": "1h"}),
        "the breakpoint reaches the API as written"
    );
    let written = first.cache_write_1h_tokens.expect("a 1 h cache write");
    assert!(written > 100, "{first:?}");
    assert_eq!(first.cache_write_5m_tokens, Some(0));
    assert_eq!(first.cached_prompt_tokens, Some(0));
    // Every prompt token counted: the plain rest plus the written prefix.
    assert!(first.prompt_tokens > written);
    let usage = first.usage();
    let expected = ((usage.prompt_tokens - written) as f64 * 3.0
        + written as f64 * 6.0
        + usage.completion_tokens as f64 * 15.0)
        / 1e6;
    assert!((first.cost.unwrap() - expected).abs() < 1e-12, "{first:?}");

    let second = gw.chat(ask("Second question")).await.unwrap();
    assert_eq!(second.cached_prompt_tokens, Some(written), "{second:?}");
    assert_eq!(second.cache_write_1h_tokens, Some(0));
    let expected = ((second.prompt_tokens - written) as f64 * 3.0
        + written as f64 * 0.3
        + second.completion_tokens as f64 * 15.0)
        / 1e6;
    assert!(
        (second.cost.unwrap() - expected).abs() < 1e-12,
        "{second:?}"
    );
    gw.shutdown().await;

    // The rows: the cache columns and the cost each answer reported.
    type Row = (i64, Option<i64>, Option<i64>, Option<i64>, Option<i64>, f64);
    let rows: Vec<Row> = rusqlite::Connection::open(&db)
        .unwrap()
        .prepare(
            "SELECT prompt_tokens, cached_prompt_tokens, cache_read_tokens, cache_write_tokens, \
             cache_write_1h_tokens, cost FROM llm_calls ORDER BY rowid",
        )
        .unwrap()
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let w = written as i64;
    assert_eq!(rows.len(), 2, "{rows:?}");
    let (p1, p2) = (first.prompt_tokens as i64, second.prompt_tokens as i64);
    assert_eq!(
        rows[0],
        (p1, Some(0), Some(0), Some(w), Some(w), first.cost.unwrap())
    );
    assert_eq!(
        rows[1],
        (p2, Some(w), Some(w), Some(0), Some(0), second.cost.unwrap())
    );
}

#[tokio::test(start_paused = true)]
async fn a_typed_call_answers_through_structured_outputs_or_a_forced_tool() {
    #[derive(serde::Deserialize, schemars::JsonSchema, Debug)]
    struct City {
        name: String,
        population: u64,
    }
    // A model with structured outputs: the schema goes as `output_config.format`, the answer's
    // text is the JSON, thinking may stay on.
    let mock = MockAnthropic::start().await;
    let gw = gateway(env(
        &[&mock],
        &[("LLM__ANTHROPIC__1__ENABLE_THINKING", "true")],
    ))
    .await;
    let (answer, city): (_, City) = gw
        .chat_structured(vec![Message::user("Lyon")], CallOptions::new())
        .await
        .unwrap();
    assert_eq!((city.name.as_str(), city.population), ("Lyon", 42));
    assert!(answer.tool_calls.is_empty());
    let sent = mock.requests().pop().unwrap().body;
    assert_eq!(sent["output_config"]["format"]["type"], "json_schema");
    assert!(sent.get("tool_choice").is_none());
    assert_eq!(mock.requests().len(), 1, "one request, no step down");
    gw.shutdown().await;

    // A model without them refuses; the source steps down to a forced tool and keeps it.
    let old = MockAnthropic::start().await;
    let mut keys = env(&[&old], &[]);
    keys.insert(
        "LLM__ANTHROPIC__1__MODEL".into(),
        "claude-3-haiku-mock".into(),
    );
    let gw = gateway(keys).await;
    for _ in 0..2 {
        let (answer, city): (_, City) = gw
            .chat_structured(vec![Message::user("Lyon")], CallOptions::new())
            .await
            .unwrap();
        assert!(
            answer.tool_calls.is_empty(),
            "the forced tool is the answer, not a call"
        );
        assert_eq!((city.name.as_str(), city.population), ("Lyon", 42));
    }
    let sent: Vec<Value> = old.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(sent.len(), 3, "one refusal, then two forced-tool answers");
    assert!(sent[0].get("output_config").is_some());
    for body in &sent[1..] {
        assert_eq!(body["tool_choice"]["type"], "tool");
        assert_eq!(body["tools"][0]["name"], body["tool_choice"]["name"]);
        assert!(body.get("output_config").is_none());
    }
    gw.shutdown().await;
}

/// One transport attempt against a mock answering with `fault`.
async fn attempt(
    fault: AnthropicFault,
    stream: bool,
) -> Result<polygateway::LlmResponse, polygateway::TransportError> {
    let mock = MockAnthropic::start().await;
    mock.set_fault(fault);
    let mut settings = source_settings(&mock.base_url());
    settings.provider = "anthropic".into();
    settings.name = "anthropic_1".into();
    settings.api_key = polygateway::config::Secret::new(MOCK_ANTHROPIC_KEY);
    settings.ttft_timeout = Duration::from_millis(300);
    let transport = ChatTransport::new(
        TransportConfig::from(&settings),
        ProviderRegistry::with_defaults().get("anthropic").clone(),
    );
    let mut request = ChatWireRequest::new(vec![Message::user("Hi")]);
    request.stream = stream;
    transport.send(&request, None).await
}

#[tokio::test(start_paused = true)]
async fn every_error_class_is_read_from_what_arrived() {
    let class = |r: &Result<_, polygateway::TransportError>| {
        let e = r.as_ref().expect_err("an error");
        (e.class(), e.source_reason())
    };
    for stream in [true, false] {
        let r = attempt(AnthropicFault::RateLimited(7), stream).await;
        assert_eq!(
            class(&r),
            (FailureClass::Transient, SourceReason::RateLimited)
        );
        assert_eq!(r.unwrap_err().retry_after, Some(Duration::from_secs(7)));
        let r = attempt(AnthropicFault::Overloaded, stream).await;
        assert_eq!(
            class(&r),
            (FailureClass::Transient, SourceReason::ServerError),
            "529"
        );
        let r = attempt(AnthropicFault::ApiError, stream).await;
        assert_eq!(
            class(&r),
            (FailureClass::Transient, SourceReason::ServerError),
            "500"
        );
        let r = attempt(AnthropicFault::InvalidRequest, stream).await;
        assert_eq!(class(&r).0, FailureClass::RequestRejected, "400");
        for dead in [AnthropicFault::Unauthorized, AnthropicFault::Forbidden] {
            let r = attempt(dead.clone(), stream).await;
            assert_eq!(
                class(&r),
                (FailureClass::SourceDead, SourceReason::SourceDead),
                "{dead:?}"
            );
        }
        // The first-token deadline (300 ms here) guards a stream; a whole answer has only
        // the total deadline, which 2 s does not reach.
        let r = attempt(
            AnthropicFault::SlowFirstEvent(Duration::from_secs(2)),
            stream,
        )
        .await;
        if stream {
            assert_eq!(
                class(&r),
                (FailureClass::Transient, SourceReason::Timeout),
                "a stalled first event"
            );
        } else {
            assert_eq!(r.unwrap().content, "Hello from Claude");
        }
    }
    // The hostile streams: cut after content is a truncated stream, retried elsewhere.
    for cut in [
        AnthropicFault::ErrorEventAfterContent,
        AnthropicFault::CloseMidBlock,
        AnthropicFault::NoMessageStop,
    ] {
        let r = attempt(cut.clone(), true).await;
        assert_eq!(class(&r).0, FailureClass::Transient, "{cut:?}");
        let message = r.unwrap_err().message;
        assert!(message.contains("truncated stream"), "{cut:?}: {message}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_cut_stream_is_salvaged_when_the_source_says_so() {
    let mock = MockAnthropic::start().await;
    mock.set_fault(AnthropicFault::ErrorEventAfterContent);
    let gw = gateway(env(
        &[&mock],
        &[("LLM__ANTHROPIC__1__MISSING_DONE", "salvage")],
    ))
    .await;
    let answer = gw.chat(vec![Message::user("Hi")]).await.unwrap();
    assert!(answer.truncated);
    // The mock cut its text in half: what had arrived is the answer.
    assert_eq!(answer.content, "Hello fr");
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_governed_path_switches_away_from_an_overloaded_source_and_returns_a_refusal() {
    let busy = MockAnthropic::start().await;
    busy.set_fault(AnthropicFault::Overloaded);
    let healthy = MockAnthropic::start().await;
    let gw = gateway(env(&[&busy, &healthy], &[("LLM__SELECTOR", "round_robin")])).await;
    for _ in 0..4 {
        let answer = gw.chat(vec![Message::user("Hi")]).await.unwrap();
        assert_eq!(answer.source_name, "anthropic_2");
    }
    assert!(
        !busy.requests().is_empty(),
        "the overloaded source was tried"
    );
    // 400: the caller's fault, returned at once, not retried.
    healthy.set_fault(AnthropicFault::InvalidRequest);
    let before = healthy.requests().len() + busy.requests().len();
    let err = gw.chat(vec![Message::user("Hi")]).await.unwrap_err();
    assert!(
        matches!(err, GatewayError::RequestRejected { .. }),
        "{err:?}"
    );
    assert!(healthy.requests().len() + busy.requests().len() - before <= 2);
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_dead_key_is_found_and_the_rate_limit_headers_reach_the_pacer() {
    let dead = MockAnthropic::start().await;
    dead.set_fault(AnthropicFault::Unauthorized);
    let healthy = MockAnthropic::start().await;
    healthy.set_rate_limit_headers(50, 1);
    let gw = gateway(env(&[&dead, &healthy], &[("LLM__SELECTOR", "round_robin")])).await;
    for _ in 0..3 {
        assert_eq!(
            gw.chat(vec![Message::user("Hi")])
                .await
                .unwrap()
                .source_name,
            "anthropic_2"
        );
    }
    // The dead key was force-opened after its one 401: no second request.
    assert_eq!(dead.requests().len(), 1);
    let sources = gw.sources("LLM").await.unwrap();
    let healthy_source = sources.iter().find(|s| s.name == "anthropic_2").unwrap();
    // 1 of 50 requests left: the pacer read the headers as a sign of strain.
    assert_eq!(
        healthy_source.pacer_signal.as_str(),
        "quota_low",
        "{healthy_source:?}"
    );
    gw.shutdown().await;
}

#[test]
fn anthropic_request_shapes_survive_json() {
    // The canonical answer turn carries what the next Anthropic request needs.
    let mut answer = polygateway::LlmResponse::new("");
    answer.thinking_blocks = vec![ThinkingBlock::Redacted {
        data: "opaque".into(),
    }];
    let turn = answer.to_message();
    let json: Value = serde_json::to_value(&turn).unwrap();
    assert_eq!(
        json["thinking_blocks"][0],
        json!({"type": "redacted_thinking", "data": "opaque"})
    );
}
