//! Tool calls, as real providers stream them, through the chat transport (a corpus of shapes,
//! streamed and not), and through the gateway: a tool-call answer is a success for the breaker,
//! health, cache and stream consumer; `length` is a complete answer; `content_filter` with
//! nothing in it is the request's refusal, not the source's fault.

use std::time::Duration;

use futures::StreamExt;
use polygateway::ports::{BreakerState, Classify, EventSink, FailureClass, Transport};
use polygateway::provider::ProviderProfile;
use polygateway::transport::{ChatDelta, ChatTransport, ChatWireRequest, TransportConfig};
use polygateway::{
    CallOptions, ChatEvent, Gateway, GatewayError, LlmResponse, Message, Tool, ToolCallDelta,
};
use polygateway_testkit::{mock_settings, source_settings, Behaviour, MockUpstream};
use serde_json::{json, Value};
use tokio::time::Instant;

fn chunk(delta: Value, finish: Value) -> Value {
    json!({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
}

fn call_piece(index: u32, id: Option<&str>, name: Option<&str>, arguments: &str) -> Value {
    let mut function = json!({"arguments": arguments});
    if let Some(name) = name {
        function["name"] = json!(name);
    }
    let mut call = json!({"index": index, "function": function});
    if let Some(id) = id {
        call["id"] = json!(id);
        call["type"] = json!("function");
    }
    chunk(json!({"tool_calls": [call]}), Value::Null)
}

fn completion(message: Value, finish: &str) -> Value {
    json!({"id": "c", "object": "chat.completion", "created": 0, "model": "m",
           "choices": [{"index": 0, "message": message, "finish_reason": finish}],
           "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}})
}

/// One attempt of the transport against `chunks` (streamed) or `body` (not), with the deltas a
/// consumer saw.
async fn send(
    chunks: Vec<Value>,
    body: Value,
    stream: bool,
) -> (
    Result<LlmResponse, polygateway::TransportError>,
    Vec<ChatDelta>,
) {
    let mock = MockUpstream::start(Behaviour::Raw {
        chunks,
        completion: body,
    })
    .await;
    let t = ChatTransport::new(
        TransportConfig::from(&source_settings(&mock.base_url())),
        ProviderProfile::generic(),
    );
    let mut request = ChatWireRequest::new(vec![Message::user("weather?")]);
    request.stream = stream;
    let (sink, mut rx) = EventSink::channel(256);
    let result = t.send(&request, Some(&sink)).await;
    drop(sink);
    let mut deltas = Vec::new();
    while let Some(d) = rx.recv().await {
        deltas.push(d);
    }
    mock.shutdown().await;
    (result, deltas)
}

async fn streamed(chunks: Vec<Value>) -> (LlmResponse, Vec<ChatDelta>) {
    let (r, d) = send(chunks, Value::Null, true).await;
    (r.expect("a tool-call answer is a success"), d)
}

fn pieces(deltas: &[ChatDelta]) -> Vec<&ToolCallDelta> {
    deltas
        .iter()
        .filter_map(|d| match d {
            ChatDelta::ToolCall(p) => Some(p),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn arguments_split_across_many_chunks_with_id_and_name_only_in_the_first() {
    let args = r#"{"city": "Paris", "unit": "celsius"}"#;
    let mut chunks = vec![
        chunk(json!({"role": "assistant", "content": null}), Value::Null),
        call_piece(0, Some("call_a"), Some("get_weather"), ""),
    ];
    for c in args.chars() {
        chunks.push(call_piece(0, None, None, &c.to_string()));
    }
    chunks.push(chunk(json!({}), json!("tool_calls")));
    let (r, deltas) = streamed(chunks).await;
    assert_eq!(r.content, "");
    assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(r.tool_calls.len(), 1);
    let call = &r.tool_calls[0];
    assert_eq!(
        (call.id.as_str(), call.kind.as_str()),
        ("call_a", "function")
    );
    assert_eq!(call.function.name, "get_weather");
    assert_eq!(call.function.arguments, args);
    // Every piece reached the consumer as it came: the first names the call.
    let p = pieces(&deltas);
    assert_eq!(p.len(), args.len() + 1);
    assert_eq!(p[0].id.as_deref(), Some("call_a"));
    assert!(p[1..].iter().all(|p| p.id.is_none() && p.name.is_none()));
    let joined: String = p.iter().map(|p| p.arguments.as_str()).collect();
    assert_eq!(joined, args);
}

#[tokio::test(start_paused = true)]
async fn two_parallel_calls_interleaved_by_index() {
    let chunks = vec![
        call_piece(0, Some("call_0"), Some("get_weather"), ""),
        call_piece(1, Some("call_1"), Some("get_time"), ""),
        call_piece(0, None, None, "{\"city\":"),
        call_piece(1, None, None, "{\"tz\":"),
        call_piece(1, None, None, "\"CET\"}"),
        call_piece(0, None, None, "\"Oslo\"}"),
        chunk(json!({}), json!("tool_calls")),
    ];
    let (r, _) = streamed(chunks).await;
    let got: Vec<_> = r
        .tool_calls
        .iter()
        .map(|c| {
            (
                c.id.as_str(),
                c.function.name.as_str(),
                c.function.arguments.as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("call_0", "get_weather", "{\"city\":\"Oslo\"}"),
            ("call_1", "get_time", "{\"tz\":\"CET\"}"),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_whole_call_in_one_chunk_with_stop_empty_content_and_usage_last() {
    let chunks = vec![
        chunk(
            json!({"role": "assistant", "content": "", "tool_calls": [{"index": 0, "id": "call_x",
                "type": "function", "function": {"name": "lookup", "arguments": "{\"q\":1}"}}]}),
            Value::Null,
        ),
        // Some providers say `stop` beside tool calls.
        chunk(json!({"content": ""}), json!("stop")),
        json!({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
               "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14}}),
    ];
    let (r, _) = streamed(chunks).await;
    assert_eq!(r.finish_reason.as_deref(), Some("stop"));
    assert_eq!(r.tool_calls[0].function.arguments, "{\"q\":1}");
    assert_eq!((r.prompt_tokens, r.completion_tokens), (5, 9));
}

#[tokio::test(start_paused = true)]
async fn arguments_that_are_not_json_pass_through_untouched() {
    let broken = "{\"city\": \"Par";
    let order = r#"{"b": 1,  "a": 2}"#;
    let chunks = vec![
        call_piece(0, Some("c0"), Some("f"), broken),
        call_piece(1, Some("c1"), Some("g"), order),
        chunk(json!({}), json!("tool_calls")),
    ];
    let (r, _) = streamed(chunks).await;
    assert_eq!(r.tool_calls[0].function.arguments, broken);
    // Not reordered, not reformatted.
    assert_eq!(r.tool_calls[1].function.arguments, order);
    let body = completion(
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": "f", "arguments": broken}}]}),
        "tool_calls",
    );
    let (r, _) = send(Vec::new(), body, false).await;
    assert_eq!(r.unwrap().tool_calls[0].function.arguments, broken);
}

#[tokio::test(start_paused = true)]
async fn the_legacy_function_call_is_assembled() {
    let chunks = vec![
        chunk(
            json!({"role": "assistant", "content": null, "function_call": {"name": "f", "arguments": ""}}),
            Value::Null,
        ),
        chunk(
            json!({"function_call": {"arguments": "{\"x\""}}),
            Value::Null,
        ),
        chunk(json!({"function_call": {"arguments": ": 2}"}}), Value::Null),
        chunk(json!({}), json!("function_call")),
    ];
    let (r, _) = streamed(chunks).await;
    let call = r.function_call.expect("function call");
    assert_eq!(
        (call.name.as_str(), call.arguments.as_str()),
        ("f", "{\"x\": 2}")
    );
    assert_eq!(r.finish_reason.as_deref(), Some("function_call"));
}

#[tokio::test(start_paused = true)]
async fn a_non_streaming_tool_call_answer_keeps_every_field() {
    let body = completion(
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "c1", "type": "function", "function": {"name": "g", "arguments": "[]"}, "x_extra": 1}]}),
        "tool_calls",
    );
    let (r, deltas) = send(Vec::new(), body, false).await;
    let r = r.unwrap();
    assert_eq!(r.tool_calls.len(), 2);
    assert_eq!(r.tool_calls[1].extra["x_extra"], 1);
    assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
    // Non-streaming pieces name their call by position.
    assert_eq!(pieces(&deltas)[1].index, 1);
}

#[tokio::test(start_paused = true)]
async fn a_refusal_is_an_answer_and_nothing_at_all_is_an_empty_completion() {
    let (r, _) = send(
        vec![
            chunk(
                json!({"role": "assistant", "refusal": "I can't"}),
                Value::Null,
            ),
            chunk(json!({"refusal": " help with that."}), Value::Null),
            chunk(json!({}), json!("stop")),
        ],
        Value::Null,
        true,
    )
    .await;
    assert_eq!(
        r.unwrap().refusal.as_deref(),
        Some("I can't help with that.")
    );
    // Each piece reaches a stream consumer as it arrives.
    let (_, deltas) = send(
        vec![
            chunk(
                json!({"role": "assistant", "refusal": "I can't"}),
                Value::Null,
            ),
            chunk(json!({"refusal": " help."}), Value::Null),
            chunk(json!({}), json!("stop")),
        ],
        Value::Null,
        true,
    )
    .await;
    assert_eq!(
        deltas,
        [
            ChatDelta::Refusal("I can't".into()),
            ChatDelta::Refusal(" help.".into())
        ]
    );
    let (r, _) = send(
        vec![
            chunk(json!({"role": "assistant", "content": ""}), Value::Null),
            chunk(json!({}), json!("stop")),
        ],
        Value::Null,
        true,
    )
    .await;
    let e = r.unwrap_err();
    assert_eq!(e.class(), FailureClass::Transient);
    assert!(e.message.contains("empty completion"), "{}", e.message);
}

#[tokio::test(start_paused = true)]
async fn content_filter_with_nothing_is_the_requests_refusal_and_length_is_complete() {
    for stream in [true, false] {
        let (r, _) = send(
            vec![chunk(
                json!({"role": "assistant", "content": ""}),
                json!("content_filter"),
            )],
            completion(
                json!({"role": "assistant", "content": null}),
                "content_filter",
            ),
            stream,
        )
        .await;
        let e = r.unwrap_err();
        assert_eq!(e.class(), FailureClass::RequestRejected, "stream={stream}");
        assert!(e.message.contains("content_filter"), "{}", e.message);
        // The tokens went to reasoning and the limit cut the answer: complete, not retried.
        let (r, _) = send(
            vec![
                chunk(json!({"reasoning_content": "hmm"}), Value::Null),
                chunk(json!({}), json!("length")),
            ],
            completion(
                json!({"role": "assistant", "content": "", "reasoning_content": "hmm"}),
                "length",
            ),
            stream,
        )
        .await;
        let r = r.unwrap();
        assert_eq!(
            r.finish_reason.as_deref(),
            Some("length"),
            "stream={stream}"
        );
        assert_eq!(r.thinking, "hmm");
    }
}

async fn gateway(mock: &MockUpstream) -> Gateway {
    let settings = mock_settings(
        &[("LLM", &mock.base_url())],
        &[
            ("PGW_CACHE_BACKEND", "memory"),
            ("PGW_CACHE_NAMESPACE", "tools"),
            ("PGW_CACHE_TTL_S", "60"),
        ],
    );
    Gateway::from_settings(settings, "LLM").await.unwrap()
}

fn weather_tool() -> Tool {
    Tool::function(
        "get_weather",
        "Weather in a city",
        json!({"type": "object", "properties": {"city": {"type": "string"}}}),
    )
}

/// Wait (≤ 3 s) for the source's health report to land.
async fn eventually(mut cond: impl AsyncFnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(3);
    while Instant::now() < end {
        if cond().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cond().await
}

#[tokio::test(start_paused = true)]
async fn a_hundred_tool_call_answers_leave_the_breaker_closed_and_health_whole() {
    let mock = MockUpstream::start(Behaviour::ToolCalls(vec![(
        "get_weather".into(),
        r#"{"city": "Paris"}"#.into(),
    )]))
    .await;
    let gw = gateway(&mock).await;
    for i in 0..100 {
        let options = CallOptions::new()
            .tools([weather_tool()])
            .stream(i % 2 == 0)
            .bypass_cache(true);
        let r = gw
            .chat_with(vec![Message::user(format!("weather {i}?"))], options)
            .await
            .unwrap_or_else(|e| panic!("call {i}: {e}"));
        assert_eq!(r.tool_calls.len(), 1, "call {i}");
        assert_eq!(r.tool_calls[0].function.arguments, r#"{"city": "Paris"}"#);
        assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
    }
    // One request per answer: nothing was retried.
    assert_eq!(mock.counts().chat, 100);
    let settled = eventually(async || {
        let s = &gw.sources("LLM").await.unwrap()[0];
        s.successes == 100 && s.health == 1.0
    })
    .await;
    let s = &gw.sources("LLM").await.unwrap()[0];
    assert!(settled, "{s:?}");
    assert_eq!(s.failures, 0);
    assert_eq!(s.breaker, Some(BreakerState::Closed));
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn chat_stream_yields_tool_call_pieces_and_a_hit_replays_them() {
    let mock = MockUpstream::start(Behaviour::ToolCalls(vec![
        ("get_weather".into(), r#"{"city": "Rome"}"#.into()),
        ("get_time".into(), r#"{"tz": "CET"}"#.into()),
    ]))
    .await;
    let gw = gateway(&mock).await;
    let ask = || {
        gw.chat_stream(
            vec![Message::user("weather and time?")],
            CallOptions::new().tools([weather_tool()]),
        )
        .unwrap()
    };
    for round in 0..2 {
        let mut stream = ask();
        let mut args = [String::new(), String::new()];
        let mut done = None;
        while let Some(event) = stream.next().await {
            match event.unwrap() {
                ChatEvent::ToolCall(p) => args[p.index as usize].push_str(&p.arguments),
                ChatEvent::Done(r) => done = Some(r),
                other => panic!("unexpected {other:?}"),
            }
        }
        let done = done.expect("done");
        assert_eq!(
            done.cache_hit,
            round == 1,
            "the tool-call answer was cached"
        );
        assert_eq!(args, [r#"{"city": "Rome"}"#, r#"{"tz": "CET"}"#]);
        assert_eq!(done.tool_calls.len(), 2);
    }
    assert_eq!(mock.counts().chat, 1);
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_cache_key_covers_tools_and_n() {
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let gw = gateway(&mock).await;
    let ask = |options: CallOptions| gw.chat_with(vec![Message::user("hi")], options);
    ask(CallOptions::new()).await.unwrap();
    let other_tools = ask(CallOptions::new().tools([weather_tool()]))
        .await
        .unwrap();
    let two = ask(CallOptions::new().overlay_param("n", 2)).await.unwrap();
    assert!(!other_tools.cache_hit && !two.cache_hit);
    assert_eq!(two.other_choices.len(), 1);
    assert!(ask(CallOptions::new()).await.unwrap().cache_hit);
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_content_filtered_request_is_refused_once_without_hurting_the_source() {
    let mock = MockUpstream::start(Behaviour::Raw {
        chunks: vec![chunk(
            json!({"role": "assistant", "content": ""}),
            json!("content_filter"),
        )],
        completion: Value::Null,
    })
    .await;
    let gw = gateway(&mock).await;
    let err = gw.chat(vec![Message::user("x")]).await.unwrap_err();
    assert!(
        matches!(err, GatewayError::RequestRejected { .. }),
        "{err:?}"
    );
    assert_eq!(mock.counts().chat, 1);
    let s = &gw.sources("LLM").await.unwrap()[0];
    assert_eq!(s.breaker, Some(BreakerState::Closed));
    gw.shutdown().await;
}

#[cfg(feature = "sqlite")]
#[tokio::test(start_paused = true)]
async fn telemetry_rows_record_the_finish_reason_and_the_tool_call_count() {
    let mock = MockUpstream::start(Behaviour::ToolCalls(vec![
        ("get_weather".into(), "{}".into()),
        ("get_time".into(), "{}".into()),
    ]))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("calls.db");
    let settings = mock_settings(
        &[("LLM", &mock.base_url())],
        &[
            ("PGW_TELEMETRY_BACKEND", "sqlite"),
            ("PGW_TELEMETRY_SQLITE_PATH", path.to_str().unwrap()),
        ],
    );
    let gw = Gateway::from_settings(settings, "LLM").await.unwrap();
    let options = CallOptions::new().tools([weather_tool()]);
    gw.chat_with(vec![Message::user("weather?")], options)
        .await
        .unwrap();
    mock.set_behaviour(Behaviour::Length);
    gw.chat(vec![Message::user("long story")]).await.unwrap();
    gw.shutdown().await;
    let conn = rusqlite::Connection::open(&path).unwrap();
    let mut stmt = conn
        .prepare("SELECT finish_reason, tool_call_count FROM llm_calls ORDER BY created_at, rowid")
        .unwrap();
    let rows: Vec<(Option<String>, Option<i64>)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        rows,
        [
            (Some("tool_calls".to_string()), Some(2)),
            (Some("length".to_string()), Some(0)),
        ]
    );
}
