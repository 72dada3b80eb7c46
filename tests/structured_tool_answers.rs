//! A structured call (json mode, a typed call, a run-time schema) answered with tool calls or a
//! refusal: a valid answer of another kind, returned as is — no repair, no re-ask, nothing
//! counted against the source — and a cache hit returns the same (docs/behaviour.md §9.2). And
//! the provider quirks of the registry on the requests a source receives (§7.2).

mod common;

use std::time::Duration;

use polygateway::structured::SchemaRequest;
use polygateway::{CallOptions, Gateway, GatewayError, Message, Structured, Tool, ToolCall};
use polygateway_testkit::{Behaviour, MockUpstream};
use serde_json::{json, Value};
use tokio::time::Instant;

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)] // read only through serde: the test checks no value is ever built
struct Weather {
    city: String,
    celsius: f64,
}

fn weather_tool() -> Tool {
    Tool::function(
        "get_weather",
        "Weather in a city",
        json!({"type": "object", "properties": {"city": {"type": "string"}}}),
    )
}

fn question() -> Vec<Message> {
    vec![Message::user("Weather in Oslo, as JSON")]
}

fn with_tools() -> CallOptions {
    CallOptions::new().tools([weather_tool()])
}

fn weather_schema() -> SchemaRequest {
    SchemaRequest {
        name: "Weather".into(),
        schema: json!({"type": "object", "required": ["city", "celsius"]}),
    }
}

async fn cached_gateway(mock: &MockUpstream, namespace: &str) -> Gateway {
    common::gateway(
        &[("openai", mock)],
        &[
            ("PGW_CACHE_BACKEND", "memory"),
            ("PGW_CACHE_NAMESPACE", namespace),
            ("PGW_CACHE_TTL_S", "60"),
        ],
    )
    .await
}

/// Wait (≤ 3 s) for the source's reports to land: every call a success, health whole.
async fn source_is_whole(gw: &Gateway, successes: u64) {
    let end = Instant::now() + Duration::from_secs(3);
    loop {
        let s = gw.sources("LLM").await.unwrap().remove(0);
        if (s.successes == successes && s.health == 1.0) || Instant::now() > end {
            assert_eq!(
                (s.successes, s.failures, s.health),
                (successes, 0, 1.0),
                "{s:?}"
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_tool_call_answer_to_a_structured_call_is_returned_as_is() {
    // Arguments that are not valid JSON: passed through, never repaired.
    let arguments = r#"{"city": "Oslo""#;
    let mock = MockUpstream::start(Behaviour::ToolCalls(vec![(
        "get_weather".into(),
        arguments.into(),
    )]))
    .await;
    let gw = cached_gateway(&mock, "structured-tool-calls").await;
    let llm = gw.chat_scope("LLM").unwrap();

    let json_mode = || llm.chat_with(question(), with_tools().structured(Structured::Json));
    let r = json_mode().await.unwrap();
    assert_eq!(r.tool_calls.len(), 1);
    assert_eq!(r.tool_calls[0].function.arguments, arguments);
    assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!((r.structured_data.as_ref(), r.asks), (None, 1));

    let typed = || llm.chat_structured::<Weather>(question(), with_tools());
    let err = typed().await.unwrap_err();
    let GatewayError::NoStructuredValue(answer) = &err else {
        panic!("expected NoStructuredValue, got {err}");
    };
    assert_eq!(answer.tool_calls[0].function.arguments, arguments);
    assert!(err.to_string().contains("1 tool call(s)"), "{err}");

    let schema_call = || {
        llm.chat_structured_schema(question(), with_tools(), weather_schema(), |_| {
            Err(vec!["the check never sees a tool-call answer".into()])
        })
    };
    let r = schema_call().await.unwrap();
    assert_eq!(r.tool_calls[0].function.name, "get_weather");
    assert_eq!(r.structured_data, None);

    // One request per call: nothing was repaired into a re-ask.
    assert_eq!(mock.counts().chat, 3);
    source_is_whole(&gw, 3).await;

    // The answers were cached like any other; a hit returns them the same way.
    let hit = json_mode().await.unwrap();
    assert!(hit.cache_hit);
    assert_eq!(hit.tool_calls[0].function.arguments, arguments);
    match typed().await {
        Err(GatewayError::NoStructuredValue(answer)) => assert!(answer.cache_hit),
        other => panic!("expected NoStructuredValue from the cache, got {other:?}"),
    }
    assert!(schema_call().await.unwrap().cache_hit);
    assert_eq!(mock.counts().chat, 3);
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_refusal_to_a_structured_call_is_returned_as_is() {
    let refusal = "I can't help with that.";
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mock = MockUpstream::start(Behaviour::Raw {
        chunks: vec![
            chunk(
                json!({"role": "assistant", "refusal": refusal}),
                Value::Null,
            ),
            chunk(json!({}), json!("stop")),
        ],
        completion: json!({"id": "c", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": null, "refusal": refusal}}]}),
    })
    .await;
    let gw = common::gateway(&[("openai", &mock)], &[]).await;
    let llm = gw.chat_scope("LLM").unwrap();
    for stream in [true, false] {
        let options = || CallOptions::new().stream(stream);
        let r = llm
            .chat_with(question(), options().structured(Structured::Json))
            .await
            .unwrap();
        assert_eq!(
            (r.refusal.as_deref(), r.structured_data),
            (Some(refusal), None)
        );
        let err = llm
            .chat_structured::<Weather>(question(), options())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, GatewayError::NoStructuredValue(a) if a.refusal.as_deref() == Some(refusal)),
            "{err}"
        );
        assert!(err.to_string().contains("refused"), "{err}");
    }
    assert_eq!(mock.counts().chat, 4, "no re-ask");
    source_is_whole(&gw, 4).await;
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn each_source_gets_the_messages_its_provider_accepts() {
    let openai = MockUpstream::start(Behaviour::healthy()).await;
    let qwen = MockUpstream::start(Behaviour::healthy()).await;
    let conversation = vec![
        Message::developer("Answer briefly."),
        Message::user("Weather in Oslo?"),
        Message::assistant_tool_calls(vec![ToolCall::function(
            "call_1",
            "get_weather",
            r#"{"city": "Oslo"}"#,
        )]),
        Message::tool_result("call_1", "-3 °C"),
    ];
    for (provider, mock) in [("openai", &openai), ("qwen", &qwen)] {
        let gw = common::gateway(&[(provider, mock)], &[]).await;
        gw.chat(conversation.clone()).await.unwrap();
        gw.shutdown().await;
    }
    let sent = |mock: &MockUpstream| mock.last_request().unwrap().body["messages"].clone();
    let written = serde_json::to_value(&conversation).unwrap();
    // OpenAI documents the developer role: the conversation goes out as written.
    assert_eq!(sent(&openai), written);
    // Qwen lists no developer role: it gets a system message; nothing else changes.
    let mut expected = written;
    expected[0]["role"] = json!("system");
    assert_eq!(sent(&qwen), expected);
    assert!(sent(&qwen)[2]["content"].is_null());
}
